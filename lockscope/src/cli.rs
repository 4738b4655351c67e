//! Command line (clap derive). Help texts are the user's manual: keep them teaching.

use std::{path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand};

use crate::{
    aggregate::rows::{GroupBy, SortKey},
    probe::FutexMode,
    sink::report::Format,
    workload::Workload,
};

/// The exit statuses, in `--help` and the man page.
pub const EXIT_STATUS: &str = "Exit status:\n  \
    0    success (serve and top: stopped by SIGTERM, SIGINT or q)\n  \
    1    an error, printed as one `lockscope: ...` line (bad input, no privileges, no \
    BTF, an unsupported kernel, an unreadable file); doctor: nothing can be traced\n  \
    N    record -- COMMAND: the command's own exit status (128 + signal if a signal \
    ended it), whether it ended by itself or by the SIGTERM or SIGHUP record passed on\n  \
    2    a command line clap rejects (unknown option, missing value)";

#[derive(Debug, Parser)]
#[command(
    name = "lockscope",
    version,
    about = "eBPF lock contention tracer and profiler",
    long_about = "lockscope traces lock contention in the Linux kernel with eBPF: which locks \
                  are contended, by whom, for how long, and from where.\n\n\
                  Start with `lockscope doctor` to see what this kernel allows, then \
                  `lockscope record -- <command>` to profile a command, or \
                  `lockscope record -d 10` to profile the whole system for 10 seconds.",
    after_long_help = EXIT_STATUS
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show what this kernel allows: BTF, tracefs, privileges, and the tier of every probe.
    ///
    /// Exits non-zero when nothing can be traced.
    Doctor,
    /// Trace lock contention, then print a report (and write the recording with -o).
    ///
    /// Examples:
    ///   lockscope record -- make -j8          profile a command and its children
    ///   lockscope record -a -- ./bench        system-wide while ./bench runs
    ///   lockscope record -d 10 --pid 1234     one process for 10 seconds
    ///   lockscope record -d 5 -o run.json     whole system, keep the recording
    #[command(verbatim_doc_comment)]
    Record(RecordArgs),
    /// Render a recording written by `record -o` as a table, JSON, CSV or HTML.
    ///
    /// Example: lockscope report run.json --format html -o report.html
    Report(ReportArgs),
    /// Live view of lock contention, refreshed every interval (like top).
    ///
    /// Standalone it attaches the probes itself (root); with --connect it shows what a
    /// running `lockscope serve` sees. Press ? inside for the keys.
    ///
    /// Examples:
    ///   lockscope top                          the whole system, every second
    ///   lockscope top --pid 1234 --interval 500ms
    ///   lockscope top --types rwsem,mutex
    ///   lockscope top --connect 127.0.0.1:9464 a running lockscope serve
    #[command(verbatim_doc_comment)]
    Top(TopArgs),
    /// Built-in contention generators, to try lockscope or benchmark with.
    #[command(subcommand)]
    Workload(Workload),
    /// Print a shell completion script.
    ///
    /// Examples:
    ///   lockscope completions bash > /etc/bash_completion.d/lockscope
    ///   lockscope completions zsh > "${fpath[1]}/_lockscope"
    ///   lockscope completions fish > ~/.config/fish/completions/lockscope.fish
    #[command(verbatim_doc_comment)]
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), made from these help texts.
    ///
    /// Example: lockscope man > /usr/local/share/man/man1/lockscope.1
    Man,
    /// Run as a daemon: trace continuously and serve Prometheus metrics over HTTP.
    ///
    /// Serves /metrics (Prometheus text format), /healthz, and /api/snapshot (everything
    /// recorded since the start, as JSON in the format `record -o` writes). Stops on
    /// SIGTERM or Ctrl-C, detaching every probe.
    ///
    /// Examples:
    ///   lockscope serve                              127.0.0.1:9464, whole system
    ///   lockscope serve --listen 0.0.0.0:9464        every interface (mind the firewall)
    ///   lockscope serve --config /etc/lockscope.toml
    ///   lockscope serve --config lockscope.toml --check-config   validate only
    #[command(verbatim_doc_comment)]
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
pub struct ViewArgs {
    /// Group rows by lock, calling function, waiting process, lock type or cgroup.
    #[arg(long, value_enum, default_value_t = GroupBy::Lock)]
    pub by: GroupBy,
    /// Sort rows by this column (numbers: largest first).
    #[arg(long, value_enum, default_value_t = SortKey::Total)]
    pub sort: SortKey,
    /// Show at most this many rows (0: all).
    #[arg(short = 'n', long = "entries", default_value_t = 20)]
    pub entries: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// With --format folded: weigh each stack by its wait time (ns) or its contentions.
    #[arg(long, value_enum, default_value_t = crate::sink::folded::Weight::Wait)]
    pub weight: crate::sink::folded::Weight,
}

