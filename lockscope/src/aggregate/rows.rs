//! Report rows: a recording regrouped by lock, caller, task or type, then sorted.

use std::collections::BTreeMap;

use clap::ValueEnum;

use super::{Recording, WaitStats};
use crate::decode::cgroup::UNKNOWN;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum GroupBy {
    /// One row per lock and type (a rwsem read and written gives two rows).
    #[default]
    Lock,
    /// One row per calling function (first frame outside the locking code).
    Caller,
    /// One row per waiting process.
    Task,
    /// One row per lock type.
    Type,
    /// One row per cgroup (v2 path below the root) of the waiting processes.
    Cgroup,
    /// One row per lock holder: the thread a sleeping lock's owner word named when its
    /// waits began (mutex, rwsem, rtmutex), `readers` for reader-owned rwsems, and the
    /// wait whose holder was not known. Counts and totals only.
    Owner,
}

/// The `--by owner` row of the wait whose holder was not known.
pub const UNKNOWN_HOLDER: &str = "[holder unknown]";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum SortKey {
    /// Number of contended acquisitions.
    Contended,
    /// Total wait time.
    #[default]
    Total,
    /// Longest single wait.
    Max,
    /// Average wait.
    Avg,
    /// Shortest wait.
    Min,
    /// Median wait (estimate).
    P50,
    /// 99th percentile wait (estimate).
    P99,
    /// Waits ended by a signal.
    Failed,
    /// Lock type.
    Type,
    /// Name (lock, caller, task or type), ascending.
    Name,
}

/// One line of a report.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Lock name, caller, `comm[pid]`, type or cgroup, depending on the grouping.
    pub name: String,
    /// Lock type; for groupings that span types, the types seen joined by `,`.
    pub lock_type: String,
    /// Lock address (lock grouping only).
    pub addr: String,
    /// Heaviest caller (lock, task and type groupings).
    pub top_caller: String,
    pub stats: WaitStats,
}

pub fn rows(rec: &Recording, by: GroupBy) -> Vec<Row> {
    match by {
        GroupBy::Lock => rec
            .locks
            .iter()
            .map(|l| Row {
                name: l.name.clone(),
                lock_type: l.lock_type.to_string(),
                addr: l.addr.clone(),
                // A caller from a sample of the waits (stack budget) is an estimate.
                top_caller: l
                    .callers
                    .first()
                    .map(|c| {
                        if l.omitted.as_ref().is_some_and(|o| o.unsampled_waits > 0) {
                            format!("~{}", c.caller)
                        } else {
                            c.caller.clone()
                        }
                    })
                    .unwrap_or_default(),
                stats: l.stats.clone(),
            })
            .collect(),
        GroupBy::Caller => group(rec, |l| {
            l.callers
                .iter()
                .map(|c| (c.caller.clone(), c.caller.clone(), c.stats.clone()))
                .collect()
        }),
        GroupBy::Task => group(rec, |l| {
            let top = top_caller(l);
            l.tasks
                .iter()
                .map(|t| {
                    (
                        format!("{}[{}]", t.comm, t.pid),
                        top.clone(),
                        t.stats.clone(),
                    )
                })
                .collect()
        }),
        GroupBy::Cgroup => {
            // Callers from the tasks kept per lock; figures from the per-cgroup totals,
            // which count every wait even where a snapshot left tasks out.
            let mut rows = group(rec, |l| {
                let top = top_caller(l);
                l.tasks
                    .iter()
                    .map(|t| {
                        let cg = t.cgroup.as_deref().unwrap_or(UNKNOWN);
                        (cg.to_owned(), top.clone(), t.stats.clone())
                    })
                    .collect()
            });
            if let Some(totals) = super::cgroup::totals(rec) {
                let callers: BTreeMap<String, String> =
                    rows.drain(..).map(|r| (r.name, r.top_caller)).collect();
                rows = totals
                    .into_iter()
                    .map(|t| Row {
                        top_caller: callers.get(&t.cgroup).cloned().unwrap_or_default(),
                        name: t.cgroup,
                        lock_type: t.types,
                        addr: String::new(),
                        stats: t.stats,
                    })
                    .collect();
            }
            rows
        }
        GroupBy::Type => group(rec, |l| {
            let top = top_caller(l);
            vec![(l.lock_type.to_string(), top, l.stats.clone())]
        }),
        // The "top caller" of an owner row is the lock it held longest against waiters.
        GroupBy::Owner => group(rec, holder_parts),
    }
}

/// A lock's holders as (holder, the lock's name, their waits and wait: counts and
/// totals only), the wait whose holder was not known last.
pub fn holder_parts(l: &super::LockEntry) -> Vec<(String, String, WaitStats)> {
    let Some(h) = &l.holders else {
        return Vec::new();
    };
    let part = |count, total_ns| WaitStats {
        count,
        total_ns,
        ..WaitStats::default()
    };
    let mut out: Vec<_> = h
        .owners
        .iter()
        .map(|o| {
            (
                o.label(),
                l.name.clone(),
                part(o.contended, o.wait_total_ns),
            )
        })
        .collect();
    let known: u64 = h.owners.iter().map(|o| o.contended).sum();
    let unknown = h
        .owner_unknown_wait_ns
        .saturating_add(h.owners_omitted_wait_ns);
    if unknown > 0 {
        out.push((
            UNKNOWN_HOLDER.to_owned(),
            l.name.clone(),
            part(l.stats.count.saturating_sub(known), unknown),
        ));
    }
    out
}

