//! Wait statistics of a lock (or caller, task, type): exact counts and sums, and a log2
//! histogram from which percentiles are *estimated*.

use lockscope_common::{ContentionStats, HIST_BUCKETS, bucket_lower_ns, bucket_upper_ns};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitStats {
    /// Contended acquisitions (waits that ended), including failed ones.
    #[serde(rename = "contended")]
    pub count: u64,
    /// Waits ended by a signal or timeout instead of taking the lock.
    #[serde(default)]
    pub failed: u64,
    #[serde(rename = "wait_total_ns")]
    pub total_ns: u64,
    /// 0 when there was no wait.
    #[serde(rename = "wait_min_ns")]
    pub min_ns: u64,
    #[serde(rename = "wait_max_ns")]
    pub max_ns: u64,
    /// Log2 buckets: `histogram[i]` counts waits in `[2^i, 2^(i+1))` ns (bucket 0: 0-1 ns).
    #[serde(rename = "histogram", with = "hist_serde")]
    pub hist: [u64; HIST_BUCKETS],
}

impl Default for WaitStats {
    fn default() -> Self {
        Self {
            count: 0,
            failed: 0,
            total_ns: 0,
            min_ns: 0,
            max_ns: 0,
            hist: [0; HIST_BUCKETS],
        }
    }
}

/// Sum without wrapping: figures read from a file or a server may be anything.
pub fn saturating_sum(values: impl IntoIterator<Item = u64>) -> u64 {
    values.into_iter().fold(0, u64::saturating_add)
}

impl WaitStats {
    pub fn from_raw(raw: &ContentionStats) -> Self {
        Self {
            count: raw.count,
            failed: raw.failed,
            total_ns: raw.total_ns,
            min_ns: if raw.count == 0 { 0 } else { raw.min_ns },
            max_ns: raw.max_ns,
            hist: raw.hist,
        }
    }

    /// One more wait of `ns` (`failed`: it ended without the lock).
    pub fn add(&mut self, ns: u64, failed: bool) {
        self.min_ns = if self.count == 0 {
            ns
        } else {
            self.min_ns.min(ns)
        };
        self.count = self.count.saturating_add(1);
        self.failed = self.failed.saturating_add(failed as u64);
        self.total_ns = self.total_ns.saturating_add(ns);
        self.max_ns = self.max_ns.max(ns);
        let b = lockscope_common::log2_bucket(ns);
        self.hist[b] = self.hist[b].saturating_add(1);
    }

