//! `ptrace-storm`: tracer threads attaching to, peeking into and detaching from busy
//! tracee processes, like `stress-ng --ptrace`.
//!
//! Every tracer owns one tracee (a forked child spinning in user space) and loops:
//! `PTRACE_SEIZE` + `PTRACE_INTERRUPT`, `waitpid` until the tracee stops,
//! `PTRACE_PEEKDATA` (--peeks times), `PTRACE_DETACH`. Each peek goes through
//! `ptrace_check_attach` -> `wait_task_inactive`, which takes the tracee's `pi_lock` on
//! every loop iteration (Linux 6.7+) while the tracee is still switching out: this is
//! the `pi_lock` pattern of the cyclictest latency report, and what `sched:sched_wait_task`
//! shows. The workload counts its own calls and prints them with the tracee pids.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};

use super::sys;

/// Options for `lockscope workload ptrace-storm`.
#[derive(Debug, Clone, clap::Args)]
pub struct PtraceStormArgs {
    /// Tracer threads; each has its own tracee process.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub tracers: usize,
    /// How long to run, in seconds (fractions allowed).
    #[arg(long, short = 's', value_name = "S", default_value_t = 5.0)]
    pub seconds: f64,
    /// PTRACE_PEEKDATA calls per attach.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub peeks: usize,
}

/// What the tracers did, in all.
#[derive(Default)]
struct Counts {
    attaches: AtomicU64,
    interrupts: AtomicU64,
    stops: AtomicU64,
    peeks: AtomicU64,
    detaches: AtomicU64,
    /// Calls that failed with an errno (each is also a ptrace round not completed).
    errors: AtomicU64,
}

/// A word the tracers read from their tracees (a fork shares this address).
static PEEK_TARGET: AtomicU64 = AtomicU64::new(0x5eed);

pub fn run(args: &PtraceStormArgs) -> anyhow::Result<()> {
    let duration = Duration::try_from_secs_f64(args.seconds)
        .ok()
        .filter(|d| !d.is_zero())
        .context("--seconds must be a positive number")?;
    if args.tracers == 0 {
        bail!("--tracers must be at least 1");
    }
    if args.peeks == 0 {
        bail!("--peeks must be at least 1");
    }
    // Fork the tracees before any thread exists: the children only spin.
    let mut tracees = Vec::new();
    for _ in 0..args.tracers {
        tracees.push(Tracee::spawn()?);
    }
    let signals = sys::StopSignals::install()?;
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let cpus = sys::allowed_cpus();
    let mut handles = Vec::new();
    for (i, t) in tracees.iter().enumerate() {
        let (halt, counts, pid, peeks) = (stop.clone(), counts.clone(), t.pid, args.peeks);
        let cpu = sys::cpu_for(i, &cpus);
        handles.push(
            std::thread::Builder::new()
                .name(format!("ptrace-{i}"))
                .spawn(move || -> anyhow::Result<()> {
                    if let Some(cpu) = cpu {
                        sys::pin_current_thread(cpu)?;
                    }
                    while !halt.load(Ordering::Relaxed) {
                        trace_once(pid, peeks, &counts)?;
                    }
                    Ok(())
                })
                .context("spawning tracer thread")?,
        );
    }
    let (elapsed, first_err) = sys::run_then_join(duration, &stop, handles, "tracer thread");
    let pids: Vec<String> = tracees.iter().map(|t| t.pid.to_string()).collect();
    drop(tracees);
    drop(signals);
    if let Some(e) = first_err {
        return Err(e);
    }
    let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
    println!(
        "ptrace-storm: tracers={} peeks={} seconds={}",
        args.tracers, args.peeks, args.seconds
    );
    println!("tracee pids: {}", pids.join(" "));
    println!("real: {}", sys::fmt_secs(elapsed));
    for (label, c) in [
        ("attaches", &counts.attaches),
        ("interrupts", &counts.interrupts),
        ("stops", &counts.stops),
        ("peeks", &counts.peeks),
        ("detaches", &counts.detaches),
    ] {
        println!(
            "{label}: {} ({}/s)",
            n(c),
            sys::fmt_rate(sys::rate(n(c), elapsed))
        );
    }
    println!("errors: {}", n(&counts.errors));
    Ok(())
}

/// One round: seize, interrupt, wait for the stop, peek, detach.
fn trace_once(pid: libc::pid_t, peeks: usize, c: &Counts) -> anyhow::Result<()> {
    let null = std::ptr::null_mut::<libc::c_void>();
    // SAFETY: ptrace on our own child; no pointers are dereferenced by us.
    if unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, null, null) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ESRCH) {
            bail!("tracee {pid} is gone");
        }
        c.errors.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }
    c.attaches.fetch_add(1, Ordering::Relaxed);
    // SAFETY: as above.
    if unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, pid, null, null) } == 0 {
        c.interrupts.fetch_add(1, Ordering::Relaxed);
        let mut status = 0;
        // SAFETY: waits for our own tracee; `status` is a valid out pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if r == pid && libc::WIFSTOPPED(status) {
            c.stops.fetch_add(1, Ordering::Relaxed);
            let addr = PEEK_TARGET.as_ptr() as *mut libc::c_void;
            for _ in 0..peeks {
                // SAFETY: PEEKDATA returns the word; errors are reported through errno.
                unsafe { *libc::__errno_location() = 0 };
                // SAFETY: PEEKDATA on a stopped tracee; the address is only read by the kernel.
                let w = unsafe { libc::ptrace(libc::PTRACE_PEEKDATA, pid, addr, null) };
                if w == -1 && std::io::Error::last_os_error().raw_os_error() != Some(0) {
                    c.errors.fetch_add(1, Ordering::Relaxed);
                } else {
                    c.peeks.fetch_add(1, Ordering::Relaxed);
                }
            }
        } else {
            c.errors.fetch_add(1, Ordering::Relaxed);
        }
    } else {
        c.errors.fetch_add(1, Ordering::Relaxed);
    }
    // SAFETY: as above.
    if unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, null, null) } == 0 {
        c.detaches.fetch_add(1, Ordering::Relaxed);
    } else {
        c.errors.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// A child process that spins in user space until killed (also when we die).
struct Tracee {
    pid: libc::pid_t,
}

impl Tracee {
    fn spawn() -> anyhow::Result<Self> {
        // SAFETY: called before any thread is spawned; the child only spins and never
        // returns into Rust code that could allocate or take locks.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error()).context("fork");
        }
        if pid == 0 {
            // SAFETY: async-signal-safe calls only.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                loop {
                    for _ in 0..10_000 {
                        std::hint::spin_loop();
                    }
                    libc::getppid();
                }
            }
        }
        Ok(Self { pid })
    }
}

impl Drop for Tracee {
    fn drop(&mut self) {
        // SAFETY: our own child.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            let mut status = 0;
            libc::waitpid(self.pid, &mut status, libc::__WALL);
        }
    }
}
