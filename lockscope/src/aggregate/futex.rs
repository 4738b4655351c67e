//! User-space locks in the recording: one entry per futex word (process, address), built
//! from the futex probes' per-CPU aggregates. Pure.

use std::collections::{BTreeMap, HashMap, HashSet};

use lockscope_common::*;
use serde::{Deserialize, Serialize};

use super::{
    WaitStats,
    model::{CallerEntry, HOLDERS_PER_LOCK, Holders, LockEntry, TaskEntry},
    pthread::{
        PthreadEvents, PthreadLock, PthreadSite, PthreadSnapshot, attribution, pthread_lost,
        pthread_name,
    },
};
use crate::decode::{LockType, futex::FutexCmd};

/// What the futex probes aggregated, CPUs summed.
#[derive(Debug, Clone, Default)]
pub struct FutexSnapshot {
    /// False when the futex probes were not attached (e.g. `--types` without futex).
    pub enabled: bool,
    pub stats: Vec<(FutexKey, FutexTotals)>,
    pub counters: [u64; FUTEX_COUNTERS_LEN as usize],
    /// Calls in progress at the snapshot, by (tgid, uaddr).
    pub in_progress: HashMap<(u32, u64), u64>,
    /// Thread names by TID (PI owners), where known.
    pub thread_comms: HashMap<u32, String>,
    /// Which user-space types to report (`None`: all).
    pub types: Option<Vec<LockType>>,
    /// pthread attribution: call sites per futex word (empty where it is off).
    pub pthread: PthreadSnapshot,
    /// Entries of `stats` that came from `FUTEX_HOT` slots alone (not in `FUTEX_STATS`).
    pub hot_only: usize,
    /// `FUTEX_HOT` as read (already added to `stats`).
    pub hot: HotSlots,
    /// Blocking mode: only the waits that slept were seen (`--futex-mode blocking`).
    pub blocking: bool,
}

/// `FUTEX_HOT` as read: per slot, its value on each CPU.
pub type HotSlots = Vec<Vec<FutexHot>>;

/// Did no slot move its counts to `FUTEX_STATS` between two reads of `FUTEX_HOT` (one
/// before and one after the read of `FUTEX_STATS`)? Then the later read and the hash
/// read between them count every call once.
pub fn hot_reads_agree(before: &HotSlots, after: &HotSlots) -> bool {
    before.len() == after.len()
        && before.iter().zip(after).all(|(a, b)| {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|(x, y)| x.seq == y.seq && x.seq % 2 == 0)
        })
}

/// What forgotten processes left in `FUTEX_HOT` slots, by (slot, CPU): a slot keeps a
/// gone process's counts until another key takes it, and those must not come back.
pub type HotForgotten = HashMap<(usize, usize), FutexHot>;

/// Remember the slots of processes that are forgotten now (`hot` as last read).
pub fn forget_hot(hot: &HotSlots, gone: &HashSet<u32>, forgotten: &mut HotForgotten) {
    for (i, cpus) in hot.iter().enumerate() {
        for (c, h) in cpus.iter().enumerate() {
            if h.calls != 0 && gone.contains(&h.tgid) {
                forgotten.insert((i, c), *h);
            }
        }
    }
}

