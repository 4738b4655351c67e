//! Real-time probes (tracepoint tier).
//!
//! - Wakeup latency of real-time threads: `hrtimer_expire_entry` of an hrtimer sleeper
//!   (its function is `hrtimer_wakeup`; the task is in the containing `hrtimer_sleeper`)
//!   remembers per task when the timer was due (`_softexpires`), how late it fired and
//!   whether its CPU was idle; `sched_switch` switching that task in measures the
//!   latency from due to running, the span cyclictest measures. Only latencies over the
//!   threshold go to userspace (`RT_EVENTS`).
//! - `sched_wait_task(p)`: `wait_task_inactive` takes `p->pi_lock` on every loop iteration
//!   (Linux 6.7+), so each event is one acquisition of the tracee's `pi_lock` by the
//!   waiter: counted per (pi_lock, waiter, CPU, tracee) in `WAIT_TASK_STATS`.
//! - Lock activity for correlation: spinning waits at least `activity_floor_ns` long and
//!   bursts of `sched_wait_task` go to userspace with their CPU and times. For a wait on a
//!   watched lock (a task's `pi_lock`) the event carries how often each other CPU acquired
//!   that lock during the wait (`LOCK_ACQ`: proxy acquisitions and ended waits), from which
//!   userspace infers probable starvation.
//! - A task set (`LIVE_TASKS`, task pointer -> ids), kept from fork, free, switch-in and
//!   `sched_wait_task`, confirms that a contended lock at `task + offsetof(pi_lock)` is the
//!   `pi_lock` of a live task before it is named so.

use aya_ebpf::{
    Global,
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns,
        bpf_probe_read_kernel,
    },
    macros::{btf_tracepoint, map},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
    programs::BtfTracePointContext,
};
use lockscope_common::*;

use crate::maps::{CONFIG, TARGETS, current_is_target};

#[unsafe(no_mangle)]
pub static RT_CONFIG: Global<RtConfig> = Global::new(RtConfig {
    enabled: 0,
    off_task_prio: 0,
    latency_threshold_ns: u64::MAX,
    activity_floor_ns: u64::MAX,
    hrtimer_wakeup: 0,
    off_hrtimer_function: 0,
    off_sleeper_task: 0,
    off_task_pid: 0,
    burst_gap_ns: 0,
    off_hrtimer_softexpires: 0,
    _pad: 0,
});

#[map]
pub static RT_EVENTS: RingBuf = RingBuf::with_byte_size(RT_EVENTS_BYTES, 0);

/// 1 while every probe is attached: set by userspace after attaching and cleared before
/// detaching, so that the latency that attaching and detaching cause (text patching,
/// RCU grace periods) is not timed as the workload's.
#[map]
pub static RT_GATE: Array<u32> = Array::with_max_entries(1, 0);

#[map]
pub static RT_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(RT_COUNTERS_LEN, 0);

/// An expired sleeper timer of a real-time task not yet switched in.
#[repr(C)]
#[derive(Clone, Copy)]
struct Pending {
    /// When the timer was due, on the probes' clock.
    due_ns: u64,
    /// How late it fired.
    late_ns: u64,
    /// The CPU that expired it.
    cpu: u32,
    /// `RT_SPIKE_IDLE` when it interrupted the idle task.
    flags: u32,
}

/// Expired sleeper timers of real-time tasks not yet switched in: task -> [`Pending`].
#[map]
static RT_PENDING: HashMap<u64, Pending> = HashMap::with_max_entries(RT_PENDING_MAX_ENTRIES, 0);

#[map]
static WAIT_TASK_STATS: HashMap<WaitTaskKey, u64> =
    HashMap::with_max_entries(WAIT_TASK_MAX_ENTRIES, 0);

/// Acquisitions of watched locks per (lock, CPU); each CPU updates only its own entries.
#[map]
static LOCK_ACQ: LruHashMap<LockCpuKey, LockAcq> =
    LruHashMap::with_max_entries(LOCK_ACQ_MAX_ENTRIES, 0);

