//! The recording: what `record` writes and `report` reads, built from a raw map snapshot.
//! Pure: symbol and name lookups come in through the [`Names`] trait.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use lockscope_common::{
    COUNTERS_LEN, ContentionKey, HolderKey, HolderStats, LCB_F_SPIN, LockInfo, RwsemEventCounts,
    RwsemEventKey, STACK_NOT_SAMPLED, flags_gen, flags_kind,
};

pub use super::model::*;
use super::{
    WaitStats,
    futex::{FutexSnapshot, build_futex_locks, futex_lost},
};
use crate::decode::{
    LockField, LockOwner, LockType,
    place::{LockTypes, caller_lock, place_name},
};

/// Everything read from the kernel maps at one moment, CPUs already summed.
#[derive(Debug, Clone, Default)]
pub struct RawSnapshot {
    pub stats: Vec<(ContentionKey, WaitStats)>,
    /// The identity of each named lock address's current owner generation.
    pub lock_info: HashMap<u64, LockInfo>,
    /// The identities of earlier owner generations, by (address, generation).
    pub past_lock_info: HashMap<(u64, u32), LockInfo>,
    /// The current owner generation of each address seen reused (`LOCK_GENS`).
    pub lock_gens: HashMap<u64, u32>,
    /// The kernel types slab objects' locks are named by (from BTF, at start).
    pub lock_types: std::sync::Arc<LockTypes>,
    pub stacks: HashMap<u64, Vec<u64>>,
    pub comms: HashMap<u32, String>,
    pub counters: [u64; COUNTERS_LEN as usize],
    /// Waits begun but not ended when the snapshot was taken.
    pub in_progress: u64,
    /// Of those, the sleeping waits (threads' `TASK_WAITS` storage in use).
    pub task_waits_live: u64,
    /// User-space locks: the futex probes' aggregates.
    pub futex: FutexSnapshot,
    /// rwsem lock events per (lock, process, side), and their per-CPU-summed
    /// `RWSEM_COUNTERS` (totals, then losses).
    pub rwsem_events: Vec<(RwsemEventKey, RwsemEventCounts)>,
    pub rwsem_counters: Vec<u64>,
    /// The cgroup id the probes recorded for each process (by tgid).
    pub cgroups: HashMap<u32, u64>,
    /// Waits per (lock, flags, holder), summed over CPUs.
    pub holders: Vec<(HolderKey, HolderStats)>,
    /// The holder's kernel stack (id in `stacks`) at the first wait for each holder key.
    pub holder_stacks: HashMap<HolderKey, u64>,
    /// Thread names of the holders, by tid (read from /proc by the source).
    pub holder_comms: HashMap<u32, String>,
    /// Each CPU's runqueue lock address, as the probes learnt it: address -> CPU.
    pub rq_locks: HashMap<u64, u32>,
}

impl RawSnapshot {
    /// The identity of owner generation `generation` of the lock at `addr`, if it was named.
    pub fn info(&self, addr: u64, generation: u32) -> Option<&LockInfo> {
        match self.lock_info.get(&addr) {
            Some(i) if i.generation == generation => Some(i),
            _ => self.past_lock_info.get(&(addr, generation)),
        }
    }

    /// The current owner generation of `addr` (0 for an address never seen reused).
    pub fn current_gen(&self, addr: u64) -> u32 {
        self.lock_info
            .get(&addr)
            .map(|i| i.generation)
            .or_else(|| self.lock_gens.get(&addr).copied())
            .unwrap_or(0)
    }

    /// The owner generation of each `pi_lock` named after a thread, by (address, tid).
    pub fn pi_lock_generations(&self) -> HashMap<(u64, u32), u32> {
        let past = self.past_lock_info.iter().map(|(&(a, _), i)| (a, i));
        self.lock_info
            .iter()
            .map(|(&a, i)| (a, i))
            .chain(past)
            .filter(|(_, i)| i.kind == lockscope_common::LOCK_KIND_PI_LOCK && i.tid != 0)
            .map(|(a, i)| ((a, i.tid), i.generation))
            .collect()
    }
}

/// One symbolized stack frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub addr: u64,
    /// `function+0xoff`, or the hex address when unknown.
    pub text: String,
    /// Part of the tracing machinery (BPF trampolines, tracepoint glue): dropped.
    pub tracing: bool,
    /// Inside the locking code itself: kept in the stack, but never the "caller".
    pub lock_internal: bool,
}

/// Name lookups that need the running kernel (kallsyms), kept out of the pure core.
pub trait Names {
    /// Name of a lock that is a kernel static variable.
    fn static_lock(&self, addr: u64) -> Option<String>;
    /// Symbolize a kernel stack, innermost frame first.
    fn frames(&self, stack: &[u64]) -> Vec<Frame>;
}

/// Entries an LRU map evicted: the keys it created minus the keys it holds (0 when a
/// key was created between reading the counter and reading the map).
pub fn evicted(created: u64, live: usize) -> u64 {
    created.saturating_sub(live as u64)
}

/// Sleeping waits whose thread's `TASK_WAITS` storage went before they ended (the
/// thread was freed inside the wait): never timed. Exact once the probes are detached;
/// while they run, waits that begin or end between the counters' read and the task
/// walk (microseconds apart) may move it by that many (the session reports it
/// monotonically).
pub fn task_waits_evicted(raw: &RawSnapshot) -> u64 {
    let c = &raw.counters;
    c[lockscope_common::CNT_TASK_WAITS_CREATED as usize]
        .saturating_sub(c[lockscope_common::CNT_TASK_WAITS_ENDED as usize])
        .saturating_sub(raw.task_waits_live)
}

