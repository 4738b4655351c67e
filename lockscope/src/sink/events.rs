//! rwsem acquisition modes in the text and CSV reports: one line per rwsem entry with
//! its lock events, then the system-wide totals in the kernel's `lock_event_counts`
//! names. Estimates carry `~`, events this tier cannot see read `n/a` (never 0).

use std::fmt::Write as _;

use lockscope_common::RWSEM_EVENT_NAMES;

use crate::aggregate::{
    Recording,
    rwsem::{EventKind, RwsemEventsSummary},
};

fn kind(summary: &RwsemEventsSummary, event: &str) -> EventKind {
    summary
        .kinds
        .get(event)
        .copied()
        .unwrap_or(EventKind::NotAvailable)
}

fn cell(summary: &RwsemEventsSummary, event: &str, v: Option<u64>) -> String {
    match (v, kind(summary, event)) {
        (None, _) | (_, EventKind::NotAvailable) => "n/a".to_owned(),
        (Some(n), EventKind::Estimate) => format!("~{n}"),
        (Some(n), EventKind::Exact) => n.to_string(),
    }
}

/// The acquisition-mode section of the table report; empty when there is nothing to say.
pub fn events_table(rec: &Recording, limit: usize) -> String {
    let Some(summary) = &rec.rwsem_events else {
        return String::new();
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nrwsem acquisition modes (tier: {}; ~ estimate, n/a: not visible to this tier)",
        summary.tier
    );
    if let Some(note) = &summary.note {
        let _ = writeln!(out, "{note}");
    }
    let entries: Vec<_> = rec
        .locks
        .iter()
        .filter(|l| l.events.is_some())
        .take(if limit == 0 { usize::MAX } else { limit })
        .collect();
    let name_w = entries.iter().map(|l| l.name.len()).max().unwrap_or(4);
    for l in &entries {
        let Some(ev) = &l.events else { continue };
        let cells: Vec<String> = ev
            .iter()
            .map(|(k, v)| format!("{k}={}", cell(summary, k, *v)))
            .collect();
        let _ = writeln!(
            out,
            "{:<8} {:<name_w$}  {}",
            l.lock_type.name(),
            l.name,
            cells.join(" ")
        );
    }
    if entries.is_empty() {
        out.push_str("(no rwsem lock events recorded)\n");
    }
    let system: Vec<String> = summary
        .system
        .iter()
        .map(|(k, v)| {
            let event = k.trim_start_matches("rwsem_");
            format!("{k}={}", cell(summary, event, *v))
        })
        .collect();
    let _ = writeln!(out, "system: {}", system.join(" "));
    let lost = crate::aggregate::stats::saturating_sum(summary.lost.values().copied());
    if lost > 0 {
        let detail: Vec<String> = summary
            .lost
            .iter()
            .filter(|(_, v)| **v > 0)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(out, "rwsem events lost: {lost} ({})", detail.join(" "));
    }
    out
}

/// CSV header columns for the events, after the base columns.
pub fn csv_header() -> String {
    RWSEM_EVENT_NAMES.iter().map(|n| format!(",{n}")).collect()
}

/// The event columns of the lock entry `(addr, type)`: a number (estimates too; the
/// recording's `rwsem_events.kinds` says which), empty when n/a or not an rwsem.
pub fn csv_cells(rec: &Recording, addr: &str, lock_type: &str) -> String {
    let entry = rec
        .locks
        .iter()
        .find(|l| l.addr == addr && l.lock_type.name() == lock_type);
    RWSEM_EVENT_NAMES
        .iter()
        .map(|n| {
            let v = entry
                .and_then(|l| l.events.as_ref())
                .and_then(|e| e.get(*n).copied().flatten());
            match v {
                Some(v) => format!(",{v}"),
                None => ",".to_owned(),
            }
        })
        .collect()
}
