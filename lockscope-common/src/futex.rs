//! User-space locks: what the futex syscall tracepoints feed (`sys_enter/exit_futex` and
//! the futex2 syscalls `futex_wait`, `futex_wake`, `futex_waitv`, `futex_requeue`).
//!
//! A call is kept per thread from its `sys_enter` to its `sys_exit` (through restarts),
//! then aggregated per (process, futex word address) in a per-CPU hash.

use crate::{ContentionStats, assert_size};

/// futex(2) commands (`op & FUTEX_CMD_MASK`, include/uapi/linux/futex.h).
pub const FUTEX_WAIT: u32 = 0;
pub const FUTEX_WAKE: u32 = 1;
pub const FUTEX_FD: u32 = 2;
pub const FUTEX_REQUEUE: u32 = 3;
pub const FUTEX_CMP_REQUEUE: u32 = 4;
pub const FUTEX_WAKE_OP: u32 = 5;
pub const FUTEX_LOCK_PI: u32 = 6;
pub const FUTEX_UNLOCK_PI: u32 = 7;
pub const FUTEX_TRYLOCK_PI: u32 = 8;
pub const FUTEX_WAIT_BITSET: u32 = 9;
pub const FUTEX_WAKE_BITSET: u32 = 10;
pub const FUTEX_WAIT_REQUEUE_PI: u32 = 11;
pub const FUTEX_CMP_REQUEUE_PI: u32 = 12;
pub const FUTEX_LOCK_PI2: u32 = 13;
/// Flags of futex(2)'s `op`.
pub const FUTEX_PRIVATE_FLAG: u32 = 128;
pub const FUTEX_CLOCK_REALTIME: u32 = 256;
pub const FUTEX_CMD_MASK: u32 = !(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME);

/// The futex2 syscalls get command slots after futex(2)'s own commands.
pub const FUTEX2_WAIT: u32 = 14;
pub const FUTEX2_WAKE: u32 = 15;
pub const FUTEX2_WAITV: u32 = 16;
pub const FUTEX2_REQUEUE: u32 = 17;
/// A futex(2) `op` whose command the kernel does not know (it returns -ENOSYS).
pub const FUTEX_CMD_UNKNOWN: u32 = 18;
/// Slots of [`FutexStats::calls`].
pub const FUTEX_CMD_SLOTS: usize = 20;

/// futex2 flags (`FUTEX2_*`): size in the low two bits, NUMA, MPOL, PRIVATE.
pub const FUTEX2_SIZE_MASK: u32 = 0x03;
pub const FUTEX2_NUMA: u32 = 0x04;
pub const FUTEX2_MPOL: u32 = 0x08;
pub const FUTEX2_PRIVATE: u32 = FUTEX_PRIVATE_FLAG;

/// The futex word of a PI futex: owner TID and two state bits.
pub const FUTEX_WAITERS: u32 = 0x8000_0000;
pub const FUTEX_OWNER_DIED: u32 = 0x4000_0000;
pub const FUTEX_TID_MASK: u32 = 0x3fff_ffff;

/// Return values the exit probe tells apart (negated errno).
pub const RET_EINTR: i64 = -4;
pub const RET_EAGAIN: i64 = -11;
pub const RET_ETIMEDOUT: i64 = -110;
/// Kernel-internal restart codes: the syscall is re-executed (`ERESTARTSYS`,
/// `ERESTARTNOINTR`, `ERESTARTNOHAND`) or continued by `restart_syscall`
/// (`ERESTART_RESTARTBLOCK`, timed waits) once a signal was handled.
pub const RET_ERESTARTSYS: i64 = -512;
pub const RET_ERESTARTNOINTR: i64 = -513;
pub const RET_ERESTARTNOHAND: i64 = -514;
pub const RET_ERESTART_RESTARTBLOCK: i64 = -516;

/// What a command does, for the counters.
pub const FUTEX_CLASS_OTHER: u32 = 0;
/// Blocks until woken, timed out or interrupted (WAIT, WAIT_BITSET, WAIT_REQUEUE_PI,
/// futex_wait, futex_waitv).
pub const FUTEX_CLASS_WAIT: u32 = 1;
/// Wakes waiters; returns how many (WAKE, WAKE_BITSET, WAKE_OP, futex_wake).
pub const FUTEX_CLASS_WAKE: u32 = 2;
/// Wakes some and moves others; returns how many were woken or moved.
pub const FUTEX_CLASS_REQUEUE: u32 = 3;
/// Takes a PI futex in the kernel, blocking (LOCK_PI, LOCK_PI2).
pub const FUTEX_CLASS_LOCK_PI: u32 = 4;
pub const FUTEX_CLASS_UNLOCK_PI: u32 = 5;
pub const FUTEX_CLASS_TRYLOCK_PI: u32 = 6;

/// The class of a command slot. Shared by the probes and userspace so they agree.
#[inline(always)]
pub const fn futex_class(cmd: u32) -> u32 {
    match cmd {
        FUTEX_WAIT | FUTEX_WAIT_BITSET | FUTEX_WAIT_REQUEUE_PI | FUTEX2_WAIT | FUTEX2_WAITV => {
            FUTEX_CLASS_WAIT
        }
        FUTEX_WAKE | FUTEX_WAKE_BITSET | FUTEX_WAKE_OP | FUTEX2_WAKE => FUTEX_CLASS_WAKE,
        FUTEX_REQUEUE | FUTEX_CMP_REQUEUE | FUTEX_CMP_REQUEUE_PI | FUTEX2_REQUEUE => {
            FUTEX_CLASS_REQUEUE
        }
        FUTEX_LOCK_PI | FUTEX_LOCK_PI2 => FUTEX_CLASS_LOCK_PI,
        FUTEX_UNLOCK_PI => FUTEX_CLASS_UNLOCK_PI,
        FUTEX_TRYLOCK_PI => FUTEX_CLASS_TRYLOCK_PI,
        _ => FUTEX_CLASS_OTHER,
    }
}

