//! `pthread-mutex`: threads taking one plain glibc `pthread_mutex_t` (default type).
//! glibc's mutex waits on the futex word at the start of the mutex object, so the lock
//! shows up in a recording as a futex at the mutex's address.

use std::cell::UnsafeCell;
use std::sync::Arc;

use super::futex_sys::{FutexCounts, print_summary, run_threads, spin_work};

/// Options for `lockscope workload pthread-mutex`.
#[derive(Debug, Clone, clap::Args)]
pub struct PthreadMutexArgs {
    /// Number of threads taking the mutex.
    #[arg(long, short = 't', value_name = "N", default_value_t = 4)]
    pub threads: usize,

    /// How long to run, in seconds (fractions allowed).
    #[arg(long, short = 's', value_name = "S", default_value_t = 5.0)]
    pub seconds: f64,

    /// Busy-work steps inside the critical section.
    #[arg(long, value_name = "STEPS", default_value_t = 50)]
    pub load: u32,
}

struct Mutex(UnsafeCell<libc::pthread_mutex_t>);
// SAFETY: a pthread mutex is made to be shared between threads; it is only used through
// pthread_mutex_lock/unlock and never moves (it lives in an Arc).
unsafe impl Sync for Mutex {}
unsafe impl Send for Mutex {}

pub fn run(args: &PthreadMutexArgs) -> anyhow::Result<()> {
    let m = Arc::new(Mutex(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER)));
    let addr = m.0.get() as usize;
    let load = args.load;
    let mm = m.clone();
    let (counts, real) = run_threads(
        "pthread-mutex",
        args.threads,
        args.seconds,
        move |_, c: &mut FutexCounts| {
            // SAFETY: the mutex is initialised and outlives every thread.
            unsafe { libc::pthread_mutex_lock(mm.0.get()) };
            spin_work(load);
            // SAFETY: we hold it.
            unsafe { libc::pthread_mutex_unlock(mm.0.get()) };
            c.ops += 1;
        },
    )?;
    println!(
        "pthread-mutex: threads={} seconds={} (glibc counts its own futex calls: none shown)",
        args.threads, args.seconds
    );
    print_summary(addr, &counts, real);
    Ok(())
}
