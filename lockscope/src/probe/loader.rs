//! Load the embedded eBPF object, configure it from BTF, attach what the kernel allows.
//! The one loader every sink uses.

use std::path::PathBuf;

use anyhow::{Context as _, anyhow, bail};
use aya::{
    Btf, Ebpf, EbpfLoader,
    maps::HashMap as BpfHashMap,
    programs::{
        BtfTracePoint, Iter, Link as _, TracePoint, links::FdLink, trace_point::TracePointLink,
    },
};
use lockscope_common::{
    FILTER_ALL, FILTER_CGROUP, FILTER_TGIDS, NAME_MMAP_LOCK, NAME_PI_LOCK, ProbeConfig,
    STACK_WALK_BURST, STACK_WALKS_PER_CPU_S, futex_stats_entries,
};

use super::{
    btf::{KernelBtf, KernelOffsets, VMLINUX_BTF},
    features,
    groups::{self, Group},
    pthread::{PthreadProbes, pthread_config},
    rt::{self as rt_probes, RtOptions},
    rwsem::{self, DeepTier},
    spin::{self, SpinTier},
};
use crate::decode::{LockType, flags_mask};

/// The eBPF object built by build.rs.
static PROBES_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lockscope"));

/// What to trace. Filtering happens in the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every task on the system.
    System,
    /// These processes and the processes they fork from now on.
    Pids(Vec<u32>),
    /// The command lockscope is about to start, and its whole process tree.
    Command,
    /// Tasks in this cgroup (v2) or below it.
    Cgroup(PathBuf),
}

#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub target: Target,
    /// Lock types to record; `None` for all.
    pub types: Option<Vec<LockType>>,
    /// Kernel stack walks per CPU per second (0: every wait's stack).
    pub stack_walks_per_cpu_s: u64,
    /// On the tracepoint tier, estimate mmap_lock trylock failures from
    /// `mmap_lock_acquire_returned`: a program on every mmap_lock acquisition, contended
    /// or not, so only on request.
    pub mmap_trylocks: bool,
}

impl LoadOptions {
    /// The default stack budget ([`STACK_WALKS_PER_CPU_S`]).
    pub fn new(target: Target, types: Option<Vec<LockType>>) -> Self {
        Self {
            target,
            types,
            stack_walks_per_cpu_s: STACK_WALKS_PER_CPU_S,
            mmap_trylocks: false,
        }
    }
}

/// (cost, burst) in ns of credit for a budget of `per_s` stack walks per CPU per second.
pub fn stack_budget(per_s: u64) -> (u64, u64) {
    if per_s == 0 {
        return (0, 0);
    }
    let cost = (1_000_000_000 / per_s).max(1);
    (cost, cost.saturating_mul(STACK_WALK_BURST))
}

/// Loaded and attached probes. Dropping it detaches everything.
pub struct Probes {
    ebpf: Ebpf,
    links: Vec<(String, FdLink)>,
    pub tier: &'static str,
    /// The rwsem lock-event hooks and how each is attached.
    pub rwsem: DeepTier,
    mmap_estimate: bool,
    /// Tracefs tracepoint links (the futex syscall probes).
    tp_links: Vec<(String, TracePointLink)>,
    /// The futex probes are attached (user-space locks are recorded).
    pub futex: bool,
    /// Futex tracepoints this kernel lacks (not attached), e.g. `sys_enter_futex_waitv`.
    pub futex_missing: Vec<String>,
    /// Probe groups skipped because this kernel lacks what they need: one line each
    /// (everything else runs).
    pub notes: Vec<String>,
    /// pthread lock attribution: waits unwound, and why some locks cannot be attributed.
    pub pthread: PthreadProbes,
    /// The real-time probes time wakeups and send lock activity (`--latency-threshold`).
    pub rt: Option<RtOptions>,
    /// The deep spinlock tier (pi_lock waits, holds, starvation episodes).
    pub spin: SpinTier,
    /// Targets' children become targets in the kernel (the fork follower runs).
    pub follows_forks: bool,
}

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
/// Counts the futex calls in flight (each thread's `FUTEX_CALLS` storage) at a snapshot.
pub const FUTEX_TASK_ITER: &str = "futex_task_iter";
/// Attached after the others, so that no restart is continued before its exit probe runs.
pub const FUTEX_RESTART_EXIT: (&str, &str) = ("futex_restart_exit", "sys_exit_restart_syscall");

