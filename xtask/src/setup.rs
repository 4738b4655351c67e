//! `cargo xtask setup`: install, only when missing, what building and testing
//! lockscope needs on a Debian machine. Every check is cheap when satisfied.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::util::{self, output, run};

/// Debian packages lockscope's build, tests and demo need. Extend freely.
///
/// - `llvm-22-dev`, `libclang-22-dev`: to build `bpf-linker` against LLVM 22.
/// - `linux-perf`: `perf`, used to cross-check results.
/// - `bpftool`: inspect loaded programs and maps.
/// - `tmux`: multi-pane demos.
/// - `util-linux`: `setpriv`, to drop privileges in the tests.
/// - `procps`: `ps`, `pgrep`, ...
/// - `chromium`: headless browser test of the HTML report.
pub const DEBIAN_PACKAGES: &[&str] = &[
    "llvm-22-dev",
    "libclang-22-dev",
    "linux-perf",
    "bpftool",
    "tmux",
    "util-linux",
    "procps",
    "chromium",
    // `lockscope serve` tests: a real Prometheus server scrapes it; promtool lints.
    "prometheus",
    // pthread tests: a statically linked C program (no shared libc to probe).
    "gcc",
    "libc6-dev",
    // `cargo xtask bench`: the bpftrace equivalent lockscope is measured against, and a
    // real multi-threaded server under its own load generator.
    "bpftrace",
    "memcached",
    "libmemcached-tools",
    // Real-time view tests: cyclictest's RT threads next to a ptrace load.
    "rt-tests",
    "stress-ng",
    // `systemd-analyze security`: the deploy test rates the systemd unit's confinement.
    "systemd",
    // `go tool pprof` reads lockscope's pprof export in the tests.
    "golang-go",
    // `serve --web-config` tests: a self-signed certificate, an HTTPS client.
    "openssl",
    "curl",
];

/// Toolchain that builds the eBPF crate (`-Z build-std` needs nightly).
pub const NIGHTLY: &str = "nightly";
/// Components the nightly toolchain needs: `rust-src` for `-Z build-std=core`,
/// `clippy` for linting the eBPF crate.
pub const NIGHTLY_COMPONENTS: &[&str] = &["rust-src", "clippy"];
/// Components the default (stable) toolchain needs for `cargo xtask test`.
pub const STABLE_COMPONENTS: &[&str] = &["clippy", "rustfmt"];

/// The LLVM major version bpf-linker is built against (see `DEBIAN_PACKAGES`).
pub const LLVM_MAJOR: u32 = 22;

/// `bpf-linker` must be built against the system LLVM (22); its default
/// feature wants LLVM 23, which Debian does not ship.
pub const BPF_LINKER_INSTALL: &[&str] = &[
    "install",
    "bpf-linker",
    "--no-default-features",
    "--features",
    "llvm-22",
];

pub const TRACEFS: &str = "/sys/kernel/tracing";

/// Install everything missing. Prints one line per thing installed, or
/// `setup: everything present`.
pub fn setup() -> Result<()> {
    let mut installed = 0;
    ensure_cargo_bin_on_path();
    installed += ensure_rust_toolchains()?;
    installed += ensure_debian_packages()?;
    installed += ensure_bpf_linker()?;
    installed += ensure_tracefs()?;
    if installed == 0 {
        println!("setup: everything present");
    }
    Ok(())
}

/// Make sure `$CARGO_HOME/bin` is on PATH for the commands we spawn, so a
/// freshly `cargo install`ed `bpf-linker` is found by rustc.
fn ensure_cargo_bin_on_path() {
    let Some(bin) = util::cargo_bin_dir() else {
        return;
    };
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|p| p == bin) {
        return;
    }
    let mut dirs = vec![bin];
    dirs.extend(std::env::split_paths(&path));
    if let Ok(joined) = std::env::join_paths(dirs) {
        // SAFETY: called from `main` before any other thread is spawned.
        unsafe { std::env::set_var("PATH", joined) };
    }
}

// ---------------------------------------------------------------- rustup

