//! Prometheus metrics from a recording (and lockscope's own figures), in the text
//! exposition format of the `prometheus` crate. Pure: no kernel, no I/O.
//!
//! Label sets are bounded: the `metrics.top_locks` (type, lock) pairs with the longest total
//! wait get their own `lock` label; every other lock is folded into `lock="other"` (one
//! series per lock type). Counters stay monotonic across changes of the top set, see
//! [`LockSeries`].
//!
//! Adding a family (rwsem acquisition events, futex waits, starvation episodes): add its
//! name to [`FAMILIES`] and a builder called from [`families`]; the Grafana dashboard test
//! checks every name a dashboard query uses against [`FAMILIES`].

use std::collections::{BTreeMap, HashMap, HashSet};

use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};

use crate::{
    aggregate::{Recording, WaitStats},
    decode::LockType,
};

/// The `lock` label value of everything outside the top locks.
pub const OTHER: &str = "other";

pub const LOCK_CONTENTIONS: &str = "lockscope_lock_contentions_total";
pub const LOCK_WAIT: &str = "lockscope_lock_wait_seconds";
pub const LOCK_WAIT_MAX: &str = "lockscope_lock_wait_seconds_max";
pub const EVENTS_LOST: &str = "lockscope_events_lost_total";
pub const CONTENTION_EVENTS: &str = "lockscope_contention_events_total";
pub const WAITS_IN_PROGRESS: &str = "lockscope_waits_in_progress";
pub const PROBE_ATTACHED: &str = "lockscope_probe_attached";
pub const BPF_RUN_SECONDS: &str = "lockscope_bpf_program_run_seconds_total";
pub const BPF_RUNS: &str = "lockscope_bpf_program_runs_total";
pub const BPF_STATS_ENABLED: &str = "lockscope_bpf_stats_enabled";
pub const BUILD_INFO: &str = "lockscope_build_info";
pub const SCRAPE_DURATION: &str = "lockscope_scrape_duration_seconds";
pub const SCRAPE_ERRORS: &str = "lockscope_scrape_errors_total";
pub const TRACED_SECONDS: &str = "lockscope_traced_seconds";

/// Every metric family lockscope can export: (name, type). A histogram `x` is scraped
/// as `x_bucket`, `x_sum` and `x_count`.
pub const FAMILIES: &[(&str, MetricType)] = &[
    (LOCK_CONTENTIONS, MetricType::COUNTER),
    (LOCK_WAIT, MetricType::HISTOGRAM),
    (LOCK_WAIT_MAX, MetricType::GAUGE),
    (EVENTS_LOST, MetricType::COUNTER),
    (CONTENTION_EVENTS, MetricType::COUNTER),
    (WAITS_IN_PROGRESS, MetricType::GAUGE),
    (PROBE_ATTACHED, MetricType::GAUGE),
    (BPF_RUN_SECONDS, MetricType::COUNTER),
    (BPF_RUNS, MetricType::COUNTER),
    (BPF_STATS_ENABLED, MetricType::GAUGE),
    (BUILD_INFO, MetricType::GAUGE),
    (SCRAPE_DURATION, MetricType::GAUGE),
    (SCRAPE_ERRORS, MetricType::COUNTER),
    (TRACED_SECONDS, MetricType::GAUGE),
];

/// Every sample name a scrape can contain (histograms expanded).
pub fn sample_names() -> Vec<String> {
    FAMILIES
        .iter()
        .flat_map(|(name, t)| match t {
            MetricType::HISTOGRAM => ["_bucket", "_sum", "_count"]
                .iter()
                .map(|s| format!("{name}{s}"))
                .collect(),
            _ => vec![(*name).to_owned()],
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsOptions {
    pub top_locks: usize,
    /// Log2 bucket indices whose upper bounds (`2^(i+1)` ns) are the histogram's `le`.
    pub bucket_bounds: Vec<usize>,
}

/// One probe and whether it is attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeStatus {
    pub probe: String,
    pub tier: String,
    pub attached: bool,
}

/// Kernel run statistics of one BPF program (`bpf_prog_info.run_time_ns`, `run_cnt`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramRuns {
    pub program: String,
    pub run_time_ns: u64,
    pub run_count: u64,
}

/// lockscope's figures about itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SelfStats {
    pub probes: Vec<ProbeStatus>,
    /// `None` when the kernel's BPF run statistics could not be enabled.
    pub programs: Option<Vec<ProgramRuns>>,
    /// How long the last read of the in-kernel maps took (read, symbolize, aggregate).
    pub scrape_duration_s: f64,
    /// Map reads that failed since the start.
    pub scrape_errors: u64,
}

