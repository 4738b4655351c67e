//! Folded stacks (`frame;frame;... value`, Brendan Gregg's format) of the waiters, root
//! first and the lock as the last frame: what inferno, flamegraph.pl and speedscope read.
//! Weighted by wait time (ns) or by contentions. Waits that are in no caller (left out by
//! a long-running sink's snapshot, or timed without a stack walk past the stack budget)
//! are one `[no stack];lock` line, so the values add up to the recording's total. Pure.

use std::{collections::BTreeMap, fmt::Write as _};

use clap::ValueEnum;

use crate::aggregate::{Recording, WaitStats};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Weight {
    /// Wait time in nanoseconds.
    #[default]
    Wait,
    /// Contentions (waits).
    Count,
}

impl Weight {
    fn of(self, s: &WaitStats) -> u64 {
        match self {
            Weight::Wait => s.total_ns,
            Weight::Count => s.count,
        }
    }
}

/// One frame: no `;` (the separator), no control characters, no trailing blanks.
fn frame(name: &str) -> String {
    let f = super::escape::terminal_safe(name)
        .replace('\n', "\\x0a")
        .replace(';', ":");
    let f = f.trim();
    if f.is_empty() {
        "?".to_owned()
    } else {
        f.to_owned()
    }
}

/// The folded lines of every lock's waiters, sorted, one per distinct stack.
pub fn folded(rec: &Recording, weight: Weight) -> String {
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    let mut add = |path: String, v: u64| {
        if v > 0 {
            *lines.entry(path).or_default() += v;
        }
    };
    for l in &rec.locks {
        let lock = frame(&format!("{} [{}]", l.name, l.lock_type));
        let mut in_callers = 0u64;
        for c in &l.callers {
            // Stacks are stored innermost first.
            let mut path: Vec<String> = c.stack.iter().rev().map(|f| frame(f)).collect();
            if path.is_empty() {
                path.push(frame(&c.caller));
            }
            path.push(lock.clone());
            let v = weight.of(&c.stats);
            in_callers += v;
            add(path.join(";"), v);
        }
        add(
            format!("[no stack];{lock}"),
            weight.of(&l.stats).saturating_sub(in_callers),
        );
    }
    let mut out = String::new();
    for (path, v) in lines {
        let _ = writeln!(out, "{path} {v}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::recording::tests::sample_recording;

    #[test]
    fn values_add_up_to_the_recordings_total() {
        let rec = sample_recording();
        for weight in [Weight::Wait, Weight::Count] {
            let text = folded(&rec, weight);
            let sum: u64 = text
                .lines()
                .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
                .sum();
            let want: u64 = rec.locks.iter().map(|l| weight.of(&l.stats)).sum();
            assert_eq!(sum, want, "{weight:?}:\n{text}");
        }
        let text = folded(&rec, Weight::Wait);
        // Root first, the lock last.
        assert!(
            text.lines().any(|l| l.starts_with(
                "vm_mmap_pgoff+0x30;down_write_killable+0x20;mmap_lock of lockscope[100] [rwsem:W] "
            )),
            "{text}"
        );
    }

    #[test]
    fn frames_cannot_break_the_format() {
        assert_eq!(frame("a;b"), "a:b");
        assert_eq!(frame("x\ny\u{1b}"), "x\\x0ay\\x1b");
        assert_eq!(frame("  "), "?");
    }
}
