//! One tracing session: the pipeline core that every sink (record, serve, top) drives.
//! probe (load + attach) -> source (map reads) -> decode/aggregate (Recording).

use std::{
    collections::{BTreeSet, HashMap},
    sync::Mutex,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use lockscope_common::{COUNTERS_LEN, HolderKey, HolderStats};

use crate::{
    aggregate::forget::{ExitTracker, Forgotten, forget_candidates, forgettable},
    aggregate::timeline::LockTotals,
    aggregate::{
        Recording, cgroup,
        correlate::{cyclictest_spikes, parse_cyclictest},
        futex::{FutexEvents, futex_type_filtered},
        pi_lock::{RtInput, RtSummary, apply_wait_task, build_rt_view, rt_lost},
        recording::{
            Detail, EventCounts, LockPlan, SCHEMA, StackTexts, build_locks_cached, lock_identity,
            lost_counts, stats_evicted,
        },
        rt::{LatencySpike, StarvationEpisode},
        rwsem, spin,
    },
    probe::{
        LoadOptions, Probes, features,
        rt::{ACTIVITY_FLOOR_NS, RtOptions},
        rwsem::RT_NOTE,
    },
    source::{
        batch::delete_keys,
        read_counters, read_lock_totals, read_snapshot, read_stacks,
        rt::{RtDrain, read_open_bursts, read_rt_counters, read_wait_task},
    },
    symbolize::{KernelNames, cgroup::CgroupNames, user::UserNames},
};

/// Give the memory a map read freed back to the system. A read's transient buffers are
/// as large as the kernel maps; without this the allocator keeps the high-water mark,
/// and a long-running sink's RSS would track the largest read rather than what it holds.
pub fn release_free_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory; no pointer is involved.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn process_alive(tgid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{tgid}")).exists()
}

pub struct Session {
    probes: Probes,
    names: KernelNames,
    target: String,
    kernel: String,
    started_at: SystemTime,
    start: Instant,
    stopped_after: Option<f64>,
    /// User-space lock types asked for (`None`: all).
    futex_types: Option<Vec<crate::decode::LockType>>,
    /// Symbolized stacks, kept across snapshots.
    stack_texts: std::cell::RefCell<StackTexts>,
    /// Holder thread names seen in earlier snapshots (a thread that has exited since is
    /// still named), kept for the holders the maps still hold.
    holder_comms: std::cell::RefCell<HashMap<u32, String>>,
    /// How many callers and tasks each snapshot keeps.
    detail: Detail,
    /// Drop the figures of exited processes from the kernel maps after each snapshot
    /// (long-running sinks), and how many entries that dropped so far.
    forget_exited: Option<Duration>,
    exits: std::cell::RefCell<ExitTracker>,
    forgotten: std::cell::Cell<Forgotten>,
    /// User call sites of pthread locks: process maps kept past the processes' exits.
    user_names: UserNames,
    /// The in-flight evictions last reported (a counter: never shown going down).
    task_waits_evicted: std::cell::Cell<u64>,
    /// Cgroup ids -> paths, kept so a removed cgroup keeps its name.
    cgroup_names: std::cell::RefCell<CgroupNames>,
    /// The real-time probes' ring buffer and what was drained from it.
    rt: Option<Mutex<RtDrain>>,
    /// CLOCK_MONOTONIC (the probes' clock) when `start` was taken.
    start_ktime_ns: u64,
    /// cyclictest's own output (text, pid) when it was the traced command.
    cyclictest: Mutex<Option<(String, u32)>>,
}

impl Session {
    /// Load and attach the probes. `target` describes what is traced, for reports.
    pub fn start(opts: &LoadOptions, target: String) -> anyhow::Result<Self> {
        Self::start_with_rt(opts, target, None)
    }

    /// Start, with the real-time probes timing wakeups of real-time threads (`rt`).
    pub fn start_with_rt(
        opts: &LoadOptions,
        target: String,
        rt: Option<RtOptions>,
    ) -> anyhow::Result<Self> {
        // The targets' maps, before loading (seconds on a busy machine), in case they exit.
        let user_names = UserNames::new();
        if let crate::probe::Target::Pids(pids) = &opts.target {
            pids.iter().for_each(|&p| user_names.remember(p));
        }
        let mut probes = Probes::load_with_rt(opts, rt)?;
        let rt = match rt {
            Some(_) => {
                let map = probes
                    .take_map("RT_EVENTS")
                    .ok_or_else(|| anyhow::anyhow!("RT_EVENTS map missing"))?;
                Some(Mutex::new(RtDrain::new(map)?))
            }
            None => None,
        };
        Ok(Self {
            rt,
            start_ktime_ns: monotonic_ns(),
            cyclictest: Mutex::new(None),
            probes,
            names: KernelNames::new(),
            target,
            kernel: features::kernel_release(),
            started_at: SystemTime::now(),
            start: Instant::now(),
            stopped_after: None,
            futex_types: opts
                .types
                .as_ref()
                .map(|ts| ts.iter().copied().filter(|t| t.is_user()).collect()),
            stack_texts: Default::default(),
            holder_comms: Default::default(),
            detail: Detail::ALL,
            forget_exited: None,
            exits: Default::default(),
            forgotten: Default::default(),
            user_names,
            cgroup_names: Default::default(),
            task_waits_evicted: Default::default(),
        })
    }

    /// Keep only this much per-lock detail in snapshots (long-running sinks: memory
    /// stays flat however many locks and stacks the kernel maps hold).
    pub fn set_detail(&mut self, detail: Detail) {
        self.detail = detail;
    }

    /// After each snapshot, delete the contention figures of processes that have exited
    /// from the kernel map: a daemon's maps and memory then follow the live processes,
    /// not every process since start. The snapshot that sees an exited process still
    /// has its figures (metrics keep them, folded into `lock="other"` afterwards).
    pub fn forget_exited(&mut self, after: Duration) {
        self.forget_exited = Some(after);
    }

    /// Delete the contention, rwsem-event, futex and `sched_wait_task` entries of
    /// processes gone for `after`, and the names of the locks they owned (see
    /// [`forgettable`]; the rwsem system totals are counters of their own).
    fn forget_expired(
        &self,
        raw: &crate::aggregate::RawSnapshot,
        wait_task: &[(lockscope_common::WaitTaskKey, u64)],
        after: Duration,
    ) -> anyhow::Result<()> {
        let gone = self.exits.borrow_mut().expired(
            &forget_candidates(raw, wait_task),
            Instant::now(),
            after,
            process_alive,
        );
        let forget = forgettable(raw, wait_task, &gone);
        if !gone.is_empty() {
            self.probes
                .pthread
                .forget(&gone.iter().copied().collect::<Vec<_>>());
        }
        let ebpf = self.probes.ebpf();
        let mut forgotten = self.forgotten.get();
        forgotten.stats += delete_keys(ebpf, "CONTENTION_STATS", &forget.stats)?;
        forgotten.futex += delete_keys(ebpf, "FUTEX_STATS", &forget.futex)?;
        self.forgotten.set(forgotten);
        delete_keys(ebpf, "RWSEM_EVENT_STATS", &forget.rwsem_events)?;
        delete_keys(ebpf, "LOCK_INFO", &forget.lock_info)?;
        delete_keys(ebpf, "WAIT_TASK_STATS", &forget.wait_task)?;
        Ok(())
    }

    /// Seconds since the probes were attached (frozen at `stop`).
    pub fn elapsed_s(&self) -> f64 {
        self.stopped_after
            .unwrap_or_else(|| self.start.elapsed().as_secs_f64())
    }

    /// The event and loss counters only: cheap enough for a live status line.
    pub fn counters(&self) -> anyhow::Result<[u64; COUNTERS_LEN as usize]> {
        read_counters(self.probes.ebpf())
    }

    /// Move the real-time probes' records out of their ring buffer (call it often: the
    /// buffer is finite and a full one drops records, counted). Returns how many.
    pub fn drain_rt(&self) -> usize {
        match &self.rt {
            Some(d) => d.lock().map(|mut d| d.drain()).unwrap_or(0),
            None => 0,
        }
    }

    /// cyclictest's output, to record its own latencies as spikes (`source: cyclictest`).
    pub fn feed_cyclictest_output(&self, text: String, pid: u32) {
        if let Ok(mut c) = self.cyclictest.lock() {
            *c = Some((text, pid));
        }
    }

    /// Name the lock holders seen so far while their threads are alive (a recording
    /// made after they exit still names them). Cheap: one batched read of the holder map.
    pub fn name_holders(&self) -> anyhow::Result<()> {
        let holders = crate::source::read_holders(self.probes.ebpf())?;
        self.learn_holder_names(&holders);
        Ok(())
    }

    /// Read from /proc the names of the holders not named yet (each thread once).
    fn learn_holder_names(&self, holders: &[(HolderKey, HolderStats)]) {
        let mut seen = self.holder_comms.borrow_mut();
        for (k, _) in holders {
            if k.tid == lockscope_common::HOLDER_READERS || seen.contains_key(&k.tid) {
                continue;
            }
            if let Some(c) = crate::source::thread_comm(k.tgid, k.tid) {
                seen.insert(k.tid, c);
            }
        }
    }

    /// Everything aggregated since the start, as a recording.
    pub fn snapshot(&self) -> anyhow::Result<Recording> {
        let mut raw = read_snapshot(self.probes.ebpf(), self.probes.futex)?;
        self.learn_holder_names(&raw.holders);
        {
            // Keep the names of the holders the map still holds (bounded by its size).
            let mut seen = self.holder_comms.borrow_mut();
            let live: std::collections::HashSet<u32> =
                raw.holders.iter().map(|(k, _)| k.tid).collect();
            seen.retain(|tid, _| live.contains(tid));
            raw.holder_comms = seen.clone();
        }
        raw.futex.types = self.futex_types.clone();
        self.fill_pthread(&mut raw.futex.pthread);
        let mut lost = lost_counts(&raw.counters);
        lost.insert("stats_evicted".to_owned(), stats_evicted(&raw));
        // Waits whose (lock, holder) entry was evicted: still in their lock's figures,
        // their holder counted as unknown from then on.
        lost.insert(
            "holder_stats_evicted".to_owned(),
            crate::aggregate::recording::evicted(
                raw.counters[lockscope_common::CNT_HOLDERS_CREATED as usize],
                raw.holders.len(),
            ),
        );
        let evicted = crate::aggregate::recording::task_waits_evicted(&raw)
            .max(self.task_waits_evicted.get());
        self.task_waits_evicted.set(evicted);
        lost.insert("task_wait_evicted".to_owned(), evicted);
        lost.insert(
            "recursion_misses".to_owned(),
            crate::source::read_recursion_misses(self.probes.ebpf()),
        );
        let plan = LockPlan::new(&raw, self.detail);
        let mut texts = self.stack_texts.borrow_mut();
        // Only the stacks of kept callers not symbolized before are read from the map.
        let missing: Vec<u64> = plan.stack_ids().filter(|&id| !texts.contains(id)).collect();
        raw.stacks = read_stacks(self.probes.ebpf(), &missing)?;
        let mut locks = build_locks_cached(&raw, plan, &self.names, &mut lost, &mut texts);
        drop(texts);
        self.forgotten.get().discount(&mut lost);
        let wait_task = read_wait_task(self.probes.ebpf())?;
        if let Some(after) = self.forget_exited {
            self.forget_expired(&raw, &wait_task, after)?;
        }
        let mut comms = with_proc_comms(&raw.comms, &raw);
        for (k, _) in &wait_task {
            if !comms.contains_key(&k.waiter_tgid)
                && let Some(c) = proc_comm(k.waiter_tgid)
            {
                comms.insert(k.waiter_tgid, c);
            }
        }
        let name = |a: u64| lock_identity(&raw, &self.names, a);
        apply_wait_task(&wait_task, &comms, &name, &mut locks);
        let rt_counters = read_rt_counters(self.probes.ebpf())?;
        lost.extend(rt_lost(&rt_counters));
        let (spin_summary, deep_episodes) = self.spin_snapshot(&mut locks, &mut lost)?;
        let (rt_episodes, latency_spikes, rt_summary) = self.rt_view(
            &raw,
            &comms,
            &rt_counters,
            deep_episodes.clone().unwrap_or_default(),
            &mut lost,
        )?;
        // With the real-time probes the episodes of both tiers come back together.
        let starvation_episodes = rt_episodes.or(deep_episodes);
        let deep = &self.probes.rwsem;
        let kinds = rwsem::event_kinds(deep.mask, deep.rt, self.probes.has_mmap_lock_estimate());
        rwsem::apply_rwsem_events(&raw, &self.names, &kinds, &mut locks);
        let rwsem_events = rwsem::summary(
            &raw,
            &kinds,
            deep.tier(),
            deep.hook_tiers(),
            deep.rt.then(|| RT_NOTE.to_owned()),
        );
        let tgids: BTreeSet<u32> = raw
            .stats
            .iter()
            .map(|(k, _)| k.tgid)
            .chain(locks.iter().flat_map(|l| l.tasks.iter().map(|t| t.pid)))
            .chain(locks.iter().filter_map(|l| l.user.as_ref().map(|u| u.pid)))
            .collect();
        let cgroup_of = self
            .cgroup_names
            .borrow_mut()
            .processes(tgids, &raw.cgroups);
        cgroup::label_tasks(&mut locks, &cgroup_of);
        let cgroups = cgroup::summarize(&raw, &locks, &cgroup_of);
        Ok(Recording {
            schema: SCHEMA.to_owned(),
            lockscope_version: env!("CARGO_PKG_VERSION").to_owned(),
            kernel: self.kernel.clone(),
            tier: self.probes.tier.to_owned(),
            target: self.target.clone(),
            duration_s: self.elapsed_s(),
            started_at_unix_s: self
                .started_at
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
            command_exit_code: None,
            events: EventCounts::from_counters(&raw.counters, raw.in_progress),
            lost,
            locks,
            timeline: None,
            futex_events: raw
                .futex
                .enabled
                .then(|| FutexEvents::from_snapshot(&raw.futex, futex_type_filtered(&raw.futex))),
            rwsem_events: Some(rwsem_events),
            starvation_episodes,
            latency_spikes,
            rt_summary,
            spin: Some(spin_summary),
            cgroups: Some(cgroups),
        })
    }

    /// Spikes, episodes and the summary, when the real-time probes time wakeups.
    #[allow(clippy::type_complexity)]
    fn rt_view(
        &self,
        raw: &crate::aggregate::RawSnapshot,
        comms: &HashMap<u32, String>,
        counters: &[u64; lockscope_common::RT_COUNTERS_LEN as usize],
        deep_episodes: Vec<StarvationEpisode>,
        lost: &mut std::collections::BTreeMap<String, u64>,
    ) -> anyhow::Result<(
        Option<Vec<StarvationEpisode>>,
        Option<Vec<LatencySpike>>,
        Option<RtSummary>,
    )> {
        let (Some(opts), Some(drain)) = (self.probes.rt, &self.rt) else {
            return Ok((None, None, None));
        };
        let mut drain = drain
            .lock()
            .map_err(|_| anyhow::anyhow!("real-time drain poisoned"))?;
        drain.drain();
        lost.insert("rt_malformed_records".to_owned(), drain.malformed);
        let floor = ACTIVITY_FLOOR_NS.min(opts.starvation_threshold_ns);
        let mut events = drain.events.clone();
        // Bursts still open at the end are activity too.
        events.extend(
            read_open_bursts(self.probes.ebpf())?
                .into_iter()
                .filter(|b| b.dur_ns >= floor),
        );
        let name = |a: u64| lock_identity(raw, &self.names, a).0;
        let comm = |pid: u32| comms.get(&pid).cloned().or_else(|| proc_comm(pid));
        let input = RtInput {
            events: &events,
            counters,
            latency_threshold_ns: opts.latency_threshold_ns,
            starvation_threshold_ns: opts.starvation_threshold_ns,
            starvation_acquisitions: opts.starvation_acquisitions,
            start_ktime_ns: self.start_ktime_ns,
            name: &name,
            comm: &comm,
        };
        let cyclictest = self.cyclictest.lock().ok().and_then(|c| c.clone());
        let extra = |own: &[LatencySpike]| match &cyclictest {
            Some((text, pid)) => cyclictest_spikes(
                &parse_cyclictest(text),
                own,
                opts.latency_threshold_ns,
                "cyclictest",
                *pid,
            ),
            None => Vec::new(),
        };
        let (spikes, episodes, summary) = build_rt_view(&input, deep_episodes, &extra);
        // Every record that arrived is in this snapshot; keep only the recent ones.
        crate::source::rt::retain_recent(&mut drain.events, self.detail.rt_window_ns);
        Ok((Some(episodes), Some(spikes), Some(summary)))
    }

    /// The deep spinlock tier: its entries merged into `locks`, its summary, and the
    /// starvation episodes (`None` when the tier did not run).
    fn spin_snapshot(
        &self,
        locks: &mut Vec<crate::aggregate::LockEntry>,
        lost: &mut std::collections::BTreeMap<String, u64>,
    ) -> anyhow::Result<(spin::SpinSummary, Option<Vec<StarvationEpisode>>)> {
        let tier = &self.probes.spin;
        if !tier.active() {
            let why = tier.unavailable.as_deref().unwrap_or("not attached");
            return Ok((spin::unavailable_summary(why, tier.hook_tiers()), None));
        }
        let snap =
            crate::source::spin::read_spin(self.probes.ebpf(), tier.episodes(), tier.malformed())?;
        let hold_ok = tier.hold_unavailable.is_none();
        spin::merge_entries(locks, spin::deep_entries(&snap, &self.names, hold_ok));
        let episodes = spin::episodes(&snap, &self.names, lost);
        let summary = spin::summary(
            &snap,
            tier.hook_tiers(),
            tier.hold_unavailable.as_deref(),
            &tier.params,
        );
        // Every episode that arrived is in this snapshot; keep only the latest for the next.
        tier.keep_latest(self.detail.episodes);
        Ok((summary, Some(episodes)))
    }

    /// Set the starvation detector's thresholds (deep spinlock tier; no-op without it).
    pub fn set_starvation(&mut self, p: lockscope_common::SpinParams) -> anyhow::Result<()> {
        self.probes.set_spin_params(p)
    }

    /// Cumulative count and wait time per (lock, type): cheap enough to read every interval
    /// (no symbolization).
    pub fn lock_totals(&self) -> anyhow::Result<Vec<LockTotals>> {
        // Episodes wait in a ring buffer: empty it every interval.
        self.probes.spin.drain();
        read_lock_totals(self.probes.ebpf())
    }

    /// Detach every probe: no new events; maps stay readable for a last snapshot.
    pub fn stop(&mut self) {
        if self.stopped_after.is_none() {
            self.stopped_after = Some(self.start.elapsed().as_secs_f64());
        }
        self.probes.detach();
    }

    pub fn probes(&self) -> &Probes {
        &self.probes
    }

    /// Read the memory maps of processes with new pthread call sites while they live, so
    /// that the sites can be named after the processes exit. Cheap; call it often.
    pub fn observe_user_sites(&self) {
        let keys = self.probes.pthread.site_keys();
        if !keys.is_empty() {
            self.user_names.observe(&keys);
        }
    }

    /// Read process `pid`'s maps now, to unwind its waits and name its call sites should
    /// it exit early.
    /// Trace `pid` (a launched command) when the kernel does not follow forks.
    pub fn add_target(&mut self, pid: u32) -> anyhow::Result<()> {
        self.probes.add_target(pid)
    }

    pub fn remember_process(&self, pid: u32) {
        self.user_names.remember(pid);
        self.probes.pthread.remember(pid);
    }

    /// Record a note on pthread attribution (kept in the recording's `futex_events`).
    pub fn pthread_note(&mut self, note: String) {
        self.probes.pthread.notes.push(note);
    }

    fn fill_pthread(&self, p: &mut crate::aggregate::pthread::PthreadSnapshot) {
        self.probes.pthread.fill(p);
        let keys: Vec<(u32, u64)> = p.sites.iter().map(|s| (s.key.tgid, s.key.site)).collect();
        p.site_names = self.user_names.names(&keys);
    }
}

/// Process names: those the probes saw, then `/proc` for the waiters and tracees that the
/// sched_wait_task proxy and the real-time probes name by pid only.
fn with_proc_comms(
    seen: &HashMap<u32, String>,
    raw: &crate::aggregate::RawSnapshot,
) -> HashMap<u32, String> {
    let mut comms = seen.clone();
    for info in raw.lock_info.values() {
        comms
            .entry(info.tgid)
            .or_insert_with(|| crate::decode::comm_to_string(&info.comm));
    }
    comms
}

/// A process's name from `/proc`, when it is still running.
pub fn proc_comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_owned())
}

/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_ns`.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
