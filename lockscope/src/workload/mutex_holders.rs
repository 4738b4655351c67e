//! `mutex-holders`: two threads on one glibc mutex, one holding it long and one briefly,
//! so that the holder of every wait is known. The long holder takes the mutex with
//! `pthread_mutex_trylock` in a loop, so it never waits in the kernel; every wait is the
//! short holder's, behind the long holder (glibc's `__owner` names it).

use std::cell::UnsafeCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::{pthread_mutex::Mutex, sys};

/// Options for `lockscope workload mutex-holders`.
#[derive(Debug, Clone, clap::Args)]
pub struct MutexHoldersArgs {
    /// How long to run, in seconds (fractions allowed).
    #[arg(long, short = 's', value_name = "S", default_value_t = 3.0)]
    pub seconds: f64,
    /// How long the long holder holds the mutex each time, in microseconds.
    #[arg(long, value_name = "US", default_value_t = 500)]
    pub hold_us: u64,
    /// Print the summary as one JSON object instead of `key: value` lines.
    #[arg(long)]
    pub json: bool,
}

fn gettid() -> u64 {
    // SAFETY: a syscall without arguments.
    unsafe { libc::gettid() as u64 }
}

fn spin_for(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// One hold of the mutex for `hold`, taken without ever waiting in the kernel.
#[inline(never)]
fn hold_mutex_spinning(m: &Mutex, hold: Duration) {
    // SAFETY: the mutex is initialised and outlives every thread.
    while unsafe { libc::pthread_mutex_trylock(m.0.get()) } != 0 {
        std::hint::spin_loop();
    }
    spin_for(hold);
    // SAFETY: we hold it.
    unsafe { libc::pthread_mutex_unlock(m.0.get()) };
}

/// One hold of the mutex for `hold`.
#[inline(never)]
fn hold_mutex(m: &Mutex, hold: Duration) {
    // SAFETY: the mutex is initialised and outlives every thread.
    unsafe { libc::pthread_mutex_lock(m.0.get()) };
    spin_for(hold);
    // SAFETY: we hold it.
    unsafe { libc::pthread_mutex_unlock(m.0.get()) };
}

pub fn run(args: &MutexHoldersArgs) -> anyhow::Result<()> {
    if !(args.seconds.is_finite() && args.seconds > 0.0) {
        bail!("--seconds must be a positive number, got {}", args.seconds);
    }
    if !(1..=1_000_000).contains(&args.hold_us) {
        bail!("--hold-us must be 1 to 1000000, got {}", args.hold_us);
    }
    let _signals = sys::StopSignals::install()?;
    let m = Arc::new(Mutex(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER)));
    let addr = m.0.get() as usize;
    let stop = Arc::new(AtomicBool::new(false));
    let ops = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    let tids = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    let long_hold = Duration::from_micros(args.hold_us);
    let mut handles = Vec::new();
    for (i, name) in ["holder-long", "holder-short"].into_iter().enumerate() {
        let (stop, ops, tid, m) = (stop.clone(), ops[i].clone(), tids[i].clone(), m.clone());
        handles.push(
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || -> anyhow::Result<()> {
                    tid.store(gettid(), Ordering::Relaxed);
                    while !stop.load(Ordering::Relaxed) {
                        if i == 0 {
                            hold_mutex_spinning(&m, long_hold);
                            // A gap as long as a hold: the short holder gets its turns.
                            spin_for(long_hold);
                        } else {
                            hold_mutex(&m, Duration::from_micros(1));
                        }
                        ops.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
                .context("spawning mutex-holders thread")?,
        );
    }
    let (elapsed, err) = sys::run_then_join(
        Duration::from_secs_f64(args.seconds),
        &stop,
        handles,
        "mutex-holders thread",
    );
    if let Some(e) = err {
        return Err(e);
    }
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let (lt, st) = (get(&tids[0]), get(&tids[1]));
    let (lo, so) = (get(&ops[0]), get(&ops[1]));
    if args.json {
        println!(
            "{{\"workload\":\"mutex-holders\",\"pid\":{},\"lock\":\"{addr:#x}\",\"long_tid\":{lt},\
             \"short_tid\":{st},\"long_ops\":{lo},\"short_ops\":{so},\"elapsed_s\":{:.3}}}",
            std::process::id(),
            elapsed.as_secs_f64()
        );
    } else {
        println!("pid: {}", std::process::id());
        println!("lock: {addr:#x}");
        println!("long_tid: {lt}");
        println!("short_tid: {st}");
        println!("long_ops: {lo}");
        println!("short_ops: {so}");
        println!("elapsed: {}", sys::fmt_secs(elapsed));
    }
    Ok(())
}
