//! Pure parsers and statistics for `cargo xtask bench`: the text that perf, bpftrace,
//! Prometheus and /proc produce, turned into numbers; medians and spreads.

use std::collections::BTreeMap;

/// Median of `values` (mean of the middle two for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Summary of repeated measurements: median, min, max and the spread
/// `(max - min) / median` in percent (0 for a single value).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub spread_pct: f64,
    pub n: usize,
}

impl Spread {
    pub fn of(values: &[f64]) -> Option<Spread> {
        let median = median(values)?;
        let finite = values.iter().copied().filter(|x| x.is_finite());
        let min = finite.clone().fold(f64::INFINITY, f64::min);
        let max = finite.clone().fold(f64::NEG_INFINITY, f64::max);
        let spread_pct = if median.abs() > 0.0 {
            (max - min) / median.abs() * 100.0
        } else {
            0.0
        };
        Some(Spread {
            median,
            min,
            max,
            spread_pct,
            n: finite.count(),
        })
    }
}

/// What `perf report --stats` says about a `perf lock record` file: samples of
/// `lock:contention_begin` / `_end`, and LOST records (each one a chunk of samples the
/// kernel could not hand to perf) plus LOST_SAMPLES records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerfStats {
    pub begin: u64,
    pub end: u64,
    pub lost_records: u64,
}

pub fn parse_perf_stats(text: &str) -> PerfStats {
    let mut s = PerfStats::default();
    let mut section = "";
    for line in text.lines() {
        let t = line.trim();
        if let Some(name) = t.strip_suffix(" stats:") {
            section = if name == "Aggregated" {
                ""
            } else if name.contains("contention_begin") {
                "begin"
            } else if name.contains("contention_end") {
                "end"
            } else {
                "other"
            };
            continue;
        }
        let Some((key, rest)) = t.split_once(':') else {
            continue;
        };
        let Some(n) = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
        else {
            continue;
        };
        match (section, key.trim()) {
            ("begin", "SAMPLE events") => s.begin = n,
            ("end", "SAMPLE events") => s.end = n,
            // Only the aggregated section (before any per-event section) counts.
            ("", "LOST events") | ("", "LOST_SAMPLES events") => s.lost_records += n,
            _ => {}
        }
    }
    s
}

/// `@name: N` lines of bpftrace's exit output (scalar maps only).
pub fn parse_bpftrace_scalars(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.trim().split_once(':')?;
            let k = k.strip_prefix('@')?;
            if k.contains('[') {
                return None;
            }
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// Sum of every sample of `metric` in Prometheus text format whose labels contain all
/// of `want` (`name="value"` pairs); `None` if there is no such sample.
pub fn prom_sum(text: &str, metric: &str, want: &[(&str, &str)]) -> Option<f64> {
    let mut found = None;
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some(rest) = line.strip_prefix(metric) else {
            continue;
        };
        let (labels, value) = if let Some(r) = rest.strip_prefix('{') {
            let Some((l, v)) = r.split_once('}') else {
                continue;
            };
            (l, v)
        } else if rest.starts_with(' ') {
            ("", rest)
        } else {
            continue; // another metric with this one as prefix
        };
        let ok = want
            .iter()
            .all(|(k, v)| labels.split(',').any(|p| p == format!("{k}=\"{v}\"")));
        if !ok {
            continue;
        }
        if let Some(v) = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

/// Samples of `metric` by the value of `label` (e.g. lost events by `reason`).
pub fn prom_by_label(text: &str, metric: &str, label: &str) -> BTreeMap<String, f64> {
    let key = format!("{label}=\"");
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(metric).and_then(|r| r.strip_prefix('{')) else {
            continue;
        };
        let Some((labels, value)) = rest.split_once('}') else {
            continue;
        };
        let Some(name) = labels
            .split(',')
            .find_map(|p| p.strip_prefix(key.as_str())?.strip_suffix('"'))
        else {
            continue;
        };
        if let Some(v) = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            *out.entry(name.to_string()).or_insert(0.0) += v;
        }
    }
    out
}

/// The jiffies (USER_HZ) of the `cpu` line of /proc/stat: user, nice, system, idle,
/// iowait, irq, softirq, steal, ...
fn cpu_jiffies(stat: &str) -> Option<Vec<u64>> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    line.split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect()
}

