//! User-space locks: the futex syscall tracepoints (`syscalls/sys_enter_futex`,
//! `sys_exit_futex`, and the futex2 syscalls `futex_wait`, `futex_wake`, `futex_waitv`,
//! `futex_requeue`), plus `restart_syscall`, which continues an interrupted timed wait.
//!
//! A call is kept in its thread's task storage (`FUTEX_CALLS`) from its entry to its
//! final exit and then aggregated per (process, futex word) in `FUTEX_STATS`: calls by
//! command, wait time of blocking calls (log2 histogram), EAGAIN, timeouts,
//! interruptions, tasks woken and requeued, and for PI futexes the owner TID found in the
//! futex word at entry.
//!
//! Restarts: a call that leaves with `-ERESTARTSYS`/`-ERESTARTNOINTR`/`-ERESTARTNOHAND`
//! is kept and resumed when the same thread re-enters the same call; one that leaves with
//! `-ERESTART_RESTARTBLOCK` is resumed by `restart_syscall`. If the thread makes another
//! futex call that can wait instead, the old one was interrupted (counted so).
//!
//! Calls that cannot wait (wakes, requeues, PI unlocks: most futex calls of a busy
//! program) are handled whole at their exit, their arguments read back from the saved
//! registers (x86_64): nothing is stored at entry, and the exit is one target check and
//! one per-CPU aggregate update. A call that can wait costs one target check and one
//! task-storage lookup at entry (a timestamp; for a wait, the syscall-site check of
//! pthread attribution), and one task-storage lookup and one aggregate update (atomic) at
//! exit: no hash of calls and no lock on the way (a thread's storage is found from the
//! thread). Tasks we do not trace cost a target check at entry and one empty
//! task-storage lookup at exit (a target check, for a call that cannot wait).

use aya_ebpf::{
    EbpfContext as _, Global,
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_user,
    },
    macros::{btf_map, btf_tracepoint, map, tracepoint},
    maps::{Array, LruHashMap, PerCpuArray},
    programs::{BtfTracePointContext, TracePointContext},
};
use core::ptr::{addr_of, addr_of_mut, read_volatile, write_volatile};

use lockscope_common::*;

use crate::maps::{CONFIG, TaskStorage, current_is_target, current_process_comm};

/// Finished calls, aggregated per (tgid, uaddr). Preallocated: a per-CPU hash without
/// preallocation refuses inserts in bursts (its per-CPU allocation cache refills
/// asynchronously). The loader sizes it to the number of CPUs. LRU: system-wide, futex
/// words come and go without end; the least recently updated make room, counted
/// (`FCNT_STATS_CREATED`).
#[map]
static FUTEX_STATS: LruHashMap<FutexKey, FutexStats> =
    LruHashMap::with_max_entries(FUTEX_STATS_MAX_ENTRIES, 0);

/// Wake-class calls that do not block, per CPU, by the slot of their (tgid, uaddr,
/// command): see [`FutexHot`]. Userspace adds them to `FUTEX_STATS`.
#[map]
static FUTEX_HOT: PerCpuArray<FutexHot> = PerCpuArray::with_max_entries(FUTEX_HOT_SLOTS, 0);

/// The call in progress of each thread (`ts_ns == 0`: none), in the thread's own storage:
/// freed with the thread, so a call whose exit never comes (the thread died in it) holds
/// nothing. Userspace counts the calls in flight with [`futex_task_iter`].
#[btf_map]
static FUTEX_CALLS: TaskStorage<FutexCall> = TaskStorage::new();

/// The call in progress of the current thread, if any.
#[inline(always)]
fn current_call() -> Option<&'static mut FutexCall> {
    // SAFETY: the current task's own storage, used before the program returns; only
    // this thread's programs (one at a time: syscall tracepoints do not nest) write it.
    FUTEX_CALLS
        .current(false)
        .map(|c| unsafe { &mut *c })
        .filter(|c| c.ts_ns != 0)
}

/// Calls seen and everything that could not be stored (`FCNT_*` slots).
#[map]
static FUTEX_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(FUTEX_COUNTERS_LEN, 0);

/// Names: of each process with a futex entry (by tgid, its leader's comm), and of each
/// thread that made a PI call (by tid), to name PI owners. Written when a process's first
/// entry is created and on PI calls only: off the common path.
#[map]
static FUTEX_COMMS: LruHashMap<u32, [u8; 16]> = LruHashMap::with_max_entries(COMMS_MAX_ENTRIES, 0);

static EMPTY_FUTEX_STATS: FutexStats = FutexStats::EMPTY;

/// Forget the recorded name of process `tgid` (it exec'ed: see `sched_process_exec`).
#[inline(always)]
pub fn forget_comm(tgid: u32) {
    let _ = FUTEX_COMMS.remove(tgid);
}

/// Byte offsets of the fields after the common header in the syscall tracepoints
/// (`/sys/kernel/tracing/events/syscalls/sys_enter_futex/format`): every argument is
/// widened to 8 bytes, the first at 16; `ret` of every `sys_exit_*` is at 16.
const ARG0: usize = 16;
const ARG1: usize = 24;
const ARG3: usize = 40;
const RET: usize = 16;

#[inline(always)]
fn arg(ctx: &TracePointContext, off: usize) -> u64 {
    // Direct context access: the verifier checks the offset against the event's size.
    // SAFETY: the offset is a field of this tracepoint's record, whose layout its format fixes.
    unsafe { *(ctx.as_ptr() as *const u8).add(off).cast::<u64>() }
}

