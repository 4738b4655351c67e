//! `lockscope doctor`: what this kernel allows, and the tier of every probe.

use std::{path::Path, process::ExitCode};

use crate::{
    family::{Doctor, Families},
    probe::{
        btf::{KernelBtf, KernelOffsets, VMLINUX_BTF},
        features,
        loader::{HookKind, try_load},
    },
};

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

    // A release-side contention tracepoint (a 2026 series for lock:): the hold time of a
    // contended lock and its holder's release stack would come from it. Not used yet.
    let release = btf
        .as_ref()
        .is_ok_and(|b| b.has_type("btf_trace_contended_release"));
    push(
        "release",
        release,
        if release {
            "lock:contended_release present (holders' hold times: not used yet)".into()
        } else {
            "no lock:contended_release tracepoint: holders' hold times under contention \
             and release stacks need it (not in this kernel)"
                .into()
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
    // Every family's hooks, each loaded for real: first the tracepoint rows, then the
    // deep tiers' sections.
    let families = Families::default();
    let cx = Doctor {
        kbtf: btf.as_ref().ok(),
        tracefs: tracefs.as_ref().ok().map(|p| p.as_path()),
        can_load,
        ready: std::cell::Cell::new(false),
    };
    for f in families.all() {
        f.doctor_rows(&cx);
    }
    for f in families.all() {
        f.doctor_section(&cx);
    }

    if cx.ready.get() {
        println!("\nready: lock contention can be traced (tracepoint tier)");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("\nnothing can be traced: fix the items marked `no` or `missing` above");
        Ok(ExitCode::FAILURE)
    }
}
