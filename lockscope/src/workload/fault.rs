//! `mmap-fault`: threads page-faulting on one shared anonymous mapping.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use anyhow::{Context, bail};

use super::sys;

/// Options for `lockscope workload mmap-fault`.
#[derive(Debug, Clone, clap::Args)]
pub struct MmapFaultArgs {
    /// Number of faulting threads [default: number of CPUs this process may
    /// run on]. Thread i is pinned to the (i mod #CPUs)-th allowed CPU.
    #[arg(long, short = 't', value_name = "N")]
    pub threads: Option<usize>,

    /// Size of the shared mapping in MiB; each thread faults in
    /// 1/threads of it.
    #[arg(long, short = 'm', value_name = "M", default_value_t = 512)]
    pub mib: usize,

    /// Number of rounds. Every round maps a fresh region, faults in every
    /// page, then unmaps it, so each round takes the same number of faults.
    #[arg(long, short = 'r', value_name = "R", default_value_t = 1)]
    pub rounds: usize,

    /// Ask for transparent huge pages (MADV_HUGEPAGE) instead of refusing
    /// them (MADV_NOHUGEPAGE, the default, so that every base page is its
    /// own fault as in the original benchmark). With THP one fault can fill
    /// 2 MiB; `pages` and `ops/s` still count base pages touched.
    #[arg(long)]
    pub thp: bool,

    /// Print the summary as one JSON object (for benchmarks) instead of
    /// `key: value` lines.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &MmapFaultArgs) -> anyhow::Result<()> {
    let cpus = sys::allowed_cpus();
    let threads = args.threads.unwrap_or(cpus.len());
    if threads == 0 {
        bail!("--threads must be at least 1");
    }
    if args.mib == 0 {
        bail!("--mib must be at least 1");
    }
    let page = sys::page_size();
    let len = args
        .mib
        .checked_mul(1 << 20)
        .context("--mib is too large")?;
    let pages = len / page;

    // Round protocol: main maps a region and publishes its address, then
    // everyone meets at `start`; workers fault their slice and meet main at
    // `done`; main unmaps. Barrier waits also order the memory accesses.
    let base = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(threads + 1));
    let done = Arc::new(Barrier::new(threads + 1));

    let mut handles = Vec::with_capacity(threads);
    for i in 0..threads {
        let (base, start, done) = (base.clone(), start.clone(), done.clone());
        let cpu = sys::cpu_for(i, &cpus);
        let rounds = args.rounds;
        let (first, count) = sys::split_range(pages, threads, i);
        let h = std::thread::Builder::new()
            .name(format!("mmap-fault-{i}"))
            .spawn(move || {
                // Pinning is best effort: keep going (unpinned) if it fails,
                // but still take part in every barrier so nobody deadlocks.
                let pinned = cpu.map(sys::pin_current_thread).transpose();
                for _ in 0..rounds {
                    start.wait();
                    let p = base.load(Ordering::Acquire) as *mut u8;
                    let count = if p.is_null() { 0 } else { count };
                    for k in first..first + count {
                        // SAFETY: `k < pages`, so the byte lies inside the
                        // mapping, which main keeps alive until `done`.
                        unsafe { p.add(k * page).write_volatile(1) };
                    }
                    done.wait();
                }
                pinned.map(|_| ())
            })
            .context("spawning mmap-fault thread")?;
        handles.push(h);
    }

    let (usr0, sys0) = sys::cpu_times();
    let t0 = Instant::now();
    let mut result = Ok(());
    for _ in 0..args.rounds {
        // After an error keep feeding the barriers with a null address (the
        // workers skip such rounds) so that every thread finishes its loop.
        let region = if result.is_ok() {
            sys::Mapping::anonymous(len)
                .map_err(|e| result = Err(e))
                .ok()
        } else {
            None
        };
        if let Some(m) = &region {
            let advice = if args.thp {
                libc::MADV_HUGEPAGE
            } else {
                libc::MADV_NOHUGEPAGE
            };
            // Not fatal: kernels without THP reject the advice.
            let _ = m.advise(advice);
        }
        let ptr = region.as_ref().map_or(std::ptr::null_mut(), |m| m.as_ptr());
        base.store(ptr as usize, Ordering::Release);
        start.wait();
        done.wait();
        drop(region);
    }
    let real = t0.elapsed();
    let (usr1, sys1) = sys::cpu_times();

    for h in handles {
        h.join()
            .map_err(|_| anyhow::anyhow!("mmap-fault thread panicked"))?
            .context("pinning mmap-fault thread")?;
    }
    result?;

    let touched = (pages as u64) * (args.rounds as u64);
    if args.json {
        let (usr, sys) = (usr1.saturating_sub(usr0), sys1.saturating_sub(sys0));
        let summary = serde_json::json!({
            "workload": "mmap-fault",
            "threads": threads,
            "mib": args.mib,
            "rounds": args.rounds,
            "ops": touched,
            "real_s": real.as_secs_f64(),
            "ops_per_s": sys::rate(touched, real),
            "usr_s": usr.as_secs_f64(),
            "sys_s": sys.as_secs_f64(),
        });
        println!("{summary}");
        return Ok(());
    }
    println!(
        "mmap-fault: threads={threads} mib={} rounds={}",
        args.mib, args.rounds
    );
    println!("pages: {touched}");
    println!("real: {}", sys::fmt_secs(real));
    println!("usr: {}", sys::fmt_secs(usr1.saturating_sub(usr0)));
    println!("sys: {}", sys::fmt_secs(sys1.saturating_sub(sys0)));
    println!("ops/s: {}", sys::fmt_rate(sys::rate(touched, real)));
    Ok(())
}
