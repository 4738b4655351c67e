//! `pipe-mutex`: writer threads and one reader on one pipe. Every `write(2)` and
//! `read(2)` of a pipe holds the pipe's kernel `mutex` while it copies, so the threads
//! wait on that one mutex and each wait's holder is another thread of this process: a
//! known answer for the holders of a kernel mutex. Both ends are non-blocking (a full or
//! empty pipe returns at once), so the only waits are on the mutex itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};

use super::sys;

/// Options for `lockscope workload pipe-mutex`.
#[derive(Debug, Clone, clap::Args)]
pub struct PipeMutexArgs {
    /// Writer threads (one reader besides them).
    #[arg(long, short = 't', value_name = "N", default_value_t = 4)]
    pub threads: usize,
    /// How long to run, in seconds (fractions allowed).
    #[arg(long, short = 's', value_name = "S", default_value_t = 3.0)]
    pub seconds: f64,
    /// Bytes per write: how long one hold of the mutex lasts.
    #[arg(long, value_name = "BYTES", default_value_t = 16384)]
    pub chunk: usize,
    /// Print the summary as one JSON object instead of `key: value` lines.
    #[arg(long)]
    pub json: bool,
}

fn gettid() -> u64 {
    // SAFETY: a syscall without arguments.
    unsafe { libc::gettid() as u64 }
}

pub fn run(args: &PipeMutexArgs) -> anyhow::Result<()> {
    if !(args.seconds.is_finite() && args.seconds > 0.0) {
        bail!("--seconds must be a positive number, got {}", args.seconds);
    }
    if !(1..=1024).contains(&args.threads) {
        bail!("--threads must be 1 to 1024, got {}", args.threads);
    }
    if !(1..=1 << 20).contains(&args.chunk) {
        bail!("--chunk must be 1 byte to 1 MiB, got {}", args.chunk);
    }
    let _signals = sys::StopSignals::install()?;
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("pipe2");
    }
    let (rfd, wfd) = (fds[0], fds[1]);
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let read = Arc::new(AtomicU64::new(0));
    let tids: Vec<Arc<AtomicU64>> = (0..=args.threads)
        .map(|_| Arc::new(AtomicU64::new(0)))
        .collect();
    let mut handles = Vec::new();
    for (i, tid) in tids.iter().enumerate() {
        let (stop, tid) = (stop.clone(), tid.clone());
        let reader = i == args.threads;
        let (fd, count) = if reader {
            (rfd, read.clone())
        } else {
            (wfd, written.clone())
        };
        let chunk = if reader { 1 << 16 } else { args.chunk };
        let name = if reader { "pipe-reader" } else { "pipe-writer" };
        handles.push(
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || -> anyhow::Result<()> {
                    tid.store(gettid(), Ordering::Relaxed);
                    let mut buf = vec![7u8; chunk];
                    while !stop.load(Ordering::Relaxed) {
                        // SAFETY: `buf` is valid for `chunk` bytes; `fd` stays open until
                        // every thread has been joined.
                        let n = unsafe {
                            if reader {
                                libc::read(fd, buf.as_mut_ptr().cast(), chunk)
                            } else {
                                libc::write(fd, buf.as_ptr().cast(), chunk)
                            }
                        };
                        if n > 0 {
                            count.fetch_add(n as u64, Ordering::Relaxed);
                            continue;
                        }
                        let e = std::io::Error::last_os_error();
                        if e.raw_os_error() != Some(libc::EAGAIN) {
                            return Err(e).context(if reader { "read" } else { "write" });
                        }
                        std::thread::yield_now();
                    }
                    Ok(())
                })
                .context("spawning pipe-mutex thread")?,
        );
    }
    let (elapsed, err) = sys::run_then_join(
        Duration::from_secs_f64(args.seconds),
        &stop,
        handles,
        "pipe-mutex thread",
    );
    // SAFETY: every thread using the descriptors has been joined.
    unsafe {
        libc::close(rfd);
        libc::close(wfd);
    }
    if let Some(e) = err {
        return Err(e);
    }
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let writer_tids: Vec<String> = tids[..args.threads]
        .iter()
        .map(|t| get(t).to_string())
        .collect();
    let reader_tid = get(&tids[args.threads]);
    let (w, r) = (get(&written), get(&read));
    if args.json {
        println!(
            "{{\"workload\":\"pipe-mutex\",\"pid\":{},\"writer_tids\":[{}],\"reader_tid\":{reader_tid},\
             \"bytes_written\":{w},\"bytes_read\":{r},\"elapsed_s\":{:.3}}}",
            std::process::id(),
            writer_tids.join(","),
            elapsed.as_secs_f64()
        );
    } else {
        println!("pid: {}", std::process::id());
        println!("writer_tids: {}", writer_tids.join(" "));
        println!("reader_tid: {reader_tid}");
        println!("bytes_written: {w}");
        println!("bytes_read: {r}");
        println!("elapsed: {}", sys::fmt_secs(elapsed));
    }
    Ok(())
}
