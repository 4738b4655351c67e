//! The rwsem deep tier: which kernel functions the lock-event probes hook, how each is
//! hooked on this kernel (fentry/fexit, else kprobe/kretprobe, else not at all), and
//! the BTF offsets they read. Used by the loader (attach) and `doctor` (report).

use std::collections::BTreeMap;

use anyhow::anyhow;
use aya::{Btf, Ebpf};
use lockscope_common::*;

use super::{
    btf::KernelBtf,
    hooks::{Attached, Chooser, Hook, ProgKind, hook_tiers},
};

/// One hooked kernel function and the programs that hook it, per mechanism.
#[derive(Debug, Clone, Copy)]
pub struct HookDef {
    pub func: &'static str,
    pub bit: u32,
    /// What it gives (for `doctor`).
    pub role: &'static str,
    pub fentry: &'static [(&'static str, ProgKind)],
    pub kprobe: &'static [(&'static str, ProgKind)],
    /// Only useful when these hooks are attached too.
    pub needs: u32,
}

pub const HOOKS: [HookDef; 7] = [
    HookDef {
        func: "rwsem_down_read_slowpath",
        bit: HOOK_READ_SLOWPATH,
        role: "rlock_steal, rlock_fast, rlock, rlock_fail",
        fentry: &[
            ("rwsem_read_slowpath_fentry", ProgKind::FEntry),
            ("rwsem_read_slowpath_fexit", ProgKind::FExit),
        ],
        kprobe: &[
            ("rwsem_read_slowpath_kprobe", ProgKind::KProbe),
            ("rwsem_read_slowpath_kretprobe", ProgKind::KRetProbe),
        ],
        needs: 0,
    },
    HookDef {
        func: "rwsem_down_write_slowpath",
        bit: HOOK_WRITE_SLOWPATH,
        role: "opt_lock, opt_fail, opt_nospin (estimate), wlock, wlock_fail",
        fentry: &[
            ("rwsem_write_slowpath_fentry", ProgKind::FEntry),
            ("rwsem_write_slowpath_fexit", ProgKind::FExit),
        ],
        kprobe: &[
            ("rwsem_write_slowpath_kprobe", ProgKind::KProbe),
            ("rwsem_write_slowpath_kretprobe", ProgKind::KRetProbe),
        ],
        needs: 0,
    },
    HookDef {
        func: "rwsem_mark_wake",
        bit: HOOK_MARK_WAKE,
        role: "wake_reader, wake_writer, rlock_handoff",
        fentry: &[
            ("rwsem_mark_wake_fentry", ProgKind::FEntry),
            ("rwsem_mark_wake_fexit", ProgKind::FExit),
        ],
        kprobe: &[
            ("rwsem_mark_wake_kprobe", ProgKind::KProbe),
            ("rwsem_mark_wake_kretprobe", ProgKind::KRetProbe),
        ],
        needs: 0,
    },
    HookDef {
        func: "rwsem_spin_on_owner",
        bit: HOOK_SPIN_ON_OWNER,
        role: "wlock_handoff (a queued writer spins only after setting the handoff bit)",
        fentry: &[("rwsem_spin_on_owner_fentry", ProgKind::FEntry)],
        kprobe: &[("rwsem_spin_on_owner_kprobe", ProgKind::KProbe)],
        needs: HOOK_WRITE_SLOWPATH,
    },
    HookDef {
        func: "schedule",
        bit: HOOK_SCHEDULE,
        role: "sleep_reader, sleep_writer (schedule() by a queued waiter)",
        fentry: &[("rwsem_schedule_fentry", ProgKind::FEntry)],
        kprobe: &[("rwsem_schedule_kprobe", ProgKind::KProbe)],
        needs: HOOK_READ_SLOWPATH | HOOK_WRITE_SLOWPATH,
    },
    HookDef {
        func: "down_read_trylock",
        bit: HOOK_READ_TRYLOCK,
        role: "trylock_fail (read)",
        fentry: &[("down_read_trylock_fexit", ProgKind::FExit)],
        kprobe: &[
            ("down_read_trylock_kprobe", ProgKind::KProbe),
            ("down_read_trylock_kretprobe", ProgKind::KRetProbe),
        ],
        needs: 0,
    },
    HookDef {
        func: "down_write_trylock",
        bit: HOOK_WRITE_TRYLOCK,
        role: "trylock_fail (write)",
        fentry: &[("down_write_trylock_fexit", ProgKind::FExit)],
        kprobe: &[
            ("down_write_trylock_kprobe", ProgKind::KProbe),
            ("down_write_trylock_kretprobe", ProgKind::KRetProbe),
        ],
        needs: 0,
    },
];

/// How one hook ended up on this kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookStatus {
    pub func: &'static str,
    /// `fentry` or `kprobe` when attached.
    pub tier: Option<&'static str>,
    /// Why not, or what was refused before the fallback worked.
    pub detail: String,
}

