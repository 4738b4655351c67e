//! Latency spikes against lock activity (pure).
//!
//! A spike's window is `[ts_ns, ts_ns + latency_ns]` on its CPU: from when the thread's
//! timer was due to the thread running. Every piece of lock activity on that CPU (a
//! spinning wait, a burst of `sched_wait_task` acquisitions, a starvation episode from any
//! tier) that intersects the window is an [`Overlap`], with the nanoseconds inside the window.
//! **Explained rule**: the union of the overlapping activity covers at least half the
//! window ([`EXPLAINED_SHARE`]).
//!
//! A probable starvation episode (tracepoint tier) is a spinning wait on a watched lock
//! (a task's `pi_lock`) at least `threshold_ns` long during which other CPUs were seen
//! acquiring the same lock at least `min_acquisitions` times (`sched_wait_task` on the
//! tracee, ended waits of others).

use super::rt::{Acquirer, EpisodeKind, LatencySpike, Overlap, StarvationEpisode, TaskRef};

/// Share of a spike's window the overlapping lock activity must cover to explain it.
pub const EXPLAINED_SHARE: f64 = 0.5;

/// Lock activity on one CPU over `[start_ns, end_ns]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Activity {
    pub cpu: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub lock: String,
    pub addr: Option<String>,
    /// `wait`, `wait-task`, `probable-starvation`, `starvation`, `long-hold`, `hold`.
    pub kind: String,
    pub task: Option<TaskRef>,
}

impl Activity {
    /// A starvation or long-hold episode as activity on its CPU (any tier).
    pub fn from_episode(e: &StarvationEpisode) -> Self {
        let kind = match (e.kind, e.probable) {
            (EpisodeKind::LongHold, _) => "long-hold",
            (EpisodeKind::Starvation, true) => "probable-starvation",
            (EpisodeKind::Starvation, false) => "starvation",
        };
        Self {
            cpu: e.cpu,
            start_ns: e.ts_ns,
            end_ns: e.ts_ns.saturating_add(e.wait_ns),
            lock: e.lock.clone(),
            addr: Some(e.addr.clone()),
            kind: kind.to_owned(),
            task: Some(e.waiter.clone()),
        }
    }
}

/// Nanoseconds that `[a0, a1]` and `[b0, b1]` have in common.
pub fn overlap_ns(a0: u64, a1: u64, b0: u64, b1: u64) -> u64 {
    a1.min(b1).saturating_sub(a0.max(b0))
}

/// Length of the union of intervals, clipped to `[w0, w1]`.
fn covered_ns(w0: u64, w1: u64, mut iv: Vec<(u64, u64)>) -> u64 {
    iv.sort_unstable();
    let mut total = 0;
    let mut cur: Option<(u64, u64)> = None;
    for (s, e) in iv {
        let (s, e) = (s.max(w0), e.min(w1));
        if e <= s {
            continue;
        }
        cur = match cur {
            Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    if let Some((cs, ce)) = cur {
        total += ce - cs;
    }
    total
}

/// Fill `spike.overlaps` (largest first) and `spike.explained` from the activity.
pub fn correlate(spike: &mut LatencySpike, activity: &[Activity]) {
    let (w0, w1) = (spike.ts_ns, spike.ts_ns.saturating_add(spike.latency_ns));
    let mut intervals = Vec::new();
    let mut overlaps: Vec<Overlap> = activity
        .iter()
        .filter(|a| a.cpu == spike.cpu)
        .filter_map(|a| {
            let ns = overlap_ns(w0, w1, a.start_ns, a.end_ns);
            (ns > 0).then(|| {
                intervals.push((a.start_ns, a.end_ns));
                Overlap {
                    lock: a.lock.clone(),
                    addr: a.addr.clone(),
                    kind: a.kind.clone(),
                    task: a.task.clone(),
                    overlap_ns: ns,
                }
            })
        })
        .collect();
    overlaps.sort_by_key(|o| std::cmp::Reverse(o.overlap_ns));
    let covered = covered_ns(w0, w1, intervals);
    spike.explained =
        spike.latency_ns > 0 && covered as f64 >= EXPLAINED_SHARE * spike.latency_ns as f64;
    spike.overlaps = overlaps;
}

/// A spinning wait on a watched lock, with the other CPUs' acquisitions during it.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchedWait {
    pub cpu: u32,
    pub ts_ns: u64,
    pub wait_ns: u64,
    pub lock: String,
    pub addr: u64,
    pub waiter: TaskRef,
    /// (CPU, acquisitions, last acquirer) for each other CPU that acquired the lock.
    pub foreign: Vec<Acquirer>,
}

/// Probable starvation episodes among watched waits (tracepoint tier).
pub fn probable_starvation(
    waits: &[WatchedWait],
    threshold_ns: u64,
    min_acquisitions: u64,
) -> Vec<StarvationEpisode> {
    waits
        .iter()
        .filter_map(|w| {
            let foreign = super::stats::saturating_sum(w.foreign.iter().map(|a| a.count));
            (w.wait_ns >= threshold_ns && foreign >= min_acquisitions).then(|| {
                let mut acquirers: Vec<Acquirer> =
                    w.foreign.iter().filter(|a| a.count > 0).cloned().collect();
                acquirers.sort_by(|a, b| b.count.cmp(&a.count).then(a.cpu.cmp(&b.cpu)));
                StarvationEpisode {
                    kind: EpisodeKind::Starvation,
                    ts_ns: w.ts_ns,
                    cpu: w.cpu,
                    lock: w.lock.clone(),
                    addr: format!("{:#x}", w.addr),
                    waiter: w.waiter.clone(),
                    wait_ns: w.wait_ns,
                    foreign_acquisitions: foreign,
                    acquirers,
                    irqs_off: None,
                    probable: true,
                    tier: "tracepoint".to_owned(),
                }
            })
        })
        .collect()
}

/// One thread's line of cyclictest's summary (`T: 0 ( 1234) P:98 I:2000 C: 500 Min: 3
/// Act: 5 Avg: 4 Max: 120`), latencies in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CyclictestThread {
    pub thread: u32,
    pub tid: u32,
    pub prio: u32,
    pub cycles: u64,
    pub max_us: u64,
}

