//! pthread lock attribution in the recording: which futex words belong to a pthread mutex
//! or rwlock, the lock object's address and the user call sites that waited. Pure.

use std::collections::{BTreeMap, HashMap};

use lockscope_common::*;
use serde::{Deserialize, Serialize};

use super::{WaitStats, recording::CallerEntry};
use crate::decode::LockType;

/// One call site's attributed futex calls on one word, CPUs summed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PthreadSite {
    pub key: PthreadSiteKey,
    pub obj: u64,
    pub calls: u64,
    pub wait: WaitStats,
}

impl PthreadSite {
    /// Sum a per-CPU map value over CPUs (the object: the last non-zero one).
    pub fn merge_cpus<'a>(
        key: PthreadSiteKey,
        values: impl IntoIterator<Item = &'a PthreadSiteStats>,
    ) -> Self {
        let mut s = Self {
            key,
            obj: 0,
            calls: 0,
            wait: WaitStats::default(),
        };
        for v in values {
            s.calls += v.calls;
            s.wait.merge(&WaitStats::from_raw(&v.wait));
            if v.obj != 0 {
                s.obj = v.obj;
            }
        }
        s
    }
}

/// What the pthread probes recorded, plus what userspace knows about them.
#[derive(Debug, Clone, Default)]
pub struct PthreadSnapshot {
    /// The uprobes are attached to at least one C library.
    pub active: bool,
    pub sites: Vec<PthreadSite>,
    pub counters: [u64; PTHREAD_COUNTERS_LEN as usize],
    /// Symbolized call sites by (tgid, address); missing ones are shown as addresses.
    pub site_names: HashMap<(u32, u64), String>,
    /// Libraries probed and notes on what cannot be attributed.
    pub libraries: Vec<String>,
    pub notes: Vec<String>,
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
    /// Futex calls on this word made inside a lock function (waits, EAGAIN, errors).
    pub attributed_calls: u64,
}

/// Pthread attribution over the whole recording (the `"pthread"` object of
/// `futex_events`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PthreadEvents {
    /// C libraries whose lock functions were probed.
    pub libraries: Vec<String>,
    /// Why some pthread locks could not be attributed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Lock function entries and returns of traced tasks.
    pub enter: u64,
    pub r#return: u64,
    /// Futex calls attributed to a lock object.
    pub attributed: u64,
    /// Futex calls inside a lock function on a word outside its object.
    pub other_word: u64,
    /// Entries whose return address could not be read (call site unknown).
    pub site_unreadable: u64,
}

impl PthreadEvents {
    pub fn from_snapshot(p: &PthreadSnapshot) -> Self {
        let c = &p.counters;
        Self {
            libraries: p.libraries.clone(),
            notes: p.notes.clone(),
            enter: c[PCNT_ENTER as usize],
            r#return: c[PCNT_RETURN as usize],
            attributed: c[PCNT_ATTRIBUTED as usize],
            other_word: c[PCNT_OTHER_WORD as usize],
            site_unreadable: c[PCNT_SITE_UNREADABLE as usize],
        }
    }
}

/// The `lost` counters of the pthread probes, by name.
pub fn pthread_lost(p: &PthreadSnapshot) -> BTreeMap<String, u64> {
    [PCNT_LOST_CALL_FULL, PCNT_LOST_SITE_FULL]
        .into_iter()
        .map(|i| {
            (
                PTHREAD_COUNTER_NAMES[i as usize].to_owned(),
                p.counters[i as usize],
            )
        })
        .collect()
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
        return super::recording::UNKNOWN_CALLER.to_owned();
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
    fn cpus_merge_and_keep_the_object() {
        let key = PthreadSiteKey {
            uaddr: 0x1008,
            site: 0x4000,
            tgid: 1,
            func: PTHREAD_FN_RWLOCK_WRLOCK,
        };
        let mut a = PthreadSiteStats::EMPTY;
        a.calls = 3;
        a.obj = 0x1000;
        a.wait.count = 1;
        a.wait.total_ns = 500;
        a.wait.min_ns = 500;
        a.wait.max_ns = 500;
        a.wait.hist[log2_bucket(500)] = 1;
        let unused = PthreadSiteStats::EMPTY;
        let s = PthreadSite::merge_cpus(key, [&a, &unused]);
        assert_eq!(
            (s.calls, s.obj, s.wait.count, s.wait.total_ns),
            (3, 0x1000, 1, 500)
        );
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
        p.counters[PCNT_LOST_SITE_FULL as usize] = 4;
        let lost = pthread_lost(&p);
        assert_eq!(lost["pthread_site_map_full"], 4);
        assert_eq!(lost["pthread_call_map_full"], 0);
    }
}
