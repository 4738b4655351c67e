//! A task's `pi_lock` on the tracepoint tier, and the real-time view built from the
//! real-time probes' records (pure).
//!
//! `contention_begin/end(SPIN)` only sees waits that reach the queued slowpath of the
//! spinlock, so pi_lock waits are undercounted. The `sched_wait_task` proxy adds what
//! the waits miss: each event is one acquisition of the tracee's `pi_lock` by the task in
//! `wait_task_inactive` (it takes the lock on every loop iteration since Linux 6.7).

use std::collections::{BTreeMap, HashMap};

use lockscope_common::{
    LCB_F_SPIN, RT_CNT_ACTIVITY, RT_CNT_SPIKES, RT_CNT_WAIT_TASK, RT_CNT_WAKEUPS, RT_COUNTERS_LEN,
    RT_CPUS, RT_EV_SPIKE, RT_EV_WAIT, RT_EV_WAIT_TASK, RT_SPIKE_IDLE, RtEvent, WaitTaskKey,
};
use serde::{Deserialize, Serialize};

use super::{
    LockEntry, WaitStats,
    correlate::{Activity, WatchedWait, correlate, probable_starvation},
    model::Owner,
    rt::{Acquirer, LatencySpike, SpikeSource, StarvationEpisode, TaskRef},
};
use crate::decode::{LockType, comm_to_string};

/// The `sched_wait_task` proxy of one `pi_lock`: acquisitions by tasks waiting for its
/// task to become inactive (ptrace, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitTaskProxy {
    /// Proxy acquisitions in all.
    pub acquisitions: u64,
    /// Thread id of the task whose `pi_lock` it is.
    pub tracee_tid: u32,
    /// By waiter and CPU, most first.
    pub waiters: Vec<WaitTaskWaiter>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitTaskWaiter {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub cpu: u32,
    pub acquisitions: u64,
}

/// What the real-time probes saw, for the report header of the spike section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RtSummary {
    pub latency_threshold_ns: u64,
    pub starvation_threshold_ns: u64,
    pub starvation_acquisitions: u64,
    /// Wakeups of real-time threads timed by lockscope (timer due to running).
    pub wakeups_timed: u64,
    /// Of those, over the threshold.
    pub spikes_over_threshold: u64,
    /// `sched_wait_task` events (proxy pi_lock acquisitions) in all.
    pub wait_task_events: u64,
    /// Lock activity records sent for correlation (waits and bursts over the floor).
    pub activity_events: u64,
    /// cyclictest threads whose own maximum was over the threshold (when cyclictest was
    /// the traced command), each recorded as a spike with `source: cyclictest`.
    #[serde(default)]
    pub cyclictest_threads: u32,
    /// Kernel monotonic time (the spikes' clock) when recording started: places spikes
    /// and episodes on the timeline.
    #[serde(default)]
    pub start_ktime_ns: u64,
}

