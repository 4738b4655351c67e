//! pthread lock attribution at the futex syscall: nothing runs on a lock call that does
//! not block, and processes outside the target pay nothing.
//!
//! When a blocking futex call (a wait) of a traced task ends, the futex exit probe copies
//! the thread's user registers and the top of its user stack into a [`PthreadWaitEvent`]
//! on a ring buffer. Userspace unwinds that stack through the C library's `.eh_frame`: a
//! wait whose frames pass through a lock function (`pthread_mutex_lock`, ...) is
//! attributed to that function's lock object and to its user call site (the first frame
//! outside the C library), and counted per (process, futex word, call site, function).

use crate::assert_size;

/// The lock functions. Names as libc exports them (dynamic symbols).
pub const PTHREAD_FN_MUTEX_LOCK: u32 = 0;
pub const PTHREAD_FN_MUTEX_TIMEDLOCK: u32 = 1;
pub const PTHREAD_FN_MUTEX_CLOCKLOCK: u32 = 2;
pub const PTHREAD_FN_RWLOCK_RDLOCK: u32 = 3;
pub const PTHREAD_FN_RWLOCK_TIMEDRDLOCK: u32 = 4;
pub const PTHREAD_FN_RWLOCK_CLOCKRDLOCK: u32 = 5;
pub const PTHREAD_FN_RWLOCK_WRLOCK: u32 = 6;
pub const PTHREAD_FN_RWLOCK_TIMEDWRLOCK: u32 = 7;
pub const PTHREAD_FN_RWLOCK_CLOCKWRLOCK: u32 = 8;
pub const PTHREAD_FN_COUNT: u32 = 9;

pub const PTHREAD_FN_NAMES: [&str; PTHREAD_FN_COUNT as usize] = [
    "pthread_mutex_lock",
    "pthread_mutex_timedlock",
    "pthread_mutex_clocklock",
    "pthread_rwlock_rdlock",
    "pthread_rwlock_timedrdlock",
    "pthread_rwlock_clockrdlock",
    "pthread_rwlock_wrlock",
    "pthread_rwlock_timedwrlock",
    "pthread_rwlock_clockwrlock",
];

/// Does this lock function take a `pthread_rwlock_t` (else a `pthread_mutex_t`)?
#[inline(always)]
pub const fn pthread_fn_is_rwlock(func: u32) -> bool {
    func >= PTHREAD_FN_RWLOCK_RDLOCK
}

/// Does this lock function take a rwlock for reading?
#[inline(always)]
pub const fn pthread_fn_is_rdlock(func: u32) -> bool {
    func >= PTHREAD_FN_RWLOCK_RDLOCK && func <= PTHREAD_FN_RWLOCK_CLOCKRDLOCK
}

/// How a finished wait counts (the futex exit probe says).
pub const PTHREAD_NO_WAIT: u32 = 0;
pub const PTHREAD_WAITED: u32 = 1;
/// Waited, then timed out or was interrupted.
pub const PTHREAD_WAIT_FAILED: u32 = 2;

/// Bytes of user stack copied per wait: the C library's frames between the futex syscall
/// and the user call site (a lock function and its helpers) take a few hundred.
pub const PTHREAD_STACK_BYTES: usize = 768;
/// The ring buffer the waits travel through (drained continuously by a reader thread).
pub const PTHREAD_EVENTS_BYTES: u32 = 8 << 20;

/// Set by the loader: is attribution on (a shared C library to unwind through)?
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PthreadConfig {
    pub enabled: u32,
    pub _pad: u32,
}
assert_size!(PthreadConfig, 8);

