//! The deep spinlock tier in the recording: one `spinlock` entry per watched lock
//! (`pi_lock of comm[tid]`, tier `deep`) with exact waits, callers, waiting processes and
//! hold times; the tier's summary; and the starvation episodes. Pure.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use lockscope_common::*;
use serde::{Deserialize, Serialize};

use super::{
    LockEntry, Names, RawSnapshot, WaitStats,
    episode::{EpisodeNames, decode_episode},
    recording::{build_locks, lock_identity},
    rt::StarvationEpisode,
};
use crate::decode::LockType;

/// Everything the deep spinlock probes hold at one moment, CPUs summed.
#[derive(Debug, Clone, Default)]
pub struct SpinSnapshot {
    /// Waits per (lock, waiter stack, waiter process).
    pub waits: Vec<(ContentionKey, WaitStats)>,
    /// Holds per (lock, -, holder process).
    pub holds: Vec<(ContentionKey, WaitStats)>,
    /// The watched locks that appear in `waits`, `holds` or an episode.
    pub watched: HashMap<u64, SpinWatch>,
    /// Current `comm` of watched tasks by thread id (wins over the one stored when the
    /// task was first watched; threads rename themselves after they start).
    pub task_comms: HashMap<u32, String>,
    /// Process names by tgid.
    pub comms: HashMap<u32, String>,
    pub stacks: HashMap<u64, Vec<u64>>,
    pub counters: Vec<u64>,
    pub episodes: Vec<SpinEpisodeRecord>,
    /// Ring-buffer items that were not an episode record.
    pub malformed: u64,
}

/// Flattened into a lock entry of the deep spinlock tier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpinDetail {
    /// `deep`: waits from the queued-spinlock slowpath (exact).
    pub tier: String,
    /// Hold times (exit of `_raw_spin_lock*` to entry of `_raw_spin_unlock*`); `null`
    /// when this kernel does not let them be measured (see `spin.hold`).
    pub hold: Option<WaitStats>,
}

/// The recording's `"spin"` object: how the deep spinlock tier ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpinSummary {
    /// `deep`, or `unavailable`.
    pub tier: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// Which locks are watched.
    pub watched: String,
    /// How each hooked function is attached (`fentry`, `kprobe`, `absent`).
    pub hooks: BTreeMap<String, String>,
    /// `exact`, or why hold times are unavailable.
    pub hold: String,
    pub threshold_ns: u64,
    pub min_foreign: u64,
    pub hold_threshold_ns: u64,
    /// waits, holds, foreign_acquisitions, episodes.
    pub counts: BTreeMap<String, u64>,
    /// Everything not stored, by reason (all zero in a complete run).
    pub lost: BTreeMap<String, u64>,
}

pub const WATCHED_DESC: &str = "every task's pi_lock";

/// The summary from the counters and the tier's state.
pub fn summary(
    snap: &SpinSnapshot,
    hooks: BTreeMap<String, String>,
    hold_unavailable: Option<&str>,
    p: &SpinParams,
) -> SpinSummary {
    let c = |i: u32| snap.counters.get(i as usize).copied().unwrap_or(0);
    let counts = [SPC_WAITS, SPC_HOLDS, SPC_FOREIGN, SPC_EPISODES]
        .into_iter()
        .map(|i| (SPIN_COUNTER_NAMES[i as usize].to_owned(), c(i)))
        .collect();
    let mut lost: BTreeMap<String, u64> = (SPC_LOST_RINGBUF..SPIN_COUNTERS_LEN)
        .map(|i| (SPIN_COUNTER_NAMES[i as usize].to_owned(), c(i)))
        .collect();
    lost.insert("spin_ringbuf_malformed".into(), snap.malformed);
    SpinSummary {
        tier: "deep".into(),
        unavailable: None,
        watched: WATCHED_DESC.into(),
        hooks,
        hold: hold_unavailable.unwrap_or("exact").to_owned(),
        threshold_ns: p.threshold_ns,
        min_foreign: p.min_foreign,
        hold_threshold_ns: p.hold_threshold_ns,
        counts,
        lost,
    }
}

/// The tier did not run: why.
pub fn unavailable_summary(why: &str, hooks: BTreeMap<String, String>) -> SpinSummary {
    SpinSummary {
        tier: "unavailable".into(),
        unavailable: Some(why.to_owned()),
        watched: WATCHED_DESC.into(),
        hooks,
        hold: "unavailable".into(),
        threshold_ns: 0,
        min_foreign: 0,
        hold_threshold_ns: 0,
        counts: BTreeMap::new(),
        lost: BTreeMap::new(),
    }
}

