//! rwsem acquisition modes (lock events) on the running kernel. On a kernel that refuses
//! fentry and kprobes (the tracepoint tier) queued reads/writes are exact, handoffs and
//! mmap_lock trylock failures are labelled estimates, and everything else is n/a (null),
//! never 0. Where the deep tier runs, its identities hold instead. The deep tier itself
//! is exercised in VMs by `cargo xtask vm-test`.

mod common;

use common::*;
use serde_json::Value;

fn record_churn(name: &str, extra: &[&str]) -> (Value, std::path::PathBuf) {
    let dir = scratch(name);
    let file = dir.join("rec.json");
    run_ok(
        lockscope()
            .args(["record", "-n", "3"])
            .args(extra)
            .arg("-o")
            .arg(&file)
            .args(["--", bin(), "workload", "mmap-churn", "--seconds", "2"]),
    );
    (read_json(&file), file)
}

fn entry<'a>(rec: &'a Value, lock_type: &str) -> &'a Value {
    mmap_lock_entries(rec, None)
        .into_iter()
        .find(|l| l["type"] == lock_type)
        .unwrap_or_else(|| panic!("no {lock_type} entry for the workload's mmap_lock"))
}

#[test]
fn rwsem_events_are_exact_estimated_or_na_and_never_fake_zeros() {
    let _serial = serial();
    let (rec, file) = record_churn("rwsem-events", &[]);
    let summary = &rec["rwsem_events"];
    let kinds = summary["kinds"].as_object().expect("rwsem_events.kinds");
    assert_eq!(kinds.len(), 16, "{summary}");
    let r = entry(&rec, "rwsem:R");
    let w = entry(&rec, "rwsem:W");
    let (re, we) = (&r["events"], &w["events"]);

    // Queued acquisitions are exact on every tier: one per contended wait.
    assert_eq!(kinds["rlock"], "exact");
    assert_eq!(re["rlock"].as_u64(), r["contended"].as_u64(), "{r}");
    assert_eq!(we["wlock"].as_u64(), w["contended"].as_u64(), "{w}");
    assert!(re["rlock"].as_u64().unwrap() > 0);
    // Read-side names on the R entry only, write-side on the W entry.
    assert!(re.get("wlock").is_none() && we.get("rlock").is_none());

    // An n/a event is null in the entry and in the system summary, and every null is n/a.
    for (name, kind) in kinds {
        let sys = &summary["system"][format!("rwsem_{name}")];
        assert_eq!(kind == "n/a", sys.is_null(), "{name}: {kind} vs {sys}");
        for ev in [re, we] {
            if let Some(v) = ev.get(name) {
                assert_eq!(kind == "n/a", v.is_null(), "{name}: {kind} vs {v}");
            }
        }
    }

    // The system totals are the sum over the traced locks (one process, one mm here
    // plus whatever other rwsems it touched).
    let sys_rlock = summary["system"]["rwsem_rlock"].as_u64().unwrap();
    assert!(sys_rlock >= re["rlock"].as_u64().unwrap());
    assert_nothing_lost(&summary["lost"]);

    match summary["tier"].as_str().unwrap() {
        "tracepoint" => {
            for name in [
                "rlock_steal",
                "rlock_fast",
                "opt_lock",
                "opt_fail",
                "sleep_reader",
                "wake_writer",
            ] {
                assert_eq!(kinds[name], "n/a", "{name}");
            }
            assert_eq!(kinds["rlock_handoff"], "estimate");
            assert_eq!(kinds["wlock_handoff"], "estimate");
            // The mmap_lock trylock estimate runs on every mmap_lock acquisition: only
            // on request.
            assert_eq!(kinds["trylock_fail"], "n/a");
            let (with, _) = record_churn("rwsem-events-trylocks", &["--mmap-trylocks"]);
            assert_eq!(with["rwsem_events"]["kinds"]["trylock_fail"], "estimate");
            assert!(
                entry(&with, "rwsem:R")["events"]["trylock_fail"].is_u64(),
                "{}",
                entry(&with, "rwsem:R")
            );
            assert!(re["rlock_steal"].is_null() && we["opt_lock"].is_null());
            assert!(re["rlock_handoff"].is_u64(), "{re}");
            // The report labels estimates and n/a.
            let table = String::from_utf8_lossy(
                &run_ok(lockscope().args(["report", "-n", "3"]).arg(&file)).stdout,
            )
            .into_owned();
            assert!(
                table.contains("rwsem acquisition modes (tier: tracepoint"),
                "{table}"
            );
            assert!(table.contains("rlock_steal=n/a"), "{table}");
            assert!(table.contains("rlock_handoff=~"), "{table}");
        }
        "deep" => {
            // Every write slowpath either spins to the lock or queues after failing to.
            let n = |v: &Value, k: &str| v[k].as_u64().unwrap();
            assert_eq!(
                n(we, "opt_fail"),
                n(we, "wlock") + n(we, "wlock_fail"),
                "{we}"
            );
            assert!(n(re, "rlock_steal") + n(re, "rlock_fast") > 0, "{re}");
        }
        other => panic!("unexpected rwsem tier {other}"),
    }
}
