//! Bounded series of cumulative figures across refreshes: the heaviest keys keep their
//! own series, the rest fold into `other`, and every counter stays monotonic while the
//! top set changes, while a lock leaves the recording and while `serve` forgets an exited
//! process's entries. What the metrics of `serve` are made from. Pure.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{Recording, WaitStats, rt::EpisodeKind};
use crate::decode::LockType;

/// The label value of everything outside the top series.
pub const OTHER: &str = "other";

/// A lock series' identity: its `type` and `lock` labels.
pub type SeriesKey = (LockType, String);

/// One series of the per-lock families.
#[derive(Debug, Clone, PartialEq)]
pub struct LockSample {
    pub lock_type: LockType,
    /// The lock's name, or [`OTHER`].
    pub lock: String,
    pub stats: WaitStats,
}

/// Figures that can be folded into `other`: additive, ranked by total wait.
pub trait Folded: Clone + Default {
    fn merge(&mut self, o: &Self);
    /// `self - base` for the additive figures.
    fn minus(&self, base: &Self) -> Self;
    /// Ranking key: total wait (ns).
    fn rank(&self) -> u64;
    fn is_zero(&self) -> bool;
    /// Is some additive figure of `self` below `prev`'s?
    fn fell_below(&self, prev: &Self) -> bool;
    /// Add `o`'s additive figures (even where its count is 0).
    fn add_counts(&mut self, o: &Self);
}

impl Folded for WaitStats {
    fn merge(&mut self, o: &Self) {
        WaitStats::merge(self, o)
    }
    fn minus(&self, base: &Self) -> Self {
        self.minus_counts(base)
    }
    fn rank(&self) -> u64 {
        self.total_ns
    }
    fn is_zero(&self) -> bool {
        self.count == 0
    }
    fn fell_below(&self, prev: &Self) -> bool {
        WaitStats::fell_below(self, prev)
    }
    fn add_counts(&mut self, o: &Self) {
        WaitStats::add_counts(self, o)
    }
}

/// Which locks get their own label, kept across refreshes so that every counter stays
/// monotonic while the top set changes:
///
/// - a lock entering the top set starts its series from what `other` had not yet
///   reported for it (its value at the previous refresh stays in `other` as a baseline);
/// - a lock leaving the top set drops its series, and its whole value moves back into
///   `other` (which only grows: the value is at least the baseline it left there);
/// - a lock that leaves the recording (an LRU map evicted it, or `serve` forgot its
///   process) leaves in `other` what `other` had of it; a top lock's own series simply
///   ends (Prometheus marks it stale) rather than jumping into `other`;
/// - so the sum over all series of a type is the type's exact total, but for the top
///   locks that left the recording.
///
/// State is bounded by the number of locks in the kernel maps (previous values) and by
/// the top-N (baselines).
#[derive(Debug)]
pub struct TopSeries<V> {
    prev: HashMap<SeriesKey, V>,
    base: HashMap<SeriesKey, V>,
    /// Figures of locks no longer in the recording, kept in their `other` group.
    retired: BTreeMap<SeriesKey, V>,
    /// Figures already reported for a lock that is still in the recording but lost
    /// some of its entries (`serve` forgot an exited process's waits on a lock others
    /// use): added back, so that its series never goes down.
    carry: HashMap<SeriesKey, V>,
}

impl<V> Default for TopSeries<V> {
    fn default() -> Self {
        Self {
            prev: HashMap::new(),
            base: HashMap::new(),
            retired: BTreeMap::new(),
            carry: HashMap::new(),
        }
    }
}

impl<V: Folded> TopSeries<V> {
    /// Fold cumulative figures per (type, lock) into at most `top_n` lock series plus
    /// one `other` series per lock type. Sorted: top locks by total wait, then `other`
    /// by type.
    pub fn fold(&mut self, cur: HashMap<SeriesKey, V>, top_n: usize) -> Vec<(SeriesKey, V)> {
        self.fold_grouped(cur, top_n, |_| OTHER.to_owned())
    }

