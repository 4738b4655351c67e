//! Rates and deltas between two recordings of the same session: what happened during one
//! refresh interval of a live view. Pure functions over two [`Recording`] snapshots.
//!
//! Recordings are cumulative since the probes were attached, so every figure of an
//! interval is `current - previous`: counts, total wait and histogram buckets subtract
//! exactly; percentiles of the interval are estimated from the subtracted histogram.
//! The longest wait is the exact maximum *since start* (the maps keep no per-interval
//! maximum).

use std::collections::{BTreeMap, HashMap};

use lockscope_common::{bucket_lower_ns, bucket_upper_ns};

use super::{
    LockEntry, Recording, WaitStats,
    futex::{FutexInfo, PiOwner},
    rwsem::EventKind,
};
use crate::decode::LockType;

/// Identity of a lock row across snapshots: the recording keeps one entry per
/// (address, type), and for user-space locks per (process, address, type): the same
/// futex address in two processes is two locks.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey {
    pub addr: String,
    pub lock_type: LockType,
    /// The process of a user-space lock; `None` for kernel locks.
    pub pid: Option<u32>,
}

impl LockKey {
    pub fn of(l: &LockEntry) -> Self {
        Self {
            addr: l.addr.clone(),
            lock_type: l.lock_type,
            pid: l.user.as_ref().map(|u| u.pid),
        }
    }

    /// A user-space lock (futex word, pthread lock), not a kernel lock.
    pub fn is_user(&self) -> bool {
        self.pid.is_some() || self.lock_type.is_user()
    }
}

/// A user-space lock's futex calls during one interval.
#[derive(Debug, Clone, PartialEq)]
pub struct UserRate {
    /// The process the lock lives in.
    pub pid: u32,
    pub comm: String,
    /// Futex figures of the interval: every count is `current - previous`; `in_progress`
    /// and `pi_owner` are as of the current snapshot.
    pub interval: FutexInfo,
    /// Everything since start.
    pub total: FutexInfo,
    /// Wait calls per second (those that blocked and those that returned EAGAIN).
    pub wait_calls_per_s: f64,
    /// Wake calls per second, and tasks they woke.
    pub wake_calls_per_s: f64,
    pub woken_per_s: f64,
    /// Wait calls per second that found the word changed (no wait).
    pub eagain_per_s: f64,
}

impl UserRate {
    /// Calls blocked in the kernel on this word right now.
    pub fn blocked(&self) -> u64 {
        self.interval.in_progress
    }

    pub fn pi_owner(&self) -> Option<&PiOwner> {
        self.interval.pi_owner.as_ref()
    }
}

/// Futex figures between two cumulative ones of the same word: counters subtract
/// (saturating: a restarted source never shows negative figures); calls in progress and
/// the PI owner are the current ones.
pub fn futex_delta(prev: &FutexInfo, cur: &FutexInfo) -> FutexInfo {
    let d = |a: u64, b: u64| b.saturating_sub(a);
    FutexInfo {
        wait_calls: d(prev.wait_calls, cur.wait_calls),
        eagain: d(prev.eagain, cur.eagain),
        timeouts: d(prev.timeouts, cur.timeouts),
        interrupted: d(prev.interrupted, cur.interrupted),
        wake_calls: d(prev.wake_calls, cur.wake_calls),
        woken: d(prev.woken, cur.woken),
        requeues: d(prev.requeues, cur.requeues),
        requeued: d(prev.requeued, cur.requeued),
        lock_pi_calls: d(prev.lock_pi_calls, cur.lock_pi_calls),
        unlock_pi_calls: d(prev.unlock_pi_calls, cur.unlock_pi_calls),
        trylock_pi_calls: d(prev.trylock_pi_calls, cur.trylock_pi_calls),
        errors: d(prev.errors, cur.errors),
        restarts: d(prev.restarts, cur.restarts),
        unpaired: d(prev.unpaired, cur.unpaired),
        in_progress: cur.in_progress,
        shared_calls: d(prev.shared_calls, cur.shared_calls),
        calls: cur
            .calls
            .iter()
            .map(|(k, &n)| (k.clone(), d(prev.calls.get(k).copied().unwrap_or(0), n)))
            .filter(|(_, n)| *n > 0)
            .collect(),
        pi_owner: cur.pi_owner.clone(),
        pi_owner_died: d(prev.pi_owner_died, cur.pi_owner_died),
        pi_word_unreadable: d(prev.pi_word_unreadable, cur.pi_word_unreadable),
    }
}

/// One acquisition mode of one interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeCount {
    /// This side of the lock has no such mode (readers do not spin, writers do not steal).
    NotApplicable,
    /// The tier cannot see it (`null` in the recording).
    NotAvailable,
    /// Events in the interval; `estimate` when the tier samples rather than sees them.
    Count { n: u64, estimate: bool },
}

impl ModeCount {
    /// The count, where there is one.
    pub fn n(self) -> Option<u64> {
        match self {
            ModeCount::Count { n, .. } => Some(n),
            _ => None,
        }
    }
}

