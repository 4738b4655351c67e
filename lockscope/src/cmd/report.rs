//! `lockscope report FILE`: re-render a recording.

use std::process::ExitCode;

use anyhow::Context as _;

use crate::{aggregate::Recording, cli::ReportArgs, sink::report::render};

pub fn run(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let mut rec =
        Recording::from_json(&text).with_context(|| format!("{}", args.file.display()))?;
    if let Some(dir) = &args.debug_dir {
        if !dir.is_dir() {
            anyhow::bail!("--debug-dir {}: not a directory", dir.display());
        }
        let done = crate::symbolize::debugdir::resolve(&mut rec, dir);
        if done.unnamed > 0 {
            eprintln!(
                "lockscope: note: {} of {} call sites of files in {} have no symbol there \
                 either",
                done.unnamed,
                done.named + done.unnamed,
                dir.display()
            );
        }
    }
    if args.view.by == crate::aggregate::rows::GroupBy::Cgroup && rec.cgroups.is_none() {
        anyhow::bail!(
            "{} has no cgroups: it was recorded by a lockscope before cgroup attribution \
             ({}); record again to group by cgroup",
            args.file.display(),
            rec.lockscope_version
        );
    }
    if args.view.format == crate::sink::report::Format::Pprof {
        let Some(path) = &args.output else {
            anyhow::bail!(
                "the pprof format is binary: write it with -o FILE (e.g. lockscope.pb.gz)"
            );
        };
        crate::sink::output::write_output(path, crate::sink::pprof::pprof_gz(&rec)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let text = render(&rec, &args.view.report_options())?;
    match &args.output {
        Some(path) => crate::sink::output::write_output(path, text)?,
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}
