//! `lock:contention_begin` / `lock:contention_end` (tracepoint tier, Linux 5.19+).
//!
//! A wait starts at `contention_begin(lock, flags)` and ends at `contention_end(lock, ret)`.
//! Spinning waits (spinlock, rwlock) never leave their CPU and are timed in a small per-CPU
//! stack, so a spinlock contended inside an interrupt during another spin nests correctly;
//! every other wait may sleep and is timed per task. A spinlock contended by a task that is
//! itself in a sleeping-lock wait (e.g. the rwsem `wait_lock`) lands on the per-CPU stack
//! and leaves the per-task wait untouched. Finished waits are aggregated per
//! (lock, process, kernel stack, flags) in a per-CPU hash: count, failures, total, min, max
//! and a log2 histogram.

use aya_ebpf::{
    EbpfContext as _, Global,
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_current_task, bpf_get_stack, bpf_get_task_stack,
        bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_kernel_str_bytes,
    },
    macros::{btf_map, btf_tracepoint, map},
    maps::{HashMap, LruHashMap, PerCpuArray},
    programs::BtfTracePointContext,
};
use lockscope_common::*;

use crate::maps::{
    CONFIG, TaskStorage, count, count_n, current_is_target, current_process_comm, remember_cgroup,
};

/// Finished waits, aggregated. LRU: an always-on daemon meets ever new (lock, stack,
/// process) keys; the least recently updated make room, counted (`CNT_STATS_CREATED`).
/// Shared, not per-CPU: its size does not grow with the CPUs, and making or freeing it
/// allocates no per-CPU memory (`lockscope_common::shared`).
#[map]
static CONTENTION_STATS: LruHashMap<ContentionKey, ContentionStats> =
    LruHashMap::with_max_entries(STATS_MAX_ENTRIES, 0);

/// Sleeping waits in progress, in each thread's own storage (found from the task: no
/// hash, no lock, no eviction; freed with the thread). A slot whose `lock` is 0 holds no
/// wait. Userspace counts the live ones with [`contention_task_iter`].
#[btf_map]
static TASK_WAITS: TaskStorage<WaitStart> = TaskStorage::new();

/// Spinning waits in progress on each CPU: a small stack, `CPU_WAIT_DEPTH[0]` deep, of
/// slots in `CPU_WAIT_SLOTS`. Slots are map entries (not an array inside one value) so that
/// the index needs no verifier-visible bounds arithmetic.
#[map]
static CPU_WAIT_DEPTH: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);
#[map]
static CPU_WAIT_SLOTS: PerCpuArray<WaitStart> =
    PerCpuArray::with_max_entries(CPU_WAIT_MAX_DEPTH, 0);

/// Locks that are a field of the waiter's own mm / sighand / task.
#[map]
static LOCK_INFO: LruHashMap<u64, LockInfo> =
    LruHashMap::with_max_entries(LOCK_INFO_MAX_ENTRIES, 0);

/// The current owner generation of each lock address seen freed and reused (absent: 0).
/// Written only when a reuse is seen; read only when a lock is named.
#[map]
static LOCK_GENS: HashMap<u64, u32> = HashMap::with_max_entries(LOCK_GENS_MAX_ENTRIES, 0);

/// The identities of earlier owner generations, by (lock, generation): what `LOCK_INFO`
/// held for the address before the reuse was seen.
#[map]
static LOCK_INFO_PAST: HashMap<LockGenKey, LockInfo> =
    HashMap::with_max_entries(LOCK_GENS_MAX_ENTRIES, 0);

/// Command name of each process seen waiting.
#[map]
static COMMS: LruHashMap<u32, [u8; 16]> = LruHashMap::with_max_entries(COMMS_MAX_ENTRIES, 0);

/// Kernel stacks at `contention_begin`, by content hash. LRU, like the stats.
#[map]
static STACKS: LruHashMap<u64, StackFrames> = LruHashMap::with_max_entries(STACKS_MAX_ENTRIES, 0);

/// Each CPU's runqueue lock (`&rq->__lock`), learnt once from the task running there:
/// userspace names a lock at one of these addresses `rq_lock cpu N`.
#[map]
static RQ_LOCKS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Where dynamic locks are named (`name_dynamic_lock`); set by the loader.
#[unsafe(no_mangle)]
static SLAB_CONFIG: Global<SlabConfig> = Global::new(SlabConfig {
    kinds: 0,
    page_size: 4096,
    off_cache_name: 0,
    off_cache_size: 0,
    off_cache_oo: 0,
    off_cache_red_left_pad: 0,
    off_ptdesc_ptl: 0,
    off_page_type: 0,
    page_type_table: 0,
    page_struct_size: 64,
    task_kfuncs: 0,
    _pad: 0,
});

/// The holder's kernel stack (by content hash in `STACKS`) the first time each
/// (lock, flags, holder) was waited for. LRU like the holders' figures.
#[map]
static HOLDER_STACKS: LruHashMap<HolderKey, u64> =
    LruHashMap::with_max_entries(HOLDERS_MAX_ENTRIES, 0);

/// Slab caches whose objects carry an identity word (an inode's number), by cache name:
/// the word's offset in the object. Filled by userspace from BTF.
#[map]
static CACHE_IDENTS: HashMap<[u8; CACHE_NAME_LEN], u32> =
    HashMap::with_max_entries(CACHE_IDENTS_MAX_ENTRIES, 0);

/// A lock's identity being built (too big for the BPF stack of the deepest chain).
#[map]
static INFO_SCRATCH: PerCpuArray<LockInfo> = PerCpuArray::with_max_entries(1, 0);

/// Per-CPU stack walk budget (see `ProbeConfig::stack_cost_ns`).
#[map]
static STACK_BUDGET: PerCpuArray<StackBudget> = PerCpuArray::with_max_entries(1, 0);