impl std::fmt::Display for ModeCount {
    /// `-`, `n/a`, `12`, or `12~` for an estimate.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModeCount::NotApplicable => f.write_str("-"),
            ModeCount::NotAvailable => f.write_str("n/a"),
            ModeCount::Count { n, estimate } => {
                write!(f, "{n}{}", if *estimate { "~" } else { "" })
            }
        }
    }
}

/// How a rwsem side was acquired during the interval, from the recording's rwsem lock
/// events (kernel `lock_events` names): steals = `rlock_steal`, spins = `opt_lock`,
/// handoffs = `rlock_handoff` / `wlock_handoff`, sleeps = `sleep_reader` /
/// `sleep_writer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireModes {
    pub steals: ModeCount,
    pub spins: ModeCount,
    pub handoffs: ModeCount,
    pub sleeps: ModeCount,
}

impl AcquireModes {
    /// Events seen, all modes summed (for sorting).
    pub fn seen(&self) -> u64 {
        [self.steals, self.spins, self.handoffs, self.sleeps]
            .iter()
            .filter_map(|m| m.n())
            .sum()
    }
}

/// The acquisition modes of a rwsem entry during the interval; `None` for entries
/// without lock events (other lock types, or a recording made without them).
pub fn acquire_modes(
    prev: Option<&LockEntry>,
    cur: &LockEntry,
    kinds: Option<&BTreeMap<String, EventKind>>,
) -> Option<AcquireModes> {
    let events = cur.events.as_ref()?;
    let names = match cur.lock_type {
        LockType::RwsemRead => [
            Some("rlock_steal"),
            None,
            Some("rlock_handoff"),
            Some("sleep_reader"),
        ],
        LockType::RwsemWrite => [
            None,
            Some("opt_lock"),
            Some("wlock_handoff"),
            Some("sleep_writer"),
        ],
        _ => return None,
    };
    let before = prev.and_then(|p| p.events.as_ref());
    let count = |name: Option<&str>| -> ModeCount {
        let Some(name) = name else {
            return ModeCount::NotApplicable;
        };
        match events.get(name).copied().flatten() {
            Some(v) => {
                let was = before
                    .and_then(|b| b.get(name).copied().flatten())
                    .unwrap_or(0);
                ModeCount::Count {
                    n: v.saturating_sub(was),
                    estimate: kinds.and_then(|k| k.get(name)) == Some(&EventKind::Estimate),
                }
            }
            None => ModeCount::NotAvailable,
        }
    };
    Some(AcquireModes {
        steals: count(names[0]),
        spins: count(names[1]),
        handoffs: count(names[2]),
        sleeps: count(names[3]),
    })
}

/// One lock during one interval.
#[derive(Debug, Clone, PartialEq)]
pub struct LockRate {
    pub key: LockKey,
    pub name: String,
    /// Process owning the structure that holds the lock (`mmap_lock of comm[pid]`).
    pub owner_comm: Option<String>,
    /// Waits that ended during the interval (counts, total, histogram exact; min/max are
    /// the tightest bounds the histogram allows).
    pub interval: WaitStats,
    /// Everything since start.
    pub total: WaitStats,
    pub contentions_per_s: f64,
    /// Nanoseconds spent waiting per second of wall time (summed over waiters; may exceed
    /// 1e9 when several tasks wait at once).
    pub wait_ns_per_s: f64,
    /// Distinct waiting processes during the interval.
    pub waiters: usize,
    pub callers: Vec<CallerRate>,
    pub tasks: Vec<TaskRate>,
    /// rwsem acquisition modes during the interval; `None` where the tier cannot see them.
    pub modes: Option<AcquireModes>,
    /// User-space locks: the process and its futex calls; `None` for kernel locks.
    pub user: Option<UserRate>,
    /// Who held the lock (sleeping kernel locks whose word names the holder), longest
    /// wait held since start first.
    pub holders: Vec<HolderRate>,
    /// Wait time since start whose holder was not known.
    pub holder_unknown_ns: u64,
}

/// A lock holder: the wait it caused during the interval (per second) and since start.
#[derive(Debug, Clone, PartialEq)]
pub struct HolderRate {
    /// `comm[pid]/tid`, or `readers`.
    pub name: String,
    pub wait_ns_per_s: f64,
    pub total_wait_ns: u64,
    pub total_waits: u64,
}

