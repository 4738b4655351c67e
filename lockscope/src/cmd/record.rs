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
    probe::{LoadOptions, Target, features, pthread::is_static_elf, rt::RtOptions},
    session::Session,
    sink::report::render,
};

/// Why recording stopped.
enum Stop {
    CommandExited(std::process::ExitStatus),
    Interrupted,
    /// SIGTERM or SIGHUP: stop as on Ctrl-C (the command gets the same signal).
    Signaled(&'static str),
    Duration,
    /// Every `--pid` target exited.
    TargetsExited,
}

pub fn run(args: RecordArgs) -> anyhow::Result<ExitCode> {
    let target = validate(&args)?;
    let types = parse_types(&args.types)?;
    let target_desc = describe_target(&args, &target);
    let shown_target = target_desc.clone();

    let rt = args.latency_threshold.map(|t| RtOptions {
        latency_threshold_ns: t,
        starvation_threshold_ns: args.starvation_threshold,
        starvation_acquisitions: args.starvation_acquisitions,
    });
    let opts = LoadOptions {
        stack_walks_per_cpu_s: args.stack_rate,
        mmap_trylocks: args.mmap_trylocks,
        futex_mode: args.futex_mode,
        ..LoadOptions::new(target, types)
    };
    let mut session = Session::start_with_rt(&opts, target_desc, rt)?;
    if session.families().futex.enabled
        && let Some(cmd) = args.command.first()
        && resolve_command(cmd).is_ok_and(|p| is_static_elf(&p).unwrap_or(false))
    {
        session.pthread_note(format!(
            "`{cmd}` is statically linked: no shared C library to unwind through, so its \
             pthread locks show as futex words"
        ));
    }
    for note in session
        .probes()
        .notes
        .iter()
        .chain(&session.families().futex.pthread.notes)
    {
        eprintln!("lockscope: note: {note}");
    }
    if args.command.is_empty() {
        // Attached: say so (scripts wait for this line before starting their load).
        eprintln!(
            "lockscope: recording {}; Ctrl-C to stop{}",
            shown_target,
            args.duration
                .map(|d| format!(" (or after {d} s)"))
                .unwrap_or_default()
        );
    }
    session.set_starvation(lockscope_common::SpinParams {
        threshold_ns: args.starvation_threshold,
        min_foreign: args.starvation_acquisitions,
        hold_threshold_ns: args.long_hold_threshold,
    })?;
    let capture = CommandOutput::default();

    let start = Instant::now();
    let deadline = args.duration.map(|d| start + Duration::from_secs_f64(d));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut timeline = TimelineBuilder::new(args.interval);
    let (stop, mut child) = rt.block_on(wait_for_stop(
        &args,
        &mut session,
        start,
        deadline,
        &mut timeline,
        &capture,
    ))?;
    session.stop();
    if let Stop::Signaled(sig) = stop {
        // After SIGHUP the terminal may be gone: the report goes nowhere then, and the
        // recording is still written.
        crate::signals::release_hung_up_terminal();
        eprintln!("lockscope: {sig}: recording stopped, writing what was traced");
        // The command gets what we got (Ctrl-C reaches it through the terminal).
        if let Some(pid) = child.as_ref().and_then(|c| c.id()) {
            let signo = if sig == "SIGHUP" {
                libc::SIGHUP
            } else {
                libc::SIGTERM
            };
            // SAFETY: kill(2) on our own child, not yet reaped.
            unsafe { libc::kill(pid as i32, signo) };
        }
    }
    if let Some((text, pid)) = capture.take() {
        session.feed_cyclictest_output(text, pid);
    }
    clear_status();
    if let Stop::TargetsExited = stop {
        eprintln!(
            "lockscope: note: pid {} exited after {:.1} s: recording stopped, what was traced \
             until then is kept",
            args.pids
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            session.elapsed_s()
        );
    }
    let mut rec = session.snapshot()?;
    // A last sample after detaching: the timeline's deltas add up to the totals.
    timeline.sample(rec.duration_s, &session.lock_totals()?);
    rec.timeline = Some(timeline.finish());

    // Tracing has stopped; a command still running (-d elapsed, or one that outlives
    // Ctrl-C) runs to its end, after the report: the report does not wait for it.
    let mut printed = false;
    let status = match (stop, child.as_mut()) {
        (Stop::CommandExited(s), _) => Some(s),
        (_, Some(c)) => {
            print!("{}", render(&rec, &args.view.report_options())?);
            use std::io::Write as _;
            let _ = std::io::stdout().flush();
            printed = true;
            Some(rt.block_on(wait_for_command(c))?)
        }
        _ => None,
    };
    let exit_code = status.map(exit_code_of);
    rec.command_exit_code = exit_code;
    if let Some(path) = &args.output {
        let text = serde_json::to_string_pretty(&rec)? + "\n";
        crate::sink::output::write_output(path, text)?;
    }
    if let Some(path) = &args.pprof {
        crate::sink::output::write_output(path, crate::sink::pprof::pprof_gz(&rec)?)?;
        eprintln!("lockscope: pprof profile written to {}", path.display());
    }
    if let Some(path) = &args.folded {
        let text = crate::sink::folded::folded(&rec, crate::sink::folded::Weight::Wait);
        crate::sink::output::write_output(path, text)?;
        eprintln!("lockscope: folded stacks written to {}", path.display());
    }
    if let Some(path) = &args.html {
        crate::sink::output::write_output(path, crate::sink::html::render_html(&rec)?)?;
        eprintln!("lockscope: HTML report written to {}", path.display());
    }
    if !printed {
        print!("{}", render(&rec, &args.view.report_options())?);
    }
    if let Some(path) = &args.output {
        eprintln!("lockscope: recording written to {}", path.display());
    }
    Ok(match exit_code {
        Some(c) => ExitCode::from(c.clamp(0, 255) as u8),
        None => ExitCode::SUCCESS,
    })
}

/// Check the request before touching the kernel: every bad input is a clear error.
/// The longest `-d`: a year (longer is a typo, and would overflow the clock).
const MAX_DURATION_S: f64 = 365.0 * 86400.0;

/// A number of seconds within `[min, max]`, or a clear error.
fn check_seconds(what: &str, v: f64, min: f64, max: f64) -> anyhow::Result<()> {
    if !v.is_finite() || v < min || v > max {
        let min_text = if min <= f64::MIN_POSITIVE {
            "more than 0".to_owned()
        } else {
            format!("at least {min}")
        };
        bail!("{what} must be {min_text} and at most {max} seconds, got {v}");
    }
    Ok(())
}

fn validate(args: &RecordArgs) -> anyhow::Result<Target> {
    features::require_privileges()?;
    if let Some(d) = args.duration {
        check_seconds("duration", d, f64::MIN_POSITIVE, MAX_DURATION_S)?;
    }
    check_seconds("interval", args.interval, 0.01, 3600.0)?;
    for &pid in &args.pids {
        if pid == 0 || !Path::new(&format!("/proc/{pid}")).exists() {
            bail!("no process with pid {pid}");
        }
    }
    for out in args
        .output
        .iter()
        .chain(&args.html)
        .chain(&args.folded)
        .chain(&args.pprof)
    {
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

/// Has this process exited (gone, or a zombie waiting for its parent)?
fn process_exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            features::state_and_parent(&stat).is_some_and(|(state, _)| matches!(state, 'Z' | 'X'))
        }
        Err(_) => true,
    }
}

