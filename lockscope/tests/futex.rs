//! User-space locks on the real kernel: the futex syscall probes against workloads that
//! count their own futex calls. The counts must be equal, not close.

mod common;

use std::collections::BTreeMap;

use common::*;
use serde_json::Value;

/// Record a workload; returns its summary, its output and the recording.
fn record(name: &str, args: &[&str]) -> (BTreeMap<String, String>, String, Value) {
    let (stdout, rec, _) = record_workload_file(name, args);
    (summary(&stdout), stdout, rec)
}

/// Record a workload; returns its summary, the recording's entry for its lock (the one
/// it prints) and the recording.
fn record_workload(name: &str, args: &[&str]) -> (BTreeMap<String, String>, Value, Value) {
    let (s, stdout, rec) = record(name, args);
    let entry = lock_of(&rec, &s, &stdout);
    (s, entry, rec)
}

/// The recording's entry for the lock the workload printed (`lock=` of its summary).
fn lock_of(rec: &Value, s: &BTreeMap<String, String>, stdout: &str) -> Value {
    let addr = s.get("lock").expect("lock address printed");
    rec["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["addr"] == addr.as_str())
        .unwrap_or_else(|| panic!("no entry for lock {addr} in the recording:\n{stdout}"))
        .clone()
}

fn field(entry: &Value, key: &str) -> u64 {
    entry["futex"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("futex.{key} in {entry}"))
}

fn assert_nothing_lost_in_futex(rec: &Value) {
    assert_nothing_lost(&rec["lost"]);
    let ev = &rec["futex_events"];
    assert_eq!(ev["unpaired_exit"], 0, "{ev}");
    assert_eq!(ev["unpaired_enter"], 0, "{ev}");
    assert_eq!(ev["enter"], ev["exit"], "every call paired: {ev}");
}

/// The wait-wake counters of a futex word equal the workload's own counts exactly.
fn assert_wait_wake_exact(s: &BTreeMap<String, String>, l: &Value) {
    let waits = num(s, "futex_wait");
    // Four threads on two CPUs around one lock: the slow path runs; if this ever fails
    // the workload did not contend, and exactness below would prove little.
    assert!(waits >= 50, "too few FUTEX_WAIT calls: {s:?}");
    assert_eq!(field(l, "wait_calls"), waits, "{l}");
    assert_eq!(field(l, "eagain"), num(s, "eagain"), "{l}");
    assert_eq!(field(l, "wake_calls"), num(s, "futex_wake"), "{l}");
    assert_eq!(field(l, "woken"), num(s, "woken"), "{l}");
}

#[test]
fn futex_mutex_counts_equal_the_workloads_own() {
    let _serial = serial();
    let (s, l, rec) = record_workload("futex-mutex", &contended("futex-mutex"));
    assert_nothing_lost_in_futex(&rec);
    assert_eq!(l["type"], "futex");
    assert_eq!(l["comm"], "lockscope");
    assert!(l["name"].as_str().unwrap().starts_with("futex 0x"), "{l}");
    assert_wait_wake_exact(&s, &l);
    let waits = num(&s, "futex_wait");
    assert_eq!(field(&l, "lock_pi_calls"), 0);
    assert_eq!(field(&l, "errors"), 0);
    // Every wait that did not return EAGAIN slept and was timed.
    assert_eq!(
        l["contended"].as_u64().unwrap(),
        waits - num(&s, "eagain") - num(&s, "interrupted")
    );
    assert_eq!(hist_total(&l), l["contended"].as_u64().unwrap());
    assert!(l["wait_max_ns"].as_u64().unwrap() >= l["wait_min_ns"].as_u64().unwrap());
}

#[test]
fn pi_futex_mutex_counts_equal_the_workloads_own() {
    let _serial = serial();
    let (s, l, rec) = record_workload(
        "futex-mutex-pi",
        &["futex-mutex", "--pi", "--threads", "4", "--seconds", "2"],
    );
    assert_nothing_lost_in_futex(&rec);
    assert_eq!(l["type"], "futex-pi");
    let lock_pi = num(&s, "lock_pi");
    assert!(lock_pi >= 50, "too few FUTEX_LOCK_PI calls: {s:?}");
    assert_eq!(field(&l, "lock_pi_calls"), lock_pi, "{l}");
    assert_eq!(field(&l, "unlock_pi_calls"), num(&s, "unlock_pi"), "{l}");
    assert_eq!(field(&l, "wait_calls"), 0);
    assert_eq!(field(&l, "errors"), 0);
    // Each LOCK_PI blocked until it owned the lock: one timed wait per call.
    assert_eq!(l["contended"].as_u64().unwrap(), lock_pi);
    assert_pi_owner_named(&l);
}

/// The PI owner read from the futex word is one of the workload's threads, named.
fn assert_pi_owner_named(l: &Value) {
    let owner = &l["futex"]["pi_owner"];
    assert!(owner["tid"].as_u64().unwrap() > 0, "{l}");
    assert!(
        owner["comm"].as_str().unwrap().starts_with("futex-mutex-"),
        "owner thread named: {owner}"
    );
}

#[test]
fn futex_rwlock_counts_equal_the_workloads_own() {
    let _serial = serial();
    let (s, l, rec) = record_workload(
        "futex-rwlock",
        &[
            "futex-rwlock",
            "--threads",
            "4",
            "--seconds",
            "2",
            "--read-pct",
            "70",
        ],
    );
    assert_nothing_lost_in_futex(&rec);
    assert_wait_wake_exact(&s, &l);
}

#[test]
fn pthread_mutex_shows_at_the_mutex_address() {
    let _serial = serial();
    let (s, l, rec) = record_workload("pthread-mutex", &contended("pthread-mutex"));
    assert_nothing_lost_in_futex(&rec);
    assert!(num(&s, "ops") > 0);
    // glibc's mutex waits and wakes on the word at the start of the mutex; the libc
    // attribution names it (tests/pthread.rs checks the attribution itself).
    assert_eq!(l["type"], "pthread-mutex");
    assert!(field(&l, "wait_calls") > 0, "{l}");
    assert!(field(&l, "wake_calls") > 0, "{l}");
    assert_eq!(
        l["futex"]["calls"]["FUTEX_WAIT"].as_u64(),
        Some(field(&l, "wait_calls"))
    );
}

#[test]
fn types_without_futex_leave_the_futex_probes_out() {
    let _serial = serial();
    let dir = scratch("futex-types");
    let file = dir.join("f.json");
    run_ok(
        lockscope()
            .args(["record", "--types", "rwsem", "-o"])
            .arg(&file)
            .args(["--", bin(), "workload", "futex-mutex", "--seconds", "0.5"]),
    );
    let rec = read_json(&file);
    assert!(rec.get("futex_events").is_none(), "{rec:#}");
    assert!(
        rec["locks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| !l["type"].as_str().unwrap().starts_with("futex"))
    );
    // Only PI futexes asked for: the wait-wake mutex is filtered, and counted so.
    run_ok(
        lockscope()
            .args(["record", "--types", "futex-pi", "-o"])
            .arg(&file)
            .args(["--", bin(), "workload", "futex-mutex", "--seconds", "0.5"]),
    );
    let rec = read_json(&file);
    assert!(
        rec["locks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["type"] != "futex"),
        "{rec:#}"
    );
    assert!(rec["futex_events"]["type_filtered"].as_u64().unwrap() > 0);
}

#[test]
fn a_full_futex_map_evicts_and_counts_what_it_evicted() {
    let _serial = serial();
    // 20,000 words, each called in turn (a wake, then a wait that returns EAGAIN) for
    // at least one full pass: more words than the map's 16,384 entries, whatever the
    // scheduling. (A contended mutex walk leaves the number of words that ever see a
    // futex call to chance.)
    const WORDS: u64 = 20_000;
    let (s, _, rec) = record(
        "futex-evict",
        &[
            "syscall-loop",
            "--futex-wake",
            "--futex-eagain",
            "--words",
            "20000",
            "--seconds",
            "1",
        ],
    );
    let lost = &rec["lost"];
    let evicted = lost["futex_stats_evicted"].as_u64().unwrap();
    println!("futex_stats_evicted {evicted}; workload {s:?}");
    assert_eq!(num(&s, "words"), WORDS, "{s:?}");
    assert!(num(&s, "futex_wake") >= WORDS, "{s:?}");
    assert_eq!(num(&s, "futex_wait"), num(&s, "futex_wake"), "{s:?}");
    // An LRU map never refuses a new word: it evicts the least recently updated one.
    assert_eq!(lost["futex_stats_map_full"], 0, "{lost}");
    assert!(evicted > 0, "20,000 words fit a 16,384-entry map? {lost}");
    let words: Vec<&Value> = rec["locks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l.get("futex").is_some())
        .collect();
    // The map's entries plus the few words still in the per-CPU wake slots.
    assert!(words.len() <= 16_384 + 2 * 64, "{} words", words.len());
    // Every word is either shown or counted as evicted: none vanishes silently.
    assert!(
        words.len() as u64 + evicted >= WORDS,
        "{} words shown, {evicted} evicted",
        words.len()
    );
    // The evicted words' calls are gone from the locks, never invented: at most the
    // workload's own counts remain, and the call counters (not in the map) stay exact.
    let sum = |k: &str| words.iter().map(|l| field(l, k)).sum::<u64>();
    assert!(sum("wait_calls") < num(&s, "futex_wait"), "{s:?}");
    assert!(sum("wake_calls") < num(&s, "futex_wake"), "{s:?}");
    let ev = &rec["futex_events"];
    assert_eq!(ev["enter"], ev["exit"], "{ev}");
}

#[test]
fn a_process_named_with_an_escape_sequence_is_shown_escaped() {
    let _serial = serial();
    let dir = scratch("futex-escape-name");
    // The process name (comm) is the executable's file name: ESC [ 2 J clears a screen.
    let exe = dir.join("\u{1b}[2Jevil");
    std::fs::copy(bin(), &exe).unwrap();
    let file = dir.join("f.json");
    let out = run_ok(
        lockscope()
            .args(["record", "-n", "0", "-o"])
            .arg(&file)
            .arg("--")
            .arg(&exe)
            .args([
                "workload",
                "futex-mutex",
                "--threads",
                "2",
                "--seconds",
                "1",
            ]),
    );
    let _ = std::fs::remove_file(&exe);
    // The recording keeps the name as the kernel gave it; the text report and the CSV
    // show it escaped.
    let rec = read_json(&file);
    assert!(
        rec["locks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["comm"].as_str() == Some("\u{1b}[2Jevil")),
        "no entry of the process"
    );
    let csv = run_ok(
        lockscope()
            .args(["report", "--format", "csv", "-n", "0"])
            .arg(&file),
    );
    for (what, text) in [("report", out.stdout), ("csv", csv.stdout)] {
        let text = String::from_utf8_lossy(&text);
        assert!(
            !text.contains('\u{1b}'),
            "raw escape in the {what}:\n{text}"
        );
        assert!(
            text.contains("\\x1b[2Jevil["),
            "the name is not shown escaped in the {what}:\n{text}"
        );
    }
}

/// Record `cmd`, stopping (SIGSTOP) and continuing (SIGCONT, 300 ms later) it once at
/// each of `pauses_ms` after the previous continue (the first after its start): no
/// handler runs, so the kernel continues an interrupted timed wait or sleep through
/// `restart_syscall`. Returns the command's output and the recording.
fn record_stopped_and_continued(name: &str, cmd: &[&str], pauses_ms: &[u64]) -> (String, Value) {
    record_stopped_and_continued_with(name, &[], cmd, pauses_ms)
}

/// [`record_stopped_and_continued`] with more options for `record`.
fn record_stopped_and_continued_with(
    name: &str,
    record_args: &[&str],
    cmd: &[&str],
    pauses_ms: &[u64],
) -> (String, Value) {
    let dir = scratch(name);
    let file = dir.join("restart.json");
    let child = lockscope()
        .arg("record")
        .args(record_args)
        .arg("-o")
        .arg(&file)
        .arg("--")
        .args(cmd)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // record launches the command once its probes are attached.
    let record_pid = child.id();
    let command = loop {
        if let Some(&p) = children_of(record_pid).first() {
            break p;
        }
        assert!(
            running(record_pid),
            "record ended before its command started"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let signal = |sig: i32| {
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(command as i32, sig) };
    };
    for &pause in pauses_ms {
        std::thread::sleep(std::time::Duration::from_millis(pause));
        signal(libc::SIGSTOP);
        std::thread::sleep(std::time::Duration::from_millis(300));
        signal(libc::SIGCONT);
    }
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{out:?}");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        read_json(&file),
    )
}

/// `futex-timed-wait` (two 1.5 s waits, to their timeout) recorded with `record_args`,
/// stopped and continued 0.5 s into each wait: the workload's own counts, the recording
/// and its word's entry.
fn timed_waits_stopped(name: &str, record_args: &[&str]) -> (Value, Value, Value) {
    let (stdout, rec) = record_stopped_and_continued_with(
        name,
        record_args,
        &[
            bin(),
            "workload",
            "futex-timed-wait",
            "--waits",
            "2",
            "--ms",
            "1500",
            "--json",
        ],
        // Once inside each of the two waits (0 - 1.5 s, 1.5 - 3 s).
        &[500, 1200],
    );
    let own: Value = stdout
        .lines()
        .find_map(|l| {
            serde_json::from_str(l)
                .ok()
                .filter(|v: &Value| v["workload"] == "futex-timed-wait")
        })
        .unwrap_or_else(|| panic!("the workload's counts in {stdout}"));
    assert_eq!(own["timeouts"], 2, "both waits ran to their timeout: {own}");
    let l = rec["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["addr"] == own["lock"])
        .unwrap_or_else(|| panic!("no entry for the word {}", own["lock"]))
        .clone();
    (own, rec, l)
}

/// A timed wait stopped and continued mid-way is continued by the kernel through
/// `restart_syscall`: still one call, paired across the restart, its restart counted and
/// its outcome (the timeout) the workload's own.
#[test]
fn a_timed_wait_continued_by_restart_syscall_is_one_call() {
    let _serial = serial();
    let (_, rec, l) = timed_waits_stopped("futex-restart", &[]);
    assert_nothing_lost_in_futex(&rec);
    let ev = &rec["futex_events"];
    assert_eq!(ev["restarts"], 2, "each wait continued once: {ev}");
    assert_eq!(ev["restart_abandoned"], 0, "{ev}");
    assert_eq!(field(&l, "wait_calls"), 2, "{l}");
    assert_eq!(field(&l, "timeouts"), 2, "{l}");
    assert_eq!(field(&l, "restarts"), 2, "{l}");
}

/// `restart_syscall` also continues sleeps: the exit of one that continues no futex call
/// is not a futex exit (no unpaired exit, no restart).
#[test]
fn a_sleep_continued_by_restart_syscall_is_not_a_futex_call() {
    let _serial = serial();
    let (_, rec) = record_stopped_and_continued("futex-restart-sleep", &["sleep", "1.5"], &[500]);
    assert_nothing_lost_in_futex(&rec);
    let ev = &rec["futex_events"];
    assert_eq!(ev["restarts"], 0, "{ev}");
}

/// `record --futex-mode blocking -- lockscope workload ARGS`: its summary, the entry of
/// its lock and the recording.
fn record_blocking(name: &str, args: &[&str]) -> (BTreeMap<String, String>, Value, Value) {
    let (out, rec, _) = record_workload_with(name, &["--futex-mode", "blocking"], args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("futex: blocking mode"), "said: {stderr}");
    let s = summary(&stdout);
    let entry = lock_of(&rec, &s, &stdout);
    let ev = &rec["futex_events"];
    assert_eq!(ev["blocking"], true, "{ev}");
    // Every sleep that began was accounted, but for the rare one whose thread was not
    // seen switched in (counted, never silent).
    let (enter, exit) = (ev["enter"].as_u64().unwrap(), ev["exit"].as_u64().unwrap());
    let unpaired = ev["unpaired_enter"].as_u64().unwrap();
    assert_eq!(
        enter,
        exit + unpaired + ev["in_progress_at_end"].as_u64().unwrap(),
        "{ev}"
    );
    assert!(unpaired <= enter / 100, "{ev}");
    (s, entry, rec)
}

/// Blocking mode sees the futex waits that slept, from the context switch: no syscall
/// tracepoint, so no wake, no EAGAIN and no call that did not block is seen. Against the
/// workload's own counts: a wait that slept returned 0 (`futex_wait - eagain -
/// interrupted`); a few of those were woken before they were switched out (no sleep),
/// and a call may sleep twice, so the sleeps are close to that count, not equal.
#[test]
fn blocking_mode_counts_the_waits_that_slept() {
    let _serial = serial();
    let (s, l, _) = record_blocking("futex-blocking", &contended("futex-mutex"));
    let slept = num(&s, "futex_wait") - num(&s, "eagain") - num(&s, "interrupted");
    assert!(slept >= 50, "too few waits slept: {s:?}");
    let sleeps = field(&l, "wait_calls");
    assert!(
        sleeps * 10 >= slept * 8 && sleeps <= slept + slept / 20 + 2,
        "{sleeps} sleeps against {slept} waits that slept: {s:?} {l}"
    );
    // Nothing that does not sleep reaches the probe.
    assert_eq!(field(&l, "wake_calls"), 0, "{l}");
    assert_eq!(field(&l, "eagain"), 0, "{l}");
    // Each sleep is one timed wait.
    assert_eq!(l["contended"].as_u64().unwrap(), sleeps);
    assert_eq!(hist_total(&l), sleeps);

    // PI: every LOCK_PI that slept, and the owner read from the word at the sleep.
    let (s, l, _) = record_blocking(
        "futex-blocking-pi",
        &["futex-mutex", "--pi", "--threads", "4", "--seconds", "2"],
    );
    assert_eq!(l["type"], "futex-pi");
    let lock_pi = num(&s, "lock_pi");
    let sleeps = field(&l, "lock_pi_calls");
    assert!(
        sleeps >= 50 && sleeps <= lock_pi + lock_pi / 20,
        "{sleeps} sleeps against {lock_pi} LOCK_PI calls: {l}"
    );
    assert_eq!(field(&l, "unlock_pi_calls"), 0, "{l}");
    assert_pi_owner_named(&l);
}

/// Blocking mode counts a thread's sleep in a futex wait, not its other sleeps on the
/// way out of the call: a timed wait stopped (SIGSTOP) mid-way leaves the call, stops,
/// and goes on in `restart_syscall` once continued. The stop is not a wait (it would be
/// a second 300 ms sleep per wait), and the continued wait is not seen (documented):
/// one sleep per wait, from its start to the stop.
#[test]
fn blocking_mode_does_not_count_a_stop_as_a_wait() {
    let _serial = serial();
    let (_, rec, l) = timed_waits_stopped("futex-blocking-stop", &["--futex-mode", "blocking"]);
    assert_eq!(rec["futex_events"]["blocking"], true);
    assert_eq!(field(&l, "wait_calls"), 2, "one sleep per wait: {l}");
    let (min, max) = (
        l["wait_min_ns"].as_u64().unwrap(),
        l["wait_max_ns"].as_u64().unwrap(),
    );
    assert!(
        min >= 350_000_000 && max <= 700_000_000,
        "each sleep from its wait's start to the stop (~0.5 s): {l}"
    );
}

/// On x86_64 the futex probes are BPF links on the raw `sys_enter`/`sys_exit`
/// tracepoints (released at once, no perf event); where the kernel refuses those, the
/// per-syscall tracepoints count the same calls exactly, and a note says why.
#[test]
#[cfg(target_arch = "x86_64")]
fn the_raw_syscall_tracepoints_and_their_fallback_count_alike() {
    let _serial = serial();
    // What is attached while a command runs: the command lists the kernel's BPF links.
    let out = run_ok(lockscope().args(["record", "--", "bpftool", "link", "list"]));
    let links = String::from_utf8_lossy(&out.stdout);
    assert!(
        links.contains("tp 'sys_enter'") && links.contains("tp 'sys_exit'"),
        "{links}"
    );
    let out = run_ok(lockscope().args(["record", "--", "bpftool", "perf", "list"]));
    let perf = String::from_utf8_lossy(&out.stdout);
    assert!(!perf.contains("sys_enter_futex"), "{perf}");

    let file = scratch("futex-fallback").join("rec.json");
    let out = run_ok(
        lockscope()
            .env("LOCKSCOPE_TEST_UNAVAILABLE", "futex-raw")
            .arg("record")
            .arg("-o")
            .arg(&file)
            .args(["--", bin(), "workload"])
            .args(contended("futex-mutex")),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("futex-raw: not attached"), "said: {stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let rec = read_json(&file);
    let s = summary(&stdout);
    let l = lock_of(&rec, &s, &stdout);
    assert_nothing_lost_in_futex(&rec);
    assert_wait_wake_exact(&s, &l);
}
