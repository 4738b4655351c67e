//! Deep spinlock tier on watched raw spinlocks (every task's `pi_lock`).
//!
//! * Watched set: `SPIN_WATCHED` maps a lock address to the task whose `pi_lock` it is.
//!   A BPF task iterator fills it at start; `sched_process_fork` adds new tasks and
//!   `sched_process_free` removes freed ones. No other program writes it.
//! * Waits: entry/exit of `native_queued_spin_lock_slowpath` /
//!   `__pv_queued_spin_lock_slowpath`. The only work for an unwatched lock is one lookup
//!   in `SPIN_WATCHED`, and only on the (contended) slowpath.
//! * Acquisitions and holds: exit of `_raw_spin_lock{,_irqsave,_irq,_bh}` and entry of
//!   `_raw_spin_unlock{,_irqrestore,_irq,_bh}`. These run for every spinlock in the
//!   kernel: an acquisition costs one `SPIN_WATCHED` lookup and returns for an
//!   unwatched lock; a release reads this CPU's hold depth and returns when no watched
//!   lock is held. Neither writes a map for an unwatched lock.
//! * Starvation: every acquisition of a watched lock scans the per-CPU waiting slots
//!   and counts itself (task, CPU, first stack) in each other CPU's wait on that lock;
//!   the waiter checks the thresholds at slowpath exit and sends an episode through the
//!   `SPIN_EPISODES` ring buffer. Long holds are checked at release.
//!
//! Every hook exists as fentry/fexit and as kprobe/kretprobe; the loader attaches per
//! hook the first that the kernel accepts. The kprobe tier matches returns to entries
//! with a per-CPU call depth (the functions neither sleep nor migrate).

use aya_ebpf::{
    EbpfContext as _, Global,
    bindings::{BPF_ANY, BPF_NOEXIST, pt_regs},
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_get_stack,
        bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_kernel_str_bytes,
    },
    macros::{btf_tracepoint, fentry, fexit, kprobe, kretprobe, map},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::{BtfTracePointContext, FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use lockscope_common::*;

/// Offsets from BTF and the CPU count, set by the loader.
#[unsafe(no_mangle)]
pub static SPIN_CONFIG: Global<SpinConfig> = Global::new(SpinConfig {
    nr_cpus: 1,
    off_task_pid: 0,
    off_task_tgid: 0,
    off_task_pi_lock: 0,
    off_task_comm: 0,
    _pad: 0,
});

/// Thresholds (`record --starvation-threshold`, `--starvation-acquisitions`).
#[map]
static SPIN_PARAMS: Array<SpinParams> = Array::with_max_entries(1, 0);

/// `SPIN_HOOK_*` bits of the attached hooks.
#[map]
static SPIN_HOOKS: Array<u32> = Array::with_max_entries(1, 0);

#[map]
static SPIN_WATCHED: HashMap<u64, SpinWatch> = HashMap::with_max_entries(SPIN_WATCH_MAX_ENTRIES, 0);

/// Identities of freed tasks' pi_locks, for naming what was recorded before the free.
#[map]
static SPIN_FREED: LruHashMap<u64, SpinWatch> = LruHashMap::with_max_entries(8192, 0);

/// Waits in progress, one slot per CPU (scanned by acquirers on other CPUs).
#[map]
static SPIN_WAITING: Array<SpinWait> = Array::with_max_entries(SPIN_MAX_CPUS, 0);

#[map]
static SPIN_HELD: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);
#[map]
static SPIN_HOLDS: PerCpuArray<SpinHold> = PerCpuArray::with_max_entries(SPIN_HOLD_DEPTH, 0);

/// kprobe tier: lock-call depth, slowpath-call depth, and the watched calls in flight.
#[map]
static SPIN_CALL_DEPTH: PerCpuArray<u32> = PerCpuArray::with_max_entries(2, 0);
#[map]
static SPIN_PENDING: PerCpuArray<SpinPending> =
    PerCpuArray::with_max_entries(SPIN_PENDING_DEPTH, 0);
#[map]
static SPIN_PENDING_TOP: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);

