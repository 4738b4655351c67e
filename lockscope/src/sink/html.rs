//! One self-contained HTML report: summary, per-lock wait histograms, a contention
//! timeline and contention flame graphs. No network fetches: inline SVG and CSS, and the
//! flame graphs' own script inside sandboxed `srcdoc` frames. Every figure comes from the
//! same [`Recording`] and report rows as the text report.

use std::{collections::BTreeMap, fmt::Write as _};

use lockscope_common::{HIST_BUCKETS, bucket_lower_ns};

use crate::aggregate::{
    LockEntry, Recording,
    rows::{GroupBy, Row, SortKey, rows, sort_rows},
    timeline::Timeline,
};

use super::report::fmt_ns;

/// How many locks get a detail section (histogram, callers).
pub const DETAIL_LOCKS: usize = 20;
/// How many series the timeline draws.
pub const TIMELINE_SERIES: usize = 8;

/// The numbers the HTML shows, computed once from the recording (and unit-tested against
/// the text report's rows).
#[derive(Debug, Clone, PartialEq)]
pub struct HtmlModel {
    pub top: Vec<Row>,
    pub details: Vec<LockDetail>,
    pub flame_groups: BTreeMap<String, Vec<String>>,
    /// Per lock (the busiest with holder stacks): (title, folded holder stacks weighted
    /// by the wait each holder caused, the holder as the root frame).
    pub owner_flames: Vec<(String, Vec<String>)>,
}

/// Locks with an owner-stack flame graph.
pub const OWNER_FLAME_LOCKS: usize = 5;

#[derive(Debug, Clone, PartialEq)]
pub struct LockDetail {
    pub title: String,
    /// (bucket lower bound ns, count) for the used bucket range.
    pub histogram: Vec<(u64, u64)>,
    pub callers: Vec<(String, u64, u64)>,
    /// rwsem acquisition modes of this side: (event, count or n/a, estimate?).
    pub modes: Vec<(String, Option<u64>, bool)>,
    /// Who held the lock: (holder, waits, wait), then the wait whose holder was unknown.
    pub holders: Vec<(String, u64, u64)>,
}

/// Lock types drawn in one flame graph.
pub fn flame_group(lock_type: &str) -> &'static str {
    match lock_type.split(':').next().unwrap_or("") {
        "rwsem" | "pcpu-sem" => "rw semaphores",
        "spinlock" | "rwlock" => "spinlocks and rwlocks",
        "mutex" | "mutex-spin" | "rtmutex" | "rwlock-rt" => "mutexes",
        _ => "other locks",
    }
}

