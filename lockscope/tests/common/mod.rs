//! Shared helpers of the privileged integration tests: they load real probes into the
//! running kernel, drive real workloads and assert on numbers. They need root.
#![allow(dead_code)]

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use serde_json::Value;

/// Privileged tests run one at a time: they load probes, drive workloads that compete
/// for the CPUs, and count loaded programs. Take this first in every test.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The lockscope binary under test.
pub fn lockscope() -> Command {
    require_root();
    Command::new(env!("CARGO_BIN_EXE_lockscope"))
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_lockscope")
}

pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "privileged integration tests must run as root (cargo xtask test does this)"
    );
}

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lockscope-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Run, and fail the test with both output streams when it did not succeed.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("spawn");
    assert_succeeded(cmd, out)
}

fn assert_succeeded(cmd: &Command, out: Output) -> Output {
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// `lockscope record -n 0 -o FILE -- sh -c SCRIPT`, which must succeed.
pub fn record_script(file: &Path, script: &str) -> Output {
    run_ok(
        lockscope()
            .args(["record", "-n", "0", "-o"])
            .arg(file)
            .args(["--", "sh", "-c", script]),
    )
}

/// A lock entry's address (`addr`: `0x...`, and `/N` for a later owner generation).
pub fn lock_address(lock: &Value) -> u64 {
    let addr = lock["addr"].as_str().unwrap();
    let hex = addr.split('/').next().unwrap().trim_start_matches("0x");
    u64::from_str_radix(hex, 16).unwrap_or_else(|e| panic!("addr {addr}: {e}"))
}

/// Waits counted in a lock entry's histogram (must equal its `contended`).
pub fn hist_total(lock: &Value) -> u64 {
    lock["histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .sum()
}

/// Lock entries of a recording whose owner is this process's mmap_lock.
/// The arguments of `lockscope workload WORKLOAD` contended: four threads on two CPUs
/// around one lock, held long enough that waits sleep, for 2 s.
pub fn contended(workload: &str) -> [&str; 7] {
    [
        workload,
        "--threads",
        "4",
        "--seconds",
        "2",
        "--load",
        "300",
    ]
}

/// `lockscope record -o FILE -- lockscope workload ARGS` in scratch directory `name`:
/// (the workload's stdout, the recording, its file).
pub fn record_workload_file(name: &str, args: &[&str]) -> (String, Value, PathBuf) {
    let (out, rec, file) = record_workload_with(name, &[], args);
    (String::from_utf8_lossy(&out.stdout).into_owned(), rec, file)
}

/// `lockscope record RECORD_ARGS -o FILE -- lockscope workload ARGS`, which must succeed:
/// its output, the recording and the file.
pub fn record_workload_with(
    name: &str,
    record_args: &[&str],
    args: &[&str],
) -> (Output, Value, PathBuf) {
    let file = scratch(name).join("rec.json");
    let out = run_ok(
        lockscope()
            .arg("record")
            .args(record_args)
            .arg("-o")
            .arg(&file)
            .args(["--", bin(), "workload"])
            .args(args),
    );
    let rec = read_json(&file);
    (out, rec, file)
}

/// A lock entry's holders: (owners, wait they account for with the omitted ones, wait
/// whose holder was unknown, the entry's total wait). Fails when the entry has none.
pub fn holder_split(entry: &Value) -> (&Vec<Value>, u64, u64, u64) {
    let owners = entry["owners"]
        .as_array()
        .unwrap_or_else(|| panic!("no owners: {entry:#}"));
    let known = owners
        .iter()
        .map(|o| o["wait_total_ns"].as_u64().unwrap())
        .sum::<u64>()
        + entry["owners_omitted_wait_ns"].as_u64().unwrap_or(0);
    let unknown = entry["owner_unknown_wait_ns"].as_u64().unwrap();
    (
        owners,
        known,
        unknown,
        entry["wait_total_ns"].as_u64().unwrap(),
    )
}

pub fn mmap_lock_entries(rec: &Value, pid: Option<u64>) -> Vec<&Value> {
    rec["locks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["owner"]["field"] == "mmap_lock")
        .filter(|l| pid.is_none_or(|p| l["owner"]["pid"].as_u64() == Some(p)))
        .collect()
}

/// (id, name) of the BPF programs loaded right now (bpftool).
pub fn loaded_programs() -> Vec<(u64, String)> {
    let out = Command::new("bpftool")
        .args(["prog", "show", "--json"])
        .output()
        .expect("bpftool (installed by cargo xtask setup)");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| Some((p["id"].as_u64()?, p["name"].as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// The probes' program names as the kernel shows them (truncated to 15 characters).
const OUR_PROGRAMS: [&str; 6] = [
    "rt_",
    "contention_begi",
    "contention_end",
    "sched_process_f",
    "sched_process_e",
    "futex_",
];

/// Marks the programs that exist now; [`ProgramWatch::assert_none_left`] then fails if a
/// lockscope program loaded after this point is still loaded.
pub struct ProgramWatch(u64);

impl ProgramWatch {
    pub fn start() -> Self {
        Self(loaded_programs().iter().map(|p| p.0).max().unwrap_or(0))
    }

    pub fn assert_none_left(&self) {
        let others = Command::new("pgrep")
            .args(["-x", "lockscope"])
            .output()
            .map(|o| !o.stdout.is_empty())
            .unwrap_or(false);
        if others {
            eprintln!("note: another lockscope is running; leftover-program check skipped");
            return;
        }
        // lockscope hands its slow-to-release tracepoint attachments to a keeper process
        // (`lockscope-bg`) that lets them go once lockscope has exited: wait for it.
        let keeper = || {
            Command::new("pgrep")
                .args(["-x", "lockscope-bg"])
                .output()
                .map(|o| !o.stdout.is_empty())
                .unwrap_or(false)
        };
        for _ in 0..1200 {
            if !keeper() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        // The kernel frees a program shortly after its last reference goes.
        for _ in 0..40 {
            let left: Vec<_> = loaded_programs()
                .into_iter()
                .filter(|(id, name)| {
                    *id > self.0 && OUR_PROGRAMS.iter().any(|o| name.starts_with(o))
                })
                .collect();
            if left.is_empty() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("lockscope programs left loaded: {:?}", loaded_programs());
    }
}

/// The workload's `key: value` summary lines, from its stdout (or record's, passed through).
pub fn summary(stdout: &str) -> BTreeMap<String, String> {
    stdout
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// One number from a workload summary; panics naming the key when absent or not a number.
pub fn num(s: &BTreeMap<String, String>, key: &str) -> u64 {
    s.get(key)
        .unwrap_or_else(|| panic!("`{key}:` missing from the workload's output: {s:?}"))
        .parse()
        .unwrap_or_else(|_| panic!("`{key}` is not a number: {s:?}"))
}

/// Kernel lock waits whose `contention_end` the kernel never ran: it skips a program
/// that fires inside itself, as when a map update in `contention_end` contends on the
/// map's own bucket lock. Rare (once in a full test run, 2026-11-30) and counted; a
/// broken pairing would lose thousands.
pub const END_MISSED_ALLOWED: u64 = 10;

/// Every loss counter of a recording (or snapshot) is 0, but for a few skipped ends.
pub fn assert_nothing_lost(lost: &Value) {
    for (k, v) in lost.as_object().expect("a `lost` object") {
        let n = v.as_u64().unwrap_or_else(|| panic!("lost.{k} = {v}"));
        // Both count the kernel skipping a program re-entered on its CPU (an interrupt in
        // the middle of one): rare, and not lockscope's to prevent.
        if k == "end_missed" || k == "recursion_misses" {
            assert!(n <= END_MISSED_ALLOWED, "lost {k}: {lost:#}");
        } else {
            assert_eq!(n, 0, "lost {k}: {lost:#}");
        }
    }
}

/// A background load (stress-ng, cyclictest) that runs longer than any recording next
/// to it, however slowly the probes load, and is interrupted (SIGINT, so it cleans up its
/// own children) when dropped: at the end of the test, or when the test fails.
pub struct Background(pub std::process::Child);

impl Drop for Background {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_some() {
            return;
        }
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if self.0.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The fields of `/proc/PID/stat` after `comm` (state, ppid, ...), while `pid` exists.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
    let rest = &s[s.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// The fields of a process that has not exited (a zombie has: it is only not reaped).
fn live_stat_fields(pid: u32) -> Option<Vec<String>> {
    stat_fields(pid).filter(|f| f.first().is_some_and(|st| st != "Z"))
}

/// Wait for `child` to exit, polling every 10 ms; past `limit`, kill it and fail with
/// `what` ("record still running 20 s after ...").
pub fn wait_exit(
    child: &mut std::process::Child,
    limit: std::time::Duration,
    what: &str,
) -> std::process::ExitStatus {
    let start = std::time::Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("{what}");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// `pid` exists and has not exited (a zombie has).
pub fn running(pid: u32) -> bool {
    live_stat_fields(pid).is_some()
}

/// The pids whose parent is `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| live_stat_fields(p).and_then(|f| f.get(1)?.parse().ok()) == Some(pid))
        .collect()
}

/// Run `record ... -- COMMAND` like [`run_ok`], with a load (`start_load`) running
/// exactly while COMMAND runs: started once record has attached its probes and
/// launched COMMAND, stopped when COMMAND exits. A ptrace storm slows every RCU grace
/// period, so one running while record attaches or detaches its probes made a 3 s
/// recording take up to 60 s here.
pub fn run_ok_with_load(cmd: &mut Command, start_load: impl FnOnce() -> Background) -> Output {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    // Drained from the start: a long report must not block record on a full pipe while
    // this waits for its command to go.
    let stdout = drain(child.stdout.take().expect("piped stdout"));
    let stderr = drain(child.stderr.take().expect("piped stderr"));
    // Wait while COMMAND's being there is `there` (and record runs).
    let wait_while_command = |there: bool| {
        while running(pid) && children_of(pid).is_empty() != there {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    };
    wait_while_command(false);
    let load = start_load();
    wait_while_command(true);
    drop(load);
    let status = child.wait().expect("wait");
    let out = Output {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    };
    assert_succeeded(cmd, out)
}

/// Everything `r` gives until its end, read on a thread of its own.
fn drain(mut r: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

/// A cgroup (v2) of the test's own, removed (its processes killed first) on drop.
pub struct TestCgroup {
    pub path: PathBuf,
    /// Its path below the v2 root: how lockscope names it.
    pub name: String,
}

impl TestCgroup {
    pub fn create(name: &str) -> Self {
        let root = lockscope::probe::features::cgroup2_root().expect("a cgroup v2 hierarchy");
        let name = format!("lockscope-test-{name}-{}", std::process::id());
        let path = root.join(&name);
        let _ = std::fs::remove_dir(&path);
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
        Self { path, name }
    }

    /// A shell command that moves itself into this cgroup, then runs `cmd`.
    pub fn enter_then(&self, cmd: &str) -> String {
        format!(
            "echo 0 > '{}/cgroup.procs' && exec {cmd}",
            self.path.display()
        )
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        for _ in 0..100 {
            let procs = std::fs::read_to_string(self.path.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines().filter_map(|p| p.parse::<i32>().ok()) {
                // SAFETY: kill has no memory preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            if std::fs::remove_dir(&self.path).is_ok() || !self.path.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// Give `cmd` a pseudo-terminal of its own (45 x 160) as standard input and output: the
/// master side is returned. As `leader`, the command leads a new session whose
/// controlling terminal it is (the kernel sends it SIGHUP when the terminal hangs up);
/// else the terminal only hangs up under it. Drop `cmd` once spawned, so that only the
/// child holds the terminal.
pub fn on_pty(cmd: &mut Command, leader: bool) -> std::os::fd::OwnedFd {
    use std::os::unix::process::CommandExt as _;
    use std::process::Stdio;
    let (master, slave) = lockscope::sink::tui::terminal::open_pty(45, 160).unwrap();
    cmd.env("TERM", "xterm-256color")
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave));
    if leader {
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    master
}
