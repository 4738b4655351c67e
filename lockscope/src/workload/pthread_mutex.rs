//! `pthread-mutex`: threads taking one plain glibc `pthread_mutex_t` (default type), or
//! with `--rwlock` one `pthread_rwlock_t`. glibc's mutex waits on the futex word at the
//! start of the mutex object (`__lock`); its rwlock waits on words inside the object.
//! With pthread attribution, a recording names the lock as a pthread mutex / rwlock and
//! the call sites as the worker functions below.

use std::cell::UnsafeCell;
use std::sync::Arc;

use super::futex_sys::{FutexCounts, print_summary, print_summary_json, run_threads, spin_work};

/// Options for `lockscope workload pthread-mutex`.
#[derive(Debug, Clone, clap::Args)]
pub struct PthreadMutexArgs {
    /// Number of threads taking the lock.
    #[arg(long, short = 't', value_name = "N", default_value_t = 4)]
    pub threads: usize,

    /// How long to run, in seconds (fractions allowed).
    #[arg(long, short = 's', value_name = "S", default_value_t = 5.0)]
    pub seconds: f64,

    /// Busy-work steps inside the critical section.
    #[arg(long, value_name = "STEPS", default_value_t = 50)]
    pub load: u32,

    /// Take a pthread_rwlock_t (pthread_rwlock_rdlock / _wrlock) instead of a mutex.
    #[arg(long)]
    pub rwlock: bool,

    /// With --rwlock: percentage of read locks (the rest are write locks).
    #[arg(long, value_name = "PCT", default_value_t = 50, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub read_pct: u32,

    /// Print the summary as one JSON object (for benchmarks) instead of
    /// `key: value` lines.
    #[arg(long)]
    pub json: bool,
}

pub struct Mutex(pub UnsafeCell<libc::pthread_mutex_t>);
// SAFETY: a pthread mutex is made to be shared between threads; it is only used through
// pthread_mutex_lock/unlock and never moves (it lives in an Arc).
unsafe impl Sync for Mutex {}
// SAFETY: as above: the lock is not tied to the thread that made it.
unsafe impl Send for Mutex {}

pub struct RwLock(UnsafeCell<libc::pthread_rwlock_t>);
// SAFETY: as for Mutex: used only through pthread_rwlock_*, never moved.
unsafe impl Sync for RwLock {}
// SAFETY: as above.
unsafe impl Send for RwLock {}

/// One lock/unlock of the mutex: the call site a recording names. Out of line and not
/// generic, so that the release binary keeps it as a symbol of its own.
#[inline(never)]
pub fn pthread_mutex_worker(m: &Mutex, load: u32) {
    // SAFETY: the mutex is initialised and outlives every thread.
    unsafe { libc::pthread_mutex_lock(m.0.get()) };
    spin_work(load);
    // SAFETY: we hold it.
    unsafe { libc::pthread_mutex_unlock(m.0.get()) };
}

/// One read lock/unlock of the rwlock.
#[inline(never)]
pub fn pthread_rwlock_reader(l: &RwLock, load: u32) {
    // SAFETY: the lock is initialised and outlives every thread.
    unsafe { libc::pthread_rwlock_rdlock(l.0.get()) };
    spin_work(load);
    // SAFETY: we hold it.
    unsafe { libc::pthread_rwlock_unlock(l.0.get()) };
}

/// One write lock/unlock of the rwlock.
#[inline(never)]
pub fn pthread_rwlock_writer(l: &RwLock, load: u32) {
    // SAFETY: the lock is initialised and outlives every thread.
    unsafe { libc::pthread_rwlock_wrlock(l.0.get()) };
    spin_work(load);
    // SAFETY: we hold it.
    unsafe { libc::pthread_rwlock_unlock(l.0.get()) };
}

pub fn run(args: &PthreadMutexArgs) -> anyhow::Result<()> {
    let load = args.load;
    let (addr, (counts, real)) = if args.rwlock {
        let l = Arc::new(RwLock(UnsafeCell::new(libc::PTHREAD_RWLOCK_INITIALIZER)));
        let addr = l.0.get() as usize;
        let read_pct = args.read_pct as u64;
        let ll = l.clone();
        let r = run_threads(
            "pthread-rwlock",
            args.threads,
            args.seconds,
            move |i, c: &mut FutexCounts| {
                // A fixed interleaving per thread: the read share is exact over 100 ops.
                if (c.ops + i as u64 * 37) % 100 < read_pct {
                    pthread_rwlock_reader(&ll, load);
                    c.read_ops += 1;
                } else {
                    pthread_rwlock_writer(&ll, load);
                    c.write_ops += 1;
                }
                c.ops += 1;
            },
        )?;
        (addr, r)
    } else {
        let m = Arc::new(Mutex(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER)));
        let addr = m.0.get() as usize;
        let mm = m.clone();
        let r = run_threads(
            "pthread-mutex",
            args.threads,
            args.seconds,
            move |_, c: &mut FutexCounts| {
                pthread_mutex_worker(&mm, load);
                c.ops += 1;
            },
        )?;
        (addr, r)
    };
    let kind = if args.rwlock { "rwlock" } else { "mutex" };
    if args.json {
        let head = serde_json::json!({
            "workload": "pthread-mutex",
            "threads": args.threads,
            "kind": kind,
            "load": load,
        });
        print_summary_json(head, addr, &counts, real);
        return Ok(());
    }
    println!(
        "pthread-mutex: threads={} seconds={} kind={} (glibc counts its own futex calls: \
         none shown)",
        args.threads, args.seconds, kind
    );
    print_summary(addr, &counts, real);
    Ok(())
}
