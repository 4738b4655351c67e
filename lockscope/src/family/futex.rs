//! User-space locks: the futex(2) and futex2 syscall tracepoints (and
//! `restart_syscall`), each call paired per thread in its task storage and aggregated
//! per futex word; and pthread attribution: blocking waits unwound in userspace to the
//! lock function and call site (`probe::pthread`).

use std::path::Path;

use aya::Ebpf;

use super::{Attach, Build, Detach, Doctor, Family, Globals, Prepare, Read};
use crate::{
    aggregate::futex::{FutexEvents, HotForgotten, HotSlots, forget_hot, futex_type_filtered},
    decode::LockType,
    probe::{
        Target, features,
        groups::{self, FUTEX, FUTEX_BLOCKING, FUTEX_RAW},
        loader::{FutexMode, HookKind, error_chain, try_load},
        pthread::{PthreadProbes, pthread_config},
    },
    source::futex::{FUTEX_TASK_ITER, read_futex},
    symbolize::user::UserNames,
};

/// Futex syscall probes: (program, tracepoint in category `syscalls`). The exit program
/// is attached to the exit of every futex syscall; `restart_syscall` continues timed waits
/// interrupted by a signal.
pub const FUTEX_PROGRAMS: [(&str, &str); 11] = [
    ("futex_enter", "sys_enter_futex"),
    ("futex_exit", "sys_exit_futex"),
    ("futex_wait_enter", "sys_enter_futex_wait"),
    ("futex_exit", "sys_exit_futex_wait"),
    ("futex_wake_enter", "sys_enter_futex_wake"),
    ("futex_exit", "sys_exit_futex_wake"),
    ("futex_waitv_enter", "sys_enter_futex_waitv"),
    ("futex_exit", "sys_exit_futex_waitv"),
    ("futex_requeue_enter", "sys_enter_futex_requeue"),
    ("futex_exit", "sys_exit_futex_requeue"),
    ("futex_restart_enter", "sys_enter_restart_syscall"),
];
/// Not attached on x86_64, where the exit probe handles calls that cannot wait whole,
/// reading their arguments back from the saved registers.
const FUTEX_WAKE_ENTER: &str = "futex_wake_enter";
/// Attached after the others, so that no restart is continued before its exit probe runs.
/// The exit program of the futex syscalls, told `restart_syscall` apart by its number
/// (`FUTEX_RESTART_NR`): one program fewer to verify at start.
pub const FUTEX_RESTART_EXIT: (&str, &str) = ("futex_exit", "sys_exit_restart_syscall");

/// The (program, tracepoint) pairs attached, in order: the futex syscalls', then
/// `restart_syscall`'s exit. Not `futex_wake`'s entry on x86_64, where the exit handles
/// those calls whole.
fn attached_programs() -> impl Iterator<Item = (&'static str, &'static str)> {
    FUTEX_PROGRAMS
        .into_iter()
        .chain([FUTEX_RESTART_EXIT])
        .filter(|&(prog, _)| !(prog == FUTEX_WAKE_ENTER && cfg!(target_arch = "x86_64")))
}

/// The futex(2) tracepoint this kernel lacks, if any: without the pair the family
/// attaches nothing.
fn missing_futex_pair(tracefs: &Path) -> Option<&'static str> {
    ["sys_enter_futex", "sys_exit_futex"]
        .into_iter()
        .find(|tp| !features::tracepoint_exists(tracefs, "syscalls", tp))
}

/// Record user-space locks for these types (`None`: all types)?
pub fn wants_futex(types: &Option<Vec<LockType>>) -> bool {
    types
        .as_ref()
        .is_none_or(|ts| ts.iter().any(|t| t.is_user()))
}

#[derive(Default)]
pub struct Futex {
    wanted: bool,
    /// `LoadOptions::pthread_ring_bytes`.
    ring_bytes: u32,
    /// The futex probes are attached (user-space locks are recorded).
    pub enabled: bool,
    /// Futex tracepoints this kernel lacks (not attached), e.g. `sys_enter_futex_waitv`.
    pub missing: Vec<String>,
    /// pthread lock attribution: waits unwound, and why some locks cannot be attributed.
    pub pthread: PthreadProbes,
    /// User-space lock types asked for (`None`: all).
    types: Option<Vec<LockType>>,
    /// User call sites of pthread locks: process maps kept past the processes' exits.
    pub user_names: UserNames,
    /// The gate was closed: the slow tracepoint release can wait for lockscope's exit.
    gated: bool,
    /// What forgotten processes left in `FUTEX_HOT` slots.
    hot_forgotten: std::cell::RefCell<HotForgotten>,
    /// Every call, or only the waits that sleep (`LoadOptions::futex_mode`).
    pub mode: FutexMode,
}

