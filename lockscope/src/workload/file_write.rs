//! `file-write`: threads writing one file. Every `write(2)` to a regular file holds the
//! file's inode lock (`i_rwsem`, for write) while it copies, so the threads wait on that
//! one rwsem: a lock whose identity the workload knows (the file's inode number, which it
//! prints) to check lockscope's names against.

use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};

use super::sys;

/// Options for `lockscope workload file-write`.
#[derive(Debug, Clone, clap::Args)]
pub struct FileWriteArgs {
    /// Writer threads.
    #[arg(long, short = 't', value_name = "N", default_value_t = 2)]
    pub threads: usize,
    /// How long to run, in seconds (fractions allowed).
    #[arg(long, short = 's', value_name = "S", default_value_t = 3.0)]
    pub seconds: f64,
    /// Bytes per write: how long one hold of the inode lock lasts.
    #[arg(long, value_name = "BYTES", default_value_t = 65536)]
    pub chunk: usize,
    /// Directory to create the file in (tmpfs by default, so writes never wait for a
    /// disk); the file is removed at the end.
    #[arg(long, value_name = "DIR", default_value = "/dev/shm")]
    pub dir: PathBuf,
    /// Print the summary as one JSON object instead of `key: value` lines.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &FileWriteArgs) -> anyhow::Result<()> {
    if !(args.seconds.is_finite() && args.seconds > 0.0) {
        bail!("--seconds must be a positive number, got {}", args.seconds);
    }
    if !(1..=1024).contains(&args.threads) {
        bail!("--threads must be 1 to 1024, got {}", args.threads);
    }
    if !(1..=1 << 24).contains(&args.chunk) {
        bail!("--chunk must be 1 byte to 16 MiB, got {}", args.chunk);
    }
    let _signals = sys::StopSignals::install()?;
    // Gone from the directory at once; the open file lives until the end.
    let file = sys::unlinked_file(&args.dir, "file-write")?;
    let inode = file.metadata().context("fstat")?.ino();
    let file = Arc::new(file);
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for _ in 0..args.threads {
        let (stop, writes, file) = (stop.clone(), writes.clone(), file.clone());
        let chunk = args.chunk;
        handles.push(
            std::thread::Builder::new()
                .name("file-writer".into())
                .spawn(move || -> anyhow::Result<()> {
                    use std::os::unix::fs::FileExt as _;
                    let buf = vec![7u8; chunk];
                    while !stop.load(Ordering::Relaxed) {
                        // All threads overwrite the same range: the file stays small.
                        file.write_all_at(&buf, 0).context("write")?;
                        writes.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
                .context("spawning file-write thread")?,
        );
    }
    let (elapsed, err) = sys::run_then_join(
        Duration::from_secs_f64(args.seconds),
        &stop,
        handles,
        "file-write thread",
    );
    if let Some(e) = err {
        return Err(e);
    }
    let w = writes.load(Ordering::Relaxed);
    if args.json {
        println!(
            "{{\"workload\":\"file-write\",\"pid\":{},\"inode\":{inode},\"writes\":{w},\
             \"elapsed_s\":{:.3}}}",
            std::process::id(),
            elapsed.as_secs_f64()
        );
    } else {
        println!("pid: {}", std::process::id());
        println!("inode: {inode}");
        println!("writes: {w}");
        println!("elapsed: {}", sys::fmt_secs(elapsed));
    }
    Ok(())
}
