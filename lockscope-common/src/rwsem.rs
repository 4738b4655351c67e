//! rwsem acquisition modes ("lock events", named after the kernel's
//! `kernel/locking/lock_events_list.h`) and the kernel's own predicates on an rwsem's
//! `count` and `owner` words, shared by the deep-tier probes and the user side.
//!
//! Bit layouts (`kernel/locking/rwsem.c`, unchanged from 5.3 through 6.18 on 64-bit):
//! `count`: bit 0 writer locked, bit 1 waiters, bit 2 handoff, bits 8..62 readers,
//! bit 63 read-fail. `owner`: task pointer | bit 0 reader-owned | bit 1 non-spinnable.
//! PREEMPT_RT kernels build rwsems on rtmutex (`rwbase_rt`): none of this exists there.

use crate::assert_size;

pub const RWSEM_WRITER_LOCKED: u64 = 1 << 0;
pub const RWSEM_FLAG_WAITERS: u64 = 1 << 1;
pub const RWSEM_FLAG_HANDOFF: u64 = 1 << 2;
pub const RWSEM_FLAG_READFAIL: u64 = 1 << 63;
pub const RWSEM_READER_SHIFT: u32 = 8;
pub const RWSEM_READER_BIAS: u64 = 1 << RWSEM_READER_SHIFT;

pub const RWSEM_OWNER_READER_OWNED: u64 = 1 << 0;
pub const RWSEM_OWNER_NONSPINNABLE: u64 = 1 << 1;

/// `enum rwsem_waiter_type`.
pub const RWSEM_WAITING_FOR_WRITE: u32 = 0;
pub const RWSEM_WAITING_FOR_READ: u32 = 1;
/// `enum rwsem_wake_type`.
pub const RWSEM_WAKE_ANY: u32 = 0;

/// Readers counted in `count` (the kernel's `count >> RWSEM_READER_SHIFT`, signed).
#[inline(always)]
pub const fn rwsem_reader_count(count: u64) -> i64 {
    (count as i64) >> RWSEM_READER_SHIFT
}

/// `rwsem_down_read_slowpath(sem, count, state)` entry: does this reader take the lock
/// by optimistic stealing (`rwsem_rlock_steal`) rather than going to the queue?
/// `count` is the slowpath's argument (it includes this reader's bias); `owner` is
/// `sem->owner` read at entry. Mirrors the kernel's two tests in that order.
#[inline(always)]
pub const fn rwsem_read_would_steal(count: u64, owner: u64) -> bool {
    let rcnt = rwsem_reader_count(count);
    // "don't attempt optimistic lock stealing if the lock is currently owned by readers"
    if owner & RWSEM_OWNER_READER_OWNED != 0 && rcnt > 1 && count & RWSEM_WRITER_LOCKED == 0 {
        return false;
    }
    count & (RWSEM_WRITER_LOCKED | RWSEM_FLAG_HANDOFF) == 0
}

/// A handoff was requested between two reads of `count` taken under `wait_lock` (every
/// setter and clearer of the bit holds it).
#[inline(always)]
pub const fn rwsem_handoff_set(before: u64, after: u64) -> bool {
    before & RWSEM_FLAG_HANDOFF == 0 && after & RWSEM_FLAG_HANDOFF != 0
}

/// The spinning writer gave up on a reader-owned lock and marked it non-spinnable
/// (`rwsem_opt_nospin`), seen as the owner's non-spinnable bit appearing.
#[inline(always)]
pub const fn rwsem_nonspinnable_set(owner_before: u64, owner_after: u64) -> bool {
    owner_before & RWSEM_OWNER_NONSPINNABLE == 0 && owner_after & RWSEM_OWNER_NONSPINNABLE != 0
}

/// Lock events: indexes into [`RwsemEventCounts::n`] and [`RWSEM_EVENT_NAMES`].
pub const EV_RLOCK_STEAL: usize = 0;
pub const EV_RLOCK_FAST: usize = 1;
pub const EV_RLOCK: usize = 2;
pub const EV_WLOCK: usize = 3;
pub const EV_OPT_LOCK: usize = 4;
pub const EV_OPT_FAIL: usize = 5;
pub const EV_OPT_NOSPIN: usize = 6;
pub const EV_RLOCK_HANDOFF: usize = 7;
pub const EV_WLOCK_HANDOFF: usize = 8;
pub const EV_SLEEP_READER: usize = 9;
pub const EV_SLEEP_WRITER: usize = 10;
pub const EV_WAKE_READER: usize = 11;
pub const EV_WAKE_WRITER: usize = 12;
pub const EV_RLOCK_FAIL: usize = 13;
pub const EV_WLOCK_FAIL: usize = 14;
pub const EV_TRYLOCK_FAIL: usize = 15;
pub const RWSEM_EVENTS: usize = 16;