/// The last summary line of every thread in cyclictest's output (it rewrites them while
/// running; the last is the final one).
pub fn parse_cyclictest(text: &str) -> Vec<CyclictestThread> {
    let mut by_thread: std::collections::BTreeMap<u32, CyclictestThread> = Default::default();
    for line in text.split(['\n', '\r']) {
        if let Some(t) = parse_cyclictest_line(line) {
            by_thread.insert(t.thread, t);
        }
    }
    by_thread.into_values().collect()
}

fn parse_cyclictest_line(line: &str) -> Option<CyclictestThread> {
    let rest = line.trim_start().strip_prefix("T:")?;
    let (thread, rest) = rest.split_once('(')?;
    let (tid, rest) = rest.split_once(')')?;
    let field = |name: &str| -> Option<u64> {
        let i = rest.find(name)?;
        rest[i + name.len()..]
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some(CyclictestThread {
        thread: thread.trim().parse().ok()?,
        tid: tid.trim().parse().ok()?,
        prio: field("P:")? as u32,
        cycles: field("C:")?,
        max_us: field("Max:")?,
    })
}

/// cyclictest's own spikes: each thread whose max is over the threshold. cyclictest gives
/// no time for its max, so the window is taken from lockscope's own largest spike of the
/// same thread (ending when that thread ran); without one, `ts_ns` is 0 and nothing is
/// correlated. When that spike is the same wakeup (lockscope's figure within 10% below
/// cyclictest's, which also counts the return to user space), its timer lateness and idle
/// CPU carry over.
pub fn cyclictest_spikes(
    threads: &[CyclictestThread],
    own: &[LatencySpike],
    threshold_ns: u64,
    comm: &str,
    pid: u32,
) -> Vec<LatencySpike> {
    threads
        .iter()
        .filter(|t| t.max_us.saturating_mul(1000) >= threshold_ns)
        .map(|t| {
            let latency_ns = t.max_us * 1000;
            let mine = own
                .iter()
                .filter(|s| s.task.tid == Some(t.tid))
                .max_by_key(|s| s.latency_ns);
            let (cpu, ts_ns) = match mine {
                Some(s) => (s.cpu, (s.ts_ns + s.latency_ns).saturating_sub(latency_ns)),
                None => (t.thread, 0),
            };
            // cyclictest rounds to whole microseconds.
            let same = mine.filter(|s| {
                s.latency_ns <= latency_ns + 1000 && s.latency_ns * 10 >= latency_ns * 9
            });
            LatencySpike {
                cpu,
                ts_ns,
                latency_ns,
                source: super::rt::SpikeSource::Cyclictest,
                task: TaskRef {
                    pid,
                    tid: Some(t.tid),
                    comm: comm.to_owned(),
                    stack: Vec::new(),
                },
                overlaps: Vec::new(),
                explained: false,
                timer_late_ns: same.and_then(|s| s.timer_late_ns),
                cpu_idle: same.and_then(|s| s.cpu_idle),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::rt::SpikeSource;
    use super::*;

    fn task(pid: u32) -> TaskRef {
        TaskRef {
            pid,
            tid: Some(pid),
            comm: format!("t{pid}"),
            stack: Vec::new(),
        }
    }

    fn spike(cpu: u32, ts: u64, lat: u64) -> LatencySpike {
        LatencySpike {
            cpu,
            ts_ns: ts,
            latency_ns: lat,
            source: SpikeSource::Lockscope,
            task: task(1),
            overlaps: Vec::new(),
            explained: false,
            timer_late_ns: None,
            cpu_idle: None,
        }
    }

    fn act(cpu: u32, s: u64, e: u64, kind: &str) -> Activity {
        Activity {
            cpu,
            start_ns: s,
            end_ns: e,
            lock: "pi_lock of x[2]".into(),
            addr: None,
            kind: kind.into(),
            task: None,
        }
    }

    #[test]
    fn overlap_edges() {
        assert_eq!(
            overlap_ns(100, 200, 200, 300),
            0,
            "touching ends do not overlap"
        );
        assert_eq!(overlap_ns(100, 200, 0, 100), 0);
        assert_eq!(overlap_ns(100, 200, 199, 300), 1);
        assert_eq!(overlap_ns(100, 200, 50, 250), 100, "covers the window");
        assert_eq!(overlap_ns(100, 200, 120, 130), 10, "inside the window");
        assert_eq!(overlap_ns(100, 200, 300, 400), 0);
    }

    #[test]
    fn only_the_spike_cpu_counts_and_largest_first() {
        let mut s = spike(1, 1_000, 100_000);
        let a = [
            act(0, 0, 200_000, "wait"),
            act(1, 50_000, 60_000, "wait"),
            act(1, 0, 40_000, "wait-task"),
            act(1, 200_000, 300_000, "wait"),
        ];
        correlate(&mut s, &a);
        assert_eq!(s.overlaps.len(), 2);
        assert_eq!(s.overlaps[0].kind, "wait-task");
        assert_eq!(s.overlaps[0].overlap_ns, 39_000);
        assert_eq!(s.overlaps[1].overlap_ns, 10_000);
        // 49 us of 100 us covered: not explained.
        assert!(!s.explained);
    }

    #[test]
    fn explained_at_half_the_window_union_not_sum() {
        let mut s = spike(0, 0, 100_000);
        correlate(&mut s, &[act(0, 0, 50_000, "wait")]);
        assert!(s.explained, "exactly half explains");
        let mut s = spike(0, 0, 100_000);
        correlate(&mut s, &[act(0, 0, 49_999, "wait")]);
        assert!(!s.explained);
        // Two overlapping activities: 30+30 us summed but a 40 us union.
        let mut s = spike(0, 0, 100_000);
        correlate(
            &mut s,
            &[act(0, 0, 30_000, "wait"), act(0, 10_000, 40_000, "wait")],
        );
        assert_eq!(s.overlaps.len(), 2);
        assert!(!s.explained);
        let mut s = spike(0, 0, 100_000);
        correlate(&mut s, &[]);
        assert!(s.overlaps.is_empty() && !s.explained);
    }

    #[test]
    fn episodes_become_activity() {
        let ep = StarvationEpisode {
            kind: EpisodeKind::Starvation,
            ts_ns: 10,
            cpu: 3,
            lock: "pi_lock of a[1]".into(),
            addr: "0x10".into(),
            waiter: task(5),
            wait_ns: 90,
            foreign_acquisitions: 9,
            acquirers: Vec::new(),
            irqs_off: None,
            probable: false,
            tier: "deep".into(),
        };
        let a = Activity::from_episode(&ep);
        assert_eq!((a.cpu, a.start_ns, a.end_ns), (3, 10, 100));
        assert_eq!(a.kind, "starvation");
    }

    fn wait(wait_ns: u64, counts: &[(u32, u64)]) -> WatchedWait {
        WatchedWait {
            cpu: 0,
            ts_ns: 1_000,
            wait_ns,
            lock: "pi_lock of tracee[9]".into(),
            addr: 0xffff_0000,
            waiter: task(7),
            foreign: counts
                .iter()
                .map(|&(cpu, count)| Acquirer {
                    cpu,
                    task: task(100 + cpu),
                    count,
                })
                .collect(),
        }
    }

    #[test]
    fn probable_starvation_fires_at_both_thresholds() {
        // At both thresholds: fires, acquirers largest first.
        let eps = probable_starvation(&[wait(20_000, &[(1, 3), (2, 5)])], 20_000, 8);
        assert_eq!(eps.len(), 1);
        let e = &eps[0];
        assert_eq!(e.foreign_acquisitions, 8);
        assert!(e.probable);
        assert_eq!(e.tier, "tracepoint");
        assert_eq!(e.acquirers[0].cpu, 2);
        assert_eq!(e.addr, "0xffff0000");
        // One short of either threshold: nothing.
        assert!(probable_starvation(&[wait(19_999, &[(1, 8)])], 20_000, 8).is_empty());
        assert!(probable_starvation(&[wait(50_000, &[(1, 7)])], 20_000, 8).is_empty());
        // CPUs with no acquisition are not listed.
        let eps = probable_starvation(&[wait(30_000, &[(1, 8), (2, 0)])], 20_000, 8);
        assert_eq!(eps[0].acquirers.len(), 1);
    }

    #[test]
    fn cyclictest_summary_lines() {
        let out = "policy: fifo: loadavg: 1.0\n\
                   T: 0 ( 4321) P:98 I:2000 C:    100 Min:      3 Act:    5 Avg:    4 Max:      15\r\
                   T: 0 ( 4321) P:98 I:2000 C:    500 Min:      3 Act:    5 Avg:    4 Max:     120\n\
                   T: 1 ( 4322) P:98 I:2500 C:    400 Min:      2 Act:    3 Avg:    3 Max:      40\n";
        let t = parse_cyclictest(out);
        assert_eq!(t.len(), 2);
        assert_eq!(
            t[0],
            CyclictestThread {
                thread: 0,
                tid: 4321,
                prio: 98,
                cycles: 500,
                max_us: 120
            }
        );
        let own = vec![LatencySpike {
            task: TaskRef {
                tid: Some(4321),
                ..task(1)
            },
            ..spike(1, 1_000_000, 130_000)
        }];
        let s = cyclictest_spikes(&t, &own, 100_000, "cyclictest", 4320);
        assert_eq!(s.len(), 1, "thread 1 (40 us) is under the threshold");
        assert_eq!(s[0].source, SpikeSource::Cyclictest);
        assert_eq!(s[0].latency_ns, 120_000);
        assert_eq!(s[0].cpu, 1);
        // Window ends where lockscope saw the thread run.
        assert_eq!(s[0].ts_ns + s[0].latency_ns, 1_130_000);
        let s = cyclictest_spikes(&t, &[], 100_000, "cyclictest", 4320);
        assert_eq!((s[0].ts_ns, s[0].cpu), (0, 0));
    }

    #[test]
    fn cyclictest_max_takes_the_timer_lateness_of_the_same_wakeup() {
        let t = parse_cyclictest(
            "T: 0 ( 4321) P:98 I:2000 C:    500 Min:      3 Act:    5 Avg:    4 Max:     120\n",
        );
        let own = |lat: u64| {
            vec![LatencySpike {
                task: TaskRef {
                    tid: Some(4321),
                    ..task(1)
                },
                timer_late_ns: Some(100_000),
                cpu_idle: Some(true),
                ..spike(1, 1_000_000, lat)
            }]
        };
        // lockscope's 119.5 us is cyclictest's 120 us wakeup (less the return to user).
        let s = cyclictest_spikes(&t, &own(119_500), 100_000, "cyclictest", 1);
        assert_eq!(
            (s[0].timer_late_ns, s[0].cpu_idle),
            (Some(100_000), Some(true))
        );
        assert!(s[0].late_timer_on_idle_cpu());
        // Rounding: cyclictest truncates to whole microseconds.
        let s = cyclictest_spikes(&t, &own(120_900), 100_000, "cyclictest", 1);
        assert_eq!(s[0].timer_late_ns, Some(100_000));
        // A smaller wakeup of the same thread, or one larger than cyclictest's: another one.
        for lat in [100_000, 121_001] {
            let s = cyclictest_spikes(&t, &own(lat), 100_000, "cyclictest", 1);
            assert_eq!((s[0].timer_late_ns, s[0].cpu_idle), (None, None), "{lat}");
        }
    }

    #[test]
    fn a_late_timer_on_an_idle_cpu_is_most_of_the_spike() {
        let at = |late: Option<u64>, idle: Option<bool>| LatencySpike {
            timer_late_ns: late,
            cpu_idle: idle,
            ..spike(0, 1_000, 100_000)
        };
        assert!(at(Some(50_000), Some(true)).late_timer_on_idle_cpu());
        assert!(!at(Some(49_999), Some(true)).late_timer_on_idle_cpu());
        assert!(!at(Some(90_000), Some(false)).late_timer_on_idle_cpu());
        assert!(!at(None, None).late_timer_on_idle_cpu());
    }
}
