//! Real time (`--latency-threshold`): wakeup latency of real-time threads timed in the
//! kernel, the lock activity in each spike's window, and the starvation episodes of
//! both spinlock tiers, with cyclictest's own spikes when it is the traced command.

use std::sync::Mutex;

use super::{Attach, Build, Doctor, Family};
use crate::{
    aggregate::{
        correlate::{cyclictest_spikes, parse_cyclictest},
        pi_lock::{RtInput, build_rt_view, rt_lost},
        recording::lock_identity,
    },
    probe::{
        groups::RT_LATENCY,
        rt::{ACTIVITY_FLOOR_NS, RtOptions, set_gate},
    },
    source::rt::{RtDrain, read_open_bursts, read_rt_counters, retain_recent},
};
use aya::Ebpf;

#[derive(Default)]
pub struct RealTime {
    /// The thresholds asked for; `None`: the family is off.
    pub opts: Option<RtOptions>,
    /// The probes' ring buffer and what was drained from it.
    drain: Option<Mutex<RtDrain>>,
    /// CLOCK_MONOTONIC (the probes' clock) when recording started.
    start_ktime_ns: u64,
    /// cyclictest's own output (text, pid) when it was the traced command.
    cyclictest: Mutex<Option<(String, u32)>>,
}

impl RealTime {
    /// Move the probes' records out of their ring buffer (call it often: the buffer is
    /// finite and a full one drops records, counted). Returns how many.
    pub fn drain(&self) -> usize {
        match &self.drain {
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
}

impl Family for RealTime {
    fn name(&self) -> &'static str {
        RT_LATENCY.name
    }

    fn prepare(&mut self, cx: &mut super::Prepare<'_>) -> anyhow::Result<()> {
        self.opts = cx.rt;
        Ok(())
    }

    fn preload(&self, out: &mut Vec<crate::probe::loader::Preload>) {
        if self.opts.is_some() {
            crate::probe::loader::Preload::group(&RT_LATENCY, out);
        }
    }

    fn attach(&mut self, cx: &mut Attach<'_>) -> anyhow::Result<()> {
        if self.opts.is_none() {
            return Ok(());
        }
        cx.group(&RT_LATENCY)?;
        let map = cx
            .ebpf
            .take_map("RT_EVENTS")
            .ok_or_else(|| anyhow::anyhow!("RT_EVENTS map missing"))?;
        self.drain = Some(Mutex::new(RtDrain::new(map)?));
        Ok(())
    }

    fn start(&mut self, ebpf: &mut Ebpf) -> anyhow::Result<()> {
        if self.opts.is_some() {
            set_gate(ebpf, true)?;
        }
        self.start_ktime_ns = monotonic_ns();
        Ok(())
    }

    /// Spikes, episodes and the summary, when the real-time probes time wakeups (the
    /// counters' losses always: the pi-lock proxy counts there too).
    fn build(&self, cx: &mut Build<'_>) -> anyhow::Result<()> {
        let counters = read_rt_counters(cx.ebpf)?;
        cx.rec.lost.extend(rt_lost(&counters));
        let (Some(opts), Some(drain)) = (self.opts, &self.drain) else {
            return Ok(());
        };
        let mut drain = drain
            .lock()
            .map_err(|_| anyhow::anyhow!("real-time drain poisoned"))?;
        drain.drain();
        cx.rec
            .lost
            .insert("rt_malformed_records".to_owned(), drain.malformed);
        let floor = ACTIVITY_FLOOR_NS.min(opts.starvation_threshold_ns);
        let mut events = drain.events.clone();
        // Bursts still open at the end are activity too.
        events.extend(
            read_open_bursts(cx.ebpf)?
                .into_iter()
                .filter(|b| b.dur_ns >= floor),
        );
        let (raw, names, comms) = (&*cx.raw, cx.names, cx.comms);
        let name = |a: u64| lock_identity(raw, names, a).0;
        let comm = |pid: u32| {
            comms
                .get(&pid)
                .cloned()
                .or_else(|| crate::source::process_comm(pid))
        };
        let input = RtInput {
            events: &events,
            counters: &counters,
            latency_threshold_ns: opts.latency_threshold_ns,
            starvation_threshold_ns: opts.starvation_threshold_ns,
            starvation_acquisitions: opts.starvation_acquisitions,
            start_ktime_ns: self.start_ktime_ns,
            name: &name,
            comm: &comm,
        };
        let cyclictest = self.cyclictest.lock().ok().and_then(|c| c.clone());
        let extra = |own: &[crate::aggregate::rt::LatencySpike]| match &cyclictest {
            Some((text, pid)) => cyclictest_spikes(
                &parse_cyclictest(text),
                own,
                opts.latency_threshold_ns,
                "cyclictest",
                *pid,
            ),
            None => Vec::new(),
        };
        let deep = cx.deep_episodes.clone().unwrap_or_default();
        let (spikes, episodes, summary) = build_rt_view(&input, deep, &extra);
        // Every record that arrived is in this snapshot; keep only the recent ones.
        retain_recent(&mut drain.events, cx.detail.rt_window_ns);
        // With the real-time probes the episodes of both tiers come back together.
        cx.rec.starvation_episodes = Some(episodes);
        cx.rec.latency_spikes = Some(spikes);
        cx.rec.rt_summary = Some(summary);
        Ok(())
    }

    fn stop(&mut self, ebpf: &mut Ebpf) {
        if self.opts.is_some() {
            let _ = set_gate(ebpf, false);
        }
    }

    fn doctor_rows(&self, cx: &Doctor<'_>) {
        super::doctor_group_rows(cx, &RT_LATENCY);
    }
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