/// `CONTENTION_STATS` entries evicted to make room: their waits are not in the locks.
pub fn stats_evicted(raw: &RawSnapshot) -> u64 {
    evicted(
        raw.counters[lockscope_common::CNT_STATS_CREATED as usize],
        raw.stats.len(),
    )
}

/// The `lost` object: every counter of something not stored, by name.
pub fn lost_counts(c: &[u64; COUNTERS_LEN as usize]) -> BTreeMap<String, u64> {
    use lockscope_common::*;
    [
        CNT_LOST_STATS_FULL,
        CNT_LOST_TASK_WAIT_FULL,
        CNT_LOST_CPU_NESTING,
        CNT_LOST_STACK,
        CNT_LOST_LOCK_INFO,
        CNT_LOST_LOCK_GEN,
        CNT_LOST_TARGET_FULL,
        CNT_LOST_END_MISSED,
        CNT_LOST_MINMAX,
    ]
    .into_iter()
    .map(|i| (COUNTER_NAMES[i as usize].to_owned(), c[i as usize]))
    .collect()
}

/// Symbolized stacks by stack id, kept across snapshots by long-running sinks (a stack
/// id is a hash of the stack's content: its text never changes). Only the stacks of the
/// callers the last snapshot kept stay cached, so the cache is bounded by the snapshot's
/// [`Detail`]. Stacks the probes could not store are not kept (they may be stored later).
#[derive(Debug, Default)]
pub struct StackTexts(HashMap<u64, (String, Vec<String>)>);

impl StackTexts {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, id: u64) -> bool {
        self.0.contains_key(&id)
    }

    /// (caller, stack) of a stack id, from this snapshot's texts, else from the previous
    /// snapshot's (`prev`, moved over), else symbolized now.
    fn describe(
        &mut self,
        prev: &mut HashMap<u64, (String, Vec<String>)>,
        raw: &RawSnapshot,
        names: &dyn Names,
        id: u64,
    ) -> (String, Vec<String>) {
        if let Some(d) = self.0.get(&id) {
            return d.clone();
        }
        let d = match prev.remove(&id) {
            Some(d) => d,
            None => {
                let d = describe_stack(raw.stacks.get(&id), names);
                if !raw.stacks.contains_key(&id) {
                    return d;
                }
                d
            }
        };
        self.0.insert(id, d.clone());
        d
    }
}

/// How much per-lock detail a snapshot keeps. Every lock keeps its exact totals; only
/// the locks ranked first by total wait keep their callers and tasks, and of those only
/// the first by total wait. Long-running sinks (`serve`, `top`) use this to keep their
/// memory flat however many locks and stacks the kernel maps come to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Detail {
    /// Locks that keep callers and tasks.
    pub locks: usize,
    pub callers_per_lock: usize,
    pub tasks_per_lock: usize,
    /// Starvation episodes of the deep spinlock tier kept after a snapshot (the latest;
    /// a snapshot still lists every episode that arrived since the previous one).
    pub episodes: usize,
    /// Real-time probe records (`--latency-threshold`) kept after a snapshot: those that
    /// ended within this many ns of the newest.
    pub rt_window_ns: u64,
}

impl Detail {
    /// Everything (`record`).
    pub const ALL: Detail = Detail {
        locks: usize::MAX,
        callers_per_lock: usize::MAX,
        tasks_per_lock: usize::MAX,
        episodes: usize::MAX,
        rt_window_ns: u64::MAX,
    };
    /// The default of the long-running sinks.
    pub const DAEMON: Detail = Detail {
        locks: 256,
        callers_per_lock: 16,
        tasks_per_lock: 16,
        episodes: 1000,
        rt_window_ns: 60_000_000_000,
    };
}

/// One lock of a [`LockPlan`]: totals, and the callers and tasks kept, ranked.
struct PlannedLock {
    addr: u64,
    generation: u32,
    lock_type: LockType,
    stats: WaitStats,
    callers: Vec<(u64, WaitStats)>,
    tasks: Vec<(u32, WaitStats)>,
    omitted: Omitted,
}

/// The kernel lock entries of a snapshot before symbolization: which stacks are needed
/// is known before any stack is read or symbolized.
pub struct LockPlan {
    locks: Vec<PlannedLock>,
    unknown_flags: u64,
}

/// The `limit` largest by total wait (ties by key).
fn keep_top<K: Ord + Copy>(m: BTreeMap<K, WaitStats>, limit: usize) -> Vec<(K, WaitStats)> {
    let mut v: Vec<(K, WaitStats)> = m.into_iter().collect();
    v.sort_by(|a, b| b.1.total_ns.cmp(&a.1.total_ns).then_with(|| a.0.cmp(&b.0)));
    v.truncate(limit);
    v
}

