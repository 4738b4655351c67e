//! `syscall-loop`: one thread calling `getppid(2)` as fast as it can, touching no lock.
//! A bystander for benchmarks: what every system call on the machine pays while a tracer
//! is attached (syscall tracepoints make every task take the slow syscall path). With
//! `--futex-wake`, the call is `FUTEX_WAKE_PRIVATE` on a word no thread waits on: a futex
//! call that never blocks, what the futex probes cost on the calls that do not wait.
//! `--futex-eagain` adds a `FUTEX_WAIT_PRIVATE` the word's value refuses (EAGAIN at
//! once), and `--words N` spreads the calls over N words in turn (map-capacity tests).

use std::time::{Duration, Instant};

use anyhow::bail;

use super::{futex_sys::FutexCounts, sys};

/// One futex word on its own cache line.
#[repr(align(64))]
#[derive(Default)]
struct Word(std::sync::atomic::AtomicU32);

/// Options for `lockscope workload syscall-loop`.
#[derive(Debug, Clone, clap::Args)]
pub struct SyscallLoopArgs {
    /// How long to run, in seconds (fractions allowed).
    #[arg(long, short = 's', value_name = "S", default_value_t = 3.0)]
    pub seconds: f64,
    /// Call `futex(word, FUTEX_WAKE_PRIVATE, 1)` on a word no thread waits on instead of
    /// `getppid`: a futex call that never blocks (it wakes no one and returns 0).
    #[arg(long)]
    pub futex_wake: bool,
    /// Call `futex(word, FUTEX_WAIT_PRIVATE, 1)` on a word that holds 0: a wait that
    /// returns EAGAIN at once (after the wake, with `--futex-wake`).
    #[arg(long)]
    pub futex_eagain: bool,
    /// Spread the futex calls over N words, one after another, each on its own cache
    /// line; every word is called at least once, however short `--seconds`.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub words: u32,
    /// Print the summary as one JSON object instead of `key: value` lines.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &SyscallLoopArgs) -> anyhow::Result<()> {
    if !(args.seconds.is_finite() && args.seconds > 0.0) {
        bail!("--seconds must be a positive number, got {}", args.seconds);
    }
    if args.words == 0 {
        bail!("--words must be at least 1");
    }
    let futex_mode = args.futex_wake || args.futex_eagain;
    if args.words > 1 && !futex_mode {
        bail!("--words spreads futex calls: give --futex-wake or --futex-eagain too");
    }
    let _signals = sys::StopSignals::install()?;
    let limit = Duration::from_secs_f64(args.seconds);
    let words: Vec<Word> = (0..args.words).map(|_| Word::default()).collect();
    let t0 = Instant::now();
    let mut calls: u64 = 0;
    let mut futex = FutexCounts::default();
    let mut next = 0usize;
    // System calls per step: a wake and a wait with both flags.
    let per_step = (args.futex_wake as u64 + args.futex_eagain as u64).max(1);
    // At least one pass over the words, then until the time is up.
    while (calls < per_step * args.words as u64 || t0.elapsed() < limit) && !sys::stop_requested() {
        for _ in 0..1000 {
            if futex_mode {
                let word = &words[next].0;
                next = if next + 1 == words.len() { 0 } else { next + 1 };
                if args.futex_wake {
                    futex.wake(word, 1);
                }
                if args.futex_eagain {
                    futex.wait(word, 1);
                }
            } else {
                // SAFETY: a syscall without arguments; its result is not needed.
                unsafe { libc::syscall(libc::SYS_getppid) };
            }
        }
        calls += 1000 * per_step;
    }
    if futex.woken != 0 || futex.errors != 0 || futex.eagain != futex.wait_calls {
        bail!(
            "futex calls on words no one waits on woke {}, failed {} times, and {} of {} \
             waits did not return EAGAIN",
            futex.woken,
            futex.errors,
            futex.wait_calls - futex.eagain,
            futex.wait_calls
        );
    }
    let elapsed = t0.elapsed();
    let rate = sys::rate(calls, elapsed);
    if args.json {
        println!(
            "{{\"workload\":\"syscall-loop\",\"futex_wake\":{},\"futex_eagain\":{},\"words\":{},\
             \"ops\":{calls},\"ops_per_s\":{rate:.1},\"elapsed_s\":{:.3},\"wake_calls\":{},\
             \"wait_calls\":{}}}",
            args.futex_wake,
            args.futex_eagain,
            args.words,
            elapsed.as_secs_f64(),
            futex.wake_calls,
            futex.wait_calls
        );
    } else {
        println!("calls: {calls}");
        println!("calls_per_s: {}", sys::fmt_rate(rate));
        println!("elapsed: {}", sys::fmt_secs(elapsed));
        if futex_mode {
            println!("words: {}", args.words);
            println!("lock: {:#x}", words[0].0.as_ptr() as usize);
            println!("futex_wake: {}", futex.wake_calls);
            println!("futex_wait: {}", futex.wait_calls);
            println!("eagain: {}", futex.eagain);
        }
    }
    Ok(())
}