#[map]
pub static LIVE_TASKS: LruHashMap<u64, LiveTask> =
    LruHashMap::with_max_entries(LIVE_TASKS_MAX_ENTRIES, 0);

/// Per spinning-wait slot (parallel to `CPU_WAIT_SLOTS`): the other CPUs' acquisition
/// counts of the lock when the wait began; `[RT_CPUS]` is 1 when the lock is watched.
#[map]
static WAIT_WATCH: PerCpuArray<[u64; RT_CPUS + 1]> =
    PerCpuArray::with_max_entries(CPU_WAIT_MAX_DEPTH, 0);

/// The current `sched_wait_task` burst on this CPU (kind 0: none).
#[map]
static WT_BURST: PerCpuArray<RtEvent> = PerCpuArray::with_max_entries(1, 0);

/// Scratch for building an event (too big for the BPF stack).
#[map]
static RT_SCRATCH: PerCpuArray<RtEvent> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn rt_count(slot: u32) {
    if let Some(c) = RT_COUNTERS.get_ptr_mut(slot) {
        // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
        unsafe { *c += 1 };
    }
}

#[inline(always)]
fn read_u64(addr: u64) -> u64 {
    // SAFETY: a checked read: a bad address gives an error, never a fault.
    unsafe { bpf_probe_read_kernel(addr as *const u64) }.unwrap_or(0)
}

#[inline(always)]
fn read_u32(addr: u64) -> u32 {
    // SAFETY: a checked read: a bad address gives an error, never a fault.
    unsafe { bpf_probe_read_kernel(addr as *const u32) }.unwrap_or(0)
}

#[inline(always)]
fn remember_task(task: u64) {
    // SAFETY: a map value, only read, before the program returns.
    if task == 0 || unsafe { LIVE_TASKS.get(task) }.is_some() {
        return;
    }
    let cfg = CONFIG.load();
    let rt = RT_CONFIG.load();
    let t = LiveTask {
        tid: read_u32(task + rt.off_task_pid as u64),
        tgid: read_u32(task + cfg.off_task_tgid as u64),
    };
    let _ = LIVE_TASKS.insert(task, t, 0);
}

/// Spinning waits of tasks outside the target are lock activity too.
#[inline(always)]
pub fn evidence_all() -> bool {
    RT_CONFIG.load().enabled & RT_EVIDENCE_ALL != 0
}

/// The live task whose `pi_lock` is `lock`, if the task set knows one.
#[inline(always)]
pub fn pi_lock_task(lock: u64) -> Option<(u64, LiveTask)> {
    let cfg = CONFIG.load();
    let task = lock.wrapping_sub(cfg.off_task_pi_lock as u64);
    // SAFETY: a map value, only read, before the program returns.
    unsafe { LIVE_TASKS.get(task) }.map(|t| (task, *t))
}

#[btf_tracepoint(function = "sched_process_fork")]
pub fn rt_task_fork(ctx: BtfTracePointContext) -> i32 {
    let child: u64 = ctx.arg(1);
    remember_task(child);
    0
}

#[btf_tracepoint(function = "sched_process_free")]
pub fn rt_task_free(ctx: BtfTracePointContext) -> i32 {
    let task: u64 = ctx.arg(0);
    crate::probes::contention::retire_task_pi_lock(task);
    let _ = LIVE_TASKS.remove(task);
    let _ = RT_PENDING.remove(task);
    0
}