/// Waits and wait time per (lock, flags, holder), for the sleeping locks whose word names
/// its holder. LRU and shared like the stats; created keys counted (`CNT_HOLDERS_CREATED`).
#[map]
static HOLDER_STATS: LruHashMap<HolderKey, HolderStats> =
    LruHashMap::with_max_entries(HOLDERS_MAX_ENTRIES, 0);

/// The wait being started, built here rather than on the BPF stack (6.1's verifier
/// counts the stack of every call chain, and `contention_begin`'s is the deepest). Only
/// `contention_begin` uses it, and the kernel never runs it nested on one CPU.
#[map]
static WAIT_SCRATCH: PerCpuArray<WaitStart> = PerCpuArray::with_max_entries(1, 0);

/// Scratch buffer for reading a stack (too big for the BPF stack).
#[map]
static STACK_SCRATCH: PerCpuArray<StackFrames> = PerCpuArray::with_max_entries(1, 0);

static EMPTY_STATS: ContentionStats = ContentionStats::EMPTY;

#[btf_tracepoint(function = "contention_begin")]
pub fn contention_begin(ctx: BtfTracePointContext) -> i32 {
    let lock: u64 = ctx.arg(0);
    let flags: u32 = ctx.arg(1);
    on_begin(&ctx, lock, flags);
    0
}

#[btf_tracepoint(function = "contention_end")]
pub fn contention_end(ctx: BtfTracePointContext) -> i32 {
    let lock: u64 = ctx.arg(0);
    let ret: i32 = ctx.arg(1);
    on_end(lock, ret);
    0
}

#[inline(always)]
fn on_begin(ctx: &BtfTracePointContext, lock: u64, flags: u32) {
    if flags == LCB_F_READ || flags == LCB_F_WRITE {
        // Before any filter: the rwsem deep tier needs every queueing of its slowpaths.
        crate::probes::rwsem::on_contention_begin(lock);
    }
    let cfg = CONFIG.load();
    learn_rq_lock(&cfg);
    if !current_is_target(&cfg) {
        if is_spinning_wait(flags) && crate::probes::rt::evidence_all() {
            begin_evidence_wait(lock, flags);
        }
        return;
    }
    count(CNT_BEGIN);
    if (cfg.flags_mask >> (flags & 63)) & 1 == 0 {
        count(CNT_TYPE_FILTERED);
        return;
    }
    // SAFETY: a BPF helper without pointer arguments.
    let now = unsafe { bpf_ktime_get_ns() };

    let rwsem = flags == LCB_F_READ || flags == LCB_F_WRITE;
    // A sleeping wait is kept in the thread's own storage, made on its first wait.
    let slot = if is_spinning_wait(flags) {
        None
    } else {
        let Some(w) = TASK_WAITS.current(true) else {
            count(CNT_LOST_TASK_WAIT_FULL);
            return;
        };
        // SAFETY: the current task's storage, used before the program returns; only
        // this task's own sleeping-lock probes touch it, and they never nest.
        let w = unsafe { &mut *w };
        if w.lock != 0 {
            // A mutex that spun first (MUTEX|SPIN) and then sleeps (MUTEX) reports a
            // second begin for the same lock: one wait, timed from the first begin. An
            // rwsem reports one begin per wait: its earlier wait never ended.
            if !rwsem && w.lock == lock {
                // Same lock, same owner generation.
                w.flags = flags | (w.flags & !FLAGS_KIND_MASK);
                return;
            }
            count(CNT_UNPAIRED_BEGIN);
        } else {
            count(CNT_TASK_WAITS_CREATED);
        }
        Some(w)
    };

    // The stack walk is most of a wait's cost: within the per-CPU budget only. The wait
    // itself is timed and counted either way.
    let stack = if take_stack_budget(&cfg, now) {
        kernel_stack(ctx)
    } else {
        count(CNT_STACK_NOT_SAMPLED);
        STACK_NOT_SAMPLED
    };
    let holder = if is_spinning_wait(flags) {
        0
    } else {
        lock_holder(&cfg, lock, flags)
    };
    if holder as u32 != 0 && holder as u32 != HOLDER_READERS {
        remember_holder_stack(&cfg, lock, flags, holder, now);
    }
    let start = match slot {
        Some(w) => w,
        None => {
            let Some(start) = WAIT_SCRATCH.get_ptr_mut(0) else {
                return;
            };
            // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
            unsafe { &mut *start }
        }
    };
    start.ts_ns = now;
    start.lock = lock;
    start.flags = flags;
    start.tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    start.stack = stack;
    start.holder_tid = holder as u32;
    start.holder_tgid = (holder >> 32) as u32;

    if is_spinning_wait(flags) {
        let Some(index) = push_spin_wait(start) else {
            count(CNT_LOST_CPU_NESTING);
            return;
        };
        // Named last (the stack of the deepest call chain is at the verifier's limit);
        // the wait takes the lock's owner generation, which is 0 unless the address was
        // seen reused, so the common case writes nothing.
        let generation = name_lock(&cfg, lock);
        if generation != 0
            && let Some(slot) = CPU_WAIT_SLOTS.get_ptr_mut(index)
        {
            // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
            unsafe { (*slot).flags |= generation << GEN_SHIFT };
        }
        let watched =
            // SAFETY: a map value, only read, before the program returns.
            unsafe { LOCK_INFO.get(lock) }.is_some_and(|i| i.kind == LOCK_KIND_PI_LOCK);
        crate::probes::rt::on_spin_begin(index, lock, watched);
        return;
    }

    // As above: the wait takes the lock's owner generation, written only when not 0.
    let generation = name_lock(&cfg, lock);
    if generation != 0 {
        start.flags |= generation << GEN_SHIFT;
    }
}

