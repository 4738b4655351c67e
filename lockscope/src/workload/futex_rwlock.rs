//! `futex-rwlock`: readers and writers on one user-space rwlock built on a single futex
//! word, like the wait-wake rwlock of the TP-futex series' `perf bench futex rwlock`.
//!
//! The word holds the reader count (low 30 bits), `WRITER` and `WAITERS`. Whoever cannot
//! take the lock sets `WAITERS` and waits on the word; the last reader out and every
//! writer unlock wake all waiters when `WAITERS` was set, and they race again.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::bail;

use super::futex_sys::{FutexCounts, print_summary, run_threads, spin_work};

const WRITER: u32 = 1 << 30;
const WAITERS: u32 = 1 << 31;
const READERS: u32 = WRITER - 1;

/// Options for `lockscope workload futex-rwlock`.
#[derive(Debug, Clone, clap::Args)]
pub struct FutexRwlockArgs {
    /// Number of threads; each takes the lock for reading or writing at random.
    #[arg(long, short = 't', value_name = "N", default_value_t = 4)]
    pub threads: usize,

    /// How long to run, in seconds (fractions allowed).
    #[arg(long, short = 's', value_name = "S", default_value_t = 5.0)]
    pub seconds: f64,

    /// Percentage of acquisitions that are reads (0-100).
    #[arg(long, value_name = "P", default_value_t = 50)]
    pub read_pct: u32,

    /// Busy-work steps inside the critical section.
    #[arg(long, value_name = "STEPS", default_value_t = 50)]
    pub load: u32,
}

pub fn read_lock(word: &AtomicU32, c: &mut FutexCounts) {
    loop {
        let s = word.load(Ordering::Relaxed);
        if s & WRITER == 0 {
            if word
                .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
            continue;
        }
        wait_busy(word, s, c);
    }
}

pub fn read_unlock(word: &AtomicU32, c: &mut FutexCounts) {
    let s = word.fetch_sub(1, Ordering::Release) - 1;
    if s == WAITERS
        && word
            .compare_exchange(WAITERS, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        c.wake(word, i32::MAX as u32);
    }
}

pub fn write_lock(word: &AtomicU32, c: &mut FutexCounts) {
    loop {
        let s = word.load(Ordering::Relaxed);
        if s & (WRITER | READERS) == 0 {
            if word
                .compare_exchange_weak(s, s | WRITER, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
            continue;
        }
        wait_busy(word, s, c);
    }
}

pub fn write_unlock(word: &AtomicU32, c: &mut FutexCounts) {
    if word.swap(0, Ordering::Release) & WAITERS != 0 {
        c.wake(word, i32::MAX as u32);
    }
}

/// Announce a waiter and sleep while the word stays as seen.
fn wait_busy(word: &AtomicU32, s: u32, c: &mut FutexCounts) {
    if s & WAITERS == 0
        && word
            .compare_exchange(s, s | WAITERS, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    c.wait(word, s | WAITERS);
}

pub fn run(args: &FutexRwlockArgs) -> anyhow::Result<()> {
    if args.read_pct > 100 {
        bail!(
            "--read-pct must be between 0 and 100, got {}",
            args.read_pct
        );
    }
    let word = Arc::new(AtomicU32::new(0));
    let addr = word.as_ptr() as usize;
    let (read_pct, load) = (args.read_pct, args.load);
    let w = word.clone();
    let (counts, real) = run_threads("futex-rwlock", args.threads, args.seconds, move |i, c| {
        // xorshift, seeded per thread and advanced per op from the op count.
        let mut x =
            (c.ops as u32).wrapping_mul(2_654_435_761) ^ (i as u32 + 1).wrapping_mul(40_503);
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        if x % 100 < read_pct {
            read_lock(&w, c);
            spin_work(load);
            read_unlock(&w, c);
            c.read_ops += 1;
        } else {
            write_lock(&w, c);
            spin_work(load);
            write_unlock(&w, c);
            c.write_ops += 1;
        }
        c.ops += 1;
    })?;
    println!(
        "futex-rwlock: threads={} seconds={} read_pct={}",
        args.threads, args.seconds, args.read_pct
    );
    print_summary(addr, &counts, real);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicI64;

    #[test]
    fn writers_exclude_everyone_and_readers_share() {
        let word = Arc::new(AtomicU32::new(0));
        // >0: readers inside; -1: a writer inside.
        let inside = Arc::new(AtomicI64::new(0));
        let bad = Arc::new(AtomicI64::new(0));
        let (w, ins, b) = (word.clone(), inside.clone(), bad.clone());
        let (counts, _) = run_threads("t", 4, 0.3, move |i, c| {
            if (c.ops + i as u64).is_multiple_of(3) {
                write_lock(&w, c);
                if ins.swap(-1, Ordering::SeqCst) != 0 {
                    b.fetch_add(1, Ordering::SeqCst);
                }
                spin_work(20);
                ins.store(0, Ordering::SeqCst);
                write_unlock(&w, c);
            } else {
                read_lock(&w, c);
                if ins.fetch_add(1, Ordering::SeqCst) < 0 {
                    b.fetch_add(1, Ordering::SeqCst);
                }
                spin_work(20);
                ins.fetch_sub(1, Ordering::SeqCst);
                read_unlock(&w, c);
            }
            c.ops += 1;
        })
        .unwrap();
        assert_eq!(bad.load(Ordering::SeqCst), 0);
        assert_eq!(word.load(Ordering::SeqCst), 0, "lock left held");
        assert!(counts.iter().all(|c| c.errors == 0 && c.ops > 0));
    }
}
