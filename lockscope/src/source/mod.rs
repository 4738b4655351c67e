//! Reading the in-kernel aggregation maps into a [`RawSnapshot`]; [`remote`]: recordings
//! from a running `lockscope serve`.

pub mod remote;

pub mod batch;
pub mod futex;
pub mod iter;
pub mod pthread;
pub mod rt;
pub mod spin;

use anyhow::Context as _;
use aya::{
    Ebpf,
    maps::{HashMap as AyaHashMap, MapData, MapError, PerCpuArray},
};
use lockscope_common::{
    CNT_TASK_WAITS_CREATED, CNT_TASK_WAITS_ENDED, COUNTERS_LEN, ContentionKey, ContentionStats,
    HolderKey, HolderStats, LockGenKey, LockInfo, RWSEM_COUNTERS_LEN, RwsemEventCounts,
    RwsemEventKey, StackFrames, WaitStart,
};

use std::collections::{BTreeMap, HashMap};

use crate::{
    aggregate::{RawSnapshot, timeline::LockTotals},
    decode::{LockType, comm_to_string},
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

/// Runs of lockscope's programs the kernel skipped because one was already running on
/// that CPU (an interrupt re-entering a probe): each is an event lost. Summed from each
/// loaded program's `/proc/self/fdinfo` (`recursion_misses`, Linux 5.12+; 0 before).
pub fn read_recursion_misses(ebpf: &Ebpf) -> u64 {
    use std::os::fd::{AsFd as _, AsRawFd as _};
    ebpf.programs()
        .filter_map(|(_, p)| {
            let fd = p.fd().ok()?.as_fd().as_raw_fd();
            let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
            crate::decode::fdinfo_field(&text, "recursion_misses")
        })
        .sum()
}

/// Cumulative (contended, wait) per (lock, type), summed over stacks and tasks.
pub fn read_lock_totals(ebpf: &Ebpf) -> anyhow::Result<Vec<LockTotals>> {
    let mut sums: BTreeMap<(u64, LockType), (u64, u64)> = BTreeMap::new();
    for (key, v) in batch::hash_entries::<ContentionKey, ContentionStats>(ebpf, "CONTENTION_STATS")?
    {
        // Per address: the owner generations of a reused address are summed.
        let Ok(t) = LockType::from_flags(lockscope_common::flags_kind(key.flags)) else {
            continue;
        };
        let s = sums.entry((key.lock, t)).or_default();
        s.0 += v.count;
        s.1 += v.total_ns;
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

/// The stored kernel stacks of `ids`, innermost frame first; ids not in the map (never
/// stored, or evicted) are left out. One lookup each: a snapshot reads only the stacks
/// it has not symbolized before.
pub fn read_stacks(ebpf: &Ebpf, ids: &[u64]) -> anyhow::Result<HashMap<u64, Vec<u64>>> {
    let mut out = HashMap::new();
    if ids.is_empty() {
        return Ok(out);
    }
    let stacks: AyaHashMap<&MapData, u64, StackFrames> =
        AyaHashMap::try_from(ebpf.map("STACKS").context("STACKS map")?)?;
    for &id in ids {
        match stacks.get(&id, 0) {
            Ok(frames) => {
                out.insert(
                    id,
                    frames.iter().copied().take_while(|&ip| ip != 0).collect(),
                );
            }
            Err(MapError::KeyNotFound) => {}
            Err(e) => return Err(e).context("reading STACKS"),
        }
    }
    Ok(out)
}

/// Waits per (lock, flags, holder).
pub fn read_holders(ebpf: &Ebpf) -> anyhow::Result<Vec<(HolderKey, HolderStats)>> {
    batch::hash_entries::<HolderKey, HolderStats>(ebpf, "HOLDER_STATS")
}

/// A thread's or process's current name from /proc (`path`), when it still runs.
fn proc_comm(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim_end().to_owned())
}

/// A live process's name (`/proc/PID/comm`).
pub fn process_comm(pid: u32) -> Option<String> {
    proc_comm(&format!("/proc/{pid}/comm"))
}

/// A live thread's name (`/proc/PID/task/TID/comm`).
pub fn thread_comm(tgid: u32, tid: u32) -> Option<String> {
    proc_comm(&format!("/proc/{tgid}/task/{tid}/comm"))
}

/// Counts the sleeping waits in progress (each thread's `TASK_WAITS` storage): one
/// `WaitStart` record per thread inside a wait.
pub const CONTENTION_TASK_ITER: &str = "contention_task_iter";

/// The contention probes' aggregates: counters, waits, lock names, process names,
/// holders, runqueue locks and the waits in flight (stacks are read apart:
/// [`read_stacks`]).
pub fn read_contention(ebpf: &Ebpf, raw: &mut RawSnapshot) -> anyhow::Result<()> {
    raw.counters = read_counters(ebpf)?;
    // Whole-map reads in batches (see `batch`): a few syscalls per map, not two per entry.
    raw.stats = batch::hash_entries::<ContentionKey, ContentionStats>(ebpf, "CONTENTION_STATS")?
        .into_iter()
        .map(|(k, v)| (k, crate::aggregate::WaitStats::from_raw(&v)))
        .collect();
    raw.lock_info = batch::hash_entries::<u64, LockInfo>(ebpf, "LOCK_INFO")?
        .into_iter()
        .collect();
    raw.past_lock_info = batch::hash_entries::<LockGenKey, LockInfo>(ebpf, "LOCK_INFO_PAST")?
        .into_iter()
        .map(|(k, i)| ((k.lock, k.generation), i))
        .collect();
    raw.lock_gens = batch::hash_entries::<u64, u32>(ebpf, "LOCK_GENS")?
        .into_iter()
        .collect();
    raw.comms = batch::hash_entries::<u32, [u8; 16]>(ebpf, "COMMS")?
        .into_iter()
        .map(|(tgid, comm)| (tgid, comm_to_string(&comm)))
        .collect();
    // The task-wait counters read right before the map they count, so that few waits
    // begin or end in between (see `task_waits_evicted`).
    let counters: PerCpuArray<&MapData, u64> =
        PerCpuArray::try_from(ebpf.map("COUNTERS").context("COUNTERS map")?)?;
    for i in [CNT_TASK_WAITS_CREATED, CNT_TASK_WAITS_ENDED] {
        raw.counters[i as usize] = counters.get(&i, 0)?.iter().sum();
    }
    raw.holders = read_holders(ebpf)?;
    raw.holder_stacks = batch::hash_entries::<HolderKey, u64>(ebpf, "HOLDER_STACKS")?
        .into_iter()
        .collect();
    let rq: PerCpuArray<&MapData, u64> =
        PerCpuArray::try_from(ebpf.map("RQ_LOCKS").context("RQ_LOCKS map")?)?;
    raw.rq_locks = rq
        .get(&0, 0)?
        .iter()
        .enumerate()
        .filter(|&(_, &addr)| addr != 0)
        .map(|(cpu, &addr)| (addr, cpu as u32))
        .collect();
    let waiting = iter::read_task_iter(ebpf, CONTENTION_TASK_ITER)?.len() / size_of::<WaitStart>();
    let cpu_depth: PerCpuArray<&MapData, u32> =
        PerCpuArray::try_from(ebpf.map("CPU_WAIT_DEPTH").context("CPU_WAIT_DEPTH map")?)?;
    let spinning: u64 = cpu_depth.get(&0, 0)?.iter().map(|&d| d as u64).sum();
    raw.task_waits_live = waiting as u64;
    raw.in_progress = waiting as u64 + spinning;
    Ok(())
}

/// The cgroup id the probes recorded for each process.
pub fn read_cgroups(ebpf: &Ebpf, raw: &mut RawSnapshot) -> anyhow::Result<()> {
    raw.cgroups = batch::hash_entries::<u32, u64>(ebpf, "TASK_CGROUPS")?
        .into_iter()
        .collect();
    Ok(())
}

/// rwsem lock events per (lock, process, side) and their counters.
pub fn read_rwsem_events(ebpf: &Ebpf, raw: &mut RawSnapshot) -> anyhow::Result<()> {
    raw.rwsem_events =
        batch::hash_entries::<RwsemEventKey, RwsemEventCounts>(ebpf, "RWSEM_EVENT_STATS")?;
    let counters: PerCpuArray<&MapData, u64> =
        PerCpuArray::try_from(ebpf.map("RWSEM_COUNTERS").context("RWSEM_COUNTERS map")?)?;
    raw.rwsem_counters = (0..RWSEM_COUNTERS_LEN)
        .map(|i| counters.get(&i, 0).map(|v| v.iter().sum()))
        .collect::<Result<_, _>>()?;
    Ok(())
}