/// Learn this CPU's runqueue lock, once: the running task's `se.cfs_rq->rq` is this CPU's
/// runqueue (a running task's runqueue cannot change under it).
#[inline(always)]
fn learn_rq_lock(cfg: &ProbeConfig) {
    if cfg.name_kinds & NAME_RQ_LOCK == 0 {
        return;
    }
    let Some(slot) = RQ_LOCKS.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
    let slot = unsafe { &mut *slot };
    if *slot != 0 {
        return;
    }
    // SAFETY: a BPF helper without pointer arguments.
    let task = unsafe { bpf_get_current_task() };
    let cfs_rq = read_kernel(task + cfg.off_task_cfs_rq as u64);
    if cfs_rq == 0 {
        return;
    }
    let rq = read_kernel(cfs_rq + cfg.off_cfs_rq_rq as u64);
    if rq != 0 {
        *slot = rq + cfg.off_rq_lock as u64;
    }
}

/// The holder of a sleeping lock as its owner word names it (tgid << 32 | tid;
/// `HOLDER_READERS` as the tid for a reader-owned rwsem), or 0 when the word names no
/// one (just released, or a lock kind without an owner field). Out of line: it keeps
/// `contention_begin` within the BPF stack.
#[inline(never)]
fn lock_holder(cfg: &ProbeConfig, lock: u64, flags: u32) -> u64 {
    let kinds = cfg.holder_kinds;
    let rwsem = flags == LCB_F_READ || flags == LCB_F_WRITE;
    let off = if flags & LCB_F_MUTEX != 0 && kinds & HOLDER_MUTEX != 0 {
        cfg.off_mutex_owner
    } else if rwsem && kinds & HOLDER_RWSEM != 0 {
        cfg.off_rwsem_owner
    } else if flags == LCB_F_RT && kinds & HOLDER_RTMUTEX != 0 {
        cfg.off_rtmutex_owner
    } else {
        return 0;
    };
    let word = read_kernel(lock + off as u64);
    if rwsem && word & RWSEM_READER_OWNED != 0 {
        return HOLDER_READERS as u64;
    }
    let mut task = word & !OWNER_FLAGS_MASK;
    if task == 0
        && word & RT_MUTEX_HAS_WAITERS != 0
        && flags == LCB_F_RT
        && kinds & HOLDER_RTMUTEX_PENDING != 0
    {
        // No owner but waiters: the rtmutex is being handed to the top waiter it woke,
        // and no one else may take it (a higher-priority task would have, without a
        // wait). That waiter holds up this one: blame it.
        let node = read_kernel(lock + cfg.off_rtmutex_leftmost as u64);
        if node != 0 {
            task = read_kernel(node - cfg.off_rtwaiter_entry as u64 + cfg.off_rtwaiter_task as u64);
        }
    }
    if task == 0 {
        return 0;
    }
    // `pid` and `tgid` are adjacent in task_struct: one read for both where they are.
    let (tid, tgid) = if cfg.off_task_tgid == cfg.off_task_pid + 4 {
        let both = read_kernel(task + cfg.off_task_pid as u64);
        (both as u32, (both >> 32) as u32)
    } else {
        (
            read_u32(task + cfg.off_task_pid as u64),
            read_u32(task + cfg.off_task_tgid as u64),
        )
    };
    if tid == 0 {
        return 0;
    }
    ((tgid as u64) << 32) | tid as u64
}

#[inline(always)]
fn read_u32(addr: u64) -> u32 {
    // SAFETY: a checked read: a bad address gives an error, never a fault.
    unsafe { bpf_probe_read_kernel(addr as *const u32) }.unwrap_or(0)
}

/// Spinning waits nest strictly on a CPU, so a wait still on the stack long after it
/// began is an orphan whose end never reached us (the kernel skips `contention_end` when
/// it fires inside our own `contention_end`, e.g. on a lock a BPF helper takes). Orphans
/// at the bottom of the stack are never uncovered by a later end: drop them here (counted
/// as `end_missed`) instead of letting them fill the stack.
#[inline(never)]
fn drop_stale_waits(depth: &mut u32, now: u64) {
    for _ in 0..CPU_WAIT_MAX_DEPTH {
        if *depth == 0 {
            return;
        }
        match CPU_WAIT_SLOTS.get(*depth - 1) {
            Some(w) if now.saturating_sub(w.ts_ns) > STALE_SPIN_NS => {
                *depth -= 1;
                count(CNT_LOST_END_MISSED);
            }
            _ => return,
        }
    }
}

/// A spinning wait older than this is taken for an orphan (see `drop_stale_waits`).
const STALE_SPIN_NS: u64 = 50_000_000;

/// Forget the recorded name of process `tgid` (it exec'ed: see `sched_process_exec`).
#[inline(always)]
pub fn forget_comm(tgid: u32) {
    let _ = COMMS.remove(tgid);
}

/// Remember the current process's name (and cgroup) if not yet known. Out of line: only
/// a process's new entries call it.
#[inline(never)]
fn remember_comm() {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    // SAFETY: a map value, only read, before the program returns.
    if unsafe { COMMS.get(tgid) }.is_none() {
        let comm = current_process_comm(&CONFIG.load());
        let _ = COMMS.insert(tgid, comm, BPF_NOEXIST as u64);
        remember_cgroup(tgid);
    }
}

/// Could a stack walk be taken now? Spends nothing (see `take_stack_budget`).
#[inline(always)]
fn has_stack_budget(cfg: &ProbeConfig, now: u64) -> bool {
    match STACK_BUDGET.get(0) {
        Some(b) => stack_budget_has(b, now, cfg.stack_cost_ns, cfg.stack_burst_ns),
        None => true,
    }
}

