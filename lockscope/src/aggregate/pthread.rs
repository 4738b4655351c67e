//! pthread lock attribution in the recording: which futex words belong to a pthread mutex
//! or rwlock, the lock object's address and the user call sites that waited. Pure: the
//! waits come unwound ([`PthreadTally::add`]).

use std::collections::{BTreeMap, HashMap};

use lockscope_common::*;
use serde::{Deserialize, Serialize};

use super::{WaitStats, model::CallerEntry};
use crate::decode::LockType;

/// One call site's attributed waits on one futex word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PthreadSite {
    pub key: PthreadSiteKey,
    pub obj: u64,
    pub calls: u64,
    pub wait: WaitStats,
}

/// Where an unwound wait goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitAttribution {
    /// Inside lock function `func`, called from `site` (0: unknown).
    Lock { func: u32, site: u64 },
    /// Not a pthread lock's wait.
    NotALock,
    /// Its process's memory map could not be read.
    NoMaps,
}

/// Counters of userspace's part (the kernel's are `PTHREAD_COUNTERS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TallyCounters {
    /// Waits read from the ring buffer.
    pub unwound: u64,
    pub attributed: u64,
    pub not_a_lock: u64,
    /// Attributed, with the call site unknown (stack unreadable or cut short).
    pub site_unknown: u64,
    pub no_maps: u64,
    /// Waits at a new site once `PTHREAD_SITES_MAX_ENTRIES` were kept: not stored.
    pub site_map_full: u64,
    /// Ring buffer records of the wrong size (never expected).
    pub malformed: u64,
}

/// Every attributed wait so far, per (process, word, call site, function).
#[derive(Debug, Clone, Default)]
pub struct PthreadTally {
    pub sites: HashMap<PthreadSiteKey, PthreadSite>,
    pub counters: TallyCounters,
    pub owners: PthreadOwners,
}

/// Mutex waits that slept, per (process, word), by the holder thread glibc's `__owner`
/// named when each began: (waits, wait ns); and those holders' names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PthreadOwners {
    pub by_word: HashMap<(u32, u64), HashMap<u32, (u64, u64)>>,
    /// Holder thread names, read while the threads lived.
    pub comms: HashMap<u32, String>,
}

/// Holders kept per futex word; waits on holders past it are counted as omitted.
pub const OWNERS_PER_WORD: usize = 256;
/// The tid under which the waits on holders past [`OWNERS_PER_WORD`] are summed.
const OWNERS_OMITTED: u32 = 0;

/// The object a lock function's futex word belongs to. glibc's mutex waits on `__lock`,
/// its first word; its rwlock (`__readers`, `__writers`, `__wrphase_futex`,
/// `__writers_futex`, ...) on `__wrphase_futex` (byte 8) for readers and writers and on
/// `__writers_futex` (byte 12) for writers only. A reader's word is byte 8; a writer's
/// word is byte 12 when its process also waits on the word 4 bytes below, else byte 8
/// (see [`infer_rwlock_objects`]).
pub const RWLOCK_WRPHASE_OFFSET: u64 = 8;
pub const RWLOCK_WRITERS_OFFSET: u64 = 12;

impl PthreadTally {
    /// Count one wait (`waited`: `PTHREAD_*` as the probe sent it).
    pub fn add(&mut self, tgid: u32, uaddr: u64, wait_ns: u64, waited: u32, a: WaitAttribution) {
        let c = &mut self.counters;
        c.unwound += 1;
        let (func, site) = match a {
            WaitAttribution::Lock { func, site } => (func, site),
            WaitAttribution::NotALock => {
                c.not_a_lock += 1;
                return;
            }
            WaitAttribution::NoMaps => {
                c.no_maps += 1;
                return;
            }
        };
        let key = PthreadSiteKey {
            uaddr,
            site,
            tgid,
            func,
        };
        if !self.sites.contains_key(&key) && self.sites.len() >= PTHREAD_SITES_MAX_ENTRIES as usize
        {
            c.site_map_full += 1;
            return;
        }
        c.attributed += 1;
        if site == 0 {
            c.site_unknown += 1;
        }
        let s = self.sites.entry(key).or_insert_with(|| PthreadSite {
            key,
            obj: uaddr,
            calls: 0,
            wait: WaitStats::default(),
        });
        s.calls += 1;
        if waited != PTHREAD_NO_WAIT {
            s.wait.add(wait_ns, waited == PTHREAD_WAIT_FAILED);
        }
    }

