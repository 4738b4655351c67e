//! `syscall-loop`: one thread calling `getppid(2)` as fast as it can, touching no lock.
//! A bystander for benchmarks: what every system call on the machine pays while a tracer
//! is attached (syscall tracepoints make every task take the slow syscall path).

use std::time::{Duration, Instant};

use anyhow::bail;

use super::sys;

/// Options for `lockscope workload syscall-loop`.
#[derive(Debug, Clone, clap::Args)]
pub struct SyscallLoopArgs {
    /// How long to run, in seconds (fractions allowed).
    #[arg(long, short = 's', value_name = "S", default_value_t = 3.0)]
    pub seconds: f64,
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
    while t0.elapsed() < limit && !sys::stop_requested() {
        for _ in 0..1000 {
            // SAFETY: a syscall without arguments; its result is not needed.
            unsafe { libc::syscall(libc::SYS_getppid) };
        }
        calls += 1000;
    }
    let elapsed = t0.elapsed();
    let rate = sys::rate(calls, elapsed);
    if args.json {
        println!(
            "{{\"workload\":\"syscall-loop\",\"ops\":{calls},\"ops_per_s\":{rate:.1},\
             \"elapsed_s\":{:.3}}}",
            elapsed.as_secs_f64()
        );
    } else {
        println!("calls: {calls}");
        println!("calls_per_s: {}", sys::fmt_rate(rate));
        println!("elapsed: {}", sys::fmt_secs(elapsed));
    }
    Ok(())
}