#[inline(always)]
fn take_stack_budget(cfg: &ProbeConfig, now: u64) -> bool {
    if cfg.stack_cost_ns == 0 {
        return true;
    }
    match STACK_BUDGET.get_ptr_mut(0) {
        // SAFETY: this CPU's slot of a live per-CPU map.
        Some(b) => stack_budget_take(
            unsafe { &mut *b },
            now,
            cfg.stack_cost_ns,
            cfg.stack_burst_ns,
        ),
        None => true,
    }
}

/// A spinning wait of a task outside the target, with `--latency-threshold`: on the CPU's
/// wait stack like the target's, marked so that its end is real-time lock activity only
/// (never in the lock table, never counted as a begin).
#[inline(never)]
fn begin_evidence_wait(lock: u64, flags: u32) {
    let w = WaitStart {
        // SAFETY: a BPF helper without pointer arguments.
        ts_ns: unsafe { bpf_ktime_get_ns() },
        lock,
        flags: flags | WAIT_EVIDENCE_ONLY,
        tgid: (bpf_get_current_pid_tgid() >> 32) as u32,
        stack: STACK_NOT_SAMPLED,
        holder_tid: 0,
        holder_tgid: 0,
    };
    // A full stack loses only evidence: nothing of the table.
    let Some(index) = push_spin_wait(&w) else {
        return;
    };
    // SAFETY: a map value, only read, before the program returns.
    let watched = unsafe { LOCK_INFO.get(lock) }.is_some_and(|i| i.kind == LOCK_KIND_PI_LOCK)
        || crate::probes::rt::pi_lock_task(lock).is_some();
    crate::probes::rt::on_spin_begin(index, lock, watched);
}

/// Push `w` on this CPU's stack of spinning waits (dropping the stale ones first): its
/// slot, or `None` when the stack is full.
#[inline(always)]
fn push_spin_wait(w: &WaitStart) -> Option<u32> {
    let depth = CPU_WAIT_DEPTH.get_ptr_mut(0)?;
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
    let depth = unsafe { &mut *depth };
    drop_stale_waits(depth, w.ts_ns);
    let slot = CPU_WAIT_SLOTS.get_ptr_mut(*depth)?;
    // SAFETY: as above.
    unsafe { *slot = *w };
    let index = *depth;
    *depth += 1;
    Some(index)
}

/// The first wait for a (lock, flags, holder): take the holder's kernel stack, within
/// the stack budget. Out of line: it keeps `contention_begin` within the BPF stack. Keyed
/// by the wait's kind alone: one stack per holder of an address, whatever its owner
/// generation.
#[inline(never)]
fn remember_holder_stack(cfg: &ProbeConfig, lock: u64, flags: u32, holder: u64, now: u64) {
    if SLAB_CONFIG.load().task_kfuncs == 0 {
        return;
    }
    let key = HolderKey {
        lock,
        tid: holder as u32,
        tgid: (holder >> 32) as u32,
        flags,
        _pad: 0,
    };
    // The budget first: it is spent on most waits of a busy lock, and then the lookup
    // (a hash of the 24-byte key) would decide nothing.
    if !has_stack_budget(cfg, now)
        // SAFETY: a map value, only read, before the program returns.
        || unsafe { HOLDER_STACKS.get(key) }.is_some()
        || !take_stack_budget(cfg, now)
    {
        return;
    }
    let stack = holder_stack(holder as u32);
    if stack != 0 {
        let _ = HOLDER_STACKS.insert(key, stack, BPF_NOEXIST as u64);
    }
}

/// Thread `tid`'s kernel stack, stored once under its hash (0: none). The task is taken
/// by `bpf_task_from_pid` (a placeholder call the loader resolves; 0 where the kernel
/// lacks it) and released at once.
#[inline(always)]
fn holder_stack(tid: u32) -> u64 {
    let Some(buf) = STACK_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    let (from_pid, release) = task_kfuncs();
    // SAFETY: as above; a pid the kernel does not know gives null.
    let task = unsafe { from_pid(tid as i32) };
    if task.is_null() {
        return 0;
    }
    let size = size_of::<StackFrames>() as u32;
    // SAFETY: `task` is a referenced task, `buf` a map value of `size` bytes.
    let n = unsafe { bpf_get_task_stack(task.cast(), buf.cast(), size, 0) };
    // SAFETY: the reference taken above, released once.
    unsafe { release(task) };
    if n <= 0 {
        return 0;
    }
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
    store_stack(unsafe { &*buf })
}

/// Read the kernel stack, store it once under its hash, return the hash (0: none).
#[inline(always)]
fn kernel_stack(ctx: &BtfTracePointContext) -> u64 {
    let Some(buf) = STACK_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    let size = size_of::<StackFrames>() as u32;
    // The kernel zero-fills the buffer past the frames it wrote.
    // SAFETY: the offset is a field of this tracepoint's record, whose layout its format fixes.
    let n = unsafe { bpf_get_stack(ctx.as_ptr(), buf.cast(), size, 0) };
    if n <= 0 {
        count(CNT_LOST_STACK);
        return 0;
    }
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
    store_stack(unsafe { &*buf })
}

/// Store `frames` once under their hash in `STACKS`; the hash, or 0 when it could not.
#[inline(always)]
fn store_stack(frames: &StackFrames) -> u64 {
    let hash = stack_hash(frames);
    // SAFETY: a map value, only read, before the program returns.
    if unsafe { STACKS.get(hash) }.is_none() {
        match STACKS.insert(hash, frames, BPF_NOEXIST as u64) {
            Ok(()) => count(CNT_STACKS_CREATED),
            Err(-17) => {} // another CPU stored it first
            Err(_) => {
                count(CNT_LOST_STACK);
                return 0;
            }
        }
    }
    hash
}

