//! `build`, `demo` and `test`.

use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::setup;
use crate::util::{self, CommandFailed, cargo, run};

/// The userspace crate (its build.rs builds and embeds the eBPF crate).
pub const USERSPACE_CRATE: &str = "lockscope";
/// The no_std probe crate; not a default member, so it gets its own clippy run.
pub const EBPF_CRATE: &str = "lockscope-ebpf";
pub const EBPF_TARGET: &str = "bpfel-unknown-none";

/// `cargo xtask build [--release]`
pub fn build(release: bool) -> Result<()> {
    setup::setup()?;
    run(&mut build_cmd(release))
}

fn build_cmd(release: bool) -> Command {
    let mut cmd = cargo();
    cmd.args(["build", "-p", USERSPACE_CRATE]);
    if release {
        cmd.arg("--release");
    }
    cmd
}

/// `cargo xtask demo`
pub fn demo() -> Result<()> {
    setup::setup()?;
    run(&mut build_cmd(true))?;
    let exe = util::target_dir().join("release").join(USERSPACE_CRATE);
    let exe = exe.to_str().context("target directory path is not UTF-8")?;
    let mut cmd = util::privileged(exe).context(
        "demo: lockscope must run as root to load eBPF programs, and sudo is not \
         available; rerun `cargo xtask demo` as root",
    )?;
    cmd.args([
        "record",
        "--",
        exe,
        "workload",
        "mmap-churn",
        "--seconds",
        "5",
    ]);
    run(&mut cmd)
}

struct Step {
    name: &'static str,
    cmd: Command,
}

/// `cargo xtask test [--quick] [-- ARGS]`
pub fn test(quick: bool, test_args: &[String]) -> Result<()> {
    let started = Instant::now();
    // Decide how tests get root before spending minutes on clippy.
    let sudo_runner = if util::is_root() {
        None
    } else if util::which("sudo").is_some() {
        Some(util::runner_env_var(&util::host_triple()?))
    } else {
        bail!(
            "test: the integration tests load eBPF programs and must run as root, but \
             this is not root and sudo is not available; rerun `cargo xtask test` as root"
        );
    };

    setup::setup()?;

    let steps = test_steps(quick, test_args, sudo_runner.as_deref());
    let total = steps.len();
    for (i, mut step) in steps.into_iter().enumerate() {
        println!();
        println!(
            "==================== [{}/{total}] {} ====================",
            i + 1,
            step.name
        );
        if let Err(err) = run(&mut step.cmd) {
            let code = err.downcast_ref::<CommandFailed>().map_or(1, |f| f.code);
            println!();
            println!(
                "test: FAILED at step {}/{total} ({}) with exit code {code} after {:.0?}",
                i + 1,
                step.name,
                started.elapsed()
            );
            return Err(err);
        }
    }
    println!();
    println!(
        "test: all {total} step(s) passed in {:.0?}",
        started.elapsed()
    );
    Ok(())
}

fn test_steps(quick: bool, test_args: &[String], sudo_runner: Option<&str>) -> Vec<Step> {
    let mut steps = Vec::new();
    if !quick {
        let mut fmt = cargo();
        fmt.args(["fmt", "--all", "--", "--check"]);
        steps.push(Step {
            name: "rustfmt",
            cmd: fmt,
        });

        // No `--workspace`: that would include the eBPF crate, which only
        // builds for bpfel-unknown-none. Run from the root, cargo uses the
        // workspace's default-members.
        let mut clippy = cargo();
        clippy.args(["clippy", "--all-targets", "--", "-D", "warnings"]);
        steps.push(Step {
            name: "clippy (host crates)",
            cmd: clippy,
        });

        let mut ebpf = cargo();
        ebpf.args([
            "+nightly",
            "clippy",
            "-p",
            EBPF_CRATE,
            "--target",
            EBPF_TARGET,
            "-Z",
            "build-std=core",
            "--",
            "-D",
            "warnings",
        ]);
        steps.push(Step {
            name: "clippy (eBPF crate, nightly)",
            cmd: ebpf,
        });
    }

    let mut tests = cargo();
    tests.args(["test", "--release"]).args(test_args);
    if let Some(var) = sudo_runner {
        // Build as the current user, run each test binary as root.
        tests.env(var, "sudo -E");
    }
    steps.push(Step {
        name: "tests (release, as root)",
        cmd: tests,
    });
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cmd: &Command) -> Vec<String> {
        cmd.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn full_run_has_four_steps_in_order() {
        let steps = test_steps(false, &[], None);
        let lines: Vec<String> = steps.iter().map(|s| util::display_cmd(&s.cmd)).collect();
        assert_eq!(
            lines,
            [
                "cargo fmt --all -- --check",
                "cargo clippy --all-targets -- -D warnings",
                "cargo +nightly clippy -p lockscope-ebpf --target bpfel-unknown-none -Z build-std=core -- -D warnings",
                "cargo test --release",
            ]
        );
        for step in &steps {
            assert_eq!(
                step.cmd.get_current_dir(),
                Some(util::workspace_root().as_path())
            );
        }
    }

    #[test]
    fn quick_run_only_tests_and_passes_args() {
        let extra = vec!["mmap".to_string(), "--".into(), "--nocapture".into()];
        let steps = test_steps(true, &extra, Some("CARGO_TARGET_X_RUNNER"));
        assert_eq!(steps.len(), 1);
        assert_eq!(
            args(&steps[0].cmd),
            ["test", "--release", "mmap", "--", "--nocapture"]
        );
        let envs: Vec<_> = steps[0].cmd.get_envs().collect();
        assert_eq!(
            envs,
            [(
                std::ffi::OsStr::new("CARGO_TARGET_X_RUNNER"),
                Some(std::ffi::OsStr::new("sudo -E"))
            )]
        );
    }

    #[test]
    fn build_command() {
        assert_eq!(args(&build_cmd(false)), ["build", "-p", "lockscope"]);
        assert_eq!(
            args(&build_cmd(true)),
            ["build", "-p", "lockscope", "--release"]
        );
    }
}
