//! pthread lock attribution on the real kernel: waits unwound at the futex syscall name
//! futex words after their pthread mutex / rwlock and the user call sites; static programs, targets that exit and
//! 10,000 threads do not break anything, and nothing is dropped without being counted.

mod common;

use std::{
    collections::BTreeMap,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::*;
use serde_json::Value;

fn locks(rec: &Value) -> &Vec<Value> {
    rec["locks"].as_array().unwrap()
}

fn lost_total(rec: &Value) -> u64 {
    rec["lost"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum()
}

/// Record `lockscope workload ARGS`; returns (workload summary, recording, record's
/// stdout, record's stderr).
fn record(name: &str, args: &[&str]) -> (BTreeMap<String, String>, Value, String, String) {
    record_with(name, &[], args)
}

/// [`record`] with more `record` options (`opts`).
fn record_with(
    name: &str,
    opts: &[&str],
    args: &[&str],
) -> (BTreeMap<String, String>, Value, String, String) {
    let (out, rec, _) = record_workload_with(name, &[&["-n", "0"], opts].concat(), args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (summary(&stdout), rec, stdout, stderr)
}

/// The recording's entry of the lock at `addr`, a pthread mutex, named after its word.
fn mutex_entry<'a>(rec: &'a Value, addr: &str, stdout: &str, stderr: &str) -> &'a Value {
    let l = locks(rec)
        .iter()
        .find(|l| l["addr"] == addr)
        .unwrap_or_else(|| panic!("no entry for {addr}:\n{stdout}\n{stderr}"));
    assert_eq!(l["type"], "pthread-mutex", "{l:#}");
    assert_eq!(l["pthread"]["kind"], "mutex");
    // glibc's mutex waits on `__lock`, its first word: the object is the word.
    assert_eq!(l["pthread"]["object"], addr);
    l
}

fn sum_callers(l: &Value, key: &str) -> u64 {
    l["callers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c[key].as_u64().unwrap())
        .sum()
}

/// The mutex entry `l`'s call sites are all the workload worker's `pthread_mutex_lock`,
/// and hold its `waits` and its whole wait time exactly.
fn assert_worker_call_sites(l: &Value, waits: u64) {
    let callers = l["callers"].as_array().unwrap();
    assert!(!callers.is_empty(), "{l:#}");
    for c in callers {
        assert!(
            c["caller"]
                .as_str()
                .unwrap()
                .contains("pthread_mutex_worker+0x"),
            "call site not symbolized to the worker: {c:#}"
        );
        assert_eq!(c["stack"][0], "pthread_mutex_lock", "{c:#}");
    }
    assert_eq!(sum_callers(l, "contended"), waits, "{l:#}");
    assert_eq!(
        sum_callers(l, "wait_total_ns"),
        l["wait_total_ns"].as_u64().unwrap(),
        "{l:#}"
    );
}

/// The mutex entry `l`'s holders are the workload's workers (never its main thread), and
/// known and unknown holders share its whole wait time exactly. (unknown, total) ns.
fn assert_worker_holders(l: &Value) -> (u64, u64) {
    let pid = l["pid"].as_u64().unwrap();
    let (owners, known, unknown, total) = holder_split(l);
    assert!(!owners.is_empty(), "{l:#}");
    assert_eq!(known + unknown, total, "{l:#}");
    for o in owners {
        assert_eq!(o["pid"].as_u64(), Some(pid), "{o}");
        assert_ne!(
            o["tid"].as_u64(),
            Some(pid),
            "the main thread holds nothing: {o}"
        );
        assert!(
            o["comm"].as_str().unwrap().starts_with("pthread-mutex-"),
            "holder is no worker: {o}"
        );
    }
    (unknown, total)
}

#[test]
fn pthread_mutex_is_named_with_the_workloads_call_site() {
    let _serial = serial();
    let (s, rec, stdout, stderr) = record("pthread-mutex-named", &contended("pthread-mutex"));
    assert_nothing_lost(&rec["lost"]);
    let addr = s["lock"].clone();
    let l = mutex_entry(&rec, &addr, &stdout, &stderr);
    assert_eq!(l["pthread"]["word_offset"], 0);
    assert!(
        l["name"]
            .as_str()
            .unwrap()
            .starts_with(&format!("pthread-mutex {addr} of lockscope[")),
        "{}",
        l["name"]
    );
    let waits = l["contended"].as_u64().unwrap();
    assert!(
        waits >= 50,
        "too little contention to prove anything: {l:#}"
    );
    // Every wait on the mutex word happens inside pthread_mutex_lock, called from the
    // workload's worker: the call sites account for every wait, exactly.
    assert_worker_call_sites(l, waits);
    // Holders: glibc's `__owner` names, when each wait began, the worker thread holding
    // the mutex. Every wait was unwound, so owners + unknown is the whole wait exactly;
    // unknown are the waits that began just as the holder released (it clears `__owner`
    // first).
    let (unknown, total) = assert_worker_holders(l);
    assert!(
        unknown as f64 <= 0.3 * total as f64,
        "holder unknown for {unknown} of {total} ns: {l:#}"
    );
    // Attributed calls: the waits plus the EAGAIN returns on the word.
    let futex = &l["futex"];
    assert_eq!(
        l["pthread"]["attributed_calls"].as_u64().unwrap(),
        futex["wait_calls"].as_u64().unwrap(),
        "{l:#}"
    );
    let ev = &rec["futex_events"]["pthread"];
    assert!(
        ev["libraries"][0].as_str().unwrap().contains("libc.so"),
        "{ev}"
    );
    assert_eq!(ev["method"], "futex-unwind", "{ev}");
    // Every wait the kernel sent was unwound, and only waits were sent: far fewer than
    // the lock calls (an uncontended call never reaches the kernel).
    assert_eq!(ev["sent"], ev["unwound"], "{ev}");
    assert!(
        ev["sent"].as_u64().unwrap() < num(&s, "ops"),
        "{ev} vs {s:?}"
    );
    assert!(ev["attributed"].as_u64().unwrap() >= futex["wait_calls"].as_u64().unwrap());
    assert_eq!(ev["site_unreadable"], 0);
    assert_eq!(ev["no_maps"], 0);
    assert_report_row_names_the_worker(&stdout, &addr);
}

/// The text report shows the mutex at `addr` by its type, with the worker's call site.
fn assert_report_row_names_the_worker(stdout: &str, addr: &str) {
    let row = stdout
        .lines()
        .find(|r| r.contains(&format!("pthread-mutex {addr}")))
        .unwrap_or_else(|| panic!("no report row:\n{stdout}"));
    assert!(row.contains("pthread_mutex_worker+0x"), "{row}");
}

/// Blocking mode sees no futex exit: the sleeper's stack is kept at its switch out and
/// sent with its wait at its switch in. The same names, call sites and holders as the
/// default mode, counted once per sleep, and every sleep's wait accounted for exactly.
#[test]
fn blocking_mode_names_pthread_mutexes_and_their_call_sites_too() {
    let _serial = serial();
    let (s, rec, stdout, stderr) = record_with(
        "pthread-mutex-blocking",
        &["--futex-mode", "blocking"],
        &contended("pthread-mutex"),
    );
    assert_nothing_lost(&rec["lost"]);
    assert_eq!(rec["futex_events"]["blocking"], true);
    let addr = s["lock"].clone();
    let l = mutex_entry(&rec, &addr, &stdout, &stderr);
    let sleeps = l["contended"].as_u64().unwrap();
    assert!(
        sleeps >= 50,
        "too little contention to prove anything: {l:#}"
    );
    // Every sleep on the word is inside pthread_mutex_lock, called from the worker; the
    // call sites hold every sleep and every nanosecond of the word's waits.
    assert_worker_call_sites(l, sleeps);
    assert_eq!(
        l["pthread"]["attributed_calls"].as_u64().unwrap(),
        sleeps,
        "{l:#}"
    );
    // Holders: glibc's `__owner` as each sleep began names a worker.
    assert_worker_holders(l);
    // Every sleep that ended was sent (or counted at a site known not to be a lock's),
    // and every one sent was unwound.
    let ev = &rec["futex_events"]["pthread"];
    assert_eq!(ev["method"], "futex-unwind", "{ev}");
    assert_eq!(ev["sent"], ev["unwound"], "{ev}");
    assert_eq!(
        ev["sent"].as_u64().unwrap() + ev["skipped"].as_u64().unwrap(),
        rec["futex_events"]["exit"].as_u64().unwrap(),
        "{ev} vs {}",
        rec["futex_events"]
    );
    assert_eq!(ev["site_unreadable"], 0, "{ev}");
    assert_report_row_names_the_worker(&stdout, &addr);
}

#[test]
fn pthread_rwlock_words_are_named_after_the_rwlock() {
    let _serial = serial();
    let args = [
        &contended("pthread-mutex")[..],
        &["--rwlock", "--read-pct", "50"],
    ]
    .concat();
    let (s, rec, stdout, _) = record("pthread-rwlock", &args);
    assert_nothing_lost(&rec["lost"]);
    let addr = s["lock"].clone();
    let words: Vec<&Value> = locks(&rec)
        .iter()
        .filter(|l| l["pthread"]["object"] == addr.as_str())
        .collect();
    assert!(!words.is_empty(), "no word of rwlock {addr}:\n{stdout}");
    let mut sites = Vec::new();
    for l in &words {
        assert_eq!(l["type"], "pthread-rwlock", "{l:#}");
        assert_eq!(l["pthread"]["kind"], "rwlock");
        // glibc's rwlock waits on words inside the 56-byte object.
        assert!(l["pthread"]["word_offset"].as_u64().unwrap() < 56, "{l:#}");
        for c in l["callers"].as_array().unwrap() {
            sites.push(c["caller"].as_str().unwrap().to_owned());
        }
    }
    assert!(
        sites
            .iter()
            .any(|c| c.contains("pthread_rwlock_writer+0x")
                || c.contains("pthread_rwlock_reader+0x")),
        "{sites:?}"
    );
}

const STATIC_PROGRAM: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <time.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static volatile unsigned long shared;

static void *worker(void *arg) {
    struct timespec end, now;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += 1;
    do {
        pthread_mutex_lock(&m);
        for (int i = 0; i < 300; i++) shared++;
        pthread_mutex_unlock(&m);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (now.tv_sec < end.tv_sec || (now.tv_sec == end.tv_sec && now.tv_nsec < end.tv_nsec));
    return arg;
}

int main(void) {
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    printf("lock: %p\n", (void *)&m);
    return 0;
}
"#;

/// The C contender (`STATIC_PROGRAM`) built in `dir` as `name`, with extra `cc` flags.
fn compile_contender(dir: &std::path::Path, name: &str, flags: &[&str]) -> std::path::PathBuf {
    let src = dir.join("contend.c");
    let exe = dir.join(name);
    std::fs::write(&src, STATIC_PROGRAM).unwrap();
    run_ok(
        Command::new("cc")
            .args(flags)
            .args(["-O1", "-pthread", "-o"])
            .arg(&exe)
            .arg(&src),
    );
    exe
}

/// `record -o` of `exe`: the recording's path and record's output.
fn record_program(
    dir: &std::path::Path,
    exe: &std::path::Path,
) -> (std::path::PathBuf, std::process::Output) {
    let file = dir.join("f.json");
    let out = run_ok(
        lockscope()
            .args(["record", "-o"])
            .arg(&file)
            .arg("--")
            .arg(exe),
    );
    (file, out)
}

#[test]
fn a_static_program_falls_back_to_futex_addresses_with_a_note() {
    let _serial = serial();
    let dir = scratch("pthread-static");
    let exe = compile_contender(&dir, "contend-static", &["-static"]);
    let (file, out) = record_program(&dir, &exe);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let note = stderr
        .lines()
        .find(|l| l.contains("statically linked"))
        .unwrap_or_else(|| panic!("no note on stderr:\n{stderr}"));
    assert!(note.starts_with("lockscope: note: "), "{note}");
    let rec = read_json(&file);
    assert_nothing_lost(&rec["lost"]);
    let notes = rec["futex_events"]["pthread"]["notes"].as_array().unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().unwrap().contains("statically linked")),
        "{notes:?}"
    );
    // The mutex is still recorded, as a futex word named by its address.
    let addr = summary(&stdout)["lock"].clone();
    let l = locks(&rec)
        .iter()
        .find(|l| l["addr"] == addr.as_str())
        .unwrap_or_else(|| panic!("no entry for {addr}:\n{stdout}"));
    assert_eq!(l["type"], "futex", "{l:#}");
    assert!(l.get("pthread").is_none());
    assert!(l["futex"]["wait_calls"].as_u64().unwrap() > 0, "{l:#}");
    assert_eq!(rec["futex_events"]["pthread"]["attributed"], 0);
}

#[test]
fn a_pid_that_exits_mid_trace_keeps_its_data() {
    let _serial = serial();
    let dir = scratch("pthread-pid-exit");
    let file = dir.join("f.json");
    let target = Command::new(bin())
        .args([
            "workload",
            "pthread-mutex",
            "--threads",
            "4",
            // Long enough to outlast loading the probes on a busy machine (seconds).
            "--seconds",
            "10",
            "--load",
            "300",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = target.id();
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    let out = run_ok(
        lockscope()
            .args(["record", "-d", "300", "--pid", &pid.to_string(), "-o"])
            .arg(&file),
    );
    let took = t0.elapsed();
    let target_out = target.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // record stops when its target is gone, long before -d, and says so.
    assert!(took < Duration::from_secs(120), "record ran {took:?}");
    assert!(
        stderr.contains(&format!("lockscope: note: pid {pid} exited after")),
        "{stderr}"
    );
    let rec = read_json(&file);
    for k in [
        "futex_call_map_full",
        "futex_stats_map_full",
        "futex_stats_evicted",
        "pthread_ring_full",
        "pthread_site_map_full",
    ] {
        assert_eq!(rec["lost"][k], 0, "{:#}", rec["lost"]);
    }
    let addr = summary(&String::from_utf8_lossy(&target_out.stdout))["lock"].clone();
    let l = locks(&rec)
        .iter()
        .find(|l| l["addr"] == addr.as_str())
        .unwrap_or_else(|| panic!("no entry for {addr}: {rec:#}"));
    assert_eq!(l["type"], "pthread-mutex", "{l:#}");
    assert_eq!(l["pid"].as_u64(), Some(pid as u64));
    assert!(l["contended"].as_u64().unwrap() > 0);
    // Named after the process exited: its maps were read while it lived.
    assert!(
        l["callers"][0]["caller"]
            .as_str()
            .unwrap()
            .contains("pthread_mutex_worker+0x"),
        "{l:#}"
    );
}

#[test]
fn ten_thousand_threads_nothing_silently_dropped() {
    let _serial = serial();
    let (s, rec, stdout, stderr) = record(
        "pthread-10k",
        &[
            "futex-mutex",
            "--threads",
            "10000",
            "--seconds",
            "3",
            "--load",
            "300",
        ],
    );
    let addr = s
        .get("lock")
        .unwrap_or_else(|| panic!("workload failed:\n{stdout}\n{stderr}"))
        .clone();
    let l = locks(&rec)
        .iter()
        .find(|l| l["addr"] == addr.as_str())
        .unwrap_or_else(|| panic!("no entry for {addr}"));
    let f = &l["futex"];
    let lost = lost_total(&rec);
    // What lockscope stored plus what it counted as lost covers the workload's own
    // counts; with nothing lost they are equal.
    for (ours, theirs) in [
        ("wait_calls", "futex_wait"),
        ("eagain", "eagain"),
        ("wake_calls", "futex_wake"),
    ] {
        let got = f[ours].as_u64().unwrap();
        let want = num(&s, theirs);
        assert!(got <= want, "{ours}: {got} > workload's {want}");
        assert!(
            got + lost >= want,
            "{ours}: {got} + lost {lost} < workload's {want}: {:#}",
            rec["lost"]
        );
        if lost == 0 {
            assert_eq!(got, want, "{ours}");
        }
    }
    assert!(num(&s, "futex_wait") > 1000, "{s:?}");
    let ev = &rec["futex_events"];
    assert_eq!(ev["enter"], ev["exit"], "{ev}");
    assert_eq!(ev["in_progress_at_end"], 0, "{ev}");
}

/// A stripped program's call sites have no symbol: they are shown as the file and the
/// offset in it (what `addr2line -e` takes with the program's debug file), not as bare
/// addresses.
#[test]
fn a_stripped_programs_call_sites_are_file_and_offset() {
    let _serial = serial();
    let dir = scratch("pthread-stripped");
    let exe = compile_contender(&dir, "contend-stripped", &[]);
    // Before stripping: an unstripped copy, and a debug file as distributions ship them.
    let (copy, debug) = (dir.join("copy"), dir.join("debug"));
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::create_dir_all(&debug).unwrap();
    std::fs::copy(&exe, copy.join("contend-stripped")).unwrap();
    run_ok(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&exe)
            .arg(debug.join("contend-stripped.debug")),
    );
    run_ok(Command::new("strip").arg(&exe));
    let (file, out) = record_program(&dir, &exe);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let rec = read_json(&file);
    let addr = summary(&stdout)["lock"].clone();
    let l = locks(&rec)
        .iter()
        .find(|l| l["addr"] == addr.as_str())
        .unwrap_or_else(|| panic!("no entry for {addr}:\n{stdout}"));
    assert_eq!(l["type"], "pthread-mutex", "{l:#}");
    let callers = l["callers"].as_array().unwrap();
    assert!(!callers.is_empty(), "{l:#}");
    for c in callers {
        let name = c["caller"].as_str().unwrap();
        let off = name
            .strip_prefix("contend-stripped+0x")
            .unwrap_or_else(|| panic!("not file+offset: {name}"));
        assert!(u64::from_str_radix(off, 16).is_ok(), "{name}");
    }
    // `report --debug-dir` names them from either: the C worker that took the mutex.
    for d in [&copy, &debug] {
        let out = run_ok(
            lockscope()
                .args(["report", "--format", "json", "--debug-dir"])
                .arg(d)
                .arg(&file),
        );
        let named: Value = serde_json::from_slice(&out.stdout).unwrap();
        let l = locks(&named)
            .iter()
            .find(|l| l["addr"] == addr.as_str())
            .unwrap();
        for c in l["callers"].as_array().unwrap() {
            let name = c["caller"].as_str().unwrap();
            assert!(name.starts_with("worker+0x"), "{name} from {}", d.display());
            assert_eq!(c["stack"][1], name, "{c}");
        }
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
