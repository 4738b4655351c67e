//! The guest's serial log: steps and their output between markers, dumped files, the
//! result line, and what the guest kernel said when it died.

use std::collections::BTreeMap;

use super::RESULT_MARK;

/// Everything one guest printed, split by markers.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GuestLog {
    pub booted: Option<String>,
    /// Step name -> (exit code, output).
    pub steps: BTreeMap<String, (i32, String)>,
    pub files: BTreeMap<String, String>,
    /// `(pass, fail)` of the result line.
    pub result: Option<(u32, u32)>,
    /// A step that began and never ended (the guest died or hung inside it): its name
    /// and what it printed.
    pub unfinished: Option<(String, String)>,
    /// The last lines the guest printed outside file dumps: where a kernel's panic or
    /// oops shows when the guest dies.
    pub tail: Vec<String>,
    /// The guest kernel's faults: each `Oops:`, `BUG:` or `Kernel panic` line, with the
    /// `RIP:` line that follows it.
    pub kernel_faults: Vec<String>,
}

impl GuestLog {
    /// A recording the guest dumped, parsed; a missing or broken one is a failed check.
    pub(super) fn recording(
        &self,
        file: &str,
        check: &mut impl FnMut(bool, String),
    ) -> Option<serde_json::Value> {
        match self.files.get(file).map(|t| serde_json::from_str(t)) {
            Some(Ok(rec)) => Some(rec),
            Some(Err(e)) => {
                check(false, format!("{file} is not JSON: {e}"));
                None
            }
            None => {
                check(false, format!("guest dumped no {file}"));
                None
            }
        }
    }

    /// The guest died (no result line) of an `int3` Oops: a CPU ran a breakpoint that
    /// live code patching (ftrace attaching or detaching a trampoline) had already
    /// removed. Seen only under QEMU's TCG, on the 6.12 kernels, while trampolines on
    /// `_raw_spin_*` were attached or detached. Returns the fault, for the report.
    pub fn died_of_text_patching(&self) -> Option<String> {
        if self.result.is_some() {
            return None;
        }
        self.kernel_faults
            .iter()
            .find(|f| f.contains("Oops: int3"))
            .cloned()
    }
}

/// Keep `line` in `faults` if it reports a kernel fault (`Oops:`, `BUG:`, `Kernel
/// panic`), or add it to the last fault if it is that fault's `RIP:` line.
pub(super) fn note_kernel_fault(faults: &mut Vec<String>, line: &str) {
    if ["Oops:", "BUG:", "Kernel panic"]
        .iter()
        .any(|m| line.contains(m))
    {
        faults.push(line.to_owned());
    } else if line.contains("RIP:")
        && let Some(last) = faults.last_mut()
        && !last.contains("RIP:")
    {
        *last = format!("{last}; {}", line.trim());
    }
}

/// How many of the guest's last lines [`GuestLog::tail`] keeps.
pub(super) const TAIL_LINES: usize = 40;

/// Where a kernel console message (`[  219.928921] text`) starts in `line`, if one does.
/// The kernel prints its messages on the same serial console, whole lines, in the middle
/// of whatever line userspace was writing.
pub(super) fn kernel_message_at(line: &str) -> Option<usize> {
    let b = line.as_bytes();
    (0..b.len()).filter(|&i| b[i] == b'[').find(|&i| {
        let rest = &b[i + 1..];
        let lead = rest.iter().take_while(|&&c| c == b' ').count();
        let secs = rest[lead..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        let after = &rest[lead + secs..];
        secs > 0
            && after.len() >= 9
            && after[0] == b'.'
            && after[1..7].iter().all(u8::is_ascii_digit)
            && after[7] == b']'
            && after[8] == b' '
    })
}

pub fn parse_guest_log(log: &str) -> GuestLog {
    let mut g = GuestLog::default();
    let mut step: Option<(String, String)> = None;
    let mut file: Option<(String, String)> = None;
    // The start of a dump line a kernel message cut in two (the rest follows it).
    let mut cut = String::new();
    for raw in log.lines() {
        let mut line = raw.trim_end_matches('\r');
        // The console's terminal resets may precede a marker on its line.
        if let Some(at) = line.find("LOCKSCOPE-VM-") {
            line = &line[at..];
        }
        if let Some((name, buf)) = &mut file {
            let joined;
            if !cut.is_empty() {
                joined = std::mem::take(&mut cut) + line;
                line = &joined;
            }
            if line == format!("LOCKSCOPE-VM-FILE-END {name}") {
                g.tail.push(line.to_owned());
                let (name, buf) = file.take().unwrap_or_default();
                g.files.insert(name, buf);
            } else if let Some(at) = kernel_message_at(line) {
                // Keep the kernel's words out of the file, and mend the line they cut.
                note_kernel_fault(&mut g.kernel_faults, &line[at..]);
                cut = line[..at].to_owned();
            } else {
                buf.push_str(line);
                buf.push('\n');
            }
            continue;
        }
        g.tail.push(line.to_owned());
        if g.tail.len() > 2 * TAIL_LINES {
            g.tail.drain(..TAIL_LINES);
        }
        note_kernel_fault(&mut g.kernel_faults, line);
        if let Some(rest) = line.strip_prefix("LOCKSCOPE-VM-FILE-BEGIN ") {
            file = Some((rest.trim().to_owned(), String::new()));
        } else if let Some(rest) = line.strip_prefix("LOCKSCOPE-VM-STEP-BEGIN ") {
            step = Some((rest.trim().to_owned(), String::new()));
        } else if let Some(rest) = line.strip_prefix("LOCKSCOPE-VM-STEP-END ") {
            let rc = rest
                .rsplit_once("rc=")
                .and_then(|(_, rc)| rc.trim().parse().ok())
                .unwrap_or(-1);
            if let Some((name, out)) = step.take() {
                g.steps.insert(name, (rc, out));
            }
        } else if let Some(rest) = line.strip_prefix("LOCKSCOPE-VM-BOOTED ") {
            g.booted = Some(rest.trim().to_owned());
        } else if let Some(rest) = line.strip_prefix(RESULT_MARK) {
            let num = |key: &str| {
                rest.split_whitespace()
                    .find_map(|w| w.strip_prefix(key))
                    .and_then(|v| v.parse().ok())
            };
            if let (Some(p), Some(f)) = (num("pass="), num("fail=")) {
                g.result = Some((p, f));
            }
        } else if let Some((_, out)) = &mut step {
            out.push_str(line);
            out.push('\n');
        }
    }
    g.unfinished = step;
    let keep = g.tail.len().saturating_sub(TAIL_LINES);
    g.tail.drain(..keep);
    g
}
