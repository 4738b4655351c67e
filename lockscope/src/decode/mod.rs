//! Raw map contents -> typed lock events. Pure: no kernel access here.

pub mod cgroup;
pub mod futex;
pub mod place;
pub mod procmaps;

use std::fmt;

use lockscope_common::{
    LCB_F_ALL, LCB_F_MUTEX, LCB_F_PERCPU, LCB_F_READ, LCB_F_RT, LCB_F_SPIN, LCB_F_WRITE,
    LOCK_KIND_MMAP_LOCK, LOCK_KIND_MMAP_WAIT_LOCK, LOCK_KIND_PI_LOCK, LOCK_KIND_SIGLOCK, LockInfo,
};
use serde::{Deserialize, Serialize};

/// A lock type, named as `perf lock contention` names it, decoded from `LCB_F_*` flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LockType {
    Spinlock,
    RwlockRead,
    RwlockWrite,
    RwsemRead,
    RwsemWrite,
    Mutex,
    /// A mutex waiter in its optimistic-spin phase (`LCB_F_MUTEX | LCB_F_SPIN`).
    MutexSpin,
    Rtmutex,
    RwlockRtRead,
    RwlockRtWrite,
    PcpuSemRead,
    PcpuSemWrite,
    Semaphore,
    /// A user-space futex word (wait-wake futex), from the futex syscall probes.
    Futex,
    /// A user-space PI futex word (LOCK_PI / UNLOCK_PI / TRYLOCK_PI, requeue-PI).
    FutexPi,
    /// A futex word inside a glibc/musl `pthread_mutex_t` (pthread attribution).
    PthreadMutex,
    /// A futex word inside a `pthread_rwlock_t`.
    PthreadRwlock,
}

impl LockType {
    pub const ALL: [LockType; 13] = [
        LockType::Spinlock,
        LockType::RwlockRead,
        LockType::RwlockWrite,
        LockType::RwsemRead,
        LockType::RwsemWrite,
        LockType::Mutex,
        LockType::MutexSpin,
        LockType::Rtmutex,
        LockType::RwlockRtRead,
        LockType::RwlockRtWrite,
        LockType::PcpuSemRead,
        LockType::PcpuSemWrite,
        LockType::Semaphore,
    ];

    /// User-space lock types: not from `LCB_F_*` flags but from the futex probes.
    pub const USER: [LockType; 4] = [
        LockType::Futex,
        LockType::FutexPi,
        LockType::PthreadMutex,
        LockType::PthreadRwlock,
    ];

    /// Every type, kernel ([`LockType::ALL`]) then user ([`LockType::USER`]).
    pub fn every() -> impl Iterator<Item = LockType> {
        Self::ALL.into_iter().chain(Self::USER)
    }

    /// A user-space lock (futex), not a kernel lock.
    pub fn is_user(self) -> bool {
        Self::USER.contains(&self)
    }

    /// Decode `contention_begin` flags. Unknown bits or combinations are an error, never
    /// guessed.
    pub fn from_flags(flags: u32) -> Result<Self, UnknownFlags> {
        if flags & !LCB_F_ALL != 0 {
            return Err(UnknownFlags(flags));
        }
        Ok(match flags {
            LCB_F_SPIN => LockType::Spinlock,
            f if f == LCB_F_SPIN | LCB_F_READ => LockType::RwlockRead,
            f if f == LCB_F_SPIN | LCB_F_WRITE => LockType::RwlockWrite,
            LCB_F_READ => LockType::RwsemRead,
            LCB_F_WRITE => LockType::RwsemWrite,
            LCB_F_MUTEX => LockType::Mutex,
            f if f == LCB_F_MUTEX | LCB_F_SPIN => LockType::MutexSpin,
            LCB_F_RT => LockType::Rtmutex,
            f if f == LCB_F_RT | LCB_F_READ => LockType::RwlockRtRead,
            f if f == LCB_F_RT | LCB_F_WRITE => LockType::RwlockRtWrite,
            f if f == LCB_F_PERCPU | LCB_F_READ => LockType::PcpuSemRead,
            f if f == LCB_F_PERCPU | LCB_F_WRITE => LockType::PcpuSemWrite,
            0 => LockType::Semaphore,
            other => return Err(UnknownFlags(other)),
        })
    }