/// A launched command maps its C library right after exec: read its maps then, so its
/// waits can be unwound and named even if it exits at once (waits at most 200 ms for the
/// dynamic loader; a static command maps none).
async fn remember_command(session: &mut Session, pid: u32) {
    for _ in 0..40 {
        match crate::probe::pthread::libcs_of_pid(pid) {
            Ok(libs) if !libs.is_empty() => {
                session.remember_process(pid);
                return;
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(_) => return,
        }
    }
}

/// The traced command's standard output, kept (and passed through) when it is
/// cyclictest and latencies are recorded: its per-thread maxima become spikes.
#[derive(Default, Clone)]
struct CommandOutput(std::sync::Arc<std::sync::Mutex<Option<(String, u32)>>>);

/// Output kept from the command: its summary is at the end.
const CAPTURE_MAX: usize = 1 << 20;

impl CommandOutput {
    fn take(&self) -> Option<(String, u32)> {
        self.0.lock().ok()?.take()
    }
}

fn is_cyclictest(cmd: &str) -> bool {
    Path::new(cmd)
        .file_name()
        .is_some_and(|n| n == "cyclictest")
}

async fn wait_for_stop(
    args: &RecordArgs,
    session: &mut Session,
    start: Instant,
    deadline: Option<Instant>,
    timeline: &mut TimelineBuilder,
    capture: &CommandOutput,
) -> anyhow::Result<(Stop, Option<tokio::process::Child>)> {
    let mut reader = None;
    let mut child = match args.command.split_first() {
        Some((cmd, rest)) => {
            let keep = args.latency_threshold.is_some() && is_cyclictest(cmd);
            let mut c = tokio::process::Command::new(cmd);
            c.args(rest).kill_on_drop(false);
            if keep {
                c.stdout(std::process::Stdio::piped());
            }
            let mut child = c.spawn().with_context(|| format!("cannot run `{cmd}`"))?;
            if let Some(out) = child.stdout.take() {
                let pid = child.id().unwrap_or(0);
                let out = std::fs::File::from(
                    out.into_owned_fd()
                        .context("taking the command's output pipe")?,
                );
                let keep = capture.clone();
                reader = Some(std::thread::spawn(move || pass_through(out, pid, keep)));
            }
            Some(child)
        }
        None => None,
    };
    // Without the fork follower the command is added by hand: traced from now, not
    // its children (said in a note).
    if let Some(pid) = child.as_ref().and_then(|c| c.id())
        && !session.families().contention.follows_forks
    {
        session.add_target(pid)?;
    }
    if let Some(pid) = child.as_ref().and_then(|c| c.id())
        && session.families().futex.enabled
    {
        remember_command(session, pid).await;
    }
    let session = &*session;
    // Read the maps of processes with new pthread call sites while they live.
    let mut observe = tokio::time::interval(Duration::from_millis(100));
    let drain_period = Duration::from_millis(50);
    let mut drain_tick = tokio::time::interval_at((start + drain_period).into(), drain_period);
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
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("catching SIGTERM")?;
    let mut hup = signal(SignalKind::hangup()).context("catching SIGHUP")?;
    let stop = loop {
        tokio::select! {
            status = async {
                match child.as_mut() {
                    Some(c) => c.wait().await,
                    None => std::future::pending().await,
                }
            } => {
                let status = status?;
                if let Some(r) = reader.take() {
                    // The pipe is at its end (or held by a grandchild: then its tail
                    // comes later and is not read).
                    if r.is_finished() || tokio::time::timeout(Duration::from_secs(1), async {
                        while !r.is_finished() {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    })
                    .await
                    .is_ok()
                    {
                        let _ = r.join();
                    }
                }
                break Stop::CommandExited(status);
            }
            _ = drain_tick.tick() => {
                session.drain_rt();
            }
            _ = tokio::signal::ctrl_c() => break Stop::Interrupted,
            _ = term.recv() => break Stop::Signaled("SIGTERM"),
            _ = hup.recv() => break Stop::Signaled("SIGHUP"),
            _ = &mut sleep => break Stop::Duration,
            _ = observe.tick() => {
                session.observe_user_sites();
                if !args.pids.is_empty() && args.pids.iter().all(|&p| process_exited(p)) {
                    break Stop::TargetsExited;
                }
            }
            _ = tick.tick() => {
                timeline.sample(session.elapsed_s(), &session.lock_totals()?);
                session.name_holders()?;
                if live {
                    show_status(session, start);
                }
            }
        }
    };
    Ok((stop, child))
}

/// Copy the command's output to ours, keeping its last `CAPTURE_MAX` bytes.
fn pass_through(mut out: std::fs::File, pid: u32, keep: CommandOutput) {
    use std::io::Read as _;
    let mut buf = vec![0u8; 8192];
    let mut kept: Vec<u8> = Vec::new();
    loop {
        let n = match out.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(&buf[..n]);
        let _ = stdout.flush();
        kept.extend_from_slice(&buf[..n]);
        if kept.len() > CAPTURE_MAX {
            kept.drain(..kept.len() - CAPTURE_MAX);
        }
        if let Ok(mut k) = keep.0.lock() {
            *k = Some((String::from_utf8_lossy(&kept).into_owned(), pid));
        }
    }
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

/// How long a command may outlive the recording before lockscope says it is waiting.
const COMMAND_WAIT_NOTICE: Duration = Duration::from_secs(1);

/// Wait for the command once tracing has stopped. A command that ignores Ctrl-C (or
/// runs on after `-d`) would otherwise hold the shell with no way out, since lockscope
/// catches SIGINT: after a second, say so; Ctrl-C (or SIGTERM) then sends the command
/// SIGTERM, and SIGKILL the time after.
async fn wait_for_command(
    c: &mut tokio::process::Child,
) -> anyhow::Result<std::process::ExitStatus> {
    use tokio::signal::unix::{SignalKind, signal};
    let pid = c.id();
    let mut int = signal(SignalKind::interrupt()).context("catching SIGINT")?;
    let mut term = signal(SignalKind::terminate()).context("catching SIGTERM")?;
    let notice = tokio::time::sleep(COMMAND_WAIT_NOTICE);
    tokio::pin!(notice);
    let mut noticed = false;
    let mut asked = 0;
    loop {
        tokio::select! {
            status = c.wait() => return Ok(status?),
            _ = &mut notice, if !noticed => {
                noticed = true;
                if let Some(pid) = pid {
                    eprintln!(
                        "lockscope: recording stopped; waiting for the command (pid {pid}) to \
                         exit: Ctrl-C ends it"
                    );
                }
            }
            _ = async {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
            } => {
                let (signo, name) = if asked == 0 {
                    (libc::SIGTERM, "SIGTERM")
                } else {
                    (libc::SIGKILL, "SIGKILL")
                };
                asked += 1;
                if let Some(pid) = pid {
                    eprintln!("lockscope: sending {name} to the command (pid {pid})");
                    // SAFETY: kill(2) on our own child, not yet reaped (we are waiting).
                    unsafe { libc::kill(pid as i32, signo) };
                }
            }
        }
    }
}

fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_out_of_range_are_refused_not_panicked_on() {
        assert!(check_seconds("duration", 5.0, f64::MIN_POSITIVE, MAX_DURATION_S).is_ok());
        for bad in [
            0.0,
            -1.0,
            1e300,
            f64::INFINITY,
            f64::NAN,
            MAX_DURATION_S * 2.0,
        ] {
            let e = check_seconds("duration", bad, f64::MIN_POSITIVE, MAX_DURATION_S)
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("duration must be more than 0 and at most"),
                "{e}"
            );
        }
        let e = check_seconds("interval", 0.001, 0.01, 3600.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least 0.01"), "{e}");
    }
}
