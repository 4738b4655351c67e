//! Kernel lock contention: what `lock:contention_begin` / `lock:contention_end` feed.

use crate::{HIST_BUCKETS, assert_size};

/// `LCB_F_*` flags of `lock:contention_begin` (include/trace/events/lock.h).
pub const LCB_F_SPIN: u32 = 1 << 0;
pub const LCB_F_READ: u32 = 1 << 1;
pub const LCB_F_WRITE: u32 = 1 << 2;
pub const LCB_F_RT: u32 = 1 << 3;
pub const LCB_F_PERCPU: u32 = 1 << 4;
pub const LCB_F_MUTEX: u32 = 1 << 5;
/// Every flag bit the kernel defines today; a value outside it is an unknown kind.
pub const LCB_F_ALL: u32 = (1 << 6) - 1;

/// True when a wait with these flags busy-waits on its CPU (spinlock, rwlock) and so is
/// timed per CPU; everything else can sleep and is timed per task.
#[inline(always)]
pub const fn is_spinning_wait(flags: u32) -> bool {
    flags & LCB_F_SPIN != 0 && flags & LCB_F_MUTEX == 0
}

/// Aggregation key of one contention bucket in the kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentionKey {
    /// Address of the lock.
    pub lock: u64,
    /// Hash of the kernel stack at `contention_begin` (key of `STACKS`), 0 when none.
    pub stack: u64,
    /// Process (thread group) of the waiter.
    pub tgid: u32,
    /// `LCB_F_*` flags of the wait, and above them (`GEN_SHIFT`) the lock's owner
    /// generation: `flags_kind` and `flags_gen` take them apart.
    pub flags: u32,
}
assert_size!(ContentionKey, 24);

/// Aggregated waits of one key on one CPU (the map is per-CPU; userspace sums CPUs).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContentionStats {
    /// Waits that ended (acquired or failed).
    pub count: u64,
    /// Of `count`, waits ended by a signal or timeout (`contention_end` ret != 0).
    pub failed: u64,
    pub total_ns: u64,
    /// `u64::MAX` until the first wait.
    pub min_ns: u64,
    pub max_ns: u64,
    /// Log2 histogram of wait times (see [`crate::log2_bucket`]).
    pub hist: [u64; HIST_BUCKETS],
}
assert_size!(ContentionStats, 40 + 8 * HIST_BUCKETS);

impl ContentionStats {
    pub const EMPTY: Self = Self {
        count: 0,
        failed: 0,
        total_ns: 0,
        min_ns: u64::MAX,
        max_ns: 0,
        hist: [0; HIST_BUCKETS],
    };

    /// Count one wait of `ns` (`failed`: ended by a signal or timeout). The one update of
    /// wait statistics every probe uses. A zeroed slot (another CPU's half of a per-CPU
    /// entry) takes its first wait as the minimum.
    #[inline(always)]
    pub fn add(&mut self, ns: u64, failed: bool) {
        if self.count == 0 || ns < self.min_ns {
            self.min_ns = ns;
        }
        self.count += 1;
        if failed {
            self.failed += 1;
        }
        self.total_ns += ns;
        if ns > self.max_ns {
            self.max_ns = ns;
        }
        let b = crate::log2_bucket(ns);
        if b < HIST_BUCKETS {
            self.hist[b] += 1;
        }
    }

    /// [`Self::add`] into an entry of a shared map that other CPUs update at the same
    /// time (see [`crate::shared`]); false when the minimum or maximum could not be
    /// stored (counted by the caller). The entry starts as [`Self::EMPTY`].
    ///
    /// # Safety
    /// `s` points at a live map value that is only ever updated through this.
    #[inline(always)]
    pub unsafe fn add_shared(s: *mut Self, ns: u64, failed: bool) -> bool {
        use crate::shared;
        use core::ptr::addr_of_mut;
        // SAFETY: fields of a live value, each 8-byte aligned; the caller's contract.
        unsafe {
            // The bucket first, so that its many paths end before the extremes' retries
            // (the verifier walks each path through what follows it); the count last: a
            // reader that sees the wait counted sees its extremes too.
            let b = crate::log2_bucket(ns);
            if b < HIST_BUCKETS {
                shared::add(addr_of_mut!((*s).hist[b]), 1);
            }
            let stored = shared::store_min(addr_of_mut!((*s).min_ns), ns)
                & shared::store_max(addr_of_mut!((*s).max_ns), ns);
            if failed {
                shared::add(addr_of_mut!((*s).failed), 1);
            }
            shared::add(addr_of_mut!((*s).total_ns), ns);
            shared::add(addr_of_mut!((*s).count), 1);
            stored
        }
    }
}