#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Stop after this many seconds (default: when the command exits, or at Ctrl-C).
    #[arg(short = 'd', long = "duration", value_name = "SECS")]
    pub duration: Option<f64>,
    /// Sample contention every this many seconds for the recording's timeline (the HTML
    /// report draws it), and refresh the live status line.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub interval: f64,
    /// Write the recording (JSON, schema lockscope.report/2) to this file.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write the waiters' folded stacks (wait ns; see `report --format folded`).
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,
    /// Also write a gzipped pprof profile (see `report --format pprof`).
    #[arg(long, value_name = "FILE")]
    pub pprof: Option<PathBuf>,
    /// Kernel stack walks allowed per CPU per second (0: walk every wait). A wait past the
    /// budget still counts exactly for its lock, task and type; callers are then the
    /// figures of the waits whose stack was walked (the report says what share).
    #[arg(long, value_name = "N", default_value_t = lockscope_common::STACK_WALKS_PER_CPU_S,
          value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub stack_rate: u64,
    /// On the tracepoint tier, also estimate mmap_lock trylock failures (rwsem event
    /// `trylock_fail`, else n/a) from the `mmap_lock_acquire_returned` tracepoint. That
    /// probe runs on every mmap_lock acquisition, contended or not (about 65 ns each, a
    /// few percent of an mmap-heavy program), so it is off unless asked for. The deep
    /// tier counts trylock failures exactly without it.
    #[arg(long)]
    pub mmap_trylocks: bool,
    /// How user-space locks (futexes) are traced. `calls`: every futex call, exact, at
    /// the futex syscall tracepoints; while they are attached every system call on the
    /// machine takes the kernel's slower traced path (40-250 ns more per call on the
    /// machines measured). `blocking`: only the waits that sleep, at the context switch,
    /// with their pthread call sites; system calls keep their fast path, but wakes and
    /// EAGAIN returns are not seen, and a wait counts once per sleep.
    #[arg(long, value_enum, value_name = "MODE", default_value_t = FutexMode::Calls)]
    pub futex_mode: FutexMode,
    /// With a command: trace the whole system while it runs, not only its process tree.
    #[arg(short = 'a', long = "all-cpus")]
    pub system_wide: bool,
    /// Trace only this process (and processes it forks from now on). Repeatable.
    #[arg(short = 'p', long = "pid", value_name = "PID", conflicts_with_all = ["cgroup", "system_wide"])]
    pub pids: Vec<u32>,
    /// Trace only tasks in this cgroup (v2 directory) and below.
    #[arg(long, value_name = "PATH", conflicts_with = "system_wide")]
    pub cgroup: Option<PathBuf>,
    /// Record only these lock types, comma-separated: spinlock, rwlock:R, rwlock:W,
    /// rwsem:R, rwsem:W, mutex, mutex-spin, rtmutex, pcpu-sem:R, pcpu-sem:W, semaphore;
    /// a family name (rwsem, rwlock, pcpu-sem) means all its variants. User-space locks:
    /// futex, futex-pi, pthread-mutex, pthread-rwlock (futex words found inside a pthread
    /// lock, unwound from the stack of a wait that blocked); without any, the futex probes
    /// stay detached.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub types: Vec<String>,
    /// Also write the HTML report (histograms, timeline, flame graphs) to this file.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Time every wakeup of a real-time thread (from when its hrtimer was due to the thread
    /// running on its CPU, split into how late the timer fired, whether the CPU was idle,
    /// and the time to run) and record those slower than this (e.g. 100us, 1ms) as latency
    /// spikes, each with the lock activity on its CPU in its window: spinning waits of 5 us
    /// or more, sched_wait_task bursts (a tracer taking a tracee's pi_lock) and starvation
    /// episodes. When the command is cyclictest, its own per-thread maxima are recorded
    /// too (source: cyclictest).
    #[arg(long, value_name = "DURATION", value_parser = parse_ns)]
    pub latency_threshold: Option<u64>,
    /// Starvation episodes: one spinning wait on a task's pi_lock at least this long
    /// (ns, us, ms, s) during which other CPUs took the lock --starvation-acquisitions
    /// times or more. The deep spinlock tier sees this exactly; the tracepoint tier
    /// (with --latency-threshold) reports probable episodes from proxy signals.
    #[arg(long, value_name = "DURATION", default_value = "20us", value_parser = parse_ns)]
    pub starvation_threshold: u64,
    /// Starvation episodes: acquisitions by other CPUs during one wait.
    #[arg(long, value_name = "N", default_value_t = 8,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub starvation_acquisitions: u64,
    /// Deep spinlock tier: one hold of a watched lock at least this long is a long-hold
    /// episode (ns, us, ms, s).
    #[arg(long, value_name = "DURATION", default_value = "1ms", value_parser = parse_ns)]
    pub long_hold_threshold: u64,
    #[command(flatten)]
    pub view: ViewArgs,
    /// The command to run and trace; its exit code becomes lockscope's.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A recording written by `lockscope record -o FILE`.
    pub file: PathBuf,
    /// Name user call sites recorded as `file+0xoffset` (a stripped program) from the
    /// program's debug file or an unstripped copy in this directory (DIR/FILE.debug,
    /// else DIR/FILE).
    #[arg(long, value_name = "DIR")]
    pub debug_dir: Option<PathBuf>,
    /// Write the report to this file instead of standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub view: ViewArgs,
}

