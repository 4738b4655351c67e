//! `cargo xtask bench`: lockscope's overhead against perf and bpftrace on the built-in
//! workloads, its cost per event against an empty BPF program, its capacity, the
//! daemon's cost, and (with `--soak`) the daemon's memory over a long run.
//!
//! Everything runs as root on the host. Tracers are separate processes started
//! before the workload and stopped after it, so the workload's own counters measure
//! the slowdown and `wait4` gives each tracer's own CPU time and peak RSS. Runs
//! alternate (every round runs each workload under every tool in turn) so that slow
//! drifts of the machine hit every tool alike; medians and spreads summarise them.

mod parse;
mod proc;
mod rawfloor;
mod results;
mod stopprofile;

pub use rawfloor::run as raw_floor;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use parse::Spread;
use proc::{Proc, Scraper};
use results::*;

/// What `cargo xtask bench` was asked to do.
pub struct BenchOptions {
    pub quick: bool,
    pub soak: bool,
    pub minutes: f64,
    /// Soak: short-lived processes beside the workload, so new locks keep appearing.
    pub churn: bool,
    pub runs: Option<usize>,
    /// Only re-render BENCHMARKS.md (and re-judge the targets) from bench-results.json.
    pub render: bool,
}

/// The order of a round. The empty programs run right after `record`, so that lockscope's
/// own share (`record` against them, per round) compares runs a few seconds apart. An
/// untraced run opens and closes the round: each traced run is set against their mean,
/// and a round whose machine drifted between them is seen.
const TOOLS: [Tool; 9] = [
    Tool::Untraced,
    Tool::Record,
    Tool::SyscallFloor,
    Tool::RecordBlocking,
    Tool::RecordCommand,
    Tool::Serve,
    Tool::Perf,
    Tool::Bpftrace,
    Tool::UntracedAfter,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    Untraced,
    /// Untraced again, closing the round.
    UntracedAfter,
    Record,
    Serve,
    Perf,
    Bpftrace,
    /// Empty programs on the syscall tracepoints lockscope's futex probes use (the raw
    /// `sys_enter`/`sys_exit` on x86_64): what any tracer of futex calls there costs every
    /// system call on the machine, before its own work.
    SyscallFloor,
    /// `lockscope record -- <the workload>`: the workload is the traced process.
    RecordCommand,
    /// `lockscope record -a --futex-mode blocking`: no syscall tracepoint.
    RecordBlocking,
}

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Tool::Untraced => "untraced",
            Tool::UntracedAfter => UNTRACED_AFTER,
            Tool::Record => "record",
            Tool::Serve => "serve",
            Tool::Perf => "perf",
            Tool::Bpftrace => "bpftrace",
            Tool::SyscallFloor => "syscall-floor",
            Tool::RecordCommand => "record-command",
            Tool::RecordBlocking => "record-blocking",
        }
    }
}

/// The bpftrace equivalent of `lockscope record`'s core: a wait-time histogram per lock
/// from `lock:contention_begin/end`, plus counts to compare.
const BPFTRACE_SCRIPT: &str = "\
tracepoint:lock:contention_begin { @start[tid] = nsecs; @begin = count(); }
tracepoint:lock:contention_end /@start[tid]/ {
  @wait_ns[args->lock_addr] = hist(nsecs - @start[tid]); delete(@start[tid]); @end = count();
}
END { clear(@start); }";

/// Empty programs on the per-syscall tracepoints the futex probes attach to where the
/// raw ones are refused (the family's `attached_programs`: futex(2), the futex2 calls
/// but `futex_wake`'s entry, restart_syscall): attaching any makes every task take the
/// traced syscall path.
const BPFTRACE_SYSCALL_FLOOR: &str = "\
tracepoint:syscalls:sys_enter_futex, tracepoint:syscalls:sys_exit_futex,
tracepoint:syscalls:sys_enter_futex_wait, tracepoint:syscalls:sys_exit_futex_wait,
tracepoint:syscalls:sys_exit_futex_wake,
tracepoint:syscalls:sys_enter_futex_waitv, tracepoint:syscalls:sys_exit_futex_waitv,
tracepoint:syscalls:sys_enter_futex_requeue, tracepoint:syscalls:sys_exit_futex_requeue,
tracepoint:syscalls:sys_enter_restart_syscall, tracepoint:syscalls:sys_exit_restart_syscall { }";

/// A program run beside lockscope in the cost measurements.
#[derive(Debug, Clone, Copy)]
enum Peer {
    /// A bpftrace script.
    Bpftrace(&'static str),
    /// Empty programs on the raw `sys_enter`/`sys_exit` tracepoints (`raw-floor`).
    RawSyscallFloor,
}

impl Peer {
    /// The command that runs `ctx.cat` with this peer attached.
    fn command(self, ctx: &Ctx) -> Result<Command> {
        let mut c = match self {
            Peer::Bpftrace(script) => {
                let mut c = Command::new("bpftrace");
                c.args(["-e", script, "-c"]);
                c
            }
            Peer::RawSyscallFloor => {
                let mut c = Command::new(std::env::current_exe()?);
                c.args(["raw-floor", "--"]);
                c
            }
        };
        c.arg(&ctx.cat);
        Ok(c)
    }
}

/// Empty programs where lockscope's futex probes are: the raw `sys_enter`/`sys_exit` on
/// x86_64, else bpftrace's `script` on the per-syscall tracepoints.
fn syscall_floor(script: &'static str) -> Peer {
    if cfg!(target_arch = "x86_64") {
        Peer::RawSyscallFloor
    } else {
        Peer::Bpftrace(script)
    }
}

/// An empty program on the same tracepoint: the floor of cost per event.
const BPFTRACE_FLOOR: &str = "tracepoint:lock:contention_begin { }";

struct Ctx {
    exe: PathBuf,
    cat: PathBuf,
    scratch: PathBuf,
    quick: bool,
}

impl Ctx {
    fn lockscope(&self) -> Command {
        Command::new(&self.exe)
    }

    fn workload_cmd(&self, args: &[String]) -> Command {
        let mut c = self.lockscope();
        c.arg("workload").args(args);
        c
    }