/// Add the calls counted in `FUTEX_HOT` slots to the entries of `FUTEX_STATS`; keys
/// found only in slots become entries. A slot that still holds what a forgotten process
/// left adds only what came since (nothing, unless its process ID was reused); one that
/// moved on is no longer remembered. Returns how many entries the slots made.
pub fn merge_hot(
    stats: &mut Vec<(FutexKey, FutexTotals)>,
    hot: &HotSlots,
    forgotten: &mut HotForgotten,
) -> usize {
    let same = |h: &FutexHot, b: &FutexHot| {
        h.calls != 0 && h.key() == b.key() && h.cmd == b.cmd && h.seq == b.seq
    };
    forgotten.retain(|&(i, c), b| {
        hot.get(i)
            .and_then(|cpus| cpus.get(c))
            .is_some_and(|h| same(h, b))
    });
    let mut index: HashMap<FutexKey, usize> = stats
        .iter()
        .enumerate()
        .map(|(i, (k, _))| (*k, i))
        .collect();
    let mut added = 0;
    for (i, cpus) in hot.iter().enumerate() {
        for (c, h) in cpus.iter().enumerate() {
            let h = forgotten.get(&(i, c)).map_or(*h, |b| h.since(b));
            if h.calls == 0 {
                continue;
            }
            let e = *index.entry(h.key()).or_insert_with(|| {
                stats.push((h.key(), FutexTotals::merge_cpus([])));
                added += 1;
                stats.len() - 1
            });
            h.fold_into(&mut stats[e].1.counts);
        }
    }
    added
}

/// One (tgid, uaddr) entry summed over CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FutexTotals {
    pub wait: WaitStats,
    /// Counters summed (its `wait` field is unused: see `wait`); `pi_owner_*` from the
    /// CPU that saw the latest owner.
    pub counts: FutexStats,
}

impl FutexTotals {
    /// Sum map values: a shared `FUTEX_STATS` entry is one, test inputs may be several.
    pub fn merge_cpus<'a>(values: impl IntoIterator<Item = &'a FutexStats>) -> Self {
        let mut wait = WaitStats::default();
        let mut c = FutexStats::EMPTY;
        for v in values {
            wait.merge(&WaitStats::from_raw(&v.wait));
            for (a, b) in c.calls.iter_mut().zip(v.calls.iter()) {
                *a += b;
            }
            c.eagain += v.eagain;
            c.timeouts += v.timeouts;
            c.interrupted += v.interrupted;
            c.errors += v.errors;
            c.woken += v.woken;
            c.requeued += v.requeued;
            c.restarts += v.restarts;
            c.unpaired += v.unpaired;
            c.shared_calls += v.shared_calls;
            c.pi_owner_died += v.pi_owner_died;
            c.pi_word_unreadable += v.pi_word_unreadable;
            if v.pi_owner_tid != 0 && v.pi_owner_ts >= c.pi_owner_ts {
                c.pi_owner_tid = v.pi_owner_tid;
                c.pi_owner_ts = v.pi_owner_ts;
            }
        }
        Self { wait, counts: c }
    }

    fn calls(&self, cmds: &[FutexCmd]) -> u64 {
        cmds.iter()
            .map(|c| self.counts.calls[c.slot() as usize])
            .sum()
    }

    /// Any PI command used on this word makes it a PI futex.
    pub fn is_pi(&self) -> bool {
        FutexCmd::ALL
            .into_iter()
            .any(|c| c.is_pi() && self.counts.calls[c.slot() as usize] > 0)
    }
}

