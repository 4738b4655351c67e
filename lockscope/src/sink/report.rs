//! Text, JSON and CSV renderings of a recording. `record` and `report` both end here.

use std::fmt::Write as _;

use clap::ValueEnum;

use crate::aggregate::{
    Recording,
    rows::{GroupBy, Row, SortKey, rows, sort_rows},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    /// Aligned table, like `perf lock contention`.
    #[default]
    Table,
    /// The recording itself (schema lockscope.report/2).
    Json,
    /// One line per row, header first.
    Csv,
    /// One self-contained page: histograms, timeline, flame graphs (use with -o).
    Html,
    /// Folded stacks (`frame;...;lock value`) for inferno, flamegraph.pl, speedscope.
    Folded,
    /// Gzipped pprof profile.proto (contentions/count, delay/nanoseconds) for go tool
    /// pprof, Pyroscope, Parca, Grafana (binary: use with -o).
    Pprof,
}

#[derive(Debug, Clone, Copy)]
pub struct ReportOptions {
    pub format: Format,
    pub by: GroupBy,
    pub sort: SortKey,
    /// At most this many rows (0: all).
    pub limit: usize,
    /// What a folded stack's value counts.
    pub weight: super::folded::Weight,
}

impl Default for ReportOptions {
    fn default() -> Self {
        Self {
            format: Format::Table,
            by: GroupBy::Lock,
            sort: SortKey::Total,
            limit: 20,
            weight: super::folded::Weight::Wait,
        }
    }
}

pub fn render(rec: &Recording, opts: &ReportOptions) -> anyhow::Result<String> {
    match opts.format {
        Format::Json => return Ok(serde_json::to_string_pretty(rec)? + "\n"),
        Format::Html => return super::html::render_html(rec),
        Format::Folded => return Ok(super::folded::folded(rec, opts.weight)),
        Format::Pprof => anyhow::bail!("the pprof format is binary: write it with -o FILE"),
        _ => {}
    }
    let mut r = rows(rec, opts.by);
    sort_rows(&mut r, opts.sort);
    let shown = if opts.limit == 0 {
        r.len()
    } else {
        opts.limit.min(r.len())
    };
    Ok(match opts.format {
        Format::Csv => csv(rec, &r[..shown], opts.by),
        // Names come from the kernel, traced programs or a file: never raw to a terminal.
        _ => super::escape::terminal_safe(
            &(table(rec, &r, shown, opts.by)
                + &SECTIONS
                    .iter()
                    .map(|(_, section)| section(rec, opts.limit))
                    .collect::<String>()),
        ),
    })
}

pub use crate::units::fmt_ns;

/// A family's section of the text report: (recording, row limit) -> text.
pub type Section = fn(&Recording, usize) -> String;

/// The sections that follow the table: (probe family, as `family::Families` names it;
/// its section of a recording's text report), in the registry's order. A family whose
/// data needs a section of its own adds one line here.
pub const SECTIONS: [(&str, Section); 3] = [
    ("rwsem-deep", super::events::events_table),
    ("rt-latency", super::rt::rt_sections),
    ("spin-deep", super::spin::spin_table),
];

fn name_header(by: GroupBy) -> &'static str {
    match by {
        GroupBy::Lock => "name",
        GroupBy::Caller => "caller",
        GroupBy::Task => "task",
        GroupBy::Type => "type",
        GroupBy::Cgroup => "cgroup",
        GroupBy::Owner => "holder",
    }
}

