//! `lockscope record` on the real kernel (tracepoint tier): real probes, real workloads,
//! assertions on numbers.

mod common;

use std::{
    collections::BTreeMap,
    process::{Command, Stdio},
    thread,
    time::Duration,
};

use common::*;
use serde_json::Value;

/// mmap-churn in the background, long enough to outlive lockscope's start-up on a loaded
/// machine; [`stop`] it once the recording is done.
fn spawn_churn() -> std::process::Child {
    Command::new(bin())
        .args(["workload", "mmap-churn", "--seconds", "30"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

fn stop(children: [&mut std::process::Child; 2]) {
    for c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

fn stat(l: &Value, field: &str) -> u64 {
    l[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {l}"))
}

fn callers(l: &Value) -> Vec<String> {
    l["callers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["caller"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn mmap_churn_contends_its_mmap_lock_for_read_and_write() {
    let _serial = serial();
    let dir = scratch("churn");
    let file = dir.join("rec.json");
    let out = run_ok(lockscope().args(["record", "-o"]).arg(&file).args([
        "--",
        bin(),
        "workload",
        "mmap-churn",
        "--seconds",
        "3",
    ]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The workload's own output passes through, then the report follows.
    assert!(stdout.contains("mmap-churn: readers="), "{stdout}");
    assert!(stdout.contains("contended"), "{stdout}");

    let rec = read_json(&file);
    assert_eq!(rec["schema"], "lockscope.report/2");
    assert_eq!(rec["tier"], "tracepoint");
    assert_eq!(rec["command_exit_code"], 0);
    let entries = mmap_lock_entries(&rec, None);
    let by_type: BTreeMap<&str, &Value> = entries
        .iter()
        .map(|l| (l["type"].as_str().unwrap(), *l))
        .collect();
    let read = by_type
        .get("rwsem:R")
        .expect("rwsem:R waits on the workload's mmap_lock");
    let write = by_type
        .get("rwsem:W")
        .expect("rwsem:W waits on the workload's mmap_lock");
    for l in [read, write] {
        // Thousands of waits per second on an idle machine of this kind; a loaded one
        // gives far fewer, so the floor only proves the workload contended.
        assert!(stat(l, "contended") >= 100, "too few waits: {l}");
        assert!(stat(l, "wait_total_ns") > 0);
        assert!(stat(l, "wait_max_ns") >= stat(l, "wait_min_ns"));
        assert_eq!(
            hist_total(l),
            stat(l, "contended"),
            "histogram counts every wait"
        );
        assert!(
            l["name"]
                .as_str()
                .unwrap()
                .starts_with("mmap_lock of lockscope[")
        );
    }
    // Callers are symbolized kernel functions of the mm paths that take mmap_lock.
    let rc = callers(read);
    assert!(
        rc.iter().any(|c| c.starts_with("__do_sys_msync+0x")
            || c.starts_with("lock_mm_and_find_vma+0x")
            || c.starts_with("do_user_addr_fault+0x")),
        "read callers: {rc:?}"
    );
    let wc = callers(write);
    assert!(
        wc.iter()
            .any(|c| c.starts_with("__vm_munmap+0x") || c.starts_with("vm_mmap_pgoff+0x")),
        "write callers: {wc:?}"
    );
    // Only the command's process tree was traced.
    let owner = read["owner"]["pid"].as_u64().unwrap();
    for l in rec["locks"].as_array().unwrap() {
        for t in l["tasks"].as_array().unwrap() {
            assert_eq!(
                t["pid"].as_u64(),
                Some(owner),
                "task outside the target: {t}"
            );
        }
    }
    // Nothing dropped: every ended wait is in exactly one lock entry (kernel locks: the
    // futex entries are counted in `futex_events`).
    let total: u64 = rec["locks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l.get("futex").is_none())
        .map(|l| stat(l, "contended"))
        .sum();
    assert_eq!(total, rec["events"]["end"].as_u64().unwrap());
    // The timeline's per-interval deltas add up to each lock's totals.
    for s in rec["timeline"]["series"].as_array().unwrap() {
        if s["addr"] == "other" {
            continue;
        }
        let lock = rec["locks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["addr"] == s["addr"] && l["type"] == s["type"])
            .expect("series of a known lock");
        let sum: u64 = s["contended"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(sum, stat(lock, "contended"), "timeline of {}", lock["name"]);
    }
    // Maps never fill on this workload. Only an end the kernel itself did not deliver to
    // the probe (a re-entered program is skipped) may be missed, and rarely.
    for (reason, n) in rec["lost"].as_object().unwrap() {
        let n = n.as_u64().unwrap();
        if reason == "end_missed" || reason == "recursion_misses" {
            assert!(n * 1000 <= total, "{reason} {n} of {total}");
        } else {
            assert_eq!(n, 0, "lost {reason}: {}", rec["lost"]);
        }
    }
}

#[test]
fn pid_filter_excludes_a_concurrent_workload() {
    let _serial = serial();
    let mut a = spawn_churn();
    let mut b = spawn_churn();
    thread::sleep(Duration::from_millis(300));
    let dir = scratch("pid");
    let file = dir.join("rec.json");
    run_ok(
        lockscope()
            .args(["record", "-d", "2", "--pid", &a.id().to_string(), "-o"])
            .arg(&file),
    );
    stop([&mut a, &mut b]);
    let rec = read_json(&file);
    let (pa, pb) = (a.id() as u64, b.id() as u64);
    assert!(
        !mmap_lock_entries(&rec, Some(pa)).is_empty(),
        "target's mmap_lock missing: {}",
        rec["locks"]
    );
    assert!(
        mmap_lock_entries(&rec, Some(pb)).is_empty(),
        "other workload traced"
    );
    for l in rec["locks"].as_array().unwrap() {
        for t in l["tasks"].as_array().unwrap() {
            assert_eq!(t["pid"].as_u64(), Some(pa), "{t}");
        }
    }
}

/// `perf lock record` sees the same tracepoints at the same time: the contended counts of
/// the workload's mmap_lock must agree (within 5% or 10 events, for events perf may lose).
#[test]
fn contended_counts_agree_with_perf_lock() {
    let _serial = serial();
    let dir = scratch("perf");
    let file = dir.join("rec.json");
    let data = dir.join("perf.data");
    run_ok(
        Command::new("perf")
            .args(["lock", "record", "-o"])
            .arg(&data)
            .args(["--", bin(), "record", "-o"])
            .arg(&file)
            .args(["--", bin(), "workload", "mmap-churn", "--seconds", "2"])
            .stdout(Stdio::null()),
    );
    let rec = read_json(&file);
    let script = run_ok(
        Command::new("perf")
            .args(["script", "-F", "event,trace", "-i"])
            .arg(&data),
    );
    let script = String::from_utf8_lossy(&script.stdout);
    for l in mmap_lock_entries(&rec, None) {
        let flag = match l["type"].as_str().unwrap() {
            "rwsem:R" => "READ",
            "rwsem:W" => "WRITE",
            _ => continue,
        };
        let addr = l["addr"].as_str().unwrap();
        let needle = format!("{addr} (flags={flag})");
        let perf_count = script
            .lines()
            .filter(|line| line.contains("contention_begin") && line.contains(&needle))
            .count() as f64;
        let ours = stat(l, "contended") as f64;
        assert!(perf_count > 0.0, "perf saw no {needle}");
        // 5%, and never less than 10 events: a few lost events are more than 5% of a
        // small count on a loaded machine.
        let diff = (ours - perf_count).abs();
        assert!(
            diff <= (perf_count * 0.05).max(10.0),
            "{flag}: lockscope {ours} vs perf {perf_count}"
        );
    }
}

/// `--cgroup`: only tasks in that cgroup (v2) are recorded, filtered in the kernel.
#[test]
fn cgroup_filter_records_only_that_cgroup() {
    let _serial = serial();
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let root = mounts
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| f[1].to_owned())
        })
        .expect("a cgroup v2 hierarchy");
    let cg = std::path::Path::new(&root).join(format!("lockscope-test-{}", std::process::id()));
    let _ = std::fs::remove_dir(&cg);
    std::fs::create_dir(&cg).unwrap();
    let mut inside = spawn_churn();
    let mut outside = spawn_churn();
    std::fs::write(cg.join("cgroup.procs"), inside.id().to_string()).unwrap();
    thread::sleep(Duration::from_millis(300));
    let dir = scratch("cgroup");
    let file = dir.join("rec.json");
    let out = lockscope()
        .args(["record", "-d", "2", "--cgroup"])
        .arg(&cg)
        .arg("-o")
        .arg(&file)
        .output()
        .unwrap();
    stop([&mut inside, &mut outside]);
    let _ = std::fs::remove_dir(&cg);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rec = read_json(&file);
    let pid = inside.id() as u64;
    assert!(
        !mmap_lock_entries(&rec, Some(pid)).is_empty(),
        "{}",
        rec["locks"]
    );
    for l in rec["locks"].as_array().unwrap() {
        for t in l["tasks"].as_array().unwrap() {
            assert_eq!(t["pid"].as_u64(), Some(pid), "{t}");
        }
    }
}

/// SIGTERM or SIGHUP ends a recording as Ctrl-C does: the report is printed, `-o` is
/// written, the exit is clean and quick; a command gets the same signal.
#[test]
fn sigterm_and_sighup_write_the_recording() {
    let _serial = serial();
    let dir = scratch("record-sigterm");
    for (sig, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGHUP, "SIGHUP")] {
        let file = dir.join(format!("{name}.json"));
        let _ = std::fs::remove_file(&file);
        let mut churn = spawn_churn();
        let mut cmd = lockscope();
        cmd.args(["record", "-d", "60", "-o"])
            .arg(&file)
            .args(["--", "sleep", "60"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Under `nohup` (SIGHUP ignored) the command would inherit the ignore, as it
        // should, and outlive the signal: the test starts from the default.
        // SAFETY: signal(2) is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                libc::signal(libc::SIGHUP, libc::SIG_DFL);
                Ok(())
            });
        }
        let rec = cmd.spawn().unwrap();
        // Wait until the command runs: the probes are attached by then.
        let t0 = std::time::Instant::now();
        while children_of(rec.id()).is_empty() && t0.elapsed() < Duration::from_secs(60) {
            thread::sleep(Duration::from_millis(50));
        }
        thread::sleep(Duration::from_millis(500));
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(rec.id() as i32, sig) };
        let t1 = std::time::Instant::now();
        let out = rec.wait_with_output().unwrap();
        let took = t1.elapsed();
        let _ = churn.kill();
        let _ = churn.wait();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stderr.contains(&format!("lockscope: {name}: recording stopped")),
            "{name}: {stderr}"
        );
        assert!(took < Duration::from_secs(20), "{name}: took {took:?}");
        assert!(stdout.contains("contended"), "{name}: no report:\n{stdout}");
        let rec = read_json(&file);
        assert!(rec["duration_s"].as_f64().unwrap() < 60.0, "{name}");
        // sleep got the signal too: its exit status is passed through.
        assert_eq!(out.status.code(), Some(128 + sig), "{name}: {stderr}");
    }
}

/// The terminal of a running `record` goes away (its window closed, its ssh connection
/// killed): the kernel sends SIGHUP, and the report has nowhere to go. The recording is
/// still written and the exit is clean; writing to the dead terminal once panicked
/// before `-o` was written.
#[test]
fn a_hung_up_terminal_still_gets_its_recording_written() {
    let _serial = serial();
    let file = scratch("record-hangup").join("r.json");
    let err = file.with_extension("err");
    let mut cmd = lockscope();
    cmd.args(["record", "-o"])
        .arg(&file)
        .args(["--", "sleep", "60"])
        .stderr(std::fs::File::create(&err).unwrap());
    // As above: under `nohup` sleep would inherit the ignored SIGHUP and outlive it.
    // SAFETY: signal(2) is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            Ok(())
        });
    }
    let master = on_pty(&mut cmd, true);
    let mut rec = cmd.spawn().unwrap();
    drop(cmd);
    let t0 = std::time::Instant::now();
    while children_of(rec.id()).is_empty() && t0.elapsed() < Duration::from_secs(60) {
        thread::sleep(Duration::from_millis(50));
    }
    thread::sleep(Duration::from_millis(500));
    drop(master);
    let status = wait_exit(
        &mut rec,
        Duration::from_secs(20),
        "record still running 20 s after its terminal hung up",
    );
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert!(
        stderr.contains("lockscope: SIGHUP: recording stopped"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    // sleep got SIGHUP from the terminal too: its exit status is passed through.
    assert_eq!(status.code(), Some(128 + libc::SIGHUP), "{stderr}");
    let rec = read_json(&file);
    assert!(rec["duration_s"].as_f64().unwrap() < 60.0);
}

/// `--folded` and `report --format folded`: one line per waiter stack, the lock last; the
/// values add up to the recording's total wait (or contentions), and inferno renders them.
#[test]
fn folded_stacks_add_up_and_render_as_a_flame_graph() {
    let _serial = serial();
    let dir = scratch("record-folded");
    let (file, folded) = (dir.join("f.json"), dir.join("f.folded"));
    run_ok(
        lockscope()
            .args(["record", "-n", "0", "-o"])
            .arg(&file)
            .arg("--folded")
            .arg(&folded)
            .args(["--", bin(), "workload", "mmap-churn", "--seconds", "2"]),
    );
    let rec = read_json(&file);
    let locks = rec["locks"].as_array().unwrap();
    let sum_of = |text: &str| -> u64 {
        text.lines()
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum()
    };
    let text = std::fs::read_to_string(&folded).unwrap();
    let total: u64 = locks.iter().map(|l| stat(l, "wait_total_ns")).sum();
    assert_eq!(sum_of(&text), total, "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains(";mmap_lock of lockscope[") && l.contains(" [rwsem:W] ")),
        "{text}"
    );
    let report = |extra: &[&str]| {
        let out = run_ok(
            lockscope()
                .args(["report", "--format", "folded"])
                .args(extra)
                .arg(&file),
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(report(&[]), text);
    let contended: u64 = locks.iter().map(|l| stat(l, "contended")).sum();
    assert_eq!(sum_of(&report(&["--weight", "count"])), contended);
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(
        &mut inferno::flamegraph::Options::default(),
        text.lines(),
        &mut svg,
    )
    .unwrap();
    assert!(String::from_utf8_lossy(&svg).contains("mmap_lock of lockscope"));
}

/// A kernel without syscall tracepoints (CONFIG_FTRACE_SYSCALLS off, simulated with a
/// tracefs that has none): the futex group is skipped with one note, everything else runs.
#[test]
fn without_syscall_tracepoints_kernel_locks_are_recorded_with_a_note() {
    let _serial = serial();
    let dir = scratch("record-no-syscalls");
    let tracefs = dir.join("tracefs");
    std::fs::create_dir_all(tracefs.join("events")).unwrap();
    let file = dir.join("f.json");
    // On x86_64 the futex probes are on the raw sys_enter/sys_exit, which a kernel
    // without the per-syscall trace events (CONFIG_FTRACE_SYSCALLS) still has: futexes
    // are traced there, without a note.
    if cfg!(target_arch = "x86_64") {
        let out = run_ok(
            lockscope()
                .env("LOCKSCOPE_TRACEFS", &tracefs)
                .args(["record", "-n", "0", "-o"])
                .arg(&file)
                .args(["--", "true"]),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("futexes) are not traced"), "{stderr}");
        assert!(!read_json(&file)["futex_events"].is_null(), "{stderr}");
    }
    // Without the raw tracepoints either (taken for missing), nothing is left to trace
    // futex calls with.
    let out = run_ok(
        lockscope()
            .env("LOCKSCOPE_TRACEFS", &tracefs)
            .env("LOCKSCOPE_TEST_UNAVAILABLE", "futex-raw")
            .args(["record", "-n", "0", "-o"])
            .arg(&file)
            .args(["--", bin(), "workload", "mmap-churn", "--seconds", "2"]),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let notes: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("futexes) are not traced"))
        .collect();
    assert_eq!(notes.len(), 1, "{stderr}");
    assert!(
        notes[0].starts_with(
            "lockscope: note: user-space locks (futexes) are not traced: this \
             kernel has no syscalls:sys_enter_futex tracepoint"
        ),
        "{stderr}"
    );
    let rec = read_json(&file);
    assert!(rec["futex_events"].is_null(), "{}", rec["futex_events"]);
    assert!(
        !mmap_lock_entries(&rec, None).is_empty(),
        "no kernel locks recorded:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// `--pprof` (and `report --format pprof`): a real `go tool pprof` reads the profile, and
/// its samples add up to the recording's contentions and wait time.
#[test]
fn go_tool_pprof_reads_the_profile_and_its_totals_match() {
    let _serial = serial();
    let dir = scratch("record-pprof");
    let (file, prof) = (dir.join("f.json"), dir.join("f.pb.gz"));
    run_ok(
        lockscope()
            .args(["record", "-n", "0", "-o"])
            .arg(&file)
            .arg("--pprof")
            .arg(&prof)
            .args(["--", bin(), "workload", "mmap-churn", "--seconds", "2"]),
    );
    let rec = read_json(&file);
    let locks = rec["locks"].as_array().unwrap();
    let want_n: u64 = locks.iter().map(|l| stat(l, "contended")).sum();
    let want_ns: u64 = locks.iter().map(|l| stat(l, "wait_total_ns")).sum();
    let go = |args: &[&str], path: &std::path::Path| {
        let out = Command::new("go")
            .args(["tool", "pprof"])
            .args(args)
            .arg(path)
            .env("HOME", &dir)
            .output()
            .expect("go (golang-go, installed by cargo xtask setup)");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // `-raw`: one `contentions delay: location ids` line per sample.
    let raw = go(&["-raw"], &prof);
    assert!(raw.contains("contentions/count delay/nanoseconds"), "{raw}");
    let (mut n, mut ns) = (0u64, 0u64);
    for line in raw.lines() {
        let Some((vals, _)) = line.split_once(':') else {
            continue;
        };
        let v: Vec<u64> = vals
            .split_whitespace()
            .map_while(|x| x.parse().ok())
            .collect();
        if v.len() == 2 && vals.split_whitespace().count() == 2 {
            n += v[0];
            ns += v[1];
        }
    }
    assert_eq!((n, ns), (want_n, want_ns), "{raw}");
    let top = go(&["-top", "-sample_index=delay"], &prof);
    assert!(top.contains("mmap_lock of lockscope["), "{top}");
    // The same profile from the file.
    let again = dir.join("again.pb.gz");
    run_ok(
        lockscope()
            .args(["report", "--format", "pprof", "-o"])
            .arg(&again)
            .arg(&file),
    );
    assert_eq!(go(&["-raw"], &again).lines().count(), raw.lines().count());
}

/// Sleeping waits in flight live in their threads' own storage, which has no size to run
/// out of: with 32 threads sleeping on one mmap_lock at once, none is evicted, and every
/// begin is accounted for (timed, still waiting, filtered, or a counted loss).
#[test]
fn in_flight_waits_are_never_evicted_and_all_accounted() {
    let _serial = serial();
    let dir = scratch("inflight-accounted");
    let file = dir.join("churn.json");
    run_ok(
        lockscope()
            .args(["record", "-o"])
            .arg(&file)
            .arg("--")
            .arg(bin())
            .args([
                "workload",
                "mmap-churn",
                "--threads",
                "32",
                "--seconds",
                "2",
            ]),
    );
    let rec = read_json(&file);
    let ev = &rec["events"];
    assert!(ev["begin"].as_u64().unwrap() > 1000, "{ev}");
    assert_eq!(
        rec["lost"]["task_wait_evicted"].as_u64().unwrap_or(0),
        0,
        "{:#}",
        rec["lost"]
    );
    // The probes are detached: exact. An end without its begin comes only from a run of
    // a program the kernel skipped (re-entered: `recursion_misses`).
    let unpaired = ev["unpaired_end"].as_u64().unwrap();
    let skipped = rec["lost"]["recursion_misses"].as_u64().unwrap_or(0);
    assert!(unpaired <= skipped, "{ev} {:#}", rec["lost"]);
    let lost = |k: &str| rec["lost"][k].as_u64().unwrap_or(0);
    assert_eq!(
        ev["begin"].as_u64().unwrap(),
        ev["end"].as_u64().unwrap()
            + ev["in_progress_at_end"].as_u64().unwrap()
            + ev["type_filtered"].as_u64().unwrap()
            + ev["unpaired_begin"].as_u64().unwrap()
            + lost("end_missed")
            + lost("cpu_nesting_overflow")
            + lost("task_wait_map_full"),
        "{ev} {:#}",
        rec["lost"]
    );
}

/// A futex call lives in its thread's storage from entry to exit; a thread that dies
/// inside one (killed while it waits) takes the call with it: neither timed nor lost
/// silently, it is counted in `futex_calls_evicted`.
#[test]
fn futex_calls_cut_off_by_thread_death_are_counted_as_lost() {
    let _serial = serial();
    let dir = scratch("futex-cut-off");
    let file = dir.join("futex.json");
    // 32 threads on one futex mutex, killed after a second. Holds are long (`--load
    // 200000`, about a millisecond), so all but the holder are inside a wait when the kill
    // comes; with short holds most threads are runnable, not waiting, and a kill could
    // find none in a wait (seen: 0 to 26 of 32 with `--load 300`).
    // `--foreground`: timeout waits for the killed workload to be gone; without it,
    // timeout kills its own process group, itself included, and the recording may stop
    // while the workload's threads are still dying (their calls then in progress).
    let out = lockscope()
        .args(["record", "-o"])
        .arg(&file)
        .args(["--", "timeout", "--foreground", "-s", "KILL", "1"])
        .arg(bin())
        .args([
            "workload",
            "futex-mutex",
            "--threads",
            "32",
            "--seconds",
            "10",
            "--load",
            "200000",
        ])
        .output()
        .expect("spawn");
    let rec = read_json(&file);
    assert_eq!(rec["command_exit_code"], 137, "{out:?}");
    let evicted = rec["lost"]["futex_calls_evicted"].as_u64().unwrap();
    let lost = |k: &str| rec["lost"][k].as_u64().unwrap_or(0);
    let f = &rec["futex_events"];
    // At most one call per thread; most threads were waiting when killed.
    assert!((16..=32).contains(&evicted), "{f} {:#}", rec["lost"]);
    assert_eq!(f["in_progress_at_end"].as_u64().unwrap(), 0, "{f}");
    assert_eq!(
        f["enter"].as_u64().unwrap(),
        f["exit"].as_u64().unwrap()
            + evicted
            + f["in_progress_at_end"].as_u64().unwrap()
            + f["unpaired_enter"].as_u64().unwrap()
            + f["restart_abandoned"].as_u64().unwrap_or(0)
            + lost("futex_call_map_full"),
        "{f} {:#}",
        rec["lost"]
    );
}

/// A command that ignores Ctrl-C: the report comes at once all the same, `record` says
/// it is waiting for the command, and Ctrl-C again ends the command (SIGTERM) and with
/// it `record`. Before, the report waited for the command and every later Ctrl-C went to
/// `record`'s own handler: no way out but kill(1) from another shell.
#[test]
fn a_command_that_ignores_ctrl_c_holds_neither_the_report_nor_the_shell() {
    use std::io::BufRead as _;
    let _serial = serial();
    let mut cmd = lockscope();
    cmd.args(["record", "--", "sh", "-c", "trap '' INT; exec sleep 60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut rec = cmd.spawn().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    let stdout = rec.stdout.take().unwrap();
    thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let stderr = rec.stderr.take().unwrap();
    let err = thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let t0 = std::time::Instant::now();
    while children_of(rec.id()).is_empty() && t0.elapsed() < Duration::from_secs(60) {
        thread::sleep(Duration::from_millis(50));
    }
    thread::sleep(Duration::from_millis(500));
    let command = children_of(rec.id());
    assert_eq!(command.len(), 1, "{command:?}");
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let t1 = std::time::Instant::now();
    let report = loop {
        match lines.recv_timeout(Duration::from_secs(20)) {
            Ok(l) if l.starts_with("tier: ") => break t1.elapsed(),
            Ok(_) => {}
            Err(e) => {
                let _ = rec.kill();
                panic!("no report within 20 s of Ctrl-C ({e})");
            }
        }
    };
    assert!(report < Duration::from_secs(10), "report after {report:?}");
    // The command ignored the SIGINT and runs on; record waits for it.
    thread::sleep(Duration::from_millis(1500));
    assert!(rec.try_wait().unwrap().is_none(), "record left its command");
    // (Beside the command: the keeper that releases the probes after record exits.)
    assert!(
        children_of(rec.id()).contains(&command[0]),
        "{:?}",
        children_of(rec.id())
    );
    // SAFETY: as above.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let status = wait_exit(
        &mut rec,
        Duration::from_secs(20),
        "record still waiting 20 s after the second Ctrl-C",
    );
    let stderr = err.join().unwrap();
    assert!(
        stderr.contains("waiting for the command") && stderr.contains("Ctrl-C ends it"),
        "{stderr}"
    );
    assert!(
        stderr.contains("sending SIGTERM to the command"),
        "{stderr}"
    );
    // The command's end is passed through: killed by SIGTERM.
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{stderr}");
}

/// The probes' memory does not grow with the number of CPUs: no aggregation hash is
/// per-CPU (each of their entries would be paid once per CPU: 20.6 MB per CPU when they
/// were, 7.5 kB since), only small per-CPU arrays remain. Read from the recording
/// process's own map descriptors (`/proc/PID/fdinfo`) while its command runs.
#[test]
fn per_cpu_maps_stay_small() {
    require_root();
    let _serial = serial();
    let file = scratch("percpu").join("rec.json");
    let out = record_script(
        &file,
        "for f in /proc/$PPID/fdinfo/*; do \
           grep -q '^map_type' \"$f\" 2>/dev/null && \
           echo \"map $(grep -E '^(map_type|value_size|max_entries)' \"$f\" | tr -d '\\t' | tr '\\n' ' ')\"; \
         done; true",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let maps: Vec<BTreeMap<&str, u64>> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("map "))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|kv| kv.split_once(':'))
                .map(|(k, v)| (k, v.parse().unwrap()))
                .collect()
        })
        .collect();
    assert!(maps.len() >= 20, "the recording's maps: {stdout}");
    // PERCPU_HASH, PERCPU_ARRAY, LRU_PERCPU_HASH, PERCPU_CGROUP_STORAGE.
    let per_cpu: Vec<_> = maps
        .iter()
        .filter(|m| [5, 6, 10, 20].contains(&m["map_type"]))
        .collect();
    assert!(!per_cpu.is_empty(), "the per-CPU arrays are seen: {stdout}");
    let bytes_per_cpu: u64 = per_cpu
        .iter()
        .map(|m| m["value_size"].next_multiple_of(8) * m["max_entries"])
        .sum();
    assert!(
        bytes_per_cpu <= 64 << 10,
        "{bytes_per_cpu} bytes of per-CPU maps per CPU: {per_cpu:?}"
    );
}

/// The start and the stop run at a higher weight (`boost`), and only they: the command
/// and every thread lockscope keeps while it traces are at the nice lockscope was
/// started with (the pthread reader at its own -5), also when that nice is not 0.
#[test]
fn the_start_boost_reaches_neither_the_command_nor_the_threads_that_trace() {
    let _serial = serial();
    // Run by lockscope: its own nice, then each of lockscope's threads (comm and nice).
    let script = r#"echo "command nice=$(nice)"
for t in /proc/$PPID/task/*; do echo "thread $(cut -d' ' -f2,19 "$t/stat")"; done"#;
    for user_nice in [0, 3] {
        let mut cmd = Command::new("nice");
        cmd.args(["-n", &user_nice.to_string(), bin(), "record", "--"])
            .args(["sh", "-c", script]);
        require_root();
        let out = run_ok(&mut cmd);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains(&format!("command nice={user_nice}\n")),
            "nice {user_nice}: {stdout}"
        );
        let threads: Vec<(&str, i32)> = stdout
            .lines()
            .filter_map(|l| l.strip_prefix("thread ("))
            .filter_map(|l| l.split_once(") "))
            .map(|(comm, nice)| (comm, nice.trim().parse().unwrap()))
            .collect();
        assert!(
            threads.iter().any(|&(c, _)| c == "lockscope"),
            "nice {user_nice}: no lockscope thread listed: {stdout}"
        );
        for (comm, nice) in threads {
            let want = if comm == "pthread-unwind" {
                -5
            } else {
                user_nice
            };
            assert_eq!(nice, want, "nice {user_nice}: thread {comm}: {stdout}");
        }
    }
}
