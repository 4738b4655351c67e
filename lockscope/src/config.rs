//! `lockscope serve` configuration: a TOML file, checked completely before anything is
//! attached. Every error names the offending key. Pure except for the existence checks of
//! target pids and cgroups.
//!
//! ```toml
//! listen = "127.0.0.1:9464"   # where /metrics, /healthz and /api/snapshot are served
//! interval = "1s"             # how often the in-kernel maps are read
//! max_cpu_percent = 1.0       # at most this share of one CPU in map reads: longer
//!                             # reads space the next ones out beyond `interval`
//!
//! [probes]                    # probe groups
//! kernel_locks = true         # lock:contention_begin/end (every kernel lock type)
//! rwsem_events = true         # lockscope_rwsem_events_total (needs kernel_locks)
//! mmap_trylocks = false       # tracepoint tier: estimate mmap_lock trylock failures
//! futex = true                # futex syscalls: lockscope_futex_* (user-space locks)
//! futex_mode = "calls"        # "calls": every futex call, exact (syscall tracepoints:
//!                             # every syscall on the machine takes the traced path);
//!                             # "blocking": only waits that sleep (sched_switch), no
//!                             # syscall tracepoint, no lockscope_futex_wakes_total
//! pi_lock = true              # lockscope_starvation_episodes_total (needs kernel_locks)
//!
//! [target]                    # default: the whole system
//! pids = [1234]               # these processes (and what they fork from now on)
//! cgroup = "/sys/fs/cgroup/system.slice/nginx.service"
//! types = ["rwsem", "mutex"]  # lock types to trace (default: all)
//!
//! [metrics]
//! top_locks = 20              # locks with their own `lock` label; the rest is `other`
//! bpf_run_stats = false       # the kernel's BPF run statistics while serving, for
//!                             # lockscope_bpf_program_*: every BPF program on the
//!                             # machine then reads the clock twice per run
//!
//! [metrics.histogram]         # `le` bounds of lockscope_lock_wait_seconds
//! min_seconds = 1e-6
//! max_seconds = 10.0
//! factor = 4                  # 2, 4, 8 or 16: ratio of consecutive bounds
//!
//! [snapshot]                  # detail kept per refresh (memory stays flat)
//! locks = 256                 # locks (by total wait) that keep callers and tasks
//! callers_per_lock = 16       # call stacks kept per such lock (by total wait)
//! tasks_per_lock = 16         # processes kept per such lock
//! forget_exited_after = "60s" # an exited process's entries and lock names are then
//!                             # deleted from the kernel maps (its figures stay in
//!                             # the metrics' `other`)
//! ```

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context as _, bail};
use lockscope_common::HIST_BUCKETS;
use serde::Deserialize;

use crate::{aggregate::recording::Detail, decode::LockType, probe::Target};

pub const DEFAULT_LISTEN: &str = "127.0.0.1:9464";
pub const DEFAULT_INTERVAL: &str = "1s";
/// Share of one CPU the map reads may take, in percent: the daemon's own budget.
pub const DEFAULT_MAX_CPU_PERCENT: f64 = 1.0;
pub const DEFAULT_TOP_LOCKS: usize = 20;
/// More lock labels than this would defeat the purpose of folding into `other`.
pub const MAX_TOP_LOCKS: usize = 1000;

/// The file as written. Unknown keys are errors.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConfigFile {
    pub listen: Option<String>,
    pub interval: Option<String>,
    pub max_cpu_percent: Option<f64>,
    /// Web configuration file (TLS, basic auth), as `--web-config`.
    pub web_config: Option<PathBuf>,
    /// As `--redact-addresses`.
    pub redact_addresses: Option<bool>,
    pub probes: ProbeGroups,
    pub target: TargetConfig,
    pub metrics: MetricsConfig,
    pub snapshot: SnapshotConfig,
}

