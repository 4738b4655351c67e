//! `cargo xtask vm-test`: run lockscope's deep-tier checks inside QEMU guests on other
//! kernels (Debian's 6.1, 6.12 and PREEMPT_RT 6.12).
//!
//! The host kernel may refuse kprobes and fentry (then only the tracepoint tier runs
//! here); Debian's kernels allow both. For each kernel this builds an initramfs (a newc
//! cpio written here) holding busybox, the release `lockscope` binary with the shared
//! libraries `ldd` names, a `/init` script and the steps to run; boots it under
//! `qemu-system-x86_64 -accel tcg` (KVM guests hang during early boot on these
//! machines); and reads the serial console. The guest prints each step's output between
//! markers, dumps the recordings it wrote, and ends with one line
//! `LOCKSCOPE-VM-RESULT pass=N fail=M` (steps whose command failed). The host then checks
//! the numbers in the recordings. Any failed step or check, a missing result line or a
//! timeout (qemu is killed) fails the run.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::setup;
use crate::util::{self, output, run};

/// Packages every guest run needs on the host.
pub const VM_PACKAGES: &[&str] = &["qemu-system-x86", "busybox-static"];

/// A guest kernel: its name on the command line, the Debian package that installs it,
/// and how its `/boot/vmlinuz-*` file is recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestKernel {
    pub name: &'static str,
    pub package: &'static str,
    /// `vmlinuz-<release>`: release starts with this...
    release_prefix: &'static str,
    /// ... and is (or is not) a PREEMPT_RT build.
    pub rt: bool,
}

pub const KERNELS: [GuestKernel; 3] = [
    GuestKernel {
        name: "6.1",
        package: "linux-image-amd64",
        release_prefix: "6.1.",
        rt: false,
    },
    GuestKernel {
        name: "6.12",
        package: "linux-image-6.12-amd64",
        release_prefix: "6.12.",
        rt: false,
    },
    GuestKernel {
        name: "6.12-rt",
        package: "linux-image-6.12-rt-amd64",
        release_prefix: "6.12.",
        rt: true,
    },
];

/// How long one guest may run (boot + steps + poweroff) before qemu is killed.
const GUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// Result line the guest prints last.
const RESULT_MARK: &str = "LOCKSCOPE-VM-RESULT";

/// `cargo xtask vm-test [--kernel K]`
pub fn vm_test(kernel: Option<&str>) -> Result<()> {
    let kernels: Vec<GuestKernel> = match kernel {
        None | Some("all") => KERNELS.to_vec(),
        Some(k) => vec![*KERNELS.iter().find(|g| g.name == k).with_context(|| {
            format!(
                "vm-test: unknown kernel `{k}`; choose one of: {}, all",
                KERNELS.map(|g| g.name).join(", ")
            )
        })?],
    };
    setup::setup()?;
    let mut packages: Vec<&str> = VM_PACKAGES.to_vec();
    packages.extend(kernels.iter().map(|k| k.package));
    setup::ensure_packages(&packages)?;

    run(util::cargo().args(["build", "--release", "-p", "lockscope"]))?;
    let exe = util::target_dir().join("release").join("lockscope");
    let work = util::target_dir().join("vm");
    std::fs::create_dir_all(&work)?;
    let initrd = work.join("initramfs.cpio");
    build_initramfs(&exe, &initrd)?;

    let started = Instant::now();
    let mut failures = Vec::new();
    for k in &kernels {
        println!();
        println!(
            "==================== vm-test: kernel {} ====================",
            k.name
        );
        match run_guest(k, &initrd, &work) {
            Ok(report) => {
                for line in &report.lines {
                    println!("  {line}");
                }
                if report.failed() > 0 {
                    failures.push(format!("{}: {} check(s) failed", k.name, report.failed()));
                }
                println!(
                    "vm-test {}: {} passed, {} failed ({:.0?})",
                    k.name,
                    report.passed(),
                    report.failed(),
                    report.elapsed
                );
            }
            Err(e) => {
                println!("vm-test {}: ERROR {e:#}", k.name);
                failures.push(format!("{}: {e:#}", k.name));
            }
        }
    }
    println!();
    if failures.is_empty() {
        println!(
            "vm-test: all {} kernel(s) passed in {:.0?}",
            kernels.len(),
            started.elapsed()
        );
        Ok(())
    } else {
        bail!("vm-test failed: {}", failures.join("; "))
    }
}

