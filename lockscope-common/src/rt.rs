//! The real-time probes: wakeup latency of real-time threads (`hrtimer_expire_entry` ->
//! `sched_switch`), the `sched_wait_task` proxy for acquisitions of a tracee's `pi_lock`,
//! and the lock activity userspace needs to correlate latency spikes with (spinning waits
//! over a floor, `sched_wait_task` bursts). Rare events travel through the `RT_EVENTS`
//! ring buffer; everything else is aggregated in maps.

use crate::assert_size;

/// Read-only configuration of the real-time probes (`RT_CONFIG`), set by the loader.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RtConfig {
    /// `RT_ENABLED`: the real-time probes record, and with `RT_EVIDENCE_ALL` the
    /// spinning waits of every task are lock activity, not only the target's; 0: every
    /// hook returns at once.
    pub enabled: u32,
    /// `task_struct.prio` (real-time tasks have prio < 100).
    pub off_task_prio: u32,
    /// Wakeups slower than this go to userspace as spikes.
    pub latency_threshold_ns: u64,
    /// Spinning waits at least this long go to userspace as lock activity.
    pub activity_floor_ns: u64,
    /// Address of `hrtimer_wakeup` (the function of every hrtimer sleeper), from kallsyms.
    pub hrtimer_wakeup: u64,
    /// `hrtimer.function`.
    pub off_hrtimer_function: u32,
    /// `hrtimer_sleeper.task` (the sleeper's `timer` is its first field).
    pub off_sleeper_task: u32,
    /// `task_struct.pid` (the thread id).
    pub off_task_pid: u32,
    /// Two `sched_wait_task` events of one waiter on one tracee further apart than this
    /// start a new burst.
    pub burst_gap_ns: u32,
    /// `hrtimer._softexpires`: when the timer was due (in its clock base).
    pub off_hrtimer_softexpires: u32,
    pub _pad: u32,
}
assert_size!(RtConfig, 56);

/// `RtConfig::enabled`: the real-time probes record.
pub const RT_ENABLED: u32 = 1;
/// `RtConfig::enabled`: spinning waits of tasks outside the target are lock activity
/// too (the blockers of a real-time thread are other tasks); they never enter the lock
/// table.
pub const RT_EVIDENCE_ALL: u32 = 2;

/// CPUs whose foreign acquisitions of a watched lock are counted one by one; acquisitions
/// on higher CPUs are counted together in the last slot.
pub const RT_CPUS: usize = 16;

/// Kinds of [`RtEvent`].
pub const RT_EV_SPIKE: u32 = 1;
/// A spinning lock wait at least `activity_floor_ns` long.
pub const RT_EV_WAIT: u32 = 2;
/// A burst of `sched_wait_task` events of one waiter on one tracee (`count` events).
pub const RT_EV_WAIT_TASK: u32 = 3;

/// One record of the `RT_EVENTS` ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RtEvent {
    /// One of `RT_EV_*`.
    pub kind: u32,
    pub cpu: u32,
    /// Start: when the timer was due (spike), wait begin, first event of the burst.
    pub ts_ns: u64,
    /// Length: wakeup latency (due to switched in), wait time, first to last event of
    /// the burst.
    pub dur_ns: u64,
    /// The lock (wait: its address; burst: the tracee's `pi_lock`). Spike: how late the
    /// timer fired (due to its expiry handler), the part of `dur_ns` before the wakeup.
    pub lock: u64,
    /// Spike: the woken thread. Wait and burst: the waiter.
    pub tid: u32,
    pub tgid: u32,
    /// The thread's own `comm`.
    pub comm: [u8; 16],
    /// Wait: `LCB_F_*` flags. Spike: the woken task's prio.
    pub flags: u32,
    /// Wait: 1 when `foreign` was counted (a watched `pi_lock`). Burst: tracee tid.
    /// Spike: `RT_SPIKE_IDLE` when the timer interrupted the idle task.
    pub aux: u32,
    /// Burst: `sched_wait_task` events in it. Wait: CPU that expired the timer (spike).
    pub count: u64,
    /// Wait on a watched lock: acquisitions of that lock by each other CPU during the wait.
    pub foreign: [u32; RT_CPUS],
    /// Wait on a watched lock: last thread that acquired it on each other CPU.
    pub foreign_tid: [u32; RT_CPUS],
}
assert_size!(RtEvent, 72 + 8 * RT_CPUS);