/// The watched lock as the contention pipeline names locks: `pi_lock of comm[tid]`.
fn lock_info(snap: &SpinSnapshot) -> HashMap<u64, LockInfo> {
    snap.watched
        .iter()
        .filter(|(_, w)| w.kind == WATCH_PI_LOCK)
        .map(|(&lock, w)| {
            let mut comm = w.comm;
            if let Some(live) = snap.task_comms.get(&w.tid) {
                comm = [0; 16];
                let b = live.as_bytes();
                let n = b.len().min(15);
                comm[..n].copy_from_slice(&b[..n]);
            }
            (
                lock,
                LockInfo {
                    kind: LOCK_KIND_PI_LOCK,
                    tgid: w.tid,
                    comm,
                    tid: 0,
                    ..LockInfo::default()
                },
            )
        })
        .collect()
}

fn as_raw(snap: &SpinSnapshot) -> RawSnapshot {
    RawSnapshot {
        stats: snap.waits.clone(),
        lock_info: lock_info(snap),
        stacks: snap.stacks.clone(),
        comms: snap.comms.clone(),
        ..Default::default()
    }
}

/// One `spinlock` entry per watched lock that was waited for or held.
pub fn deep_entries(
    snap: &SpinSnapshot,
    names: &dyn Names,
    hold_available: bool,
) -> Vec<LockEntry> {
    let raw = as_raw(snap);
    let mut lost = BTreeMap::new();
    let mut entries = build_locks(&raw, names, &mut lost);
    let mut holds: BTreeMap<u64, WaitStats> = BTreeMap::new();
    for (k, s) in &snap.holds {
        holds.entry(k.lock).or_default().merge(s);
    }
    let have: BTreeSet<String> = entries.iter().map(|e| e.addr.clone()).collect();
    for &addr in holds.keys() {
        if have.contains(&format!("{addr:#x}")) {
            continue;
        }
        let (name, owner) = lock_identity(&raw, names, addr);
        entries.push(LockEntry {
            addr: format!("{addr:#x}"),
            lock_type: LockType::Spinlock,
            name,
            owner,
            stats: WaitStats::default(),
            callers: Vec::new(),
            tasks: Vec::new(),
            user: None,
            events: None,
            omitted: None,
            wait_task: None,
            spin: None,
            holders: None,
        });
    }
    for e in &mut entries {
        let addr = super::model::parse_lock_addr(&e.addr).map_or(0, |(a, _)| a);
        e.spin = Some(Box::new(SpinDetail {
            tier: "deep".into(),
            hold: hold_available.then(|| holds.get(&addr).cloned().unwrap_or_default()),
        }));
    }
    entries
}

/// Put the deep entries into the recording's locks: they replace the tracepoint tier's
/// `spinlock` entries of the same locks (the same slowpath waits, seen exactly), and
/// the list stays sorted by total wait.
pub fn merge_entries(locks: &mut Vec<LockEntry>, mut deep: Vec<LockEntry>) {
    // The sched_wait_task proxy of a replaced entry stays with the lock.
    for d in &mut deep {
        if let Some(proxy) = locks
            .iter_mut()
            .find(|l| l.lock_type == LockType::Spinlock && l.addr == d.addr)
            .and_then(|l| l.wait_task.take())
        {
            d.wait_task = Some(proxy);
        }
    }
    let addrs: BTreeSet<&str> = deep.iter().map(|e| e.addr.as_str()).collect();
    locks.retain(|l| !(l.lock_type == LockType::Spinlock && addrs.contains(l.addr.as_str())));
    locks.extend(deep);
    locks.sort_by(|a, b| {
        b.stats
            .total_ns
            .cmp(&a.stats.total_ns)
            .then_with(|| a.addr.cmp(&b.addr))
    });
}

struct Lookup<'a> {
    raw: RawSnapshot,
    names: &'a dyn Names,
}

impl EpisodeNames for Lookup<'_> {
    fn lock(&self, addr: u64) -> String {
        lock_identity(&self.raw, self.names, addr).0
    }
    fn stack(&self, hash: u64) -> Vec<String> {
        match self.raw.stacks.get(&hash) {
            Some(s) => super::recording::kernel_path(self.names.frames(s))
                .into_iter()
                .map(|f| f.text)
                .collect(),
            None => Vec::new(),
        }
    }
}