pub fn model(rec: &Recording) -> HtmlModel {
    let mut top = rows(rec, GroupBy::Lock);
    sort_rows(&mut top, SortKey::Total);
    top.truncate(10);

    let mut locks: Vec<&LockEntry> = rec.locks.iter().collect();
    locks.sort_by_key(|l| std::cmp::Reverse(l.stats.total_ns));
    let details = locks
        .iter()
        .take(DETAIL_LOCKS)
        .map(|l| {
            let h = &l.stats.hist;
            let first = h.iter().position(|&n| n > 0).unwrap_or(0);
            let last = h.iter().rposition(|&n| n > 0).unwrap_or(0);
            LockDetail {
                title: format!("{} ({})", l.name, l.lock_type),
                histogram: (first..=last.min(HIST_BUCKETS - 1))
                    .map(|i| (bucket_lower_ns(i), h[i]))
                    .collect(),
                callers: l
                    .callers
                    .iter()
                    .take(10)
                    .map(|c| (c.caller.clone(), c.stats.count, c.stats.total_ns))
                    .collect(),
                holders: crate::aggregate::rows::holder_parts(l)
                    .into_iter()
                    .map(|(who, _, s)| (who, s.count, s.total_ns))
                    .collect(),
                modes: l
                    .events
                    .iter()
                    .flatten()
                    .map(|(name, n)| {
                        let estimate = rec
                            .rwsem_events
                            .as_ref()
                            .and_then(|r| r.kinds.get(name))
                            .is_some_and(|k| k.as_str() == "estimate");
                        (name.clone(), *n, estimate)
                    })
                    .collect(),
            }
        })
        .collect();

    // Folded stacks, outermost frame first, the lock itself as the leaf; weight = wait ns.
    let mut flame_groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in &rec.locks {
        for c in &l.callers {
            if c.stats.total_ns == 0 {
                continue;
            }
            let mut frames: Vec<String> = c.stack.iter().rev().map(|f| fold_safe(f)).collect();
            if frames.is_empty() {
                frames.push("[unknown]".into());
            }
            frames.push(fold_safe(&format!("{} ({})", l.name, l.lock_type)));
            flame_groups
                .entry(flame_group(l.lock_type.name()).to_owned())
                .or_default()
                .push(format!("{} {}", frames.join(";"), c.stats.total_ns));
        }
    }
    let owner_flames = locks
        .iter()
        .filter_map(|l| {
            let lines: Vec<String> = l
                .holders
                .iter()
                .flat_map(|h| &h.owners)
                .filter(|o| !o.stack.is_empty() && o.wait_total_ns > 0)
                .map(|o| {
                    let mut frames = vec![fold_safe(&o.label())];
                    frames.extend(o.stack.iter().rev().map(|f| fold_safe(f)));
                    format!("{} {}", frames.join(";"), o.wait_total_ns)
                })
                .collect();
            (!lines.is_empty()).then(|| (format!("{} ({})", l.name, l.lock_type), lines))
        })
        .take(OWNER_FLAME_LOCKS)
        .collect();
    HtmlModel {
        top,
        details,
        flame_groups,
        owner_flames,
    }
}