#[btf_tracepoint(function = "hrtimer_expire_entry")]
pub fn rt_hrtimer_expire_entry(ctx: BtfTracePointContext) -> i32 {
    let rt = RT_CONFIG.load();
    if rt.enabled == 0 || RT_GATE.get(0).copied() != Some(1) {
        return 0;
    }
    let timer: u64 = ctx.arg(0);
    if read_u64(timer + rt.off_hrtimer_function as u64) != rt.hrtimer_wakeup {
        return 0;
    }
    let task = read_u64(timer + rt.off_sleeper_task as u64);
    if task == 0 {
        return 0;
    }
    let prio = read_u32(task + rt.off_task_prio as u64) as i32;
    if !(0..100).contains(&prio) {
        return 0;
    }
    let cfg = CONFIG.load();
    if cfg.filter_mode == FILTER_TGIDS {
        let tgid = read_u32(task + cfg.off_task_tgid as u64);
        // SAFETY: a map value, only read, before the program returns.
        if unsafe { TARGETS.get(tgid) }.is_none() {
            return 0;
        }
    }
    // SAFETY: a BPF helper without pointer arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    // How late the timer fired: the expiry handler's `now` against the time it was due,
    // both in the timer's own clock base (cyclictest may sleep on CLOCK_REALTIME).
    let due = read_u64(timer + rt.off_hrtimer_softexpires as u64);
    let late_ns = if due > 0 {
        read_u64(ctx.arg::<u64>(1)).saturating_sub(due)
    } else {
        0
    };
    let pending = Pending {
        due_ns: now.saturating_sub(late_ns),
        late_ns,
        // SAFETY: a BPF helper without pointer arguments.
        cpu: unsafe { bpf_get_smp_processor_id() },
        // The idle task (pid 0) was interrupted: the CPU was halted when the timer came.
        flags: if bpf_get_current_pid_tgid() as u32 == 0 {
            RT_SPIKE_IDLE
        } else {
            0
        },
    };
    // SAFETY: a map value, only read, before the program returns.
    if unsafe { RT_PENDING.get(task) }.is_some() {
        rt_count(RT_CNT_WAKEUP_REPLACED);
    }
    if RT_PENDING.insert(task, pending, 0).is_err() {
        rt_count(RT_CNT_LOST_PENDING_FULL);
    }
    0
}

#[btf_tracepoint(function = "sched_switch")]
pub fn rt_sched_switch(ctx: BtfTracePointContext) -> i32 {
    let next: u64 = ctx.arg(2);
    remember_task(next);
    let rt = RT_CONFIG.load();
    if rt.enabled == 0 {
        return 0;
    }
    // SAFETY: a map value, only read, before the program returns.
    let Some(p) = (unsafe { RT_PENDING.get(next) }) else {
        return 0;
    };
    let p = *p;
    let _ = RT_PENDING.remove(next);
    // SAFETY: a BPF helper without pointer arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    let latency = now.saturating_sub(p.due_ns);
    rt_count(RT_CNT_WAKEUPS);
    if latency < rt.latency_threshold_ns {
        return 0;
    }
    rt_count(RT_CNT_SPIKES);
    let Some(ev) = RT_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
    let ev = unsafe { &mut *ev };
    let cfg = CONFIG.load();
    ev.kind = RT_EV_SPIKE;
    // SAFETY: a BPF helper without pointer arguments.
    ev.cpu = unsafe { bpf_get_smp_processor_id() };
    ev.ts_ns = p.due_ns;
    ev.dur_ns = latency;
    ev.lock = p.late_ns;
    ev.tid = read_u32(next + rt.off_task_pid as u64);
    ev.tgid = read_u32(next + cfg.off_task_tgid as u64);
    ev.comm =
        // SAFETY: a checked read: a bad address gives an error, never a fault.
        unsafe { bpf_probe_read_kernel((next + cfg.off_task_comm as u64) as *const [u8; 16]) }
            .unwrap_or([0; 16]);
    ev.flags = read_u32(next + rt.off_task_prio as u64);
    ev.aux = p.flags;
    ev.count = p.cpu as u64;
    ev.foreign = [0; RT_CPUS];
    ev.foreign_tid = [0; RT_CPUS];
    if RT_EVENTS.output::<RtEvent>(&*ev, 0).is_err() {
        rt_count(RT_CNT_LOST_SPIKE);
    }
    0
}