/// The episodes, decoded, in time order. Records of an unknown kind are counted in
/// `lost["spin_episode_unknown_kind"]`.
pub fn episodes(
    snap: &SpinSnapshot,
    names: &dyn Names,
    lost: &mut BTreeMap<String, u64>,
) -> Vec<StarvationEpisode> {
    let lookup = Lookup {
        raw: as_raw(snap),
        names,
    };
    let mut out = Vec::new();
    for rec in &snap.episodes {
        match decode_episode(rec, &lookup) {
            Ok(e) => out.push(e),
            Err(_) => *lost.entry("spin_episode_unknown_kind".into()).or_default() += 1,
        }
    }
    out.sort_by_key(|e| e.ts_ns);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::recording::tests::{FakeNames, wait};
    use crate::aggregate::rt::EpisodeKind;

    const PI: u64 = 0xffff_8880_0100_07ec;

    fn snap() -> SpinSnapshot {
        let key = |lock, tgid| ContentionKey {
            lock,
            stack: 3,
            tgid,
            flags: LCB_F_SPIN,
        };
        let mut comm = [0u8; 16];
        comm[..5].copy_from_slice(b"lockx");
        let mut s = SpinSnapshot {
            waits: vec![(key(PI, 10), wait(5_000, 4)), (key(PI, 11), wait(1_000, 2))],
            holds: vec![(key(PI, 10), wait(300, 7)), (key(0xabc, 10), wait(100, 1))],
            counters: vec![0; SPIN_COUNTERS_LEN as usize],
            ..Default::default()
        };
        s.watched.insert(
            PI,
            SpinWatch {
                tid: 42,
                tgid: 40,
                kind: WATCH_PI_LOCK,
                _pad: 0,
                comm,
            },
        );
        s.task_comms.insert(42, "pi-victim".into());
        s.stacks.insert(3, vec![1, 3, 4]);
        s
    }

    #[test]
    fn watched_locks_become_deep_entries_with_holds() {
        let s = snap();
        let e = deep_entries(&s, &FakeNames, true);
        assert_eq!(e.len(), 2);
        let pi = e.iter().find(|e| e.addr == format!("{PI:#x}")).unwrap();
        assert_eq!(pi.name, "pi_lock of pi-victim[42]");
        assert_eq!(pi.lock_type, LockType::Spinlock);
        assert_eq!((pi.stats.count, pi.stats.total_ns), (6, 22_000));
        let d = pi.spin.as_ref().unwrap();
        assert_eq!(d.tier, "deep");
        assert_eq!(d.hold.as_ref().unwrap().count, 7);
        let json = serde_json::to_value(pi).unwrap();
        assert_eq!(json["tier"], "deep");
        assert_eq!(json["hold"]["contended"], 7);
        let back: LockEntry = serde_json::from_value(json).unwrap();
        assert_eq!(&back, pi);
        // Hold-only lock: an entry with no waits.
        let other = e.iter().find(|e| e.addr == "0xabc").unwrap();
        assert_eq!(other.stats.count, 0);
        // Hold time unavailable: null, never zeros.
        let e = deep_entries(&s, &FakeNames, false);
        assert!(e.iter().all(|e| e.spin.as_ref().unwrap().hold.is_none()));
        let json = serde_json::to_value(&e[0]).unwrap();
        assert!(json["hold"].is_null());
    }

    #[test]
    fn deep_entries_replace_tracepoint_entries_of_the_same_lock() {
        let s = snap();
        let mut lost = BTreeMap::new();
        let mut locks = build_locks(
            &RawSnapshot {
                stats: vec![(
                    ContentionKey {
                        lock: PI,
                        stack: 0,
                        tgid: 10,
                        flags: LCB_F_SPIN,
                    },
                    wait(5_000, 3),
                )],
                ..Default::default()
            },
            &FakeNames,
            &mut lost,
        );
        assert_eq!(locks.len(), 1);
        merge_entries(&mut locks, deep_entries(&s, &FakeNames, true));
        assert_eq!(locks.len(), 2);
        assert!(locks[0].spin.is_some());
        assert_eq!(locks[0].stats.count, 6);
    }

    #[test]
    fn episodes_decode_in_time_order_and_unknown_kinds_are_counted() {
        let mut s = snap();
        for (ts, kind) in [(50, EPISODE_LONG_HOLD), (10, EPISODE_STARVATION), (30, 9)] {
            s.episodes.push(SpinEpisodeRecord {
                kind,
                ts_ns: ts,
                lock: PI,
                stack: 3,
                foreign: 8,
                ..Default::default()
            });
        }
        let mut lost = BTreeMap::new();
        let e = episodes(&s, &FakeNames, &mut lost);
        assert_eq!(e.len(), 2);
        assert_eq!(lost["spin_episode_unknown_kind"], 1);
        assert_eq!(e[0].kind, EpisodeKind::Starvation);
        assert_eq!(e[0].lock, "pi_lock of pi-victim[42]");
        // Tracing glue (frame 1) dropped from the stack.
        assert_eq!(e[0].waiter.stack[0], "do_user_addr_fault+0x90");
        assert_eq!(e[1].kind, EpisodeKind::LongHold);
    }

    #[test]
    fn summary_counts_and_losses() {
        let mut s = snap();
        s.counters[SPC_WAITS as usize] = 6;
        s.counters[SPC_LOST_RINGBUF as usize] = 2;
        let sum = summary(&s, BTreeMap::new(), None, &SpinParams::default());
        assert_eq!(sum.counts["waits"], 6);
        assert_eq!(sum.lost["spin_ringbuf_full"], 2);
        assert_eq!(sum.hold, "exact");
        assert_eq!((sum.threshold_ns, sum.min_foreign), (20_000, 8));
        assert_eq!(sum.hold_threshold_ns, 1_000_000);
    }
}
