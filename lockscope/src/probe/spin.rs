//! The deep spinlock tier: exact waits and hold times on watched raw spinlocks (every
//! task's `pi_lock`) and the in-kernel starvation detector. Which kernel functions it
//! hooks, how each is hooked on this kernel (fentry/fexit, else kprobe/kretprobe, else
//! not at all), the watched set's start-up walk, and the episode ring buffer.
//! Used by the loader (attach), the session (read) and `doctor` (report).

use std::{collections::BTreeMap, io::Read as _, sync::Mutex};

use anyhow::{Context as _, anyhow};
use aya::{
    Btf, Ebpf,
    maps::{Array, MapData, RingBuf},
    programs::{BtfTracePoint, Iter, Link as _, links::FdLink},
};
use lockscope_common::*;

use super::{
    btf::KernelBtf,
    hooks::{Attached, Chooser, Hook, ProgKind},
};

/// What a hooked function gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Queued-spinlock slowpath: waits.
    Wait,
    /// Exit of a lock function: acquisitions (hold start, foreign acquisitions).
    Acquire,
    /// Entry of an unlock function: hold end.
    Release,
}

#[derive(Debug, Clone, Copy)]
pub struct SpinHookDef {
    pub func: &'static str,
    pub role: Role,
    pub fentry: &'static [(&'static str, ProgKind)],
    pub kprobe: &'static [(&'static str, ProgKind)],
}

const SLOWPATH_KPROBE: &[(&str, ProgKind)] = &[
    ("spin_slowpath_kprobe", ProgKind::KProbe),
    ("spin_slowpath_kretprobe", ProgKind::KRetProbe),
];
const LOCK_KPROBE: &[(&str, ProgKind)] = &[
    ("spin_lock_kprobe", ProgKind::KProbe),
    ("spin_lock_kretprobe", ProgKind::KRetProbe),
];
const UNLOCK_KPROBE: &[(&str, ProgKind)] = &[("spin_unlock_kprobe", ProgKind::KProbe)];

pub const SPIN_HOOK_DEFS: [SpinHookDef; 10] = [
    SpinHookDef {
        func: "native_queued_spin_lock_slowpath",
        role: Role::Wait,
        fentry: &[
            ("spin_slowpath_fentry", ProgKind::FEntry),
            ("spin_slowpath_fexit", ProgKind::FExit),
        ],
        kprobe: SLOWPATH_KPROBE,
    },
    SpinHookDef {
        func: "__pv_queued_spin_lock_slowpath",
        role: Role::Wait,
        fentry: &[
            ("spin_pv_slowpath_fentry", ProgKind::FEntry),
            ("spin_pv_slowpath_fexit", ProgKind::FExit),
        ],
        kprobe: SLOWPATH_KPROBE,
    },
    SpinHookDef {
        func: "_raw_spin_lock",
        role: Role::Acquire,
        fentry: &[("spin_lock_fexit", ProgKind::FExit)],
        kprobe: LOCK_KPROBE,
    },
    SpinHookDef {
        func: "_raw_spin_lock_irqsave",
        role: Role::Acquire,
        fentry: &[("spin_lock_irqsave_fexit", ProgKind::FExit)],
        kprobe: LOCK_KPROBE,
    },
    SpinHookDef {
        func: "_raw_spin_lock_irq",
        role: Role::Acquire,
        fentry: &[("spin_lock_irq_fexit", ProgKind::FExit)],
        kprobe: LOCK_KPROBE,
    },
    SpinHookDef {
        func: "_raw_spin_lock_bh",
        role: Role::Acquire,
        fentry: &[("spin_lock_bh_fexit", ProgKind::FExit)],
        kprobe: LOCK_KPROBE,
    },
    SpinHookDef {
        func: "_raw_spin_unlock",
        role: Role::Release,
        fentry: &[("spin_unlock_fentry", ProgKind::FEntry)],
        kprobe: UNLOCK_KPROBE,
    },
    SpinHookDef {
        func: "_raw_spin_unlock_irqrestore",
        role: Role::Release,
        fentry: &[("spin_unlock_irqrestore_fentry", ProgKind::FEntry)],
        kprobe: UNLOCK_KPROBE,
    },
    SpinHookDef {
        func: "_raw_spin_unlock_irq",
        role: Role::Release,
        fentry: &[("spin_unlock_irq_fentry", ProgKind::FEntry)],
        kprobe: UNLOCK_KPROBE,
    },
    SpinHookDef {
        func: "_raw_spin_unlock_bh",
        role: Role::Release,
        fentry: &[("spin_unlock_bh_fentry", ProgKind::FEntry)],
        kprobe: UNLOCK_KPROBE,
    },
];