/// A lock series' identity: its `type` and `lock` labels.
type SeriesKey = (LockType, String);

/// One series of the per-lock families.
#[derive(Debug, Clone, PartialEq)]
pub struct LockSample {
    pub lock_type: LockType,
    /// The lock's name, or [`OTHER`].
    pub lock: String,
    pub stats: WaitStats,
}

/// Which locks get their own label, kept across refreshes so that every counter stays
/// monotonic while the top set changes:
///
/// - a lock entering the top set starts its series from what `other` had not yet
///   reported for it (its value at the previous refresh stays in `other` as a baseline);
/// - a lock leaving the top set drops its series, and its whole value moves back into
///   `other` (which only grows: the value is at least the baseline it left there);
/// - the sum over all series of a type is always the type's exact total.
///
/// State is bounded by the number of locks in the kernel maps (previous values) and by
/// the top-N (baselines).
#[derive(Debug, Default)]
pub struct LockSeries {
    prev: HashMap<SeriesKey, WaitStats>,
    base: HashMap<SeriesKey, WaitStats>,
    /// Figures of locks no longer in the recording, kept in `other`.
    retired: BTreeMap<LockType, WaitStats>,
}

impl LockSeries {
    /// Fold a (cumulative) recording into at most `top_n` lock series plus one `other`
    /// series per lock type. Sorted: top locks by total wait, then `other` by type.
    pub fn update(&mut self, rec: &Recording, top_n: usize) -> Vec<LockSample> {
        let mut cur: HashMap<SeriesKey, WaitStats> = HashMap::new();
        for l in &rec.locks {
            cur.entry((l.lock_type, l.name.clone()))
                .or_default()
                .merge(&l.stats);
        }
        let mut ranked: Vec<(&SeriesKey, &WaitStats)> = cur.iter().collect();
        ranked.sort_by(|a, b| b.1.total_ns.cmp(&a.1.total_ns).then_with(|| a.0.cmp(b.0)));
        ranked.truncate(top_n);
        let top: Vec<SeriesKey> = ranked.into_iter().map(|(k, _)| k.clone()).collect();
        let top_set: HashSet<&SeriesKey> = top.iter().collect();

        for (key, prev) in &self.prev {
            if !cur.contains_key(key) {
                let gone = self.base.remove(key).unwrap_or_else(|| prev.clone());
                self.retired.entry(key.0).or_default().merge(&gone);
            }
        }
        self.base.retain(|k, _| top_set.contains(k));
        for key in &top {
            if !self.base.contains_key(key) {
                let reported = self.prev.get(key).cloned().unwrap_or_default();
                self.base.insert(key.clone(), reported);
            }
        }

        let mut out: Vec<LockSample> = top
            .iter()
            .map(|key| LockSample {
                lock_type: key.0,
                lock: key.1.clone(),
                stats: minus(&cur[key], &self.base[key]),
            })
            .collect();
        let mut other: BTreeMap<LockType, WaitStats> = self.retired.clone();
        for (key, stats) in &cur {
            let folded = match self.base.get(key) {
                Some(base) => base,
                None => stats,
            };
            other.entry(key.0).or_default().merge(folded);
        }
        out.extend(
            other
                .into_iter()
                .filter(|(_, s)| s.count > 0)
                .map(|(lock_type, stats)| LockSample {
                    lock_type,
                    lock: OTHER.to_owned(),
                    stats,
                }),
        );
        self.prev = cur;
        out
    }
}

/// `cur - base` for the additive figures; the maximum stays the lock's own maximum.
fn minus(cur: &WaitStats, base: &WaitStats) -> WaitStats {
    let mut d = cur.clone();
    d.count = cur.count.saturating_sub(base.count);
    d.failed = cur.failed.saturating_sub(base.failed);
    d.total_ns = cur.total_ns.saturating_sub(base.total_ns);
    for (a, b) in d.hist.iter_mut().zip(base.hist.iter()) {
        *a = a.saturating_sub(*b);
    }
    d
}