#[btf_tracepoint(function = "sched_wait_task")]
pub fn rt_sched_wait_task(ctx: BtfTracePointContext) -> i32 {
    let cfg = CONFIG.load();
    let tracee: u64 = ctx.arg(0);
    if current_is_target(&cfg) {
        on_wait_task(tracee, false);
    } else if evidence_all() {
        on_wait_task(tracee, true);
    }
    0
}

/// A `sched_wait_task` acquisition of `tracee`'s `pi_lock`. `evidence_only`: the waiter
/// is outside the target, so the acquisition is real-time evidence only (the foreign
/// acquisitions and the burst), not in the lock table.
#[inline(never)]
fn on_wait_task(tracee: u64, evidence_only: bool) {
    let cfg = CONFIG.load();
    let rt = RT_CONFIG.load();
    remember_task(tracee);
    let lock = tracee + cfg.off_task_pi_lock as u64;
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: a BPF helper without pointer arguments.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let tracee_tid = read_u32(tracee + rt.off_task_pid as u64);
    if evidence_only {
        count_acquisition(lock, cpu, pid_tgid);
        wait_task_burst(tracee_tid, lock, cpu, pid_tgid, &rt);
        return;
    }
    rt_count(RT_CNT_WAIT_TASK);
    crate::probes::contention::name_task_pi_lock(tracee);
    let key = WaitTaskKey {
        lock,
        waiter_tid: pid_tgid as u32,
        waiter_tgid: (pid_tgid >> 32) as u32,
        cpu,
        tracee_tid,
    };
    match WAIT_TASK_STATS.get_ptr_mut(key) {
        // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
        Some(n) => unsafe { *n += 1 },
        None => {
            if let Err(e) = WAIT_TASK_STATS.insert(key, 1, BPF_NOEXIST as u64) {
                if e == -17 {
                    if let Some(n) = WAIT_TASK_STATS.get_ptr_mut(key) {
                        // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
                        unsafe { *n += 1 };
                    }
                } else {
                    rt_count(RT_CNT_LOST_WAIT_TASK_FULL);
                }
            }
        }
    }
    count_acquisition(lock, cpu, pid_tgid);
    wait_task_burst(tracee_tid, lock, cpu, pid_tgid, &rt);
}

/// Extend this CPU's burst of `sched_wait_task` acquisitions, or send it and start one.
#[inline(always)]
fn wait_task_burst(tracee_tid: u32, lock: u64, cpu: u32, pid_tgid: u64, rt: &RtConfig) {
    if rt.enabled == 0 {
        return;
    }
    // SAFETY: a BPF helper without pointer arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(b) = WT_BURST.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
    let b = unsafe { &mut *b };
    if b.kind == RT_EV_WAIT_TASK
        && b.lock == lock
        && b.tid == pid_tgid as u32
        && now.saturating_sub(b.ts_ns + b.dur_ns) <= rt.burst_gap_ns as u64
    {
        b.dur_ns = now - b.ts_ns;
        b.count += 1;
        return;
    }
    flush_burst(b, rt);
    b.kind = RT_EV_WAIT_TASK;
    b.cpu = cpu;
    b.ts_ns = now;
    b.dur_ns = 0;
    b.lock = lock;
    b.tid = pid_tgid as u32;
    b.tgid = (pid_tgid >> 32) as u32;
    b.comm = bpf_get_current_comm().unwrap_or([0; 16]);
    b.flags = 0;
    b.aux = tracee_tid;
    b.count = 1;
}

/// Send the finished burst when it lasted at least the activity floor.
#[inline(always)]
fn flush_burst(b: &mut RtEvent, rt: &RtConfig) {
    if b.kind == RT_EV_WAIT_TASK && b.dur_ns >= rt.activity_floor_ns {
        rt_count(RT_CNT_ACTIVITY);
        if RT_EVENTS.output::<RtEvent>(&*b, 0).is_err() {
            rt_count(RT_CNT_LOST_ACTIVITY);
        }
    }
    b.kind = 0;
}

