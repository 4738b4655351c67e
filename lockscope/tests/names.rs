//! Lock names in a mix of the kernel's busiest dynamic locks, system-wide: an mmap storm,
//! a pipe, a tmpfs file written by two threads, and stress-ng (fork, flock, pipe, mmap).

mod common;

use std::process::{Command, Stdio};

use common::*;

/// Of the 20 dynamic locks (not in the kernel image) with the most wait, at least 18
/// have a name (not a bare address).
#[test]
fn the_busiest_dynamic_locks_of_a_mix_are_named() {
    let _serial = serial();
    let file = scratch("names-mix").join("rec.json");
    let spawn = |args: &[&str]| {
        Command::new(bin())
            .arg("workload")
            .args(args)
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut record = lockscope()
        .args(["record", "-a", "-d", "6", "-n", "0", "-o"])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let mut load = vec![
        spawn(&["mmap-churn", "--seconds", "4"]),
        spawn(&["pipe-mutex", "--seconds", "4"]),
        spawn(&["file-write", "--seconds", "4"]),
    ];
    if let Ok(c) = Command::new("stress-ng")
        .args([
            "--fork", "1", "--flock", "1", "--pipe", "1", "--mmap", "1", "-t", "4", "-q",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        load.push(c);
    }
    for mut c in load {
        c.wait().unwrap();
    }
    assert!(record.wait().unwrap().success());
    let rec = read_json(&file);
    let mut dynamic: Vec<&serde_json::Value> = rec["locks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| {
            let t = l["type"].as_str().unwrap();
            let addr = lock_address(l);
            t != "futex" && !t.starts_with("pthread") && addr < 0xffff_ffff_8000_0000
        })
        .collect();
    dynamic.sort_by_key(|l| std::cmp::Reverse(l["wait_total_ns"].as_u64().unwrap()));
    let top: Vec<&str> = dynamic
        .iter()
        .take(20)
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(top.len(), 20, "{top:#?}");
    let bare = top.iter().filter(|n| n.starts_with("0x")).count();
    assert!(bare <= 2, "{bare} of the top 20 unnamed: {top:#?}");
}

/// Processes run one after another reuse each other's freed `mm_struct`s: each
/// process's `mmap_lock` has entries of its own (the address's owner generations,
/// `0x.../1`, ...), named after it and holding its own waits only: a name is never
/// someone else's, and no process's waits land in another's entry.
#[test]
fn an_mmap_lock_whose_memory_a_later_process_reuses_gets_an_entry_per_process() {
    let _serial = serial();
    let file = scratch("names-reuse").join("rec.json");
    let me = bin();
    let script = format!(
        "for i in 1 2 3 4 5 6 7 8 9 10; do '{me}' workload mmap-churn --threads 4 \
         --seconds 0.3 >/dev/null; done"
    );
    record_script(&file, &script);
    let rec = read_json(&file);
    assert_eq!(rec["lost"]["lock_gen_map_full"], 0, "{:#}", rec["lost"]);
    // Address -> the processes its mmap_lock entries are named after.
    let mut owners: std::collections::BTreeMap<String, std::collections::BTreeSet<u64>> =
        Default::default();
    let mut later_generations = 0;
    for l in rec["locks"].as_array().unwrap() {
        let name = l["name"].as_str().unwrap_or_default();
        let Some(rest) = name
            .strip_prefix("mmap_lock of lockscope[")
            .or_else(|| name.strip_prefix("mmap_lock.wait_lock of lockscope["))
        else {
            continue;
        };
        assert!(!name.contains("then other"), "{name}");
        let pid: u64 = rest.split(']').next().unwrap().parse().unwrap();
        let pids: Vec<u64> = l["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["pid"].as_u64().unwrap())
            .collect();
        assert_eq!(pids, [pid], "{name} at {}: waiters {pids:?}", l["addr"]);
        let addr = l["addr"].as_str().unwrap();
        later_generations += usize::from(addr.contains('/'));
        let base = addr.split('/').next().unwrap().to_owned();
        owners.entry(base).or_default().insert(pid);
    }
    // Ten processes in a row on two CPUs: SLUB hands a freed mm_struct to the next fork.
    let shared = owners.values().filter(|p| p.len() > 1).count();
    assert!(
        shared > 0 && later_generations > 0,
        "no mm_struct address was reused: {owners:?}"
    );
}
