//! The real-time view of a run: starvation episodes on raw spinlocks and latency
//! spikes of real-time threads, with the lock activity that overlaps each spike.
//! These are the recording's top-level `"starvation_episodes"` and `"latency_spikes"`.
//!
//! Timestamps are kernel monotonic nanoseconds (`bpf_ktime_get_ns`), the same clock
//! for every producer, so windows from different probes can be compared directly.

use serde::{Deserialize, Serialize};

/// A task, as it appears in an episode or a spike.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRef {
    /// Thread group id (the process).
    pub pid: u32,
    /// Thread id, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    pub comm: String,
    /// Kernel stack, innermost first, symbolized (`function+0xoff`); empty when unknown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stack: Vec<String>,
}

/// What kind of episode: a waiter starved while others re-took the lock, or one
/// hold that lasted long.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EpisodeKind {
    Starvation,
    LongHold,
}

/// Another CPU's acquisitions of the lock while the waiter waited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acquirer {
    pub cpu: u32,
    pub task: TaskRef,
    pub count: u64,
}

/// One starvation (or long-hold) episode on a raw spinlock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StarvationEpisode {
    pub kind: EpisodeKind,
    /// Start of the wait (or hold), kernel monotonic ns.
    pub ts_ns: u64,
    pub cpu: u32,
    /// Lock name as in `"locks"` (`pi_lock of stress-ng[1234]`, or the address).
    pub lock: String,
    /// Lock address, `0x...`.
    pub addr: String,
    /// The starved waiter (for a long hold: the holder).
    pub waiter: TaskRef,
    /// Length of the wait (or hold).
    pub wait_ns: u64,
    /// Acquisitions of the lock by other CPUs during the wait, in all.
    pub foreign_acquisitions: u64,
    /// The foreign acquirers, largest count first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acquirers: Vec<Acquirer>,
    /// Whether interrupts were off on the waiter's CPU, when the tier can tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irqs_off: Option<bool>,
    /// Inferred from proxy signals (tracepoint tier) rather than seen exactly.
    pub probable: bool,
    /// `tracepoint` or `deep`.
    pub tier: String,
}

/// Where a latency figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SpikeSource {
    /// lockscope's own measurement: from when the thread's timer was due to the thread
    /// running on its CPU.
    Lockscope,
    /// cyclictest's own output, when it was the traced command.
    Cyclictest,
}

/// Lock activity that overlaps a spike's window on the spike's CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Overlap {
    /// Lock name as in `"locks"`.
    pub lock: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
    /// `wait`, `hold`, `starvation`, `probable-starvation`, `long-hold`, `wait-task`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskRef>,
    /// Nanoseconds of the activity that fall inside the spike's window.
    pub overlap_ns: u64,
}

/// One wakeup latency over the threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencySpike {
    pub cpu: u32,
    /// When the timer was due (start of the window), kernel monotonic ns.
    pub ts_ns: u64,
    pub latency_ns: u64,
    pub source: SpikeSource,
    pub task: TaskRef,
    /// Lock activity on that CPU in the window, largest overlap first; empty when
    /// none overlapped.
    #[serde(default)]
    pub overlaps: Vec<Overlap>,
    /// Whether the overlapping activity accounts for the spike (see the report for the rule).
    pub explained: bool,
    /// lockscope's own spikes: how late the timer fired (from when it was due to its
    /// expiry handler), the part of the latency before the thread was woken; the rest
    /// is wakeup to running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timer_late_ns: Option<u64>,
    /// lockscope's own spikes: the CPU was idle when the timer fired, so a late timer
    /// was an interrupt that came late to a halted CPU (a hypervisor, a deep C-state,
    /// firmware), not a lock or a section with interrupts off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_idle: Option<bool>,
}

impl LatencySpike {
    /// The timer fired late on an idle CPU, and that lateness is most of the spike:
    /// nothing on the CPU held the thread back (see `cpu_idle`).
    pub fn late_timer_on_idle_cpu(&self) -> bool {
        self.cpu_idle == Some(true)
            && self
                .timer_late_ns
                .is_some_and(|l| l as f64 >= LATE_TIMER_SHARE * self.latency_ns as f64)
    }
}

/// Share of a spike that a late timer on an idle CPU must account for to be called so.
pub const LATE_TIMER_SHARE: f64 = 0.5;
