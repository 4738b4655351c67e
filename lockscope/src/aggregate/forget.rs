//! Forgetting exited processes: which processes have been gone long enough, and which
//! map entries go with them (their waits, the names of the locks they owned). Pure: the
//! session deletes the keys.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    time::{Duration, Instant},
};

/// Processes seen exited, and since when (bounded by the processes in the maps).
#[derive(Debug, Default)]
pub struct ExitTracker {
    dead_since: HashMap<u32, Instant>,
}

impl ExitTracker {
    /// The processes among `tgids` (those in the maps now) that have been gone for at
    /// least `grace`, by the first read that found them gone. tgid 0 (the idle task's
    /// interrupts) never goes.
    pub fn expired(
        &mut self,
        tgids: &BTreeSet<u32>,
        now: Instant,
        grace: Duration,
        alive: impl Fn(u32) -> bool,
    ) -> HashSet<u32> {
        self.dead_since.retain(|t, _| tgids.contains(t));
        let mut out = HashSet::new();
        for &t in tgids {
            if t == 0 || alive(t) {
                self.dead_since.remove(&t);
                continue;
            }
            let since = *self.dead_since.entry(t).or_insert(now);
            if now.duration_since(since) >= grace {
                out.insert(t);
            }
        }
        out
    }
}

/// The map keys to delete for processes gone long enough.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Forgettable {
    /// `CONTENTION_STATS`: the gone processes' waits, and every wait on a lock they owned.
    pub stats: Vec<lockscope_common::ContentionKey>,
    /// `RWSEM_EVENT_STATS`: the gone processes' rwsem events, and every event on a lock
    /// they owned.
    pub rwsem_events: Vec<lockscope_common::RwsemEventKey>,
    /// `LOCK_INFO`: the names of the locks they owned (`mmap_lock`, `siglock`,
    /// `pi_lock`). Their memory is reused by later processes, which would otherwise
    /// inherit the name (the kernel names a lock once, the first time it sees it).
    pub lock_info: Vec<u64>,
    /// `LOCK_INFO_PAST`: the names of earlier owner generations they owned.
    pub past_lock_info: Vec<lockscope_common::LockGenKey>,
    /// `LOCK_GENS`: addresses none of whose owner generations is named any more, so that
    /// the map follows the live processes too.
    pub lock_gens: Vec<u64>,
    /// `FUTEX_STATS`: the gone processes' futex words.
    pub futex: Vec<lockscope_common::FutexKey>,
    /// `WAIT_TASK_STATS`: the `sched_wait_task` proxy of gone waiters, and every proxy
    /// acquisition of a `pi_lock` the gone processes owned (a plain hash map: without
    /// this a daemon's map would fill with every tracer and tracee since start).
    pub wait_task: Vec<lockscope_common::WaitTaskKey>,
}

/// The processes a read can forget: waiters, rwsem-event owners, lock owners, futex
/// users and `sched_wait_task` waiters.
pub fn forget_candidates(
    raw: &crate::aggregate::RawSnapshot,
    wait_task: &[(lockscope_common::WaitTaskKey, u64)],
) -> BTreeSet<u32> {
    raw.stats
        .iter()
        .map(|(k, _)| k.tgid)
        .chain(raw.rwsem_events.iter().map(|(k, _)| k.tgid))
        .chain(raw.lock_info.values().map(|i| i.tgid))
        .chain(raw.past_lock_info.values().map(|i| i.tgid))
        .chain(raw.futex.stats.iter().map(|(k, _)| k.tgid))
        .chain(wait_task.iter().map(|(k, _)| k.waiter_tgid))
        .collect()
}

