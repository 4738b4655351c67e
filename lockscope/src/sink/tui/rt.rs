//! Starvation episodes and latency spikes as they arrive. Each recording holds every
//! episode and spike since its source started; this log keeps those seen so far, once
//! each, newest first, and remembers which refresh brought each one. Pure.

use std::collections::HashSet;

use crate::aggregate::{
    Recording,
    rt::{LatencySpike, StarvationEpisode},
};

/// At most this many of each are kept; older ones are dropped and counted.
pub const KEEP: usize = 500;

/// An episode or spike, and the refresh that first brought it.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen<T> {
    pub item: T,
    pub refresh: u64,
}

/// What identifies one episode across snapshots: where and when it started, and who.
type EpisodeId = (u8, u64, u32, String, u32, Option<u32>);
/// What identifies one spike: the CPU, when its timer was due and the task.
type SpikeId = (u32, u64, u32, Option<u32>, u8);

fn episode_id(e: &StarvationEpisode) -> EpisodeId {
    (
        e.kind as u8,
        e.ts_ns,
        e.cpu,
        e.addr.clone(),
        e.waiter.pid,
        e.waiter.tid,
    )
}

fn spike_id(s: &LatencySpike) -> SpikeId {
    (s.cpu, s.ts_ns, s.task.pid, s.task.tid, s.source as u8)
}

/// Whether the source traces them, and what arrived so far.
#[derive(Debug, Default)]
pub struct RtLog {
    /// The latest recording carried `starvation_episodes` (the probes ran).
    pub episodes_traced: bool,
    pub spikes_traced: bool,
    /// Newest (latest `ts_ns`) first.
    pub episodes: Vec<Seen<StarvationEpisode>>,
    pub spikes: Vec<Seen<LatencySpike>>,
    /// Dropped from the log beyond [`KEEP`], oldest first.
    pub episodes_dropped: u64,
    pub spikes_dropped: u64,
    /// How many arrived with the latest refresh.
    pub new_episodes: usize,
    pub new_spikes: usize,
    episode_ids: HashSet<EpisodeId>,
    spike_ids: HashSet<SpikeId>,
}

impl RtLog {
    /// Take in the episodes and spikes of the `refresh`-th recording: new ones are added,
    /// ones seen before are updated in place (a producer may complete them later).
    pub fn update(&mut self, rec: &Recording, refresh: u64) {
        self.episodes_traced = rec.starvation_episodes.is_some();
        self.spikes_traced = rec.latency_spikes.is_some();
        self.new_episodes = merge(
            &mut self.episodes,
            &mut self.episode_ids,
            rec.starvation_episodes.as_deref().unwrap_or_default(),
            episode_id,
            |e| e.ts_ns,
            refresh,
            &mut self.episodes_dropped,
        );
        self.new_spikes = merge(
            &mut self.spikes,
            &mut self.spike_ids,
            rec.latency_spikes.as_deref().unwrap_or_default(),
            spike_id,
            |s| s.ts_ns,
            refresh,
            &mut self.spikes_dropped,
        );
    }
}

/// Merge `items` into `log` (newest first), returning how many were new.
fn merge<T: Clone, K: std::hash::Hash + Eq>(
    log: &mut Vec<Seen<T>>,
    ids: &mut HashSet<K>,
    items: &[T],
    id: impl Fn(&T) -> K,
    ts: impl Fn(&T) -> u64,
    refresh: u64,
    dropped: &mut u64,
) -> usize {
    let mut new = 0;
    for item in items {
        let k = id(item);
        if ids.contains(&k) {
            if let Some(old) = log.iter_mut().find(|s| id(&s.item) == k) {
                old.item = item.clone();
            }
            continue;
        }
        ids.insert(k);
        log.push(Seen {
            item: item.clone(),
            refresh,
        });
        new += 1;
    }
    if new > 0 {
        log.sort_by_key(|s| std::cmp::Reverse(ts(&s.item)));
        if log.len() > KEEP {
            // Ids of dropped items stay known, so they do not come back as new.
            *dropped += (log.len() - KEEP) as u64;
            log.truncate(KEEP);
        }
    }
    new
}
