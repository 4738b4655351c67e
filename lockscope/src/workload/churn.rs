//! `mmap-churn`: readers and writers contending on the process's `mmap_lock`.
//!
//! Which calls take `mmap_lock` on a modern kernel was measured with the
//! `mmap_lock:mmap_lock_start_locking` tracepoint (Linux 6.18):
//!
//! * write: mmap, munmap, mprotect, brk, mremap, madvise(MADV_HUGEPAGE /
//!   MADV_NOHUGEPAGE), mlock (read + write).
//! * read: msync, mincore, madvise(MADV_WILLNEED / COLD / PAGEOUT /
//!   POPULATE_READ / POPULATE_WRITE), process_vm_readv, /proc/PID/mem,
//!   /proc/PID/{cmdline,environ,smaps}.
//! * neither (per-VMA lock or lockless): anonymous page faults,
//!   madvise(MADV_DONTNEED / MADV_FREE), /proc/PID/maps, /proc/PID/statm.
//!
//! Of the combinations tried (readers: msync, mincore, madvise WILLNEED /
//! COLD / POPULATE_READ, smaps reads; writers: mmap+munmap, mprotect,
//! madvise HUGEPAGE toggles), `msync(MS_ASYNC)` readers against
//! mmap + touch + munmap writers, with one reader and one writer per CPU,
//! produced by far the most contended waits of both kinds. Two details
//! matter a lot (2 CPUs, 2 readers + 2 writers, Linux 6.18, contended
//! rwsem waits per second, read/write):
//!
//! * writer page merged into the readers' VMA vs. mapped elsewhere:
//!   ~42k/21k vs. ~4k/2k;
//! * writer touches its page before munmap vs. not: ~1.7x more.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::sys;

const DEFAULT_THREADS: usize = 4;

/// Options for `lockscope workload mmap-churn`.
#[derive(Debug, Clone, clap::Args)]
pub struct MmapChurnArgs {
    /// Total number of threads, split into readers (half, rounded up) and
    /// writers unless --readers/--writers say otherwise [default: 4].
    #[arg(long, short = 't', value_name = "N")]
    pub threads: Option<usize>,

    /// How long to run, in seconds (fractions allowed). SIGINT/SIGTERM also
    /// stop the run early and still print the summary.
    #[arg(long, short = 's', value_name = "S", default_value_t = 5.0)]
    pub seconds: f64,

    /// Number of reader threads (msync loop: mmap_lock for read). With only
    /// one of --readers/--writers given, the other gets the rest of
    /// --threads.
    #[arg(long, short = 'R', value_name = "R")]
    pub readers: Option<usize>,

    /// Number of writer threads (mmap + touch + munmap loop: mmap_lock for
    /// write).
    #[arg(long, short = 'W', value_name = "W")]
    pub writers: Option<usize>,

    /// Print the summary as one JSON object (for benchmarks) instead of
    /// `key: value` lines.
    #[arg(long)]
    pub json: bool,
}

/// Resolves the reader/writer counts from the (partly optional) arguments.
fn split_roles(
    threads: Option<usize>,
    readers: Option<usize>,
    writers: Option<usize>,
) -> anyhow::Result<(usize, usize)> {
    let total = threads.unwrap_or(DEFAULT_THREADS);
    let (r, w) = match (readers, writers) {
        (Some(r), Some(w)) => {
            if threads.is_some_and(|t| t != r + w) {
                bail!("--threads {total} does not equal --readers {r} + --writers {w}");
            }
            (r, w)
        }
        (Some(r), None) => {
            let w = total
                .checked_sub(r)
                .with_context(|| format!("--readers {r} exceeds --threads {total}"))?;
            (r, w)
        }
        (None, Some(w)) => {
            let r = total
                .checked_sub(w)
                .with_context(|| format!("--writers {w} exceeds --threads {total}"))?;
            (r, w)
        }
        (None, None) => (total.div_ceil(2), total / 2),
    };
    if r + w == 0 {
        bail!("need at least one reader or writer thread");
    }
    Ok((r, w))
}

/// A one-shot start signal: `wait` blocks until `open` is called.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cond: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        while !*open {
            open = self.cond.wait(open).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn open(&self) {
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cond.notify_all();
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Reader,
    Writer,
}

