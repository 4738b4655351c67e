//! lockscope: eBPF lock contention tracer and profiler. Thin entry point: parse, dispatch.

use clap::Parser as _;
use lockscope::cli::Cli;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = lockscope::cmd::run(cli.command);
    match result {
        Ok(code) => code,
        Err(err) => {
            // Not eprintln!, which panics when standard error is gone (a hung-up terminal).
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "lockscope: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