/// What to delete from the maps once the processes in `gone` are forgotten.
pub fn forgettable(
    raw: &crate::aggregate::RawSnapshot,
    wait_task: &[(lockscope_common::WaitTaskKey, u64)],
    gone: &HashSet<u32>,
) -> Forgettable {
    if gone.is_empty() {
        return Forgettable::default();
    }
    use lockscope_common::{LockGenKey, flags_gen};
    // The (address, owner generation) pairs the gone processes owned.
    let mut lock_info: Vec<u64> = Vec::new();
    let mut owned: HashSet<(u64, u32)> = HashSet::new();
    for (&lock, i) in &raw.lock_info {
        if gone.contains(&i.tgid) {
            lock_info.push(lock);
            owned.insert((lock, i.generation));
        }
    }
    lock_info.sort_unstable();
    let mut past_lock_info: Vec<LockGenKey> = Vec::new();
    for (&(lock, generation), i) in &raw.past_lock_info {
        if gone.contains(&i.tgid) {
            past_lock_info.push(LockGenKey {
                lock,
                generation,
                _pad: 0,
            });
            owned.insert((lock, generation));
        }
    }
    past_lock_info.sort_unstable();
    let owned_addrs: HashSet<u64> = owned.iter().map(|&(lock, _)| lock).collect();
    // An address keeps its generation count while any of its names stays.
    let still_named: HashSet<u64> = raw
        .lock_info
        .iter()
        .map(|(&lock, i)| (lock, i.generation))
        .chain(raw.past_lock_info.keys().copied())
        .filter(|id| !owned.contains(id))
        .map(|(lock, _)| lock)
        .collect();
    let mut lock_gens: Vec<u64> = raw
        .lock_gens
        .keys()
        .copied()
        .filter(|lock| owned_addrs.contains(lock) && !still_named.contains(lock))
        .collect();
    lock_gens.sort_unstable();
    let forgotten = |lock: u64, tgid: u32| gone.contains(&tgid) || owned_addrs.contains(&lock);
    Forgettable {
        stats: keys_where(&raw.stats, |k| {
            gone.contains(&k.tgid) || owned.contains(&(k.lock, flags_gen(k.flags)))
        }),
        rwsem_events: keys_where(&raw.rwsem_events, |k| forgotten(k.lock, k.tgid)),
        lock_info,
        past_lock_info,
        lock_gens,
        futex: keys_where(&raw.futex.stats, |k| gone.contains(&k.tgid)),
        wait_task: keys_where(wait_task, |k| forgotten(k.lock, k.waiter_tgid)),
    }
}

/// The keys of the map entries `entries` that `keep` selects.
fn keys_where<K: Copy, V>(entries: &[(K, V)], keep: impl Fn(&K) -> bool) -> Vec<K> {
    entries
        .iter()
        .map(|(k, _)| *k)
        .filter(|k| keep(k))
        .collect()
}

/// Entries of LRU maps that `serve` deleted on purpose (forgotten processes), so far:
/// not evictions, though the maps hold fewer entries than they created.
#[derive(Debug, Default, Clone, Copy)]
pub struct Forgotten {
    /// `CONTENTION_STATS` entries.
    pub stats: u64,
    /// `FUTEX_STATS` entries.
    pub futex: u64,
}

