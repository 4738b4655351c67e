//! pthread lock attribution at the futex syscall: no probe on any lock function.
//!
//! A lock call that does not block never enters the kernel, so it never reaches this code.
//! When a blocking futex call of a traced thread ends, the futex exit probe calls
//! [`send_wait`]: it copies the thread's user registers (from the task's saved `pt_regs`)
//! and the top of its user stack (which the syscall left untouched) into a
//! [`PthreadWaitEvent`] on `PTHREAD_EVENTS`. Userspace unwinds the stack through the C
//! library's `.eh_frame` and attributes the wait to a lock function's object and user call
//! site; a full ring buffer is counted (`pthread_ring_full`), never silent.
//!
//! Cost: only blocking futex calls of traced tasks, one hash lookup and (unless the
//! syscall site is known not to be a lock's, `PTHREAD_SKIP`) one ring buffer record and
//! one user memory copy each. Untraced tasks pay nothing here (the futex probes' target check).

use aya_ebpf::{
    Global,
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP, BPF_RB_RING_SIZE},
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_current_task_btf, bpf_probe_read_user_buf,
        bpf_task_pt_regs,
    },
    macros::{btf_map, map},
    maps::{LruHashMap, PerCpuArray, RingBuf},
};
use lockscope_common::*;

use crate::maps::TaskStorage;

/// Set by the loader: attribution on or off.
#[unsafe(no_mangle)]
pub static PTHREAD_CONFIG: Global<PthreadConfig> = Global::new(PthreadConfig {
    enabled: 0,
    _pad: 0,
});

/// Finished waits with their user stacks, for userspace to unwind.
#[map]
static PTHREAD_EVENTS: RingBuf = RingBuf::with_byte_size(PTHREAD_EVENTS_BYTES, 0);

/// Syscall sites that are never a lock function's (written by userspace): waits made
/// there are counted, not sent (a raw futex loop would otherwise fill the ring buffer).
#[map]
static PTHREAD_SKIP: LruHashMap<PthreadSkipKey, u8> =
    LruHashMap::with_max_entries(PTHREAD_SKIP_MAX_ENTRIES, 0);

/// `PCNT_*` slots.
#[map]
static PTHREAD_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(PTHREAD_COUNTERS_LEN, 0);

#[inline(always)]
fn pcount(slot: u32) {
    if let Some(c) = PTHREAD_COUNTERS.get_ptr_mut(slot) {
        // SAFETY: a per-CPU slot of a live map; only this CPU writes it.
        unsafe { *c += 1 };
    }
}

/// Is attribution on?
#[inline(always)]
pub fn enabled() -> bool {
    PTHREAD_CONFIG.load().enabled != 0
}

/// At a wait's entry: is the current thread's syscall site one userspace found never to
/// be a lock function's? One word of the user registers and one lookup: a wait at such
/// a site reads nothing more and is counted at its exit ([`count_skipped`]).
#[inline(always)]
pub fn skipped_site(tgid: u32) -> bool {
    skipped_ip(tgid, user_ip().unwrap_or(0))
}

/// [`skipped_site`] with the syscall site `ip` already read.
#[inline(always)]
pub fn skipped_ip(tgid: u32, ip: u64) -> bool {
    let key = PthreadSkipKey { ip, tgid, _pad: 0 };
    // SAFETY: a map lookup; the value is not used.
    unsafe { PTHREAD_SKIP.get(key) }.is_some()
}

/// A wait at a skipped site ended (see [`skipped_site`]).
#[inline(always)]
pub fn count_skipped() {
    pcount(PCNT_SKIPPED);
}

/// The user instruction pointer (the syscall site) alone.
#[inline(always)]
fn user_ip() -> Option<u64> {
    // SAFETY: helpers on the current task; the result is a kernel address read with
    // bpf_probe_read_kernel below, never dereferenced directly.
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) } as u64;
    if regs == 0 {
        return None;
    }
    #[cfg(bpf_target_arch = "x86_64")]
    {
        let off = core::mem::offset_of!(aya_ebpf::bindings::pt_regs, rip) as u64;
        // SAFETY: a read of one word of a kernel pt_regs through the probe-read helper.
        unsafe { aya_ebpf::helpers::bpf_probe_read_kernel((regs + off) as *const u64) }.ok()
    }
    #[cfg(not(bpf_target_arch = "x86_64"))]
    {
        None
    }
}

/// The user registers unwinding starts from: (ip, sp, bp).
#[inline(always)]
fn user_regs() -> Option<(u64, u64, u64)> {
    // SAFETY: helpers on the current task; the result is a kernel address read with
    // bpf_probe_read_kernel below, never dereferenced directly.
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) } as u64;
    if regs == 0 {
        return None;
    }
    #[cfg(bpf_target_arch = "x86_64")]
    {
        // SAFETY: reads of a kernel pt_regs through the probe-read helper.
        let r = unsafe {
            aya_ebpf::helpers::bpf_probe_read_kernel(regs as *const aya_ebpf::bindings::pt_regs)
        }
        .ok()?;
        Some((r.rip, r.rsp, r.rbp))
    }
    #[cfg(not(bpf_target_arch = "x86_64"))]
    {
        None
    }
}

/// Blocking mode (no futex exit is seen): a traced thread switched out asleep in a futex
/// wait keeps here what [`send_wait`] sends, but the wait time, until its switch in
/// ([`send_kept`]). Its user registers and stack are the ones the syscall left, as at the
/// exit.
#[btf_map]
static PTHREAD_PENDING: TaskStorage<PthreadWaitEvent> = TaskStorage::new();

