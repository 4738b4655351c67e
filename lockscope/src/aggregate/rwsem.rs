//! rwsem acquisition modes (lock events) in the recording: per lock entry and task an
//! `events` object, and a system-wide summary named like the kernel's
//! `/sys/kernel/debug/lock_event_counts/rwsem_*`. Pure.
//!
//! Each event is `exact`, an `estimate` (tracepoint-tier sampling), or `n/a` (the tier
//! cannot see it, or the kernel has no such event): n/a events are `null` in the JSON
//! and `n/a` in tables, never 0.

use std::collections::BTreeMap;

use lockscope_common::*;
use serde::{Deserialize, Serialize};

use super::{
    WaitStats,
    recording::{LockEntry, Names, RawSnapshot, TaskEntry},
};
use crate::decode::LockType;

/// How trustworthy one event's count is on this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    #[serde(rename = "exact")]
    Exact,
    #[serde(rename = "estimate")]
    Estimate,
    #[serde(rename = "n/a")]
    NotAvailable,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Exact => "exact",
            EventKind::Estimate => "estimate",
            EventKind::NotAvailable => "n/a",
        }
    }
}

/// What each event is worth, given the attached deep hooks (`HOOK_*` mask), whether the
/// kernel is PREEMPT_RT, and whether the mmap_lock tracepoint estimate runs.
pub fn event_kinds(mask: u32, rt: bool, mmap_tp: bool) -> [EventKind; RWSEM_EVENTS] {
    use EventKind::*;
    if rt {
        return [NotAvailable; RWSEM_EVENTS];
    }
    let has = |bits: u32| mask & bits == bits;
    let exact_or = |bits: u32, otherwise: EventKind| if has(bits) { Exact } else { otherwise };
    let mut k = [NotAvailable; RWSEM_EVENTS];
    k[EV_RLOCK_STEAL] = exact_or(HOOK_READ_SLOWPATH, NotAvailable);
    k[EV_RLOCK_FAST] = exact_or(HOOK_READ_SLOWPATH, NotAvailable);
    // Queued acquisitions and their failures: the slowpath exit, or contention_end.
    k[EV_RLOCK] = Exact;
    k[EV_RLOCK_FAIL] = Exact;
    k[EV_WLOCK] = Exact;
    k[EV_WLOCK_FAIL] = Exact;
    k[EV_OPT_LOCK] = exact_or(HOOK_WRITE_SLOWPATH, NotAvailable);
    k[EV_OPT_FAIL] = exact_or(HOOK_WRITE_SLOWPATH, NotAvailable);
    // Another spinner may set the non-spinnable bit during this writer's spin.
    k[EV_OPT_NOSPIN] = if has(HOOK_WRITE_SLOWPATH) {
        Estimate
    } else {
        NotAvailable
    };
    k[EV_RLOCK_HANDOFF] = exact_or(HOOK_MARK_WAKE, Estimate);
    k[EV_WLOCK_HANDOFF] = exact_or(HOOK_SPIN_ON_OWNER | HOOK_WRITE_SLOWPATH, Estimate);
    k[EV_SLEEP_READER] = exact_or(HOOK_SCHEDULE | HOOK_READ_SLOWPATH, NotAvailable);
    k[EV_SLEEP_WRITER] = exact_or(HOOK_SCHEDULE | HOOK_WRITE_SLOWPATH, NotAvailable);
    k[EV_WAKE_READER] = exact_or(HOOK_MARK_WAKE, NotAvailable);
    k[EV_WAKE_WRITER] = exact_or(HOOK_MARK_WAKE, NotAvailable);
    k[EV_TRYLOCK_FAIL] = if has(HOOK_READ_TRYLOCK | HOOK_WRITE_TRYLOCK) {
        Exact
    } else if mmap_tp {
        Estimate
    } else {
        NotAvailable
    };
    k
}