/// Folded-stack frames may not contain `;` or end in a number-looking word.
fn fold_safe(s: &str) -> String {
    s.replace(';', ":").replace(' ', "\u{a0}")
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

const CSS: &str = r#"
:root { --bg:#ffffff; --fg:#1d1f21; --muted:#5f6368; --line:#d0d4d9; --bar:#3b78c2; --card:#f5f7fa; }
@media (prefers-color-scheme: dark) {
  :root { --bg:#16181b; --fg:#e3e5e8; --muted:#a0a6ad; --line:#3a3f45; --bar:#6ea8ee; --card:#202327; }
}
body { background:var(--bg); color:var(--fg); font:14px/1.4 system-ui, sans-serif; margin:24px; }
h1 { font-size:22px; } h2 { font-size:18px; margin-top:32px; }
table { border-collapse:collapse; } td, th { padding:3px 10px; border-bottom:1px solid var(--line); }
td.n { text-align:right; font-variant-numeric:tabular-nums; }
.muted { color:var(--muted); } .card { background:var(--card); padding:8px 14px; border-radius:6px; }
svg text { fill:var(--fg); font-size:11px; } svg .axis { stroke:var(--muted); }
svg .bar { fill:var(--bar); }
details { margin:8px 0; } summary { cursor:pointer; font-weight:600; }
iframe.flame { width:100%; height:520px; border:1px solid var(--line); background:#fff; }
"#;

const PALETTE: [&str; TIMELINE_SERIES] = [
    "#3b78c2", "#d9534f", "#5cb85c", "#f0ad4e", "#9b59b6", "#1abc9c", "#e67e22", "#7f8c8d",
];

pub fn render_html(rec: &Recording) -> anyhow::Result<String> {
    let m = model(rec);
    let mut h = String::new();
    let lost = crate::aggregate::stats::saturating_sum(rec.lost.values().copied());
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <meta name=\"color-scheme\" content=\"light dark\">\
         <title>lockscope report: {}</title><style>{CSS}</style></head><body>\n",
        esc(&rec.target)
    );
    let _ = writeln!(
        h,
        "<h1>lockscope report</h1><div class=\"card\" id=\"summary\">\
         <div><b>target</b> {}</div><div><b>kernel</b> {} &nbsp; <b>tier</b> {} &nbsp; \
         <b>duration</b> {:.2} s</div><div><b>waits</b> {} ended, {} in progress at end, \
         {} unpaired</div><div><b>lost</b> {}</div></div>",
        esc(&rec.target),
        esc(&rec.kernel),
        esc(&rec.tier),
        rec.duration_s,
        rec.events.end,
        rec.events.in_progress_at_end,
        rec.events.unpaired_end,
        if lost == 0 {
            "none".to_owned()
        } else {
            esc(&rec
                .lost
                .iter()
                .filter(|(_, v)| **v > 0)
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" "))
        }
    );

    h.push_str("<h2>Top locks by total wait</h2><table id=\"top\"><tr><th>contended</th><th>total wait</th><th>max wait</th><th>avg wait</th><th>p99~</th><th>type</th><th>name</th><th>top caller</th></tr>\n");
    for r in &m.top {
        let s = &r.stats;
        let _ = writeln!(
            h,
            "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            s.count,
            fmt_ns(s.total_ns),
            fmt_ns(s.max_ns),
            fmt_ns(s.avg_ns()),
            fmt_ns(s.percentile_ns(99.0)),
            esc(&r.lock_type),
            esc(&r.name),
            esc(&r.top_caller)
        );
    }
    h.push_str("</table><p class=\"muted\">~ estimated from log2 histograms.</p>\n");

    h.push_str("<h2 id=\"timeline\">Contention over time</h2>\n");
    match &rec.timeline {
        Some(t) if !t.t_s.is_empty() && !t.series.is_empty() => {
            h.push_str(&timeline_svg(t, rec));
        }
        _ => h.push_str(
            "<p class=\"muted\">No timeline in this recording (schema 1 files have none).</p>\n",
        ),
    }

    h.push_str("<h2>Locks</h2>\n");
    for (i, d) in m.details.iter().enumerate() {
        let _ = write!(
            h,
            "<details{}><summary>{}</summary>{}",
            if i < 3 { " open" } else { "" },
            esc(&d.title),
            histogram_svg(&d.histogram)
        );
        h.push_str(&modes_html(&d.modes));
        h.push_str("<table><tr><th>caller</th><th>contended</th><th>total wait</th></tr>");
        for (c, n, t) in &d.callers {
            let _ = write!(
                h,
                "<tr><td>{}</td><td class=\"n\">{n}</td><td class=\"n\">{}</td></tr>",
                esc(c),
                fmt_ns(*t)
            );
        }
        h.push_str("</table>");
        if !d.holders.is_empty() {
            h.push_str(
                "<table><tr><th>holder (the lock word's owner when a wait began)</th>\
                 <th>waits</th><th>wait caused</th></tr>",
            );
            for (who, n, t) in &d.holders {
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td class=\"n\">{n}</td><td class=\"n\">{}</td></tr>",
                    esc(who),
                    fmt_ns(*t)
                );
            }
            h.push_str("</table>");
        }
        h.push_str("</details>\n");
    }

    h.push_str("<h2 id=\"flamegraphs\">Contention flame graphs</h2><p class=\"muted\">Kernel stacks weighted by wait time; the lock is the top frame. Click to zoom, Ctrl-F to search.</p>\n");
    for (group, lines) in &m.flame_groups {
        flame_frame(&mut h, "flame graph", group, lines)?;
    }
    if m.flame_groups.is_empty() {
        h.push_str("<p class=\"muted\">No contention recorded.</p>\n");
    }
    if !m.owner_flames.is_empty() {
        h.push_str("<h2 id=\"ownerstacks\">Holder stacks</h2><p class=\"muted\">What each lock's holders were doing: the holder's kernel stack at the first wait that found it holding, weighted by the wait it caused; the holder is the root frame.</p>\n");
    }
    for (title, lines) in &m.owner_flames {
        flame_frame(&mut h, "holder stacks", title, lines)?;
    }
    h.push_str("</body></html>\n");
    Ok(h)
}

/// One flame graph under its heading, in a sandboxed frame of its own.
fn flame_frame(h: &mut String, kind: &str, title: &str, lines: &[String]) -> anyhow::Result<()> {
    let svg = flame_svg(title, lines)?;
    let _ = writeln!(
        h,
        "<h3>{}</h3><iframe class=\"flame\" sandbox=\"allow-scripts\" title=\"{kind}: {}\" srcdoc=\"{}\"></iframe>",
        esc(title),
        esc(title),
        esc(&svg)
    );
    Ok(())
}

/// Acquisition modes as one stacked bar (events with a count) plus the n/a list.
fn modes_html(modes: &[(String, Option<u64>, bool)]) -> String {
    let known: Vec<_> = modes
        .iter()
        .filter_map(|(n, v, e)| v.filter(|&v| v > 0).map(|v| (n, v, *e)))
        .collect();
    let na: Vec<&str> = modes
        .iter()
        .filter(|(_, v, _)| v.is_none())
        .map(|(n, _, _)| n.as_str())
        .collect();
    if known.is_empty() {
        return format!(
            "<p class=\"muted\">Acquisition modes (steal / fast / spin / queued / handoff / \
             sleep): n/a in this tier{}.</p>",
            if na.is_empty() {
                String::new()
            } else {
                format!(" ({})", esc(&na.join(", ")))
            }
        );
    }
    let total = crate::aggregate::stats::saturating_sum(known.iter().map(|k| k.1));
    let (w, hgt) = (640.0, 22.0);
    let mut s = format!(
        "<svg class=\"modes\" width=\"{w}\" height=\"{}\" role=\"img\" aria-label=\"acquisition modes\">",
        hgt + 20.0 * known.len() as f64 + 6.0
    );
    let mut x = 0.0;
    for (i, (name, v, est)) in known.iter().enumerate() {
        let bw = *v as f64 / total as f64 * w;
        let color = PALETTE[i % PALETTE.len()];
        let label = format!("{name}{}: {v}", if *est { " (estimate)" } else { "" });
        let _ = write!(
            s,
            "<rect x=\"{x:.1}\" y=\"0\" width=\"{bw:.1}\" height=\"{hgt}\" fill=\"{color}\"><title>{}</title></rect>\
             <rect x=\"0\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{color}\"/><text x=\"18\" y=\"{:.1}\">{}</text>",
            esc(&label),
            hgt + 6.0 + 20.0 * i as f64,
            hgt + 16.0 + 20.0 * i as f64,
            esc(&label)
        );
        x += bw;
    }
    s.push_str("</svg>");
    if !na.is_empty() {
        let _ = write!(
            s,
            "<p class=\"muted\">n/a in this tier: {}</p>",
            esc(&na.join(", "))
        );
    }
    s
}

fn flame_svg(group: &str, lines: &[String]) -> anyhow::Result<String> {
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = format!("lock contention: {group}");
    opts.count_name = "ns waited".into();
    opts.deterministic = true;
    opts.hash = true;
    // A fixed drawing width (scaled by CSS): inferno's fluid mode measures the SVG at load,
    // which reads 0 in a frame not laid out yet and logs an error.
    opts.image_width = Some(1200);
    let mut out = Vec::new();
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut out)?;
    let svg = String::from_utf8(out)?;
    // An HTML page around the SVG (its XML prolog dropped), so that the SVG has a laid-out
    // width when the flame graph's script measures it at load.
    let svg = svg.find("<svg").map_or(svg.as_str(), |i| &svg[i..]);
    Ok(format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>html,body{{margin:0}}\
         svg{{display:block;width:100%;height:auto}}</style></head><body>{svg}</body></html>"
    ))
}

