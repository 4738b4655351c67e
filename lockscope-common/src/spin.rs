//! The deep spinlock tier on watched raw spinlocks (every task's `pi_lock`): exact waits
//! from the queued-spinlock slowpath, hold times from the exit of `_raw_spin_lock*` to the
//! entry of `_raw_spin_unlock*`, and the starvation detector. The detector's steps are
//! pure functions here, run by the eBPF probes and by the user side's scripted tests.
//!
//! A starvation episode: one waiter waits on a watched lock for at least
//! `threshold_ns` while other CPUs acquire that lock at least `min_foreign` times during
//! the wait. A long hold: one hold of a watched lock of at least `hold_threshold_ns`.

use crate::assert_size;

/// Waiting slots are per CPU, in an array scanned by every acquisition of a watched
/// lock: CPUs at or above this index are not tracked (counted in `SPC_LOST_CPU_RANGE`).
pub const SPIN_MAX_CPUS: u32 = 64;
/// Foreign acquirers kept per wait (one stack each); the rest are counted together.
pub const SPIN_ACQUIRERS: usize = 4;
/// Watched locks held at once on one CPU (holds nest: a pi_lock, then a runqueue's...).
pub const SPIN_HOLD_DEPTH: u32 = 4;
/// kprobe tier: lock calls in flight on one CPU between entry and return.
pub const SPIN_PENDING_DEPTH: u32 = 8;

pub const SPIN_WATCH_MAX_ENTRIES: u32 = 65536;
pub const SPIN_STATS_MAX_ENTRIES: u32 = 8192;
pub const SPIN_STACKS_MAX_ENTRIES: u32 = 4096;
pub const SPIN_RINGBUF_BYTES: u32 = 256 * 1024;

pub const SPIN_DEFAULT_THRESHOLD_NS: u64 = 20_000;
pub const SPIN_DEFAULT_MIN_FOREIGN: u64 = 8;
/// One hold of a pi_lock for this long is pathological on real hardware (holds take
/// well under a microsecond); under emulation 20 us holds are everywhere.
pub const SPIN_DEFAULT_HOLD_THRESHOLD_NS: u64 = 1_000_000;

/// What a watched lock is, in [`SpinWatch::kind`].
pub const WATCH_PI_LOCK: u32 = 1;

/// A watched lock: the task whose `pi_lock` it is.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpinWatch {
    /// Thread id (the kernel's `pid`) and process of the task.
    pub tid: u32,
    pub tgid: u32,
    pub kind: u32,
    pub _pad: u32,
    /// The task's `comm` when it was first watched.
    pub comm: [u8; 16],
}
assert_size!(SpinWatch, 32);

/// Detector thresholds, in an array map the loader (and `record` flags) write.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpinParams {
    pub threshold_ns: u64,
    pub min_foreign: u64,
    pub hold_threshold_ns: u64,
}
assert_size!(SpinParams, 24);

impl Default for SpinParams {
    fn default() -> Self {
        Self {
            threshold_ns: SPIN_DEFAULT_THRESHOLD_NS,
            min_foreign: SPIN_DEFAULT_MIN_FOREIGN,
            hold_threshold_ns: SPIN_DEFAULT_HOLD_THRESHOLD_NS,
        }
    }
}

/// Read-only configuration (offsets from BTF), set by the loader.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpinConfig {
    /// Possible CPUs (at most [`SPIN_MAX_CPUS`] are scanned).
    pub nr_cpus: u32,
    pub off_task_pid: u32,
    pub off_task_tgid: u32,
    pub off_task_pi_lock: u32,
    pub off_task_comm: u32,
    pub _pad: u32,
}
assert_size!(SpinConfig, 24);

/// Which hooks run (`SPIN_HOOK_*` bits), written by the loader after attaching.
pub const SPIN_HOOK_WAIT: u32 = 1 << 0;
pub const SPIN_HOOK_ACQUIRE: u32 = 1 << 1;
/// Every unlock function is hooked: holds are timed.
pub const SPIN_HOOK_RELEASE: u32 = 1 << 2;

/// Interrupt state of the waiter's CPU, in [`SpinWait::irq`].
pub const IRQ_UNKNOWN: u32 = 0;
pub const IRQ_ON: u32 = 1;
pub const IRQ_OFF: u32 = 2;
/// x86 `EFLAGS.IF`.
pub const X86_EFLAGS_IF: u64 = 1 << 9;