    /// [`TopSeries::fold`] with one `other` series per (type, `group(key)`) instead of
    /// per type: the others come back keyed `(type, group)`. A key's group must never
    /// change (each group's series stays monotonic).
    pub fn fold_grouped(
        &mut self,
        cur: HashMap<SeriesKey, V>,
        top_n: usize,
        group: impl Fn(&SeriesKey) -> String,
    ) -> Vec<(SeriesKey, V)> {
        let cur: HashMap<SeriesKey, V> = cur
            .into_iter()
            .map(|(key, mut v)| {
                if let Some(c) = self.carry.get(&key) {
                    v.add_counts(c);
                }
                if let Some(prev) = self.prev.get(&key)
                    && v.fell_below(prev)
                {
                    let lost = prev.minus(&v);
                    v.add_counts(&lost);
                    self.carry.entry(key.clone()).or_default().add_counts(&lost);
                }
                (key, v)
            })
            .collect();
        self.carry.retain(|k, _| cur.contains_key(k));
        let mut ranked: Vec<(&SeriesKey, &V)> = cur.iter().collect();
        ranked.sort_by(|a, b| b.1.rank().cmp(&a.1.rank()).then_with(|| a.0.cmp(b.0)));
        ranked.truncate(top_n);
        let top: Vec<SeriesKey> = ranked.into_iter().map(|(k, _)| k.clone()).collect();
        let top_set: HashSet<&SeriesKey> = top.iter().collect();

        for (key, prev) in &self.prev {
            if !cur.contains_key(key) {
                let gone = self.base.remove(key).unwrap_or_else(|| prev.clone());
                self.retired
                    .entry((key.0, group(key)))
                    .or_default()
                    .merge(&gone);
            }
        }
        self.base.retain(|k, _| top_set.contains(k));
        for key in &top {
            if !self.base.contains_key(key) {
                let reported = self.prev.get(key).cloned().unwrap_or_default();
                self.base.insert(key.clone(), reported);
            }
        }

        let mut out: Vec<(SeriesKey, V)> = top
            .iter()
            .map(|key| (key.clone(), cur[key].minus(&self.base[key])))
            .collect();
        let mut other: BTreeMap<SeriesKey, V> = self.retired.clone();
        for (key, v) in &cur {
            let folded = match self.base.get(key) {
                Some(base) => base,
                None => v,
            };
            other.entry((key.0, group(key))).or_default().merge(folded);
        }
        out.extend(other.into_iter().filter(|(_, v)| !v.is_zero()));
        self.prev = cur;
        out
    }
}

/// The kernel lock series (`lockscope_lock_*`): every lock entry of a recording that is
/// not a user-space lock.
///
/// A lock's name can get better between refreshes (a name inferred once a caller is
/// seen, a thread's `pi_lock` named once its task is known): its series keeps the name
/// it first had while the lock stays in the recordings, or its waits would count twice,
/// under the old name (folded into `other`) and the new.
#[derive(Debug, Default)]
pub struct LockSeries(TopSeries<WaitStats>, HashMap<(LockType, String), String>);

impl LockSeries {
    /// Locks whose series carry figures forgotten by the recording (tests).
    #[cfg(test)]
    pub(crate) fn carried(&self) -> usize {
        self.0.carry.len()
    }