/// The holders of `cur`, with the wait each caused since `prev`.
fn holder_rates(prev: Option<&LockEntry>, cur: &LockEntry, secs: f64) -> (Vec<HolderRate>, u64) {
    let Some(h) = &cur.holders else {
        return (Vec::new(), 0);
    };
    let before = |pid: u32, tid: u32, comm: &str| {
        prev.and_then(|p| p.holders.as_ref())
            .and_then(|ph| {
                ph.owners
                    .iter()
                    .find(|o| o.pid == pid && o.tid == tid && (tid != 0 || o.comm == comm))
            })
            .map_or(0, |o| o.wait_total_ns)
    };
    let rates = h
        .owners
        .iter()
        .map(|o| HolderRate {
            name: o.label(),
            wait_ns_per_s: per_second(
                o.wait_total_ns
                    .saturating_sub(before(o.pid, o.tid, &o.comm)),
                secs,
            ),
            total_wait_ns: o.wait_total_ns,
            total_waits: o.contended,
        })
        .collect();
    (
        rates,
        h.owner_unknown_wait_ns
            .saturating_add(h.owners_omitted_wait_ns),
    )
}

impl LockRate {
    /// Average wait of the interval (0 when nothing waited).
    pub fn avg_ns(&self) -> u64 {
        self.interval.avg_ns()
    }

    /// Estimated 99th percentile wait of the interval.
    pub fn p99_ns(&self) -> u64 {
        self.interval.percentile_ns(99.0)
    }

    /// Longest single wait since start (exact).
    pub fn max_ns(&self) -> u64 {
        self.total.max_ns
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct CallerRate {
    pub caller: String,
    pub stack: Vec<String>,
    pub interval: WaitStats,
    pub total: WaitStats,
    pub contentions_per_s: f64,
    pub wait_ns_per_s: f64,
}

/// A waiting process, on one lock or (in [`Rates::tasks`]) over all locks.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRate {
    pub pid: u32,
    pub comm: String,
    pub interval: WaitStats,
    pub total: WaitStats,
    pub contentions_per_s: f64,
    pub wait_ns_per_s: f64,
    /// Locks this process waited on during the interval (per-task view only).
    pub locks: usize,
    /// The lock it waited longest on during the interval (per-task view only).
    pub top_lock: String,
    /// That lock is a user-space lock (per-task view only).
    pub top_lock_user: bool,
}

/// Everything a live view shows for one interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Rates {
    /// Seconds covered: between the two snapshots, or since start for the first one.
    pub interval_s: f64,
    /// The first snapshot, or the session restarted: figures are since its start.
    pub since_start: bool,
    /// Contention events (`contention_begin`) and futex syscalls per second.
    pub events_per_s: f64,
    /// Everything lost since start, summed over reasons.
    pub lost_total: u64,
    /// Lost during the interval.
    pub lost_interval: u64,
    /// Locks in the recording's order (longest total wait since start first).
    pub locks: Vec<LockRate>,
    /// Waiting processes over all locks, busiest (wait per second) first.
    pub tasks: Vec<TaskRate>,
    /// Cgroups of the waiting processes, busiest first (empty for a recording without
    /// cgroup attribution).
    pub cgroups: Vec<super::cgroup::CgroupRate>,
}

/// Figures of the waits that ended between two cumulative statistics of the same thing.
///
/// Counts, total and buckets subtract (saturating, so a restarted source never shows
/// negative figures). The interval's min and max are not recorded; they are bounded by
/// the lowest and highest non-empty bucket and by the cumulative min and max, so that
/// [`WaitStats::percentile_ns`] stays inside what the interval can have seen.
pub fn delta(prev: &WaitStats, cur: &WaitStats) -> WaitStats {
    let d = cur.minus_counts(prev);
    let (hist, count) = (d.hist, d.count);
    let (min_ns, max_ns) = match (
        hist.iter().position(|&n| n != 0),
        hist.iter().rposition(|&n| n != 0),
    ) {
        (Some(lo), Some(hi)) if count > 0 => {
            let min = bucket_lower_ns(lo).max(cur.min_ns);
            let max = (bucket_upper_ns(hi) - 1).min(cur.max_ns).max(min);
            (min, max)
        }
        _ => (0, 0),
    };
    WaitStats {
        min_ns,
        max_ns,
        ..d
    }
}

/// Per-second rate of `n` over `secs` (0 for an empty interval).
pub fn per_second(n: u64, secs: f64) -> f64 {
    if secs > 0.0 && secs.is_finite() {
        n as f64 / secs
    } else {
        0.0
    }
}

/// Whether `cur` continues `prev` (same session, not older). A restarted server starts
/// its counters again; comparing across that would give nonsense.
pub fn continues(prev: &Recording, cur: &Recording) -> bool {
    prev.started_at_unix_s == cur.started_at_unix_s
        && prev.kernel == cur.kernel
        && cur.duration_s >= prev.duration_s
}