fn labels(pairs: &[(&str, &str)]) -> Vec<LabelPair> {
    pairs
        .iter()
        .map(|(n, v)| {
            let mut l = LabelPair::default();
            l.set_name((*n).to_owned());
            l.set_value((*v).to_owned());
            l
        })
        .collect()
}

fn counter(pairs: &[(&str, &str)], v: f64) -> Metric {
    let mut c = Counter::default();
    c.set_value(v);
    let mut m = Metric::from_label(labels(pairs));
    m.set_counter(c);
    m
}

fn gauge(pairs: &[(&str, &str)], v: f64) -> Metric {
    let mut g = Gauge::default();
    g.set_value(v);
    let mut m = Metric::from_label(labels(pairs));
    m.set_gauge(g);
    m
}

fn family(name: &str, help: &str, metrics: Vec<Metric>) -> MetricFamily {
    let t = FAMILIES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .unwrap_or_else(|| panic!("{name} is not listed in FAMILIES"));
    let mut f = MetricFamily::default();
    f.set_name(name.to_owned());
    f.set_help(help.to_owned());
    f.set_field_type(t);
    f.set_metric(metrics);
    f
}

/// The `lockscope_lock_wait_seconds` histogram of one series: cumulative counts at the
/// chosen log2 bucket edges, `+Inf` (added by the encoder) equal to the count.
pub fn wait_histogram(stats: &WaitStats, bounds: &[usize]) -> Histogram {
    let mut h = Histogram::default();
    let mut buckets = Vec::with_capacity(bounds.len());
    let mut cum = 0u64;
    let mut next = 0usize;
    for &i in bounds {
        while next <= i && next < stats.hist.len() {
            cum += stats.hist[next];
            next += 1;
        }
        let mut b = Bucket::default();
        b.set_upper_bound((1u64 << (i + 1)) as f64 / 1e9);
        b.set_cumulative_count(cum.min(stats.count));
        buckets.push(b);
    }
    h.set_bucket(buckets);
    h.set_sample_count(stats.count);
    h.set_sample_sum(stats.total_ns as f64 / 1e9);
    h
}

