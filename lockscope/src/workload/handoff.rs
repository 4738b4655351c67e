//! `mmap-handoff`: readers that hold `mmap_lock` for a long time, so that waiting
//! writers pass the rwsem handoff timeout (~4 ms, `RWSEM_WAIT_TIMEOUT`) and set the
//! handoff bit (`rwsem_wlock_handoff`), and short readers that queue behind writers
//! whose lock other writers keep stealing (`rwsem_rlock_handoff`).
//!
//! Long readers loop on `madvise(MADV_POPULATE_WRITE)` over their own region (Linux
//! 5.14+; faults in every page with `mmap_lock` held for read the whole time) and
//! `madvise(MADV_DONTNEED)` to empty it again. Writers loop on mmap + touch + munmap of
//! one page (`mmap_lock` for write), short readers on `msync(MS_ASYNC)` (read).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};

use super::sys;

/// Options for `lockscope workload mmap-handoff`.
#[derive(Debug, Clone, clap::Args)]
pub struct MmapHandoffArgs {
    /// How long to run, in seconds (fractions allowed).
    #[arg(long, short = 's', value_name = "S", default_value_t = 5.0)]
    pub seconds: f64,
    /// Threads holding mmap_lock for read for long stretches (populate loops).
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub long_readers: usize,
    /// Size of each long reader's region, in MiB: how long one read hold lasts.
    #[arg(long, value_name = "MIB", default_value_t = 16)]
    pub region_mib: usize,
    /// Writer threads (mmap + touch + munmap of one page).
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub writers: usize,
    /// Short reader threads (msync loop).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub short_readers: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    LongReader,
    Writer,
    ShortReader,
}

pub fn run(args: &MmapHandoffArgs) -> anyhow::Result<()> {
    let duration = Duration::try_from_secs_f64(args.seconds)
        .ok()
        .filter(|d| !d.is_zero())
        .context("--seconds must be a positive number")?;
    if args.long_readers + args.writers + args.short_readers == 0 {
        bail!("need at least one thread");
    }
    if args.region_mib == 0 {
        bail!("--region-mib must be at least 1");
    }
    let page = sys::page_size();
    let region_len = args.region_mib << 20;
    // One anchor page for the short readers.
    let anchor = sys::Mapping::anonymous(page)?;
    // SAFETY: offset 0 of the live anchor page.
    unsafe { anchor.as_ptr().write_volatile(1) };
    let anchor_addr = anchor.as_ptr() as usize;

    let signals = sys::StopSignals::install()?;
    let stop = Arc::new(AtomicBool::new(false));
    let ops: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
    let roles = std::iter::repeat_n(Role::LongReader, args.long_readers)
        .chain(std::iter::repeat_n(Role::Writer, args.writers))
        .chain(std::iter::repeat_n(Role::ShortReader, args.short_readers));
    let mut handles = Vec::new();
    for role in roles {
        let region = match role {
            Role::LongReader => Some(sys::Mapping::anonymous(region_len)?),
            _ => None,
        };
        let (halt, counts) = (stop.clone(), ops.clone());
        handles.push(
            std::thread::Builder::new()
                .name(format!("handoff-{role:?}"))
                .spawn(move || -> anyhow::Result<()> {
                    let slot = role as usize;
                    while !halt.load(Ordering::Relaxed) {
                        match role {
                            Role::LongReader => {
                                let r = region.as_ref().context("long reader without region")?;
                                r.advise(libc::MADV_POPULATE_WRITE).context(
                                    "madvise(MADV_POPULATE_WRITE) (needs Linux 5.14 or later)",
                                )?;
                                r.advise(libc::MADV_DONTNEED)
                                    .context("madvise(MADV_DONTNEED)")?;
                            }
                            Role::Writer => {
                                let m = sys::Mapping::anonymous(page)?;
                                // SAFETY: offset 0 of a fresh one-page mapping.
                                unsafe { m.as_ptr().write_volatile(1) };
                            }
                            Role::ShortReader => {
                                // SAFETY: the anchor page lives until the threads are joined.
                                let rc = unsafe {
                                    libc::msync(
                                        anchor_addr as *mut libc::c_void,
                                        page,
                                        libc::MS_ASYNC,
                                    )
                                };
                                if rc != 0 {
                                    return Err(std::io::Error::last_os_error()).context("msync");
                                }
                            }
                        }
                        counts[slot].fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
                .context("spawning mmap-handoff thread")?,
        );
    }
    let (elapsed, first_err) = sys::run_then_join(duration, &stop, handles, "mmap-handoff thread");
    drop(signals);
    drop(anchor);
    if let Some(e) = first_err {
        return Err(e);
    }
    let n = |r: Role| ops[r as usize].load(Ordering::Relaxed);
    println!(
        "mmap-handoff: long_readers={} region_mib={} writers={} short_readers={} seconds={}",
        args.long_readers, args.region_mib, args.writers, args.short_readers, args.seconds
    );
    println!("real: {}", sys::fmt_secs(elapsed));
    for (label, role) in [
        ("long reader ops", Role::LongReader),
        ("writer ops", Role::Writer),
        ("short reader ops", Role::ShortReader),
    ] {
        println!(
            "{label}: {} ({}/s)",
            n(role),
            sys::fmt_rate(sys::rate(n(role), elapsed))
        );
    }
    Ok(())
}