/// Per-lock detail kept in each refresh's recording (`/api/snapshot`, `top`): every lock
/// keeps its exact totals (and metrics); callers and tasks only for the first locks.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SnapshotConfig {
    pub locks: usize,
    pub callers_per_lock: usize,
    pub tasks_per_lock: usize,
    pub forget_exited_after: Option<String>,
}

impl Default for SnapshotConfig {
    fn default() -> Self {
        let d = Detail::DAEMON;
        Self {
            locks: d.locks,
            callers_per_lock: d.callers_per_lock,
            tasks_per_lock: d.tasks_per_lock,
            forget_exited_after: None,
        }
    }
}

/// How long `serve` keeps the map entries of a process after it exited: the live view
/// and `/api/snapshot` still show a run that just ended.
pub const DEFAULT_FORGET_EXITED_AFTER: Duration = Duration::from_secs(60);

/// More detail than this per refresh is no longer "bounded" in any useful sense.
pub const MAX_SNAPSHOT_DETAIL: usize = 100_000;

/// How long to wait before the next map read: `interval`, or longer when the read just
/// made took `cpu` and reading again after `interval` would spend more than
/// `max_cpu_percent` of one CPU (`cpu / (cpu + wait)` stays within the budget).
pub fn paced_wait(interval: Duration, cpu: Duration, max_cpu_percent: f64) -> Duration {
    let share = (max_cpu_percent / 100.0).clamp(f64::MIN_POSITIVE, 1.0);
    let needed = cpu.as_secs_f64() * (1.0 / share - 1.0);
    // At most a day: a read that slow is a bug to see, not to wait out.
    interval.max(Duration::from_secs_f64(needed.min(86_400.0)))
}

/// Probe groups.
///
/// - `kernel_locks`: `lock:contention_begin/end`, every kernel lock type.
/// - `rwsem_events`: export the rwsem lock events the tier sees (the hooks are part of
///   the kernel lock probes; on the tracepoint tier only the mmap_lock trylock estimate
///   adds a probe). Needs `kernel_locks`.
/// - `mmap_trylocks`: on the tracepoint tier, estimate mmap_lock trylock failures (a
///   probe on every mmap_lock acquisition, contended or not: off by default). Needs
///   `rwsem_events`.
/// - `futex`: the futex syscall probes (user-space locks).
/// - `futex_mode`: how they trace: every call (`calls`) or only the waits that sleep
///   (`blocking`, see `FutexMode`).
/// - `pi_lock`: export starvation episodes on raw spinlocks such as `task_struct.pi_lock`
///   (`pi_lock` waits themselves are kernel lock waits, named `pi_lock of comm[pid]`).
///   Needs `kernel_locks`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeGroups {
    pub kernel_locks: bool,
    pub rwsem_events: bool,
    pub mmap_trylocks: bool,
    pub futex: bool,
    pub futex_mode: crate::probe::loader::FutexMode,
    pub pi_lock: bool,
}