/// Busy jiffies of the `cpu` line of /proc/stat: user, nice, system, irq and softirq
/// (not idle, iowait or steal).
pub fn busy_jiffies(stat: &str) -> Option<u64> {
    let f = cpu_jiffies(stat)?;
    Some(f.first()? + f.get(1)? + f.get(2)? + f.get(5)? + f.get(6)?)
}

/// Steal jiffies of the `cpu` line of /proc/stat: time the hypervisor ran something
/// else while a virtual CPU of this machine was ready to run.
pub fn steal_jiffies(stat: &str) -> Option<u64> {
    cpu_jiffies(stat)?.get(7).copied()
}

/// Steal jiffies of each `cpuN` line of /proc/stat, in CPU order.
pub fn steal_jiffies_per_cpu(stat: &str) -> Vec<u64> {
    stat.lines()
        .filter(|l| {
            l.strip_prefix("cpu")
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        })
        .filter_map(|l| l.split_whitespace().nth(8)?.parse().ok())
        .collect()
}

/// The most steal one CPU took within any `window_s` of a series of per-CPU steal
/// readings (`(seconds since start, jiffies per CPU)`, in time order), in jiffies. A
/// timer 100 ms late on an idle virtual CPU needs the host to have held that CPU about
/// as long at once: steal spread thinly over a whole run cannot have made it.
pub fn max_steal_in_window(samples: &[(f64, Vec<u64>)], window_s: f64) -> Option<u64> {
    let cpus = samples.iter().map(|(_, v)| v.len()).min()?;
    let mut best = 0;
    for cpu in 0..cpus {
        let mut start = 0;
        for (t_end, v_end) in samples {
            while t_end - samples[start].0 > window_s {
                start += 1;
            }
            best = best.max(v_end[cpu].saturating_sub(samples[start].1[cpu]));
        }
    }
    Some(best)
}

/// Share of the machine's CPU capacity (0-1) spent outside the bench over `elapsed_s`:
/// the machine's busy CPU seconds less the bench's own (it and its children).
pub fn other_cpu_share(busy_s: f64, own_s: f64, elapsed_s: f64, cpus: usize) -> f64 {
    let capacity = elapsed_s * cpus.max(1) as f64;
    if capacity <= 0.0 {
        return 0.0;
    }
    ((busy_s - own_s) / capacity).clamp(0.0, 1.0)
}

/// Other processes above this share of the CPUs during the overhead runs: a loaded
/// machine.
pub const OTHER_CPU_LOADED: f64 = 0.25;

/// Whether the machine is too busy for overhead figures to mean much: the 1-minute
/// load average (first field of /proc/loadavg) above half the CPUs.
pub fn machine_is_loaded(loadavg: &str, cpus: usize) -> bool {
    loadavg
        .split_whitespace()
        .next()
        .and_then(|l| l.parse::<f64>().ok())
        .is_some_and(|l| l > cpus.max(1) as f64 / 2.0)
}

/// A `kB` field of /proc/PID/status (`VmRSS`, `VmHWM`), in KiB.
pub fn status_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// utime + stime of /proc/PID/stat, in clock ticks. The command name (field 2) may
/// contain spaces and parentheses, so fields are counted after the last `)`.
pub fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // After the comm: state(3) ppid(4) ... utime(14) stime(15) -> indices 11, 12.
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// The run statistics of one BPF program fd (`/proc/PID/fdinfo/FD`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgFdInfo {
    pub prog_id: u32,
    pub run_time_ns: u64,
    pub run_cnt: u64,
}

pub fn parse_prog_fdinfo(text: &str) -> Option<ProgFdInfo> {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().parse::<u64>().ok())?
        })
    };
    Some(ProgFdInfo {
        prog_id: u32::try_from(field("prog_id")?).ok()?,
        run_time_ns: field("run_time_ns").unwrap_or(0),
        run_cnt: field("run_cnt").unwrap_or(0),
    })
}

/// A bpftool-free program name lookup: `bpftool prog show --json` gives `id` and
/// `name`; this maps one to the other.
pub fn prog_names(bpftool_json: &serde_json::Value) -> BTreeMap<u64, String> {
    bpftool_json
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["id"].as_u64()?, p["name"].as_str()?.to_string())))
        .collect()
}

