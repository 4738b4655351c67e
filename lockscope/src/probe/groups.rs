//! The probe groups: what each hooks, what it gives, and what a run without it lacks.
//! The probe families (`crate::family`) attach their tracepoint groups through one
//! function (`TpLinks::attach_group`) and list them in `doctor`; a group the kernel
//! lacks is skipped with one line, everything else running (only `contention` is
//! required).
//!
//! The futex syscall probes, the rwsem deep tier and the deep spinlock tier choose
//! between hook mechanisms themselves (their families, through `probe::hooks`); they
//! are named here so that the same switch turns them off.

use super::rt;

/// A group of `tp_btf` programs attached (and skipped) together.
#[derive(Debug, Clone, Copy)]
pub struct Group {
    pub name: &'static str,
    pub gives: &'static str,
    /// What a run without the group lacks: the second half of its note.
    pub without: &'static str,
    /// Without it nothing can be traced: an error, not a note.
    pub required: bool,
    /// (program in the eBPF object, BTF tracepoint).
    pub hooks: &'static [(&'static str, &'static str)],
}

/// `sched_wait_task` acquisitions of a task's `pi_lock` and the set of live tasks.
pub const PI_LOCK_PROXY: Group = Group {
    name: "pi-lock-proxy",
    gives: "pi_lock acquisitions by wait_task_inactive (sched_wait_task), and the live tasks \
            (names a contended pi_lock of any task)",
    without: "pi_lock proxy acquisitions are not counted, and only a waiter's own pi_lock \
              is named",
    required: false,
    hooks: &rt::ALWAYS_PROGRAMS,
};

/// Wakeup latency of real-time threads (`--latency-threshold` only).
pub const RT_LATENCY: Group = Group {
    name: "rt-latency",
    gives: "wakeup latency of real-time threads and the lock activity around it \
            (--latency-threshold)",
    without: "latency spikes are not timed",
    required: false,
    hooks: &rt::LATENCY_PROGRAMS,
};

pub const CONTENTION: Group = Group {
    name: "contention",
    gives: "contention waits: lock, type, wait time, caller, task (lock:contention_begin/end)",
    without: "nothing can be traced",
    required: true,
    hooks: &[
        ("contention_begin", "contention_begin"),
        ("contention_end", "contention_end"),
    ],
};

pub const EXEC_NAMES: Group = Group {
    name: "exec-names",
    gives: "process names refreshed at exec (sched_process_exec)",
    without: "a process may keep the name it had before exec (its parent's)",
    required: false,
    hooks: &[("sched_process_exec", "sched_process_exec")],
};

pub const CGROUP_MOVES: Group = Group {
    name: "cgroup-moves",
    gives: "cgroups refreshed when a process moves (cgroup_attach_task)",
    without: "a process that moves keeps the cgroup of its first wait",
    required: false,
    hooks: &[("cgroup_attach_task", "cgroup_attach_task")],
};

/// Children of a `--pid` or command target (pid targets only).
pub const FORK_FOLLOW: Group = Group {
    name: "fork-follow",
    gives: "follows a target's process tree (sched_process_fork)",
    without: "processes the targets fork after the start are not traced (a command is \
              traced from just after it starts, without its children)",
    required: false,
    hooks: &[("sched_process_fork", "sched_process_fork")],
};

/// The tracepoint groups.
pub const TP_GROUPS: [&Group; 6] = [
    &PI_LOCK_PROXY,
    &RT_LATENCY,
    &CONTENTION,
    &EXEC_NAMES,
    &CGROUP_MOVES,
    &FORK_FOLLOW,
];

/// The tracepoint-tier estimate of mmap_lock trylock failures: one program, of two
/// variants by the tracepoint's arity, which the loader picks (so no `hooks` here).
pub const MMAP_LOCK_ESTIMATE: Group = Group {
    name: "mmap-lock-estimate",
    gives: "mmap_lock trylock failures, estimated (mmap_lock_acquire_returned)",
    without: "mmap_lock trylock failures are not estimated (n/a)",
    required: false,
    hooks: &[],
};