/// Record user-space locks for these types (`None`: all types)?
pub fn wants_futex(types: &Option<Vec<LockType>>) -> bool {
    types
        .as_ref()
        .is_none_or(|ts| ts.iter().any(|t| t.is_user()))
}

impl Probes {
    pub fn load(opts: &LoadOptions) -> anyhow::Result<Self> {
        Self::load_with_rt(opts, None)
    }

    /// Load, with the real-time probes timing wakeups when `rt` is given.
    pub fn load_with_rt(opts: &LoadOptions, rt: Option<RtOptions>) -> anyhow::Result<Self> {
        features::require_privileges()?;
        features::bump_memlock_rlimit();
        let kbtf = KernelBtf::load(&PathBuf::from(VMLINUX_BTF))?;
        for (_, tp) in groups::CONTENTION.hooks {
            if !kbtf.has_type(&format!("btf_trace_{tp}")) {
                bail!(
                    "this kernel has no lock:{tp} tracepoint (needs Linux 5.19 or later); \
                     nothing to trace"
                );
            }
        }
        let offsets = KernelOffsets::from_btf(&kbtf)?;
        let mut config = ProbeConfig {
            filter_mode: FILTER_ALL,
            flags_mask: u64::MAX,
            off_task_mm: offsets.task_mm,
            off_task_tgid: offsets.task_tgid,
            off_task_sighand: offsets.task_sighand,
            off_task_pi_lock: offsets.task_pi_lock,
            off_mm_mmap_lock: offsets.mm_mmap_lock,
            off_sighand_siglock: offsets.sighand_siglock,
            off_task_group_leader: offsets.task_group_leader,
            off_task_comm: offsets.task_comm,
            off_rwsem_wait_lock: offsets.rwsem_wait_lock,
            name_kinds: offsets.name_kinds,
            off_task_pid: offsets.task_pid,
            off_mutex_owner: offsets.mutex_owner,
            off_rwsem_owner: offsets.rwsem_owner,
            off_rtmutex_owner: offsets.rtmutex_owner,
            holder_kinds: offsets.holder_kinds,
            off_task_cfs_rq: offsets.task_cfs_rq,
            off_cfs_rq_rq: offsets.cfs_rq_rq,
            off_rq_lock: offsets.rq_lock,
            stack_cost_ns: stack_budget(opts.stack_walks_per_cpu_s).0,
            stack_burst_ns: stack_budget(opts.stack_walks_per_cpu_s).1,
            ..Default::default()
        };
        if let Some(types) = &opts.types {
            config.flags_mask = flags_mask(types);
        }
        match &opts.target {
            Target::System => {}
            Target::Pids(_) => config.filter_mode = FILTER_TGIDS,
            Target::Command => {
                config.filter_mode = FILTER_TGIDS;
                config.launcher_tgid = std::process::id();
            }
            Target::Cgroup(path) => {
                let (id, level) = features::cgroup_id_and_level(path)?;
                config.filter_mode = FILTER_CGROUP;
                config.cgroup_id = id;
                config.cgroup_level = level;
            }
        }

        let rwsem_config = rwsem::rwsem_config(&kbtf);
        let mut notes: Vec<String> = offsets
            .missing
            .iter()
            .map(|m| format!("btf: {m}"))
            .collect();
        let pi_lock = offsets.name_kinds & NAME_PI_LOCK != 0;
        if rt.is_some() && !pi_lock {
            bail!("--latency-threshold needs task_struct.pi_lock in the kernel's BTF");
        }
        // Asked for (--latency-threshold): an error if impossible; otherwise the pi_lock
        // proxy's own needs, skipped with a note when the kernel lacks them.
        let (rt_config, proxy_ok) = match rt_probes::rt_config(&kbtf, rt.as_ref()) {
            Ok(c) => (c, pi_lock),
            Err(e) if rt.is_none() => {
                notes.push(format!(
                    "{}: not attached ({e:#}): {}",
                    groups::PI_LOCK_PROXY.name,
                    groups::PI_LOCK_PROXY.without
                ));
                (Default::default(), false)
            }
            Err(e) => return Err(e),
        };
        let spin_config = spin::spin_config(&kbtf);
        let btf = Btf::from_sys_fs().context("reading kernel BTF")?;
        let cpus = aya::util::nr_cpus().map(|n| n as u32).unwrap_or(1);
        let mut loader = EbpfLoader::new();
        // The futex calls in flight live in task storage, which aya loads but has no
        // userspace type for (read through the task iterator instead).
        loader.allow_unsupported_maps();
        let test_sizes = test_map_sizes()?;
        for (map, n) in &test_sizes {
            loader.map_max_entries(map, *n);
        }
        let mut ebpf = loader
            .btf(Some(&btf))
            .override_global("CONFIG", &config, true)
            .override_global(
                "SPIN_CONFIG",
                spin_config.as_ref().unwrap_or(&Default::default()),
                true,
            )
            .map_max_entries("FUTEX_STATS", futex_stats_entries(cpus))
            .override_global(
                "PTHREAD_CONFIG",
                &pthread_config(wants_futex(&opts.types)),
                true,
            )
            .override_global("RWSEM_CONFIG", &rwsem_config.unwrap_or_default(), true)
            .override_global("RT_CONFIG", &rt_config, true)
            .load(PROBES_OBJ)
            .context("loading the eBPF probes into the kernel")?;

        if let Target::Pids(pids) = &opts.target {
            let mut targets: BpfHashMap<_, u32, u8> =
                BpfHashMap::try_from(ebpf.map_mut("TARGETS").context("TARGETS map")?)?;
            for pid in pids {
                targets
                    .insert(pid, 1, 0)
                    .with_context(|| format!("adding pid {pid} to the target map"))?;
            }
        }

        let mut probes = Probes {
            ebpf,
            links: Vec::new(),
            tier: "tracepoint",
            tp_links: Vec::new(),
            futex: false,
            futex_missing: Vec::new(),
            notes,
            pthread: PthreadProbes::default(),
            rwsem: DeepTier::default(),
            mmap_estimate: false,
            rt,
            spin: SpinTier::default(),
            follows_forks: false,
        };
        // The tracepoint groups, in the registry's order (the task set first: contention
        // on a task's pi_lock is named from it). The fork follower only for pid targets.
        let pid_target = config.filter_mode == FILTER_TGIDS;
        for g in groups::TP_GROUPS {
            let wanted = match g.name {
                n if n == groups::PI_LOCK_PROXY.name => proxy_ok,
                n if n == groups::RT_LATENCY.name => rt.is_some(),
                n if n == groups::FORK_FOLLOW.name => pid_target,
                _ => true,
            };
            if wanted {
                let attached = probes.attach_group(g, &btf)?;
                if g.name == groups::FORK_FOLLOW.name {
                    probes.follows_forks = attached;
                }
            }
        }
        if wants_futex(&opts.types) && groups::switched_off(groups::FUTEX) {
            probes.notes.push(format!(
                "futex: {}: user-space locks are not traced; kernel locks are recorded",
                groups::SWITCHED_OFF
            ));
        } else if wants_futex(&opts.types) {
            // The unwinding thread first, with the targets' maps and the C library read,
            // so the first waits do not pile up in the ring buffer behind that work.
            let pids = match &opts.target {
                Target::Pids(p) => p.clone(),
                _ => Vec::new(),
            };
            probes.pthread = PthreadProbes::start(&mut probes.ebpf, &pids);
            probes.attach_futex(&btf)?;
            if !probes.futex {
                probes.pthread.detach();
                probes.pthread = PthreadProbes::default();
            }
        }
        probes.rwsem = if groups::switched_off(groups::RWSEM_DEEP) {
            probes.notes.push(format!(
                "rwsem-deep: {}: rwsem lock events are tracepoint-tier estimates or n/a",
                groups::SWITCHED_OFF
            ));
            DeepTier::default()
        } else {
            DeepTier::attach(&mut probes.ebpf, &btf, rwsem_config.is_some())
        };
        rwsem::publish_mask(&mut probes.ebpf, probes.rwsem.mask)?;
        // Tracepoint-tier estimate of mmap_lock trylock failures (absent before 5.19's
        // mmap_lock events or when the trylock hooks run: then it counts nothing). It runs
        // on every mmap_lock acquisition, so only when asked for.
        if opts.mmap_trylocks
            && let Some(rc) = rwsem_config
            && offsets.name_kinds & NAME_MMAP_LOCK != 0
            && kbtf.has_type("btf_trace_mmap_lock_acquire_returned")
        {
            let prog = if rc.mmap_success_arg == 3 {
                "rwsem_mmap_lock_acquire_returned4"
            } else {
                "rwsem_mmap_lock_acquire_returned3"
            };
            probes.mmap_estimate = probes.attach_one_of(
                &groups::MMAP_LOCK_ESTIMATE,
                &[(prog, "mmap_lock_acquire_returned")],
                &btf,
            )?;
        }
        probes.spin = match &spin_config {
            _ if groups::switched_off(groups::SPIN_DEEP) => {
                SpinTier::off(groups::SWITCHED_OFF.into())
            }
            _ if !pi_lock => SpinTier::off("task_struct.pi_lock is not in the kernel's BTF".into()),
            Ok(_) => SpinTier::attach(&mut probes.ebpf, &btf, true),
            Err(e) => SpinTier::off(format!("{e:#}")),
        };
        if probes.rwsem.tier() != "tracepoint" {
            probes.tier = "deep";
        }
        if probes.rt.is_some() {
            rt_probes::set_gate(&mut probes.ebpf, true)?;
        }
        Ok(probes)
    }