fn ensure_rust_toolchains() -> Result<usize> {
    if util::which("rustup").is_none() {
        bail!("setup: `rustup` not found on PATH; install it from https://rustup.rs and retry");
    }
    let mut installed = 0;

    let list = output(Command::new("rustup").args(["toolchain", "list"]))?;
    if !has_toolchain(&list, NIGHTLY) {
        println!("setup: installing the {NIGHTLY} toolchain (rustup, minimal profile)");
        run(Command::new("rustup").args(["toolchain", "install", NIGHTLY, "--profile", "minimal"]))
            .context("setup: could not install the nightly toolchain")?;
        installed += 1;
    }
    installed += ensure_components(Some(NIGHTLY), NIGHTLY_COMPONENTS)?;
    installed += ensure_components(None, STABLE_COMPONENTS)?;
    Ok(installed)
}

/// Install the `wanted` components missing from `toolchain` (None: the
/// active toolchain).
fn ensure_components(toolchain: Option<&str>, wanted: &[&str]) -> Result<usize> {
    let mut list = Command::new("rustup");
    list.args(["component", "list", "--installed"]);
    if let Some(tc) = toolchain {
        list.args(["--toolchain", tc]);
    }
    let missing = missing_components(&output(&mut list)?, wanted);
    let label = toolchain.unwrap_or("default");
    for component in &missing {
        println!("setup: installing rustup component {component} for the {label} toolchain");
        let mut add = Command::new("rustup");
        add.args(["component", "add", component]);
        if let Some(tc) = toolchain {
            add.args(["--toolchain", tc]);
        }
        run(&mut add).with_context(|| {
            format!("setup: could not add component {component} to the {label} toolchain")
        })?;
    }
    Ok(missing.len())
}

/// Whether `rustup toolchain list` output contains the undated channel
/// `channel` (e.g. `nightly-x86_64-unknown-linux-gnu`, not `nightly-2024-01-01-...`).
pub fn has_toolchain(rustup_toolchain_list: &str, channel: &str) -> bool {
    rustup_toolchain_list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .any(|name| {
            name == channel
                || name
                    .strip_prefix(channel)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_digit()))
        })
}

/// Which of `wanted` are absent from `rustup component list --installed`
/// output. Lines look like `rust-src` or `clippy-x86_64-unknown-linux-gnu`.
pub fn missing_components<'a>(installed_list: &str, wanted: &[&'a str]) -> Vec<&'a str> {
    let installed: Vec<&str> = installed_list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    wanted
        .iter()
        .copied()
        .filter(|w| !installed.iter().any(|name| component_matches(name, w)))
        .collect()
}

fn component_matches(installed_name: &str, wanted: &str) -> bool {
    installed_name == wanted
        || installed_name
            .strip_prefix(wanted)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|triple| triple.starts_with(std::env::consts::ARCH))
}

// ---------------------------------------------------------------- apt

fn ensure_debian_packages() -> Result<usize> {
    ensure_packages(DEBIAN_PACKAGES)
}

/// Install, only when missing, these Debian packages (`vm-test` uses it for qemu and
/// the guest kernels). Returns how many were installed.
pub fn ensure_packages(wanted: &[&str]) -> Result<usize> {
    if util::which("dpkg-query").is_none() {
        bail!(
            "setup: `dpkg-query` not found: this is not a Debian-like system; install these \
             packages (or equivalents) by hand: {}",
            wanted.join(" ")
        );
    }
    // One call for all packages. Unknown packages make dpkg-query exit 1 and
    // print nothing for them, which `missing_packages` treats as missing.
    let out = Command::new("dpkg-query")
        .arg("-W")
        .arg("-f=${Package} ${Status}\\n")
        .args(wanted)
        .output()
        .context("setup: could not run dpkg-query")?;
    let missing = missing_packages(&String::from_utf8_lossy(&out.stdout), wanted);
    if missing.is_empty() {
        return Ok(0);
    }
    for pkg in &missing {
        println!("setup: installing Debian package {pkg}");
    }
    let apt = |args: &[&str]| -> Result<Command> {
        // `env` so DEBIAN_FRONTEND survives sudo's environment reset.
        let mut cmd = util::privileged("env").with_context(|| {
            format!(
                "setup: cannot install Debian packages {} without root, and sudo is not \
                 available; rerun as root",
                missing.join(" ")
            )
        })?;
        cmd.args(["DEBIAN_FRONTEND=noninteractive", "apt-get"])
            .args(args);
        Ok(cmd)
    };
    run(&mut apt(&["update"])?).context("setup: `apt-get update` failed")?;
    let mut install = apt(&["install", "-y", "--no-install-recommends"])?;
    install.args(&missing);
    run(&mut install).with_context(|| format!("setup: could not install {}", missing.join(" ")))?;
    Ok(missing.len())
}