    /// A mutex wait that slept for `wait_ns` (`waited`: `PTHREAD_*`) with `owner`
    /// holding the mutex when it began (0: unknown; `__owner` is cleared just before
    /// a release). Only mutex functions' waits: a rwlock keeps no owner there.
    pub fn add_owner(
        &mut self,
        tgid: u32,
        uaddr: u64,
        func: u32,
        waited: u32,
        owner: u32,
        wait_ns: u64,
    ) {
        if waited == PTHREAD_NO_WAIT || owner == 0 || pthread_fn_is_rwlock(func) {
            return;
        }
        let words = &mut self.owners.by_word;
        // As many words as call sites are kept (each word has a site): bounded memory.
        if !words.contains_key(&(tgid, uaddr)) && words.len() >= PTHREAD_SITES_MAX_ENTRIES as usize
        {
            return;
        }
        let by = words.entry((tgid, uaddr)).or_default();
        let tid = if by.contains_key(&owner) || by.len() < OWNERS_PER_WORD {
            owner
        } else {
            OWNERS_OMITTED
        };
        let e = by.entry(tid).or_default();
        e.0 += 1;
        e.1 = e.1.saturating_add(wait_ns);
    }

    /// Forget the sites of processes for which `gone` is true.
    pub fn forget(&mut self, gone: impl Fn(u32) -> bool) {
        self.sites.retain(|k, _| !gone(k.tgid));
        let o = &mut self.owners;
        o.by_word.retain(|&(tgid, _), _| !gone(tgid));
        let live: std::collections::HashSet<u32> = o
            .by_word
            .values()
            .flat_map(|by| by.keys().copied())
            .collect();
        o.comms.retain(|tid, _| live.contains(tid));
    }

    /// The sites with their lock objects worked out.
    pub fn sites(&self) -> Vec<PthreadSite> {
        let mut v: Vec<PthreadSite> = self.sites.values().cloned().collect();
        infer_rwlock_objects(&mut v);
        v.sort_by_key(|s| s.key);
        v
    }
}

impl PthreadOwners {
    /// The holders of each word, longest total wait first: (holders, wait of those past
    /// `keep`). Thread names from `comms`, else the process's (`comm`).
    pub fn entries(
        &self,
        keep: usize,
        comm: &dyn Fn(u32) -> String,
    ) -> HashMap<(u32, u64), (Vec<super::model::HolderEntry>, u64)> {
        self.by_word
            .iter()
            .map(|(&(tgid, uaddr), by)| {
                let mut v: Vec<super::model::HolderEntry> = by
                    .iter()
                    .filter(|&(&tid, _)| tid != OWNERS_OMITTED)
                    .map(|(&tid, &(n, ns))| super::model::HolderEntry {
                        comm: self.comms.get(&tid).cloned().unwrap_or_else(|| comm(tgid)),
                        pid: tgid,
                        tid,
                        contended: n,
                        wait_total_ns: ns,
                        stack: Vec::new(),
                    })
                    .collect();
                v.sort_by(|a, b| {
                    b.wait_total_ns
                        .cmp(&a.wait_total_ns)
                        .then(a.tid.cmp(&b.tid))
                });
                let mut omitted: u64 = by.get(&OWNERS_OMITTED).map_or(0, |&(_, ns)| ns);
                if v.len() > keep {
                    omitted += v.drain(keep..).map(|h| h.wait_total_ns).sum::<u64>();
                }
                ((tgid, uaddr), (v, omitted))
            })
            .collect()
    }
}

/// Set each site's `obj`: a mutex's word is its object; a rwlock word's object is found
/// from its offset (see [`RWLOCK_WRPHASE_OFFSET`]).
pub fn infer_rwlock_objects(sites: &mut [PthreadSite]) {
    use std::collections::HashSet;
    let rwlock_words: HashSet<(u32, u64)> = sites
        .iter()
        .filter(|s| pthread_fn_is_rwlock(s.key.func))
        .map(|s| (s.key.tgid, s.key.uaddr))
        .collect();
    // Words a reader waited on: always `__wrphase_futex`.
    let read_words: HashSet<(u32, u64)> = sites
        .iter()
        .filter(|s| pthread_fn_is_rdlock(s.key.func))
        .map(|s| (s.key.tgid, s.key.uaddr))
        .collect();
    for s in sites.iter_mut() {
        let (tgid, w) = (s.key.tgid, s.key.uaddr);
        s.obj = if !pthread_fn_is_rwlock(s.key.func) {
            w
        } else if read_words.contains(&(tgid, w)) {
            w.wrapping_sub(RWLOCK_WRPHASE_OFFSET)
        } else if rwlock_words.contains(&(tgid, w.wrapping_sub(4))) {
            w.wrapping_sub(RWLOCK_WRITERS_OFFSET)
        } else {
            w.wrapping_sub(RWLOCK_WRPHASE_OFFSET)
        };
    }
}