/// The newest `/boot/vmlinuz-*` of this guest kernel, from a directory listing.
pub fn pick_vmlinuz(names: &[String], k: &GuestKernel) -> Option<String> {
    let mut found: Vec<(Vec<u32>, &String)> = names
        .iter()
        .filter_map(|n| {
            let release = n.strip_prefix("vmlinuz-")?;
            if !release.starts_with(k.release_prefix) || release.contains("-rt-") != k.rt {
                return None;
            }
            if !release.ends_with("-amd64") {
                return None;
            }
            let version: Vec<u32> = release
                .split(|c: char| !c.is_ascii_digit())
                .filter(|s| !s.is_empty())
                .filter_map(|s| s.parse().ok())
                .collect();
            Some((version, n))
        })
        .collect();
    found.sort();
    found.last().map(|(_, n)| (*n).clone())
}

fn find_vmlinuz(k: &GuestKernel) -> Result<PathBuf> {
    let names: Vec<String> = std::fs::read_dir("/boot")
        .context("reading /boot")?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let name = pick_vmlinuz(&names, k).with_context(|| {
        format!(
            "no /boot/vmlinuz for kernel {} although {} is installed",
            k.name, k.package
        )
    })?;
    Ok(Path::new("/boot").join(name))
}

// ---------------------------------------------------------------- initramfs

/// The guest's `/init`: mount what lockscope needs, run `/vm-steps.sh`, print the result.
const GUEST_INIT: &str = r#"#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /tmp /run /usr/bin /sbin /usr/sbin
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /tmp
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug
mount -t bpf bpf /sys/fs/bpf
mount -t cgroup2 cgroup2 /sys/fs/cgroup
echo "LOCKSCOPE-VM-BOOTED $(uname -r) cpus=$(nproc)"
pass=0
fail=0
step() {
    name=$1
    shift
    echo "LOCKSCOPE-VM-STEP-BEGIN $name"
    "$@" >/tmp/step.out 2>&1
    rc=$?
    cat /tmp/step.out
    echo "LOCKSCOPE-VM-STEP-END $name rc=$rc"
    if [ "$rc" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
}
dump() {
    echo "LOCKSCOPE-VM-FILE-BEGIN $1"
    cat "/tmp/$1" 2>/dev/null
    echo
    echo "LOCKSCOPE-VM-FILE-END $1"
}
. /vm-steps.sh
echo "LOCKSCOPE-VM-RESULT pass=$pass fail=$fail"
sync
poweroff -f
"#;

/// What the guest runs. Host-side checks read the recordings it dumps.
const GUEST_STEPS: &str = r#"
step doctor lockscope doctor
step churn lockscope record -n 5 -o /tmp/churn.json -- lockscope workload mmap-churn --seconds 4
dump churn.json
step handoff lockscope record -n 5 -o /tmp/handoff.json -- lockscope workload mmap-handoff --seconds 4
dump handoff.json
step pi-contend lockscope record -n 5 -o /tmp/pi.json -- lockscope workload pi-contend --threads 4 --seconds 4
dump pi.json
step pi-calm lockscope record -n 5 -o /tmp/pi-calm.json -- lockscope workload pi-contend --threads 1 --one-cpu --seconds 3
dump pi-calm.json
step pi-kprobe env LOCKSCOPE_SPIN_KPROBES=1 lockscope record -n 5 -o /tmp/pi-kprobe.json -- lockscope workload pi-contend --threads 4 --seconds 2
dump pi-kprobe.json
"#;

fn build_initramfs(exe: &Path, out: &Path) -> Result<()> {
    let mut cpio = Cpio::default();
    for d in [
        "bin", "dev", "proc", "sys", "tmp", "lib", "lib64", "usr", "etc",
    ] {
        cpio.dir(d);
    }
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .context("busybox not found (is busybox-static installed?)")?;
    cpio.file("bin/busybox", 0o755, &std::fs::read(busybox)?);
    cpio.file(
        "bin/lockscope",
        0o755,
        &std::fs::read(exe).with_context(|| format!("reading {}", exe.display()))?,
    );
    // The dynamic loader and the shared libraries lockscope links.
    let ldd = output(Command::new("ldd").arg(exe))?;
    for lib in ldd_paths(&ldd) {
        let data = std::fs::read(&lib).with_context(|| format!("reading {lib}"))?;
        let rel = lib.trim_start_matches('/');
        let mut dir = String::new();
        for part in Path::new(rel)
            .parent()
            .into_iter()
            .flat_map(|p| p.components())
        {
            if !dir.is_empty() {
                dir.push('/');
            }
            dir.push_str(&part.as_os_str().to_string_lossy());
            cpio.dir(&dir);
        }
        cpio.file(rel, 0o755, &data);
    }
    cpio.file("init", 0o755, GUEST_INIT.as_bytes());
    cpio.file("vm-steps.sh", 0o644, GUEST_STEPS.as_bytes());
    let bytes = cpio.finish();
    std::fs::File::create(out)
        .and_then(|mut f| f.write_all(&bytes))
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}

/// Absolute paths of the loader and libraries in `ldd` output.
pub fn ldd_paths(ldd: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in ldd.lines() {
        let line = line.trim();
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path
            && p.starts_with('/')
            && !out.iter().any(|o| o == p)
        {
            out.push(p.to_owned());
        }
    }
    out
}

/// A newc-format cpio archive, as the kernel unpacks an initramfs.
#[derive(Default)]
pub struct Cpio {
    buf: Vec<u8>,
    ino: u32,
    dirs: Vec<String>,
}

impl Cpio {
    pub fn dir(&mut self, path: &str) {
        if self.dirs.iter().any(|d| d == path) {
            return;
        }
        self.dirs.push(path.to_owned());
        self.entry(path, 0o040_755, 2, &[]);
    }

    pub fn file(&mut self, path: &str, perm: u32, data: &[u8]) {
        self.entry(path, 0o100_000 | perm, 1, data);
    }

    fn entry(&mut self, name: &str, mode: u32, nlink: u32, data: &[u8]) {
        self.ino += 1;
        let fields = [
            self.ino,
            mode,
            0,
            0,
            nlink,
            0,
            data.len() as u32,
            0,
            0,
            0,
            0,
            name.len() as u32 + 1,
            0,
        ];
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.ino = 0;
        self.entry("TRAILER!!!", 0, 1, &[]);
        self.buf
    }
}

// ---------------------------------------------------------------- running a guest

/// Everything one guest printed, split by markers.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct GuestLog {
    pub booted: Option<String>,
    /// Step name -> (exit code, output).
    pub steps: BTreeMap<String, (i32, String)>,
    pub files: BTreeMap<String, String>,
    /// `(pass, fail)` of the result line.
    pub result: Option<(u32, u32)>,
}

