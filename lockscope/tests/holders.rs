//! Lock holders and names, against workloads that know them: who held a rwsem
//! (`mmap-holders`), a kernel mutex (`fpos-holders`, `pipe-mutex`) and a glibc mutex
//! (`mutex-holders`) during each wait, by thread; a thread's `pi_lock` and each CPU's
//! runqueue lock named.

mod common;

use common::*;

fn field(stdout: &str, key: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in:\n{stdout}"))
}

/// The holders of `entry` account for its wait with at most 5% unknown, and thread
/// `long` (`holder-long`) is blamed for at least `share` of it: the owners, the long one
/// first.
fn long_holder_blamed(entry: &serde_json::Value, long: u64, share: f64) -> &Vec<serde_json::Value> {
    let (owners, known, unknown, total) = holder_split(entry);
    assert_eq!(known + unknown, total, "{entry}");
    assert!(
        unknown as f64 <= 0.05 * total as f64,
        "holder unknown for {unknown} of {total} ns: {entry}"
    );
    let top = &owners[0];
    assert_eq!(top["tid"].as_u64(), Some(long), "{entry}");
    assert_eq!(top["comm"], "holder-long", "{entry}");
    assert!(
        top["wait_total_ns"].as_u64().unwrap() as f64 >= share * total as f64,
        "the long holder holds only {} of {total} ns: {entry}",
        top["wait_total_ns"]
    );
    owners
}

#[test]
fn the_long_holder_is_blamed_for_the_waits_of_the_other() {
    let _serial = serial();
    let (stdout, rec, file) =
        record_workload_file("holders", &["mmap-holders", "--seconds", "2", "--one-cpu"]);
    let (pid, long, short) = (
        field(&stdout, "pid:"),
        field(&stdout, "long_tid:"),
        field(&stdout, "short_tid:"),
    );
    let w = mmap_lock_entries(&rec, Some(pid))
        .into_iter()
        .find(|l| l["type"] == "rwsem:W")
        .unwrap_or_else(|| panic!("no rwsem:W mmap_lock entry for pid {pid}"));
    assert!(w["contended"].as_u64().unwrap() >= 20, "{w}");
    // Every nanosecond of wait is either some holder's or unknown.
    let owners = long_holder_blamed(w, long, 0.8);
    let top = &owners[0];
    assert_eq!(top["pid"].as_u64(), Some(pid), "{w}");
    // Its kernel stack, taken when a wait first found it holding (Linux 6.2+): inside
    // the mprotect that holds the lock for write.
    let stack: Vec<&str> = top["stack"]
        .as_array()
        .map(|s| s.iter().map(|f| f.as_str().unwrap()).collect())
        .unwrap_or_default();
    if kallsyms_has("bpf_task_from_pid") {
        assert!(
            stack.iter().any(|f| f.starts_with("do_mprotect_pkey+")),
            "holder-long's stack: {stack:?}"
        );
        let html = file.with_extension("html");
        run_ok(
            lockscope()
                .args(["report", "--format", "html", "-o"])
                .arg(&html)
                .arg(&file),
        );
        assert!(
            std::fs::read_to_string(&html)
                .unwrap()
                .contains("id=\"ownerstacks\"")
        );
    } else {
        assert!(stack.is_empty(), "{stack:?}");
    }
    // The short holder's holds are the long holder's (shorter) waits.
    if let Some(s) = owners.iter().find(|o| o["tid"].as_u64() == Some(short)) {
        assert_eq!(s["comm"], "holder-short", "{w}");
        assert!(s["wait_total_ns"].as_u64() < top["wait_total_ns"].as_u64());
    }

    let table = String::from_utf8_lossy(
        &run_ok(lockscope().args(["report", "--by", "owner"]).arg(&file)).stdout,
    )
    .into_owned();
    let first = table.lines().nth(1).unwrap_or_default();
    assert!(
        first.contains(&format!("holder-long[{pid}]/{long}")),
        "{table}"
    );
    let csv = String::from_utf8_lossy(
        &run_ok(
            lockscope()
                .args(["report", "--by", "owner", "--format", "csv"])
                .arg(&file),
        )
        .stdout,
    )
    .into_owned();
    assert!(csv.starts_with("holder,type,addr,contended"), "{csv}");
}

