//! One tracing session: the pipeline core that every sink (record, serve, top) drives.
//! probe (load + attach) -> source (map reads) -> decode/aggregate (Recording).

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use lockscope_common::COUNTERS_LEN;

use crate::{
    aggregate::timeline::LockTotals,
    aggregate::{
        Recording,
        futex::{FutexEvents, futex_type_filtered},
        recording::{EventCounts, SCHEMA, build_locks, lost_counts},
        rwsem, spin,
    },
    probe::{LoadOptions, Probes, features, rwsem::RT_NOTE},
    source::{read_counters, read_lock_totals, read_snapshot},
    symbolize::KernelNames,
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
}

impl Session {
    /// Load and attach the probes. `target` describes what is traced, for reports.
    pub fn start(opts: &LoadOptions, target: String) -> anyhow::Result<Self> {
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
        let mut lost = lost_counts(&raw.counters);
        let mut locks = build_locks(&raw, &self.names, &mut lost);
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
        let (spin_summary, starvation) = self.spin_snapshot(&mut locks, &mut lost)?;
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
            starvation_episodes: starvation,
            latency_spikes: None,
            spin: Some(spin_summary),
        })
    }

    /// The deep spinlock tier: its entries merged into `locks`, its summary, and the
    /// starvation episodes (`None` when the tier did not run).
    fn spin_snapshot(
        &self,
        locks: &mut Vec<crate::aggregate::LockEntry>,
        lost: &mut std::collections::BTreeMap<String, u64>,
    ) -> anyhow::Result<(
        spin::SpinSummary,
        Option<Vec<crate::aggregate::rt::StarvationEpisode>>,
    )> {
        let tier = &self.probes.spin;
        if !tier.active() {
            let why = tier.unavailable.as_deref().unwrap_or("not attached");
            return Ok((spin::unavailable_summary(why, tier.hook_tiers()), None));
        }
        let snap = crate::source::spin::read_spin(self.probes.ebpf(), tier)?;
        let hold_ok = tier.hold_unavailable.is_none();
        spin::merge_entries(locks, spin::deep_entries(&snap, &self.names, hold_ok));
        let episodes = spin::episodes(&snap, &self.names, lost);
        let summary = spin::summary(
            &snap,
            tier.hook_tiers(),
            tier.hold_unavailable.as_deref(),
            &tier.params,
        );
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
}
