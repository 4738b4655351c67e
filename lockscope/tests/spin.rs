//! The deep spinlock tier (pi_lock waits, holds, starvation detector) on the running
//! kernel. Where fentry and kprobes are refused (these machines) it must say so in
//! `doctor` and in the recording, and add nothing; where it runs, the workload's victim
//! pi_lock must carry exact figures. The deep tier itself is exercised in VMs by
//! `cargo xtask vm-test` (6.1, 6.12, 6.12-rt).

mod common;

use common::*;

#[test]
fn doctor_names_the_deep_spinlock_tier_and_why() {
    let _serial = serial();
    let out = run_ok(lockscope().arg("doctor"));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("deep spinlock tier: "))
        .unwrap_or_else(|| panic!("no deep spinlock tier line:\n{text}"));
    assert!(text.contains("native_queued_spin_lock_slowpath"), "{text}");
    if line.contains("unavailable") {
        // The reason is the kernel's: fentry refused, kprobes missing, or the like.
        assert!(line.contains("fentry") || line.contains("kprobe"), "{line}");
    }
}

#[test]
fn pi_contend_recording_reports_the_tier_and_counts_its_calls() {
    let _serial = serial();
    let dir = scratch("spin");
    let file = dir.join("rec.json");
    let out = run_ok(
        lockscope()
            .args(["record", "-n", "3", "--starvation-threshold", "20us", "-o"])
            .arg(&file)
            .args([
                "--",
                bin(),
                "workload",
                "pi-contend",
                "--threads",
                "2",
                "--seconds",
                "1",
            ]),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let calls: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("pi_lock_calls: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pi_lock_calls in:\n{stdout}"));
    assert!(calls > 0);
    let rec = read_json(&file);
    let spin = &rec["spin"];
    let locks = rec["locks"].as_array().unwrap();
    match spin["tier"].as_str().unwrap() {
        "unavailable" => {
            assert!(
                spin["unavailable"].as_str().is_some_and(|s| !s.is_empty()),
                "{spin}"
            );
            assert!(locks.iter().all(|l| l.get("tier").is_none()));
            assert!(rec.get("starvation_episodes").is_none());
        }
        "deep" => {
            assert_eq!(spin["threshold_ns"], 20_000);
            let tid = stdout
                .lines()
                .find_map(|l| l.strip_prefix("victim_tid: "))
                .unwrap()
                .trim()
                .to_owned();
            let name = format!("pi_lock of pi-victim[{tid}]");
            let victim = locks
                .iter()
                .find(|l| l["name"] == name.as_str())
                .unwrap_or_else(|| panic!("no entry {name}"));
            if spin["hold"] == "exact" {
                assert!(victim["hold"]["contended"].as_u64().unwrap() >= calls);
            } else {
                assert!(victim["hold"].is_null());
            }
            assert!(
                locks
                    .iter()
                    .filter(|l| l["tier"] == "deep")
                    .all(|l| l["owner"]["field"] == "pi_lock")
            );
        }
        other => panic!("unexpected spin tier {other}"),
    }
}