/// What the pthread attribution recorded, plus what userspace knows about it.
#[derive(Debug, Clone, Default)]
pub struct PthreadSnapshot {
    /// Attribution is on (the futex probes send waits to be unwound).
    pub active: bool,
    pub sites: Vec<PthreadSite>,
    /// The kernel's `PTHREAD_COUNTERS`.
    pub counters: [u64; PTHREAD_COUNTERS_LEN as usize],
    pub tally: TallyCounters,
    /// Symbolized call sites by (tgid, address); missing ones are shown as addresses.
    pub site_names: HashMap<(u32, u64), String>,
    /// C libraries unwound through, and notes on what cannot be attributed.
    pub libraries: Vec<String>,
    pub notes: Vec<String>,
    /// Holders of the mutex words.
    pub owners: PthreadOwners,
}

/// The pthread lock a futex word belongs to (the `"pthread"` object of its entry).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PthreadLock {
    /// `mutex` or `rwlock`.
    pub kind: String,
    /// Address of the `pthread_mutex_t` / `pthread_rwlock_t`.
    pub object: String,
    /// Where the futex word sits in the object (glibc: 0 for a mutex's `__lock`).
    pub word_offset: u64,
    /// Futex waits on this word made inside a lock function (waits and EAGAIN returns).
    pub attributed_calls: u64,
}

/// Pthread attribution over the whole recording (the `"pthread"` object of
/// `futex_events`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PthreadEvents {
    /// How waits are attributed: `"futex-unwind"` (the user stack of each blocking futex
    /// call, unwound through the C library; nothing on uncontended lock calls).
    #[serde(default)]
    pub method: String,
    /// C libraries unwound through.
    pub libraries: Vec<String>,
    /// Why some pthread locks could not be attributed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Blocking futex calls of traced tasks sent by the kernel, and unwound here.
    #[serde(default)]
    pub sent: u64,
    #[serde(default)]
    pub unwound: u64,
    /// Waits at syscall sites found never to be a lock's (a raw futex loop): counted by
    /// the kernel, not sent.
    #[serde(default)]
    pub skipped: u64,
    /// Waits attributed to a lock object.
    pub attributed: u64,
    /// Waits not made by a pthread lock function (raw futexes, condition variables, ...).
    #[serde(default)]
    pub not_a_lock: u64,
    /// Attributed waits whose call site is unknown (stack unreadable or cut short).
    pub site_unreadable: u64,
    /// Waits of processes whose memory map could not be read.
    #[serde(default)]
    pub no_maps: u64,
}

impl PthreadEvents {
    pub fn from_snapshot(p: &PthreadSnapshot) -> Self {
        let t = &p.tally;
        Self {
            method: if p.active { "futex-unwind" } else { "off" }.to_owned(),
            libraries: p.libraries.clone(),
            notes: p.notes.clone(),
            sent: p.counters[PCNT_SENT as usize],
            unwound: t.unwound,
            skipped: p.counters[PCNT_SKIPPED as usize],
            attributed: t.attributed,
            not_a_lock: t.not_a_lock,
            site_unreadable: t.site_unknown,
            no_maps: t.no_maps,
        }
    }
}

/// The `lost` counters of pthread attribution, by name.
pub fn pthread_lost(p: &PthreadSnapshot) -> BTreeMap<String, u64> {
    BTreeMap::from([
        (
            PTHREAD_COUNTER_NAMES[PCNT_LOST_RING_FULL as usize].to_owned(),
            p.counters[PCNT_LOST_RING_FULL as usize],
        ),
        (
            PTHREAD_COUNTER_NAMES[PCNT_LOST_STORAGE as usize].to_owned(),
            p.counters[PCNT_LOST_STORAGE as usize],
        ),
        (
            "pthread_site_map_full".to_owned(),
            p.tally.site_map_full + p.tally.malformed,
        ),
    ])
}