/// The command slot of a futex(2) `op`.
#[inline(always)]
pub const fn futex_cmd_slot(op: u32) -> u32 {
    let cmd = op & FUTEX_CMD_MASK;
    if cmd <= FUTEX_LOCK_PI2 {
        cmd
    } else {
        FUTEX_CMD_UNKNOWN
    }
}

/// Aggregation key: one futex word of one process. Private and shared futexes alike are
/// keyed by the waiter's (tgid, uaddr); shared use is counted in `shared_calls`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FutexKey {
    pub uaddr: u64,
    pub tgid: u32,
    pub _pad: u32,
}
assert_size!(FutexKey, 16);

/// Per-(tgid, uaddr) figures on one CPU (the map is per-CPU; userspace sums CPUs).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FutexStats {
    /// Blocking calls (wait class and LOCK_PI) that slept or could have: every such call
    /// except those that returned `EAGAIN` or another immediate error. `failed` counts
    /// timeouts and interruptions.
    pub wait: ContentionStats,
    /// Calls by command slot (`FUTEX_*` / `FUTEX2_*` / `FUTEX_CMD_UNKNOWN`).
    pub calls: [u64; FUTEX_CMD_SLOTS],
    /// Wait-class calls that returned `EAGAIN`: the word had changed, no wait.
    pub eagain: u64,
    /// Blocking calls that returned `ETIMEDOUT`.
    pub timeouts: u64,
    /// Blocking calls interrupted by a signal (`EINTR`, or a restart that never resumed).
    pub interrupted: u64,
    /// Calls that failed with any other error.
    pub errors: u64,
    /// Tasks woken by wake-class calls (sum of their return values).
    pub woken: u64,
    /// Tasks woken or requeued by requeue-class calls (sum of their return values).
    pub requeued: u64,
    /// Restarts after a signal (re-executed syscall or `restart_syscall`).
    pub restarts: u64,
    /// Calls whose exit never came (a newer call of the same thread replaced them).
    pub unpaired: u64,
    /// Calls without the private flag (the futex may be shared between processes).
    pub shared_calls: u64,
    /// Owner TID read from the futex word at the latest LOCK_PI / TRYLOCK_PI entry that
    /// found an owner, and when (ns, `bpf_ktime_get_ns`), to pick the latest across CPUs.
    pub pi_owner_tid: u64,
    pub pi_owner_ts: u64,
    /// LOCK_PI entries that found `FUTEX_OWNER_DIED` set.
    pub pi_owner_died: u64,
    /// LOCK_PI / TRYLOCK_PI entries whose futex word could not be read.
    pub pi_word_unreadable: u64,
}
assert_size!(
    FutexStats,
    size_of::<ContentionStats>() + 8 * FUTEX_CMD_SLOTS + 8 * 13
);

impl FutexStats {
    pub const EMPTY: Self = Self {
        wait: ContentionStats::EMPTY,
        calls: [0; FUTEX_CMD_SLOTS],
        eagain: 0,
        timeouts: 0,
        interrupted: 0,
        errors: 0,
        woken: 0,
        requeued: 0,
        restarts: 0,
        unpaired: 0,
        shared_calls: 0,
        pi_owner_tid: 0,
        pi_owner_ts: 0,
        pi_owner_died: 0,
        pi_word_unreadable: 0,
    };
}

impl Default for FutexStats {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// `FutexCall::state`: in the syscall.
pub const FUTEX_CALL_ACTIVE: u32 = 0;
/// Left with `ERESTARTSYS`/`ERESTARTNOINTR`/`ERESTARTNOHAND`: the same syscall may be
/// re-executed with the same arguments.
pub const FUTEX_CALL_RESTART_SAME: u32 = 1;
/// Left with `ERESTART_RESTARTBLOCK`: `restart_syscall` may continue it.
pub const FUTEX_CALL_RESTART_BLOCK: u32 = 2;

/// `FutexCall::flags` bits.
pub const FUTEX_CALL_SHARED: u32 = 1;
/// `pi_word` holds the futex word read at entry.
pub const FUTEX_CALL_PI_WORD: u32 = 2;
pub const FUTEX_CALL_PI_UNREADABLE: u32 = 4;
/// `pi_word` holds the word 8 bytes past a FUTEX_WAIT's futex word, read at entry: a
/// glibc mutex's `__owner` (the holder's TID) when the word is a mutex's `__lock`.
pub const FUTEX_CALL_OWNER_WORD: u32 = 8;
/// Where glibc's `pthread_mutex_t` keeps its holder's TID (`__data.__owner`), from its
/// futex word (`__data.__lock`, at 0).
pub const GLIBC_MUTEX_OWNER_OFFSET: u64 = 8;
/// The wait's syscall site is one userspace found never to be a lock function's
/// (`PTHREAD_SKIP`, checked at entry): it is counted, not sent for attribution.
pub const FUTEX_CALL_SKIP_SITE: u32 = 16;
/// Blocking mode: the sleep is accounted by another task's program (at the sleeper's
/// switch in, `current` is the task switched out), so nothing may be named after the
/// current task then; its names were remembered at the sleep.
pub const FUTEX_CALL_FOREIGN: u32 = 32;
/// Blocking mode: the sleeper's user registers and stack were kept at its switch out
/// (`PTHREAD_PENDING`), to be sent for attribution with the wait time at its switch in.
pub const FUTEX_CALL_PTHREAD_KEPT: u32 = 64;

/// A futex call in progress, per thread, from `sys_enter` to its final `sys_exit`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FutexCall {
    /// Entry time of the first attempt (restarts keep it).
    pub ts_ns: u64,
    pub uaddr: u64,
    /// futex_waitv / futex_requeue: the `waiters` array (to attribute the exit).
    pub waiters: u64,
    pub tgid: u32,
    /// Command slot.
    pub cmd: u32,
    /// futex(2) `op` as passed (to recognise a re-executed call), or futex2 flags.
    pub op: u32,
    /// futex_waitv: number of waiters.
    pub nr: u32,
    /// One of `FUTEX_CALL_*` states.
    pub state: u32,
    /// `FUTEX_CALL_*` flag bits.
    pub flags: u32,
    /// The futex word at LOCK_PI / TRYLOCK_PI entry.
    pub pi_word: u32,
    pub restarts: u32,
}
assert_size!(FutexCall, 56);

