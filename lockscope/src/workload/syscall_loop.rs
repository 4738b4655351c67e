//! `syscall-loop`: one thread calling `getppid(2)` as fast as it can, touching no lock.
//! A bystander for benchmarks: what every system call on the machine pays while a tracer
//! is attached (syscall tracepoints make every task take the slow syscall path). With
//! `--futex-wake`, the call is `FUTEX_WAKE_PRIVATE` on a word no thread waits on: a futex
//! call that never blocks, what the futex probes cost on the calls that do not wait.

use std::time::{Duration, Instant};

use anyhow::bail;

use super::{futex_sys::FutexCounts, sys};

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
    /// Print the summary as one JSON object instead of `key: value` lines.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &SyscallLoopArgs) -> anyhow::Result<()> {
    if !(args.seconds.is_finite() && args.seconds > 0.0) {
        bail!("--seconds must be a positive number, got {}", args.seconds);
    }
    let _signals = sys::StopSignals::install()?;
    let limit = Duration::from_secs_f64(args.seconds);
    let t0 = Instant::now();
    let mut calls: u64 = 0;
    let word = std::sync::atomic::AtomicU32::new(0);
    let mut futex = FutexCounts::default();
    while t0.elapsed() < limit && !sys::stop_requested() {
        if args.futex_wake {
            for _ in 0..1000 {
                futex.wake(&word, 1);
            }
        } else {
            for _ in 0..1000 {
                // SAFETY: a syscall without arguments; its result is not needed.
                unsafe { libc::syscall(libc::SYS_getppid) };
            }
        }
        calls += 1000;
    }
    if futex.woken != 0 || futex.errors != 0 {
        bail!(
            "FUTEX_WAKE on a word no one waits on woke {} and failed {} times",
            futex.woken,
            futex.errors
        );
    }
    let elapsed = t0.elapsed();
    let rate = sys::rate(calls, elapsed);
    if args.json {
        println!(
            "{{\"workload\":\"syscall-loop\",\"futex_wake\":{},\"ops\":{calls},\"ops_per_s\":{rate:.1},\
             \"elapsed_s\":{:.3}}}",
            args.futex_wake,
            elapsed.as_secs_f64()
        );
    } else {
        println!("calls: {calls}");
        println!("calls_per_s: {}", sys::fmt_rate(rate));
        println!("elapsed: {}", sys::fmt_secs(elapsed));
    }
    Ok(())
}
