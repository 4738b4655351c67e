//! Bad input: each case is one clear line on stderr, a non-zero exit, no panic, and no
//! program left attached.

mod common;

use std::process::{Command, Output};

use common::*;

fn assert_clean_failure(out: &Output, expect: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "should fail: {stderr}");
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line expected: {stderr}");
    assert!(lines[0].starts_with("lockscope: "), "{stderr}");
    assert!(
        lines[0].contains(expect),
        "expected `{expect}` in: {stderr}"
    );
}

#[test]
fn bad_input_fails_clearly_and_leaves_nothing_attached() {
    let _serial = serial();
    let watch = ProgramWatch::start();
    let dir = scratch("errors");

    // Unknown pid.
    let out = lockscope()
        .args(["record", "-d", "1", "--pid", "999999999"])
        .output()
        .unwrap();
    assert_clean_failure(&out, "no process with pid 999999999");

    // Missing command.
    let out = lockscope()
        .args(["record", "--", "no-such-command-lockscope"])
        .output()
        .unwrap();
    assert_clean_failure(&out, "cannot run `no-such-command-lockscope`");

    // Unknown lock type.
    let out = lockscope()
        .args(["record", "-d", "1", "--types", "rwsem,bogus"])
        .output()
        .unwrap();
    assert_clean_failure(&out, "unknown lock type `bogus`");

    // Tracefs absent.
    let out = lockscope()
        .env("LOCKSCOPE_TRACEFS", dir.join("no-tracefs"))
        .args(["record", "-d", "1"])
        .output()
        .unwrap();
    assert_clean_failure(&out, "tracefs is not available");

    // Not root: drop every privilege.
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .args([bin(), "record", "-d", "1"])
        .output()
        .expect("setpriv (util-linux)");
    assert_clean_failure(&out, "needs root, or CAP_BPF and CAP_PERFMON");

    // Unreadable, malformed and newer-schema files.
    let out = lockscope()
        .arg("report")
        .arg(dir.join("missing.json"))
        .output()
        .unwrap();
    assert_clean_failure(&out, "cannot read");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{ not json").unwrap();
    let out = lockscope().arg("report").arg(&bad).output().unwrap();
    assert_clean_failure(&out, "not a lockscope recording");
    std::fs::write(&bad, r#"{"schema":"lockscope.report/9","locks":[]}"#).unwrap();
    let out = lockscope().arg("report").arg(&bad).output().unwrap();
    assert_clean_failure(&out, "schema version 9");
    std::fs::write(&bad, r#"{"schema":"lockscope.report/1","locks":"x"}"#).unwrap();
    let out = lockscope().arg("report").arg(&bad).output().unwrap();
    assert_clean_failure(&out, "malformed lockscope recording");

    watch.assert_none_left();
}

#[test]
fn command_exit_code_passes_through_and_probes_detach() {
    let _serial = serial();
    let watch = ProgramWatch::start();
    let out = lockscope()
        .args(["record", "--", "sh", "-c", "echo hello-from-cmd; exit 7"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("hello-from-cmd\n"), "{stdout}");
    watch.assert_none_left();
}

#[test]
fn report_rerenders_a_recording_in_every_format() {
    let _serial = serial();
    let dir = scratch("report");
    let file = dir.join("rec.json");
    run_ok(lockscope().args(["record", "-o"]).arg(&file).args([
        "--",
        bin(),
        "workload",
        "mmap-churn",
        "--seconds",
        "1",
    ]));
    let table = run_ok(lockscope().arg("report").arg(&file).args(["--by", "type"]));
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("rwsem:R") && table.contains("tier: tracepoint"),
        "{table}"
    );
    let csv = run_ok(
        lockscope()
            .arg("report")
            .arg(&file)
            .args(["--format", "csv", "-n", "0"]),
    );
    let csv = String::from_utf8_lossy(&csv.stdout);
    let rec = read_json(&file);
    assert_eq!(
        csv.lines().count(),
        1 + rec["locks"].as_array().unwrap().len()
    );
    let json = run_ok(
        lockscope()
            .arg("report")
            .arg(&file)
            .args(["--format", "json"]),
    );
    let back: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(back, rec);
}

/// The exit statuses the help documents are the ones lockscope returns.
#[test]
fn exit_statuses_are_as_documented() {
    let _serial = serial();
    let help = String::from_utf8(run_ok(lockscope().arg("--help")).stdout).unwrap();
    assert!(help.contains("Exit status:"), "{help}");
    let code = |args: &[&str]| lockscope().args(args).output().unwrap().status.code();
    assert_eq!(code(&["--no-such-option"]), Some(2));
    assert_eq!(code(&["report", "/nonexistent/lockscope.json"]), Some(1));
    assert_eq!(code(&["record", "--", "sh", "-c", "exit 7"]), Some(7));
    assert_eq!(
        code(&["record", "--", "sh", "-c", "kill -TERM $$"]),
        Some(128 + 15)
    );
}