/// Finished waits per (lock, waiter stack, waiter process), flags `LCB_F_SPIN`.
#[map]
static SPIN_WAIT_STATS: PerCpuHashMap<ContentionKey, ContentionStats> =
    PerCpuHashMap::with_max_entries(SPIN_STATS_MAX_ENTRIES, 0);

/// Finished holds per (lock, holder stack 0, holder process).
#[map]
static SPIN_HOLD_STATS: PerCpuHashMap<ContentionKey, ContentionStats> =
    PerCpuHashMap::with_max_entries(SPIN_STATS_MAX_ENTRIES, 0);

#[map]
static SPIN_STACKS: HashMap<u64, StackFrames> =
    HashMap::with_max_entries(SPIN_STACKS_MAX_ENTRIES, 0);
#[map]
static SPIN_STACK_SCRATCH: PerCpuArray<StackFrames> = PerCpuArray::with_max_entries(1, 0);

#[map]
static SPIN_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(SPIN_COUNTERS_LEN, 0);

#[map]
static SPIN_EPISODES: RingBuf = RingBuf::with_byte_size(SPIN_RINGBUF_BYTES, 0);

static EMPTY_STATS: ContentionStats = ContentionStats::EMPTY;

#[inline(always)]
fn spc(slot: u32) {
    if let Some(c) = SPIN_COUNTERS.get_ptr_mut(slot) {
        // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
        unsafe { *c += 1 };
    }
}

#[inline(always)]
fn hooks() -> u32 {
    SPIN_HOOKS.get(0).copied().unwrap_or(0)
}

#[inline(always)]
fn params() -> SpinParams {
    SPIN_PARAMS.get(0).copied().unwrap_or(SpinParams {
        threshold_ns: SPIN_DEFAULT_THRESHOLD_NS,
        min_foreign: SPIN_DEFAULT_MIN_FOREIGN,
        hold_threshold_ns: SPIN_DEFAULT_HOLD_THRESHOLD_NS,
    })
}

#[inline(always)]
fn is_watched(lock: u64) -> bool {
    // SAFETY: a map value, only read, before the program returns.
    unsafe { SPIN_WATCHED.get(lock) }.is_some()
}

/// Read the kernel stack, store it once under its hash, return the hash (0: none).
#[inline(never)]
fn stack_of(ctx: *mut core::ffi::c_void) -> u64 {
    let Some(buf) = SPIN_STACK_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    let size = size_of::<StackFrames>() as u32;
    // SAFETY: `buf` is this CPU's scratch slot, `size` bytes long; the helper writes at most that.
    let n = unsafe { bpf_get_stack(ctx, buf.cast(), size, 0) };
    if n <= 0 {
        spc(SPC_LOST_STACK);
        return 0;
    }
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
    let frames = unsafe { &*buf };
    let hash = stack_hash(frames);
    // SAFETY: a map value, only read, before the program returns.
    if unsafe { SPIN_STACKS.get(hash) }.is_none() {
        match SPIN_STACKS.insert(hash, frames, BPF_NOEXIST as u64) {
            Ok(()) | Err(-17) => {}
            Err(_) => {
                spc(SPC_LOST_STACK);
                return 0;
            }
        }
    }
    hash
}

#[inline(never)]
fn account(map: &PerCpuHashMap<ContentionKey, ContentionStats>, key: ContentionKey, ns: u64) {
    let mut stats = map.get_ptr_mut(key);
    if stats.is_none() {
        #[allow(clippy::needless_borrows_for_generic_args)]
        let _ = map.insert(key, &EMPTY_STATS, BPF_NOEXIST as u64);
        stats = map.get_ptr_mut(key);
    }
    let Some(s) = stats else {
        spc(SPC_LOST_STATS_FULL);
        return;
    };
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
    let s = unsafe { &mut *s };
    s.add(ns, false);
}

// ---------------------------------------------------------------- watched set

