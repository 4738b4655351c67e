//! One tracing session: the pipeline core that every sink (record, serve, top) drives.
//! probe (load + attach) -> source (map reads) -> decode/aggregate (Recording).

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use lockscope_common::COUNTERS_LEN;

use crate::{
    aggregate::{
        Recording,
        recording::{EventCounts, SCHEMA, build_locks, lost_counts},
        rwsem,
    },
    probe::{LoadOptions, Probes, features, rwsem::RT_NOTE},
    source::{read_counters, read_snapshot},
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
        let raw = read_snapshot(self.probes.ebpf())?;
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
            rwsem_events: Some(rwsem_events),
        })
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
