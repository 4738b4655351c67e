//! The recording: what `record` writes, `report` reads and `serve` hands out
//! (`lockscope.report/2`). Types only, with their own parsing and consistency checks; the
//! builders from a raw snapshot are in [`super::recording`] and the families' modules.

use std::collections::BTreeMap;

use lockscope_common::COUNTERS_LEN;
use serde::{Deserialize, Serialize};

use super::{
    WaitStats,
    futex::{FutexEvents, UserLock},
};
use crate::decode::LockType;

pub const SCHEMA: &str = "lockscope.report/2";
/// Schema versions this lockscope reads: 1 (no timeline) and 2.
pub const SCHEMA_VERSIONS: std::ops::RangeInclusive<u32> = 1..=2;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Recording {
    pub schema: String,
    pub lockscope_version: String,
    pub kernel: String,
    /// Which probe tier fed the figures (`tracepoint`, `deep`).
    pub tier: String,
    /// What was traced: `system`, `pid 123`, `cgroup /sys/fs/cgroup/x`, `command ...`.
    pub target: String,
    pub duration_s: f64,
    /// Unix time at which recording started.
    pub started_at_unix_s: f64,
    /// Exit code of the traced command, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_exit_code: Option<i32>,
    /// Contention events seen (begin, end) and waits still in progress at the end.
    pub events: EventCounts,
    /// Everything that could not be stored, by reason. All zero in a complete recording.
    pub lost: BTreeMap<String, u64>,
    pub locks: Vec<LockEntry>,
    /// Contention per interval over the run (schema 2; absent in version 1 files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<super::timeline::Timeline>,
    /// Futex syscalls seen (when the futex probes ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub futex_events: Option<FutexEvents>,
    /// rwsem acquisition modes: tier, hooks, exact/estimate/n/a per event, and the
    /// system-wide totals in the kernel's `lock_event_counts` names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rwsem_events: Option<super::rwsem::RwsemEventsSummary>,
    /// Starvation and long-hold episodes on raw spinlocks (when those probes ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starvation_episodes: Option<Vec<super::rt::StarvationEpisode>>,
    /// Wakeup latencies over the threshold, with the lock activity in their window
    /// (with `--latency-threshold`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_spikes: Option<Vec<super::rt::LatencySpike>>,
    /// What the real-time probes timed and sent (with `--latency-threshold`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rt_summary: Option<super::pi_lock::RtSummary>,
    /// How the deep spinlock tier (pi_lock waits, holds, starvation detector) ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spin: Option<super::spin::SpinSummary>,
    /// Waits per (cgroup, lock type), from every kernel contention entry and futex word.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroups: Option<Vec<super::cgroup::CgroupEntry>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventCounts {
    pub begin: u64,
    pub end: u64,
    pub in_progress_at_end: u64,
    pub unpaired_end: u64,
    pub unpaired_begin: u64,
    pub type_filtered: u64,
    /// Waits whose kernel stack was not walked (past the per-CPU stack budget): counted
    /// for their lock, task and type; the callers are figures of the other waits.
    #[serde(default)]
    pub stack_not_sampled: u64,
}

/// A kernel lock entry's `addr`: the address, then `/N` for the address's owner
/// generation N when it is not the first (the address was seen freed and reused by
/// another object or process during the recording; each owner has its own entries).
pub fn lock_addr(addr: u64, generation: u32) -> String {
    if generation == 0 {
        format!("{addr:#x}")
    } else {
        format!("{addr:#x}/{generation}")
    }
}

/// The address and owner generation of a [`lock_addr`] string.
pub fn parse_lock_addr(s: &str) -> Option<(u64, u32)> {
    let (addr, generation) = match s.split_once('/') {
        Some((a, g)) => (a, g.parse().ok()?),
        None => (s, 0),
    };
    Some((
        u64::from_str_radix(addr.strip_prefix("0x")?, 16).ok()?,
        generation,
    ))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockEntry {
    /// Lock address, `0x...`, and `/N` for a later owner generation ([`lock_addr`]).
    pub addr: String,
    #[serde(rename = "type")]
    pub lock_type: LockType,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    #[serde(flatten)]
    pub stats: WaitStats,
    pub callers: Vec<CallerEntry>,
    pub tasks: Vec<TaskEntry>,
    /// Callers and tasks a long-running sink's snapshot left out (see [`Detail`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omitted: Option<Omitted>,
    /// User-space locks (futex words): `pid`, `comm` and the `futex` object.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub user: Option<UserLock>,
    /// rwsem entries: the lock events of this side (rwsem:R reader events, rwsem:W
    /// writer events), `null` where the tier cannot see one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<super::rwsem::EventValues>,
    /// A task's `pi_lock`: acquisitions seen through `sched_wait_task` (tracepoint-tier
    /// proxy; contention waits alone undercount).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_task: Option<super::pi_lock::WaitTaskProxy>,
    /// Deep spinlock tier entries (watched locks): `tier` and `hold`. Boxed: few entries
    /// have one, and inline it would be a third of every entry's size (a daemon holds
    /// tens of thousands of entries).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub spin: Option<Box<super::spin::SpinDetail>>,
    /// Sleeping locks whose word names its holder (mutex, rwsem, rtmutex): who held the
    /// lock while these waits waited.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub holders: Option<Holders>,
}

/// Who held a lock while its waits waited, as the lock's owner word named the holder
/// when each wait began. `owner_unknown_wait_ns`: the wait time whose holder the word
/// did not name (the lock had just been released, or the holder map was full).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holders {
    /// Longest total wait first, at most [`HOLDERS_PER_LOCK`].
    pub owners: Vec<HolderEntry>,
    pub owner_unknown_wait_ns: u64,
    /// Wait time of the holders past the first [`HOLDERS_PER_LOCK`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub owners_omitted_wait_ns: u64,
}

