//! `futex-mutex`: threads taking one user-space mutex built on a futex, as in the
//! TP-futex series' `perf bench futex mutex`: a wait-wake mutex (Drepper's three-state
//! mutex from "Futexes Are Tricky") or, with `--pi`, a PI futex mutex (the word holds the
//! owner's TID; contended lock and unlock go through FUTEX_LOCK_PI / FUTEX_UNLOCK_PI).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use super::futex_sys::{
    FutexCounts, gettid, print_summary, print_summary_json, run_threads, spin_work,
};

/// Options for `lockscope workload futex-mutex`.
#[derive(Debug, Clone, clap::Args)]
pub struct FutexMutexArgs {
    /// Number of threads taking the lock.
    #[arg(long, short = 't', value_name = "N", default_value_t = 4)]
    pub threads: usize,

    /// How long to run, in seconds (fractions allowed). SIGINT/SIGTERM also stop the
    /// run early and still print the summary.
    #[arg(long, short = 's', value_name = "S", default_value_t = 5.0)]
    pub seconds: f64,

    /// Use a PI futex (FUTEX_LOCK_PI / FUTEX_UNLOCK_PI with the TID protocol) instead of
    /// the wait-wake mutex.
    #[arg(long)]
    pub pi: bool,

    /// Busy-work steps inside the critical section (longer holds: more contention).
    #[arg(long, value_name = "STEPS", default_value_t = 50)]
    pub load: u32,

    /// Busy-work steps between releasing the lock and taking it again.
    #[arg(long, value_name = "STEPS", default_value_t = 20)]
    pub gap: u32,

    /// Print the summary as one JSON object (for benchmarks) instead of
    /// `key: value` lines.
    #[arg(long)]
    pub json: bool,
}

/// Drepper's mutex: 0 unlocked, 1 locked, 2 locked with (possible) waiters.
pub fn ww_lock(word: &AtomicU32, c: &mut FutexCounts) {
    let mut v = match word.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed) {
        Ok(_) => return,
        Err(v) => v,
    };
    if v != 2 {
        v = word.swap(2, Ordering::Acquire);
    }
    while v != 0 {
        c.wait(word, 2);
        v = word.swap(2, Ordering::Acquire);
    }
}

pub fn ww_unlock(word: &AtomicU32, c: &mut FutexCounts) {
    if word.fetch_sub(1, Ordering::Release) != 1 {
        word.store(0, Ordering::Release);
        c.wake(word, 1);
    }
}

/// PI mutex: the word is 0 or the owner's TID (plus FUTEX_WAITERS set by the kernel).
pub fn pi_lock(word: &AtomicU32, tid: u32, c: &mut FutexCounts) {
    if word
        .compare_exchange(0, tid, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        c.lock_pi(word);
    }
}

pub fn pi_unlock(word: &AtomicU32, tid: u32, c: &mut FutexCounts) {
    if word
        .compare_exchange(tid, 0, Ordering::Release, Ordering::Relaxed)
        .is_err()
    {
        c.unlock_pi(word);
    }
}

pub fn run(args: &FutexMutexArgs) -> anyhow::Result<()> {
    let word = Arc::new(AtomicU32::new(0));
    let addr = word.as_ptr() as usize;
    let (pi, load, gap) = (args.pi, args.load, args.gap);
    let w = word.clone();
    let (counts, real) = run_threads("futex-mutex", args.threads, args.seconds, move |_, c| {
        thread_local!(static TID: u32 = gettid());
        if pi {
            let tid = TID.with(|t| *t);
            pi_lock(&w, tid, c);
            spin_work(load);
            pi_unlock(&w, tid, c);
        } else {
            ww_lock(&w, c);
            spin_work(load);
            ww_unlock(&w, c);
        }
        c.ops += 1;
        spin_work(gap);
    })?;
    let kind = if pi { "pi" } else { "wait-wake" };
    if args.json {
        let extra = serde_json::json!({
            "workload": "futex-mutex",
            "threads": args.threads,
            "kind": kind,
            "load": load,
            "gap": gap,
        });
        print_summary_json(extra, addr, &counts, real);
        return Ok(());
    }
    println!(
        "futex-mutex: threads={} seconds={} kind={}",
        args.threads, args.seconds, kind
    );
    print_summary(addr, &counts, real);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hammer(pi: bool) -> (u64, FutexCounts) {
        let word = Arc::new(AtomicU32::new(0));
        let shared = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (w, s) = (word.clone(), shared.clone());
        let (counts, _) = run_threads("t", 4, 0.3, move |_, c| {
            let tid = gettid();
            if pi {
                pi_lock(&w, tid, c)
            } else {
                ww_lock(&w, c)
            }
            // A non-atomic read-modify-write: lost updates if exclusion failed.
            let v = s.load(Ordering::Relaxed);
            spin_work(20);
            s.store(v + 1, Ordering::Relaxed);
            if pi {
                pi_unlock(&w, tid, c)
            } else {
                ww_unlock(&w, c)
            }
            c.ops += 1;
        })
        .unwrap();
        let mut total = FutexCounts::default();
        for c in &counts {
            total.add(c);
        }
        assert_eq!(word.load(Ordering::SeqCst), 0, "lock left held");
        (shared.load(Ordering::SeqCst), total)
    }

    #[test]
    fn wait_wake_mutex_excludes() {
        let (n, total) = hammer(false);
        assert_eq!(n, total.ops);
        assert_eq!(total.errors, 0);
        assert!(total.eagain <= total.wait_calls);
    }

    #[test]
    fn pi_mutex_excludes() {
        let (n, total) = hammer(true);
        assert_eq!(n, total.ops);
        assert_eq!(total.errors, 0);
    }
}