/// Which of `wanted` are not "install ok installed" in
/// `dpkg-query -W -f='${Package} ${Status}\n'` output.
pub fn missing_packages<'a>(dpkg_output: &str, wanted: &[&'a str]) -> Vec<&'a str> {
    let installed: BTreeSet<&str> = dpkg_output
        .lines()
        .filter_map(|line| line.split_once(' '))
        .filter(|(_, status)| status.trim() == "install ok installed")
        // `${Package}` has no `:arch` suffix, but be lenient.
        .map(|(pkg, _)| pkg.split(':').next().unwrap_or(pkg))
        .collect();
    wanted
        .iter()
        .copied()
        .filter(|p| !installed.contains(p))
        .collect()
}

// ---------------------------------------------------------------- bpf-linker

fn ensure_bpf_linker() -> Result<usize> {
    let on_path = util::which("bpf-linker").is_some();
    let in_cargo_bin = util::cargo_bin_dir()
        .map(|d| d.join("bpf-linker").is_file())
        .unwrap_or(false);
    if on_path || in_cargo_bin {
        return Ok(0);
    }
    println!(
        "setup: installing bpf-linker (cargo {}; takes a few minutes)",
        BPF_LINKER_INSTALL.join(" ")
    );
    let mut install = Command::new("cargo");
    install.args(BPF_LINKER_INSTALL);
    // bpf-linker's build script looks for `llvm-config` (unversioned) on PATH
    // and links the libLLVM next to it; Debian's /usr/bin/llvm-config may be
    // another version and /usr/lib64 has no libLLVM. Point both it and
    // llvm-sys at LLVM 22 explicitly.
    if let Some(prefix) = llvm_prefix() {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let dirs = std::iter::once(prefix.join("bin")).chain(std::env::split_paths(&path));
        install
            .env("LLVM_PREFIX", &prefix)
            .env("PATH", std::env::join_paths(dirs)?);
    }
    run(&mut install).with_context(|| {
        format!(
            "setup: could not build bpf-linker against LLVM {LLVM_MAJOR} (are llvm-{LLVM_MAJOR}-dev \
             and libclang-{LLVM_MAJOR}-dev installed, and `llvm-config-{LLVM_MAJOR} --prefix` working?)"
        )
    })?;
    Ok(1)
}

/// The LLVM 22 install prefix (`/usr/lib/llvm-22` on Debian): `$LLVM_PREFIX`
/// if set, else `llvm-config-22 --prefix`.
fn llvm_prefix() -> Option<PathBuf> {
    if let Some(prefix) = std::env::var_os("LLVM_PREFIX").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(prefix));
    }
    let out = output(Command::new(format!("llvm-config-{LLVM_MAJOR}")).arg("--prefix")).ok()?;
    let prefix = PathBuf::from(out.trim());
    prefix.join("bin").is_dir().then_some(prefix)
}

// ---------------------------------------------------------------- tracefs

fn ensure_tracefs() -> Result<usize> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    if tracefs_mounted(&mounts, TRACEFS) {
        return Ok(0);
    }
    if !util::is_root() {
        println!(
            "setup: note: tracefs is not mounted at {TRACEFS}; as root run \
             `mount -t tracefs nodev {TRACEFS}` (tracepoint probes need it)"
        );
        return Ok(0);
    }
    if !Path::new(TRACEFS).is_dir() {
        bail!("setup: {TRACEFS} does not exist: this kernel has no tracefs support");
    }
    println!("setup: mounting tracefs at {TRACEFS}");
    run(Command::new("mount").args(["-t", "tracefs", "nodev", TRACEFS]))
        .context("setup: could not mount tracefs")?;
    Ok(1)
}

