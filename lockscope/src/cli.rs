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
    /// a family name (rwsem, rwlock, pcpu-sem) means all its variants. User-space locks:
    /// futex, futex-pi (without either, the futex syscall probes stay detached).
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
