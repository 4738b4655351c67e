//! `mutex-holders`: two threads on one glibc mutex, one holding it long and one briefly,
//! so that the holder of every wait is known. The long holder takes the mutex with
//! `pthread_mutex_trylock` in a loop, so it never waits in the kernel; every wait is the
//! short holder's, behind the long holder (glibc's `__owner` names it).

use std::cell::UnsafeCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;

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
    let long_hold = Duration::from_micros(args.hold_us);
    let step = move |i: usize| -> anyhow::Result<()> {
        if i == 0 {
            hold_mutex_spinning(&m, long_hold);
            // A gap as long as a hold: the short holder gets its turns.
            spin_for(long_hold);
        } else {
            hold_mutex(&m, Duration::from_micros(1));
        }
        Ok(())
    };
    super::holders::run_pair("mutex-holders", args.seconds, Some(addr), args.json, step)
}