    /// Attach a group's programs, all or none. A group the kernel lacks (or the test
    /// switch takes for missing) is skipped with a note; a required one is an error.
    /// Whether it was attached.
    fn attach_group(&mut self, g: &Group, btf: &Btf) -> anyhow::Result<bool> {
        self.attach_one_of(g, g.hooks, btf)
    }

    fn attach_one_of(
        &mut self,
        g: &Group,
        hooks: &[(&str, &str)],
        btf: &Btf,
    ) -> anyhow::Result<bool> {
        let before = self.links.len();
        let result = if groups::switched_off(g.name) {
            Err(anyhow!(groups::SWITCHED_OFF))
        } else {
            hooks
                .iter()
                .try_for_each(|(prog, tp)| self.attach_tp_btf(prog, tp, btf))
        };
        match result {
            Ok(()) => Ok(true),
            Err(e) if g.required => Err(e.context(format!("{}: {}", g.name, g.without))),
            Err(e) => {
                for (_, link) in self.links.drain(before..) {
                    let _ = link.detach();
                }
                self.notes
                    .push(format!("{}: not attached ({e:#}): {}", g.name, g.without));
                Ok(false)
            }
        }
    }

    fn attach_tp_btf(&mut self, prog: &str, tp: &str, btf: &Btf) -> anyhow::Result<()> {
        let program: &mut BtfTracePoint = self
            .ebpf
            .program_mut(prog)
            .ok_or_else(|| anyhow!("program {prog} missing from the eBPF object"))?
            .try_into()?;
        program
            .load(tp, btf)
            .with_context(|| format!("loading tp_btf/{tp}"))?;
        let id = program
            .attach()
            .with_context(|| format!("attaching tp_btf/{tp}"))?;
        let link = program.take_link(id)?;
        self.links.push((tp.to_owned(), link.into()));
        Ok(())
    }