impl Default for ContentionStats {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// What the probes learned about a lock's owner when they first saw it contended.
pub const LOCK_KIND_MMAP_LOCK: u32 = 1;
pub const LOCK_KIND_SIGLOCK: u32 = 2;
pub const LOCK_KIND_PI_LOCK: u32 = 3;
/// The lock inside an `mmap_lock` that its waiters contend too: the spinlock guarding its
/// wait list (`rw_semaphore.wait_lock`), or on PREEMPT_RT its `rwbase.rtmutex`.
pub const LOCK_KIND_MMAP_WAIT_LOCK: u32 = 4;
/// A field of a slab object: `LockInfo::cache` names the cache (`bpf_get_kmem_cache`),
/// `object` is the object's address and `offset` the lock's place in it.
pub const LOCK_KIND_SLAB: u32 = 5;
/// The split page-table lock of a page-table page (`ptdesc.ptl`, the page's type checked
/// as the kernel's `PageTable()` does); `object` is the page's `struct page`, and
/// `tgid`/`comm` are the waiter's (whose mm, by inference, the table belongs to).
pub const LOCK_KIND_PAGE_TABLE: u32 = 6;
/// A lock the probes cannot name: in no slab object nor page-table page (so in no task's
/// structures either): static, per-CPU or boot-time data, named (if at all) in userspace.
/// Kept so that its later waits skip the search.
pub const LOCK_KIND_UNNAMED: u32 = 7;

/// A slab cache's name as the kernel spells it (`kmem_cache.name`), NUL-padded.
pub const CACHE_NAME_LEN: usize = 32;

/// Per-lock identity found in the kernel at `contention_begin`: the lock is a field of the
/// waiter's own `mm_struct`, `sighand_struct` or `task_struct`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockInfo {
    /// One of `LOCK_KIND_*`.
    pub kind: u32,
    /// Process that owns the structure holding the lock.
    pub tgid: u32,
    /// The process's `comm` (its thread group leader's) at that moment; for a
    /// `pi_lock`, the thread's own.
    pub comm: [u8; 16],
    /// For a `pi_lock`: the thread whose lock it is (0: not known).
    pub tid: u32,
    /// `LOCK_KIND_SLAB` with `has_ident`: the identity word's offset in the object.
    pub ident_off: u32,
    /// `LOCK_KIND_SLAB`: the object holding the lock; `LOCK_KIND_PAGE_TABLE`: the page.
    pub object: u64,
    /// `LOCK_KIND_SLAB` with `has_ident`: the object's identity word (an inode's `i_ino`),
    /// read where `CACHE_IDENTS` gave its offset for the cache.
    pub ident: u64,
    /// `LOCK_KIND_SLAB`: the lock's offset in the object.
    pub offset: u32,
    /// `IDENT_*`.
    pub has_ident: u32,
    /// The address's owner generation this identity is of: 0 for the first object seen
    /// at the address, one more each time the probes saw it freed and reused (see
    /// [`LockGenKey`]). The waits on the lock carry it in their flags ([`flags_gen`]).
    /// In the first 64 bytes with every field a contended wait reads, before `cache`.
    pub generation: u32,
    pub _pad: u32,
    /// `LOCK_KIND_SLAB`: the cache's name.
    pub cache: [u8; CACHE_NAME_LEN],
}
assert_size!(LockInfo, 96);
const _: () = assert!(core::mem::offset_of!(LockInfo, generation) < 64);

/// Key of `LOCK_INFO_PAST`: the identity of an earlier owner generation of a lock
/// address, kept when the probes saw the address freed and reused (another object, or
/// another process's own lock, at the same place) so that each owner's waits keep its
/// own name. `LOCK_INFO` holds the current generation; `LOCK_GENS` the current
/// generation number of every address seen reused.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockGenKey {
    pub lock: u64,
    pub generation: u32,
    pub _pad: u32,
}
assert_size!(LockGenKey, 16);