fn histogram_svg(hist: &[(u64, u64)]) -> String {
    let (w, hgt, pad) = (640.0, 160.0, 28.0);
    let max = hist.iter().map(|&(_, n)| n).max().unwrap_or(0).max(1) as f64;
    let bw = (w - pad) / hist.len().max(1) as f64;
    let mut s = format!(
        "<svg class=\"hist\" width=\"{w}\" height=\"{}\" role=\"img\" aria-label=\"wait time histogram\">",
        hgt + 2.0 * pad
    );
    let _ = write!(
        s,
        "<line class=\"axis\" x1=\"{pad}\" y1=\"{y}\" x2=\"{w}\" y2=\"{y}\"/>",
        y = hgt + pad
    );
    for (i, &(lower, n)) in hist.iter().enumerate() {
        let bh = (n as f64 / max) * hgt;
        let x = pad + i as f64 * bw;
        let _ = write!(
            s,
            "<rect class=\"bar\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{bh:.1}\"><title>{} - {}: {n} waits</title></rect>",
            hgt + pad - bh,
            (bw - 2.0).max(1.0),
            fmt_ns(lower),
            fmt_ns(lower.saturating_mul(2).max(2)),
        );
        if hist.len() <= 16 || i % 2 == 0 {
            let _ = write!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                x + bw / 2.0,
                hgt + pad + 14.0,
                fmt_ns(lower).replace(".00", "")
            );
        }
        if n > 0 {
            let _ = write!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{n}</text>",
                x + bw / 2.0,
                hgt + pad - bh - 3.0
            );
        }
    }
    s.push_str("</svg>");
    s
}

