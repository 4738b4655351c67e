//! `futex-mutex`: threads taking one user-space mutex built on a futex, as in the
//! TP-futex series' `perf bench futex mutex`: a wait-wake mutex (Drepper's three-state
//! mutex from "Futexes Are Tricky") or, with `--pi`, a PI futex mutex (the word holds the
//! owner's TID; contended lock and unlock go through FUTEX_LOCK_PI / FUTEX_UNLOCK_PI).
//! With `--locks N` the threads walk N distinct mutexes together, so that N futex words
//! are contended (label-cardinality tests of `lockscope serve`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

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

    /// Number of distinct mutexes (futex words). All threads take the same mutex for
    /// OPS_PER_LOCK (16) consecutive acquisitions in all, then move on to the next one,
    /// round-robin over the N mutexes, so every one of them is contended. The counts
    /// printed are totals over all mutexes; `locks:` gives N and `lock:` the first
    /// mutex's address (the others follow, one every 64 bytes).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub locks: u32,

    /// Print the summary as one JSON object (for benchmarks) instead of
    /// `key: value` lines.
    #[arg(long)]
    pub json: bool,
}

/// Consecutive acquisitions (over all threads) of one mutex before the threads move on
/// to the next, with `--locks N`.
pub const OPS_PER_LOCK: u64 = 16;

/// One futex word on its own cache line (no false sharing between the mutexes).
#[repr(align(64))]
#[derive(Default)]
struct Word(AtomicU32);

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

/// Which of `n` mutexes the `ticket`-th acquisition (over all threads) takes.
pub fn lock_index(ticket: u64, n: u32) -> usize {
    if n <= 1 {
        0
    } else {
        ((ticket / OPS_PER_LOCK) % n as u64) as usize
    }
}

pub fn run(args: &FutexMutexArgs) -> anyhow::Result<()> {
    let words: Arc<Vec<Word>> = Arc::new((0..args.locks).map(|_| Word::default()).collect());
    let addr = words[0].0.as_ptr() as usize;
    let (pi, load, gap, n) = (args.pi, args.load, args.gap, args.locks);
    let w = words.clone();
    // Shared ticket counter: only touched with more than one mutex.
    let tickets = Arc::new(AtomicU64::new(0));
    let (counts, real) = run_threads("futex-mutex", args.threads, args.seconds, move |_, c| {
        thread_local!(static TID: u32 = gettid());
        let i = if n > 1 {
            lock_index(tickets.fetch_add(1, Ordering::Relaxed), n)
        } else {
            0
        };
        let word = &w[i].0;
        if pi {
            let tid = TID.with(|t| *t);
            pi_lock(word, tid, c);
            spin_work(load);
            pi_unlock(word, tid, c);
        } else {
            ww_lock(word, c);
            spin_work(load);
            ww_unlock(word, c);
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
            "locks": args.locks,
        });
        print_summary_json(extra, addr, &counts, real);
        return Ok(());
    }
    println!(
        "futex-mutex: threads={} seconds={} kind={} locks={}",
        args.threads, args.seconds, kind, args.locks
    );
    if args.locks > 1 {
        println!("locks: {}", args.locks);
    }
    print_summary(addr, &counts, real);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hammer(pi: bool) -> (u64, FutexCounts) {
        let word = Arc::new(AtomicU32::new(0));
        let shared = Arc::new(AtomicU64::new(0));
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
    fn threads_walk_the_locks_together_round_robin() {
        assert_eq!(lock_index(5, 1), 0);
        assert_eq!(lock_index(OPS_PER_LOCK - 1, 3), 0);
        assert_eq!(lock_index(OPS_PER_LOCK, 3), 1);
        assert_eq!(lock_index(3 * OPS_PER_LOCK, 3), 0);
        // Every lock gets its turn within one sweep.
        let seen: std::collections::HashSet<usize> = (0..10_000 * OPS_PER_LOCK)
            .map(|t| lock_index(t, 10_000))
            .collect();
        assert_eq!(seen.len(), 10_000);
    }

    #[test]
    fn pi_mutex_excludes() {
        let (n, total) = hammer(true);
        assert_eq!(n, total.ops);
        assert_eq!(total.errors, 0);
    }
}