/// The lock type of an attributed word: the kind with the most attributed calls.
pub fn attributed_type(sites: &[&PthreadSite]) -> Option<LockType> {
    let (mut mutex, mut rwlock) = (0u64, 0u64);
    for s in sites {
        if pthread_fn_is_rwlock(s.key.func) {
            rwlock += s.calls.max(1);
        } else {
            mutex += s.calls.max(1);
        }
    }
    match (mutex, rwlock) {
        (0, 0) => None,
        (m, r) if r > m => Some(LockType::PthreadRwlock),
        _ => Some(LockType::PthreadMutex),
    }
}

/// `0x55d0c0a9c010` as `function+0xoff` when symbolized.
fn site_text(names: &HashMap<(u32, u64), String>, tgid: u32, site: u64) -> String {
    if site == 0 {
        return super::model::UNKNOWN_CALLER.to_owned();
    }
    names
        .get(&(tgid, site))
        .cloned()
        .unwrap_or_else(|| format!("{site:#x}"))
}

/// A word's attribution: its pthread object and the call sites as callers (heaviest wait
/// first), each with the lock function as the innermost frame.
pub fn attribution(
    sites: &[&PthreadSite],
    names: &HashMap<(u32, u64), String>,
) -> Option<(LockType, PthreadLock, Vec<CallerEntry>)> {
    let lock_type = attributed_type(sites)?;
    let heaviest = sites.iter().max_by_key(|s| (s.calls, s.wait.total_ns))?;
    let obj = heaviest.obj;
    let uaddr = heaviest.key.uaddr;
    let mut callers: Vec<CallerEntry> = sites
        .iter()
        .map(|s| {
            let caller = site_text(names, s.key.tgid, s.key.site);
            CallerEntry {
                stack: vec![
                    PTHREAD_FN_NAMES
                        .get(s.key.func as usize)
                        .copied()
                        .unwrap_or("?")
                        .to_owned(),
                    caller.clone(),
                ],
                caller,
                stats: s.wait.clone(),
            }
        })
        .collect();
    callers.sort_by(|a, b| {
        b.stats
            .total_ns
            .cmp(&a.stats.total_ns)
            .then_with(|| a.caller.cmp(&b.caller))
    });
    Some((
        lock_type,
        PthreadLock {
            kind: if lock_type == LockType::PthreadRwlock {
                "rwlock"
            } else {
                "mutex"
            }
            .to_owned(),
            object: format!("{obj:#x}"),
            word_offset: uaddr.saturating_sub(obj),
            attributed_calls: sites.iter().map(|s| s.calls).sum(),
        },
        callers,
    ))
}

