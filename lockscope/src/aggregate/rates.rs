//! Rates and deltas between two recordings of the same session: what happened during one
//! refresh interval of a live view. Pure functions over two [`Recording`] snapshots.
//!
//! Recordings are cumulative since the probes were attached, so every figure of an
//! interval is `current - previous`: counts, total wait and histogram buckets subtract
//! exactly; percentiles of the interval are estimated from the subtracted histogram.
//! The longest wait is the exact maximum *since start* (the maps keep no per-interval
//! maximum).

use std::collections::{BTreeMap, HashMap};

use lockscope_common::{HIST_BUCKETS, bucket_lower_ns, bucket_upper_ns};

use super::{LockEntry, Recording, WaitStats};
use crate::decode::LockType;

/// Identity of a lock row across snapshots: the recording keeps one entry per
/// (address, type).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey {
    pub addr: String,
    pub lock_type: LockType,
}

impl LockKey {
    pub fn of(l: &LockEntry) -> Self {
        Self {
            addr: l.addr.clone(),
            lock_type: l.lock_type,
        }
    }
}

/// How a rwsem was acquired (kernel `lock_events` names). The tracepoint tier cannot see
/// these; the recording carries none yet, so every lock has `None` ("n/a"). The deep tier
/// will fill them in: this is where its per-interval deltas belong.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AcquireModes {
    pub steals: u64,
    pub spins: u64,
    pub handoffs: u64,
    pub sleeps: u64,
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
}

/// Everything a live view shows for one interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Rates {
    /// Seconds covered: between the two snapshots, or since start for the first one.
    pub interval_s: f64,
    /// The first snapshot, or the session restarted: figures are since its start.
    pub since_start: bool,
    /// Contention events (`contention_begin`) per second.
    pub events_per_s: f64,
    /// Everything lost since start, summed over reasons.
    pub lost_total: u64,
    /// Lost during the interval.
    pub lost_interval: u64,
    /// Locks in the recording's order (longest total wait since start first).
    pub locks: Vec<LockRate>,
    /// Waiting processes over all locks, busiest (wait per second) first.
    pub tasks: Vec<TaskRate>,
}

/// Figures of the waits that ended between two cumulative statistics of the same thing.
///
/// Counts, total and buckets subtract (saturating, so a restarted source never shows
/// negative figures). The interval's min and max are not recorded; they are bounded by
/// the lowest and highest non-empty bucket and by the cumulative min and max, so that
/// [`WaitStats::percentile_ns`] stays inside what the interval can have seen.
pub fn delta(prev: &WaitStats, cur: &WaitStats) -> WaitStats {
    let mut hist = [0u64; HIST_BUCKETS];
    for (i, h) in hist.iter_mut().enumerate() {
        *h = cur.hist[i].saturating_sub(prev.hist[i]);
    }
    let count = cur.count.saturating_sub(prev.count);
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
        count,
        failed: cur.failed.saturating_sub(prev.failed),
        total_ns: cur.total_ns.saturating_sub(prev.total_ns),
        min_ns,
        max_ns,
        hist,
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

    let locks: Vec<LockRate> = cur
        .locks
        .iter()
        .map(|l| lock_rate(prev_locks.get(&LockKey::of(l)).copied(), l, interval_s))
        .collect();

    let lost_total: u64 = cur.lost.values().sum();
    let lost_before: u64 = base.lost.values().sum();
    Rates {
        interval_s,
        since_start: prev.is_none(),
        events_per_s: per_second(
            cur.events.begin.saturating_sub(base.events.begin),
            interval_s,
        ),
        lost_total,
        lost_interval: lost_total.saturating_sub(lost_before),
        tasks: task_rates(&locks, interval_s),
        locks,
    }
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

    LockRate {
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
    }
}

/// Waiting processes over all locks: their waits on every lock merged.
fn task_rates(locks: &[LockRate], secs: f64) -> Vec<TaskRate> {
    struct Acc {
        comm: String,
        interval: WaitStats,
        total: WaitStats,
        locks: usize,
        top: (u64, String),
    }
    let mut by_pid: BTreeMap<u32, Acc> = BTreeMap::new();
    for l in locks {
        for t in &l.tasks {
            let acc = by_pid.entry(t.pid).or_insert_with(|| Acc {
                comm: t.comm.clone(),
                interval: WaitStats::default(),
                total: WaitStats::default(),
                locks: 0,
                top: (0, String::new()),
            });
            acc.interval.merge(&t.interval);
            acc.total.merge(&t.total);
            if t.interval.count > 0 {
                acc.locks += 1;
                if acc.top.1.is_empty() || t.interval.total_ns > acc.top.0 {
                    acc.top = (
                        t.interval.total_ns,
                        format!("{} ({})", l.name, l.key.lock_type),
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
            spin: None,
            name: format!("lock {addr}"),
            owner: Some(Owner {
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
            spin: None,
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
}
