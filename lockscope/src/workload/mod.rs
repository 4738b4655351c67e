//! Built-in contention generators.
//!
//! These are small, self-contained programs that produce a known kind of
//! kernel lock contention, so that `lockscope` can be tried (and tested)
//! without hunting for a suitable application. Each one prints a few
//! `key: value` lines on stdout when it finishes, so it also works as a
//! micro-benchmark: run it once bare and once under a tracer to see the
//! tracer's overhead.
//!
//! Both workloads hammer the `mmap_lock` (a read/write semaphore embedded in
//! the process's `mm_struct`). Trace them with something like
//! `lockscope ... -- lockscope workload mmap-churn`.

mod churn;
mod fault;
mod handoff;
mod sys;

pub use churn::MmapChurnArgs;
pub use fault::MmapFaultArgs;
pub use handoff::MmapHandoffArgs;

/// A built-in workload that generates kernel lock contention.
#[derive(Debug, clap::Subcommand)]
pub enum Workload {
    /// Threads page-faulting on one shared anonymous mapping.
    ///
    /// N threads (default: one per CPU this process may run on), pinned
    /// round-robin to CPUs, each write one byte to every page of its own
    /// slice of ONE shared anonymous mapping, so every touch is a page fault
    /// on the same mm. Mirrors the kernel `down_read_trylock` regression
    /// benchmark (threads faulting on one mm). Each round maps a fresh region
    /// (mmap, touch, munmap), so every round faults every page again.
    ///
    /// Since Linux 6.4 anonymous faults take a per-VMA lock instead of
    /// `mmap_lock`, so on modern kernels this workload shows little `mmap_lock`
    /// contention; it is a baseline for page-fault throughput (the real
    /// contention is on page-table and LRU/memcg locks, if anywhere). Use
    /// `mmap-churn` for sustained rwsem contention.
    ///
    /// Prints `pages`, `real`, `usr`, `sys` (getrusage of the whole process
    /// plus wall clock over all rounds, including the mmap/munmap between
    /// rounds) and `ops/s` = pages touched / real.
    #[command(verbatim_doc_comment)]
    MmapFault(MmapFaultArgs),

    /// Readers and writers meeting on this process's one `mmap_lock`.
    ///
    /// Produces sustained contention on the mm's `mmap_lock` rwsem in both
    /// modes: contended read waits (rwsem:R) and write waits (rwsem:W).
    ///
    /// Reader threads loop on `msync(anchor, MS_ASYNC)`, which takes
    /// `mmap_lock` for read, does almost nothing and drops it.
    /// Writer threads loop on mmap(1 page) + write one byte + munmap, with
    /// the page placed right next to the readers' anchor page: mmap takes
    /// `mmap_lock` for write and merges the page into the anchor's VMA;
    /// munmap takes it for write, splits the VMA again, zaps the page and
    /// sends TLB-shootdown IPIs to the other CPUs running this mm. Those
    /// long write sections are what make the waits pile up (the merge and
    /// the touch each multiply contention; see the numbers in churn.rs).
    /// Plain page faults do not help: since Linux 6.4 they take per-VMA
    /// locks, not `mmap_lock`.
    ///
    /// Reader i and writer i are both pinned to the i-th allowed CPU
    /// (round-robin), so every CPU runs a reader and a writer; this gave
    /// several times more contention than letting the scheduler place them.
    ///
    /// Runs for --seconds (or until SIGINT/SIGTERM) and then prints ops
    /// per role, per second and in total.
    #[command(verbatim_doc_comment)]
    MmapChurn(MmapChurnArgs),

    /// Long `mmap_lock` read holds against writers: rwsem handoffs.
    ///
    /// Long readers loop on madvise(MADV_POPULATE_WRITE) over their own region
    /// (--region-mib, default 16: every page faulted in with mmap_lock held for
    /// read) and madvise(MADV_DONTNEED); writers loop on mmap + touch + munmap of
    /// one page; short readers on msync. Writers waiting behind the long read
    /// holds pass the ~4 ms handoff timeout and set the handoff bit
    /// (rwsem_wlock_handoff); short readers queued behind writers that keep
    /// stealing the lock request a handoff too (rwsem_rlock_handoff). Needs
    /// Linux 5.14+ (MADV_POPULATE_WRITE).
    #[command(verbatim_doc_comment)]
    MmapHandoff(MmapHandoffArgs),
}

/// Runs the selected workload to completion, printing its summary on stdout.
pub fn run(w: &Workload) -> anyhow::Result<()> {
    match w {
        Workload::MmapFault(args) => fault::run(args),
        Workload::MmapChurn(args) => churn::run(args),
        Workload::MmapHandoff(args) => handoff::run(args),
    }
}
