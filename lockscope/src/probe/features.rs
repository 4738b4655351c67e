//! What the running kernel allows: privileges, BTF, tracefs, tracepoints, kprobes,
//! fentry. `lockscope doctor` prints it; the loader checks it before loading anything.

use std::{
    fs,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};

/// Capability bits (include/uapi/linux/capability.h).
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Where tracefs lives; `LOCKSCOPE_TRACEFS` overrides it.
pub fn tracefs_path() -> PathBuf {
    std::env::var_os("LOCKSCOPE_TRACEFS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/sys/kernel/tracing"))
}

/// (state, parent pid) of a `/proc/PID/stat` line; the command name may hold spaces and
/// parentheses, so the fields are read after its last `)`.
pub fn state_and_parent(stat: &str) -> Option<(char, u32)> {
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    Some((state, rest.next()?.parse().ok()?))
}

/// Effective capabilities from `/proc/self/status` (`CapEff:` hex mask).
pub fn effective_caps(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

/// Can this process load and attach tracing programs?
pub fn privilege_report(caps: u64) -> Result<&'static str, &'static str> {
    let has = |c: u32| caps & (1u64 << c) != 0;
    if has(CAP_SYS_ADMIN) {
        Ok("CAP_SYS_ADMIN (root)")
    } else if has(CAP_BPF) && has(CAP_PERFMON) {
        Ok("CAP_BPF + CAP_PERFMON")
    } else {
        Err("needs root, or CAP_BPF and CAP_PERFMON, to load eBPF probes (try sudo)")
    }
}

pub fn require_privileges() -> anyhow::Result<()> {
    let status = fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let caps = effective_caps(&status).unwrap_or(0);
    privilege_report(caps)
        .map(|_| ())
        .map_err(|e| anyhow::anyhow!(e))
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK: lift it (harmless elsewhere).
pub fn bump_memlock_rlimit() {
    let rlim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: plain syscall with a valid pointer.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rlim) };
}

/// `(cgroup id, depth below the v2 root)` of a cgroup directory.
pub fn cgroup_id_and_level(path: &Path) -> anyhow::Result<(u64, u32)> {
    let meta = fs::metadata(path).with_context(|| format!("cgroup {}", path.display()))?;
    if !meta.is_dir() {
        bail!("cgroup {} is not a directory", path.display());
    }
    let canon = fs::canonicalize(path)?;
    let root = cgroup2_root()?;
    let rel = canon.strip_prefix(&root).map_err(|_| {
        anyhow::anyhow!(
            "{} is not inside the cgroup v2 hierarchy at {}",
            path.display(),
            root.display()
        )
    })?;
    Ok((meta.ino(), rel.components().count() as u32))
}

pub fn cgroup2_root() -> anyhow::Result<PathBuf> {
    let mounts = fs::read_to_string("/proc/self/mounts")?;
    mounts
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
            (fstype == "cgroup2").then(|| PathBuf::from(dir))
        })
        .ok_or_else(|| anyhow::anyhow!("no cgroup v2 hierarchy mounted"))
}

/// Make sure tracefs is mounted (mount it when it is not), returning its path.
pub fn ensure_tracefs() -> anyhow::Result<PathBuf> {
    let path = tracefs_path();
    if path.join("events").is_dir() {
        return Ok(path);
    }
    if !path.is_dir() {
        bail!(
            "tracefs is not available: {} does not exist (is this Linux with CONFIG_TRACING?)",
            path.display()
        );
    }
    let out = std::process::Command::new("mount")
        .args(["-t", "tracefs", "nodev"])
        .arg(&path)
        .output();
    match out {
        Ok(o) if o.status.success() && path.join("events").is_dir() => Ok(path),
        Ok(o) => bail!(
            "tracefs is not mounted at {} and mounting it failed ({}); \
             try: mount -t tracefs nodev {}",
            path.display(),
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .next()
                .unwrap_or("")
                .trim(),
            path.display()
        ),
        Err(e) => bail!(
            "tracefs is not mounted at {} and `mount` failed: {e}",
            path.display()
        ),
    }
}

/// Does tracefs list this event (`category/name`)?
pub fn tracepoint_exists(tracefs: &Path, category: &str, name: &str) -> bool {
    tracefs.join("events").join(category).join(name).is_dir()
}

/// Is the kprobe PMU there (CONFIG_KPROBES)?
pub fn kprobes_available() -> bool {
    Path::new("/sys/bus/event_source/devices/kprobe").exists()
}

pub fn kernel_release() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_and_parent_read_past_the_command_name() {
        assert_eq!(
            state_and_parent("812 (lockscope-bg) S 1 812 812 0 -1 4194368"),
            Some(('S', 1))
        );
        assert_eq!(state_and_parent("9 (a) b) (c) Z 77 9 9"), Some(('Z', 77)));
        assert_eq!(state_and_parent("9 (x"), None);
        assert_eq!(state_and_parent("9 (x) R"), None);
    }

    #[test]
    fn caps_parse_and_decide() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        let caps = effective_caps(status).unwrap();
        assert!(privilege_report(caps).is_ok());
        assert!(privilege_report(0).unwrap_err().contains("CAP_BPF"));
        let bpf_perfmon = (1u64 << CAP_BPF) | (1u64 << CAP_PERFMON);
        assert_eq!(privilege_report(bpf_perfmon), Ok("CAP_BPF + CAP_PERFMON"));
        assert!(privilege_report(1u64 << CAP_BPF).is_err());
        assert_eq!(effective_caps("Name: x\n"), None);
    }
}