impl Default for ProbeGroups {
    fn default() -> Self {
        Self {
            kernel_locks: true,
            rwsem_events: true,
            // Off by default: its probe runs on every mmap_lock acquisition.
            mmap_trylocks: false,
            // On: a futex call that does not block costs under 2x an empty program on
            // the same tracepoints, and reading a full map of futex words (~0.3 s of
            // CPU) is paced by `max_cpu_percent`.
            futex: true,
            futex_mode: crate::probe::loader::FutexMode::Calls,
            pi_lock: true,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TargetConfig {
    pub pids: Vec<u32>,
    pub cgroup: Option<PathBuf>,
    pub types: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    pub top_locks: usize,
    pub bpf_run_stats: bool,
    pub histogram: HistogramConfig,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            top_locks: DEFAULT_TOP_LOCKS,
            bpf_run_stats: false,
            histogram: HistogramConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HistogramConfig {
    pub min_seconds: f64,
    pub max_seconds: f64,
    pub factor: u32,
}

impl Default for HistogramConfig {
    fn default() -> Self {
        Self {
            min_seconds: 1e-6,
            max_seconds: 10.0,
            factor: 4,
        }
    }
}

/// Command-line values, which override the file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub listen: Option<String>,
    pub interval: Option<String>,
    pub max_cpu_percent: Option<f64>,
    pub pids: Vec<u32>,
    pub cgroup: Option<PathBuf>,
    pub web_config: Option<PathBuf>,
    pub redact_addresses: bool,
    pub bpf_run_stats: bool,
}

/// A checked configuration, ready to start from.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeSettings {
    pub listen: SocketAddr,
    pub interval: Duration,
    /// The map reads' CPU budget, percent of one CPU (see [`paced_wait`]).
    pub max_cpu_percent: f64,
    pub target: Target,
    pub types: Option<Vec<LockType>>,
    /// The probe groups, as configured.
    pub probes: ProbeGroups,
    pub top_locks: usize,
    /// Per-lock detail kept per refresh.
    pub detail: Detail,
    /// How long an exited process's map entries and lock names are kept.
    pub forget_exited_after: Duration,
    /// Indices `i` of the log2 buckets whose upper bounds (`2^(i+1)` ns) become `le` bounds.
    pub bucket_bounds: Vec<usize>,
    /// TLS and basic auth (the file and what it says).
    pub web: Option<(PathBuf, crate::webconfig::WebConfig)>,
    pub redact_addresses: bool,
    /// Turn on the kernel's BPF run statistics while serving.
    pub bpf_run_stats: bool,
}

impl ConfigFile {
    /// Parse TOML text; errors give the line and the key.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            let msg = e.message().trim().replace('\n', " ");
            match line {
                Some(l) => anyhow::anyhow!("line {l}: {msg}"),
                None => anyhow::anyhow!("{msg}"),
            }
        })
    }

    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("config {}", path.display()))
    }

    /// Check everything and apply the command line on top.
    pub fn settings(&self, cli: &Overrides) -> anyhow::Result<ServeSettings> {
        let listen_text = cli
            .listen
            .as_deref()
            .or(self.listen.as_deref())
            .unwrap_or(DEFAULT_LISTEN);
        let listen: SocketAddr = listen_text.parse().map_err(|_| {
            anyhow::anyhow!(
                "listen: `{listen_text}` is not an address:port (e.g. {DEFAULT_LISTEN}, \
                 or 0.0.0.0:9464 for every interface)"
            )
        })?;
        let interval_text = cli
            .interval
            .as_deref()
            .or(self.interval.as_deref())
            .unwrap_or(DEFAULT_INTERVAL);
        let interval =
            parse_duration(interval_text).map_err(|e| anyhow::anyhow!("interval: {e}"))?;
        if interval < Duration::from_millis(100) || interval > Duration::from_secs(3600) {
            bail!("interval: must be between 100ms and 1h, got {interval_text}");
        }
        let max_cpu_percent = cli
            .max_cpu_percent
            .or(self.max_cpu_percent)
            .unwrap_or(DEFAULT_MAX_CPU_PERCENT);
        if !(max_cpu_percent.is_finite() && max_cpu_percent > 0.0 && max_cpu_percent <= 100.0) {
            bail!(
                "max_cpu_percent: must be more than 0 and at most 100 (percent of one CPU), \
                 got {max_cpu_percent}"
            );
        }

        let p = &self.probes;
        if !p.kernel_locks && !p.futex {
            bail!(
                "probes.kernel_locks: neither kernel_locks nor futex is enabled, nothing \
                 would be traced"
            );
        }

        let (pids, cgroup) = if !cli.pids.is_empty() || cli.cgroup.is_some() {
            (&cli.pids, &cli.cgroup)
        } else {
            (&self.target.pids, &self.target.cgroup)
        };
        if !pids.is_empty() && cgroup.is_some() {
            bail!("target: give either pids or a cgroup, not both");
        }
        for &pid in pids {
            if pid == 0 || !Path::new(&format!("/proc/{pid}")).exists() {
                bail!("target.pids: no process with pid {pid}");
            }
        }
        let target = if !pids.is_empty() {
            Target::Pids(pids.clone())
        } else if let Some(cg) = cgroup {
            crate::probe::features::cgroup_id_and_level(cg)
                .map_err(|e| anyhow::anyhow!("target.cgroup: {e:#}"))?;
            Target::Cgroup(cg.clone())
        } else {
            Target::System
        };
        let types = if self.target.types.is_empty() {
            None
        } else {
            let mut out = Vec::new();
            for name in &self.target.types {
                out.extend(
                    LockType::parse_list(name.trim())
                        .map_err(|e| anyhow::anyhow!("target.types: {e}"))?,
                );
            }
            Some(out)
        };

        if load_types(&types, p).is_empty() {
            bail!(
                "target.types: none of these lock types belongs to an enabled probe group \
                 (kernel_locks = {}, futex = {})",
                p.kernel_locks,
                p.futex
            );
        }

        let m = &self.metrics;
        if m.top_locks == 0 || m.top_locks > MAX_TOP_LOCKS {
            bail!(
                "metrics.top_locks: must be between 1 and {MAX_TOP_LOCKS}, got {}",
                m.top_locks
            );
        }
        let bucket_bounds = bucket_bounds(&m.histogram)?;
        let sn = &self.snapshot;
        for (key, v) in [
            ("locks", sn.locks),
            ("callers_per_lock", sn.callers_per_lock),
            ("tasks_per_lock", sn.tasks_per_lock),
        ] {
            if v > MAX_SNAPSHOT_DETAIL {
                bail!("snapshot.{key}: must be at most {MAX_SNAPSHOT_DETAIL}, got {v}");
            }
        }
        let forget_exited_after = match &sn.forget_exited_after {
            None => DEFAULT_FORGET_EXITED_AFTER,
            Some(text) => {
                let d = parse_duration(text)
                    .map_err(|e| anyhow::anyhow!("snapshot.forget_exited_after: {e}"))?;
                if d < Duration::from_secs(1) || d > Duration::from_secs(24 * 3600) {
                    bail!("snapshot.forget_exited_after: must be between 1s and 24h, got {text}");
                }
                d
            }
        };
        Ok(ServeSettings {
            listen,
            interval,
            max_cpu_percent,
            target,
            types,
            probes: p.clone(),
            top_locks: m.top_locks,
            detail: Detail {
                locks: sn.locks,
                callers_per_lock: sn.callers_per_lock,
                tasks_per_lock: sn.tasks_per_lock,
                ..Detail::DAEMON
            },
            forget_exited_after,
            bucket_bounds,
            web: match cli.web_config.as_ref().or(self.web_config.as_ref()) {
                Some(path) => Some((path.clone(), crate::webconfig::WebConfig::read(path)?)),
                None => None,
            },
            redact_addresses: cli.redact_addresses || self.redact_addresses.unwrap_or(false),
            bpf_run_stats: cli.bpf_run_stats || m.bpf_run_stats,
        })
    }
}

