//! Text sections of the real-time view: task `pi_lock`s with their `sched_wait_task`
//! proxy acquisitions, latency spikes with the lock activity in their window, and
//! starvation episodes.

use std::fmt::Write as _;

use super::report::fmt_ns;
use crate::aggregate::{
    Recording,
    correlate::EXPLAINED_SHARE,
    rt::{LatencySpike, SpikeSource, TaskRef},
};

/// All three sections (each only when it has something to say or was asked for).
pub fn rt_sections(rec: &Recording, limit: usize) -> String {
    let mut out = pi_lock_section(rec, limit);
    if let Some(spikes) = &rec.latency_spikes {
        out.push_str(&spike_section(rec, spikes, limit));
    }
    if let Some(eps) = &rec.starvation_episodes {
        out.push_str(&episode_section(rec, eps, limit));
    }
    out
}

fn shown(n: usize, limit: usize) -> usize {
    if limit == 0 { n } else { n.min(limit) }
}

fn who(t: &TaskRef) -> String {
    match t.tid {
        Some(tid) if tid != t.pid => format!("{}[{}] tid {tid}", t.comm, t.pid),
        _ => format!("{}[{}]", t.comm, t.pid),
    }
}

fn pi_lock_section(rec: &Recording, limit: usize) -> String {
    let mut locks: Vec<_> = rec
        .locks
        .iter()
        .filter(|l| l.owner.as_ref().is_some_and(|o| o.field == "pi_lock") || l.wait_task.is_some())
        .collect();
    if locks.is_empty() {
        return String::new();
    }
    locks.sort_by_key(|l| {
        std::cmp::Reverse((
            l.wait_task.as_ref().map_or(0, |w| w.acquisitions),
            l.stats.count,
        ))
    });
    let mut out = String::from(
        "\npi_lock of tasks: contention waits (queued slowpath only: an undercount) and \
         sched_wait_task proxy acquisitions (each one acquisition of the task's pi_lock by \
         a task in wait_task_inactive)\n",
    );
    let _ = writeln!(
        out,
        "{:>12}  {:>9}  {:>11}  {:>10}  {:<32}  top proxy waiter",
        "proxy acq", "waits", "total wait", "max wait", "name"
    );
    for l in &locks[..shown(locks.len(), limit)] {
        let (acq, top) = match &l.wait_task {
            Some(w) => (
                w.acquisitions.to_string(),
                w.waiters
                    .first()
                    .map(|x| {
                        format!(
                            "{}[{}] tid {} on cpu {}: {}",
                            x.comm, x.pid, x.tid, x.cpu, x.acquisitions
                        )
                    })
                    .unwrap_or_default(),
            ),
            None => ("0".to_owned(), String::new()),
        };
        let _ = writeln!(
            out,
            "{:>12}  {:>9}  {:>11}  {:>10}  {:<32}  {}",
            acq,
            l.stats.count,
            fmt_ns(l.stats.total_ns),
            fmt_ns(l.stats.max_ns),
            l.name,
            top
        );
    }
    if locks.len() > shown(locks.len(), limit) {
        let _ = writeln!(out, "... {} more", locks.len() - limit);
    }
    out
}

fn spike_section(rec: &Recording, spikes: &[LatencySpike], limit: usize) -> String {
    let mut out = String::from("\nLatency spikes");
    if let Some(s) = &rec.rt_summary {
        let _ = write!(
            out,
            " (threshold {}; {} real-time wakeups timed by lockscope, {} over the threshold; \
             {} cyclictest threads over it)",
            fmt_ns(s.latency_threshold_ns),
            s.wakeups_timed,
            s.spikes_over_threshold,
            s.cyclictest_threads
        );
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "source lockscope: from the thread's timer being due to the thread switched in on \
         its CPU; source cyclictest: its own per-thread max (window placed at lockscope's \
         largest spike of that thread). Explained: the overlapping lock activity covers at \
         least {:.0}% of the window. Timer late: due to the timer's interrupt handler \
         (idle: the CPU was halted then).",
        EXPLAINED_SHARE * 100.0
    );
    if spikes.is_empty() {
        out.push_str("(no latency spike over the threshold)\n");
        return out;
    }
    let mut order: Vec<&LatencySpike> = spikes.iter().collect();
    order.sort_by_key(|s| std::cmp::Reverse(s.latency_ns));
    let explained = spikes.iter().filter(|s| s.explained).count();
    let _ = writeln!(
        out,
        "{} spikes, {} explained by lock activity, {} with no lock activity overlapping",
        spikes.len(),
        explained,
        spikes.iter().filter(|s| s.overlaps.is_empty()).count()
    );
    let idle = spikes.iter().filter(|s| s.late_timer_on_idle_cpu()).count();
    if idle > 0 {
        let _ = writeln!(
            out,
            "{idle} mostly a late timer on an idle CPU: the halted CPU took its timer \
             interrupt late (a hypervisor not running the virtual CPU, a deep C-state, \
             firmware), not a lock or a task on that CPU"
        );
    }
    for s in &order[..shown(order.len(), limit)] {
        let source = match s.source {
            SpikeSource::Lockscope => "lockscope",
            SpikeSource::Cyclictest => "cyclictest",
        };
        let when = if s.ts_ns == 0 {
            "time unknown".to_owned()
        } else {
            format!("t={:.6} s", s.ts_ns as f64 / 1e9)
        };
        let late = match (s.timer_late_ns, s.cpu_idle) {
            (Some(l), idle) => format!(
                " (timer late {}{}, then {} to run)",
                fmt_ns(l),
                if idle == Some(true) { ", cpu idle" } else { "" },
                fmt_ns(s.latency_ns.saturating_sub(l))
            ),
            (None, _) => String::new(),
        };
        let _ = writeln!(
            out,
            "  cpu {}  {}  latency {}{}  source {}  task {}  {}",
            s.cpu,
            when,
            fmt_ns(s.latency_ns),
            late,
            source,
            who(&s.task),
            if s.explained {
                "explained"
            } else {
                "not explained"
            }
        );
        if s.ts_ns == 0 {
            out.push_str("      not correlated: cyclictest gives no time and lockscope saw no spike of this thread\n");
        } else if s.overlaps.is_empty() {
            out.push_str("      no lock activity overlapped\n");
        }
        for o in s.overlaps.iter().take(5) {
            let _ = writeln!(
                out,
                "      {:<20} {:<36} overlap {}{}",
                o.kind,
                o.lock,
                fmt_ns(o.overlap_ns),
                o.task
                    .as_ref()
                    .map(|t| format!("  by {}", who(t)))
                    .unwrap_or_default()
            );
        }
        if s.overlaps.len() > 5 {
            let _ = writeln!(out, "      ... {} more overlaps", s.overlaps.len() - 5);
        }
    }
    if order.len() > shown(order.len(), limit) {
        let _ = writeln!(
            out,
            "... {} more spikes (use -n 0 to show all)",
            order.len() - limit
        );
    }
    out
}