#[inline(always)]
fn fcount(slot: u32) {
    if let Some(c) = FUTEX_COUNTERS.get_ptr_mut(slot) {
        // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
        unsafe { *c += 1 };
    }
}

/// `__syscall_nr` of a syscall tracepoint's record (an `int` after the common header).
const SYSCALL_NR: usize = 8;

#[inline(always)]
fn syscall_nr(ctx: &TracePointContext) -> i32 {
    // SAFETY: the field every syscall tracepoint's record has at this offset.
    unsafe { *(ctx.as_ptr() as *const u8).add(SYSCALL_NR).cast::<i32>() }
}

/// Calls that cannot wait are handled whole at their exit (see [`futex_stateless`]):
/// their entry stores nothing. Only where the exit can read the arguments back from
/// the saved registers (x86_64).
#[inline(always)]
fn stateless(nr: i32, cmd: u32) -> bool {
    cfg!(bpf_target_arch = "x86_64") && futex_stateless(nr, cmd)
}

/// futex(uaddr, op, val, utime|val2, uaddr2, val3)
#[tracepoint(category = "syscalls", name = "sys_enter_futex")]
pub fn futex_enter(ctx: TracePointContext) -> u32 {
    let uaddr = arg(&ctx, ARG0);
    let op = arg(&ctx, ARG1) as u32;
    let cmd = futex_cmd_slot(op);
    if stateless(syscall_nr(&ctx), cmd) {
        return 0;
    }
    let shared = op & FUTEX_PRIVATE_FLAG == 0;
    on_enter(uaddr, cmd, op, 0, 0, shared);
    0
}

/// futex_wait(uaddr, val, mask, flags, timeout, clockid)
#[tracepoint(category = "syscalls", name = "sys_enter_futex_wait")]
pub fn futex_wait_enter(ctx: TracePointContext) -> u32 {
    let flags = arg(&ctx, ARG3) as u32;
    on_enter(
        arg(&ctx, ARG0),
        FUTEX2_WAIT,
        flags,
        0,
        0,
        flags & FUTEX2_PRIVATE == 0,
    );
    0
}

/// futex_wake(uaddr, mask, nr, flags). Not attached where the exit handles these calls
/// whole (x86_64: [`stateless`]).
#[tracepoint(category = "syscalls", name = "sys_enter_futex_wake")]
pub fn futex_wake_enter(ctx: TracePointContext) -> u32 {
    let flags = arg(&ctx, ARG3) as u32;
    on_enter(
        arg(&ctx, ARG0),
        FUTEX2_WAKE,
        flags,
        0,
        0,
        flags & FUTEX2_PRIVATE == 0,
    );
    0
}

/// futex_waitv(waiters, nr_futexes, flags, timeout, clockid): keyed by the futex that
/// woke the caller (the exit's return value indexes `waiters`), else the first one.
#[tracepoint(category = "syscalls", name = "sys_enter_futex_waitv")]
pub fn futex_waitv_enter(ctx: TracePointContext) -> u32 {
    let waiters = arg(&ctx, ARG0);
    let nr = arg(&ctx, ARG1) as u32;
    let (uaddr, wflags) = waitv_entry(waiters, 0);
    on_enter(
        uaddr,
        FUTEX2_WAITV,
        wflags,
        waiters,
        nr,
        wflags & FUTEX2_PRIVATE == 0,
    );
    0
}

/// futex_requeue(waiters[2], flags, nr_wake, nr_requeue): keyed by the source futex.
#[tracepoint(category = "syscalls", name = "sys_enter_futex_requeue")]
pub fn futex_requeue_enter(ctx: TracePointContext) -> u32 {
    let waiters = arg(&ctx, ARG0);
    let (uaddr, wflags) = waitv_entry(waiters, 0);
    on_enter(
        uaddr,
        FUTEX2_REQUEUE,
        wflags,
        waiters,
        2,
        wflags & FUTEX2_PRIVATE == 0,
    );
    0
}

/// Set by the loader: `restart_syscall`'s number on this architecture (-1: unknown).
#[unsafe(no_mangle)]
pub static FUTEX_RESTART_NR: Global<i32> = Global::new(-1);

/// Attached to every `sys_exit_futex*` tracepoint and to `sys_exit_restart_syscall` (a
/// timed wait continued after a signal): one program, verified and loaded once.
#[tracepoint(category = "syscalls", name = "sys_exit_futex")]
pub fn futex_exit(ctx: TracePointContext) -> u32 {
    let ret = arg(&ctx, RET) as i64;
    if !stateless_exit(&ctx, ret) {
        on_exit(ret, syscall_nr(&ctx) == FUTEX_RESTART_NR.load());
    }
    0
}

/// A call that cannot wait, handled whole at its exit, its arguments read from the
/// registers the kernel saved at entry: true if this exit was one.
#[cfg(bpf_target_arch = "x86_64")]
#[inline(always)]
fn stateless_exit(ctx: &TracePointContext, ret: i64) -> bool {
    let nr = syscall_nr(ctx);
    if nr != NR_FUTEX_X86_64 && nr != NR_FUTEX_WAKE_X86_64 {
        return false;
    }
    let Some(regs) = current_regs() else {
        return false;
    };
    stateless_exit_regs(nr, regs, ret)
}