#[inline(always)]
fn count_acquisition(lock: u64, cpu: u32, pid_tgid: u64) {
    let key = LockCpuKey { lock, cpu, _pad: 0 };
    match LOCK_ACQ.get_ptr_mut(key) {
        Some(a) => {
            // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
            let a = unsafe { &mut *a };
            a.count += 1;
            a.last_tid = pid_tgid as u32;
            a.last_tgid = (pid_tgid >> 32) as u32;
        }
        None => {
            let a = LockAcq {
                count: 1,
                last_tid: pid_tgid as u32,
                last_tgid: (pid_tgid >> 32) as u32,
            };
            if LOCK_ACQ.insert(key, a, 0).is_err() {
                rt_count(RT_CNT_LOST_ACQ_FULL);
            }
        }
    }
}

/// A spinning wait began in slot `slot` of this CPU's wait stack.
// Index loops: bounded and plain for the verifier.
#[allow(clippy::needless_range_loop)]
#[inline(never)]
pub fn on_spin_begin(slot: u32, lock: u64, watched: bool) {
    let Some(w) = WAIT_WATCH.get_ptr_mut(slot) else {
        return;
    };
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
    let w = unsafe { &mut *w };
    let rt = RT_CONFIG.load();
    if !watched || rt.enabled == 0 {
        w[RT_CPUS] = 0;
        return;
    }
    w[RT_CPUS] = 1;
    for c in 0..RT_CPUS {
        let key = LockCpuKey {
            lock,
            cpu: c as u32,
            _pad: 0,
        };
        // SAFETY: a map value, only read, before the program returns.
        w[c] = unsafe { LOCK_ACQ.get(key) }.map(|a| a.count).unwrap_or(0);
    }
}

/// The spinning wait in slot `slot` ended at `now`: count the acquisition (watched locks)
/// and send it as lock activity when it lasted at least the floor.
#[allow(clippy::needless_range_loop)]
#[inline(never)]
pub fn on_spin_end(slot: u32, w: &WaitStart, now: u64) {
    let Some(watch) = WAIT_WATCH.get(slot) else {
        return;
    };
    let watched = watch[RT_CPUS] == 1;
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: a BPF helper without pointer arguments.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    if watched {
        count_acquisition(w.lock, cpu, pid_tgid);
    }
    let rt = RT_CONFIG.load();
    let wait = now.saturating_sub(w.ts_ns);
    if rt.enabled == 0 || wait < rt.activity_floor_ns {
        return;
    }
    rt_count(RT_CNT_ACTIVITY);
    let Some(ev) = RT_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
    let ev = unsafe { &mut *ev };
    ev.kind = RT_EV_WAIT;
    ev.cpu = cpu;
    ev.ts_ns = w.ts_ns;
    ev.dur_ns = wait;
    ev.lock = w.lock;
    ev.tid = pid_tgid as u32;
    ev.tgid = w.tgid;
    ev.comm = bpf_get_current_comm().unwrap_or([0; 16]);
    ev.flags = flags_kind(w.flags);
    ev.aux = watched as u32;
    ev.count = 0;
    for c in 0..RT_CPUS {
        ev.foreign[c] = 0;
        ev.foreign_tid[c] = 0;
        if !watched || c as u32 == cpu {
            continue;
        }
        let key = LockCpuKey {
            lock: w.lock,
            cpu: c as u32,
            _pad: 0,
        };
        // SAFETY: a map value, only read, before the program returns.
        if let Some(a) = unsafe { LOCK_ACQ.get(key) } {
            ev.foreign[c] = a.count.saturating_sub(watch[c]) as u32;
            ev.foreign_tid[c] = a.last_tid;
        }
    }
    if RT_EVENTS.output::<RtEvent>(&*ev, 0).is_err() {
        rt_count(RT_CNT_LOST_ACTIVITY);
    }
}