/// What the entry probe does with a new call, given the thread's call in progress.
pub const FUTEX_ENTER_NEW: u32 = 0;
/// The kernel re-executes a call that left with a restart code: same call, keep its start.
pub const FUTEX_ENTER_RESUME: u32 = 1;
/// The previous call's exit never reached us: count it as unpaired, start the new one.
pub const FUTEX_ENTER_REPLACE_UNPAIRED: u32 = 2;
/// The previous call left for a signal and was not resumed: it ended interrupted.
pub const FUTEX_ENTER_REPLACE_ABANDONED: u32 = 3;

/// Pairing at entry. `prev` is the thread's call in progress, if any.
#[inline(always)]
pub fn futex_enter_action(prev: Option<&FutexCall>, cmd: u32, uaddr: u64, op: u32) -> u32 {
    match prev {
        None => FUTEX_ENTER_NEW,
        Some(p)
            if p.state == FUTEX_CALL_RESTART_SAME
                && p.cmd == cmd
                && p.uaddr == uaddr
                && p.op == op =>
        {
            FUTEX_ENTER_RESUME
        }
        Some(p) if p.state == FUTEX_CALL_ACTIVE => FUTEX_ENTER_REPLACE_UNPAIRED,
        Some(_) => FUTEX_ENTER_REPLACE_ABANDONED,
    }
}

/// What the exit probe does with the thread's call in progress.
pub const FUTEX_EXIT_FINISH: u32 = 0;
/// Keep the call: the kernel will re-execute it (`FUTEX_CALL_RESTART_SAME`) ...
pub const FUTEX_EXIT_RESTART_SAME: u32 = 1;
/// ... or continue it through `restart_syscall` (`FUTEX_CALL_RESTART_BLOCK`).
pub const FUTEX_EXIT_RESTART_BLOCK: u32 = 2;
/// Not an exit of this call (it waits for its restart): `restart_syscall` continuing
/// something else, or an exit whose entry was missed.
pub const FUTEX_EXIT_NOT_OURS: u32 = 3;

/// Pairing at exit, from the call's state and the syscall's return value.
#[inline(always)]
pub const fn futex_exit_action(state: u32, ret: i64) -> u32 {
    if state != FUTEX_CALL_ACTIVE {
        FUTEX_EXIT_NOT_OURS
    } else if ret == RET_ERESTARTSYS || ret == RET_ERESTARTNOINTR || ret == RET_ERESTARTNOHAND {
        FUTEX_EXIT_RESTART_SAME
    } else if ret == RET_ERESTART_RESTARTBLOCK {
        FUTEX_EXIT_RESTART_BLOCK
    } else {
        FUTEX_EXIT_FINISH
    }
}

/// How a finished call counts.
pub const FUTEX_OUTCOME_NONE: u32 = 0;
/// A blocking call that returned at once because the futex word had changed.
pub const FUTEX_OUTCOME_EAGAIN: u32 = 1;
/// A blocking call that waited and returned normally (woken / acquired).
pub const FUTEX_OUTCOME_WAITED: u32 = 2;
pub const FUTEX_OUTCOME_TIMEOUT: u32 = 3;
pub const FUTEX_OUTCOME_INTERRUPTED: u32 = 4;
pub const FUTEX_OUTCOME_ERROR: u32 = 5;
/// A wake-class call: the return value is the number of tasks woken.
pub const FUTEX_OUTCOME_WOKE: u32 = 6;
/// A requeue-class call: the return value is the number of tasks woken or requeued.
pub const FUTEX_OUTCOME_REQUEUED: u32 = 7;

/// Classify a finished call by its command class and return value.
#[inline(always)]
pub const fn futex_outcome(class: u32, ret: i64) -> u32 {
    if class == FUTEX_CLASS_WAIT || class == FUTEX_CLASS_LOCK_PI {
        if ret == RET_EAGAIN && class == FUTEX_CLASS_WAIT {
            FUTEX_OUTCOME_EAGAIN
        } else if ret >= 0 {
            FUTEX_OUTCOME_WAITED
        } else if ret == RET_ETIMEDOUT {
            FUTEX_OUTCOME_TIMEOUT
        } else if ret == RET_EINTR {
            FUTEX_OUTCOME_INTERRUPTED
        } else {
            FUTEX_OUTCOME_ERROR
        }
    } else if ret < 0 {
        FUTEX_OUTCOME_ERROR
    } else if class == FUTEX_CLASS_WAKE {
        FUTEX_OUTCOME_WOKE
    } else if class == FUTEX_CLASS_REQUEUE {
        FUTEX_OUTCOME_REQUEUED
    } else {
        FUTEX_OUTCOME_NONE
    }
}

/// `struct futex_waitv` (include/uapi/linux/futex.h): the futex2 wait vector element.
pub const FUTEX_WAITV_SIZE: u64 = 24;
pub const FUTEX_WAITV_UADDR_OFF: u64 = 8;
pub const FUTEX_WAITV_FLAGS_OFF: u64 = 16;

