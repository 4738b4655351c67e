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

/// Can this kernel hook its functions at all? Yes when it has kprobes, or when it loads
/// a minimal fentry program on the first of `funcs` in its BTF (loaded, never attached,
/// closed at once). Else why
/// not, in the chooser's words. Asked before the object loads, so that a deep tier which
/// cannot attach anywhere gets no maps worth the name (their per-CPU memory is allocated
/// at load, and on a busy machine that allocation waits on the kernel's per-CPU
/// allocator lock for seconds).
pub fn function_hooks(
    kbtf: &super::btf::KernelBtf,
    funcs: &[&str],
    skip_fentry: Option<&str>,
) -> Result<(), String> {
    if super::features::kprobes_available() {
        return Ok(());
    }
    let id = || funcs.iter().find_map(|f| kbtf.func_id(f));
    let fentry = match (skip_fentry, id()) {
        (Some(why), _) => format!("skipped ({why})"),
        (None, None) => format!("impossible: {} not in the kernel's BTF", funcs.join(", ")),
        (None, Some(id)) => match load_minimal_fentry(id) {
            Ok(()) => return Ok(()),
            Err(e) => format!("refused: the BPF_PROG_LOAD syscall returned {e}"),
        },
    };
    Err(format!("fentry {fentry}; no kprobes (CONFIG_KPROBES off)"))
}

/// `union bpf_attr`, the `BPF_PROG_LOAD` member up to `attach_btf_obj_fd`.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
    prog_btf_fd: u32,
    func_info_rec_size: u32,
    func_info: u64,
    func_info_cnt: u32,
    line_info_rec_size: u32,
    line_info: u64,
    line_info_cnt: u32,
    attach_btf_id: u32,
    attach_btf_obj_fd: u32,
    _pad: u32,
}

/// Load `r0 = 0; exit` as an fentry program on the vmlinux function of BTF id `btf_id`,
/// and close it.
fn load_minimal_fentry(btf_id: u32) -> std::io::Result<()> {
    const BPF_PROG_LOAD: libc::c_long = 5;
    const BPF_PROG_TYPE_TRACING: u32 = 26;
    const BPF_TRACE_FENTRY: u32 = 24;
    // BPF_ALU64 | BPF_MOV | BPF_K with r0 and imm 0; BPF_JMP | BPF_EXIT.
    let insns: [u64; 2] = [0xb7, 0x95];
    let license = c"GPL";
    let mut name = [0u8; 16];
    name[..14].copy_from_slice(b"lockscope_test");
    let attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_TRACING,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name: name,
        expected_attach_type: BPF_TRACE_FENTRY,
        attach_btf_id: btf_id,
        ..Default::default()
    };
    // SAFETY: `attr` points at the instructions and the license, which outlive the call;
    // the kernel only reads them (no log buffer is given).
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_LOAD,
            &attr as *const ProgLoadAttr,
            size_of::<ProgLoadAttr>() as u32,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just gave this process, closed once.
    unsafe { libc::close(fd as i32) };
    Ok(())
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

    /// The `BPF_PROG_LOAD` attribute as `include/uapi/linux/bpf.h` lays it out.
    #[test]
    fn prog_load_attr_matches_the_kernel_layout() {
        use std::mem::offset_of;
        assert_eq!(offset_of!(ProgLoadAttr, insns), 8);
        assert_eq!(offset_of!(ProgLoadAttr, log_buf), 32);
        assert_eq!(offset_of!(ProgLoadAttr, prog_name), 48);
        assert_eq!(offset_of!(ProgLoadAttr, expected_attach_type), 68);
        assert_eq!(offset_of!(ProgLoadAttr, func_info), 80);
        assert_eq!(offset_of!(ProgLoadAttr, line_info), 96);
        assert_eq!(offset_of!(ProgLoadAttr, attach_btf_id), 108);
        assert_eq!(offset_of!(ProgLoadAttr, attach_btf_obj_fd), 112);
        assert_eq!(size_of::<ProgLoadAttr>(), 120);
    }

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
