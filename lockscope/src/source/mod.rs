//! Reading the in-kernel aggregation maps into a [`RawSnapshot`]; [`remote`]: recordings
//! from a running `lockscope serve`.

pub mod remote;

pub mod futex;
pub mod spin;

use anyhow::Context as _;
use aya::{
    Ebpf,
    maps::{HashMap as BpfHashMap, MapData, PerCpuArray, PerCpuHashMap},
};
use lockscope_common::{
    COUNTERS_LEN, ContentionKey, ContentionStats, LockInfo, RWSEM_COUNTERS_LEN, RwsemEventCounts,
    RwsemEventKey, StackFrames, WaitStart,
};

use std::collections::BTreeMap;

use crate::{
    aggregate::{RawSnapshot, timeline::LockTotals},
    decode::{LockType, comm_to_string, merge_cpus},
};

/// Per-CPU event counters summed over CPUs (cheap: one small array).
pub fn read_counters(ebpf: &Ebpf) -> anyhow::Result<[u64; COUNTERS_LEN as usize]> {
    let counters: PerCpuArray<&MapData, u64> =
        PerCpuArray::try_from(ebpf.map("COUNTERS").context("COUNTERS map")?)?;
    let mut out = [0u64; COUNTERS_LEN as usize];
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = counters.get(&(i as u32), 0)?.iter().sum();
    }
    Ok(out)
}

/// Cumulative (contended, wait) per (lock, type), summed over stacks, tasks and CPUs.
pub fn read_lock_totals(ebpf: &Ebpf) -> anyhow::Result<Vec<LockTotals>> {
    let stats: PerCpuHashMap<&MapData, ContentionKey, ContentionStats> = PerCpuHashMap::try_from(
        ebpf.map("CONTENTION_STATS")
            .context("CONTENTION_STATS map")?,
    )?;
    let mut sums: BTreeMap<(u64, LockType), (u64, u64)> = BTreeMap::new();
    for entry in stats.iter() {
        let (key, values) = entry.context("reading CONTENTION_STATS")?;
        let Ok(t) = LockType::from_flags(key.flags) else {
            continue;
        };
        let s = sums.entry((key.lock, t)).or_default();
        for v in values.iter() {
            s.0 += v.count;
            s.1 += v.total_ns;
        }
    }
    Ok(sums
        .into_iter()
        .map(|((addr, lock_type), (contended, wait_ns))| LockTotals {
            addr,
            lock_type,
            contended,
            wait_ns,
        })
        .collect())
}

/// Everything the probes aggregated so far. `futex`: the futex probes are attached.
pub fn read_snapshot(ebpf: &Ebpf, futex: bool) -> anyhow::Result<RawSnapshot> {
    let mut raw = RawSnapshot {
        counters: read_counters(ebpf)?,
        ..Default::default()
    };

    let stats: PerCpuHashMap<&MapData, ContentionKey, ContentionStats> = PerCpuHashMap::try_from(
        ebpf.map("CONTENTION_STATS")
            .context("CONTENTION_STATS map")?,
    )?;
    for entry in stats.iter() {
        let (key, values) = entry.context("reading CONTENTION_STATS")?;
        raw.stats.push((key, merge_cpus(values.iter())));
    }

    let info: BpfHashMap<&MapData, u64, LockInfo> =
        BpfHashMap::try_from(ebpf.map("LOCK_INFO").context("LOCK_INFO map")?)?;
    for entry in info.iter() {
        let (lock, li) = entry.context("reading LOCK_INFO")?;
        raw.lock_info.insert(lock, li);
    }

    let comms: BpfHashMap<&MapData, u32, [u8; 16]> =
        BpfHashMap::try_from(ebpf.map("COMMS").context("COMMS map")?)?;
    for entry in comms.iter() {
        let (tgid, comm) = entry.context("reading COMMS")?;
        raw.comms.insert(tgid, comm_to_string(&comm));
    }

    let stacks: BpfHashMap<&MapData, u64, StackFrames> =
        BpfHashMap::try_from(ebpf.map("STACKS").context("STACKS map")?)?;
    for entry in stacks.iter() {
        let (hash, frames) = entry.context("reading STACKS")?;
        raw.stacks.insert(
            hash,
            frames.iter().copied().take_while(|&ip| ip != 0).collect(),
        );
    }

    let task_waits: BpfHashMap<&MapData, u32, WaitStart> =
        BpfHashMap::try_from(ebpf.map("TASK_WAITS").context("TASK_WAITS map")?)?;
    let cpu_depth: PerCpuArray<&MapData, u32> =
        PerCpuArray::try_from(ebpf.map("CPU_WAIT_DEPTH").context("CPU_WAIT_DEPTH map")?)?;
    let spinning: u64 = cpu_depth.get(&0, 0)?.iter().map(|&d| d as u64).sum();
    raw.in_progress = task_waits.keys().count() as u64 + spinning;
    if futex {
        raw.futex = futex::read_futex(ebpf, &mut raw.comms)?;
    }

    let events: PerCpuHashMap<&MapData, RwsemEventKey, RwsemEventCounts> = PerCpuHashMap::try_from(
        ebpf.map("RWSEM_EVENT_STATS")
            .context("RWSEM_EVENT_STATS map")?,
    )?;
    for entry in events.iter() {
        let (key, values) = entry.context("reading RWSEM_EVENT_STATS")?;
        let mut sum = RwsemEventCounts::default();
        for cpu in values.iter() {
            for (s, v) in sum.n.iter_mut().zip(cpu.n.iter()) {
                *s += v;
            }
        }
        raw.rwsem_events.push((key, sum));
    }
    let counters: PerCpuArray<&MapData, u64> =
        PerCpuArray::try_from(ebpf.map("RWSEM_COUNTERS").context("RWSEM_COUNTERS map")?)?;
    raw.rwsem_counters = (0..RWSEM_COUNTERS_LEN)
        .map(|i| counters.get(&i, 0).map(|v| v.iter().sum()))
        .collect::<Result<_, _>>()?;
    Ok(raw)
}