fn episode_section(
    rec: &Recording,
    eps: &[crate::aggregate::rt::StarvationEpisode],
    limit: usize,
) -> String {
    let mut out = String::from("\nStarvation episodes");
    if let Some(s) = &rec.rt_summary {
        let _ = write!(
            out,
            " (a spinning pi_lock wait of at least {} while other CPUs acquired the lock at \
             least {} times; probable: inferred from tracepoint proxies)",
            fmt_ns(s.starvation_threshold_ns),
            s.starvation_acquisitions
        );
    }
    out.push('\n');
    if eps.is_empty() {
        out.push_str("(none)\n");
        return out;
    }
    for e in &eps[..shown(eps.len(), limit)] {
        let acq: Vec<String> = e
            .acquirers
            .iter()
            .map(|a| {
                format!(
                    "cpu {} x{}{}",
                    a.cpu,
                    a.count,
                    a.task
                        .tid
                        .map(|t| format!(" (last tid {t})"))
                        .unwrap_or_default()
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "  {}{} cpu {}  t={:.6} s  {}  waiter {}  wait {}  foreign acquisitions {}: {}  tier {}",
            if e.probable { "probable " } else { "" },
            match e.kind {
                crate::aggregate::rt::EpisodeKind::Starvation => "starvation",
                crate::aggregate::rt::EpisodeKind::LongHold => "long-hold",
            },
            e.cpu,
            e.ts_ns as f64 / 1e9,
            e.lock,
            who(&e.waiter),
            fmt_ns(e.wait_ns),
            e.foreign_acquisitions,
            acq.join(", "),
            e.tier
        );
    }
    if eps.len() > shown(eps.len(), limit) {
        let _ = writeln!(out, "... {} more episodes", eps.len() - limit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::{
        pi_lock::RtSummary,
        recording::tests::sample_recording,
        rt::{Overlap, StarvationEpisode},
    };

    fn task() -> TaskRef {
        TaskRef {
            pid: 10,
            tid: Some(11),
            comm: "cyclictest".into(),
            stack: Vec::new(),
        }
    }

    #[test]
    fn spikes_say_what_overlapped_or_that_nothing_did() {
        let mut rec = sample_recording();
        rec.rt_summary = Some(RtSummary {
            latency_threshold_ns: 100_000,
            wakeups_timed: 500,
            spikes_over_threshold: 2,
            ..Default::default()
        });
        rec.latency_spikes = Some(vec![
            LatencySpike {
                cpu: 1,
                ts_ns: 2_000_000_000,
                latency_ns: 300_000,
                source: SpikeSource::Lockscope,
                task: task(),
                overlaps: vec![Overlap {
                    lock: "pi_lock of stress-ng[7]".into(),
                    addr: None,
                    kind: "wait-task".into(),
                    task: None,
                    overlap_ns: 200_000,
                }],
                explained: true,
                timer_late_ns: Some(20_000),
                cpu_idle: Some(false),
            },
            LatencySpike {
                cpu: 0,
                ts_ns: 1_000_000_000,
                latency_ns: 120_000,
                source: SpikeSource::Cyclictest,
                task: task(),
                overlaps: Vec::new(),
                explained: false,
                timer_late_ns: Some(100_000),
                cpu_idle: Some(true),
            },
        ]);
        rec.starvation_episodes = Some(Vec::<StarvationEpisode>::new());
        let t = rt_sections(&rec, 20);
        assert!(t.contains("500 real-time wakeups timed"), "{t}");
        assert!(t.contains("2 spikes, 1 explained"), "{t}");
        let first = t
            .find("latency 300.00 us (timer late 20.00 us, then 280.00 us to run)")
            .unwrap();
        let second = t
            .find("latency 120.00 us (timer late 100.00 us, cpu idle, then 20.00 us to run)")
            .unwrap();
        assert!(t.contains("1 mostly a late timer on an idle CPU"), "{t}");
        assert!(first < second, "largest first");
        assert!(t.contains("pi_lock of stress-ng[7]") && t.contains("overlap 200.00 us"));
        assert!(t.contains("source cyclictest") && t.contains("no lock activity overlapped"));
        assert!(t.contains("Starvation episodes") && t.contains("(none)"));
    }
}
