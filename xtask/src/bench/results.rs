//! The benchmark's results (written as `bench-results.json`), the targets of issue 8
//! judged from them, and their Markdown rendering (`BENCHMARKS.md`). Pure.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::parse::{Spread, fmt_si};

pub const SCHEMA: &str = "lockscope.bench/1";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BenchResults {
    pub schema: String,
    #[serde(default)]
    pub machine: Option<Machine>,
    #[serde(default)]
    pub config: Option<Config>,
    #[serde(default)]
    pub overhead: Vec<OverheadRow>,
    #[serde(default)]
    pub cost: Option<Cost>,
    #[serde(default)]
    pub capacity: Option<Capacity>,
    #[serde(default)]
    pub daemon: Vec<DaemonCase>,
    #[serde(default)]
    pub soak: Option<Soak>,
    /// cyclictest's worst latency bare and beside `record -a --latency-threshold`.
    #[serde(default)]
    pub realtime: Option<RealTime>,
    /// Wall times of starting and stopping.
    #[serde(default)]
    pub start_stop: Option<StartStop>,
    /// A real server under its own load generator: bare, beside a recording of another
    /// command, traced itself.
    #[serde(default)]
    pub memcached: Option<Memcached>,
    #[serde(default)]
    pub targets: Vec<TargetCheck>,
    /// Overhead rounds run again because the machine drifted during them
    /// ([`drift_window`]): kept here, not judged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds_run_again: Vec<RoundRunAgain>,
}

/// An overhead round of one workload that was run again: its untraced runs, opening and
/// closing it, lay further apart than the workload's [`drift_window`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RoundRunAgain {
    pub workload: String,
    pub round: usize,
    /// How far apart its two untraced runs lay, in percent of their mean.
    pub apart_pct: f64,
    /// Every run of the round, tool by tool.
    pub runs: Vec<(String, RunSample)>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Memcached {
    /// memcached's worker threads and memcslap's arguments.
    pub server_threads: u32,
    pub memcslap_args: Vec<String>,
    /// memcslap's own "Time to get" seconds, per run: memcached alone, beside
    /// `lockscope record -- <another command>`, and under `lockscope record -p <memcached>`.
    pub bare_s: Vec<f64>,
    pub beside_s: Vec<f64>,
    pub traced_s: Vec<f64>,
    /// Waits the traced runs recorded on memcached's locks (the tracing was real).
    pub traced_waits: Vec<u64>,
}

impl Memcached {
    /// (beside, traced) median over bare median.
    pub fn ratios(&self) -> (Option<f64>, Option<f64>) {
        let bare = Spread::of(&self.bare_s).map(|s| s.median);
        let r = |v: &[f64]| {
            Spread::of(v)
                .map(|s| s.median)
                .zip(bare)
                .and_then(|(m, b)| (b > 0.0).then(|| m / b))
        };
        (r(&self.beside_s), r(&self.traced_s))
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RealTime {
    pub cyclictest_args: Vec<String>,
    /// Worst `Max:` over cyclictest's threads, per run, in us.
    pub bare_max_us: Vec<u64>,
    pub traced_max_us: Vec<u64>,
    /// Per traced run: the largest spike lockscope split (its own, or cyclictest's of the
    /// same wakeup); `None`: no spike over the threshold.
    #[serde(default)]
    pub traced_worst_split: Vec<Option<SpikeSplit>>,
    /// CPU time the hypervisor took from the machine (steal, all CPUs) during each run,
    /// in ms (`None`: unreadable). A late timer on an idle virtual CPU is one the host
    /// did not run in time, and shows here.
    #[serde(default)]
    pub bare_steal_ms: Vec<Option<u64>>,
    #[serde(default)]
    pub traced_steal_ms: Vec<Option<u64>>,
    /// The most steal one CPU took within any `STEAL_WINDOW_S` of each run, in ms: a
    /// spike the host made needs that much at once on the CPU it hit.
    #[serde(default)]
    pub bare_steal_burst_ms: Vec<Option<u64>>,
    #[serde(default)]
    pub traced_steal_burst_ms: Vec<Option<u64>>,
}

/// The window for `RealTime::*_steal_burst_ms`, in seconds: longer than the ~100 ms
/// spikes a host's CPU quota period makes, short enough that a run's steal spread thinly
/// (a few ms each second) does not add up to one.
pub const STEAL_WINDOW_S: f64 = 0.25;

/// What held a spike: how late its timer fired, and whether its CPU was idle then.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SpikeSplit {
    pub latency_us: u64,
    pub timer_late_us: u64,
    pub cpu_idle: bool,
}

impl SpikeSplit {
    /// The largest spike of a recording (`latency_spikes`) that has a split (cyclictest's
    /// own maximum has none when lockscope did not time that wakeup: a delay after the
    /// thread was switched in).
    pub fn of_worst(rec: &serde_json::Value) -> Option<Self> {
        let worst = rec["latency_spikes"]
            .as_array()?
            .iter()
            .filter(|s| s["timer_late_ns"].is_u64() && s["cpu_idle"].is_boolean())
            .max_by_key(|s| s["latency_ns"].as_u64().unwrap_or(0))?;
        Some(Self {
            latency_us: worst["latency_ns"].as_u64()? / 1000,
            timer_late_us: worst["timer_late_ns"].as_u64()? / 1000,
            cpu_idle: worst["cpu_idle"].as_bool()?,
        })
    }

    /// `8074 us: timer 8021 us late, cpu idle`.
    pub fn describe(&self) -> String {
        format!(
            "{} us: timer {} us late{}",
            self.latency_us,
            self.timer_late_us,
            if self.cpu_idle { ", cpu idle" } else { "" }
        )
    }
}

impl RealTime {
    /// Each traced run's largest split spike, `; `-separated (`none` for a run without).
    pub fn splits_text(&self) -> String {
        let each: Vec<String> = self
            .traced_worst_split
            .iter()
            .map(|s| s.map_or_else(|| "none".to_owned(), |s| s.describe()))
            .collect();
        each.join("; ")
    }

    /// The verdict on the traced runs against `limit` (us): met when every run is within
    /// it; else missed, unless each run over it lost at least its excess to the host on
    /// one CPU within `STEAL_WINDOW_S` (steal): then the host, not the tracer, may have
    /// made it, and one cannot tell. Results from before the per-CPU window judge by the
    /// run's whole steal.
    pub fn verdict(&self, limit: u64) -> Verdict {
        let steal = if self.traced_steal_burst_ms.is_empty() {
            &self.traced_steal_ms
        } else {
            &self.traced_steal_burst_ms
        };
        let mut over = self
            .traced_max_us
            .iter()
            .enumerate()
            .filter(|&(_, &max)| max > limit)
            .peekable();
        if over.peek().is_none() {
            return Verdict::Met;
        }
        let stolen = |(i, max): (usize, &u64)| {
            let steal = steal.get(i).copied().flatten();
            steal.is_some_and(|ms| ms * 1000 >= max - limit)
        };
        if over.all(stolen) {
            Verdict::Host
        } else {
            Verdict::Missed
        }
    }