/// Blocking mode, at the current (traced) thread's switch out asleep in a wait on
/// `uaddr`, attribution on (the caller checked [`enabled`]): keep its registers (`regs`:
/// ip, sp, bp, as the caller read them) and stack. `owner`: as in [`send_wait`]. Whether
/// they were kept (then the switch in sends them).
#[cfg_attr(not(bpf_target_arch = "x86_64"), allow(dead_code))]
#[inline(always)]
pub fn keep_sleep(tgid: u32, uaddr: u64, owner: u32, regs: (u64, u64, u64)) -> bool {
    let Some(ev) = PTHREAD_PENDING.current(true) else {
        pcount(PCNT_LOST_STORAGE);
        return false;
    };
    // SAFETY: the current task's own storage; its switch in (the only other user) cannot
    // run while it is switching out.
    let ev = unsafe { &mut *ev };
    fill(ev, tgid, uaddr, 0, PTHREAD_WAITED, owner, regs);
    true
}

/// Blocking mode, at the switch in of a sleeper whose wait was kept ([`keep_sleep`]):
/// send it, `wait_ns` long. `task`: the sleeper (a BTF task pointer).
#[inline(always)]
pub fn send_kept(task: *mut aya_ebpf::bindings::task_struct, wait_ns: u64) {
    let Some(ev) = PTHREAD_PENDING.of_task(task) else {
        return;
    };
    // SAFETY: `task`'s storage, written only at its own switch out, which cannot run
    // while it is being switched in.
    let ev = unsafe { &mut *ev };
    ev.wait_ns = wait_ns;
    if PTHREAD_EVENTS
        .output::<PthreadWaitEvent>(&*ev, wake_flags())
        .is_err()
    {
        pcount(PCNT_LOST_RING_FULL);
        return;
    }
    pcount(PCNT_SENT);
}

/// A blocking futex call of the current (traced) thread ended: send it for attribution.
/// `waited`: `PTHREAD_WAITED` / `PTHREAD_WAIT_FAILED` (then `wait_ns` is its wait time) or
/// `PTHREAD_NO_WAIT`. Integers only: the arguments of an out-of-line function go into the
/// object's BTF, which the kernel checks.
/// `owner`: the TID in the word 8 bytes past the futex word at the wait's entry (a glibc
/// mutex's `__owner`), 0 if unread.
#[inline(never)]
pub fn send_wait(tgid: u32, uaddr: u64, wait_ns: u64, waited: u32, owner: u32) {
    if !enabled() {
        return;
    }
    let Some(mut entry) = PTHREAD_EVENTS.reserve::<PthreadWaitEvent>(0) else {
        pcount(PCNT_LOST_RING_FULL);
        return;
    };
    let ev = entry.as_mut_ptr();
    // SAFETY: `ev` points at a reserved record of the right size that only this
    // program writes until it is submitted.
    let ev = unsafe { &mut *ev };
    let regs = user_regs().unwrap_or((0, 0, 0));
    fill(ev, tgid, uaddr, wait_ns, waited, owner, regs);
    entry.submit(wake_flags());
    pcount(PCNT_SENT);
}

/// Whether a record sent now wakes the reader: only once the ring holds an eighth of its
/// size, else the reader finds it at its next poll (every 50 ms). A wake-up per wait goes
/// through the ring's `irq_work` (a self-interrupt on the waiter's CPU) and switches the
/// reader in: with it the default mode's exit program took 4.4 us per wait sent, without
/// it 1.05 us (docs/development.md).
#[inline(always)]
fn wake_flags() -> u64 {
    let avail = PTHREAD_EVENTS.query(BPF_RB_AVAIL_DATA as u64);
    let size = PTHREAD_EVENTS.query(BPF_RB_RING_SIZE as u64);
    if avail >= size / 8 {
        BPF_RB_FORCE_WAKEUP as u64
    } else {
        BPF_RB_NO_WAKEUP as u64
    }
}

/// Write the current thread's wait into `ev`: the word, the wait, its user registers
/// (`regs`: ip, sp, bp) and the top of its user stack.
#[inline(always)]
fn fill(
    ev: &mut PthreadWaitEvent,
    tgid: u32,
    uaddr: u64,
    wait_ns: u64,
    waited: u32,
    owner: u32,
    (ip, sp, bp): (u64, u64, u64),
) {
    ev.uaddr = uaddr;
    ev.wait_ns = wait_ns;
    ev.ip = ip;
    ev.sp = sp;
    ev.bp = bp;
    ev.tgid = tgid;
    ev.tid = bpf_get_current_pid_tgid() as u32;
    ev.waited = waited;
    ev.owner = owner;
    ev._pad = 0;
    // SAFETY: user memory read through the helper, which faults safely.
    let copied =
        sp != 0 && unsafe { bpf_probe_read_user_buf(sp as *const u8, &mut ev.stack) }.is_ok();
    ev.stack_len = if copied {
        PTHREAD_STACK_BYTES as u32
    } else if sp != 0
        // Near the top of the stack mapping: the last 256 bytes are still worth it.
        // SAFETY: a checked read: a bad address gives an error, never a fault.
        && unsafe { bpf_probe_read_user_buf(sp as *const u8, &mut ev.stack[..256]) }.is_ok()
    {
        256
    } else {
        0
    };
    if ev.stack_len == 0 {
        pcount(PCNT_STACK_UNREADABLE);
    }
}