#[inline(always)]
fn watch_task(task: u64) {
    let cfg = SPIN_CONFIG.load();
    let read_u32 = |off: u32| -> u32 {
        // SAFETY: a checked read: a bad address gives an error, never a fault.
        unsafe { bpf_probe_read_kernel((task + off as u64) as *const u32) }.unwrap_or(0)
    };
    let w = SpinWatch {
        tid: read_u32(cfg.off_task_pid),
        tgid: read_u32(cfg.off_task_tgid),
        kind: WATCH_PI_LOCK,
        _pad: 0,
        // SAFETY: a checked read: a bad address gives an error, never a fault.
        comm: unsafe {
            bpf_probe_read_kernel((task + cfg.off_task_comm as u64) as *const [u8; 16])
        }
        .unwrap_or([0; 16]),
    };
    if SPIN_WATCHED
        .insert(task + cfg.off_task_pi_lock as u64, w, BPF_ANY as u64)
        .is_err()
    {
        spc(SPC_LOST_WATCH_FULL);
    }
}

/// Start: every task alive now (`iter/task`; the loader reads the iterator once).
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/task")]
pub fn spin_task_iter(ctx: *mut core::ffi::c_void) -> i32 {
    // struct bpf_iter__task { struct bpf_iter_meta *meta; struct task_struct *task; }
    // SAFETY: an iter/task program's context is a `bpf_iter__task`: `task` is its second pointer.
    let task: u64 = unsafe { *(ctx as *const u64).add(1) };
    if task != 0 {
        watch_task(task);
    }
    0
}

#[btf_tracepoint(function = "sched_process_fork")]
pub fn spin_task_fork(ctx: BtfTracePointContext) -> i32 {
    let child: u64 = ctx.arg(1);
    watch_task(child);
    0
}

/// A watched task renamed itself (`prctl(PR_SET_NAME)`, exec): keep its name current.
#[btf_tracepoint(function = "task_rename")]
pub fn spin_task_rename(ctx: BtfTracePointContext) -> i32 {
    let task: u64 = ctx.arg(0);
    let comm: u64 = ctx.arg(1);
    let cfg = SPIN_CONFIG.load();
    if let Some(w) = SPIN_WATCHED.get_ptr_mut(task + cfg.off_task_pi_lock as u64) {
        // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
        let w = unsafe { &mut *w };
        let mut buf = [0u8; 16];
        // SAFETY: a checked read: a bad address gives an error, never a fault.
        if unsafe { bpf_probe_read_kernel_str_bytes(comm as *const u8, &mut buf) }.is_ok() {
            w.comm = buf;
        }
    }
    0
}

#[btf_tracepoint(function = "sched_process_free")]
pub fn spin_task_free(ctx: BtfTracePointContext) -> i32 {
    let task: u64 = ctx.arg(0);
    let cfg = SPIN_CONFIG.load();
    let lock = task + cfg.off_task_pi_lock as u64;
    // SAFETY: a map value, only read, before the program returns.
    if let Some(w) = unsafe { SPIN_WATCHED.get(lock) } {
        let w = *w;
        let _ = SPIN_FREED.insert(lock, w, BPF_ANY as u64);
        let _ = SPIN_WATCHED.remove(lock);
    }
    0
}

// ---------------------------------------------------------------- waits

#[inline(always)]
fn cpu() -> u32 {
    // SAFETY: a BPF helper without pointer arguments.
    unsafe { bpf_get_smp_processor_id() }
}

#[inline(always)]
fn wait_entry(ctx: *mut core::ffi::c_void, lock: u64, irq: u32, depth: u32) {
    if !is_watched(lock) {
        return;
    }
    let c = cpu();
    let Some(w) = SPIN_WAITING.get_ptr_mut(c) else {
        spc(SPC_LOST_CPU_RANGE);
        return;
    };
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
    let w = unsafe { &mut *w };
    if w.lock != 0 {
        spc(SPC_LOST_WAIT_NESTED);
        return;
    }
    let id = bpf_get_current_pid_tgid();
    wait_begin(
        w,
        lock,
        // SAFETY: a BPF helper without pointer arguments.
        unsafe { bpf_ktime_get_ns() },
        id as u32,
        (id >> 32) as u32,
        irq,
    );
    w.depth = depth;
    w.comm = bpf_get_current_comm().unwrap_or_default();
    w.stack = stack_of(ctx);
}

