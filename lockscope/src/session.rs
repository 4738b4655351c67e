//! One tracing session: the pipeline core that every sink (record, serve, top) drives.
//! probe (load + attach) -> source (map reads) -> decode/aggregate (Recording).

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use lockscope_common::COUNTERS_LEN;

use crate::{
    aggregate::timeline::LockTotals,
    aggregate::{
        Recording,
        futex::{FutexEvents, futex_type_filtered},
        recording::{EventCounts, SCHEMA, StackTexts, build_locks_cached, lost_counts},
        rwsem,
    },
    probe::{LoadOptions, Probes, features, rwsem::RT_NOTE},
    source::{read_counters, read_lock_totals, read_snapshot},
    symbolize::{KernelNames, user::UserNames},
};

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
    /// User call sites of pthread locks: process maps kept past the processes' exits.
    user_names: UserNames,
}

impl Session {
    /// Load and attach the probes. `target` describes what is traced, for reports.
    pub fn start(opts: &LoadOptions, target: String) -> anyhow::Result<Self> {
        // The targets' maps, before loading (seconds on a busy machine), in case they exit.
        let user_names = UserNames::new();
        if let crate::probe::Target::Pids(pids) = &opts.target {
            pids.iter().for_each(|&p| user_names.remember(p));
        }
        let probes = Probes::load(opts)?;
        Ok(Self {
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
            user_names,
        })
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

    /// Everything aggregated since the start, as a recording.
    pub fn snapshot(&self) -> anyhow::Result<Recording> {
        let mut raw = read_snapshot(self.probes.ebpf(), self.probes.futex)?;
        raw.futex.types = self.futex_types.clone();
        self.fill_pthread(&mut raw.futex.pthread);
        let mut lost = lost_counts(&raw.counters);
        let mut locks = build_locks_cached(
            &raw,
            &self.names,
            &mut lost,
            &mut self.stack_texts.borrow_mut(),
        );
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
            starvation_episodes: None,
            latency_spikes: None,
        })
    }

    /// Cumulative count and wait time per (lock, type): cheap enough to read every interval
    /// (no symbolization).
    pub fn lock_totals(&self) -> anyhow::Result<Vec<LockTotals>> {
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
        if self.probes.pthread.active()
            && let Ok(keys) = crate::source::futex::read_pthread_site_keys(self.probes.ebpf())
        {
            self.user_names.observe(&keys);
        }
    }

    /// Attribute pthread locks of process `pid` too (a launched command): probe the C
    /// libraries it maps that are not probed yet. Returns notes on what cannot be probed.
    pub fn attach_pthread_pid(&mut self, pid: u32) -> Vec<String> {
        let before = self.probes.pthread.notes.len();
        self.probes.attach_pthread_pid(pid);
        self.probes.pthread.notes[before..].to_vec()
    }

    /// Read process `pid`'s maps now, to name its call sites should it exit early.
    pub fn remember_process(&self, pid: u32) {
        self.user_names.remember(pid);
    }

    /// Record a note on pthread attribution (kept in the recording's `futex_events`).
    pub fn pthread_note(&mut self, note: String) {
        self.probes.pthread.notes.push(note);
    }

    fn fill_pthread(&self, p: &mut crate::aggregate::pthread::PthreadSnapshot) {
        let pt = &self.probes.pthread;
        p.active = pt.active();
        p.libraries = pt.libraries.iter().map(|l| l.path.clone()).collect();
        p.notes = pt.notes.clone();
        let keys: Vec<(u32, u64)> = p.sites.iter().map(|s| (s.key.tgid, s.key.site)).collect();
        p.site_names = self.user_names.names(&keys);
    }
}
