//! Reading the futex probes' maps into a [`FutexSnapshot`].

use std::collections::HashMap;

use anyhow::Context as _;
use aya::{
    Ebpf,
    maps::{MapData, PerCpuArray},
};
use lockscope_common::{
    FUTEX_COUNTERS_LEN, FUTEX_HOT_SLOTS, FutexCall, FutexHot, FutexKey, FutexStats,
    PTHREAD_COUNTERS_LEN,
};

use super::batch;
use crate::{
    aggregate::futex::{
        FutexSnapshot, FutexTotals, HotForgotten, HotSlots, hot_reads_agree, merge_hot,
    },
    decode::comm_to_string,
};

/// The pthread attribution's kernel counters (sites are counted in userspace).
pub fn read_pthread_counters(ebpf: &Ebpf) -> anyhow::Result<[u64; PTHREAD_COUNTERS_LEN as usize]> {
    let counters: PerCpuArray<&MapData, u64> = PerCpuArray::try_from(
        ebpf.map("PTHREAD_COUNTERS")
            .context("PTHREAD_COUNTERS map")?,
    )?;
    let mut c = [0u64; PTHREAD_COUNTERS_LEN as usize];
    for (i, slot) in c.iter_mut().enumerate() {
        *slot = counters.get(&(i as u32), 0)?.iter().sum();
    }
    Ok(c)
}

/// Per-CPU futex counters summed over CPUs, calls handled whole at their exit folded in.
pub fn read_futex_counters(ebpf: &Ebpf) -> anyhow::Result<[u64; FUTEX_COUNTERS_LEN as usize]> {
    let counters: PerCpuArray<&MapData, u64> =
        PerCpuArray::try_from(ebpf.map("FUTEX_COUNTERS").context("FUTEX_COUNTERS map")?)?;
    let mut out = [0u64; FUTEX_COUNTERS_LEN as usize];
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = counters.get(&(i as u32), 0)?.iter().sum();
    }
    lockscope_common::fold_futex_counters(&mut out);
    Ok(out)
}

/// Everything the futex probes aggregated so far. Process names not seen by the probes
/// are filled in from `/proc` when the process is still alive.
pub fn read_futex(
    ebpf: &Ebpf,
    comms: &mut HashMap<u32, String>,
    hot_forgotten: &mut HotForgotten,
) -> anyhow::Result<FutexSnapshot> {
    let mut snap = FutexSnapshot {
        enabled: true,
        counters: read_futex_counters(ebpf)?,
        ..Default::default()
    };
    snap.pthread.counters = read_pthread_counters(ebpf)?;
    // Wakes counted in `FUTEX_HOT` slots move to `FUTEX_STATS` when another key takes
    // the slot: read the slots before and after the hash, again if a move fell between.
    let mut before = read_hot(ebpf)?;
    let mut tries = 0;
    let after = loop {
        snap.stats = batch::hash_entries::<FutexKey, FutexStats>(ebpf, "FUTEX_STATS")?
            .into_iter()
            .map(|(k, v)| (k, FutexTotals::merge_cpus([&v])))
            .collect();
        let after = read_hot(ebpf)?;
        tries += 1;
        if hot_reads_agree(&before, &after) || tries == HOT_READ_TRIES {
            break after;
        }
        before = after;
    };
    snap.hot_only = merge_hot(&mut snap.stats, &after, hot_forgotten);
    snap.hot = after;
    for call in calls_in_flight(ebpf)? {
        *snap.in_progress.entry((call.tgid, call.uaddr)).or_default() += 1;
    }
    for (id, comm) in batch::hash_entries::<u32, [u8; 16]>(ebpf, "FUTEX_COMMS")? {
        snap.thread_comms.insert(id, comm_to_string(&comm));
    }
    for (key, _) in &snap.stats {
        if let std::collections::hash_map::Entry::Vacant(e) = comms.entry(key.tgid) {
            let name = snap
                .thread_comms
                .get(&key.tgid)
                .cloned()
                .or_else(|| super::process_comm(key.tgid))
                .unwrap_or_default();
            e.insert(name);
        }
    }
    // PI owners not seen making a PI call: ask /proc while the thread lives.
    for (key, t) in &snap.stats {
        let tid = t.counts.pi_owner_tid as u32;
        if tid != 0
            && !snap.thread_comms.contains_key(&tid)
            && let Some(name) = super::thread_comm(key.tgid, tid)
        {
            snap.thread_comms.insert(tid, name);
        }
    }
    Ok(snap)
}

/// Reads of `FUTEX_STATS` between two agreeing reads of `FUTEX_HOT` tried before the
/// last is taken as it is (a move of a slot's counts takes microseconds; only a machine
/// whose every wake changes key could keep moving them).
const HOT_READ_TRIES: u32 = 8;

/// `FUTEX_HOT`: per slot, its value on each CPU.
fn read_hot(ebpf: &Ebpf) -> anyhow::Result<HotSlots> {
    let hot: PerCpuArray<&MapData, FutexHot> =
        PerCpuArray::try_from(ebpf.map("FUTEX_HOT").context("FUTEX_HOT map")?)?;
    (0..FUTEX_HOT_SLOTS)
        .map(|i| Ok(hot.get(&i, 0)?.iter().copied().collect()))
        .collect()
}

/// Counts the futex calls in flight (each thread's `FUTEX_CALLS` storage).
pub const FUTEX_TASK_ITER: &str = "futex_task_iter";

/// The futex calls in flight now, one per thread inside one (the task iterator
/// `futex_task_iter` walks the threads' storage).
pub fn calls_in_flight(ebpf: &Ebpf) -> anyhow::Result<Vec<FutexCall>> {
    let bytes = super::iter::read_task_iter(ebpf, FUTEX_TASK_ITER)?;
    Ok(decode_calls(&bytes))
}

/// `FutexCall` records back to back, as the iterator writes them (a partial tail is
/// ignored: the kernel writes whole records).
fn decode_calls(bytes: &[u8]) -> Vec<FutexCall> {
    bytes
        .chunks_exact(size_of::<FutexCall>())
        // SAFETY: a chunk of exactly one `FutexCall` (plain integers: any bytes are valid).
        .map(|c| unsafe { std::ptr::read_unaligned(c.as_ptr().cast::<FutexCall>()) })
        .collect()
}

#[cfg(test)]
mod iter_tests {
    use super::*;

    #[test]
    fn in_flight_records_decode() {
        let call = FutexCall {
            ts_ns: 5,
            uaddr: 0x1000,
            tgid: 7,
            ..Default::default()
        };
        let mut bytes = Vec::new();
        for _ in 0..2 {
            // SAFETY: viewing a plain repr(C) value as its bytes.
            bytes.extend_from_slice(unsafe {
                std::slice::from_raw_parts(
                    std::ptr::from_ref(&call).cast::<u8>(),
                    size_of::<FutexCall>(),
                )
            });
        }
        bytes.push(0);
        let calls = decode_calls(&bytes);
        assert_eq!(calls.len(), 2);
        assert_eq!((calls[1].tgid, calls[1].uaddr), (7, 0x1000));
    }
}
