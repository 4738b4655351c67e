//! rwsem acquisition modes (lock events) per lock and per process.
//!
//! Deep tier: every hook exists twice, as fentry/fexit and as kprobe/kretprobe; the loader
//! attaches, per hook, the first that the kernel accepts. A task's slowpath is followed
//! from entry to exit in `SLOWPATHS` (the `contention_begin` probe marks it queued):
//!
//! * `rwsem_down_read_slowpath(sem, count, state)`: exit without queueing is a steal
//!   (the kernel's own predicate on `count` and `sem->owner` at entry, see
//!   `rwsem_read_would_steal`) or a fast exit; exit after queueing is `rlock` or, with an
//!   error pointer, `rlock_fail`.
//! * `rwsem_down_write_slowpath(sem, state)`: exit without queueing is `opt_lock`;
//!   queueing means the optimistic spin failed (`opt_fail`, counted when it queues);
//!   exit after queueing is `wlock` / `wlock_fail`.
//! * `rwsem_spin_on_owner` called by a queued writer: it set the handoff bit
//!   (`wlock_handoff`; the kernel spins only after setting it).
//! * `rwsem_mark_wake` (runs under `wait_lock`, which every writer of the handoff bit
//!   holds): first waiter a writer and `RWSEM_WAKE_ANY` is `wake_writer`; first waiter
//!   a reader removed from the list is `wake_reader`; the handoff bit appearing between
//!   entry and exit is `rlock_handoff`.
//! * `schedule` entered by a queued waiter: `sleep_reader` / `sleep_writer`.
//! * `down_read_trylock` / `down_write_trylock` returning 0: `trylock_fail`. This fires
//!   on every page fault: success returns at once; only a failure touches a map.
//!
//! Tracepoint tier (where a deep hook is absent): queued `rlock`/`wlock` and their
//! failures from `contention_end`; handoffs estimated by sampling `count`'s handoff bit at
//! `contention_end`; `trylock_fail` estimated for `mmap_lock` only from
//! `mmap_lock_acquire_returned(success=false)`.