/// Addresses seen reused (`LOCK_GENS`), and earlier generations' identities kept
/// (`LOCK_INFO_PAST`). Full: a further reuse is only marked in the name, as before
/// generations (`IDENT_REUSED`), and counted (`CNT_LOST_LOCK_GEN`).
pub const LOCK_GENS_MAX_ENTRIES: u32 = 8192;

/// Where a wait's owner generation sits in the flags of its keys (`ContentionKey`,
/// `HolderKey`, `WaitStart`): above the `LCB_F_*` bits, below `WAIT_EVIDENCE_ONLY`.
pub const GEN_SHIFT: u32 = 8;
/// The highest generation a key can carry; an address reused more often stays there,
/// its later reuses marked in the name.
pub const GEN_MAX: u32 = (1 << (31 - GEN_SHIFT)) - 1;
/// The bits of a key's flags that are the wait's kind (`LCB_F_*` and unknown bits).
pub const FLAGS_KIND_MASK: u32 = (1 << GEN_SHIFT) - 1;

/// The `LCB_F_*` kind of a key's flags, without the generation.
#[inline(always)]
pub const fn flags_kind(flags: u32) -> u32 {
    flags & FLAGS_KIND_MASK
}

/// The owner generation of a key's flags.
#[inline(always)]
pub const fn flags_gen(flags: u32) -> u32 {
    (flags & !WAIT_EVIDENCE_ONLY) >> GEN_SHIFT
}

/// `LockInfo::has_ident`: the object has no identity word lockscope reads.
pub const IDENT_NONE: u32 = 0;
/// `LockInfo::has_ident`: `ident` is the identity of the one object seen at the address.
pub const IDENT_ONE: u32 = 1;
/// `LockInfo::has_ident`: later waits found another object at the address (freed and
/// reused): `ident` is the first one's, and the name says so.
pub const IDENT_REUSED: u32 = 2;

/// Where dynamic locks can be named (the `SLAB_CONFIG` global): offsets from BTF.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlabConfig {
    /// `PLACE_*` bits: what is named.
    pub kinds: u32,
    pub page_size: u32,
    pub off_cache_name: u32,
    pub off_cache_size: u32,
    pub off_cache_oo: u32,
    pub off_cache_red_left_pad: u32,
    pub off_ptdesc_ptl: u32,
    pub off_page_type: u32,
    /// `PGTY_table`: the top byte of a page-table page's `page_type`.
    pub page_type_table: u32,
    /// `sizeof(struct page)`.
    pub page_struct_size: u32,
    /// 1: the `bpf_task_from_pid` and `bpf_task_release` kfuncs are there (Linux 6.2+):
    /// a holder's kernel stack is taken the first time a (lock, holder) is waited for,
    /// and a process's own lock found reused by a later process.
    pub task_kfuncs: u32,
    pub _pad: u32,
}
assert_size!(SlabConfig, 48);

/// `SlabConfig::kinds`: slab objects (the `bpf_get_kmem_cache` kfunc is there).
pub const PLACE_SLAB: u32 = 1;
/// `SlabConfig::kinds`: page-table pages.
pub const PLACE_PAGE_TABLE: u32 = 2;

/// The placeholder helper number of a call the loader rewrites into a call of the kernel
/// function `bpf_get_kmem_cache` (Linux 6.13+), or into `r0 = 0` where the kernel lacks it.
pub const KFUNC_GET_KMEM_CACHE: i32 = 0x4b4d_4301;
/// Placeholder of `bpf_task_from_pid` (Linux 6.2+): a referenced task, or 0.
pub const KFUNC_TASK_FROM_PID: i32 = 0x4b4d_4302;
/// Placeholder of `bpf_task_release`, the reference's release.
pub const KFUNC_TASK_RELEASE: i32 = 0x4b4d_4303;

/// Slab caches whose objects' identity word lockscope reads, by name: the value is the
/// word's offset in the object.
pub const CACHE_IDENTS_MAX_ENTRIES: u32 = 64;

/// `WaitStart::flags` bit: a spinning wait of a task outside the target, kept only as
/// real-time lock activity (`RT_EVIDENCE_ALL`), never aggregated.
pub const WAIT_EVIDENCE_ONLY: u32 = 1 << 31;