#[derive(Debug, Args)]
pub struct TopArgs {
    /// Refresh interval: 1s, 500ms, 2.5s, 1m (plain numbers are seconds; 100ms to 1h).
    #[arg(short = 'i', long, value_name = "DURATION", default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,
    /// Trace only this process (and processes it forks from now on). Repeatable.
    #[arg(short = 'p', long = "pid", value_name = "PID", conflicts_with_all = ["cgroup", "connect"])]
    pub pids: Vec<u32>,
    /// Trace only tasks in this cgroup (v2 directory) and below.
    #[arg(long, value_name = "PATH", conflicts_with = "connect")]
    pub cgroup: Option<PathBuf>,
    /// Trace only these lock types, comma-separated (as for `record --types`).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        conflicts_with = "connect"
    )]
    pub types: Vec<String>,
    /// Show a running `lockscope serve` at HOST:PORT instead of tracing here
    /// (its /api/snapshot; what it traces is set where it runs).
    #[arg(long, value_name = "HOST:PORT")]
    pub connect: Option<String>,
    /// Time wakeups of real-time threads and list those slower than this (e.g. 100us)
    /// in the episodes view (`e`) as they arrive, with the lock activity in their window,
    /// as `record --latency-threshold` does. Probable starvation episodes appear there too.
    #[arg(long, value_name = "DURATION", value_parser = parse_ns, conflicts_with = "connect")]
    pub latency_threshold: Option<u64>,
    /// How user-space locks are traced (as for `record --futex-mode`).
    #[arg(long, value_enum, value_name = "MODE", default_value_t = FutexMode::Calls,
          conflicts_with = "connect")]
    pub futex_mode: FutexMode,
}