impl Forgotten {
    /// Take them out of the eviction counts (`created - held`) in `lost`.
    pub fn discount(self, lost: &mut std::collections::BTreeMap<String, u64>) {
        for (key, n) in [
            ("stats_evicted", self.stats),
            ("futex_stats_evicted", self.futex),
        ] {
            if let Some(evicted) = lost.get_mut(key) {
                *evicted = evicted.saturating_sub(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgotten_entries_are_not_counted_as_evicted() {
        let mut lost: std::collections::BTreeMap<String, u64> = [
            ("stats_evicted", 10),
            ("futex_stats_evicted", 3),
            ("stack_evicted", 4),
        ]
        .map(|(k, n)| (k.to_owned(), n))
        .into();
        Forgotten { stats: 7, futex: 5 }.discount(&mut lost);
        assert_eq!(lost["stats_evicted"], 3);
        assert_eq!(lost["futex_stats_evicted"], 0, "never below 0");
        assert_eq!(lost["stack_evicted"], 4, "stacks are not forgotten");
        // No futex probes: no futex key appears.
        let mut kernel_only: std::collections::BTreeMap<String, u64> =
            [("stats_evicted".to_owned(), 1)].into();
        Forgotten { stats: 1, futex: 2 }.discount(&mut kernel_only);
        assert_eq!(kernel_only, [("stats_evicted".to_owned(), 0)].into());
    }

    #[test]
    fn exited_processes_are_forgotten_after_the_grace_period() {
        let mut t = ExitTracker::default();
        let (live, dead, gone_early) = (10, 20, 30);
        let alive = |p: u32| p == live;
        let grace = Duration::from_secs(60);
        let t0 = Instant::now();
        let all: BTreeSet<u32> = [0, live, dead].into();
        // First seen gone: kept for the grace period.
        assert!(t.expired(&all, t0, grace, alive).is_empty());
        assert!(
            t.expired(&all, t0 + Duration::from_secs(59), grace, alive)
                .is_empty()
        );
        let out = t.expired(&all, t0 + grace, grace, alive);
        assert_eq!(out, [dead].into());
        // Processes no longer in the maps are not remembered.
        let later: BTreeSet<u32> = [0, live, gone_early].into();
        assert!(t.expired(&later, t0 + grace, grace, alive).is_empty());
        assert_eq!(t.dead_since.len(), 1);
        // A pid in use again is alive: its clock restarts.
        let back = |p: u32| p == live || p == gone_early;
        assert!(t.expired(&later, t0 + grace * 3, grace, back).is_empty());
        assert!(t.dead_since.is_empty());
    }

    #[test]
    fn forgetting_a_process_forgets_its_entries_and_the_names_of_its_locks() {
        use crate::aggregate::{RawSnapshot, WaitStats};
        use lockscope_common::*;
        let (live, dead) = (10, 20);
        let (live_mm, dead_mm, dead_pi, kernel_lock) = (0x1000, 0x2000, 0x3000, 0x4000);
        let key = |lock: u64, tgid: u32| ContentionKey {
            lock,
            stack: 7,
            tgid,
            flags: 0,
        };
        let info = |kind: u32, tgid: u32| LockInfo {
            kind,
            tgid,
            comm: [0; 16],
            tid: 0,
            ..LockInfo::default()
        };
        let raw = RawSnapshot {
            stats: [
                key(live_mm, live),
                key(dead_mm, dead),
                // A live process woke the dead one: a wait on the dead one's lock.
                key(dead_pi, live),
                key(kernel_lock, dead),
                key(kernel_lock, live),
            ]
            .into_iter()
            .map(|k| (k, WaitStats::default()))
            .collect(),
            lock_info: [
                (live_mm, info(LOCK_KIND_MMAP_LOCK, live)),
                (dead_mm, info(LOCK_KIND_MMAP_LOCK, dead)),
                (dead_pi, info(LOCK_KIND_PI_LOCK, dead)),
            ]
            .into(),
            rwsem_events: [(live_mm, live), (live_mm, dead), (dead_mm, live)]
                .map(|(lock, tgid)| {
                    let k = RwsemEventKey {
                        lock,
                        tgid,
                        side: SIDE_READ,
                    };
                    (k, RwsemEventCounts::default())
                })
                .into(),
            futex: crate::aggregate::futex::FutexSnapshot {
                stats: [(0x7000, live), (0x7000, dead), (0x7040, dead)]
                    .map(|(uaddr, tgid)| {
                        let k = FutexKey {
                            uaddr,
                            tgid,
                            _pad: 0,
                        };
                        let t = crate::aggregate::futex::FutexTotals {
                            wait: WaitStats::default(),
                            counts: FutexStats::EMPTY,
                        };
                        (k, t)
                    })
                    .into(),
                ..Default::default()
            },
            ..Default::default()
        };
        let wt = |lock: u64, waiter_tgid: u32| {
            let k = WaitTaskKey {
                lock,
                waiter_tid: waiter_tgid,
                waiter_tgid,
                cpu: 1,
                tracee_tid: 99,
            };
            (k, 5)
        };
        // A live tracer waiting on the dead one's pi_lock, the dead one tracing a kernel
        // thread, and a live tracer of a live task.
        let wait_task = [
            wt(dead_pi, live),
            wt(kernel_lock, dead),
            wt(kernel_lock, live),
        ];
        // A process that owns a named lock but never waited is still a candidate; so is
        // a futex user and a `sched_wait_task` waiter.
        let mut only_owner = raw.clone();
        only_owner.stats.retain(|(k, _)| k.tgid != dead);
        only_owner.rwsem_events.retain(|(k, _)| k.tgid != dead);
        only_owner.futex.stats.retain(|(k, _)| k.tgid != dead);
        assert_eq!(forget_candidates(&only_owner, &[]), [live, dead].into());
        let mut only_futex = RawSnapshot::default();
        only_futex.futex.stats = raw.futex.stats.clone();
        assert_eq!(forget_candidates(&only_futex, &[]), [live, dead].into());
        assert_eq!(
            forget_candidates(&RawSnapshot::default(), &wait_task),
            [live, dead].into()
        );

        assert_eq!(
            forgettable(&raw, &wait_task, &HashSet::new()),
            Forgettable::default()
        );
        let f = forgettable(&raw, &wait_task, &[dead].into());
        let locks: Vec<(u64, u32)> = f.stats.iter().map(|k| (k.lock, k.tgid)).collect();
        assert_eq!(
            locks,
            [(dead_mm, dead), (dead_pi, live), (kernel_lock, dead)]
        );
        assert_eq!(f.lock_info, [dead_mm, dead_pi]);
        let events: Vec<(u64, u32)> = f.rwsem_events.iter().map(|k| (k.lock, k.tgid)).collect();
        assert_eq!(events, [(live_mm, dead), (dead_mm, live)]);
        let words: Vec<(u64, u32)> = f.futex.iter().map(|k| (k.uaddr, k.tgid)).collect();
        assert_eq!(words, [(0x7000, dead), (0x7040, dead)]);
        let proxies: Vec<(u64, u32)> = f
            .wait_task
            .iter()
            .map(|k| (k.lock, k.waiter_tgid))
            .collect();
        assert_eq!(proxies, [(dead_pi, live), (kernel_lock, dead)]);
        assert!(f.past_lock_info.is_empty() && f.lock_gens.is_empty());
    }

    /// An address owned by a gone process, then by a live one: only the gone owner's
    /// generation (its name and every wait on it) goes; the address keeps its count.
    #[test]
    fn forgetting_an_owner_generation_keeps_the_later_owners() {
        use crate::aggregate::{RawSnapshot, WaitStats};
        use lockscope_common::*;
        let (live, dead, waiter) = (10, 20, 30);
        let (mm, other) = (0x1000, 0x2000);
        let key = |lock: u64, tgid: u32, generation: u32| ContentionKey {
            lock,
            stack: 0,
            tgid,
            flags: LCB_F_WRITE | (generation << GEN_SHIFT),
        };
        let info = |tgid: u32, generation: u32| LockInfo {
            kind: LOCK_KIND_MMAP_LOCK,
            tgid,
            generation,
            ..LockInfo::default()
        };
        let raw = RawSnapshot {
            stats: [key(mm, waiter, 0), key(mm, waiter, 1), key(other, dead, 1)]
                .into_iter()
                .map(|k| (k, WaitStats::default()))
                .collect(),
            lock_info: [(mm, info(live, 1)), (other, info(dead, 1))].into(),
            past_lock_info: [((mm, 0), info(dead, 0)), ((other, 0), info(dead, 0))].into(),
            lock_gens: [(mm, 1), (other, 1)].into(),
            ..Default::default()
        };
        let f = forgettable(&raw, &[], &[dead].into());
        let stats: Vec<(u64, u32)> = f
            .stats
            .iter()
            .map(|k| (k.lock, flags_gen(k.flags)))
            .collect();
        assert_eq!(stats, [(mm, 0), (other, 1)]);
        assert_eq!(f.lock_info, [other]);
        let past: Vec<(u64, u32)> = f
            .past_lock_info
            .iter()
            .map(|k| (k.lock, k.generation))
            .collect();
        assert_eq!(past, [(mm, 0), (other, 0)]);
        // `other` is named after no one now: its count goes too.
        assert_eq!(f.lock_gens, [other]);
    }
}