impl Futex {
    /// The processes in `gone` are forgotten: their `FUTEX_HOT` slots (as last read)
    /// must not bring their futex words back.
    pub fn forget_hot(&self, hot: &HotSlots, gone: &std::collections::HashSet<u32>) {
        forget_hot(hot, gone, &mut self.hot_forgotten.borrow_mut());
    }

    /// Attach the futex syscall probes: the raw `sys_enter`/`sys_exit` where this kernel
    /// allows them, else the per-syscall tracepoints it has. Without the raw ones nor
    /// the futex(2) pair the family is skipped with a note (kernel locks are still
    /// recorded); the futex2 syscalls and restart_syscall are optional (missing ones are
    /// listed in `missing`).
    fn attach_probes(&mut self, cx: &mut Attach<'_>) -> anyhow::Result<()> {
        // The calls in flight are in the threads' storage, counted by a task iterator at
        // each snapshot: loaded first, so that a kernel refusing it leaves nothing attached.
        if let Err(e) =
            crate::source::iter::task_iter(cx.ebpf, FUTEX_TASK_ITER)?.load("task", cx.btf)
        {
            cx.notes.push(format!(
                "user-space locks (futexes) are not traced: the kernel refused the futex \
                 probes' task iterator ({}); kernel locks are recorded",
                error_chain(&e)
            ));
            return Ok(());
        }
        if self.mode == FutexMode::Blocking {
            if !cfg!(target_arch = "x86_64") {
                cx.notes.push(
                    "user-space locks (futexes) are not traced: --futex-mode blocking reads \
                     the syscall from the saved registers, which lockscope knows on x86_64 \
                     only; kernel locks are recorded"
                        .to_owned(),
                );
                return Ok(());
            }
            if !cx.links.attach_group(
                cx.ebpf,
                &FUTEX_BLOCKING,
                FUTEX_BLOCKING.hooks,
                cx.btf,
                cx.notes,
            )? {
                return Ok(());
            }
            cx.notes.push(BLOCKING_NOTE.to_owned());
        } else if !self.attach_raw(cx)? {
            // The per-syscall tracepoints, which need the futex(2) pair.
            let tracefs = features::tracefs_path();
            if let Some(tp) = missing_futex_pair(&tracefs) {
                cx.notes.push(format!(
                    "user-space locks (futexes) are not traced: this kernel has no \
                     syscalls:{tp} tracepoint (needs CONFIG_FTRACE_SYSCALLS); kernel locks \
                     are recorded"
                ));
                return Ok(());
            }
            for (prog, tp) in attached_programs() {
                if !features::tracepoint_exists(&tracefs, "syscalls", tp) {
                    self.missing.push(tp.to_owned());
                    continue;
                }
                cx.links.attach_tracefs(cx.ebpf, prog, "syscalls", tp)?;
            }
        }
        set_gate(cx.ebpf, true)?;
        self.enabled = true;
        Ok(())
    }

    /// Calls mode on the raw syscall tracepoints ([`FUTEX_RAW`]), where this kernel
    /// allows them: whether they were attached. Refused, a note says so and the caller
    /// falls back to the per-syscall tracepoints.
    fn attach_raw(&mut self, cx: &mut Attach<'_>) -> anyhow::Result<bool> {
        // Taken for missing by the test switch, the group says so in its note.
        if !cfg!(target_arch = "x86_64") {
            return Ok(false);
        }
        let mut why = Vec::new();
        if cx
            .links
            .attach_group(cx.ebpf, &FUTEX_RAW, FUTEX_RAW.hooks, cx.btf, &mut why)?
        {
            return Ok(true);
        }
        cx.notes.extend(why);
        Ok(false)
    }
}

/// Calls mode tries the raw syscall tracepoints first: on x86_64 (the programs read the
/// call's number and arguments from its saved registers), unless the test switch takes
/// them for missing. What `preload` verifies; `attach_raw` finds out for sure.
fn use_raw() -> bool {
    cfg!(target_arch = "x86_64") && !groups::switched_off(FUTEX_RAW.name)
}