/// The futex family in blocking mode (`--futex-mode blocking`): waits that sleep, found
/// at the context switch instead of at the futex syscalls. Named like the family, so that
/// the same switch turns it off; not in [`TP_GROUPS`] (the family attaches it).
pub const FUTEX_BLOCKING: Group = Group {
    name: FUTEX,
    gives: "user-space lock waits that sleep, at the context switch (sched_switch; \
            --futex-mode blocking)",
    without: "user-space locks are not traced; kernel locks are recorded",
    required: false,
    hooks: &[("futex_block_switch", "sched_switch")],
};

/// The futex family in calls mode on x86_64: the raw `sys_enter`/`sys_exit` tracepoints,
/// each program returning at once unless the call is a futex call. Preferred to the
/// per-syscall tracepoints (`syscalls:sys_enter_futex`...), which are perf events: each
/// one's release waits for an RCU grace period while holding the kernel's tracing mutex,
/// and a tracer starting meanwhile (lockscope's next run) waits behind it. The family
/// falls back to those where the kernel refuses these. Not in [`TP_GROUPS`] (the family
/// attaches it); its own name, so that the tests can force the fallback.
pub const FUTEX_RAW: Group = Group {
    name: "futex-raw",
    gives: "user-space locks: every futex call, at the raw sys_enter/sys_exit tracepoints",
    without: "the futex probes use the per-syscall tracepoints (slower to release)",
    required: false,
    hooks: &[
        ("futex_sys_enter", "sys_enter"),
        ("futex_sys_exit", "sys_exit"),
    ],
};

/// Names of the groups that pick their own hooks.
pub const FUTEX: &str = "futex";
pub const RWSEM_DEEP: &str = "rwsem-deep";
pub const SPIN_DEEP: &str = "spin-deep";

/// The groups that pick their own hooks: (name, what they give).
pub const OTHER_GROUPS: [(&str, &str); 4] = [
    (
        FUTEX,
        "user-space locks: futex(2) and futex2 syscalls (syscalls tracepoints), or with \
         --futex-mode blocking the waits that sleep (sched_switch)",
    ),
    (
        RWSEM_DEEP,
        "rwsem lock events, exact (fentry/kprobe on the rwsem slow paths)",
    ),
    (MMAP_LOCK_ESTIMATE.name, MMAP_LOCK_ESTIMATE.gives),
    (
        SPIN_DEEP,
        "pi_lock waits, hold times, starvation (fentry/kprobe on spinlocks)",
    ),
];

/// Test-only: groups named here (comma-separated) are taken for missing from this
/// kernel, so that the tests can check that each one degrades to a note. `btf:S.F`
/// does the same for field `F` of struct `S` in the kernel's BTF.
pub const TEST_UNAVAILABLE_ENV: &str = "LOCKSCOPE_TEST_UNAVAILABLE";

/// Whether the test switch takes `name` for missing.
pub fn switched_off(name: &str) -> bool {
    std::env::var(TEST_UNAVAILABLE_ENV).is_ok_and(|v| v.split(',').any(|n| n.trim() == name))
}

/// The reason a switched-off group gives.
pub const SWITCHED_OFF: &str = "unavailable (LOCKSCOPE_TEST_UNAVAILABLE)";

/// Every group name the switch knows.
pub fn names() -> impl Iterator<Item = &'static str> {
    TP_GROUPS
        .iter()
        .map(|g| g.name)
        .chain(OTHER_GROUPS.iter().map(|(n, _)| *n))
        .chain([FUTEX_RAW.name])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_only_contention_is_required() {
        let mut all: Vec<&str> = names().collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
        let required: Vec<&str> = TP_GROUPS
            .iter()
            .filter(|g| g.required)
            .map(|g| g.name)
            .collect();
        assert_eq!(required, ["contention"]);
    }
}
