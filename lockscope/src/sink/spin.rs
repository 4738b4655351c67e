//! The deep spinlock tier in the text report: the tier's counts, hold times of the
//! watched locks, and the starvation / long-hold episodes it detected. Empty when the
//! tier did not run.

use std::fmt::Write as _;

use super::report::fmt_ns;
use crate::aggregate::{
    Recording,
    rt::{EpisodeKind, StarvationEpisode, TaskRef},
};

fn task(t: &TaskRef) -> String {
    match t.tid {
        Some(tid) if tid != t.pid => format!("{}[{}/{}]", t.comm, t.pid, tid),
        _ => format!("{}[{}]", t.comm, t.pid),
    }
}

fn episode_line(e: &StarvationEpisode) -> String {
    let irqs = match e.irqs_off {
        Some(true) => ", irqs off",
        Some(false) => ", irqs on",
        None => "",
    };
    match e.kind {
        EpisodeKind::Starvation => {
            let acq: Vec<String> = e
                .acquirers
                .iter()
                .map(|a| format!("{} cpu {} x{}", task(&a.task), a.cpu, a.count))
                .collect();
            format!(
                "cpu {:<3} {} waited {} on {}: {} foreign acquisitions ({}){irqs}",
                e.cpu,
                task(&e.waiter),
                fmt_ns(e.wait_ns),
                e.lock,
                e.foreign_acquisitions,
                acq.join(", ")
            )
        }
        EpisodeKind::LongHold => format!(
            "cpu {:<3} {} held {} for {}",
            e.cpu,
            task(&e.waiter),
            e.lock,
            fmt_ns(e.wait_ns)
        ),
    }
}

/// The deep spinlock section of the table report.
pub fn spin_table(rec: &Recording, limit: usize) -> String {
    let Some(s) = rec.spin.as_ref().filter(|s| s.tier == "deep") else {
        return String::new();
    };
    let limit = if limit == 0 { usize::MAX } else { limit };
    let mut out = String::new();
    let n = |k: &str| s.counts.get(k).copied().unwrap_or(0);
    let lost = crate::aggregate::stats::saturating_sum(s.lost.values().copied());
    let _ = writeln!(
        out,
        "\ndeep spinlock tier ({}): {} waits, {} holds, {} foreign acquisitions, {} episodes, \
         {lost} lost; hold time: {}",
        s.watched,
        n("waits"),
        n("holds"),
        n("foreign_acquisitions"),
        n("episodes"),
        s.hold
    );
    let mut held: Vec<_> = rec
        .locks
        .iter()
        .filter_map(|l| Some((l, l.spin.as_ref()?.hold.as_ref()?)))
        .filter(|(_, h)| h.count > 0)
        .collect();
    held.sort_by_key(|h| std::cmp::Reverse(h.1.total_ns));
    if !held.is_empty() {
        let _ = writeln!(
            out,
            "{:>9}  {:>10}  {:>10}  {:>10}  name",
            "holds", "total hold", "max hold", "avg hold"
        );
        for (l, h) in held.iter().take(limit) {
            let _ = writeln!(
                out,
                "{:>9}  {:>10}  {:>10}  {:>10}  {}",
                h.count,
                fmt_ns(h.total_ns),
                fmt_ns(h.max_ns),
                fmt_ns(h.avg_ns()),
                l.name
            );
        }
    }
    let eps = rec.starvation_episodes.as_deref().unwrap_or(&[]);
    let deep: Vec<&StarvationEpisode> = eps.iter().filter(|e| e.tier == "deep").collect();
    for (kind, title) in [
        (
            EpisodeKind::Starvation,
            format!(
                "starvation episodes (exact: a wait >= {} while other CPUs took the lock >= {} \
                 times)",
                fmt_ns(s.threshold_ns),
                s.min_foreign
            ),
        ),
        (
            EpisodeKind::LongHold,
            format!(
                "long-hold episodes (one hold >= {})",
                fmt_ns(s.hold_threshold_ns)
            ),
        ),
    ] {
        let mut these: Vec<&&StarvationEpisode> = deep.iter().filter(|e| e.kind == kind).collect();
        let _ = writeln!(out, "{title}: {}", these.len());
        these.sort_by_key(|e| std::cmp::Reverse(e.wait_ns));
        for e in these.iter().take(limit.min(10)) {
            let _ = writeln!(out, "  {}", episode_line(e));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::rt::Acquirer;

    #[test]
    fn episodes_read_as_one_line_each() {
        let t = |pid, tid, comm: &str| TaskRef {
            pid,
            tid: Some(tid),
            comm: comm.into(),
            stack: vec![],
        };
        let e = StarvationEpisode {
            kind: EpisodeKind::Starvation,
            ts_ns: 1,
            cpu: 0,
            lock: "pi_lock of pi-victim[12]".into(),
            addr: "0x1".into(),
            waiter: t(10, 13, "pi-caller"),
            wait_ns: 85_000,
            foreign_acquisitions: 9,
            acquirers: vec![Acquirer {
                cpu: 1,
                task: t(10, 14, "pi-caller"),
                count: 9,
            }],
            irqs_off: Some(true),
            probable: false,
            tier: "deep".into(),
        };
        assert_eq!(
            episode_line(&e),
            "cpu 0   pi-caller[10/13] waited 85.00 us on pi_lock of pi-victim[12]: 9 foreign \
             acquisitions (pi-caller[10/14] cpu 1 x9), irqs off"
        );
    }
}