    /// Attach the futex syscall probes that this kernel has tracepoints for. Without the
    /// futex(2) pair the group is skipped with a note (kernel locks are still recorded);
    /// the futex2 syscalls and restart_syscall are optional (missing ones are listed in
    /// `futex_missing`).
    fn attach_futex(&mut self, btf: &Btf) -> anyhow::Result<()> {
        let tracefs = features::tracefs_path();
        if let Some(tp) = ["sys_enter_futex", "sys_exit_futex"]
            .into_iter()
            .find(|tp| !features::tracepoint_exists(&tracefs, "syscalls", tp))
        {
            self.notes.push(format!(
                "user-space locks (futexes) are not traced: this kernel has no \
                 syscalls:{tp} tracepoint (needs CONFIG_FTRACE_SYSCALLS); kernel locks are \
                 recorded"
            ));
            return Ok(());
        }
        // The calls in flight are in the threads' storage, counted by a task iterator at
        // each snapshot: loaded first, so that a kernel refusing it leaves nothing attached.
        let it: &mut Iter = self
            .ebpf
            .program_mut(FUTEX_TASK_ITER)
            .ok_or_else(|| anyhow!("program {FUTEX_TASK_ITER} missing from the eBPF object"))?
            .try_into()?;
        if let Err(e) = it.load("task", btf) {
            self.notes.push(format!(
                "user-space locks (futexes) are not traced: the kernel refused the futex \
                 probes' task iterator ({}); kernel locks are recorded",
                error_chain(&e)
            ));
            return Ok(());
        }
        for (prog, tp) in FUTEX_PROGRAMS.into_iter().chain([FUTEX_RESTART_EXIT]) {
            if !features::tracepoint_exists(&tracefs, "syscalls", tp) {
                self.futex_missing.push(tp.to_owned());
                continue;
            }
            let program: &mut TracePoint = self
                .ebpf
                .program_mut(prog)
                .ok_or_else(|| anyhow!("program {prog} missing from the eBPF object"))?
                .try_into()?;
            if program.fd().is_err() {
                program
                    .load()
                    .map_err(|e| anyhow!("loading {prog}: {}", error_chain(&e)))?;
            }
            let id = program
                .attach("syscalls", tp)
                .with_context(|| format!("attaching tracepoint/syscalls/{tp}"))?;
            let link = program.take_link(id)?;
            self.tp_links.push((tp.to_owned(), link));
        }
        set_futex_gate(&mut self.ebpf, true)?;
        self.futex = true;
        Ok(())
    }