impl Family for Futex {
    fn name(&self) -> &'static str {
        FUTEX
    }

    fn prepare(&mut self, cx: &mut Prepare<'_>) -> anyhow::Result<()> {
        self.wanted = wants_futex(&cx.opts.types);
        self.types = cx
            .opts
            .types
            .as_ref()
            .map(|ts| ts.iter().copied().filter(|t| t.is_user()).collect());
        self.ring_bytes = cx.opts.pthread_ring_bytes;
        self.mode = cx.opts.futex_mode;
        Ok(())
    }

    fn globals(&self, out: &mut Globals) {
        out.map_sizes.push(("PTHREAD_EVENTS", self.ring_bytes));
        // pthread attribution unwinds the waiter's stack: at the futex exit, or in
        // blocking mode as it went to sleep.
        out.set("PTHREAD_CONFIG", &pthread_config(self.wanted));
        out.set("FUTEX_RESTART_NR", &(libc::SYS_restart_syscall as i32));
    }

    fn preload(&self, out: &mut Vec<crate::probe::loader::Preload>) {
        if !self.wanted || groups::switched_off(FUTEX) {
            return;
        }
        use crate::probe::loader::Preload;
        if self.mode == FutexMode::Blocking {
            if cfg!(target_arch = "x86_64") {
                Preload::group(&FUTEX_BLOCKING, out);
            }
            return;
        }
        if use_raw() {
            Preload::group(&FUTEX_RAW, out);
            return;
        }
        // Only what `attach_probes` will attach: without the futex(2) pair nothing, else
        // the programs whose tracepoints this kernel has (a program left loaded for
        // nothing would stay so for the whole session).
        let tracefs = features::tracefs_path();
        if missing_futex_pair(&tracefs).is_some() {
            return;
        }
        let exists = |tp: &str| features::tracepoint_exists(&tracefs, "syscalls", tp);
        // The exit program first: the verifier takes longest over it (a program listed
        // twice is verified once).
        out.push(Preload::Tracefs(FUTEX_RESTART_EXIT.0));
        out.extend(
            attached_programs()
                .filter(|&(_, tp)| exists(tp))
                .map(|(prog, _)| Preload::Tracefs(prog)),
        );
    }

    fn attach(&mut self, cx: &mut Attach<'_>) -> anyhow::Result<()> {
        if !self.wanted {
            return Ok(());
        }
        if groups::switched_off(FUTEX) {
            cx.notes.push(format!(
                "futex: {}: user-space locks are not traced; kernel locks are recorded",
                groups::SWITCHED_OFF
            ));
            return Ok(());
        }
        // The unwinding thread first, with the targets' maps and the C library read,
        // so the first waits do not pile up in the ring buffer behind that work.
        let pids = match &cx.opts.target {
            Target::Pids(p) => p.clone(),
            _ => Vec::new(),
        };
        self.pthread = PthreadProbes::start(cx.ebpf, &pids);
        self.attach_probes(cx)?;
        if !self.enabled {
            self.pthread.detach();
            self.pthread = PthreadProbes::default();
        }
        Ok(())
    }

    fn read(&self, cx: &mut Read<'_>) -> anyhow::Result<()> {
        if self.enabled {
            cx.raw.futex = read_futex(
                cx.ebpf,
                &mut cx.raw.comms,
                &mut self.hot_forgotten.borrow_mut(),
            )?;
        }
        cx.raw.futex.types = self.types.clone();
        cx.raw.futex.blocking = self.mode == FutexMode::Blocking;
        let p = &mut cx.raw.futex.pthread;
        self.pthread.fill(p);
        let keys: Vec<(u32, u64)> = p.sites.iter().map(|s| (s.key.tgid, s.key.site)).collect();
        p.site_names = self.user_names.names(&keys);
        Ok(())
    }

    fn build(&self, cx: &mut Build<'_>) -> anyhow::Result<()> {
        let f = &cx.raw.futex;
        cx.rec.futex_events = f
            .enabled
            .then(|| FutexEvents::from_snapshot(f, futex_type_filtered(f)));
        Ok(())
    }

    fn stop(&mut self, ebpf: &mut Ebpf) {
        self.gated = self.enabled && set_gate(ebpf, false).is_ok();
    }

    fn detach(&mut self, cx: &mut Detach<'_>) {
        cx.links.release_tracefs(self.gated);
        self.pthread.detach();
    }

    fn doctor_rows(&self, cx: &Doctor<'_>) {
        futex_rows(cx.tracefs, cx.can_load);
    }
}

/// Said at the start of a run in blocking mode, and kept in the recording.
pub const BLOCKING_NOTE: &str = "futex: blocking mode: user-space locks are the futex waits \
     that slept, counted once per sleep and timed from the switch out to the switch in \
     (pthread call sites too); wakes, EAGAIN returns and calls that did not block are not \
     seen (--futex-mode calls counts every call exactly)";

/// Open or close the futex probes' gate.
fn set_gate(ebpf: &mut Ebpf, on: bool) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let mut gate: aya::maps::Array<_, u32> =
        aya::maps::Array::try_from(ebpf.map_mut("FUTEX_GATE").context("FUTEX_GATE map")?)?;
    gate.set(0, u32::from(on), 0)
        .context("setting FUTEX_GATE")?;
    Ok(())
}