/// A kernel mutex with a long and a short holder: a file's position lock, held by each
/// `write(2)` through the file description the two threads share.
#[test]
fn a_kernel_mutexs_long_holder_is_blamed_for_the_waits_of_the_other() {
    let _serial = serial();
    let (stdout, rec, _) = record_workload_file(
        "fpos-holders",
        &["fpos-holders", "--seconds", "2", "--one-cpu"],
    );
    let (pid, long, short) = (
        field(&stdout, "pid:"),
        field(&stdout, "long_tid:"),
        field(&stdout, "short_tid:"),
    );
    // The sleeping waits (a waiter on the holder's CPU cannot spin on it).
    let m = rec["locks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| {
            l["type"] == "mutex"
                && l["tasks"]
                    .as_array()
                    .is_some_and(|t| t.iter().any(|t| t["pid"].as_u64() == Some(pid)))
        })
        .max_by_key(|l| l["wait_total_ns"].as_u64())
        .unwrap_or_else(|| panic!("no mutex entry of pid {pid}"));
    if has_kmem_cache_kfunc() {
        assert_eq!(m["name"], "&filp f_pos_lock", "{m}");
    }
    assert!(m["contended"].as_u64().unwrap() >= 20, "{m}");
    let owners = long_holder_blamed(m, long, 0.8);
    let top = &owners[0];
    if let Some(s) = owners.iter().find(|o| o["tid"].as_u64() == Some(short)) {
        assert_eq!(s["comm"], "holder-short", "{m}");
    }
    // Its stack, inside the write that holds the lock. A mutex wait spins before it
    // sleeps: the stack taken at its first begin is the sleeping wait's too.
    if kallsyms_has("bpf_task_from_pid") {
        let stack: Vec<&str> = top["stack"]
            .as_array()
            .map(|s| s.iter().map(|f| f.as_str().unwrap()).collect())
            .unwrap_or_default();
        assert!(
            stack.iter().any(|f| f.starts_with("vfs_write+")),
            "holder-long's stack: {stack:?}"
        );
    }
}

