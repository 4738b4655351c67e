//! Contention: every wait `lock:contention_begin/end` sees, with its lock, type, wait
//! time, caller, task and holder; the process names (`exec-names`) and, for pid and
//! command targets, the target's children (`fork-follow`). The lock table of every
//! recording is this family's (`entries`); the other families add to it.

use std::{
    cell::{Cell, RefCell},
    collections::{HashMap, HashSet},
    path::Path,
    sync::Arc,
};

use anyhow::{Context as _, bail};
use lockscope_common::{
    CACHE_IDENTS_MAX_ENTRIES, CACHE_NAME_LEN, CNT_HOLDERS_CREATED, FILTER_ALL, FILTER_CGROUP,
    FILTER_TGIDS, HOLDER_READERS, HolderKey, HolderStats, KFUNC_TASK_FROM_PID, KFUNC_TASK_RELEASE,
    PLACE_PAGE_TABLE, PLACE_SLAB, ProbeConfig,
};

use super::{Attach, Build, Doctor, Family, Globals, Prepare, Read};
use crate::{
    aggregate::recording::{
        LockPlan, StackTexts, build_locks_cached, evicted, lost_counts, stats_evicted,
        task_waits_evicted,
    },
    decode::{flags_mask, place::LockTypes},
    probe::{
        Target,
        btf::{DynamicNaming, SLAB_SYSFS, lock_types},
        features,
        groups::{CONTENTION, EXEC_NAMES, FORK_FOLLOW},
        loader::{add_targets, kernel_kfuncs, stack_budget},
    },
    source,
};

#[derive(Default)]
pub struct Contention {
    config: ProbeConfig,
    /// Targets' children become targets in the kernel (the fork follower runs).
    pub follows_forks: bool,
    /// Symbolized stacks, kept across snapshots.
    stack_texts: RefCell<StackTexts>,
    /// Holder thread names seen so far (a thread that has exited since is still named),
    /// kept for the holders the map still holds.
    holder_comms: RefCell<HashMap<u32, String>>,
    /// The in-flight evictions last reported (a counter: never shown going down).
    task_waits_evicted: Cell<u64>,
    /// Where slab objects' and page-table pages' locks are named (from BTF).
    naming: DynamicNaming,
    /// The kernel functions the probes may call (placeholder, BTF id).
    kfuncs: Vec<(i32, u32)>,
    lock_types: Arc<LockTypes>,
}

impl Contention {
    /// The fork follower: only for pid targets.
    fn follows_forks_wanted(&self) -> bool {
        self.config.filter_mode == FILTER_TGIDS
    }

    /// Read from /proc the names of the holders not named yet (each thread once).
    fn learn_holder_names(&self, holders: &[(HolderKey, HolderStats)]) {
        let mut seen = self.holder_comms.borrow_mut();
        for (k, _) in holders {
            if k.tid == HOLDER_READERS || seen.contains_key(&k.tid) {
                continue;
            }
            if let Some(c) = source::thread_comm(k.tgid, k.tid) {
                seen.insert(k.tid, c);
            }
        }
    }

    /// Name the lock holders seen so far while their threads are alive (a recording
    /// made after they exit still names them). Cheap: one batched read of the holder map.
    pub fn name_holders(&self, ebpf: &aya::Ebpf) -> anyhow::Result<()> {
        let holders = source::read_holders(ebpf)?;
        self.learn_holder_names(&holders);
        Ok(())
    }
}