impl LockPlan {
    /// Sum the contention stats per (lock address, type): a rwsem taken for read and for
    /// write gives two entries.
    pub fn new(raw: &RawSnapshot, detail: Detail) -> Self {
        // First the totals (and distinct callers and tasks) of every lock; callers' and
        // tasks' figures only for the locks that keep them, so that a map full of
        // locks costs little more than their totals.
        struct Acc {
            stats: WaitStats,
            callers: BTreeSet<u64>,
            tasks: BTreeSet<u32>,
            unsampled: u64,
        }
        let mut by_lock: BTreeMap<(u64, u32, LockType), Acc> = BTreeMap::new();
        let mut unknown_flags = 0u64;
        let typed = |key: &ContentionKey| LockType::from_flags(flags_kind(key.flags)).ok();
        for (key, stats) in &raw.stats {
            let Some(t) = typed(key) else {
                unknown_flags += stats.count;
                continue;
            };
            let id = (key.lock, flags_gen(key.flags), t);
            let acc = by_lock.entry(id).or_insert_with(|| Acc {
                stats: WaitStats::default(),
                callers: BTreeSet::new(),
                tasks: BTreeSet::new(),
                unsampled: 0,
            });
            acc.stats.merge(stats);
            if key.stack == STACK_NOT_SAMPLED {
                acc.unsampled += stats.count;
            } else {
                acc.callers.insert(key.stack);
            }
            acc.tasks.insert(key.tgid);
        }
        let mut ranked: Vec<((u64, u32, LockType), Acc)> = by_lock.into_iter().collect();
        ranked.sort_by(|a, b| {
            b.1.stats
                .total_ns
                .cmp(&a.1.stats.total_ns)
                .then_with(|| a.0.cmp(&b.0))
        });
        type Figures = (BTreeMap<u64, WaitStats>, BTreeMap<u32, WaitStats>);
        let mut detailed: BTreeMap<(u64, u32, LockType), Figures> = ranked
            .iter()
            .take(detail.locks)
            .map(|(k, _)| (*k, Figures::default()))
            .collect();
        for (key, stats) in &raw.stats {
            let Some(t) = typed(key) else { continue };
            if let Some((callers, tasks)) = detailed.get_mut(&(key.lock, flags_gen(key.flags), t)) {
                if key.stack != STACK_NOT_SAMPLED {
                    callers.entry(key.stack).or_default().merge(stats);
                }
                tasks.entry(key.tgid).or_default().merge(stats);
            }
        }
        let locks = ranked
            .into_iter()
            .map(|((addr, generation, lock_type), acc)| {
                let (callers, tasks) = detailed
                    .remove(&(addr, generation, lock_type))
                    .unwrap_or_default();
                let callers = keep_top(callers, detail.callers_per_lock);
                let tasks = keep_top(tasks, detail.tasks_per_lock);
                let omitted = Omitted {
                    callers: (acc.callers.len() - callers.len()) as u64,
                    tasks: (acc.tasks.len() - tasks.len()) as u64,
                    unsampled_waits: acc.unsampled,
                };
                PlannedLock {
                    addr,
                    generation,
                    lock_type,
                    stats: acc.stats,
                    callers,
                    tasks,
                    omitted,
                }
            })
            .collect();
        Self {
            locks,
            unknown_flags,
        }
    }

    /// Stack ids of the kept callers.
    pub fn stack_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.locks
            .iter()
            .flat_map(|l| l.callers.iter().map(|c| c.0))
    }
}

/// Build the per-lock entries from a snapshot (everything kept, see [`Detail::ALL`]).
/// Entries are per (lock address, type). Sorted by total wait, longest first. Keys
/// whose flags do not decode are counted under `lost["unknown_flags"]`.
pub fn build_locks(
    raw: &RawSnapshot,
    names: &dyn Names,
    lost: &mut BTreeMap<String, u64>,
) -> Vec<LockEntry> {
    build_locks_cached(
        raw,
        LockPlan::new(raw, Detail::ALL),
        names,
        lost,
        &mut StackTexts::default(),
    )
}

/// [`build_locks`] from a plan, with stack texts kept in `texts` across calls; `texts`
/// keeps just the stacks this snapshot used.
pub fn build_locks_cached(
    raw: &RawSnapshot,
    plan: LockPlan,
    names: &dyn Names,
    lost: &mut BTreeMap<String, u64>,
    texts: &mut StackTexts,
) -> Vec<LockEntry> {
    if plan.unknown_flags > 0 {
        *lost.entry("unknown_flags".to_owned()).or_default() += plan.unknown_flags;
    }
    let mut prev = std::mem::take(&mut texts.0);
    // Callers whose stack was stored once but is gone (evicted from the LRU map) before
    // it was ever symbolized: shown as [unknown].
    let mut stacks_evicted = 0u64;
    let holder_index = super::holders::HolderIndex::new(&raw.holders);
    let holder_stacks: HashMap<HolderKey, Vec<String>> = raw
        .holder_stacks
        .iter()
        .map(|(k, &id)| (*k, texts.describe(&mut prev, raw, names, id).1))
        .collect();
    let holder_comm = |tid: u32, tgid: u32| {
        raw.holder_comms
            .get(&tid)
            .or_else(|| raw.comms.get(&tgid))
            .cloned()
            .unwrap_or_else(|| "?".to_owned())
    };
    let mut locks: Vec<LockEntry> = plan
        .locks
        .into_iter()
        .map(|p| {
            let callers: Vec<CallerEntry> = p
                .callers
                .into_iter()
                .map(|(id, stats)| {
                    if id != 0
                        && !texts.contains(id)
                        && !prev.contains_key(&id)
                        && !raw.stacks.contains_key(&id)
                    {
                        stacks_evicted += 1;
                    }
                    let (caller, stack) = texts.describe(&mut prev, raw, names, id);
                    CallerEntry {
                        caller,
                        stack,
                        stats,
                    }
                })
                .collect();
            // Names inferred from a caller come after, over all of a lock's entries.
            let (name, owner) = lock_identity_at(raw, names, p.addr, p.generation, None);
            let tasks: Vec<TaskEntry> = p
                .tasks
                .into_iter()
                .map(|(pid, stats)| TaskEntry {
                    cgroup: None,
                    pid,
                    comm: raw.comms.get(&pid).cloned().unwrap_or_default(),
                    stats,
                    events: None,
                })
                .collect();
            let holders = holder_index.holders(
                p.addr,
                p.generation,
                p.lock_type,
                p.stats.total_ns,
                holder_comm,
                |k| {
                    // Holder stacks are kept per kind, whatever the owner generation. A
                    // mutex wait that spun and then slept took its holder's stack at its
                    // first begin, a spinning one (`mutex-spin`), and is counted as the
                    // sleeping one it became (`mutex`): either kind's stack will do.
                    let kind = flags_kind(k.flags);
                    [kind, kind ^ LCB_F_SPIN]
                        .into_iter()
                        .find_map(|flags| holder_stacks.get(&HolderKey { flags, ..*k }))
                        .cloned()
                        .unwrap_or_default()
                },
            );
            LockEntry {
                addr: lock_addr(p.addr, p.generation),
                lock_type: p.lock_type,
                name,
                owner,
                stats: p.stats,
                callers,
                tasks,
                omitted: (p.omitted != Omitted::default()).then_some(p.omitted),
                user: None,
                events: None,
                wait_task: None,
                spin: None,
                holders,
            }
        })
        .collect();
    name_by_busiest_caller(&mut locks, raw, names);
    *lost.entry("stack_evicted".to_owned()).or_default() += stacks_evicted;
    if raw.futex.enabled {
        let (mut futex_locks, _filtered) = build_futex_locks(&raw.futex, &raw.comms);
        // The smaller list moves into the larger: no second buffer of futex words.
        if futex_locks.len() > locks.len() {
            futex_locks.append(&mut locks);
            locks = futex_locks;
        } else {
            locks.extend(futex_locks);
        }
        lost.extend(futex_lost(&raw.futex));
    }
    // Keys sorted, entries moved once: an entry is large, and tens of thousands of futex
    // words moved at every step of a comparison sort cost more than building them.
    locks.sort_by_cached_key(|l| (std::cmp::Reverse(l.stats.total_ns), l.addr.clone()));
    locks
}