/// The futex syscall probes (user-space locks) and what pthread attribution would need.
fn futex_rows(tracefs: Option<&Path>, can_load: bool) {
    if cfg!(target_arch = "x86_64") {
        raw_row(can_load);
    }
    let mut tried: Vec<(&str, Result<(), String>)> = Vec::new();
    for (prog, tp) in FUTEX_PROGRAMS.into_iter().chain([FUTEX_RESTART_EXIT]) {
        let exists = tracefs.is_some_and(|t| features::tracepoint_exists(t, "syscalls", tp));
        let status = if groups::switched_off(FUTEX) {
            Err(groups::SWITCHED_OFF.to_owned())
        } else if !can_load {
            Err("not tried: needs BTF and privileges".to_owned())
        } else if !exists {
            Err(format!(
                "no syscalls:{tp} tracepoint in this kernel{}",
                if tp.ends_with("_futex") {
                    ": futex calls cannot be traced (--futex-mode blocking still can)"
                } else {
                    " (optional: those calls are not seen)"
                }
            ))
        } else if let Some((_, r)) = tried.iter().find(|(p, _)| *p == prog) {
            r.clone()
        } else {
            let r = try_load(prog, HookKind::TracePoint, tp);
            tried.push((prog, r.clone()));
            r
        };
        let (word, detail) = match status {
            Ok(()) => (
                "available",
                if cfg!(target_arch = "x86_64") {
                    format!("user-space locks ({prog}), where sys_enter/sys_exit are refused")
                } else {
                    format!("user-space locks ({prog})")
                },
            ),
            Err(e) => ("missing", e),
        };
        println!("{tp:<26} {:<11} {word:<10} {detail}", "tracepoint");
    }
    blocking_row(can_load);
    pthread_row(can_load);
}

/// Calls mode on the raw syscall tracepoints (x86_64), tried before the per-syscall ones.
fn raw_row(can_load: bool) {
    let status = if groups::switched_off(FUTEX) || groups::switched_off(FUTEX_RAW.name) {
        Err(groups::SWITCHED_OFF.to_owned())
    } else if !can_load {
        Err("not tried: needs BTF and privileges".to_owned())
    } else {
        FUTEX_RAW
            .hooks
            .iter()
            .try_for_each(|&(prog, tp)| try_load(prog, HookKind::TpBtf, tp))
    };
    let (word, detail) = match status {
        Ok(()) => (
            "available",
            "user-space locks: every futex call, one program on each system call's entry and \
             exit (the per-syscall tracepoints below are not used)"
                .to_owned(),
        ),
        Err(e) => (
            "missing",
            format!("{e}: the per-syscall tracepoints below are used (slower to release)"),
        ),
    };
    println!(
        "{:<26} {:<11} {word:<10} {detail}",
        "sys_enter, sys_exit", "tp_btf"
    );
}

/// `--futex-mode blocking`: the futex waits that sleep, at the context switch.
fn blocking_row(can_load: bool) {
    let (prog, tp) = FUTEX_BLOCKING.hooks[0];
    let status = if groups::switched_off(FUTEX) {
        Err(groups::SWITCHED_OFF.to_owned())
    } else if !cfg!(target_arch = "x86_64") {
        Err("x86_64 only (the syscall is read from the saved registers)".to_owned())
    } else if !can_load {
        Err("not tried: needs BTF and privileges".to_owned())
    } else {
        try_load(prog, HookKind::TpBtf, tp)
    };
    let (word, detail) = match status {
        Ok(()) => (
            "available",
            "--futex-mode blocking: futex waits that sleep, no syscall tracepoint".to_owned(),
        ),
        Err(e) => ("missing", format!("--futex-mode blocking: {e}")),
    };
    println!(
        "{:<26} {:<11} {word:<10} {detail}",
        "futex waits that sleep", "tp_btf"
    );
}

/// pthread attribution: waits unwound through the system C library's `.eh_frame`.
fn pthread_row(can_load: bool) {
    let row = |status: &str, detail: String| {
        println!(
            "{:<26} {:<11} {status:<10} {detail}",
            "pthread attribution", "futex+unwind"
        )
    };
    if !can_load {
        return row("missing", "not tried: needs BTF and privileges".into());
    }
    let Some((path, shown)) = crate::probe::pthread::system_libc() else {
        return row(
            "missing",
            "no shared C library found (lockscope and init map none): futex words are named \
             by address"
                .into(),
        );
    };
    match crate::symbolize::unwind::check_library(&path) {
        Ok(funcs) => row(
            "available",
            format!(
                "{shown}: {} (at the futex syscall, only waits that block; statically linked \
                 programs: futex words by address)",
                funcs.join(", ")
            ),
        ),
        Err(e) => row(
            "missing",
            format!("{shown}: {e}; futex words are named by address"),
        ),
    }
}