/// Slots of the per-CPU `FUTEX_COUNTERS` array.
pub const FCNT_ENTER: u32 = 0;
pub const FCNT_EXIT: u32 = 1;
/// A futex syscall exit of a target with no entry (the call began before tracing).
pub const FCNT_UNPAIRED_EXIT: u32 = 2;
/// An entry replaced a call of the same thread whose exit never came.
pub const FCNT_UNPAIRED_ENTER: u32 = 3;
/// The aggregation map was full: a whole call was not aggregated.
pub const FCNT_LOST_STATS_FULL: u32 = 4;
/// The kernel could not allocate a thread's call storage: a call was not timed or counted.
pub const FCNT_LOST_CALL_FULL: u32 = 5;
/// Restarts seen (re-executed or `restart_syscall`).
pub const FCNT_RESTART: u32 = 6;
/// A restarted call was abandoned (the thread made a different futex call instead):
/// counted as interrupted.
pub const FCNT_RESTART_ABANDONED: u32 = 7;
/// Keys created in `FUTEX_STATS` (an LRU map: created minus live entries is what it
/// evicted).
pub const FCNT_STATS_CREATED: u32 = 8;
/// Calls begun in a thread's `FUTEX_CALLS` storage with none in progress (each final exit
/// ends one: `FCNT_EXIT`): created minus exits minus the calls in flight is what threads
/// took with them when they died inside a call.
pub const FCNT_CALLS_CREATED: u32 = 9;
/// A call handled whole at its exit (one that cannot wait: [`futex_stateless`]): an
/// entry, a created call and an exit at once, folded into those three by
/// [`fold_futex_counters`] when the counters are read.
pub const FCNT_STATELESS: u32 = 10;
/// Waits whose minimum or maximum could not be stored in the shared entry (see
/// `CNT_LOST_MINMAX`).
pub const FCNT_LOST_MINMAX: u32 = 11;
pub const FUTEX_COUNTERS_LEN: u32 = 12;

pub const FUTEX_COUNTER_NAMES: [&str; FUTEX_COUNTERS_LEN as usize] = [
    "enter",
    "exit",
    "unpaired_exit",
    "unpaired_enter",
    "futex_stats_map_full",
    "futex_call_map_full",
    "restarts",
    "restart_abandoned",
    "futex_stats_created",
    "futex_calls_created",
    "stateless",
    "futex_min_max_missed",
];

/// Calls handled whole at their exit count as an entry, a created call and an exit: fold
/// them in, so that readers see one set of counters.
pub fn fold_futex_counters(c: &mut [u64; FUTEX_COUNTERS_LEN as usize]) {
    let n = core::mem::take(&mut c[FCNT_STATELESS as usize]);
    for slot in [FCNT_ENTER, FCNT_EXIT, FCNT_CALLS_CREATED] {
        c[slot as usize] = c[slot as usize].saturating_add(n);
    }
}

/// x86_64 syscall numbers of futex(2) and futex_wake(2) (`__syscall_nr` of the syscall
/// tracepoints; compat syscalls are not traced on x86).
pub const NR_FUTEX_X86_64: i32 = 202;
pub const NR_FUTEX_WAKE_X86_64: i32 = 454;
/// x86_64 numbers of futex_waitv(2) and futex_wait(2).
pub const NR_FUTEX_WAITV_X86_64: i32 = 449;
pub const NR_FUTEX_WAIT_X86_64: i32 = 455;
/// x86_64 numbers of futex_requeue(2) and restart_syscall(2).
pub const NR_FUTEX_REQUEUE_X86_64: i32 = 456;
pub const NR_RESTART_SYSCALL_X86_64: i32 = 219;

/// Does system call `nr` (x86_64, as the raw `sys_enter`/`sys_exit` tracepoints give
/// it) concern the futex probes: a futex syscall or `restart_syscall`? Every system call
/// of the machine asks this, first; all other calls return at once. `entry`: at entry
/// `futex_wake` is not one (the exit handles it whole, see [`futex_stateless`]).
#[inline(always)]
pub const fn futex_raw_nr(nr: i64, entry: bool) -> bool {
    // futex(2) and restart_syscall are far from the futex2 block (449, 454-456).
    if nr < NR_FUTEX_WAITV_X86_64 as i64 {
        nr == NR_FUTEX_X86_64 as i64 || nr == NR_RESTART_SYSCALL_X86_64 as i64
    } else {
        nr == NR_FUTEX_WAITV_X86_64 as i64
            || (nr >= NR_FUTEX_WAKE_X86_64 as i64 + entry as i64
                && nr <= NR_FUTEX_REQUEUE_X86_64 as i64)
    }
}

/// Task states (`include/linux/sched.h`) of `sched_switch`'s `prev_state`.
pub const TASK_INTERRUPTIBLE: u32 = 0x1;
pub const TASK_UNINTERRUPTIBLE: u32 = 0x2;
/// Stopped, traced, exiting, dead, parked, frozen: a task in one of these is not waiting
/// for a futex, whatever system call it was in.
pub const TASK_NOT_A_WAIT: u32 = 0x4 | 0x8 | 0x10 | 0x20 | 0x40 | 0x80 | 0x8000;
/// `pt_regs->ax` of an x86_64 task inside a system call: `-ENOSYS` from the entry until
/// the call returns (then it holds the return value, while `orig_ax` keeps the number
/// through the return path: signal delivery, a stop, exit).
pub const SYSCALL_RUNNING_AX: i64 = -38;
/// `pt_regs->cs` of a 64-bit user task (`__USER_CS`); a 32-bit one's system calls have
/// other numbers and registers.
pub const USER64_CS: u64 = 0x33;