/// Is this a PREEMPT_RT kernel (rwsems built on rtmutex, no rwsem lock events)?
pub fn kernel_is_rt() -> bool {
    std::fs::read_to_string("/sys/kernel/realtime")
        .map(|s| s.trim() == "1")
        .unwrap_or(false)
}

pub const RT_NOTE: &str = "PREEMPT_RT kernel: rwsems are rtmutex-based (rwbase_rt); the rwsem \
                           slowpaths and their lock events do not exist here";

/// Offsets the rwsem probes read, from BTF. `None` on kernels whose `rw_semaphore` has
/// no `count` (PREEMPT_RT).
pub fn rwsem_config(kbtf: &KernelBtf) -> Option<RwsemConfig> {
    let list = kbtf.member_offset("rwsem_waiter", "list").ok()?;
    let ty = kbtf.member_offset("rwsem_waiter", "type").ok()?;
    let mmap_params = kbtf.func_proto_params("btf_trace_mmap_lock_acquire_returned");
    // btf_trace_* protos have a leading `void *` context argument.
    let (write, success) = match mmap_params {
        Some(5) => (2, 3),
        _ => (1, 2),
    };
    Some(RwsemConfig {
        off_count: kbtf.member_offset("rw_semaphore", "count").ok()?,
        off_owner: kbtf.member_offset("rw_semaphore", "owner").ok()?,
        off_wait_list: kbtf.member_offset("rw_semaphore", "wait_list").ok()?,
        off_waiter_type: ty.checked_sub(list)?,
        mmap_write_arg: write,
        mmap_success_arg: success,
    })
}

/// The deep tier as attached: status per hook and the attached-hook mask.
#[derive(Debug, Default)]
pub struct DeepTier {
    pub hooks: Vec<HookStatus>,
    pub mask: u32,
    pub rt: bool,
    /// What was loaded and attached, to detach.
    attached: Attached,
}

impl DeepTier {
    /// "deep" when both slowpaths are hooked, "tracepoint" when none is, else "mixed".
    pub fn tier(&self) -> &'static str {
        let both = HOOK_READ_SLOWPATH | HOOK_WRITE_SLOWPATH;
        if self.mask & both == both {
            "deep"
        } else if self.mask == 0 {
            "tracepoint"
        } else {
            "mixed"
        }
    }

    /// Tier of each hook by function name, for reports.
    pub fn hook_tiers(&self) -> BTreeMap<String, String> {
        hook_tiers(self.hooks.iter().map(|h| (h.func, h.tier)))
    }

    /// Attach every hook the kernel allows, preferring fentry/fexit.
    pub fn attach(ebpf: &mut Ebpf, btf: &Btf, have_config: bool) -> Self {
        let chooser = Chooser::new(None);
        let mut tier = DeepTier {
            rt: kernel_is_rt(),
            ..Default::default()
        };
        for def in HOOKS {
            let status = tier.attach_hook(ebpf, btf, &def, &chooser, have_config);
            tier.hooks.push(status);
        }
        tier
    }

    fn attach_hook(
        &mut self,
        ebpf: &mut Ebpf,
        btf: &Btf,
        def: &HookDef,
        chooser: &Chooser,
        have_config: bool,
    ) -> HookStatus {
        let status = |tier, detail: String| HookStatus {
            func: def.func,
            tier,
            detail,
        };
        if !have_config {
            let why = if self.rt {
                RT_NOTE.to_owned()
            } else {
                "rw_semaphore/rwsem_waiter layout not in kernel BTF".to_owned()
            };
            return status(None, why);
        }
        if def.needs != 0 && self.mask & def.needs == 0 {
            return status(None, "not needed: its slowpath hook is absent".into());
        }
        let hook = Hook {
            func: def.func,
            fentry: def.fentry,
            kprobe: def.kprobe,
        };
        let c = chooser.choose(ebpf, btf, &hook, true, &mut self.attached);
        if c.tier.is_some() {
            self.mask |= def.bit;
        }
        status(c.tier, c.detail)
    }

    /// Detach every deep-tier program (maps stay readable).
    pub fn detach(&mut self, ebpf: &mut Ebpf) {
        self.attached.detach(ebpf);
    }
}

/// Tell the probes which hooks run (the tracepoint-tier estimates stand in for the rest).
pub fn publish_mask(ebpf: &mut Ebpf, mask: u32) -> anyhow::Result<()> {
    let mut hooks: aya::maps::Array<_, u32> = aya::maps::Array::try_from(
        ebpf.map_mut("RWSEM_HOOKS")
            .ok_or_else(|| anyhow!("RWSEM_HOOKS map missing"))?,
    )?;
    hooks.set(0, mask, 0)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tier_name_follows_the_slowpath_hooks() {
        let mut t = DeepTier::default();
        assert_eq!(t.tier(), "tracepoint");
        t.mask = HOOK_READ_SLOWPATH | HOOK_READ_TRYLOCK;
        assert_eq!(t.tier(), "mixed");
        t.mask |= HOOK_WRITE_SLOWPATH;
        assert_eq!(t.tier(), "deep");
    }
}