/// A lock's heaviest caller (empty when it has none).
fn top_caller(l: &super::LockEntry) -> String {
    l.callers
        .first()
        .map(|c| c.caller.clone())
        .unwrap_or_default()
}

/// Regroup: `parts` yields (group name, a caller, stats) for each lock.
fn group(
    rec: &Recording,
    parts: impl Fn(&super::LockEntry) -> Vec<(String, String, WaitStats)>,
) -> Vec<Row> {
    struct Acc {
        stats: WaitStats,
        types: Vec<String>,
        callers: BTreeMap<String, u64>,
    }
    let mut groups: BTreeMap<String, Acc> = BTreeMap::new();
    for lock in &rec.locks {
        for (name, caller, stats) in parts(lock) {
            let acc = groups.entry(name).or_insert_with(|| Acc {
                stats: WaitStats::default(),
                types: Vec::new(),
                callers: BTreeMap::new(),
            });
            acc.stats.merge(&stats);
            let t = lock.lock_type.to_string();
            if !acc.types.contains(&t) {
                acc.types.push(t);
            }
            *acc.callers.entry(caller).or_default() += stats.total_ns;
        }
    }
    groups
        .into_iter()
        .map(|(name, acc)| Row {
            name,
            lock_type: acc.types.join(","),
            addr: String::new(),
            top_caller: acc
                .callers
                .into_iter()
                .max_by_key(|(_, t)| *t)
                .map(|(c, _)| c)
                .unwrap_or_default(),
            stats: acc.stats,
        })
        .collect()
}

/// Sort rows: numbers descending, names ascending; ties broken by total wait then name.
pub fn sort_rows(rows: &mut [Row], key: SortKey) {
    rows.sort_by(|a, b| {
        let num = |r: &Row| -> u64 {
            let s = &r.stats;
            match key {
                SortKey::Contended => s.count,
                SortKey::Total => s.total_ns,
                SortKey::Max => s.max_ns,
                SortKey::Avg => s.avg_ns(),
                SortKey::Min => s.min_ns,
                SortKey::P50 => s.percentile_ns(50.0),
                SortKey::P99 => s.percentile_ns(99.0),
                SortKey::Failed => s.failed,
                SortKey::Type | SortKey::Name => 0,
            }
        };
        let primary = match key {
            SortKey::Name => a.name.cmp(&b.name),
            SortKey::Type => a.lock_type.cmp(&b.lock_type),
            _ => num(b).cmp(&num(a)),
        };
        primary
            .then_with(|| b.stats.total_ns.cmp(&a.stats.total_ns))
            .then_with(|| a.name.cmp(&b.name))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::recording::tests::sample_recording;

    #[test]
    fn by_lock_keeps_one_row_per_lock_and_type() {
        let r = rows(&sample_recording(), GroupBy::Lock);
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].lock_type, "rwsem:W");
        assert_eq!(r[0].top_caller, "vm_mmap_pgoff+0x30");
    }

    #[test]
    fn by_type_and_task_merge_exactly() {
        let rec = sample_recording();
        let mut t = rows(&rec, GroupBy::Type);
        sort_rows(&mut t, SortKey::Name);
        let names: Vec<_> = t.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, vec!["rwsem:R", "rwsem:W", "spinlock"]);
        let mut k = rows(&rec, GroupBy::Task);
        sort_rows(&mut k, SortKey::Contended);
        assert_eq!(k[0].name, "lockscope[100]");
        assert_eq!(k[0].stats.count, 15);
        let total: u64 = k.iter().map(|r| r.stats.count).sum();
        let expect: u64 = rec.locks.iter().map(|l| l.stats.count).sum();
        assert_eq!(total, expect);
    }

    #[test]
    fn by_caller_groups_across_locks() {
        let r = rows(&sample_recording(), GroupBy::Caller);
        let fault = r
            .iter()
            .find(|r| r.name == "do_user_addr_fault+0x90")
            .unwrap();
        assert_eq!(fault.stats.count, 15);
        assert_eq!(fault.lock_type, "rwsem:R");
    }

    #[test]
    fn sorting_by_each_key() {
        let rec = sample_recording();
        let mut r = rows(&rec, GroupBy::Lock);
        sort_rows(&mut r, SortKey::Contended);
        assert_eq!(r[0].stats.count, 15);
        sort_rows(&mut r, SortKey::Max);
        assert_eq!(r[0].stats.max_ns, 50_000);
        sort_rows(&mut r, SortKey::Min);
        assert_eq!(r[0].stats.min_ns, 50_000);
        sort_rows(&mut r, SortKey::Type);
        assert_eq!(r[0].lock_type, "rwsem:R");
        for key in SortKey::value_variants() {
            sort_rows(&mut r, *key);
            assert_eq!(r.len(), 3);
        }
    }
}