/// [`stateless_exit`] of system call `nr` with the caller's registers `regs`: false for
/// any call but a futex(2) or futex_wake(2) that cannot wait ([`stateless`] decides).
#[cfg(bpf_target_arch = "x86_64")]
#[inline(always)]
fn stateless_exit_regs(nr: i32, regs: &aya_ebpf::bindings::pt_regs, ret: i64) -> bool {
    let uaddr = regs.rdi;
    let (cmd, op) = if nr == NR_FUTEX_X86_64 {
        let op = regs.rsi as u32;
        (futex_cmd_slot(op), op)
    } else {
        // futex_wake(uaddr, mask, nr, flags): flags in the fourth argument (r10).
        (FUTEX2_WAKE, regs.r10 as u32)
    };
    if !stateless(nr, cmd) {
        return false;
    }
    // FUTEX2_PRIVATE is FUTEX_PRIVATE_FLAG.
    on_stateless_exit(uaddr, cmd, op, op & FUTEX_PRIVATE_FLAG == 0, ret);
    true
}

/// The current task's user registers, as the kernel saved them at its entry: a BTF
/// pointer, whose loads the verifier checks against the type (and makes fault-safe).
#[cfg(bpf_target_arch = "x86_64")]
#[inline(always)]
fn current_regs() -> Option<&'static aya_ebpf::bindings::pt_regs> {
    use aya_ebpf::helpers::{bpf_get_current_task_btf, bpf_task_pt_regs};
    // SAFETY: helpers on the current task; see above for the result.
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) };
    // SAFETY: null or the task's pt_regs, valid while the program runs.
    unsafe { (regs as *const aya_ebpf::bindings::pt_regs).as_ref() }
}

#[cfg(not(bpf_target_arch = "x86_64"))]
#[inline(always)]
fn stateless_exit(_ctx: &TracePointContext, _ret: i64) -> bool {
    false
}

#[cfg_attr(not(bpf_target_arch = "x86_64"), allow(dead_code))]
/// The whole of a call that cannot wait, at its exit: counted (an entry, a created call
/// and an exit: `FCNT_STATELESS`) and aggregated, nothing stored.
#[inline(always)]
fn on_stateless_exit(uaddr: u64, cmd: u32, op: u32, shared: bool, ret: i64) {
    if !gate_open() || !current_is_target(&CONFIG.load()) {
        return;
    }
    fcount(FCNT_STATELESS);
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if futex_class(cmd) == FUTEX_CLASS_WAKE && hot_account(tgid, uaddr, cmd, shared, ret) {
        return;
    }
    let call = FutexCall {
        ts_ns: UNTIMED_TS,
        uaddr,
        waiters: 0,
        tgid,
        cmd,
        op,
        nr: 0,
        state: FUTEX_CALL_ACTIVE,
        flags: if shared { FUTEX_CALL_SHARED } else { 0 },
        pi_word: 0,
        restarts: 0,
    };
    account(&call, ret, UNTIMED_TS, false);
}

/// Wake-class calls counted per CPU, in the slot of their key (see [`FutexHot`]): no
/// hash lookup while the key keeps its slot. False if the slot could not be had.
#[cfg_attr(not(bpf_target_arch = "x86_64"), allow(dead_code))]
#[inline(always)]
fn hot_account(tgid: u32, uaddr: u64, cmd: u32, shared: bool, ret: i64) -> bool {
    let Some(h) = FUTEX_HOT.get_ptr_mut(futex_hot_slot(tgid, uaddr)) else {
        return false;
    };
    // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns,
    // not aliased (programs of one CPU do not nest).
    let h = unsafe { &mut *h };
    if h.calls == 0 || h.uaddr != uaddr || h.tgid != tgid || h.cmd != cmd {
        if h.calls != 0 && !hot_evict(h) {
            return false;
        }
        // The slot's first call of this key: its process's name, as a new entry of
        // `FUTEX_STATS` remembers it (the move that creates that entry is not this
        // process's call).
        remember_comm(tgid);
        h.uaddr = uaddr;
        h.tgid = tgid;
        h.cmd = cmd;
    }
    h.calls += 1;
    if shared {
        h.shared_calls += 1;
    }
    if ret < 0 {
        h.errors += 1;
    } else {
        h.woken += ret as u64;
    }
    true
}

/// Move a slot's counts to its key's `FUTEX_STATS` entry and free it, `seq` odd
/// meanwhile. False (the slot untouched) if the entry could not be had.
#[cfg_attr(not(bpf_target_arch = "x86_64"), allow(dead_code))]
#[inline(never)]
fn hot_evict(h: &mut FutexHot) -> bool {
    let Some(s) = stats_entry(h.key()) else {
        return false;
    };
    h.seq += 1;
    // SAFETY: a live map value, which every CPU updates atomically.
    unsafe { h.fold_into_shared(s) };
    // Free (the caller sets the new key), `seq` even again.
    *h = FutexHot {
        seq: h.seq + 1,
        ..FutexHot::default()
    };
    true
}

/// The `FUTEX_STATS` entry of `key`, created if new (counted).
#[inline(always)]
fn stats_entry(key: FutexKey) -> Option<*mut FutexStats> {
    FUTEX_STATS
        .get_ptr_mut(key)
        .or_else(|| new_stats_entry(key))
}