/// The recording's `rwsem_events` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RwsemEventsSummary {
    /// `deep` (both slowpaths hooked), `mixed`, or `tracepoint`.
    pub tier: String,
    /// Hooked kernel function -> `fentry`, `kprobe` or `absent`.
    pub hooks: BTreeMap<String, String>,
    /// Event -> `exact`, `estimate` or `n/a`.
    pub kinds: BTreeMap<String, EventKind>,
    /// Why events are missing, when the kernel itself lacks them (PREEMPT_RT).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Totals over the traced tasks, named like `/sys/kernel/debug/lock_event_counts/`
    /// (`rwsem_trylock_fail` is lockscope's own); `null` when n/a.
    pub system: BTreeMap<String, Option<u64>>,
    /// What the rwsem probes could not store or pair, by reason.
    pub lost: BTreeMap<String, u64>,
}

/// Per-event values of one side, `None` where n/a.
pub type EventValues = BTreeMap<String, Option<u64>>;

fn side_of(t: LockType) -> Option<u32> {
    match t {
        LockType::RwsemRead => Some(SIDE_READ),
        LockType::RwsemWrite => Some(SIDE_WRITE),
        _ => None,
    }
}

fn values(
    counts: &[u64; RWSEM_EVENTS],
    kinds: &[EventKind; RWSEM_EVENTS],
    side: u32,
) -> EventValues {
    (0..RWSEM_EVENTS)
        .filter(|&e| {
            let s = rwsem_event_side(e);
            s == side || e == EV_TRYLOCK_FAIL
        })
        .map(|e| {
            let v = (kinds[e] != EventKind::NotAvailable).then_some(counts[e]);
            (RWSEM_EVENT_NAMES[e].to_owned(), v)
        })
        .collect()
}

/// Put the event counts into the rwsem lock entries (creating entries for locks that
/// only have events, e.g. only reader steals), and build the summary.
pub fn apply_rwsem_events(
    raw: &RawSnapshot,
    names: &dyn Names,
    kinds: &[EventKind; RWSEM_EVENTS],
    locks: &mut Vec<LockEntry>,
) {
    type Counts = [u64; RWSEM_EVENTS];
    let add = |to: &mut Counts, c: &Counts| to.iter_mut().zip(c).for_each(|(t, n)| *t += n);
    // (lock, side) -> per tgid
    let mut by_lock: BTreeMap<(u64, u32), BTreeMap<u32, Counts>> = BTreeMap::new();
    for (key, counts) in &raw.rwsem_events {
        let tasks = by_lock.entry((key.lock, key.side)).or_default();
        add(tasks.entry(key.tgid).or_default(), &counts.n);
    }
    // Every rwsem entry gets an events object, all zeros (or n/a) without events. An
    // address with several owner generations (`0x.../1`) has several entries of a side:
    // a process's events go to the entry it waited in, else to the one named after it,
    // else to the busiest (the first).
    let mut entries_of: BTreeMap<(u64, u32), Vec<usize>> = BTreeMap::new();
    for (i, entry) in locks.iter().enumerate() {
        if let Some(side) = side_of(entry.lock_type) {
            entries_of
                .entry((parse_addr(&entry.addr), side))
                .or_default()
                .push(i);
        }
    }
    for (&(addr, side), idx) in &entries_of {
        let tasks = by_lock.remove(&(addr, side)).unwrap_or_default();
        let mut totals: Vec<Counts> = vec![[0; RWSEM_EVENTS]; idx.len()];
        let mut assigned: Vec<BTreeMap<u32, Counts>> = vec![BTreeMap::new(); idx.len()];
        for (pid, c) in tasks {
            let waited = idx
                .iter()
                .position(|&i| locks[i].tasks.iter().any(|t| t.pid == pid));
            let owned = || {
                idx.iter()
                    .position(|&i| locks[i].owner.as_ref().is_some_and(|o| o.pid == pid))
            };
            let k = waited.or_else(owned).unwrap_or(0);
            add(&mut totals[k], &c);
            assigned[k].insert(pid, c);
        }
        for (k, &i) in idx.iter().enumerate() {
            let entry = &mut locks[i];
            entry.events = Some(values(&totals[k], kinds, side));
            for t in entry.tasks.iter_mut() {
                let c = assigned[k].get(&t.pid).copied().unwrap_or_default();
                t.events = Some(values(&c, kinds, side));
            }
            for (&pid, c) in &assigned[k] {
                if !entry.tasks.iter().any(|t| t.pid == pid) {
                    entry.tasks.push(TaskEntry {
                        cgroup: None,
                        pid,
                        comm: raw.comms.get(&pid).cloned().unwrap_or_default(),
                        stats: WaitStats::default(),
                        events: Some(values(c, kinds, side)),
                    });
                }
            }
        }
    }
    // Locks with events but no contended wait of that side.
    for ((addr, side), tasks) in by_lock {
        let mut totals: Counts = [0; RWSEM_EVENTS];
        tasks.values().for_each(|c| add(&mut totals, c));
        let lock_type = if side == SIDE_READ {
            LockType::RwsemRead
        } else {
            LockType::RwsemWrite
        };
        let (name, owner) = super::recording::lock_identity(raw, names, addr);
        locks.push(LockEntry {
            addr: super::model::lock_addr(addr, raw.current_gen(addr)),
            lock_type,
            name,
            owner,
            stats: WaitStats::default(),
            callers: Vec::new(),
            user: None,
            tasks: tasks
                .into_iter()
                .map(|(pid, c)| TaskEntry {
                    cgroup: None,
                    pid,
                    comm: raw.comms.get(&pid).cloned().unwrap_or_default(),
                    stats: WaitStats::default(),
                    events: Some(values(&c, kinds, side)),
                })
                .collect(),
            events: Some(values(&totals, kinds, side)),
            omitted: None,
            wait_task: None,
            spin: None,
            holders: None,
        });
    }
}

