//! The one chooser for kernel-function hooks: fentry/fexit where the kernel allows
//! them, else kprobe/kretprobe, else none, with the reason kept for `doctor` and the
//! reports. The deep tiers (`rwsem.rs`, `spin.rs`) describe their hooks as [`Hook`]s
//! and attach them through [`Chooser`]; what was loaded and linked is kept in
//! [`Attached`], which detaches it again.

use std::collections::BTreeMap;

use anyhow::anyhow;
use aya::{
    Btf, Ebpf,
    programs::{FEntry, FExit, KProbe},
};

use crate::errors::error_chain;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgKind {
    FEntry,
    FExit,
    KProbe,
    KRetProbe,
}

/// A program in the eBPF object and how it hooks.
pub type Prog = (&'static str, ProgKind);

/// One hooked kernel function and its programs per mechanism (all of a mechanism's
/// programs attach, or none).
#[derive(Debug, Clone, Copy)]
pub struct Hook {
    pub func: &'static str,
    pub fentry: &'static [Prog],
    /// kprobe programs may be shared by several functions (each attach is one link).
    pub kprobe: &'static [Prog],
}

/// What `/proc/kallsyms` says about a function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Symbol {
    /// Present under its own name.
    Present,
    /// Only compiler clones exist (`.isra.0`, `.constprop.0`, `.part.0`): the function
    /// was specialised or split and its arguments may not be the source's.
    ClonedOnly(Vec<String>),
    /// Not in the kernel (inlined everywhere, or not built).
    Absent,
}

/// Look `func` up in kallsyms text (lines `addr type name [module]`).
pub fn find_symbol(kallsyms: &str, func: &str) -> Symbol {
    if func.is_empty() {
        return Symbol::Absent;
    }
    // A substring search, not a parse of every line: the text is megabytes and some
    // twenty hooks are looked up at start. A hit counts only as a whole name field
    // (`addr type name`), or as the stem of a clone (`name.isra.0`).
    let bytes = kallsyms.as_bytes();
    let mut clones: Vec<String> = Vec::new();
    for (at, _) in kallsyms.match_indices(func) {
        let name_field = at >= 3
            && bytes[at - 1] == b' '
            && bytes[at - 2].is_ascii_alphabetic()
            && bytes[at - 3] == b' ';
        if !name_field {
            continue;
        }
        let rest = &kallsyms[at + func.len()..];
        match rest.as_bytes().first() {
            None | Some(b'\n' | b'\t' | b' ' | b'\r') => return Symbol::Present,
            Some(b'.') => {
                let suffix = rest.split_ascii_whitespace().next().unwrap_or("");
                let name = &kallsyms[at..at + func.len() + suffix.len()];
                if !clones.iter().any(|c| c == name) {
                    clones.push(name.to_owned());
                }
            }
            Some(_) => {}
        }
    }
    if clones.is_empty() {
        Symbol::Absent
    } else {
        Symbol::ClonedOnly(clones)
    }
}

/// Tier (`fentry`, `kprobe`, or `absent`) of each (function, attached tier), by name.
pub fn hook_tiers<'a>(
    hooks: impl Iterator<Item = (&'a str, Option<&'a str>)>,
) -> BTreeMap<String, String> {
    hooks
        .map(|(func, tier)| (func.to_owned(), tier.unwrap_or("absent").to_owned()))
        .collect()
}

/// How one hook ended up: `fentry` or `kprobe` when attached (or verified), and the
/// detail (what was refused before the fallback worked, or why nothing did).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub tier: Option<&'static str>,
    pub detail: String,
}

impl Choice {
    pub fn none(detail: impl Into<String>) -> Self {
        Self {
            tier: None,
            detail: detail.into(),
        }
    }
}

/// `/proc/kallsyms` while the probes are being attached, shared by the tiers that
/// choose hooks (the kernel takes some 60 ms to produce it each time); empty when it
/// cannot be read. [`forget_kallsyms`] lets it go once they are attached.
pub fn kallsyms() -> std::sync::Arc<str> {
    let mut cached = KALLSYMS.lock().unwrap_or_else(|e| e.into_inner());
    cached
        .get_or_insert_with(|| {
            std::fs::read_to_string("/proc/kallsyms")
                .unwrap_or_default()
                .into()
        })
        .clone()
}