/// Another CPU's acquisitions of the lock during one wait.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpinAcquirer {
    pub tid: u32,
    pub tgid: u32,
    pub cpu: u32,
    pub _pad: u32,
    pub count: u64,
    /// Stack hash (key of `SPIN_STACKS`) at its first acquisition; 0 when none.
    pub stack: u64,
    pub comm: [u8; 16],
}
assert_size!(SpinAcquirer, 48);

/// A wait in progress on a watched lock: one slot per CPU. The waiter's CPU fills it at
/// slowpath entry; acquirers on other CPUs add to it while they hold the lock (so their
/// updates are serialized by the lock itself); the waiter reads it at slowpath exit,
/// holding the lock too.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpinWait {
    /// 0 when the slot is free.
    pub lock: u64,
    pub ts_ns: u64,
    /// Waiter's stack hash.
    pub stack: u64,
    /// Foreign acquisitions during the wait, in all.
    pub foreign: u64,
    /// Of `foreign`, those by acquirers that did not fit in `acq`.
    pub other: u64,
    pub tid: u32,
    pub tgid: u32,
    /// `IRQ_*`.
    pub irq: u32,
    pub n_acq: u32,
    /// kprobe tier: lock-call depth on this CPU at entry (matches the kretprobe).
    pub depth: u32,
    pub _pad: u32,
    pub comm: [u8; 16],
    pub acq: [SpinAcquirer; SPIN_ACQUIRERS],
}
assert_size!(SpinWait, 80 + 48 * SPIN_ACQUIRERS);

/// A watched lock held on this CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpinHold {
    pub lock: u64,
    pub ts_ns: u64,
    pub tid: u32,
    pub tgid: u32,
}
assert_size!(SpinHold, 24);

/// kprobe tier: a lock call between entry and return on this CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpinPending {
    pub lock: u64,
    /// Call depth at entry (this call included).
    pub depth: u32,
    pub _pad: u32,
}
assert_size!(SpinPending, 16);

pub const EPISODE_STARVATION: u32 = 1;
pub const EPISODE_LONG_HOLD: u32 = 2;

/// One episode, sent through the `SPIN_EPISODES` ring buffer (rare events only).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpinEpisodeRecord {
    /// `EPISODE_*`.
    pub kind: u32,
    pub cpu: u32,
    pub lock: u64,
    /// Start of the wait (or hold), kernel monotonic ns.
    pub ts_ns: u64,
    pub wait_ns: u64,
    pub foreign: u64,
    pub other: u64,
    pub stack: u64,
    pub tid: u32,
    pub tgid: u32,
    pub irq: u32,
    pub n_acq: u32,
    pub comm: [u8; 16],
    pub acq: [SpinAcquirer; SPIN_ACQUIRERS],
}
assert_size!(SpinEpisodeRecord, 88 + 48 * SPIN_ACQUIRERS);

/// Slots of the per-CPU `SPIN_COUNTERS` array.
pub const SPC_WAITS: u32 = 0;
pub const SPC_HOLDS: u32 = 1;
pub const SPC_FOREIGN: u32 = 2;
pub const SPC_EPISODES: u32 = 3;
/// Episodes the ring buffer had no room for.
pub const SPC_LOST_RINGBUF: u32 = 4;
/// A wait on a watched lock began while this CPU's slot was busy (nested in an
/// interrupt): not timed.
pub const SPC_LOST_WAIT_NESTED: u32 = 5;
/// A hold began with every hold slot of this CPU in use: not timed.
pub const SPC_LOST_HOLD_DEPTH: u32 = 6;
pub const SPC_LOST_STATS_FULL: u32 = 7;
pub const SPC_LOST_STACK: u32 = 8;
/// A task could not be added to the watched set (map full): its pi_lock is not watched.
pub const SPC_LOST_WATCH_FULL: u32 = 9;
/// A wait on a CPU at or above `SPIN_MAX_CPUS`: not tracked.
pub const SPC_LOST_CPU_RANGE: u32 = 10;
/// A hold whose release was never seen (the same lock acquired again on this CPU).
pub const SPC_UNPAIRED_HOLD: u32 = 11;
/// kprobe tier: more lock calls in flight than `SPIN_PENDING_DEPTH`.
pub const SPC_LOST_PENDING: u32 = 12;
pub const SPIN_COUNTERS_LEN: u32 = 13;