/// The JSON summary line a `lockscope workload ... --json` printed (the first line of
/// `stdout` that parses as a JSON object with `ops_per_s`; other lines, e.g. a report
/// printed by `lockscope record` around the command's output, are skipped).
pub fn workload_summary(stdout: &str) -> Option<serde_json::Value> {
    stdout.lines().find_map(|l| {
        let l = l.trim();
        if !l.starts_with('{') {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(l).ok()?;
        v.get("ops_per_s")?.as_f64()?;
        Some(v)
    })
}

/// `12.3 s`, `4m05s`: a duration for progress lines.
/// memcslap's `Time to get N keys by T threads: S seconds.` line: S.
pub fn memcslap_get_seconds(text: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.trim_start().starts_with("Time to get"))?
        .split(':')
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

pub fn fmt_duration(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    if s < 60 {
        format!("{s}s")
    } else {
        format!("{}m{:02}s", s / 60, s % 60)
    }
}

/// A rate or count with a k/M suffix: `950`, `12.3k`, `4.56M`.
pub fn fmt_si(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcslap_get_time() {
        let out = "Time to start             4 threads:                  0.000 seconds.\n\
                   --------------------------------------------------------------------\n\
                   Time to get           40000 keys by    4 threads:     0.465 seconds.\n\
                   Time total:                                           1.269 seconds.\n";
        assert_eq!(memcslap_get_seconds(out), Some(0.465));
        assert_eq!(memcslap_get_seconds("Time total: 1 seconds."), None);
    }

    #[test]
    fn median_odd_even_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
    }

    #[test]
    fn spread_is_range_over_median() {
        let s = Spread::of(&[90.0, 100.0, 110.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (100.0, 90.0, 110.0, 3));
        assert!((s.spread_pct - 20.0).abs() < 1e-9);
        assert_eq!(Spread::of(&[5.0]).unwrap().spread_pct, 0.0);
        assert!(Spread::of(&[]).is_none());
    }

    #[test]
    fn perf_stats_sections() {
        let text = "\nAggregated stats:\n           TOTAL events:        543\n\
            \x20           LOST events:          3  ( 0.6%)\n\
            \x20    LOST_SAMPLES events:          1  ( 0.2%)\n\
            \x20         SAMPLE events:         42  ( 7.7%)\n\
            lock:contention_begin stats:\n          SAMPLE events:         21\n\
            lock:contention_end stats:\n          SAMPLE events:         20\n";
        assert_eq!(
            parse_perf_stats(text),
            PerfStats {
                begin: 21,
                end: 20,
                lost_records: 4
            }
        );
        assert_eq!(parse_perf_stats(""), PerfStats::default());
    }

    #[test]
    fn bpftrace_output() {
        let text = "Attaching 3 probes...\n\n\n@begin: 66\n@end: 75\n\n\
                    @wait_ns[-1234]: \n[1K, 2K)  3 |@@@|\n@wait_ns[99]: \n";
        let m = parse_bpftrace_scalars(text);
        assert_eq!(m.get("begin"), Some(&66));
        assert_eq!(m.get("end"), Some(&75));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn prometheus_sums_by_label() {
        let text = "# HELP x y\n\
            lockscope_events_lost_total{reason=\"a\"} 2\n\
            lockscope_events_lost_total{reason=\"b\"} 3\n\
            lockscope_events_lost_total_other 7\n\
            lockscope_contention_events_total{event=\"begin\"} 100\n\
            lockscope_contention_events_total{event=\"end\"} 99\n\
            lockscope_traced_seconds 12.5\n";
        assert_eq!(
            prom_sum(text, "lockscope_events_lost_total", &[]),
            Some(5.0)
        );
        assert_eq!(
            prom_sum(
                text,
                "lockscope_contention_events_total",
                &[("event", "begin")]
            ),
            Some(100.0)
        );
        assert_eq!(prom_sum(text, "lockscope_traced_seconds", &[]), Some(12.5));
        assert_eq!(prom_sum(text, "lockscope_missing", &[]), None);
        let by = prom_by_label(text, "lockscope_events_lost_total", "reason");
        assert_eq!(by.len(), 2);
        assert_eq!((by["a"], by["b"]), (2.0, 3.0));
    }

    #[test]
    fn proc_fields() {
        let status = "Name:\tlockscope\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(status_kib(status, "VmHWM"), Some(20480));
        assert_eq!(status_kib(status, "VmRSS"), Some(10240));
        assert_eq!(status_kib(status, "VmSwap"), None);
        let stat = "1234 (a (b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 1";
        assert_eq!(stat_cpu_ticks(stat), Some(325));
        assert_eq!(stat_cpu_ticks("garbage"), None);
    }

    #[test]
    fn prog_fdinfo() {
        let text = "pos:\t0\nflags:\t02000002\nmnt_id:\t16\nino:\t1\nprog_type:\t26\n\
                    prog_jited:\t1\nprog_tag:\tabc\nmemlock:\t4096\nprog_id:\t77\n\
                    run_time_ns:\t123456\nrun_cnt:\t1000\nrecursion_misses:\t0\n";
        assert_eq!(
            parse_prog_fdinfo(text),
            Some(ProgFdInfo {
                prog_id: 77,
                run_time_ns: 123456,
                run_cnt: 1000
            })
        );
        assert_eq!(parse_prog_fdinfo("pos:\t0\n"), None);
        let bpftool = serde_json::json!([{"id": 77, "name": "contention_begin"}, {"id": 3}]);
        assert_eq!(
            prog_names(&bpftool).get(&77).map(String::as_str),
            Some("contention_begin")
        );
    }

    #[test]
    fn workload_line_among_report_lines() {
        let out = "contended  total wait\n{\"not\": 1}\n{\"ops\": 5, \"ops_per_s\": 2.5}\nmore\n";
        assert_eq!(workload_summary(out).unwrap()["ops"], 5);
        assert!(workload_summary("ops: 5\n").is_none());
    }

    #[test]
    fn steal_per_cpu_and_its_largest_burst() {
        let stat = "cpu  100 5 30 1000 7 2 3 9 0 0\n\
                    cpu0 50 2 15 500 3 1 1 4 0 0\n\
                    cpu1 50 3 15 500 4 1 2 5 0 0\n\
                    cpufreq 1\nintr 1 2\n";
        assert_eq!(steal_jiffies_per_cpu(stat), vec![4, 5]);
        assert_eq!(steal_jiffies_per_cpu("intr 1 2\n"), Vec::<u64>::new());
        // CPU 1 loses 10 jiffies in 0.1 s; CPU 0 loses 12, but spread over 0.6 s.
        let samples = vec![
            (0.0, vec![0, 0]),
            (0.2, vec![4, 0]),
            (0.4, vec![8, 0]),
            (0.5, vec![10, 10]),
            (0.6, vec![12, 10]),
        ];
        assert_eq!(max_steal_in_window(&samples, 0.25), Some(10));
        assert_eq!(max_steal_in_window(&samples, 1.0), Some(12));
        assert_eq!(max_steal_in_window(&samples[..1], 0.25), Some(0));
        assert_eq!(max_steal_in_window(&[], 0.25), None);
    }

    #[test]
    fn busy_and_other_cpu() {
        let stat = "cpu  100 5 30 1000 7 2 3 9 0 0\ncpu0 50 2 15 500 3 1 1 4 0 0\n";
        assert_eq!(busy_jiffies(stat), Some(100 + 5 + 30 + 2 + 3));
        assert_eq!(busy_jiffies("intr 1 2\n"), None);
        assert_eq!(
            steal_jiffies("cpu  286927 0 182604 282409 1418 0 2098 312 0 0\n"),
            Some(312)
        );
        assert_eq!(steal_jiffies("cpu  1 2 3 4 5 6 7\n"), None);
        // 10 s on 2 CPUs, 12 s busy of which 7 s the bench's own: 25% others.
        assert!((other_cpu_share(12.0, 7.0, 10.0, 2) - 0.25).abs() < 1e-9);
        // Children's time counted after they were reaped can exceed what /proc/stat saw.
        assert_eq!(other_cpu_share(5.0, 7.0, 10.0, 2), 0.0);
        assert_eq!(other_cpu_share(1.0, 0.0, 0.0, 2), 0.0);
    }

    #[test]
    fn loaded_machine() {
        assert!(machine_is_loaded("11.95 11.69 11.38 3/900 1234", 2));
        assert!(!machine_is_loaded("0.40 0.50 0.60 1/100 5", 2));
        assert!(!machine_is_loaded("", 2));
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_duration(5.4), "5s");
        assert_eq!(fmt_duration(245.0), "4m05s");
        assert_eq!(fmt_si(950.0), "950");
        assert_eq!(fmt_si(12_345.0), "12.3k");
        assert_eq!(fmt_si(4_560_000.0), "4.56M");
        assert_eq!(fmt_si(0.5), "0.50");
    }
}