/// Set to skip fentry/fexit and use kprobes (to exercise the fallback).
pub const FORCE_KPROBES_ENV: &str = "LOCKSCOPE_SPIN_KPROBES";

/// How one hook ended up on this kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpinHookStatus {
    pub func: &'static str,
    pub role: Role,
    /// `fentry` or `kprobe` when attached.
    pub tier: Option<&'static str>,
    pub detail: String,
}

/// The deep spinlock tier as attached.
#[derive(Default)]
pub struct SpinTier {
    pub hooks: Vec<SpinHookStatus>,
    /// `SPIN_HOOK_*` bits.
    pub mask: u32,
    /// Why hold times are unavailable, when they are.
    pub hold_unavailable: Option<String>,
    /// Why the whole tier is off, when it is.
    pub unavailable: Option<String>,
    /// Thresholds in force.
    pub params: SpinParams,
    /// The hooks' programs and links (the chooser's), to detach.
    attached: Attached,
    tp_links: Vec<FdLink>,
    ring: Option<Mutex<RingBuf<MapData>>>,
    episodes: Mutex<Vec<SpinEpisodeRecord>>,
    /// Ring-buffer items that were not an episode record (never expected).
    malformed: Mutex<u64>,
}

impl std::fmt::Debug for SpinTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinTier")
            .field("hooks", &self.hooks)
            .field("mask", &self.mask)
            .finish()
    }
}

/// Offsets the probes read, from BTF.
pub fn spin_config(kbtf: &KernelBtf) -> anyhow::Result<SpinConfig> {
    Ok(SpinConfig {
        nr_cpus: aya::util::nr_cpus()
            .map(|n| n as u32)
            .unwrap_or(1)
            .min(SPIN_MAX_CPUS),
        off_task_pid: kbtf.member_offset("task_struct", "pid")?,
        off_task_tgid: kbtf.member_offset("task_struct", "tgid")?,
        off_task_pi_lock: kbtf.member_offset("task_struct", "pi_lock")?,
        off_task_comm: kbtf.member_offset("task_struct", "comm")?,
        _pad: 0,
    })
}

impl SpinTier {
    /// The tier is off, for this reason.
    pub fn off(why: String) -> Self {
        Self {
            hooks: SPIN_HOOK_DEFS
                .iter()
                .map(|d| SpinHookStatus {
                    func: d.func,
                    role: d.role,
                    tier: None,
                    detail: why.clone(),
                })
                .collect(),
            unavailable: Some(why),
            ..Default::default()
        }
    }

