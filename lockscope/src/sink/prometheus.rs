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

use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};

pub use crate::aggregate::series::{
    CgroupSample, CgroupSeries, EpisodeCounter, EpisodeTotals, Folded, FutexFigures, FutexSample,
    FutexSeries, LockSample, LockSeries, OTHER, TopSeries, episode_kind_name,
};
use crate::aggregate::{Recording, WaitStats, rt::EpisodeKind};

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
pub const FUTEX_WAITS: &str = "lockscope_futex_waits_total";
pub const FUTEX_WAIT: &str = "lockscope_futex_wait_seconds";
pub const FUTEX_WAKES: &str = "lockscope_futex_wakes_total";
pub const RWSEM_EVENTS: &str = "lockscope_rwsem_events_total";
pub const STARVATION_EPISODES: &str = "lockscope_starvation_episodes_total";
pub const MAP_READ_SECONDS: &str = "lockscope_map_read_seconds_total";
pub const MAP_READS: &str = "lockscope_map_reads_total";
pub const READ_INTERVAL: &str = "lockscope_read_interval_seconds";
pub const CGROUP_CONTENTIONS: &str = "lockscope_cgroup_lock_contentions_total";
pub const CGROUP_WAIT: &str = "lockscope_cgroup_lock_wait_seconds_total";

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
    (FUTEX_WAITS, MetricType::COUNTER),
    (FUTEX_WAIT, MetricType::HISTOGRAM),
    (FUTEX_WAKES, MetricType::COUNTER),
    (RWSEM_EVENTS, MetricType::COUNTER),
    (STARVATION_EPISODES, MetricType::COUNTER),
    (MAP_READ_SECONDS, MetricType::COUNTER),
    (MAP_READS, MetricType::COUNTER),
    (READ_INTERVAL, MetricType::GAUGE),
    (CGROUP_CONTENTIONS, MetricType::COUNTER),
    (CGROUP_WAIT, MetricType::COUNTER),
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
    /// Export the `lockscope_futex_*` families (the futex probes run).
    pub futex: bool,
    /// Export `lockscope_rwsem_events_total`.
    pub rwsem_events: bool,
    /// Export `lockscope_starvation_episodes_total`.
    pub starvation: bool,
}

impl MetricsOptions {
    /// Every group on.
    pub fn new(top_locks: usize, bucket_bounds: Vec<usize>) -> Self {
        Self {
            top_locks,
            bucket_bounds,
            futex: true,
            rwsem_events: true,
            starvation: true,
        }
    }
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
    /// Time spent in map reads (read, symbolize, aggregate, encode) since the start,
    /// and how many there were.
    pub read_seconds_total: f64,
    pub reads_total: u64,
    /// The wait between map reads in effect: the interval, or longer while reads cost
    /// more CPU than `max_cpu_percent` allows.
    pub read_interval_s: f64,
}

/// Labels of a cgroup series: `cgroup`, `type`, and the pod UID and container ID its
/// path carries, when it carries them.
fn cgroup_labels(s: &CgroupSample) -> Vec<(&'static str, String)> {
    let mut l = vec![
        ("cgroup", s.cgroup.clone()),
        ("type", s.lock_type.name().to_owned()),
    ];
    if let Some(uid) = crate::decode::cgroup::pod_uid(&s.cgroup) {
        l.push(("pod_uid", uid));
    }
    if let Some(id) = crate::decode::cgroup::container_id(&s.cgroup) {
        l.push(("container_id", id));
    }
    l
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

/// The folded series of one refresh.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    pub locks: Vec<LockSample>,
    /// `None`: the futex group is off.
    pub futex: Option<Vec<FutexSample>>,
    /// Cumulative episodes by (kind, probable, tier); `None`: not exported.
    pub starvation: Option<EpisodeTotals>,
    /// `None`: the recording has no cgroup attribution.
    pub cgroups: Option<Vec<CgroupSample>>,
}

/// The state kept across refreshes: folded series and counted episodes.
#[derive(Debug, Default)]
pub struct Exporter {
    locks: LockSeries,
    futex: FutexSeries,
    episodes: EpisodeCounter,
    cgroups: CgroupSeries,
}