    /// `lockscope record -n 1 -o OUT -- lockscope workload ARGS`.
    fn record_workload(&self, out: &Path, args: &[String]) -> Command {
        let mut c = self.lockscope();
        c.args(["record", "-n", "1", "-o"])
            .arg(out)
            .arg("--")
            .arg(&self.exe)
            .arg("workload")
            .args(args);
        c
    }
}

/// `cargo xtask bench [--quick] [--soak [--minutes M]] [--runs N] [--render]`
pub fn bench(opts: BenchOptions) -> Result<()> {
    if opts.render {
        let dir = if opts.quick {
            crate::util::target_dir().join("bench")
        } else {
            crate::util::workspace_root()
        };
        let json_path = dir.join("bench-results.json");
        let text = std::fs::read_to_string(&json_path)
            .with_context(|| format!("bench: reading {}", json_path.display()))?;
        let mut r: BenchResults = serde_json::from_str(&text)
            .with_context(|| format!("bench: parsing {}", json_path.display()))?;
        r.targets = judge_targets(&r);
        std::fs::write(&json_path, serde_json::to_string_pretty(&r)? + "\n")?;
        std::fs::write(dir.join("BENCHMARKS.md"), render_markdown(&r))?;
        println!("bench: re-rendered {}", dir.join("BENCHMARKS.md").display());
        return Ok(());
    }
    if !crate::util::is_root() {
        bail!(
            "bench: the tracers (lockscope, perf, bpftrace) load eBPF programs and must run \
             as root; rerun `cargo xtask bench` as root"
        );
    }
    crate::setup::setup()?;
    for tool in ["perf", "bpftrace", "bpftool"] {
        if crate::util::which(tool).is_none() {
            bail!("bench: `{tool}` is not installed (cargo xtask setup should have installed it)");
        }
    }
    crate::util::run(crate::util::cargo().args(["build", "--release", "-p", "lockscope"]))?;
    let exe = crate::util::target_dir().join("release").join("lockscope");
    let cat = crate::util::which("cat").context("bench: `cat` not found")?;
    let out_dir = if opts.quick {
        crate::util::target_dir().join("bench")
    } else {
        crate::util::workspace_root()
    };
    let scratch = crate::util::target_dir().join("bench").join("scratch");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let ctx = Ctx {
        exe,
        cat,
        scratch,
        quick: opts.quick,
    };
    let json_path = out_dir.join("bench-results.json");
    let md_path = out_dir.join("BENCHMARKS.md");
    // Keep what this invocation does not redo (the soak, or everything but the soak).
    let previous: Option<BenchResults> = std::fs::read_to_string(&json_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());

    let mut r = if opts.soak {
        let mut r = previous.unwrap_or_default();
        r.soak = Some(soak(&ctx, opts.minutes, opts.churn)?);
        r
    } else {
        let mut r = full_run(&ctx, opts.runs)?;
        r.soak = previous.and_then(|p| p.soak);
        r
    };
    r.schema = SCHEMA.to_string();
    r.targets = judge_targets(&r);
    std::fs::create_dir_all(&out_dir)?;
    std::fs::write(&json_path, serde_json::to_string_pretty(&r)? + "\n")?;
    std::fs::write(&md_path, render_markdown(&r))?;
    println!();
    println!("bench: targets (issue 8):");
    for t in &r.targets {
        println!("  [{}] {}: {}", t.status, t.target, t.measured);
    }
    println!(
        "bench: wrote {} and {}",
        md_path.display(),
        json_path.display()
    );
    Ok(())
}

fn machine(exe: &Path) -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = crate::util::output(Command::new("uname").arg("-r"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let date_utc = crate::util::output(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let load_avg_at_start = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    let lockscope_version = crate::util::output(Command::new(exe).arg("--version"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    Machine {
        cpu_model,
        cpus,
        kernel,
        date_utc,
        // Judged after the overhead runs (`full_run`).
        loaded: false,
        other_cpu_share: None,
        load_avg_at_start,
        load_avg_at_end: String::new(),
        lockscope_version,
    }
}

fn workloads(quick: bool) -> Vec<WorkloadSpec> {
    let secs = if quick { "1" } else { "3" };
    let spec = |name: &str, args: &[&str]| WorkloadSpec {
        settle_s: 0.0,
        name: name.to_string(),
        args: args
            .iter()
            .map(|s| s.to_string())
            .chain(["--json".to_string()])
            .collect(),
    };
    vec![
        // Fixed work (pages touched), not fixed time: ops/s from its own clock.
        spec(
            "mmap-fault",
            if quick {
                &["mmap-fault", "--mib", "128", "--rounds", "2"]
            } else {
                &["mmap-fault", "--mib", "256", "--rounds", "4"]
            },
        ),
        spec("mmap-churn", &["mmap-churn", "--seconds", secs]),
        spec("futex-mutex", &["futex-mutex", "--seconds", secs]),
        spec(
            "futex-mutex --pi",
            &["futex-mutex", "--pi", "--seconds", secs],
        ),
        // A bystander: one thread's uncontended pthread mutex loop, which no probe may
        // touch (no lock call of it blocks), beside each system-wide tracer.
        bystander(spec(
            "pthread bystander",
            &[
                "pthread-mutex",
                "--threads",
                "1",
                "--load",
                "0",
                "--seconds",
                secs,
            ],
        )),
        // A second bystander: system calls that touch no lock. Syscall tracepoints (the
        // futex probes) make every task on the machine take the slow syscall path.
        bystander(spec(
            SYSCALL_BYSTANDER,
            &["syscall-loop", "--seconds", secs],
        )),
    ]
}

/// A bystander starts once the tracer has run for [`BYSTANDER_SETTLE`]: it measures a
/// tracer that is running, not one that has just attached.
fn bystander(spec: WorkloadSpec) -> WorkloadSpec {
    WorkloadSpec {
        settle_s: BYSTANDER_SETTLE.as_secs_f64(),
        ..spec
    }
}

/// How long a bystander waits after the tracer is ready. Any BTF object the kernel frees
/// (aya's feature checks load and close eight as lockscope starts) ends in an RCU Tasks
/// Trace grace period. On Linux 6.18, in nearly every trial here, a task that was running
/// through that grace period took the slow path out of every syscall tracepoint from then
/// on (`rcu_read_unlock_trace_special`: 5-7% of a `getppid` loop's samples). A loop
/// started with lockscope's command met that grace period and one started a second later
/// did not, in every trial; bpftrace's start left such a loop alone (see
/// docs/development.md). Started after it, the bystander compares the probes, not whose
/// start-up freed a BTF object last.
const BYSTANDER_SETTLE: Duration = Duration::from_secs(1);

/// Progress: `[run 17/100, 2m10s elapsed, ETA 6m20s] perf / mmap-churn`.
struct Progress {
    total: usize,
    done: usize,
    start: Instant,
}

impl Progress {
    fn step(&mut self, what: &str) {
        self.done += 1;
        let elapsed = self.start.elapsed().as_secs_f64();
        let eta = if self.done > 1 {
            elapsed / (self.done - 1) as f64 * (self.total.saturating_sub(self.done) + 1) as f64
        } else {
            f64::NAN
        };
        println!(
            "bench: [{}/{}, {} elapsed, ETA {}] {what}",
            self.done,
            self.total,
            parse::fmt_duration(elapsed),
            if eta.is_finite() {
                parse::fmt_duration(eta)
            } else {
                "?".into()
            }
        );
    }
}

fn full_run(ctx: &Ctx, runs: Option<usize>) -> Result<BenchResults> {
    let started = Instant::now();
    let runs = runs.unwrap_or(if ctx.quick { 1 } else { 5 });
    if runs == 0 {
        bail!("bench: --runs must be at least 1");
    }
    let mut machine = machine(&ctx.exe);
    let specs = workloads(ctx.quick);
    // Overhead runs, then cost, capacity steps and daemon cases.
    let cap = capacity_plan(ctx.quick);
    let mut progress = Progress {
        // Cost, capacity, two daemon cases, real time, start/stop, memcached.
        total: runs * specs.len() * TOOLS.len() + 1 + cap.len() + 5,
        done: 0,
        start: Instant::now(),
    };
    println!(
        "bench: {} run(s) of {} workloads under {} tools, alternating; then cost per \
         event, capacity ({} steps) and daemon cost",
        runs,
        specs.len(),
        TOOLS.len(),
        cap.len()
    );

    let mut samples: Vec<Vec<Vec<RunSample>>> = vec![vec![Vec::new(); TOOLS.len()]; specs.len()];
    let mut rounds_run_again = Vec::new();
    let cpu_at_start = (proc::busy_cpu_s(), proc::own_cpu_s(), Instant::now());
    for round in 0..runs {
        for (wi, spec) in specs.iter().enumerate() {
            let label = format!("round {}/{runs}", round + 1);
            let mut this_round = run_round(ctx, spec, round + 1, &label, &mut progress)?;
            // The untraced runs, first and last, say whether the machine drifted during
            // the round: then it runs again, once, and the first try is kept aside.
            let apart = untraced_apart(
                this_round[0].throughput,
                this_round[TOOLS.len() - 1].throughput,
            );
            if let Some(window) = run_again_window(&spec.name, apart, ctx.quick) {
                println!(
                    "        untraced runs {apart:.1}% apart (window {window:.0}%): the machine \
                     drifted during the round; running it again"
                );
                progress.total += TOOLS.len();
                let again = run_round(
                    ctx,
                    spec,
                    round + 1,
                    &format!("{label}, again"),
                    &mut progress,
                )?;
                rounds_run_again.push(RoundRunAgain {
                    workload: spec.name.clone(),
                    round: round + 1,
                    apart_pct: apart,
                    runs: TOOLS
                        .iter()
                        .map(|t| t.name().to_string())
                        .zip(std::mem::replace(&mut this_round, again))
                        .collect(),
                });
            }
            for (ti, s) in this_round.into_iter().enumerate() {
                samples[wi][ti].push(s);
            }
        }
    }
    // The bench's own workloads and tools keep the load average high, so whether others
    // competed is what the machine spent beyond this process and its children (the load
    // average at the start only where /proc/stat cannot tell).
    machine.other_cpu_share = cpu_at_start
        .0
        .zip(proc::busy_cpu_s())
        .map(|(busy0, busy1)| {
            parse::other_cpu_share(
                busy1 - busy0,
                proc::own_cpu_s() - cpu_at_start.1,
                cpu_at_start.2.elapsed().as_secs_f64(),
                machine.cpus,
            )
        });
    machine.loaded = match machine.other_cpu_share {
        Some(share) => {
            println!(
                "        other processes used {:.1}% of the CPUs during the overhead runs",
                share * 100.0
            );
            share > parse::OTHER_CPU_LOADED
        }
        None => parse::machine_is_loaded(&machine.load_avg_at_start, machine.cpus),
    };
    let load_end = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    machine.load_avg_at_end = load_end
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    let mut overhead = Vec::new();
    for (wi, spec) in specs.iter().enumerate() {
        let base = Spread::of(&throughputs(&samples[wi][0])).map(|s| s.median);
        for (ti, tool) in TOOLS.iter().enumerate() {
            overhead.push(summarize(&spec.name, *tool, &samples[wi][ti], base));
        }
    }

    progress.step("cost per event (BPF run statistics: empty floor, minimal peer, futex floor)");
    let cost = cost_per_event(ctx)?;

    let mut steps = Vec::new();
    for args in &cap {
        progress.step(&format!("capacity: {}", args.join(" ")));
        let st = capacity_step(ctx, args)?;
        println!(
            "        {} events/s, lost {}{}",
            parse::fmt_si(st.events_per_s),
            st.lost,
            st.exact
                .map(|e| format!(", exact {e} ({:?} seen of {:?})", st.seen, st.truth))
                .unwrap_or_default()
        );
        steps.push(st);
    }
    let capacity = summarize_capacity(steps);

    let mut daemon = Vec::new();
    progress.step("daemon cost under mmap-churn");
    let churn_secs = if ctx.quick { 4.0 } else { 10.0 };
    daemon.push(daemon_case(
        ctx,
        "mmap-churn",
        &[
            "mmap-churn".into(),
            "--seconds".into(),
            format!("{churn_secs}"),
        ],
        churn_secs,
    )?);
    progress.step("daemon cost with 10,000 contended locks");
    daemon.push(daemon_10k(ctx)?);
    progress.step("real-time observer: cyclictest bare and under record -a");
    let realtime = realtime_case(ctx)?;
    println!(
        "        worst max bare {:?} us, traced {:?} us; largest spike lockscope timed: {}; \
         steal: {}",
        realtime.bare_max_us,
        realtime.traced_max_us,
        realtime.splits_text(),
        realtime.steal_text()
    );
    progress.step("start and stop: record -- true, SIGTERM to serve, Ctrl-C, q in top");
    let start_stop = start_stop_case(ctx)?;
    for (ss, beside) in [
        (Some(&start_stop), ""),
        (
            start_stop.under_ptrace_stress.as_deref(),
            ", beside stress-ng --ptrace 4",
        ),
    ] {
        if let Some(ss) = ss {
            println!(
                "        record -- true {:.3?} s, serve SIGTERM {:.3?} s, Ctrl-C in record {:.3?} s (a plain sleep then {:.3?} s), q in top {:.3?} s (a key to a plain reader then {:.3?} s); peer setsid -w true {:.3?} s{beside}",
                ss.record_true_s,
                ss.serve_sigterm_s,
                ss.record_sigint_s,
                ss.sigint_peer_s,
                ss.top_quit_s,
                ss.top_key_peer_s,
                ss.new_session_true_s
            );
        }
    }

    progress.step("memcached under memcslap: bare, beside a recording, traced");
    let memcached = memcached_case(ctx)?;
    let (beside, traced) = memcached.ratios();
    println!(
        "        get time bare {:?} s, beside record {:?} s ({:?}x), traced {:?} s ({:?}x)",
        memcached.bare_s, memcached.beside_s, beside, memcached.traced_s, traced
    );

    Ok(BenchResults {
        schema: SCHEMA.into(),
        machine: Some(machine),
        config: Some(Config {
            quick: ctx.quick,
            runs,
            workloads: specs,
            tools: TOOLS.iter().map(|t| t.name().to_string()).collect(),
            elapsed_s: started.elapsed().as_secs_f64(),
        }),
        overhead,
        cost: Some(cost),
        capacity: Some(capacity),
        daemon,
        soak: None,
        realtime: Some(realtime),
        start_stop: Some(start_stop),
        memcached: Some(memcached),
        targets: Vec::new(),
        rounds_run_again,
    })
}

/// One round of `spec`: the workload under every tool of [`TOOLS`] in turn.
fn run_round(
    ctx: &Ctx,
    spec: &WorkloadSpec,
    round: usize,
    label: &str,
    progress: &mut Progress,
) -> Result<Vec<RunSample>> {
    let mut runs = Vec::with_capacity(TOOLS.len());
    for tool in TOOLS {
        progress.step(&format!("{label}: {} under {}", spec.name, tool.name()));
        let mut s = run_once(ctx, tool, spec)
            .with_context(|| format!("bench: {} under {}", spec.name, tool.name()))?;
        s.round = round;
        println!(
            "        {} ops/s{}",
            parse::fmt_si(s.throughput),
            s.events
                .map(|e| format!(
                    ", {} events/s seen, lost {}",
                    parse::fmt_si(e as f64 / s.window_s.max(1e-9)),
                    s.lost.map_or("n/a".into(), |l| l.to_string())
                ))
                .unwrap_or_default()
        );
        runs.push(s);
    }
    Ok(runs)
}

/// The window a round of `workload` exceeded, when its untraced runs lay `apart` percent
/// apart and it is to run again ([`drift_window`]); None to keep it. Not in --quick: one
/// round judges nothing.
fn run_again_window(workload: &str, apart: f64, quick: bool) -> Option<f64> {
    drift_window(workload).filter(|&w| !quick && apart > w)
}

/// cyclictest's worst `Max:` over its threads (us), from its `-q` summary.
fn cyclictest_worst(text: &str) -> Option<u64> {
    text.split("Max:")
        .skip(1)
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .max()
}

/// cyclictest alone and beside a system-wide recording with latency tracing, alternating.
fn realtime_case(ctx: &Ctx) -> Result<RealTime> {
    let (runs, secs) = if ctx.quick { (1, "2") } else { (3, "6") };
    let args: Vec<String> = ["-S", "-p98", "-m", "-i2000", "-D", secs, "-q"]
        .map(String::from)
        .to_vec();
    let mut rt = RealTime {
        cyclictest_args: args.clone(),
        ..Default::default()
    };
    for i in 0..runs {
        // A keeper letting go would put its grace periods beside the bare run.
        settle_after_keeper();
        let mut bare = Command::new("cyclictest");
        bare.args(&args);
        let steal = proc::StealSampler::start();
        let mut p = Proc::spawn(bare, &ctx.scratch, &format!("cyclictest-bare-{i}"), false)?;
        p.wait(Duration::from_secs(120))?;
        let steal = steal.finish(STEAL_WINDOW_S);
        rt.bare_steal_ms.push(steal.total_ms);
        rt.bare_steal_burst_ms.push(steal.burst_ms);
        rt.bare_max_us.push(
            cyclictest_worst(&p.stdout_text()).context("bench: no Max: in cyclictest's output")?,
        );
        let rec = ctx.scratch.join(format!("cyclictest-traced-{i}.json"));
        let mut traced = ctx.lockscope();
        traced
            .args([
                "record",
                "-a",
                "--latency-threshold",
                "50us",
                "-n",
                "0",
                "-o",
            ])
            .arg(&rec)
            .args(["--", "cyclictest"])
            .args(&args);
        let steal = proc::StealSampler::start();
        let mut p = Proc::spawn(
            traced,
            &ctx.scratch,
            &format!("cyclictest-traced-{i}"),
            false,
        )?;
        p.wait(Duration::from_secs(180))?;
        let steal = steal.finish(STEAL_WINDOW_S);
        rt.traced_steal_ms.push(steal.total_ms);
        rt.traced_steal_burst_ms.push(steal.burst_ms);
        rt.traced_max_us.push(
            cyclictest_worst(&p.stdout_text())
                .context("bench: no Max: in the traced cyclictest's output")?,
        );
        let recording: Value = serde_json::from_str(
            &std::fs::read_to_string(&rec)
                .with_context(|| format!("bench: reading {}", rec.display()))?,
        )
        .with_context(|| format!("bench: parsing {}", rec.display()))?;
        rt.traced_worst_split.push(SpikeSplit::of_worst(&recording));
    }
    Ok(rt)
}

/// Start and stop as a user meets them: `record -- true` (wall), SIGTERM to `serve`,
/// Ctrl-C (SIGINT to the process group, as a terminal sends it) in `record`, and `q` in
/// `top` until the shell is back; `runs` rounds, then again beside `stress-ng --ptrace 4`.
fn start_stop_case(ctx: &Ctx) -> Result<StartStop> {
    let _observer = RtObserver::enter();
    let mut ss = start_stop_rounds(ctx, "")?;
    let mut stress = Command::new("stress-ng");
    stress.args(["--ptrace", "4", "--timeout", "600s"]);
    let mut stress = Proc::spawn(stress, &ctx.scratch, "stress-ptrace", false)?;
    std::thread::sleep(Duration::from_secs(2));
    if !stress.alive() {
        stress.wait(Duration::from_secs(5))?;
        bail!("bench: `stress-ng --ptrace 4` exited at once");
    }
    let loaded = start_stop_rounds(ctx, "ptrace-");
    stress.signal(libc::SIGINT);
    let _ = stress.wait_status(Duration::from_secs(30));
    ss.under_ptrace_stress = Some(Box::new(loaded?));
    Ok(ss)
}

/// The bench's own thread at a real-time priority while it times starts and stops, so
/// that the stopwatch is not what waits: beside `stress-ng --ptrace 4` a plain thread
/// waited seconds for a CPU (a harness saw `top` a zombie 0.10 s after `q`, and its own
/// waitpid return 4.2 s after it). `SCHED_RESET_ON_FORK`: what it starts (lockscope, the
/// peers) runs as a normal task. Back to a normal task when dropped.
struct RtObserver(bool);

impl RtObserver {
    fn enter() -> Self {
        let param = libc::sched_param { sched_priority: 10 };
        // SAFETY: sched_setscheduler on this thread with a valid parameter.
        let ok = unsafe {
            libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param)
        } == 0;
        if !ok {
            println!(
                "        note: timing at a normal priority (SCHED_FIFO refused: {})",
                std::io::Error::last_os_error()
            );
        }
        Self(ok)
    }
}

impl Drop for RtObserver {
    fn drop(&mut self) {
        if self.0 {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: as above.
            unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) };
        }
    }
}

/// How long a start may take here before the bench gives up: beside the ptrace storm a
/// start can wait minutes for the kernel to release an earlier run's tracepoints
/// (docs/development.md, `event_mutex`); that is a measurement, not a failure.
const STORM_START_LIMIT: Duration = Duration::from_secs(300);

fn start_stop_rounds(ctx: &Ctx, tag: &str) -> Result<StartStop> {
    let runs = if ctx.quick { 1 } else { 3 };
    let mut ss = StartStop::default();
    for i in 0..runs {
        let mut c = ctx.lockscope();
        c.args(["record", "--", "true"]);
        let t0 = Instant::now();
        let mut p = Proc::spawn(c, &ctx.scratch, &format!("{tag}record-true-{i}"), false)?;
        p.wait(STORM_START_LIMIT)?;
        ss.record_true_s.push(t0.elapsed().as_secs_f64());

        let (mut serve, _) =
            start_serve_within(ctx, &format!("{tag}serve-sigterm-{i}"), STORM_START_LIMIT)?;
        let t0 = Instant::now();
        serve.signal(libc::SIGTERM);
        serve.wait(Duration::from_secs(120))?;
        ss.serve_sigterm_s.push(t0.elapsed().as_secs_f64());

        let (sigint_s, peer_s, slow) = record_sigint(ctx, &format!("{tag}record-sigint-{i}"), i)?;
        ss.record_sigint_s.push(sigint_s);
        ss.sigint_peer_s.push(peer_s);
        if let Some(slow) = slow {
            println!("        slow Ctrl-C: {}", slow.text());
            ss.record_sigint_slow.push(slow);
        }
        ss.new_session_true_s
            .push(new_session_true(ctx, &format!("{tag}setsid-true-{i}"))?);
        // One run without a screen is the verdict: the later ones would take as long.
        if ss.top_no_screen > 0 {
            continue;
        }
        match top_quit(ctx, &format!("{tag}top-quit-{i}"))? {
            TopRun::Quit {
                start_s,
                quit_s,
                key_peer_s,
            } => {
                ss.top_start_s.push(start_s);
                ss.top_quit_s.push(quit_s);
                ss.top_key_peer_s.push(key_peer_s);
            }
            TopRun::NoScreen => ss.top_no_screen += 1,
            TopRun::NoQuit {
                start_s,
                key_peer_s,
            } => {
                ss.top_start_s.push(start_s);
                ss.top_no_quit_peer_s.push(key_peer_s);
            }
        }
    }
    Ok(ss)
}

/// Ctrl-C in `record -- sleep 60`: SIGINT to the whole process group once the command
/// runs, until `record` has printed its report and exited. Run `run` of its round; with
/// where the stop went if it took longer than the target.
fn record_sigint(
    ctx: &Ctx,
    name: &str,
    run: usize,
) -> Result<(f64, Option<f64>, Option<stopprofile::StopProfile>)> {
    use std::os::unix::process::CommandExt as _;
    let mut c = ctx.lockscope();
    c.args(["record", "--", "sleep", "60"]).process_group(0);
    as_a_foreground_job(&mut c);
    let mut p = Proc::spawn(c, &ctx.scratch, name, false)?;
    let pid = p.pid;
    proc::wait_ready(&mut p, STORM_START_LIMIT, || {
        proc::has_child_named(pid, "sleep")
    })?;
    // Let a status tick or two pass: Ctrl-C comes while the recording is running.
    std::thread::sleep(Duration::from_millis(1500));
    let peer = SigintPeer::start()?;
    let sampler = stopprofile::Sampler::start(pid);
    let t0 = Instant::now();
    peer.interrupt();
    // SAFETY: kill(2) on the process group of our own child, which leads it.
    unsafe { libc::kill(-pid, libc::SIGINT) };
    p.wait_status(Duration::from_secs(60))?;
    let s = t0.elapsed().as_secs_f64();
    let slow = sampler.finish(run, s, SIGINT_LIMIT_S);
    let peer_s = peer.gone(
        t0,
        Duration::from_secs(if s <= SIGINT_LIMIT_S { 2 } else { 60 }),
    );
    // The report's summary line.
    if !p.stdout_text().contains("tier: ") {
        bail!(
            "bench: `record` printed no report after Ctrl-C; its stderr ends with:\n{}",
            p.stderr_tail()
        );
    }
    Ok((s, peer_s, slow))
}

/// Start `c` with SIGINT and SIGQUIT at their defaults, as a shell starts a foreground
/// job (what Ctrl-C reaches). A bench started in the background by a non-interactive
/// shell has them ignored, and ignored signals stay ignored across exec: `record` would
/// catch the SIGINT, but its command (started before) would not die of it.
fn as_a_foreground_job(c: &mut Command) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: between fork and exec the closure only calls signal(2), which is
    // async-signal-safe.
    unsafe {
        c.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            Ok(())
        });
    }
}