/// A short duration in nanoseconds: `100us`, `1.5ms`, `500ns`, `1s` (a unit is required).
pub fn parse_ns(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let i = t
        .find(|c: char| c.is_ascii_alphabetic())
        .ok_or_else(|| format!("`{s}` needs a unit: ns, us, ms or s (e.g. 100us)"))?;
    let (num, unit) = t.split_at(i);
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (try 100us, 1ms)"))?;
    let scale = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => {
            return Err(format!(
                "`{s}`: unknown unit `{unit}` (use ns, us, ms or s)"
            ));
        }
    };
    let ns = v * scale;
    if !(1.0..=60e9).contains(&ns) {
        return Err(format!("`{s}` out of range: 1ns to 60s"));
    }
    Ok(ns.round() as u64)
}

/// `1s`, `500ms`, `2.5s`, `1m`, or plain seconds.
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (try 1s, 500ms, 2.5s, 1m)"))?;
    let secs = match unit {
        "ms" => v / 1e3,
        "s" => v,
        "m" => v * 60.0,
        _ => return Err(format!("`{s}`: unknown unit `{unit}` (use ms, s or m)")),
    };
    if !(0.1..=3600.0).contains(&secs) {
        return Err(format!("interval `{s}` out of range: 100ms to 1h"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_durations_parse() {
        assert_eq!(parse_ns("100us"), Ok(100_000));
        assert_eq!(parse_ns("1.5ms"), Ok(1_500_000));
        assert_eq!(parse_ns("500ns"), Ok(500));
        assert!(parse_ns("100").unwrap_err().contains("needs a unit"));
        assert!(parse_ns("0us").unwrap_err().contains("out of range"));
        assert!(parse_ns("3h").unwrap_err().contains("unknown unit"));
    }

    #[test]
    fn intervals_parse() {
        assert_eq!(parse_interval("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_interval("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_interval("2.5"), Ok(Duration::from_millis(2500)));
        assert_eq!(parse_interval("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_interval("10ms").unwrap_err().contains("out of range"));
        assert!(parse_interval("1h").unwrap_err().contains("unknown unit"));
        assert!(
            parse_interval("fast")
                .unwrap_err()
                .contains("not a duration")
        );
    }
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address and port to serve on [default: 127.0.0.1:9464, or `listen` in the config].
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<String>,
    /// TOML configuration file: listen, interval, [probes], [target], [metrics]
    /// (every key, with its default: docs/serve.md).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// How often to read the in-kernel maps, e.g. 500ms, 1s, 1m [default: 1s].
    #[arg(long, value_name = "DURATION")]
    pub interval: Option<String>,
    /// Most of one CPU the map reads may take, in percent: a read that took more CPU
    /// than this share of the interval spaces the next ones out (e.g. 0.25 s of CPU at
    /// 1% reads every 25 s) [default: 1, or `max_cpu_percent` in the config].
    #[arg(long, value_name = "PERCENT")]
    pub max_cpu_percent: Option<f64>,
    /// Check the configuration, print what would be served, and exit (attaches nothing).
    #[arg(long)]
    pub check_config: bool,
    /// Trace only this process (and what it forks from now on). Repeatable; overrides the
    /// config's [target].
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Trace only tasks in this cgroup (v2 directory) and below; overrides the config.
    #[arg(long, value_name = "PATH", conflicts_with = "pids")]
    pub cgroup: Option<PathBuf>,
    /// TLS and basic authentication, from a web configuration file in the Prometheus
    /// exporter toolkit's format (tls_server_config, basic_auth_users with bcrypt
    /// hashes, http_server_config.headers); overrides the config's `web_config`.
    #[arg(long, value_name = "FILE")]
    pub web_config: Option<PathBuf>,
    /// Replace kernel addresses in metric labels, snapshots and profiles with stable
    /// opaque names (`kaddr-1f3a9c02`), so that readers learn nothing of the kernel's
    /// memory layout.
    #[arg(long)]
    pub redact_addresses: bool,
    /// Turn on the kernel's BPF run statistics while serving, for the
    /// lockscope_bpf_program_* metrics (the config's `metrics.bpf_run_stats`). Off by
    /// default: the switch is the whole machine's, and every BPF program then reads the
    /// clock twice per run, lockscope's on every system call included.
    #[arg(long)]
    pub bpf_run_stats: bool,
}
