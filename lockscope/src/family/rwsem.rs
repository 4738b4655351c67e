//! rwsem lock events: how each rwsem acquisition went (reader steal, optimistic spin,
//! handoff, sleep), exact on the deep tier (fentry/kprobe on the rwsem slow paths),
//! queued counts and estimates on the tracepoint tier, and with `--mmap-trylocks` an
//! estimate of mmap_lock trylock failures from `mmap_lock_acquire_returned`.

use lockscope_common::{NAME_MMAP_LOCK, RwsemConfig};

use super::{Attach, Build, Detach, Doctor, Family, Globals, Prepare, Read};
use crate::{
    aggregate::rwsem::{apply_rwsem_events, event_kinds, summary},
    probe::{
        groups::{self, MMAP_LOCK_ESTIMATE, RWSEM_DEEP},
        hooks::function_hooks,
        rwsem::{DeepTier, HOOKS, RT_NOTE, publish_mask, rwsem_config},
    },
    source::read_rwsem_events,
};

/// The slowpaths a minimal fentry program is tried on, when the kernel has no kprobes.
const SLOWPATH_FUNCS: [&str; 2] = ["rwsem_down_write_slowpath", "rwsem_down_read_slowpath"];

#[derive(Default)]
pub struct Rwsem {
    config: Option<RwsemConfig>,
    /// The mmap_lock estimate can run here (asked for, and the kernel has its event).
    mmap_ok: bool,
    pub deep: DeepTier,
    /// The tracepoint-tier estimate of mmap_lock trylock failures is attached.
    pub mmap_estimate: bool,
    /// The slowpath hooks could attach (kprobes, or fentry loads): else the tier's own
    /// map is loaded at its smallest.
    hooks_possible: bool,
}

impl Family for Rwsem {
    fn name(&self) -> &'static str {
        RWSEM_DEEP
    }

    fn prepare(&mut self, cx: &mut Prepare<'_>) -> anyhow::Result<()> {
        self.config = rwsem_config(cx.kbtf);
        self.mmap_ok = cx.opts.mmap_trylocks
            && cx.offsets.name_kinds & NAME_MMAP_LOCK != 0
            && cx.kbtf.has_type("btf_trace_mmap_lock_acquire_returned");
        self.hooks_possible = !groups::switched_off(RWSEM_DEEP)
            && function_hooks(cx.kbtf, &SLOWPATH_FUNCS, None).is_ok();
        Ok(())
    }

    fn globals(&self, out: &mut Globals) {
        out.set("RWSEM_CONFIG", &self.config.unwrap_or_default());
        if !self.hooks_possible {
            // The waits in a slowpath, by thread: 32,768 preallocated entries. The event
            // counts (`RWSEM_EVENT_STATS`) stay: the tracepoint tier counts there too.
            out.map_sizes.push(("SLOWPATHS", 1));
        }
    }

    fn attach(&mut self, cx: &mut Attach<'_>) -> anyhow::Result<()> {
        self.deep = if groups::switched_off(RWSEM_DEEP) {
            cx.notes.push(format!(
                "rwsem-deep: {}: rwsem lock events are tracepoint-tier estimates or n/a",
                groups::SWITCHED_OFF
            ));
            DeepTier::default()
        } else {
            DeepTier::attach(cx.ebpf, cx.btf, self.config.is_some())
        };
        publish_mask(cx.ebpf, self.deep.mask)?;
        // Tracepoint-tier estimate of mmap_lock trylock failures (absent before 5.19's
        // mmap_lock events or when the trylock hooks run: then it counts nothing). It runs
        // on every mmap_lock acquisition, so only when asked for.
        if self.mmap_ok
            && let Some(rc) = self.config
        {
            let prog = if rc.mmap_success_arg == 3 {
                "rwsem_mmap_lock_acquire_returned4"
            } else {
                "rwsem_mmap_lock_acquire_returned3"
            };
            self.mmap_estimate =
                cx.group_hooks(&MMAP_LOCK_ESTIMATE, &[(prog, "mmap_lock_acquire_returned")])?;
        }
        if self.deep.tier() != "tracepoint" {
            *cx.tier = "deep";
        }
        Ok(())
    }

    fn read(&self, cx: &mut Read<'_>) -> anyhow::Result<()> {
        read_rwsem_events(cx.ebpf, cx.raw)
    }

    fn build(&self, cx: &mut Build<'_>) -> anyhow::Result<()> {
        let deep = &self.deep;
        let kinds = event_kinds(deep.mask, deep.rt, self.mmap_estimate);
        apply_rwsem_events(cx.raw, cx.names, &kinds, &mut cx.rec.locks);
        cx.rec.rwsem_events = Some(summary(
            cx.raw,
            &kinds,
            deep.tier(),
            deep.hook_tiers(),
            deep.rt.then(|| RT_NOTE.to_owned()),
        ));
        Ok(())
    }

    fn detach(&mut self, cx: &mut Detach<'_>) {
        self.deep.detach(cx.ebpf);
    }

    fn doctor_section(&self, cx: &Doctor<'_>) {
        rwsem_section(cx.can_load);
    }
}

/// The rwsem lock-event hooks: how each is attached on this kernel (tried for real).
fn rwsem_section(can_load: bool) {
    use crate::probe::loader::probe_rwsem_hooks;
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
                _ if t.rt => format!("rwsem lock events: n/a ({RT_NOTE})"),
                _ => "rwsem lock events: tracepoint tier only (queued rlock/wlock exact; handoffs and mmap_lock trylock failures estimated; steals, fast reads, spinning, sleeps and wakes n/a)".to_owned(),
            };
            println!("{summary}");
        }
        Err(e) => println!("{:<26} {:<11} {:<10} {e}", "(all)", "-", "missing"),
    }
}