/// A wait in progress, kept from `contention_begin` to `contention_end`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitStart {
    pub ts_ns: u64,
    pub lock: u64,
    pub flags: u32,
    /// Process of the waiter.
    pub tgid: u32,
    pub stack: u64,
    /// Who held the lock when the wait began (0: not known; see `HolderKey`).
    pub holder_tid: u32,
    pub holder_tgid: u32,
}
assert_size!(WaitStart, 40);

/// Kernel stack frames kept per distinct stack, innermost first, zero-padded.
pub const STACK_DEPTH: usize = 24;
pub type StackFrames = [u64; STACK_DEPTH];

/// FNV-1a over the frames: the key of a stack in `STACKS`. Stacks are stored by content
/// hash (not `bpf_get_stackid`'s bucket index) so that two hot stacks never evict or
/// refuse each other; 0 is reserved for "no stack".
#[inline(always)]
pub fn stack_hash(frames: &StackFrames) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < STACK_DEPTH {
        h ^= frames[i];
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    // 0 is "no stack" and u64::MAX is STACK_NOT_SAMPLED.
    if h == 0 || h == u64::MAX { 1 } else { h }
}

/// How many spinning waits may nest on one CPU (an interrupt contending a spinlock while
/// the CPU already spins on another, and so on).
pub const CPU_WAIT_MAX_DEPTH: u32 = 4;

/// Which tasks the probes record. Filtering happens in the kernel.
pub const FILTER_ALL: u32 = 0;
/// Only processes in the `TARGETS` map (a pid, or a command's process tree, which the
/// fork probe extends).
pub const FILTER_TGIDS: u32 = 1;
/// Only tasks in the cgroup `cgroup_id` or below it.
pub const FILTER_CGROUP: u32 = 2;

/// Read-only configuration of the probes, set by the loader before the programs load.
/// Field offsets come from the running kernel's BTF.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeConfig {
    /// One of `FILTER_*`.
    pub filter_mode: u32,
    /// Depth of the target cgroup below the cgroup v2 root (`FILTER_CGROUP`).
    pub cgroup_level: u32,
    pub cgroup_id: u64,
    /// Bit `f` set: record waits whose flags equal `f` (flags < 64).
    pub flags_mask: u64,
    pub off_task_mm: u32,
    pub off_task_tgid: u32,
    pub off_task_sighand: u32,
    pub off_task_pi_lock: u32,
    pub off_mm_mmap_lock: u32,
    pub off_sighand_siglock: u32,
    pub off_task_group_leader: u32,
    pub off_task_comm: u32,
    /// `rw_semaphore.wait_lock`, or on PREEMPT_RT `rwbase` + `rwbase_rt.rtmutex`.
    pub off_rwsem_wait_lock: u32,
    /// In `FILTER_TGIDS` mode, children forked by this process (lockscope itself, starting
    /// the traced command) become targets too; 0 for none.
    pub launcher_tgid: u32,
    /// `NAME_*` bits: the lock fields the probes may name (their offsets are in BTF).
    pub name_kinds: u32,
    pub off_task_pid: u32,
    /// Where a sleeping lock keeps its holder, for the `HOLDER_*` kinds set in
    /// `holder_kinds`: `mutex.owner`, `rw_semaphore.owner`, `rt_mutex_base.owner`.
    pub off_mutex_owner: u32,
    pub off_rwsem_owner: u32,
    pub off_rtmutex_owner: u32,
    pub holder_kinds: u32,
    /// `task_struct.se.cfs_rq`, `cfs_rq.rq` and `rq.__lock` (`NAME_RQ_LOCK`): the
    /// current task's runqueue, to learn each CPU's runqueue lock.
    pub off_task_cfs_rq: u32,
    pub off_cfs_rq_rq: u32,
    pub off_rq_lock: u32,
    /// `rt_mutex_base.waiters.rb_leftmost`: an rtmutex's top waiter, which an rtmutex
    /// being handed over (no owner, `RT_MUTEX_HAS_WAITERS` set) goes to
    /// (`HOLDER_RTMUTEX_PENDING`).
    pub off_rtmutex_leftmost: u32,
    /// Stack walks are budgeted per CPU: each costs this many ns of credit, which
    /// accrues with time up to `stack_burst_ns` (0: walk the stack of every wait). A wait
    /// that finds too little credit is timed and counted exactly, without a stack
    /// (`STACK_NOT_SAMPLED`).
    pub stack_cost_ns: u64,
    pub stack_burst_ns: u64,
    /// `rt_mutex_waiter`'s tree node (`tree.entry`, before 6.6 `tree_entry`) and `task`.
    pub off_rtwaiter_entry: u32,
    pub off_rtwaiter_task: u32,
}
assert_size!(ProbeConfig, 128);