/// All metric families for one refresh. Empty families are left out.
pub fn families(
    rec: &Recording,
    locks: &[LockSample],
    me: &SelfStats,
    opts: &MetricsOptions,
) -> Vec<MetricFamily> {
    let tier = rec.tier.as_str();
    fn lock_labels<'a>(s: &'a LockSample, tier: &'a str) -> [(&'static str, &'a str); 3] {
        [
            ("type", s.lock_type.name()),
            ("lock", &s.lock),
            ("tier", tier),
        ]
    }
    let mut out = vec![
        family(
            LOCK_CONTENTIONS,
            "Contended lock acquisitions (waits that ended) since lockscope started, by lock \
             type and lock; locks outside the top by total wait are lock=\"other\".",
            locks
                .iter()
                .map(|s| counter(&lock_labels(s, tier), s.stats.count as f64))
                .collect(),
        ),
        family(
            LOCK_WAIT,
            "Time spent waiting for contended locks, in seconds. Bucket bounds are edges of \
             the in-kernel log2 (power of two nanoseconds) histogram.",
            locks
                .iter()
                .map(|s| {
                    let mut m = Metric::from_label(labels(&lock_labels(s, tier)));
                    m.set_histogram(wait_histogram(&s.stats, &opts.bucket_bounds));
                    m
                })
                .collect(),
        ),
        family(
            LOCK_WAIT_MAX,
            "Longest single wait for the lock since lockscope started, in seconds.",
            locks
                .iter()
                .map(|s| gauge(&lock_labels(s, tier), s.stats.max_ns as f64 / 1e9))
                .collect(),
        ),
        family(
            EVENTS_LOST,
            "Events or map entries the probes could not store, by reason (all zero when \
             nothing was lost).",
            rec.lost
                .iter()
                .map(|(reason, n)| counter(&[("reason", reason)], *n as f64))
                .collect(),
        ),
        family(
            CONTENTION_EVENTS,
            "Contention tracepoint events seen by the probes: begin, end, unpaired (began \
             before or ended after tracing), and waits filtered out by lock type.",
            [
                ("begin", rec.events.begin),
                ("end", rec.events.end),
                ("unpaired_begin", rec.events.unpaired_begin),
                ("unpaired_end", rec.events.unpaired_end),
                ("type_filtered", rec.events.type_filtered),
            ]
            .iter()
            .map(|(e, n)| counter(&[("event", e)], *n as f64))
            .collect(),
        ),
        family(
            WAITS_IN_PROGRESS,
            "Lock waits begun and not yet ended at the last map read.",
            vec![gauge(&[], rec.events.in_progress_at_end as f64)],
        ),
        family(
            PROBE_ATTACHED,
            "1 when the probe is attached, 0 when it could not be; tier says which kind of \
             hook feeds it.",
            me.probes
                .iter()
                .map(|p| {
                    gauge(
                        &[("probe", &p.probe), ("tier", &p.tier)],
                        if p.attached { 1.0 } else { 0.0 },
                    )
                })
                .collect(),
        ),
        family(
            BPF_STATS_ENABLED,
            "1 when the kernel's BPF run-time statistics are enabled for lockscope's \
             programs (needs CAP_SYS_ADMIN), else 0 and no program run metrics.",
            vec![gauge(&[], if me.programs.is_some() { 1.0 } else { 0.0 })],
        ),
        family(
            BUILD_INFO,
            "Always 1; the labels describe this lockscope build.",
            vec![gauge(&[("version", env!("CARGO_PKG_VERSION"))], 1.0)],
        ),
        family(
            SCRAPE_DURATION,
            "Time the last read of the in-kernel maps took (read, symbolize, aggregate), in \
             seconds.",
            vec![gauge(&[], me.scrape_duration_s)],
        ),
        family(
            SCRAPE_ERRORS,
            "Reads of the in-kernel maps that failed since lockscope started.",
            vec![counter(&[], me.scrape_errors as f64)],
        ),
        family(
            TRACED_SECONDS,
            "Seconds since the probes were attached (the period every counter covers).",
            vec![gauge(&[], rec.duration_s)],
        ),
    ];
    if let Some(programs) = &me.programs {
        out.push(family(
            BPF_RUN_SECONDS,
            "CPU time lockscope's BPF programs ran in the kernel, in seconds (kernel BPF \
             stats, counted while lockscope serves).",
            programs
                .iter()
                .map(|p| counter(&[("program", &p.program)], p.run_time_ns as f64 / 1e9))
                .collect(),
        ));
        out.push(family(
            BPF_RUNS,
            "Times lockscope's BPF programs ran (kernel BPF stats, counted while lockscope \
             serves).",
            programs
                .iter()
                .map(|p| counter(&[("program", &p.program)], p.run_count as f64))
                .collect(),
        ));
    }
    out.retain(|f| !f.get_metric().is_empty());
    out.sort_by(|a, b| a.name().cmp(b.name()));
    out
}