/// Names as in `lock_events_list.h` without the `rwsem_` prefix (`trylock_fail` is
/// lockscope's own: the kernel does not count it).
pub const RWSEM_EVENT_NAMES: [&str; RWSEM_EVENTS] = [
    "rlock_steal",
    "rlock_fast",
    "rlock",
    "wlock",
    "opt_lock",
    "opt_fail",
    "opt_nospin",
    "rlock_handoff",
    "wlock_handoff",
    "sleep_reader",
    "sleep_writer",
    "wake_reader",
    "wake_writer",
    "rlock_fail",
    "wlock_fail",
    "trylock_fail",
];

/// Which side of the lock an event belongs to (the rwsem:R or rwsem:W report entry).
pub const SIDE_READ: u32 = 0;
pub const SIDE_WRITE: u32 = 1;

/// The side of each event; `trylock_fail` is counted on the side of the trylock.
pub const fn rwsem_event_side(ev: usize) -> u32 {
    match ev {
        EV_RLOCK_STEAL | EV_RLOCK_FAST | EV_RLOCK | EV_RLOCK_HANDOFF | EV_SLEEP_READER
        | EV_WAKE_READER | EV_RLOCK_FAIL => SIDE_READ,
        EV_TRYLOCK_FAIL => SIDE_READ | SIDE_WRITE,
        _ => SIDE_WRITE,
    }
}

/// Key of the per-lock, per-process event counts.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RwsemEventKey {
    pub lock: u64,
    /// Process of the task that ran the code path (for `wake_*`: the waker).
    pub tgid: u32,
    /// `SIDE_READ` or `SIDE_WRITE`.
    pub side: u32,
}
assert_size!(RwsemEventKey, 16);

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RwsemEventCounts {
    pub n: [u64; RWSEM_EVENTS],
}
assert_size!(RwsemEventCounts, 8 * RWSEM_EVENTS);

/// A task inside `rwsem_down_{read,write}_slowpath`, from entry to exit.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RwsemSlowpath {
    pub sem: u64,
    /// `count` (reader: the argument; writer: read at entry) and `owner` at entry.
    pub count: u64,
    pub owner: u64,
    /// `SIDE_READ` or `SIDE_WRITE`.
    pub side: u32,
    /// Bits `SLOWPATH_*`.
    pub flags: u32,
}
assert_size!(RwsemSlowpath, 32);

/// `contention_begin` was seen: the task queued.
pub const SLOWPATH_QUEUED: u32 = 1 << 0;
/// The reader's entry predicate said "steal".
pub const SLOWPATH_STEAL: u32 = 1 << 1;
/// A handoff spin (`rwsem_spin_on_owner` after queueing) was already counted.
pub const SLOWPATH_HANDOFF_COUNTED: u32 = 1 << 2;

/// `rwsem_mark_wake` entry state, kept per CPU until its exit (it runs under the raw
/// `wait_lock` with interrupts off: nothing else runs on that CPU meanwhile).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RwsemMarkWake {
    pub sem: u64,
    /// `sem->wait_list.next` at entry (the first waiter's list node).
    pub first: u64,
    pub count: u64,
    /// First waiter's `type`.
    pub first_type: u32,
    pub wake_type: u32,
}
assert_size!(RwsemMarkWake, 32);

/// A trylock's argument, kept per CPU from kprobe entry to kretprobe (fexit has both).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrylockEntry {
    pub sem: u64,
    pub tid: u32,
    pub side: u32,
}
assert_size!(TrylockEntry, 16);

/// Slots of the per-CPU `RWSEM_COUNTERS` array past the event totals.
pub const RWC_TOTALS: u32 = 0;
/// A slowpath entry replaced one whose exit was never seen (kretprobe maxactive).
pub const RWC_UNPAIRED_ENTRY: u32 = RWSEM_EVENTS as u32;
/// A slowpath exit with no entry (tracing began mid-wait).
pub const RWC_UNPAIRED_EXIT: u32 = RWSEM_EVENTS as u32 + 1;
/// The per-lock map was full: events counted in the totals only.
pub const RWC_LOST_MAP_FULL: u32 = RWSEM_EVENTS as u32 + 2;
/// The per-task slowpath map was full: a slowpath was not classified.
pub const RWC_LOST_TASK_FULL: u32 = RWSEM_EVENTS as u32 + 3;
/// A kretprobe trylock whose entry slot was overwritten (preempted in between).
pub const RWC_TRYLOCK_UNATTRIBUTED: u32 = RWSEM_EVENTS as u32 + 4;
pub const RWSEM_COUNTERS_LEN: u32 = RWSEM_EVENTS as u32 + 5;

pub const RWSEM_EVENTS_MAX_ENTRIES: u32 = 16384;
pub const RWSEM_SLOWPATH_MAX_ENTRIES: u32 = 32768;