/// The `"futex"` object of a futex lock entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FutexInfo {
    /// Wait calls: FUTEX_WAIT, FUTEX_WAIT_BITSET, FUTEX_WAIT_REQUEUE_PI, futex_wait,
    /// futex_waitv (each call once, restarts included in the call).
    pub wait_calls: u64,
    /// Wait calls that returned EAGAIN (the word had changed: no wait).
    pub eagain: u64,
    /// Blocking calls that timed out.
    pub timeouts: u64,
    /// Blocking calls ended by a signal.
    pub interrupted: u64,
    /// Wake calls: FUTEX_WAKE, FUTEX_WAKE_BITSET, FUTEX_WAKE_OP, futex_wake.
    pub wake_calls: u64,
    /// Tasks woken by those calls (sum of their return values).
    pub woken: u64,
    /// Requeue calls: FUTEX_REQUEUE, FUTEX_CMP_REQUEUE, FUTEX_CMP_REQUEUE_PI, futex_requeue.
    pub requeues: u64,
    /// Tasks woken or requeued by those calls (sum of their return values).
    pub requeued: u64,
    /// FUTEX_LOCK_PI and FUTEX_LOCK_PI2 calls.
    pub lock_pi_calls: u64,
    pub unlock_pi_calls: u64,
    pub trylock_pi_calls: u64,
    /// Calls that failed with another error (EFAULT, EINVAL, EDEADLK, ENOSYS, ...).
    pub errors: u64,
    /// Restarts after signals (re-executed call or restart_syscall).
    pub restarts: u64,
    /// Calls whose exit never came (a later call of the same thread replaced them).
    pub unpaired: u64,
    /// Calls still in progress when the snapshot was taken.
    pub in_progress: u64,
    /// Calls without FUTEX_PRIVATE_FLAG: the word may be shared between processes
    /// (it is still keyed by the calling process and address).
    pub shared_calls: u64,
    /// Every call by command name (non-zero only).
    pub calls: BTreeMap<String, u64>,
    /// PI futexes: the latest owner found in the futex word at a LOCK_PI / TRYLOCK_PI entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pi_owner: Option<PiOwner>,
    /// LOCK_PI entries that found FUTEX_OWNER_DIED set.
    #[serde(default)]
    pub pi_owner_died: u64,
    /// LOCK_PI / TRYLOCK_PI entries whose futex word could not be read.
    #[serde(default)]
    pub pi_word_unreadable: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PiOwner {
    pub tid: u32,
    /// The owner thread's name, when it made a PI call we saw or was still alive.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub comm: String,
}

/// The user-space part of a lock entry (flattened into it): the process and the futex
/// figures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserLock {
    pub pid: u32,
    pub comm: String,
    pub futex: FutexInfo,
    /// The pthread mutex / rwlock this futex word belongs to, when attributed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pthread: Option<PthreadLock>,
}

/// Futex activity over the whole recording, for the `futex_events` object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FutexEvents {
    pub enter: u64,
    pub exit: u64,
    /// Exits whose call began before tracing.
    pub unpaired_exit: u64,
    /// Calls whose exit never came.
    pub unpaired_enter: u64,
    pub restarts: u64,
    /// Calls left for a signal and not resumed: counted as interrupted.
    pub restart_abandoned: u64,
    pub in_progress_at_end: u64,
    /// Calls on futex words of a type not asked for (`--types`).
    pub type_filtered: u64,
    /// pthread attribution (blocked waits unwound): libraries seen, notes, counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pthread: Option<PthreadEvents>,
    /// `--futex-mode blocking`: only the waits that slept were seen, once per sleep
    /// (`enter`/`exit` count sleeps); absent: every futex call was.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub blocking: bool,
}

impl FutexInfo {
    pub fn from_totals(t: &FutexTotals, in_progress: u64, owner_comm: Option<&str>) -> Self {
        use FutexCmd::*;
        let c = &t.counts;
        let calls = FutexCmd::ALL
            .into_iter()
            .map(|cmd| (cmd.name().to_owned(), c.calls[cmd.slot() as usize]))
            .chain(std::iter::once((
                "unknown".to_owned(),
                c.calls[FUTEX_CMD_UNKNOWN as usize],
            )))
            .filter(|(_, n)| *n > 0)
            .collect();
        Self {
            wait_calls: t.calls(&[Wait, WaitBitset, WaitRequeuePi, Futex2Wait, Futex2Waitv]),
            eagain: c.eagain,
            timeouts: c.timeouts,
            interrupted: c.interrupted,
            wake_calls: t.calls(&[Wake, WakeBitset, WakeOp, Futex2Wake]),
            woken: c.woken,
            requeues: t.calls(&[Requeue, CmpRequeue, CmpRequeuePi, Futex2Requeue]),
            requeued: c.requeued,
            lock_pi_calls: t.calls(&[LockPi, LockPi2]),
            unlock_pi_calls: t.calls(&[UnlockPi]),
            trylock_pi_calls: t.calls(&[TrylockPi]),
            errors: c.errors,
            restarts: c.restarts,
            unpaired: c.unpaired,
            in_progress,
            shared_calls: c.shared_calls,
            calls,
            pi_owner: (c.pi_owner_tid != 0).then(|| PiOwner {
                tid: c.pi_owner_tid as u32,
                comm: owner_comm.unwrap_or_default().to_owned(),
            }),
            pi_owner_died: c.pi_owner_died,
            pi_word_unreadable: c.pi_word_unreadable,
        }
    }
}