/// The peer of Ctrl-C in `record`: a plain `sleep 60` in a process group of its own,
/// sent SIGINT at the same moment, until it is reaped. Beside `stress-ng --ptrace 4`
/// this kernel can leave any runnable task without a CPU for seconds; this shows how
/// long an ordinary program took to get the signal, die and be reaped meanwhile.
struct SigintPeer {
    pid: i32,
    gone: std::sync::mpsc::Receiver<Instant>,
    reaped: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl SigintPeer {
    fn start() -> Result<Self> {
        use std::os::unix::process::CommandExt as _;
        let mut c = Command::new("sleep");
        c.arg("60")
            .process_group(0)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null());
        as_a_foreground_job(&mut c);
        let mut child = c.spawn().context("bench: could not start `sleep`")?;
        let pid = child.id() as i32;
        let (tx, gone) = std::sync::mpsc::channel();
        let reaped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = reaped.clone();
        std::thread::spawn(move || {
            if child.wait().is_ok() {
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                let _ = tx.send(Instant::now());
            }
        });
        Ok(Self { pid, gone, reaped })
    }

    fn interrupt(&self) {
        // SAFETY: kill(2) on the process group our own child leads.
        unsafe { libc::kill(-self.pid, libc::SIGINT) };
    }

    /// Seconds from `sent` until the peer was reaped, waiting up to `limit`.
    fn gone(&self, sent: Instant, limit: Duration) -> Option<f64> {
        self.gone
            .recv_timeout(limit)
            .ok()
            .map(|t| t.saturating_duration_since(sent).as_secs_f64())
    }
}