/// Create the `FUTEX_STATS` entry of `key`, which a lookup did not find (counted; another
/// CPU or a racing interrupt may have made it first).
#[inline(always)]
fn new_stats_entry(key: FutexKey) -> Option<*mut FutexStats> {
    // By reference: a copy of the value would not fit the 512-byte BPF stack.
    #[allow(clippy::needless_borrows_for_generic_args)]
    if FUTEX_STATS
        .insert(key, &EMPTY_FUTEX_STATS, BPF_NOEXIST as u64)
        .is_ok()
    {
        fcount(FCNT_STATS_CREATED);
    }
    FUTEX_STATS.get_ptr_mut(key)
}

/// Remember the current process's name (and cgroup) under `tgid` if not yet known.
#[inline(always)]
fn remember_comm(tgid: u32) {
    // SAFETY: a map value, only read, before the program returns.
    if unsafe { FUTEX_COMMS.get(tgid) }.is_none() {
        let cfg = CONFIG.load();
        let _ = FUTEX_COMMS.insert(tgid, current_process_comm(&cfg), 0);
        crate::maps::remember_cgroup(tgid);
    }
}

/// `restart_syscall` continues a timed futex wait that a signal interrupted.
#[tracepoint(category = "syscalls", name = "sys_enter_restart_syscall")]
pub fn futex_restart_enter(_ctx: TracePointContext) -> u32 {
    restart_enter();
    0
}

#[inline(always)]
fn restart_enter() {
    if let Some(c) = current_call()
        && c.state == FUTEX_CALL_RESTART_BLOCK
    {
        c.state = FUTEX_CALL_ACTIVE;
        c.restarts += 1;
        fcount(FCNT_RESTART);
    }
}

/// The futex probes on the raw `sys_enter` tracepoint (x86_64), instead of the
/// per-syscall tracepoints above: one program sees every system call of the machine
/// and returns at once unless it is a futex call or `restart_syscall`. A BPF link, not
/// a perf event: its release waits for no grace period under the kernel's tracing
/// mutex, which the next start of lockscope (or of any tracer) would queue behind.
#[cfg(bpf_target_arch = "x86_64")]
#[btf_tracepoint(function = "sys_enter")]
pub fn futex_sys_enter(ctx: BtfTracePointContext) -> i32 {
    // sys_enter(struct pt_regs *regs, long id)
    let nr: i64 = ctx.arg(1);
    if !futex_raw_nr(nr, true) {
        return 0;
    }
    let regs: *const aya_ebpf::bindings::pt_regs = ctx.arg(0);
    // SAFETY: a BTF pointer (the tracepoint's argument), whose loads the verifier checks.
    let Some(regs) = (unsafe { regs.as_ref() }) else {
        return 0;
    };
    // A 32-bit task's calls have other numbers (the per-syscall tracepoints skip them).
    if regs.cs != USER64_CS {
        return 0;
    }
    // The arguments as the per-syscall entry programs read them (x86_64: rdi, rsi, rdx,
    // r10, r8, r9), gathered so that one copy of `on_enter` is verified.
    let (uaddr, cmd, op, waiters, n, private) = match nr as i32 {
        NR_FUTEX_X86_64 => {
            let op = regs.rsi as u32;
            let cmd = futex_cmd_slot(op);
            if stateless(NR_FUTEX_X86_64, cmd) {
                return 0;
            }
            (regs.rdi, cmd, op, 0, 0, op & FUTEX_PRIVATE_FLAG)
        }
        // futex_wait(uaddr, val, mask, flags, timeout, clockid)
        NR_FUTEX_WAIT_X86_64 => {
            let flags = regs.r10 as u32;
            (regs.rdi, FUTEX2_WAIT, flags, 0, 0, flags & FUTEX2_PRIVATE)
        }
        // futex_waitv(waiters, nr_futexes, flags, timeout, clockid)
        NR_FUTEX_WAITV_X86_64 => {
            let (uaddr, wflags) = waitv_entry(regs.rdi, 0);
            let n = regs.rsi as u32;
            (
                uaddr,
                FUTEX2_WAITV,
                wflags,
                regs.rdi,
                n,
                wflags & FUTEX2_PRIVATE,
            )
        }
        // futex_requeue(waiters[2], flags, nr_wake, nr_requeue)
        NR_FUTEX_REQUEUE_X86_64 => {
            let (uaddr, wflags) = waitv_entry(regs.rdi, 0);
            (
                uaddr,
                FUTEX2_REQUEUE,
                wflags,
                regs.rdi,
                2,
                wflags & FUTEX2_PRIVATE,
            )
        }
        _ => {
            restart_enter();
            return 0;
        }
    };
    on_enter(uaddr, cmd, op, waiters, n, private == 0);
    0
}

/// The exit of every system call (x86_64): see [`futex_sys_enter`]. The call's number
/// is the saved `orig_ax`, as the per-syscall exit tracepoints read it.
#[cfg(bpf_target_arch = "x86_64")]
#[btf_tracepoint(function = "sys_exit")]
pub fn futex_sys_exit(ctx: BtfTracePointContext) -> i32 {
    // sys_exit(struct pt_regs *regs, long ret)
    let regs: *const aya_ebpf::bindings::pt_regs = ctx.arg(0);
    // SAFETY: a BTF pointer (the tracepoint's argument), whose loads the verifier checks.
    let Some(regs) = (unsafe { regs.as_ref() }) else {
        return 0;
    };
    let nr = regs.orig_rax as i64;
    if !futex_raw_nr(nr, false) || regs.cs != USER64_CS {
        return 0;
    }
    let ret: i64 = ctx.arg(1);
    let nr = nr as i32;
    if stateless_exit_regs(nr, regs, ret) {
        return 0;
    }
    on_exit(ret, nr == NR_RESTART_SYSCALL_X86_64);
    0
}