    /// `bare [0, 0, 0] ms, traced [0, 10, 100] ms` (`?` where unreadable); empty when
    /// not measured.
    pub fn steal_text(&self) -> String {
        if self.bare_steal_ms.is_empty() && self.traced_steal_ms.is_empty() {
            return String::new();
        }
        let list = |v: &[Option<u64>]| {
            let each: Vec<String> = v
                .iter()
                .map(|m| m.map_or_else(|| "?".to_owned(), |m| m.to_string()))
                .collect();
            format!("[{}]", each.join(", "))
        };
        let mut text = format!(
            "bare {} ms, traced {} ms",
            list(&self.bare_steal_ms),
            list(&self.traced_steal_ms)
        );
        if !self.bare_steal_burst_ms.is_empty() || !self.traced_steal_burst_ms.is_empty() {
            let _ = write!(
                text,
                " in all; the most on one CPU within {:.0} ms: bare {} ms, traced {} ms",
                STEAL_WINDOW_S * 1000.0,
                list(&self.bare_steal_burst_ms),
                list(&self.traced_steal_burst_ms)
            );
        }
        text
    }
}

/// How the traced cyclictest runs stand against their limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Met,
    Missed,
    /// Over the limit, but every run over it lost at least its excess to the hypervisor.
    Host,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StartStop {
    /// `lockscope record -- true`, seconds, per run.
    pub record_true_s: Vec<f64>,
    /// SIGTERM to `lockscope serve` until it exited, seconds, per run.
    pub serve_sigterm_s: Vec<f64>,
    /// Ctrl-C (SIGINT to the process group) in `record -- sleep 60` until it printed
    /// its report and exited, seconds, per run.
    #[serde(default)]
    pub record_sigint_s: Vec<f64>,
    /// The peer of Ctrl-C, per run: a plain `sleep` in a process group of its own, sent
    /// SIGINT at the same moment, until it was reaped, seconds (`None`: not within 60 s).
    #[serde(default)]
    pub sigint_peer_s: Vec<Option<f64>>,
    /// Where each Ctrl-C over its limit went (kernel stacks and scheduler times sampled
    /// while it stopped).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub record_sigint_slow: Vec<super::stopprofile::StopProfile>,
    /// `q` in `lockscope top` until the shell ran its next command, seconds, per run.
    #[serde(default)]
    pub top_quit_s: Vec<f64>,
    /// `lockscope top` from its start to its first screen, seconds, per run that drew one.
    #[serde(default)]
    pub top_start_s: Vec<f64>,
    /// The peer of `q`, per run of `top_quit_s`: a key pressed on another terminal at the
    /// same moment until a plain reader had it, seconds (`None`: not within 60 s).
    #[serde(default)]
    pub top_key_peer_s: Vec<Option<f64>>,
    /// Runs in which `lockscope top` drew no screen within 120 s (no `q` was timed).
    #[serde(default)]
    pub top_no_screen: u32,
    /// Runs in which `lockscope top` had not exited 180 s after `q` (killed then), each
    /// with its peer: when the key to the plain reader came, seconds after it was pressed
    /// (`None`: not within those 180 s either).
    #[serde(default)]
    pub top_no_quit_peer_s: Vec<Option<f64>>,
    /// The peer: `setsid -w true` (any program in a session of its own, as a new
    /// terminal window or tmux pane starts one), wall seconds, per run.
    #[serde(default)]
    pub new_session_true_s: Vec<f64>,
    /// The same, beside `stress-ng --ptrace 4`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub under_ptrace_stress: Option<Box<StartStop>>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Machine {
    pub cpu_model: String,
    pub cpus: usize,
    pub kernel: String,
    pub date_utc: String,
    pub load_avg_at_start: String,
    /// Load average at the end of the overhead runs.
    #[serde(default)]
    pub load_avg_at_end: String,
    /// Share of the CPUs (0-1) other processes used during the overhead runs (the
    /// machine's busy time less the bench's own and its children's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_cpu_share: Option<f64>,
    /// Others used more than a quarter of the CPUs during the overhead runs (older
    /// results: the 1-minute load average exceeded half the CPUs): figures are noisy.
    #[serde(default)]
    pub loaded: bool,
    pub lockscope_version: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Config {
    pub quick: bool,
    pub runs: usize,
    pub workloads: Vec<WorkloadSpec>,
    pub tools: Vec<String>,
    pub elapsed_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    /// Name in the tables, e.g. `futex-mutex --pi`.
    pub name: String,
    /// Arguments after `lockscope workload`.
    pub args: Vec<String>,
    /// Seconds the bench lets a tracer run, once ready, before starting the workload: a
    /// bystander meets a tracer already running, past the grace period its start-up may
    /// end in (see `BYSTANDER_SETTLE` and docs/development.md). 0 for a workload that
    /// starts with the tracer, as a traced command would.
    #[serde(default)]
    pub settle_s: f64,
}

/// One run of one workload under one tool.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunSample {
    pub round: usize,
    /// The workload's own ops per second.
    pub throughput: f64,
    /// The workload's own wall time.
    pub real_s: f64,
    /// Tracing window: from the tool being ready to the stop request.
    pub window_s: f64,
    /// `lock:contention_begin` events the tool saw.
    pub events: Option<u64>,
    pub lost: Option<u64>,
    /// lockscope: what was lost, by reason (only reasons with a non-zero count).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub lost_by_reason: std::collections::BTreeMap<String, u64>,
    /// The tool's own CPU time (user + system) over its whole life.
    pub cpu_s: Option<f64>,
    /// The tool's peak RSS.
    pub maxrss_kib: Option<u64>,
    /// `lockscope serve` only: successful scrapes.
    pub scrapes: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OverheadRow {
    pub workload: String,
    pub tool: String,
    pub throughput: Spread,
    /// Median throughput over the untraced median.
    pub ratio_to_untraced: Option<f64>,
    pub events_per_s: Option<f64>,
    pub cpu_s: Option<f64>,
    pub maxrss_kib: Option<u64>,
    pub lost: Option<u64>,
    pub runs: Vec<RunSample>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProgCost {
    /// `lockscope` or `floor` (the empty bpftrace program).
    pub owner: String,
    pub name: String,
    pub run_cnt: u64,
    pub run_time_ns: u64,
    pub ns_per_run: Option<f64>,
}

/// " (attached first: lockscope 1.60x, the peer 1.30x)" from a ratio per order of
/// attaching (lockscope first, then `other` first); empty when not both were measured.
fn by_order(ratios: &[Option<f64>], other: &str) -> String {
    match ratios {
        [Some(a), Some(b)] => format!(" (attached first: lockscope {a:.2}x, {other} {b:.2}x)"),
        _ => String::new(),
    }
}

/// The programs of several runs as one: runs and run time summed per (owner, name),
/// ns per run recomputed from the sums; busiest first within each owner, owners in the
/// order they first appear.
pub fn merge_prog_costs(runs: &[&[ProgCost]]) -> Vec<ProgCost> {
    let mut out: Vec<ProgCost> = Vec::new();
    for p in runs.iter().flat_map(|r| r.iter()) {
        match out
            .iter_mut()
            .find(|o| o.owner == p.owner && o.name == p.name)
        {
            Some(o) => {
                o.run_cnt += p.run_cnt;
                o.run_time_ns += p.run_time_ns;
            }
            None => out.push(p.clone()),
        }
    }
    for o in out.iter_mut() {
        o.ns_per_run = (o.run_cnt > 0).then(|| o.run_time_ns as f64 / o.run_cnt as f64);
    }
    let owners: Vec<String> = out.iter().fold(Vec::new(), |mut v, p| {
        if !v.contains(&p.owner) {
            v.push(p.owner.clone());
        }
        v
    });
    out.sort_by_key(|p| {
        (
            owners.iter().position(|o| *o == p.owner),
            std::cmp::Reverse(p.run_cnt),
        )
    });
    out
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Cost {
    pub workload: String,
    pub programs: Vec<ProgCost>,
    /// Empty `tracepoint:lock:contention_begin {}` program, ns per run.
    pub floor_ns: Option<f64>,
    pub begin_ns: Option<f64>,
    pub end_ns: Option<f64>,
    /// max(begin, end) / floor.
    pub ratio_to_floor: Option<f64>,
    /// The minimal peer (bpftrace: begin/end paired per thread into a per-lock
    /// histogram), attached at the same time.
    #[serde(default)]
    pub peer_begin_ns: Option<f64>,
    #[serde(default)]
    pub peer_end_ns: Option<f64>,
    /// (begin + end) / (peer begin + peer end).
    #[serde(default)]
    pub ratio_to_peer: Option<f64>,
    /// The same ratio from each order of attaching alone: lockscope first, then the
    /// peers first (empty in results from before both orders were run).
    #[serde(default)]
    pub ratio_to_peer_by_order: Vec<Option<f64>>,
    /// `lock:contention_begin` events lockscope counted in the window.
    pub contention_events: u64,
    /// All of lockscope's programs' run time over `contention_events`.
    pub ns_per_contention_event: Option<f64>,
    /// lockscope's userspace CPU time over `contention_events`.
    pub user_cpu_ns_per_event: Option<f64>,
    /// The futex syscall probes beside empty programs on the same tracepoints, over
    /// every call of a contended futex mutex (waits included)...
    #[serde(default)]
    pub futex: Option<FutexCost>,
    /// ... and over calls that do not block (`FUTEX_WAKE` on a word no one waits on):
    /// what the target is about.
    #[serde(default)]
    pub futex_nonblocking: Option<FutexCost>,
    /// `--futex-mode blocking`: its program on every context switch.
    #[serde(default)]
    pub futex_blocking: Option<SwitchCost>,
}

/// `record --futex-mode blocking`'s `sched_switch` program beside an empty program on
/// the same event.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SwitchCost {
    pub workload: String,
    /// Context switches lockscope's program saw in the window.
    pub switches: u64,
    pub ns: Option<f64>,
    pub floor_ns: Option<f64>,
    /// [`SwitchCost::ratio`] from each attach order alone.
    #[serde(default)]
    pub ratio_by_order: Vec<Option<f64>>,
    pub programs: Vec<ProgCost>,
}

impl SwitchCost {
    /// ns / empty ns.
    pub fn ratio(&self) -> Option<f64> {
        let (ours, floor) = self.ns.zip(self.floor_ns)?;
        (floor > 0.0).then(|| ours / floor)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FutexCost {
    pub workload: String,
    /// Runs of lockscope's entry program in the window: futex(2) calls, or on the raw
    /// syscall tracepoints (`raw`) every system call of the machine.
    pub calls: u64,
    /// Both sides on the raw `sys_enter`/`sys_exit` tracepoints, where each program runs
    /// on every system call (its ns per run is over all of them); else on
    /// `syscalls:sys_enter_futex`/`sys_exit_futex` (false in older results).
    #[serde(default)]
    pub raw: bool,
    pub enter_ns: Option<f64>,
    pub exit_ns: Option<f64>,
    pub floor_enter_ns: Option<f64>,
    pub floor_exit_ns: Option<f64>,
    /// [`FutexCost::ratio`] from each order of attaching alone: lockscope first, then the
    /// empty programs first (empty in older results).
    #[serde(default)]
    pub ratio_by_order: Vec<Option<f64>>,
    pub programs: Vec<ProgCost>,
}

impl FutexCost {
    /// (enter + exit) / (empty enter + empty exit).
    pub fn ratio(&self) -> Option<f64> {
        let ours = self.enter_ns.zip(self.exit_ns).map(|(a, b)| a + b)?;
        let floor = self
            .floor_enter_ns
            .zip(self.floor_exit_ns)
            .map(|(a, b)| a + b)?;
        (floor > 0.0).then(|| ours / floor)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CapacityStep {
    pub workload: String,
    pub args: Vec<String>,
    pub duration_s: f64,
    pub kernel_events: u64,
    pub futex_calls: u64,
    pub events_per_s: f64,
    pub lost: u64,
    /// Futex workloads: FUTEX_WAIT + FUTEX_WAKE calls the workload counted itself...
    pub truth: Option<u64>,
    /// ... and those lockscope recorded on the workload's lock.
    pub seen: Option<u64>,
    /// `seen + lost == truth`.
    pub exact: Option<bool>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Capacity {
    pub steps: Vec<CapacityStep>,
    /// Highest events/s (kernel contention + futex calls) with zero loss.
    pub max_zero_loss_events_per_s: f64,
    pub loss_seen: bool,
    pub note: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DaemonCase {
    pub name: String,
    pub workload_args: Vec<String>,
    /// `measured` or `skipped`.
    pub status: String,
    pub reason: String,
    pub window_s: f64,
    pub cpu_pct: Option<f64>,
    pub rss_kib: Option<u64>,
    pub hwm_kib: Option<u64>,
    pub scrapes: u64,
    pub scrape_failures: u64,
    /// Distinct `lock` label values in the last scrape.
    pub lock_series: usize,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Soak {
    pub minutes: f64,
    pub workload_args: Vec<String>,
    pub warmup_s: f64,
    pub rss_start_kib: u64,
    pub rss_end_kib: u64,
    pub change_pct: f64,
    pub within_10pct: bool,
    pub cpu_pct: f64,
    pub scrapes: u64,
    pub scrape_failures: u64,
    /// (seconds since start, VmRSS KiB), every 10 s.
    pub samples: Vec<(f64, u64)>,
    /// Lock entries and caller stacks in `/api/snapshot` (everything recorded since
    /// start, system-wide) after the warm-up and at the end: what the RSS tracks.
    #[serde(default)]
    pub locks_start: usize,
    #[serde(default)]
    pub locks_end: usize,
    #[serde(default)]
    pub callers_start: usize,
    #[serde(default)]
    pub callers_end: usize,
    /// Short-lived processes started one after another beside the workload (each a new
    /// mmap_lock: the set of locks seen keeps growing).
    #[serde(default)]
    pub churn_processes: u64,
    #[serde(default)]
    pub churn_args: Vec<String>,
    /// Highest RSS seen after the warm-up (during map reads); `rss_*_kib` and `samples`
    /// are the lowest of each 2 s burst of samples (between reads).
    #[serde(default)]
    pub peak_kib: u64,
    pub date_utc: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TargetCheck {
    pub target: String,
    pub measured: String,
    /// `met`, `missed`, `not measured`, or `context` (a peer's figure, no target).
    pub status: String,
}

/// Fewer rounds than this (e.g. `--quick`) cannot show whether they agree: a
/// throughput target is then inconclusive (see `round_verdict`).
pub const MIN_RUNS: usize = 3;

/// The bench workload of an untraced uncontended pthread loop.
pub const BYSTANDER: &str = "pthread bystander";
/// The bench workload of an untraced loop of system calls (no locks).
pub const SYSCALL_BYSTANDER: &str = "syscall bystander";

/// The tool of the untraced run that closes a round.
pub const UNTRACED_AFTER: &str = "untraced-after";

/// How far apart two untraced runs of a round lie, in percent of their mean.
pub fn untraced_apart(first: f64, last: f64) -> f64 {
    let mean = (first + last) / 2.0;
    if mean > 0.0 {
        (first - last).abs() / mean * 100.0
    } else {
        f64::INFINITY
    }
}

/// The workloads whose throughput is judged against untraced runs, slowed at most
/// [`SLOWDOWN_TOLERANCE`].
pub const JUDGED_WORKLOADS: [&str; 2] = ["mmap-churn", "futex-mutex"];
/// `record` slows a judged workload at most this many percent.
const SLOWDOWN_TOLERANCE: f64 = 3.0;
/// A bystander keeps at least 100 less this many percent of its speed beside a tracer.
const BYSTANDER_TOLERANCE: f64 = 2.0;
/// The loop `record` traces keeps at least 100 less this many percent of its speed.
const TRACED_TOLERANCE: f64 = 5.0;

/// How far apart (percent) the untraced runs that open and close a round of `workload`
/// may lie for its throughput targets to use the round: twice the tightest tolerance
/// judged on it; None for a workload without such a target. The bench runs a round again
/// once when they lie further apart.
pub fn drift_window(workload: &str) -> Option<f64> {
    if workload == BYSTANDER || workload == SYSCALL_BYSTANDER {
        Some(2.0 * BYSTANDER_TOLERANCE)
    } else if JUDGED_WORKLOADS.contains(&workload) {
        Some(2.0 * SLOWDOWN_TOLERANCE)
    } else {
        None
    }
}

/// A workload's untraced baseline, one run per round ([`baseline`]).
struct Baseline {
    /// None without untraced runs.
    row: Option<OverheadRow>,
    /// What each round's baseline is: [`AGAINST_BOTH_UNTRACED`] or [`AGAINST_UNTRACED`].
    pairing: &'static str,
    /// The rounds left out and why, to add to a figure; empty when none were.
    note: String,
}

/// `w`'s untraced baseline per round, for a target with this `tolerance`. Where a round
/// closes with an untraced run too ([`UNTRACED_AFTER`]), it is the mean of the two, so
/// that a machine that drifts during the round moves the baseline with it, and a tool's
/// place in the round (first after the untraced run, or last) does not favour it. A round
/// whose two untraced runs lie more than twice the tolerance apart has no baseline to
/// trust within the target's window: it is left out, and the note says so. Results from
/// before the closing run keep the first.
fn baseline(r: &BenchResults, w: &str, tolerance: f64) -> Baseline {
    let window = 2.0 * tolerance;
    let Some(first) = row(r, w, "untraced") else {
        return Baseline {
            row: None,
            pairing: AGAINST_UNTRACED,
            note: String::new(),
        };
    };
    let last = row(r, w, UNTRACED_AFTER);
    let mut bracketed = false;
    let mut left_out = Vec::new();
    let runs = first
        .runs
        .iter()
        .filter_map(|f| {
            let Some(l) = last.and_then(|l| {
                l.runs
                    .iter()
                    .find(|l| l.round == f.round && l.throughput > 0.0)
            }) else {
                return Some(f.clone());
            };
            bracketed = true;
            let apart = untraced_apart(f.throughput, l.throughput);
            if apart > window {
                left_out.push(format!("round {} ({apart:.1}%)", f.round));
                return None;
            }
            Some(RunSample {
                throughput: (f.throughput + l.throughput) / 2.0,
                ..f.clone()
            })
        })
        .collect();
    let note = if left_out.is_empty() {
        String::new()
    } else {
        format!(
            "; left out, their untraced runs (first and last) more than {window:.0}% apart: \
             {}",
            left_out.join(", ")
        )
    };
    Baseline {
        row: Some(OverheadRow {
            runs,
            ..first.clone()
        }),
        pairing: if bracketed {
            AGAINST_BOTH_UNTRACED
        } else {
            AGAINST_UNTRACED
        },
        note,
    }
}

fn row<'a>(r: &'a BenchResults, workload: &str, tool: &str) -> Option<&'a OverheadRow> {
    r.overhead
        .iter()
        .find(|o| o.workload == workload && o.tool == tool)
}

/// The BPF programs of a side-by-side run, one row each.
fn programs_table(s: &mut String, programs: &[ProgCost]) {
    let _ = writeln!(
        s,
        "| owner | program | runs | run time ms | ns/run |\n|---|---|---:|---:|---:|"
    );
    for p in programs {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.2} | {} |",
            p.owner,
            p.name,
            p.run_cnt,
            p.run_time_ns as f64 / 1e6,
            opt(p.ns_per_run, 0)
        );
    }
}

/// The start and stop targets of issue 14 (item 5), `beside` naming the load if any.
fn start_stop_checks(out: &mut Vec<TargetCheck>, ss: &StartStop, beside: &str) {
    let worst = |v: &[f64]| {
        v.iter()
            .copied()
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
    };
    let mut one = |what: &str, v: &[f64], limit: f64| {
        let w = worst(v);
        out.push(check(
            &format!("{what} {limit} s{beside}"),
            w.map_or("n/a".into(), |w| {
                let runs: Vec<String> = v.iter().map(|x| format!("{x:.3}")).collect();
                format!("[{}] s, worst {w:.3} s", runs.join(", "))
            }),
            w.map(|w| w <= limit),
        ));
    };
    one("`record -- true` wall: at most", &ss.record_true_s, 1.0);
    one("SIGTERM ends `serve` within", &ss.serve_sigterm_s, 1.0);
    out.push(
        PeerCheck {
            target: format!(
                "Ctrl-C in `record` gives the shell back (report printed) within 0.5 s{beside}"
            ),
            runs: &ss.record_sigint_s,
            peers: &ss.sigint_peer_s,
            peer_is: "a plain `sleep` sent SIGINT at the same moment was gone",
            held_is: "waited for the kernel to run it at all",
            limit: SIGINT_LIMIT_S,
            extra: ss
                .record_sigint_slow
                .iter()
                .map(|p| format!("; where {}", p.text()))
                .collect(),
            failed: 0,
            held_unfinished: 0,
        }
        .judge(),
    );
    out.push(top_quit_check(ss, beside));
    if let Some(w) = worst(&ss.new_session_true_s) {
        let runs: Vec<String> = ss
            .new_session_true_s
            .iter()
            .map(|x| format!("{x:.3}"))
            .collect();
        out.push(TargetCheck {
            target: format!(
                "peer: `setsid -w true`, any program in a new session (terminal){beside}"
            ),
            measured: format!("[{}] s, worst {w:.3} s", runs.join(", ")),
            status: "context".into(),
        });
    }
}

/// A stop target with a same-moment peer: `runs` against `limit` seconds; `peers[i]`
/// is how long a plain program took, at the same moment as run i, for the same step
/// (`None`: not within 60 s). A slow run whose peer was as slow is the kernel holding
/// every program alike, not lockscope: when that explains every slow run (lockscope's
/// time beyond the peer's within the limit) the verdict is inconclusive, with both
/// figures. `extra`: more of the measure (first screens, runs without one), `failed`:
/// runs that count as missed whatever their time.
struct PeerCheck<'a> {
    target: String,
    runs: &'a [f64],
    peers: &'a [Option<f64>],
    peer_is: &'a str,
    held_is: &'a str,
    limit: f64,
    extra: String,
    failed: u32,
    /// Runs that never ended within the bench's wait, but whose peer waited as long:
    /// slow, and held by the kernel like the slow runs the peer explains.
    held_unfinished: u32,
}

impl PeerCheck<'_> {
    fn judge(self) -> TargetCheck {
        let PeerCheck {
            target,
            runs,
            peers,
            peer_is,
            held_is,
            limit,
            extra,
            failed,
            held_unfinished,
        } = self;
        if runs.is_empty() && failed == 0 && held_unfinished == 0 {
            return check(&target, "n/a".into(), None);
        }
        let list = |v: &mut dyn Iterator<Item = String>| v.collect::<Vec<_>>().join(", ");
        let mut measured = format!(
            "[{}] s{extra}",
            list(&mut runs.iter().map(|x| format!("{x:.3}")))
        );
        if !peers.is_empty() {
            let mut shown = peers
                .iter()
                .map(|p| p.map_or_else(|| "over 60".to_owned(), |p| format!("{p:.3}")));
            measured += &format!("; {peer_is} after [{}] s", list(&mut shown));
        }
        let slow: Vec<usize> = (0..runs.len()).filter(|&i| runs[i] > limit).collect();
        let held = |i: usize| match peers.get(i) {
            // Not within 60 s: held at least that long.
            Some(p) => {
                let p = p.unwrap_or(60.0);
                p > limit && runs[i] - p <= limit
            }
            // No peer measured (an older result): nothing explains the wait.
            None => false,
        };
        if failed == 0 && (!slow.is_empty() || held_unfinished > 0) && slow.iter().all(|&i| held(i))
        {
            measured += &format!(
                "; every slow run {held_is} (the peer waited as long): lockscope's own part \
                 was within the limit"
            );
            return TargetCheck {
                target,
                measured,
                status: "inconclusive".into(),
            };
        }
        check(
            &target,
            measured,
            Some(failed == 0 && slow.is_empty() && held_unfinished == 0),
        )
    }
}

/// `q` in `top` within 0.5 s, against a key pressed on another terminal at the same
/// moment (the kernel hands every terminal's keys over in a worker thread).
fn top_quit_check(ss: &StartStop, beside: &str) -> TargetCheck {
    let none = ss.top_no_screen;
    let starts: Vec<String> = ss.top_start_s.iter().map(|x| format!("{x:.2}")).collect();
    // A run that never quit is the kernel's when the peer's key did not come in time to
    // explain lockscope's part either (it came within half a second of the wait's end, or
    // never).
    let wait = TOP_QUIT_WAIT_S;
    let held = |p: &Option<f64>| p.is_none_or(|p| p >= wait - 0.5);
    let unfinished = &ss.top_no_quit_peer_s;
    let held_unfinished = unfinished.iter().filter(|p| held(p)).count() as u32;
    let mut notes = String::new();
    if none > 0 {
        notes += &format!("; {none} run(s) drew no screen within 120 s");
    }
    if !unfinished.is_empty() {
        let peers: Vec<String> = unfinished
            .iter()
            .map(|p| p.map_or_else(|| format!("over {wait:.0}"), |p| format!("{p:.3}")))
            .collect();
        notes += &format!(
            "; {} run(s) had not exited {wait:.0} s after `q` (the plain reader's key came \
             after [{}] s)",
            unfinished.len(),
            peers.join(", ")
        );
    }
    PeerCheck {
        target: format!("`q` in `top` gives the shell back within 0.5 s{beside}"),
        runs: &ss.top_quit_s,
        peers: &ss.top_key_peer_s,
        peer_is: "a key pressed on another terminal at the same moment reached a plain reader",
        held_is: "waited for the kernel to deliver the key",
        limit: 0.5,
        extra: format!(" (first screen after [{}] s){notes}", starts.join(", ")),
        failed: none + unfinished.len() as u32 - held_unfinished,
        held_unfinished,
    }
    .judge()
}

/// The Ctrl-C target, seconds (issue 14): a slower stop is also profiled
/// (`stopprofile`).
pub const SIGINT_LIMIT_S: f64 = 0.5;

/// How long the bench waits for `top` to exit after `q` (`TOP_QUIT_LIMIT` in bench.rs).
pub const TOP_QUIT_WAIT_S: f64 = 180.0;

fn check(target: &str, measured: String, met: Option<bool>) -> TargetCheck {
    TargetCheck {
        target: target.to_string(),
        measured,
        status: match met {
            Some(true) => "met",
            Some(false) => "missed",
            None => "not measured",
        }
        .to_string(),
    }
}

/// Slowdowns in percent (positive: slower), one per round: `tool`'s run against `base`'s
/// run of the same round. The tools of one workload run within about half a minute of
/// each other, so a drift of the machine slower than that (seen here: minutes at half speed)
/// hits both sides of a pair alike, where it would spread the medians of whole rows apart.
fn paired_slowdowns(tool: &OverheadRow, base: &OverheadRow) -> Vec<f64> {
    by_round(tool, base).into_iter().map(|(_, s)| s).collect()
}

/// [`paired_slowdowns`] with the round of each.
fn by_round(tool: &OverheadRow, base: &OverheadRow) -> Vec<(usize, f64)> {
    tool.runs
        .iter()
        .filter_map(|t| {
            let b = base
                .runs
                .iter()
                .find(|b| b.round == t.round && b.throughput > 0.0)?;
            Some((t.round, (1.0 - t.throughput / b.throughput) * 100.0))
        })
        .collect()
}

fn min_max(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        })
}

/// A verdict from per-round outcomes: rounds that all agree decide it. When they do not,
/// and `values` (the per-round figures judged against a limit `tolerance` away from no
/// effect) lie within twice that tolerance of each other, the median decides
/// (`median_ok`). Otherwise, or with fewer than [`MIN_RUNS`] rounds, it is inconclusive
/// (`None`).
fn round_verdict(ok: &[bool], median_ok: bool, values: &[f64], tolerance: f64) -> Option<bool> {
    if ok.len() < MIN_RUNS {
        return None;
    }
    unanimous(ok).or_else(|| {
        let (lo, hi) = min_max(values);
        (hi - lo <= 2.0 * tolerance).then_some(median_ok)
    })
}

/// Rounds that all agree decide; otherwise, or with fewer than [`MIN_RUNS`] rounds,
/// inconclusive (`None`).
fn unanimous(ok: &[bool]) -> Option<bool> {
    if ok.len() < MIN_RUNS {
        return None;
    }
    if ok.iter().all(|&o| o) {
        Some(true)
    } else if ok.iter().all(|&o| !o) {
        Some(false)
    } else {
        None
    }
}

/// "16.2% (median of 5 rounds, each against its untraced run: 14.0 .. 27.0%)", where
/// `pairing` says what each round was set against.
fn describe_rounds(values: &[f64], pairing: &str) -> String {
    let Some(m) = super::parse::median(values) else {
        return "n/a".into();
    };
    let (lo, hi) = min_max(values);
    match values.len() {
        1 => format!("{m:.1}% (one round, {pairing})"),
        n => format!("{m:.1}% (median of {n} rounds, {pairing}: {lo:.1} .. {hi:.1}%)"),
    }
}

/// What each round of a slowdown is set against, in results whose rounds open with an
/// untraced run only (from before [`UNTRACED_AFTER`]).
const AGAINST_UNTRACED: &str = "each against the untraced run of its round";
/// What each round of a slowdown is set against where rounds open and close untraced.
const AGAINST_BOTH_UNTRACED: &str =
    "each against the mean of the untraced runs that open and close its round";
/// What each round of lockscope's own share is set against.
const AGAINST_FLOOR: &str = "each against the empty programs' run of its round";

fn status_of(verdict: Option<bool>) -> &'static str {
    match verdict {
        Some(true) => "met",
        Some(false) => "missed",
        None => "inconclusive",
    }
}

/// How a per-round check says its figure: as a slowdown (negative: faster), or as a
/// share of the speed it is set against; with what each round was set against.
#[derive(Clone, Copy)]
enum Wording {
    Slowdown(&'static str),
    Speed(&'static str),
}

/// A throughput target judged per round ([`paired_slowdowns`], [`round_verdict`]): the
/// first row of `rows` slower than the second by at most `max_slowdown_pct`. `note` is
/// added to the figure. Without both rows, or without a round that has both: not
/// measured, said so.
fn paired_check(
    target: &str,
    rows: Option<(&OverheadRow, &OverheadRow)>,
    max_slowdown_pct: f64,
    wording: Wording,
    note: &str,
) -> TargetCheck {
    let slow = rows.map_or_else(Vec::new, |(t, b)| paired_slowdowns(t, b));
    let Some(med) = super::parse::median(&slow) else {
        return check(target, "no round ran both".into(), None);
    };
    let ok: Vec<bool> = slow.iter().map(|&s| s <= max_slowdown_pct).collect();
    let v = round_verdict(&ok, med <= max_slowdown_pct, &slow, max_slowdown_pct);
    TargetCheck {
        target: target.to_string(),
        measured: format!(
            "{}{note}{}",
            rounds_figure(&slow, wording),
            inconclusive_note(v, Some(max_slowdown_pct))
        ),
        status: status_of(v).into(),
    }
}

/// Per-round slowdowns said as `wording` says them: "slowdown 16.2% (median of ...)" or
/// "97.0% (median of ...) of its speed".
fn rounds_figure(slow: &[f64], wording: Wording) -> String {
    match wording {
        Wording::Slowdown(pairing) => format!("slowdown {}", describe_rounds(slow, pairing)),
        Wording::Speed(pairing) => {
            let speeds: Vec<f64> = slow.iter().map(|s| 100.0 - s).collect();
            format!("{} of its speed", describe_rounds(&speeds, pairing))
        }
    }
}

/// `prefix`, `tool`'s figure against `base` per round ([`rounds_figure`]) and `suffix`,
/// for context beside a target; empty without both rows or a round they share.
fn rounds_note(
    rows: Option<(&OverheadRow, &OverheadRow)>,
    wording: Wording,
    prefix: &str,
    suffix: &str,
) -> String {
    let slow = rows.map_or_else(Vec::new, |(t, b)| paired_slowdowns(t, b));
    if slow.is_empty() {
        return String::new();
    }
    format!("{prefix}{}{suffix}", rounds_figure(&slow, wording))
}

/// Issue 14's overhead targets on one workload: `record` slows it at most 3%, and at
/// least 5x less than `perf lock record -a`; and, for where that cost lies, lockscope's
/// own share against empty programs on the futex probes' syscall tracepoints. Each judged from
/// per-round pairs ([`paired_slowdowns`]).
fn slowdown_checks(out: &mut Vec<TargetCheck>, r: &BenchResults, w: &str) {
    let b = baseline(r, w, SLOWDOWN_TOLERANCE);
    let base = b.row.as_ref();
    let record = row(r, w, "record");
    let floor_note = rounds_note(
        row(r, w, "syscall-floor").zip(base),
        Wording::Slowdown(b.pairing),
        "; empty programs on the futex probes' syscall tracepoints: ",
        "",
    );
    out.push(paired_check(
        &format!("`record` on {w}: at most 3% slowdown vs untraced"),
        record.zip(base),
        SLOWDOWN_TOLERANCE,
        Wording::Slowdown(b.pairing),
        &format!("{floor_note}{}", b.note),
    ));

    // record's slowdown and perf's, paired by round. A tracer that is not measurably
    // slower than untraced meets it whatever perf does; otherwise perf's slowdown must be
    // 5x larger. Two noisy slowdowns, one multiplied by 5: only rounds that all agree
    // decide it.
    let target = format!("`record` on {w}: at least 5x less slowdown than `perf lock record -a`");
    let pairs: Vec<(f64, f64)> = match (record, row(r, w, "perf"), base) {
        (Some(t), Some(p), Some(b)) => {
            let perf_rounds = by_round(p, b);
            by_round(t, b)
                .into_iter()
                .filter_map(|(round, rs)| {
                    let &(_, ps) = perf_rounds.iter().find(|(pr, _)| *pr == round)?;
                    Some((rs, ps))
                })
                .collect()
        }
        _ => Vec::new(),
    };
    if pairs.is_empty() {
        out.push(check(&target, "no round ran all three".into(), None));
    } else {
        let ok: Vec<bool> = pairs
            .iter()
            .map(|&(rs, ps)| rs <= 0.0 || ps >= 5.0 * rs)
            .collect();
        let v = unanimous(&ok);
        let (rec, perf): (Vec<f64>, Vec<f64>) = pairs.iter().copied().unzip();
        out.push(TargetCheck {
            target,
            measured: format!(
                "record slowdown {}, perf slowdown {}; {} of {} rounds met it{}{}",
                describe_rounds(&rec, b.pairing),
                describe_rounds(&perf, b.pairing),
                ok.iter().filter(|&&o| o).count(),
                ok.len(),
                b.note,
                inconclusive_note(v, None)
            ),
            status: status_of(v).into(),
        });
    }

    // The opt-in mode without syscall tracepoints, against the same target.
    out.push(paired_check(
        &format!(
            "`record --futex-mode blocking` on {w}: at most 3% slowdown vs untraced (opt-in: \
             user-space locks from the waits that sleep, no syscall tracepoint)"
        ),
        row(r, w, "record-blocking").zip(base),
        SLOWDOWN_TOLERANCE,
        Wording::Slowdown(b.pairing),
        &b.note,
    ));

    // lockscope's own share: record against the empty programs of the same round.
    out.push(paired_check(
        &format!(
            "`record` on {w}: at most 3% slowdown vs empty programs on the futex syscall \
             tracepoints (lockscope's own share)"
        ),
        record.zip(row(r, w, "syscall-floor")),
        SLOWDOWN_TOLERANCE,
        Wording::Slowdown(AGAINST_FLOOR),
        "",
    ));
}

/// What a per-round verdict's text adds when the rounds could not decide it; `tolerance`
/// when a median may decide rounds that disagree ([`round_verdict`]), None when only
/// agreeing rounds decide ([`unanimous`]).
fn inconclusive_note(v: Option<bool>, tolerance: Option<f64>) -> String {
    match (v, tolerance) {
        (Some(_), _) => String::new(),
        (None, Some(t)) => format!(
            " (fewer than {MIN_RUNS} rounds, or rounds that disagree and lie more than \
             {:.0} points apart: inconclusive)",
            2.0 * t
        ),
        (None, None) => {
            format!(" (fewer than {MIN_RUNS} rounds, or rounds that disagree: inconclusive)")
        }
    }
}

/// The tracers judged beside the bystanders: (tool, the command targets name it by,
/// whether the empty programs on the futex probes' syscall tracepoints are its floor; not for
/// blocking mode, which attaches none).
const BYSTANDER_TRACERS: [(&str, &str, bool); 3] = [
    ("record", "record", true),
    ("serve", "serve", true),
    ("record-blocking", "record --futex-mode blocking", false),
];

/// Judge issue 8's and 14's targets from the results.
pub fn judge_targets(r: &BenchResults) -> Vec<TargetCheck> {
    let mut out = Vec::new();
    for w in JUDGED_WORKLOADS {
        slowdown_checks(&mut out, r, w);
    }
    // The same loop as the command `record` traces: no lock call of it blocks, so no
    // probe may run in it either.
    let b = baseline(r, BYSTANDER, TRACED_TOLERANCE);
    out.push(paired_check(
        "an uncontended pthread loop in the process `record` traces (`record -- <loop>`): at \
         least 95% of its bare speed",
        row(r, BYSTANDER, "record-command").zip(b.row.as_ref()),
        TRACED_TOLERANCE,
        Wording::Speed(b.pairing),
        &b.note,
    ));
    // An uncontended pthread loop in a process no tracer targets: nothing may touch it.
    // Empty programs cannot touch it either: what they cost it in the same rounds is the
    // bench's own noise.
    let b = baseline(r, BYSTANDER, BYSTANDER_TOLERANCE);
    let base = b.row.as_ref();
    let floor_note = rounds_note(
        row(r, BYSTANDER, "syscall-floor").zip(base),
        Wording::Speed(b.pairing),
        "; empty programs on the futex probes' syscall tracepoints, which no lock call reaches: ",
        "",
    );
    for &(tool, shown, has_floor) in &BYSTANDER_TRACERS {
        let floor_note = if has_floor { floor_note.as_str() } else { "" };
        out.push(paired_check(
            &format!(
                "`{shown}` beside an uncontended pthread loop: at least 98% of its bare speed"
            ),
            row(r, BYSTANDER, tool).zip(base),
            BYSTANDER_TOLERANCE,
            Wording::Speed(b.pairing),
            &format!("{floor_note}{}", b.note),
        ));
    }
    // The same for a loop of system calls that touch no lock. Any attached syscall
    // tracepoint sends every system call through the kernel's traced path: the floor
    // (empty programs on the same tracepoints) says what of the slowdown is that.
    let floor = row(r, SYSCALL_BYSTANDER, "syscall-floor");
    let b = baseline(r, SYSCALL_BYSTANDER, BYSTANDER_TOLERANCE);
    let base = b.row.as_ref();
    let floor_note = rounds_note(
        floor.zip(base),
        Wording::Speed(b.pairing),
        "; empty programs on the same syscall tracepoints: ",
        " (the kernel's traced syscall path, paid by any tracer of futex calls)",
    );
    for &(tool, shown, has_floor) in &BYSTANDER_TRACERS {
        let t = row(r, SYSCALL_BYSTANDER, tool);
        let floor_note = if has_floor { floor_note.as_str() } else { "" };
        out.push(paired_check(
            &format!("`{shown}` beside a loop of system calls: at least 98% of its bare speed"),
            t.zip(base),
            BYSTANDER_TOLERANCE,
            Wording::Speed(b.pairing),
            &format!("{floor_note}{}", b.note),
        ));
        // lockscope's own share: against the floor, not against bare. Results from before
        // the floor was measured have no such check.
        if floor.is_some() && has_floor {
            out.push(paired_check(
                &format!(
                    "`{tool}` beside a loop of system calls: at least 98% of its speed beside \
                     empty programs on the same syscall tracepoints (lockscope's own share)"
                ),
                t.zip(floor),
                BYSTANDER_TOLERANCE,
                Wording::Speed(AGAINST_FLOOR),
                "; a loop started after the tracer's start-up: one already running when \
                 lockscope starts may pay more, see docs/development.md",
            ));
        }
    }
    if let Some(rt) = &r.realtime {
        let bare = rt.bare_max_us.iter().max().copied();
        let traced = rt.traced_max_us.iter().max().copied();
        let limit = bare.map(|b| (3 * b).max(5000));
        let verdict = limit.map(|l| rt.verdict(l));
        let mut c = check(
            "cyclictest's worst max under `record -a --latency-threshold` within max(3x the worst \
             bare run, 5 ms)",
            match (bare, traced, limit) {
                (Some(b), Some(t), Some(l)) => {
                    let mut text = format!(
                        "bare {:?} us, traced {:?} us: worst {t} us against {l} us (worst bare \
                         {b})",
                        rt.bare_max_us, rt.traced_max_us
                    );
                    if !rt.traced_worst_split.is_empty() {
                        let _ = write!(
                            text,
                            "; the largest spike lockscope timed in each traced run: {}",
                            rt.splits_text()
                        );
                    }
                    let steal = rt.steal_text();
                    if !steal.is_empty() {
                        let _ = write!(text, "; CPU time the host took (steal): {steal}");
                    }
                    if verdict == Some(Verdict::Host) {
                        text.push_str(
                            "; every run over the limit lost at least its excess to the host \
                             on one CPU at once: the host, not the tracer, may have made it",
                        );
                    }
                    text
                }
                _ => "n/a".into(),
            },
            verdict.and_then(|v| match v {
                Verdict::Met => Some(true),
                Verdict::Missed => Some(false),
                Verdict::Host => None,
            }),
        );
        if verdict == Some(Verdict::Host) {
            c.status = "inconclusive".into();
        }
        out.push(c);
    }
    if let Some(ss) = &r.start_stop {
        start_stop_checks(&mut out, ss, "");
        if let Some(p) = &ss.under_ptrace_stress {
            start_stop_checks(&mut out, p, ", beside `stress-ng --ptrace 4`");
        }
    }
    if let Some(m) = &r.memcached {
        let (beside, traced) = m.ratios();
        let show = |v: &[f64], x: Option<f64>| {
            format!(
                "{:?} s against bare {:?} s: {}",
                v,
                m.bare_s,
                x.map_or("n/a".into(), |x| format!("{x:.2}x"))
            )
        };
        out.push(check(
            "memcached under memcslap beside `record -- <another command>`: within 1.15x of bare",
            show(&m.beside_s, beside),
            beside.map(|x| x <= 1.15),
        ));
        out.push(check(
            "memcached under memcslap while `record -p <memcached>` traces it: within 1.5x of bare",
            show(&m.traced_s, traced),
            traced.map(|x| x <= 1.5),
        ));
    }
    let cost = r.cost.as_ref();
    let ratio = cost.and_then(|c| c.ratio_to_floor);
    out.push(check(
        "cost per contention event within 3x of an empty tracepoint program",
        match cost {
            Some(c) => format!(
                "begin {} ns, end {} ns, floor {} ns: {}",
                opt(c.begin_ns, 0),
                opt(c.end_ns, 0),
                opt(c.floor_ns, 0),
                ratio.map_or("n/a".into(), |x| format!("{x:.2}x"))
            ),
            None => "n/a".into(),
        },
        ratio.map(|x| x <= 3.0),
    ));
    let peer = cost.and_then(|c| c.ratio_to_peer);
    out.push(check(
        "`contention_begin` + `contention_end` at most 1.5x the minimal bpftrace peer (issue 14)",
        match cost {
            Some(c) if peer.is_some() => format!(
                "lockscope {} + {} ns, peer {} + {} ns: {}{}",
                opt(c.begin_ns, 0),
                opt(c.end_ns, 0),
                opt(c.peer_begin_ns, 0),
                opt(c.peer_end_ns, 0),
                peer.map_or("n/a".into(), |x| format!("{x:.2}x")),
                by_order(&c.ratio_to_peer_by_order, "the peer"),
            ),
            _ => "n/a".into(),
        },
        peer.map(|x| x <= 1.5),
    ));
    let futex_row = |f: Option<&FutexCost>| {
        let ratio = f.and_then(FutexCost::ratio);
        match f {
            Some(f) if ratio.is_some() => format!(
                "lockscope {} + {} ns, empty {} + {} ns over {} {}: {}{}",
                opt(f.enter_ns, 0),
                opt(f.exit_ns, 0),
                opt(f.floor_enter_ns, 0),
                opt(f.floor_exit_ns, 0),
                f.calls,
                if f.raw {
                    "system calls (raw sys_enter/sys_exit)"
                } else {
                    "calls"
                },
                ratio.map_or("n/a".into(), |x| format!("{x:.2}x")),
                by_order(&f.ratio_by_order, "the empty programs"),
            ),
            _ => "n/a".into(),
        }
    };
    let nonblocking = cost.and_then(|c| c.futex_nonblocking.as_ref());
    out.push(check(
        "futex probes: enter + exit per futex call that does not block at most 2x empty \
         programs on the same tracepoints (issue 14; `FUTEX_WAKE` on a word no one waits on)",
        futex_row(nonblocking),
        nonblocking.and_then(FutexCost::ratio).map(|x| x <= 2.0),
    ));
    let fut = cost.and_then(|c| c.futex.as_ref());
    out.push(TargetCheck {
        target: "futex probes over every call of a contended futex mutex, waits included \
                 (their clock reads and pthread attribution)"
            .to_string(),
        measured: futex_row(fut),
        status: if fut.and_then(FutexCost::ratio).is_some() {
            "for reference"
        } else {
            "not measured"
        }
        .to_string(),
    });
    let blocking = cost.and_then(|c| c.futex_blocking.as_ref());
    out.push(TargetCheck {
        target: "`--futex-mode blocking`: its program on every context switch (sched_switch), \
                 against an empty one on the same event (a futex call that does not sleep \
                 reaches no probe)"
            .to_string(),
        measured: match blocking.and_then(|b| b.ratio().map(|x| (b, x))) {
            Some((b, x)) => format!(
                "lockscope {} ns, empty {} ns per switch over {} switches: {x:.2}x{}",
                opt(b.ns, 0),
                opt(b.floor_ns, 0),
                b.switches,
                by_order(&b.ratio_by_order, "the empty program"),
            ),
            None => "n/a".into(),
        },
        status: if blocking.and_then(SwitchCost::ratio).is_some() {
            "for reference"
        } else {
            "not measured"
        }
        .to_string(),
    });
    let d = r
        .daemon
        .iter()
        .find(|d| d.name == "10k-locks" && d.status == "measured");
    out.push(check(
        "daemon at 1 s: < 1% of one CPU and < 64 MiB RSS with 10,000 contended locks",
        match (d, r.daemon.iter().find(|d| d.name == "10k-locks")) {
            (Some(d), _) => format!(
                "{:.2}% CPU, {:.1} MiB RSS",
                d.cpu_pct.unwrap_or(f64::NAN),
                d.rss_kib.unwrap_or(0) as f64 / 1024.0
            ),
            (None, Some(s)) => format!("skipped: {}", s.reason),
            (None, None) => "n/a".into(),
        },
        d.map(|d| d.cpu_pct.is_some_and(|c| c < 1.0) && d.rss_kib.is_some_and(|k| k < 64 * 1024)),
    ));
    let cap = r.capacity.as_ref();
    let two = cap.and_then(|c| {
        c.steps.iter().find(|s| {
            s.workload == "mmap-churn" && s.args.windows(2).any(|a| a == ["--threads", "2"])
        })
    });
    out.push(check(
        "zero lost events at the rate of mmap-churn with 2 threads",
        two.map_or("n/a".into(), |s| {
            format!("{} events/s, {} lost", fmt_si(s.events_per_s), s.lost)
        }),
        two.map(|s| s.lost == 0),
    ));
    let exact: Vec<&CapacityStep> = cap
        .map(|c| c.steps.iter().filter(|s| s.exact.is_some()).collect())
        .unwrap_or_default();
    // Counts must be exact with or without loss; whether *loss* is counted exactly can
    // only be judged from a step that lost something.
    let lossy = exact.iter().filter(|s| s.lost > 0).count();
    let all_exact = exact.iter().all(|s| s.exact == Some(true));
    out.push(check(
        "loss beyond capacity counted exactly (workload's own futex calls = seen + lost)",
        if exact.is_empty() {
            "n/a".into()
        } else if lossy == 0 {
            format!(
                "no step lost an event, so loss counting was not exercised; {}/{} futex-mutex \
                 steps had seen == truth",
                exact.iter().filter(|s| s.exact == Some(true)).count(),
                exact.len()
            )
        } else {
            format!(
                "{}/{} futex-mutex steps exact, {lossy} of them with loss",
                exact.iter().filter(|s| s.exact == Some(true)).count(),
                exact.len()
            )
        },
        if exact.is_empty() {
            None
        } else if !all_exact {
            Some(false)
        } else if lossy == 0 {
            None
        } else {
            Some(true)
        },
    ));
    let soak = r.soak.as_ref();
    out.push(check(
        "serve soak under mmap-churn: RSS at end within 10% of start",
        soak.map_or("not run (`cargo xtask bench --soak`)".into(), |s| {
            format!(
                "{:.0} min: {:.1} -> {:.1} MiB ({:+.1}%)",
                s.minutes,
                s.rss_start_kib as f64 / 1024.0,
                s.rss_end_kib as f64 / 1024.0,
                s.change_pct
            )
        }),
        soak.map(|s| s.within_10pct),
    ));
    out
}

fn opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.decimals$}"))
}

fn mib(kib: Option<u64>) -> String {
    kib.map_or("n/a".into(), |k| format!("{:.1}", k as f64 / 1024.0))
}

const TOOL_LABELS: &[(&str, &str)] = &[
    ("untraced", "untraced"),
    (UNTRACED_AFTER, "untraced, again at the round's end"),
    ("record", "`lockscope record`"),
    (
        "record-command",
        "`lockscope record -- <the workload>` (traced itself)",
    ),
    ("serve", "`lockscope serve` (1 s, scraped 1/s)"),
    ("perf", "`perf lock record -a`"),
    ("bpftrace", "`bpftrace` histogram per lock"),
    (
        "syscall-floor",
        "`bpftrace`, empty programs on the futex probes' syscall tracepoints",
    ),
    (
        "record-blocking",
        "`lockscope record --futex-mode blocking` (no syscall tracepoint)",
    ),
];

fn tool_label(tool: &str) -> &str {
    TOOL_LABELS
        .iter()
        .find(|(t, _)| *t == tool)
        .map_or(tool, |(_, l)| l)
}

/// `BENCHMARKS.md`.
pub fn render_markdown(r: &BenchResults) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# lockscope benchmarks\n");
    let _ = writeln!(
        s,
        "Written by `cargo xtask bench` from `bench-results.json` (same directory); \
         regenerate with `cargo xtask bench` (20 to 30 minutes) and `cargo xtask bench \
         --soak` (10 minutes more). Every figure is measured, none is typed in.\n"
    );
    if let Some(m) = &r.machine {
        let _ = writeln!(s, "## Machine\n");
        let _ = writeln!(s, "| | |\n|---|---|");
        let _ = writeln!(s, "| CPU | {} |", m.cpu_model);
        let _ = writeln!(s, "| CPUs | {} |", m.cpus);
        let _ = writeln!(s, "| kernel | {} |", m.kernel);
        let _ = writeln!(s, "| date | {} |", m.date_utc);
        let _ = writeln!(s, "| load average at start | {} |", m.load_avg_at_start);
        if !m.load_avg_at_end.is_empty() {
            let _ = writeln!(
                s,
                "| load average after the overhead runs | {} |",
                m.load_avg_at_end
            );
        }
        if let Some(o) = m.other_cpu_share {
            let _ = writeln!(
                s,
                "| CPU used by other processes during the overhead runs | {:.1}% |",
                o * 100.0
            );
        }
        let _ = writeln!(s, "| lockscope | {} |\n", m.lockscope_version);
        if m.loaded {
            let _ = writeln!(
                s,
                "> **Measured on a loaded machine** (other processes used more than a quarter \
                 of the CPUs during the runs). Spreads are far larger than the \
                 effects being measured, so slowdown figures here mean little; slowdown \
                 targets whose rounds disagree by more than twice their tolerance are \
                 marked inconclusive. Re-run `cargo xtask bench` on a quiet machine.\n"
            );
        }
    }
    if let Some(c) = &r.config {
        let _ = writeln!(
            s,
            "Mode: {}; {} alternating run(s) per tool and workload (every round runs each \
             workload under every tool in turn: {}); the whole run took {}.\n",
            if c.quick { "`--quick`" } else { "full" },
            c.runs,
            c.tools.join(", "),
            super::parse::fmt_duration(c.elapsed_s)
        );
    }
    if !r.rounds_run_again.is_empty() {
        let again: Vec<String> = r
            .rounds_run_again
            .iter()
            .map(|a| format!("{} round {} ({:.1}%)", a.workload, a.round, a.apart_pct))
            .collect();
        let _ = writeln!(
            s,
            "Rounds run again, once each, because their opening and closing untraced runs lay \
             further apart than the workload's window ({:.0}% where a throughput target is \
             judged; {:.0}% beside the bystanders): {}. Their runs are in \
             `bench-results.json` (`rounds_run_again`), not in the figures below.\n",
            2.0 * SLOWDOWN_TOLERANCE,
            2.0 * BYSTANDER_TOLERANCE,
            again.join(", ")
        );
    }
    if !r.targets.is_empty() {
        let _ = writeln!(s, "## Targets (issues 8 and 14)\n");
        let _ = writeln!(
            s,
            "Throughput targets are judged per round: each traced run against the run it is \
             set against in the same round (a negative slowdown is faster). A round opens \
             and closes with an untraced run, and a traced run is set against their mean; a \
             round whose two lie further apart than twice the target's tolerance is left out, \
             said so. Every round agreeing decides; rounds that disagree decide by their median only when they lie \
             within twice the target's tolerance.\n"
        );
        let _ = writeln!(s, "| target | measured | status |\n|---|---|---|");
        for t in &r.targets {
            let _ = writeln!(s, "| {} | {} | **{}** |", t.target, t.measured, t.status);
        }
        let _ = writeln!(s);
    }
    if let Some(c) = &r.config {
        let _ = writeln!(s, "## Overhead per workload\n");
        let _ = writeln!(
            s,
            "Throughput is the workload's own ops/s (median of the runs; spread = (max - \
             min) / median). Ratio = median / untraced median. Events/s: \
             `lock:contention_begin` events the tool saw per second of tracing, \
             system-wide. CPU and peak RSS: the tool's own process over its whole life \
             (`wait4` rusage: start-up, tracing, writing its output). Lost: events the tool \
             reports it could not store (lockscope: its `lost` counters; perf: LOST \
             records; bpftrace does not report loss).\n"
        );
        for w in &c.workloads {
            let _ = writeln!(
                s,
                "### {}\n\n`lockscope workload {}`\n",
                w.name,
                w.args.join(" ")
            );
            if w.settle_s > 0.0 {
                let _ = writeln!(
                    s,
                    "Started {:.0} s after the tracer was ready: a bystander of a tracer \
                     already running, past the kernel grace period its start-up may end in \
                     (docs/development.md).\n",
                    w.settle_s
                );
            }
            let _ = writeln!(
                s,
                "| tool | ops/s median | min .. max | spread | ratio | events/s | CPU s | peak RSS MiB | lost |\n\
                 |---|---:|---:|---:|---:|---:|---:|---:|---:|"
            );
            for o in r.overhead.iter().filter(|o| o.workload == w.name) {
                let t = &o.throughput;
                let _ = writeln!(
                    s,
                    "| {} | {} | {} .. {} | {:.1}% | {} | {} | {} | {} | {} |",
                    tool_label(&o.tool),
                    fmt_si(t.median),
                    fmt_si(t.min),
                    fmt_si(t.max),
                    t.spread_pct,
                    o.ratio_to_untraced
                        .map_or("n/a".into(), |x| format!("{x:.3}")),
                    o.events_per_s.map_or("n/a".into(), fmt_si),
                    opt(o.cpu_s, 2),
                    mib(o.maxrss_kib),
                    o.lost.map_or("n/a".into(), |l| l.to_string()),
                );
            }
            for o in r.overhead.iter().filter(|o| o.workload == w.name) {
                let mut reasons = std::collections::BTreeMap::<&str, u64>::new();
                for run in &o.runs {
                    for (k, v) in &run.lost_by_reason {
                        *reasons.entry(k).or_default() += v;
                    }
                }
                if !reasons.is_empty() {
                    let list: Vec<String> =
                        reasons.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    let _ = writeln!(
                        s,
                        "\n{} lost, by reason (all runs): {}",
                        tool_label(&o.tool),
                        list.join(", ")
                    );
                }
            }
            let _ = writeln!(s);
        }
    }
    if let Some(c) = &r.cost {
        let _ = writeln!(s, "## Cost per event\n");
        let _ = writeln!(
            s,
            "`kernel.bpf_stats_enabled=1`; `lockscope record` (system-wide), an empty \
             `bpftrace -e 'tracepoint:lock:contention_begin {{}}'` (the floor) and the \
             minimal peer (bpftrace pairing begin and end per thread into a per-lock \
             histogram, no stacks: owner `peer`) attached together while \
             `lockscope workload {}` ran; run time and count of each program from \
             `/proc/PID/fdinfo` of its fd.{}\n",
            c.workload,
            if c.ratio_to_peer_by_order.len() == 2 {
                " Programs on one tracepoint run in the order they attached, and the first \
                 pays the cache misses the later ones then hit, so this ran twice: \
                 lockscope attached first, then last; the table sums both runs."
            } else {
                ""
            }
        );
        programs_table(&mut s, &c.programs);
        let _ = writeln!(
            s,
            "\ncontention_begin {} ns and contention_end {} ns per run against a floor of {} \
             ns: **{}** (target: within 3x). All of lockscope's programs together (including \
             those that run on every lock acquisition or futex call, not only on \
             contention): {} ns per `lock:contention_begin` event ({} events); its \
             userspace: {} ns of CPU per event.\n",
            opt(c.begin_ns, 0),
            opt(c.end_ns, 0),
            opt(c.floor_ns, 0),
            c.ratio_to_floor
                .map_or("n/a".into(), |x| format!("{x:.2}x")),
            opt(c.ns_per_contention_event, 0),
            c.contention_events,
            opt(c.user_cpu_ns_per_event, 0),
        );
        if let (Some(pb), Some(pe)) = (c.peer_begin_ns, c.peer_end_ns) {
            let _ = writeln!(
                s,
                "Against the minimal peer: lockscope {} + {} ns, peer {pb:.0} + {pe:.0} ns per \
                 wait: **{}**{} (target: at most 1.5x).\n",
                opt(c.begin_ns, 0),
                opt(c.end_ns, 0),
                c.ratio_to_peer.map_or("n/a".into(), |x| format!("{x:.2}x")),
                by_order(&c.ratio_to_peer_by_order, "the peer"),
            );
        }
        if c.futex.is_some() || c.futex_nonblocking.is_some() {
            let _ = writeln!(s, "### Futex probes\n");
        }
        for (f, what) in [
            (
                &c.futex_nonblocking,
                "Per futex call that does not block (the target: at most 2x)",
            ),
            (
                &c.futex,
                "Per futex call of a contended mutex, waits included (for reference)",
            ),
        ] {
            let Some(f) = f else { continue };
            let hooks = if f.raw {
                "the raw `sys_enter` / `sys_exit` tracepoints (owner `floor`; both sides run \
                 on every system call of the machine, so each figure is per system call, \
                 nearly all of them the workload's futex calls)"
            } else {
                "`syscalls:sys_enter_futex` / `sys_exit_futex` (owner `floor`)"
            };
            let _ = writeln!(
                s,
                "`lockscope record` (system-wide) and empty programs on {hooks} while \
                 `lockscope workload {}` ran.\n",
                f.workload
            );
            programs_table(&mut s, &f.programs);
            let _ = writeln!(
                s,
                "\n{what}: lockscope {} + {} ns, empty {} + {} ns: **{}**{}.\n",
                opt(f.enter_ns, 0),
                opt(f.exit_ns, 0),
                opt(f.floor_enter_ns, 0),
                opt(f.floor_exit_ns, 0),
                f.ratio().map_or("n/a".into(), |x| format!("{x:.2}x")),
                by_order(&f.ratio_by_order, "the empty programs"),
            );
        }
    }
    if let Some(b) = r.cost.as_ref().and_then(|c| c.futex_blocking.as_ref()) {
        let _ = writeln!(
            s,
            "### Futex probes, blocking mode\n\n`lockscope record --futex-mode blocking` \
             (system-wide) and an empty program on `sched:sched_switch` (owner `floor`) while \
             `lockscope workload {}` ran: no syscall tracepoint, one program on every \
             context switch, which stores a sleep in a futex wait and accounts it when the \
             sleeper runs again.\n",
            b.workload
        );
        programs_table(&mut s, &b.programs);
        let _ = writeln!(
            s,
            "\nPer context switch: lockscope {} ns, empty {} ns: **{}**{}.\n",
            opt(b.ns, 0),
            opt(b.floor_ns, 0),
            b.ratio().map_or("n/a".into(), |x| format!("{x:.2}x")),
            by_order(&b.ratio_by_order, "the empty program"),
        );
    }
    if let Some(c) = &r.capacity {
        let _ = writeln!(s, "## Capacity\n");
        let _ = writeln!(
            s,
            "`lockscope record -- lockscope workload ...` with more threads and shorter \
             critical sections. events/s = kernel contention events + futex calls traced, \
             per second. For futex-mutex, truth = FUTEX_WAIT + FUTEX_WAKE (or LOCK_PI + \
             UNLOCK_PI) calls the workload counted itself; seen = those lockscope recorded \
             on its lock; exact = seen + lost == truth.\n"
        );
        let _ = writeln!(
            s,
            "| workload | kernel events | futex calls | events/s | lost | truth | seen | exact |\n\
             |---|---:|---:|---:|---:|---:|---:|---|"
        );
        for st in &c.steps {
            let _ = writeln!(
                s,
                "| `{}` | {} | {} | {} | {} | {} | {} | {} |",
                st.args.join(" "),
                st.kernel_events,
                st.futex_calls,
                fmt_si(st.events_per_s),
                st.lost,
                st.truth.map_or("".into(), |v| v.to_string()),
                st.seen.map_or("".into(), |v| v.to_string()),
                st.exact.map_or("", |e| if e { "yes" } else { "**no**" }),
            );
        }
        let _ = writeln!(
            s,
            "\nHighest rate with zero loss: **{} events/s**. {}\n",
            fmt_si(c.max_zero_loss_events_per_s),
            c.note
        );
    }
    if let Some(m) = &r.memcached {
        let (beside, traced) = m.ratios();
        let med = |v: &[f64]| Spread::of(v).map_or("n/a".into(), |s| format!("{:.3}", s.median));
        let _ = writeln!(
            s,
            "## memcached\n\n`memcached -t {}` serving `memcslap {}` (memcslap's own `Time to \
             get`, seconds; alternating runs): alone, beside `lockscope record -- cat` (an \
             unrelated command), and while `lockscope record -p <memcached>` traces it.\n\n\
             | case | runs (s) | median (s) | vs bare |\n|---|---|---:|---:|\n\
             | bare | {:?} | {} | 1.00 |\n\
             | beside `record -- cat` | {:?} | {} | {} |\n\
             | `record -p memcached` | {:?} | {} | {} |\n\n\
             Waits the traced runs recorded on memcached's locks: {:?}.\n",
            m.server_threads,
            m.memcslap_args.join(" "),
            m.bare_s,
            med(&m.bare_s),
            m.beside_s,
            med(&m.beside_s),
            beside.map_or("n/a".into(), |x| format!("{x:.2}")),
            m.traced_s,
            med(&m.traced_s),
            traced.map_or("n/a".into(), |x| format!("{x:.2}")),
            m.traced_waits,
        );
    }
    if !r.daemon.is_empty() {
        let _ = writeln!(
            s,
            "## Daemon cost (`lockscope serve --interval 1s`, scraped every second)\n"
        );
        let _ = writeln!(
            s,
            "CPU % of one CPU and RSS of the serve process over a steady window (after a \
             warm-up): its threads' on-CPU time from /proc/PID/task/*/schedstat, RSS from \
             /proc/PID/status.\n"
        );
        let _ = writeln!(
            s,
            "| case | workload | CPU % | RSS MiB | peak RSS MiB | lock series | scrapes |\n\
             |---|---|---:|---:|---:|---:|---:|"
        );
        for d in &r.daemon {
            if d.status == "measured" {
                let _ = writeln!(
                    s,
                    "| {} | `{}` | {} | {} | {} | {} | {} ({} failed) |",
                    d.name,
                    d.workload_args.join(" "),
                    opt(d.cpu_pct, 2),
                    mib(d.rss_kib),
                    mib(d.hwm_kib),
                    d.lock_series,
                    d.scrapes,
                    d.scrape_failures
                );
            } else {
                let _ = writeln!(
                    s,
                    "| {} | `{}` | skipped: {} | | | | |",
                    d.name,
                    d.workload_args.join(" "),
                    d.reason
                );
            }
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "## Soak\n");
    match &r.soak {
        Some(k) => {
            let _ = writeln!(
                s,
                "`lockscope serve --interval 1s` for {:.0} minutes under `lockscope workload \
                 {}`{}, scraped every second ({} scrapes, {} failed), {}. RSS after a {:.0} s \
                 warm-up: {:.1} MiB; at the end: {:.1} MiB ({:+.1}%, {}: within 10%); highest during a \
                 map read: {:.1} MiB (RSS is the lowest of 20 samples over 2 s, i.e. between \
                 map reads, whose transient buffers are as large as the kernel maps). CPU: \
                 {:.2}% of one CPU.\n",
                k.minutes,
                k.workload_args.join(" "),
                if k.churn_processes > 0 {
                    format!(
                        ", beside {} short-lived processes run one after another (`lockscope \
                         workload {}`, each with its own mmap_lock, so new locks keep appearing)",
                        k.churn_processes,
                        k.churn_args.join(" ")
                    )
                } else {
                    String::new()
                },
                k.scrapes,
                k.scrape_failures,
                k.date_utc,
                k.warmup_s,
                k.rss_start_kib as f64 / 1024.0,
                k.rss_end_kib as f64 / 1024.0,
                k.change_pct,
                if k.within_10pct { "met" } else { "missed" },
                k.peak_kib as f64 / 1024.0,
                k.cpu_pct
            );
            let series: Vec<String> = k
                .samples
                .iter()
                .map(|(t, kib)| format!("{:.0}s {:.1}", t, *kib as f64 / 1024.0))
                .collect();
            let _ = writeln!(
                s,
                "`/api/snapshot` (every lock recorded since start, system-wide; callers and \
                 tasks only for the locks with the longest wait, as `[snapshot]` in the \
                 config sets) held {} locks and {} caller stacks after the warm-up, {} and {} \
                 at the end.\n",
                k.locks_start, k.callers_start, k.locks_end, k.callers_end
            );
            let _ = writeln!(s, "RSS (MiB) every 10 s: {}\n", series.join(", "));
        }
        None => {
            let _ = writeln!(
                s,
                "Not run yet: `cargo xtask bench --soak [--minutes 10]`.\n"
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_syscall_bystander_is_judged_against_bare_and_against_the_floor() {
        let mut r = with_rows(vec![
            row(SYSCALL_BYSTANDER, "untraced", 8.0e6, 8.0e6),
            row(SYSCALL_BYSTANDER, "record", 6.0e6, 8.0e6),
            row(SYSCALL_BYSTANDER, "serve", 5.0e6, 8.0e6),
            row(SYSCALL_BYSTANDER, "syscall-floor", 6.1e6, 8.0e6),
        ]);
        let checks = judge_targets(&r);
        let find = |tool: &str, what: &str| {
            checks
                .iter()
                .find(|c| c.target.starts_with(&format!("`{tool}`")) && c.target.contains(what))
                .unwrap_or_else(|| panic!("no {tool} {what} check in {checks:#?}"))
        };
        let bare = find("record", "system calls: at least 98% of its bare speed");
        assert_eq!(bare.status, "missed");
        assert!(
            bare.measured.starts_with("75.0% (median of 3 rounds"),
            "{}",
            bare.measured
        );
        assert!(
            bare.measured
                .contains("empty programs on the same syscall tracepoints: 76.2% (median"),
            "{}",
            bare.measured
        );
        // 6.0 against 6.1: 98.4% of the floor; 5.0 against 6.1: 82.0%.
        let own = find("record", "system calls: at least 98% of its speed beside");
        assert_eq!(own.status, "met", "{}", own.measured);
        assert!(own.measured.starts_with("98.4%"), "{}", own.measured);
        assert_eq!(
            find("serve", "system calls: at least 98% of its speed beside").status,
            "missed"
        );
        // Results without the floor (an older bench-results.json): no own-share check.
        r.overhead.pop();
        assert!(
            judge_targets(&r)
                .iter()
                .all(|c| !(c.target.contains("system calls") && c.target.contains("own share")))
        );
    }

    #[test]
    fn blocking_mode_is_judged_against_bare_and_not_against_the_syscall_floor() {
        let r = with_rows(vec![
            row(SYSCALL_BYSTANDER, "untraced", 8.0e6, 8.0e6),
            row(SYSCALL_BYSTANDER, "syscall-floor", 6.1e6, 8.0e6),
            row(SYSCALL_BYSTANDER, "record-blocking", 7.95e6, 8.0e6),
            row("mmap-churn", "untraced", 100.0, 100.0),
            row("mmap-churn", "record-blocking", 90.0, 100.0),
        ]);
        let checks = judge_targets(&r);
        let find = |what: &str| {
            checks
                .iter()
                .find(|c| {
                    c.target.starts_with("`record --futex-mode blocking`")
                        && c.target.contains(what)
                })
                .unwrap_or_else(|| panic!("no blocking-mode {what} check in {checks:#?}"))
        };
        let bare = find("system calls: at least 98% of its bare speed");
        assert_eq!(bare.status, "met", "{}", bare.measured);
        assert!(bare.measured.starts_with("99.4%"), "{}", bare.measured);
        assert!(
            !bare.measured.contains("empty programs"),
            "{}",
            bare.measured
        );
        assert!(
            !checks
                .iter()
                .any(|c| c.target.starts_with("`record --futex-mode blocking`")
                    && c.target.contains("own share")),
            "no syscall floor of its own: {checks:#?}"
        );
        let churn = find("on mmap-churn: at most 3% slowdown");
        assert_eq!(churn.status, "missed", "{}", churn.measured);
        assert!(
            churn.measured.starts_with("slowdown 10.0%"),
            "{}",
            churn.measured
        );
    }

    #[test]
    fn a_run_over_the_limit_is_the_hosts_only_if_it_lost_its_excess() {
        let rt = |traced: Vec<u64>, steal: Vec<Option<u64>>| RealTime {
            traced_max_us: traced,
            traced_steal_ms: steal,
            ..Default::default()
        };
        assert_eq!(
            rt(vec![1679, 1114], vec![Some(0), Some(0)]).verdict(5000),
            Verdict::Met
        );
        // 99.3 ms against 5 ms: 94.3 ms over; 100 ms stolen covers it, 90 ms does not.
        let host = rt(vec![1679, 99_315], vec![Some(0), Some(100)]);
        assert_eq!(host.verdict(5000), Verdict::Host);
        assert_eq!(
            rt(vec![1679, 99_315], vec![Some(0), Some(90)]).verdict(5000),
            Verdict::Missed
        );
        assert_eq!(rt(vec![99_315], vec![None]).verdict(5000), Verdict::Missed);
        assert_eq!(rt(vec![99_315], vec![]).verdict(5000), Verdict::Missed);
        let mut shown = host.clone();
        shown.bare_steal_ms = vec![Some(0), None];
        assert_eq!(shown.steal_text(), "bare [0, ?] ms, traced [0, 100] ms");
        // With the per-CPU window: 300 ms stolen over the run, but never more than 20 ms
        // on one CPU within 250 ms, cannot have made a 99 ms spike; 96 ms at once can.
        let mut thin = rt(vec![1679, 99_315], vec![Some(0), Some(300)]);
        thin.traced_steal_burst_ms = vec![Some(0), Some(20)];
        assert_eq!(thin.verdict(5000), Verdict::Missed);
        thin.traced_steal_burst_ms = vec![Some(0), Some(96)];
        assert_eq!(thin.verdict(5000), Verdict::Host);
        thin.bare_steal_burst_ms = vec![Some(10), Some(0)];
        assert_eq!(
            thin.steal_text(),
            "bare [] ms, traced [0, 300] ms in all; the most on one CPU within 250 ms: bare \
             [10, 0] ms, traced [0, 96] ms"
        );
        assert_eq!(RealTime::default().steal_text(), "");
    }

    #[test]
    fn the_largest_spike_and_its_split() {
        let rec = serde_json::json!({"latency_spikes": [
            {"latency_ns": 120_000, "timer_late_ns": 10_000, "cpu_idle": false},
            {"latency_ns": 8_074_000, "timer_late_ns": 8_021_500, "cpu_idle": true},
            {"latency_ns": 300_000}
        ]});
        let s = SpikeSplit::of_worst(&rec).unwrap();
        assert_eq!(
            s,
            SpikeSplit {
                latency_us: 8074,
                timer_late_us: 8021,
                cpu_idle: true
            }
        );
        assert_eq!(s.describe(), "8074 us: timer 8021 us late, cpu idle");
        // The largest has no split (a cyclictest spike lockscope did not time): the
        // largest that has one.
        let rec = serde_json::json!({"latency_spikes": [
            {"latency_ns": 120_000, "timer_late_ns": 10_000, "cpu_idle": false},
            {"latency_ns": 900_000}
        ]});
        assert_eq!(SpikeSplit::of_worst(&rec).unwrap().latency_us, 120);
        assert_eq!(
            SpikeSplit::of_worst(&serde_json::json!({"latency_spikes": [{"latency_ns": 1}]})),
            None
        );
        assert_eq!(SpikeSplit::of_worst(&serde_json::json!({})), None);
    }

    fn prog(owner: &str, name: &str, run_cnt: u64, run_time_ns: u64) -> ProgCost {
        ProgCost {
            owner: owner.into(),
            name: name.into(),
            run_cnt,
            run_time_ns,
            ns_per_run: Some(run_time_ns as f64 / run_cnt as f64),
        }
    }

    #[test]
    fn both_orders_merge_into_run_weighted_costs() {
        let first = [
            prog("lockscope", "contention_begi", 100, 60_000),
            prog("peer", "contention_begi", 100, 20_000),
        ];
        let last = [
            prog("lockscope", "contention_begi", 300, 90_000),
            prog("lockscope", "contention_end", 50, 5_000),
            prog("peer", "contention_begi", 300, 75_000),
        ];
        let m = merge_prog_costs(&[&first, &last]);
        let got: Vec<_> = m
            .iter()
            .map(|p| (p.owner.as_str(), p.name.as_str(), p.run_cnt, p.ns_per_run))
            .collect();
        assert_eq!(
            got,
            [
                ("lockscope", "contention_begi", 400, Some(375.0)),
                ("lockscope", "contention_end", 50, Some(100.0)),
                ("peer", "contention_begi", 400, Some(237.5)),
            ]
        );
        assert_eq!(
            by_order(&[Some(1.6), Some(1.3)], "the peer"),
            " (attached first: lockscope 1.60x, the peer 1.30x)"
        );
        assert_eq!(by_order(&[], "the peer"), "");
    }

    fn row(workload: &str, tool: &str, median: f64, untraced: f64) -> OverheadRow {
        OverheadRow {
            workload: workload.into(),
            tool: tool.into(),
            throughput: Spread::of(&[median, median, median]).unwrap(),
            ratio_to_untraced: Some(median / untraced),
            events_per_s: Some(1000.0),
            cpu_s: Some(0.5),
            maxrss_kib: Some(20480),
            lost: Some(0),
            runs: rounds(&[median, median, median]),
        }
    }

    /// Results holding only these overhead rows.
    fn with_rows(overhead: Vec<OverheadRow>) -> BenchResults {
        BenchResults {
            overhead,
            ..Default::default()
        }
    }

    /// One run per round, rounds numbered from 1.
    fn rounds(throughputs: &[f64]) -> Vec<RunSample> {
        throughputs
            .iter()
            .enumerate()
            .map(|(i, &t)| RunSample {
                round: i + 1,
                throughput: t,
                ..Default::default()
            })
            .collect()
    }

    fn sample() -> BenchResults {
        let mut r = BenchResults {
            schema: SCHEMA.into(),
            config: Some(Config {
                quick: false,
                runs: 5,
                workloads: vec![WorkloadSpec {
                    name: "mmap-churn".into(),
                    args: vec!["mmap-churn".into(), "--json".into()],
                    settle_s: 0.0,
                }],
                tools: vec![],
                elapsed_s: 600.0,
            }),
            ..Default::default()
        };
        r.overhead = vec![
            row("mmap-churn", "untraced", 100.0, 100.0),
            row("mmap-churn", "record", 98.0, 100.0),
            row("mmap-churn", "perf", 80.0, 100.0),
            row("futex-mutex", "untraced", 100.0, 100.0),
            row("futex-mutex", "record", 90.0, 100.0),
            row("futex-mutex", "perf", 70.0, 100.0),
        ];
        r
    }

    #[test]
    fn start_stop_targets_and_the_new_session_peer() {
        let ss = StartStop {
            record_true_s: vec![0.4, 0.8],
            serve_sigterm_s: vec![0.02],
            record_sigint_s: vec![0.6],
            top_quit_s: vec![0.07],
            top_start_s: vec![0.5],
            new_session_true_s: vec![0.004, 41.5],
            ..Default::default()
        };
        let mut out = Vec::new();
        start_stop_checks(&mut out, &ss, ", beside load");
        let status: Vec<(&str, &str)> = out
            .iter()
            .map(|c| (c.target.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(status.len(), 5, "{status:?}");
        assert_eq!(status[0].1, "met");
        assert_eq!(status[2].1, "missed", "Ctrl-C took 0.6 s");
        assert_eq!(status[3].1, "met");
        assert!(status[4].0.starts_with("peer: `setsid -w true`"));
        assert!(status[4].0.ends_with(", beside load"));
        assert_eq!(status[4].1, "context");
        assert!(
            out[4].measured.contains("worst 41.500 s"),
            "{}",
            out[4].measured
        );
        // No screen is a missed target however fast the other runs quit; no peer, no row.
        let ss = StartStop {
            top_quit_s: vec![0.07],
            top_no_screen: 1,
            ..Default::default()
        };
        let mut out = Vec::new();
        start_stop_checks(&mut out, &ss, "");
        assert_eq!(out.len(), 4);
        assert_eq!(out[3].status, "missed");
        assert!(out[3].measured.contains("1 run(s) drew no screen"));
    }

    #[test]
    fn a_slow_quit_is_inconclusive_only_when_the_peer_key_waited_as_long() {
        let quit = |quit: Vec<f64>, peer: Vec<Option<f64>>| {
            let ss = StartStop {
                top_start_s: vec![0.5; quit.len()],
                top_quit_s: quit,
                top_key_peer_s: peer,
                ..Default::default()
            };
            top_quit_check(&ss, "")
        };
        // The kernel held both keys for 45 s: not lockscope's time.
        let c = quit(vec![0.07, 45.1], vec![Some(0.001), Some(44.9)]);
        assert_eq!(c.status, "inconclusive", "{}", c.measured);
        assert!(c.measured.contains("[0.001, 44.900] s"), "{}", c.measured);
        // A key never delivered within 60 s counts as held that long.
        assert_eq!(quit(vec![60.2], vec![None]).status, "inconclusive");
        // The peer had its key at once, or lockscope took 0.6 s beyond it: missed.
        assert_eq!(
            quit(vec![0.07, 3.0], vec![Some(0.001), Some(0.002)]).status,
            "missed"
        );
        assert_eq!(quit(vec![3.0], vec![Some(2.4)]).status, "missed");
        // Fast runs are met whatever the peer did; without a peer, slow is missed.
        assert_eq!(quit(vec![0.1], vec![Some(9.0)]).status, "met");
        assert_eq!(quit(vec![3.0], vec![]).status, "missed");
        // A run that never quit: the kernel's when the peer's key had not come either.
        let unfinished = |peer: Option<f64>| {
            let ss = StartStop {
                top_start_s: vec![0.5, 0.5],
                top_quit_s: vec![0.07],
                top_key_peer_s: vec![Some(0.001)],
                top_no_quit_peer_s: vec![peer],
                ..Default::default()
            };
            top_quit_check(&ss, "")
        };
        let c = unfinished(None);
        assert_eq!(c.status, "inconclusive", "{}", c.measured);
        assert!(
            c.measured
                .contains("1 run(s) had not exited 180 s after `q` (the plain reader's key came after [over 180] s)"),
            "{}",
            c.measured
        );
        assert_eq!(unfinished(Some(179.8)).status, "inconclusive");
        assert_eq!(unfinished(Some(0.002)).status, "missed");
        // Ctrl-C has its own peer: a plain sleep interrupted at the same moment.
        let ss = StartStop {
            record_sigint_s: vec![0.1, 4.6],
            sigint_peer_s: vec![Some(0.01), Some(4.5)],
            record_sigint_slow: vec![super::super::stopprofile::StopProfile {
                run: 1,
                seconds: 4.6,
                looks: 300,
                on_cpu_s: 0.1,
                runnable_s: 4.4,
                main_thread: vec![("R".into(), 290)],
                other_d: Vec::new(),
            }],
            ..Default::default()
        };
        let mut out = Vec::new();
        start_stop_checks(&mut out, &ss, "");
        let c = out.iter().find(|c| c.target.starts_with("Ctrl-C")).unwrap();
        assert_eq!(c.status, "inconclusive", "{}", c.measured);
        assert!(c.measured.contains("plain `sleep`"), "{}", c.measured);
        // The slow run says where it went.
        assert!(
            c.measured.contains(
                "; where run 2 (4.600 s, 300 looks): on a CPU 0.100 s and runnable waiting \
                 for one 4.400 s"
            ),
            "{}",
            c.measured
        );
    }

    #[test]
    fn slowdown_targets() {
        let t = judge_targets(&sample());
        let status = |prefix: &str| {
            t.iter()
                .find(|c| c.target.starts_with(prefix))
                .unwrap()
                .status
                .clone()
        };
        // mmap-churn: 2% slowdown (met), perf 20% >= 5 * 2% (met).
        assert_eq!(status("`record` on mmap-churn: at most"), "met");
        assert_eq!(status("`record` on mmap-churn: at least 5x"), "met");
        // futex-mutex: 10% (missed), perf 30% < 50% (missed).
        assert_eq!(status("`record` on futex-mutex: at most"), "missed");
        assert_eq!(status("`record` on futex-mutex: at least 5x"), "missed");
        // Nothing measured for the rest: said so, not guessed.
        assert_eq!(status("cost per contention event"), "not measured");
        assert_eq!(status("serve soak"), "not measured");
    }

    #[test]
    fn rounds_that_disagree_widely_are_inconclusive() {
        let mut r = sample();
        // record against untraced per round: 1%, 25%, 12% slower: mixed, 24 points apart.
        r.overhead[1].runs = rounds(&[99.0, 75.0, 88.0]);
        let t = judge_targets(&r);
        let get = |p: &str| t.iter().find(|c| c.target.starts_with(p)).unwrap();
        let c = get("`record` on mmap-churn: at most");
        assert_eq!(c.status, "inconclusive");
        assert!(c.measured.contains("inconclusive"), "{}", c.measured);
        assert!(
            c.measured
                .contains("12.0% (median of 3 rounds, each against the untraced run of its round: 1.0 .. 25.0%)"),
            "{}",
            c.measured
        );
        // One round (--quick): inconclusive too.
        let mut one = sample();
        one.overhead[4].runs = rounds(&[90.0]);
        let t1 = judge_targets(&one);
        let c1 = t1
            .iter()
            .find(|c| c.target.starts_with("`record` on futex-mutex: at most"))
            .unwrap();
        assert_eq!(c1.status, "inconclusive");
        assert!(
            c1.measured.contains("(one round, each against"),
            "{}",
            c1.measured
        );
        // futex-mutex rounds agree: still judged.
        assert_eq!(get("`record` on futex-mutex: at most").status, "missed");
    }

    #[test]
    fn rounds_judge_against_their_own_untraced_run() {
        let mut r = sample();
        // The machine ran at half speed in round 2, for every tool alike: the medians of
        // whole rows spread 50%, yet each round says record costs 2%.
        r.overhead[0].runs = rounds(&[100.0, 50.0, 100.0]);
        r.overhead[1].runs = rounds(&[98.0, 49.0, 98.0]);
        r.overhead[2].runs = rounds(&[80.0, 40.0, 80.0]);
        let t = judge_targets(&r);
        let get = |p: &str| t.iter().find(|c| c.target.starts_with(p)).unwrap();
        assert_eq!(get("`record` on mmap-churn: at most").status, "met");
        assert_eq!(get("`record` on mmap-churn: at least 5x").status, "met");
        // Every round slower by more than 3%, however far apart: missed, not inconclusive.
        r.overhead[1].runs = rounds(&[90.0, 30.0, 80.0]);
        let t = judge_targets(&r);
        let get = |p: &str| t.iter().find(|c| c.target.starts_with(p)).unwrap();
        assert_eq!(get("`record` on mmap-churn: at most").status, "missed");
        // A run whose round has no untraced run is left out, not paired with another.
        r.overhead[1].runs.push(RunSample {
            round: 9,
            throughput: 1.0,
            ..Default::default()
        });
        let t = judge_targets(&r);
        let c = t
            .iter()
            .find(|c| c.target.starts_with("`record` on mmap-churn: at most"))
            .unwrap();
        assert!(c.measured.contains("median of 3 rounds"), "{}", c.measured);
    }

    #[test]
    fn a_round_is_set_against_the_untraced_runs_that_open_and_close_it() {
        // The machine slowed 3% over every round: set against the run that opens it
        // alone, a tracer at 97 would be at 97% (missed); against the mean of both ends,
        // 98.5% (met).
        let mut r = with_rows(vec![
            row(BYSTANDER, "untraced", 100.0, 100.0),
            row(BYSTANDER, "record", 97.0, 100.0),
            row(BYSTANDER, "serve", 97.0, 100.0),
            row(BYSTANDER, UNTRACED_AFTER, 97.0, 100.0),
        ]);
        let beside = "`record` beside an uncontended pthread loop";
        let find = |r: &BenchResults| {
            judge_targets(r)
                .into_iter()
                .find(|c| c.target.starts_with(beside))
                .unwrap()
        };
        let c = find(&r);
        assert_eq!(c.status, "met", "{}", c.measured);
        assert!(c.measured.contains(AGAINST_BOTH_UNTRACED), "{}", c.measured);
        assert!(!c.measured.contains("left out"), "{}", c.measured);
        // Results from before the closing run: the opening run alone.
        let without: Vec<OverheadRow> = r
            .overhead
            .iter()
            .filter(|o| o.tool != UNTRACED_AFTER)
            .cloned()
            .collect();
        let c = find(&with_rows(without));
        assert_eq!(c.status, "missed", "{}", c.measured);
        assert!(c.measured.contains(AGAINST_UNTRACED), "{}", c.measured);
        // A round whose untraced runs lie 22% apart has no baseline within the target's
        // window: left out, and said so; two rounds left cannot decide.
        r.overhead[3].runs[1].throughput = 80.0;
        let c = find(&r);
        assert_eq!(c.status, "inconclusive", "{}", c.measured);
        assert!(c.measured.contains("median of 2 rounds"), "{}", c.measured);
        assert!(
            c.measured.contains("more than 4% apart: round 2 (22.2%)"),
            "{}",
            c.measured
        );
    }

    #[test]
    fn rounds_run_again_are_named_and_kept_apart() {
        assert!((untraced_apart(5.2, 3.1) - 50.6).abs() < 0.1);
        assert_eq!(untraced_apart(0.0, 0.0), f64::INFINITY);
        assert_eq!(drift_window(BYSTANDER), Some(4.0));
        assert_eq!(drift_window("mmap-churn"), Some(6.0));
        // No throughput target on it: nothing to run again for.
        assert_eq!(drift_window("futex-mutex --pi"), None);
        let mut r = sample();
        let runs_before = r.overhead[0].runs.len();
        r.rounds_run_again.push(RoundRunAgain {
            workload: "mmap-churn".into(),
            round: 2,
            apart_pct: 50.6,
            runs: vec![("untraced".into(), RunSample::default())],
        });
        let md = render_markdown(&r);
        assert!(md.contains("Rounds run again"), "{md}");
        assert!(md.contains("mmap-churn round 2 (50.6%)"), "{md}");
        // Through the JSON and back, and not among the judged runs.
        let back: BenchResults = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back.rounds_run_again.len(), 1);
        assert_eq!(back.overhead[0].runs.len(), runs_before);
    }

    #[test]
    fn the_loop_record_traces_is_judged_against_its_untraced_rounds() {
        let mut r = with_rows(vec![
            row(BYSTANDER, "untraced", 100.0, 100.0),
            row(BYSTANDER, "record-command", 99.0, 100.0),
        ]);
        r.overhead[1].runs = rounds(&[99.0, 101.0, 97.0]);
        let get = |r: &BenchResults| {
            judge_targets(r)
                .into_iter()
                .find(|c| c.target.contains("in the process `record` traces"))
                .expect("a check of the traced loop")
        };
        let c = get(&r);
        assert_eq!(c.status, "met", "{}", c.measured);
        assert!(
            c.measured.starts_with("99.0% (median of 3 rounds"),
            "{}",
            c.measured
        );
        // Every round under 95%: missed.
        r.overhead[1].runs = rounds(&[90.0, 93.0, 80.0]);
        assert_eq!(get(&r).status, "missed");
    }

    #[test]
    fn five_times_perf_needs_every_round_and_windows_follow_the_tolerance() {
        let mut r = sample();
        // record 2% slower in every round; perf 20%, 5%, 20%: one round misses 5x.
        r.overhead[2].runs = rounds(&[80.0, 95.0, 80.0]);
        let t = judge_targets(&r);
        let c = t
            .iter()
            .find(|c| c.target.starts_with("`record` on mmap-churn: at least 5x"))
            .unwrap();
        assert_eq!(c.status, "inconclusive", "{}", c.measured);
        assert!(
            c.measured.contains("2 of 3 rounds met it"),
            "{}",
            c.measured
        );
        // A 2% target: rounds 1.0, 3.5, 1.0% slower disagree within 4 points: the median
        // (1.0%) decides. Rounds 1, 7, 1: 6 points apart, inconclusive.
        let bystander = |speeds: &[f64]| {
            let mut r = with_rows(vec![
                row(BYSTANDER, "untraced", 100.0, 100.0),
                row(BYSTANDER, "serve", 100.0, 100.0),
            ]);
            r.overhead[1].runs = rounds(speeds);
            judge_targets(&r)
                .into_iter()
                .find(|c| {
                    c.target
                        .starts_with("`serve` beside an uncontended pthread loop")
                })
                .unwrap()
                .status
        };
        assert_eq!(bystander(&[99.0, 96.5, 99.0]), "met");
        assert_eq!(bystander(&[99.0, 93.0, 99.0]), "inconclusive");
        assert_eq!(bystander(&[97.0, 96.0, 97.5]), "missed");
    }

    #[test]
    fn own_share_against_the_empty_programs_of_the_same_round() {
        let mut r = sample();
        r.overhead
            .push(row("mmap-churn", "syscall-floor", 82.0, 100.0));
        r.overhead[1].runs = rounds(&[81.0, 80.0, 82.0]);
        let t = judge_targets(&r);
        let get = |p: &str| t.iter().find(|c| c.target.starts_with(p)).unwrap();
        // 19% against untraced (missed), of which the empty programs are 18%: lockscope's
        // own share 1.2% .. 2.4%: met.
        assert_eq!(
            get("`record` on mmap-churn: at most 3% slowdown vs untraced").status,
            "missed"
        );
        let at = get("`record` on mmap-churn: at most 3% slowdown vs untraced");
        assert!(
            at.measured.contains(
                "empty programs on the futex probes' syscall tracepoints: slowdown 18.0% (median"
            ),
            "{}",
            at.measured
        );
        let own = get("`record` on mmap-churn: at most 3% slowdown vs empty programs");
        assert_eq!(own.status, "met", "{}", own.measured);
        assert!(
            own.measured
                .starts_with("slowdown 1.2% (median of 3 rounds, each against the empty programs' run of its round: 0.0 .. 2.4%)"),
            "{}",
            own.measured
        );
        // No empty programs measured (older results): said so.
        let old = judge_targets(&sample());
        let own = old
            .iter()
            .find(|c| {
                c.target
                    .starts_with("`record` on mmap-churn: at most 3% slowdown vs empty")
            })
            .unwrap();
        assert_eq!(own.status, "not measured", "{}", own.measured);
    }

    #[test]
    fn cost_capacity_daemon_targets() {
        let mut r = sample();
        r.cost = Some(Cost {
            floor_ns: Some(20.0),
            begin_ns: Some(50.0),
            end_ns: Some(70.0),
            ratio_to_floor: Some(3.5),
            peer_begin_ns: Some(40.0),
            peer_end_ns: Some(50.0),
            ratio_to_peer: Some(120.0 / 90.0),
            futex: Some(FutexCost {
                enter_ns: Some(100.0),
                exit_ns: Some(200.0),
                floor_enter_ns: Some(50.0),
                floor_exit_ns: Some(50.0),
                ..Default::default()
            }),
            futex_nonblocking: Some(FutexCost {
                enter_ns: Some(60.0),
                exit_ns: Some(120.0),
                floor_enter_ns: Some(50.0),
                floor_exit_ns: Some(50.0),
                ..Default::default()
            }),
            ..Default::default()
        });
        r.memcached = Some(Memcached {
            bare_s: vec![2.0, 2.2, 1.8],
            beside_s: vec![2.1, 2.0, 2.2],
            traced_s: vec![4.0, 4.4, 3.6],
            ..Default::default()
        });
        r.capacity = Some(Capacity {
            steps: vec![
                CapacityStep {
                    workload: "mmap-churn".into(),
                    args: vec!["mmap-churn".into(), "--threads".into(), "2".into()],
                    lost: 0,
                    ..Default::default()
                },
                CapacityStep {
                    workload: "futex-mutex".into(),
                    exact: Some(true),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        r.daemon = vec![DaemonCase {
            name: "10k-locks".into(),
            status: "skipped".into(),
            reason: "no --locks".into(),
            ..Default::default()
        }];
        let t = judge_targets(&r);
        let get = |p: &str| t.iter().find(|c| c.target.starts_with(p)).unwrap();
        assert_eq!(get("cost per contention").status, "missed");
        assert_eq!(get("`contention_begin` + `contention_end`").status, "met");
        assert!(
            get("`contention_begin` + `contention_end`")
                .measured
                .contains("1.33x")
        );
        assert_eq!(
            get("futex probes: enter + exit per futex call that").status,
            "met"
        );
        assert!(get("futex probes: enter").measured.ends_with("1.80x"));
        assert_eq!(get("futex probes over every call").status, "for reference");
        assert_eq!(get("memcached under memcslap beside").status, "met");
        assert!(
            get("memcached under memcslap beside")
                .measured
                .ends_with("1.05x")
        );
        assert_eq!(get("memcached under memcslap while").status, "missed");
        assert!(get("futex probes over").measured.ends_with("3.00x"));
        assert_eq!(get("zero lost events").status, "met");
        // Exact, but nothing was lost: loss counting itself was not exercised.
        assert_eq!(get("loss beyond capacity").status, "not measured");
        // A step with loss: met when seen + lost == truth, missed otherwise.
        let cap = r.capacity.as_mut().unwrap();
        cap.steps[1].lost = 5;
        assert_eq!(
            judge_targets(&r)
                .iter()
                .find(|c| c.target.starts_with("loss beyond capacity"))
                .unwrap()
                .status,
            "met"
        );
        r.capacity.as_mut().unwrap().steps[1].exact = Some(false);
        assert_eq!(
            judge_targets(&r)
                .iter()
                .find(|c| c.target.starts_with("loss beyond capacity"))
                .unwrap()
                .status,
            "missed"
        );
        assert_eq!(get("daemon at 1 s").status, "not measured");
        assert!(get("daemon at 1 s").measured.contains("no --locks"));
    }

    #[test]
    fn markdown_has_tables_and_round_trips_through_json() {
        let mut r = sample();
        r.targets = judge_targets(&r);
        let md = render_markdown(&r);
        assert!(md.contains("### mmap-churn"));
        assert!(md.contains("| `lockscope record` | 98.00 |"), "{md}");
        assert!(md.contains("**missed**"));
        assert!(md.contains("Not run yet"));
        let json = serde_json::to_string(&r).unwrap();
        let back: BenchResults = serde_json::from_str(&json).unwrap();
        assert_eq!(render_markdown(&back), md);
    }

    #[test]
    fn a_bystander_says_when_it_started_and_old_results_still_read() {
        let mut r = sample();
        let config = r.config.as_mut().unwrap();
        config.workloads[0].settle_s = 1.0;
        let md = render_markdown(&r);
        assert!(
            md.contains("Started 1 s after the tracer was ready"),
            "{md}"
        );
        // Results written before the field existed read as started at once.
        let mut v = serde_json::to_value(&r).unwrap();
        v["config"]["workloads"][0]
            .as_object_mut()
            .unwrap()
            .remove("settle_s");
        let back: BenchResults = serde_json::from_value(v).unwrap();
        assert_eq!(back.config.unwrap().workloads[0].settle_s, 0.0);
        assert!(!render_markdown(&sample()).contains("Started "));
    }
}