/// `ProbeConfig::name_kinds`: `mm_struct.mmap_lock` (and its `wait_lock`), `sighand.siglock`
/// and `task_struct.pi_lock` have their offsets.
pub const NAME_MMAP_LOCK: u32 = 1;
pub const NAME_SIGLOCK: u32 = 2;
pub const NAME_PI_LOCK: u32 = 4;
/// Per-CPU runqueue locks (`rq.__lock`), learnt from the current task's runqueue.
pub const NAME_RQ_LOCK: u32 = 8;
pub const NAME_ALL: u32 = NAME_MMAP_LOCK | NAME_SIGLOCK | NAME_PI_LOCK | NAME_RQ_LOCK;

/// `ProbeConfig::holder_kinds`: the lock kinds whose holder field has its offset.
pub const HOLDER_MUTEX: u32 = 1;
pub const HOLDER_RWSEM: u32 = 2;
pub const HOLDER_RTMUTEX: u32 = 4;
/// An rtmutex being handed over is blamed on its top waiter, which it goes to
/// (`rt_mutex_base.waiters`, `rt_mutex_waiter.task`).
pub const HOLDER_RTMUTEX_PENDING: u32 = 8;
/// `RT_MUTEX_HAS_WAITERS`, bit 0 of an rtmutex's owner word.
pub const RT_MUTEX_HAS_WAITERS: u64 = 1;

/// Holder tid of a wait on an rwsem owned by readers (which readers is not kept).
pub const HOLDER_READERS: u32 = u32::MAX;

/// The low bits of a mutex's, rwsem's or rtmutex's owner word are flags (at most 3 of
/// them; a `task_struct` is far more aligned).
pub const OWNER_FLAGS_MASK: u64 = 0x7;
/// `RWSEM_READER_OWNED`: the rwsem is held by readers.
pub const RWSEM_READER_OWNED: u64 = 1;

/// A contended wait's holder, as the lock word named it at `contention_begin`: waits and
/// wait time per (lock, flags, holder thread).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HolderKey {
    pub lock: u64,
    /// Holder thread id (`HOLDER_READERS`: readers), and its process.
    pub tid: u32,
    pub tgid: u32,
    /// The wait's `LCB_F_*` flags (the entry's type) and owner generation, as in
    /// `ContentionKey::flags`.
    pub flags: u32,
    pub _pad: u32,
}
assert_size!(HolderKey, 24);

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HolderStats {
    pub count: u64,
    pub total_ns: u64,
}
assert_size!(HolderStats, 16);

pub const HOLDERS_MAX_ENTRIES: u32 = 16384;

/// The stack id of a wait whose stack was not walked (the per-CPU budget was spent):
/// its figures count for its lock, task and type, not for any caller.
pub const STACK_NOT_SAMPLED: u64 = u64::MAX;

/// Stack walks per CPU per second the default budget allows, and its burst. A walk costs
/// about 2 us of kernel time when walks are frequent and 10-25 us when they are as sparse
/// as this budget keeps them (the unwinder's tables are no longer in the caches; measured
/// under mmap-churn on the test machines), so the default spends at most ~0.1% of each
/// CPU on walks; below 50 contended waits a second per CPU every wait's stack is walked.
pub const STACK_WALKS_PER_CPU_S: u64 = 50;
pub const STACK_WALK_BURST: u64 = 20;

/// Per-CPU state of the stack budget.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackBudget {
    pub credit_ns: u64,
    pub last_ns: u64,
}
assert_size!(StackBudget, 16);