/// Attach the proxy counts to the `pi_lock` entries (spinlock type); a `pi_lock` with
/// proxy acquisitions but no recorded wait gets an entry with zero waits. `name` gives a
/// lock's name and owner.
pub fn apply_wait_task(
    counts: &[(WaitTaskKey, u64)],
    comms: &HashMap<u32, String>,
    gen_of: &dyn Fn(u64, u32) -> u32,
    name: &dyn Fn(u64, u32) -> (String, Option<Owner>),
    locks: &mut Vec<LockEntry>,
) {
    /// (waiter pid, waiter tid, CPU) -> acquisitions.
    type ByWaiter = BTreeMap<(u32, u32, u32), u64>;
    // Per (pi_lock, owner generation): a task_struct freed and reused gives the later
    // task's tracees their own entry, by the generation named after the tracee.
    let mut by_lock: BTreeMap<(u64, u32), (BTreeMap<u32, u64>, ByWaiter)> = BTreeMap::new();
    for (k, n) in counts {
        let e = by_lock
            .entry((k.lock, gen_of(k.lock, k.tracee_tid)))
            .or_default();
        *e.0.entry(k.tracee_tid).or_default() += n;
        *e.1.entry((k.waiter_tgid, k.waiter_tid, k.cpu)).or_default() += n;
    }
    let spin = LockType::from_flags(LCB_F_SPIN).expect("spinlock flags decode");
    for ((lock, generation), (tracees, waiters)) in by_lock {
        let tracee_tid = tracees
            .iter()
            .max_by_key(|(t, n)| (**n, std::cmp::Reverse(**t)))
            .map_or(0, |(t, _)| *t);
        let mut ws: Vec<WaitTaskWaiter> = waiters
            .into_iter()
            .map(|((pid, tid, cpu), acquisitions)| WaitTaskWaiter {
                pid,
                tid,
                comm: comms.get(&pid).cloned().unwrap_or_default(),
                cpu,
                acquisitions,
            })
            .collect();
        ws.sort_by_key(|w| std::cmp::Reverse(w.acquisitions));
        let proxy = WaitTaskProxy {
            acquisitions: ws.iter().map(|w| w.acquisitions).sum(),
            tracee_tid,
            waiters: ws,
        };
        let addr = super::model::lock_addr(lock, generation);
        match locks
            .iter_mut()
            .find(|l| l.addr == addr && l.lock_type == spin)
        {
            Some(l) => l.wait_task = Some(proxy),
            None => {
                let (name, owner) = name(lock, generation);
                locks.push(LockEntry {
                    addr,
                    lock_type: spin,
                    name,
                    owner,
                    stats: WaitStats::default(),
                    callers: Vec::new(),
                    tasks: Vec::new(),
                    omitted: None,
                    user: None,
                    events: None,
                    wait_task: Some(proxy),
                    spin: None,
                    holders: None,
                });
            }
        }
    }
}

/// Everything the real-time view needs from the probes and the run.
pub struct RtInput<'a> {
    pub events: &'a [RtEvent],
    pub counters: &'a [u64; RT_COUNTERS_LEN as usize],
    pub latency_threshold_ns: u64,
    pub starvation_threshold_ns: u64,
    pub starvation_acquisitions: u64,
    pub start_ktime_ns: u64,
    /// A lock's name (as in `"locks"`).
    pub name: &'a dyn Fn(u64) -> String,
    /// A process's name by pid, when known.
    pub comm: &'a dyn Fn(u32) -> Option<String>,
}

/// The losses of the real-time probes, by name (all zero in a complete recording).
pub fn rt_lost(counters: &[u64; RT_COUNTERS_LEN as usize]) -> BTreeMap<String, u64> {
    use lockscope_common::*;
    [
        RT_CNT_LOST_SPIKE,
        RT_CNT_LOST_ACTIVITY,
        RT_CNT_LOST_PENDING_FULL,
        RT_CNT_LOST_WAIT_TASK_FULL,
        RT_CNT_LOST_ACQ_FULL,
    ]
    .into_iter()
    .map(|i| {
        (
            RT_COUNTER_NAMES[i as usize].to_owned(),
            counters[i as usize],
        )
    })
    .collect()
}

fn task_of(ev: &RtEvent, comm: &dyn Fn(u32) -> Option<String>) -> TaskRef {
    let thread = comm_to_string(&ev.comm);
    TaskRef {
        pid: ev.tgid,
        tid: Some(ev.tid),
        comm: comm(ev.tgid).filter(|c| !c.is_empty()).unwrap_or(thread),
        stack: Vec::new(),
    }
}