    /// "deep" when the waits are hooked, else "unavailable".
    pub fn tier(&self) -> &'static str {
        if self.mask & SPIN_HOOK_WAIT != 0 {
            "deep"
        } else {
            "unavailable"
        }
    }

    pub fn active(&self) -> bool {
        self.mask & SPIN_HOOK_WAIT != 0
    }

    /// Tier of each hook by function name, for reports.
    pub fn hook_tiers(&self) -> BTreeMap<String, String> {
        super::hooks::hook_tiers(self.hooks.iter().map(|h| (h.func, h.tier)))
    }

    /// Attach every hook the kernel allows (fentry/fexit first), walk the tasks into
    /// the watched set, and take the episode ring buffer. `start`: also run the watched
    /// set (false for `doctor`, which only tries the hooks).
    pub fn attach(ebpf: &mut Ebpf, btf: &Btf, start: bool) -> Self {
        let chooser = Chooser::new(
            std::env::var_os(FORCE_KPROBES_ENV).map(|_| format!("{FORCE_KPROBES_ENV} set")),
        );
        let mut tier = SpinTier::default();
        let release = super::features::kernel_release();
        let gate = hold_hooks_gate(
            &release,
            super::rwsem::kernel_is_rt(),
            std::env::var_os(HOLD_HOOKS_ENV).is_some(),
        );
        for def in SPIN_HOOK_DEFS {
            let s = match (&gate, def.role) {
                (Some(why), Role::Acquire | Role::Release) => SpinHookStatus {
                    func: def.func,
                    role: def.role,
                    tier: None,
                    detail: why.clone(),
                },
                // doctor (no start) only loads the hooks on every spinlock: attaching and
                // detaching them patches the hottest code in the kernel.
                _ => {
                    let hook = Hook {
                        func: def.func,
                        fentry: def.fentry,
                        kprobe: def.kprobe,
                    };
                    let attach = start || def.role == Role::Wait;
                    let c = chooser.choose(ebpf, btf, &hook, attach, &mut tier.attached);
                    SpinHookStatus {
                        func: def.func,
                        role: def.role,
                        tier: c.tier,
                        detail: c.detail,
                    }
                }
            };
            if s.tier.is_some() {
                tier.mask |= match def.role {
                    Role::Wait => SPIN_HOOK_WAIT,
                    Role::Acquire => SPIN_HOOK_ACQUIRE,
                    Role::Release => 0,
                };
            }
            tier.hooks.push(s);
        }
        let missing_release: Vec<String> = tier
            .hooks
            .iter()
            .filter(|h| h.role == Role::Release && h.tier.is_none())
            .map(|h| format!("{} ({})", h.func, h.detail))
            .collect();
        if missing_release.is_empty() {
            tier.mask |= SPIN_HOOK_RELEASE;
        } else {
            tier.hold_unavailable = Some(format!(
                "hold time unavailable: unlock not hooked: {}",
                missing_release.join("; ")
            ));
        }
        if tier.mask & SPIN_HOOK_WAIT == 0 {
            let why = tier
                .hooks
                .iter()
                .filter(|h| h.role == Role::Wait)
                .map(|h| format!("{}: {}", h.func, h.detail))
                .collect::<Vec<_>>()
                .join("; ");
            tier.unavailable = Some(format!("no queued-spinlock slowpath hook ({why})"));
            tier.detach(ebpf);
            tier.mask = 0;
            return tier;
        }
        if tier.mask & SPIN_HOOK_ACQUIRE == 0 {
            tier.hold_unavailable = Some(
                "hold time and starvation detector unavailable: no _raw_spin_lock* exit hooked"
                    .into(),
            );
        }
        if !start {
            return tier;
        }
        if let Err(e) = tier.start(ebpf, btf) {
            tier.unavailable = Some(format!("{e:#}"));
            tier.detach(ebpf);
            tier.mask = 0;
        }
        tier
    }

    fn start(&mut self, ebpf: &mut Ebpf, btf: &Btf) -> anyhow::Result<()> {
        let mut hooks: Array<_, u32> = Array::try_from(
            ebpf.map_mut("SPIN_HOOKS")
                .ok_or_else(|| anyhow!("SPIN_HOOKS map missing"))?,
        )?;
        hooks.set(0, self.mask, 0)?;
        self.params = SpinParams::default();
        write_params(ebpf, &self.params)?;
        // Tasks created from now on, then every task alive: none is missed.
        for (prog, tp) in [
            ("spin_task_fork", "sched_process_fork"),
            ("spin_task_free", "sched_process_free"),
            ("spin_task_rename", "task_rename"),
        ] {
            let p: &mut BtfTracePoint = ebpf
                .program_mut(prog)
                .ok_or_else(|| anyhow!("program {prog} missing from the eBPF object"))?
                .try_into()?;
            p.load(tp, btf)
                .with_context(|| format!("loading tp_btf/{tp}"))?;
            let id = p
                .attach()
                .with_context(|| format!("attaching tp_btf/{tp}"))?;
            self.tp_links.push(p.take_link(id)?.into());
        }
        let it: &mut Iter = ebpf
            .program_mut("spin_task_iter")
            .ok_or_else(|| anyhow!("program spin_task_iter missing"))?
            .try_into()?;
        it.load("task", btf).map_err(|e| {
            anyhow!(
                "loading the task iterator: {}",
                super::loader::error_chain(&e)
            )
        })?;
        let id = it.attach().context("attaching the task iterator")?;
        let mut file = it.take_link(id)?.into_file()?;
        let mut sink = Vec::new();
        file.read_to_end(&mut sink)
            .context("walking the tasks (task iterator)")?;
        let ring = RingBuf::try_from(
            ebpf.take_map("SPIN_EPISODES")
                .ok_or_else(|| anyhow!("SPIN_EPISODES map missing"))?,
        )?;
        self.ring = Some(Mutex::new(ring));
        Ok(())
    }

    /// Detach every program of the tier (maps stay readable).
    pub fn detach(&mut self, ebpf: &mut Ebpf) {
        for link in self.tp_links.drain(..) {
            let _ = link.detach();
        }
        self.attached.detach(ebpf);
    }

    /// Move the episodes waiting in the ring buffer into the session's list.
    pub fn drain(&self) {
        let Some(ring) = &self.ring else {
            return;
        };
        let mut ring = ring.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = self.episodes.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(item) = ring.next() {
            if item.len() < size_of::<SpinEpisodeRecord>() {
                *self.malformed.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                continue;
            }
            // SAFETY: the kernel wrote a whole SpinEpisodeRecord (integers only).
            let rec =
                unsafe { std::ptr::read_unaligned(item.as_ptr() as *const SpinEpisodeRecord) };
            out.push(rec);
        }
    }

    /// Every episode received so far.
    pub fn episodes(&self) -> Vec<SpinEpisodeRecord> {
        self.drain();
        self.episodes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Forget all but the latest `n` episodes (long-running sinks, after a snapshot).
    pub fn keep_latest(&self, n: usize) {
        let mut eps = self.episodes.lock().unwrap_or_else(|e| e.into_inner());
        let extra = eps.len().saturating_sub(n);
        eps.drain(..extra);
    }

    pub fn malformed(&self) -> u64 {
        *self.malformed.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Set to attach the `_raw_spin_(un)lock*` hooks on kernels where they are off by
/// default (non-PREEMPT_RT 6.12 and later).
pub const HOLD_HOOKS_ENV: &str = "LOCKSCOPE_SPIN_HOLDS";

/// Kernels on which the `_raw_spin_(un)lock*` hooks are not attached, and why.
/// Debian's 6.1 hung (in a QEMU guest) while fexit programs were attached to
/// `_raw_spin_lock*`: never before 6.12. On 6.12 without PREEMPT_RT, attaching
/// trampolines to `_raw_spin_unlock*` crashed the guest (int3 Oops in the function being
/// patched) in 2 of 5 runs under QEMU TCG: off unless `opt_in`. 6.12-rt died the same
/// way in about one recording in twenty (detaching from `_raw_spin_lock` at exit): on, since
/// that is the configuration the pi_lock detector is for (README, "Limits seen").
/// `rt`: the kernel is PREEMPT_RT (`/sys/kernel/realtime`).
pub fn hold_hooks_gate(release: &str, rt: bool, opt_in: bool) -> Option<String> {
    let mut it = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    let (major, minor) = (it.next()?, it.next()?);
    if (major, minor) < (6, 12) {
        return Some(format!(
            "not attached on Linux {major}.{minor}: hooking _raw_spin_lock* hung 6.1 in testing \
             (needs 6.12 or later)"
        ));
    }
    (!rt && !opt_in).then(|| {
        format!(
            "not attached by default without PREEMPT_RT: attaching to _raw_spin_unlock* \
             crashed Linux 6.12 guests in testing; set {HOLD_HOOKS_ENV}=1 to attach them"
        )
    })
}

/// Write the detector thresholds (takes effect for waits that end from now on).
pub fn write_params(ebpf: &mut Ebpf, p: &SpinParams) -> anyhow::Result<()> {
    let mut params: Array<_, SpinParams> = Array::try_from(
        ebpf.map_mut("SPIN_PARAMS")
            .ok_or_else(|| anyhow!("SPIN_PARAMS map missing"))?,
    )?;
    params.set(0, *p, 0)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_hooks_need_6_12() {
        assert!(
            hold_hooks_gate("6.1.0-57-amd64", false, true)
                .unwrap()
                .contains("6.1")
        );
        assert!(hold_hooks_gate("5.15.0", true, false).is_some());
        assert_eq!(
            hold_hooks_gate("6.12.117+deb12-rt-amd64", true, false),
            None
        );
        assert!(
            hold_hooks_gate("6.12.117+deb12-amd64", false, false)
                .unwrap()
                .contains("LOCKSCOPE_SPIN_HOLDS")
        );
        assert_eq!(hold_hooks_gate("6.12.117+deb12-amd64", false, true), None);
        assert!(hold_hooks_gate("6.18.0", false, false).is_some());
        assert_eq!(hold_hooks_gate("7.0", false, true), None);
    }
}