/// The address of an entry, its owner generation aside (rwsem lock events are counted
/// per address and process).
fn parse_addr(s: &str) -> u64 {
    super::model::parse_lock_addr(s).map_or(0, |(a, _)| a)
}

/// The system-wide summary.
pub fn summary(
    raw: &RawSnapshot,
    kinds: &[EventKind; RWSEM_EVENTS],
    tier: &str,
    hooks: BTreeMap<String, String>,
    note: Option<String>,
) -> RwsemEventsSummary {
    let c = |i: u32| raw.rwsem_counters.get(i as usize).copied().unwrap_or(0);
    RwsemEventsSummary {
        tier: tier.to_owned(),
        hooks,
        kinds: (0..RWSEM_EVENTS)
            .map(|e| (RWSEM_EVENT_NAMES[e].to_owned(), kinds[e]))
            .collect(),
        note,
        system: (0..RWSEM_EVENTS)
            .map(|e| {
                (
                    format!("rwsem_{}", RWSEM_EVENT_NAMES[e]),
                    (kinds[e] != EventKind::NotAvailable).then(|| c(RWC_TOTALS + e as u32)),
                )
            })
            .collect(),
        lost: [
            ("unpaired_slowpath_entry", RWC_UNPAIRED_ENTRY),
            ("unpaired_slowpath_exit", RWC_UNPAIRED_EXIT),
            ("event_map_full", RWC_LOST_MAP_FULL),
            ("slowpath_map_full", RWC_LOST_TASK_FULL),
            ("trylock_unattributed", RWC_TRYLOCK_UNATTRIBUTED),
        ]
        .into_iter()
        .map(|(n, i)| (n.to_owned(), c(i)))
        .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::recording::{build_locks, tests::FakeNames, tests::sample_snapshot};

    fn counts(pairs: &[(usize, u64)]) -> RwsemEventCounts {
        let mut c = RwsemEventCounts::default();
        for &(e, n) in pairs {
            c.n[e] = n;
        }
        c
    }

    #[test]
    fn tracepoint_tier_kinds() {
        let k = event_kinds(0, false, true);
        assert_eq!(k[EV_RLOCK], EventKind::Exact);
        assert_eq!(k[EV_RLOCK_STEAL], EventKind::NotAvailable);
        assert_eq!(k[EV_RLOCK_HANDOFF], EventKind::Estimate);
        assert_eq!(k[EV_WLOCK_HANDOFF], EventKind::Estimate);
        assert_eq!(k[EV_TRYLOCK_FAIL], EventKind::Estimate);
        assert_eq!(k[EV_SLEEP_READER], EventKind::NotAvailable);
        assert_eq!(
            event_kinds(0, false, false)[EV_TRYLOCK_FAIL],
            EventKind::NotAvailable
        );
        assert!(
            event_kinds(u32::MAX, true, true)
                .iter()
                .all(|&k| k == EventKind::NotAvailable)
        );
        let deep = event_kinds(0x7f, false, true);
        assert_eq!(deep[EV_OPT_NOSPIN], EventKind::Estimate);
        assert!(
            deep.iter()
                .enumerate()
                .all(|(e, &k)| e == EV_OPT_NOSPIN || k == EventKind::Exact)
        );
    }

    /// An address with two owner generations: each process's events go to the entry it
    /// waited in, or to the one named after it; totals follow.
    #[test]
    fn events_of_a_reused_address_go_to_each_owners_entry() {
        use lockscope_common::{
            ContentionKey, GEN_SHIFT, LCB_F_READ, LOCK_KIND_MMAP_LOCK, LockInfo,
        };
        let mm = 0xffff_8880_0000_1000u64;
        let wait = crate::aggregate::recording::tests::wait;
        let key = |tgid, generation: u32| ContentionKey {
            lock: mm,
            stack: 0,
            tgid,
            flags: LCB_F_READ | (generation << GEN_SHIFT),
        };
        let info = |tgid, generation| LockInfo {
            kind: LOCK_KIND_MMAP_LOCK,
            tgid,
            generation,
            ..LockInfo::default()
        };
        let mut raw = RawSnapshot {
            stats: vec![(key(100, 0), wait(1_000, 1)), (key(200, 1), wait(9_000, 1))],
            ..Default::default()
        };
        raw.past_lock_info.insert((mm, 0), info(100, 0));
        raw.lock_info.insert(mm, info(200, 1));
        let ev = |tgid, n| {
            let k = RwsemEventKey {
                lock: mm,
                tgid,
                side: SIDE_READ,
            };
            (k, counts(&[(EV_RLOCK, n)]))
        };
        // 100 and 200 waited in their own entries; 300 only has events.
        raw.rwsem_events = vec![ev(100, 5), ev(200, 7), ev(300, 1)];
        let mut lost = BTreeMap::new();
        let mut locks = build_locks(&raw, &FakeNames, &mut lost);
        apply_rwsem_events(&raw, &FakeNames, &event_kinds(0, false, true), &mut locks);
        let entry = |addr: &str| locks.iter().find(|l| l.addr == addr).unwrap();
        let (first, later) = (entry("0xffff888000001000"), entry("0xffff888000001000/1"));
        assert_eq!(first.events.as_ref().unwrap()["rlock"], Some(5));
        let pids = |l: &LockEntry| l.tasks.iter().map(|t| t.pid).collect::<Vec<_>>();
        assert_eq!(pids(first), [100]);
        // The busiest entry (the first in the list) takes the events of neither owner.
        assert_eq!(later.events.as_ref().unwrap()["rlock"], Some(8));
        assert_eq!(pids(later), [200, 300]);
        assert_eq!(locks.len(), 2);
    }

    #[test]
    fn events_land_on_their_side_and_na_is_null() {
        let mut raw = sample_snapshot();
        let mmap = 0xffff_8880_1234_5678u64;
        let key = |tgid, side| RwsemEventKey {
            lock: mmap,
            tgid,
            side,
        };
        raw.rwsem_events = vec![
            (
                key(100, SIDE_READ),
                counts(&[(EV_RLOCK, 15), (EV_RLOCK_HANDOFF, 2)]),
            ),
            (key(101, SIDE_READ), counts(&[(EV_TRYLOCK_FAIL, 4)])),
            (
                key(101, SIDE_WRITE),
                counts(&[(EV_WLOCK, 3), (EV_WLOCK_HANDOFF, 1)]),
            ),
            // A lock with events only.
            (
                RwsemEventKey {
                    lock: 0xffff_8880_0000_1000,
                    tgid: 100,
                    side: SIDE_READ,
                },
                counts(&[(EV_TRYLOCK_FAIL, 9)]),
            ),
        ];
        let mut lost = BTreeMap::new();
        let mut locks = build_locks(&raw, &FakeNames, &mut lost);
        let kinds = event_kinds(0, false, true);
        apply_rwsem_events(&raw, &FakeNames, &kinds, &mut locks);
        let r = locks
            .iter()
            .find(|l| l.lock_type == LockType::RwsemRead && l.addr == format!("{mmap:#x}"))
            .unwrap();
        let ev = r.events.as_ref().unwrap();
        assert_eq!(ev["rlock"], Some(15));
        assert_eq!(ev["rlock_handoff"], Some(2));
        assert_eq!(ev["trylock_fail"], Some(4));
        assert_eq!(ev["rlock_steal"], None, "n/a on the tracepoint tier");
        assert!(
            !ev.contains_key("wlock"),
            "write events stay on the W entry"
        );
        // Task 101 had no read wait but a trylock failure: it gets a task row.
        let t101 = r.tasks.iter().find(|t| t.pid == 101).unwrap();
        assert_eq!(t101.events.as_ref().unwrap()["trylock_fail"], Some(4));
        assert_eq!(t101.stats.count, 0);
        let w = locks
            .iter()
            .find(|l| l.lock_type == LockType::RwsemWrite)
            .unwrap();
        assert_eq!(w.events.as_ref().unwrap()["wlock"], Some(3));
        assert_eq!(w.events.as_ref().unwrap()["opt_lock"], None);
        let only = locks
            .iter()
            .find(|l| l.addr == "0xffff888000001000")
            .unwrap();
        assert_eq!(only.events.as_ref().unwrap()["trylock_fail"], Some(9));
        assert_eq!(only.stats.count, 0);
        // The spinlock entry has no events object.
        assert!(locks.iter().any(|l| l.events.is_none()));
    }

    #[test]
    fn summary_uses_kernel_names_and_nulls() {
        let mut raw = RawSnapshot {
            rwsem_counters: vec![0; RWSEM_COUNTERS_LEN as usize],
            ..Default::default()
        };
        raw.rwsem_counters[EV_RLOCK] = 7;
        raw.rwsem_counters[EV_RLOCK_STEAL] = 5;
        raw.rwsem_counters[RWC_LOST_MAP_FULL as usize] = 1;
        let kinds = event_kinds(0, false, false);
        let s = summary(&raw, &kinds, "tracepoint", BTreeMap::new(), None);
        assert_eq!(s.system["rwsem_rlock"], Some(7));
        assert_eq!(s.system["rwsem_rlock_steal"], None);
        assert_eq!(s.system["rwsem_trylock_fail"], None);
        assert_eq!(s.lost["event_map_full"], 1);
        assert_eq!(s.kinds["rlock_handoff"], EventKind::Estimate);
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"rwsem_rlock_steal\":null"), "{json}");
        assert!(json.contains("\"rlock_steal\":\"n/a\""), "{json}");
    }
}
