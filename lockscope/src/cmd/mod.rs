//! Subcommands: each wires the pipeline's pieces (probe -> source -> aggregate -> sink).

use std::process::ExitCode;

use crate::{
    cli::{Command, ViewArgs},
    sink::report::ReportOptions,
};

pub mod doctor;
pub mod record;
pub mod report;
pub mod serve;
pub mod top;

pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Doctor => doctor::run(),
        Command::Record(args) => record::run(args),
        Command::Report(args) => report::run(args),
        Command::Top(args) => top::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Workload(w) => crate::workload::run(&w).map(|()| ExitCode::SUCCESS),
        Command::Completions { shell } => {
            use clap::CommandFactory as _;
            clap_complete::generate(
                shell,
                &mut crate::cli::Cli::command(),
                "lockscope",
                &mut std::io::stdout(),
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Man => {
            use clap::CommandFactory as _;
            match clap_mangen::Man::new(crate::cli::Cli::command()).render(&mut std::io::stdout()) {
                // `lockscope man | head`: the reader had enough.
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
                _ => Ok(ExitCode::SUCCESS),
            }
        }
    }
}

impl ViewArgs {
    pub fn report_options(&self) -> ReportOptions {
        ReportOptions {
            format: self.format,
            by: self.by,
            sort: self.sort,
            limit: self.entries,
            weight: self.weight,
        }
    }
}