/// The name of an attributed word: `pthread-mutex 0x55.. of app[12]`, with the word's
/// place in the object when it is not the first word.
pub fn pthread_name(lock_type: LockType, p: &PthreadLock, comm: &str, pid: u32) -> String {
    if p.word_offset == 0 {
        format!("{lock_type} {} of {comm}[{pid}]", p.object)
    } else {
        format!(
            "{lock_type} {} (word +{}) of {comm}[{pid}]",
            p.object, p.word_offset
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutex_holders_are_tallied_per_word_and_ranked() {
        let mut t = PthreadTally::default();
        let m = PTHREAD_FN_MUTEX_LOCK;
        t.add_owner(7, 0x10, m, PTHREAD_WAITED, 100, 50);
        t.add_owner(7, 0x10, m, PTHREAD_WAIT_FAILED, 100, 30);
        t.add_owner(7, 0x10, m, PTHREAD_WAITED, 101, 200);
        // Not counted: no wait, no owner read, a rwlock's word.
        t.add_owner(7, 0x10, m, PTHREAD_NO_WAIT, 100, 0);
        t.add_owner(7, 0x10, m, PTHREAD_WAITED, 0, 999);
        t.add_owner(7, 0x20, PTHREAD_FN_RWLOCK_WRLOCK, PTHREAD_WAITED, 100, 999);
        t.owners.comms.insert(101, "worker-b".into());
        let e = t.owners.entries(1, &|_| "proc".into());
        let (owners, omitted) = &e[&(7, 0x10)];
        assert_eq!(owners.len(), 1);
        assert_eq!(
            (owners[0].tid, owners[0].contended, owners[0].wait_total_ns),
            (101, 1, 200)
        );
        assert_eq!((owners[0].pid, owners[0].comm.as_str()), (7, "worker-b"));
        // The second holder is past `keep`: its wait is omitted, not lost.
        assert_eq!(*omitted, 80);
        assert!(!e.contains_key(&(7, 0x20)));
        let all = t.owners.entries(8, &|_| "proc".into());
        assert_eq!(all[&(7, 0x10)].0[1].comm, "proc");
        t.forget(|tgid| tgid == 7);
        assert!(t.owners.by_word.is_empty() && t.owners.comms.is_empty());
    }

    #[test]
    fn holders_past_the_cap_of_a_word_are_summed_as_omitted() {
        let mut t = PthreadTally::default();
        for tid in 1..=(OWNERS_PER_WORD as u32 + 10) {
            t.add_owner(7, 0x10, PTHREAD_FN_MUTEX_LOCK, PTHREAD_WAITED, tid, 1);
        }
        assert_eq!(t.owners.by_word[&(7, 0x10)].len(), OWNERS_PER_WORD + 1);
        let e = t.owners.entries(usize::MAX, &|_| String::new());
        let (owners, omitted) = &e[&(7, 0x10)];
        assert_eq!((owners.len(), *omitted), (OWNERS_PER_WORD, 10));
    }

    fn site(uaddr: u64, site: u64, func: u32, calls: u64, wait_ns: u64) -> PthreadSite {
        let mut s = PthreadStatsBuilder::default();
        s.add(wait_ns);
        PthreadSite {
            key: PthreadSiteKey {
                uaddr,
                site,
                tgid: 7,
                func,
            },
            obj: uaddr & !0xf,
            calls,
            wait: s.0,
        }
    }

    #[derive(Default)]
    struct PthreadStatsBuilder(WaitStats);
    impl PthreadStatsBuilder {
        fn add(&mut self, ns: u64) {
            let mut raw = ContentionStats::EMPTY;
            raw.count = 1;
            raw.total_ns = ns;
            raw.min_ns = ns;
            raw.max_ns = ns;
            raw.hist[log2_bucket(ns)] = 1;
            self.0.merge(&WaitStats::from_raw(&raw));
        }
    }

    #[test]
    fn tally_counts_every_wait_once() {
        let mut t = PthreadTally::default();
        let lock = WaitAttribution::Lock {
            func: PTHREAD_FN_MUTEX_LOCK,
            site: 0x4000,
        };
        t.add(7, 0x1000, 500, PTHREAD_WAITED, lock);
        t.add(7, 0x1000, 300, PTHREAD_WAIT_FAILED, lock);
        t.add(7, 0x1000, 0, PTHREAD_NO_WAIT, lock);
        t.add(7, 0x2000, 100, PTHREAD_WAITED, WaitAttribution::NotALock);
        t.add(8, 0x2000, 100, PTHREAD_WAITED, WaitAttribution::NoMaps);
        t.add(
            7,
            0x1000,
            50,
            PTHREAD_WAITED,
            WaitAttribution::Lock {
                func: PTHREAD_FN_MUTEX_LOCK,
                site: 0,
            },
        );
        let c = t.counters;
        assert_eq!(
            (
                c.unwound,
                c.attributed,
                c.not_a_lock,
                c.no_maps,
                c.site_unknown
            ),
            (6, 4, 1, 1, 1)
        );
        let sites = t.sites();
        assert_eq!(sites.len(), 2);
        let s = sites.iter().find(|s| s.key.site == 0x4000).unwrap();
        // Three calls; two of them waited (one failed), the EAGAIN did not.
        assert_eq!((s.calls, s.wait.count, s.wait.failed), (3, 2, 1));
        assert_eq!(
            (s.wait.total_ns, s.wait.min_ns, s.wait.max_ns),
            (800, 300, 500)
        );
        assert_eq!(s.obj, 0x1000);
        t.forget(|tgid| tgid == 7);
        assert!(t.sites().is_empty());
    }

    #[test]
    fn a_full_site_table_counts_what_it_drops() {
        let mut t = PthreadTally::default();
        for i in 0..PTHREAD_SITES_MAX_ENTRIES as u64 + 3 {
            t.add(
                1,
                0x1000,
                1,
                PTHREAD_WAITED,
                WaitAttribution::Lock {
                    func: PTHREAD_FN_MUTEX_LOCK,
                    site: 0x10_0000 + i,
                },
            );
        }
        assert_eq!(t.counters.site_map_full, 3);
        assert_eq!(t.sites.len(), PTHREAD_SITES_MAX_ENTRIES as usize);
        // Known sites still count.
        t.add(
            1,
            0x1000,
            1,
            PTHREAD_WAITED,
            WaitAttribution::Lock {
                func: PTHREAD_FN_MUTEX_LOCK,
                site: 0x10_0000,
            },
        );
        assert_eq!(t.counters.site_map_full, 3);
    }

    #[test]
    fn rwlock_objects_from_their_words() {
        let w = |uaddr, func| site(uaddr, 0x4000, func, 1, 10);
        // Reader and writer on __wrphase_futex (0x1008), a writer on __writers_futex.
        let mut v = vec![
            w(0x1008, PTHREAD_FN_RWLOCK_RDLOCK),
            w(0x1008, PTHREAD_FN_RWLOCK_WRLOCK),
            w(0x100c, PTHREAD_FN_RWLOCK_WRLOCK),
            // A lone writer word of another rwlock: its __wrphase_futex.
            w(0x2008, PTHREAD_FN_RWLOCK_TIMEDWRLOCK),
            w(0x3000, PTHREAD_FN_MUTEX_LOCK),
        ];
        infer_rwlock_objects(&mut v);
        let objs: Vec<u64> = v.iter().map(|s| s.obj).collect();
        assert_eq!(objs, vec![0x1000, 0x1000, 0x1000, 0x2000, 0x3000]);
    }

    #[test]
    fn type_follows_the_kind_with_most_calls() {
        let m = site(0x1000, 0x4000, PTHREAD_FN_MUTEX_LOCK, 5, 100);
        let r = site(0x1008, 0x4010, PTHREAD_FN_RWLOCK_RDLOCK, 2, 100);
        let w = site(0x1008, 0x4020, PTHREAD_FN_RWLOCK_CLOCKWRLOCK, 9, 100);
        assert_eq!(attributed_type(&[&m]), Some(LockType::PthreadMutex));
        assert_eq!(attributed_type(&[&m, &r]), Some(LockType::PthreadMutex));
        assert_eq!(
            attributed_type(&[&m, &r, &w]),
            Some(LockType::PthreadRwlock)
        );
        assert_eq!(attributed_type(&[]), None);
    }

    #[test]
    fn callers_are_the_symbolized_sites_heaviest_first() {
        let a = site(0x1008, 0x4000, PTHREAD_FN_RWLOCK_RDLOCK, 4, 1_000);
        let b = site(0x1008, 0x5000, PTHREAD_FN_RWLOCK_WRLOCK, 3, 9_000);
        let names: HashMap<(u32, u64), String> = [((7, 0x4000), "reader+0x1a".to_owned())].into();
        let (t, lock, callers) = attribution(&[&a, &b], &names).unwrap();
        assert_eq!(t, LockType::PthreadRwlock);
        assert_eq!(lock.kind, "rwlock");
        assert_eq!(lock.object, "0x1000");
        assert_eq!(lock.word_offset, 8);
        assert_eq!(lock.attributed_calls, 7);
        assert_eq!(callers.len(), 2);
        // Not symbolized: the address.
        assert_eq!(callers[0].caller, "0x5000");
        assert_eq!(callers[0].stack, vec!["pthread_rwlock_wrlock", "0x5000"]);
        assert_eq!(callers[1].caller, "reader+0x1a");
        assert_eq!(callers[1].stats.total_ns, 1_000);
        assert_eq!(
            pthread_name(t, &lock, "db", 7),
            "pthread-rwlock 0x1000 (word +8) of db[7]"
        );
        let m = PthreadLock {
            kind: "mutex".into(),
            object: "0x2000".into(),
            word_offset: 0,
            attributed_calls: 1,
        };
        assert_eq!(
            pthread_name(LockType::PthreadMutex, &m, "app", 3),
            "pthread-mutex 0x2000 of app[3]"
        );
    }

    #[test]
    fn unknown_sites_and_lost_counters() {
        let a = site(0x1000, 0, PTHREAD_FN_MUTEX_LOCK, 1, 10);
        let (_, _, callers) = attribution(&[&a], &HashMap::new()).unwrap();
        assert_eq!(callers[0].caller, "[unknown]");
        let mut p = PthreadSnapshot::default();
        p.counters[PCNT_LOST_RING_FULL as usize] = 4;
        p.tally.site_map_full = 2;
        let lost = pthread_lost(&p);
        assert_eq!(lost["pthread_ring_full"], 4);
        assert_eq!(lost["pthread_site_map_full"], 2);
    }
}
