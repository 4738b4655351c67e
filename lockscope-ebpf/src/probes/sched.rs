//! Following a target's process tree: every process forked by a target (or by lockscope
//! while it starts the traced command) becomes a target, in the kernel, at fork time.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_kernel},
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use lockscope_common::{CNT_LOST_TARGET_FULL, FILTER_TGIDS};

use crate::maps::{CONFIG, TARGETS, TASK_CGROUPS, count};

/// A process replaced its program: the name recorded at its first event (often its
/// parent's, between fork and exec) is stale. Forget it, so that its next event records
/// the new one. Exec is rare: nothing on any hot path.
#[btf_tracepoint(function = "sched_process_exec")]
pub fn sched_process_exec(_ctx: BtfTracePointContext) -> i32 {
    forget_process((bpf_get_current_pid_tgid() >> 32) as u32);
    0
}

/// Forget what a process's first wait recorded (names, cgroup): its next wait records
/// them anew.
#[inline(always)]
fn forget_process(tgid: u32) {
    crate::probes::contention::forget_comm(tgid);
    crate::probes::futex::forget_comm(tgid);
    let _ = TASK_CGROUPS.remove(tgid);
}

/// A process (`threadgroup`) or thread moved to another cgroup: forget its names and
/// cgroup, so that its next wait records where it is now. Rare, like exec.
#[btf_tracepoint(function = "cgroup_attach_task")]
pub fn cgroup_attach_task(ctx: BtfTracePointContext) -> i32 {
    let cfg = CONFIG.load();
    let task: u64 = ctx.arg(2);
    // SAFETY: a read of a kernel address through the checked helper.
    let Ok(tgid) =
        (unsafe { bpf_probe_read_kernel((task + cfg.off_task_tgid as u64) as *const u32) })
    else {
        return 0;
    };
    forget_process(tgid);
    0
}

#[btf_tracepoint(function = "sched_process_fork")]
pub fn sched_process_fork(ctx: BtfTracePointContext) -> i32 {
    let cfg = CONFIG.load();
    if cfg.filter_mode != FILTER_TGIDS {
        return 0;
    }
    let parent_tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let followed =
        // SAFETY: a map value, only read, before the program returns.
        parent_tgid == cfg.launcher_tgid || unsafe { TARGETS.get(parent_tgid) }.is_some();
    if !followed {
        return 0;
    }
    let child: u64 = ctx.arg(1);
    let Ok(child_tgid) =
        // SAFETY: a checked read: a bad address gives an error, never a fault.
        (unsafe { bpf_probe_read_kernel((child + cfg.off_task_tgid as u64) as *const u32) })
    else {
        return 0;
    };
    // A new thread shares its parent's tgid: already a target.
    if child_tgid != parent_tgid && TARGETS.insert(child_tgid, 1, 0).is_err() {
        count(CNT_LOST_TARGET_FULL);
    }
    0
}