    /// Trace process `pid` from now on (a launched command, when forks are not followed).
    pub fn add_target(&mut self, pid: u32) -> anyhow::Result<()> {
        let mut targets: BpfHashMap<_, u32, u8> =
            BpfHashMap::try_from(self.ebpf.map_mut("TARGETS").context("TARGETS map")?)?;
        targets
            .insert(pid, 1, 0)
            .with_context(|| format!("adding pid {pid} to the target map"))
    }

    /// Is the tracepoint-tier estimate of mmap_lock trylock failures attached?
    pub fn has_mmap_lock_estimate(&self) -> bool {
        self.mmap_estimate
    }

    /// Names of the attached probes.
    pub fn attached(&self) -> Vec<String> {
        self.links
            .iter()
            .map(|(n, _)| n.clone())
            .chain(self.tp_links.iter().map(|(n, _)| n.clone()))
            .collect()
    }

    /// Detach every program: no new events after this returns; maps stay readable.
    /// Tracepoint perf events (the futex syscalls), slow to release, are gated off and
    /// left to a keeper process that lets them go once lockscope has exited
    /// ([`super::release`]).
    pub fn detach(&mut self) {
        if self.rt.is_some() {
            let _ = rt_probes::set_gate(&mut self.ebpf, false);
        }
        let gated = self.futex && set_futex_gate(&mut self.ebpf, false).is_ok();
        for (_, link) in self.links.drain(..) {
            let _ = link.detach();
        }
        self.rwsem.detach(&mut self.ebpf);
        self.spin.detach(&mut self.ebpf);
        if !self.tp_links.is_empty() && gated && std::env::var_os(SYNC_DETACH_ENV).is_none() {
            super::release::keep_until_exit();
        }
        for (_, link) in self.tp_links.drain(..) {
            let _ = link.detach();
        }
        self.pthread.detach();
    }

    /// Set the starvation detector's thresholds (deep spinlock tier).
    pub fn set_spin_params(&mut self, p: lockscope_common::SpinParams) -> anyhow::Result<()> {
        if self.spin.active() {
            spin::write_params(&mut self.ebpf, &p)?;
            self.spin.params = p;
        }
        Ok(())
    }

    pub fn ebpf(&self) -> &Ebpf {
        &self.ebpf
    }

    /// Take a map out of the object (a ring buffer the session drains).
    pub fn take_map(&mut self, name: &str) -> Option<aya::maps::Map> {
        self.ebpf.take_map(name)
    }
}

/// Test-only: `MAP=ENTRIES,...` shrinks maps, so that the tests can fill them and check
/// that what they drop is counted.
pub const TEST_MAP_SIZES_ENV: &str = "LOCKSCOPE_TEST_MAP_SIZES";