impl ServeSettings {
    /// The lock types to load the probes for: `target.types` (default: every type),
    /// kernel types only with `probes.kernel_locks`, futex types only with `probes.futex`.
    pub fn load_types(&self) -> Vec<LockType> {
        load_types(&self.types, &self.probes)
    }

    /// Are the futex probes attached (some futex type is traced)?
    pub fn traces_futex(&self) -> bool {
        self.load_types().iter().any(|t| t.is_user())
    }

    /// Are kernel locks traced?
    pub fn traces_kernel_locks(&self) -> bool {
        self.load_types().iter().any(|t| !t.is_user())
    }
}

/// The types in the `types` filter (`None`: every type) that an enabled group traces.
fn load_types(types: &Option<Vec<LockType>>, probes: &ProbeGroups) -> Vec<LockType> {
    LockType::every()
        .filter(|t| types.as_ref().is_none_or(|ts| ts.contains(t)))
        .filter(|t| {
            if t.is_user() {
                probes.futex
            } else {
                probes.kernel_locks
            }
        })
        .collect()
}

/// `le` bounds from the `[metrics.histogram]` section: powers of two nanoseconds (the
/// in-kernel buckets' edges) from `min_seconds` up to `max_seconds`, `factor` apart.
/// Returned as log2 bucket indices: bound `2^(i+1)` ns closes bucket `i`.
pub fn bucket_bounds(h: &HistogramConfig) -> anyhow::Result<Vec<usize>> {
    let step = match h.factor {
        2 => 1,
        4 => 2,
        8 => 3,
        16 => 4,
        f => bail!("metrics.histogram.factor: must be 2, 4, 8 or 16, got {f}"),
    };
    // Largest finite bound: the last in-kernel bucket is open-ended.
    let top_exp = HIST_BUCKETS - 1;
    let max_s = (1u64 << top_exp) as f64 / 1e9;
    for (key, v) in [
        ("min_seconds", h.min_seconds),
        ("max_seconds", h.max_seconds),
    ] {
        if !(v.is_finite() && v > 0.0 && v <= max_s) {
            bail!(
                "metrics.histogram.{key}: must be a number of seconds in (0, {max_s:.0}], got {v}"
            );
        }
    }
    if h.min_seconds >= h.max_seconds {
        bail!(
            "metrics.histogram.min_seconds: must be below max_seconds ({} >= {})",
            h.min_seconds,
            h.max_seconds
        );
    }
    let lo = ((h.min_seconds * 1e9).log2().ceil() as usize).max(1);
    let hi = ((h.max_seconds * 1e9).log2().floor() as usize).min(top_exp);
    let bounds: Vec<usize> = (lo..=hi).step_by(step).map(|e| e - 1).collect();
    if bounds.is_empty() {
        bail!(
            "metrics.histogram: no power-of-two nanosecond bound lies between {} s and {} s",
            h.min_seconds,
            h.max_seconds
        );
    }
    Ok(bounds)
}