/// Blocking mode: is a task leaving its CPU with `prev_state`, in a system call (`ax`,
/// `cs` of its saved registers), going to sleep in that call the way a futex wait does
/// (interruptible or not), rather than stopped, traced, frozen or exiting on its way out?
#[inline(always)]
pub const fn futex_sleep_state(prev_state: u32, ax: u64, cs: u64) -> bool {
    prev_state & (TASK_INTERRUPTIBLE | TASK_UNINTERRUPTIBLE) != 0
        && prev_state & TASK_NOT_A_WAIT == 0
        && ax as i64 == SYSCALL_RUNNING_AX
        && cs == USER64_CS
}

/// Blocking mode (`--futex-mode blocking`): a thread is going to sleep inside system call
/// `nr` (x86_64 numbers, from its saved registers) with arguments `a1`, `a2`, `a3` (the
/// second to fourth). If that call is a futex wait or a PI lock, its command slot and
/// its op (futex(2)) or flags (futex2); `None` for anything else, futex wakes included
/// (a wake that sleeps does so on some other lock). futex_waitv's flags argument is
/// reserved (0): its waiters carry their own.
#[inline(always)]
pub const fn futex_sleep_cmd(nr: i32, a1: u64, a3: u64) -> Option<(u32, u32)> {
    match nr {
        NR_FUTEX_X86_64 => {
            let op = a1 as u32;
            let cmd = futex_cmd_slot(op);
            match futex_class(cmd) {
                FUTEX_CLASS_WAIT | FUTEX_CLASS_LOCK_PI => Some((cmd, op)),
                _ => None,
            }
        }
        // futex_wait(uaddr, val, mask, flags, timeout, clockid)
        NR_FUTEX_WAIT_X86_64 => Some((FUTEX2_WAIT, a3 as u32)),
        // futex_waitv(waiters, nr_futexes, flags, timeout, clockid)
        NR_FUTEX_WAITV_X86_64 => Some((FUTEX2_WAITV, 0)),
        _ => None,
    }
}

/// Is a call of command slot `cmd` one that cannot wait, so that its exit alone can
/// account it (the arguments read again from the syscall's saved registers, which the
/// kernel leaves as the caller set them)? futex(2) calls that are not waits or PI locks,
/// and futex_wake(2); not futex_requeue(2), whose word is read from user memory at entry.
/// The entry and exit probes both decide with this: a call is either stored at its entry
/// or handled at its exit, never both.
#[inline(always)]
pub const fn futex_stateless(nr: i32, cmd: u32) -> bool {
    match nr {
        NR_FUTEX_X86_64 => !futex_timed(futex_class(cmd)),
        NR_FUTEX_WAKE_X86_64 => true,
        _ => false,
    }
}

/// Calls of this class are timed: they can wait (or order PI owners by time).
#[inline(always)]
pub const fn futex_timed(class: u32) -> bool {
    matches!(
        class,
        FUTEX_CLASS_WAIT | FUTEX_CLASS_LOCK_PI | FUTEX_CLASS_TRYLOCK_PI
    )
}

/// Slots of the per-CPU `FUTEX_HOT` array (a power of two).
pub const FUTEX_HOT_SLOTS: u32 = 64;

/// The wake-class calls of one (tgid, uaddr, command) on one CPU, counted in a per-CPU
/// array slot instead of `FUTEX_STATS`: a wake that does not block is the most common
/// futex call, and a hash lookup was most of its cost. The slot is found from the key
/// ([`futex_hot_slot`]); when another key needs it, its counts move to `FUTEX_STATS`
/// ([`FutexHot::fold_into`]) with `seq` odd meanwhile, so that a reader can tell a read
/// of the slot and of the hash that a move fell between. `calls == 0`: the slot is free.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FutexHot {
    pub uaddr: u64,
    pub tgid: u32,
    /// The command slot (`FUTEX_WAKE`, `FUTEX_WAKE_BITSET`, `FUTEX_WAKE_OP`, `FUTEX2_WAKE`).
    pub cmd: u32,
    /// Even at rest, odd while the counts move to `FUTEX_STATS`.
    pub seq: u64,
    pub calls: u64,
    pub shared_calls: u64,
    /// Tasks woken (the calls' return values).
    pub woken: u64,
    /// Calls that failed.
    pub errors: u64,
    pub _pad: u64,
}
assert_size!(FutexHot, 64);

impl FutexHot {
    /// The key its counts belong to.
    #[inline(always)]
    pub const fn key(&self) -> FutexKey {
        FutexKey {
            uaddr: self.uaddr,
            tgid: self.tgid,
            _pad: 0,
        }
    }

    /// Its counts since `earlier`, a read of the same slot before (same key, same `seq`).
    #[inline(always)]
    pub const fn since(&self, earlier: &Self) -> Self {
        Self {
            calls: self.calls.saturating_sub(earlier.calls),
            shared_calls: self.shared_calls.saturating_sub(earlier.shared_calls),
            woken: self.woken.saturating_sub(earlier.woken),
            errors: self.errors.saturating_sub(earlier.errors),
            ..*self
        }
    }

    /// Add its counts to a `FUTEX_STATS` value of the same key.
    #[inline(always)]
    pub fn fold_into(&self, s: &mut FutexStats) {
        let cmd = self.cmd as usize;
        if cmd < FUTEX_CMD_SLOTS {
            s.calls[cmd] += self.calls;
        }
        s.shared_calls += self.shared_calls;
        s.woken += self.woken;
        s.errors += self.errors;
    }