/// The rates of the interval between `prev` and `cur`. Without `prev` (first refresh), or
/// when `cur` does not continue it, the figures cover everything since `cur` started.
pub fn rates(prev: Option<&Recording>, cur: &Recording) -> Rates {
    let prev = prev.filter(|p| continues(p, cur));
    let interval_s = match prev {
        Some(p) => cur.duration_s - p.duration_s,
        None => cur.duration_s,
    }
    .max(0.0);
    let empty = Recording {
        locks: Vec::new(),
        lost: BTreeMap::new(),
        events: Default::default(),
        ..cur.clone()
    };
    let base = prev.unwrap_or(&empty);
    let prev_locks: HashMap<LockKey, &LockEntry> =
        base.locks.iter().map(|l| (LockKey::of(l), l)).collect();

    let kinds = cur.rwsem_events.as_ref().map(|e| &e.kinds);
    let locks: Vec<LockRate> = cur
        .locks
        .iter()
        .map(|l| {
            let before = prev_locks.get(&LockKey::of(l)).copied();
            LockRate {
                modes: acquire_modes(before, l, kinds),
                ..lock_rate(before, l, interval_s)
            }
        })
        .collect();

    let lost_total = super::stats::saturating_sum(cur.lost.values().copied());
    let lost_before = super::stats::saturating_sum(base.lost.values().copied());
    Rates {
        interval_s,
        since_start: prev.is_none(),
        events_per_s: per_second(
            cur.events.begin.saturating_sub(base.events.begin)
                + futex_calls(cur).saturating_sub(futex_calls(base)),
            interval_s,
        ),
        lost_total,
        lost_interval: lost_total.saturating_sub(lost_before),
        tasks: task_rates(&locks, interval_s),
        cgroups: super::cgroup::rates(prev, cur, interval_s),
        locks,
    }
}

/// Futex syscalls seen (0 when the futex probes did not run).
fn futex_calls(r: &Recording) -> u64 {
    r.futex_events.as_ref().map_or(0, |f| f.enter)
}

fn lock_rate(prev: Option<&LockEntry>, cur: &LockEntry, secs: f64) -> LockRate {
    let zero = WaitStats::default();
    let interval = delta(prev.map_or(&zero, |p| &p.stats), &cur.stats);

    let prev_callers: HashMap<(&str, &[String]), &WaitStats> = prev
        .map(|p| {
            p.callers
                .iter()
                .map(|c| ((c.caller.as_str(), c.stack.as_slice()), &c.stats))
                .collect()
        })
        .unwrap_or_default();
    let mut callers: Vec<CallerRate> = cur
        .callers
        .iter()
        .map(|c| {
            let before = prev_callers
                .get(&(c.caller.as_str(), c.stack.as_slice()))
                .copied()
                .unwrap_or(&zero);
            let d = delta(before, &c.stats);
            CallerRate {
                caller: c.caller.clone(),
                stack: c.stack.clone(),
                contentions_per_s: per_second(d.count, secs),
                wait_ns_per_s: per_second(d.total_ns, secs),
                interval: d,
                total: c.stats.clone(),
            }
        })
        .collect();
    callers.sort_by(|a, b| {
        b.interval
            .total_ns
            .cmp(&a.interval.total_ns)
            .then_with(|| b.total.total_ns.cmp(&a.total.total_ns))
    });

    let prev_tasks: HashMap<u32, &WaitStats> = prev
        .map(|p| p.tasks.iter().map(|t| (t.pid, &t.stats)).collect())
        .unwrap_or_default();
    let mut tasks: Vec<TaskRate> = cur
        .tasks
        .iter()
        .map(|t| {
            let d = delta(prev_tasks.get(&t.pid).copied().unwrap_or(&zero), &t.stats);
            TaskRate {
                pid: t.pid,
                comm: t.comm.clone(),
                contentions_per_s: per_second(d.count, secs),
                wait_ns_per_s: per_second(d.total_ns, secs),
                locks: usize::from(d.count > 0),
                top_lock: cur.name.clone(),
                top_lock_user: cur.user.is_some(),
                interval: d,
                total: t.stats.clone(),
            }
        })
        .collect();
    tasks.sort_by(|a, b| {
        b.interval
            .total_ns
            .cmp(&a.interval.total_ns)
            .then_with(|| b.total.total_ns.cmp(&a.total.total_ns))
            .then_with(|| a.pid.cmp(&b.pid))
    });
    let waiters = tasks.iter().filter(|t| t.interval.count > 0).count();

    let user = cur.user.as_ref().map(|u| {
        let before = prev.and_then(|p| p.user.as_ref()).map(|p| &p.futex);
        let iv = futex_delta(before.unwrap_or(&FutexInfo::default()), &u.futex);
        UserRate {
            pid: u.pid,
            comm: u.comm.clone(),
            wait_calls_per_s: per_second(iv.wait_calls, secs),
            wake_calls_per_s: per_second(iv.wake_calls, secs),
            woken_per_s: per_second(iv.woken, secs),
            eagain_per_s: per_second(iv.eagain, secs),
            interval: iv,
            total: u.futex.clone(),
        }
    });
    let (holders, holder_unknown_ns) = holder_rates(prev, cur, secs);
    LockRate {
        holders,
        holder_unknown_ns,
        key: LockKey::of(cur),
        name: cur.name.clone(),
        owner_comm: cur.owner.as_ref().map(|o| o.comm.clone()),
        contentions_per_s: per_second(interval.count, secs),
        wait_ns_per_s: per_second(interval.total_ns, secs),
        interval,
        total: cur.stats.clone(),
        waiters,
        callers,
        tasks,
        modes: None,
        user,
    }
}