    /// A per-CPU map value summed over CPUs.
    pub fn from_cpus<'a>(values: impl IntoIterator<Item = &'a ContentionStats>) -> Self {
        let mut out = WaitStats::default();
        for v in values {
            out.merge(&WaitStats::from_raw(v));
        }
        out
    }

    pub fn merge(&mut self, other: &WaitStats) {
        if other.count == 0 {
            return;
        }
        self.min_ns = if self.count == 0 {
            other.min_ns
        } else {
            self.min_ns.min(other.min_ns)
        };
        // Saturating: figures read from a file or a server may be anything.
        self.count = self.count.saturating_add(other.count);
        self.failed = self.failed.saturating_add(other.failed);
        self.total_ns = self.total_ns.saturating_add(other.total_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
        for (a, b) in self.hist.iter_mut().zip(other.hist.iter()) {
            *a = a.saturating_add(*b);
        }
    }

    /// `self - base` for the additive figures (count, failed, total, buckets; saturating);
    /// min and max stay `self`'s. The one subtraction of wait statistics: interval rates
    /// ([`super::rates::delta`]) bound min and max on top of it, metric series keep them.
    pub fn minus_counts(&self, base: &WaitStats) -> WaitStats {
        let mut d = self.clone();
        d.count = self.count.saturating_sub(base.count);
        d.failed = self.failed.saturating_sub(base.failed);
        d.total_ns = self.total_ns.saturating_sub(base.total_ns);
        for (a, b) in d.hist.iter_mut().zip(base.hist.iter()) {
            *a = a.saturating_sub(*b);
        }
        d
    }

    /// Add `o`'s additive figures (even where its count is 0); min and max untouched.
    pub fn add_counts(&mut self, o: &WaitStats) {
        self.count = self.count.saturating_add(o.count);
        self.failed = self.failed.saturating_add(o.failed);
        self.total_ns = self.total_ns.saturating_add(o.total_ns);
        for (a, b) in self.hist.iter_mut().zip(o.hist.iter()) {
            *a = a.saturating_add(*b);
        }
    }

    /// Is some additive figure below `prev`'s (entries were taken away)?
    pub fn fell_below(&self, prev: &WaitStats) -> bool {
        self.count < prev.count
            || self.failed < prev.failed
            || self.total_ns < prev.total_ns
            || self.hist.iter().zip(prev.hist.iter()).any(|(c, p)| c < p)
    }

    pub fn avg_ns(&self) -> u64 {
        self.total_ns.checked_div(self.count).unwrap_or(0)
    }

    pub fn hist_total(&self) -> u64 {
        self.hist.iter().fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// Estimated `p`-th percentile (0 < p <= 100) of wait time, from the log2 histogram:
    /// linear interpolation inside the bucket holding the rank, clamped to the exact
    /// min and max. An estimate: the true value lies in the same power-of-two bucket.
    pub fn percentile_ns(&self, p: f64) -> u64 {
        let total = self.hist_total();
        if total == 0 {
            return 0;
        }
        let rank = ((p / 100.0) * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0u64;
        for (i, &n) in self.hist.iter().enumerate() {
            if n == 0 {
                continue;
            }
            if seen.saturating_add(n) >= rank {
                let lo = bucket_lower_ns(i).max(self.min_ns);
                // Last value inside the bucket (its upper bound is exclusive).
                let hi = (bucket_upper_ns(i) - 1).min(self.max_ns).max(lo);
                let frac = (rank - seen) as f64 / n as f64;
                let v = lo as f64 + frac * (hi - lo) as f64;
                // Never a panic on a file whose min exceeds its max: max wins.
                return (v as u64).max(self.min_ns).min(self.max_ns);
            }
            seen = seen.saturating_add(n);
        }
        self.max_ns
    }
}

/// Histograms are written as a plain array of bucket counts; trailing zero buckets may be
/// omitted in files, and are restored on reading.
mod hist_serde {
    use super::HIST_BUCKETS;
    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

    pub fn serialize<S: Serializer>(h: &[u64; HIST_BUCKETS], s: S) -> Result<S::Ok, S::Error> {
        let used = h.iter().rposition(|&n| n != 0).map_or(0, |i| i + 1);
        s.collect_seq(&h[..used])
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u64; HIST_BUCKETS], D::Error> {
        let v = Vec::<u64>::deserialize(d)?;
        if v.len() > HIST_BUCKETS {
            return Err(D::Error::custom(format!(
                "histogram has {} buckets, at most {HIST_BUCKETS} allowed",
                v.len()
            )));
        }
        let mut h = [0; HIST_BUCKETS];
        h[..v.len()].copy_from_slice(&v);
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_common::log2_bucket;

    fn stats_of(waits: &[u64]) -> WaitStats {
        let mut s = WaitStats::default();
        for &w in waits {
            let mut one = WaitStats {
                count: 1,
                total_ns: w,
                min_ns: w,
                max_ns: w,
                ..Default::default()
            };
            one.hist[log2_bucket(w)] = 1;
            s.merge(&one);
        }
        s
    }

    #[test]
    fn per_cpu_values_merge() {
        let mut a = ContentionStats::EMPTY;
        a.count = 2;
        a.total_ns = 300;
        a.min_ns = 100;
        a.max_ns = 200;
        a.hist[6] = 1;
        a.hist[7] = 1;
        let mut b = ContentionStats::EMPTY;
        b.count = 1;
        b.failed = 1;
        b.total_ns = 50;
        b.min_ns = 50;
        b.max_ns = 50;
        b.hist[5] = 1;
        let empty = ContentionStats::EMPTY;
        let m = WaitStats::from_cpus([&a, &b, &empty]);
        assert_eq!(
            (m.count, m.failed, m.total_ns, m.min_ns, m.max_ns),
            (3, 1, 350, 50, 200)
        );
        assert_eq!(m.hist_total(), 3);
    }

    #[test]
    fn merge_saturates_instead_of_wrapping() {
        let mut a = WaitStats {
            count: u64::MAX - 1,
            total_ns: u64::MAX - 1,
            min_ns: 1,
            max_ns: 2,
            ..Default::default()
        };
        a.hist[3] = u64::MAX;
        let b = a.clone();
        a.merge(&b);
        assert_eq!(
            (a.count, a.total_ns, a.hist[3]),
            (u64::MAX, u64::MAX, u64::MAX)
        );
    }

    #[test]
    fn merge_keeps_exact_figures() {
        let s = stats_of(&[100, 5_000, 70]);
        assert_eq!(
            (s.count, s.total_ns, s.min_ns, s.max_ns),
            (3, 5_170, 70, 5_000)
        );
        assert_eq!(s.avg_ns(), 1_723);
        let mut e = WaitStats::default();
        e.merge(&WaitStats::default());
        assert_eq!(e, WaitStats::default());
    }

    #[test]
    fn percentiles_land_in_the_right_bucket() {
        // 99 short waits of ~1 us and one long one of ~1 ms.
        let mut waits = vec![1_000u64; 99];
        waits.push(1_000_000);
        let s = stats_of(&waits);
        let p50 = s.percentile_ns(50.0);
        assert_eq!(log2_bucket(p50), log2_bucket(1_000));
        let p99 = s.percentile_ns(99.0);
        assert_eq!(log2_bucket(p99), log2_bucket(1_000));
        let p100 = s.percentile_ns(100.0);
        assert_eq!(p100, 1_000_000);
        // Never outside [min, max].
        assert!(s.percentile_ns(0.001) >= s.min_ns);
    }

    #[test]
    fn percentile_of_single_value_is_that_value() {
        let s = stats_of(&[12_345]);
        assert_eq!(s.percentile_ns(50.0), 12_345);
        assert_eq!(s.percentile_ns(99.0), 12_345);
        assert_eq!(WaitStats::default().percentile_ns(99.0), 0);
    }

    #[test]
    fn histogram_serializes_compactly_and_round_trips() {
        let s = stats_of(&[3, 1_000]);
        let j = serde_json::to_value(&s).unwrap();
        assert_eq!(
            j["histogram"].as_array().unwrap().len(),
            log2_bucket(1_000) + 1
        );
        assert_eq!(j["contended"], 2);
        let back: WaitStats = serde_json::from_value(j).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn oversized_histogram_is_rejected() {
        let j = serde_json::json!({
            "contended": 1, "wait_total_ns": 1, "wait_min_ns": 1, "wait_max_ns": 1,
            "histogram": vec![0u64; HIST_BUCKETS + 1],
        });
        let err = serde_json::from_value::<WaitStats>(j)
            .unwrap_err()
            .to_string();
        assert!(err.contains("buckets"), "{err}");
    }
}
