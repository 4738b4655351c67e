//! `cargo xtask vm-test`: run lockscope's deep-tier checks inside QEMU guests on other
//! kernels (Debian's 6.1, 6.12 and PREEMPT_RT 6.12).
//!
//! The host kernel may refuse kprobes and fentry (then only the tracepoint tier runs
//! here); Debian's kernels allow both. For each kernel this builds an initramfs (a newc
//! cpio written here) holding busybox, the release `lockscope` binary with the shared
//! libraries `ldd` names, cyclictest (rt-tests) with its libraries, a `/init` script and
//! the steps to run; boots it under
//! `qemu-system-x86_64 -accel tcg,thread=single` (KVM guests hang during early boot on
//! these machines); and reads the serial console. The guest prints each step's output between
//! markers, dumps the recordings it wrote, and ends with one line
//! `LOCKSCOPE-VM-RESULT pass=N fail=M` (steps whose command failed). The host then checks
//! the numbers in the recordings. The PREEMPT_RT guest also runs the ptrace + cyclictest
//! scenario of the original latency report (`check_ptrace_rt`). Any failed step or check, a missing result line or a
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
const GUEST_TIMEOUT: Duration = Duration::from_secs(900);

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
        let mut outcome = run_guest(k, &initrd, &work);
        if let Ok(first) = &outcome
            && let Some(fault) = &first.text_patching_crash
        {
            // QEMU's TCG sometimes runs a breakpoint that the kernel's live patching has
            // already removed (an emulator race, not lockscope's): the guest's kernel
            // dies. Show the whole first boot, then boot once more; a second death fails.
            for line in &first.lines {
                println!("  {line}");
            }
            let log = work.join(format!("guest-{}.log", k.name));
            let kept = work.join(format!("guest-{}.first-boot.log", k.name));
            let _ = std::fs::rename(&log, &kept);
            println!(
                "vm-test {}: the guest's kernel died after {:.0?} of an int3 Oops while code \
                 was being patched ({fault}); serial log kept in {}; booting it once more",
                k.name,
                first.elapsed,
                kept.display()
            );
            outcome = run_guest(k, &initrd, &work);
        }
        match outcome {
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
mkdir -p /dev/shm
mount -t tmpfs tmpfs /dev/shm
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
# The serial line drains after echo returns: give it time before the power goes.
sleep 2
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
# PREEMPT_RT only: the ptrace + cyclictest scenario of the original latency report.
# cyclictest is the traced command (its own maxima become spikes next to lockscope's);
# the storm starts once cyclictest runs (lockscope's probes are attached by then) and
# ends before it, so the storm's own counts fall inside the recording.
ptrace_rt() {
    started=$(date +%s)
    (
        # Find cyclictest with builtins (the fewer short-lived processes, the fewer
        # freed task_structs a tracee can reuse, with their pi_lock's name).
        n=0
        cpid=
        while [ -z "$cpid" ]; do
            for d in /proc/[0-9]*; do
                read -r c 2>/dev/null <"$d/comm" && [ "$c" = cyclictest ] && cpid=${d#/proc/}
            done
            n=$((n + 1))
            if [ "$n" -gt 600 ]; then echo "storm rc=no cyclictest within 60 s"; exit 1; fi
            [ -n "$cpid" ] || sleep 0.1
        done
        lockscope workload ptrace-storm --tracers 2 --seconds 2 >/tmp/storm.out 2>&1
        echo "storm rc=$?"
        # Builtins only from here: a process forked now could take the memory of a
        # tracee's task_struct, and its pi_lock's name with it (lock names are per
        # address; README, "Memory stays flat").
        if kill -0 $cpid 2>/dev/null; then inside=yes; else inside=no; fi
        echo "storm inside recording: $inside"
    ) >/tmp/storm.log 2>&1 &
    lockscope record -a --latency-threshold PTRACE_RT_THRESHOLD -n 0 -o /tmp/ptrace-rt.json -- \
        cyclictest -S -p98 -m -i2000 -D 5 -q
    rc=$?
    wait
    cat /tmp/storm.out /tmp/storm.log
    grep -q "storm rc=0" /tmp/storm.log || rc=1
    echo "step seconds: $(($(date +%s) - started))"
    return $rc
}
case "$(uname -r)" in
*-rt-*)
    step ptrace-rt ptrace_rt
    dump ptrace-rt.json
    ;;
esac
"#;

/// `--latency-threshold` of the RT guest's ptrace + cyclictest step, in ns.
pub const PTRACE_RT_THRESHOLD_NS: u64 = 1_000_000;

/// The guest's steps, with the RT step's threshold filled in.
pub fn guest_steps() -> String {
    GUEST_STEPS.replace(
        "PTRACE_RT_THRESHOLD",
        &format!("{}us", PTRACE_RT_THRESHOLD_NS / 1000),
    )
}

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
    // lockscope, cyclictest (the RT guest's latency probe), the dynamic loader and the
    // shared libraries each one links.
    let cyclictest = util::which("cyclictest")
        .context("cyclictest not found (is rt-tests installed? `cargo xtask setup`)")?;
    let binaries = [
        (exe.to_path_buf(), "bin/lockscope"),
        (cyclictest, "bin/cyclictest"),
    ];
    let mut libs: Vec<String> = Vec::new();
    for (path, dest) in &binaries {
        let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        cpio.file(dest, 0o755, &data);
        let ldd = output(Command::new("ldd").arg(path))?;
        for lib in ldd_paths(&ldd) {
            if !libs.contains(&lib) {
                libs.push(lib);
            }
        }
    }
    for lib in libs {
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
    cpio.file("vm-steps.sh", 0o644, guest_steps().as_bytes());
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
    /// A step that began and never ended (the guest died or hung inside it): its name
    /// and what it printed.
    pub unfinished: Option<(String, String)>,
    /// The last lines the guest printed outside file dumps: where a kernel's panic or
    /// oops shows when the guest dies.
    pub tail: Vec<String>,
    /// The guest kernel's faults: each `Oops:`, `BUG:` or `Kernel panic` line, with the
    /// `RIP:` line that follows it.
    pub kernel_faults: Vec<String>,
}

impl GuestLog {
    /// The guest died (no result line) of an `int3` Oops: a CPU ran a breakpoint that
    /// live code patching (ftrace attaching or detaching a trampoline) had already
    /// removed. Seen only under QEMU's TCG, on the 6.12 kernels, while trampolines on
    /// `_raw_spin_*` were attached or detached. Returns the fault, for the report.
    pub fn died_of_text_patching(&self) -> Option<String> {
        if self.result.is_some() {
            return None;
        }
        self.kernel_faults
            .iter()
            .find(|f| f.contains("Oops: int3"))
            .cloned()
    }
}

/// Keep `line` in `faults` if it reports a kernel fault (`Oops:`, `BUG:`, `Kernel
/// panic`), or add it to the last fault if it is that fault's `RIP:` line.
fn note_kernel_fault(faults: &mut Vec<String>, line: &str) {
    if ["Oops:", "BUG:", "Kernel panic"]
        .iter()
        .any(|m| line.contains(m))
    {
        faults.push(line.to_owned());
    } else if line.contains("RIP:")
        && let Some(last) = faults.last_mut()
        && !last.contains("RIP:")
    {
        *last = format!("{last}; {}", line.trim());
    }
}

/// How many of the guest's last lines [`GuestLog::tail`] keeps.
const TAIL_LINES: usize = 40;

/// Where a kernel console message (`[  219.928921] text`) starts in `line`, if one does.
/// The kernel prints its messages on the same serial console, whole lines, in the middle
/// of whatever line userspace was writing.
fn kernel_message_at(line: &str) -> Option<usize> {
    let b = line.as_bytes();
    (0..b.len()).filter(|&i| b[i] == b'[').find(|&i| {
        let rest = &b[i + 1..];
        let lead = rest.iter().take_while(|&&c| c == b' ').count();
        let secs = rest[lead..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        let after = &rest[lead + secs..];
        secs > 0
            && after.len() >= 9
            && after[0] == b'.'
            && after[1..7].iter().all(u8::is_ascii_digit)
            && after[7] == b']'
            && after[8] == b' '
    })
}

pub fn parse_guest_log(log: &str) -> GuestLog {
    let mut g = GuestLog::default();
    let mut step: Option<(String, String)> = None;
    let mut file: Option<(String, String)> = None;
    // The start of a dump line a kernel message cut in two (the rest follows it).
    let mut cut = String::new();
    for raw in log.lines() {
        let mut line = raw.trim_end_matches('\r');
        // The console's terminal resets may precede a marker on its line.
        if let Some(at) = line.find("LOCKSCOPE-VM-") {
            line = &line[at..];
        }
        if let Some((name, buf)) = &mut file {
            let joined;
            if !cut.is_empty() {
                joined = std::mem::take(&mut cut) + line;
                line = &joined;
            }
            if line == format!("LOCKSCOPE-VM-FILE-END {name}") {
                g.tail.push(line.to_owned());
                let (name, buf) = file.take().unwrap_or_default();
                g.files.insert(name, buf);
            } else if let Some(at) = kernel_message_at(line) {
                // Keep the kernel's words out of the file, and mend the line they cut.
                note_kernel_fault(&mut g.kernel_faults, &line[at..]);
                cut = line[..at].to_owned();
            } else {
                buf.push_str(line);
                buf.push('\n');
            }
            continue;
        }
        g.tail.push(line.to_owned());
        if g.tail.len() > 2 * TAIL_LINES {
            g.tail.drain(..TAIL_LINES);
        }
        note_kernel_fault(&mut g.kernel_faults, line);
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
    g.unfinished = step;
    let keep = g.tail.len().saturating_sub(TAIL_LINES);
    g.tail.drain(..keep);
    g
}

/// The outcome of one guest: one line per check.
pub struct GuestReport {
    pub lines: Vec<String>,
    pub checks: Vec<(bool, String)>,
    pub elapsed: Duration,
    /// See [`GuestLog::died_of_text_patching`].
    pub text_patching_crash: Option<String>,
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
    // One host thread runs both vCPUs (`thread=single`). With multi-threaded TCG, a
    // vCPU sometimes ran an `int3` that the kernel's live patching of `_raw_spin_lock`
    // (ftrace, a BPF trampoline or kprobe coming or going) had already replaced: the
    // 6.12-rt guest died of `Oops: int3` in 3 of 4 full runs, and at once when the
    // kprobe step was followed by the ptrace step; single-threaded, 4 of those pairs
    // in a row and the full runs pass, in the same time (README, vm-test).
    cmd.args(["-accel", "tcg,thread=single", "-m", "2G", "-smp", "2"])
        .args([
            "-nographic",
            "-monitor",
            "none",
            "-serial",
            "stdio",
            "-no-reboot",
        ])
        .arg("-kernel")
        .arg(&vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args([
            "-append",
            // noirqdebug: under TCG the serial port's interrupt often finds nothing to
            // do, and the kernel would disable it as spurious ("Disabling IRQ #4"),
            // printing into a dump and leaving the line to drain by slow polling.
            "console=ttyS0 panic=-1 loglevel=3 rdinit=/init nokaslr noirqdebug",
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
    report.lines.insert(
        0,
        format!("serial log: {} (qemu {status})", log_path.display()),
    );
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
        None => {
            check(false, "guest printed no result line".into());
            // The guest died or hung: show where, and what its kernel said last.
            if let Some((name, out)) = &g.unfinished {
                let out: Vec<&str> = out.lines().collect();
                lines.push(format!(
                    "the guest stopped inside step {name}; its last {} line(s) of output:",
                    out.len().min(TAIL_LINES)
                ));
                let from = out.len().saturating_sub(TAIL_LINES);
                lines.extend(out[from..].iter().map(|l| format!("  | {l}")));
            }
            lines.push(format!(
                "the last {} line(s) of the serial log (file dumps left out):",
                g.tail.len()
            ));
            lines.extend(g.tail.iter().map(|l| format!("  | {l}")));
        }
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
    if k.rt {
        check_ptrace_rt(g, &mut lines, &mut check);
    }

    for (ok, what) in &checks {
        lines.push(format!("{} {what}", if *ok { "ok  " } else { "FAIL" }));
    }
    GuestReport {
        lines,
        checks,
        elapsed: Duration::ZERO,
        text_patching_crash: g.died_of_text_patching(),
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
        // Without hold hooks (before 6.12, or not PREEMPT_RT) only waits make entries, and
        // the calm step may have none at all (single-threaded TCG: the vCPUs take turns).
        let entries_expected = contended || kprobe || spin["hold"] == "exact";
        check(
            (!entries_expected || !deep.is_empty()) && unwatched.is_empty(),
            format!(
                "{step}: {} deep entries{}, every one a watched pi_lock (unwatched: \
                 {unwatched:?})",
                deep.len(),
                if entries_expected {
                    ""
                } else {
                    " (none needed: no holds, no contention)"
                }
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

/// `tracee pids: 12 13` of the ptrace-storm workload.
fn tracee_pids(out: &str) -> Vec<u64> {
    out.lines()
        .find_map(|l| l.trim().strip_prefix("tracee pids:"))
        .map(|p| {
            p.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// `(tid, max us)` of every thread in cyclictest's summary (`T: 0 ( 123) ... Max: 456`).
fn cyclictest_maxima(out: &str) -> Vec<(u64, u64)> {
    let mut found: Vec<(u64, u64)> = Vec::new();
    for l in out.lines().filter(|l| l.trim_start().starts_with("T:")) {
        let tid = l
            .split_once('(')
            .and_then(|(_, r)| r.split_once(')'))
            .and_then(|(t, _)| t.trim().parse().ok());
        let max = l
            .split_once("Max:")
            .and_then(|(_, r)| r.split_whitespace().next())
            .and_then(|m| m.parse().ok());
        if let (Some(tid), Some(max)) = (tid, max) {
            // cyclictest rewrites its lines while running: the last one counts.
            found.retain(|(t, _)| *t != tid);
            found.push((tid, max));
        }
    }
    found
}

/// The PREEMPT_RT guest's ptrace + cyclictest step (the original latency report's
/// scenario): the tracees' `pi_lock`s are named with their waits, every spike over the
/// threshold is recorded or counted lost and either carries the lock activity in its
/// window or says none overlapped, and starvation episodes are well-formed.
fn check_ptrace_rt(g: &GuestLog, lines: &mut Vec<String>, check: &mut impl FnMut(bool, String)) {
    let step = "ptrace-rt";
    let Some((_, out)) = g.steps.get(step) else {
        check(false, format!("guest ran no {step} step"));
        return;
    };
    let rec = match g
        .files
        .get("ptrace-rt.json")
        .map(|t| serde_json::from_str::<Value>(t))
    {
        Some(Ok(rec)) => rec,
        Some(Err(e)) => {
            check(false, format!("ptrace-rt.json is not JSON: {e}"));
            return;
        }
        None => {
            check(false, "guest dumped no ptrace-rt.json".into());
            return;
        }
    };
    let num = |v: &Value| v.as_u64().unwrap_or(0);
    let lost = |key: &str| rec["lost"].get(key).and_then(Value::as_u64);

    // The storm ran inside the recording: its own counts bound what was seen.
    let inside = out.contains("storm inside recording: yes");
    check(
        inside,
        format!("{step}: the ptrace storm ran inside the recording"),
    );
    // `peeks: 7352 (3602/s)`
    let count = |key: &str| {
        out.lines()
            .find_map(|l| l.trim().strip_prefix(key)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
    };
    let (peeks, detaches) = (count("peeks"), count("detaches"));
    let tracees = tracee_pids(out);
    check(
        tracees.len() == 2 && peeks.is_some_and(|p| p > 0),
        format!("{step}: storm printed 2 tracee pids ({tracees:?}) and peeks > 0 ({peeks:?})"),
    );
    let locks = rec["locks"].as_array().cloned().unwrap_or_default();
    let (mut waits_all, mut deep_all, mut proxy_all) = (0, 0, 0);
    for pid in &tracees {
        let name = format!("pi_lock of lockscope[{pid}]");
        let entries: Vec<&Value> = locks
            .iter()
            .filter(|l| l["name"] == name.as_str())
            .collect();
        let waits: u64 = entries.iter().map(|l| num(&l["contended"])).sum();
        let deep_waits: u64 = entries
            .iter()
            .filter(|l| l["tier"] == "deep")
            .map(|l| num(&l["contended"]))
            .sum();
        let proxy: u64 = entries
            .iter()
            .map(|l| num(&l["wait_task"]["acquisitions"]))
            .sum();
        let per_waiter: u64 = entries
            .iter()
            .filter_map(|l| l["wait_task"]["waiters"].as_array())
            .flatten()
            .map(|w| num(&w["acquisitions"]))
            .sum();
        lines.push(format!(
            "{step}: {name}: {} entries, waits {waits} (deep {deep_waits}), \
             sched_wait_task proxy acquisitions {proxy}",
            entries.len()
        ));
        check(
            !entries.is_empty()
                && entries
                    .iter()
                    .all(|l| l["owner"]["field"] == "pi_lock" && l["type"] == "spinlock"),
            format!("{step}: the recording names `{name}` (a spinlock, owner field pi_lock)"),
        );
        check(
            waits + proxy > 0 && per_waiter == proxy,
            format!(
                "{step}: {name} has waits ({waits} exact, {proxy} proxy; per-waiter sum \
                 {per_waiter})"
            ),
        );
        waits_all += waits;
        deep_all += deep_waits;
        proxy_all += proxy;
    }
    // The deep tier sees the tracers spin on the tracees' pi_lock exactly.
    check(
        rec["spin"]["tier"] == "deep" && deep_all > 0,
        format!(
            "{step}: spin tier deep ({}) with exact slowpath waits on the tracees' pi_lock \
             ({deep_all})",
            rec["spin"]["tier"]
        ),
    );
    let rounds = peeks.zip(detaches).map(|(p, d)| p + d);
    check(
        rounds.is_some_and(|r| proxy_all >= r),
        format!(
            "{step}: proxy acquisitions of the tracees' pi_lock {proxy_all} >= peeks + \
             detaches ({peeks:?} + {detaches:?})"
        ),
    );
    check(
        lost("wait_task_map_full") == Some(0),
        format!(
            "{step}: lost.wait_task_map_full is 0 (got {:?})",
            lost("wait_task_map_full")
        ),
    );

    // Spikes: lockscope's own, all over the threshold, recorded or counted lost.
    let rt = &rec["rt_summary"];
    let threshold = rt["latency_threshold_ns"].as_u64();
    check(
        threshold == Some(PTRACE_RT_THRESHOLD_NS),
        format!("{step}: latency threshold {threshold:?} ns as asked ({PTRACE_RT_THRESHOLD_NS})"),
    );
    let threshold = threshold.unwrap_or(PTRACE_RT_THRESHOLD_NS);
    let spikes = rec["latency_spikes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let own: Vec<&Value> = spikes
        .iter()
        .filter(|s| s["source"] == "lockscope")
        .collect();
    let theirs: Vec<&Value> = spikes
        .iter()
        .filter(|s| s["source"] == "cyclictest")
        .collect();
    let over = rt["spikes_over_threshold"].as_u64();
    let lost_spikes = lost("rt_ringbuf_lost_spikes");
    check(
        over.is_some() && lost_spikes.map(|l| l + own.len() as u64) == over,
        format!(
            "{step}: recorded spikes {} + lost {lost_spikes:?} == spikes over the threshold \
             {over:?}",
            own.len()
        ),
    );
    // lockscope times every wakeup of the real-time threads; whether any is over the
    // threshold is the guest's business (with the libc uprobes of earlier versions, ~50
    // were; without them, none in some runs), but cyclictest's own maxima always are
    // under TCG, so the recording must hold spikes from one source or the other.
    check(
        rt["wakeups_timed"].as_u64().unwrap_or(0) > 0 && !(own.is_empty() && theirs.is_empty()),
        format!(
            "{step}: {} wakeups timed; spikes over {} us recorded ({} timed by lockscope, {} \
             from cyclictest)",
            rt["wakeups_timed"],
            threshold / 1000,
            own.len(),
            theirs.len()
        ),
    );
    check(
        spikes
            .iter()
            .all(|s| num(&s["latency_ns"]) >= threshold && s["task"]["comm"] == "cyclictest"),
        format!("{step}: every spike is a cyclictest thread's, at or over the threshold"),
    );
    for key in ["rt_ringbuf_lost_activity", "rt_malformed_records"] {
        check(
            lost(key) == Some(0),
            format!("{step}: lost.{key} is 0 (got {:?})", lost(key)),
        );
    }
    // cyclictest's own maxima: one spike per thread over the threshold.
    let maxima = cyclictest_maxima(out);
    let over_ct: Vec<&(u64, u64)> = maxima
        .iter()
        .filter(|(_, max)| max * 1000 >= threshold)
        .collect();
    check(
        maxima.len() == 2
            && theirs.len() == over_ct.len()
            && rt["cyclictest_threads"].as_u64() == Some(over_ct.len() as u64)
            && over_ct.iter().all(|(tid, max)| {
                theirs
                    .iter()
                    .any(|s| s["task"]["tid"] == *tid && num(&s["latency_ns"]) == max * 1000)
            }),
        format!(
            "{step}: cyclictest's threads (tid, max us) {maxima:?}: one spike with its max for \
             each over the threshold ({} recorded)",
            theirs.len()
        ),
    );
    // Correlation: overlaps inside the window, the explained rule, and the report
    // saying so for every spike without overlaps.
    let mut bad = Vec::new();
    let mut overlapped: BTreeMap<String, u64> = BTreeMap::new();
    for s in &spikes {
        let lat = num(&s["latency_ns"]);
        let overlaps = s["overlaps"].as_array().cloned().unwrap_or_default();
        let sum: u64 = overlaps.iter().map(|o| num(&o["overlap_ns"])).sum();
        for o in &overlaps {
            let ns = num(&o["overlap_ns"]);
            let lock = o["lock"].as_str().unwrap_or("");
            if ns == 0 || ns > lat || lock.is_empty() {
                bad.push(format!("overlap {o} outside a {lat} ns window"));
            }
            *overlapped
                .entry(format!("{} {}", o["kind"].as_str().unwrap_or("?"), lock))
                .or_default() += 1;
        }
        if s["explained"] == true && 2 * sum < lat {
            bad.push(format!("explained with {sum} of {lat} ns"));
        }
        if s["explained"] == false && overlaps.iter().any(|o| 2 * num(&o["overlap_ns"]) >= lat) {
            bad.push(format!(
                "one overlap covers half of {lat} ns, not explained"
            ));
        }
    }
    check(
        bad.is_empty(),
        format!("{step}: overlaps lie in their windows, explained follows the rule {bad:?}"),
    );
    let silent = |timed: bool| {
        spikes
            .iter()
            .filter(|s| s["overlaps"].as_array().is_none_or(Vec::is_empty))
            .filter(|s| (s["ts_ns"] != 0) == timed)
            .count()
    };
    let (none, untimed) = (silent(true), silent(false));
    let said = out.matches("no lock activity overlapped").count();
    let said_untimed = out
        .matches("not correlated: cyclictest gives no time")
        .count();
    check(
        said == none && said_untimed == untimed,
        format!(
            "{step}: the report says `no lock activity overlapped` for each of the {none} \
             spikes without overlaps (said {said}; {untimed} untimed, said {said_untimed})"
        ),
    );

    // Starvation episodes: well-formed for their tier.
    let eps = rec["starvation_episodes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let spin = &rec["spin"];
    let starve_ns = rt["starvation_threshold_ns"]
        .as_u64()
        .or(spin["threshold_ns"].as_u64())
        .unwrap_or(u64::MAX);
    let min_foreign = rt["starvation_acquisitions"]
        .as_u64()
        .or(spin["min_foreign"].as_u64())
        .unwrap_or(u64::MAX);
    let hold_ns = spin["hold_threshold_ns"].as_u64().unwrap_or(u64::MAX);
    let malformed: Vec<String> = eps
        .iter()
        .filter(|e| {
            let deep = e["tier"] == "deep";
            let tier_ok = if deep {
                e["probable"] == false
            } else {
                e["tier"] == "tracepoint" && e["probable"] == true
            };
            let size_ok = match e["kind"].as_str() {
                Some("starvation") => {
                    num(&e["wait_ns"]) >= starve_ns
                        && num(&e["foreign_acquisitions"]) >= min_foreign
                }
                Some("long-hold") => num(&e["wait_ns"]) >= hold_ns,
                _ => false,
            };
            !(tier_ok && size_ok && e["waiter"]["pid"].as_u64().is_some())
        })
        .map(|e| e.to_string())
        .collect();
    let deep_eps = eps.iter().filter(|e| e["tier"] == "deep").count();
    let starvations = eps.iter().filter(|e| e["kind"] == "starvation").count();
    let on_tracees = eps
        .iter()
        .filter(|e| {
            tracees
                .iter()
                .any(|p| e["lock"] == format!("pi_lock of lockscope[{p}]").as_str())
        })
        .count();
    check(
        malformed.is_empty(),
        format!(
            "{step}: {} starvation episodes well-formed (deep: exact, tracepoint: probable; \
             wait >= {starve_ns} ns with >= {min_foreign} foreign acquisitions, or a hold >= \
             {hold_ns} ns) {malformed:?}",
            eps.len()
        ),
    );

    let max_us = spikes
        .iter()
        .map(|s| num(&s["latency_ns"]))
        .max()
        .unwrap_or(0)
        / 1000;
    let explained = spikes.iter().filter(|s| s["explained"] == true).count();
    lines.push(format!(
        "{step}: {} spikes over {} us ({} lockscope, {} cyclictest; max {max_us} us), {explained} \
         explained, {} with overlaps, {none} with none; tracee pi_lock waits {waits_all} ({deep_all} exact), proxy \
         {proxy_all} (peeks {peeks:?} + detaches {detaches:?}); {} episodes ({starvations} \
         starvation, {} long-hold; {deep_eps} deep; {on_tracees} on the tracees' pi_lock)",
        spikes.len(),
        threshold / 1000,
        own.len(),
        theirs.len(),
        spikes.len() - none - untimed,
        eps.len(),
        eps.len() - starvations
    ));
    for (what, n) in &overlapped {
        lines.push(format!("{step}: overlapped {n}x: {what}"));
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

    #[test]
    fn kernel_messages_are_cut_out_of_file_dumps() {
        assert_eq!(
            kernel_message_at("[  219.928921] Disabling IRQ #4"),
            Some(0)
        );
        assert_eq!(kernel_message_at("  \"kind\": \"s[ 9.000001] x"), Some(12));
        assert_eq!(kernel_message_at("[12345.123456] x"), Some(0));
        for not in [
            "[1.5]",
            "[  219.92892] x",
            "[  219.928921]x",
            "[ ] a",
            "[",
            "[ 1.123456",
        ] {
            assert_eq!(kernel_message_at(not), None, "{not}");
        }
        let log = "LOCKSCOPE-VM-FILE-BEGIN pi.json\n\
                   {\n  \"kind\": \"s[  219.928921] Disabling IRQ #4\n\
                   tarvation\",\n\
                   [  220.000001] a whole kernel line\n\
                   \"n\": [\n    1.5\n  ]\n}\n\
                   LOCKSCOPE-VM-FILE-END pi.json\n";
        let g = parse_guest_log(log);
        let text = &g.files["pi.json"];
        assert_eq!(
            text,
            "{\n  \"kind\": \"starvation\",\n\"n\": [\n    1.5\n  ]\n}\n"
        );
        // A fault printed into a dump still counts.
        let g = parse_guest_log(&log.replace("Disabling IRQ #4", "Oops: int3: 0000 [#1]"));
        assert_eq!(g.kernel_faults, ["[  219.928921] Oops: int3: 0000 [#1]"]);
    }

    #[test]
    fn a_guest_that_dies_inside_a_step_shows_where_and_its_last_words() {
        let mut log = String::from("LOCKSCOPE-VM-BOOTED 6.12-rt cpus=2\n");
        log += "LOCKSCOPE-VM-STEP-BEGIN doctor\nok\nLOCKSCOPE-VM-STEP-END doctor rc=0\n";
        log += "LOCKSCOPE-VM-FILE-BEGIN big.json\n";
        log += &"{\"filler\": 1}\n".repeat(500);
        log += "LOCKSCOPE-VM-FILE-END big.json\n";
        log += "LOCKSCOPE-VM-STEP-BEGIN ptrace-rt\n";
        for i in 0..100 {
            log += &format!("step line {i}\n");
        }
        log += "[  301.5] Kernel panic - not syncing: Fatal exception\n";
        let g = parse_guest_log(&log);
        let (name, out) = g.unfinished.as_ref().expect("an unfinished step");
        assert_eq!(name, "ptrace-rt");
        assert!(out.contains("step line 0\n") && out.contains("Kernel panic"));
        assert!(!g.steps.contains_key("ptrace-rt"));
        assert_eq!(g.tail.len(), TAIL_LINES);
        assert_eq!(
            g.tail.last().unwrap(),
            "[  301.5] Kernel panic - not syncing: Fatal exception"
        );
        assert!(g.tail.iter().all(|l| !l.contains("filler")));

        let report = check_guest(&KERNELS[2], &g);
        assert!(
            report
                .checks
                .contains(&(false, "guest printed no result line".to_owned()))
        );
        let text = report.lines.join("\n");
        assert!(
            text.contains("the guest stopped inside step ptrace-rt"),
            "{text}"
        );
        assert!(text.contains("  | step line 99"), "{text}");
        assert!(!text.contains("  | step line 0\n"), "{text}");
        assert!(text.contains("  | [  301.5] Kernel panic"), "{text}");
        assert_eq!(
            g.kernel_faults,
            ["[  301.5] Kernel panic - not syncing: Fatal exception"]
        );
        // A panic that is not the text-patching race is not retried.
        assert_eq!(report.text_patching_crash, None);
    }

    #[test]
    fn only_a_guest_killed_by_an_int3_oops_counts_as_the_text_patching_race() {
        let oops = "LOCKSCOPE-VM-BOOTED 6.12-rt cpus=2\n\
                    LOCKSCOPE-VM-STEP-BEGIN ptrace-rt\n\
                    [  297.9] Oops: int3: 0000 [#1] PREEMPT_RT SMP NOPTI\n\
                    [  297.9] CPU: 0 UID: 0 PID: 240 Comm: lockscope\n\
                    [  297.9] RIP: 0010:_raw_spin_lock+0x5/0x30\n\
                    [  297.9] Call Trace:\n\
                    [  297.9] RIP: 0010:arch_irq_work_raise+0x24/0x30\n\
                    [  297.9] Kernel panic - not syncing: Fatal exception in interrupt\n";
        let g = parse_guest_log(oops);
        assert_eq!(
            g.died_of_text_patching().as_deref(),
            Some(
                "[  297.9] Oops: int3: 0000 [#1] PREEMPT_RT SMP NOPTI; \
                 [  297.9] RIP: 0010:_raw_spin_lock+0x5/0x30"
            )
        );
        assert_eq!(g.kernel_faults.len(), 2);
        let report = check_guest(&KERNELS[2], &g);
        assert!(report.text_patching_crash.is_some());
        // The same Oops in a guest that went on to finish is no death.
        let finished = parse_guest_log(&format!("{oops}LOCKSCOPE-VM-RESULT pass=1 fail=0\n"));
        assert_eq!(finished.died_of_text_patching(), None);
        // A guest that died of something else.
        let other = parse_guest_log(&oops.replace("Oops: int3", "BUG: kernel NULL pointer"));
        assert_eq!(other.died_of_text_patching(), None);
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

    /// A PREEMPT_RT guest's ptrace + cyclictest step, shaped like a real one: two
    /// tracees, three spikes (one overlapping a tracee's pi_lock, one with none, one of
    /// cyclictest's own), one deep episode.
    fn ptrace_rt_guest(rec: &Value, report: &str) -> GuestLog {
        let mut g = GuestLog::default();
        let out = format!(
            "T: 0 (  359) P:98 I:2000 C:   1788 Min:     76 Act:  181 Avg: 1211 Max:   22183\n\
             T: 1 (  360) P:98 I:2500 C:   1620 Min:     83 Act: 1572 Avg: 1010 Max:     919\n\
             {report}\
             ptrace-storm: tracers=2 peeks=4 seconds=2\n\
             tracee pids: 361 362\n\
             peeks: 40 (20/s)\n\
             detaches: 10 (5/s)\n\
             storm rc=0\n\
             storm inside recording: yes\n"
        );
        g.steps.insert("ptrace-rt".into(), (0, out));
        g.files.insert("ptrace-rt.json".into(), rec.to_string());
        g
    }

    fn ptrace_rt_recording() -> Value {
        let tracee = |pid: u64, waits: u64, acq: u64| {
            serde_json::json!({
                "type": "spinlock", "name": format!("pi_lock of lockscope[{pid}]"),
                "owner": {"field": "pi_lock", "pid": pid, "comm": "lockscope"},
                "contended": waits, "tier": "deep",
                "wait_task": {"acquisitions": acq, "waiters": [
                    {"pid": 358, "tid": pid + 2, "acquisitions": acq - 1},
                    {"pid": 358, "tid": pid + 3, "acquisitions": 1}]}
            })
        };
        let task = |tid: u64| serde_json::json!({"pid": 355, "tid": tid, "comm": "cyclictest"});
        serde_json::json!({
            "locks": [tracee(361, 24, 20), tracee(362, 30, 31)],
            "lost": {"wait_task_map_full": 0, "rt_ringbuf_lost_spikes": 1,
                     "rt_ringbuf_lost_activity": 0, "rt_malformed_records": 0},
            "spin": {"tier": "deep", "threshold_ns": 20000, "min_foreign": 8,
                     "hold_threshold_ns": 1000000},
            "rt_summary": {"latency_threshold_ns": PTRACE_RT_THRESHOLD_NS,
                           "starvation_threshold_ns": 20000, "starvation_acquisitions": 8,
                           "wakeups_timed": 3000, "spikes_over_threshold": 3,
                           "cyclictest_threads": 1},
            "latency_spikes": [
                {"cpu": 0, "ts_ns": 5, "latency_ns": 22_183_000, "source": "cyclictest",
                 "task": task(359), "explained": true, "overlaps": [
                    {"lock": "pi_lock of cyclictest[359]", "kind": "long-hold",
                     "overlap_ns": 14_000_000},
                    {"lock": "pi_lock of lockscope[361]", "kind": "wait-task",
                     "overlap_ns": 83_650}]},
                {"cpu": 0, "ts_ns": 5, "latency_ns": 18_300_000, "source": "lockscope",
                 "task": task(359), "explained": false, "overlaps": [
                    {"lock": "pi_lock of lockscope[361]", "kind": "wait-task",
                     "overlap_ns": 83_650}]},
                {"cpu": 1, "ts_ns": 9, "latency_ns": 2_500_000, "source": "lockscope",
                 "task": task(360), "explained": false, "overlaps": []}],
            "starvation_episodes": [
                {"kind": "long-hold", "lock": "pi_lock of lockscope[361]", "wait_ns": 2_812_568,
                 "foreign_acquisitions": 0, "probable": false, "tier": "deep",
                 "waiter": {"pid": 361, "tid": 361, "comm": "lockscope"}},
                {"kind": "starvation", "lock": "pi_lock of lockscope[362]", "wait_ns": 30_000,
                 "foreign_acquisitions": 9, "probable": false, "tier": "deep",
                 "waiter": {"pid": 358, "tid": 363, "comm": "lockscope"}}]
        })
    }

    fn ptrace_rt_failures(g: &GuestLog) -> Vec<String> {
        let (mut lines, mut checks) = (Vec::new(), Vec::new());
        check_ptrace_rt(g, &mut lines, &mut |ok, what| checks.push((ok, what)));
        assert!(checks.len() > 15, "{checks:#?}");
        checks.into_iter().filter(|c| !c.0).map(|c| c.1).collect()
    }

    #[test]
    fn ptrace_rt_checks_pass_on_a_good_guest_and_catch_each_defect() {
        let steps = guest_steps();
        assert!(
            steps.contains("--latency-threshold 1000us") && !steps.contains("PTRACE_RT"),
            "{steps}"
        );
        let said = "      no lock activity overlapped\n";
        let good = ptrace_rt_recording();
        let fails = ptrace_rt_failures(&ptrace_rt_guest(&good, said));
        assert!(fails.is_empty(), "{fails:#?}");
        // The summary line carries the numbers.
        let mut lines = Vec::new();
        check_ptrace_rt(&ptrace_rt_guest(&good, said), &mut lines, &mut |_, _| {});
        assert!(
            lines.iter().any(|l| l.contains(
                "3 spikes over 1000 us (2 lockscope, 1 cyclictest; \
                 max 22183 us), 1 explained, 2 with overlaps, 1 with none; tracee pi_lock waits \
                 54 (54 exact), proxy 51 (peeks Some(40) + detaches Some(10)); 2 episodes (1 \
                 starvation, 1 long-hold; 2 deep; 2 on the tracees' pi_lock)"
            )),
            "{lines:#?}"
        );

        // Each defect fails exactly its check.
        let fails_with = |edit: &dyn Fn(&mut Value), report: &str| {
            let mut rec = good.clone();
            edit(&mut rec);
            ptrace_rt_failures(&ptrace_rt_guest(&rec, report))
        };
        let one = |fails: Vec<String>, what: &str| {
            assert_eq!(fails.len(), 1, "{what}: {fails:#?}");
            assert!(fails[0].contains(what), "{what}: {fails:#?}");
        };
        // The report does not say a spike had no overlaps.
        one(fails_with(&|_| {}, ""), "no lock activity overlapped");
        // A spike neither recorded nor counted lost.
        one(
            fails_with(&|r| r["lost"]["rt_ringbuf_lost_spikes"] = 0.into(), said),
            "spikes over the threshold",
        );
        // Proxy acquisitions below the storm's own count (and the waiters no longer add up).
        let fails = fails_with(
            &|r| r["locks"][1]["wait_task"]["acquisitions"] = 20.into(),
            said,
        );
        assert_eq!(fails.len(), 2, "{fails:#?}");
        assert!(fails[1].contains(">= peeks + detaches"), "{fails:#?}");
        // No exact waits from the deep tier.
        one(
            fails_with(
                &|r| {
                    r["locks"][0]["contended"] = 0.into();
                    r["locks"][1]["contended"] = 0.into();
                },
                said,
            ),
            "exact slowpath waits",
        );
        // A deep episode marked probable, one too short.
        one(
            fails_with(
                &|r| r["starvation_episodes"][1]["probable"] = true.into(),
                said,
            ),
            "well-formed",
        );
        one(
            fails_with(
                &|r| r["starvation_episodes"][1]["wait_ns"] = 19_999.into(),
                said,
            ),
            "well-formed",
        );
        // An overlap longer than its window; explained without the overlap to show for it.
        one(
            fails_with(
                &|r| r["latency_spikes"][1]["overlaps"][0]["overlap_ns"] = 19_000_000.into(),
                said,
            ),
            "explained follows the rule",
        );
        one(
            fails_with(&|r| r["latency_spikes"][1]["explained"] = true.into(), said),
            "explained follows the rule",
        );
        // cyclictest's thread over the threshold without its spike.
        one(
            fails_with(
                &|r| {
                    r["latency_spikes"][0]["latency_ns"] = 22_000_000.into();
                },
                said,
            ),
            "cyclictest's threads",
        );
        // Lost activity records.
        one(
            fails_with(&|r| r["lost"]["rt_ringbuf_lost_activity"] = 2.into(), said),
            "rt_ringbuf_lost_activity",
        );
        // A tracee's pi_lock missing from the recording.
        let fails = fails_with(
            &|r| r["locks"][0]["name"] = "pi_lock of lockscope[999]".into(),
            said,
        );
        assert!(
            fails
                .iter()
                .any(|f| f.contains("names `pi_lock of lockscope[361]`")),
            "{fails:#?}"
        );
        // The storm outlived the recording: its counts are no bound.
        let mut g = ptrace_rt_guest(&good, said);
        let out = &mut g.steps.get_mut("ptrace-rt").unwrap().1;
        *out = out.replace("inside recording: yes", "inside recording: no");
        one(ptrace_rt_failures(&g), "ran inside the recording");
        // No step at all, or no recording.
        let mut checks = Vec::new();
        check_ptrace_rt(&GuestLog::default(), &mut Vec::new(), &mut |ok, what| {
            checks.push((ok, what))
        });
        assert_eq!(checks, [(false, "guest ran no ptrace-rt step".to_owned())]);
    }
}