pub const HOLDERS_PER_LOCK: usize = 8;

/// One holder: the thread the owner word named (`readers` for a reader-owned rwsem,
/// with pid and tid 0), the waits that found it holding, and their wait.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderEntry {
    /// The holder thread's name (`readers`: the rwsem was held by readers).
    pub comm: String,
    pub pid: u32,
    pub tid: u32,
    pub contended: u64,
    pub wait_total_ns: u64,
    /// The holder's kernel stack, innermost first, taken at the first wait that found it
    /// holding (Linux 6.2+; empty when not taken).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stack: Vec<String>,
}

/// `HolderEntry::comm` of reader-owned rwsem waits.
pub const READERS: &str = "readers";

impl HolderEntry {
    /// `comm[pid]/tid`, or `readers`.
    pub fn label(&self) -> String {
        if self.tid == 0 {
            self.comm.clone()
        } else {
            format!("{}[{}]/{}", self.comm, self.pid, self.tid)
        }
    }
}

/// The process whose structure holds the lock (for `mmap_lock`, `siglock`, `pi_lock`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub field: String,
    pub pid: u32,
    pub comm: String,
    /// A `pi_lock`'s thread, when it is not the process's main thread (`comm` is then
    /// the thread's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallerEntry {
    /// First frame outside the locking code, `function+0xoff`.
    pub caller: String,
    /// Kernel stack, innermost first, tracing glue removed.
    pub stack: Vec<String>,
    #[serde(flatten)]
    pub stats: WaitStats,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskEntry {
    pub pid: u32,
    pub comm: String,
    /// The process's cgroup (v2 path below the root), as the probes recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    #[serde(flatten)]
    pub stats: WaitStats,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<super::rwsem::EventValues>,
}

pub const UNKNOWN_CALLER: &str = "[unknown]";

impl EventCounts {
    pub fn from_counters(c: &[u64; COUNTERS_LEN as usize], in_progress: u64) -> Self {
        use lockscope_common::*;
        Self {
            begin: c[CNT_BEGIN as usize],
            end: c[CNT_END as usize],
            in_progress_at_end: in_progress,
            unpaired_end: c[CNT_UNPAIRED_END as usize],
            unpaired_begin: c[CNT_UNPAIRED_BEGIN as usize],
            type_filtered: c[CNT_TYPE_FILTERED as usize],
            stack_not_sampled: c[CNT_STACK_NOT_SAMPLED as usize],
        }
    }
}

/// Callers and tasks a snapshot left out of a lock entry (see [`Detail`]); their
/// figures are still in the lock's totals.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Omitted {
    pub callers: u64,
    pub tasks: u64,
    /// Waits timed without a stack walk (the per-CPU stack budget was spent): in the
    /// lock's and its tasks' figures, in no caller's. The callers are then a sample.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unsampled_waits: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl Recording {
    /// Parse a recording file's text, with a clear error for other files and versions.
    pub fn from_json(text: &str) -> anyhow::Result<Self> {
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| anyhow::anyhow!("not a lockscope recording (invalid JSON: {e})"))?;
        let schema = value
            .get("schema")
            .and_then(|s| s.as_str())
            .ok_or_else(|| anyhow::anyhow!("not a lockscope recording (no \"schema\" field)"))?;
        let Some(version) = schema.strip_prefix("lockscope.report/") else {
            anyhow::bail!("not a lockscope recording (schema `{schema}`)");
        };
        let version: u32 = version
            .parse()
            .map_err(|_| anyhow::anyhow!("not a lockscope recording (schema `{schema}`)"))?;
        if !SCHEMA_VERSIONS.contains(&version) {
            anyhow::bail!(
                "recording has schema version {version}, this lockscope reads versions {}-{}: \
                 use a newer lockscope",
                SCHEMA_VERSIONS.start(),
                SCHEMA_VERSIONS.end()
            );
        }
        let rec: Self = serde_json::from_value(value)
            .map_err(|e| anyhow::anyhow!("malformed lockscope recording: {e}"))?;
        rec.check_consistent()
            .map_err(|e| anyhow::anyhow!("inconsistent lockscope recording: {e}"))?;
        Ok(rec)
    }

    /// What the renderers rely on: finite times, a timeline whose every series has one
    /// value per interval, waits that fit their counts.
    pub fn check_consistent(&self) -> Result<(), String> {
        if !(self.duration_s.is_finite() && self.duration_s >= 0.0) {
            return Err(format!("duration_s is {}", self.duration_s));
        }
        if let Some(t) = &self.timeline {
            if !(t.interval_s.is_finite() && t.interval_s > 0.0) {
                return Err(format!("timeline.interval_s is {}", t.interval_s));
            }
            if t.t_s.iter().any(|x| !x.is_finite()) || t.t_s.windows(2).any(|w| w[1] < w[0]) {
                return Err("timeline.t_s is not a rising series of times".into());
            }
            for se in &t.series {
                if se.contended.len() != t.t_s.len() || se.wait_ns.len() != t.t_s.len() {
                    return Err(format!(
                        "timeline series {} has {} and {} values for {} intervals",
                        se.addr,
                        se.contended.len(),
                        se.wait_ns.len(),
                        t.t_s.len()
                    ));
                }
            }
        }
        for l in &self.locks {
            let s = &l.stats;
            if s.max_ns > s.total_ns || (s.count == 0 && s.total_ns > 0) || s.failed > s.count {
                return Err(format!(
                    "lock {} ({}): contended {}, failed {}, wait_total_ns {}, wait_max_ns {}",
                    l.addr, l.name, s.count, s.failed, s.total_ns, s.max_ns
                ));
            }
        }
        Ok(())
    }
}
