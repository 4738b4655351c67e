//! `lockscope doctor`: what this kernel allows, and the tier of every probe.

use std::{path::Path, process::ExitCode};

use crate::probe::{
    btf::{KernelBtf, KernelOffsets, VMLINUX_BTF},
    features, groups,
    loader::{
        FUTEX_PROGRAMS, FUTEX_RESTART_EXIT, HookKind, probe_rwsem_hooks, probe_spin_hooks, try_load,
    },
    rwsem::HOOKS,
};

/// The futex syscall probes (user-space locks) and what pthread attribution would need.
fn futex_rows(tracefs: Option<&Path>, can_load: bool) {
    let mut tried: Vec<(&str, Result<(), String>)> = Vec::new();
    for (prog, tp) in FUTEX_PROGRAMS.into_iter().chain([FUTEX_RESTART_EXIT]) {
        let exists = tracefs.is_some_and(|t| features::tracepoint_exists(t, "syscalls", tp));
        let status = if groups::switched_off(groups::FUTEX) {
            Err(groups::SWITCHED_OFF.to_owned())
        } else if !can_load {
            Err("not tried: needs BTF and privileges".to_owned())
        } else if !exists {
            Err(format!(
                "no syscalls:{tp} tracepoint in this kernel{}",
                if tp.ends_with("_futex") {
                    ": futexes cannot be traced"
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
            Ok(()) => ("available", format!("user-space locks ({prog})")),
            Err(e) => ("missing", e),
        };
        println!("{tp:<26} {:<11} {word:<10} {detail}", "tracepoint");
    }
    pthread_row(can_load);
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

struct Check {
    what: &'static str,
    ok: bool,
    detail: String,
}

pub fn run() -> anyhow::Result<ExitCode> {
    let mut checks = Vec::new();
    let mut push = |what, ok, detail: String| checks.push(Check { what, ok, detail });

    push("kernel", true, features::kernel_release());

    let btf = KernelBtf::load(Path::new(VMLINUX_BTF));
    let btf_ok = btf.is_ok();
    match &btf {
        Ok(_) => push("btf", true, format!("{VMLINUX_BTF} present")),
        Err(e) => push("btf", false, format!("{e:#}")),
    }
    let offsets = btf.as_ref().ok().map(KernelOffsets::from_btf);
    match &offsets {
        Some(Ok(o)) => push(
            "offsets",
            true,
            format!(
                "task_struct.mm={} .tgid={} .sighand={} .pi_lock={}, mm_struct.mmap_lock={}, sighand_struct.siglock={}",
                o.task_mm,
                o.task_tgid,
                o.task_sighand,
                o.task_pi_lock,
                o.mm_mmap_lock,
                o.sighand_siglock
            ),
        ),
        Some(Err(e)) => push("offsets", false, format!("{e:#}")),
        None => push("offsets", false, "needs BTF".into()),
    }
    for m in offsets
        .iter()
        .flat_map(|o| o.as_ref().ok())
        .flat_map(|o| &o.missing)
    {
        push("offsets", false, m.clone());
    }

    let tracefs = features::ensure_tracefs();
    match &tracefs {
        Ok(p) => push("tracefs", true, format!("{} mounted", p.display())),
        Err(e) => push("tracefs", false, format!("{e:#}")),
    }

    let privileged = features::require_privileges();
    match &privileged {
        Ok(()) => push("privileges", true, "can load eBPF programs".into()),
        Err(e) => push("privileges", false, format!("{e:#}")),
    }

    let kprobes = features::kprobes_available();
    push(
        "kprobes",
        kprobes,
        if kprobes {
            "kprobe PMU present".into()
        } else {
            "no kprobe PMU (/sys/bus/event_source/devices/kprobe): CONFIG_KPROBES is off".into()
        },
    );

    let can_load = btf_ok && privileged.is_ok();
    let fentry = if can_load {
        try_load("feature_fentry", HookKind::Fentry, "down_read_trylock")
    } else {
        Err("not tried: needs BTF and privileges".into())
    };
    push(
        "fentry",
        fentry.is_ok(),
        match &fentry {
            Ok(()) => "fentry/fexit programs load".into(),
            Err(e) => format!("refused by the kernel: {e}"),
        },
    );

    for c in &checks {
        println!(
            "{:<11} {:<4} {}",
            c.what,
            if c.ok { "ok" } else { "no" },
            c.detail
        );
    }

    println!();
    println!("{:<22} {:<11} {:<10} detail", "probe", "tier", "status");
    // Every tracepoint group of the registry, each hook loaded for real.
    let mut usable = 0;
    for g in groups::TP_GROUPS {
        for &(prog, tp) in g.hooks {
            let exists = btf
                .as_ref()
                .is_ok_and(|b| b.has_type(&format!("btf_trace_{tp}")));
            let status = if groups::switched_off(g.name) {
                Err(groups::SWITCHED_OFF.to_owned())
            } else if !can_load {
                Err("not tried: needs BTF and privileges".to_owned())
            } else if !exists {
                Err(format!("no {tp} tracepoint in this kernel"))
            } else {
                try_load(prog, HookKind::TpBtf, tp)
            };
            if status.is_ok() && g.required {
                usable += 1;
            }
            let (word, detail) = match status {
                Ok(()) => ("available", format!("{}: {}", g.name, g.gives)),
                Err(e) if g.required => ("missing", format!("{}: {e}", g.name)),
                Err(e) => ("missing", format!("{}: {e}; {}", g.name, g.without)),
            };
            println!("{tp:<22} {:<11} {word:<10} {detail}", "tracepoint");
        }
    }
    let required = groups::TP_GROUPS
        .iter()
        .filter(|g| g.required)
        .map(|g| g.hooks.len())
        .sum::<usize>();
    futex_rows(tracefs.as_ref().ok().map(|p| p.as_path()), can_load);
    rwsem_section(can_load);
    spin_section(can_load);

    if usable == required {
        println!("\nready: lock contention can be traced (tracepoint tier)");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("\nnothing can be traced: fix the items marked `no` or `missing` above");
        Ok(ExitCode::FAILURE)
    }
}

/// The rwsem lock-event hooks: how each is attached on this kernel (tried for real).
fn rwsem_section(can_load: bool) {
    println!();
    println!(
        "{:<26} {:<11} {:<10} detail",
        "rwsem lock-event hook", "tier", "status"
    );
    let tier = if can_load {
        probe_rwsem_hooks().map_err(|e| format!("{e:#}"))
    } else {
        Err("not tried: needs BTF and privileges".to_owned())
    };
    match tier {
        Ok(t) => {
            for (h, def) in t.hooks.iter().zip(HOOKS.iter()) {
                let (word, tier_name) = match h.tier {
                    Some(tier) => ("active", tier),
                    None => ("missing", "tracepoint"),
                };
                let detail = match h.tier {
                    Some(_) => format!("{} [{}]", def.role, h.detail),
                    None => format!("{}: {}", def.role, h.detail),
                };
                println!("{:<26} {tier_name:<11} {word:<10} {detail}", h.func);
            }
            let summary = match t.tier() {
                "deep" => "rwsem lock events: deep tier (exact counts per lock and task)".to_owned(),
                "mixed" => "rwsem lock events: deep tier for some hooks; the rest are tracepoint-tier estimates or n/a".to_owned(),
                _ if t.rt => format!("rwsem lock events: n/a ({})", super::super::probe::rwsem::RT_NOTE),
                _ => "rwsem lock events: tracepoint tier only (queued rlock/wlock exact; handoffs and mmap_lock trylock failures estimated; steals, fast reads, spinning, sleeps and wakes n/a)".to_owned(),
            };
            println!("{summary}");
        }
        Err(e) => println!("{:<26} {:<11} {:<10} {e}", "(all)", "-", "missing"),
    }
}

/// The deep spinlock tier (pi_lock waits, holds, starvation detector): each hook tried.
fn spin_section(can_load: bool) {
    use crate::probe::spin::Role;
    println!();
    println!(
        "{:<34} {:<11} {:<10} detail",
        "deep spinlock hook (pi_lock)", "tier", "status"
    );
    let tier = if can_load {
        probe_spin_hooks().map_err(|e| format!("{e:#}"))
    } else {
        Err("not tried: needs BTF and privileges".to_owned())
    };
    let t = match tier {
        Ok(t) => t,
        Err(e) => {
            println!("{:<34} {:<11} {:<10} {e}", "(all)", "-", "missing");
            println!("deep spinlock tier: unavailable ({e})");
            return;
        }
    };
    for h in &t.hooks {
        let role = match h.role {
            Role::Wait => "exact waits",
            Role::Acquire => "acquisitions, hold start",
            Role::Release => "hold end",
        };
        let (word, tier_name) = match h.tier {
            Some(tier) => ("active", tier),
            None => ("missing", "-"),
        };
        println!(
            "{:<34} {tier_name:<11} {word:<10} {role}: {}",
            h.func, h.detail
        );
    }
    match (&t.unavailable, &t.hold_unavailable) {
        (Some(why), _) => println!("deep spinlock tier: unavailable ({why})"),
        (None, Some(hold)) => {
            println!("deep spinlock tier: available (exact pi_lock waits only); {hold}")
        }
        (None, None) => println!(
            "deep spinlock tier: available (exact pi_lock waits, hold times, starvation detector)"
        ),
    }
}
