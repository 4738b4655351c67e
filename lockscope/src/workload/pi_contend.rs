//! `pi-contend`: many threads taking one victim thread's `pi_lock` through
//! `sched_getaffinity` / `sched_setaffinity` on it, so that while one CPU waits for the
//! lock the others keep re-acquiring it (the foreign re-acquisitions the starvation
//! detector counts). Every call takes the victim's `pi_lock` at least once; the workload
//! counts its own calls and prints them with the victim's thread id.
//!
//! With `--threads 1` one caller runs against the victim: its `pi_lock` is never
//! contended by another CPU (the uncontended baseline).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use super::futex_sys::gettid;
use super::sys::{StopSignals, stop_requested};

/// Options for `lockscope workload pi-contend`.
#[derive(Debug, Clone, clap::Args)]
pub struct PiContendArgs {
    /// Caller threads hammering the victim's pi_lock (1: the uncontended baseline).
    #[arg(long, short = 't', value_name = "N", default_value_t = 4)]
    pub threads: usize,

    /// How long to run, in seconds (fractions allowed). SIGINT/SIGTERM also stop the
    /// run early and still print the summary.
    #[arg(long, short = 's', value_name = "S", default_value_t = 5.0)]
    pub seconds: f64,

    /// Every this many calls, a caller also calls sched_setaffinity on the victim (with
    /// the victim's current mask: nothing changes, but the pi_lock is held longer, with
    /// the runqueue lock inside it). 0: sched_getaffinity only.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub set_every: u64,

    /// Pin the victim and every caller to one CPU: they never spin against each other
    /// (with --threads 1, the uncontended baseline: the detector must stay silent).
    #[arg(long)]
    pub one_cpu: bool,
}

fn pin_here(one_cpu: Option<usize>) -> std::io::Result<()> {
    if let Some(cpu) = one_cpu {
        super::sys::pin_current_thread(cpu).map_err(std::io::Error::other)?;
    }
    Ok(())
}

fn getaffinity(tid: u32, set: &mut libc::cpu_set_t) -> std::io::Result<()> {
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let r =
        unsafe { libc::sched_getaffinity(tid as libc::pid_t, size_of::<libc::cpu_set_t>(), set) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn setaffinity(tid: u32, set: &libc::cpu_set_t) -> std::io::Result<()> {
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let r =
        unsafe { libc::sched_setaffinity(tid as libc::pid_t, size_of::<libc::cpu_set_t>(), set) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn set_thread_name(name: &str) {
    let mut buf = [0u8; 16];
    let n = name.len().min(15);
    buf[..n].copy_from_slice(&name.as_bytes()[..n]);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, buf.as_ptr()) };
}

pub fn run(args: &PiContendArgs) -> anyhow::Result<()> {
    if args.threads == 0 {
        bail!("--threads must be at least 1");
    }
    if !(args.seconds > 0.0 && args.seconds.is_finite()) {
        bail!("--seconds must be a positive number, got {}", args.seconds);
    }
    let _signals = StopSignals::install()?;
    let one_cpu = if args.one_cpu {
        Some(
            *super::sys::allowed_cpus()
                .first()
                .context("no CPU allowed to this process")?,
        )
    } else {
        None
    };
    let stop = Arc::new(AtomicBool::new(false));
    // The victim stops only after every caller has: a call on an exited victim fails.
    let victim_stop = Arc::new(AtomicBool::new(false));
    let victim_tid = Arc::new(AtomicU32::new(0));

    // The victim: spins (never sleeps, so no wakeup takes its pi_lock) until stopped.
    let victim = {
        let stop = victim_stop.clone();
        let victim_tid = victim_tid.clone();
        std::thread::Builder::new()
            .name("pi-victim".into())
            .spawn(move || {
                set_thread_name("pi-victim");
                if let Err(e) = pin_here(one_cpu) {
                    eprintln!("pi-contend: pinning the victim: {e}");
                }
                victim_tid.store(gettid(), Ordering::Release);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n = std::hint::black_box(n.wrapping_add(1));
                    std::hint::spin_loop();
                }
            })
            .context("starting the victim thread")?
    };
    let tid = loop {
        let t = victim_tid.load(Ordering::Acquire);
        if t != 0 {
            break t;
        }
        std::thread::yield_now();
    };

    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
    let started = Instant::now();
    let mut callers = Vec::new();
    for i in 0..args.threads {
        let stop = stop.clone();
        let set_every = args.set_every;
        callers.push(
            std::thread::Builder::new()
                .name(format!("pi-caller-{i}"))
                .spawn(move || -> std::io::Result<(u64, u64)> {
                    set_thread_name("pi-caller");
                    pin_here(one_cpu)?;
                    // SAFETY: cpu_set_t is plain data.
                    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                    let (mut gets, mut sets) = (0u64, 0u64);
                    while !stop.load(Ordering::Relaxed) {
                        getaffinity(tid, &mut set)?;
                        gets += 1;
                        if set_every > 0 && gets % set_every == 0 {
                            setaffinity(tid, &set)?;
                            sets += 1;
                        }
                    }
                    Ok((gets, sets))
                })
                .context("starting a caller thread")?,
        );
    }
    while Instant::now() < deadline && !stop_requested() {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let (mut gets, mut sets) = (0u64, 0u64);
    let mut errors = Vec::new();
    for c in callers {
        match c.join() {
            Ok(Ok((g, s))) => {
                gets += g;
                sets += s;
            }
            Ok(Err(e)) => errors.push(e.to_string()),
            Err(_) => errors.push("a caller thread panicked".into()),
        }
    }
    victim_stop.store(true, Ordering::Relaxed);
    let _ = victim.join();
    let elapsed = started.elapsed();
    if !errors.is_empty() {
        bail!(
            "sched_{{get,set}}affinity on the victim failed: {}",
            errors.join("; ")
        );
    }
    println!("victim_tid: {tid}");
    println!("threads: {}", args.threads);
    println!("getaffinity_calls: {gets}");
    println!("setaffinity_calls: {sets}");
    println!("pi_lock_calls: {}", gets + sets);
    println!("seconds: {:.3}", elapsed.as_secs_f64());
    println!(
        "calls/s: {:.0}",
        (gets + sets) as f64 / elapsed.as_secs_f64().max(1e-9)
    );
    Ok(())
}