    /// [`Self::fold_into`] for the shared `FUTEX_STATS` entry, which other CPUs update at
    /// the same time.
    ///
    /// # Safety
    /// `s` points at a live map value that is only ever updated atomically.
    #[inline(always)]
    pub unsafe fn fold_into_shared(&self, s: *mut FutexStats) {
        use crate::shared::add;
        use core::ptr::addr_of_mut;
        let cmd = self.cmd as usize;
        // SAFETY: fields of a live value, each 8-byte aligned; the caller's contract.
        unsafe {
            if cmd < FUTEX_CMD_SLOTS {
                add(addr_of_mut!((*s).calls[cmd]), self.calls);
            }
            add(addr_of_mut!((*s).shared_calls), self.shared_calls);
            add(addr_of_mut!((*s).woken), self.woken);
            add(addr_of_mut!((*s).errors), self.errors);
        }
    }
}

/// The `FUTEX_HOT` slot of a key: a multiplicative hash of the word's address (futex
/// words are at least 4-byte aligned) and the process. The shifted XOR first: a
/// multiplication alone puts words a power of two apart (one per cache line, say) into
/// a few slots.
#[inline(always)]
pub const fn futex_hot_slot(tgid: u32, uaddr: u64) -> u32 {
    let x = (uaddr >> 2) ^ ((tgid as u64) << 32);
    let h = (x ^ (x >> 7)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((h >> 58) as u32) & (FUTEX_HOT_SLOTS - 1)
}

/// Entries of `FUTEX_STATS` (shared by all CPUs: 24 MB whatever their number).
pub const FUTEX_STATS_MAX_ENTRIES: u32 = 16384;

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for FutexKey {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for FutexStats {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for FutexCall {}
    // SAFETY: repr(C) integers with an explicit padding field: every bit pattern is a value.
    unsafe impl aya::Pod for FutexHot {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_slots_spread_words_one_cache_line_apart() {
        // 64 words 4 bytes to a page apart (64: one per cache line, as `workload
        // futex-mutex --locks 64` lays them out), in one process: spread at least as a
        // random slot would (about 40 of 64 slots used).
        for stride in [4, 8, 16, 64, 128, 4096] {
            let mut used = [false; FUTEX_HOT_SLOTS as usize];
            for i in 0..64u64 {
                used[futex_hot_slot(4242, 0x7f00_0000_1000 + stride * i) as usize] = true;
            }
            let n = used.iter().filter(|&&u| u).count();
            assert!(n >= 38, "stride {stride}: {n} slots");
        }
        // The same word in another process lands elsewhere (here).
        assert_ne!(
            futex_hot_slot(1, 0x7f00_0000_1000),
            futex_hot_slot(2, 0x7f00_0000_1000)
        );
    }

    #[test]
    fn a_hot_slot_folds_into_its_command() {
        let h = FutexHot {
            cmd: FUTEX2_WAKE,
            calls: 3,
            shared_calls: 1,
            woken: 2,
            errors: 1,
            ..Default::default()
        };
        let mut s = FutexStats::EMPTY;
        h.fold_into(&mut s);
        h.fold_into(&mut s);
        assert_eq!(s.calls[FUTEX2_WAKE as usize], 6);
        assert_eq!((s.shared_calls, s.woken, s.errors), (2, 4, 2));
    }

    #[test]
    fn the_raw_syscall_probes_pick_the_futex_calls_and_restart_syscall() {
        for nr in 0..1024i64 {
            let futex = matches!(nr, 202 | 219 | 449 | 454 | 455 | 456);
            assert_eq!(futex_raw_nr(nr, false), futex, "exit {nr}");
            // futex_wake is handled whole at its exit.
            assert_eq!(futex_raw_nr(nr, true), futex && nr != 454, "entry {nr}");
        }
        // No syscall (-1), an x32 futex (the x32 bit set): not ours.
        for nr in [-1, 0x4000_0000 | 202, i64::MIN, i64::MAX] {
            assert!(!futex_raw_nr(nr, false) && !futex_raw_nr(nr, true), "{nr}");
        }
    }

    #[test]
    fn calls_that_cannot_wait_are_handled_at_their_exit() {
        let f = NR_FUTEX_X86_64;
        for cmd in [
            FUTEX_WAKE,
            FUTEX_WAKE_OP,
            FUTEX_CMP_REQUEUE,
            FUTEX_UNLOCK_PI,
            FUTEX_FD,
        ] {
            assert!(futex_stateless(f, cmd), "{cmd}");
        }
        for cmd in [
            FUTEX_WAIT,
            FUTEX_WAIT_BITSET,
            FUTEX_LOCK_PI,
            FUTEX_TRYLOCK_PI,
        ] {
            assert!(!futex_stateless(f, cmd), "{cmd}");
        }
        assert!(futex_stateless(NR_FUTEX_WAKE_X86_64, FUTEX2_WAKE));
        // futex_wait, futex_waitv, futex_requeue, restart_syscall: stored at entry.
        for nr in [455, 449, 456, 219] {
            assert!(!futex_stateless(nr, FUTEX_WAKE), "{nr}");
        }
    }

    #[test]
    fn only_sleeps_inside_a_running_64_bit_call_are_waits() {
        let running = SYSCALL_RUNNING_AX as u64;
        // futex_wait sleeps TASK_INTERRUPTIBLE | TASK_FREEZABLE; a PI lock may sleep
        // uninterruptibly; a killable wait has TASK_WAKEKILL too.
        for state in [0x1, 0x2001, 0x2, 0x102] {
            assert!(futex_sleep_state(state, running, USER64_CS), "{state:#x}");
        }
        // Stopped (SIGSTOP), traced (ptrace stops), dead (the last switch), parked, frozen.
        for state in [0x4, 0x8, 0x108, 0x80, 0x40, 0x8000, 0x0] {
            assert!(!futex_sleep_state(state, running, USER64_CS), "{state:#x}");
        }
        // The call returned (ax holds its result): a sleep on the way out is not it.
        assert!(!futex_sleep_state(0x1, 0, USER64_CS));
        assert!(!futex_sleep_state(0x1, (-4i64) as u64, USER64_CS));
        // A 32-bit task (`__USER32_CS`): other numbers, other registers.
        assert!(!futex_sleep_state(0x1, running, 0x23));
    }

    #[test]
    fn only_futex_waits_and_pi_locks_are_blocking_sleeps() {
        let f = NR_FUTEX_X86_64;
        let private = FUTEX_PRIVATE_FLAG as u64;
        assert_eq!(
            futex_sleep_cmd(f, FUTEX_WAIT as u64 | private, 0),
            Some((FUTEX_WAIT, FUTEX_WAIT | FUTEX_PRIVATE_FLAG))
        );
        for cmd in [
            FUTEX_WAIT_BITSET,
            FUTEX_WAIT_REQUEUE_PI,
            FUTEX_LOCK_PI,
            FUTEX_LOCK_PI2,
        ] {
            assert_eq!(futex_sleep_cmd(f, cmd as u64, 0), Some((cmd, cmd)), "{cmd}");
        }
        for cmd in [
            FUTEX_WAKE,
            FUTEX_WAKE_OP,
            FUTEX_CMP_REQUEUE,
            FUTEX_UNLOCK_PI,
            FUTEX_TRYLOCK_PI,
        ] {
            assert_eq!(futex_sleep_cmd(f, cmd as u64, 0), None, "{cmd}");
        }
        // futex2: the flags are futex_wait's fourth argument.
        assert_eq!(
            futex_sleep_cmd(NR_FUTEX_WAIT_X86_64, 0, 0x82),
            Some((FUTEX2_WAIT, 0x82))
        );
        assert_eq!(
            futex_sleep_cmd(NR_FUTEX_WAITV_X86_64, 3, 0),
            Some((FUTEX2_WAITV, 0))
        );
        // futex_wake, futex_requeue, restart_syscall, read(2), no syscall (-1).
        for nr in [NR_FUTEX_WAKE_X86_64, 456, 219, 0, -1] {
            assert_eq!(futex_sleep_cmd(nr, 0, 0), None, "{nr}");
        }
    }

    #[test]
    fn stateless_calls_fold_into_entries_creations_and_exits() {
        let mut c = [0u64; FUTEX_COUNTERS_LEN as usize];
        c[FCNT_ENTER as usize] = 10;
        c[FCNT_EXIT as usize] = 8;
        c[FCNT_CALLS_CREATED as usize] = 9;
        c[FCNT_STATELESS as usize] = 5;
        fold_futex_counters(&mut c);
        assert_eq!((c[FCNT_ENTER as usize], c[FCNT_EXIT as usize]), (15, 13));
        assert_eq!(c[FCNT_CALLS_CREATED as usize], 14);
        assert_eq!(c[FCNT_STATELESS as usize], 0);
        fold_futex_counters(&mut c);
        assert_eq!(c[FCNT_ENTER as usize], 15);
    }

    #[test]
    fn classes_cover_every_command() {
        assert_eq!(futex_class(FUTEX_WAIT), FUTEX_CLASS_WAIT);
        assert_eq!(futex_class(FUTEX_WAIT_BITSET), FUTEX_CLASS_WAIT);
        assert_eq!(futex_class(FUTEX_WAIT_REQUEUE_PI), FUTEX_CLASS_WAIT);
        assert_eq!(futex_class(FUTEX2_WAIT), FUTEX_CLASS_WAIT);
        assert_eq!(futex_class(FUTEX2_WAITV), FUTEX_CLASS_WAIT);
        assert_eq!(futex_class(FUTEX_WAKE), FUTEX_CLASS_WAKE);
        assert_eq!(futex_class(FUTEX_WAKE_BITSET), FUTEX_CLASS_WAKE);
        assert_eq!(futex_class(FUTEX_WAKE_OP), FUTEX_CLASS_WAKE);
        assert_eq!(futex_class(FUTEX2_WAKE), FUTEX_CLASS_WAKE);
        assert_eq!(futex_class(FUTEX_REQUEUE), FUTEX_CLASS_REQUEUE);
        assert_eq!(futex_class(FUTEX_CMP_REQUEUE), FUTEX_CLASS_REQUEUE);
        assert_eq!(futex_class(FUTEX_CMP_REQUEUE_PI), FUTEX_CLASS_REQUEUE);
        assert_eq!(futex_class(FUTEX2_REQUEUE), FUTEX_CLASS_REQUEUE);
        assert_eq!(futex_class(FUTEX_LOCK_PI), FUTEX_CLASS_LOCK_PI);
        assert_eq!(futex_class(FUTEX_LOCK_PI2), FUTEX_CLASS_LOCK_PI);
        assert_eq!(futex_class(FUTEX_UNLOCK_PI), FUTEX_CLASS_UNLOCK_PI);
        assert_eq!(futex_class(FUTEX_TRYLOCK_PI), FUTEX_CLASS_TRYLOCK_PI);
        assert_eq!(futex_class(FUTEX_FD), FUTEX_CLASS_OTHER);
        assert_eq!(futex_class(FUTEX_CMD_UNKNOWN), FUTEX_CLASS_OTHER);
    }

    fn call(state: u32) -> FutexCall {
        FutexCall {
            uaddr: 0x1000,
            cmd: FUTEX_WAIT,
            op: FUTEX_WAIT | FUTEX_PRIVATE_FLAG,
            state,
            ..Default::default()
        }
    }

    #[test]
    fn entry_pairs_resumes_and_replaces() {
        let op = FUTEX_WAIT | FUTEX_PRIVATE_FLAG;
        assert_eq!(
            futex_enter_action(None, FUTEX_WAIT, 0x1000, op),
            FUTEX_ENTER_NEW
        );
        let restarting = call(FUTEX_CALL_RESTART_SAME);
        assert_eq!(
            futex_enter_action(Some(&restarting), FUTEX_WAIT, 0x1000, op),
            FUTEX_ENTER_RESUME
        );
        // Another word, command or op after a restart code: the old call was interrupted.
        assert_eq!(
            futex_enter_action(Some(&restarting), FUTEX_WAIT, 0x2000, op),
            FUTEX_ENTER_REPLACE_ABANDONED
        );
        assert_eq!(
            futex_enter_action(Some(&restarting), FUTEX_WAKE, 0x1000, FUTEX_WAKE),
            FUTEX_ENTER_REPLACE_ABANDONED
        );
        // A timed wait waiting for restart_syscall is never resumed by a new futex call.
        let blocked = call(FUTEX_CALL_RESTART_BLOCK);
        assert_eq!(
            futex_enter_action(Some(&blocked), FUTEX_WAIT, 0x1000, op),
            FUTEX_ENTER_REPLACE_ABANDONED
        );
        // A call still marked active when the thread enters again lost its exit.
        let active = call(FUTEX_CALL_ACTIVE);
        assert_eq!(
            futex_enter_action(Some(&active), FUTEX_WAIT, 0x1000, op),
            FUTEX_ENTER_REPLACE_UNPAIRED
        );
    }

    #[test]
    fn exit_keeps_restarting_calls() {
        assert_eq!(futex_exit_action(FUTEX_CALL_ACTIVE, 0), FUTEX_EXIT_FINISH);
        assert_eq!(
            futex_exit_action(FUTEX_CALL_ACTIVE, RET_EAGAIN),
            FUTEX_EXIT_FINISH
        );
        for r in [RET_ERESTARTSYS, RET_ERESTARTNOINTR, RET_ERESTARTNOHAND] {
            assert_eq!(
                futex_exit_action(FUTEX_CALL_ACTIVE, r),
                FUTEX_EXIT_RESTART_SAME
            );
        }
        assert_eq!(
            futex_exit_action(FUTEX_CALL_ACTIVE, RET_ERESTART_RESTARTBLOCK),
            FUTEX_EXIT_RESTART_BLOCK
        );
        assert_eq!(
            futex_exit_action(FUTEX_CALL_RESTART_SAME, 0),
            FUTEX_EXIT_NOT_OURS
        );
        assert_eq!(
            futex_exit_action(FUTEX_CALL_RESTART_BLOCK, 0),
            FUTEX_EXIT_NOT_OURS
        );
    }

    #[test]
    fn outcomes_by_class_and_return() {
        let w = FUTEX_CLASS_WAIT;
        assert_eq!(futex_outcome(w, 0), FUTEX_OUTCOME_WAITED);
        assert_eq!(futex_outcome(w, 3), FUTEX_OUTCOME_WAITED); // futex_waitv index
        assert_eq!(futex_outcome(w, RET_EAGAIN), FUTEX_OUTCOME_EAGAIN);
        assert_eq!(futex_outcome(w, RET_ETIMEDOUT), FUTEX_OUTCOME_TIMEOUT);
        assert_eq!(futex_outcome(w, RET_EINTR), FUTEX_OUTCOME_INTERRUPTED);
        assert_eq!(futex_outcome(w, -14), FUTEX_OUTCOME_ERROR);
        let pi = FUTEX_CLASS_LOCK_PI;
        assert_eq!(futex_outcome(pi, 0), FUTEX_OUTCOME_WAITED);
        assert_eq!(futex_outcome(pi, RET_ETIMEDOUT), FUTEX_OUTCOME_TIMEOUT);
        // LOCK_PI has no "value changed" case: EAGAIN there is an error.
        assert_eq!(futex_outcome(pi, RET_EAGAIN), FUTEX_OUTCOME_ERROR);
        assert_eq!(futex_outcome(FUTEX_CLASS_WAKE, 2), FUTEX_OUTCOME_WOKE);
        assert_eq!(futex_outcome(FUTEX_CLASS_WAKE, 0), FUTEX_OUTCOME_WOKE);
        assert_eq!(futex_outcome(FUTEX_CLASS_WAKE, -22), FUTEX_OUTCOME_ERROR);
        assert_eq!(
            futex_outcome(FUTEX_CLASS_REQUEUE, 5),
            FUTEX_OUTCOME_REQUEUED
        );
        assert_eq!(futex_outcome(FUTEX_CLASS_UNLOCK_PI, 0), FUTEX_OUTCOME_NONE);
        assert_eq!(
            futex_outcome(FUTEX_CLASS_UNLOCK_PI, -1),
            FUTEX_OUTCOME_ERROR
        );
        assert_eq!(futex_outcome(FUTEX_CLASS_TRYLOCK_PI, 0), FUTEX_OUTCOME_NONE);
    }

    #[test]
    fn slots_strip_flags_and_reject_unknown_commands() {
        assert_eq!(futex_cmd_slot(FUTEX_WAIT | FUTEX_PRIVATE_FLAG), FUTEX_WAIT);
        assert_eq!(
            futex_cmd_slot(FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME),
            FUTEX_WAIT_BITSET
        );
        assert_eq!(futex_cmd_slot(FUTEX_LOCK_PI2), FUTEX_LOCK_PI2);
        assert_eq!(futex_cmd_slot(14), FUTEX_CMD_UNKNOWN);
        assert_eq!(futex_cmd_slot(1 << 10), FUTEX_CMD_UNKNOWN);
        assert!((FUTEX_CMD_UNKNOWN as usize) < FUTEX_CMD_SLOTS);
    }
}