/// The text exposition format.
pub fn encode(families: &[MetricFamily]) -> anyhow::Result<String> {
    prometheus::TextEncoder::new()
        .encode_to_string(families)
        .map_err(|e| anyhow::anyhow!("encoding metrics: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::recording::{LockEntry, tests::sample_recording, tests::wait};

    fn opts(top: usize) -> MetricsOptions {
        MetricsOptions {
            top_locks: top,
            bucket_bounds: vec![9, 11, 13, 15, 17],
        }
    }

    fn lock(name: &str, t: LockType, ns: u64, n: u64) -> LockEntry {
        LockEntry {
            addr: format!("0x{:x}", name.len()),
            lock_type: t,
            user: None,
            events: None,
            spin: None,
            name: name.to_owned(),
            owner: None,
            stats: wait(ns, n),
            callers: vec![],
            tasks: vec![],
        }
    }

    fn rec_with(locks: Vec<LockEntry>) -> Recording {
        let mut r = sample_recording();
        r.locks = locks;
        r
    }

    fn text(rec: &Recording, top: usize) -> String {
        let o = opts(top);
        let locks = LockSeries::default().update(rec, o.top_locks);
        encode(&families(rec, &locks, &SelfStats::default(), &o)).unwrap()
    }

    fn total_of(samples: &[LockSample], t: LockType) -> (u64, u64) {
        samples
            .iter()
            .filter(|s| s.lock_type == t)
            .fold((0, 0), |(c, ns), s| {
                (c + s.stats.count, ns + s.stats.total_ns)
            })
    }

    #[test]
    fn lock_families_carry_type_lock_and_tier() {
        let t = text(&sample_recording(), 20);
        assert!(
            t.contains("# TYPE lockscope_lock_contentions_total counter"),
            "{t}"
        );
        assert!(
            t.contains("# TYPE lockscope_lock_wait_seconds histogram"),
            "{t}"
        );
        assert!(
            t.contains(
                "lockscope_lock_contentions_total{type=\"rwsem:R\",lock=\"mmap_lock of lockscope[100]\",tier=\"tracepoint\"} 15"
            ),
            "{t}"
        );
        // Read: 15 waits of 2-4 us, all below 2^12 ns, none below 2^10 ns. Write: 3 of 50 us.
        let r = "{type=\"rwsem:R\",lock=\"mmap_lock of lockscope[100]\",tier=\"tracepoint\",le=";
        let w = "{type=\"rwsem:W\",lock=\"mmap_lock of lockscope[100]\",tier=\"tracepoint\",le=";
        for (series, le, n) in [
            (r, "0.000001024", 0),
            (r, "0.000004096", 15),
            (r, "+Inf", 15),
            (w, "0.000016384", 0),
            (w, "0.000065536", 3),
            (w, "+Inf", 3),
        ] {
            let line = format!("lockscope_lock_wait_seconds_bucket{series}\"{le}\"}} {n}\n");
            assert!(t.contains(&line), "{line} in {t}");
        }
        assert!(
            t.contains("lockscope_lock_wait_seconds_sum{type=\"rwsem:R\",lock=\"mmap_lock of lockscope[100]\",tier=\"tracepoint\"} 0.00004"),
            "{t}"
        );
        assert!(t.contains("lockscope_lock_wait_seconds_max{type=\"rwsem:W\",lock=\"mmap_lock of lockscope[100]\",tier=\"tracepoint\"} 0.00005"), "{t}");
        assert!(
            t.contains("lockscope_events_lost_total{reason=\"unknown_flags\"} 4"),
            "{t}"
        );
        assert!(t.contains("lockscope_build_info{version="), "{t}");
        // No BPF stats given: said so, and no run metrics.
        assert!(t.contains("lockscope_bpf_stats_enabled 0"), "{t}");
        assert!(!t.contains(BPF_RUNS), "{t}");
    }

    #[test]
    fn every_emitted_family_is_listed() {
        let rec = sample_recording();
        let o = opts(1);
        let locks = LockSeries::default().update(&rec, 1);
        let me = SelfStats {
            probes: vec![ProbeStatus {
                probe: "contention_begin".into(),
                tier: "tracepoint".into(),
                attached: true,
            }],
            programs: Some(vec![ProgramRuns {
                program: "contention_begin".into(),
                run_time_ns: 1_500_000_000,
                run_count: 7,
            }]),
            scrape_duration_s: 0.01,
            scrape_errors: 0,
        };
        let fams = families(&rec, &locks, &me, &o);
        let names: HashSet<&str> = fams.iter().map(|f| f.name()).collect();
        let listed: HashSet<&str> = FAMILIES.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names, listed,
            "every family listed is emitted here and vice versa"
        );
        let t = encode(&fams).unwrap();
        assert!(
            t.contains("lockscope_bpf_program_run_seconds_total{program=\"contention_begin\"} 1.5"),
            "{t}"
        );
        assert!(
            t.contains(
                "lockscope_probe_attached{probe=\"contention_begin\",tier=\"tracepoint\"} 1"
            ),
            "{t}"
        );
        // Names follow the conventions: counters end in _total, no family is empty.
        for (n, t) in FAMILIES {
            assert!(n.starts_with("lockscope_"));
            assert_eq!(*t == MetricType::COUNTER, n.ends_with("_total"), "{n}");
        }
    }

    #[test]
    fn histogram_is_cumulative_and_ends_at_the_count() {
        let mut s = WaitStats::default();
        for (ns, n) in [(500u64, 3u64), (3_000, 4), (70_000, 2), (20_000_000_000, 1)] {
            s.merge(&wait(ns, n));
        }
        let h = wait_histogram(&s, &[9, 11, 13, 15, 17]);
        let counts: Vec<u64> = h
            .get_bucket()
            .iter()
            .map(|b| b.cumulative_count())
            .collect();
        // <=1.024us: 3; <=4.096us: 7; <=16.4us: 7; <=65.5us: 7; <=262us: 9; +Inf: 10.
        assert_eq!(counts, vec![3, 7, 7, 7, 9]);
        assert_eq!(h.get_sample_count(), 10);
        assert!(counts.windows(2).all(|w| w[0] <= w[1]));
        let bounds: Vec<f64> = h.get_bucket().iter().map(|b| b.upper_bound()).collect();
        assert_eq!(bounds[0], 1024e-9);
        assert_eq!(bounds[4], 262_144e-9);
    }

    #[test]
    fn ten_thousand_locks_fold_into_top_n_plus_other() {
        let locks: Vec<LockEntry> = (0..10_000u64)
            .map(|i| {
                let t = if i % 2 == 0 {
                    LockType::Spinlock
                } else {
                    LockType::Mutex
                };
                lock(
                    &format!("0x{:x}", 0xffff_0000_0000 + i),
                    t,
                    1_000 + i,
                    1 + i % 7,
                )
            })
            .collect();
        let rec = rec_with(locks);
        let samples = LockSeries::default().update(&rec, 10);
        let names: HashSet<&str> = samples.iter().map(|s| s.lock.as_str()).collect();
        assert_eq!(names.len(), 11, "10 top locks + other");
        assert!(names.contains(OTHER));
        // Nothing lost in folding: per type, the series add up to the recording.
        for t in [LockType::Spinlock, LockType::Mutex] {
            let want = rec
                .locks
                .iter()
                .filter(|l| l.lock_type == t)
                .fold((0, 0), |(c, ns), l| {
                    (c + l.stats.count, ns + l.stats.total_ns)
                });
            assert_eq!(total_of(&samples, t), want);
        }
        let t = text(&rec, 10);
        let distinct: HashSet<&str> = t
            .lines()
            .filter(|l| l.starts_with("lockscope_lock_contentions_total{"))
            .filter_map(|l| l.split("lock=\"").nth(1)?.split('"').next())
            .collect();
        assert_eq!(distinct.len(), 11);
    }

    #[test]
    fn counters_stay_monotonic_while_the_top_set_changes() {
        let mut series = LockSeries::default();
        let mut last: HashMap<(LockType, String), (u64, u64)> = HashMap::new();
        let t = LockType::Spinlock;
        // a leads, then b overtakes it, then c appears and leads, then a vanishes.
        let steps = [
            vec![("a", 100, 10), ("b", 100, 1), ("c", 0, 0)],
            vec![("a", 100, 12), ("b", 100, 30), ("c", 0, 0)],
            vec![("a", 100, 13), ("b", 100, 31), ("c", 1000, 50)],
            vec![("b", 100, 40), ("c", 1000, 60)],
            vec![("a", 100, 200), ("b", 100, 40), ("c", 1000, 60)],
        ];
        let mut resets = 0;
        for step in steps {
            let locks = step
                .iter()
                .filter(|(_, _, n)| *n > 0)
                .map(|(name, ns, n)| lock(name, t, *ns, *n))
                .collect();
            let rec = rec_with(locks);
            let samples = series.update(&rec, 1);
            assert!(samples.iter().filter(|s| s.lock != OTHER).count() <= 1);
            let other = samples.iter().find(|s| s.lock == OTHER);
            let key = (t, OTHER.to_owned());
            if let Some(o) = other {
                let before = last.get(&key).copied().unwrap_or((0, 0));
                assert!(o.stats.count >= before.0, "other count went down");
                assert!(o.stats.total_ns >= before.1, "other wait went down");
                assert!(o.stats.hist_total() == o.stats.count);
            }
            for s in &samples {
                let k = (s.lock_type, s.lock.clone());
                if let Some(&(c, _)) = last.get(&k)
                    && s.stats.count < c
                {
                    resets += 1;
                }
                last.insert(k, (s.stats.count, s.stats.total_ns));
            }
            // The series always add up to the exact total (including vanished locks).
            let seen: u64 = samples.iter().map(|s| s.stats.count).sum();
            assert!(seen >= rec.locks.iter().map(|l| l.stats.count).sum::<u64>());
        }
        // No series ever went down.
        assert_eq!(resets, 0);
        // `a` vanished from the maps with 13 waits and came back with 200 new ones: the
        // 13 stay counted (retired into other): b=40 + c=60 + a=200 + 13 = 313.
        let fin = series.update(
            &rec_with(vec![
                lock("a", t, 100, 200),
                lock("b", t, 100, 40),
                lock("c", t, 1000, 60),
            ]),
            1,
        );
        assert_eq!(fin.iter().map(|s| s.stats.count).sum::<u64>(), 313);
    }
}