/// `RtEvent::aux` of a spike: the CPU was idle when the timer fired (the interrupt
/// came late to a halted CPU: a hypervisor, a deep C-state, firmware).
pub const RT_SPIKE_IDLE: u32 = 1;

/// Acquisitions of a watched lock on one CPU (key of `LOCK_ACQ`: lock address, CPU).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LockCpuKey {
    pub lock: u64,
    pub cpu: u32,
    pub _pad: u32,
}
assert_size!(LockCpuKey, 16);

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockAcq {
    pub count: u64,
    pub last_tid: u32,
    pub last_tgid: u32,
}
assert_size!(LockAcq, 16);

/// Key of `WAIT_TASK_STATS`: one waiter's `sched_wait_task` events on one tracee, per CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WaitTaskKey {
    /// The tracee's `pi_lock` address.
    pub lock: u64,
    /// The waiting (tracing) thread and process.
    pub waiter_tid: u32,
    pub waiter_tgid: u32,
    pub cpu: u32,
    /// The tracee's thread id.
    pub tracee_tid: u32,
}
assert_size!(WaitTaskKey, 24);

/// A live task, as the task set knows it (`LIVE_TASKS`: task pointer -> this).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveTask {
    pub tid: u32,
    pub tgid: u32,
}
assert_size!(LiveTask, 8);

/// Slots of the per-CPU `RT_COUNTERS` array.
pub const RT_CNT_WAKEUPS: u32 = 0;
pub const RT_CNT_SPIKES: u32 = 1;
pub const RT_CNT_WAIT_TASK: u32 = 2;
pub const RT_CNT_ACTIVITY: u32 = 3;
/// Ring buffer full: a spike was not delivered.
pub const RT_CNT_LOST_SPIKE: u32 = 4;
/// Ring buffer full: a wait or burst was not delivered.
pub const RT_CNT_LOST_ACTIVITY: u32 = 5;
/// The pending-wakeup map was full: a wakeup was not timed.
pub const RT_CNT_LOST_PENDING_FULL: u32 = 6;
/// The `sched_wait_task` aggregation map was full.
pub const RT_CNT_LOST_WAIT_TASK_FULL: u32 = 7;
/// The per-lock acquisition map was full: foreign acquisitions undercounted.
pub const RT_CNT_LOST_ACQ_FULL: u32 = 8;
/// Pending wakeups replaced before the task ran (timer re-armed, task migrated away).
pub const RT_CNT_WAKEUP_REPLACED: u32 = 9;
pub const RT_COUNTERS_LEN: u32 = 10;

pub const RT_COUNTER_NAMES: [&str; RT_COUNTERS_LEN as usize] = [
    "rt_wakeups_timed",
    "rt_spikes",
    "sched_wait_task",
    "lock_activity_events",
    "rt_ringbuf_lost_spikes",
    "rt_ringbuf_lost_activity",
    "rt_pending_map_full",
    "wait_task_map_full",
    "lock_acq_map_full",
    "rt_wakeups_replaced",
];

/// Map sizes.
pub const RT_EVENTS_BYTES: u32 = 4 << 20;
pub const RT_PENDING_MAX_ENTRIES: u32 = 4096;
pub const WAIT_TASK_MAX_ENTRIES: u32 = 16384;
pub const LOCK_ACQ_MAX_ENTRIES: u32 = 16384;
pub const LIVE_TASKS_MAX_ENTRIES: u32 = 65536;

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for RtConfig {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for RtEvent {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for LockCpuKey {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for LockAcq {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for WaitTaskKey {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for LiveTask {}
}
