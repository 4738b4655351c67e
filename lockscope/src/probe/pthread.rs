//! pthread lock attribution, the privileged edge: switch it on in the futex probes and
//! start the thread that unwinds their waits ([`crate::source::pthread`]). No uprobe: a
//! lock call that does not block costs nothing, in the target or anywhere else.
//!
//! Whatever stands in the way (a static target, no ring buffer) becomes a one-line note;
//! futex words then keep their address names.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use aya::Ebpf;
use lockscope_common::PthreadConfig;
use object::Object as _;

use crate::{
    aggregate::pthread::PthreadSnapshot,
    decode::procmaps::{libc_paths, parse_maps},
    source::pthread::PthreadReader,
};

/// The attribution switch the futex exit probe reads.
pub fn pthread_config(enabled: bool) -> PthreadConfig {
    PthreadConfig {
        enabled: enabled as u32,
        _pad: 0,
    }
}

/// pthread attribution of a session.
#[derive(Default)]
pub struct PthreadProbes {
    /// Why some locks cannot be attributed (one line each).
    pub notes: Vec<String>,
    reader: Option<PthreadReader>,
}

impl PthreadProbes {
    /// Start unwinding the waits the futex probes send (they were loaded with
    /// [`pthread_config`]`(true)`), with the maps of `pids` and the system's C library
    /// read first.
    pub fn start(ebpf: &mut Ebpf, pids: &[u32]) -> Self {
        let mut me = Self::default();
        let events = ebpf.take_map("PTHREAD_EVENTS");
        let skip = ebpf.take_map("PTHREAD_SKIP");
        let started = events
            .zip(skip)
            .context("PTHREAD_EVENTS or PTHREAD_SKIP missing from the eBPF object")
            .and_then(|(events, skip)| {
                PthreadReader::start(events, skip, system_libc().map(|(p, _)| p), pids)
            });
        match started {
            Ok(r) => me.reader = Some(r),
            Err(e) => me
                .notes
                .push(format!("{e:#}: pthread locks show as futex words")),
        }
        me
    }

    /// Is attribution running?
    pub fn active(&self) -> bool {
        self.reader.is_some()
    }

    /// Read process `pid`'s maps now, so its waits are attributed even if it exits
    /// before they are read.
    pub fn remember(&self, pid: u32) {
        if let Some(r) = &self.reader {
            r.remember(pid);
        }
    }

    /// Forget exited processes' call sites.
    pub fn forget(&self, pids: &[u32]) {
        if let Some(r) = &self.reader {
            r.forget(pids);
        }
    }

    /// (tgid, call site) of every site so far.
    pub fn site_keys(&self) -> Vec<(u32, u64)> {
        let Some(r) = &self.reader else {
            return Vec::new();
        };
        let mut keys = r.site_keys();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// Fill the sites, counters' userspace part and libraries of a snapshot.
    pub fn fill(&self, p: &mut PthreadSnapshot) {
        p.active = self.active();
        p.notes = self.notes.clone();
        if let Some(r) = &self.reader {
            let (tally, libraries) = r.snapshot();
            p.sites = tally.sites();
            p.tally = tally.counters;
            p.owners = tally.owners;
            p.libraries = libraries;
        }
    }

    /// Stop after draining every wait sent so far (call once the probes are detached).
    pub fn detach(&mut self) {
        if let Some(r) = &mut self.reader {
            r.stop();
        }
    }
}

/// Is this ELF file statically linked (no program interpreter, no dynamic section)?
pub fn is_static_elf(path: &Path) -> anyhow::Result<bool> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let obj = object::File::parse(&*data).with_context(|| format!("parsing {}", path.display()))?;
    Ok(obj.section_by_name(".interp").is_none() && obj.section_by_name(".dynamic").is_none())
}

/// The C libraries process `pid` maps, as paths this process can open (through the
/// target's root, so containers work) and as the target names them.
pub fn libcs_of_pid(pid: u32) -> anyhow::Result<Vec<(PathBuf, String)>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .with_context(|| format!("reading /proc/{pid}/maps"))?;
    if text.is_empty() {
        // A zombie: its memory is gone.
        anyhow::bail!("pid {pid} has exited");
    }
    Ok(libc_paths(&parse_maps(&text))
        .into_iter()
        .map(|p| (PathBuf::from(format!("/proc/{pid}/root{p}")), p))
        .collect())
}

/// The system's C library: the one lockscope itself runs on, else init's.
pub fn system_libc() -> Option<(PathBuf, String)> {
    [std::process::id(), 1].into_iter().find_map(|pid| {
        libcs_of_pid(pid)
            .ok()
            .and_then(|v| v.into_iter().next())
            .map(|(_, shown)| (PathBuf::from(&shown), shown))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machines_libc_is_found_and_dynamic() {
        // Runs against the C library this test binary itself uses.
        let Some((path, _)) = system_libc() else {
            panic!("no libc in /proc/self/maps");
        };
        assert!(!is_static_elf(&path).unwrap());
        assert_eq!(pthread_config(true).enabled, 1);
        assert_eq!(pthread_config(false).enabled, 0);
    }
}