/// Spikes (lockscope's own, correlated), probable starvation episodes and the summary.
/// `extra_episodes` (deep tier) and `extra_spikes` (cyclictest) are correlated too.
pub fn build_rt_view(
    input: &RtInput,
    extra_episodes: Vec<StarvationEpisode>,
    extra_spikes: &dyn Fn(&[LatencySpike]) -> Vec<LatencySpike>,
) -> (Vec<LatencySpike>, Vec<StarvationEpisode>, RtSummary) {
    let mut spikes = Vec::new();
    let mut activity = Vec::new();
    let mut watched = Vec::new();
    for ev in input.events {
        match ev.kind {
            RT_EV_SPIKE => spikes.push(LatencySpike {
                cpu: ev.cpu,
                ts_ns: ev.ts_ns,
                latency_ns: ev.dur_ns,
                source: SpikeSource::Lockscope,
                task: task_of(ev, input.comm),
                overlaps: Vec::new(),
                explained: false,
                timer_late_ns: Some(ev.lock),
                cpu_idle: Some(ev.aux & RT_SPIKE_IDLE != 0),
            }),
            RT_EV_WAIT | RT_EV_WAIT_TASK => {
                let lock = (input.name)(ev.lock);
                activity.push(Activity {
                    cpu: ev.cpu,
                    start_ns: ev.ts_ns,
                    end_ns: ev.ts_ns.saturating_add(ev.dur_ns),
                    lock: lock.clone(),
                    addr: Some(format!("{:#x}", ev.lock)),
                    kind: if ev.kind == RT_EV_WAIT {
                        "wait"
                    } else {
                        "wait-task"
                    }
                    .to_owned(),
                    task: Some(task_of(ev, input.comm)),
                });
                if ev.kind == RT_EV_WAIT && ev.aux == 1 {
                    watched.push(WatchedWait {
                        cpu: ev.cpu,
                        ts_ns: ev.ts_ns,
                        wait_ns: ev.dur_ns,
                        lock,
                        addr: ev.lock,
                        waiter: task_of(ev, input.comm),
                        foreign: (0..RT_CPUS)
                            .filter(|&c| ev.foreign[c] > 0)
                            .map(|c| Acquirer {
                                cpu: c as u32,
                                task: TaskRef {
                                    pid: 0,
                                    tid: Some(ev.foreign_tid[c]),
                                    comm: String::new(),
                                    stack: Vec::new(),
                                },
                                count: ev.foreign[c] as u64,
                            })
                            .collect(),
                    });
                }
            }
            _ => {}
        }
    }
    let mut episodes = probable_starvation(
        &watched,
        input.starvation_threshold_ns,
        input.starvation_acquisitions,
    );
    episodes.extend(extra_episodes);
    episodes.sort_by_key(|e| e.ts_ns);
    activity.extend(episodes.iter().map(Activity::from_episode));
    spikes.sort_by_key(|s| s.ts_ns);
    let more = extra_spikes(&spikes);
    let cyclictest_threads = more.len() as u32;
    spikes.extend(more);
    for s in &mut spikes {
        if s.ts_ns > 0 {
            correlate(s, &activity);
        }
    }
    let c = input.counters;
    let summary = RtSummary {
        latency_threshold_ns: input.latency_threshold_ns,
        starvation_threshold_ns: input.starvation_threshold_ns,
        starvation_acquisitions: input.starvation_acquisitions,
        wakeups_timed: c[RT_CNT_WAKEUPS as usize],
        spikes_over_threshold: c[RT_CNT_SPIKES as usize],
        wait_task_events: c[RT_CNT_WAIT_TASK as usize],
        activity_events: c[RT_CNT_ACTIVITY as usize],
        cyclictest_threads,
        start_ktime_ns: input.start_ktime_ns,
    };
    (spikes, episodes, summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(lock: u64, tid: u32, cpu: u32) -> WaitTaskKey {
        WaitTaskKey {
            lock,
            waiter_tid: tid,
            waiter_tgid: 10,
            cpu,
            tracee_tid: 77,
        }
    }

    #[test]
    fn proxy_counts_join_the_pi_lock_entry_or_make_one() {
        let comms = HashMap::from([(10, "tracer".to_owned())]);
        let name = |a: u64, g: u32| (format!("pi_lock of t[{a}] generation {g}"), None);
        let mut locks = Vec::new();
        apply_wait_task(
            &[
                (key(0x100, 11, 0), 5),
                (key(0x100, 11, 1), 7),
                (key(0x100, 12, 1), 1),
            ],
            &comms,
            &|_, _| 0,
            &name,
            &mut locks,
        );
        assert_eq!(locks.len(), 1);
        let p = locks[0].wait_task.as_ref().unwrap();
        assert_eq!(p.acquisitions, 13);
        assert_eq!(p.tracee_tid, 77);
        assert_eq!(p.waiters[0].acquisitions, 7);
        assert_eq!(p.waiters[0].comm, "tracer");
        assert_eq!(locks[0].stats.count, 0);
        assert_eq!(locks[0].name, "pi_lock of t[256] generation 0");
        // A second snapshot onto an existing entry replaces, never adds twice.
        apply_wait_task(
            &[(key(0x100, 11, 0), 6)],
            &comms,
            &|_, _| 0,
            &name,
            &mut locks,
        );
        assert_eq!(locks.len(), 1);
        assert_eq!(locks[0].wait_task.as_ref().unwrap().acquisitions, 6);
    }

    #[test]
    fn a_reused_task_struct_gives_each_tracee_its_own_entry() {
        let comms = HashMap::new();
        let name = |a: u64, g: u32| (format!("pi_lock of t[{a}] generation {g}"), None);
        let later = |tid: u32| WaitTaskKey {
            tracee_tid: tid,
            ..key(0x100, 11, 0)
        };
        // Tracee 77 (generation 0) freed; tracee 88 took its task_struct (generation 1).
        let gen_of = |_: u64, tid: u32| u32::from(tid == 88);
        let mut locks = Vec::new();
        apply_wait_task(
            &[(key(0x100, 11, 0), 5), (later(88), 3)],
            &comms,
            &gen_of,
            &name,
            &mut locks,
        );
        assert_eq!(locks.len(), 2);
        let first = locks.iter().find(|l| l.addr == "0x100").unwrap();
        let second = locks.iter().find(|l| l.addr == "0x100/1").unwrap();
        assert_eq!(first.wait_task.as_ref().unwrap().tracee_tid, 77);
        assert_eq!(first.wait_task.as_ref().unwrap().acquisitions, 5);
        assert_eq!(second.wait_task.as_ref().unwrap().tracee_tid, 88);
        assert_eq!(second.wait_task.as_ref().unwrap().acquisitions, 3);
        assert_eq!(second.name, "pi_lock of t[256] generation 1");
    }

    fn ev(kind: u32, cpu: u32, ts: u64, dur: u64, lock: u64) -> RtEvent {
        RtEvent {
            kind,
            cpu,
            ts_ns: ts,
            dur_ns: dur,
            lock,
            tid: 5,
            tgid: 5,
            comm: *b"cyclictest\0\0\0\0\0\0",
            flags: LCB_F_SPIN,
            aux: 0,
            count: 0,
            foreign: [0; RT_CPUS],
            foreign_tid: [0; RT_CPUS],
        }
    }

    #[test]
    fn view_correlates_spikes_and_infers_starvation() {
        let mut w = ev(RT_EV_WAIT, 1, 1_000, 30_000, 0x200);
        w.aux = 1;
        w.foreign[0] = 9;
        w.foreign_tid[0] = 42;
        let events = [
            ev(RT_EV_SPIKE, 1, 1, 100_000, 0),
            w,
            ev(RT_EV_WAIT_TASK, 1, 40_000, 20_000, 0x200),
            ev(RT_EV_SPIKE, 0, 1, 100_000, 0),
        ];
        let counters = [0; RT_COUNTERS_LEN as usize];
        let name = |a: u64| format!("lock {a:#x}");
        let comm = |_| None;
        let input = RtInput {
            events: &events,
            counters: &counters,
            latency_threshold_ns: 50_000,
            starvation_threshold_ns: 20_000,
            starvation_acquisitions: 8,
            start_ktime_ns: 0,
            name: &name,
            comm: &comm,
        };
        let (spikes, eps, _) = build_rt_view(&input, Vec::new(), &|_| Vec::new());
        assert_eq!(eps.len(), 1);
        assert_eq!(eps[0].foreign_acquisitions, 9);
        assert_eq!(eps[0].acquirers[0].task.tid, Some(42));
        let on1 = spikes.iter().find(|s| s.cpu == 1).unwrap();
        // wait 30 us + probable-starvation 30 us (same span) + burst 20 us: union 50 us.
        assert_eq!(on1.overlaps.len(), 3);
        assert!(on1.explained);
        let on0 = spikes.iter().find(|s| s.cpu == 0).unwrap();
        assert!(on0.overlaps.is_empty() && !on0.explained);
    }
}