/// One reader operation: `msync` takes `mmap_lock` for read, looks up the
/// VMA and (for MS_ASYNC on anonymous memory) does nothing else.
fn read_op(anchor: *mut u8, page: usize) -> io::Result<()> {
    // SAFETY: `anchor` is a live page-sized mapping owned by `run`.
    let rc = unsafe { libc::msync(anchor.cast(), page, libc::MS_ASYNC) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The pages the workload operates on: one "anchor" page that the readers
/// `msync`, with free one-page slots on both sides of it, one per writer.
///
/// Writers map their page exactly into their slot, so the kernel merges it
/// into the anchor VMA (same flags, adjacent) and munmap splits it off
/// again. Measured on Linux 6.18, this makes every write-locked section
/// longer (VMA merge/split under the lock) and gives ~10x more contended
/// waits than mapping the writer pages somewhere unrelated.
struct Arena {
    anchor: sys::Mapping,
    page: usize,
}

impl Arena {
    fn new(writers: usize, page: usize) -> anyhow::Result<Self> {
        let slots_per_side = writers.div_ceil(2);
        let window = sys::Mapping::anonymous((2 * slots_per_side + 1) * page)?;
        let anchor = window.keep_only(slots_per_side * page, page);
        // Give the anchor VMA its anon_vma now, as a long-lived heap page
        // would have; new neighbours then merge into it.
        // SAFETY: offset 0 of the live anchor page.
        unsafe { anchor.as_ptr().write_volatile(1) };
        Ok(Self { anchor, page })
    }

    fn anchor(&self) -> usize {
        self.anchor.as_ptr() as usize
    }

    /// Address of writer `i`'s slot: alternately just below and just above
    /// the anchor, moving outwards (-1, +1, -2, +2, ... pages).
    fn slot(&self, i: usize) -> usize {
        slot_address(self.anchor(), self.page, i)
    }
}

fn slot_address(anchor: usize, page: usize, i: usize) -> usize {
    let distance = (i / 2 + 1) * page;
    if i.is_multiple_of(2) {
        anchor - distance
    } else {
        anchor + distance
    }
}

/// One writer operation: mmap one page into `slot` (write lock; merges with
/// the anchor VMA), fault it in (per-VMA lock), munmap it (write lock; VMA
/// split, page zap and TLB shootdown IPIs to the other CPUs running this
/// mm). Touching the page gives ~1.7x more contention than leaving it
/// untouched, because munmap then has real work to do.
///
/// If the slot is taken (something else got mapped there), the page goes
/// wherever the kernel puts it: less contention, but still correct.
fn write_op(slot: usize, page: usize) -> anyhow::Result<()> {
    let m = match sys::Mapping::anonymous_at(slot as *mut u8, page) {
        Ok(m) => m,
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => sys::Mapping::anonymous(page)?,
        Err(e) => return Err(e).context("mmap"),
    };
    // SAFETY: offset 0 of a fresh one-page read/write mapping.
    unsafe { m.as_ptr().write_volatile(1) };
    drop(m);
    Ok(())
}

fn worker(
    role: Role,
    cpu: Option<usize>,
    target: usize,
    page: usize,
    start: &Gate,
    stop: &AtomicBool,
) -> anyhow::Result<u64> {
    // Pin first but wait at the gate regardless, so that all threads
    // start hammering at the same moment.
    let pinned = cpu.map(sys::pin_current_thread).transpose();
    start.wait();
    pinned?;
    let mut ops = 0u64;
    while !stop.load(Ordering::Relaxed) {
        match role {
            Role::Reader => read_op(target as *mut u8, page).context("msync")?,
            Role::Writer => write_op(target, page)?,
        }
        ops += 1;
    }
    Ok(ops)
}

pub fn run(args: &MmapChurnArgs) -> anyhow::Result<()> {
    let (readers, writers) = split_roles(args.threads, args.readers, args.writers)?;
    let duration = Duration::try_from_secs_f64(args.seconds)
        .ok()
        .filter(|d| !d.is_zero())
        .context("--seconds must be a positive number")?;
    let cpus = sys::allowed_cpus();
    let page = sys::page_size();
    // Lives until all workers are joined.
    let arena = Arena::new(writers, page)?;

    let signals = sys::StopSignals::install()?;
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Gate::default());

    let roles = (0..readers)
        .map(|i| (Role::Reader, i))
        .chain((0..writers).map(|i| (Role::Writer, i)));
    let mut handles = Vec::with_capacity(readers + writers);
    for (role, i) in roles {
        // Reader i and writer i share a CPU: each CPU gets both roles.
        let cpu = sys::cpu_for(i, &cpus);
        let target = match role {
            Role::Reader => arena.anchor(),
            Role::Writer => arena.slot(i),
        };
        let (gate, halt) = (start.clone(), stop.clone());
        let name = match role {
            Role::Reader => format!("churn-reader-{i}"),
            Role::Writer => format!("churn-writer-{i}"),
        };
        let spawned = std::thread::Builder::new()
            .name(name)
            .spawn(move || (role, worker(role, cpu, target, page, &gate, &halt)));
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => {
                // Let the threads already started exit without working.
                stop.store(true, Ordering::Relaxed);
                start.open();
                for h in handles {
                    let _ = h.join();
                }
                return Err(e).context("spawning mmap-churn thread");
            }
        }
    }

    start.open();
    let t0 = Instant::now();
    let deadline = t0 + duration;
    loop {
        let now = Instant::now();
        if now >= deadline || sys::stop_requested() {
            break;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
    }
    stop.store(true, Ordering::Relaxed);
    let elapsed = t0.elapsed();

    let (mut reader_ops, mut writer_ops) = (0u64, 0u64);
    let mut first_err = None;
    for h in handles {
        let (role, res) = h
            .join()
            .map_err(|_| anyhow::anyhow!("mmap-churn thread panicked"))?;
        match res {
            Ok(n) if role == Role::Reader => reader_ops += n,
            Ok(n) => writer_ops += n,
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    drop(signals);
    drop(arena);
    if let Some(e) = first_err {
        return Err(e);
    }

    let total = reader_ops + writer_ops;
    if args.json {
        let (usr, sys) = sys::cpu_times();
        let summary = serde_json::json!({
            "workload": "mmap-churn",
            "threads": readers + writers,
            "readers": readers,
            "writers": writers,
            "ops": total,
            "reader_ops": reader_ops,
            "writer_ops": writer_ops,
            "real_s": elapsed.as_secs_f64(),
            "ops_per_s": sys::rate(total, elapsed),
            "usr_s": usr.as_secs_f64(),
            "sys_s": sys.as_secs_f64(),
        });
        println!("{summary}");
        return Ok(());
    }
    println!(
        "mmap-churn: readers={readers} writers={writers} seconds={}",
        args.seconds
    );
    println!("real: {}", sys::fmt_secs(elapsed));
    println!(
        "reader ops: {reader_ops} ({}/s)",
        sys::fmt_rate(sys::rate(reader_ops, elapsed))
    );
    println!(
        "writer ops: {writer_ops} ({}/s)",
        sys::fmt_rate(sys::rate(writer_ops, elapsed))
    );
    println!("ops/s: {}", sys::fmt_rate(sys::rate(total, elapsed)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_split_is_half_and_half() {
        assert_eq!(split_roles(None, None, None).unwrap(), (2, 2));
        assert_eq!(split_roles(Some(3), None, None).unwrap(), (2, 1));
        assert_eq!(split_roles(Some(1), None, None).unwrap(), (1, 0));
    }

    #[test]
    fn explicit_roles() {
        assert_eq!(split_roles(None, Some(1), Some(3)).unwrap(), (1, 3));
        assert_eq!(split_roles(Some(4), Some(1), Some(3)).unwrap(), (1, 3));
        assert_eq!(split_roles(Some(6), Some(1), None).unwrap(), (1, 5));
        assert_eq!(split_roles(None, None, Some(1)).unwrap(), (3, 1));
    }

    #[test]
    fn inconsistent_roles_are_rejected() {
        assert!(split_roles(Some(5), Some(1), Some(3)).is_err());
        assert!(split_roles(Some(2), Some(3), None).is_err());
        assert!(split_roles(Some(0), None, None).is_err());
        assert!(split_roles(None, Some(0), Some(0)).is_err());
    }

    #[test]
    fn slots_alternate_around_the_anchor() {
        let got: Vec<usize> = (0..5).map(|i| slot_address(100, 10, i)).collect();
        assert_eq!(got, [90, 110, 80, 120, 70]);
    }

    #[test]
    fn ops_succeed() {
        let page = sys::page_size();
        let arena = Arena::new(3, page).unwrap();
        read_op(arena.anchor() as *mut u8, page).unwrap();
        for i in 0..3 {
            write_op(arena.slot(i), page).unwrap();
        }
        // An occupied slot falls back to a kernel-chosen address.
        write_op(arena.anchor(), page).unwrap();
    }

    #[test]
    fn short_run_counts_both_roles() {
        let page = sys::page_size();
        let arena = Arena::new(0, page).unwrap();
        let addr = arena.anchor();
        let start = Gate::default();
        start.open();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let stopper = s.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                stop.store(true, Ordering::Relaxed);
            });
            let n = worker(Role::Reader, None, addr, page, &start, &stop).unwrap();
            stopper.join().unwrap();
            assert!(n > 0);
        });
    }
}