pub fn parse_guest_log(log: &str) -> GuestLog {
    let mut g = GuestLog::default();
    let mut step: Option<(String, String)> = None;
    let mut file: Option<(String, String)> = None;
    for raw in log.lines() {
        let mut line = raw.trim_end_matches('\r');
        // The console's terminal resets may precede a marker on its line.
        if let Some(at) = line.find("LOCKSCOPE-VM-") {
            line = &line[at..];
        }
        if let Some((name, buf)) = &mut file {
            if line == format!("LOCKSCOPE-VM-FILE-END {name}") {
                let (name, buf) = file.take().unwrap_or_default();
                g.files.insert(name, buf);
            } else {
                buf.push_str(line);
                buf.push('\n');
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("LOCKSCOPE-VM-FILE-BEGIN ") {
            file = Some((rest.trim().to_owned(), String::new()));
        } else if let Some(rest) = line.strip_prefix("LOCKSCOPE-VM-STEP-BEGIN ") {
            step = Some((rest.trim().to_owned(), String::new()));
        } else if let Some(rest) = line.strip_prefix("LOCKSCOPE-VM-STEP-END ") {
            let rc = rest
                .rsplit_once("rc=")
                .and_then(|(_, rc)| rc.trim().parse().ok())
                .unwrap_or(-1);
            if let Some((name, out)) = step.take() {
                g.steps.insert(name, (rc, out));
            }
        } else if let Some(rest) = line.strip_prefix("LOCKSCOPE-VM-BOOTED ") {
            g.booted = Some(rest.trim().to_owned());
        } else if let Some(rest) = line.strip_prefix(RESULT_MARK) {
            let num = |key: &str| {
                rest.split_whitespace()
                    .find_map(|w| w.strip_prefix(key))
                    .and_then(|v| v.parse().ok())
            };
            if let (Some(p), Some(f)) = (num("pass="), num("fail=")) {
                g.result = Some((p, f));
            }
        } else if let Some((_, out)) = &mut step {
            out.push_str(line);
            out.push('\n');
        }
    }
    g
}

/// The outcome of one guest: one line per check.
pub struct GuestReport {
    pub lines: Vec<String>,
    pub checks: Vec<(bool, String)>,
    pub elapsed: Duration,
}

impl GuestReport {
    fn passed(&self) -> usize {
        self.checks.iter().filter(|c| c.0).count()
    }
    fn failed(&self) -> usize {
        self.checks.iter().filter(|c| !c.0).count()
    }
}

fn run_guest(k: &GuestKernel, initrd: &Path, work: &Path) -> Result<GuestReport> {
    let vmlinuz = find_vmlinuz(k)?;
    let log_path = work.join(format!("guest-{}.log", k.name));
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(["-accel", "tcg", "-m", "2G", "-smp", "2", "-nographic"])
        .args(["-monitor", "none", "-serial", "stdio", "-no-reboot"])
        .arg("-kernel")
        .arg(&vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args([
            "-append",
            "console=ttyS0 panic=-1 loglevel=3 rdinit=/init nokaslr",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    println!("vm-test: booting {} ({})", vmlinuz.display(), k.name);
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .context("starting qemu-system-x86_64 (is qemu-system-x86 installed?)")?;
    let stdout = child.stdout.take().context("qemu stdout")?;
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut log = String::new();
    let mut timed_out = false;
    loop {
        let left = GUEST_TIMEOUT.saturating_sub(started.elapsed());
        if left.is_zero() {
            timed_out = true;
            break;
        }
        match rx.recv_timeout(left.min(Duration::from_secs(5))) {
            Ok(line) => {
                log.push_str(&line);
                log.push('\n');
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    if timed_out {
        let _ = child.kill();
    }
    let status = child.wait()?;
    let _ = reader.join();
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
    }
    std::fs::write(&log_path, &log)?;
    let elapsed = started.elapsed();
    if timed_out {
        bail!(
            "guest timed out after {GUEST_TIMEOUT:?} (qemu killed); serial log in {}",
            log_path.display()
        );
    }
    let g = parse_guest_log(&log);
    if g.booted.is_none() {
        bail!(
            "guest never reached /init (qemu {status}{}); serial log in {}",
            stderr
                .lines()
                .next()
                .map(|l| format!(": {l}"))
                .unwrap_or_default(),
            log_path.display()
        );
    }
    let mut report = check_guest(k, &g);
    report.elapsed = elapsed;
    report
        .lines
        .insert(0, format!("serial log: {}", log_path.display()));
    Ok(report)
}

// ---------------------------------------------------------------- checks

/// Host-side checks of one guest's output.
pub fn check_guest(k: &GuestKernel, g: &GuestLog) -> GuestReport {
    let mut checks: Vec<(bool, String)> = Vec::new();
    let mut lines = Vec::new();
    let mut check = |ok: bool, what: String| checks.push((ok, what));

    match g.result {
        Some((p, f)) => check(f == 0, format!("guest steps: {p} passed, {f} failed")),
        None => check(false, "guest printed no result line".into()),
    }
    for (name, (rc, out)) in &g.steps {
        if *rc != 0 {
            lines.push(format!("step {name} exited {rc}; its output:"));
            lines.extend(out.lines().map(|l| format!("  | {l}")));
        }
    }

    let doctor = g.steps.get("doctor").map(|s| s.1.as_str()).unwrap_or("");
    if !doctor.trim().is_empty() {
        lines.push("doctor:".into());
        lines.extend(
            doctor
                .lines()
                .filter(|l| l.starts_with("rwsem") || l.contains("deep") || l.contains("rwsem"))
                .map(|l| format!("  | {l}")),
        );
    }
    let deep_hooks = ["rwsem_down_read_slowpath", "rwsem_down_write_slowpath"];
    if k.rt {
        check(
            doctor.contains("PREEMPT_RT"),
            "doctor says rwsem deep probes do not exist on PREEMPT_RT".into(),
        );
    } else {
        for hook in deep_hooks {
            let active = doctor
                .lines()
                .any(|l| l.contains(hook) && (l.contains(" fentry ") || l.contains(" kprobe ")));
            check(active, format!("doctor: deep tier active for {hook}"));
        }
    }

    match g
        .files
        .get("churn.json")
        .map(|t| serde_json::from_str::<Value>(t))
    {
        Some(Ok(rec)) => {
            let r = mmap_lock_events(&rec, "rwsem:R");
            let w = mmap_lock_events(&rec, "rwsem:W");
            lines.push(format!("churn mmap_lock R events: {}", short(&r)));
            lines.push(format!("churn mmap_lock W events: {}", short(&w)));
            lines.push(format!(
                "churn system: {}",
                short(&rec.pointer("/rwsem_events/system").cloned())
            ));
            if k.rt {
                let system = rec
                    .pointer("/rwsem_events/system")
                    .and_then(Value::as_object);
                check(
                    system.is_some_and(|s| s.len() == 16 && s.values().all(Value::is_null)),
                    "PREEMPT_RT: every rwsem_* system count is n/a (null), none is 0".into(),
                );
                let steal = event(&r, "rlock_steal");
                check(
                    steal.is_none(),
                    format!("PREEMPT_RT: rlock_steal is n/a (got {steal:?})"),
                );
            } else {
                for (side, name) in [
                    (&r, "rlock_steal"),
                    (&w, "opt_lock"),
                    (&r, "rlock"),
                    (&w, "wlock"),
                ] {
                    let v = event(side, name);
                    check(
                        v.is_some_and(|v| v > 0),
                        format!("churn: mmap_lock {name} > 0 (got {v:?})"),
                    );
                }
                // Every write slowpath either spins to the lock or fails to (and queues).
                let sys = |n: &str| {
                    rec.pointer(&format!("/rwsem_events/system/rwsem_{n}"))
                        .and_then(Value::as_u64)
                };
                let (opt_fail, wlock, wlock_fail) =
                    (sys("opt_fail"), sys("wlock"), sys("wlock_fail"));
                check(
                    opt_fail.is_some() && opt_fail == wlock.zip(wlock_fail).map(|(a, b)| a + b),
                    format!(
                        "churn: rwsem_opt_fail ({opt_fail:?}) == rwsem_wlock + rwsem_wlock_fail \
                         ({wlock:?} + {wlock_fail:?})"
                    ),
                );
            }
        }
        Some(Err(e)) => check(false, format!("churn.json is not JSON: {e}")),
        None => check(false, "guest dumped no churn.json".into()),
    }

    match g
        .files
        .get("handoff.json")
        .map(|t| serde_json::from_str::<Value>(t))
    {
        Some(Ok(rec)) => {
            let r = mmap_lock_events(&rec, "rwsem:R");
            let w = mmap_lock_events(&rec, "rwsem:W");
            let rh = event(&r, "rlock_handoff");
            let wh = event(&w, "wlock_handoff");
            lines.push(format!("handoff mmap_lock R events: {}", short(&r)));
            lines.push(format!("handoff mmap_lock W events: {}", short(&w)));
            if k.rt {
                check(
                    rh.is_none() && wh.is_none(),
                    format!("PREEMPT_RT: handoffs are n/a (got {rh:?}, {wh:?})"),
                );
            } else {
                check(
                    rh.unwrap_or(0) + wh.unwrap_or(0) > 0,
                    format!("handoff: rlock_handoff + wlock_handoff > 0 (got {rh:?} + {wh:?})"),
                );
            }
        }
        Some(Err(e)) => check(false, format!("handoff.json is not JSON: {e}")),
        None => check(false, "guest dumped no handoff.json".into()),
    }

    check_spin(g, &mut lines, &mut check);

    for (ok, what) in &checks {
        lines.push(format!("{} {what}", if *ok { "ok  " } else { "FAIL" }));
    }
    GuestReport {
        lines,
        checks,
        elapsed: Duration::ZERO,
    }
}

/// `key: value` from a workload's summary in a step's output.
fn workload_value(out: &str, key: &str) -> Option<u64> {
    out.lines()
        .find_map(|l| l.trim().strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}

/// The deep spinlock tier: exact pi_lock waits and holds of the workload's victim, the
/// starvation detector firing under `pi-contend --threads 4` and silent under
/// `--threads 1`, and no deep entry for an unwatched lock.
fn check_spin(g: &GuestLog, lines: &mut Vec<String>, check: &mut impl FnMut(bool, String)) {
    let doctor = g.steps.get("doctor").map(|s| s.1.as_str()).unwrap_or("");
    lines.extend(
        doctor
            .lines()
            .filter(|l| l.contains("spin") || l.contains("slowpath"))
            .map(|l| format!("  | {l}")),
    );
    check(
        doctor.contains("deep spinlock tier: available"),
        "doctor: deep spinlock tier available".into(),
    );
    // (step, file, contended: the detector must fire, kprobe: the fallback is forced)
    for (step, file, contended, kprobe) in [
        ("pi-contend", "pi.json", true, false),
        ("pi-calm", "pi-calm.json", false, false),
        ("pi-kprobe", "pi-kprobe.json", false, true),
    ] {
        let out = g.steps.get(step).map(|s| s.1.as_str()).unwrap_or("");
        let (tid, calls) = (
            workload_value(out, "victim_tid"),
            workload_value(out, "pi_lock_calls"),
        );
        let rec = match g.files.get(file).map(|t| serde_json::from_str::<Value>(t)) {
            Some(Ok(rec)) => rec,
            Some(Err(e)) => {
                check(false, format!("{file} is not JSON: {e}"));
                continue;
            }
            None => {
                check(false, format!("guest dumped no {file}"));
                continue;
            }
        };
        let spin = rec.get("spin").cloned().unwrap_or(Value::Null);
        lines.push(format!(
            "{step}: victim tid {tid:?}, {calls:?} pi_lock calls; spin counts {}, lost {}, hold {}",
            short(&spin.get("counts").cloned()),
            short(&spin.get("lost").cloned()),
            short(&spin.get("hold").cloned())
        ));
        check(
            spin["tier"] == "deep",
            format!("{step}: spin tier deep (got {})", spin["tier"]),
        );
        if kprobe {
            let hooks = spin["hooks"].as_object().cloned().unwrap_or_default();
            let lock_hooks = spin["hold"] != "exact"
                || (hooks.get("_raw_spin_lock_irqsave") == Some(&"kprobe".into())
                    && hooks.get("_raw_spin_unlock_irqrestore") == Some(&"kprobe".into()));
            check(
                hooks.get("native_queued_spin_lock_slowpath") == Some(&"kprobe".into())
                    && lock_hooks,
                format!(
                    "{step}: kprobe fallback attached ({})",
                    Value::Object(hooks)
                ),
            );
        }
        let locks = rec["locks"].as_array().cloned().unwrap_or_default();
        let deep: Vec<&Value> = locks.iter().filter(|l| l["tier"] == "deep").collect();
        let unwatched: Vec<&str> = deep
            .iter()
            .filter(|l| l["owner"]["field"] != "pi_lock")
            .filter_map(|l| l["name"].as_str())
            .collect();
        check(
            !deep.is_empty() && unwatched.is_empty(),
            format!(
                "{step}: {} deep entries, every one a watched pi_lock (unwatched: {unwatched:?})",
                deep.len()
            ),
        );
        let Some(tid) = tid else {
            check(false, format!("{step}: workload printed no victim_tid"));
            continue;
        };
        let name = format!("pi_lock of pi-victim[{tid}]");
        let Some(victim) = deep.iter().find(|l| l["name"] == name.as_str()) else {
            // Without hold hooks an uncontended pi_lock has no figure at all.
            let expected = spin["hold"] == "exact" || contended;
            check(
                !expected,
                format!(
                    "{step}: no deep entry named `{name}` (hold {})",
                    spin["hold"]
                ),
            );
            continue;
        };
        // Kernels where the lock/unlock hooks are not attached say why, and report no
        // holds and no detector (never zeros).
        let hold_exact = spin["hold"] == "exact";
        if !hold_exact {
            check(
                victim["hold"].is_null()
                    && spin["hold"]
                        .as_str()
                        .is_some_and(|h| h.contains("unavailable")),
                format!("{step}: hold time reported unavailable ({})", spin["hold"]),
            );
        }
        let waits = victim["contended"].as_u64().unwrap_or(0);
        let hold = victim["hold"]["contended"].as_u64();
        lines.push(format!(
            "{step}: {name}: waits {waits} (total {} ns, max {} ns), holds {hold:?} (max {} ns)",
            victim["wait_total_ns"], victim["wait_max_ns"], victim["hold"]["wait_max_ns"]
        ));
        if contended || kprobe {
            check(
                waits > 0,
                format!("{step}: exact waits on {name} > 0 (got {waits})"),
            );
        }
        check(
            !hold_exact || (hold.is_some() && hold >= calls && calls.is_some_and(|c| c > 0)),
            format!(
                "{step}: holds of {name} ({hold:?}) >= the workload's pi_lock calls ({calls:?})"
            ),
        );
        let eps = rec["starvation_episodes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let starved: Vec<&Value> = eps
            .iter()
            .filter(|e| e["kind"] == "starvation" && e["lock"] == name.as_str())
            .collect();
        let long_holds = eps.iter().filter(|e| e["kind"] == "long-hold").count();
        lines.push(format!(
            "{step}: {} starvation episode(s) on {name}, {} in all, {long_holds} long-hold",
            starved.len(),
            eps.len() - long_holds
        ));
        if let Some(e) = starved.first() {
            lines.push(format!("{step}: first episode: {e}"));
        }
        if contended && hold_exact {
            let good = starved.iter().all(|e| {
                e["probable"] == false
                    && e["tier"] == "deep"
                    && e["wait_ns"].as_u64().unwrap_or(0) >= 20_000
                    && e["foreign_acquisitions"].as_u64().unwrap_or(0) >= 8
                    && e["acquirers"].as_array().is_some_and(|a| !a.is_empty())
            });
            check(
                !starved.is_empty() && good,
                format!(
                    "{step}: starvation detector fired on {name} ({} episodes, each >= 20 us \
                     and >= 8 foreign acquisitions with acquirers)",
                    starved.len()
                ),
            );
        } else if !kprobe {
            check(
                starved.is_empty(),
                format!(
                    "{step}: no starvation episode on the uncontended {name} (got {})",
                    starved.len()
                ),
            );
        }
    }
}

/// The `events` object of the traced process's `mmap_lock` entry of this type.
fn mmap_lock_events(rec: &Value, lock_type: &str) -> Option<Value> {
    rec.get("locks")?
        .as_array()?
        .iter()
        .filter(|l| l.get("type").and_then(Value::as_str) == Some(lock_type))
        .filter(|l| {
            l.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| n.starts_with("mmap_lock of lockscope"))
        })
        .find_map(|l| l.get("events").cloned())
}

fn event(events: &Option<Value>, name: &str) -> Option<u64> {
    events.as_ref()?.get(name)?.as_u64()
}

fn short(v: &Option<Value>) -> String {
    v.as_ref()
        .map(|v| v.to_string())
        .unwrap_or_else(|| "none".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_newest_matching_kernel() {
        let names: Vec<String> = [
            "vmlinuz-6.1.0-55-amd64",
            "vmlinuz-6.1.0-57-amd64",
            "vmlinuz-6.12.117+deb12-amd64",
            "vmlinuz-6.12.117+deb12-rt-amd64",
            "config-6.1.0-57-amd64",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            pick_vmlinuz(&names, &KERNELS[0]).as_deref(),
            Some("vmlinuz-6.1.0-57-amd64")
        );
        assert_eq!(
            pick_vmlinuz(&names, &KERNELS[1]).as_deref(),
            Some("vmlinuz-6.12.117+deb12-amd64")
        );
        assert_eq!(
            pick_vmlinuz(&names, &KERNELS[2]).as_deref(),
            Some("vmlinuz-6.12.117+deb12-rt-amd64")
        );
        assert_eq!(pick_vmlinuz(&names[..1], &KERNELS[1]), None);
    }

    #[test]
    fn ldd_output_gives_loader_and_libraries() {
        let ldd = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                   \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f)\n\
                   \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                   \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        assert_eq!(
            ldd_paths(ldd),
            [
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
    }

    #[test]
    fn cpio_entries_are_aligned_and_terminated() {
        let mut c = Cpio::default();
        c.dir("bin");
        c.dir("bin");
        c.file("bin/x", 0o755, b"hello");
        let bytes = c.finish();
        assert_eq!(bytes.len() % 4, 0);
        assert_eq!(&bytes[..6], b"070701");
        // bin (once), bin/x, trailer.
        assert_eq!(bytes.windows(6).filter(|w| w == b"070701").count(), 3);
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("bin/x\0"));
        assert!(text.contains("hello"));
        assert!(text.contains("TRAILER!!!\0"));
        // File size field of bin/x: 5 bytes.
        let at = text.find("bin/x").unwrap();
        let header = &text[at - 110..at];
        assert_eq!(&header[54..62], "00000005");
    }

    #[test]
    fn guest_log_is_split_by_markers() {
        let log = "noise\r\n\x1bc\x1b[?7lLOCKSCOPE-VM-BOOTED 6.1.0-57-amd64 cpus=2\r\n\
                   LOCKSCOPE-VM-STEP-BEGIN doctor\nkernel ok 6.1\nLOCKSCOPE-VM-STEP-END doctor rc=0\n\
                   LOCKSCOPE-VM-STEP-BEGIN churn\nboom\nLOCKSCOPE-VM-STEP-END churn rc=3\n\
                   LOCKSCOPE-VM-FILE-BEGIN churn.json\n{\"a\": 1}\n\nLOCKSCOPE-VM-FILE-END churn.json\n\
                   LOCKSCOPE-VM-RESULT pass=1 fail=1\n";
        let g = parse_guest_log(log);
        assert_eq!(g.booted.as_deref(), Some("6.1.0-57-amd64 cpus=2"));
        assert_eq!(g.steps["doctor"], (0, "kernel ok 6.1\n".to_owned()));
        assert_eq!(g.steps["churn"].0, 3);
        assert_eq!(g.files["churn.json"].trim(), "{\"a\": 1}");
        assert_eq!(g.result, Some((1, 1)));
        let report = check_guest(&KERNELS[0], &g);
        assert!(report.failed() > 0);
    }

    fn recording(r: &str, w: &str, system: &str) -> String {
        format!(
            r#"{{"locks": [
                {{"type": "rwsem:R", "name": "mmap_lock of lockscope[7]", "events": {r}}},
                {{"type": "rwsem:W", "name": "mmap_lock of lockscope[7]", "events": {w}}}],
               "rwsem_events": {{"system": {system}}}}}"#
        )
    }

    #[test]
    fn checks_pass_on_a_good_deep_tier_guest() {
        let mut g = GuestLog {
            booted: Some("6.1".into()),
            result: Some((3, 0)),
            ..Default::default()
        };
        g.steps.insert(
            "doctor".into(),
            (
                0,
                "rwsem_down_read_slowpath   fentry   active\n\
                 rwsem_down_write_slowpath  kprobe   active\n"
                    .into(),
            ),
        );
        g.files.insert(
            "churn.json".into(),
            recording(
                r#"{"rlock_steal": 5, "rlock": 2}"#,
                r#"{"opt_lock": 3, "wlock": 4}"#,
                r#"{"rwsem_opt_fail": 6, "rwsem_wlock": 4, "rwsem_wlock_fail": 2}"#,
            ),
        );
        g.files.insert(
            "handoff.json".into(),
            recording(r#"{"rlock_handoff": 0}"#, r#"{"wlock_handoff": 2}"#, "{}"),
        );
        let report = check_guest(&KERNELS[0], &g);
        // This guest ran the rwsem steps only: every rwsem check passes, and exactly the
        // deep spinlock tier's checks fail (no doctor row, no pi-contend recordings).
        let fails: Vec<&String> = report
            .lines
            .iter()
            .filter(|l| l.starts_with("FAIL"))
            .collect();
        assert_eq!(
            fails,
            [
                "FAIL doctor: deep spinlock tier available",
                "FAIL guest dumped no pi.json",
                "FAIL guest dumped no pi-calm.json",
                "FAIL guest dumped no pi-kprobe.json",
            ],
            "{:#?}",
            report.lines
        );
        assert_eq!(report.failed(), fails.len());

        // A zero where a count is required, or a broken identity, fails.
        g.files.insert(
            "churn.json".into(),
            recording(
                r#"{"rlock_steal": 0, "rlock": 2}"#,
                r#"{"opt_lock": 3, "wlock": 4}"#,
                r#"{"rwsem_opt_fail": 7, "rwsem_wlock": 4, "rwsem_wlock_fail": 2}"#,
            ),
        );
        // Two more failures than the spinlock tier's four.
        assert_eq!(check_guest(&KERNELS[0], &g).failed(), fails.len() + 2);
    }
}
