//! `mmap-holders`: two writer threads on one `mmap_lock` whose holds differ by orders of
//! magnitude, so that the holder of every wait is known. The long holder loops on
//! `mprotect` over a large populated region (the write lock is held while every page
//! table entry of the region changes); the short holder loops on `mprotect` of one page.
//! Both take `mmap_lock` for write only, so every wait finds a writer holding it: the
//! short holder's waits are behind the long holder, and the long holder's behind the
//! short one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};

use super::sys;

/// Options for `lockscope workload mmap-holders`.
#[derive(Debug, Clone, clap::Args)]
pub struct MmapHoldersArgs {
    /// How long to run, in seconds (fractions allowed).
    #[arg(long, short = 's', value_name = "S", default_value_t = 3.0)]
    pub seconds: f64,
    /// Size of the long holder's region, in MiB: how long one of its holds lasts.
    #[arg(long, value_name = "MIB", default_value_t = 32)]
    pub region_mib: usize,
    /// Run both holders on one CPU: a wait then never finds its holder running on
    /// another CPU, where the kernel does not walk a task's stack, so the holder's
    /// stack is taken at its first wait.
    #[arg(long)]
    pub one_cpu: bool,
    /// Print the summary as one JSON object instead of `key: value` lines.
    #[arg(long)]
    pub json: bool,
}

/// `mprotect` `len` bytes at `p` to read-only, then back to read-write.
fn toggle(p: *mut u8, len: usize) -> std::io::Result<()> {
    for prot in [libc::PROT_READ, libc::PROT_READ | libc::PROT_WRITE] {
        // SAFETY: `p..p+len` is a mapping this workload owns and nothing else touches
        // while its protection changes.
        if unsafe { libc::mprotect(p.cast(), len, prot) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

fn gettid() -> u32 {
    // SAFETY: a syscall without arguments.
    unsafe { libc::gettid() as u32 }
}

pub fn run(args: &MmapHoldersArgs) -> anyhow::Result<()> {
    if !(args.seconds.is_finite() && args.seconds > 0.0) {
        bail!("--seconds must be a positive number, got {}", args.seconds);
    }
    if args.region_mib == 0 {
        bail!("--region-mib must be at least 1");
    }
    let _signals = sys::StopSignals::install()?;
    let page = sys::page_size();
    let long_len = args.region_mib << 20;
    let long = Arc::new(sys::Mapping::anonymous(long_len)?);
    // Fault every page in: the protection change then walks populated page tables.
    // SAFETY: writing inside the mapping just created.
    unsafe { std::ptr::write_bytes(long.as_ptr(), 1, long_len) };
    if args.one_cpu {
        // The holders are spawned from here: they inherit the affinity.
        sys::pin_to_one_cpu()?;
    }
    let short = Arc::new(sys::Mapping::anonymous(page)?);
    // SAFETY: as above.
    unsafe { std::ptr::write_bytes(short.as_ptr(), 1, page) };

    let step = move |i: usize| -> anyhow::Result<()> {
        let (map, len) = if i == 0 {
            (long.as_ptr(), long_len)
        } else {
            (short.as_ptr(), page)
        };
        toggle(map, len).context("mprotect")
    };
    run_pair("mmap-holders", args.seconds, None, args.json, step)
}

/// How much of its stack a holder touches before it starts (far more than its loop uses).
const STACK_TOUCHED: usize = 256 << 10;

/// Write `STACK_TOUCHED` bytes of the calling thread's stack, so that its loop never
/// faults a stack page in.
#[inline(never)]
fn touch_stack() {
    let buf = [1u8; STACK_TOUCHED];
    std::hint::black_box(&buf);
}

/// Run the two holder threads, `holder-long` (`step(0)` in a loop) and `holder-short`
/// (`step(1)`), until `seconds` pass, and print their thread ids and operation counts
/// (with `lock`'s address first when given) as `key: value` lines or one JSON object.
///
/// Neither loop starts before both threads are up with their stacks touched: creating a
/// thread maps its stack (a write of `mmap_lock`) and its first stack fault in a new
/// anonymous mapping takes `mmap_lock` for read. Begun beside a running holder, these
/// made waits that no holder caused (a 6.7 ms `mmap` wait for a faulting reader, 12% of
/// one emulated guest's wait), so the workload keeps them out of its run.
pub(super) fn run_pair(
    workload: &str,
    seconds: f64,
    lock: Option<usize>,
    json: bool,
    step: impl Fn(usize) -> anyhow::Result<()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let step = Arc::new(step);
    let stop = Arc::new(AtomicBool::new(false));
    let go = Arc::new(AtomicBool::new(false));
    let ops = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    let tids = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    let mut handles = Vec::new();
    for (i, name) in ["holder-long", "holder-short"].into_iter().enumerate() {
        let (stop, go, ops, tid, step) = (
            stop.clone(),
            go.clone(),
            ops[i].clone(),
            tids[i].clone(),
            step.clone(),
        );
        handles.push(
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || -> anyhow::Result<()> {
                    touch_stack();
                    tid.store(gettid() as u64, Ordering::Release);
                    while !go.load(Ordering::Acquire) && !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    while !stop.load(Ordering::Relaxed) {
                        step(i)?;
                        ops.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
                .with_context(|| format!("spawning {workload} thread"))?,
        );
        // The next thread is created only once this one waits at the gate.
        while tids[i].load(Ordering::Acquire) == 0 && !handles[i].is_finished() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    go.store(true, Ordering::Release);
    let (elapsed, err) = sys::run_then_join(
        Duration::from_secs_f64(seconds),
        &stop,
        handles,
        &format!("{workload} thread"),
    );
    if let Some(e) = err {
        return Err(e);
    }
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let (lt, st) = (get(&tids[0]), get(&tids[1]));
    let (lo, so) = (get(&ops[0]), get(&ops[1]));
    let pid = std::process::id();
    if json {
        let lock = lock.map_or(String::new(), |a| format!(",\"lock\":\"{a:#x}\""));
        println!(
            "{{\"workload\":\"{workload}\",\"pid\":{pid}{lock},\"long_tid\":{lt},\
             \"short_tid\":{st},\"long_ops\":{lo},\"short_ops\":{so},\"elapsed_s\":{:.3}}}",
            elapsed.as_secs_f64()
        );
    } else {
        println!("pid: {pid}");
        if let Some(a) = lock {
            println!("lock: {a:#x}");
        }
        println!("long_tid: {lt}");
        println!("short_tid: {st}");
        println!("long_ops: {lo}");
        println!("short_ops: {so}");
        println!("elapsed: {}", sys::fmt_secs(elapsed));
    }
    Ok(())
}