impl FutexEvents {
    pub fn from_snapshot(s: &FutexSnapshot, type_filtered: u64) -> Self {
        let c = &s.counters;
        Self {
            enter: c[FCNT_ENTER as usize],
            exit: c[FCNT_EXIT as usize],
            unpaired_exit: c[FCNT_UNPAIRED_EXIT as usize],
            unpaired_enter: c[FCNT_UNPAIRED_ENTER as usize],
            restarts: c[FCNT_RESTART as usize],
            restart_abandoned: c[FCNT_RESTART_ABANDONED as usize],
            in_progress_at_end: s.in_progress.values().sum(),
            type_filtered,
            pthread: (s.pthread.active || !s.pthread.notes.is_empty())
                .then(|| PthreadEvents::from_snapshot(&s.pthread)),
            blocking: s.blocking,
        }
    }
}

/// The `lost` counters of the futex probes, by name.
pub fn futex_lost(s: &FutexSnapshot) -> BTreeMap<String, u64> {
    let mut lost: BTreeMap<String, u64> =
        [FCNT_LOST_STATS_FULL, FCNT_LOST_CALL_FULL, FCNT_LOST_MINMAX]
            .into_iter()
            .map(|i| {
                (
                    FUTEX_COUNTER_NAMES[i as usize].to_owned(),
                    s.counters[i as usize],
                )
            })
            .collect();
    // Calls whose thread died inside them (killed in a wait): neither timed nor counted.
    let live: u64 = super::stats::saturating_sum(s.in_progress.values().copied());
    lost.insert(
        "futex_calls_evicted".to_owned(),
        s.counters[FCNT_CALLS_CREATED as usize]
            .saturating_sub(s.counters[FCNT_EXIT as usize])
            .saturating_sub(live),
    );
    lost.insert(
        "futex_stats_evicted".to_owned(),
        super::recording::evicted(
            s.counters[FCNT_STATS_CREATED as usize],
            s.stats.len().saturating_sub(s.hot_only),
        ),
    );
    if s.pthread.active {
        lost.extend(pthread_lost(&s.pthread));
    }
    lost
}

/// Calls on futex words whose type was not asked for (`--types`).
pub fn futex_type_filtered(s: &FutexSnapshot) -> u64 {
    // The count `build_futex_locks` returns, without building the entries.
    let Some(types) = &s.types else { return 0 };
    s.stats
        .iter()
        .filter(|(_, t)| {
            let lock_type = if t.is_pi() {
                LockType::FutexPi
            } else {
                LockType::Futex
            };
            !types.contains(&lock_type)
        })
        .map(|(_, t)| t.counts.calls.iter().sum::<u64>())
        .sum()
}

