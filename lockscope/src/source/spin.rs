//! Reading the deep spinlock tier's maps and ring buffer into a [`SpinSnapshot`].

use std::collections::BTreeSet;

use anyhow::Context as _;
use aya::{
    Ebpf,
    maps::{HashMap as BpfHashMap, MapData, PerCpuArray, PerCpuHashMap},
};
use lockscope_common::{ContentionKey, ContentionStats, SPIN_COUNTERS_LEN, SpinWatch, StackFrames};

use crate::aggregate::{WaitStats, spin::SpinSnapshot};

fn stats(ebpf: &Ebpf, name: &str) -> anyhow::Result<Vec<(ContentionKey, WaitStats)>> {
    let map: PerCpuHashMap<&MapData, ContentionKey, ContentionStats> =
        PerCpuHashMap::try_from(ebpf.map(name).with_context(|| format!("{name} map"))?)?;
    let mut out = Vec::new();
    for entry in map.iter() {
        let (key, values) = entry.with_context(|| format!("reading {name}"))?;
        out.push((key, WaitStats::from_cpus(values.iter())));
    }
    Ok(out)
}

/// The deep spinlock tier's maps, with the episode records its ring buffer gave so far
/// (and how many were malformed).
pub fn read_spin(
    ebpf: &Ebpf,
    episodes: Vec<lockscope_common::SpinEpisodeRecord>,
    malformed: u64,
) -> anyhow::Result<SpinSnapshot> {
    let mut snap = SpinSnapshot {
        waits: stats(ebpf, "SPIN_WAIT_STATS")?,
        holds: stats(ebpf, "SPIN_HOLD_STATS")?,
        episodes,
        malformed,
        ..Default::default()
    };
    let counters: PerCpuArray<&MapData, u64> =
        PerCpuArray::try_from(ebpf.map("SPIN_COUNTERS").context("SPIN_COUNTERS map")?)?;
    snap.counters = (0..SPIN_COUNTERS_LEN)
        .map(|i| counters.get(&i, 0).map(|v| v.iter().sum()))
        .collect::<Result<_, _>>()?;

    // Only the locks that appear somewhere: the watched set holds every task.
    let mut locks: BTreeSet<u64> = BTreeSet::new();
    locks.extend(snap.waits.iter().map(|(k, _)| k.lock));
    locks.extend(snap.holds.iter().map(|(k, _)| k.lock));
    locks.extend(snap.episodes.iter().map(|e| e.lock));
    let watched: BpfHashMap<&MapData, u64, SpinWatch> =
        BpfHashMap::try_from(ebpf.map("SPIN_WATCHED").context("SPIN_WATCHED map")?)?;
    let freed: BpfHashMap<&MapData, u64, SpinWatch> =
        BpfHashMap::try_from(ebpf.map("SPIN_FREED").context("SPIN_FREED map")?)?;
    for lock in locks {
        // A task freed since is named from the freed map.
        if let Ok(w) = watched.get(&lock, 0).or_else(|_| freed.get(&lock, 0)) {
            snap.watched.insert(lock, w);
        }
    }
    for w in snap.watched.values() {
        if let Some(c) = super::thread_comm(w.tgid, w.tid) {
            snap.task_comms.insert(w.tid, c);
        }
    }
    let mut tgids: BTreeSet<u32> = BTreeSet::new();
    tgids.extend(snap.waits.iter().map(|(k, _)| k.tgid));
    tgids.extend(snap.holds.iter().map(|(k, _)| k.tgid));
    for tgid in tgids {
        if let Some(c) = super::process_comm(tgid) {
            snap.comms.insert(tgid, c);
        }
    }

    let mut hashes: BTreeSet<u64> = BTreeSet::new();
    hashes.extend(snap.waits.iter().map(|(k, _)| k.stack));
    for e in &snap.episodes {
        hashes.insert(e.stack);
        hashes.extend(e.acq.iter().map(|a| a.stack));
    }
    let stacks: BpfHashMap<&MapData, u64, StackFrames> =
        BpfHashMap::try_from(ebpf.map("SPIN_STACKS").context("SPIN_STACKS map")?)?;
    for h in hashes.into_iter().filter(|&h| h != 0) {
        if let Ok(frames) = stacks.get(&h, 0) {
            snap.stacks.insert(
                h,
                frames.iter().copied().take_while(|&ip| ip != 0).collect(),
            );
        }
    }
    Ok(snap)
}