/// (uaddr, flags) of `waiters[i]`, a user `struct futex_waitv` array; zeros if unreadable.
#[inline(always)]
fn waitv_entry(waiters: u64, i: u64) -> (u64, u32) {
    let elem = waiters + i * FUTEX_WAITV_SIZE;
    let uaddr: u64 =
        // SAFETY: a checked read: a bad address gives an error, never a fault.
        unsafe { bpf_probe_read_user((elem + FUTEX_WAITV_UADDR_OFF) as *const u64) }.unwrap_or(0);
    let flags: u32 =
        // SAFETY: a checked read: a bad address gives an error, never a fault.
        unsafe { bpf_probe_read_user((elem + FUTEX_WAITV_FLAGS_OFF) as *const u32) }.unwrap_or(0);
    (uaddr, flags)
}

/// 1 while recording: userspace opens it after attaching and closes it when it stops, so
/// that the syscall tracepoints (perf events, slow to detach: one RCU grace period each)
/// can be released after lockscope has exited without recording anything more.
#[map]
pub static FUTEX_GATE: Array<u32> = Array::with_max_entries(1, 0);

#[inline(always)]
fn gate_open() -> bool {
    FUTEX_GATE.get(0).copied() == Some(1)
}

#[inline(always)]
fn on_enter(uaddr: u64, cmd: u32, op: u32, waiters: u64, nr: u32, shared: bool) {
    if !gate_open() || !current_is_target(&CONFIG.load()) {
        return;
    }
    fcount(FCNT_ENTER);
    let pid_tgid = bpf_get_current_pid_tgid();
    let class = futex_class(cmd);
    // Only a call that can wait (or whose PI owner is ordered by time) is timed; the
    // others keep a non-zero marker: a clock read saved on every wake.
    let timed = futex_timed(class);

    let Some(slot) = FUTEX_CALLS.current(true) else {
        fcount(FCNT_LOST_CALL_FULL);
        return;
    };
    // SAFETY: the current task's own storage (see `current_call`).
    let slot = unsafe { &mut *slot };
    let replaces = slot.ts_ns != 0;
    let now = if timed || replaces {
        // SAFETY: a BPF helper without pointer arguments.
        unsafe { bpf_ktime_get_ns() }
    } else {
        UNTIMED_TS
    };
    if replaces {
        let prev = &mut *slot;
        match futex_enter_action(Some(prev), cmd, uaddr, op) {
            FUTEX_ENTER_RESUME => {
                prev.state = FUTEX_CALL_ACTIVE;
                prev.restarts += 1;
                fcount(FCNT_RESTART);
                return;
            }
            FUTEX_ENTER_REPLACE_UNPAIRED => {
                fcount(FCNT_UNPAIRED_ENTER);
                let old = *prev;
                account(&old, 0, now, true);
            }
            _ => {
                fcount(FCNT_RESTART_ABANDONED);
                let old = *prev;
                account(&old, RET_EINTR, now, false);
            }
        }
    }

    let mut flags = if shared { FUTEX_CALL_SHARED } else { 0 };
    let mut pi_word = 0u32;
    let tgid = (pid_tgid >> 32) as u32;
    // A wait that may be a pthread lock's: is its site a known non-lock one (then
    // nothing more is read), else the word a glibc mutex keeps its holder's TID in.
    if (class == FUTEX_CLASS_WAIT || class == FUTEX_CLASS_LOCK_PI)
        && crate::probes::pthread::enabled()
    {
        if crate::probes::pthread::skipped_site(tgid) {
            flags |= FUTEX_CALL_SKIP_SITE;
        } else if let Some(w) = glibc_owner_word(cmd, uaddr) {
            pi_word = w;
            flags |= FUTEX_CALL_OWNER_WORD;
        }
    }
    if class == FUTEX_CLASS_LOCK_PI || class == FUTEX_CLASS_TRYLOCK_PI {
        let (w, f) = read_pi_word(uaddr);
        pi_word = w;
        flags |= f;
    }
    *slot = FutexCall {
        ts_ns: now,
        uaddr,
        waiters,
        tgid,
        cmd,
        op,
        nr,
        state: FUTEX_CALL_ACTIVE,
        flags,
        pi_word,
        restarts: 0,
    };
    if !replaces {
        fcount(FCNT_CALLS_CREATED);
    }
}

/// The word a glibc mutex keeps its holder's TID in (`__owner`, 8 bytes past the futex
/// word `uaddr`), read for a wait command (`FUTEX_WAIT`, `_BITSET`: what a mutex lock
/// waits with); `None` for another command or an unreadable word.
#[inline(always)]
fn glibc_owner_word(cmd: u32, uaddr: u64) -> Option<u32> {
    if cmd != FUTEX_WAIT && cmd != FUTEX_WAIT_BITSET {
        return None;
    }
    // SAFETY: a checked read: a bad address gives an error, never a fault.
    unsafe { bpf_probe_read_user((uaddr + GLIBC_MUTEX_OWNER_OFFSET) as *const u32) }.ok()
}

