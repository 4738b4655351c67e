//! Degrade, never refuse: every probe group the kernel may lack is taken away in turn
//! (the test-only `LOCKSCOPE_TEST_UNAVAILABLE` switch), and `record` still records the
//! kernel locks, saying in one line what it could not trace; `doctor` shows the group as
//! missing. Only the contention tracepoints are required, and without them the error is
//! one clear line.

mod common;

use common::*;

const SWITCH: &str = "LOCKSCOPE_TEST_UNAVAILABLE";

/// (what is switched off, the start of the note `record` prints for it).
const GROUPS: &[(&str, &str)] = &[
    ("pi-lock-proxy", "pi-lock-proxy: not attached"),
    ("exec-names", "exec-names: not attached"),
    ("cgroup-moves", "cgroup-moves: not attached"),
    ("fork-follow", "fork-follow: not attached"),
    ("futex", "futex: unavailable"),
    ("rwsem-deep", "rwsem-deep: unavailable"),
    ("mmap-lock-estimate", "mmap-lock-estimate: not attached"),
    ("btf:mm_struct.mmap_lock", "btf: mmap_lock is not named"),
    ("btf:sighand_struct.siglock", "btf: siglock is not named"),
    ("btf:task_struct.pi_lock", "btf: pi_lock is not named"),
];

#[test]
fn each_missing_group_is_a_note_and_the_rest_records() {
    let _serial = serial();
    let dir = scratch("degrade");
    for &(group, note) in GROUPS {
        let file = dir.join(format!("{}.json", group.replace([':', '.'], "_")));
        let out = run_ok(
            lockscope()
                .env(SWITCH, group)
                .args(["record", "--mmap-trylocks", "-o"])
                .arg(&file)
                .args(["--", bin(), "workload", "mmap-churn", "--seconds", "1"]),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        let notes: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("lockscope: note: "))
            .collect();
        assert!(
            notes.iter().any(|l| l.contains(note)),
            "{group}: no `{note}` note in:\n{stderr}"
        );
        // One line each, and only for what was switched off (this kernel has the rest,
        // but for the deep tiers, which say so in their report sections).
        assert!(
            notes
                .iter()
                .filter(|l| l.contains(SWITCH) || l.contains("btf:"))
                .count()
                == 1,
            "{group}: {notes:#?}"
        );
        let rec = read_json(&file);
        let mmap = mmap_lock_entries(&rec, None);
        let contended: u64 = rec["locks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["contended"].as_u64().unwrap())
            .sum();
        assert!(contended > 0, "{group}: nothing recorded");
        if group == "btf:mm_struct.mmap_lock" {
            assert!(mmap.is_empty(), "mmap_lock named without its offset");
        } else {
            assert!(
                !mmap.is_empty(),
                "{group}: the churn's mmap_lock is not named"
            );
        }
        if group == "futex" {
            assert!(rec.get("futex_events").is_none(), "{group}");
        }
        assert_nothing_lost(&rec["lost"]);
    }
}

#[test]
fn without_the_contention_tracepoints_the_error_is_one_line() {
    let _serial = serial();
    let out = lockscope()
        .env(SWITCH, "contention")
        .args(["record", "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("lockscope: contention: nothing can be traced"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn doctor_shows_a_missing_group() {
    let _serial = serial();
    let out = lockscope()
        .env(SWITCH, "cgroup-moves,futex")
        .arg("doctor")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("cgroup_attach_task"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        row.contains("missing") && row.contains("a process that moves"),
        "{row}"
    );
    let futex = text
        .lines()
        .find(|l| l.starts_with("sys_enter_futex "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(futex.contains("missing"), "{futex}");
    assert!(
        text.contains("ready: lock contention can be traced"),
        "{text}"
    );
}