    /// The flags value this type is recorded with (inverse of [`LockType::from_flags`]).
    /// User-space types have no `LCB_F_*` flags: `u32::MAX`, which no kernel wait has.
    pub fn flags(self) -> u32 {
        match self {
            LockType::Spinlock => LCB_F_SPIN,
            LockType::RwlockRead => LCB_F_SPIN | LCB_F_READ,
            LockType::RwlockWrite => LCB_F_SPIN | LCB_F_WRITE,
            LockType::RwsemRead => LCB_F_READ,
            LockType::RwsemWrite => LCB_F_WRITE,
            LockType::Mutex => LCB_F_MUTEX,
            LockType::MutexSpin => LCB_F_MUTEX | LCB_F_SPIN,
            LockType::Rtmutex => LCB_F_RT,
            LockType::RwlockRtRead => LCB_F_RT | LCB_F_READ,
            LockType::RwlockRtWrite => LCB_F_RT | LCB_F_WRITE,
            LockType::PcpuSemRead => LCB_F_PERCPU | LCB_F_READ,
            LockType::PcpuSemWrite => LCB_F_PERCPU | LCB_F_WRITE,
            LockType::Semaphore => 0,
            LockType::Futex
            | LockType::FutexPi
            | LockType::PthreadMutex
            | LockType::PthreadRwlock => u32::MAX,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            LockType::Spinlock => "spinlock",
            LockType::RwlockRead => "rwlock:R",
            LockType::RwlockWrite => "rwlock:W",
            LockType::RwsemRead => "rwsem:R",
            LockType::RwsemWrite => "rwsem:W",
            LockType::Mutex => "mutex",
            LockType::MutexSpin => "mutex-spin",
            LockType::Rtmutex => "rtmutex",
            LockType::RwlockRtRead => "rwlock-rt:R",
            LockType::RwlockRtWrite => "rwlock-rt:W",
            LockType::PcpuSemRead => "pcpu-sem:R",
            LockType::PcpuSemWrite => "pcpu-sem:W",
            LockType::Semaphore => "semaphore",
            LockType::Futex => "futex",
            LockType::FutexPi => "futex-pi",
            LockType::PthreadMutex => "pthread-mutex",
            LockType::PthreadRwlock => "pthread-rwlock",
        }
    }

    /// Parse a type name as printed by [`LockType::name`]. Also accepts a family name
    /// (`rwsem`, `rwlock`, `pcpu-sem`, `rwlock-rt`, `mutex`) for all its variants.
    pub fn parse_list(name: &str) -> Result<Vec<LockType>, String> {
        let exact: Vec<_> = Self::every().filter(|t| t.name() == name).collect();
        if !exact.is_empty() {
            return Ok(exact);
        }
        let family: Vec<_> = Self::ALL
            .into_iter()
            .filter(|t| {
                t.name().split(':').next() == Some(name)
                    || (name == "mutex" && *t == LockType::MutexSpin)
            })
            .collect();
        if family.is_empty() {
            let known: Vec<_> = Self::every().map(|t| t.name()).collect();
            return Err(format!(
                "unknown lock type `{name}` (known: {})",
                known.join(", ")
            ));
        }
        Ok(family)
    }
}

impl fmt::Display for LockType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for LockType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for LockType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        LockType::every()
            .find(|t| t.name() == s)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown lock type `{s}`")))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownFlags(pub u32);

impl fmt::Display for UnknownFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown contention flags {:#x}", self.0)
    }
}

/// The bitmask of flag values to record for a set of types (`ProbeConfig::flags_mask`).
pub fn flags_mask(types: &[LockType]) -> u64 {
    types
        .iter()
        .filter(|t| !t.is_user())
        .fold(0u64, |m, t| m | (1u64 << t.flags()))
}

/// What the kernel told us about who a lock belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOwner {
    pub field: LockField,
    pub pid: u32,
    pub comm: String,
    /// A `pi_lock`'s thread, when it is not the process's main thread.
    pub tid: Option<u32>,
    /// The kernel saw another process wait for this address as its own lock: the
    /// owner's structure was freed and reused (the name is the first owner's).
    pub reused: bool,
}

