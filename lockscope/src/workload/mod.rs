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
mod file_write;
mod fpos;
mod futex_mutex;
mod futex_rwlock;
mod futex_sys;
mod handoff;
mod holders;
mod mutex_holders;
mod pi_contend;
mod pipe;
mod pthread_mutex;
mod ptrace_storm;
mod sys;
mod syscall_loop;
mod timed_wait;

pub use churn::MmapChurnArgs;
pub use fault::MmapFaultArgs;
pub use file_write::FileWriteArgs;
pub use fpos::FposHoldersArgs;
pub use futex_mutex::FutexMutexArgs;
pub use futex_rwlock::FutexRwlockArgs;
pub use handoff::MmapHandoffArgs;
pub use holders::MmapHoldersArgs;
pub use mutex_holders::MutexHoldersArgs;
pub use pi_contend::PiContendArgs;
pub use pipe::PipeMutexArgs;
pub use pthread_mutex::PthreadMutexArgs;
pub use ptrace_storm::PtraceStormArgs;
pub use sys::page_size;
pub use syscall_loop::SyscallLoopArgs;
pub use timed_wait::TimedWaitArgs;

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

    /// Threads taking one user-space futex mutex; counts its own futex calls.
    ///
    /// A wait-wake mutex (Drepper's three-state mutex: 0 free, 1 locked,
    /// 2 locked with waiters), or with --pi a PI futex mutex (the word holds
    /// the owner's TID; contended lock/unlock call FUTEX_LOCK_PI and
    /// FUTEX_UNLOCK_PI), as in `perf bench futex mutex`. Every thread counts
    /// its FUTEX_WAIT calls, the EAGAIN returns among them, FUTEX_WAKE calls,
    /// the tasks they woke (sum of FUTEX_WAKE's return values), and
    /// LOCK_PI/UNLOCK_PI calls. At the end it prints them with the lock's
    /// address, total lock/unlock pairs and per-thread rates (avg/min/max), so
    /// `lockscope record -- lockscope workload futex-mutex` can be checked
    /// exactly against the workload's own counts.
    ///
    /// --locks N spreads the threads over N distinct mutexes: they take the
    /// same mutex for 16 acquisitions in all, then move on to the next one,
    /// round-robin, so all N futex words are contended (e.g. `--locks 10000`
    /// for label-cardinality tests of `lockscope serve`). The counts printed
    /// are totals over all N mutexes.
    #[command(verbatim_doc_comment)]
    FutexMutex(FutexMutexArgs),

    /// Readers and writers on one user-space futex rwlock; counts its own
    /// futex calls.
    ///
    /// One futex word holds the reader count, a writer bit and a waiters bit;
    /// blocked threads wait on the word and are all woken by the last reader
    /// out or the writer's unlock. --read-pct sets the share of reads.
    /// Prints the same counters as futex-mutex, plus read and write ops.
    #[command(verbatim_doc_comment)]
    FutexRwlock(FutexRwlockArgs),

    /// Threads taking one plain glibc pthread mutex (or with --rwlock a
    /// pthread rwlock).
    ///
    /// glibc waits on the futex word at the start of the mutex (inside the
    /// rwlock), so a recording shows the lock at the printed address, named
    /// `pthread-mutex` (`pthread-rwlock`) with the call sites
    /// `pthread_mutex_worker` (`pthread_rwlock_reader`/`_writer`), unwound from
    /// each wait's user stack. glibc does not expose its own futex call counts,
    /// so only ops and rates are printed.
    #[command(verbatim_doc_comment)]
    PthreadMutex(PthreadMutexArgs),
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
    /// Tracer threads attaching to, peeking into and detaching from busy tracees.
    ///
    /// Like `stress-ng --ptrace`: each of --tracers threads owns one tracee
    /// process (a forked child spinning in user space) and loops on
    /// PTRACE_SEIZE + PTRACE_INTERRUPT, waitpid until the tracee stops,
    /// PTRACE_PEEKDATA (--peeks times) and PTRACE_DETACH. Every peek passes
    /// ptrace_check_attach -> wait_task_inactive, which takes the tracee's
    /// pi_lock on every loop iteration (Linux 6.7+) while the tracee is
    /// still switching out: the pi_lock pattern behind cyclictest latency
    /// spikes under ptrace load. Trace it with
    /// `lockscope record --latency-threshold 100us -- ...`.
    ///
    /// Prints the tracee pids and its own counts of attaches, interrupts,
    /// stops, peeks, detaches and failed calls.
    #[command(verbatim_doc_comment)]
    PtraceStorm(PtraceStormArgs),
    /// Two writers on one mmap_lock, one holding it long, one briefly: every wait's holder
    /// is known.
    ///
    /// holder-long loops on mprotect over a large populated region (mmap_lock for
    /// write while every page table entry changes); holder-short on mprotect of one
    /// page. The short holder's waits are behind the long one and the other way round,
    /// so `lockscope report --by owner` of a recording names holder-long for most of
    /// the wait. Prints both thread ids and their operation counts.
    #[command(verbatim_doc_comment)]
    MmapHolders(MmapHoldersArgs),
    /// Writer threads and one reader on one pipe: waits on the pipe's kernel mutex, each
    /// held by another thread of this process.
    ///
    /// Every write(2) and read(2) of a pipe holds the pipe's mutex while it copies;
    /// both ends are non-blocking, so the threads wait only on that mutex, and
    /// `lockscope report --by owner` of a recording names pipe-writer and
    /// pipe-reader threads as its holders. Prints the thread ids and bytes moved.
    #[command(verbatim_doc_comment)]
    PipeMutex(PipeMutexArgs),
    /// Two writers through one open file, one holding its position lock long, one
    /// briefly: every wait's holder on a kernel mutex is known.
    ///
    /// write(2) through a file description that another thread can use holds the
    /// file's f_pos_lock (a mutex) for the whole call: holder-long writes a large
    /// buffer and seeks back, holder-short writes one byte. `lockscope report --by
    /// owner` of a recording names holder-long for most of the wait. Prints both
    /// thread ids and their operation counts.
    #[command(verbatim_doc_comment)]
    FposHolders(FposHoldersArgs),
    /// Threads writing one file: waits on its inode's lock (`i_rwsem`), whose inode
    /// number the workload prints.
    ///
    /// Every write(2) to a regular file holds its inode's i_rwsem for write while it
    /// copies. The file is created in --dir (tmpfs, /dev/shm, by default) and removed
    /// at once, so a recording can be checked against the printed inode: lockscope
    /// names the lock `&shmem_inode_cache vfs_inode.i_rwsem (inode N)`.
    #[command(verbatim_doc_comment)]
    FileWrite(FileWriteArgs),
    /// Two threads on one glibc mutex, one holding it long, one briefly: every wait's
    /// holder is known.
    ///
    /// holder-long takes the mutex with pthread_mutex_trylock in a loop (it never waits
    /// in the kernel), holds it for --hold-us, then leaves it as long; holder-short
    /// takes it over and over for a microsecond. Every wait is the short holder's,
    /// behind the long one (glibc's __owner names it), so `lockscope report --by
    /// owner` of a recording names holder-long for nearly all of the wait.
    /// Prints the mutex's address, both thread ids and their operation counts.
    #[command(verbatim_doc_comment)]
    MutexHolders(MutexHoldersArgs),
    /// One thread calling getppid(2) in a loop, touching no lock: a benchmark bystander
    /// for what every system call pays while a tracer is attached.
    SyscallLoop(SyscallLoopArgs),
    /// Timed FUTEX_WAITs on a word no one wakes, each to its timeout: stopped and
    /// continued mid-wait (kill -STOP, kill -CONT), the kernel continues a wait through
    /// restart_syscall. Prints the word's address and its calls' outcomes.
    FutexTimedWait(TimedWaitArgs),

    /// Threads re-taking one victim thread's `pi_lock`: the starvation detector's load.
    ///
    /// A victim thread spins; N caller threads loop on sched_getaffinity(victim)
    /// (and every --set-every calls sched_setaffinity(victim) with its own mask), each
    /// of which takes the victim's `pi_lock` at least once. While one CPU waits for
    /// that lock, the others keep re-acquiring it: the foreign re-acquisitions of
    /// cache-line starvation. Prints the victim's thread id and the calls made, so
    /// `lockscope record -- lockscope workload pi-contend` can be checked against
    /// them: the deep tier's hold count on `pi_lock of pi-victim[TID]` is at least
    /// `pi_lock_calls`. --threads 1 is the uncontended baseline.
    #[command(verbatim_doc_comment)]
    PiContend(PiContendArgs),
}

/// Runs the selected workload to completion, printing its summary on stdout.
pub fn run(w: &Workload) -> anyhow::Result<()> {
    match w {
        Workload::MmapFault(args) => fault::run(args),
        Workload::MmapChurn(args) => churn::run(args),
        Workload::FutexMutex(args) => futex_mutex::run(args),
        Workload::FutexRwlock(args) => futex_rwlock::run(args),
        Workload::PthreadMutex(args) => pthread_mutex::run(args),
        Workload::MmapHandoff(args) => handoff::run(args),
        Workload::PtraceStorm(args) => ptrace_storm::run(args),
        Workload::MmapHolders(args) => holders::run(args),
        Workload::PipeMutex(args) => pipe::run(args),
        Workload::FposHolders(args) => fpos::run(args),
        Workload::FileWrite(args) => file_write::run(args),
        Workload::MutexHolders(args) => mutex_holders::run(args),
        Workload::SyscallLoop(args) => syscall_loop::run(args),
        Workload::FutexTimedWait(args) => timed_wait::run(args),
        Workload::PiContend(args) => pi_contend::run(args),
    }
}