/// The current task's PI futex word at `uaddr` (its owner's TID and state bits) and the
/// flag saying whether it was read: `FUTEX_CALL_PI_WORD` or `FUTEX_CALL_PI_UNREADABLE`.
#[inline(always)]
fn read_pi_word(uaddr: u64) -> (u32, u32) {
    // SAFETY: a checked read: a bad address gives an error, never a fault.
    match unsafe { bpf_probe_read_user(uaddr as *const u32) } {
        Ok(w) => (w, FUTEX_CALL_PI_WORD),
        Err(_) => (0, FUTEX_CALL_PI_UNREADABLE),
    }
}

#[inline(always)]
fn on_exit(ret: i64, from_restart_syscall: bool) {
    if !gate_open() {
        return;
    }
    let Some(c) = current_call() else {
        if !from_restart_syscall {
            let cfg = CONFIG.load();
            if current_is_target(&cfg) {
                fcount(FCNT_UNPAIRED_EXIT);
            }
        }
        return;
    };
    match futex_exit_action(c.state, ret) {
        FUTEX_EXIT_RESTART_SAME => {
            c.state = FUTEX_CALL_RESTART_SAME;
            return;
        }
        FUTEX_EXIT_RESTART_BLOCK => {
            c.state = FUTEX_CALL_RESTART_BLOCK;
            return;
        }
        FUTEX_EXIT_NOT_OURS => {
            // restart_syscall continuing something else (a nanosleep), or an exit whose
            // entry we missed while a call of this thread waits for its restart.
            if !from_restart_syscall {
                fcount(FCNT_UNPAIRED_EXIT);
            }
            return;
        }
        _ => {}
    }
    let call = *c;
    c.ts_ns = 0;
    fcount(FCNT_EXIT);
    let class = futex_class(call.cmd);
    let outcome = futex_outcome(class, ret);
    let now = match outcome {
        FUTEX_OUTCOME_WAITED | FUTEX_OUTCOME_TIMEOUT | FUTEX_OUTCOME_INTERRUPTED => {
            // SAFETY: a BPF helper without pointer arguments.
            unsafe { bpf_ktime_get_ns() }
        }
        // Not timed: a call that did not wait (the clock read saved).
        _ => call.ts_ns,
    };
    account(&call, ret, now, false);
    // A wait (the only futex call a pthread lock makes): send it to be unwound, so the
    // word can be named after its lock object and call site.
    if class != FUTEX_CLASS_WAIT && class != FUTEX_CLASS_LOCK_PI {
        return;
    }
    let waited = match outcome {
        FUTEX_OUTCOME_WAITED => PTHREAD_WAITED,
        FUTEX_OUTCOME_TIMEOUT | FUTEX_OUTCOME_INTERRUPTED => PTHREAD_WAIT_FAILED,
        _ => PTHREAD_NO_WAIT,
    };
    if call.flags & FUTEX_CALL_SKIP_SITE != 0 {
        crate::probes::pthread::count_skipped();
        return;
    }
    let owner = if call.flags & FUTEX_CALL_OWNER_WORD != 0 {
        call.pi_word & FUTEX_TID_MASK
    } else {
        0
    };
    let wait_ns = now.saturating_sub(call.ts_ns);
    crate::probes::pthread::send_wait(call.tgid, call.uaddr, wait_ns, waited, owner);
}

/// `FutexCall::ts_ns` of a call that is not timed (it cannot wait): non-zero, as 0 marks
/// a thread with no call in progress.
const UNTIMED_TS: u64 = 1;