/// Which programs of the rwsem deep tier run, set by the loader: bit `HOOK_*` set when
/// that hook is attached. Tracepoint-tier estimates run only when the deep hook for the
/// same event is absent.
pub const HOOK_READ_SLOWPATH: u32 = 1 << 0;
pub const HOOK_WRITE_SLOWPATH: u32 = 1 << 1;
pub const HOOK_MARK_WAKE: u32 = 1 << 2;
pub const HOOK_SPIN_ON_OWNER: u32 = 1 << 3;
pub const HOOK_SCHEDULE: u32 = 1 << 4;
pub const HOOK_READ_TRYLOCK: u32 = 1 << 5;
pub const HOOK_WRITE_TRYLOCK: u32 = 1 << 6;

/// Read-only configuration of the rwsem probes, set by the loader from BTF.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RwsemConfig {
    /// `rw_semaphore.count`, `.owner`, `.wait_list`.
    pub off_count: u32,
    pub off_owner: u32,
    pub off_wait_list: u32,
    /// `rwsem_waiter.type` minus `rwsem_waiter.list`: from a list node to its type.
    pub off_waiter_type: u32,
    /// Argument positions of `write` and `success` in `mmap_lock_acquire_returned`
    /// (`mm, memcg_path, write, success` before 6.13; `mm, write, success` since).
    pub mmap_write_arg: u32,
    pub mmap_success_arg: u32,
}
assert_size!(RwsemConfig, 24);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for RwsemConfig {}
    use super::*;
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for RwsemEventKey {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for RwsemEventCounts {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for RwsemSlowpath {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for RwsemMarkWake {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for TrylockEntry {}
}

#[cfg(test)]
mod tests {
    use super::*;

    const TASK: u64 = 0xffff_8880_0abc_d000;

    #[test]
    fn reader_steals_only_without_writer_or_handoff() {
        // Our bias only, lock free, last owner a writer that left: steal.
        assert!(rwsem_read_would_steal(RWSEM_READER_BIAS, TASK));
        // Writer holds it: queue.
        assert!(!rwsem_read_would_steal(
            RWSEM_READER_BIAS | RWSEM_WRITER_LOCKED | RWSEM_FLAG_WAITERS,
            TASK
        ));
        // Handoff pending: queue.
        assert!(!rwsem_read_would_steal(
            RWSEM_READER_BIAS | RWSEM_FLAG_WAITERS | RWSEM_FLAG_HANDOFF,
            TASK
        ));
        // Waiters but no writer, first reader: steal (and wake the queued readers).
        assert!(rwsem_read_would_steal(
            RWSEM_READER_BIAS | RWSEM_FLAG_WAITERS,
            TASK | RWSEM_OWNER_READER_OWNED
        ));
        // Owned by readers, more than one reader counted: queue behind the waiter.
        assert!(!rwsem_read_would_steal(
            (3 * RWSEM_READER_BIAS) | RWSEM_FLAG_WAITERS,
            TASK | RWSEM_OWNER_READER_OWNED
        ));
        // Several readers counted but the owner word names a writer: steal.
        assert!(rwsem_read_would_steal(
            (3 * RWSEM_READER_BIAS) | RWSEM_FLAG_WAITERS,
            TASK
        ));
    }

    #[test]
    fn reader_count_is_signed_like_the_kernel() {
        assert_eq!(rwsem_reader_count((5 * RWSEM_READER_BIAS) | 7), 5);
        assert!(rwsem_reader_count(RWSEM_FLAG_READFAIL) < 0);
    }

    #[test]
    fn handoff_and_nonspinnable_transitions() {
        assert!(rwsem_handoff_set(
            RWSEM_WRITER_LOCKED,
            RWSEM_WRITER_LOCKED | RWSEM_FLAG_HANDOFF
        ));
        assert!(!rwsem_handoff_set(RWSEM_FLAG_HANDOFF, RWSEM_FLAG_HANDOFF));
        assert!(!rwsem_handoff_set(RWSEM_FLAG_HANDOFF, 0));
        assert!(rwsem_nonspinnable_set(
            TASK | RWSEM_OWNER_READER_OWNED,
            TASK | RWSEM_OWNER_READER_OWNED | RWSEM_OWNER_NONSPINNABLE
        ));
        assert!(!rwsem_nonspinnable_set(
            TASK | RWSEM_OWNER_NONSPINNABLE,
            TASK | RWSEM_OWNER_NONSPINNABLE
        ));
    }

    #[test]
    fn every_event_has_a_name_and_side() {
        assert_eq!(RWSEM_EVENT_NAMES[EV_TRYLOCK_FAIL], "trylock_fail");
        assert_eq!(RWSEM_EVENT_NAMES[EV_OPT_NOSPIN], "opt_nospin");
        assert_eq!(rwsem_event_side(EV_RLOCK_STEAL), SIDE_READ);
        assert_eq!(rwsem_event_side(EV_OPT_LOCK), SIDE_WRITE);
        assert_eq!(rwsem_event_side(EV_WAKE_READER), SIDE_READ);
        assert_eq!(rwsem_event_side(EV_WAKE_WRITER), SIDE_WRITE);
    }
}