/// Would [`stack_budget_take`] spend a walk now? Changes nothing: lets a caller skip
/// the work that decides whether it wants a walk (a map lookup) when it could not have
/// one anyway.
#[inline(always)]
pub const fn stack_budget_has(b: &StackBudget, now: u64, cost: u64, burst: u64) -> bool {
    if cost == 0 {
        return true;
    }
    let credit = b.credit_ns.saturating_add(now.saturating_sub(b.last_ns));
    let credit = if credit > burst { burst } else { credit };
    credit >= cost
}

/// Spend one stack walk of credit if there is enough (pure: shared with the tests).
#[inline(always)]
pub const fn stack_budget_take(b: &mut StackBudget, now: u64, cost: u64, burst: u64) -> bool {
    if cost == 0 {
        return true;
    }
    let credit = b.credit_ns.saturating_add(now.saturating_sub(b.last_ns));
    let credit = if credit > burst { burst } else { credit };
    b.last_ns = now;
    if credit >= cost {
        b.credit_ns = credit - cost;
        true
    } else {
        b.credit_ns = credit;
        false
    }
}

/// Slots of the per-CPU `COUNTERS` array: events seen, and everything that could not be
/// stored. Nothing is dropped without being counted here.
pub const CNT_BEGIN: u32 = 0;
pub const CNT_END: u32 = 1;
/// `contention_end` with no matching begin (the wait began before tracing started, or its
/// begin was filtered or lost).
pub const CNT_UNPAIRED_END: u32 = 2;
/// A new per-task wait replaced one whose end never came.
pub const CNT_UNPAIRED_BEGIN: u32 = 3;
/// The aggregation map was full: a whole wait was not aggregated.
pub const CNT_LOST_STATS_FULL: u32 = 4;
/// A thread's wait storage could not be made (the kernel was out of memory): a wait was
/// not timed.
pub const CNT_LOST_TASK_WAIT_FULL: u32 = 5;
/// Spinning waits nested deeper than `CPU_WAIT_MAX_DEPTH` on one CPU: a wait was not timed.
pub const CNT_LOST_CPU_NESTING: u32 = 6;
/// The kernel stack could not be read or stored (stack map full): aggregated with no stack.
pub const CNT_LOST_STACK: u32 = 7;
/// The lock-identity map was full: a lock stays unnamed.
pub const CNT_LOST_LOCK_INFO: u32 = 8;
/// The target map was full: a forked child of the target was not followed.
pub const CNT_LOST_TARGET_FULL: u32 = 9;
/// Waits skipped because their type was not asked for (`--types`).
pub const CNT_TYPE_FILTERED: u32 = 10;
/// Spinning waits whose `contention_end` never reached the probe (the kernel skips a BPF
/// program that an interrupt re-enters on the same CPU): begun but not timed.
pub const CNT_LOST_END_MISSED: u32 = 11;
/// Keys created in `CONTENTION_STATS` (an LRU map: created minus live entries is what
/// it evicted) and stacks stored in `STACKS` (also LRU).
pub const CNT_STATS_CREATED: u32 = 12;
pub const CNT_STACKS_CREATED: u32 = 13;
/// Waits timed and counted without a stack walk (the stack budget was spent).
pub const CNT_STACK_NOT_SAMPLED: u32 = 14;
/// Sleeping waits put in a thread's `TASK_WAITS` storage and taken out by their end:
/// created minus ended minus those in progress is what went with a thread freed inside
/// its wait.
pub const CNT_TASK_WAITS_CREATED: u32 = 15;
pub const CNT_TASK_WAITS_ENDED: u32 = 16;
/// Keys created in `HOLDER_STATS` (LRU: created minus live is what it evicted).
pub const CNT_HOLDERS_CREATED: u32 = 17;
/// A lock address seen reused whose earlier owner's identity could not be kept
/// (`LOCK_GENS` or `LOCK_INFO_PAST` full, or `GEN_MAX` reached): the owners' waits share
/// one entry, its name marked as reused.
pub const CNT_LOST_LOCK_GEN: u32 = 18;
/// Lock addresses seen freed and reused (each a new owner generation).
pub const CNT_LOCK_REUSED: u32 = 19;
/// Waits whose minimum or maximum could not be stored: other CPUs kept moving the same
/// shared entry's extreme (see `shared::MINMAX_TRIES`). Counted, totals and buckets
/// stay exact; only that entry's min or max may miss the wait.
pub const CNT_LOST_MINMAX: u32 = 20;
pub const COUNTERS_LEN: u32 = 21;

