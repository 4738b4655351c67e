//! Contention over time: per-interval deltas of each lock's cumulative figures. Pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::decode::LockType;

/// At most this many locks get their own series; the rest are summed into `other`.
pub const MAX_SERIES: usize = 32;

/// One lock's cumulative figures at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockTotals {
    pub addr: u64,
    pub lock_type: LockType,
    pub contended: u64,
    pub wait_ns: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// Sampling interval requested, seconds.
    pub interval_s: f64,
    /// End of each interval, seconds since recording started.
    pub t_s: Vec<f64>,
    /// One series per lock (heaviest first), plus `other` for the rest.
    pub series: Vec<Series>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// Lock address `0x...`, or `other`.
    pub addr: String,
    /// Lock type, empty for `other`.
    #[serde(rename = "type")]
    pub lock_type: String,
    /// Waits ended in each interval.
    pub contended: Vec<u64>,
    /// Wait time accumulated in each interval, ns.
    pub wait_ns: Vec<u64>,
}

type SeriesKey = (u64, LockType);

/// Builds a [`Timeline`] from cumulative samples taken at the end of each interval.
#[derive(Debug, Default)]
pub struct TimelineBuilder {
    interval_s: f64,
    t_s: Vec<f64>,
    last: BTreeMap<(u64, LockType), (u64, u64)>,
    deltas: BTreeMap<(u64, LockType), Vec<(u64, u64)>>,
}

impl TimelineBuilder {
    pub fn new(interval_s: f64) -> Self {
        Self {
            interval_s,
            ..Default::default()
        }
    }

    /// Add the cumulative totals read at `t_s`. Totals only grow; a lock not in `totals`
    /// had no new waits.
    pub fn sample(&mut self, t_s: f64, totals: &[LockTotals]) {
        let n = self.t_s.len();
        self.t_s.push(t_s);
        for t in totals {
            let key = (t.addr, t.lock_type);
            let (c0, w0) = self.last.get(&key).copied().unwrap_or((0, 0));
            let d = (t.contended.saturating_sub(c0), t.wait_ns.saturating_sub(w0));
            self.last.insert(key, (t.contended, t.wait_ns));
            let v = self.deltas.entry(key).or_default();
            v.resize(n, (0, 0));
            v.push(d);
        }
    }

    pub fn finish(self) -> Timeline {
        let n = self.t_s.len();
        let mut all: Vec<(SeriesKey, Vec<(u64, u64)>)> = self
            .deltas
            .into_iter()
            .map(|(k, mut v)| {
                v.resize(n, (0, 0));
                (k, v)
            })
            .filter(|(_, v)| v.iter().any(|&(c, _)| c > 0))
            .collect();
        let weight = |v: &Vec<(u64, u64)>| super::stats::saturating_sum(v.iter().map(|&(_, w)| w));
        all.sort_by(|a, b| weight(&b.1).cmp(&weight(&a.1)).then(a.0.cmp(&b.0)));
        let rest = if all.len() > MAX_SERIES {
            all.split_off(MAX_SERIES)
        } else {
            Vec::new()
        };
        let mut series: Vec<Series> = all
            .into_iter()
            .map(|((addr, t), v)| Series {
                addr: format!("{addr:#x}"),
                lock_type: t.to_string(),
                contended: v.iter().map(|d| d.0).collect(),
                wait_ns: v.iter().map(|d| d.1).collect(),
            })
            .collect();
        if !rest.is_empty() {
            let mut other = Series {
                addr: "other".into(),
                lock_type: String::new(),
                contended: vec![0; n],
                wait_ns: vec![0; n],
            };
            for (_, v) in rest {
                for (i, (c, w)) in v.into_iter().enumerate() {
                    other.contended[i] += c;
                    other.wait_ns[i] += w;
                }
            }
            series.push(other);
        }
        Timeline {
            interval_s: self.interval_s,
            t_s: self.t_s,
            series,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tot(addr: u64, contended: u64, wait_ns: u64) -> LockTotals {
        LockTotals {
            addr,
            lock_type: LockType::RwsemRead,
            contended,
            wait_ns,
        }
    }

    #[test]
    fn deltas_per_interval_sum_to_the_totals() {
        let mut b = TimelineBuilder::new(1.0);
        b.sample(1.0, &[tot(1, 10, 1_000)]);
        b.sample(2.0, &[tot(1, 25, 4_000), tot(2, 3, 900)]);
        b.sample(3.0, &[tot(1, 25, 4_000), tot(2, 5, 1_000)]);
        let t = b.finish();
        assert_eq!(t.t_s, vec![1.0, 2.0, 3.0]);
        assert_eq!(t.series.len(), 2);
        let s1 = &t.series[0];
        assert_eq!(s1.addr, "0x1");
        assert_eq!(s1.contended, vec![10, 15, 0]);
        assert_eq!(s1.wait_ns, vec![1_000, 3_000, 0]);
        let s2 = &t.series[1];
        assert_eq!(s2.contended, vec![0, 3, 2]);
        assert_eq!(s2.wait_ns.iter().sum::<u64>(), 1_000);
    }

    #[test]
    fn series_beyond_the_cap_fold_into_other() {
        let mut b = TimelineBuilder::new(0.5);
        let totals: Vec<_> = (1..=MAX_SERIES as u64 + 5)
            .map(|a| tot(a, a, a * 100))
            .collect();
        b.sample(0.5, &totals);
        let t = b.finish();
        assert_eq!(t.series.len(), MAX_SERIES + 1);
        let other = t.series.last().unwrap();
        assert_eq!(other.addr, "other");
        // The five lightest locks: addresses 1..=5.
        assert_eq!(other.contended, vec![15]);
        let all: u64 = t.series.iter().map(|s| s.contended[0]).sum();
        assert_eq!(all, totals.iter().map(|t| t.contended).sum::<u64>());
    }

    #[test]
    fn idle_locks_are_dropped() {
        let mut b = TimelineBuilder::new(1.0);
        b.sample(1.0, &[tot(7, 0, 0)]);
        assert!(b.finish().series.is_empty());
    }
}