/// One finished blocking futex call of a traced thread, with what unwinding needs.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PthreadWaitEvent {
    pub uaddr: u64,
    pub wait_ns: u64,
    /// User registers at the syscall: instruction pointer, stack pointer, frame pointer.
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    pub tgid: u32,
    pub tid: u32,
    /// `PTHREAD_WAITED`, `PTHREAD_WAIT_FAILED` or `PTHREAD_NO_WAIT` (EAGAIN, an error).
    pub waited: u32,
    /// Bytes of `stack` copied from `sp` up (0: the stack could not be read).
    pub stack_len: u32,
    /// The TID in the word 8 bytes past the futex word when the wait began (a glibc
    /// mutex's `__owner`: its holder), 0 if unread; meaningful for mutex waits only.
    pub owner: u32,
    pub _pad: u32,
    pub stack: [u8; PTHREAD_STACK_BYTES],
}
assert_size!(PthreadWaitEvent, 64 + PTHREAD_STACK_BYTES);

/// A syscall site userspace found never to be a lock function's (outside the C library,
/// or in its `syscall()` wrapper): the kernel skips waits made there without sending them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PthreadSkipKey {
    pub ip: u64,
    pub tgid: u32,
    pub _pad: u32,
}
assert_size!(PthreadSkipKey, 16);

pub const PTHREAD_SKIP_MAX_ENTRIES: u32 = 8192;

/// Attributed waits are aggregated (in userspace) per (process, futex word, call site,
/// function).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PthreadSiteKey {
    pub uaddr: u64,
    pub site: u64,
    pub tgid: u32,
    pub func: u32,
}
assert_size!(PthreadSiteKey, 24);

/// Slots of the per-CPU `PTHREAD_COUNTERS` array (kernel side).
/// Waits of traced tasks sent to userspace for unwinding.
pub const PCNT_SENT: u32 = 0;
/// Waits whose user stack could not be read (sent without it: call site unknown).
pub const PCNT_STACK_UNREADABLE: u32 = 1;
/// The ring buffer was full: that wait stays unattributed (its futex figures stay exact).
pub const PCNT_LOST_RING_FULL: u32 = 2;
/// Waits made at a syscall site in `PTHREAD_SKIP` (not a lock's): not sent.
pub const PCNT_SKIPPED: u32 = 3;
/// Blocking mode: no task storage for a sleeper's wait (kept from its switch out to its
/// switch in): that wait stays unattributed (its futex figures stay exact).
pub const PCNT_LOST_STORAGE: u32 = 4;
pub const PTHREAD_COUNTERS_LEN: u32 = 5;

pub const PTHREAD_COUNTER_NAMES: [&str; PTHREAD_COUNTERS_LEN as usize] = [
    "sent",
    "stack_unreadable",
    "pthread_ring_full",
    "skipped",
    "pthread_storage_full",
];

/// Call sites userspace keeps per recording; a wait at a new site past this is counted
/// as lost (`pthread_site_map_full`).
pub const PTHREAD_SITES_MAX_ENTRIES: u32 = 65536;

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for PthreadConfig {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for PthreadWaitEvent {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for PthreadSkipKey {}
    // SAFETY: repr(C) integers and arrays of them with explicit padding fields: every bit pattern is a value.
    unsafe impl aya::Pod for PthreadSiteKey {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_by_kind() {
        assert!(!pthread_fn_is_rwlock(PTHREAD_FN_MUTEX_LOCK));
        assert!(!pthread_fn_is_rwlock(PTHREAD_FN_MUTEX_CLOCKLOCK));
        assert!(pthread_fn_is_rwlock(PTHREAD_FN_RWLOCK_RDLOCK));
        assert!(pthread_fn_is_rwlock(PTHREAD_FN_RWLOCK_CLOCKWRLOCK));
        assert_eq!(
            PTHREAD_FN_NAMES[PTHREAD_FN_RWLOCK_TIMEDWRLOCK as usize],
            "pthread_rwlock_timedwrlock"
        );
        assert!(pthread_fn_is_rdlock(PTHREAD_FN_RWLOCK_CLOCKRDLOCK));
        assert!(!pthread_fn_is_rdlock(PTHREAD_FN_RWLOCK_WRLOCK));
        assert!(!pthread_fn_is_rdlock(PTHREAD_FN_MUTEX_LOCK));
    }
}