impl Drop for SigintPeer {
    fn drop(&mut self) {
        // Not reaped in time: killed (the thread reaps it). Once reaped, its pid is free.
        if !self.reaped.load(std::sync::atomic::Ordering::SeqCst) {
            // SAFETY: as in interrupt.
            unsafe { libc::kill(-self.pid, libc::SIGKILL) };
        }
    }
}

/// The peer of the start and stop cases: `setsid -w true`, wall. A program in a
/// session of its own (as every new terminal window, tmux pane or ssh login starts)
/// runs in its own scheduler autogroup; beside `stress-ng --ptrace 4` in another one,
/// this kernel leaves such a group waiting for up to tens of seconds (with
/// `kernel.sched_autogroup_enabled=0` it does not).
///
/// A peer that has not finished within [`PEER_LIMIT`] is killed and counted at the limit
/// (a lower bound, said so): the peer's figure is context, never a reason to fail the run.
fn new_session_true(ctx: &Ctx, name: &str) -> Result<f64> {
    let mut c = Command::new("setsid");
    c.args(["-w", "true"]);
    let t0 = Instant::now();
    let mut p = Proc::spawn(c, &ctx.scratch, name, false)?;
    if p.wait_status(PEER_LIMIT).is_err() {
        println!("        `setsid -w true` still running after {PEER_LIMIT:?}: counted as that");
        return Ok(PEER_LIMIT.as_secs_f64());
    }
    Ok(t0.elapsed().as_secs_f64())
}

const PEER_LIMIT: Duration = Duration::from_secs(120);

/// `q` in `lockscope top` until it has restored the terminal and exited (the shell is
/// back then). `top` runs on a pseudo-terminal of our own, in the bench's session like
/// every other case here: a session of its own would put it in a scheduler autogroup of
/// its own, which beside `stress-ng --ptrace 4` waits tens of seconds to run at all,
/// lockscope or not (see [`new_session_true`]; that is also why tmux is not used).
enum TopRun {
    /// Seconds to the first screen, from `q` to the exit, and for a key pressed at the
    /// same moment to reach a plain reader ([`KeyPeer`]; `None`: not within its limit).
    Quit {
        start_s: f64,
        quit_s: f64,
        key_peer_s: Option<f64>,
    },
    /// No screen within [`TOP_START_LIMIT`] (killed then).
    NoScreen,
    /// Not exited within [`TOP_QUIT_LIMIT`] of `q` (killed then), and when a key pressed
    /// at the same moment reached a plain reader (`None`: not within that time either).
    NoQuit {
        start_s: f64,
        key_peer_s: Option<f64>,
    },
}

const TOP_START_LIMIT: Duration = Duration::from_secs(120);
const TOP_QUIT_LIMIT: Duration = Duration::from_secs(TOP_QUIT_WAIT_S as u64);

/// A pseudo-terminal (master, slave) of 45 x 160, both close-on-exec: a child holding
/// the master would keep the terminal up.
fn open_pty() -> Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::{FromRawFd as _, OwnedFd};
    let (mut master, mut slave) = (0, 0);
    let ws = libc::winsize {
        ws_row: 45,
        ws_col: 160,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty writes two descriptors; null name and termios, a valid winsize.
    if unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &ws,
        )
    } != 0
    {
        bail!("bench: openpty: {}", std::io::Error::last_os_error());
    }
    for fd in [master, slave] {
        // SAFETY: fcntl on descriptors we own.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    // SAFETY: descriptors openpty just gave us, owned by no one else.
    Ok(unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) })
}

/// The peer of `q` in `top`: a key pressed on a terminal of its own at the same moment,
/// until a plain reader (a thread blocked in read(2)) has it. The kernel hands terminal
/// input to readers from a worker thread (the terminal's flip-buffer work); beside
/// `stress-ng --ptrace 4` this kernel leaves that worker runnable but without a CPU for
/// up to tens of seconds, and every terminal's keys wait with it, lockscope or not.
struct KeyPeer {
    master: std::fs::File,
    got: std::sync::mpsc::Receiver<Instant>,
}

impl KeyPeer {
    fn open() -> Result<Self> {
        use std::io::Read as _;
        use std::os::fd::AsRawFd as _;
        let (master, slave) = open_pty()?;
        // Raw: one byte is a whole read, no line editing in between.
        // SAFETY: termios is plain data; tcgetattr fills it, tcsetattr reads it.
        let raw = unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            libc::tcgetattr(slave.as_raw_fd(), &mut t) == 0 && {
                libc::cfmakeraw(&mut t);
                libc::tcsetattr(slave.as_raw_fd(), libc::TCSANOW, &t) == 0
            }
        };
        if !raw {
            bail!(
                "bench: raw mode on a pseudo-terminal: {}",
                std::io::Error::last_os_error()
            );
        }
        let (tx, got) = std::sync::mpsc::channel();
        let mut slave = std::fs::File::from(slave);
        // Ends with the key, or at EIO once the master is closed (dropped with us).
        std::thread::spawn(move || {
            let mut b = [0u8; 1];
            if matches!(slave.read(&mut b), Ok(1)) {
                let _ = tx.send(Instant::now());
            }
        });
        Ok(Self {
            master: std::fs::File::from(master),
            got,
        })
    }

    /// Press the key; the moment it was written.
    fn press(&mut self) -> Result<Instant> {
        use std::io::Write as _;
        let t = Instant::now();
        self.master.write_all(b"q")?;
        Ok(t)
    }

    /// Seconds from `pressed` until the reader had the key, waiting up to `limit`.
    fn delivered(&self, pressed: Instant, limit: Duration) -> Option<f64> {
        self.got
            .recv_timeout(limit)
            .ok()
            .map(|t| t.duration_since(pressed).as_secs_f64())
    }
}