/// Fold one finished call into its (tgid, uaddr) entry. `unpaired`: the call's exit
/// never came; only that is counted. Out of line: called from entry and exit.
#[inline(never)]
fn account(call: &FutexCall, ret: i64, now: u64, unpaired: bool) {
    let mut uaddr = call.uaddr;
    // A foreign sleep (blocking mode) comes with `ret` 0: no user memory is read here,
    // which would be the current task's.
    let foreign = call.flags & FUTEX_CALL_FOREIGN != 0;
    if call.cmd == FUTEX2_WAITV && ret > 0 && (ret as u64) < call.nr as u64 && !unpaired {
        let woke = waitv_woke(call.waiters, ret as u64);
        if woke != 0 {
            uaddr = woke;
        }
    }
    let key = FutexKey {
        uaddr,
        tgid: call.tgid,
        _pad: 0,
    };
    // The rare paths below (an entry created, a PI thread's name) are calls of their
    // own: what they leave on the stack would otherwise double the paths the verifier
    // walks through the rest of this function (tens of milliseconds at every start).
    let stats = FUTEX_STATS.get_ptr_mut(key).or_else(|| {
        create_stats_entry(uaddr, call.tgid, u32::from(foreign));
        FUTEX_STATS.get_ptr_mut(key)
    });
    let Some(s) = stats else {
        fcount(FCNT_LOST_STATS_FULL);
        return;
    };
    // The entry is shared by every CPU: each count is an atomic addition.
    macro_rules! add {
        ($field:ident $([$i:expr])?, $n:expr) => {
            // SAFETY: a field of a live map value, which every CPU updates atomically.
            unsafe { shared::add(addr_of_mut!((*s).$field $([$i])?), $n) }
        };
    }
    if unpaired {
        add!(unpaired, 1);
        return;
    }
    let cmd = call.cmd as usize;
    if cmd < FUTEX_CMD_SLOTS {
        add!(calls[cmd], 1);
    }
    if call.flags & FUTEX_CALL_SHARED != 0 {
        add!(shared_calls, 1);
    }
    if call.restarts != 0 {
        add!(restarts, call.restarts as u64);
    }
    let class = futex_class(call.cmd);
    if !foreign
        && (class == FUTEX_CLASS_LOCK_PI
            || class == FUTEX_CLASS_UNLOCK_PI
            || class == FUTEX_CLASS_TRYLOCK_PI)
    {
        remember_thread_comm();
    }
    if call.flags & FUTEX_CALL_PI_WORD != 0 {
        let owner = call.pi_word & FUTEX_TID_MASK;
        // The latest owner seen: two CPUs storing one at the same moment may leave the
        // other's thread with this time (either was the owner then).
        // SAFETY: fields of a live map value; the pair is only ever written here.
        unsafe {
            if owner != 0 && call.ts_ns >= read_volatile(addr_of!((*s).pi_owner_ts)) {
                write_volatile(addr_of_mut!((*s).pi_owner_tid), owner as u64);
                shared::store_max(addr_of_mut!((*s).pi_owner_ts), call.ts_ns);
            }
        }
        if call.pi_word & FUTEX_OWNER_DIED != 0 {
            add!(pi_owner_died, 1);
        }
    }
    if call.flags & FUTEX_CALL_PI_UNREADABLE != 0 {
        add!(pi_word_unreadable, 1);
    }

    // One update of the wait statistics for the three outcomes that waited: each copy
    // of it is verified again along every path that reaches it.
    let (waited, failed) = match futex_outcome(class, ret) {
        FUTEX_OUTCOME_EAGAIN => {
            add!(eagain, 1);
            (false, false)
        }
        FUTEX_OUTCOME_WAITED => (true, false),
        FUTEX_OUTCOME_TIMEOUT => {
            add!(timeouts, 1);
            (true, true)
        }
        FUTEX_OUTCOME_INTERRUPTED => {
            add!(interrupted, 1);
            (true, true)
        }
        FUTEX_OUTCOME_ERROR => {
            add!(errors, 1);
            (false, false)
        }
        FUTEX_OUTCOME_WOKE => {
            add!(woken, ret as u64);
            (false, false)
        }
        FUTEX_OUTCOME_REQUEUED => {
            add!(requeued, ret as u64);
            (false, false)
        }
        _ => (false, false),
    };
    if waited
        && !crate::maps::add_wait_shared(
            // SAFETY: a field of a live map value.
            unsafe { addr_of_mut!((*s).wait) },
            now.saturating_sub(call.ts_ns),
            failed,
        )
    {
        fcount(FCNT_LOST_MINMAX);
    }
}

/// The futex of `waiters[i]` (a user `struct futex_waitv` array); 0 if unreadable.
#[inline(never)]
fn waitv_woke(waiters: u64, i: u64) -> u64 {
    waitv_entry(waiters, i).0
}

/// Create the `FUTEX_STATS` entry of (`uaddr`, `tgid`), which a lookup did not find,
/// remembering the process's name unless the current task is not its (`foreign`, 1:
/// blocking mode, which remembers it at the sleep).
#[inline(never)]
fn create_stats_entry(uaddr: u64, tgid: u32, foreign: u32) {
    if foreign == 0 {
        remember_comm(tgid);
    }
    let _ = new_stats_entry(FutexKey {
        uaddr,
        tgid,
        _pad: 0,
    });
}

/// The current thread may be (or become) a PI owner: remember its name.
#[inline(never)]
fn remember_thread_comm() {
    let tid = bpf_get_current_pid_tgid() as u32;
    // SAFETY: a map value, only read, before the program returns.
    if unsafe { FUTEX_COMMS.get(tid) }.is_none()
        && let Ok(comm) = bpf_get_current_comm()
    {
        let _ = FUTEX_COMMS.insert(tid, comm, 0);
    }
}

/// Blocking mode (`--futex-mode blocking`), instead of the syscall tracepoints: the
/// waits that sleep, found where a thread goes to sleep. No syscall tracepoint is
/// attached, so system calls keep the kernel's fast path (the syscall tracepoints put
/// every system call of every process on the traced path, ~50 ns each here), and a
/// futex call that does not sleep (an uncontended wake, an `EAGAIN`) costs nothing; the
/// price is one program on every context switch, and only sleeps are seen.
///
/// A thread switched out asleep (not preempted) inside a futex wait or PI lock of a
/// traced process (its saved registers name the syscall) stores the sleep in its
/// `FUTEX_CALLS` slot, as the entry probe does; switched in again, the sleep is
/// accounted as a wait that waited (`FUTEX_STATS`), from the switch out to the switch
/// in. A call that sleeps more than once counts once per sleep.
#[btf_tracepoint(function = "sched_switch")]
pub fn futex_block_switch(ctx: BtfTracePointContext) -> i32 {
    if !gate_open() {
        return 0;
    }
    // sched_switch(bool preempt, prev, next, unsigned int prev_state)
    let next: *mut aya_ebpf::bindings::task_struct = ctx.arg(2);
    let now = block_end(next);
    let preempt: u64 = ctx.arg(0);
    let prev_state: u64 = ctx.arg(3);
    if preempt & 0xff == 0 && prev_state as u32 != 0 {
        block_start(now, prev_state as u32);
    }
    0
}