fn timeline_svg(t: &Timeline, rec: &Recording) -> String {
    let (w, hgt, left, pad) = (900.0, 260.0, 70.0, 24.0);
    let tmax = t.t_s.last().copied().unwrap_or(1.0).max(1e-9);
    let series: Vec<_> = t.series.iter().take(TIMELINE_SERIES).collect();
    // Wait time per second of each interval, in ms/s.
    let rate = |s: &crate::aggregate::timeline::Series, i: usize| -> f64 {
        let dt = if i == 0 {
            t.t_s[0]
        } else {
            t.t_s[i] - t.t_s[i - 1]
        };
        if dt <= 0.0 {
            0.0
        } else {
            s.wait_ns[i] as f64 / 1e6 / dt
        }
    };
    let ymax = series
        .iter()
        .flat_map(|s| (0..t.t_s.len()).map(move |i| rate(s, i)))
        .fold(0.0f64, f64::max)
        .max(1e-6);
    let x = |ts: f64| left + ts / tmax * (w - left - pad);
    let y = |v: f64| pad + hgt - v / ymax * hgt;
    let mut s = format!(
        "<svg class=\"timeline\" width=\"{w}\" height=\"{}\" role=\"img\" aria-label=\"contention timeline\">",
        hgt + 2.0 * pad + 20.0 * series.len() as f64
    );
    let _ = write!(
        s,
        "<line class=\"axis\" x1=\"{left}\" y1=\"{b}\" x2=\"{}\" y2=\"{b}\"/><line class=\"axis\" x1=\"{left}\" y1=\"{pad}\" x2=\"{left}\" y2=\"{b}\"/>\
         <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.1} ms/s</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>\
         <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.1} s</text>",
        w - pad,
        left - 4.0,
        pad + 10.0,
        ymax,
        left - 4.0,
        pad + hgt,
        w - pad,
        pad + hgt + 14.0,
        tmax,
        b = pad + hgt
    );
    let names: BTreeMap<(String, String), String> = rec
        .locks
        .iter()
        .map(|l| ((l.addr.clone(), l.lock_type.to_string()), l.name.clone()))
        .collect();
    for (k, se) in series.iter().enumerate() {
        let pts: Vec<String> = (0..t.t_s.len())
            .map(|i| format!("{:.1},{:.1}", x(t.t_s[i]), y(rate(se, i))))
            .collect();
        let color = PALETTE[k % PALETTE.len()];
        let label = if se.addr == "other" {
            "other locks".to_owned()
        } else {
            let name = names
                .get(&(se.addr.clone(), se.lock_type.clone()))
                .cloned()
                .unwrap_or_else(|| se.addr.clone());
            format!("{name} ({})", se.lock_type)
        };
        let _ = write!(
            s,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"><title>{}</title></polyline>\
             <rect x=\"{left}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{color}\"/><text x=\"{}\" y=\"{:.1}\">{}</text>",
            pts.join(" "),
            esc(&label),
            pad + hgt + 24.0 + 20.0 * k as f64,
            left + 18.0,
            pad + hgt + 34.0 + 20.0 * k as f64,
            esc(&label)
        );
    }
    let marks = rt_marks(rec);
    for m in marks.iter().filter(|m| m.t_s <= tmax) {
        let _ = write!(
            s,
            "<line class=\"{}\" x1=\"{x:.1}\" y1=\"{pad}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"1.5\" stroke-dasharray=\"4,2\"><title>{}</title></line>",
            m.class,
            pad + hgt,
            if m.class == "spike" {
                "#d62728"
            } else {
                "#ff7f0e"
            },
            esc(&m.label),
            x = x(m.t_s),
        );
    }
    s.push_str("</svg><p class=\"muted\">Wait time per second of each interval (ms of waiting per s), per lock.");
    if rec.latency_spikes.is_some() || rec.starvation_episodes.is_some() {
        let spikes = marks.iter().filter(|m| m.class == "spike").count();
        let _ = write!(
            s,
            " Dashed lines: {spikes} latency spikes (red) and {} starvation episodes (orange); hover for details.",
            marks.len() - spikes
        );
    }
    s.push_str("</p>\n");
    s
}