fn top_quit(ctx: &Ctx, name: &str) -> Result<TopRun> {
    use std::io::{Read as _, Write as _};
    let (master, slave) = open_pty()?;
    let err = ctx.scratch.join(format!("{name}.err"));
    let mut c = ctx.lockscope();
    c.args(["top", "--interval", "500ms"])
        .env("TERM", "xterm-256color")
        .stdin(std::process::Stdio::from(slave.try_clone()?))
        .stdout(std::process::Stdio::from(slave.try_clone()?))
        .stderr(std::fs::File::create(&err)?);
    let mut child = c
        .spawn()
        .context("bench: could not start `lockscope top`")?;
    // Only the child holds the terminal now (the reader sees EIO once it exits).
    drop(c);
    drop(slave);
    let screen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let reader = {
        let screen = screen.clone();
        let mut m = std::fs::File::from(master.try_clone()?);
        let mut answer = std::fs::File::from(master.try_clone()?);
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            let query = b"\x1b[6n";
            // Ends at EIO once the last holder of the terminal is gone.
            while let Ok(n) = m.read(&mut buf) {
                if n == 0 {
                    break;
                }
                // Answer cursor position queries as a terminal would.
                for _ in buf[..n].windows(query.len()).filter(|w| w == query) {
                    let _ = answer.write_all(b"\x1b[1;1R");
                }
                screen.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    };
    let started = Instant::now();
    let result = (|| -> Result<TopRun> {
        let deadline = started + TOP_START_LIMIT;
        let tier = b"tier";
        while !screen
            .lock()
            .unwrap()
            .windows(tier.len())
            .any(|w| w == tier)
        {
            if child.try_wait()?.is_some() {
                bail!(
                    "bench: `lockscope top` exited before its first screen; its stderr: {}",
                    std::fs::read_to_string(&err).unwrap_or_default()
                );
            }
            if Instant::now() > deadline {
                println!("        `lockscope top` drew no screen within {TOP_START_LIMIT:?}");
                let _ = child.kill();
                return Ok(TopRun::NoScreen);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let start_s = started.elapsed().as_secs_f64();
        // A few refreshes with data before quitting.
        std::thread::sleep(Duration::from_millis(1500));
        let mut m = std::fs::File::from(master.try_clone()?);
        let mut peer = KeyPeer::open()?;
        let pressed = peer.press()?;
        let t0 = Instant::now();
        m.write_all(b"q")?;
        // Beside a ptrace storm a key took up to 51 s to reach even a plain reader (the
        // kernel delivers it late to any program): wait well past that.
        let deadline = t0 + TOP_QUIT_LIMIT;
        loop {
            if let Some(status) = child.try_wait()? {
                let s = t0.elapsed().as_secs_f64();
                if !status.success() {
                    bail!(
                        "bench: `lockscope top` exited with {status} after q; its stderr: {}",
                        std::fs::read_to_string(&err).unwrap_or_default()
                    );
                }
                // The peer's figure matters only beside a slow quit.
                let limit = if s <= 0.5 {
                    2.0
                } else {
                    TOP_QUIT_LIMIT.as_secs_f64()
                };
                return Ok(TopRun::Quit {
                    start_s,
                    quit_s: s,
                    key_peer_s: peer.delivered(pressed, Duration::from_secs_f64(limit)),
                });
            }
            if Instant::now() > deadline {
                // Beside a ptrace storm the kernel has held a key longer than this: a
                // measure (judged against the plain reader's key), not a failed bench.
                println!("        `lockscope top` had not exited {TOP_QUIT_LIMIT:?} after `q`");
                let _ = child.kill();
                return Ok(TopRun::NoQuit {
                    start_s,
                    key_peer_s: peer.delivered(pressed, Duration::from_millis(10)),
                });
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    })();
    if result.is_err() {
        let _ = child.kill();
    }
    let _ = child.wait();
    drop(master);
    let _ = reader.join();
    result
}

/// memcached (2 worker threads) serving memcslap's gets (4 client threads): alone, while
/// `lockscope record` profiles an unrelated command (`cat`), and while `lockscope record
/// -p` traces memcached itself; alternating, `runs` rounds.
fn memcached_case(ctx: &Ctx) -> Result<Memcached> {
    let (runs, per_thread) = if ctx.quick {
        (1, "20000")
    } else {
        (3, "50000")
    };
    let port = proc::free_port()?;
    let mut server = Command::new("memcached");
    server.args(["-t", "2", "-U", "0", "-l", "127.0.0.1", "-u", "root", "-p"]);
    server.arg(port.to_string());
    let mut server = Proc::spawn(server, &ctx.scratch, "memcached", false)?;
    proc::wait_ready(&mut server, Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    })?;
    let args: Vec<String> = [
        format!("--servers=127.0.0.1:{port}"),
        "--concurrency=4".into(),
        format!("--execute-number={per_thread}"),
        "--test=get".into(),
    ]
    .to_vec();
    let mut m = Memcached {
        server_threads: 2,
        memcslap_args: args.clone(),
        ..Default::default()
    };
    let slap = |name: &str| -> Result<f64> {
        let mut c = Command::new("memcslap");
        c.args(&args);
        let mut p = Proc::spawn(c, &ctx.scratch, name, false)?;
        p.wait(Duration::from_secs(600))?;
        parse::memcslap_get_seconds(&p.stdout_text())
            .with_context(|| format!("bench: no `Time to get` in memcslap's output ({name})"))
    };
    // A recording must be attached before the load starts: `-- cat` runs once attached;
    // `-p` prints its first line once attached.
    let attached = |p: &mut Proc, with_cat: bool| -> Result<()> {
        let (pid, err) = (p.pid, p.stderr.clone());
        proc::wait_ready(p, Duration::from_secs(90), || {
            if with_cat {
                proc::has_child_named(pid, "cat")
            } else {
                std::fs::read_to_string(&err).is_ok_and(|t| t.contains("lockscope: recording"))
            }
        })
    };
    let result = (|| -> Result<()> {
        for i in 0..runs {
            settle_after_keeper();
            m.bare_s.push(slap(&format!("memcslap-bare-{i}"))?);

            let mut rec = ctx.lockscope();
            rec.args(["record", "-n", "1", "-o"])
                .arg(ctx.scratch.join(format!("memcached-beside-{i}.json")))
                .arg("--")
                .arg(&ctx.cat);
            let mut rec = Proc::spawn(rec, &ctx.scratch, &format!("memcached-beside-{i}"), true)?;
            attached(&mut rec, true)?;
            m.beside_s.push(slap(&format!("memcslap-beside-{i}"))?);
            drop(rec.stdin.take());
            rec.wait(Duration::from_secs(120))?;

            settle_after_keeper();
            let file = ctx.scratch.join(format!("memcached-traced-{i}.json"));
            let mut rec = ctx.lockscope();
            rec.args(["record", "-n", "1", "-p"])
                .arg(server.pid.to_string())
                .arg("-o")
                .arg(&file);
            let mut rec = Proc::spawn(rec, &ctx.scratch, &format!("memcached-traced-{i}"), false)?;
            attached(&mut rec, false)?;
            m.traced_s.push(slap(&format!("memcslap-traced-{i}"))?);
            rec.signal(libc::SIGINT);
            rec.wait(Duration::from_secs(120))?;
            let traced = read_json(&file)?;
            m.traced_waits.push(
                traced["locks"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|l| l["contended"].as_u64()).sum())
                    .unwrap_or(0),
            );
        }
        Ok(())
    })();
    server.signal(libc::SIGTERM);
    let _ = server.wait(Duration::from_secs(30));
    result?;
    Ok(m)
}

fn throughputs(s: &[RunSample]) -> Vec<f64> {
    s.iter().map(|r| r.throughput).collect()
}

fn summarize(workload: &str, tool: Tool, runs: &[RunSample], base: Option<f64>) -> OverheadRow {
    let throughput = Spread::of(&throughputs(runs)).unwrap_or(Spread {
        median: 0.0,
        min: 0.0,
        max: 0.0,
        spread_pct: 0.0,
        n: 0,
    });
    let med = |f: &dyn Fn(&RunSample) -> Option<f64>| {
        let v: Vec<f64> = runs.iter().filter_map(f).collect();
        parse::median(&v)
    };
    OverheadRow {
        workload: workload.to_string(),
        tool: tool.name().to_string(),
        ratio_to_untraced: base.filter(|b| *b > 0.0).map(|b| throughput.median / b),
        throughput,
        events_per_s: med(&|r| r.events.map(|e| e as f64 / r.window_s.max(1e-9))),
        cpu_s: med(&|r| r.cpu_s),
        maxrss_kib: runs.iter().filter_map(|r| r.maxrss_kib).max(),
        lost: runs
            .iter()
            .map(|r| r.lost)
            .try_fold(0u64, |acc, l| l.map(|l| acc + l)),
        runs: runs.to_vec(),
    }
}

/// What lockscope's keeper is called: the process that lets the futex syscall
/// tracepoints go after `record` or `serve` has exited.
const KEEPER: &str = "lockscope-bg";

/// Start a run only once the previous run's keeper is gone. Until its last syscall
/// tracepoint is released (about a second after `record` exits on a quiet machine:
/// each release waits for grace periods), every system call on the machine still takes
/// the kernel's traced path, and a tracer attaching meanwhile waits behind it for the
/// kernel's `event_mutex`: the run after lockscope's would pay for lockscope's exit.
fn settle_after_keeper() {
    let (waited, left) = proc::wait_gone(KEEPER, Duration::from_secs(120));
    if left {
        println!(
            "        an earlier run's {KEEPER} was still there after {:.0} s; going on",
            waited.as_secs_f64()
        );
    }
}

/// Run the workload once, under `tool`.
fn run_once(ctx: &Ctx, tool: Tool, spec: &WorkloadSpec) -> Result<RunSample> {
    let dir = &ctx.scratch;
    settle_after_keeper();
    let ready_timeout = Duration::from_secs(90);
    let stop_timeout = Duration::from_secs(180);
    let mut tracer = match tool {
        Tool::Untraced | Tool::UntracedAfter => None,
        Tool::RecordCommand => return record_command(ctx, spec),
        Tool::Record | Tool::RecordBlocking => {
            let mut c = ctx.lockscope();
            c.arg("record");
            if tool == Tool::RecordBlocking {
                c.args(["--futex-mode", "blocking"]);
            }
            c.args(["-a", "-n", "1", "-o"])
                .arg(dir.join(format!("{}.json", tool.name())))
                .arg("--")
                .arg(&ctx.cat);
            Some(Proc::spawn(c, dir, tool.name(), true)?)
        }
        Tool::Serve => None, // below: it needs a port
        Tool::Perf => {
            let mut c = Command::new("perf");
            c.args(["lock", "record", "-a", "-o"])
                .arg(dir.join("perf.data"))
                .arg("--")
                .arg(&ctx.cat);
            Some(Proc::spawn(c, dir, "perf", true)?)
        }
        Tool::Bpftrace => {
            let mut c = Command::new("bpftrace");
            c.args(["-e", BPFTRACE_SCRIPT, "-c"]).arg(&ctx.cat);
            Some(Proc::spawn(c, dir, "bpftrace", true)?)
        }
        Tool::SyscallFloor => {
            let c = syscall_floor(BPFTRACE_SYSCALL_FLOOR).command(ctx)?;
            Some(Proc::spawn(c, dir, "syscall-floor", true)?)
        }
    };
    let mut serve = None;
    if tool == Tool::Serve {
        let (p, port) = start_serve(ctx, "serve")?;
        serve = Some((Scraper::start(port), port));
        tracer = Some(p);
    }
    if let Some(t) = tracer.as_mut()
        && tool != Tool::Serve
    {
        let pid = t.pid;
        proc::wait_ready(t, ready_timeout, || proc::has_child_named(pid, "cat"))?;
    }
    if tracer.is_some() && spec.settle_s > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(spec.settle_s));
    }
    let ready = Instant::now();
    let w = run_workload(ctx, &spec.args)?;
    let window_s = ready.elapsed().as_secs_f64();
    let mut sample = RunSample {
        throughput: w["ops_per_s"].as_f64().unwrap_or(0.0),
        real_s: workload_real_s(&w),
        window_s,
        ..Default::default()
    };
    let Some(mut t) = tracer else {
        return Ok(sample);
    };
    if let Some((scraper, port)) = serve {
        let st = scraper.finish(port);
        t.signal(libc::SIGTERM);
        let u = t.wait(stop_timeout)?;
        sample.cpu_s = Some(u.cpu_s);
        sample.maxrss_kib = Some(u.maxrss_kib);
        sample.scrapes = Some(st.ok);
        if st.failed > 0 {
            bail!(
                "bench: {} of the scrapes of lockscope serve failed",
                st.failed
            );
        }
        sample.events = parse::prom_sum(
            &st.last,
            "lockscope_contention_events_total",
            &[("event", "begin")],
        )
        .map(|v| v as u64);
        sample.lost =
            parse::prom_sum(&st.last, "lockscope_events_lost_total", &[]).map(|v| v as u64);
        sample.lost_by_reason =
            parse::prom_by_label(&st.last, "lockscope_events_lost_total", "reason")
                .into_iter()
                .filter(|(_, v)| *v > 0.0)
                .map(|(k, v)| (k, v as u64))
                .collect();
        if let Some(traced) = parse::prom_sum(&st.last, "lockscope_traced_seconds", &[]) {
            sample.window_s = traced;
        }
        return Ok(sample);
    }
    let u = t.wait(stop_timeout)?;
    sample.cpu_s = Some(u.cpu_s);
    sample.maxrss_kib = Some(u.maxrss_kib);
    match tool {
        Tool::Record | Tool::RecordBlocking => add_recording(
            &mut sample,
            &read_json(&dir.join(format!("{}.json", tool.name())))?,
        ),
        Tool::Perf => {
            let data = dir.join("perf.data");
            let text = crate::util::output(
                Command::new("perf")
                    .args(["report", "--stats", "-i"])
                    .arg(&data),
            )?;
            let st = parse::parse_perf_stats(&text);
            sample.events = Some(st.begin);
            sample.lost = Some(st.lost_records);
            let _ = std::fs::remove_file(&data);
        }
        Tool::Bpftrace => {
            let m = parse::parse_bpftrace_scalars(&t.stdout_text());
            sample.events = Some(
                *m.get("begin")
                    .context("bench: bpftrace printed no @begin")?,
            );
        }
        // Untraced, serve and record-command returned above.
        Tool::Untraced
        | Tool::UntracedAfter
        | Tool::Serve
        | Tool::SyscallFloor
        | Tool::RecordCommand => {}
    }
    Ok(sample)
}

/// `lockscope record -- lockscope workload ARGS`: the workload as the traced command. Its
/// summary comes through record's stdout; record's own CPU time is its rusage less the
/// workload's (`wait4` counts the children record waited for).
fn record_command(ctx: &Ctx, spec: &WorkloadSpec) -> Result<RunSample> {
    let out = ctx.scratch.join("record-command.json");
    let c = ctx.record_workload(&out, &spec.args);
    let mut p = Proc::spawn(c, &ctx.scratch, "record-command", false)?;
    let u = p.wait(Duration::from_secs(600))?;
    let w = parse::workload_summary(&p.stdout_text()).with_context(|| {
        format!(
            "bench: `lockscope record -- lockscope workload {}` printed no JSON summary",
            spec.args.join(" ")
        )
    })?;
    let real_s = workload_real_s(&w);
    // Only where the workload reports its own CPU time can record's be told apart.
    let workload_cpu = w["usr_s"].as_f64().zip(w["sys_s"].as_f64());
    let mut sample = RunSample {
        throughput: w["ops_per_s"].as_f64().unwrap_or(0.0),
        real_s,
        window_s: real_s,
        cpu_s: workload_cpu.map(|(usr, sys)| (u.cpu_s - usr - sys).max(0.0)),
        // wait4's peak RSS is the largest of record's and the workload's: not record's own.
        maxrss_kib: None,
        ..Default::default()
    };
    add_recording(&mut sample, &read_json(&out)?);
    Ok(sample)
}

/// What a recording says it saw and lost: `lock:contention_begin` events, and its
/// `lost` counters in all and by reason.
fn add_recording(sample: &mut RunSample, rec: &Value) {
    sample.events = rec["events"]["begin"].as_u64();
    sample.lost = Some(lost_total(rec));
    sample.lost_by_reason = rec["lost"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_u64().filter(|n| *n > 0)?)))
        .collect();
}