impl Exporter {
    /// Fold one (cumulative) recording into bounded series.
    pub fn samples(&mut self, rec: &Recording, opts: &MetricsOptions) -> Samples {
        Samples {
            locks: self.locks.update(rec, opts.top_locks),
            futex: opts.futex.then(|| self.futex.update(rec, opts.top_locks)),
            starvation: opts.starvation.then(|| self.episodes.update(rec).clone()),
            cgroups: self.cgroups.update(rec, opts.top_locks),
        }
    }
}

/// All metric families for one refresh. Empty families are left out.
pub fn families(
    rec: &Recording,
    samples: &Samples,
    me: &SelfStats,
    opts: &MetricsOptions,
) -> Vec<MetricFamily> {
    let locks = &samples.locks;
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
                .map(|(reason, n)| (reason.clone(), *n))
                .chain(rec.rwsem_events.iter().flat_map(|r| {
                    r.lost
                        .iter()
                        .map(|(reason, n)| (format!("rwsem_{reason}"), *n))
                }))
                .map(|(reason, n)| counter(&[("reason", &reason)], n as f64))
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
            MAP_READ_SECONDS,
            "Time spent reading the in-kernel maps (read, symbolize, aggregate, encode) \
             since lockscope started, in seconds; rate() of it is the CPU share of map reads.",
            vec![counter(&[], me.read_seconds_total)],
        ),
        family(
            MAP_READS,
            "Reads of the in-kernel maps since lockscope started (one per interval).",
            vec![counter(&[], me.reads_total as f64)],
        ),
        family(
            READ_INTERVAL,
            "Seconds between reads of the in-kernel maps now: the configured interval, or \
             longer while a read costs more CPU than max_cpu_percent allows.",
            vec![gauge(&[], me.read_interval_s)],
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
    if let Some(futex) = &samples.futex {
        fn futex_labels<'a>(s: &'a FutexSample, tier: &'a str) -> [(&'static str, &'a str); 4] {
            [
                ("type", s.lock_type.name()),
                ("lock", &s.lock),
                ("comm", &s.comm),
                ("tier", tier),
            ]
        }
        out.push(family(
            FUTEX_WAITS,
            "Futex waits that blocked (the caller slept) since lockscope started, by futex \
             word and process; words outside the top by total wait are lock=\"other\".",
            futex
                .iter()
                .map(|s| counter(&futex_labels(s, tier), s.figures.wait.count as f64))
                .collect(),
        ));
        out.push(family(
            FUTEX_WAIT,
            "Time blocked in futex waits, in seconds. Bucket bounds are edges of the \
             in-kernel log2 (power of two nanoseconds) histogram.",
            futex
                .iter()
                .map(|s| {
                    let mut m = Metric::from_label(labels(&futex_labels(s, tier)));
                    m.set_histogram(wait_histogram(&s.figures.wait, &opts.bucket_bounds));
                    m
                })
                .collect(),
        ));
        // Not in `--futex-mode blocking`, which sees no wakes: 0 would be a lie.
        if !rec.futex_events.as_ref().is_some_and(|f| f.blocking) {
            out.push(family(
                FUTEX_WAKES,
                "Futex wake calls (FUTEX_WAKE, FUTEX_WAKE_BITSET, FUTEX_WAKE_OP, futex_wake) \
                 since lockscope started, by futex word and process.",
                futex
                    .iter()
                    .map(|s| counter(&futex_labels(s, tier), s.figures.wakes as f64))
                    .collect(),
            ));
        }
    }
    if opts.rwsem_events
        && let Some(r) = &rec.rwsem_events
    {
        out.push(family(
            RWSEM_EVENTS,
            "rwsem lock events of the traced tasks since lockscope started, named as in the \
             kernel's lock_events_list.h (trylock_fail is lockscope's own); accuracy says \
             whether the tier sees the event exactly or estimates it; events the tier \
             cannot see are left out.",
            r.system
                .iter()
                .filter_map(|(name, v)| {
                    let event = name.strip_prefix("rwsem_").unwrap_or(name);
                    let accuracy = r.kinds.get(event)?.as_str();
                    Some(counter(
                        &[("event", event), ("accuracy", accuracy), ("tier", &r.tier)],
                        (*v)? as f64,
                    ))
                })
                .collect(),
        ));
    }
    if let Some(totals) = &samples.starvation {
        let mut all = totals.clone();
        // Every kind is present from the start (0 until an episode happens).
        for kind in [EpisodeKind::Starvation, EpisodeKind::LongHold] {
            for probable in [false, true] {
                all.entry((episode_kind_name(kind), probable, rec.tier.clone()))
                    .or_default();
            }
        }
        out.push(family(
            STARVATION_EPISODES,
            "Starvation (a waiter starved while other CPUs re-took the lock) and long-hold \
             episodes on raw spinlocks since lockscope started; probable=\"true\" when \
             inferred from proxy signals rather than seen exactly.",
            all.iter()
                .map(|((kind, probable, t), n)| {
                    counter(
                        &[
                            ("kind", *kind),
                            ("probable", if *probable { "true" } else { "false" }),
                            ("tier", t),
                        ],
                        *n as f64,
                    )
                })
                .collect(),
        ));
    }
    if let Some(cgroups) = &samples.cgroups {
        let metric = |s: &CgroupSample, v: f64| {
            let l = cgroup_labels(s);
            let pairs: Vec<(&str, &str)> = l.iter().map(|(n, v)| (*n, v.as_str())).collect();
            counter(&pairs, v)
        };
        out.push(family(
            CGROUP_CONTENTIONS,
            "Contended lock acquisitions (waits that ended) since lockscope started, by the \
             waiting process's cgroup (v2 path below the root) and lock type; kernel locks \
             and futex words. cgroups outside the top by total wait are cgroup=\"other\".",
            cgroups
                .iter()
                .map(|s| metric(s, s.stats.count as f64))
                .collect(),
        ));
        out.push(family(
            CGROUP_WAIT,
            "Time spent waiting for contended locks, in seconds, by cgroup and lock type (as \
             lockscope_cgroup_lock_contentions_total).",
            cgroups
                .iter()
                .map(|s| metric(s, s.stats.total_ns as f64 / 1e9))
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
    use std::collections::{BTreeMap, HashMap, HashSet};

    use super::*;
    use crate::aggregate::{
        RawSnapshot,
        recording::{LockEntry, tests::sample_recording, tests::wait},
        rt::{StarvationEpisode, TaskRef},
        rwsem,
    };
    use crate::decode::LockType;
    use lockscope_common::{
        EV_RLOCK, EV_RLOCK_HANDOFF, EV_RLOCK_STEAL, RWC_TOTALS, RWC_UNPAIRED_EXIT,
        RWSEM_COUNTERS_LEN,
    };

    fn opts(top: usize) -> MetricsOptions {
        MetricsOptions::new(top, vec![9, 11, 13, 15, 17])
    }

    fn lock(name: &str, t: LockType, ns: u64, n: u64) -> LockEntry {
        // One address per name (a series follows its lock's address).
        let addr = name.bytes().fold(0x1000u64, |h, b| {
            h.wrapping_mul(131).wrapping_add(u64::from(b))
        });
        LockEntry {
            addr: format!("{addr:#x}"),
            lock_type: t,
            user: None,
            events: None,
            omitted: None,
            wait_task: None,
            spin: None,
            holders: None,
            name: name.to_owned(),
            owner: None,
            stats: wait(ns, n),
            callers: vec![],
            tasks: vec![],
        }
    }

    fn futex_lock(uaddr: u64, comm: &str, pid: u32, ns: u64, n: u64, wakes: u64) -> LockEntry {
        use crate::aggregate::futex::{FutexInfo, UserLock};
        LockEntry {
            addr: format!("{uaddr:#x}"),
            lock_type: LockType::Futex,
            user: Some(UserLock {
                pid,
                comm: comm.to_owned(),
                futex: FutexInfo {
                    wake_calls: wakes,
                    ..Default::default()
                },
                pthread: None,
            }),
            events: None,
            omitted: None,
            wait_task: None,
            spin: None,
            holders: None,
            name: format!("futex {uaddr:#x} of {comm}[{pid}]"),
            owner: None,
            stats: wait(ns, n),
            callers: vec![],
            tasks: vec![],
        }
    }

    fn episode(kind: EpisodeKind, ts_ns: u64, probable: bool) -> StarvationEpisode {
        StarvationEpisode {
            kind,
            ts_ns,
            cpu: 1,
            lock: "pi_lock of stress-ng[42]".into(),
            addr: "0xffff888100001234".into(),
            waiter: TaskRef {
                pid: 42,
                tid: Some(43),
                comm: "stress-ng".into(),
                stack: vec![],
            },
            wait_ns: 50_000,
            foreign_acquisitions: 7,
            acquirers: vec![],
            irqs_off: None,
            probable,
            tier: "tracepoint".into(),
        }
    }

    /// A recording with something for every family: kernel and futex locks, rwsem
    /// events (tracepoint tier), starvation episodes.
    fn full_recording() -> Recording {
        let mut r = sample_recording();
        r.locks.push(futex_lock(0x5000, "db", 77, 10_000, 9, 4));
        let mut raw = RawSnapshot {
            rwsem_counters: vec![0; RWSEM_COUNTERS_LEN as usize],
            ..Default::default()
        };
        raw.rwsem_counters[RWC_TOTALS as usize + EV_RLOCK] = 15;
        raw.rwsem_counters[RWC_TOTALS as usize + EV_RLOCK_HANDOFF] = 2;
        raw.rwsem_counters[RWC_TOTALS as usize + EV_RLOCK_STEAL] = 99;
        raw.rwsem_counters[RWC_UNPAIRED_EXIT as usize] = 3;
        r.rwsem_events = Some(rwsem::summary(
            &raw,
            &rwsem::event_kinds(0, false, true),
            "tracepoint",
            BTreeMap::new(),
            None,
        ));
        r.starvation_episodes = Some(vec![episode(EpisodeKind::Starvation, 100, true)]);
        r.cgroups = Some(vec![cgroup_entry(
            "system.slice/db.service",
            LockType::Futex,
            90_000,
            9,
        )]);
        r
    }

    fn cgroup_entry(
        path: &str,
        t: LockType,
        ns: u64,
        n: u64,
    ) -> crate::aggregate::cgroup::CgroupEntry {
        crate::aggregate::cgroup::CgroupEntry {
            cgroup: path.to_owned(),
            lock_type: t,
            stats: wait(ns / n, n),
        }
    }

    #[test]
    fn cgroups_are_bounded_and_carry_pod_and_container_labels() {
        const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let pod = format!(
            "kubepods.slice/kubepods-burstable.slice/\
             kubepods-burstable-pod1b2c3d4e_5f60_7a8b_9c0d_e1f2a3b4c5d6.slice/\
             cri-containerd-{ID}.scope"
        );
        let mut rec = rec_with(vec![]);
        let mut entries = vec![cgroup_entry(&pod, LockType::Mutex, 5_000_000, 5)];
        // 200 small cgroups: beyond the top 3 they fold into cgroup="other".
        for i in 0..200 {
            entries.push(cgroup_entry(
                &format!("app.slice/a{i}.service"),
                LockType::Mutex,
                1000,
                1,
            ));
        }
        rec.cgroups = Some(entries);
        let o = opts(3);
        let samples = Exporter::default().samples(&rec, &o);
        let t = full_text_with(&rec, &samples, &o);
        let series: Vec<&str> = t
            .lines()
            .filter(|l| l.starts_with(CGROUP_CONTENTIONS))
            .collect();
        assert_eq!(series.len(), 4, "3 top + other: {series:#?}");
        assert!(
            t.contains(&format!(
                "{CGROUP_WAIT}{{cgroup=\"{pod}\",type=\"mutex\",pod_uid=\"1b2c3d4e-5f60-7a8b-9c0d-e1f2a3b4c5d6\",container_id=\"{ID}\"}} 0.005"
            )),
            "{t}"
        );
        // 198 of the small ones in other: every contention still counted once.
        assert!(
            t.contains(&format!(
                "{CGROUP_CONTENTIONS}{{cgroup=\"other\",type=\"mutex\"}} 198"
            )),
            "{t}"
        );
        let sum: f64 = series
            .iter()
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum();
        assert_eq!(sum, 205.0);
    }

    fn full_text_with(rec: &Recording, samples: &Samples, o: &MetricsOptions) -> String {
        let me = SelfStats {
            probes: vec![],
            programs: None,
            scrape_duration_s: 0.0,
            scrape_errors: 0,
            read_seconds_total: 0.0,
            reads_total: 0,
            read_interval_s: 1.0,
        };
        encode(&families(rec, samples, &me, o)).unwrap()
    }

    fn rec_with(locks: Vec<LockEntry>) -> Recording {
        let mut r = sample_recording();
        r.locks = locks;
        r
    }

    fn text(rec: &Recording, top: usize) -> String {
        let o = opts(top);
        let samples = Exporter::default().samples(rec, &o);
        encode(&families(rec, &samples, &SelfStats::default(), &o)).unwrap()
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
        let rec = full_recording();
        let o = opts(1);
        let samples = Exporter::default().samples(&rec, &o);
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
            read_seconds_total: 0.5,
            reads_total: 3,
            read_interval_s: 1.0,
        };
        let fams = families(&rec, &samples, &me, &o);
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

    #[test]
    fn a_lock_renamed_between_refreshes_keeps_its_first_series() {
        // A lock named by address first, then by what it is (a caller was seen): one
        // series, its first, the waits counted once.
        let t = LockType::Mutex;
        let mut series = LockSeries::default();
        let first = lock("&kmalloc-192+0x0", t, 100, 5);
        series.update(&rec_with(vec![first.clone()]), 10);
        let renamed = LockEntry {
            name: "&kmalloc-192 ~pipe_inode_info.mutex".into(),
            stats: wait(100, 7),
            ..first
        };
        let out = series.update(&rec_with(vec![renamed.clone()]), 10);
        assert_eq!(out.iter().map(|s| s.stats.count).sum::<u64>(), 7);
        assert_eq!(out[0].lock, "&kmalloc-192+0x0");
        // Once the lock has left the recording, it comes back under its new name.
        series.update(&rec_with(vec![]), 10);
        let back = series.update(
            &rec_with(vec![LockEntry {
                stats: wait(100, 2),
                ..renamed
            }]),
            10,
        );
        let named: Vec<&str> = back.iter().map(|s| s.lock.as_str()).collect();
        assert!(
            named.contains(&"&kmalloc-192 ~pipe_inode_info.mutex"),
            "{named:?}"
        );
    }

    #[test]
    fn a_lock_that_loses_entries_keeps_its_series_monotonic() {
        // serve forgets an exited process's waits on a lock others still use: the lock
        // stays in the recording with lower figures. `lock(name, t, ns per wait, waits)`.
        let t = LockType::Mutex;
        let mut series = LockSeries::default();
        let mut step = |a: Option<u64>, b: u64| {
            let mut locks = vec![lock("b", t, 10, b)];
            locks.extend(a.map(|n| lock("a", t, 100, n)));
            let s = series.update(&rec_with(locks), 1);
            let get = |name: &str| {
                s.iter()
                    .find(|s| s.lock == name)
                    .map(|s| (s.stats.count, s.stats.total_ns, s.stats.hist_total()))
            };
            (get("a"), get(OTHER))
        };
        assert_eq!(step(Some(10), 5), (Some((10, 1000, 10)), Some((5, 50, 5))));
        // a loses 6 of its 10 waits, b 3 of its 5: nothing goes down.
        assert_eq!(step(Some(4), 2), (Some((10, 1000, 10)), Some((5, 50, 5))));
        // New waits count from there: a +2, b +1.
        assert_eq!(step(Some(6), 3), (Some((12, 1200, 12)), Some((6, 60, 6))));
        // a vanishes: its series ends; other keeps b's carried figures.
        assert_eq!(step(None, 3), (None, Some((6, 60, 6))));
        assert_eq!(series.carried(), 1);
    }

    fn full_text(rec: &Recording, o: &MetricsOptions) -> String {
        let samples = Exporter::default().samples(rec, o);
        encode(&families(rec, &samples, &SelfStats::default(), o)).unwrap()
    }

    #[test]
    fn futex_words_have_their_own_families() {
        let rec = full_recording();
        let t = full_text(&rec, &opts(20));
        let l = "{type=\"futex\",lock=\"futex 0x5000 of db[77]\",comm=\"db\",tier=\"tracepoint\"";
        for line in [
            format!("lockscope_futex_waits_total{l}}} 9\n"),
            format!("lockscope_futex_wakes_total{l}}} 4\n"),
            format!("lockscope_futex_wait_seconds_count{l}}} 9\n"),
            // 10 us waits: all below 2^14 ns = 16.4 us, none below 2^12 ns.
            format!("lockscope_futex_wait_seconds_bucket{l},le=\"0.000004096\"}} 0\n"),
            format!("lockscope_futex_wait_seconds_bucket{l},le=\"0.000016384\"}} 9\n"),
        ] {
            assert!(t.contains(&line), "{line} in {t}");
        }
        // Futex words are not kernel locks.
        assert!(
            !t.contains("lockscope_lock_contentions_total{type=\"futex\""),
            "{t}"
        );
        // Blocking mode sees no wakes: no wakes family, the waits still there.
        let mut blocking = rec.clone();
        blocking.futex_events = Some(crate::aggregate::futex::FutexEvents {
            blocking: true,
            ..Default::default()
        });
        let t = full_text(&blocking, &opts(20));
        assert!(!t.contains("lockscope_futex_wakes_total") && t.contains(FUTEX_WAITS));
        // The group off: no futex families at all.
        let mut o = opts(20);
        o.futex = false;
        assert!(!full_text(&rec, &o).contains("lockscope_futex_"));
    }

    #[test]
    fn ten_thousand_futex_words_fold_into_top_n_plus_other() {
        let locks: Vec<LockEntry> = (0..10_000u64)
            .map(|i| {
                let comm = if i % 3 == 0 { "a" } else { "b" };
                futex_lock(0x10_000 + 64 * i, comm, 7, 1_000 + i, 1 + i % 5, i % 4)
            })
            .collect();
        let rec = rec_with(locks);
        let samples = FutexSeries::default().update(&rec, 20);
        let names: HashSet<&str> = samples.iter().map(|s| s.lock.as_str()).collect();
        assert_eq!(names.len(), 21, "20 top words + other");
        // The other words, summed per process.
        let others: HashSet<&str> = samples
            .iter()
            .filter(|s| s.lock == OTHER)
            .map(|s| s.comm.as_str())
            .collect();
        assert_eq!(others, HashSet::from(["a", "b"]));
        // The heaviest word leads, with its process's name.
        // (1000 + 9999 ns) x 5 waits.
        assert_eq!(
            samples[0].lock,
            format!("futex {:#x} of a[7]", 0x10_000 + 64 * 9999)
        );
        assert_eq!(samples[0].comm, "a");
        let (waits, wakes) = samples.iter().fold((0, 0), |(w, k), s| {
            (w + s.figures.wait.count, k + s.figures.wakes)
        });
        let want_waits: u64 = rec.locks.iter().map(|l| l.stats.count).sum();
        let want_wakes: u64 = (0..10_000u64).map(|i| i % 4).sum();
        assert_eq!((waits, wakes), (want_waits, want_wakes));
        // And none of them is a kernel lock series.
        assert!(LockSeries::default().update(&rec, 20).is_empty());
        let t = full_text(&rec, &opts(20));
        for family in [
            FUTEX_WAITS,
            FUTEX_WAKES,
            "lockscope_futex_wait_seconds_count",
        ] {
            let distinct: HashSet<&str> = t
                .lines()
                .filter(|l| l.starts_with(&format!("{family}{{")))
                .filter_map(|l| l.split("lock=\"").nth(1)?.split('"').next())
                .collect();
            assert_eq!(distinct.len(), 21, "{family}");
        }
    }

    #[test]
    fn futex_processes_beyond_the_top_fold_into_comm_other_monotonically() {
        // 30 processes with one word each, top 2: 2 words, 2 processes, then other.
        let mut series = FutexSeries::default();
        let mut last: HashMap<(String, String), u64> = HashMap::new();
        for round in 1..=4u64 {
            let locks: Vec<LockEntry> = (0..30u32)
                .map(|p| {
                    // The ranking turns over every round.
                    let heavy = (p as u64 + round * 7) % 30;
                    futex_lock(
                        0x1000,
                        &format!("p{p}"),
                        p + 1,
                        1_000 * (heavy + 1),
                        round * 3,
                        0,
                    )
                })
                .collect();
            let rec = rec_with(locks);
            let samples = series.update(&rec, 2);
            let words: HashSet<&str> = samples.iter().map(|s| s.lock.as_str()).collect();
            assert!(words.len() <= 3, "{words:?}");
            let other_comms: HashSet<&str> = samples
                .iter()
                .filter(|s| s.lock == OTHER)
                .map(|s| s.comm.as_str())
                .collect();
            assert!(other_comms.len() <= 3, "{other_comms:?}");
            assert!(other_comms.contains(OTHER));
            let total: u64 = samples.iter().map(|s| s.figures.wait.count).sum();
            assert_eq!(total, 30 * round * 3, "exact total");
            for s in &samples {
                let k = (s.lock.clone(), s.comm.clone());
                let prev = last.insert(k, s.figures.wait.count).unwrap_or(0);
                assert!(s.figures.wait.count >= prev, "{s:?} went down from {prev}");
            }
        }
    }

    #[test]
    fn a_futex_word_that_leaves_stays_in_its_process_series() {
        // Top 2: db's heavy word and web's word have their own series, db's light word
        // folds into db's `other`. Then db exits and serve forgets its words.
        let mut series = FutexSeries::default();
        let mut step = |locks: Vec<LockEntry>| {
            let samples = series.update(&rec_with(locks), 2);
            let mut by: BTreeMap<(String, String), u64> = BTreeMap::new();
            for s in samples {
                *by.entry((s.lock, s.comm)).or_default() += s.figures.wait.count;
            }
            by
        };
        let key = |lock: &str, comm: &str| (lock.to_owned(), comm.to_owned());
        let (heavy, web) = ("futex 0x1000 of db[7]", "futex 0x3000 of web[8]");
        let before = step(vec![
            futex_lock(0x1000, "db", 7, 1_000, 50, 0),
            futex_lock(0x2000, "db", 7, 10, 5, 0),
            futex_lock(0x3000, "web", 8, 100, 3, 0),
        ]);
        assert_eq!(
            before,
            [
                (key(heavy, "db"), 50),
                (key(web, "web"), 3),
                (key(OTHER, "db"), 5)
            ]
            .into()
        );
        // db's words are gone; web's word goes on. db's `other` keeps the light word
        // (it does not move to a process without a name, nor go down); the heavy word's
        // own series ends, as a top lock's does (it does not jump into `other`).
        let after = step(vec![futex_lock(0x3000, "web", 8, 100, 4, 0)]);
        assert_eq!(
            after,
            [(key(web, "web"), 4), (key(OTHER, "db"), 5)].into(),
            "{after:?}"
        );
        assert_eq!(series.names_kept(), 1, "only the words still there");
    }

    #[test]
    fn rwsem_events_carry_the_kernel_names_and_accuracy() {
        let t = full_text(&full_recording(), &opts(20));
        for line in [
            "lockscope_rwsem_events_total{event=\"rlock\",accuracy=\"exact\",tier=\"tracepoint\"} 15\n",
            "lockscope_rwsem_events_total{event=\"rlock_handoff\",accuracy=\"estimate\",tier=\"tracepoint\"} 2\n",
            "lockscope_rwsem_events_total{event=\"wlock\",accuracy=\"exact\",tier=\"tracepoint\"} 0\n",
            "lockscope_events_lost_total{reason=\"rwsem_unpaired_slowpath_exit\"} 3\n",
        ] {
            assert!(t.contains(line), "{line} in {t}");
        }
        // The tracepoint tier cannot see steals: left out, never 0 (nor the 99 in the map).
        assert!(!t.contains("event=\"rlock_steal\""), "{t}");
        let mut o = opts(20);
        o.rwsem_events = false;
        assert!(!full_text(&full_recording(), &o).contains(RWSEM_EVENTS));
    }

    fn with_episodes(eps: Vec<StarvationEpisode>) -> Recording {
        let mut r = sample_recording();
        r.starvation_episodes = Some(eps);
        r
    }

    fn starvation_count(c: &mut EpisodeCounter, rec: &Recording, kind: EpisodeKind) -> u64 {
        c.update(rec)
            .iter()
            .filter(|((k, _, _), _)| *k == episode_kind_name(kind))
            .map(|(_, n)| n)
            .sum()
    }

    #[test]
    fn episodes_are_counted_once_across_snapshots() {
        use EpisodeKind::*;
        let (a, b, c) = (
            episode(Starvation, 100, true),
            episode(Starvation, 200, true),
            episode(LongHold, 300, false),
        );
        // A producer that keeps every episode (cumulative lists).
        let mut cum = EpisodeCounter::default();
        assert_eq!(
            starvation_count(&mut cum, &with_episodes(vec![a.clone()]), Starvation),
            1
        );
        let rec = with_episodes(vec![a.clone(), b.clone(), c.clone()]);
        assert_eq!(starvation_count(&mut cum, &rec, Starvation), 2);
        assert_eq!(
            starvation_count(&mut cum, &rec, Starvation),
            2,
            "same list again"
        );
        assert_eq!(starvation_count(&mut cum, &rec, LongHold), 1);
        // A producer that hands over only the new ones (drained lists), or none.
        let mut drained = EpisodeCounter::default();
        for list in [vec![a.clone()], vec![], vec![b.clone(), c.clone()], vec![]] {
            drained.update(&with_episodes(list));
        }
        assert_eq!(drained.update(&sample_recording()), cum.update(&rec));
        // A producer that keeps only the latest two (capped lists): a drops out, d comes.
        let d = episode(Starvation, 400, false);
        let mut capped = EpisodeCounter::default();
        for list in [
            vec![a.clone(), b.clone()],
            vec![b.clone(), c.clone()],
            vec![c.clone(), d.clone()],
        ] {
            capped.update(&with_episodes(list));
        }
        let totals = capped.update(&with_episodes(vec![c.clone(), d.clone()]));
        let key = |k, p: bool| (episode_kind_name(k), p, "tracepoint".to_owned());
        assert_eq!(totals[&key(Starvation, true)], 2);
        assert_eq!(totals[&key(Starvation, false)], 1);
        assert_eq!(totals[&key(LongHold, false)], 1);
        // The same episode twice in one list counts once.
        let mut dup = EpisodeCounter::default();
        assert_eq!(
            starvation_count(
                &mut dup,
                &with_episodes(vec![a.clone(), a.clone()]),
                Starvation
            ),
            1
        );
    }

    #[test]
    fn starvation_family_starts_at_zero_for_every_kind() {
        let rec = sample_recording();
        assert!(rec.starvation_episodes.is_none());
        let t = full_text(&rec, &opts(20));
        for (kind, probable) in [
            ("starvation", "false"),
            ("starvation", "true"),
            ("long-hold", "false"),
            ("long-hold", "true"),
        ] {
            let line = format!(
                "lockscope_starvation_episodes_total{{kind=\"{kind}\",probable=\"{probable}\",tier=\"tracepoint\"}} 0\n"
            );
            assert!(t.contains(&line), "{line} in {t}");
        }
        let t = full_text(&full_recording(), &opts(20));
        assert!(t.contains("lockscope_starvation_episodes_total{kind=\"starvation\",probable=\"true\",tier=\"tracepoint\"} 1\n"), "{t}");
        let mut o = opts(20);
        o.starvation = false;
        assert!(!full_text(&rec, &o).contains(STARVATION_EPISODES));
    }
}