#[test]
fn a_threads_pi_lock_is_named_for_the_thread() {
    let _serial = serial();
    let (stdout, rec, _) =
        record_workload_file("pi-thread-name", &["pi-contend", "--seconds", "1"]);
    let victim = field(&stdout, "victim_tid:");
    let name = format!("pi_lock of pi-victim[{victim}]");
    let entry = rec["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == name.as_str())
        .unwrap_or_else(|| panic!("no entry {name}"));
    // The victim is a thread of the workload's process: its lock names the thread, and
    // the owner says which process it belongs to.
    let owner = &entry["owner"];
    assert_eq!(owner["field"], "pi_lock", "{entry}");
    assert_eq!(owner["tid"].as_u64(), Some(victim), "{entry}");
    assert_ne!(owner["pid"].as_u64(), Some(victim), "{entry}");
    assert_eq!(owner["comm"], "pi-victim", "{entry}");
}

/// Functions that take a runqueue lock (directly, or through an inlined `rq_lock`).
const RQ_LOCK_TAKERS: &[&str] = &[
    "task_rq_lock",
    "__task_rq_lock",
    "raw_spin_rq_lock",
    "_raw_spin_rq_lock",
    "double_rq_lock",
    "try_to_wake_up",
    "ttwu_",
    "__schedule",
    "schedule",
    "sched_",
    "wake_up_new_task",
    "migration_cpu_stop",
    "push_",
    "pull_",
    "balance_",
    "__balance_push",
    "hrtick",
    "rq_",
    "move_queued_task",
    "__set_cpus_allowed_ptr",
];

#[test]
fn runqueue_locks_are_named_for_their_cpu() {
    let _serial = serial();
    let dir = scratch("rq-names");
    let file = dir.join("rec.json");
    // Setting a thread's affinity takes its runqueue lock (task_rq_lock).
    run_ok(
        lockscope()
            .args(["record", "-a", "--stack-rate", "0", "-o"])
            .arg(&file)
            .args(["--", bin(), "workload", "pi-contend", "--seconds", "1"]),
    );
    let rec = read_json(&file);
    let rq: Vec<&serde_json::Value> = rec["locks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["name"].as_str().unwrap().starts_with("rq_lock cpu "))
        .collect();
    assert!(!rq.is_empty(), "no runqueue lock named");
    let mut seen = std::collections::BTreeSet::new();
    for l in &rq {
        let name = l["name"].as_str().unwrap();
        let cpu: u64 = name["rq_lock cpu ".len()..].parse().unwrap();
        assert!(
            cpu < 4096 && seen.insert(cpu),
            "{name} twice or out of range"
        );
        assert_eq!(l["type"], "spinlock", "{l}");
        // Never wrong: every walked stack of a runqueue lock runs through a function that
        // takes one.
        for c in l["callers"].as_array().unwrap() {
            let stack: Vec<&str> = c["stack"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_str().unwrap())
                .collect();
            assert!(
                stack
                    .iter()
                    .any(|f| RQ_LOCK_TAKERS.iter().any(|t| f.starts_with(t))),
                "{name}: a stack through no runqueue-lock taker: {stack:?}"
            );
        }
    }
}

/// A kernel mutex: the pipe's, taken by every read and write of it (spinning waits, the
/// `mutex-spin` entry, are most of them). Each wait's holder is another thread of the
/// workload (a writer or the reader), named by its thread.
#[test]
fn a_pipe_mutex_is_blamed_on_the_threads_that_hold_it() {
    let _serial = serial();
    let (stdout, rec, _) = record_workload_file("pipe-holders", &["pipe-mutex", "--seconds", "2"]);
    let pid = field(&stdout, "pid:");
    let reader = field(&stdout, "reader_tid:");
    let writers: Vec<u64> = stdout
        .lines()
        .find_map(|l| l.strip_prefix("writer_tids:"))
        .unwrap_or_else(|| panic!("no writer_tids in:\n{stdout}"))
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    let m = rec["locks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| {
            l["type"].as_str().is_some_and(|t| t.starts_with("mutex"))
                && l["tasks"]
                    .as_array()
                    .is_some_and(|t| t.iter().any(|t| t["pid"].as_u64() == Some(pid)))
        })
        .max_by_key(|l| l["contended"].as_u64())
        .unwrap_or_else(|| panic!("no contended mutex of pid {pid}"))
        .clone();
    assert!(m["contended"].as_u64().unwrap() >= 100, "{m}");
    let (owners, known, unknown, total) = holder_split(&m);
    assert_eq!(known + unknown, total, "{m}");
    // A mutex's owner word names its holder unless it was released as the wait began.
    assert!(
        unknown as f64 <= 0.2 * total as f64,
        "holder unknown for {unknown} of {total} ns: {m}"
    );
    // The pipe is in a general slab cache: its type is inferred from the functions
    // that contend it, and marked so.
    let name = m["name"].as_str().unwrap();
    if has_kmem_cache_kfunc() {
        assert!(
            name.starts_with("&kmalloc") && name.ends_with(" ~pipe_inode_info.mutex"),
            "{name}"
        );
    } else {
        assert!(name.starts_with("0x"), "{name}");
    }
    for o in owners {
        let tid = o["tid"].as_u64().unwrap();
        assert_eq!(o["pid"].as_u64(), Some(pid), "{o} in {m}");
        if tid == reader {
            assert_eq!(o["comm"], "pipe-reader", "{o}");
        } else {
            assert!(
                writers.contains(&tid),
                "holder {o} is no thread of the workload: {m}"
            );
            assert_eq!(o["comm"], "pipe-writer", "{o}");
        }
    }
}

/// A glibc mutex: the holder is read from its `__owner` when each wait begins. Two
/// threads, one holding the mutex for 500 us at a time and never waiting for it: every
/// wait is the other's, and its holder, the long one, is known for nearly all of it.
#[test]
fn a_glibc_mutex_is_blamed_on_its_long_holder() {
    let _serial = serial();
    let (stdout, rec, _) =
        record_workload_file("mutex-holders", &["mutex-holders", "--seconds", "2"]);
    let (pid, long, short) = (
        field(&stdout, "pid:"),
        field(&stdout, "long_tid:"),
        field(&stdout, "short_tid:"),
    );
    let lock = stdout
        .lines()
        .find_map(|l| l.strip_prefix("lock:"))
        .unwrap_or_else(|| panic!("no lock in:\n{stdout}"))
        .trim()
        .to_owned();
    let m = rec["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["addr"] == lock.as_str())
        .unwrap_or_else(|| panic!("no entry for {lock}"));
    assert_eq!(m["type"], "pthread-mutex", "{m}");
    assert!(m["contended"].as_u64().unwrap() >= 20, "{m}");
    let owners = long_holder_blamed(m, long, 0.9);
    assert_eq!(owners[0]["pid"].as_u64(), Some(pid), "{m}");
    for o in owners {
        assert!(
            [long, short].contains(&o["tid"].as_u64().unwrap()),
            "{o} is neither holder: {m}"
        );
    }
}

/// Does this kernel have the kfunc that names slab objects' locks (Linux 6.13+)?
fn has_kmem_cache_kfunc() -> bool {
    kallsyms_has("bpf_get_kmem_cache")
}

fn kallsyms_has(function: &str) -> bool {
    std::fs::read_to_string("/proc/kallsyms")
        .unwrap()
        .lines()
        .any(|l| l.ends_with(&format!(" {function}")))
}

/// A lock in a slab object of a known type is named by its cache, its field and the
/// object: a file's inode lock by the inode number the workload prints.
#[test]
fn a_files_inode_lock_is_named_by_its_inode() {
    let _serial = serial();
    let (stdout, rec, _) = record_workload_file("file-write", &["file-write", "--seconds", "2"]);
    let (pid, inode) = (field(&stdout, "pid:"), field(&stdout, "inode:"));
    let locks = rec["locks"].as_array().unwrap();
    let of_pid = |l: &&serde_json::Value| {
        l["tasks"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["pid"].as_u64() == Some(pid)))
    };
    let w = locks
        .iter()
        .filter(|l| l["type"] == "rwsem:W")
        .filter(of_pid)
        .max_by_key(|l| l["contended"].as_u64())
        .unwrap_or_else(|| panic!("no contended rwsem:W of pid {pid}"));
    assert!(w["contended"].as_u64().unwrap() >= 20, "{w}");
    let name = w["name"].as_str().unwrap();
    if !has_kmem_cache_kfunc() {
        assert!(name.starts_with("0x"), "{name}");
        return;
    }
    assert_eq!(
        name,
        format!("&shmem_inode_cache vfs_inode.i_rwsem (inode {inode})")
    );
    // The rwsem's own wait-list spinlock, where it was contended, is the same inode's.
    for l in locks
        .iter()
        .filter(|l| l["type"] == "spinlock")
        .filter(of_pid)
    {
        let n = l["name"].as_str().unwrap();
        if n.contains("i_rwsem") {
            assert_eq!(
                n,
                format!("&shmem_inode_cache vfs_inode.i_rwsem.wait_lock (inode {inode})")
            );
        }
    }
}

/// A split page-table lock is named for its page-table page (the page's type checked in
/// the kernel, Linux 6.12+), and for the mm of the process faulting, marked as inferred:
/// two threads faulting in one 2 MiB mapping share its page table.
#[test]
fn page_table_locks_are_named_for_their_page() {
    let _serial = serial();
    let (_, rec, _) = record_workload_file(
        "page-table",
        &[
            "mmap-fault",
            "--threads",
            "2",
            "--mib",
            "2",
            "--rounds",
            "2000",
        ],
    );
    // Only the workload is traced: every waiter is its one process.
    let pids: std::collections::BTreeSet<u64> = rec["locks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|l| l["tasks"].as_array().unwrap())
        .filter_map(|t| t["pid"].as_u64())
        .collect();
    assert_eq!(pids.len(), 1, "{pids:?}");
    let pid = *pids.first().unwrap();
    let pte: Vec<&serde_json::Value> = rec["locks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["type"] == "spinlock")
        .filter(|l| {
            l["callers"].as_array().is_some_and(|c| {
                c.iter().any(|c| {
                    c["caller"]
                        .as_str()
                        .unwrap()
                        .contains("pte_offset_map_lock")
                })
            })
        })
        .collect();
    assert!(!pte.is_empty(), "no page-table lock contended");
    let named = kernel_version() >= (6, 12);
    for l in pte {
        let name = l["name"].as_str().unwrap();
        if named {
            assert!(
                name.starts_with("page-table lock of page 0x")
                    && name.ends_with(&format!("(~mm of lockscope[{pid}])")),
                "{name}"
            );
        } else {
            assert!(name.starts_with("0x"), "{name}");
        }
    }
}

fn kernel_version() -> (u32, u32) {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut it = r
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}