/// Drop the text [`kallsyms`] kept (megabytes a long-running `serve` does not need).
pub fn forget_kallsyms() {
    *KALLSYMS.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

static KALLSYMS: std::sync::Mutex<Option<std::sync::Arc<str>>> = std::sync::Mutex::new(None);

/// What this kernel allows, read once for a set of hooks.
pub struct Chooser {
    kallsyms: std::sync::Arc<str>,
    kprobes: bool,
    /// fentry is not tried, for this reason (tests exercising the kprobe fallback).
    skip_fentry: Option<String>,
}

impl Chooser {
    pub fn new(skip_fentry: Option<String>) -> Self {
        Self {
            kallsyms: kallsyms(),
            kprobes: super::features::kprobes_available(),
            skip_fentry,
        }
    }

    /// Hook `hook` with fentry/fexit, else kprobe/kretprobe. `attach`: attach as well as
    /// load (false: only ask the verifier, for `doctor`).
    pub fn choose(
        &self,
        ebpf: &mut Ebpf,
        btf: &Btf,
        hook: &Hook,
        attach: bool,
        out: &mut Attached,
    ) -> Choice {
        match find_symbol(&self.kallsyms, hook.func) {
            Symbol::Present => {}
            Symbol::ClonedOnly(clones) => {
                return Choice::none(format!(
                    "only compiler clones in kallsyms ({}): arguments may differ, not hooked",
                    clones.join(", ")
                ));
            }
            Symbol::Absent if !self.kallsyms.is_empty() => {
                return Choice::none(format!(
                    "{} is not in this kernel (inlined or not built)",
                    hook.func
                ));
            }
            Symbol::Absent => {}
        }
        let verified = if attach {
            ""
        } else {
            " (verified; attached only while recording)"
        };
        let fentry = match &self.skip_fentry {
            Some(why) => format!("skipped ({why})"),
            None => match out.attach_set(ebpf, btf, hook.func, hook.fentry, attach) {
                Ok(()) => {
                    return Choice {
                        tier: Some("fentry"),
                        detail: format!("fentry/fexit{verified}"),
                    };
                }
                Err(e) => format!("refused: {e}"),
            },
        };
        if !self.kprobes {
            return Choice::none(format!("fentry {fentry}; no kprobes (CONFIG_KPROBES off)"));
        }
        match out.attach_set(ebpf, btf, hook.func, hook.kprobe, attach) {
            Ok(()) => Choice {
                tier: Some("kprobe"),
                detail: format!("kprobe/kretprobe{verified} (fentry {fentry})"),
            },
            Err(e) => Choice::none(format!("fentry {fentry}; kprobe refused ({e})")),
        }
    }
}

/// The programs a chooser loaded and the kprobe links it made.
#[derive(Debug, Default)]
pub struct Attached {
    loaded: Vec<Prog>,
    kprobe_links: Vec<(&'static str, aya::programs::kprobe::KProbeLinkId)>,
}

impl Attached {
    /// Load (and with `attach`, attach) all of `progs` on `func`, or none of them.
    fn attach_set(
        &mut self,
        ebpf: &mut Ebpf,
        btf: &Btf,
        func: &str,
        progs: &[Prog],
        attach: bool,
    ) -> anyhow::Result<()> {
        let mut links = Vec::new();
        let mut loaded = Vec::new();
        let mut each = || -> anyhow::Result<()> {
            let short = |e: &dyn std::error::Error| anyhow!(error_chain(e));
            for &(name, kind) in progs {
                let prog = ebpf
                    .program_mut(name)
                    .ok_or_else(|| anyhow!("program {name} missing from the eBPF object"))?;
                match kind {
                    ProgKind::FEntry => {
                        let p: &mut FEntry = prog.try_into()?;
                        p.load(func, btf).map_err(|e| short(&e))?;
                        loaded.push((name, kind));
                        if attach {
                            p.attach().map_err(|e| short(&e))?;
                        }
                    }
                    ProgKind::FExit => {
                        let p: &mut FExit = prog.try_into()?;
                        p.load(func, btf).map_err(|e| short(&e))?;
                        loaded.push((name, kind));
                        if attach {
                            p.attach().map_err(|e| short(&e))?;
                        }
                    }
                    ProgKind::KProbe | ProgKind::KRetProbe => {
                        let p: &mut KProbe = prog.try_into()?;
                        if p.fd().is_err() {
                            p.load().map_err(|e| short(&e))?;
                            loaded.push((name, kind));
                        }
                        if attach {
                            links.push((name, p.attach(func, 0).map_err(|e| short(&e))?));
                        }
                    }
                }
            }
            Ok(())
        };
        let result = each();
        if result.is_ok() {
            self.loaded.extend(loaded);
            self.kprobe_links.extend(links);
            return Ok(());
        }
        // All or none: undo this set's links and loads.
        for (name, id) in links {
            if let Some(p) = ebpf.program_mut(name)
                && let Ok(p) = <&mut KProbe>::try_from(p)
            {
                let _ = p.detach(id);
            }
        }
        for (name, kind) in loaded {
            unload(ebpf, name, kind);
        }
        result
    }

    /// Detach and unload everything (maps stay readable).
    pub fn detach(&mut self, ebpf: &mut Ebpf) {
        // Unloading a program drops its links, the kprobe ones included.
        self.kprobe_links.clear();
        for (name, kind) in self.loaded.drain(..) {
            unload(ebpf, name, kind);
        }
    }
}

/// Unload a hook's program (whatever kind it was loaded as); absent programs are skipped.
fn unload(ebpf: &mut Ebpf, name: &str, kind: ProgKind) {
    let Some(prog) = ebpf.program_mut(name) else {
        return;
    };
    let _ = match kind {
        ProgKind::FEntry => <&mut FEntry>::try_from(prog).map(|p| p.unload()),
        ProgKind::FExit => <&mut FExit>::try_from(prog).map(|p| p.unload()),
        ProgKind::KProbe | ProgKind::KRetProbe => <&mut KProbe>::try_from(prog).map(|p| p.unload()),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    const KALLSYMS: &str = "ffffffff81100000 t rwsem_down_read_slowpath\n\
        ffffffff81100400 t rwsem_mark_wake.constprop.0\n\
        ffffffff81100800 t rwsem_mark_wake.isra.0\n\
        ffffffff81100c00 T down_read_trylock\n\
        ffffffff81100d00 T down_read_trylock_foo\n\
        ffffffff81100e00 T __down_read_lock\n\
        ffffffffc0001000 t rwsem_down_write_slowpath.cold\t[somemod]\n\
        ffffffffc0002000 t mod_only_func\t[down_read]\n\
        ffffffffc0003000 t last_symbol";

    #[test]
    fn kallsyms_tells_present_cloned_and_absent() {
        assert_eq!(
            find_symbol(KALLSYMS, "rwsem_down_read_slowpath"),
            Symbol::Present
        );
        assert_eq!(
            find_symbol(KALLSYMS, "rwsem_mark_wake"),
            Symbol::ClonedOnly(vec![
                "rwsem_mark_wake.constprop.0".into(),
                "rwsem_mark_wake.isra.0".into()
            ])
        );
        assert_eq!(find_symbol(KALLSYMS, "down_read_trylock"), Symbol::Present);
        assert_eq!(
            find_symbol(KALLSYMS, "rwsem_down_write_slowpath"),
            Symbol::ClonedOnly(vec!["rwsem_down_write_slowpath.cold".into()])
        );
        assert_eq!(find_symbol(KALLSYMS, "schedule"), Symbol::Absent);
        // Only whole name fields: not inside another name, not a module's name.
        assert_eq!(find_symbol(KALLSYMS, "down_read"), Symbol::Absent);
        assert_eq!(find_symbol(KALLSYMS, "read_lock"), Symbol::Absent);
        assert_eq!(find_symbol(KALLSYMS, "last_symbol"), Symbol::Present);
        assert_eq!(find_symbol(KALLSYMS, "mod_only_func"), Symbol::Present);
        assert_eq!(find_symbol(KALLSYMS, ""), Symbol::Absent);
    }
}