/// Waiting processes over all locks: their waits on every lock merged.
fn task_rates(locks: &[LockRate], secs: f64) -> Vec<TaskRate> {
    struct Acc {
        comm: String,
        interval: WaitStats,
        total: WaitStats,
        locks: usize,
        top: (u64, String, bool),
    }
    let mut by_pid: BTreeMap<u32, Acc> = BTreeMap::new();
    for l in locks {
        for t in &l.tasks {
            let acc = by_pid.entry(t.pid).or_insert_with(|| Acc {
                comm: t.comm.clone(),
                interval: WaitStats::default(),
                total: WaitStats::default(),
                locks: 0,
                top: (0, String::new(), false),
            });
            acc.interval.merge(&t.interval);
            acc.total.merge(&t.total);
            if t.interval.count > 0 {
                acc.locks += 1;
                if acc.top.1.is_empty() || t.interval.total_ns > acc.top.0 {
                    acc.top = (
                        t.interval.total_ns,
                        format!("{} ({})", l.name, l.key.lock_type),
                        l.key.is_user(),
                    );
                }
            }
        }
    }
    let mut tasks: Vec<TaskRate> = by_pid
        .into_iter()
        .map(|(pid, a)| TaskRate {
            pid,
            comm: a.comm,
            contentions_per_s: per_second(a.interval.count, secs),
            wait_ns_per_s: per_second(a.interval.total_ns, secs),
            interval: a.interval,
            total: a.total,
            locks: a.locks,
            top_lock: a.top.1,
            top_lock_user: a.top.2,
        })
        .collect();
    tasks.sort_by(|a, b| {
        b.interval
            .total_ns
            .cmp(&a.interval.total_ns)
            .then_with(|| b.total.total_ns.cmp(&a.total.total_ns))
            .then_with(|| a.pid.cmp(&b.pid))
    });
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::recording::{
        CallerEntry, EventCounts, Owner, SCHEMA, TaskEntry, tests::wait,
    };
    use lockscope_common::log2_bucket;

    fn merged(parts: &[WaitStats]) -> WaitStats {
        let mut s = WaitStats::default();
        for p in parts {
            s.merge(p);
        }
        s
    }

    fn lock(addr: &str, t: LockType, tasks: &[(u32, WaitStats)]) -> LockEntry {
        let stats = merged(&tasks.iter().map(|(_, s)| s.clone()).collect::<Vec<_>>());
        LockEntry {
            addr: addr.into(),
            lock_type: t,
            user: None,
            events: None,
            omitted: None,
            wait_task: None,
            spin: None,
            holders: None,
            name: format!("lock {addr}"),
            owner: Some(Owner {
                tid: None,
                field: "mmap_lock".into(),
                pid: 1,
                comm: "owner".into(),
            }),
            callers: vec![CallerEntry {
                caller: "f+0x1".into(),
                stack: vec!["f+0x1".into()],
                stats: stats.clone(),
            }],
            tasks: tasks
                .iter()
                .map(|(pid, s)| TaskEntry {
                    cgroup: None,
                    pid: *pid,
                    comm: format!("t{pid}"),
                    stats: s.clone(),
                    events: None,
                })
                .collect(),
            stats,
        }
    }

    fn recording(duration_s: f64, begin: u64, lost: u64, locks: Vec<LockEntry>) -> Recording {
        Recording {
            schema: SCHEMA.into(),
            lockscope_version: "0.1.0".into(),
            kernel: "6.18.0".into(),
            tier: "tracepoint".into(),
            target: "system".into(),
            duration_s,
            started_at_unix_s: 1000.0,
            command_exit_code: None,
            events: EventCounts {
                begin,
                end: begin,
                ..Default::default()
            },
            lost: [("stats_map_full".to_owned(), lost)].into(),
            locks,
            timeline: None,
            futex_events: None,
            rwsem_events: None,
            starvation_episodes: None,
            latency_spikes: None,
            rt_summary: None,
            spin: None,
            cgroups: None,
        }
    }

    /// Two snapshots 2 s apart: the rwsem gained 40 waits of 2 us (task 10) and 2 waits
    /// of 1 ms (task 11); the spinlock gained nothing.
    fn scripted() -> (Recording, Recording) {
        let a = recording(
            3.0,
            500,
            1,
            vec![
                lock(
                    "0x10",
                    LockType::RwsemRead,
                    &[(10, wait(2_000, 100)), (11, wait(1_000_000, 1))],
                ),
                lock("0x20", LockType::Spinlock, &[(12, wait(300, 7))]),
            ],
        );
        let b = recording(
            5.0,
            900,
            4,
            vec![
                lock(
                    "0x10",
                    LockType::RwsemRead,
                    &[(10, wait(2_000, 140)), (11, wait(1_000_000, 3))],
                ),
                lock("0x20", LockType::Spinlock, &[(12, wait(300, 7))]),
            ],
        );
        (a, b)
    }

    #[test]
    fn delta_subtracts_exactly_and_bounds_min_max_by_buckets() {
        let prev = merged(&[wait(2_000, 100)]);
        let cur = merged(&[wait(2_000, 140), wait(1_000_000, 2)]);
        let d = delta(&prev, &cur);
        assert_eq!(d.count, 42);
        assert_eq!(d.total_ns, 40 * 2_000 + 2 * 1_000_000);
        assert_eq!(d.hist_total(), 42);
        assert_eq!(d.hist[log2_bucket(2_000)], 40);
        assert_eq!(d.hist[log2_bucket(1_000_000)], 2);
        // Bounded by the buckets and by the cumulative min/max.
        assert_eq!(d.min_ns, 2_000);
        assert_eq!(d.max_ns, 1_000_000);
        // p99 of 42 waits is the 42nd: one of the 1 ms waits.
        assert_eq!(log2_bucket(d.percentile_ns(99.0)), log2_bucket(1_000_000));
        // Nothing new: all zero, and percentiles of nothing are 0.
        let none = delta(&cur, &cur);
        assert_eq!(none, WaitStats::default());
        assert_eq!(none.percentile_ns(99.0), 0);
    }

    #[test]
    fn delta_never_goes_negative() {
        let d = delta(&wait(5_000, 10), &wait(5_000, 3));
        assert_eq!((d.count, d.total_ns, d.hist_total()), (0, 0, 0));
    }

    #[test]
    fn rates_over_two_scripted_snapshots() {
        let (a, b) = scripted();
        let r = rates(Some(&a), &b);
        assert!(!r.since_start);
        assert_eq!(r.interval_s, 2.0);
        assert_eq!(r.events_per_s, 200.0);
        assert_eq!((r.lost_total, r.lost_interval), (4, 3));

        let rw = &r.locks[0];
        assert_eq!(rw.key.lock_type, LockType::RwsemRead);
        assert_eq!(rw.interval.count, 42);
        assert_eq!(rw.contentions_per_s, 21.0);
        assert_eq!(rw.wait_ns_per_s, (80_000.0 + 2_000_000.0) / 2.0);
        assert_eq!(rw.avg_ns(), (80_000 + 2_000_000) / 42);
        assert_eq!(log2_bucket(rw.p99_ns()), log2_bucket(1_000_000));
        assert_eq!(rw.max_ns(), 1_000_000);
        assert_eq!(rw.waiters, 2);
        assert_eq!(
            rw.modes, None,
            "the tracepoint tier cannot see acquire modes"
        );
        assert_eq!(rw.owner_comm.as_deref(), Some("owner"));
        // Tasks: the one with 2 ms of new wait first.
        assert_eq!(rw.tasks[0].pid, 11);
        assert_eq!(rw.tasks[0].interval.count, 2);
        assert_eq!(rw.tasks[1].contentions_per_s, 20.0);
        assert_eq!(rw.callers[0].interval.count, 42);

        let spin = &r.locks[1];
        assert_eq!(spin.contentions_per_s, 0.0);
        assert_eq!(spin.wait_ns_per_s, 0.0);
        assert_eq!(spin.waiters, 0);
        assert_eq!(spin.p99_ns(), 0);
        assert_eq!(spin.max_ns(), 300, "max is since start");

        // Per-task view over all locks.
        let pids: Vec<u32> = r.tasks.iter().map(|t| t.pid).collect();
        assert_eq!(pids, vec![11, 10, 12]);
        assert_eq!(r.tasks[0].locks, 1);
        assert_eq!(r.tasks[0].top_lock, "lock 0x10 (rwsem:R)");
        assert_eq!(r.tasks[2].locks, 0);
        assert_eq!(r.tasks[2].top_lock, "");
    }

    #[test]
    fn first_snapshot_is_since_start() {
        let (a, _) = scripted();
        let r = rates(None, &a);
        assert!(r.since_start);
        assert_eq!(r.interval_s, 3.0);
        assert_eq!(r.locks[0].interval.count, 101);
        assert_eq!(r.locks[1].contentions_per_s, 7.0 / 3.0);
        assert_eq!(r.lost_interval, 1);
    }

    #[test]
    fn restarted_source_starts_over() {
        let (a, mut b) = scripted();
        b.started_at_unix_s = 2000.0;
        b.duration_s = 1.0;
        let r = rates(Some(&a), &b);
        assert!(r.since_start);
        assert_eq!(r.interval_s, 1.0);
        assert_eq!(r.locks[0].interval.count, 143);
    }

    #[test]
    fn new_lock_counts_from_zero_and_empty_interval_is_zero() {
        let (a, mut b) = scripted();
        b.locks
            .push(lock("0x30", LockType::Mutex, &[(13, wait(10_000, 4))]));
        let r = rates(Some(&a), &b);
        assert_eq!(r.locks[2].contentions_per_s, 2.0);
        assert_eq!(r.locks[2].waiters, 1);
        // Same snapshot twice: zero-length interval, no NaN anywhere.
        let z = rates(Some(&b), &b);
        assert_eq!(z.interval_s, 0.0);
        assert!(z.locks.iter().all(|l| l.contentions_per_s == 0.0));
        assert_eq!(z.events_per_s, 0.0);
    }

    /// A futex word of process `pid` with `waits` blocking waits of 5 us and the given
    /// call counts (wait calls, eagain, wake calls, woken) and calls blocked now.
    fn futex(pid: u32, uaddr: &str, waits: u64, calls: [u64; 4], blocked: u64) -> LockEntry {
        use crate::aggregate::futex::{FutexInfo, UserLock};
        let stats = if waits > 0 {
            wait(5_000, waits)
        } else {
            WaitStats::default()
        };
        let [wait_calls, eagain, wake_calls, woken] = calls;
        let futex = FutexInfo {
            wait_calls,
            eagain,
            wake_calls,
            woken,
            in_progress: blocked,
            calls: [
                ("FUTEX_WAIT".to_owned(), wait_calls),
                ("FUTEX_WAKE".to_owned(), wake_calls),
            ]
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .collect(),
            ..Default::default()
        };
        LockEntry {
            addr: uaddr.into(),
            lock_type: LockType::Futex,
            name: format!("futex {uaddr} of app[{pid}]"),
            owner: None,
            callers: Vec::new(),
            tasks: vec![TaskEntry {
                cgroup: None,
                pid,
                comm: "app".into(),
                stats: stats.clone(),
                events: None,
            }],
            stats,
            user: Some(UserLock {
                pid,
                comm: "app".into(),
                futex,
                pthread: None,
            }),
            events: None,
            omitted: None,
            wait_task: None,
            spin: None,
            holders: None,
        }
    }

    #[test]
    fn futex_rows_subtract_their_calls_and_are_keyed_by_process() {
        // The same address in two processes: two locks.
        let a = recording(
            1.0,
            0,
            0,
            vec![
                futex(7, "0x1000", 10, [30, 20, 12, 10], 0),
                futex(8, "0x1000", 0, [0, 0, 0, 0], 0),
            ],
        );
        let b = recording(
            3.0,
            0,
            0,
            vec![
                futex(7, "0x1000", 50, [90, 40, 52, 50], 3),
                futex(8, "0x1000", 4, [6, 2, 4, 4], 1),
            ],
        );
        let (mut a, mut b) = (a, b);
        let calls = |enter| {
            Some(crate::aggregate::futex::FutexEvents {
                enter,
                exit: enter,
                ..Default::default()
            })
        };
        a.futex_events = calls(100);
        b.futex_events = calls(400);
        let r = rates(Some(&a), &b);
        // Futex syscalls count as events: 300 in 2 s.
        assert_eq!(r.events_per_s, 150.0);
        assert_eq!(r.locks.len(), 2);
        assert_ne!(r.locks[0].key, r.locks[1].key);
        assert!(r.locks.iter().all(|l| l.key.is_user()));
        let l7 = r.locks.iter().find(|l| l.key.pid == Some(7)).unwrap();
        // 40 blocking waits in 2 s.
        assert_eq!(l7.contentions_per_s, 20.0);
        assert_eq!(l7.wait_ns_per_s, 40.0 * 5_000.0 / 2.0);
        let u = l7.user.as_ref().unwrap();
        assert_eq!((u.pid, u.comm.as_str()), (7, "app"));
        assert_eq!(u.interval.wait_calls, 60);
        assert_eq!(u.wait_calls_per_s, 30.0);
        assert_eq!(u.eagain_per_s, 10.0);
        assert_eq!(u.wake_calls_per_s, 20.0);
        assert_eq!(u.woken_per_s, 20.0);
        assert_eq!(u.interval.calls["FUTEX_WAIT"], 60);
        assert_eq!(u.total.wait_calls, 90);
        // Blocked calls are as of now, not a difference.
        assert_eq!(u.blocked(), 3);
        // Process 8 started in this interval: counted from zero.
        let l8 = r.locks.iter().find(|l| l.key.pid == Some(8)).unwrap();
        let u8 = l8.user.as_ref().unwrap();
        assert_eq!(l8.contentions_per_s, 2.0);
        assert_eq!(u8.wait_calls_per_s, 3.0);
        assert_eq!(u8.blocked(), 1);
        // The per-task view knows that the top lock is a user-space lock.
        let t7 = r.tasks.iter().find(|t| t.pid == 7).unwrap();
        assert!(t7.top_lock_user);
        assert_eq!(t7.top_lock, "futex 0x1000 of app[7] (futex)");
        // Kernel locks are not user locks.
        let (ka, _) = scripted();
        assert!(rates(None, &ka).locks.iter().all(|l| !l.key.is_user()));
        assert!(rates(None, &ka).locks.iter().all(|l| l.user.is_none()));
    }

    #[test]
    fn futex_delta_never_goes_negative_and_keeps_the_current_owner() {
        use crate::aggregate::futex::{FutexInfo, PiOwner};
        let prev = FutexInfo {
            lock_pi_calls: 10,
            unlock_pi_calls: 9,
            calls: [("FUTEX_LOCK_PI".to_owned(), 10)].into(),
            pi_owner: Some(PiOwner {
                tid: 1,
                comm: "old".into(),
            }),
            ..Default::default()
        };
        let cur = FutexInfo {
            lock_pi_calls: 4,
            unlock_pi_calls: 12,
            calls: [
                ("FUTEX_LOCK_PI".to_owned(), 4),
                ("FUTEX_UNLOCK_PI".to_owned(), 12),
            ]
            .into(),
            pi_owner: Some(PiOwner {
                tid: 2,
                comm: "new".into(),
            }),
            in_progress: 2,
            ..Default::default()
        };
        let d = futex_delta(&prev, &cur);
        assert_eq!(d.lock_pi_calls, 0);
        assert_eq!(d.unlock_pi_calls, 3);
        assert_eq!(d.calls.len(), 1, "zero deltas are left out: {:?}", d.calls);
        assert_eq!(d.calls["FUTEX_UNLOCK_PI"], 12);
        assert_eq!(d.pi_owner.unwrap().tid, 2);
        assert_eq!(d.in_progress, 2);
    }

    #[test]
    fn acquire_modes_are_interval_deltas_marked_by_kind() {
        let ev = |steal: Option<u64>, handoff: u64| -> super::super::rwsem::EventValues {
            [
                ("rlock_steal".to_owned(), steal),
                ("rlock_handoff".to_owned(), Some(handoff)),
                ("sleep_reader".to_owned(), None),
            ]
            .into()
        };
        let mut a = lock("0x10", LockType::RwsemRead, &[(10, wait(2_000, 1))]);
        a.events = Some(ev(None, 5));
        let mut b = a.clone();
        b.events = Some(ev(None, 12));
        let kinds: BTreeMap<String, EventKind> = [
            ("rlock_steal".to_owned(), EventKind::NotAvailable),
            ("rlock_handoff".to_owned(), EventKind::Estimate),
        ]
        .into();
        let m = acquire_modes(Some(&a), &b, Some(&kinds)).unwrap();
        assert_eq!(m.steals, ModeCount::NotAvailable);
        assert_eq!(m.spins, ModeCount::NotApplicable, "readers do not spin");
        assert_eq!(
            m.handoffs,
            ModeCount::Count {
                n: 7,
                estimate: true
            }
        );
        assert_eq!(m.sleeps, ModeCount::NotAvailable);
        assert_eq!(
            format!("{}/{}/{}/{}", m.steals, m.spins, m.handoffs, m.sleeps),
            "n/a/-/7~/n/a"
        );
        assert_eq!(m.seen(), 7);
        // An exact count, first seen: from zero.
        b.events = Some(ev(Some(3), 12));
        let m = acquire_modes(None, &b, None).unwrap();
        assert_eq!(
            m.steals,
            ModeCount::Count {
                n: 3,
                estimate: false
            }
        );
        assert_eq!(m.steals.to_string(), "3");
        // Writers do not steal; no events, or not a rwsem: no modes.
        let mut w = lock("0x10", LockType::RwsemWrite, &[(10, wait(2_000, 1))]);
        w.events = Some([("opt_lock".to_owned(), Some(4))].into());
        let m = acquire_modes(None, &w, None).unwrap();
        assert_eq!(m.steals, ModeCount::NotApplicable);
        assert_eq!(
            m.spins,
            ModeCount::Count {
                n: 4,
                estimate: false
            }
        );
        assert_eq!(m.handoffs, ModeCount::NotAvailable);
        w.events = None;
        assert_eq!(acquire_modes(None, &w, None), None);
        let mut spin = lock("0x20", LockType::Spinlock, &[(12, wait(300, 7))]);
        spin.events = Some(Default::default());
        assert_eq!(acquire_modes(None, &spin, None), None);
        // Through rates(): the recording's kinds mark the estimate.
        let (mut r1, mut r2) = scripted();
        r1.locks[0].events = Some(ev(None, 5));
        r2.locks[0].events = Some(ev(None, 12));
        r2.rwsem_events = Some(crate::aggregate::rwsem::RwsemEventsSummary {
            tier: "tracepoint".into(),
            hooks: BTreeMap::new(),
            kinds,
            note: None,
            system: BTreeMap::new(),
            lost: BTreeMap::new(),
        });
        let r = rates(Some(&r1), &r2);
        assert_eq!(r.locks[0].modes.unwrap().handoffs.to_string(), "7~");
        assert_eq!(r.locks[1].modes, None);
    }
}
