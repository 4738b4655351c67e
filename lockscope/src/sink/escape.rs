//! Strings from the kernel, from traced programs or from a recording file are hostile
//! until shown otherwise: a process may name itself with an escape sequence, and a CSV
//! cell starting with `=` is a formula to a spreadsheet. Pure.

use std::fmt::Write as _;

/// `s` with every control character (C0 but newline, DEL, C1) written as `\xNN` or
/// `\u{NNNN}`, so that printing it to a terminal cannot move the cursor, change colours or
/// set the window title. Backslashes stay as they are.
pub fn terminal_safe(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c == '\n' || !c.is_control() {
            out.push(c);
        } else if (c as u32) < 0x100 {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            let _ = write!(out, "\\u{{{:04x}}}", c as u32);
        }
    }
    out
}

/// One CSV cell: control characters escaped (newlines too), a leading `=`, `+`, `-`, `@`
/// (a formula to spreadsheets) neutralized with a `'`, quoted when it holds a comma or
/// quote. Numbers are written by their callers, never through this.
pub fn csv_cell(s: &str) -> String {
    let mut v = terminal_safe(s).replace('\n', "\\x0a");
    if v.starts_with(['=', '+', '-', '@']) {
        v.insert(0, '\'');
    }
    if v.contains([',', '"']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v
    }
}

/// Escape the names a live view shows (lock names, owners, callers and their stacks, task
/// and process names) in place, as [`terminal_safe`] does; the figures are untouched.
pub fn escape_recording(rec: &mut crate::aggregate::Recording) {
    let fix = |s: &mut String| {
        if s.chars().any(|c| c.is_control()) {
            *s = terminal_safe(s).replace('\n', "\\x0a");
        }
    };
    fix(&mut rec.target);
    for l in &mut rec.locks {
        fix(&mut l.name);
        if let Some(o) = &mut l.owner {
            fix(&mut o.comm);
        }
        if let Some(u) = &mut l.user {
            fix(&mut u.comm);
        }
        for c in &mut l.callers {
            fix(&mut c.caller);
            c.stack.iter_mut().for_each(fix);
        }
        for t in &mut l.tasks {
            fix(&mut t.comm);
            if let Some(c) = &mut t.cgroup {
                fix(c);
            }
        }
    }
    for c in rec.cgroups.iter_mut().flatten() {
        fix(&mut c.cgroup);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        assert_eq!(terminal_safe("evil\x1b[2Jname"), "evil\\x1b[2Jname");
        assert_eq!(terminal_safe("a\tb\rc\x07\x7f"), "a\\x09b\\x0dc\\x07\\x7f");
        assert_eq!(terminal_safe("c1\u{9b}31m"), "c1\\x9b31m");
        // Printable text, newlines and non-ASCII letters are unchanged.
        assert_eq!(terminal_safe("kworker/0:1\nüñï"), "kworker/0:1\nüñï");
    }

    #[test]
    fn csv_cells_are_neither_formulas_nor_broken_rows() {
        assert_eq!(csv_cell("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(csv_cell("+1"), "'+1");
        assert_eq!(csv_cell("-cmd"), "'-cmd");
        assert_eq!(csv_cell("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(csv_cell("a,b"), "\"a,b\"");
        assert_eq!(csv_cell("two\nlines"), "two\\x0alines");
        assert_eq!(csv_cell("mmap_lock of app[12]"), "mmap_lock of app[12]");
    }
}