/// A latency spike or starvation episode placed on the timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct RtMark {
    /// Seconds since recording started.
    pub t_s: f64,
    /// `spike` or `episode`.
    pub class: &'static str,
    pub label: String,
}

/// Spikes and episodes with a known time, in seconds since the recording started (from
/// the kernel monotonic clock at start, `rt_summary.start_ktime_ns`).
pub fn rt_marks(rec: &Recording) -> Vec<RtMark> {
    let Some(start) = rec
        .rt_summary
        .as_ref()
        .map(|s| s.start_ktime_ns)
        .filter(|&s| s > 0)
    else {
        return Vec::new();
    };
    let at = |ts: u64| (ts >= start && ts > 0).then(|| (ts - start) as f64 / 1e9);
    let mut marks: Vec<RtMark> = Vec::new();
    for sp in rec.latency_spikes.iter().flatten() {
        if let Some(t_s) = at(sp.ts_ns) {
            marks.push(RtMark {
                t_s,
                class: "spike",
                label: format!(
                    "latency {} on cpu {} ({:?}), {}{}",
                    fmt_ns(sp.latency_ns),
                    sp.cpu,
                    sp.source,
                    sp.task.comm,
                    if sp.explained {
                        format!(": explained by {}", sp.overlaps[0].lock)
                    } else if sp.late_timer_on_idle_cpu() {
                        ": a late timer on an idle CPU".to_owned()
                    } else if sp.overlaps.is_empty() {
                        ": no lock activity overlapped".to_owned()
                    } else {
                        ": not explained".to_owned()
                    }
                ),
            });
        }
    }
    for e in rec.starvation_episodes.iter().flatten() {
        if let Some(t_s) = at(e.ts_ns) {
            marks.push(RtMark {
                t_s,
                class: "episode",
                label: format!(
                    "{}starvation on {} (cpu {}): wait {}, {} foreign acquisitions",
                    if e.probable { "probable " } else { "" },
                    e.lock,
                    e.cpu,
                    fmt_ns(e.wait_ns),
                    e.foreign_acquisitions
                ),
            });
        }
    }
    marks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::{
        recording::tests::sample_recording,
        timeline::{LockTotals, TimelineBuilder},
    };
    use crate::decode::LockType;

    fn with_timeline() -> Recording {
        let mut rec = sample_recording();
        let mut b = TimelineBuilder::new(1.0);
        let mmap = 0xffff_8880_1234_5678u64;
        let tot = |c, w| LockTotals {
            addr: mmap,
            lock_type: LockType::RwsemWrite,
            contended: c,
            wait_ns: w,
        };
        b.sample(1.0, &[tot(1, 50_000)]);
        b.sample(2.0, &[tot(3, 150_000)]);
        rec.timeline = Some(b.finish());
        rec
    }

    #[test]
    fn model_matches_the_text_report_rows() {
        let rec = sample_recording();
        let m = model(&rec);
        let mut text_rows = rows(&rec, GroupBy::Lock);
        sort_rows(&mut text_rows, SortKey::Total);
        assert_eq!(m.top, text_rows);
        assert_eq!(m.details.len(), rec.locks.len());
        let w = &m.details[0];
        assert_eq!(w.title, "mmap_lock of lockscope[100] (rwsem:W)");
        let hist_total: u64 = w.histogram.iter().map(|&(_, n)| n).sum();
        assert_eq!(hist_total, rec.locks[0].stats.count);
        assert_eq!(w.callers[0].0, "vm_mmap_pgoff+0x30");
    }

    #[test]
    fn flame_lines_are_folded_and_weighted_by_wait() {
        let m = model(&sample_recording());
        let rw = &m.flame_groups["rw semaphores"];
        assert!(rw.contains(
            &"vm_mmap_pgoff+0x30;down_write_killable+0x20;mmap_lock\u{a0}of\u{a0}lockscope[100]\u{a0}(rwsem:W) 150000"
                .to_string()
        ));
        let total: u64 = m
            .flame_groups
            .values()
            .flatten()
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum();
        let expect: u64 = sample_recording()
            .locks
            .iter()
            .map(|l| l.stats.total_ns)
            .sum();
        assert_eq!(total, expect);
    }

    #[test]
    fn page_is_self_contained_with_all_parts() {
        let html = render_html(&with_timeline()).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(!html.contains("http://") || !html.contains("src=\"http"));
        assert!(!html.contains("<script src"));
        assert!(html.contains("class=\"hist\""));
        assert!(html.contains("class=\"timeline\""));
        assert!(html.contains("<polyline"));
        assert!(html.contains("class=\"flame\""));
        assert!(html.contains("150.00 us"));
        assert!(html.contains("prefers-color-scheme: dark"));
    }

    #[test]
    fn holders_are_listed_per_lock_with_the_unknown_wait() {
        use crate::aggregate::model::{HolderEntry, Holders};
        let mut rec = with_timeline();
        let l = &mut rec.locks[0];
        l.holders = Some(Holders {
            owners: vec![HolderEntry {
                comm: "holder<long>".into(),
                pid: 7,
                tid: 8,
                contended: 2,
                wait_total_ns: 1_000,
                stack: vec!["io_schedule+0x12".into(), "pipe_write+0x40".into()],
            }],
            owner_unknown_wait_ns: 500,
            owners_omitted_wait_ns: 0,
        });
        let m = model(&rec);
        let d = m
            .details
            .iter()
            .find(|d| !d.holders.is_empty())
            .expect("a lock with holders");
        assert_eq!(d.holders[0], ("holder<long>[7]/8".to_owned(), 2, 1_000));
        assert_eq!(d.holders[1].0, crate::aggregate::rows::UNKNOWN_HOLDER);
        // The holder's stack, outermost first under the holder, weighted by its wait.
        let (_, lines) = &m.owner_flames[0];
        assert_eq!(
            lines,
            &["holder<long>[7]/8;pipe_write+0x40;io_schedule+0x12 1000".to_owned()]
        );
        let html = render_html(&rec).unwrap();
        assert!(html.contains("id=\"ownerstacks\""));
        assert_eq!(d.holders[1].2, 500);
        let html = render_html(&rec).unwrap();
        assert!(html.contains("holder&lt;long&gt;[7]/8"), "escaped");
        assert!(html.contains("wait caused"));
    }

    #[test]
    fn acquisition_modes_draw_known_counts_and_list_na() {
        let modes = vec![
            ("rlock_steal".to_owned(), Some(30), false),
            ("rlock".to_owned(), Some(10), false),
            ("rlock_handoff".to_owned(), Some(2), true),
            ("rlock_fast".to_owned(), None, false),
        ];
        let h = modes_html(&modes);
        assert!(h.contains("class=\"modes\""));
        assert!(h.contains("rlock_steal: 30"));
        assert!(h.contains("rlock_handoff (estimate): 2"));
        assert!(h.contains("n/a in this tier: rlock_fast"));
        let none = modes_html(&[("rlock_fast".to_owned(), None, false)]);
        assert!(none.contains("n/a in this tier (rlock_fast)"));
    }

    #[test]
    fn spikes_and_episodes_are_marked_on_the_timeline() {
        use crate::aggregate::{
            pi_lock::RtSummary,
            rt::{EpisodeKind, LatencySpike, SpikeSource, StarvationEpisode, TaskRef},
        };
        let mut rec = with_timeline();
        let start = 5_000_000_000;
        rec.rt_summary = Some(RtSummary {
            start_ktime_ns: start,
            ..Default::default()
        });
        let task = TaskRef {
            pid: 1,
            tid: Some(2),
            comm: "cyclictest".into(),
            stack: Vec::new(),
        };
        let spike = |ts| LatencySpike {
            cpu: 0,
            ts_ns: ts,
            latency_ns: 150_000,
            source: SpikeSource::Lockscope,
            task: task.clone(),
            overlaps: Vec::new(),
            explained: false,
            timer_late_ns: None,
            cpu_idle: None,
        };
        // One inside the run, one with no time (cyclictest without a match): not drawn.
        rec.latency_spikes = Some(vec![spike(start + 500_000_000), spike(0)]);
        rec.starvation_episodes = Some(vec![StarvationEpisode {
            kind: EpisodeKind::Starvation,
            ts_ns: start + 1_000_000_000,
            cpu: 1,
            lock: "pi_lock of stress-ng[9]".into(),
            addr: "0x10".into(),
            waiter: task.clone(),
            wait_ns: 30_000,
            foreign_acquisitions: 12,
            acquirers: Vec::new(),
            irqs_off: None,
            probable: true,
            tier: "tracepoint".into(),
        }]);
        let marks = rt_marks(&rec);
        assert_eq!(marks.len(), 2);
        assert_eq!((marks[0].t_s, marks[0].class), (0.5, "spike"));
        assert!(marks[0].label.contains("no lock activity overlapped"));
        assert_eq!((marks[1].t_s, marks[1].class), (1.0, "episode"));
        let html = render_html(&rec).unwrap();
        assert_eq!(html.matches("<line class=\"spike\"").count(), 1);
        assert_eq!(html.matches("<line class=\"episode\"").count(), 1);
        assert!(html.contains("1 latency spikes (red) and 1 starvation episodes"));
        // Without the start time nothing can be placed.
        rec.rt_summary = None;
        assert!(rt_marks(&rec).is_empty());
    }

    #[test]
    fn escaping() {
        assert_eq!(esc("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
        assert_eq!(fold_safe("a;b c"), "a:b\u{a0}c");
    }
}
