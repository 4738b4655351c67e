//! The deep spinlock tier: exact waits and hold times on every task's `pi_lock`
//! (fentry/fexit, else kprobe/kretprobe, on the queued-spinlock slowpath and
//! `_raw_spin_(un)lock*`) and the in-kernel starvation detector.

use aya::Ebpf;
use lockscope_common::{NAME_PI_LOCK, SpinConfig, SpinParams};

use super::{Attach, Build, Detach, Doctor, Family, Globals, Prepare, Read};
use crate::{
    aggregate::spin::{deep_entries, episodes, merge_entries, summary, unavailable_summary},
    probe::{
        groups::{self, SPIN_DEEP},
        hooks::function_hooks,
        spin::{FORCE_KPROBES_ENV, Role, SPIN_HOOK_DEFS, SpinTier, spin_config, write_params},
    },
    source::spin::read_spin,
};

/// The tier's hash maps, sized to one entry when it cannot run: `SPIN_WAIT_STATS` and
/// `SPIN_HOLD_STATS` alone are 16,384 per-CPU elements, each its own per-CPU allocation.
const DEEP_MAPS: [&str; 5] = [
    "SPIN_WAIT_STATS",
    "SPIN_HOLD_STATS",
    "SPIN_WATCHED",
    "SPIN_FREED",
    "SPIN_STACKS",
];

#[derive(Default)]
pub struct Spin {
    config: Option<SpinConfig>,
    /// Why the tier cannot run here, found before the load.
    unavailable: Option<String>,
    pub tier: SpinTier,
}

impl Spin {
    /// Set the starvation detector's thresholds (no-op when the tier is off).
    pub fn set_params(&mut self, ebpf: &mut Ebpf, p: SpinParams) -> anyhow::Result<()> {
        if self.tier.active() {
            write_params(ebpf, &p)?;
            self.tier.params = p;
        }
        Ok(())
    }
}

impl Family for Spin {
    fn name(&self) -> &'static str {
        SPIN_DEEP
    }

    fn prepare(&mut self, cx: &mut Prepare<'_>) -> anyhow::Result<()> {
        let pi_lock = cx.offsets.name_kinds & NAME_PI_LOCK != 0;
        let config = spin_config(cx.kbtf);
        self.unavailable = if groups::switched_off(SPIN_DEEP) {
            Some(groups::SWITCHED_OFF.into())
        } else if !pi_lock {
            Some("task_struct.pi_lock is not in the kernel's BTF".into())
        } else if let Err(e) = &config {
            Some(format!("{e:#}"))
        } else {
            // The wait hooks can attach nowhere (no kprobes, fentry refused): say so as
            // the chooser would, and load the tier's maps at their smallest.
            let force =
                std::env::var_os(FORCE_KPROBES_ENV).map(|_| format!("{FORCE_KPROBES_ENV} set"));
            let waits: Vec<&str> = SPIN_HOOK_DEFS
                .iter()
                .filter(|d| d.role == Role::Wait)
                .map(|d| d.func)
                .collect();
            function_hooks(cx.kbtf, &waits, force.as_deref())
                .err()
                .map(|why| format!("no queued-spinlock slowpath hook ({why})"))
        };
        self.config = config.ok();
        Ok(())
    }

    fn globals(&self, out: &mut Globals) {
        out.set("SPIN_CONFIG", &self.config.unwrap_or_default());
        if self.unavailable.is_some() {
            for map in DEEP_MAPS {
                out.map_sizes.push((map, 1));
            }
        }
    }

    fn attach(&mut self, cx: &mut Attach<'_>) -> anyhow::Result<()> {
        self.tier = match &self.unavailable {
            Some(why) => SpinTier::off(why.clone()),
            None => SpinTier::attach(cx.ebpf, cx.btf, true),
        };
        Ok(())
    }

    fn read(&self, cx: &mut Read<'_>) -> anyhow::Result<()> {
        let tier = &self.tier;
        if !tier.active() {
            return Ok(());
        }
        let snap = read_spin(cx.ebpf, tier.episodes(), tier.malformed())?;
        cx.deep_episodes = Some(episodes(&snap, cx.names, cx.lost));
        // Every episode that arrived is in this snapshot; keep only the latest for the next.
        tier.keep_latest(cx.detail.episodes);
        cx.spin = Some(snap);
        Ok(())
    }

    /// The tier's entries merged into the lock table, and its summary.
    fn build(&self, cx: &mut Build<'_>) -> anyhow::Result<()> {
        let tier = &self.tier;
        let summary = match cx.spin {
            None => {
                let why = tier.unavailable.as_deref().unwrap_or("not attached");
                unavailable_summary(why, tier.hook_tiers())
            }
            Some(snap) => {
                let hold_ok = tier.hold_unavailable.is_none();
                merge_entries(&mut cx.rec.locks, deep_entries(snap, cx.names, hold_ok));
                summary(
                    snap,
                    tier.hook_tiers(),
                    tier.hold_unavailable.as_deref(),
                    &tier.params,
                )
            }
        };
        cx.rec.spin = Some(summary);
        // Without the real-time probes, the episodes are the deep tier's alone.
        if cx.rec.starvation_episodes.is_none() {
            cx.rec.starvation_episodes = cx.deep_episodes.clone();
        }
        Ok(())
    }

    fn detach(&mut self, cx: &mut Detach<'_>) {
        self.tier.detach(cx.ebpf);
    }

    fn doctor_section(&self, cx: &Doctor<'_>) {
        spin_section(cx.can_load);
    }
}

/// The deep spinlock tier (pi_lock waits, holds, starvation detector): each hook tried.
fn spin_section(can_load: bool) {
    use crate::probe::loader::probe_spin_hooks;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tier_that_cannot_run_loads_its_maps_at_one_entry() {
        let mut spin = Spin::default();
        let mut out = Globals::default();
        spin.globals(&mut out);
        assert!(out.map_sizes.is_empty(), "{:?}", out.map_sizes);
        spin.unavailable = Some("no kprobes".into());
        let mut out = Globals::default();
        spin.globals(&mut out);
        let sized: Vec<_> = out.map_sizes.iter().map(|(m, n)| (*m, *n)).collect();
        assert_eq!(sized.len(), DEEP_MAPS.len());
        assert!(sized.iter().all(|&(m, n)| n == 1 && DEEP_MAPS.contains(&m)));
        assert!(sized.iter().any(|&(m, _)| m == "SPIN_WAIT_STATS"));
    }
}
