//! `futex-timed-wait`: one thread making timed `FUTEX_WAIT`s on a word no one wakes,
//! each running to its timeout. Stopped and continued mid-wait (SIGSTOP, SIGCONT: no
//! handler runs), the kernel continues such a wait through `restart_syscall`, the path
//! the futex probes pair across. Counts its own calls and their outcomes.

use std::sync::atomic::AtomicU32;
use std::time::Instant;

use anyhow::bail;

use super::futex_sys::{FUTEX_PRIVATE_FLAG, FUTEX_WAIT, futex_timed};

/// Options for `lockscope workload futex-timed-wait`.
#[derive(Debug, Clone, clap::Args)]
pub struct TimedWaitArgs {
    /// How many waits to make, one after the other.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub waits: u32,
    /// Each wait's timeout, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1500)]
    pub ms: u64,
    /// Print the summary as one JSON object instead of `key: value` lines.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &TimedWaitArgs) -> anyhow::Result<()> {
    if args.waits == 0 || args.ms == 0 {
        bail!("--waits and --ms must be at least 1");
    }
    let word = AtomicU32::new(0);
    let timeout = libc::timespec {
        tv_sec: (args.ms / 1000) as libc::time_t,
        tv_nsec: ((args.ms % 1000) * 1_000_000) as libc::c_long,
    };
    let (mut timeouts, mut interrupted, mut other) = (0u64, 0u64, 0u64);
    let t0 = Instant::now();
    for _ in 0..args.waits {
        match futex_timed(&word, FUTEX_WAIT | FUTEX_PRIVATE_FLAG, 0, Some(&timeout)) {
            Err(libc::ETIMEDOUT) => timeouts += 1,
            Err(libc::EINTR) => interrupted += 1,
            _ => other += 1,
        }
    }
    let elapsed = t0.elapsed();
    let lock = format!("{:#x}", word.as_ptr() as usize);
    if args.json {
        println!(
            "{{\"workload\":\"futex-timed-wait\",\"lock\":\"{lock}\",\"futex_wait\":{},\
             \"timeouts\":{timeouts},\"interrupted\":{interrupted},\"other\":{other},\
             \"elapsed_s\":{:.3}}}",
            args.waits,
            elapsed.as_secs_f64()
        );
    } else {
        println!("lock: {lock}");
        println!("futex_wait: {}", args.waits);
        println!("timeouts: {timeouts}");
        println!("interrupted: {interrupted}");
        println!("other: {other}");
        println!("elapsed: {:.3} s", elapsed.as_secs_f64());
    }
    Ok(())
}