/// `lock` is known at fexit; the kprobe tier passes 0 and matches by call depth.
#[inline(always)]
fn wait_exit(lock: u64, depth: u32) {
    let c = cpu();
    let Some(w) = SPIN_WAITING.get_ptr_mut(c) else {
        return;
    };
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
    let w = unsafe { &mut *w };
    if w.lock == 0 || (lock != 0 && w.lock != lock) || (lock == 0 && w.depth != depth) {
        return;
    }
    // SAFETY: a BPF helper without pointer arguments.
    let wait_ns = unsafe { bpf_ktime_get_ns() }.saturating_sub(w.ts_ns);
    spc(SPC_WAITS);
    account(
        &SPIN_WAIT_STATS,
        ContentionKey {
            lock: w.lock,
            stack: w.stack,
            tgid: w.tgid,
            flags: LCB_F_SPIN,
        },
        wait_ns,
    );
    if is_starvation(wait_ns, w.foreign, &params()) {
        emit_starvation(w, c, wait_ns);
    }
    w.lock = 0;
}

#[inline(never)]
fn emit_starvation(w: &SpinWait, c: u32, wait_ns: u64) {
    match SPIN_EPISODES.reserve::<SpinEpisodeRecord>(0) {
        Some(mut e) => {
            // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
            let rec = unsafe { &mut *e.as_mut_ptr() };
            starvation_record(w, c, wait_ns, rec);
            e.submit(0);
            spc(SPC_EPISODES);
        }
        None => spc(SPC_LOST_RINGBUF),
    }
}

#[fentry(function = "native_queued_spin_lock_slowpath")]
pub fn spin_slowpath_fentry(ctx: FEntryContext) -> i32 {
    wait_entry(ctx.as_ptr(), ctx.arg(0), IRQ_UNKNOWN, 0);
    0
}

#[fexit(function = "native_queued_spin_lock_slowpath")]
pub fn spin_slowpath_fexit(ctx: FExitContext) -> i32 {
    wait_exit(ctx.arg(0), 0);
    0
}

#[fentry(function = "__pv_queued_spin_lock_slowpath")]
pub fn spin_pv_slowpath_fentry(ctx: FEntryContext) -> i32 {
    wait_entry(ctx.as_ptr(), ctx.arg(0), IRQ_UNKNOWN, 0);
    0
}

#[fexit(function = "__pv_queued_spin_lock_slowpath")]
pub fn spin_pv_slowpath_fexit(ctx: FExitContext) -> i32 {
    wait_exit(ctx.arg(0), 0);
    0
}

#[inline(always)]
fn call_depth(slot: u32, delta: i32) -> u32 {
    match SPIN_CALL_DEPTH.get_ptr_mut(slot) {
        // SAFETY: this CPU's slot of a per-CPU array, used before the program returns, not aliased.
        Some(d) => unsafe {
            if delta > 0 {
                *d += 1;
                *d
            } else {
                let before = *d;
                *d = before.saturating_sub(1);
                before
            }
        },
        None => 0,
    }
}

#[inline(always)]
fn regs_irq(regs: *mut pt_regs) -> u32 {
    // SAFETY: `regs` is the kprobe's context, which the verifier lets the program read.
    let flags: u64 = unsafe { (*regs).eflags };
    if flags & X86_EFLAGS_IF != 0 {
        IRQ_ON
    } else {
        IRQ_OFF
    }
}

#[kprobe]
pub fn spin_slowpath_kprobe(ctx: ProbeContext) -> u32 {
    let depth = call_depth(1, 1);
    wait_entry(
        ctx.as_ptr(),
        ctx.arg(0).unwrap_or(0),
        regs_irq(ctx.regs),
        depth,
    );
    0
}

#[kretprobe]
pub fn spin_slowpath_kretprobe(_ctx: RetProbeContext) -> u32 {
    let depth = call_depth(1, -1);
    wait_exit(0, depth);
    0
}

// ---------------------------------------------------------------- acquisitions, holds