use aya_ebpf::{
    Global,
    bindings::{BPF_F_NO_PREALLOC, BPF_NOEXIST},
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_kernel},
    macros::{btf_tracepoint, fentry, fexit, kprobe, kretprobe, map},
    maps::{Array, HashMap, PerCpuArray},
    programs::{BtfTracePointContext, FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use lockscope_common::*;

use crate::maps::{CONFIG, current_is_target};

/// Offsets from BTF, set by the loader.
#[unsafe(no_mangle)]
pub static RWSEM_CONFIG: Global<RwsemConfig> = Global::new(RwsemConfig {
    off_count: 0,
    off_owner: 0,
    off_wait_list: 0,
    off_waiter_type: 0,
    mmap_write_arg: 0,
    mmap_success_arg: 0,
});

/// Which hooks are attached (`HOOK_*` bits), written by the loader after attaching.
#[map]
static RWSEM_HOOKS: Array<u32> = Array::with_max_entries(1, 0);

/// Per lock, process and side: event counts. Shared, updated atomically
/// (`lockscope_common::shared`): no per-CPU copy of each entry.
#[map]
static RWSEM_EVENT_STATS: HashMap<RwsemEventKey, RwsemEventCounts> =
    HashMap::with_max_entries(RWSEM_EVENTS_MAX_ENTRIES, 0);

/// System-wide (within the target filter) totals per event, then `RWC_*` slots.
#[map]
static RWSEM_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(RWSEM_COUNTERS_LEN, 0);

/// Tasks inside a slowpath, by thread id.
#[map]
static SLOWPATHS: HashMap<u32, RwsemSlowpath> =
    HashMap::with_max_entries(RWSEM_SLOWPATH_MAX_ENTRIES, BPF_F_NO_PREALLOC);

#[map]
static MARK_WAKE: PerCpuArray<RwsemMarkWake> = PerCpuArray::with_max_entries(1, 0);

/// kprobe fallback of the trylocks: the argument, from entry to return.
#[map]
static TRYLOCK_ARG: PerCpuArray<TrylockEntry> = PerCpuArray::with_max_entries(1, 0);

static ZERO_COUNTS: RwsemEventCounts = RwsemEventCounts {
    n: [0; RWSEM_EVENTS],
};

#[inline(always)]
fn read_u64(addr: u64) -> u64 {
    // SAFETY: a checked read: a bad address gives an error, never a fault.
    unsafe { bpf_probe_read_kernel(addr as *const u64) }.unwrap_or(0)
}

#[inline(always)]
fn rwc(slot: u32) {
    if let Some(c) = RWSEM_COUNTERS.get_ptr_mut(slot) {
        // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
        unsafe { *c += 1 };
    }
}

#[inline(always)]
fn hooks() -> u32 {
    RWSEM_HOOKS.get(0).copied().unwrap_or(0)
}

/// Count one event for `sem` on `side`, for the current process.
#[inline(never)]
fn count_event(sem: u64, side: u32, ev: u32) {
    let ev = ev as usize;
    if ev >= RWSEM_EVENTS {
        return;
    }
    rwc(RWC_TOTALS + ev as u32);
    let key = RwsemEventKey {
        lock: sem,
        tgid: (bpf_get_current_pid_tgid() >> 32) as u32,
        side,
    };
    let mut slot = RWSEM_EVENT_STATS.get_ptr_mut(key);
    if slot.is_none() {
        // -EEXIST: another CPU or an interrupt inserted it first; the lookup finds it.
        // By reference: the value is read from .rodata instead of being copied to the
        // stack (the copy overflowed the 512-byte stack on 6.1's verifier).
        #[allow(clippy::needless_borrows_for_generic_args)]
        let _ = RWSEM_EVENT_STATS.insert(key, &ZERO_COUNTS, BPF_NOEXIST as u64);
        slot = RWSEM_EVENT_STATS.get_ptr_mut(key);
    }
    match slot {
        Some(s) => {
            if ev < RWSEM_EVENTS {
                // SAFETY: a field of a live map value, which every CPU updates atomically.
                unsafe { shared::add(core::ptr::addr_of_mut!((*s).n[ev]), 1) };
            }
        }
        None => rwc(RWC_LOST_MAP_FULL),
    }
}

// ---------------------------------------------------------------- slowpaths

#[inline(always)]
fn slowpath_entry(sem: u64, count_arg: u64, side: u32) {
    let cfg = CONFIG.load();
    if !current_is_target(&cfg) {
        return;
    }
    let rc = RWSEM_CONFIG.load();
    let owner = read_u64(sem + rc.off_owner as u64);
    let count = if side == SIDE_READ {
        count_arg
    } else {
        read_u64(sem + rc.off_count as u64)
    };
    let mut flags = 0;
    if side == SIDE_READ && rwsem_read_would_steal(count, owner) {
        flags |= SLOWPATH_STEAL;
    }
    let tid = bpf_get_current_pid_tgid() as u32;
    // SAFETY: a map value, only read, before the program returns.
    if unsafe { SLOWPATHS.get(tid) }.is_some() {
        rwc(RWC_UNPAIRED_ENTRY);
    }
    let w = RwsemSlowpath {
        sem,
        count,
        owner,
        side,
        flags,
    };
    if SLOWPATHS.insert(tid, w, 0).is_err() {
        rwc(RWC_LOST_TASK_FULL);
    }
}

#[inline(always)]
fn slowpath_exit(ret: u64, side: u32) {
    let tid = bpf_get_current_pid_tgid() as u32;
    // SAFETY: a map value, only read, before the program returns.
    let Some(w) = (unsafe { SLOWPATHS.get(tid) }).copied() else {
        let cfg = CONFIG.load();
        if current_is_target(&cfg) {
            rwc(RWC_UNPAIRED_EXIT);
        }
        return;
    };
    let _ = SLOWPATHS.remove(tid);
    if w.side != side {
        rwc(RWC_UNPAIRED_EXIT);
        return;
    }
    // ERR_PTR(-EINTR): the top 4095 values.
    let failed = ret >= (-4095i64) as u64;
    let queued = w.flags & SLOWPATH_QUEUED != 0;
    let ev = match (side, queued, failed) {
        (SIDE_READ, true, false) => EV_RLOCK,
        (SIDE_READ, _, true) => EV_RLOCK_FAIL,
        (SIDE_READ, false, false) => {
            if w.flags & SLOWPATH_STEAL != 0 {
                EV_RLOCK_STEAL
            } else {
                EV_RLOCK_FAST
            }
        }
        (_, true, false) => EV_WLOCK,
        (_, _, true) => EV_WLOCK_FAIL,
        (_, false, false) => EV_OPT_LOCK,
    };
    count_event(w.sem, side, ev as u32);
}

/// Called by `contention_begin` for every begin: marks the current task's slowpath on
/// this lock as queued. A writer queues only after its optimistic spin failed.
#[inline(always)]
pub fn on_contention_begin(lock: u64) {
    // Only the deep tier's slowpath hooks fill `SLOWPATHS`: without them (the
    // tracepoint tier), one array read instead of a hash lookup per rwsem wait.
    if hooks() & (HOOK_READ_SLOWPATH | HOOK_WRITE_SLOWPATH) == 0 {
        return;
    }
    let Some(w) = SLOWPATHS.get_ptr_mut(bpf_get_current_pid_tgid() as u32) else {
        return;
    };
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
    let w = unsafe { &mut *w };
    if w.sem != lock || w.flags & SLOWPATH_QUEUED != 0 {
        return;
    }
    w.flags |= SLOWPATH_QUEUED;
    if w.side == SIDE_WRITE {
        let sem = w.sem;
        let owner_before = w.owner;
        count_event(sem, SIDE_WRITE, EV_OPT_FAIL as u32);
        let rc = RWSEM_CONFIG.load();
        let owner = read_u64(sem + rc.off_owner as u64);
        if rwsem_nonspinnable_set(owner_before, owner) {
            count_event(sem, SIDE_WRITE, EV_OPT_NOSPIN as u32);
        }
    }
}

#[fentry(function = "rwsem_down_read_slowpath")]
pub fn rwsem_read_slowpath_fentry(ctx: FEntryContext) -> i32 {
    slowpath_entry(ctx.arg(0), ctx.arg(1), SIDE_READ);
    0
}

#[fexit(function = "rwsem_down_read_slowpath")]
pub fn rwsem_read_slowpath_fexit(ctx: FExitContext) -> i32 {
    slowpath_exit(ctx.arg(3), SIDE_READ);
    0
}

#[kprobe]
pub fn rwsem_read_slowpath_kprobe(ctx: ProbeContext) -> u32 {
    slowpath_entry(ctx.arg(0).unwrap_or(0), ctx.arg(1).unwrap_or(0), SIDE_READ);
    0
}

#[kretprobe]
pub fn rwsem_read_slowpath_kretprobe(ctx: RetProbeContext) -> u32 {
    slowpath_exit(ctx.ret(), SIDE_READ);
    0
}

#[fentry(function = "rwsem_down_write_slowpath")]
pub fn rwsem_write_slowpath_fentry(ctx: FEntryContext) -> i32 {
    slowpath_entry(ctx.arg(0), 0, SIDE_WRITE);
    0
}

#[fexit(function = "rwsem_down_write_slowpath")]
pub fn rwsem_write_slowpath_fexit(ctx: FExitContext) -> i32 {
    slowpath_exit(ctx.arg(2), SIDE_WRITE);
    0
}

#[kprobe]
pub fn rwsem_write_slowpath_kprobe(ctx: ProbeContext) -> u32 {
    slowpath_entry(ctx.arg(0).unwrap_or(0), 0, SIDE_WRITE);
    0
}

#[kretprobe]
pub fn rwsem_write_slowpath_kretprobe(ctx: RetProbeContext) -> u32 {
    slowpath_exit(ctx.ret(), SIDE_WRITE);
    0
}

// ---------------------------------------------------------------- handoff spin, sleeps

#[inline(always)]
fn spin_on_owner() {
    let tid = bpf_get_current_pid_tgid() as u32;
    let Some(w) = SLOWPATHS.get_ptr_mut(tid) else {
        return;
    };
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
    let w = unsafe { &mut *w };
    let want = SLOWPATH_QUEUED | SLOWPATH_HANDOFF_COUNTED;
    if w.side == SIDE_WRITE && w.flags & want == SLOWPATH_QUEUED {
        w.flags |= SLOWPATH_HANDOFF_COUNTED;
        let sem = w.sem;
        count_event(sem, SIDE_WRITE, EV_WLOCK_HANDOFF as u32);
    }
}

#[fentry(function = "rwsem_spin_on_owner")]
pub fn rwsem_spin_on_owner_fentry(_ctx: FEntryContext) -> i32 {
    spin_on_owner();
    0
}

#[kprobe]
pub fn rwsem_spin_on_owner_kprobe(_ctx: ProbeContext) -> u32 {
    spin_on_owner();
    0
}

#[inline(always)]
fn on_schedule() {
    let tid = bpf_get_current_pid_tgid() as u32;
    // SAFETY: a map value, only read, before the program returns.
    let Some(w) = (unsafe { SLOWPATHS.get(tid) }) else {
        return;
    };
    if w.flags & SLOWPATH_QUEUED != 0 {
        let ev = if w.side == SIDE_READ {
            EV_SLEEP_READER
        } else {
            EV_SLEEP_WRITER
        };
        count_event(w.sem, w.side, ev as u32);
    }
}

#[fentry(function = "schedule")]
pub fn rwsem_schedule_fentry(_ctx: FEntryContext) -> i32 {
    on_schedule();
    0
}

#[kprobe]
pub fn rwsem_schedule_kprobe(_ctx: ProbeContext) -> u32 {
    on_schedule();
    0
}

// ---------------------------------------------------------------- wakeups

#[inline(always)]
fn mark_wake_entry(sem: u64, wake_type: u32) {
    let cfg = CONFIG.load();
    if !current_is_target(&cfg) {
        return;
    }
    let rc = RWSEM_CONFIG.load();
    let first = read_u64(sem + rc.off_wait_list as u64);
    let first_type: u32 =
        // SAFETY: a checked read: a bad address gives an error, never a fault.
        unsafe { bpf_probe_read_kernel((first + rc.off_waiter_type as u64) as *const u32) }
            .unwrap_or(u32::MAX);
    if first_type == RWSEM_WAITING_FOR_WRITE && wake_type == RWSEM_WAKE_ANY {
        count_event(sem, SIDE_WRITE, EV_WAKE_WRITER as u32);
    }
    if let Some(slot) = MARK_WAKE.get_ptr_mut(0) {
        // SAFETY: this CPU's slot of a per-CPU array, written whole before the program returns.
        unsafe {
            *slot = RwsemMarkWake {
                sem,
                first,
                count: read_u64(sem + rc.off_count as u64),
                first_type,
                wake_type,
            }
        };
    }
}

#[inline(always)]
fn mark_wake_exit(sem: u64) {
    let Some(slot) = MARK_WAKE.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
    let e = unsafe { *slot };
    if e.sem != sem || sem == 0 {
        return;
    }
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
    unsafe { (*slot).sem = 0 };
    let rc = RWSEM_CONFIG.load();
    if e.first_type == RWSEM_WAITING_FOR_READ && read_u64(sem + rc.off_wait_list as u64) != e.first
    {
        count_event(sem, SIDE_READ, EV_WAKE_READER as u32);
    }
    if rwsem_handoff_set(e.count, read_u64(sem + rc.off_count as u64)) {
        count_event(sem, SIDE_READ, EV_RLOCK_HANDOFF as u32);
    }
}

#[fentry(function = "rwsem_mark_wake")]
pub fn rwsem_mark_wake_fentry(ctx: FEntryContext) -> i32 {
    mark_wake_entry(ctx.arg(0), ctx.arg(1));
    0
}

#[fexit(function = "rwsem_mark_wake")]
pub fn rwsem_mark_wake_fexit(ctx: FExitContext) -> i32 {
    mark_wake_exit(ctx.arg(0));
    0
}

#[kprobe]
pub fn rwsem_mark_wake_kprobe(ctx: ProbeContext) -> u32 {
    mark_wake_entry(ctx.arg(0).unwrap_or(0), ctx.arg(1).unwrap_or(u32::MAX));
    0
}

#[kretprobe]
pub fn rwsem_mark_wake_kretprobe(_ctx: RetProbeContext) -> u32 {
    // No arguments at return: the slot says which rwsem (same CPU, interrupts off).
    if let Some(slot) = MARK_WAKE.get(0) {
        let sem = slot.sem;
        mark_wake_exit(sem);
    }
    0
}

// ---------------------------------------------------------------- trylocks

#[inline(always)]
fn trylock_failed(sem: u64, side: u32) {
    let cfg = CONFIG.load();
    if current_is_target(&cfg) {
        count_event(sem, side, EV_TRYLOCK_FAIL as u32);
    }
}

#[fexit(function = "down_read_trylock")]
pub fn down_read_trylock_fexit(ctx: FExitContext) -> i32 {
    let ret: i32 = ctx.arg(1);
    if ret == 0 {
        trylock_failed(ctx.arg(0), SIDE_READ);
    }
    0
}

#[fexit(function = "down_write_trylock")]
pub fn down_write_trylock_fexit(ctx: FExitContext) -> i32 {
    let ret: i32 = ctx.arg(1);
    if ret == 0 {
        trylock_failed(ctx.arg(0), SIDE_WRITE);
    }
    0
}

#[inline(always)]
fn trylock_kprobe(sem: u64, side: u32) {
    if let Some(slot) = TRYLOCK_ARG.get_ptr_mut(0) {
        // SAFETY: this CPU's slot of a per-CPU array, written whole before the program returns.
        unsafe {
            *slot = TrylockEntry {
                sem,
                tid: bpf_get_current_pid_tgid() as u32,
                side,
            }
        };
    }
}

#[inline(always)]
fn trylock_kretprobe(ret: i32, side: u32) {
    if ret != 0 {
        return;
    }
    let tid = bpf_get_current_pid_tgid() as u32;
    match TRYLOCK_ARG.get(0) {
        Some(e) if e.tid == tid && e.side == side => {
            let sem = e.sem;
            trylock_failed(sem, side);
        }
        _ => {
            // Preempted between entry and return and the slot was reused: count the
            // failure in the totals only.
            let cfg = CONFIG.load();
            if current_is_target(&cfg) {
                rwc(RWC_TOTALS + EV_TRYLOCK_FAIL as u32);
                rwc(RWC_TRYLOCK_UNATTRIBUTED);
            }
        }
    }
}

#[kprobe]
pub fn down_read_trylock_kprobe(ctx: ProbeContext) -> u32 {
    trylock_kprobe(ctx.arg(0).unwrap_or(0), SIDE_READ);
    0
}

#[kretprobe]
pub fn down_read_trylock_kretprobe(ctx: RetProbeContext) -> u32 {
    trylock_kretprobe(ctx.ret(), SIDE_READ);
    0
}

#[kprobe]
pub fn down_write_trylock_kprobe(ctx: ProbeContext) -> u32 {
    trylock_kprobe(ctx.arg(0).unwrap_or(0), SIDE_WRITE);
    0
}

#[kretprobe]
pub fn down_write_trylock_kretprobe(ctx: RetProbeContext) -> u32 {
    trylock_kretprobe(ctx.ret(), SIDE_WRITE);
    0
}

// ---------------------------------------------------------------- tracepoint tier

/// A finished rwsem wait seen by `contention_end` (`flags` is `LCB_F_READ` or
/// `LCB_F_WRITE`): queued acquisitions and failures when no slowpath hook runs, and
/// handoff estimates when no deep handoff hook runs.
#[inline(always)]
pub fn on_rwsem_wait_end(lock: u64, flags: u32, ret: i32) {
    let side = if flags == LCB_F_READ {
        SIDE_READ
    } else if flags == LCB_F_WRITE {
        SIDE_WRITE
    } else {
        return;
    };
    let h = hooks();
    let (slowpath_hook, handoff_hook) = if side == SIDE_READ {
        (HOOK_READ_SLOWPATH, HOOK_MARK_WAKE)
    } else {
        (HOOK_WRITE_SLOWPATH, HOOK_SPIN_ON_OWNER)
    };
    if h & slowpath_hook == 0 {
        let ev = match (side, ret != 0) {
            (SIDE_READ, false) => EV_RLOCK,
            (SIDE_READ, true) => EV_RLOCK_FAIL,
            (_, false) => EV_WLOCK,
            (_, true) => EV_WLOCK_FAIL,
        };
        count_event(lock, side, ev as u32);
    }
    if h & handoff_hook == 0 {
        let rc = RWSEM_CONFIG.load();
        if read_u64(lock + rc.off_count as u64) & RWSEM_FLAG_HANDOFF != 0 {
            let ev = if side == SIDE_READ {
                EV_RLOCK_HANDOFF
            } else {
                EV_WLOCK_HANDOFF
            };
            count_event(lock, side, ev as u32);
        }
    }
}

/// `mmap_lock_acquire_returned(mm, memcg_path, write, success)` (before 6.13): a failed
/// mmap_lock trylock (the only acquisitions that can fail), when the trylock hooks are
/// absent. Two programs because a tp_btf argument index must be a constant.
#[btf_tracepoint(function = "mmap_lock_acquire_returned")]
pub fn rwsem_mmap_lock_acquire_returned4(ctx: BtfTracePointContext) -> i32 {
    let write: u64 = ctx.arg(2);
    let success: u64 = ctx.arg(3);
    mmap_lock_acquire_returned(ctx.arg(0), write & 0xff != 0, success & 0xff != 0);
    0
}

/// `mmap_lock_acquire_returned(mm, write, success)` (6.13 and later).
#[btf_tracepoint(function = "mmap_lock_acquire_returned")]
pub fn rwsem_mmap_lock_acquire_returned3(ctx: BtfTracePointContext) -> i32 {
    let write: u64 = ctx.arg(1);
    let success: u64 = ctx.arg(2);
    mmap_lock_acquire_returned(ctx.arg(0), write & 0xff != 0, success & 0xff != 0);
    0
}

#[inline(always)]
fn mmap_lock_acquire_returned(mm: u64, write: bool, success: bool) {
    if success {
        return;
    }
    let (side, hook) = if write {
        (SIDE_WRITE, HOOK_WRITE_TRYLOCK)
    } else {
        (SIDE_READ, HOOK_READ_TRYLOCK)
    };
    if hooks() & hook != 0 {
        return;
    }
    let cfg = CONFIG.load();
    if !current_is_target(&cfg) {
        return;
    }
    count_event(
        mm + cfg.off_mm_mmap_lock as u64,
        side,
        EV_TRYLOCK_FAIL as u32,
    );
}
