//! pthread lock attribution, the privileged edge: find the C library a target uses (from
//! `/proc/PID/maps`), resolve its lock functions from the ELF dynamic symbols, and attach
//! the uprobe (entry, attach cookie = `PTHREAD_FN_*`) and the uretprobe to each.
//!
//! Whatever stands in the way (a static target, a libc without the symbols, uprobes
//! refused) becomes a one-line note; futex words then keep their address names.

use std::{
    collections::HashSet,
    num::NonZeroU32,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use anyhow::Context as _;
use aya::{
    Ebpf,
    programs::{
        Link as _, UProbe,
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLink, UProbeScope},
    },
};
use lockscope_common::{PTHREAD_FN_COUNT, PTHREAD_FN_NAMES, PthreadConfig};
use object::{Object as _, ObjectSection as _, ObjectSymbol as _};

use super::{loader::Target, loader::error_chain};
use crate::decode::procmaps::{libc_paths, parse_maps};

/// Lock object sizes of this machine's C library.
pub fn pthread_config() -> PthreadConfig {
    PthreadConfig {
        mutex_size: std::mem::size_of::<libc::pthread_mutex_t>() as u32,
        rwlock_size: std::mem::size_of::<libc::pthread_rwlock_t>() as u32,
    }
}

/// A C library with the uprobes attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachedLibc {
    /// As the target's maps name it.
    pub path: String,
    /// The lock functions it exports and that are probed.
    pub functions: Vec<&'static str>,
}

/// The pthread uprobes of a session.
#[derive(Default)]
pub struct PthreadProbes {
    pub libraries: Vec<AttachedLibc>,
    /// Why some locks cannot be attributed (one line each).
    pub notes: Vec<String>,
    links: Vec<UProbeLink>,
    /// (device, inode, pid or 0 for all processes) of every library tried, to attach
    /// each file once per scope.
    tried: HashSet<(u64, u64, u32)>,
}

/// The lock functions a file exports: (`PTHREAD_FN_*`, file offset). Dynamic symbols
/// first (a shared libc), then the static symbol table. glibc exports several versions of
/// some (`pthread_mutex_clocklock@GLIBC_2.30` and `@@GLIBC_2.34`): same address, one probe.
pub fn lock_functions(path: &Path) -> anyhow::Result<Vec<(u32, u64)>> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let obj = object::File::parse(&*data).with_context(|| format!("parsing {}", path.display()))?;
    let mut out: Vec<(u32, u64)> = Vec::new();
    for sym in obj.dynamic_symbols().chain(obj.symbols()) {
        let Ok(name) = sym.name() else { continue };
        let Some(func) = PTHREAD_FN_NAMES.iter().position(|n| *n == name) else {
            continue;
        };
        if sym.is_undefined() || out.iter().any(|(f, _)| *f == func as u32) {
            continue;
        }
        let Some(index) = sym.section_index() else {
            continue;
        };
        let Ok(section) = obj.section_by_index(index) else {
            continue;
        };
        let Some((sec_off, _)) = section.file_range() else {
            continue;
        };
        let Some(off) = sym
            .address()
            .checked_sub(section.address())
            .and_then(|d| d.checked_add(sec_off))
        else {
            continue;
        };
        out.push((func as u32, off));
    }
    out.sort_unstable();
    Ok(out)
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

impl PthreadProbes {
    /// Attach to the C libraries of a target: the given processes' own (probes that fire
    /// in those processes only, so the rest of the system pays nothing), or the system's
    /// (every process; the probes filter by target in the kernel).
    pub fn for_target(ebpf: &mut Ebpf, target: &Target) -> Self {
        let mut me = Self::default();
        match target {
            Target::Pids(pids) => {
                for &pid in pids {
                    me.attach_pid(ebpf, pid, true);
                }
            }
            Target::System | Target::Command | Target::Cgroup(_) => match system_libc() {
                Some((path, shown)) => me.attach_libc(ebpf, &path, &shown, None),
                None => me.notes.push(
                    "no shared C library found (lockscope and init map none): pthread locks \
                     show as futex words"
                        .to_owned(),
                ),
            },
        }
        me
    }

