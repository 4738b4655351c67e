//! Per-cgroup attribution against the real kernel: a workload started in a cgroup the
//! test creates is counted under that cgroup, exactly as the workload counts itself, and
//! its neighbour outside is not.

mod common;

use common::*;
use serde_json::Value;

fn entries<'a>(rec: &'a Value, cgroup: &str) -> Vec<&'a Value> {
    rec["cgroups"]
        .as_array()
        .expect("a cgroups array")
        .iter()
        .filter(|e| e["cgroup"] == cgroup)
        .collect()
}

fn sum(values: &[&Value], key: &str) -> u64 {
    values.iter().map(|v| v[key].as_u64().unwrap()).sum()
}

#[test]
fn record_counts_each_process_under_its_cgroup() {
    let _serial = serial();
    let dir = scratch("cgroup-record");
    let cg = TestCgroup::create("record");
    let (inner, outer) = (dir.join("inner.out"), dir.join("outer.out"));
    let workload = |out: &std::path::Path| {
        format!(
            "'{}' workload futex-mutex --threads 4 --seconds 2 --load 300 > '{}'",
            bin(),
            out.display()
        )
    };
    let script = format!(
        "sh -c \"{}\" & {}; wait",
        cg.enter_then(&workload(&inner)).replace('"', "\\\""),
        workload(&outer)
    );
    let file = dir.join("rec.json");
    run_ok(
        lockscope()
            .args(["record", "-o"])
            .arg(&file)
            .args(["--", "sh", "-c", &script]),
    );
    let rec = read_json(&file);
    assert_nothing_lost(&rec["lost"]);
    let s_in = summary(&std::fs::read_to_string(&inner).unwrap());
    let s_out = summary(&std::fs::read_to_string(&outer).unwrap());

    let mine = entries(&rec, &cg.name);
    let futex: Vec<&Value> = mine
        .iter()
        .copied()
        .filter(|e| e["type"] == "futex")
        .collect();
    let slept = num(&s_in, "futex_wait") - num(&s_in, "eagain") - num(&s_in, "interrupted");
    assert!(slept > 0, "{s_in:?}");

    // The futex words of each workload carry its cgroup; the outer one is elsewhere.
    let locks = rec["locks"].as_array().unwrap();
    let word = |s: &std::collections::BTreeMap<String, String>| {
        locks
            .iter()
            .find(|l| l["addr"] == s["lock"].as_str() && l.get("futex").is_some())
            .unwrap_or_else(|| panic!("no entry for {s:?}"))
    };
    let (w_in, w_out) = (word(&s_in), word(&s_out));
    assert_eq!(w_in["tasks"][0]["cgroup"], cg.name.as_str(), "{w_in:#}");
    assert_ne!(w_out["tasks"][0]["cgroup"], cg.name.as_str(), "{w_out:#}");
    assert_ne!(w_in["pid"], w_out["pid"]);
    // The workload's own word, as it counts it itself; its other futex waits (thread
    // start and join) are the cgroup's too.
    assert_eq!(w_in["contended"].as_u64(), Some(slept), "{w_in:#}");
    let words_in: u64 = locks
        .iter()
        .filter(|l| l.get("futex").is_some() && l["type"] == "futex")
        .filter(|l| l["tasks"][0]["cgroup"] == cg.name.as_str())
        .map(|l| l["contended"].as_u64().unwrap())
        .sum();
    assert_eq!(sum(&futex, "contended"), words_in, "{:#}", rec["cgroups"]);

    // Every wait of the cgroup's process, kernel and user-space, and nothing else.
    let of_tasks: u64 = locks
        .iter()
        .flat_map(|l| l["tasks"].as_array().unwrap())
        .filter(|t| t["cgroup"] == cg.name.as_str())
        .map(|t| t["contended"].as_u64().unwrap())
        .sum();
    assert_eq!(sum(&mine, "contended"), of_tasks);
    let all_cgroups: u64 = rec["cgroups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["contended"].as_u64().unwrap())
        .sum();
    let all_locks: u64 = locks
        .iter()
        .filter(|l| l.get("spin").is_none())
        .map(|l| l["contended"].as_u64().unwrap())
        .sum();
    assert_eq!(
        all_cgroups, all_locks,
        "every wait under exactly one cgroup"
    );

    // The report groups by cgroup with the same figure: cgroup, "types", addr, contended.
    let out = run_ok(
        lockscope()
            .args(["report", "--by", "cgroup", "--format", "csv"])
            .arg(&file),
    );
    let csv = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(csv.starts_with("cgroup,type,addr,contended,"), "{csv}");
    let row = csv
        .lines()
        .find(|l| l.starts_with(&format!("{},", cg.name)))
        .unwrap_or_else(|| panic!("no row for {}:\n{csv}", cg.name));
    // Several types are one quoted cell.
    let contended: u64 = match row.split_once("\",") {
        Some((_, rest)) => rest.split(',').nth(1),
        None => row.split(',').nth(3),
    }
    .unwrap()
    .parse()
    .unwrap();
    assert_eq!(contended, sum(&mine, "contended"), "{row}");

    // A recording from before cgroup attribution: a clear error, not an empty table.
    let mut old = rec.clone();
    old.as_object_mut().unwrap().remove("cgroups");
    let old_file = dir.join("old.json");
    std::fs::write(&old_file, serde_json::to_string(&old).unwrap()).unwrap();
    let out = lockscope()
        .args(["report", "--by", "cgroup"])
        .arg(&old_file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has no cgroups"), "{err}");
}