/// Remember when `lock` is the current task's `mm->mmap_lock`, `sighand->siglock` or
/// `pi_lock`, with the owning process, the first time we see it contended; name it anew
/// when the object at its address is seen freed and reused. The lock's owner generation.
#[inline(always)]
fn name_lock(cfg: &ProbeConfig, lock: u64) -> u32 {
    if let Some(info) = LOCK_INFO.get_ptr_mut(lock) {
        // SAFETY: a live map value, used before the program returns; a racing writer
        // can only set the same flag.
        let info = unsafe { &mut *info };
        if info.kind == LOCK_KIND_SLAB && own_slab_object(cfg, info) {
            // Named from its slab cache by another process's wait (one reading this
            // process's /proc files): the owner's own name is better. Named again
            // below, by the one inlined copy of the naming (a second call level would
            // take the combined stack over the verifier's limit on older kernels).
            let _ = LOCK_INFO.remove(lock);
        } else if !note_reuse(cfg, info, lock) {
            return info.generation;
        }
    }
    name_lock_of_current(cfg, lock);
    // SAFETY: a map value, only read, before the program returns.
    unsafe { LOCK_GENS.get(lock) }.copied().unwrap_or(0)
}

/// A lock named before: when the object at its address is no longer the one it was
/// named after, keep that identity as an earlier generation (`retire`) so the lock is
/// named anew, or else mark it reused. True when retired.
#[inline(always)]
fn note_reuse(cfg: &ProbeConfig, info: &mut LockInfo, lock: u64) -> bool {
    // Marked reused already (its generation could not be kept): nothing more to see.
    if info.has_ident == IDENT_REUSED {
        return false;
    }
    // An object with an identity word: still the same object at this address? A
    // process's own lock: waited for by another process as its own?
    let pid_tgid = bpf_get_current_pid_tgid();
    let reused = if info.has_ident == IDENT_ONE {
        read_kernel(info.object + info.ident_off as u64) != info.ident
    } else if info.kind == LOCK_KIND_PI_LOCK {
        // The waiter's own pi_lock, named after another thread: that thread's
        // task_struct was freed and this one's took its memory.
        info.tid != 0 && info.tid != pid_tgid as u32 && {
            // SAFETY: a BPF helper without pointer arguments.
            let task = unsafe { bpf_get_current_task() };
            lock == task + cfg.off_task_pi_lock as u64
        }
    } else {
        info.has_ident == IDENT_NONE
            && matches!(
                info.kind,
                LOCK_KIND_MMAP_LOCK | LOCK_KIND_MMAP_WAIT_LOCK | LOCK_KIND_SIGLOCK
            )
            && (pid_tgid >> 32) as u32 != info.tgid
            && owner_replaced(cfg, lock, info.kind, info.tgid)
    };
    if !reused {
        return false;
    }
    if retire(lock, info) {
        return true;
    }
    info.has_ident = IDENT_REUSED;
    false
}

/// `lock`'s identity `info` (its `LOCK_INFO` entry) is of an owner that is gone: keep it
/// as that generation's (`LOCK_INFO_PAST`), open the next generation (`LOCK_GENS`) and
/// drop the entry, so that the next naming names the new owner. False (nothing changed,
/// counted) when the maps are full or the address is at `GEN_MAX`. Rare: once per reuse.
#[inline(never)]
pub fn retire(lock: u64, info: &LockInfo) -> bool {
    count(CNT_LOCK_REUSED);
    let generation = info.generation;
    let past = LockGenKey {
        lock,
        generation,
        _pad: 0,
    };
    if generation >= GEN_MAX || LOCK_INFO_PAST.insert(past, info, 0).is_err() {
        count(CNT_LOST_LOCK_GEN);
        return false;
    }
    if LOCK_GENS.insert(lock, generation + 1, 0).is_err() {
        let _ = LOCK_INFO_PAST.remove(past);
        count(CNT_LOST_LOCK_GEN);
        return false;
    }
    let _ = LOCK_INFO.remove(lock);
    true
}

/// A task is being freed: its `pi_lock`, if named after it, is retired, so that a task
/// that takes its memory gets its own entry. Called at `sched_process_free`.
#[inline(always)]
pub fn retire_task_pi_lock(task: u64) {
    let lock = task + CONFIG.load().off_task_pi_lock as u64;
    // SAFETY: a map value, only read, before the program returns (the copy is retired).
    if let Some(info) = unsafe { LOCK_INFO.get(lock) }
        && info.kind == LOCK_KIND_PI_LOCK
    {
        retire(lock, info);
    }
}

/// Is the slab object a lock named after (`info`, `LOCK_KIND_SLAB`) the current
/// process's own `mm_struct` or `sighand_struct`, the lock at its `mmap_lock` or
/// `siglock`? One compare of offsets first: a read only for a lock at such an offset.
#[inline(never)]
fn own_slab_object(cfg: &ProbeConfig, info: &LockInfo) -> bool {
    let (off, kinds) = (info.offset, cfg.name_kinds);
    let mm_lock = cfg.off_mm_mmap_lock;
    let field = if kinds & NAME_MMAP_LOCK != 0
        && (off == mm_lock || off == mm_lock + cfg.off_rwsem_wait_lock)
    {
        cfg.off_task_mm
    } else if kinds & NAME_SIGLOCK != 0 && off == cfg.off_sighand_siglock {
        cfg.off_task_sighand
    } else {
        return false;
    };
    // SAFETY: a BPF helper without pointer arguments.
    let task = unsafe { bpf_get_current_task() };
    read_kernel(task + field as u64) == info.object
}