/// One lock (address) may have several entries (its types: `mutex`, `mutex-spin`): a
/// name inferred from a caller is the one from the caller with the most wait over all of
/// them, so that every entry of the lock has the same name, stack or not.
fn name_by_busiest_caller(locks: &mut [LockEntry], raw: &RawSnapshot, names: &dyn Names) {
    let mut busiest: HashMap<&str, (u64, &str)> = HashMap::new();
    for l in locks.iter() {
        for c in &l.callers {
            let e = busiest.entry(l.addr.as_str()).or_insert((0, ""));
            if c.stats.total_ns > e.0 && c.caller != UNKNOWN_CALLER {
                *e = (c.stats.total_ns, c.caller.as_str());
            }
        }
    }
    let renames: Vec<(usize, String)> = locks
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            let (addr, generation) = parse_lock_addr(&l.addr)?;
            let caller = busiest.get(l.addr.as_str()).map(|b| b.1)?;
            let (name, _) = lock_identity_at(raw, names, addr, generation, Some(caller));
            (name != l.name).then_some((i, name))
        })
        .collect();
    for (i, name) in renames {
        locks[i].name = name;
    }
}

/// A lock's name and owner (of the address's current owner generation): the structure
/// the kernel found it in, else a static symbol, else its address.
pub fn lock_identity(raw: &RawSnapshot, names: &dyn Names, addr: u64) -> (String, Option<Owner>) {
    lock_identity_at(raw, names, addr, raw.current_gen(addr), None)
}

/// [`lock_identity`] of owner generation `generation`, with the function that contended the
/// lock most (`caller`), which may tell the type of the object a lock in a general slab
/// cache is in.
pub fn lock_identity_at(
    raw: &RawSnapshot,
    names: &dyn Names,
    addr: u64,
    generation: u32,
    caller: Option<&str>,
) -> (String, Option<Owner>) {
    let info = raw.info(addr, generation);
    if let Some(name) = info.and_then(|i| place_name(i, &raw.lock_types, caller)) {
        return (name, None);
    }
    match info.and_then(|i| LockOwner::decode(i).ok()) {
        Some(mut o) => {
            if o.field == LockField::MmapWaitLock && raw.lock_types.rwsem_rtmutex {
                o.field = LockField::MmapRtmutex;
            }
            (
                o.name(),
                Some(Owner {
                    field: o.field.name().to_owned(),
                    pid: o.pid,
                    tid: o.tid,
                    comm: o.comm,
                }),
            )
        }
        None => (
            match raw.rq_locks.get(&addr) {
                Some(cpu) => format!("rq_lock cpu {cpu}"),
                None => names
                    .static_lock(addr)
                    .or_else(|| raw.lock_types.percpu.name(addr, &raw.rq_locks))
                    .or_else(|| caller_lock(caller?).map(|l| format!("~{l} {addr:#x}")))
                    .unwrap_or_else(|| format!("{addr:#x}")),
            },
            None,
        ),
    }
}

/// The kernel's own path through a stack: tracing frames dropped wherever they are. A
/// BPF trampoline (fentry/fexit on a function `f`) sits mid-stack between `f`'s body and
/// `f`'s patched entry that jumped to it (`f+0x3d`, trampoline, `f+0x9`): that entry
/// frame repeats `f` and is dropped too.
pub fn kernel_path(frames: Vec<Frame>) -> Vec<Frame> {
    let function = |f: &Frame| f.text.split('+').next().unwrap_or_default().to_owned();
    let mut out: Vec<Frame> = Vec::with_capacity(frames.len());
    let mut after_tracing = false;
    for f in frames {
        if f.tracing {
            after_tracing = true;
            continue;
        }
        let reentry = after_tracing && out.last().is_some_and(|p| function(p) == function(&f));
        after_tracing = false;
        if !reentry {
            out.push(f);
        }
    }
    out
}