fn table(rec: &Recording, rows: &[Row], shown: usize, by: GroupBy) -> String {
    let mut out = String::new();
    let headers = [
        "contended",
        "total wait",
        "max wait",
        "avg wait",
        "p50~",
        "p99~",
        "type",
        name_header(by),
        match by {
            GroupBy::Caller => "",
            GroupBy::Owner => "top lock",
            _ => "top caller",
        },
    ];
    // Holders are aggregated by count and total only.
    let owner = by == GroupBy::Owner;
    let or_dash = |v: u64| if owner { "-".to_owned() } else { fmt_ns(v) };
    let cells: Vec<[String; 9]> = rows[..shown]
        .iter()
        .map(|r| {
            let s = &r.stats;
            [
                s.count.to_string(),
                fmt_ns(s.total_ns),
                or_dash(s.max_ns),
                fmt_ns(s.avg_ns()),
                or_dash(s.percentile_ns(50.0)),
                or_dash(s.percentile_ns(99.0)),
                r.lock_type.clone(),
                r.name.clone(),
                if by == GroupBy::Caller {
                    String::new()
                } else {
                    r.top_caller.clone()
                },
            ]
        })
        .collect();
    let mut width = headers.map(str::len);
    for row in &cells {
        for (w, c) in width.iter_mut().zip(row.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |out: &mut String, cols: &[&str]| {
        let mut l = String::new();
        for (i, c) in cols.iter().enumerate() {
            // Numbers right-aligned, text left-aligned; the last column is not padded.
            if i < 6 {
                let _ = write!(l, "{c:>w$}  ", w = width[i]);
            } else if i + 1 < cols.len() {
                let _ = write!(l, "{c:<w$}  ", w = width[i]);
            } else {
                l.push_str(c);
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&mut out, &headers);
    for row in &cells {
        line(
            &mut out,
            &row.iter().map(String::as_str).collect::<Vec<_>>(),
        );
    }
    if rows.is_empty() && owner {
        out.push_str(
            "(no wait found its holder: holders are recorded for mutex, rwsem and rtmutex \
             waits, by a lockscope that records them)\n",
        );
    } else if rows.is_empty() {
        out.push_str("(no lock contention recorded)\n");
    } else if shown < rows.len() {
        let _ = writeln!(
            out,
            "... {} more rows (use -n 0 to show all)",
            rows.len() - shown
        );
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "tier: {}  duration: {:.2} s  target: {}  kernel: {}",
        rec.tier, rec.duration_s, rec.target, rec.kernel
    );
    let e = &rec.events;
    let _ = writeln!(
        out,
        "events: {} begin, {} end, {} in progress at end, {} unpaired end, {} unpaired begin, {} filtered by type",
        e.begin, e.end, e.in_progress_at_end, e.unpaired_end, e.unpaired_begin, e.type_filtered
    );
    if let Some(f) = rec.futex_events.as_ref().filter(|f| f.blocking) {
        let _ = writeln!(
            out,
            "futex: blocking mode: {} sleeps in futex waits and PI locks; user-space lock rows \
             count sleeps, timed from the switch out to the switch in (wakes, EAGAIN returns \
             and calls that did not block are not seen; --futex-mode calls counts every call)",
            f.exit
        );
    }
    if e.stack_not_sampled > 0 {
        let _ = writeln!(
            out,
            "callers: {} waits timed without a kernel stack walk (~{:.1}% of the {} that \
             ended; per-CPU stack budget: --stack-rate): callers marked ~ are figures of the \
             other waits; every lock, task and type total is exact",
            e.stack_not_sampled,
            100.0 * e.stack_not_sampled as f64 / e.end.max(1) as f64,
            e.end
        );
    }
    let lost: Vec<String> = rec.lost.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let total_lost = crate::aggregate::stats::saturating_sum(rec.lost.values().copied());
    let _ = writeln!(
        out,
        "lost: {} ({})",
        if total_lost == 0 {
            "none".to_owned()
        } else {
            total_lost.to_string()
        },
        lost.join(" ")
    );
    out.push_str("~ estimated from log2 histograms (true value within the same power of two)\n");
    out
}

fn csv_field(s: &str) -> String {
    super::escape::csv_cell(s)
}

/// By lock, the rwsem lock events follow as one column each (empty: n/a).
fn csv(rec: &Recording, rows: &[Row], by: GroupBy) -> String {
    let events = by == GroupBy::Lock;
    let mut out = format!(
        "{},type,addr,contended,failed,wait_total_ns,wait_max_ns,wait_min_ns,wait_avg_ns,wait_p50_ns_est,wait_p99_ns_est,top_caller{}\n",
        name_header(by),
        if events {
            super::events::csv_header()
        } else {
            String::new()
        }
    );
    // Holders are aggregated by count and total only: the other cells stay empty.
    let owner = by == GroupBy::Owner;
    let cell = |v: u64| if owner { String::new() } else { v.to_string() };
    for r in rows {
        let s = &r.stats;
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{}{}",
            csv_field(&r.name),
            csv_field(&r.lock_type),
            r.addr,
            s.count,
            cell(s.failed),
            s.total_ns,
            cell(s.max_ns),
            cell(s.min_ns),
            s.avg_ns(),
            cell(s.percentile_ns(50.0)),
            cell(s.percentile_ns(99.0)),
            csv_field(&r.top_caller),
            if events {
                super::events::csv_cells(rec, &r.addr, &r.lock_type)
            } else {
                String::new()
            }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::recording::tests::sample_recording;

    #[test]
    fn durations_pick_a_unit() {
        assert_eq!(fmt_ns(999), "999 ns");
        assert_eq!(fmt_ns(1_500), "1.50 us");
        assert_eq!(fmt_ns(2_340_000), "2.34 ms");
        assert_eq!(fmt_ns(3_000_000_000), "3.00 s");
    }

    #[test]
    fn table_mirrors_perf_and_states_tier_and_loss() {
        let t = render(&sample_recording(), &ReportOptions::default()).unwrap();
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].starts_with("contended  total wait"),
            "{}",
            lines[0]
        );
        assert!(lines[1].contains("rwsem:W") && lines[1].contains("mmap_lock of lockscope[100]"));
        assert!(lines[1].contains("150.00 us"), "{}", lines[1]);
        assert!(lines[1].trim_start().starts_with('3'));
        assert!(t.contains("tier: tracepoint"));
        assert!(
            t.contains("lost: 4 (") && t.contains("unknown_flags=4"),
            "{t}"
        );
    }

    #[test]
    fn blocking_futex_mode_is_said_under_the_table() {
        let mut rec = sample_recording();
        let plain = render(&rec, &ReportOptions::default()).unwrap();
        assert!(!plain.contains("blocking mode"));
        rec.futex_events = Some(crate::aggregate::futex::FutexEvents {
            enter: 9,
            exit: 7,
            blocking: true,
            ..Default::default()
        });
        let t = render(&rec, &ReportOptions::default()).unwrap();
        assert!(
            t.contains("futex: blocking mode: 7 sleeps in futex waits"),
            "{t}"
        );
    }

    #[test]
    fn limit_and_empty() {
        let rec = sample_recording();
        let opts = ReportOptions {
            limit: 1,
            ..Default::default()
        };
        let t = render(&rec, &opts).unwrap();
        assert!(t.contains("... 2 more rows"));
        let mut empty = rec.clone();
        empty.locks.clear();
        let t = render(&empty, &ReportOptions::default()).unwrap();
        assert!(t.contains("(no lock contention recorded)"));
    }

    #[test]
    fn csv_has_exact_numbers_and_quotes() {
        let opts = ReportOptions {
            format: Format::Csv,
            ..Default::default()
        };
        let c = render(&sample_recording(), &opts).unwrap();
        let mut lines = c.lines();
        assert!(
            lines
                .next()
                .unwrap()
                .starts_with("name,type,addr,contended")
        );
        let first: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(first[1], "rwsem:W");
        assert_eq!(first[3], "3");
        assert_eq!(first[5], "150000");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"x\""), "\"say \"\"x\"\"\"");
    }

    #[test]
    fn json_is_the_recording() {
        let rec = sample_recording();
        let opts = ReportOptions {
            format: Format::Json,
            ..Default::default()
        };
        let j = render(&rec, &opts).unwrap();
        assert_eq!(Recording::from_json(&j).unwrap(), rec);
    }
}