/// Whether `/proc/mounts` text has a tracefs mounted at `mount_point`.
pub fn tracefs_mounted(proc_mounts: &str, mount_point: &str) -> bool {
    proc_mounts.lines().any(|line| {
        let mut fields = line.split_whitespace();
        let _source = fields.next();
        fields.next() == Some(mount_point) && fields.next() == Some("tracefs")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nightly_toolchain_detection() {
        let list = "stable-x86_64-unknown-linux-gnu (active, default)\n\
                    nightly-x86_64-unknown-linux-gnu\n\
                    1.95.0-x86_64-unknown-linux-gnu\n";
        assert!(has_toolchain(list, "nightly"));
        assert!(has_toolchain(list, "stable"));
        assert!(!has_toolchain(list, "beta"));
        // A dated nightly is not "nightly".
        assert!(!has_toolchain(
            "nightly-2025-01-01-x86_64-unknown-linux-gnu\n",
            "nightly"
        ));
        assert!(!has_toolchain("no installed toolchains\n", "nightly"));
        assert!(has_toolchain("nightly\n", "nightly"));
    }

    #[test]
    fn missing_rustup_components() {
        let installed = "cargo-x86_64-unknown-linux-gnu\n\
                         clippy-x86_64-unknown-linux-gnu\n\
                         rust-docs-x86_64-unknown-linux-gnu\n\
                         rust-src\n\
                         rust-std-x86_64-unknown-linux-gnu\n\
                         rustc-x86_64-unknown-linux-gnu\n";
        assert!(missing_components(installed, &["rust-src", "clippy"]).is_empty());
        assert_eq!(
            missing_components(installed, &["rust-src", "rustfmt"]),
            vec!["rustfmt"]
        );
        // Minimal profile: no rust-src, no clippy.
        let minimal = "cargo-x86_64-unknown-linux-gnu\nrustc-x86_64-unknown-linux-gnu\n";
        assert_eq!(
            missing_components(minimal, &["rust-src", "clippy"]),
            vec!["rust-src", "clippy"]
        );
        // `rustc-dev-...` must not count as `rustc`, nor `rust-std` as `rust`.
        assert_eq!(
            missing_components("rustc-dev-x86_64-unknown-linux-gnu\n", &["rustc"]),
            vec!["rustc"]
        );
    }

    #[test]
    fn missing_debian_packages() {
        let out = "tmux install ok installed\n\
                   bpftool deinstall ok config-files\n\
                   procps install ok installed\n";
        assert_eq!(
            missing_packages(out, &["tmux", "bpftool", "procps", "linux-perf"]),
            vec!["bpftool", "linux-perf"]
        );
        assert!(missing_packages(out, &["tmux", "procps"]).is_empty());
        assert_eq!(missing_packages("", &["tmux"]), vec!["tmux"]);
        assert!(missing_packages("libc6:amd64 install ok installed\n", &["libc6"]).is_empty());
    }

    #[test]
    fn tracefs_mount_detection() {
        let mounts = "proc /proc proc rw,nosuid 0 0\n\
                      tracefs /sys/kernel/tracing tracefs rw,nosuid 0 0\n";
        assert!(tracefs_mounted(mounts, TRACEFS));
        assert!(!tracefs_mounted(
            "debugfs /sys/kernel/debug debugfs rw 0 0\n",
            TRACEFS
        ));
        assert!(!tracefs_mounted(
            "tracefs /sys/kernel/debug/tracing tracefs rw 0 0\n",
            TRACEFS
        ));
        assert!(tracefs_mounted(
            "nodev /sys/kernel/tracing tracefs rw 0 0\n",
            TRACEFS
        ));
    }

    #[test]
    fn package_list_is_sane() {
        assert!(DEBIAN_PACKAGES.contains(&"llvm-22-dev"));
        let unique: BTreeSet<_> = DEBIAN_PACKAGES.iter().collect();
        assert_eq!(unique.len(), DEBIAN_PACKAGES.len());
    }
}
