//! pthread lock attribution: what the libc uprobes (`pthread_mutex_lock`,
//! `pthread_rwlock_rdlock`, ... and their timed and clock forms) feed.
//!
//! At a lock function's entry the probe remembers, per thread, the lock object's address,
//! which function it is and the user call site (the return address). When a futex call of
//! that thread ends while the lock function runs and its word lies inside the object, the
//! call is attributed: counted per (process, futex word, call site, function), with the
//! wait time of the call. The lock function's return (uretprobe) forgets the thread's entry.

use crate::{ContentionStats, assert_size};

/// The lock functions, by attach cookie. Names as libc exports them (dynamic symbols).
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

/// Is a futex word at `uaddr` part of the lock object at `obj` of `size` bytes? glibc
/// mutexes wait on `__lock` (the first word); rwlocks on `__readers` or
/// `__writers_futex`, both inside the object.
#[inline(always)]
pub const fn pthread_word_in_object(obj: u64, size: u64, uaddr: u64) -> bool {
    uaddr >= obj && size >= 4 && uaddr - obj <= size - 4
}

/// How an attributed futex call counts (the futex exit probe tells the pthread code).
pub const PTHREAD_NO_WAIT: u32 = 0;
pub const PTHREAD_WAITED: u32 = 1;
/// Waited, then timed out or was interrupted.
pub const PTHREAD_WAIT_FAILED: u32 = 2;

/// Sizes of the lock objects on the traced machine (`sizeof(pthread_mutex_t)`, ...), set
/// by the loader from the C library's types.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PthreadConfig {
    pub mutex_size: u32,
    pub rwlock_size: u32,
}
assert_size!(PthreadConfig, 8);

/// A lock function in progress, per thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PthreadCall {
    /// The lock object (first argument).
    pub obj: u64,
    /// The user call site: the return address at the lock function's entry.
    pub site: u64,
    /// `PTHREAD_FN_*`.
    pub func: u32,
    /// 1 when the return address could not be read (`site` is 0).
    pub site_unreadable: u32,
}
assert_size!(PthreadCall, 24);

/// Attributed futex calls are aggregated per (process, futex word, call site, function).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PthreadSiteKey {
    pub uaddr: u64,
    pub site: u64,
    pub tgid: u32,
    pub func: u32,
}
assert_size!(PthreadSiteKey, 24);

/// Per-CPU figures of one call site on one futex word.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PthreadSiteStats {
    /// Blocking futex calls that waited (as the futex entry's `wait`).
    pub wait: ContentionStats,
    /// The lock object the word belongs to (latest seen).
    pub obj: u64,
    /// Every attributed futex call (waits, EAGAIN returns, errors).
    pub calls: u64,
}
assert_size!(
    PthreadSiteStats,
    core::mem::size_of::<ContentionStats>() + 16
);

impl PthreadSiteStats {
    pub const EMPTY: Self = Self {
        wait: ContentionStats::EMPTY,
        obj: 0,
        calls: 0,
    };
}

impl Default for PthreadSiteStats {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// Slots of the per-CPU `PTHREAD_COUNTERS` array.
/// Lock function entries of traced tasks.
pub const PCNT_ENTER: u32 = 0;
/// Lock function returns of traced tasks that had an entry.
pub const PCNT_RETURN: u32 = 1;
/// Futex calls attributed to a lock object.
pub const PCNT_ATTRIBUTED: u32 = 2;
/// Futex calls made inside a lock function on a word outside its object (not attributed).
pub const PCNT_OTHER_WORD: u32 = 3;
/// Entries whose return address could not be read (attributed with an unknown site).
pub const PCNT_SITE_UNREADABLE: u32 = 4;
/// The per-thread map was full: that lock call's futex calls stay unattributed.
pub const PCNT_LOST_CALL_FULL: u32 = 5;
/// The per-site map was full: an attributed futex call was not stored.
pub const PCNT_LOST_SITE_FULL: u32 = 6;
pub const PTHREAD_COUNTERS_LEN: u32 = 7;

pub const PTHREAD_COUNTER_NAMES: [&str; PTHREAD_COUNTERS_LEN as usize] = [
    "enter",
    "return",
    "attributed",
    "other_word",
    "site_unreadable",
    "pthread_call_map_full",
    "pthread_site_map_full",
];

pub const PTHREAD_CALLS_MAX_ENTRIES: u32 = 32768;
pub const PTHREAD_SITES_MAX_ENTRIES: u32 = 4096;
/// Memory the loader lets `PTHREAD_SITES` take (per-CPU, preallocated).
pub const PTHREAD_SITES_MEMORY_BUDGET: u64 = 8 << 20;
pub const PTHREAD_SITES_MIN_ENTRIES: u32 = 256;

/// Entries of `PTHREAD_SITES` for this many CPUs.
pub const fn pthread_sites_entries(cpus: u32) -> u32 {
    let per_entry =
        core::mem::size_of::<PthreadSiteStats>() as u64 * if cpus == 0 { 1 } else { cpus as u64 };
    let n = PTHREAD_SITES_MEMORY_BUDGET / per_entry;
    if n > PTHREAD_SITES_MAX_ENTRIES as u64 {
        PTHREAD_SITES_MAX_ENTRIES
    } else if n < PTHREAD_SITES_MIN_ENTRIES as u64 {
        PTHREAD_SITES_MIN_ENTRIES
    } else {
        n as u32
    }
}

#[cfg(feature = "user")]
mod pod {
    use super::*;
    unsafe impl aya::Pod for PthreadConfig {}
    unsafe impl aya::Pod for PthreadCall {}
    unsafe impl aya::Pod for PthreadSiteKey {}
    unsafe impl aya::Pod for PthreadSiteStats {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_inside_the_object_only() {
        // A 40-byte mutex at 0x1000: words at 0x1000..=0x1024.
        assert!(pthread_word_in_object(0x1000, 40, 0x1000));
        assert!(pthread_word_in_object(0x1000, 40, 0x1024));
        assert!(!pthread_word_in_object(0x1000, 40, 0x1025));
        assert!(!pthread_word_in_object(0x1000, 40, 0x1028));
        assert!(!pthread_word_in_object(0x1000, 40, 0xffc));
        // No overflow at the top of the address space, no match for a nonsense size.
        assert!(pthread_word_in_object(u64::MAX - 7, 8, u64::MAX - 3));
        assert!(!pthread_word_in_object(0x1000, 0, 0x1000));
        assert!(!pthread_word_in_object(0x1000, 3, 0x1000));
    }

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
    }

    #[test]
    fn site_map_shrinks_with_cpus() {
        assert_eq!(pthread_sites_entries(2), PTHREAD_SITES_MAX_ENTRIES);
        assert_eq!(pthread_sites_entries(100_000), PTHREAD_SITES_MIN_ENTRIES);
        let n = pthread_sites_entries(64);
        assert!((PTHREAD_SITES_MIN_ENTRIES..=PTHREAD_SITES_MAX_ENTRIES).contains(&n));
    }
}
