//! Reading the real-time probes: the `RT_EVENTS` ring buffer (drained by the session),
//! the `sched_wait_task` proxy counts, open bursts and the `RT_COUNTERS`.

use anyhow::Context as _;
use aya::{
    Ebpf,
    maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf},
};
use lockscope_common::{RT_COUNTERS_LEN, RT_EV_WAIT_TASK, RtEvent, WaitTaskKey};

/// The ring buffer and everything drained from it so far.
pub struct RtDrain {
    ring: RingBuf<MapData>,
    pub events: Vec<RtEvent>,
    /// Records of the wrong size (never expected): counted, not decoded.
    pub malformed: u64,
}

impl RtDrain {
    pub fn new(map: aya::maps::Map) -> anyhow::Result<Self> {
        Ok(Self {
            ring: RingBuf::try_from(map).context("RT_EVENTS ring buffer")?,
            events: Vec::new(),
            malformed: 0,
        })
    }

    /// Move every record waiting in the ring buffer into `events`; returns how many.
    pub fn drain(&mut self) -> usize {
        let mut n = 0;
        while let Some(item) = self.ring.next() {
            if item.len() >= size_of::<RtEvent>() {
                // SAFETY: RtEvent is repr(C) plain integers; the record is at least its size.
                let ev = unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<RtEvent>()) };
                self.events.push(ev);
                n += 1;
            } else {
                self.malformed += 1;
            }
        }
        n
    }
}

/// Keep the records that ended within `window_ns` of the newest start (all of them for
/// `u64::MAX`). Long-running sinks call it after a snapshot: spikes and their overlapping
/// activity are never that far apart.
pub fn retain_recent(events: &mut Vec<RtEvent>, window_ns: u64) {
    let Some(newest) = events.iter().map(|e| e.ts_ns).max() else {
        return;
    };
    let cut = newest.saturating_sub(window_ns);
    events.retain(|e| e.ts_ns.saturating_add(e.dur_ns) >= cut);
}

/// `sched_wait_task` events per (tracee pi_lock, waiter, CPU, tracee).
pub fn read_wait_task(ebpf: &Ebpf) -> anyhow::Result<Vec<(WaitTaskKey, u64)>> {
    let map: BpfHashMap<&MapData, WaitTaskKey, u64> =
        BpfHashMap::try_from(ebpf.map("WAIT_TASK_STATS").context("WAIT_TASK_STATS map")?)?;
    map.iter()
        .map(|e| e.context("reading WAIT_TASK_STATS"))
        .collect()
}

/// The `RT_COUNTERS`, summed over CPUs.
pub fn read_rt_counters(ebpf: &Ebpf) -> anyhow::Result<[u64; RT_COUNTERS_LEN as usize]> {
    let counters: PerCpuArray<&MapData, u64> =
        PerCpuArray::try_from(ebpf.map("RT_COUNTERS").context("RT_COUNTERS map")?)?;
    let mut out = [0u64; RT_COUNTERS_LEN as usize];
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = counters.get(&(i as u32), 0)?.iter().sum();
    }
    Ok(out)
}

/// `sched_wait_task` bursts still open on each CPU (the kernel sends a burst when the
/// next one starts).
pub fn read_open_bursts(ebpf: &Ebpf) -> anyhow::Result<Vec<RtEvent>> {
    let bursts: PerCpuArray<&MapData, RtEvent> =
        PerCpuArray::try_from(ebpf.map("WT_BURST").context("WT_BURST map")?)?;
    Ok(bursts
        .get(&0, 0)?
        .iter()
        .filter(|b| b.kind == RT_EV_WAIT_TASK)
        .copied()
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(ts_ns: u64, dur_ns: u64) -> RtEvent {
        RtEvent {
            ts_ns,
            dur_ns,
            ..Default::default()
        }
    }

    #[test]
    fn only_records_near_the_newest_are_kept() {
        let mut evs = vec![ev(0, 5), ev(10, 85), ev(50, 0), ev(100, 1)];
        retain_recent(&mut evs, u64::MAX);
        assert_eq!(evs.len(), 4);
        // Cut at 100 - 10 = 90: the record from 10 lasting 85 still overlaps it.
        retain_recent(&mut evs, 10);
        let kept: Vec<u64> = evs.iter().map(|e| e.ts_ns).collect();
        assert_eq!(kept, [10, 100]);
        let mut none: Vec<RtEvent> = Vec::new();
        retain_recent(&mut none, 0);
        assert!(none.is_empty());
    }
}