/// One entry per futex word. Returns the entries and the number of calls on words whose
/// type was not asked for (filtered, counted).
pub fn build_futex_locks(s: &FutexSnapshot, comms: &HashMap<u32, String>) -> (Vec<LockEntry>, u64) {
    let mut filtered = 0u64;
    let mut seen: BTreeMap<(u32, u64), ()> = BTreeMap::new();
    // Sized once: an entry is large, and doubling tens of thousands of them to find
    // room held half as many again (and both copies while moving).
    let mut out = Vec::with_capacity(s.stats.len() + s.in_progress.len());
    let mut sites: HashMap<(u32, u64), Vec<&PthreadSite>> = HashMap::new();
    let comm = |pid: u32| comms.get(&pid).cloned().unwrap_or_default();
    let mut owners = s.pthread.owners.entries(HOLDERS_PER_LOCK, &comm);
    for site in &s.pthread.sites {
        sites
            .entry((site.key.tgid, site.key.uaddr))
            .or_default()
            .push(site);
    }
    for (key, t) in &s.stats {
        seen.insert((key.tgid, key.uaddr), ());
        let pthread = sites
            .get(&(key.tgid, key.uaddr))
            .and_then(|v| attribution(v, &s.pthread.site_names));
        let lock_type = match &pthread {
            Some((t, _, _)) => *t,
            None if t.is_pi() => LockType::FutexPi,
            None => LockType::Futex,
        };
        if s.types.as_ref().is_some_and(|ts| !ts.contains(&lock_type)) {
            filtered += t.counts.calls.iter().sum::<u64>();
            continue;
        }
        let in_progress = s
            .in_progress
            .get(&(key.tgid, key.uaddr))
            .copied()
            .unwrap_or(0);
        let owner_comm = s.thread_comms.get(&(t.counts.pi_owner_tid as u32));
        let mut e = entry(
            key.tgid,
            key.uaddr,
            lock_type,
            comms,
            t.wait.clone(),
            FutexInfo::from_totals(t, in_progress, owner_comm.map(String::as_str)),
        );
        if let Some((_, lock, callers)) = pthread {
            // A mutex's waits that slept, by the holder glibc's `__owner` named.
            if lock.kind == "mutex" {
                let (owners, omitted) = owners.remove(&(key.tgid, key.uaddr)).unwrap_or_default();
                let known: u64 = owners.iter().map(|o| o.wait_total_ns).sum::<u64>() + omitted;
                e.holders = Some(Holders {
                    owner_unknown_wait_ns: e.stats.total_ns.saturating_sub(known),
                    owners,
                    owners_omitted_wait_ns: omitted,
                });
            }
            attribute(&mut e, lock, callers);
        }
        out.push(e);
    }
    // Words with a call in progress but none finished (a thread blocked the whole time).
    for (&(tgid, uaddr), &n) in &s.in_progress {
        if !seen.contains_key(&(tgid, uaddr))
            && s.types
                .as_ref()
                .is_none_or(|ts| ts.contains(&LockType::Futex))
        {
            let info = FutexInfo {
                in_progress: n,
                ..Default::default()
            };
            out.push(entry(
                tgid,
                uaddr,
                LockType::Futex,
                comms,
                WaitStats::default(),
                info,
            ));
        }
    }
    (out, filtered)
}

