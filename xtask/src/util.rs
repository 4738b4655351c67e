//! Small shared helpers: locating the workspace, running commands and
//! checking their exit status, and cheap "is it there?" predicates.

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// A command ran but exited unsuccessfully. `main` turns this into the
/// process exit code, so `cargo xtask test` exits with the failing step's code.
#[derive(Debug)]
pub struct CommandFailed {
    pub what: String,
    pub code: i32,
}

impl fmt::Display for CommandFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` failed with exit code {}", self.what, self.code)
    }
}

impl std::error::Error for CommandFailed {}

/// The workspace root: the parent of this crate's manifest directory.
pub fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// The cargo target directory: `$CARGO_TARGET_DIR` if set (relative paths are
/// taken relative to the current directory, as cargo does), else `<root>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                std::env::current_dir()
                    .map(|cwd| cwd.join(&dir))
                    .unwrap_or(dir)
            }
        }
        _ => workspace_root().join("target"),
    }
}

/// Render a command for logs, e.g. `cargo build -p lockscope`.
pub fn display_cmd(cmd: &Command) -> String {
    let mut parts = vec![cmd.get_program().to_string_lossy().into_owned()];
    parts.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    parts.join(" ")
}

/// Run a command with inherited stdio (echoing it first) and fail unless it
/// exits with status 0. The error is a [`CommandFailed`] carrying the exit code.
pub fn run(cmd: &mut Command) -> Result<()> {
    let shown = display_cmd(cmd);
    eprintln!("+ {shown}");
    let status = cmd
        .status()
        .with_context(|| format!("could not start `{shown}` (is it installed?)"))?;
    if status.success() {
        Ok(())
    } else {
        // Killed by a signal: report 128+signal like a shell would.
        let code = status.code().unwrap_or_else(|| {
            use std::os::unix::process::ExitStatusExt;
            128 + status.signal().unwrap_or(0)
        });
        Err(CommandFailed { what: shown, code }.into())
    }
}

/// Run a command quietly and return its stdout; fail if it does not exit 0.
pub fn output(cmd: &mut Command) -> Result<String> {
    let shown = display_cmd(cmd);
    let out = cmd
        .output()
        .with_context(|| format!("could not start `{shown}` (is it installed?)"))?;
    if !out.status.success() {
        bail!(
            "`{shown}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A `Command` for `cargo`, started in the workspace root.
///
/// Uses the `cargo` found on PATH (the rustup proxy), not `$CARGO`, so that
/// `cargo +nightly ...` works.
pub fn cargo() -> Command {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(workspace_root());
    cmd
}

/// Find an executable named `name` in the directories of `path` (a PATH-style
/// list), returning its full path.
pub fn find_in(name: &str, path: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// Find an executable on `$PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    find_in(name, &std::env::var_os("PATH").unwrap_or_default())
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// `$CARGO_HOME/bin` (default `~/.cargo/bin`), where `cargo install` puts binaries.
pub fn cargo_bin_dir() -> Option<PathBuf> {
    let home = match std::env::var_os("CARGO_HOME") {
        Some(h) if !h.is_empty() => PathBuf::from(h),
        _ => PathBuf::from(std::env::var_os("HOME")?).join(".cargo"),
    };
    Some(home.join("bin"))
}

/// Effective uid from the text of `/proc/self/status` (`Uid: real effective saved fs`).
pub fn parse_effective_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|rest| rest.split_whitespace().nth(1))
        .and_then(|uid| uid.parse().ok())
}

/// Whether we run with effective uid 0.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| parse_effective_uid(&s))
        == Some(0)
}

/// A `Command` running `program` with root privileges: directly when we are
/// root, through `sudo` when it is available, else `None`.
pub fn privileged(program: &str) -> Option<Command> {
    if is_root() {
        Some(Command::new(program))
    } else if which("sudo").is_some() {
        let mut cmd = Command::new("sudo");
        cmd.arg(program);
        Some(cmd)
    } else {
        None
    }
}

/// The environment variable cargo reads for a per-target runner, e.g.
/// `CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER`.
pub fn runner_env_var(target_triple: &str) -> String {
    format!(
        "CARGO_TARGET_{}_RUNNER",
        target_triple.to_ascii_uppercase().replace(['-', '.'], "_")
    )
}

/// The `host:` line of `rustc -vV`.
pub fn parse_rustc_host(rustc_vv: &str) -> Option<String> {
    rustc_vv
        .lines()
        .find_map(|l| l.strip_prefix("host:"))
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}

/// The host target triple, from `rustc -vV`.
pub fn host_triple() -> Result<String> {
    let vv = output(Command::new("rustc").arg("-vV"))?;
    parse_rustc_host(&vv).context("no `host:` line in `rustc -vV` output")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effective_uid_is_second_field() {
        let status =
            "Name:\tcat\nUmask:\t0022\nUid:\t1000\t0\t0\t0\nGid:\t1000\t1000\t1000\t1000\n";
        assert_eq!(parse_effective_uid(status), Some(0));
        assert_eq!(
            parse_effective_uid("Uid:\t1000\t1000\t1000\t1000\n"),
            Some(1000)
        );
        assert_eq!(parse_effective_uid("Name:\tx\n"), None);
    }

    #[test]
    fn runner_var_name() {
        assert_eq!(
            runner_env_var("x86_64-unknown-linux-gnu"),
            "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER"
        );
        assert_eq!(
            runner_env_var("thumbv7em-none-eabihf"),
            "CARGO_TARGET_THUMBV7EM_NONE_EABIHF_RUNNER"
        );
    }

    #[test]
    fn rustc_host_line() {
        let vv = "rustc 1.95.0 (abc 2026-01-01)\nbinary: rustc\nhost: x86_64-unknown-linux-gnu\nrelease: 1.95.0\n";
        assert_eq!(
            parse_rustc_host(vv).as_deref(),
            Some("x86_64-unknown-linux-gnu")
        );
        assert_eq!(parse_rustc_host("rustc 1.0\n"), None);
    }

    #[test]
    fn find_in_searches_each_dir() {
        let dir = std::env::temp_dir().join(format!("xtask-find-in-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("some-tool");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths([Path::new("/nonexistent"), &dir]).unwrap();
        assert_eq!(find_in("some-tool", &path), Some(exe.clone()));
        assert_eq!(find_in("other-tool", &path), None);
        // Not executable: not found.
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(find_in("some-tool", &path), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn workspace_root_has_workspace_manifest() {
        assert!(workspace_root().join("Cargo.toml").is_file());
        assert!(workspace_root().join("xtask").is_dir());
    }
}