/// `500ms`, `1s`, `2.5s`, `1m`, or a plain number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (e.g. 500ms, 1s, 1m)"))?;
    let scale = match unit.trim() {
        "ms" => 1e-3,
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        u => return Err(format!("`{text}`: unknown unit `{u}` (use ms, s, m or h)")),
    };
    Duration::try_from_secs_f64(v * scale).map_err(|_| format!("`{text}` is not a duration"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(text: &str) -> anyhow::Result<ServeSettings> {
        ConfigFile::parse(text)?.settings(&Overrides::default())
    }

    fn err(text: &str) -> String {
        format!("{:#}", settings(text).unwrap_err())
    }

    #[test]
    fn defaults_trace_the_system() {
        let s = settings("").unwrap();
        assert_eq!(s.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(s.interval, Duration::from_secs(1));
        assert_eq!(s.max_cpu_percent, DEFAULT_MAX_CPU_PERCENT);
        assert_eq!(s.target, Target::System);
        assert_eq!(s.types, None);
        assert_eq!(s.top_locks, DEFAULT_TOP_LOCKS);
        assert!(
            !s.bpf_run_stats,
            "the machine-wide switch stays off unless asked"
        );
        assert_eq!(s.forget_exited_after, DEFAULT_FORGET_EXITED_AFTER);
        // 2^10 ns (1.024 us) up to 2^32 ns (4.29 s), factor 4.
        assert_eq!(
            s.bucket_bounds,
            vec![9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31]
        );
    }

    #[test]
    fn a_full_file_is_applied() {
        let s = settings(
            r#"
            listen = "0.0.0.0:9500"
            interval = "250ms"
            max_cpu_percent = 5
            [probes]
            kernel_locks = true
            [target]
            pids = [1]
            types = ["rwsem", "mutex"]
            [metrics]
            top_locks = 5
            bpf_run_stats = true
            [metrics.histogram]
            min_seconds = 0.001
            max_seconds = 1
            factor = 2
            [snapshot]
            locks = 10
            callers_per_lock = 0
            forget_exited_after = "5m"
            "#,
        )
        .unwrap();
        assert_eq!(s.forget_exited_after, Duration::from_secs(300));
        assert_eq!(
            s.detail,
            Detail {
                locks: 10,
                callers_per_lock: 0,
                ..Detail::DAEMON
            }
        );
        assert_eq!(s.listen.port(), 9500);
        assert_eq!(s.interval, Duration::from_millis(250));
        assert_eq!(s.max_cpu_percent, 5.0);
        assert_eq!(s.target, Target::Pids(vec![1]));
        assert_eq!(
            s.types.as_ref().unwrap().len(),
            3,
            "rwsem:R, rwsem:W, mutex"
        );
        assert_eq!(s.top_locks, 5);
        assert!(s.bpf_run_stats);
        // 2^20 ns (1.05 ms) .. 2^29 ns (0.54 s).
        assert_eq!(s.bucket_bounds, (19..=28).collect::<Vec<_>>());
    }

    #[test]
    fn the_command_line_wins() {
        let cfg = ConfigFile::parse("listen = \"127.0.0.1:1\"\ninterval = \"5s\"").unwrap();
        let s = cfg
            .settings(&Overrides {
                listen: Some("127.0.0.1:2".into()),
                interval: Some("2s".into()),
                max_cpu_percent: Some(0.5),
                pids: vec![1],
                cgroup: None,
                web_config: None,
                redact_addresses: true,
                bpf_run_stats: true,
            })
            .unwrap();
        assert!(s.redact_addresses);
        assert!(s.bpf_run_stats);
        assert_eq!(s.listen.port(), 2);
        assert_eq!(s.interval, Duration::from_secs(2));
        assert_eq!(s.max_cpu_percent, 0.5);
        assert_eq!(s.target, Target::Pids(vec![1]));
    }

    #[test]
    fn slow_reads_are_spaced_to_the_cpu_budget() {
        let ms = Duration::from_millis;
        let s = Duration::from_secs;
        // Cheap reads keep the interval.
        assert_eq!(paced_wait(s(1), ms(3), 1.0), s(1));
        assert_eq!(paced_wait(s(1), ms(10), 1.0), s(1));
        // 0.3 s of CPU at 1%: 29.7 s between reads, 1% of the 30 s period.
        let w = paced_wait(s(1), ms(300), 1.0);
        assert!((w.as_secs_f64() - 29.7).abs() < 1e-6, "{w:?}");
        let share = 0.3 / (0.3 + w.as_secs_f64());
        assert!((share - 0.01).abs() < 1e-9, "{share}");
        // A longer interval already within budget stays.
        assert_eq!(paced_wait(s(60), ms(300), 1.0), s(60));
        // 100%: never spaced out.
        assert_eq!(paced_wait(ms(500), s(2), 100.0), ms(500));
        // Bounded however slow the read.
        assert_eq!(paced_wait(s(1), s(1_000_000), 1.0), s(86_400));
    }

    #[test]
    fn errors_name_the_key() {
        let e = err("lisen = \"127.0.0.1:9464\"");
        assert!(
            e.contains("line 1") && e.contains("unknown field `lisen`"),
            "{e}"
        );
        let e = err("[metrics]\ntop_lock = 3");
        assert!(e.contains("line 2") && e.contains("`top_lock`"), "{e}");
        let e = err("[metrics]\ntop_locks = \"many\"");
        assert!(e.contains("line 2") && e.contains("invalid type"), "{e}");
        assert!(err("listen = \"localhost\"").starts_with("listen:"));
        assert!(err("interval = \"1 fortnight\"").starts_with("interval:"));
        assert!(err("interval = \"1ms\"").starts_with("interval:"));
        let e = err("[probes]\nkernel_locks = false\nfutex = false");
        assert!(e.starts_with("probes.kernel_locks:"), "{e}");
        let e = err("[probes]\nfutex = false\n[target]\ntypes = [\"futex\"]");
        assert!(e.starts_with("target.types:"), "{e}");
        for bad in ["0", "-1", "101", "nan"] {
            let e = err(&format!("max_cpu_percent = {bad}"));
            assert!(e.starts_with("max_cpu_percent:"), "{bad}: {e}");
        }
        assert!(err("[probes]\nfutx = true").contains("unknown field `futx`"));
        assert!(err("[target]\npids = [0]").starts_with("target.pids:"));
        assert!(err("[target]\ntypes = [\"spinlok\"]").starts_with("target.types:"));
        assert!(err("[target]\ncgroup = \"/nonexistent-cgroup\"").starts_with("target.cgroup:"));
        assert!(err("[target]\npids = [1]\ncgroup = \"/\"").starts_with("target:"));
        assert!(err("[metrics]\ntop_locks = 0").starts_with("metrics.top_locks:"));
        let e = err("[snapshot]\ntasks_per_lock = 1000000");
        assert!(e.starts_with("snapshot.tasks_per_lock:"), "{e}");
        assert!(err("[snapshot]\ncallers = 3").contains("unknown field `callers`"));
        for bad in ["500ms", "2d", "soon"] {
            let e = err(&format!("[snapshot]\nforget_exited_after = \"{bad}\""));
            assert!(e.starts_with("snapshot.forget_exited_after:"), "{bad}: {e}");
        }
        let e = err("[snapshot]\nforget_exited_after = 60");
        assert!(
            e.contains("line 2") && e.contains("expected a string"),
            "{e}"
        );
        let e = err("[metrics.histogram]\nfactor = 3");
        assert!(e.starts_with("metrics.histogram.factor:"), "{e}");
        let e = err("[metrics.histogram]\nmin_seconds = -1");
        assert!(e.starts_with("metrics.histogram.min_seconds:"), "{e}");
        let e = err("[metrics.histogram]\nmin_seconds = 2\nmax_seconds = 1");
        assert!(e.starts_with("metrics.histogram.min_seconds:"), "{e}");
        let e = err("[metrics.histogram]\nmin_seconds = 1.1e-6\nmax_seconds = 1.5e-6");
        assert!(e.starts_with("metrics.histogram:"), "{e}");
        for e in [err("lisen = 1"), err("[metrics]\ntop_locks = 0")] {
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    #[test]
    fn probe_groups_choose_the_lock_types() {
        let s = settings("").unwrap();
        assert_eq!(s.probes, ProbeGroups::default());
        assert!(s.traces_futex() && s.traces_kernel_locks());
        assert_eq!(
            s.load_types().len(),
            LockType::ALL.len() + LockType::USER.len()
        );
        let s = settings("[probes]\nfutex = false").unwrap();
        assert!(!s.traces_futex());
        assert_eq!(s.load_types(), LockType::ALL.to_vec());
        use crate::probe::FutexMode;
        assert_eq!(s.probes.futex_mode, FutexMode::Calls);
        let s = settings("[probes]\nfutex_mode = \"blocking\"").unwrap();
        assert_eq!(s.probes.futex_mode, FutexMode::Blocking);
        assert!(s.traces_futex());
        let e = err("[probes]\nfutex_mode = \"sometimes\"");
        assert!(e.contains("line 2") && e.contains("`blocking`"), "{e}");
        let s = settings("[probes]\nkernel_locks = false\nfutex = true").unwrap();
        assert_eq!(s.load_types(), LockType::USER.to_vec());
        assert!(!s.traces_kernel_locks());
        // A type filter without futex types leaves the futex probes out.
        let s = settings("[probes]\nfutex = true\n[target]\ntypes = [\"rwsem\"]").unwrap();
        assert!(!s.traces_futex());
        let s = settings("[probes]\nfutex = true\n[target]\ntypes = [\"futex-pi\", \"mutex\"]")
            .unwrap();
        assert_eq!(s.load_types(), [LockType::Mutex, LockType::FutexPi]);
        assert!(s.traces_futex());
        let s = settings("[probes]\nrwsem_events = false\npi_lock = false").unwrap();
        assert!(!s.probes.rwsem_events && !s.probes.pi_lock);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2.5"), Ok(Duration::from_millis(2500)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("3 days").is_err());
    }
}
