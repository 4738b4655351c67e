//! Waits per cgroup (v2): each process's waits under the cgroup the probes recorded for
//! it. The per-cgroup figures are summed from every contention entry and every futex
//! word, not from the tasks a long-running sink keeps per lock, so they stay exact when
//! tasks are left out. Pure: the cgroup of each process comes from the caller.

use std::{
    cmp::Reverse,
    collections::{BTreeMap, HashMap},
};

use serde::{Deserialize, Serialize};

use super::{LockEntry, RawSnapshot, Recording, WaitStats, rates::delta, rates::per_second};
use crate::decode::{LockType, cgroup::UNKNOWN};

/// The waits of one cgroup on one lock type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CgroupEntry {
    /// Path below the cgroup v2 root (`system.slice/nginx.service`), `/` for the root.
    pub cgroup: String,
    #[serde(rename = "type")]
    pub lock_type: LockType,
    #[serde(flatten)]
    pub stats: WaitStats,
}

/// The cgroup of process `tgid`, `[unknown]` when none was found.
fn of(cgroups: &HashMap<u32, String>, tgid: u32) -> &str {
    cgroups.get(&tgid).map_or(UNKNOWN, String::as_str)
}

/// Per (cgroup, type) figures of a snapshot: kernel locks from every contention entry of
/// `raw`, user-space locks from the futex entries of `locks`. Longest total wait first.
pub fn summarize(
    raw: &RawSnapshot,
    locks: &[LockEntry],
    cgroups: &HashMap<u32, String>,
) -> Vec<CgroupEntry> {
    let mut acc: BTreeMap<(String, LockType), WaitStats> = BTreeMap::new();
    for (key, stats) in &raw.stats {
        if let Ok(t) = LockType::from_flags(lockscope_common::flags_kind(key.flags)) {
            acc.entry((of(cgroups, key.tgid).to_owned(), t))
                .or_default()
                .merge(stats);
        }
    }
    for l in locks {
        if let Some(u) = &l.user {
            acc.entry((of(cgroups, u.pid).to_owned(), l.lock_type))
                .or_default()
                .merge(&l.stats);
        }
    }
    let mut out: Vec<CgroupEntry> = acc
        .into_iter()
        .filter(|(_, s)| s.count > 0)
        .map(|((cgroup, lock_type), stats)| CgroupEntry {
            cgroup,
            lock_type,
            stats,
        })
        .collect();
    // Longest total wait first; ties by name (entries are unique per cgroup and type).
    out.sort_by(|a, b| {
        (Reverse(a.stats.total_ns), &a.cgroup, a.lock_type).cmp(&(
            Reverse(b.stats.total_ns),
            &b.cgroup,
            b.lock_type,
        ))
    });
    out
}

/// Give every task entry its cgroup.
pub fn label_tasks(locks: &mut [LockEntry], cgroups: &HashMap<u32, String>) {
    for l in locks {
        for t in &mut l.tasks {
            t.cgroup = Some(of(cgroups, t.pid).to_owned());
        }
    }
}

/// One cgroup over all lock types.
#[derive(Debug, Clone, PartialEq)]
pub struct CgroupTotal {
    pub cgroup: String,
    /// Types seen, heaviest first, joined by `,`.
    pub types: String,
    pub stats: WaitStats,
}

/// Each cgroup's figures over all types, longest total wait first (`None`: a recording
/// from before cgroup attribution).
pub fn totals(rec: &Recording) -> Option<Vec<CgroupTotal>> {
    let entries = rec.cgroups.as_ref()?;
    let mut by: BTreeMap<&str, (WaitStats, Vec<String>)> = BTreeMap::new();
    // Entries are sorted by wait: the types of each cgroup come heaviest first.
    for e in entries {
        let (s, types) = by.entry(&e.cgroup).or_default();
        s.merge(&e.stats);
        let t = e.lock_type.to_string();
        if !types.contains(&t) {
            types.push(t);
        }
    }
    let mut out: Vec<CgroupTotal> = by
        .into_iter()
        .map(|(cgroup, (stats, types))| CgroupTotal {
            cgroup: cgroup.to_owned(),
            types: types.join(","),
            stats,
        })
        .collect();
    out.sort_by(|a, b| {
        (Reverse(a.stats.total_ns), &a.cgroup).cmp(&(Reverse(b.stats.total_ns), &b.cgroup))
    });
    Some(out)
}

