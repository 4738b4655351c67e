//! `lockscope record`: attach, run (a command, a duration, or until Ctrl-C), read the
//! maps, report.

use std::{
    io::{IsTerminal as _, Write as _},
    path::{Path, PathBuf},
    process::ExitCode,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use lockscope_common::{CNT_BEGIN, CNT_END, COUNTER_NAMES};

use crate::{
    aggregate::timeline::TimelineBuilder,
    cli::RecordArgs,
    decode::LockType,
    probe::{LoadOptions, Target, features},
    session::Session,
    sink::report::render,
};

/// Why recording stopped.
enum Stop {
    CommandExited(std::process::ExitStatus),
    Interrupted,
    Duration,
}

pub fn run(args: RecordArgs) -> anyhow::Result<ExitCode> {
    let target = validate(&args)?;
    let types = parse_types(&args.types)?;
    let target_desc = describe_target(&args, &target);

    let mut session = Session::start(&LoadOptions { target, types }, target_desc)?;
    session.set_starvation(lockscope_common::SpinParams {
        threshold_ns: args.starvation_threshold,
        min_foreign: args.starvation_acquisitions,
        hold_threshold_ns: args.long_hold_threshold,
    })?;

    let start = Instant::now();
    let deadline = args.duration.map(|d| start + Duration::from_secs_f64(d));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut timeline = TimelineBuilder::new(args.interval);
    let (stop, mut child) = rt.block_on(wait_for_stop(
        &args,
        &session,
        start,
        deadline,
        &mut timeline,
    ))?;
    session.stop();
    clear_status();
    let mut rec = session.snapshot()?;
    // A last sample after detaching: the timeline's deltas add up to the totals.
    timeline.sample(rec.duration_s, &session.lock_totals()?);
    rec.timeline = Some(timeline.finish());

    // Tracing has stopped; a command still running (-d elapsed) runs to its end.
    let status = match (stop, child.as_mut()) {
        (Stop::CommandExited(s), _) => Some(s),
        (_, Some(c)) => Some(rt.block_on(c.wait())?),
        _ => None,
    };
    let exit_code = status.map(exit_code_of);
    rec.command_exit_code = exit_code;
    if let Some(path) = &args.output {
        let text = serde_json::to_string_pretty(&rec)? + "\n";
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.html {
        std::fs::write(path, crate::sink::html::render_html(&rec)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("lockscope: HTML report written to {}", path.display());
    }
    print!("{}", render(&rec, &args.view.report_options())?);
    if let Some(path) = &args.output {
        eprintln!("lockscope: recording written to {}", path.display());
    }
    Ok(match exit_code {
        Some(c) => ExitCode::from(c.clamp(0, 255) as u8),
        None => ExitCode::SUCCESS,
    })
}

/// Check the request before touching the kernel: every bad input is a clear error.
fn validate(args: &RecordArgs) -> anyhow::Result<Target> {
    features::require_privileges()?;
    if let Some(d) = args.duration
        && !(d > 0.0 && d.is_finite())
    {
        bail!("duration must be a positive number of seconds, got {d}");
    }
    if !(args.interval >= 0.01 && args.interval.is_finite()) {
        bail!(
            "interval must be at least 0.01 seconds, got {}",
            args.interval
        );
    }
    for &pid in &args.pids {
        if pid == 0 || !Path::new(&format!("/proc/{pid}")).exists() {
            bail!("no process with pid {pid}");
        }
    }
    for out in args.output.iter().chain(args.html.iter()) {
        let dir = out.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(dir) = dir
            && !dir.is_dir()
        {
            bail!(
                "cannot write {}: directory {} does not exist",
                out.display(),
                dir.display()
            );
        }
    }
    if let Some(cmd) = args.command.first() {
        resolve_command(cmd)?;
        if !args.pids.is_empty() || args.cgroup.is_some() {
            bail!("give either a command or --pid/--cgroup, not both");
        }
    } else if args.system_wide && args.command.is_empty() && args.duration.is_none() {
        // -a alone is the default anyway: accepted.
    }
    features::ensure_tracefs()?;
    Ok(if !args.pids.is_empty() {
        Target::Pids(args.pids.clone())
    } else if let Some(cg) = &args.cgroup {
        features::cgroup_id_and_level(cg)?;
        Target::Cgroup(cg.clone())
    } else if !args.command.is_empty() && !args.system_wide {
        Target::Command
    } else {
        Target::System
    })
}

/// Find a command the way the shell would, to fail before attaching anything.
fn resolve_command(cmd: &str) -> anyhow::Result<PathBuf> {
    let p = Path::new(cmd);
    if cmd.contains('/') {
        if p.is_file() {
            return Ok(p.to_path_buf());
        }
        bail!("cannot run `{cmd}`: no such file");
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(cmd))
        .find(|c| c.is_file())
        .ok_or_else(|| anyhow::anyhow!("cannot run `{cmd}`: command not found in PATH"))
}

pub(crate) fn parse_types(list: &[String]) -> anyhow::Result<Option<Vec<LockType>>> {
    if list.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::new();
    for name in list.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        out.extend(LockType::parse_list(name).map_err(anyhow::Error::msg)?);
    }
    Ok(Some(out))
}

fn describe_target(args: &RecordArgs, target: &Target) -> String {
    let cmd = args.command.join(" ");
    match target {
        Target::System if cmd.is_empty() => "system".to_owned(),
        Target::System => format!("system, while running: {cmd}"),
        Target::Command => format!("command: {cmd}"),
        Target::Pids(p) => format!(
            "pid {}",
            p.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
        ),
        Target::Cgroup(path) => format!("cgroup {}", path.display()),
    }
}

async fn wait_for_stop(
    args: &RecordArgs,
    session: &Session,
    start: Instant,
    deadline: Option<Instant>,
    timeline: &mut TimelineBuilder,
) -> anyhow::Result<(Stop, Option<tokio::process::Child>)> {
    let mut child = match args.command.split_first() {
        Some((cmd, rest)) => Some(
            tokio::process::Command::new(cmd)
                .args(rest)
                .kill_on_drop(false)
                .spawn()
                .with_context(|| format!("cannot run `{cmd}`"))?,
        ),
        None => None,
    };
    let live = std::io::stderr().is_terminal();
    let period = Duration::from_secs_f64(args.interval);
    let mut tick = tokio::time::interval_at((start + period).into(), period);
    let sleep = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d.into()).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(sleep);
    let stop = loop {
        tokio::select! {
            status = async {
                match child.as_mut() {
                    Some(c) => c.wait().await,
                    None => std::future::pending().await,
                }
            } => break Stop::CommandExited(status?),
            _ = tokio::signal::ctrl_c() => break Stop::Interrupted,
            _ = &mut sleep => break Stop::Duration,
            _ = tick.tick() => {
                timeline.sample(session.elapsed_s(), &session.lock_totals()?);
                if live {
                    show_status(session, start);
                }
            }
        }
    };
    Ok((stop, child))
}

fn show_status(session: &Session, start: Instant) {
    let Ok(c) = session.counters() else {
        return;
    };
    let lost: u64 = COUNTER_NAMES
        .iter()
        .zip(c.iter())
        .filter(|(n, _)| n.ends_with("_full") || n.ends_with("overflow") || **n == "stack_missing")
        .map(|(_, v)| v)
        .sum();
    let mut err = std::io::stderr().lock();
    let _ = write!(
        err,
        "\r\x1b[Klockscope: recording {:.0} s  waits begun {}  ended {}  lost {}",
        start.elapsed().as_secs_f64(),
        c[CNT_BEGIN as usize],
        c[CNT_END as usize],
        lost
    );
    let _ = err.flush();
}

fn clear_status() {
    if std::io::stderr().is_terminal() {
        eprint!("\r\x1b[K");
    }
}

fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}