/// Names of the `COUNTERS` slots, as shown in reports and metrics.
pub const COUNTER_NAMES: [&str; COUNTERS_LEN as usize] = [
    "begin",
    "end",
    "unpaired_end",
    "unpaired_begin",
    "stats_map_full",
    "task_wait_map_full",
    "cpu_nesting_overflow",
    "stack_missing",
    "lock_info_map_full",
    "target_map_full",
    "type_filtered",
    "end_missed",
    "stats_created",
    "stacks_created",
    "stack_not_sampled",
    "task_waits_created",
    "task_waits_ended",
    "holders_created",
    "lock_gen_map_full",
    "lock_reused",
    "min_max_missed",
];

/// Map sizes (entries). Userspace may override them at load.
pub const STATS_MAX_ENTRIES: u32 = 16384;
pub const LOCK_INFO_MAX_ENTRIES: u32 = 16384;
pub const TARGETS_MAX_ENTRIES: u32 = 8192;
pub const STACKS_MAX_ENTRIES: u32 = 8192;
pub const COMMS_MAX_ENTRIES: u32 = 8192;

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for ContentionKey {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for ContentionStats {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for LockInfo {}
    // SAFETY: repr(C) u32 fields only.
    unsafe impl aya::Pod for SlabConfig {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for ProbeConfig {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for WaitStart {}
    // SAFETY: as above.
    unsafe impl aya::Pod for HolderKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for LockGenKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for HolderStats {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for StackBudget {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_updates_every_figure_once() {
        let mut s = ContentionStats::EMPTY;
        s.add(1000, false);
        s.add(10, true);
        // A zeroed slot (another CPU's) takes its first wait as the minimum.
        let mut z = ContentionStats {
            min_ns: 0,
            ..ContentionStats::EMPTY
        };
        z.add(7, false);
        assert_eq!(
            (s.count, s.failed, s.total_ns, s.min_ns, s.max_ns),
            (2, 1, 1010, 10, 1000)
        );
        assert_eq!(
            s.hist[crate::log2_bucket(1000)] + s.hist[crate::log2_bucket(10)],
            2
        );
        assert_eq!(z.min_ns, 7);
    }

    #[test]
    fn the_stack_budget_refills_with_time_up_to_its_burst() {
        let (cost, burst) = (500_000, 2_000_000); // 2000/s, burst of 4
        let mut b = StackBudget::default();
        // A long idle start fills the burst: 4 walks, then none.
        let t = 10_000_000_000;
        let mut takes = [false; 6];
        for t_ in takes.iter_mut() {
            *t_ = stack_budget_take(&mut b, t, cost, burst);
        }
        assert_eq!(takes, [true, true, true, true, false, false]);
        // Half a millisecond later: one more.
        assert!(stack_budget_take(&mut b, t + 500_000, cost, burst));
        assert!(!stack_budget_take(&mut b, t + 500_000, cost, burst));
        // A clock that goes backwards (another CPU's stamp) adds nothing.
        assert!(!stack_budget_take(&mut b, t, cost, burst));
        // No budget: every wait.
        assert!(stack_budget_take(&mut b, t, 0, 0));
    }

    #[test]
    fn asking_the_stack_budget_spends_nothing_and_agrees_with_taking() {
        let (cost, burst) = (500_000, 1_000_000); // burst of 2
        let mut b = StackBudget::default();
        let t = 10_000_000_000;
        for step in 0..6u64 {
            let now = t + step * 200_000;
            let before = b;
            let has = stack_budget_has(&b, now, cost, burst);
            assert_eq!(b, before, "asking changed the budget");
            // Asked twice: the same answer.
            assert_eq!(stack_budget_has(&b, now, cost, burst), has);
            assert_eq!(
                stack_budget_take(&mut b, now, cost, burst),
                has,
                "step {step}"
            );
        }
        assert!(stack_budget_has(&b, t, 0, 0));
    }

    #[test]
    fn no_stack_hashes_to_the_reserved_ids() {
        assert_ne!(stack_hash(&[0; STACK_DEPTH]), 0);
        assert_ne!(stack_hash(&[7; STACK_DEPTH]), STACK_NOT_SAMPLED);
    }
}