    /// Fold a (cumulative) recording's kernel locks into at most `top_n` lock series
    /// plus one `other` series per lock type.
    pub fn update(&mut self, rec: &Recording, top_n: usize) -> Vec<LockSample> {
        let mut cur: HashMap<SeriesKey, WaitStats> = HashMap::new();
        let mut names: HashMap<(LockType, String), String> = HashMap::new();
        for l in rec.locks.iter().filter(|l| !l.lock_type.is_user()) {
            let id = (l.lock_type, l.addr.clone());
            let name = self.1.get(&id).cloned().unwrap_or_else(|| l.name.clone());
            cur.entry((l.lock_type, name.clone()))
                .or_default()
                .merge(&l.stats);
            names.insert(id, name);
        }
        // Only the locks of this recording: one that leaves it starts again from 0.
        self.1 = names;
        self.0
            .fold(cur, top_n)
            .into_iter()
            .map(|((lock_type, lock), stats)| LockSample {
                lock_type,
                lock,
                stats,
            })
            .collect()
    }
}

/// The per-cgroup series (`lockscope_cgroup_*`): the recording's per (cgroup, type)
/// figures, bounded like the locks' (the `top_n` heaviest, the rest `cgroup="other"`).
#[derive(Debug, Default)]
pub struct CgroupSeries(TopSeries<WaitStats>);

/// One cgroup series: `cgroup` is a path below the v2 root or [`OTHER`].
#[derive(Debug, Clone, PartialEq)]
pub struct CgroupSample {
    pub lock_type: LockType,
    pub cgroup: String,
    pub stats: WaitStats,
}

impl CgroupSeries {
    /// `None` for a recording without cgroup attribution.
    pub fn update(&mut self, rec: &Recording, top_n: usize) -> Option<Vec<CgroupSample>> {
        let entries = rec.cgroups.as_ref()?;
        let cur: HashMap<SeriesKey, WaitStats> = entries
            .iter()
            .map(|e| ((e.lock_type, e.cgroup.clone()), e.stats.clone()))
            .collect();
        Some(
            self.0
                .fold(cur, top_n)
                .into_iter()
                .map(|((lock_type, cgroup), stats)| CgroupSample {
                    lock_type,
                    cgroup,
                    stats,
                })
                .collect(),
        )
    }
}

/// A futex word's figures: blocking waits (with their wait times) and wake calls.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FutexFigures {
    pub wait: WaitStats,
    pub wakes: u64,
}

impl Folded for FutexFigures {
    fn merge(&mut self, o: &Self) {
        self.wait.merge(&o.wait);
        self.wakes += o.wakes;
    }
    fn minus(&self, base: &Self) -> Self {
        Self {
            wait: self.wait.minus_counts(&base.wait),
            wakes: self.wakes.saturating_sub(base.wakes),
        }
    }
    fn rank(&self) -> u64 {
        self.wait.total_ns
    }
    fn is_zero(&self) -> bool {
        self.wait.count == 0 && self.wakes == 0
    }
    fn fell_below(&self, prev: &Self) -> bool {
        self.wait.fell_below(&prev.wait) || self.wakes < prev.wakes
    }
    fn add_counts(&mut self, o: &Self) {
        self.wait.add_counts(&o.wait);
        self.wakes += o.wakes;
    }
}

/// One series of the futex families.
#[derive(Debug, Clone, PartialEq)]
pub struct FutexSample {
    /// `futex` or `futex-pi`.
    pub lock_type: LockType,
    /// The futex word's name (`futex 0x... of comm[pid]`), or [`OTHER`].
    pub lock: String,
    /// The process's name, or [`OTHER`] for the folded series.
    pub comm: String,
    pub figures: FutexFigures,
}

/// The user-space lock series (`lockscope_futex_*`), folded like [`LockSeries`] in two
/// steps: the `top_n` futex words get their own `lock` label; the others are summed per
/// process name (`lock="other"`, `comm` the process), and of those the `top_n` processes
/// keep their `comm`, the rest are `comm="other"`. Both steps keep every series
/// monotonic; the `lock` label has at most `top_n` + 1 values.
#[derive(Debug, Default)]
pub struct FutexSeries {
    words: TopSeries<FutexFigures>,
    comms: TopSeries<FutexFigures>,
    /// The process name of every word of the previous update: a word that leaves the
    /// recording (evicted, or its process forgotten) retires into its own process's
    /// `other` series, whose figures it was counted in.
    comm_of: HashMap<String, String>,
}