impl Family for Contention {
    fn name(&self) -> &'static str {
        CONTENTION.name
    }

    fn prepare(&mut self, cx: &mut Prepare<'_>) -> anyhow::Result<()> {
        for (_, tp) in CONTENTION.hooks {
            if !cx.kbtf.has_type(&format!("btf_trace_{tp}")) {
                bail!(
                    "this kernel has no lock:{tp} tracepoint (needs Linux 5.19 or later); \
                     nothing to trace"
                );
            }
        }
        let o = cx.offsets;
        let (stack_cost_ns, stack_burst_ns) = stack_budget(cx.opts.stack_walks_per_cpu_s);
        let mut config = ProbeConfig {
            filter_mode: FILTER_ALL,
            flags_mask: u64::MAX,
            off_task_mm: o.task_mm,
            off_task_tgid: o.task_tgid,
            off_task_sighand: o.task_sighand,
            off_task_pi_lock: o.task_pi_lock,
            off_mm_mmap_lock: o.mm_mmap_lock,
            off_sighand_siglock: o.sighand_siglock,
            off_task_group_leader: o.task_group_leader,
            off_task_comm: o.task_comm,
            off_rwsem_wait_lock: o.rwsem_wait_lock,
            name_kinds: o.name_kinds,
            off_task_pid: o.task_pid,
            off_mutex_owner: o.mutex_owner,
            off_rwsem_owner: o.rwsem_owner,
            off_rtmutex_owner: o.rtmutex_owner,
            off_rtmutex_leftmost: o.rtmutex_leftmost,
            off_rtwaiter_entry: o.rtwaiter_entry,
            off_rtwaiter_task: o.rtwaiter_task,
            holder_kinds: o.holder_kinds,
            off_task_cfs_rq: o.task_cfs_rq,
            off_cfs_rq_rq: o.cfs_rq_rq,
            off_rq_lock: o.rq_lock,
            stack_cost_ns,
            stack_burst_ns,
            ..Default::default()
        };
        if let Some(types) = &cx.opts.types {
            config.flags_mask = flags_mask(types);
        }
        match &cx.opts.target {
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
        self.config = config;
        self.naming = cx.kbtf.dynamic_naming();
        self.kfuncs = kernel_kfuncs(cx.kbtf);
        let has = |p: i32| self.kfuncs.iter().any(|(k, _)| *k == p);
        if has(KFUNC_TASK_FROM_PID) && has(KFUNC_TASK_RELEASE) {
            self.naming.config.task_kfuncs = 1;
        } else {
            cx.notes.push(
                "btf: lock holders' stacks are not taken, and a process's mmap_lock or \
                 siglock reused by a later process is not said to be (no \
                 bpf_task_from_pid kfunc: Linux 6.2+)"
                    .to_owned(),
            );
        }
        cx.notes
            .extend(self.naming.missing.iter().map(|m| format!("btf: {m}")));
        self.lock_types = Arc::new(LockTypes {
            rwsem_rtmutex: cx.offsets.rwsem_rtmutex,
            ..lock_types(cx.kbtf, Path::new(SLAB_SYSFS))
        });
        Ok(())
    }

    fn globals(&self, out: &mut Globals) {
        out.set("CONFIG", &self.config);
        out.set("SLAB_CONFIG", &self.naming.config);
        out.kfuncs.extend(self.kfuncs.iter().copied());
    }

    fn preload(&self, out: &mut Vec<crate::probe::loader::Preload>) {
        use crate::probe::loader::Preload;
        // The groups `attach` attaches.
        Preload::group(&CONTENTION, out);
        Preload::group(&EXEC_NAMES, out);
        if self.follows_forks_wanted() {
            Preload::group(&FORK_FOLLOW, out);
        }
    }

    fn attach(&mut self, cx: &mut Attach<'_>) -> anyhow::Result<()> {
        if let Target::Pids(pids) = &cx.opts.target {
            add_targets(cx.ebpf, pids)?;
        }
        fill_cache_idents(cx.ebpf, &self.lock_types)?;
        // The sleeping waits in progress are in the threads' storage, counted by a task
        // iterator at each snapshot: loaded first, so that a refusal attaches nothing.
        source::iter::task_iter(cx.ebpf, source::CONTENTION_TASK_ITER)?
            .load("task", cx.btf)
            .context("loading the task iterator that counts the sleeping waits in progress")?;
        cx.group(&CONTENTION)?;
        cx.group(&EXEC_NAMES)?;
        if self.follows_forks_wanted() {
            self.follows_forks = cx.group(&FORK_FOLLOW)?;
        }
        Ok(())
    }

    fn read(&self, cx: &mut Read<'_>) -> anyhow::Result<()> {
        source::read_contention(cx.ebpf, cx.raw)?;
        cx.raw.lock_types = self.lock_types.clone();
        self.learn_holder_names(&cx.raw.holders);
        {
            // Keep the names of the holders the map still holds (bounded by its size).
            let mut seen = self.holder_comms.borrow_mut();
            let live: HashSet<u32> = cx.raw.holders.iter().map(|(k, _)| k.tid).collect();
            seen.retain(|tid, _| live.contains(tid));
            cx.raw.holder_comms = seen.clone();
        }
        let raw = &*cx.raw;
        cx.lost.extend(lost_counts(&raw.counters));
        cx.lost
            .insert("stats_evicted".to_owned(), stats_evicted(raw));
        // Waits whose (lock, holder) entry was evicted: still in their lock's figures,
        // their holder counted as unknown from then on.
        cx.lost.insert(
            "holder_stats_evicted".to_owned(),
            evicted(
                raw.counters[CNT_HOLDERS_CREATED as usize],
                raw.holders.len(),
            ),
        );
        let evicted = task_waits_evicted(raw).max(self.task_waits_evicted.get());
        self.task_waits_evicted.set(evicted);
        cx.lost.insert("task_wait_evicted".to_owned(), evicted);
        cx.lost.insert(
            "recursion_misses".to_owned(),
            source::read_recursion_misses(cx.ebpf),
        );
        Ok(())
    }

    fn entries(&self, cx: &mut Build<'_>) -> anyhow::Result<()> {
        let plan = LockPlan::new(cx.raw, cx.detail);
        let mut texts = self.stack_texts.borrow_mut();
        // Only the stacks of kept callers not symbolized before are read from the map.
        let missing: Vec<u64> = plan
            .stack_ids()
            .chain(cx.raw.holder_stacks.values().copied())
            .filter(|&id| !texts.contains(id))
            .collect();
        cx.raw.stacks = source::read_stacks(cx.ebpf, &missing)?;
        cx.rec.locks = build_locks_cached(cx.raw, plan, cx.names, &mut cx.rec.lost, &mut texts);
        Ok(())
    }

    fn doctor_rows(&self, cx: &Doctor<'_>) {
        for g in [&CONTENTION, &EXEC_NAMES, &FORK_FOLLOW] {
            let ok = super::doctor_group_rows(cx, g);
            if g.required {
                cx.ready.set(ok == g.hooks.len());
            }
        }
        let Some(kbtf) = cx.kbtf else {
            return;
        };
        // How dynamic locks are named on this kernel.
        let naming = kbtf.dynamic_naming();
        let missing = |what: &str| {
            naming
                .missing
                .iter()
                .find(|m| m.starts_with(what))
                .cloned()
                .unwrap_or_default()
        };
        let row = |name: &str, ok: bool, yes: String, no: String| {
            let (word, detail) = if ok {
                ("available", yes)
            } else {
                ("missing", no)
            };
            println!("{name:<22} {:<11} {word:<10} {detail}", "btf");
        };
        row(
            "slab-lock-names",
            naming.config.kinds & PLACE_SLAB != 0,
            "bpf_get_kmem_cache: locks in slab objects named by cache, field and object".into(),
            missing("slab"),
        );
        row(
            "page-table-lock-names",
            naming.config.kinds & PLACE_PAGE_TABLE != 0,
            "split page-table locks named for their page".into(),
            missing("page-table"),
        );
        let percpu = kbtf.percpu_locks();
        row(
            "percpu-lock-names",
            percpu.is_ok(),
            format!(
                "{} lock fields of static per-CPU variables",
                percpu.as_ref().map_or(0, |p| p.fields.len())
            ),
            percpu
                .err()
                .map(|e| format!("per-CPU variables' locks are not named ({e:#})"))
                .unwrap_or_default(),
        );
    }
}

/// Tell the probes where each typed cache's objects keep their inode number.
fn fill_cache_idents(ebpf: &mut aya::Ebpf, types: &LockTypes) -> anyhow::Result<()> {
    let mut map: aya::maps::HashMap<_, [u8; CACHE_NAME_LEN], u32> =
        aya::maps::HashMap::try_from(ebpf.map_mut("CACHE_IDENTS").context("CACHE_IDENTS map")?)?;
    let idents = types
        .caches
        .iter()
        .filter_map(|(name, t)| Some((name, t.ident?.offset())))
        .filter(|(name, _)| name.len() < CACHE_NAME_LEN)
        .take(CACHE_IDENTS_MAX_ENTRIES as usize);
    for (name, off) in idents {
        let mut key = [0u8; CACHE_NAME_LEN];
        key[..name.len()].copy_from_slice(name.as_bytes());
        map.insert(key, off, 0)?;
    }
    Ok(())
}