/// A workload's own wall time: `real_s`, or `elapsed_s` (syscall-loop).
fn workload_real_s(w: &Value) -> f64 {
    w["real_s"]
        .as_f64()
        .or_else(|| w["elapsed_s"].as_f64())
        .unwrap_or(0.0)
}

fn lost_total(rec: &Value) -> u64 {
    rec["lost"]
        .as_object()
        .map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
}

/// The `lost` counters that are futex calls not stored (`futex_*`).
fn futex_lost(rec: &Value) -> u64 {
    rec["lost"].as_object().map_or(0, |m| {
        m.iter()
            // A wait whose minimum or maximum was not stored is still counted.
            .filter(|(k, _)| k.starts_with("futex_") && *k != "futex_min_max_missed")
            .filter_map(|(_, v)| v.as_u64())
            .sum()
    })
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("bench: reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("bench: parsing {}", path.display()))
}

/// `lockscope workload ARGS` (with `--json`), to completion; its summary.
fn run_workload(ctx: &Ctx, args: &[String]) -> Result<Value> {
    let mut p = Proc::spawn(ctx.workload_cmd(args), &ctx.scratch, "workload", false)?;
    p.wait(Duration::from_secs(600))?;
    parse::workload_summary(&p.stdout_text()).with_context(|| {
        format!(
            "bench: `lockscope workload {}` printed no JSON summary",
            args.join(" ")
        )
    })
}

/// Start `lockscope serve` on a free port and wait for /healthz (probes attached).
fn start_serve(ctx: &Ctx, name: &str) -> Result<(Proc, u16)> {
    start_serve_within(ctx, name, Duration::from_secs(90))
}

/// `start_serve`, waiting up to `ready` for its first answer.
fn start_serve_within(ctx: &Ctx, name: &str, ready: Duration) -> Result<(Proc, u16)> {
    let port = proc::free_port()?;
    let mut c = ctx.lockscope();
    c.args(["serve", "--interval", "1s", "--listen"])
        .arg(format!("127.0.0.1:{port}"));
    let mut p = Proc::spawn(c, &ctx.scratch, name, false)?;
    proc::wait_ready(&mut p, ready, || {
        matches!(proc::http_get(port, "/healthz"), Ok((200, _)))
    })?;
    Ok((p, port))
}

/// The minimal peer of issue 14: begin/end paired per thread into a per-lock histogram,
/// no stacks.
const BPFTRACE_PEER: &str = "\
tracepoint:lock:contention_begin { @start[tid] = nsecs; }
tracepoint:lock:contention_end /@start[tid]/ {
  @wait_ns[args->lock_addr] = hist(nsecs - @start[tid]); delete(@start[tid]);
}
END { clear(@start); clear(@wait_ns); }";

/// Empty programs on the futex syscall tracepoints: the floor of a futex call's cost.
const BPFTRACE_FUTEX_FLOOR: &str =
    "tracepoint:syscalls:sys_enter_futex { } tracepoint:syscalls:sys_exit_futex { }";

/// Programs of `lockscope record -a` and of bpftrace scripts (owner, script), all
/// attached together, over one run of `workload`: each program's runs and run time in
/// that window, from `/proc/PID/fdinfo` with the kernel's BPF run statistics on.
///
/// Programs on one tracepoint run one after another in the order they attached, and the
/// first pays the cache misses (the task, the lock, the clock) the later ones then hit:
/// measured under mmap-churn, the peer's begin + end took 190 + 350 ns attached after
/// lockscope and 245 + 420 ns attached before it. So each tool is attached and ready
/// before the next starts, in the order `peers_first` says; see [`side_by_side_fair`].
fn side_by_side(
    ctx: &Ctx,
    name: &str,
    record_args: &[&str],
    peers: &[(&str, Peer)],
    workload: &[String],
    peers_first: bool,
) -> Result<(Vec<ProgCost>, f64)> {
    let dir = &ctx.scratch;
    let _stats = proc::BpfStats::enable()?;
    let file = dir.join(format!("{name}.json"));
    let spawn_record = || -> Result<(&str, Proc)> {
        let mut c = ctx.lockscope();
        c.arg("record")
            .args(record_args)
            .args(["-a", "-n", "1", "-o"])
            .arg(&file)
            .arg("--")
            .arg(&ctx.cat);
        Ok((
            "lockscope",
            Proc::spawn(c, dir, &format!("{name}-record"), true)?,
        ))
    };
    // Ready: the command runs, which both tools start only once their probes are attached.
    let ready = |p: &mut Proc| {
        let pid = p.pid;
        proc::wait_ready(p, Duration::from_secs(90), || {
            proc::has_child_named(pid, "cat")
        })
    };
    // lockscope stays first in `procs` (its CPU time is read from `procs[0]`).
    let mut procs = Vec::new();
    if !peers_first {
        procs.push(spawn_record()?);
        ready(&mut procs[0].1)?;
    }
    let mut peer_procs = Vec::new();
    for (owner, peer) in peers {
        let c = peer.command(ctx)?;
        let mut p = Proc::spawn(c, dir, &format!("{name}-{owner}"), true)?;
        ready(&mut p)?;
        peer_procs.push((*owner, p));
    }
    if peers_first {
        procs.push(spawn_record()?);
        ready(&mut procs[0].1)?;
    }
    procs.extend(peer_procs);
    // Programs run before the workload starts too: measure deltas over it.
    let before: Vec<_> = procs
        .iter()
        .map(|(_, p)| proc::prog_fdinfos(p.pid))
        .collect();
    let cpu_before = proc::cpu_seconds(procs[0].1.pid).unwrap_or(0.0);
    run_workload(ctx, workload)?;
    let after: Vec<_> = procs
        .iter()
        .map(|(_, p)| proc::prog_fdinfos(p.pid))
        .collect();
    let cpu_s = proc::cpu_seconds(procs[0].1.pid).unwrap_or(0.0) - cpu_before;
    let names = crate::util::output(Command::new("bpftool").args(["prog", "show", "--json"]))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .map(|v| parse::prog_names(&v))
        .unwrap_or_default();
    for (_, p) in procs.iter_mut() {
        p.wait(Duration::from_secs(180))?;
    }
    // The recording must be readable (the run really traced), though the counts used
    // are the programs' own over the workload window.
    read_json(&file)?;
    let mut programs = Vec::new();
    for (i, (owner, _)) in procs.iter().enumerate() {
        let mut mine: Vec<ProgCost> = after[i]
            .iter()
            .map(|a| {
                let b = before[i].iter().find(|b| b.prog_id == a.prog_id);
                let run_cnt = a.run_cnt - b.map_or(0, |b| b.run_cnt);
                let run_time_ns = a.run_time_ns - b.map_or(0, |b| b.run_time_ns);
                ProgCost {
                    owner: owner.to_string(),
                    name: names
                        .get(&u64::from(a.prog_id))
                        .cloned()
                        .unwrap_or_else(|| format!("id {}", a.prog_id)),
                    run_cnt,
                    run_time_ns,
                    ns_per_run: (run_cnt > 0).then(|| run_time_ns as f64 / run_cnt as f64),
                }
            })
            .filter(|p| p.run_cnt > 0)
            .collect();
        mine.sort_by_key(|p| std::cmp::Reverse(p.run_cnt));
        programs.extend(mine);
    }
    Ok((programs, cpu_s))
}

/// [`side_by_side`] twice, lockscope attached first and then last: the programs' runs
/// and run time summed over both (so neither tool is measured only in the costlier
/// place), lockscope's CPU time over both, and each order's programs (lockscope first,
/// then the peers first).
fn side_by_side_fair(
    ctx: &Ctx,
    name: &str,
    record_args: &[&str],
    peers: &[(&str, Peer)],
    workload: &[String],
) -> Result<(Vec<ProgCost>, f64, [Vec<ProgCost>; 2])> {
    let (a, cpu_a) = side_by_side(ctx, name, record_args, peers, workload, false)?;
    let (b, cpu_b) = side_by_side(ctx, name, record_args, peers, workload, true)?;
    Ok((merge_prog_costs(&[&a, &b]), cpu_a + cpu_b, [a, b]))
}

/// ns per run of `owner`'s busiest program whose (kernel-shortened, 15 characters) name
/// starts with `prefix`.
fn ns_of(programs: &[ProgCost], owner: &str, prefix: &str) -> Option<f64> {
    programs
        .iter()
        .filter(|p| p.owner == owner && p.name.starts_with(prefix))
        .max_by_key(|p| p.run_cnt)
        .and_then(|p| p.ns_per_run)
}

/// Cost per event: lockscope record, the empty floor program and the minimal peer side
/// by side under mmap-churn; then lockscope's futex probes beside empty programs on the
/// same tracepoints under futex-mutex.
fn cost_per_event(ctx: &Ctx) -> Result<Cost> {
    let secs = if ctx.quick { "1" } else { "3" };
    let workload = |w: &[&str]| -> Vec<String> {
        w.iter()
            .chain(&["--seconds", secs, "--json"])
            .map(|a| a.to_string())
            .collect()
    };
    let churn = workload(&["mmap-churn"]);
    let (programs, cpu_s, by_order) = side_by_side_fair(
        ctx,
        "cost",
        &[],
        &[
            ("floor", Peer::Bpftrace(BPFTRACE_FLOOR)),
            ("peer", Peer::Bpftrace(BPFTRACE_PEER)),
        ],
        &churn,
    )?;
    let begin_ns = ns_of(&programs, "lockscope", "contention_beg");
    let end_ns = ns_of(&programs, "lockscope", "contention_end");
    let floor_ns = ns_of(&programs, "floor", "contention_beg");
    let peer_begin_ns = ns_of(&programs, "peer", "contention_beg");
    let peer_end_ns = ns_of(&programs, "peer", "contention_end");
    let worst = match (begin_ns, end_ns) {
        (Some(b), Some(e)) => Some(b.max(e)),
        (b, e) => b.or(e),
    };
    let pair_ratio = |programs: &[ProgCost]| {
        let pair = |owner| {
            ns_of(programs, owner, "contention_beg")
                .zip(ns_of(programs, owner, "contention_end"))
                .map(|(b, e)| b + e)
        };
        pair("lockscope").zip(pair("peer")).map(|(a, b)| a / b)
    };
    // Events over the workload window: contention_begin runs.
    let events = programs
        .iter()
        .find(|p| p.owner == "lockscope" && p.name.starts_with("contention_beg"))
        .map_or(0, |p| p.run_cnt);
    let total_ns: u64 = programs
        .iter()
        .filter(|p| p.owner == "lockscope")
        .map(|p| p.run_time_ns)
        .sum();

    let futex = futex_cost(ctx, "cost-futex", &workload(&["futex-mutex"]))?;
    let futex_nonblocking = futex_cost(
        ctx,
        "cost-futex-wake",
        &workload(&["syscall-loop", "--futex-wake"]),
    )?;
    let futex_blocking = blocking_cost(ctx, &workload(&["futex-mutex", "--pi"]))?;
    let ratio_to_peer = pair_ratio(&programs);
    Ok(Cost {
        workload: churn.join(" "),
        programs,
        floor_ns,
        begin_ns,
        end_ns,
        ratio_to_floor: worst.zip(floor_ns).map(|(w, f)| w / f),
        peer_begin_ns,
        peer_end_ns,
        ratio_to_peer,
        ratio_to_peer_by_order: by_order.iter().map(|p| pair_ratio(p)).collect(),
        contention_events: events,
        ns_per_contention_event: (events > 0).then(|| total_ns as f64 / events as f64),
        user_cpu_ns_per_event: (events > 0).then(|| cpu_s * 1e9 / events as f64),
        futex: Some(futex),
        futex_nonblocking: Some(futex_nonblocking),
        futex_blocking: Some(futex_blocking),
    })
}

/// An empty program on `sched:sched_switch`: the floor of blocking mode's cost.
const BPFTRACE_SWITCH_FLOOR: &str = "tracepoint:sched:sched_switch { }";

/// `record --futex-mode blocking`'s context-switch program beside an empty one on the
/// same event, over two runs of `workload` (one in each attach order).
fn blocking_cost(ctx: &Ctx, workload: &[String]) -> Result<SwitchCost> {
    let (programs, _, by_order) = side_by_side_fair(
        ctx,
        "cost-futex-blocking",
        &["--futex-mode", "blocking"],
        &[("floor", Peer::Bpftrace(BPFTRACE_SWITCH_FLOOR))],
        workload,
    )?;
    let of = |programs: Vec<ProgCost>| SwitchCost {
        workload: workload.join(" "),
        switches: programs
            .iter()
            .find(|p| p.owner == "lockscope" && p.name.starts_with(BLOCKING_PROGRAM))
            .map_or(0, |p| p.run_cnt),
        ns: ns_of(&programs, "lockscope", BLOCKING_PROGRAM),
        floor_ns: ns_of(&programs, "floor", "sched_switch"),
        ratio_by_order: Vec::new(),
        programs,
    };
    Ok(SwitchCost {
        ratio_by_order: by_order.map(|p| of(p).ratio()).to_vec(),
        ..of(programs)
    })
}

/// `futex_block_switch` as the kernel shortens it (15 characters).
const BLOCKING_PROGRAM: &str = "futex_block_swi";

/// lockscope's futex probes beside empty programs on the same tracepoints, over two runs
/// of `workload` (one in each attach order, summed; each order's ratio kept too).
fn futex_cost(ctx: &Ctx, name: &str, workload: &[String]) -> Result<FutexCost> {
    // Where the kernel refuses the raw tracepoints the floor is not on lockscope's: the
    // figures then say n/a.
    let floor = syscall_floor(BPFTRACE_FUTEX_FLOOR);
    let (programs, _, by_order) = side_by_side_fair(ctx, name, &[], &[("floor", floor)], workload)?;
    let ratio_by_order = by_order
        .iter()
        .map(|p| futex_cost_of(workload, p.clone()).ratio())
        .collect();
    Ok(FutexCost {
        ratio_by_order,
        ..futex_cost_of(workload, programs)
    })
}

/// The futex probes' figures from the programs of one side-by-side run (or of both
/// orders merged).
fn futex_cost_of(workload: &[String], programs: Vec<ProgCost>) -> FutexCost {
    let named =
        |owner: &str, name: &str| programs.iter().any(|p| p.owner == owner && p.name == name);
    // On the raw syscall tracepoints (both sides) or the per-syscall ones (both sides):
    // a mix compares different hooks, and says n/a.
    let raw = named("lockscope", RAW_ENTER) && named("floor", "sys_enter");
    let tracefs = named("lockscope", "futex_enter") && !named("floor", "sys_enter");
    let (enter, exit, floor_enter, floor_exit) = if raw {
        (RAW_ENTER, RAW_EXIT, "sys_enter", "sys_exit")
    } else {
        (
            "futex_enter",
            "futex_exit",
            "sys_enter_futex",
            "sys_exit_futex",
        )
    };
    let f = |owner: &str, name: &str| {
        if raw || tracefs {
            ns_of(&programs, owner, name)
        } else {
            None
        }
    };
    FutexCost {
        workload: workload.join(" "),
        calls: programs
            .iter()
            .find(|p| p.owner == "lockscope" && p.name == enter)
            .map_or(0, |p| p.run_cnt),
        enter_ns: f("lockscope", enter),
        exit_ns: f("lockscope", exit),
        floor_enter_ns: f("floor", floor_enter),
        floor_exit_ns: f("floor", floor_exit),
        raw,
        ratio_by_order: Vec::new(),
        programs,
    }
}

/// The futex probes' programs on the raw syscall tracepoints, as the kernel names them.
const RAW_ENTER: &str = "futex_sys_enter";
const RAW_EXIT: &str = "futex_sys_exit";

/// Capacity ladder: more threads, shorter critical sections.
fn capacity_plan(quick: bool) -> Vec<Vec<String>> {
    let secs = if quick { "1" } else { "2" };
    let v = |a: &[&str]| -> Vec<String> {
        a.iter()
            .map(|s| s.to_string())
            .chain(["--seconds".into(), secs.into(), "--json".into()])
            .collect()
    };
    if quick {
        return vec![
            v(&["mmap-churn", "--threads", "2"]),
            v(&[
                "futex-mutex",
                "--threads",
                "4",
                "--load",
                "200",
                "--gap",
                "0",
            ]),
        ];
    }
    // Measured here: futex contention does not grow monotonically with threads (long
    // holds with many threads convoy: waiters sleep, few calls), so the ladder mixes
    // thread counts with a long-hold, no-gap variant, the configuration that made the
    // most futex calls per second.
    vec![
        v(&["mmap-churn", "--threads", "2"]),
        v(&["mmap-churn", "--threads", "4"]),
        v(&["mmap-churn", "--threads", "8"]),
        v(&["mmap-churn", "--threads", "16"]),
        v(&["futex-mutex", "--threads", "2"]),
        v(&["futex-mutex", "--threads", "4"]),
        v(&["futex-mutex", "--threads", "16"]),
        v(&["futex-mutex", "--threads", "64"]),
        v(&[
            "futex-mutex",
            "--threads",
            "4",
            "--load",
            "200",
            "--gap",
            "0",
        ]),
        v(&["futex-mutex", "--pi", "--threads", "8"]),
    ]
}

/// `lockscope record -- lockscope workload ARGS`: rate, loss, and (futex-mutex) the
/// workload's own call counts against what lockscope recorded on its lock.
fn capacity_step(ctx: &Ctx, args: &[String]) -> Result<CapacityStep> {
    let dir = &ctx.scratch;
    let out = dir.join("capacity.json");
    let c = ctx.record_workload(&out, args);
    let mut p = Proc::spawn(c, dir, "capacity", false)?;
    p.wait(Duration::from_secs(300))?;
    let w = parse::workload_summary(&p.stdout_text())
        .context("bench: the traced workload printed no JSON summary")?;
    let rec = read_json(&out)?;
    let duration_s = rec["duration_s"].as_f64().unwrap_or(0.0).max(1e-9);
    let kernel_events = rec["events"]["begin"].as_u64().unwrap_or(0);
    let futex_calls = rec["futex_events"]["enter"].as_u64().unwrap_or(0);
    let lost = lost_total(&rec);
    let mut step = CapacityStep {
        workload: args[0].clone(),
        args: args.to_vec(),
        duration_s,
        kernel_events,
        futex_calls,
        events_per_s: (kernel_events + futex_calls) as f64 / duration_s,
        lost,
        ..Default::default()
    };
    if args[0] == "futex-mutex" {
        let lock = w["lock"].as_str().unwrap_or_default().to_string();
        let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
        let truth =
            n(&w, "futex_wait") + n(&w, "futex_wake") + n(&w, "lock_pi") + n(&w, "unlock_pi");
        let seen: u64 = rec["locks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|l| l["addr"].as_str() == Some(lock.as_str()) && l["futex"].is_object())
            .map(|l| {
                let f = &l["futex"];
                n(f, "wait_calls")
                    + n(f, "wake_calls")
                    + n(f, "lock_pi_calls")
                    + n(f, "unlock_pi_calls")
            })
            .sum();
        step.truth = Some(truth);
        step.seen = Some(seen);
        // Only losses of futex calls can make the futex count short (a kernel lock's
        // `end_missed` is no futex call).
        step.exact = Some(seen + futex_lost(&rec) == truth);
    }
    Ok(step)
}

fn summarize_capacity(steps: Vec<CapacityStep>) -> Capacity {
    let max_zero = steps
        .iter()
        .filter(|s| s.lost == 0)
        .map(|s| s.events_per_s)
        .fold(0.0, f64::max);
    let loss_seen = steps.iter().any(|s| s.lost > 0);
    let note = if loss_seen {
        "Loss began beyond that rate; `exact` says whether every lost event was \
         counted."
            .to_string()
    } else {
        format!(
            "No step lost an event: {} is the highest rate these workloads produced here \
             (the rate does not keep rising with threads on 2 CPUs), so it is a lower bound \
             of lockscope's capacity, and counting of loss beyond capacity was not exercised.",
            parse::fmt_si(max_zero)
        )
    };
    Capacity {
        steps,
        max_zero_loss_events_per_s: max_zero,
        loss_seen,
        note,
    }
}

/// `lockscope serve` while a workload runs: CPU % and RSS over a steady window.
fn daemon_case(ctx: &Ctx, name: &str, args: &[String], seconds: f64) -> Result<DaemonCase> {
    let (mut serve, port) = start_serve(ctx, "daemon")?;
    let scraper = Scraper::start(port);
    let mut wargs = args.to_vec();
    wargs.push("--json".into());
    let mut w = Proc::spawn(
        ctx.workload_cmd(&wargs),
        &ctx.scratch,
        "daemon-workload",
        false,
    )?;
    // The first scrapes after the workload's locks appear name them all: 10,000 new
    // futex words took about 0.25 s of serve's CPU, 1.5 to 2.5 s after the workload
    // started. The window is the steady state after that (a 1 s warm-up put that
    // naming into the quick bench's window: 11.8% of a CPU).
    let warmup = (seconds / 3.0).clamp(2.5, 5.0);
    std::thread::sleep(Duration::from_secs_f64(warmup));
    let t0 = Instant::now();
    let c0 = proc::cpu_seconds(serve.pid).context("bench: serve exited")?;
    std::thread::sleep(Duration::from_secs_f64((seconds - warmup - 1.0).max(1.0)));
    let c1 = proc::cpu_seconds(serve.pid).context("bench: serve exited")?;
    let window_s = t0.elapsed().as_secs_f64();
    let (rss, hwm) = proc::rss_kib(serve.pid).unzip();
    w.wait(Duration::from_secs_f64(seconds + 120.0))?;
    let st = scraper.finish(port);
    serve.signal(libc::SIGTERM);
    serve.wait(Duration::from_secs(60))?;
    let series: std::collections::BTreeSet<&str> = st
        .last
        .lines()
        .filter(|l| l.starts_with("lockscope_lock_contentions_total{"))
        .filter_map(|l| l.split("lock=\"").nth(1)?.split('"').next())
        .collect();
    Ok(DaemonCase {
        name: name.to_string(),
        workload_args: args.to_vec(),
        status: "measured".into(),
        reason: String::new(),
        window_s,
        cpu_pct: Some((c1 - c0) / window_s * 100.0),
        rss_kib: rss,
        hwm_kib: hwm,
        scrapes: st.ok,
        scrape_failures: st.failed,
        lock_series: series.len(),
    })
}

/// The 10,000-lock case needs `futex-mutex --locks`; skipped (said so) without it.
fn daemon_10k(ctx: &Ctx) -> Result<DaemonCase> {
    let secs = if ctx.quick { 8.0 } else { 10.0 };
    let args: Vec<String> = [
        "futex-mutex",
        "--threads",
        "8",
        "--locks",
        "10000",
        "--seconds",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("{secs}")])
    .collect();
    let help =
        crate::util::output(&mut ctx.workload_cmd(&["futex-mutex".into(), "--help".into()]))?;
    if !help.contains("--locks") {
        let reason = "this lockscope has no `workload futex-mutex --locks` yet".to_string();
        println!("bench: skipping the 10,000-lock daemon case: {reason}");
        return Ok(DaemonCase {
            name: "10k-locks".into(),
            workload_args: args,
            status: "skipped".into(),
            reason,
            ..Default::default()
        });
    }
    daemon_case(ctx, "10k-locks", &args, secs)
}

/// RSS of `pid` over a 2 s burst of samples: (lowest, highest) KiB. The lowest is the
/// memory serve holds between map reads; a read's transient buffers (as large as the
/// kernel maps) show in the highest.
fn rss_burst(pid: i32) -> Option<(u64, u64)> {
    let mut lo_hi: Option<(u64, u64)> = None;
    for _ in 0..20 {
        let (rss, _) = proc::rss_kib(pid)?;
        lo_hi = Some(lo_hi.map_or((rss, rss), |(lo, hi)| (lo.min(rss), hi.max(rss))));
        std::thread::sleep(Duration::from_millis(100));
    }
    lo_hi
}

/// `--soak`: serve under mmap-churn for `minutes`, RSS sampled every 10 s (a 2 s burst
/// each: see [`rss_burst`]). `churn`: short-lived processes beside it.
fn soak(ctx: &Ctx, minutes: f64, churn: bool) -> Result<Soak> {
    if !(minutes > 0.0 && minutes.is_finite()) {
        bail!("bench: --minutes must be a positive number, got {minutes}");
    }
    let total = minutes * 60.0;
    let warmup = (total / 10.0).min(30.0);
    let date_utc = crate::util::output(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    println!(
        "bench: soak: lockscope serve under mmap-churn for {minutes} min (warm-up {warmup:.0} s)"
    );
    let (mut serve, port) = start_serve(ctx, "soak")?;
    let scraper = Scraper::start(port);
    let args: Vec<String> = vec![
        "mmap-churn".into(),
        "--seconds".into(),
        format!("{}", total + 5.0),
        "--json".into(),
    ];
    let mut w = Proc::spawn(
        ctx.workload_cmd(&args),
        &ctx.scratch,
        "soak-workload",
        false,
    )?;
    // New processes throughout: every one brings a new mmap_lock (and new tasks).
    let churn_args: Vec<String> = if churn {
        ["mmap-churn", "--seconds", "0.3"]
            .map(String::from)
            .to_vec()
    } else {
        Vec::new()
    };
    let churn_stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(!churn));
    let churn = {
        let stop = churn_stop.clone();
        let mut cmd = ctx.workload_cmd(&churn_args);
        cmd.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if cmd.status().is_ok() {
                    n += 1;
                }
            }
            n
        })
    };
    let t0 = Instant::now();
    let mut samples = Vec::new();
    let mut start = None;
    let mut cpu0 = None;
    let mut next = 0.0;
    let mut last_rss = 0;
    let mut peak_kib = 0;
    let mut counts_start = (0, 0);
    while t0.elapsed().as_secs_f64() < total {
        let t = t0.elapsed().as_secs_f64();
        if start.is_none() && t >= warmup {
            start = rss_burst(serve.pid).map(|(lo, _)| (t, lo));
            counts_start = snapshot_counts(port);
            cpu0 = proc::cpu_seconds(serve.pid).map(|c| (t, c));
        }
        if t >= next {
            let (rss, hi) = rss_burst(serve.pid).context("bench: serve exited during the soak")?;
            samples.push((t.round(), rss));
            last_rss = rss;
            if t >= warmup {
                peak_kib = peak_kib.max(hi);
            }
            if (samples.len() - 1) % 6 == 0 {
                println!(
                    "bench: soak {} / {}: RSS {:.1} MiB between reads, {:.1} MiB peak",
                    parse::fmt_duration(t),
                    parse::fmt_duration(total),
                    rss as f64 / 1024.0,
                    hi as f64 / 1024.0
                );
            }
            next += 10.0;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let end_t = t0.elapsed().as_secs_f64();
    let (rss_end, hi) = rss_burst(serve.pid).unwrap_or((last_rss, 0));
    peak_kib = peak_kib.max(hi);
    let counts_end = snapshot_counts(port);
    let cpu1 = proc::cpu_seconds(serve.pid).unwrap_or(0.0);
    samples.push((end_t.round(), rss_end));
    churn_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let churn_processes = churn.join().unwrap_or(0);
    let st = scraper.finish(port);
    serve.signal(libc::SIGTERM);
    serve.wait(Duration::from_secs(60))?;
    w.signal(libc::SIGTERM);
    w.wait(Duration::from_secs(60))?;
    let (_, rss_start) = start.context("bench: the soak ended before its warm-up")?;
    let change_pct = (rss_end as f64 - rss_start as f64) / rss_start as f64 * 100.0;
    let cpu_pct = cpu0.map_or(0.0, |(t, c)| (cpu1 - c) / (end_t - t).max(1e-9) * 100.0);
    if st.failed > 0 {
        println!("bench: soak: {} scrapes failed", st.failed);
    }
    Ok(Soak {
        minutes,
        workload_args: args,
        warmup_s: warmup,
        rss_start_kib: rss_start,
        rss_end_kib: rss_end,
        change_pct,
        within_10pct: change_pct.abs() <= 10.0,
        cpu_pct,
        scrapes: st.ok,
        scrape_failures: st.failed,
        samples,
        date_utc,
        locks_start: counts_start.0,
        callers_start: counts_start.1,
        locks_end: counts_end.0,
        callers_end: counts_end.1,
        churn_processes,
        churn_args,
        peak_kib,
    })
}

/// (lock entries, caller stacks) in `lockscope serve`'s `/api/snapshot`; zeros if it
/// cannot be read.
fn snapshot_counts(port: u16) -> (usize, usize) {
    let Ok((200, body)) = proc::http_get(port, "/api/snapshot") else {
        return (0, 0);
    };
    let Ok(rec) = serde_json::from_str::<Value>(&body) else {
        return (0, 0);
    };
    let locks = rec["locks"].as_array().map_or(&[][..], |v| v.as_slice());
    let callers = locks
        .iter()
        .map(|l| l["callers"].as_array().map_or(0, Vec::len))
        .sum();
    (locks.len(), callers)
}

#[cfg(test)]
mod helper_tests {
    use super::{TOOLS, Tool, cyclictest_worst, futex_lost, run_again_window};

    #[test]
    fn only_futex_losses_count_against_futex_calls() {
        let rec = serde_json::json!({"lost": {
            "end_missed": 1, "futex_call_map_full": 2, "futex_stats_evicted": 3,
            "stats_map_full": 4
        }});
        assert_eq!(futex_lost(&rec), 5);
        assert_eq!(futex_lost(&serde_json::json!({})), 0);
    }

    #[test]
    fn a_round_opens_and_closes_untraced() {
        // The drift check and the judged baseline read the first and the last run.
        assert_eq!(TOOLS[0], Tool::Untraced);
        assert_eq!(TOOLS[TOOLS.len() - 1], Tool::UntracedAfter);
    }

    #[test]
    fn a_round_runs_again_only_where_a_target_reads_it() {
        assert_eq!(run_again_window("mmap-churn", 7.7, false), Some(6.0));
        assert_eq!(run_again_window("mmap-churn", 5.0, false), None);
        assert_eq!(run_again_window("pthread bystander", 5.4, false), Some(4.0));
        // No throughput target on it, or --quick: kept as it ran.
        assert_eq!(run_again_window("futex-mutex --pi", 30.0, false), None);
        assert_eq!(run_again_window("mmap-churn", 50.0, true), None);
    }

    #[test]
    fn worst_max_over_threads() {
        let text = "T: 0 ( 4242) P:98 I:2000 C:   2999 Min:      3 Act:    5 Avg:    6 Max:     130\n\
                    T: 1 ( 4243) P:98 I:2500 C:   2399 Min:      4 Act:    7 Avg:    9 Max:    6079\n";
        assert_eq!(cyclictest_worst(text), Some(6079));
        assert_eq!(cyclictest_worst("no summary"), None);
    }
}