/// Which field of the owner's structures the lock is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockField {
    MmapLock,
    /// `mm->mmap_lock.wait_lock`, the spinlock guarding the rwsem's wait list.
    MmapWaitLock,
    /// `mm->mmap_lock.rwbase.rtmutex`, PREEMPT_RT's rtmutex inside the rwsem (the probes'
    /// `LOCK_KIND_MMAP_WAIT_LOCK` on such a kernel).
    MmapRtmutex,
    Siglock,
    PiLock,
}

impl LockField {
    pub fn name(self) -> &'static str {
        match self {
            LockField::MmapLock => "mmap_lock",
            LockField::MmapWaitLock => "mmap_lock.wait_lock",
            LockField::MmapRtmutex => "mmap_lock.rtmutex",
            LockField::Siglock => "siglock",
            LockField::PiLock => "pi_lock",
        }
    }
}

impl LockOwner {
    pub fn decode(info: &LockInfo) -> Result<Self, String> {
        let field = match info.kind {
            LOCK_KIND_MMAP_LOCK => LockField::MmapLock,
            LOCK_KIND_MMAP_WAIT_LOCK => LockField::MmapWaitLock,
            LOCK_KIND_SIGLOCK => LockField::Siglock,
            LOCK_KIND_PI_LOCK => LockField::PiLock,
            other => return Err(format!("unknown lock kind {other}")),
        };
        Ok(LockOwner {
            field,
            pid: info.tgid,
            comm: comm_to_string(&info.comm),
            tid: (field == LockField::PiLock && info.tid != 0 && info.tid != info.tgid)
                .then_some(info.tid),
            reused: info.has_ident == lockscope_common::IDENT_REUSED,
        })
    }

    /// The lock's name, e.g. `mmap_lock of lockscope[1234]`; a thread's `pi_lock` is
    /// named after the thread, `pi_lock of worker[1236]` (its name and thread id, as the
    /// deep spinlock tier names it).
    pub fn name(&self) -> String {
        let id = self.tid.unwrap_or(self.pid);
        let reused = if self.reused {
            ", then other processes at this address"
        } else {
            ""
        };
        format!("{} of {}[{}]{reused}", self.field.name(), self.comm, id)
    }
}

/// A kernel `comm` (NUL-padded, at most 16 bytes) as text.
/// A numeric field of `/proc/PID/fdinfo/FD` text (`name:\tvalue` lines).
pub fn fdinfo_field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == name).then(|| v.trim().parse().ok()).flatten()
    })
}