fn entry(
    pid: u32,
    uaddr: u64,
    lock_type: LockType,
    comms: &HashMap<u32, String>,
    stats: WaitStats,
    futex: FutexInfo,
) -> LockEntry {
    let comm = comms.get(&pid).cloned().unwrap_or_default();
    LockEntry {
        addr: format!("{uaddr:#x}"),
        lock_type,
        name: format!("{lock_type} {uaddr:#x} of {comm}[{pid}]"),
        owner: None,
        tasks: vec![TaskEntry {
            cgroup: None,
            pid,
            comm: comm.clone(),
            stats: stats.clone(),
            events: None,
        }],
        stats,
        callers: Vec::new(),
        user: Some(UserLock {
            pid,
            comm,
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

/// Name a futex word's entry after its pthread lock, with the user call sites as callers.
fn attribute(e: &mut LockEntry, lock: PthreadLock, callers: Vec<CallerEntry>) {
    if let Some(user) = e.user.as_mut() {
        e.name = pthread_name(e.lock_type, &lock, &user.comm, user.pid);
        user.pthread = Some(lock);
    }
    e.callers = callers;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::recording::tests::wait;

    fn stats(f: impl FnOnce(&mut FutexStats)) -> FutexStats {
        let mut s = FutexStats::EMPTY;
        f(&mut s);
        s
    }

    fn hot(tgid: u32, uaddr: u64, calls: u64, woken: u64) -> FutexHot {
        FutexHot {
            uaddr,
            tgid,
            cmd: FUTEX_WAKE,
            calls,
            woken,
            ..Default::default()
        }
    }

    #[test]
    fn hot_slots_add_to_their_keys_entries_and_make_the_missing_ones() {
        let k = |tgid, uaddr| FutexKey {
            uaddr,
            tgid,
            _pad: 0,
        };
        let mut entries = vec![(
            k(7, 0x1000),
            FutexTotals::merge_cpus([&stats(|s| {
                s.calls[FUTEX_WAKE as usize] = 10;
                s.woken = 4;
            })]),
        )];
        // Slot 0: the hashed key on two CPUs; slot 1: a key only in a slot, and a free
        // slot (calls 0) whose stale key must not appear.
        let slots: HotSlots = vec![
            vec![hot(7, 0x1000, 3, 1), hot(7, 0x1000, 2, 2)],
            vec![hot(8, 0x2000, 5, 0), hot(9, 0x3000, 0, 0)],
        ];
        assert_eq!(merge_hot(&mut entries, &slots, &mut HotForgotten::new()), 1);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].1.counts.calls[FUTEX_WAKE as usize], 15);
        assert_eq!(entries[0].1.counts.woken, 7);
        assert_eq!(entries[1].0, k(8, 0x2000));
        assert_eq!(entries[1].1.counts.calls[FUTEX_WAKE as usize], 5);
        // The hash's own entries, for `futex_stats_evicted`.
        let snap = FutexSnapshot {
            stats: entries,
            hot_only: 1,
            ..Default::default()
        };
        let mut counters = snap.counters;
        counters[FCNT_STATS_CREATED as usize] = 3;
        let snap = FutexSnapshot { counters, ..snap };
        assert_eq!(futex_lost(&snap)["futex_stats_evicted"], 2);
    }

    #[test]
    fn a_forgotten_processs_slot_adds_nothing_until_it_moves_on() {
        let mut forgotten = HotForgotten::new();
        let read = |slot: FutexHot| -> HotSlots { vec![vec![slot]] };
        let merged = |slots: &HotSlots, forgotten: &mut HotForgotten| {
            let mut entries = Vec::new();
            merge_hot(&mut entries, slots, forgotten);
            entries
                .iter()
                .map(|(k, t)| (k.tgid, t.counts.calls[FUTEX_WAKE as usize]))
                .collect::<Vec<_>>()
        };
        let gone = hot(7, 0x1000, 5, 1);
        forget_hot(&read(gone), &HashSet::from([7]), &mut forgotten);
        // Still holding what it left: nothing; a reused ID's new calls: those only.
        assert_eq!(merged(&read(gone), &mut forgotten), vec![]);
        assert_eq!(
            merged(&read(FutexHot { calls: 8, ..gone }), &mut forgotten),
            vec![(7, 3)]
        );
        // Another process took the slot (its counts moved: seq + 2): counted whole, and
        // the slot is no longer remembered.
        let next = FutexHot {
            seq: 2,
            ..hot(9, 0x2000, 4, 0)
        };
        assert_eq!(merged(&read(next), &mut forgotten), vec![(9, 4)]);
        assert!(forgotten.is_empty());
        // A process that is not gone is not remembered.
        forget_hot(&read(next), &HashSet::from([7]), &mut forgotten);
        assert!(forgotten.is_empty());
    }

    #[test]
    fn hot_reads_agree_only_without_a_move_between_them() {
        let at = |seq| {
            vec![vec![FutexHot {
                seq,
                ..hot(7, 0x1000, 1, 0)
            }]]
        };
        assert!(hot_reads_agree(&at(2), &at(2)));
        // A move finished between the reads, or is under way.
        assert!(!hot_reads_agree(&at(2), &at(4)));
        assert!(!hot_reads_agree(&at(3), &at(3)));
        assert!(!hot_reads_agree(&at(2), &vec![]));
    }

    #[test]
    fn cpus_merge_exactly_and_keep_the_latest_owner() {
        let mut w = wait(1_000, 3);
        w.failed = 1;
        let a = stats(|s| {
            s.wait.count = 3;
            s.wait.failed = 1;
            s.wait.total_ns = 3_000;
            s.wait.min_ns = 1_000;
            s.wait.max_ns = 1_000;
            s.wait.hist[log2_bucket(1_000)] = 3;
            s.calls[FUTEX_WAIT as usize] = 5;
            s.calls[FUTEX_WAKE as usize] = 2;
            s.eagain = 2;
            s.woken = 2;
            s.pi_owner_tid = 11;
            s.pi_owner_ts = 100;
        });
        let b = stats(|s| {
            s.calls[FUTEX_WAIT as usize] = 1;
            s.calls[FUTEX_LOCK_PI as usize] = 4;
            s.eagain = 1;
            s.pi_owner_tid = 22;
            s.pi_owner_ts = 200;
        });
        // A CPU slot never used: zeroed (min_ns 0, count 0).
        let zero = stats(|s| s.wait.min_ns = 0);
        let t = FutexTotals::merge_cpus([&a, &zero, &b]);
        assert_eq!(t.wait, w);
        assert_eq!(t.counts.calls[FUTEX_WAIT as usize], 6);
        assert_eq!(t.counts.eagain, 3);
        assert_eq!(t.counts.pi_owner_tid, 22);
        assert!(t.is_pi());
        let info = FutexInfo::from_totals(&t, 1, Some("owner"));
        assert_eq!(info.wait_calls, 6);
        assert_eq!(info.wake_calls, 2);
        assert_eq!(info.lock_pi_calls, 4);
        assert_eq!(info.in_progress, 1);
        assert_eq!(info.calls["FUTEX_WAIT"], 6);
        assert_eq!(info.calls["FUTEX_LOCK_PI"], 4);
        assert!(!info.calls.contains_key("FUTEX_UNLOCK_PI"));
        assert_eq!(
            info.pi_owner,
            Some(PiOwner {
                tid: 22,
                comm: "owner".into()
            })
        );
    }

    #[test]
    fn entries_are_typed_named_and_filtered() {
        let mut snap = FutexSnapshot {
            enabled: true,
            ..Default::default()
        };
        let key = |uaddr, tgid| FutexKey {
            uaddr,
            tgid,
            _pad: 0,
        };
        snap.stats.push((
            key(0x1000, 7),
            FutexTotals::merge_cpus([&stats(|s| s.calls[FUTEX_WAKE as usize] = 3)]),
        ));
        snap.stats.push((
            key(0x2000, 7),
            FutexTotals::merge_cpus([&stats(|s| s.calls[FUTEX_UNLOCK_PI as usize] = 2)]),
        ));
        snap.in_progress.insert((7, 0x3000), 2);
        let comms: HashMap<u32, String> = [(7, "app".to_owned())].into();
        let (locks, filtered) = build_futex_locks(&snap, &comms);
        assert_eq!(filtered, 0);
        assert_eq!(locks.len(), 3);
        assert_eq!(locks[0].lock_type, LockType::Futex);
        assert_eq!(locks[0].name, "futex 0x1000 of app[7]");
        assert_eq!(locks[1].lock_type, LockType::FutexPi);
        let user = locks[2].user.as_ref().unwrap();
        assert_eq!((user.pid, user.futex.in_progress), (7, 2));

        snap.types = Some(vec![LockType::FutexPi]);
        let (locks, filtered) = build_futex_locks(&snap, &comms);
        assert_eq!(locks.len(), 1);
        assert_eq!(locks[0].addr, "0x2000");
        assert_eq!(filtered, 3);
        assert_eq!(futex_type_filtered(&snap), 3);
        snap.types = None;
        assert_eq!(futex_type_filtered(&snap), 0);
    }

    #[test]
    fn attributed_words_are_named_after_their_pthread_lock() {
        use crate::aggregate::pthread::PthreadSite;
        let mut snap = FutexSnapshot::default();
        let k = |uaddr| FutexKey {
            uaddr,
            tgid: 5,
            _pad: 0,
        };
        let w = wait(2_000, 2);
        let mut t = FutexTotals::merge_cpus([&stats(|s| s.calls[FUTEX_WAIT as usize] = 2)]);
        t.wait = w.clone();
        snap.stats.push((k(0x7000), t.clone()));
        snap.stats.push((k(0x9000), t));
        snap.pthread.active = true;
        snap.pthread.sites.push(PthreadSite {
            key: PthreadSiteKey {
                uaddr: 0x7000,
                site: 0x5555_0000_1234,
                tgid: 5,
                func: PTHREAD_FN_MUTEX_LOCK,
            },
            obj: 0x7000,
            calls: 2,
            wait: w.clone(),
        });
        snap.pthread
            .site_names
            .insert((5, 0x5555_0000_1234), "worker+0x24".to_owned());
        let comms: HashMap<u32, String> = [(5, "app".to_owned())].into();
        let (locks, _) = build_futex_locks(&snap, &comms);
        let m = &locks[0];
        assert_eq!(m.lock_type, LockType::PthreadMutex);
        assert_eq!(m.name, "pthread-mutex 0x7000 of app[5]");
        assert_eq!(m.callers.len(), 1);
        assert_eq!(m.callers[0].caller, "worker+0x24");
        assert_eq!(m.callers[0].stats, w);
        let j = serde_json::to_value(m).unwrap();
        assert_eq!(j["type"], "pthread-mutex");
        assert_eq!(j["pthread"]["object"], "0x7000");
        assert_eq!(j["pthread"]["kind"], "mutex");
        let back: LockEntry = serde_json::from_value(j).unwrap();
        assert_eq!(&back, m);
        // No call site on the other word: it stays a futex named by address.
        assert_eq!(locks[1].lock_type, LockType::Futex);
        assert!(locks[1].callers.is_empty());
        // Filtering by type sees the attributed type.
        snap.types = Some(vec![LockType::Futex]);
        let (locks, filtered) = build_futex_locks(&snap, &comms);
        assert_eq!(locks.len(), 1);
        assert_eq!(filtered, 2);
        assert_eq!(futex_lost(&snap)["pthread_site_map_full"], 0);
    }

    #[test]
    fn entries_round_trip_through_json() {
        let comms: HashMap<u32, String> = [(9, "db".to_owned())].into();
        let mut snap = FutexSnapshot::default();
        snap.stats.push((
            FutexKey {
                uaddr: 0xabc,
                tgid: 9,
                _pad: 0,
            },
            FutexTotals::merge_cpus([&stats(|s| {
                s.calls[FUTEX_LOCK_PI as usize] = 1;
                s.pi_owner_tid = 10;
                s.pi_owner_ts = 1;
            })]),
        ));
        let (locks, _) = build_futex_locks(&snap, &comms);
        let j = serde_json::to_value(&locks[0]).unwrap();
        assert_eq!(j["type"], "futex-pi");
        assert_eq!(j["pid"], 9);
        assert_eq!(j["comm"], "db");
        assert_eq!(j["futex"]["lock_pi_calls"], 1);
        assert_eq!(j["futex"]["pi_owner"]["tid"], 10);
        assert_eq!(j["contended"], 0);
        let back: LockEntry = serde_json::from_value(j).unwrap();
        assert_eq!(back, locks[0]);
    }
}