/// The current thread (`prev`) goes to sleep (`prev_state`): if inside a futex wait of
/// a traced process, store the sleep. `now`: the clock if [`block_end`] read it, else 0.
#[cfg(bpf_target_arch = "x86_64")]
#[inline(never)]
fn block_start(now: u64, prev_state: u32) {
    if !current_is_target(&CONFIG.load()) {
        return;
    }
    let Some(regs) = current_regs() else {
        return;
    };
    if !futex_sleep_state(prev_state, regs.rax, regs.cs) {
        return;
    }
    let (a0, a1) = (regs.rdi, regs.rsi);
    let Some((cmd, op)) = futex_sleep_cmd(regs.orig_rax as i32, a1, regs.r10) else {
        return;
    };
    let (uaddr, waiters, nwaiters, wflags) = if cmd == FUTEX2_WAITV {
        let (u, f) = waitv_entry(a0, 0);
        (u, a0, a1 as u32, f)
    } else {
        (a0, 0, 0, op)
    };
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let class = futex_class(cmd);
    let Some(slot) = FUTEX_CALLS.current(true) else {
        fcount(FCNT_LOST_CALL_FULL);
        return;
    };
    // SAFETY: the current task's own storage; its switch in (the only other writer)
    // cannot run while it is switching out.
    let slot = unsafe { &mut *slot };
    // Names, while the sleeper is the current task (its switch in runs as another): its
    // process's (if not known: new, evicted, or forgotten at an exec), and for a PI lock
    // its own (an owner's), as the exit probe names a PI caller.
    remember_comm(tgid);
    let mut flags = FUTEX_CALL_FOREIGN
        | if wflags & FUTEX_PRIVATE_FLAG == 0 {
            FUTEX_CALL_SHARED
        } else {
            0
        };
    let mut pi_word = 0;
    if class == FUTEX_CLASS_LOCK_PI {
        remember_thread_comm();
        let (w, f) = read_pi_word(uaddr);
        pi_word = w;
        flags |= f;
    }
    if keep_pthread_sleep(tgid, uaddr, cmd, (regs.rip, regs.rsp, regs.rbp)) {
        flags |= FUTEX_CALL_PTHREAD_KEPT;
    }
    if slot.ts_ns != 0 {
        // A sleep whose switch in was not seen (the task storage was busy then):
        // never timed.
        fcount(FCNT_UNPAIRED_ENTER);
    } else {
        fcount(FCNT_CALLS_CREATED);
    }
    fcount(FCNT_ENTER);
    *slot = FutexCall {
        ts_ns: if now != 0 {
            now
        } else {
            // SAFETY: a BPF helper without pointer arguments.
            unsafe { bpf_ktime_get_ns() }
        },
        uaddr,
        waiters,
        tgid,
        cmd,
        op,
        nr: nwaiters,
        state: FUTEX_CALL_ACTIVE,
        flags,
        pi_word,
        restarts: 0,
    };
}

#[cfg(not(bpf_target_arch = "x86_64"))]
#[inline(always)]
fn block_start(_now: u64, _prev_state: u32) {}

/// Blocking mode: a sleep in a wait (the only futex call a pthread lock makes) keeps the
/// sleeper's registers and stack for attribution, unless its syscall site is a known
/// non-lock one, as the exit probe of the default mode does; a mutex's holder is the
/// glibc `__owner` word as it stands now. Whether they were kept.
/// `regs`: its user ip, sp and bp.
#[cfg(bpf_target_arch = "x86_64")]
#[inline(always)]
fn keep_pthread_sleep(tgid: u32, uaddr: u64, cmd: u32, (ip, sp, bp): (u64, u64, u64)) -> bool {
    let class = futex_class(cmd);
    if class != FUTEX_CLASS_WAIT && class != FUTEX_CLASS_LOCK_PI
        || !crate::probes::pthread::enabled()
    {
        return false;
    }
    if crate::probes::pthread::skipped_ip(tgid, ip) {
        crate::probes::pthread::count_skipped();
        return false;
    }
    let owner = glibc_owner_word(cmd, uaddr).map_or(0, |w| w & FUTEX_TID_MASK);
    crate::probes::pthread::keep_sleep(tgid, uaddr, owner, (ip, sp, bp))
}

/// `next` runs again: if it slept in a futex wait, account the sleep. The clock read
/// (one switch, one time: the switch out of `prev` shares it), or 0.
#[inline(always)]
fn block_end(next: *mut aya_ebpf::bindings::task_struct) -> u64 {
    let Some(c) = FUTEX_CALLS.of_task(next) else {
        return 0;
    };
    // SAFETY: `next`'s storage: written only by its own switch out, which cannot run
    // while it is being switched in.
    let c = unsafe { &mut *c };
    if c.ts_ns == 0 {
        return 0;
    }
    let call = *c;
    c.ts_ns = 0;
    fcount(FCNT_EXIT);
    // SAFETY: a BPF helper without pointer arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    account(&call, 0, now, false);
    if call.flags & FUTEX_CALL_PTHREAD_KEPT != 0 {
        crate::probes::pthread::send_kept(next, now.saturating_sub(call.ts_ns));
    }
    now
}

/// Calls in flight: one `FutexCall` record per thread inside a futex call, written to
/// the iterator's file (`iter/task`), which userspace reads at each snapshot.
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/task")]
pub fn futex_task_iter(ctx: *mut core::ffi::c_void) -> i32 {
    FUTEX_CALLS.write_live(ctx, |c| c.ts_ns != 0);
    0
}