pub const SPIN_COUNTER_NAMES: [&str; SPIN_COUNTERS_LEN as usize] = [
    "waits",
    "holds",
    "foreign_acquisitions",
    "episodes",
    "spin_ringbuf_full",
    "spin_wait_nested",
    "spin_hold_depth",
    "spin_stats_map_full",
    "spin_stack_missing",
    "spin_watch_map_full",
    "spin_cpu_out_of_range",
    "spin_hold_unpaired",
    "spin_pending_depth",
];

/// `SpinWait::lock` while a wait is being started: not free (a program that would start
/// a wait in the slot counts itself nested), and no lock (other CPUs count nothing in it).
pub const SPIN_WAIT_STARTING: u64 = 1;

/// Start a wait in a free slot. Other CPUs count their acquisitions in it
/// ([`wait_foreign`]) as soon as `lock` is set, so the counts are zeroed first and the
/// lock set last, each store volatile so that the compiler keeps that order (x86 keeps
/// stores in program order). Set first, a waiter's program preempted between the stores
/// (PREEMPT_RT) once left an episode with 293 foreign acquisitions and none of their
/// acquirers: the zeroed `n_acq` landed after them.
#[inline(always)]
pub fn wait_begin(w: &mut SpinWait, lock: u64, ts_ns: u64, tid: u32, tgid: u32, irq: u32) {
    // SAFETY: fields of `w`, a valid exclusive reference.
    unsafe {
        core::ptr::write_volatile(&mut w.lock, SPIN_WAIT_STARTING);
        core::ptr::write_volatile(&mut w.foreign, 0);
        core::ptr::write_volatile(&mut w.other, 0);
        core::ptr::write_volatile(&mut w.n_acq, 0);
    }
    w.ts_ns = ts_ns;
    w.stack = 0;
    w.tid = tid;
    w.tgid = tgid;
    w.irq = irq;
    w.depth = 0;
    // SAFETY: as above.
    unsafe { core::ptr::write_volatile(&mut w.lock, lock) };
}

/// A foreign acquisition of the waited-for lock. Returns the index of a newly added
/// acquirer (whose stack the caller then fills), or `None`.
#[inline(always)]
pub fn wait_foreign(
    w: &mut SpinWait,
    tid: u32,
    tgid: u32,
    cpu: u32,
    comm: &[u8; 16],
) -> Option<usize> {
    w.foreign += 1;
    let n = w.n_acq as usize;
    // Only the loop index touches the table: 6.1's verifier rejects an index read
    // from memory even after a bounds check.
    let mut i = 0;
    while i < SPIN_ACQUIRERS {
        if i == n {
            w.acq[i] = SpinAcquirer {
                tid,
                tgid,
                cpu,
                _pad: 0,
                count: 1,
                stack: 0,
                comm: *comm,
            };
            w.n_acq = i as u32 + 1;
            return Some(i);
        }
        let a = &mut w.acq[i];
        if a.tid == tid && a.cpu == cpu {
            a.count += 1;
            return None;
        }
        i += 1;
    }
    w.other += 1;
    None
}

/// Does a finished wait make a starvation episode?
#[inline(always)]
pub const fn is_starvation(wait_ns: u64, foreign: u64, p: &SpinParams) -> bool {
    wait_ns >= p.threshold_ns && foreign >= p.min_foreign
}

/// Does a finished hold make a long-hold episode?
#[inline(always)]
pub const fn is_long_hold(hold_ns: u64, p: &SpinParams) -> bool {
    p.hold_threshold_ns > 0 && hold_ns >= p.hold_threshold_ns
}

/// The episode record of a finished wait.
#[inline(always)]
pub fn starvation_record(w: &SpinWait, cpu: u32, wait_ns: u64, out: &mut SpinEpisodeRecord) {
    out.kind = EPISODE_STARVATION;
    out.cpu = cpu;
    out.lock = w.lock;
    out.ts_ns = w.ts_ns;
    out.wait_ns = wait_ns;
    out.foreign = w.foreign;
    out.other = w.other;
    out.stack = w.stack;
    out.tid = w.tid;
    out.tgid = w.tgid;
    out.irq = w.irq;
    out.n_acq = w.n_acq;
    out.comm = w.comm;
    out.acq = w.acq;
}

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for SpinWatch {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for SpinParams {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for SpinConfig {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for SpinAcquirer {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for SpinWait {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for SpinHold {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for SpinPending {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for SpinEpisodeRecord {}
}
