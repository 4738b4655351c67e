//! `lockscope top`: the live view, fed by a local session or a running `lockscope serve`.

use std::{io::IsTerminal as _, path::Path, time::Duration};

use anyhow::bail;

use crate::{
    aggregate::{Recording, recording::Detail},
    cli::TopArgs,
    cmd::record::parse_types,
    probe::{LoadOptions, Target, features, rt::RtOptions},
    session::Session,
    sink::tui::{self, Feed},
    source::remote::RemoteSnapshots,
};

pub fn run(args: TopArgs) -> anyhow::Result<std::process::ExitCode> {
    match &args.connect {
        Some(addr) => {
            // A snapshot must arrive well within one refresh.
            let timeout = args.interval.max(Duration::from_secs(2));
            let remote = RemoteSnapshots::new(addr, timeout)?;
            require_terminal()?;
            tui::run(&mut RemoteFeed(remote), args.interval)?;
        }
        None => {
            let types = parse_types(&args.types)?;
            let (target, desc) = validate(&args)?;
            require_terminal()?;
            // Same defaults as `record`: a 20 us pi_lock wait with 8 foreign acquisitions.
            let rt = args.latency_threshold.map(|t| RtOptions {
                latency_threshold_ns: t,
                starvation_threshold_ns: 20_000,
                starvation_acquisitions: 8,
            });
            let mut session = Session::start_with_rt(
                &LoadOptions {
                    futex_mode: args.futex_mode,
                    ..LoadOptions::new(target, types)
                },
                desc,
                rt,
            )?;
            // A live view runs for hours: keep its memory and maps flat like serve's, and
            // no exited process's lock names for the next one at its address.
            session.set_detail(Detail::DAEMON);
            session.forget_exited(crate::config::DEFAULT_FORGET_EXITED_AFTER);
            let notes = session.probes().notes.clone();
            let mut feed = SessionFeed(session);
            tui::run(&mut feed, args.interval)?;
            feed.0.stop();
            // After the screen is restored: what this run could not trace.
            for note in notes {
                eprintln!("lockscope: note: {note}");
            }
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

fn require_terminal() -> anyhow::Result<()> {
    if !std::io::stdout().is_terminal() {
        bail!("top needs a terminal (for a report, use `lockscope record`)");
    }
    Ok(())
}

/// Check the request before touching the kernel: every bad input is a clear error.
fn validate(args: &TopArgs) -> anyhow::Result<(Target, String)> {
    features::require_privileges()?;
    for &pid in &args.pids {
        if pid == 0 || !Path::new(&format!("/proc/{pid}")).exists() {
            bail!("no process with pid {pid}");
        }
    }
    features::ensure_tracefs()?;
    Ok(if !args.pids.is_empty() {
        let list: Vec<String> = args.pids.iter().map(u32::to_string).collect();
        (
            Target::Pids(args.pids.clone()),
            format!("pid {}", list.join(",")),
        )
    } else if let Some(cg) = &args.cgroup {
        features::cgroup_id_and_level(cg)?;
        (
            Target::Cgroup(cg.clone()),
            format!("cgroup {}", cg.display()),
        )
    } else {
        (Target::System, "system".to_owned())
    })
}

/// Standalone: this process's own tracing session.
struct SessionFeed(Session);

impl Feed for SessionFeed {
    fn next(&mut self) -> anyhow::Result<Recording> {
        // The real-time ring buffer is drained once per refresh; what overflows it is
        // counted in `lost`.
        self.0.drain_rt();
        let rec = self.0.snapshot();
        crate::session::release_free_memory();
        rec
    }
    fn describe(&self) -> String {
        "standalone".to_owned()
    }
}

/// A running `lockscope serve`.
struct RemoteFeed(RemoteSnapshots);

impl Feed for RemoteFeed {
    fn next(&mut self) -> anyhow::Result<Recording> {
        self.0.fetch()
    }
    fn describe(&self) -> String {
        format!("connected to {}", self.0.addr())
    }
}