/// A cgroup during one interval of a live view.
#[derive(Debug, Clone, PartialEq)]
pub struct CgroupRate {
    pub cgroup: String,
    pub types: String,
    pub interval: WaitStats,
    pub total: WaitStats,
    pub contentions_per_s: f64,
    pub wait_ns_per_s: f64,
}

/// Per-cgroup rates between two snapshots (`prev` `None`: since start), busiest first.
pub fn rates(prev: Option<&Recording>, cur: &Recording, secs: f64) -> Vec<CgroupRate> {
    let before: HashMap<String, WaitStats> = prev
        .and_then(totals)
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.cgroup, t.stats))
        .collect();
    let zero = WaitStats::default();
    let mut out: Vec<CgroupRate> = totals(cur)
        .unwrap_or_default()
        .into_iter()
        .map(|t| {
            let d = delta(before.get(&t.cgroup).unwrap_or(&zero), &t.stats);
            CgroupRate {
                contentions_per_s: per_second(d.count, secs),
                wait_ns_per_s: per_second(d.total_ns, secs),
                cgroup: t.cgroup,
                types: t.types,
                interval: d,
                total: t.stats,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.interval
            .total_ns
            .cmp(&a.interval.total_ns)
            .then_with(|| b.total.total_ns.cmp(&a.total.total_ns))
            .then_with(|| a.cgroup.cmp(&b.cgroup))
    });
    out
}

#[cfg(test)]
mod tests {
    use lockscope_common::{ContentionKey, LCB_F_MUTEX, LCB_F_SPIN};

    use super::*;

    fn key(lock: u64, tgid: u32, flags: u32) -> ContentionKey {
        ContentionKey {
            lock,
            tgid,
            flags,
            stack: 1,
        }
    }

    fn waits(ns: &[u64]) -> WaitStats {
        let mut s = WaitStats::default();
        for &n in ns {
            s.add(n, false);
        }
        s
    }

    #[test]
    fn every_entry_counts_under_its_process_cgroup() {
        let raw = RawSnapshot {
            stats: vec![
                (key(0x10, 1, LCB_F_MUTEX), waits(&[100, 200])),
                (key(0x10, 2, LCB_F_MUTEX), waits(&[1000])),
                (key(0x20, 2, LCB_F_SPIN), waits(&[50])),
                (key(0x20, 3, LCB_F_SPIN), waits(&[7])),
            ],
            ..Default::default()
        };
        let cgroups: HashMap<u32, String> = [
            (1, "system.slice/a.service".to_owned()),
            (2, "system.slice/b.service".to_owned()),
        ]
        .into();
        let s = summarize(&raw, &[], &cgroups);
        let find = |c: &str, t: LockType| {
            s.iter()
                .find(|e| e.cgroup == c && e.lock_type == t)
                .map(|e| (e.stats.count, e.stats.total_ns))
        };
        assert_eq!(
            find("system.slice/b.service", LockType::Mutex),
            Some((1, 1000))
        );
        assert_eq!(
            find("system.slice/a.service", LockType::Mutex),
            Some((2, 300))
        );
        assert_eq!(
            find("system.slice/b.service", LockType::Spinlock),
            Some((1, 50))
        );
        assert_eq!(find(UNKNOWN, LockType::Spinlock), Some((1, 7)));
        assert_eq!(s[0].cgroup, "system.slice/b.service", "longest wait first");
        let total: u64 = s.iter().map(|e| e.stats.total_ns).sum();
        assert_eq!(total, 1357, "every wait counted once");
    }
}