fn test_map_sizes() -> anyhow::Result<Vec<(String, u32)>> {
    let Some(v) = std::env::var_os(TEST_MAP_SIZES_ENV) else {
        return Ok(Vec::new());
    };
    v.to_string_lossy()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|pair| {
            let (map, n) = pair
                .split_once('=')
                .ok_or_else(|| anyhow!("{TEST_MAP_SIZES_ENV}: `{pair}` is not MAP=ENTRIES"))?;
            let n: u32 = n
                .parse()
                .map_err(|_| anyhow!("{TEST_MAP_SIZES_ENV}: `{n}` is not a number"))?;
            Ok((map.to_owned(), n))
        })
        .collect()
}

/// Set to release every attachment in lockscope itself at exit (slow, see
/// [`super::release`]), for measuring that cost.
pub const SYNC_DETACH_ENV: &str = "LOCKSCOPE_SYNC_DETACH";

/// Open or close the futex probes' gate.
fn set_futex_gate(ebpf: &mut Ebpf, on: bool) -> anyhow::Result<()> {
    let mut gate: aya::maps::Array<_, u32> =
        aya::maps::Array::try_from(ebpf.map_mut("FUTEX_GATE").context("FUTEX_GATE map")?)?;
    gate.set(0, u32::from(on), 0)
        .context("setting FUTEX_GATE")?;
    Ok(())
}

/// Try the rwsem deep-tier hooks for real (load and attach each, then detach), for
/// `doctor`. System-wide attach for a moment: nothing is recorded.
pub fn probe_rwsem_hooks() -> anyhow::Result<DeepTier> {
    let kbtf = KernelBtf::load(&PathBuf::from(VMLINUX_BTF))?;
    let rwsem_config = rwsem::rwsem_config(&kbtf);
    let btf = Btf::from_sys_fs().context("reading kernel BTF")?;
    let mut ebpf = EbpfLoader::new()
        .allow_unsupported_maps()
        .btf(Some(&btf))
        .override_global("RWSEM_CONFIG", &rwsem_config.unwrap_or_default(), true)
        .load(PROBES_OBJ)
        .context("loading the eBPF probes into the kernel")?;
    let mut tier = DeepTier::attach(&mut ebpf, &btf, rwsem_config.is_some());
    tier.detach(&mut ebpf);
    Ok(tier)
}

/// Try the deep spinlock hooks for real (load and attach each, then detach), for
/// `doctor`. Nothing is recorded.
pub fn probe_spin_hooks() -> anyhow::Result<SpinTier> {
    let btf = Btf::from_sys_fs().context("reading kernel BTF")?;
    let mut ebpf = EbpfLoader::new()
        .allow_unsupported_maps()
        .btf(Some(&btf))
        .load(PROBES_OBJ)
        .context("loading the eBPF probes into the kernel")?;
    let mut tier = SpinTier::attach(&mut ebpf, &btf, false);
    tier.detach(&mut ebpf);
    Ok(tier)
}

/// How a probe hooks into the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookKind {
    TpBtf,
    Fentry,
    /// A tracefs tracepoint program (the futex syscall probes); `target` is ignored.
    TracePoint,
}

/// Ask the kernel whether it accepts a program: load it (verifier included), never attach.
/// `Err` carries the kernel's answer.
pub fn try_load(prog: &str, kind: HookKind, target: &str) -> Result<(), String> {
    let btf = Btf::from_sys_fs().map_err(|e| format!("no kernel BTF: {e}"))?;
    let mut ebpf = EbpfLoader::new()
        .allow_unsupported_maps()
        .btf(Some(&btf))
        .load(PROBES_OBJ)
        .map_err(|e| format!("{e}"))?;
    let program = ebpf
        .program_mut(prog)
        .ok_or_else(|| format!("program {prog} missing"))?;
    let result = match kind {
        HookKind::TpBtf => {
            let p: &mut BtfTracePoint = program.try_into().map_err(|e| format!("{e}"))?;
            p.load(target, &btf)
        }
        HookKind::Fentry => {
            let p: &mut aya::programs::FEntry = program.try_into().map_err(|e| format!("{e}"))?;
            p.load(target, &btf)
        }
        HookKind::TracePoint => {
            let p: &mut TracePoint = program.try_into().map_err(|e| format!("{e}"))?;
            p.load()
        }
    };
    result.map_err(|e| error_chain(&e))
}

pub use crate::errors::error_chain;