pub fn comm_to_string(comm: &[u8]) -> String {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_fields_parse() {
        let text = "pos:\t0\nflags:\t02000002\nprog_type:\t26\nrun_time_ns:\t1234\n\
                    run_cnt:\t9\nrecursion_misses:\t3\nverified_insns:\t77\n";
        assert_eq!(fdinfo_field(text, "recursion_misses"), Some(3));
        assert_eq!(fdinfo_field(text, "run_cnt"), Some(9));
        assert_eq!(fdinfo_field(text, "missing"), None);
        assert_eq!(
            fdinfo_field("recursion_misses:\tx\n", "recursion_misses"),
            None
        );
    }

    #[test]
    fn flags_round_trip_for_every_type() {
        for t in LockType::ALL {
            assert_eq!(LockType::from_flags(t.flags()), Ok(t), "{t}");
        }
    }

    #[test]
    fn perf_names() {
        assert_eq!(LockType::from_flags(LCB_F_READ).unwrap().name(), "rwsem:R");
        assert_eq!(LockType::from_flags(LCB_F_WRITE).unwrap().name(), "rwsem:W");
        assert_eq!(LockType::from_flags(LCB_F_SPIN).unwrap().name(), "spinlock");
        assert_eq!(LockType::from_flags(0).unwrap().name(), "semaphore");
        assert_eq!(
            LockType::from_flags(LCB_F_PERCPU | LCB_F_WRITE)
                .unwrap()
                .name(),
            "pcpu-sem:W"
        );
    }

    #[test]
    fn unknown_flags_are_rejected() {
        assert_eq!(LockType::from_flags(1 << 6), Err(UnknownFlags(1 << 6)));
        assert_eq!(
            LockType::from_flags(LCB_F_READ | LCB_F_WRITE),
            Err(UnknownFlags(LCB_F_READ | LCB_F_WRITE))
        );
    }

    #[test]
    fn type_lists_parse_exact_and_family_names() {
        assert_eq!(
            LockType::parse_list("rwsem:R").unwrap(),
            vec![LockType::RwsemRead]
        );
        assert_eq!(
            LockType::parse_list("rwsem").unwrap(),
            vec![LockType::RwsemRead, LockType::RwsemWrite]
        );
        assert_eq!(
            LockType::parse_list("mutex").unwrap(),
            vec![LockType::Mutex]
        );
        assert!(
            LockType::parse_list("bogus")
                .unwrap_err()
                .contains("unknown lock type")
        );
    }

    #[test]
    fn mask_has_one_bit_per_type() {
        let m = flags_mask(&[LockType::RwsemRead, LockType::Spinlock]);
        assert_eq!(m, (1 << LCB_F_READ) | (1 << LCB_F_SPIN));
        // User-space types add nothing to the kernel mask.
        assert_eq!(flags_mask(&[LockType::Futex, LockType::FutexPi]), 0);
    }

    #[test]
    fn user_types_parse_and_never_match_kernel_flags() {
        assert_eq!(
            LockType::parse_list("futex").unwrap(),
            vec![LockType::Futex]
        );
        assert_eq!(
            LockType::parse_list("futex-pi").unwrap(),
            vec![LockType::FutexPi]
        );
        for t in LockType::USER {
            assert!(t.is_user());
            assert!(LockType::from_flags(t.flags()).is_err());
            let j = serde_json::to_string(&t).unwrap();
            assert_eq!(serde_json::from_str::<LockType>(&j).unwrap(), t);
        }
        assert!(!LockType::Mutex.is_user());
        assert!(
            LockType::parse_list("bogus")
                .unwrap_err()
                .contains("futex-pi")
        );
        assert_eq!(
            LockType::parse_list("pthread-mutex").unwrap(),
            vec![LockType::PthreadMutex]
        );
        assert_eq!(
            LockType::parse_list("pthread-rwlock").unwrap(),
            vec![LockType::PthreadRwlock]
        );
    }

    #[test]
    fn owners_name_locks() {
        let mut comm = [0u8; 16];
        comm[..4].copy_from_slice(b"make");
        let info = LockInfo {
            kind: LOCK_KIND_MMAP_LOCK,
            tgid: 42,
            comm,
            tid: 0,
            ..LockInfo::default()
        };
        assert_eq!(
            LockOwner::decode(&info).unwrap().name(),
            "mmap_lock of make[42]"
        );
        // Another process waited for the address as its own mmap_lock: the first
        // owner's mm was freed and reused, and the name says so.
        let reused = LockInfo {
            has_ident: lockscope_common::IDENT_REUSED,
            ..info
        };
        assert_eq!(
            LockOwner::decode(&reused).unwrap().name(),
            "mmap_lock of make[42], then other processes at this address"
        );
        let bad = LockInfo { kind: 99, ..info };
        assert!(LockOwner::decode(&bad).is_err());
        // Two threads' pi_locks: two names; the main thread's is the process's.
        let mut worker = [0u8; 16];
        worker[..6].copy_from_slice(b"worker");
        let pi = |tid| LockInfo {
            kind: LOCK_KIND_PI_LOCK,
            tgid: 42,
            comm: worker,
            tid,
            ..LockInfo::default()
        };
        assert_eq!(
            LockOwner::decode(&pi(43)).unwrap().name(),
            "pi_lock of worker[43]"
        );
        assert_eq!(LockOwner::decode(&pi(43)).unwrap().tid, Some(43));
        assert_eq!(
            LockOwner::decode(&pi(42)).unwrap().name(),
            "pi_lock of worker[42]"
        );
        assert_eq!(LockOwner::decode(&pi(42)).unwrap().tid, None);
        // An mmap_lock is the process's whatever the thread.
        assert_eq!(
            LockOwner::decode(&LockInfo { tid: 43, ..info })
                .unwrap()
                .name(),
            "mmap_lock of make[42]"
        );
    }
}