    /// Attach to the C libraries process `pid` maps (already attached ones are skipped),
    /// for that process only or for every process (a launched command's tree).
    pub fn attach_pid(&mut self, ebpf: &mut Ebpf, pid: u32, only_this_process: bool) {
        let scope = if only_this_process {
            NonZeroU32::new(pid)
        } else {
            None
        };
        match libcs_of_pid(pid) {
            Ok(libs) if libs.is_empty() => self.notes.push(format!(
                "pid {pid} maps no shared C library (statically linked?): its pthread locks \
                 show as futex words"
            )),
            Ok(libs) => {
                for (path, shown) in libs {
                    self.attach_libc(ebpf, &path, &shown, scope);
                }
            }
            Err(e) => self.notes.push(format!("pid {pid}: {e:#}")),
        }
    }

    /// Attach the entry and return probes to every lock function `path` exports, in
    /// process `pid` only or (`None`) in every process.
    pub fn attach_libc(
        &mut self,
        ebpf: &mut Ebpf,
        path: &Path,
        shown: &str,
        pid: Option<NonZeroU32>,
    ) {
        if let Ok(meta) = std::fs::metadata(path)
            && !self
                .tried
                .insert((meta.dev(), meta.ino(), pid.map_or(0, NonZeroU32::get)))
        {
            return;
        }
        if let Err(e) = self.try_attach(ebpf, path, shown, pid) {
            self.notes
                .push(format!("{e}: pthread locks show as futex words"));
        }
    }

    fn try_attach(
        &mut self,
        ebpf: &mut Ebpf,
        path: &Path,
        shown: &str,
        pid: Option<NonZeroU32>,
    ) -> Result<(), String> {
        let scope = match pid {
            Some(p) => UProbeScope::OneProcess(p),
            None => UProbeScope::AllProcesses,
        };
        let funcs = lock_functions(path).map_err(|e| format!("{e:#}"))?;
        if funcs.is_empty() {
            return Err(format!(
                "{shown} exports none of {}",
                PTHREAD_FN_NAMES[..PTHREAD_FN_COUNT as usize].join(", ")
            ));
        }
        let mut links = Vec::new();
        for (prog, ret) in [("pthread_lock_enter", false), ("pthread_lock_return", true)] {
            let p: &mut UProbe = ebpf
                .program_mut(prog)
                .ok_or_else(|| format!("program {prog} missing from the eBPF object"))?
                .try_into()
                .map_err(|e| error_chain(&e))?;
            if p.fd().is_err() {
                p.load()
                    .map_err(|e| format!("uprobes refused by the kernel ({})", error_chain(&e)))?;
            }
            for &(func, off) in &funcs {
                let point = UProbeAttachPoint {
                    location: UProbeAttachLocation::AbsoluteOffset(off),
                    cookie: (!ret).then_some(func as u64),
                };
                let id = p.attach(point, path, scope).map_err(|e| {
                    format!(
                        "uprobe on {shown}:{} refused ({})",
                        PTHREAD_FN_NAMES[func as usize],
                        error_chain(&e)
                    )
                })?;
                links.push(p.take_link(id).map_err(|e| error_chain(&e))?);
            }
        }
        self.links.extend(links);
        self.libraries.push(AttachedLibc {
            path: match pid {
                Some(p) => format!("{shown} (pid {p})"),
                None => shown.to_owned(),
            },
            functions: funcs
                .iter()
                .map(|&(f, _)| PTHREAD_FN_NAMES[f as usize])
                .collect(),
        });
        Ok(())
    }

    /// Are any lock functions probed?
    pub fn active(&self) -> bool {
        !self.libraries.is_empty()
    }

    pub fn detach(&mut self) {
        for link in self.links.drain(..) {
            let _ = link.detach();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_sizes_are_the_c_librarys() {
        let c = pthread_config();
        assert!(c.mutex_size >= 24, "{c:?}");
        assert!(c.rwlock_size >= 32, "{c:?}");
    }

    #[test]
    fn this_machines_libc_exports_the_lock_functions() {
        // Runs against the C library this test binary itself uses.
        let Some((path, _)) = system_libc() else {
            panic!("no libc in /proc/self/maps");
        };
        let funcs = lock_functions(&path).unwrap();
        let names: Vec<_> = funcs
            .iter()
            .map(|&(f, _)| PTHREAD_FN_NAMES[f as usize])
            .collect();
        assert!(names.contains(&"pthread_mutex_lock"), "{names:?}");
        assert!(names.contains(&"pthread_rwlock_wrlock"), "{names:?}");
        assert!(funcs.iter().all(|&(_, off)| off > 0));
        assert!(!is_static_elf(&path).unwrap());
    }
}
