//! Command line (clap derive). Help texts are the user's manual: keep them teaching.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::{
    aggregate::rows::{GroupBy, SortKey},
    sink::report::Format,
    workload::Workload,
};

#[derive(Debug, Parser)]
#[command(
    name = "lockscope",
    version,
    about = "eBPF lock contention tracer and profiler",
    long_about = "lockscope traces lock contention in the Linux kernel with eBPF: which locks \
                  are contended, by whom, for how long, and from where.\n\n\
                  Start with `lockscope doctor` to see what this kernel allows, then \
                  `lockscope record -- <command>` to profile a command, or \
                  `lockscope record -d 10` to profile the whole system for 10 seconds."
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
    /// Render a recording written by `record -o` as a table, JSON or CSV.
    Report(ReportArgs),
    /// Built-in contention generators, to try lockscope or benchmark with.
    #[command(subcommand)]
    Workload(Workload),
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
    /// Group rows by lock, calling function, waiting process or lock type.
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
}

#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Stop after this many seconds (default: when the command exits, or at Ctrl-C).
    #[arg(short = 'd', long = "duration", value_name = "SECS")]
    pub duration: Option<f64>,
    /// Write the recording (JSON, schema lockscope.report/1) to this file.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
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
    /// a family name (rwsem, rwlock, pcpu-sem) means all its variants.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub types: Vec<String>,
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
    #[command(flatten)]
    pub view: ViewArgs,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address and port to serve on [default: 127.0.0.1:9464, or `listen` in the config].
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<String>,
    /// TOML configuration file: listen, interval, [probes], [target], [metrics]
    /// (see the README for every key).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// How often to read the in-kernel maps, e.g. 500ms, 1s, 1m [default: 1s].
    #[arg(long, value_name = "DURATION")]
    pub interval: Option<String>,
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
}