/// A watched lock was just acquired on this CPU (the caller checked it is watched).
#[inline(never)]
fn acquired(ctx: *mut core::ffi::c_void, lock: u64) {
    // SAFETY: a BPF helper without pointer arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    let c = cpu();
    let id = bpf_get_current_pid_tgid();
    let (tid, tgid) = (id as u32, (id >> 32) as u32);
    if hooks() & SPIN_HOOK_RELEASE != 0 {
        hold_begin(lock, now, tid, tgid);
    }
    let cfg = SPIN_CONFIG.load();
    let me = SpinAcquirer {
        tid,
        tgid,
        cpu: c,
        _pad: 0,
        count: 0,
        stack: lock,
        comm: bpf_get_current_comm().unwrap_or_default(),
    };
    let nr = cfg.nr_cpus;
    for other in 0..SPIN_MAX_CPUS {
        if other >= nr {
            break;
        }
        if other != c {
            foreign_on(ctx, other, &me);
        }
    }
}

/// Count the acquisition `me` (whose `stack` field carries the lock) in CPU `other`'s
/// wait, if it waits for that lock. Kept out of line and with constant indexes for the
/// older verifiers (6.1).
#[inline(never)]
fn foreign_on(ctx: *mut core::ffi::c_void, other: u32, me: &SpinAcquirer) {
    let Some(w) = SPIN_WAITING.get_ptr_mut(other) else {
        return;
    };
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
    let w = unsafe { &mut *w };
    if w.lock == 0 || w.lock != me.stack {
        return;
    }
    spc(SPC_FOREIGN);
    let comm = me.comm;
    match wait_foreign(w, me.tid, me.tgid, me.cpu, &comm) {
        Some(0) => w.acq[0].stack = stack_of(ctx),
        Some(1) => w.acq[1].stack = stack_of(ctx),
        Some(2) => w.acq[2].stack = stack_of(ctx),
        Some(3) => w.acq[3].stack = stack_of(ctx),
        _ => {}
    }
}

#[inline(always)]
fn hold_begin(lock: u64, now: u64, tid: u32, tgid: u32) {
    let Some(depth) = SPIN_HELD.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
    let depth = unsafe { &mut *depth };
    // The same lock still in a slot: its release was missed. Reuse the slot.
    for i in 0..SPIN_HOLD_DEPTH {
        if i >= *depth {
            break;
        }
        if let Some(h) = SPIN_HOLDS.get_ptr_mut(i) {
            // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
            let h = unsafe { &mut *h };
            if h.lock == lock {
                spc(SPC_UNPAIRED_HOLD);
                *h = SpinHold {
                    lock,
                    ts_ns: now,
                    tid,
                    tgid,
                };
                return;
            }
        }
    }
    match SPIN_HOLDS.get_ptr_mut(*depth) {
        Some(h) => {
            // SAFETY: this CPU's slot of a per-CPU array, written whole before the program returns.
            unsafe {
                *h = SpinHold {
                    lock,
                    ts_ns: now,
                    tid,
                    tgid,
                }
            };
            *depth += 1;
        }
        None => spc(SPC_LOST_HOLD_DEPTH),
    }
}

/// Entry of an unlock function: for every spinlock in the kernel. Returns at once when
/// this CPU holds no watched lock.
#[inline(always)]
fn released(lock: u64) {
    let Some(depth) = SPIN_HELD.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
    let d = unsafe { *depth };
    if d == 0 {
        return;
    }
    released_slow(lock, d);
}