/// Name a lock not named yet: the current task's own `mm->mmap_lock`, `sighand->siglock`
/// or `pi_lock`, else another task's `pi_lock`, else by where it lives.
#[inline(always)]
fn name_lock_of_current(cfg: &ProbeConfig, lock: u64) {
    // SAFETY: a BPF helper without pointer arguments.
    let task = unsafe { bpf_get_current_task() };
    // Only the fields whose offsets the kernel's BTF gave (`name_kinds`).
    let kinds = cfg.name_kinds;
    let kind = if kinds & NAME_PI_LOCK != 0 && lock == task + cfg.off_task_pi_lock as u64 {
        LOCK_KIND_PI_LOCK
    } else {
        let mm: u64 = if kinds & NAME_MMAP_LOCK != 0 {
            read_kernel(task + cfg.off_task_mm as u64)
        } else {
            0
        };
        let mmap_lock = mm + cfg.off_mm_mmap_lock as u64;
        if mm != 0 && lock == mmap_lock {
            LOCK_KIND_MMAP_LOCK
        } else if mm != 0 && lock == mmap_lock + cfg.off_rwsem_wait_lock as u64 {
            LOCK_KIND_MMAP_WAIT_LOCK
        } else {
            let sighand: u64 = if kinds & NAME_SIGLOCK != 0 {
                read_kernel(task + cfg.off_task_sighand as u64)
            } else {
                0
            };
            if sighand != 0 && lock == sighand + cfg.off_sighand_siglock as u64 {
                LOCK_KIND_SIGLOCK
            } else {
                if !(kinds & NAME_PI_LOCK != 0 && name_other_task_pi_lock(lock)) {
                    name_dynamic_lock(lock);
                }
                return;
            }
        }
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    // A pi_lock is a thread's: named after the thread.
    let (tid, comm) = if kind == LOCK_KIND_PI_LOCK {
        (
            pid_tgid as u32,
            aya_ebpf::helpers::bpf_get_current_comm().unwrap_or([0; 16]),
        )
    } else {
        (0, current_process_comm(cfg))
    };
    remember_lock(lock, kind, (pid_tgid >> 32) as u32, comm, tid);
}

/// A process's own `mmap_lock` (or `siglock`) named after process `owner`, now waited
/// for by another process as its own: the first owner's `mm_struct` (`sighand_struct`)
/// was freed and this one reuses its memory, unless the two share it (`CLONE_VM` or
/// `CLONE_SIGHAND` without `CLONE_THREAD`, as in `vfork`). Asks the kernel for the first
/// owner (`bpf_task_from_pid`, Linux 6.2+; without it nothing is concluded). Only on the
/// contended path, for a wait of a process other than the one the lock is named after.
#[inline(never)]
fn owner_replaced(cfg: &ProbeConfig, lock: u64, kind: u32, owner: u32) -> bool {
    if SLAB_CONFIG.load().task_kfuncs == 0 {
        return false;
    }
    // SAFETY: a BPF helper without pointer arguments.
    let task = unsafe { bpf_get_current_task() };
    let (field, own) = if kind == LOCK_KIND_SIGLOCK {
        let sighand: u64 = read_kernel(task + cfg.off_task_sighand as u64);
        (
            cfg.off_task_sighand,
            (sighand != 0 && lock == sighand + cfg.off_sighand_siglock as u64).then_some(sighand),
        )
    } else {
        let mm: u64 = read_kernel(task + cfg.off_task_mm as u64);
        let rwsem = mm + cfg.off_mm_mmap_lock as u64;
        (
            cfg.off_task_mm,
            (mm != 0 && (lock == rwsem || lock == rwsem + cfg.off_rwsem_wait_lock as u64))
                .then_some(mm),
        )
    };
    let Some(object) = own else {
        // Another process's lock (a remote access, e.g. reading its /proc files).
        return false;
    };
    let (from_pid, release) = task_kfuncs();
    // SAFETY: as above; a pid the kernel does not know gives null.
    let first = unsafe { from_pid(owner as i32) };
    if first.is_null() {
        // The first owner is gone: its structure was freed, this is another.
        return true;
    }
    let theirs: u64 = read_kernel(first as u64 + field as u64);
    // SAFETY: the reference taken above, released once.
    unsafe { release(first) };
    theirs != object
}

type FromPid = unsafe extern "C" fn(i32) -> *mut core::ffi::c_void;
type Release = unsafe extern "C" fn(*mut core::ffi::c_void);

/// bpf_task_from_pid(s32) and bpf_task_release(struct task_struct *).
#[inline(always)]
fn task_kfuncs() -> (FromPid, Release) {
    // SAFETY: the helper-call idiom (see `kmem_cache_of`); the loader makes these calls
    // of the kernel's functions (Linux 6.2+; else `SlabConfig::task_kfuncs` is 0).
    unsafe {
        (
            core::mem::transmute::<usize, FromPid>(KFUNC_TASK_FROM_PID as usize),
            core::mem::transmute::<usize, Release>(KFUNC_TASK_RELEASE as usize),
        )
    }
}

/// Store a task-structure lock's identity (built in the per-CPU scratch).
#[inline(always)]
fn remember_lock(lock: u64, kind: u32, tgid: u32, comm: [u8; 16], tid: u32) {
    let Some(info) = INFO_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns.
    let info = unsafe { &mut *info };
    *info = LockInfo {
        kind,
        tgid,
        comm,
        tid,
        ..LockInfo::default()
    };
    insert_lock_info(lock, info);
}

/// Store a new identity of `lock`, of the address's current owner generation.
#[inline(always)]
fn insert_lock_info(lock: u64, info: &mut LockInfo) {
    // SAFETY: a map value, only read, before the program returns.
    info.generation = unsafe { LOCK_GENS.get(lock) }.copied().unwrap_or(0);
    // By reference: the value is read from the scratch map, not copied to the stack.
    #[allow(clippy::needless_borrows_for_generic_args)]
    let inserted = LOCK_INFO.insert(lock, &*info, BPF_NOEXIST as u64);
    if let Err(e) = inserted
        && e != -17
    {
        // -EEXIST means another CPU named it first: nothing lost.
        count(CNT_LOST_LOCK_INFO);
    }
}

/// A spinlock at `task + offsetof(pi_lock)` of a task the task set confirms is alive
/// (the waiter is someone else: a waker, a tracer) is that task's `pi_lock`.
#[inline(never)]
fn name_other_task_pi_lock(lock: u64) -> bool {
    match crate::probes::rt::pi_lock_task(lock) {
        Some((task, _)) => {
            name_task_pi_lock(task);
            true
        }
        None => false,
    }
}

/// A lock in no structure of the waiter's: a field of a slab object (its cache from
/// `bpf_get_kmem_cache`, its object from the cache's slab order and object size), or a
/// page-table page's `ptl` (the page's type checked as `PageTable()` does). Runs only
/// for a lock not named yet, on the contended path.
#[inline(never)]
fn name_dynamic_lock(lock: u64) {
    let sc = SLAB_CONFIG.load();
    let Some(info) = INFO_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns.
    let info = unsafe { &mut *info };
    let cache = if sc.kinds & PLACE_SLAB != 0 {
        kmem_cache_of(lock)
    } else {
        0
    };
    if cache != 0 {
        let size = read_u32(cache + sc.off_cache_size as u64) as u64;
        let order = read_u32(cache + sc.off_cache_oo as u64) >> 16;
        let red = read_u32(cache + sc.off_cache_red_left_pad as u64) as u64;
        if size == 0 || order > 10 {
            return;
        }
        // Slab pages are allocated by order, so aligned to their size.
        let slab = lock & !(((sc.page_size as u64) << order) - 1);
        let rel = lock - slab;
        if rel < red {
            return;
        }
        let offset = (rel - red) % size;
        *info = LockInfo {
            kind: LOCK_KIND_SLAB,
            object: lock - offset,
            offset: offset as u32,
            ..LockInfo::default()
        };
        let name = read_kernel(cache + sc.off_cache_name as u64);
        // SAFETY: a checked read: a bad address gives an error, never a fault.
        if unsafe { bpf_probe_read_kernel_str_bytes(name as *const u8, &mut info.cache) }.is_err() {
            return;
        }
        // SAFETY: a map value, only read, before the program returns.
        if let Some(off) = unsafe { CACHE_IDENTS.get(info.cache) } {
            info.ident_off = *off;
            info.ident = read_kernel(info.object + *off as u64);
            info.has_ident = IDENT_ONE;
        }
    } else if sc.kinds & PLACE_PAGE_TABLE != 0 && is_page_table_page(&sc, page_of(&sc, lock)) {
        let page = page_of(&sc, lock);
        let pid_tgid = bpf_get_current_pid_tgid();
        *info = LockInfo {
            kind: LOCK_KIND_PAGE_TABLE,
            tgid: (pid_tgid >> 32) as u32,
            comm: current_process_comm(&CONFIG.load()),
            object: page,
            ..LockInfo::default()
        };
    } else if sc.kinds & PLACE_SLAB != 0 {
        // No slab object (so no task's structure) and no page table: nothing here will
        // ever name it; remember that, so its next waits stop at the lookup.
        *info = LockInfo {
            kind: LOCK_KIND_UNNAMED,
            ..LockInfo::default()
        };
    } else {
        return;
    }
    insert_lock_info(lock, info);
}

/// The `struct page` whose `ptdesc.ptl` a lock at `lock` would be.
#[inline(always)]
fn page_of(sc: &SlabConfig, lock: u64) -> u64 {
    lock.wrapping_sub(sc.off_ptdesc_ptl as u64)
}

/// Is `page` a page-table page (a `struct page` address whose type is `PGTY_table`)?
#[inline(always)]
fn is_page_table_page(sc: &SlabConfig, page: u64) -> bool {
    page.is_multiple_of(sc.page_struct_size as u64)
        && read_u32(page + sc.off_page_type as u64) >> 24 == sc.page_type_table
}

/// `bpf_get_kmem_cache(addr)`: the slab cache of a kernel address, 0 when it is none.
/// The call is to a placeholder helper number the loader rewrites into the kernel
/// function's call (or into `r0 = 0` where the kernel has no such function).
#[inline(always)]
fn kmem_cache_of(addr: u64) -> u64 {
    // SAFETY: the helper-call idiom (a call to a constant address is a BPF call
    // instruction with that number); the loader makes it a kfunc call taking one u64.
    let f: unsafe extern "C" fn(u64) -> u64 =
        unsafe { core::mem::transmute(KFUNC_GET_KMEM_CACHE as usize) };
    // SAFETY: as above; the kernel function accepts any address.
    unsafe { f(addr) }
}

/// Name `task`'s `pi_lock` after the thread (`task` is a live task pointer), or after
/// its process where the kernel's BTF gave no `task_struct.pid`.
#[inline(never)]
pub fn name_task_pi_lock(task: u64) {
    let cfg = CONFIG.load();
    let lock = task + cfg.off_task_pi_lock as u64;
    // SAFETY: a map value, only read, before the program returns.
    match unsafe { LOCK_INFO.get(lock) } {
        None => {}
        // Named from its slab cache by a waiter that was not its task: the thread's own
        // name is better.
        Some(i) if i.kind == LOCK_KIND_SLAB => {
            let _ = LOCK_INFO.remove(lock);
        }
        Some(_) => return,
    }
    let tgid = read_kernel(task + cfg.off_task_tgid as u64) as u32;
    let tid = if cfg.off_task_pid != 0 {
        read_u32(task + cfg.off_task_pid as u64)
    } else {
        0
    };
    let leader = if tid != 0 {
        task
    } else {
        read_kernel(task + cfg.off_task_group_leader as u64)
    };
    let comm = if leader != 0 {
        // SAFETY: a checked read: a bad address gives an error, never a fault.
        unsafe { bpf_probe_read_kernel((leader + cfg.off_task_comm as u64) as *const [u8; 16]) }
            .unwrap_or([0; 16])
    } else {
        [0; 16]
    };
    remember_lock(lock, LOCK_KIND_PI_LOCK, tgid, comm, tid);
}

#[inline(always)]
fn read_kernel(addr: u64) -> u64 {
    // SAFETY: a checked read: a bad address gives an error, never a fault.
    unsafe { bpf_probe_read_kernel(addr as *const u64) }.unwrap_or(0)
}

#[inline(always)]
fn on_end(lock: u64, ret: i32) {
    // SAFETY: a BPF helper without pointer arguments.
    let now = unsafe { bpf_ktime_get_ns() };

    // A spinning wait on this CPU is the innermost one: look there first, from the top.
    // An entry above the match is an orphan: its end ran while this program was already
    // running on the CPU (the kernel skips a BPF program re-entered from an interrupt), so
    // it will never be matched. Drop it and count it.
    if let Some(depth) = CPU_WAIT_DEPTH.get_ptr_mut(0) {
        // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
        let depth = unsafe { &mut *depth };
        let d = *depth;
        let mut found = CPU_WAIT_MAX_DEPTH;
        for k in 0..CPU_WAIT_MAX_DEPTH {
            if k >= d {
                break;
            }
            if let Some(w) = CPU_WAIT_SLOTS.get(d - 1 - k)
                && w.lock == lock
            {
                found = d - 1 - k;
                break;
            }
        }
        if let Some(w) = CPU_WAIT_SLOTS.get(found) {
            let w = *w;
            if d > found + 1 {
                count_n(CNT_LOST_END_MISSED, (d - found - 1) as u64);
            }
            *depth = found;
            if w.flags & WAIT_EVIDENCE_ONLY != 0 {
                let w = WaitStart {
                    flags: w.flags & !WAIT_EVIDENCE_ONLY,
                    ..w
                };
                crate::probes::rt::on_spin_end(found, &w, now);
                return;
            }
            crate::probes::rt::on_spin_end(found, &w, now);
            account(&w, now, ret);
            return;
        }
    }

    if let Some(w) = TASK_WAITS.current(false) {
        // SAFETY: the current task's storage, used before the program returns (see
        // `on_begin`).
        let slot = unsafe { &mut *w };
        if slot.lock == lock {
            let w = *slot;
            slot.lock = 0;
            count(CNT_TASK_WAITS_ENDED);
            account(&w, now, ret);
            return;
        }
    }
    // Only waits whose begin we recorded count as unpaired: skip filtered tasks.
    let cfg = CONFIG.load();
    if current_is_target(&cfg) {
        count(CNT_UNPAIRED_END);
    }
}

/// Kept out of line: called from two places in `contention_end`, and inlining both copies
/// overflows the 512-byte BPF stack.
#[inline(never)]
fn account(w: &WaitStart, now: u64, ret: i32) {
    count(CNT_END);
    let key = ContentionKey {
        lock: w.lock,
        // The waiter: a spinning wait may end in an interrupt on top of another task.
        tgid: w.tgid,
        stack: w.stack,
        flags: w.flags,
    };
    let mut stats = CONTENTION_STATS.get_ptr_mut(key);
    if stats.is_none() {
        // -EEXIST: raced with ourselves from an interrupt; the lookup below finds it.
        // By reference: the value is read from .rodata instead of being copied to the
        // stack (the copy overflowed the 512-byte stack on 6.1's verifier).
        #[allow(clippy::needless_borrows_for_generic_args)]
        if CONTENTION_STATS
            .insert(key, &EMPTY_STATS, BPF_NOEXIST as u64)
            .is_ok()
        {
            count(CNT_STATS_CREATED);
            // The waiter's process name, with its first entry (the end runs in the
            // waiter's context): not on every wait.
            remember_comm();
        }
        stats = CONTENTION_STATS.get_ptr_mut(key);
    }
    let Some(s) = stats else {
        count(CNT_LOST_STATS_FULL);
        return;
    };
    let wait = now.saturating_sub(w.ts_ns);
    if !crate::maps::add_wait_shared(s, wait, ret != 0) {
        count(CNT_LOST_MINMAX);
    }
    if w.holder_tid != 0 {
        account_holder(w, wait);
    }
    let kind = flags_kind(w.flags);
    if kind == LCB_F_READ || kind == LCB_F_WRITE {
        crate::probes::rwsem::on_rwsem_wait_end(w.lock, kind, ret);
    }
}

/// Add a finished wait to its (lock, flags, holder) entry. A wait whose entry cannot be
/// made stays in its lock's figures, its holder unknown.
#[inline(never)]
fn account_holder(w: &WaitStart, wait: u64) {
    let key = HolderKey {
        lock: w.lock,
        tid: w.holder_tid,
        tgid: w.holder_tgid,
        flags: w.flags,
        _pad: 0,
    };
    let mut h = HOLDER_STATS.get_ptr_mut(key);
    if h.is_none() {
        if HOLDER_STATS
            .insert(key, HolderStats::default(), BPF_NOEXIST as u64)
            .is_ok()
        {
            count(CNT_HOLDERS_CREATED);
        }
        h = HOLDER_STATS.get_ptr_mut(key);
    }
    if let Some(h) = h {
        // SAFETY: fields of a live map value, which every CPU updates atomically.
        unsafe {
            shared::add(core::ptr::addr_of_mut!((*h).count), 1);
            shared::add(core::ptr::addr_of_mut!((*h).total_ns), wait);
        }
    }
}

/// Sleeping waits in progress: one `WaitStart` record per thread inside one, written to
/// the iterator's file (`iter/task`), which userspace reads at each snapshot.
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/task")]
pub fn contention_task_iter(ctx: *mut core::ffi::c_void) -> i32 {
    TASK_WAITS.write_live(ctx, |w| w.lock != 0);
    0
}