/// (caller, stack) of a stack id; stacks that could not be stored are `[unknown]`.
fn describe_stack(stack: Option<&Vec<u64>>, names: &dyn Names) -> (String, Vec<String>) {
    let Some(stack) = stack else {
        return (UNKNOWN_CALLER.to_owned(), Vec::new());
    };
    let frames = kernel_path(names.frames(stack));
    let caller = frames
        .iter()
        .find(|f| !f.lock_internal && !f.tracing)
        .map(|f| f.text.clone())
        .unwrap_or_else(|| UNKNOWN_CALLER.to_owned());
    (caller, frames.into_iter().map(|f| f.text).collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use lockscope_common::{LCB_F_READ, LCB_F_SPIN, LCB_F_WRITE, LOCK_KIND_MMAP_LOCK, log2_bucket};

    pub struct FakeNames;
    impl Names for FakeNames {
        fn static_lock(&self, addr: u64) -> Option<String> {
            (addr == 0xffff_ffff_8200_0000).then(|| "rtnl_mutex".to_owned())
        }
        fn frames(&self, stack: &[u64]) -> Vec<Frame> {
            stack
                .iter()
                .map(|&a| {
                    let text = match a {
                        1 => "bpf_trace_run2+0x10",
                        2 => "rwsem_down_read_slowpath+0x40",
                        3 => "do_user_addr_fault+0x90",
                        4 => "exc_page_fault+0x70",
                        5 => "down_write_killable+0x20",
                        6 => "vm_mmap_pgoff+0x30",
                        7 => "anon_pipe_write+0x43",
                        _ => "?",
                    };
                    Frame {
                        addr: a,
                        text: text.to_owned(),
                        tracing: a == 1,
                        lock_internal: a == 2 || a == 5,
                    }
                })
                .collect()
        }
    }

    #[test]
    fn runqueue_locks_are_named_for_their_cpu() {
        let raw = RawSnapshot {
            rq_locks: [(0xffff_8880_0001_0000, 0), (0xffff_8880_0011_0000, 1)].into(),
            ..Default::default()
        };
        let name = |a| lock_identity(&raw, &FakeNames, a).0;
        assert_eq!(name(0xffff_8880_0011_0000), "rq_lock cpu 1");
        assert_eq!(name(0xffff_8880_0001_0000), "rq_lock cpu 0");
        assert_eq!(name(0xffff_ffff_8200_0000), "rtnl_mutex");
        assert_eq!(name(0xffff_8880_0001_0004), "0xffff888000010004");
    }

    /// The lock the probes find inside a process's `mmap_lock` is its `wait_lock`, or on
    /// PREEMPT_RT (whose rwsem wraps an rtmutex) its `rwbase.rtmutex`.
    #[test]
    fn the_lock_inside_an_mmap_lock_is_named_for_the_kernel() {
        let inner = 0xffff_8880_0000_1008u64;
        let mut raw = RawSnapshot::default();
        raw.lock_info.insert(
            inner,
            LockInfo {
                kind: lockscope_common::LOCK_KIND_MMAP_WAIT_LOCK,
                tgid: 7,
                comm: *b"app\0\0\0\0\0\0\0\0\0\0\0\0\0",
                ..LockInfo::default()
            },
        );
        let (name, owner) = lock_identity(&raw, &FakeNames, inner);
        assert_eq!(name, "mmap_lock.wait_lock of app[7]");
        assert_eq!(owner.unwrap().field, "mmap_lock.wait_lock");
        raw.lock_types = std::sync::Arc::new(LockTypes {
            rwsem_rtmutex: true,
            ..Default::default()
        });
        let (name, owner) = lock_identity(&raw, &FakeNames, inner);
        assert_eq!(name, "mmap_lock.rtmutex of app[7]");
        assert_eq!(owner.unwrap().field, "mmap_lock.rtmutex");
    }

    /// An address seen freed and reused: each owner generation's waits are an entry of
    /// their own, named after that generation's owner; the unknown bits below the
    /// generation still make a key unknown.
    #[test]
    fn each_owner_generation_of_a_reused_address_is_its_own_entry() {
        use lockscope_common::GEN_SHIFT;
        let mm = 0xffff_8880_0000_1000u64;
        let key = |tgid, flags| ContentionKey {
            lock: mm,
            stack: 0,
            tgid,
            flags,
        };
        let info = |tgid: u32, name: &[u8], generation| {
            let mut comm = [0u8; 16];
            comm[..name.len()].copy_from_slice(name);
            LockInfo {
                kind: LOCK_KIND_MMAP_LOCK,
                tgid,
                comm,
                generation,
                ..LockInfo::default()
            }
        };
        let mut raw = RawSnapshot {
            stats: vec![
                (key(100, LCB_F_WRITE), wait(1_000, 2)),
                (key(200, LCB_F_WRITE | (1 << GEN_SHIFT)), wait(5_000, 3)),
                (key(300, LCB_F_WRITE | (2 << GEN_SHIFT)), wait(9_000, 1)),
                (key(300, (1 << 7) | (2 << GEN_SHIFT)), wait(9_000, 4)),
            ],
            ..Default::default()
        };
        raw.past_lock_info.insert((mm, 0), info(100, b"first", 0));
        raw.past_lock_info.insert((mm, 1), info(200, b"second", 1));
        raw.lock_info.insert(mm, info(300, b"third", 2));
        let mut lost = BTreeMap::new();
        let locks = build_locks(&raw, &FakeNames, &mut lost);
        let got: Vec<(&str, &str, u64, Vec<u32>)> = locks
            .iter()
            .map(|l| {
                let pids = l.tasks.iter().map(|t| t.pid).collect();
                (l.addr.as_str(), l.name.as_str(), l.stats.count, pids)
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "0xffff888000001000/1",
                    "mmap_lock of second[200]",
                    3,
                    vec![200]
                ),
                (
                    "0xffff888000001000/2",
                    "mmap_lock of third[300]",
                    1,
                    vec![300]
                ),
                (
                    "0xffff888000001000",
                    "mmap_lock of first[100]",
                    2,
                    vec![100]
                ),
            ]
        );
        assert_eq!(lost["unknown_flags"], 4);
        // Lookups by address alone take the current generation.
        assert_eq!(
            lock_identity(&raw, &FakeNames, mm).0,
            "mmap_lock of third[300]"
        );
        assert!(raw.pi_lock_generations().is_empty(), "no pi_lock here");
        assert_eq!(raw.current_gen(mm), 2);
        assert_eq!(parse_lock_addr("0xffff888000001000/2"), Some((mm, 2)));
        assert_eq!(parse_lock_addr("0x10"), Some((0x10, 0)));
        assert_eq!(parse_lock_addr("0x10/x"), None);
    }

    #[test]
    fn trampoline_frames_and_the_entry_that_jumped_to_them_leave_the_path() {
        let frame = |text: &str| Frame {
            addr: 0,
            text: text.to_owned(),
            tracing: crate::symbolize::is_tracing_frame(text),
            lock_internal: false,
        };
        let texts = |v: Vec<Frame>| v.into_iter().map(|f| f.text).collect::<Vec<_>>();
        // A waiter's stack under an fexit trampoline on _raw_spin_lock_irqsave (seen
        // on 6.12-rt): the trampoline's frame takes the nearest BPF symbol's name.
        let stack = [
            "bpf_prog_4f2a_spin_slowpath_fentry+0x52",
            "native_queued_spin_lock_slowpath+0x9",
            "_raw_spin_lock_irqsave+0x3d",
            "bpf_prog_c1b0_pthread_lock_return+0x395d",
            "_raw_spin_lock_irqsave+0x9",
            "sched_getaffinity+0x61",
            "do_syscall_64+0x87",
        ];
        assert_eq!(
            texts(kernel_path(stack.map(frame).into())),
            [
                "native_queued_spin_lock_slowpath+0x9",
                "_raw_spin_lock_irqsave+0x3d",
                "sched_getaffinity+0x61",
                "do_syscall_64+0x87"
            ]
        );
        // Recursion without a trampoline in between is kept.
        let plain = ["f+0x10", "f+0x20", "g+0x1"];
        assert_eq!(texts(kernel_path(plain.map(frame).into())), plain);
        // A trampoline between different functions drops only itself.
        let other = ["f+0x10", "bpf_trampoline_1+0x40", "g+0x1"];
        assert_eq!(
            texts(kernel_path(other.map(frame).into())),
            ["f+0x10", "g+0x1"]
        );
    }

    pub fn wait(ns: u64, n: u64) -> WaitStats {
        let mut s = WaitStats {
            count: n,
            total_ns: ns * n,
            min_ns: ns,
            max_ns: ns,
            ..Default::default()
        };
        s.hist[log2_bucket(ns)] = n;
        s
    }

    pub fn sample_snapshot() -> RawSnapshot {
        let mmap = 0xffff_8880_1234_5678u64;
        let key = |lock, tgid, stack, flags| ContentionKey {
            lock,
            stack,
            tgid,
            flags,
        };
        let mut comm = [0u8; 16];
        comm[..9].copy_from_slice(b"lockscope");
        let mut raw = RawSnapshot {
            stats: vec![
                (key(mmap, 100, 1, LCB_F_READ), wait(2_000, 10)),
                (key(mmap, 100, 1, LCB_F_READ), wait(4_000, 5)),
                (key(mmap, 101, 2, LCB_F_WRITE), wait(50_000, 3)),
                (key(0xffff_ffff_8200_0000, 7, 0, LCB_F_SPIN), wait(300, 1)),
                (key(0xdead, 7, 0, 1 << 7), wait(300, 4)),
            ],
            ..Default::default()
        };
        raw.lock_info.insert(
            mmap,
            LockInfo {
                kind: LOCK_KIND_MMAP_LOCK,
                tgid: 100,
                comm,
                tid: 0,
                ..LockInfo::default()
            },
        );
        raw.stacks.insert(1, vec![1, 2, 3, 4]);
        raw.stacks.insert(2, vec![1, 5, 6]);
        raw.comms.insert(100, "lockscope".into());
        raw.comms.insert(101, "lockscope".into());
        raw
    }

    #[test]
    fn locks_are_split_by_type_and_named() {
        let mut lost = BTreeMap::new();
        let locks = build_locks(&sample_snapshot(), &FakeNames, &mut lost);
        assert_eq!(locks.len(), 3);
        assert_eq!(lost["unknown_flags"], 4);
        // Sorted by total wait: W 150 us, R 40 us, spin 0.3 us.
        assert_eq!(locks[0].lock_type, LockType::RwsemWrite);
        assert_eq!(locks[0].name, "mmap_lock of lockscope[100]");
        assert_eq!(locks[0].callers[0].caller, "vm_mmap_pgoff+0x30");
        assert_eq!(
            locks[0].callers[0].stack,
            vec!["down_write_killable+0x20", "vm_mmap_pgoff+0x30"]
        );
        let r = &locks[1];
        assert_eq!(r.lock_type, LockType::RwsemRead);
        assert_eq!((r.stats.count, r.stats.total_ns), (15, 40_000));
        assert_eq!((r.stats.min_ns, r.stats.max_ns), (2_000, 4_000));
        assert_eq!(r.callers.len(), 1);
        assert_eq!(r.callers[0].caller, "do_user_addr_fault+0x90");
        assert_eq!(r.tasks[0].pid, 100);
        assert_eq!(r.tasks[0].comm, "lockscope");
        assert_eq!(r.owner.as_ref().unwrap().field, "mmap_lock");
        assert_eq!(locks[2].name, "rtnl_mutex");
        assert_eq!(locks[2].callers[0].caller, UNKNOWN_CALLER);
    }

    #[test]
    fn unsampled_waits_count_for_the_lock_and_tasks_not_for_callers() {
        let mut raw = sample_snapshot();
        let mmap = 0xffff_8880_1234_5678u64;
        raw.stats.push((
            ContentionKey {
                lock: mmap,
                tgid: 100,
                stack: STACK_NOT_SAMPLED,
                flags: LCB_F_READ,
            },
            wait(1_000, 20),
        ));
        let mut lost = BTreeMap::new();
        let locks = build_locks(&raw, &FakeNames, &mut lost);
        let r = locks
            .iter()
            .find(|l| l.lock_type == LockType::RwsemRead)
            .unwrap();
        // 15 sampled waits + 20 without a stack: the lock and its task have all 35.
        assert_eq!(r.stats.count, 35);
        assert_eq!(r.tasks[0].stats.count, 35);
        assert_eq!(r.callers.len(), 1);
        assert_eq!(r.callers[0].stats.count, 15);
        assert_eq!(r.omitted.as_ref().unwrap().unsampled_waits, 20);
        assert_eq!(r.omitted.as_ref().unwrap().callers, 0);
        // The report marks its top caller as an estimate; fully sampled locks are not.
        let rec = Recording {
            locks: locks.clone(),
            ..sample_recording()
        };
        let rows = crate::aggregate::rows::rows(&rec, crate::aggregate::rows::GroupBy::Lock);
        let read = rows.iter().find(|x| x.lock_type == "rwsem:R").unwrap();
        assert_eq!(read.top_caller, "~do_user_addr_fault+0x90");
        let write = rows.iter().find(|x| x.lock_type == "rwsem:W").unwrap();
        assert_eq!(write.top_caller, "vm_mmap_pgoff+0x30");
    }

    #[test]
    fn every_entry_of_a_lock_takes_the_name_its_busiest_caller_infers() {
        use crate::decode::place::ObjectType;
        use lockscope_common::{LCB_F_MUTEX, LCB_F_SPIN, LOCK_KIND_SLAB};
        let pipe = 0xffff_8880_0bad_0000u64;
        let mut raw = RawSnapshot::default();
        let mut cache = [0u8; lockscope_common::CACHE_NAME_LEN];
        cache[..14].copy_from_slice(b"kmalloc-cg-192");
        raw.lock_info.insert(
            pipe,
            LockInfo {
                kind: LOCK_KIND_SLAB,
                cache,
                ..LockInfo::default()
            },
        );
        let mut types = LockTypes::default();
        types.callers.insert(
            "anon_pipe_write".into(),
            ObjectType {
                name: "pipe_inode_info".into(),
                fields: [(0, "mutex".into())].into(),
                ident: None,
            },
        );
        raw.lock_types = std::sync::Arc::new(types);
        raw.stacks.insert(77, vec![7]);
        let key = |stack, flags| ContentionKey {
            lock: pipe,
            tgid: 100,
            stack,
            flags,
        };
        // The spinning entry has a caller; the sleeping one was never sampled.
        raw.stats
            .push((key(77, LCB_F_MUTEX | LCB_F_SPIN), wait(1_000, 5)));
        raw.stats
            .push((key(STACK_NOT_SAMPLED, LCB_F_MUTEX), wait(9_000, 2)));
        let locks = build_locks(&raw, &FakeNames, &mut BTreeMap::new());
        assert_eq!(locks.len(), 2);
        for l in &locks {
            assert_eq!(
                l.name, "&kmalloc-cg-192 ~pipe_inode_info.mutex",
                "{}",
                l.lock_type
            );
        }
    }

    /// Counts the stacks it symbolizes.
    struct CountingNames(std::cell::Cell<usize>);
    impl Names for CountingNames {
        fn static_lock(&self, addr: u64) -> Option<String> {
            FakeNames.static_lock(addr)
        }
        fn frames(&self, stack: &[u64]) -> Vec<Frame> {
            self.0.set(self.0.get() + 1);
            FakeNames.frames(stack)
        }
    }

    #[test]
    fn stack_texts_are_symbolized_once_across_snapshots() {
        let raw = sample_snapshot();
        let names = CountingNames(Default::default());
        let mut texts = StackTexts::default();
        let mut lost = BTreeMap::new();
        let build = |texts: &mut StackTexts, lost: &mut BTreeMap<String, u64>| {
            build_locks_cached(&raw, LockPlan::new(&raw, Detail::ALL), &names, lost, texts)
        };
        let first = build(&mut texts, &mut lost);
        // Stacks 1 and 2; stack 0 was never stored ([unknown], not kept).
        assert_eq!((names.0.get(), texts.len()), (2, 2));
        let again = build(&mut texts, &mut lost);
        assert_eq!(names.0.get(), 2, "no stack symbolized twice");
        assert_eq!(first, again);
        assert_eq!(first, build_locks(&raw, &FakeNames, &mut BTreeMap::new()));
        // Texts no caller of this snapshot uses are dropped.
        for id in 100..3000 {
            texts.0.insert(id, ("x".into(), vec![]));
        }
        build(&mut texts, &mut lost);
        assert_eq!(texts.len(), 2);
    }

    #[test]
    fn detail_keeps_totals_and_the_top_callers_and_tasks() {
        let mut raw = sample_snapshot();
        // A second caller and task for the write side of mmap_lock.
        let (k, _) = raw.stats[2];
        raw.stats.push((
            ContentionKey {
                stack: 1,
                tgid: 102,
                ..k
            },
            wait(1_000, 2),
        ));
        let all = build_locks(&raw, &FakeNames, &mut BTreeMap::new());
        let detail = Detail {
            locks: 1,
            callers_per_lock: 1,
            tasks_per_lock: 1,
            episodes: 0,
            rt_window_ns: 0,
        };
        let plan = LockPlan::new(&raw, detail);
        let mut texts = StackTexts::default();
        let some = build_locks_cached(&raw, plan, &FakeNames, &mut BTreeMap::new(), &mut texts);
        assert_eq!(some.len(), all.len(), "every lock keeps its entry");
        for (a, s) in all.iter().zip(&some) {
            assert_eq!((&a.name, &a.stats), (&s.name, &s.stats), "exact totals");
        }
        // The first lock keeps its longest caller and task, the others none.
        let (a, s) = (&all[0], &some[0]);
        assert!(a.callers.len() > 1, "{a:?}");
        assert_eq!(s.callers, a.callers[..1]);
        assert_eq!(s.tasks, a.tasks[..1]);
        assert_eq!(
            s.omitted,
            Some(Omitted {
                callers: a.callers.len() as u64 - 1,
                tasks: a.tasks.len() as u64 - 1,
                unsampled_waits: 0,
            })
        );
        for (a, s) in all.iter().zip(&some).skip(1) {
            assert!(s.callers.is_empty() && s.tasks.is_empty());
            assert_eq!(
                s.omitted.as_ref().map(|o| (o.callers, o.tasks)),
                Some((a.callers.len() as u64, a.tasks.len() as u64))
            );
        }
        // Only the kept caller's stack is symbolized and cached.
        assert_eq!(texts.len(), 1);
        assert!(all.iter().all(|l| l.omitted.is_none()));
    }

    pub fn sample_recording() -> Recording {
        let raw = sample_snapshot();
        let mut lost = lost_counts(&raw.counters);
        let locks = build_locks(&raw, &FakeNames, &mut lost);
        Recording {
            schema: SCHEMA.into(),
            lockscope_version: "0.1.0".into(),
            kernel: "6.18.0".into(),
            tier: "tracepoint".into(),
            target: "system".into(),
            duration_s: 2.5,
            started_at_unix_s: 1.0,
            command_exit_code: Some(0),
            events: EventCounts::default(),
            lost,
            locks,
            timeline: None,
            futex_events: None,
            rwsem_events: None,
            starvation_episodes: None,
            latency_spikes: None,
            rt_summary: None,
            spin: None,
            cgroups: None,
        }
    }

    #[test]
    fn inconsistent_files_are_refused_with_the_reason() {
        let mut rec = sample_recording();
        rec.timeline = Some(crate::aggregate::timeline::Timeline {
            interval_s: 1.0,
            t_s: vec![1.0, 2.0, 3.0],
            series: vec![crate::aggregate::timeline::Series {
                addr: "0x1".into(),
                lock_type: "spinlock".into(),
                contended: vec![1, 2],
                wait_ns: vec![1, 2],
            }],
        });
        let e = Recording::from_json(&serde_json::to_string(&rec).unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("inconsistent lockscope recording: timeline series 0x1 has 2"),
            "{e}"
        );
        let mut rec = sample_recording();
        rec.locks[0].stats.max_ns = rec.locks[0].stats.total_ns + 1;
        let e = Recording::from_json(&serde_json::to_string(&rec).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("wait_max_ns"), "{e}");
        let mut v = serde_json::to_value(sample_recording()).unwrap();
        v["duration_s"] = serde_json::json!(-1.0);
        assert!(Recording::from_json(&v.to_string()).is_err());
    }

    #[test]
    fn version_1_files_still_read() {
        let mut v = serde_json::to_value(sample_recording()).unwrap();
        v["schema"] = "lockscope.report/1".into();
        let rec = Recording::from_json(&v.to_string()).unwrap();
        assert_eq!(rec.timeline, None);
        assert_eq!(rec.locks.len(), 3);
    }

    #[test]
    fn file_round_trips() {
        let rec = sample_recording();
        let text = serde_json::to_string_pretty(&rec).unwrap();
        assert!(text.contains("\"schema\": \"lockscope.report/2\""));
        assert!(text.contains("\"wait_total_ns\""));
        assert!(text.contains("\"type\": \"rwsem:W\""));
        let back = Recording::from_json(&text).unwrap();
        assert_eq!(back, rec);
    }

    #[test]
    fn bad_files_get_clear_errors() {
        let e = Recording::from_json("{nope").unwrap_err().to_string();
        assert!(e.contains("invalid JSON"), "{e}");
        let e = Recording::from_json("{}").unwrap_err().to_string();
        assert!(e.contains("no \"schema\""), "{e}");
        let e = Recording::from_json(r#"{"schema":"lockscope.report/3"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("version 3"), "{e}");
        let e = Recording::from_json(r#"{"schema":"other/1"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("schema `other/1`"), "{e}");
        let e = Recording::from_json(r#"{"schema":"lockscope.report/2","locks":3}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("malformed"), "{e}");
    }
}