impl FutexSeries {
    /// Futex words whose process name is kept (tests).
    #[cfg(test)]
    pub(crate) fn names_kept(&self) -> usize {
        self.comm_of.len()
    }

    pub fn update(&mut self, rec: &Recording, top_n: usize) -> Vec<FutexSample> {
        let mut cur: HashMap<SeriesKey, FutexFigures> = HashMap::new();
        let mut names: HashSet<&str> = HashSet::new();
        for l in &rec.locks {
            let Some(user) = &l.user else { continue };
            names.insert(&l.name);
            self.comm_of.insert(l.name.clone(), user.comm.clone());
            let fig = FutexFigures {
                wait: l.stats.clone(),
                wakes: user.futex.wake_calls,
            };
            cur.entry((l.lock_type, l.name.clone()))
                .or_default()
                .merge(&fig);
        }
        let comm_of = &self.comm_of;
        let comm = |key: &SeriesKey| comm_of.get(key.1.as_str()).cloned().unwrap_or_default();
        let mut out = Vec::new();
        let mut rest: HashMap<SeriesKey, FutexFigures> = HashMap::new();
        for ((lock_type, name), figures) in self.words.fold_grouped(cur, top_n, comm) {
            // Top words come back by name, the others by process name.
            if names.contains(name.as_str()) {
                out.push(FutexSample {
                    lock_type,
                    comm: comm(&(lock_type, name.clone())),
                    lock: name,
                    figures,
                });
            } else {
                rest.insert((lock_type, name), figures);
            }
        }
        out.extend(
            self.comms
                .fold(rest, top_n)
                .into_iter()
                .map(|((lock_type, comm), figures)| FutexSample {
                    lock_type,
                    lock: OTHER.to_owned(),
                    comm,
                    figures,
                }),
        );
        self.comm_of.retain(|name, _| names.contains(name.as_str()));
        out
    }
}

/// Starvation episodes counted once each across refreshes, by (kind, probable, tier).
///
/// A recording lists the episodes it holds; a producer may keep all of them, keep only
/// the latest (or longest) few, or hand over only the new ones. In every case an
/// episode is new exactly when the previous recording did not list it, so only the
/// previous recording's episode identities are kept (bounded by one recording).
#[derive(Debug, Default)]
pub struct EpisodeCounter {
    seen: HashSet<EpisodeId>,
    totals: EpisodeTotals,
}

/// Episodes by (`kind` label, probable, tier).
pub type EpisodeTotals = BTreeMap<(&'static str, bool, String), u64>;

/// What makes an episode itself: when and where it started, on which lock, by whom.
type EpisodeId = (&'static str, u64, u32, String, u32, Option<u32>);

impl EpisodeCounter {
    /// Count the episodes of `rec` not seen in the previous recording; returns the
    /// cumulative totals.
    pub fn update(&mut self, rec: &Recording) -> &EpisodeTotals {
        let Some(episodes) = &rec.starvation_episodes else {
            return &self.totals;
        };
        let mut now = HashSet::with_capacity(episodes.len());
        for e in episodes {
            let kind = episode_kind_name(e.kind);
            let id = (
                kind,
                e.ts_ns,
                e.cpu,
                e.addr.clone(),
                e.waiter.pid,
                e.waiter.tid,
            );
            if !self.seen.contains(&id) && !now.contains(&id) {
                *self
                    .totals
                    .entry((kind, e.probable, e.tier.clone()))
                    .or_default() += 1;
            }
            now.insert(id);
        }
        self.seen = now;
        &self.totals
    }
}

/// `kind` label of an episode.
pub fn episode_kind_name(k: EpisodeKind) -> &'static str {
    match k {
        EpisodeKind::Starvation => "starvation",
        EpisodeKind::LongHold => "long-hold",
    }
}