#[inline(never)]
fn released_slow(lock: u64, d: u32) {
    let mut found = SPIN_HOLD_DEPTH;
    for k in 0..SPIN_HOLD_DEPTH {
        if k >= d {
            break;
        }
        let i = d - 1 - k;
        if let Some(h) = SPIN_HOLDS.get(i)
            && h.lock == lock
        {
            found = i;
            break;
        }
    }
    let Some(h) = SPIN_HOLDS.get(found) else {
        return;
    };
    let h = *h;
    // Close the gap: the top slot moves into the freed one.
    if found + 1 < d
        && let Some(top) = SPIN_HOLDS.get(d - 1)
    {
        let top = *top;
        if let Some(slot) = SPIN_HOLDS.get_ptr_mut(found) {
            // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
            unsafe { *slot = top };
        }
    }
    if let Some(depth) = SPIN_HELD.get_ptr_mut(0) {
        // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
        unsafe { *depth = d - 1 };
    }
    // SAFETY: a BPF helper without pointer arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    let hold_ns = now.saturating_sub(h.ts_ns);
    spc(SPC_HOLDS);
    account(
        &SPIN_HOLD_STATS,
        ContentionKey {
            lock,
            stack: 0,
            tgid: h.tgid,
            flags: LCB_F_SPIN,
        },
        hold_ns,
    );
    if is_long_hold(hold_ns, &params()) {
        match SPIN_EPISODES.reserve::<SpinEpisodeRecord>(0) {
            Some(mut e) => {
                // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
                let rec = unsafe { &mut *e.as_mut_ptr() };
                rec.kind = EPISODE_LONG_HOLD;
                rec.cpu = cpu();
                rec.lock = lock;
                rec.ts_ns = h.ts_ns;
                rec.wait_ns = hold_ns;
                rec.foreign = 0;
                rec.other = 0;
                rec.stack = 0;
                rec.tid = h.tid;
                rec.tgid = h.tgid;
                rec.irq = IRQ_UNKNOWN;
                rec.n_acq = 0;
                rec.comm = bpf_get_current_comm().unwrap_or_default();
                rec.acq = [SpinAcquirer::default(); SPIN_ACQUIRERS];
                e.submit(0);
                spc(SPC_EPISODES);
            }
            None => spc(SPC_LOST_RINGBUF),
        }
    }
}

#[inline(always)]
fn on_lock_exit(ctx: *mut core::ffi::c_void, lock: u64) {
    if is_watched(lock) {
        acquired(ctx, lock);
    }
}

macro_rules! lock_fexit {
    ($name:ident, $func:literal) => {
        #[fexit(function = $func)]
        pub fn $name(ctx: FExitContext) -> i32 {
            on_lock_exit(ctx.as_ptr(), ctx.arg(0));
            0
        }
    };
}

macro_rules! unlock_fentry {
    ($name:ident, $func:literal) => {
        #[fentry(function = $func)]
        pub fn $name(ctx: FEntryContext) -> i32 {
            released(ctx.arg(0));
            0
        }
    };
}

lock_fexit!(spin_lock_fexit, "_raw_spin_lock");
lock_fexit!(spin_lock_irqsave_fexit, "_raw_spin_lock_irqsave");
lock_fexit!(spin_lock_irq_fexit, "_raw_spin_lock_irq");
lock_fexit!(spin_lock_bh_fexit, "_raw_spin_lock_bh");
unlock_fentry!(spin_unlock_fentry, "_raw_spin_unlock");
unlock_fentry!(spin_unlock_irqrestore_fentry, "_raw_spin_unlock_irqrestore");
unlock_fentry!(spin_unlock_irq_fentry, "_raw_spin_unlock_irq");
unlock_fentry!(spin_unlock_bh_fentry, "_raw_spin_unlock_bh");

/// kprobe tier of every lock function: remember a watched lock until the return.
#[kprobe]
pub fn spin_lock_kprobe(ctx: ProbeContext) -> u32 {
    let depth = call_depth(0, 1);
    let lock: u64 = ctx.arg(0).unwrap_or(0);
    if !is_watched(lock) {
        return 0;
    }
    let Some(top) = SPIN_PENDING_TOP.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
    let top = unsafe { &mut *top };
    match SPIN_PENDING.get_ptr_mut(*top) {
        Some(p) => {
            // SAFETY: this CPU's slot of a per-CPU array, written whole before the program returns.
            unsafe {
                *p = SpinPending {
                    lock,
                    depth,
                    _pad: 0,
                }
            };
            *top += 1;
        }
        None => spc(SPC_LOST_PENDING),
    }
    0
}

#[kretprobe]
pub fn spin_lock_kretprobe(ctx: RetProbeContext) -> u32 {
    let depth = call_depth(0, -1);
    let Some(top) = SPIN_PENDING_TOP.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
    let top = unsafe { &mut *top };
    if *top == 0 {
        return 0;
    }
    let Some(p) = SPIN_PENDING.get(*top - 1) else {
        return 0;
    };
    if p.depth != depth {
        return 0;
    }
    let lock = p.lock;
    *top -= 1;
    acquired(ctx.as_ptr(), lock);
    0
}

#[kprobe]
pub fn spin_unlock_kprobe(ctx: ProbeContext) -> u32 {
    released(ctx.arg(0).unwrap_or(0));
    0
}
