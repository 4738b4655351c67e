//! futex(2) and futex2 arguments -> what they mean. Pure.
//!
//! futex(2) is `futex(uaddr, op, val, utime|val2, uaddr2, val3)`: `op` is a command plus
//! flags, and what the other arguments mean depends on the command. In particular the
//! fourth argument is a timeout pointer for the waits but a *count* (`val2`, cast to a
//! pointer) for the requeue and wake-op commands, and `val` is an expected value for the
//! waits but a count of tasks to wake for the wakes. [`FutexCmd::args`] says which.

use std::fmt;

use lockscope_common::*;

/// A futex command: futex(2)'s `op & FUTEX_CMD_MASK`, or one of the futex2 syscalls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FutexCmd {
    Wait,
    Wake,
    Fd,
    Requeue,
    CmpRequeue,
    WakeOp,
    LockPi,
    UnlockPi,
    TrylockPi,
    WaitBitset,
    WakeBitset,
    WaitRequeuePi,
    CmpRequeuePi,
    LockPi2,
    /// futex2 `futex_wait(uaddr, val, mask, flags, timeout, clockid)`.
    Futex2Wait,
    /// futex2 `futex_wake(uaddr, mask, nr, flags)`.
    Futex2Wake,
    /// futex2 `futex_waitv(waiters, nr_futexes, flags, timeout, clockid)`.
    Futex2Waitv,
    /// futex2 `futex_requeue(waiters[2], flags, nr_wake, nr_requeue)`.
    Futex2Requeue,
}

/// What one argument of a futex call carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgRole {
    /// Ignored by the command.
    Unused,
    /// The value the futex word must still hold (else `EAGAIN`).
    Expected,
    /// A number of tasks (to wake or to requeue): a count, never a pointer.
    Count,
    /// A timeout pointer, relative to now (`struct timespec *`).
    RelativeTimeout,
    /// A timeout pointer, absolute (clock: `FUTEX_CLOCK_REALTIME` or monotonic).
    AbsoluteTimeout,
    /// A second futex word (a user address).
    Pointer,
    /// A bit mask matched against waiters' masks.
    Bitset,
    /// The encoded operation of `FUTEX_WAKE_OP` (see [`WakeOp`]).
    WakeOpEncoded,
    /// A signal number (`FUTEX_FD`, removed in Linux 2.6.26).
    Signal,
}

/// Roles of futex(2)'s `val`, fourth argument (`utime` / `val2`), `uaddr2` and `val3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FutexArgs {
    pub val: ArgRole,
    pub utime_or_val2: ArgRole,
    pub uaddr2: ArgRole,
    pub val3: ArgRole,
}

impl FutexCmd {
    pub const ALL: [FutexCmd; 18] = [
        FutexCmd::Wait,
        FutexCmd::Wake,
        FutexCmd::Fd,
        FutexCmd::Requeue,
        FutexCmd::CmpRequeue,
        FutexCmd::WakeOp,
        FutexCmd::LockPi,
        FutexCmd::UnlockPi,
        FutexCmd::TrylockPi,
        FutexCmd::WaitBitset,
        FutexCmd::WakeBitset,
        FutexCmd::WaitRequeuePi,
        FutexCmd::CmpRequeuePi,
        FutexCmd::LockPi2,
        FutexCmd::Futex2Wait,
        FutexCmd::Futex2Wake,
        FutexCmd::Futex2Waitv,
        FutexCmd::Futex2Requeue,
    ];

    /// The command slot the probes count it in (futex(2) command number, or the
    /// `FUTEX2_*` slot).
    pub fn slot(self) -> u32 {
        match self {
            FutexCmd::Wait => FUTEX_WAIT,
            FutexCmd::Wake => FUTEX_WAKE,
            FutexCmd::Fd => FUTEX_FD,
            FutexCmd::Requeue => FUTEX_REQUEUE,
            FutexCmd::CmpRequeue => FUTEX_CMP_REQUEUE,
            FutexCmd::WakeOp => FUTEX_WAKE_OP,
            FutexCmd::LockPi => FUTEX_LOCK_PI,
            FutexCmd::UnlockPi => FUTEX_UNLOCK_PI,
            FutexCmd::TrylockPi => FUTEX_TRYLOCK_PI,
            FutexCmd::WaitBitset => FUTEX_WAIT_BITSET,
            FutexCmd::WakeBitset => FUTEX_WAKE_BITSET,
            FutexCmd::WaitRequeuePi => FUTEX_WAIT_REQUEUE_PI,
            FutexCmd::CmpRequeuePi => FUTEX_CMP_REQUEUE_PI,
            FutexCmd::LockPi2 => FUTEX_LOCK_PI2,
            FutexCmd::Futex2Wait => FUTEX2_WAIT,
            FutexCmd::Futex2Wake => FUTEX2_WAKE,
            FutexCmd::Futex2Waitv => FUTEX2_WAITV,
            FutexCmd::Futex2Requeue => FUTEX2_REQUEUE,
        }
    }

    /// Inverse of [`FutexCmd::slot`]; `None` for the unknown-command slot and anything else.
    pub fn from_slot(slot: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.slot() == slot)
    }

    /// Name as in the kernel's uapi header (`FUTEX_WAIT_BITSET`) or the futex2 syscall.
    pub fn name(self) -> &'static str {
        match self {
            FutexCmd::Wait => "FUTEX_WAIT",
            FutexCmd::Wake => "FUTEX_WAKE",
            FutexCmd::Fd => "FUTEX_FD",
            FutexCmd::Requeue => "FUTEX_REQUEUE",
            FutexCmd::CmpRequeue => "FUTEX_CMP_REQUEUE",
            FutexCmd::WakeOp => "FUTEX_WAKE_OP",
            FutexCmd::LockPi => "FUTEX_LOCK_PI",
            FutexCmd::UnlockPi => "FUTEX_UNLOCK_PI",
            FutexCmd::TrylockPi => "FUTEX_TRYLOCK_PI",
            FutexCmd::WaitBitset => "FUTEX_WAIT_BITSET",
            FutexCmd::WakeBitset => "FUTEX_WAKE_BITSET",
            FutexCmd::WaitRequeuePi => "FUTEX_WAIT_REQUEUE_PI",
            FutexCmd::CmpRequeuePi => "FUTEX_CMP_REQUEUE_PI",
            FutexCmd::LockPi2 => "FUTEX_LOCK_PI2",
            FutexCmd::Futex2Wait => "futex_wait",
            FutexCmd::Futex2Wake => "futex_wake",
            FutexCmd::Futex2Waitv => "futex_waitv",
            FutexCmd::Futex2Requeue => "futex_requeue",
        }
    }

    /// Does the command operate on a PI futex (the word holds the owner's TID)?
    pub fn is_pi(self) -> bool {
        matches!(
            self,
            FutexCmd::LockPi
                | FutexCmd::LockPi2
                | FutexCmd::UnlockPi
                | FutexCmd::TrylockPi
                | FutexCmd::WaitRequeuePi
                | FutexCmd::CmpRequeuePi
        )
    }

    /// What the command's arguments carry (futex(2) positions; for the futex2 syscalls
    /// the closest futex(2) equivalent).
    pub fn args(self) -> FutexArgs {
        use ArgRole::*;
        let a = |val, utime_or_val2, uaddr2, val3| FutexArgs {
            val,
            utime_or_val2,
            uaddr2,
            val3,
        };
        match self {
            FutexCmd::Wait => a(Expected, RelativeTimeout, Unused, Unused),
            // futex_wait(uaddr, val, mask, flags, timeout, clockid): absolute timeout.
            FutexCmd::Futex2Wait => a(Expected, AbsoluteTimeout, Unused, Bitset),
            // futex_waitv(waiters, nr, ...): the words and values are in the vector.
            FutexCmd::Futex2Waitv => a(Count, AbsoluteTimeout, Unused, Unused),
            FutexCmd::Wake | FutexCmd::Futex2Wake => a(Count, Unused, Unused, Unused),
            FutexCmd::Fd => a(Signal, Unused, Unused, Unused),
            // val: tasks to wake; val2 (in the timeout slot): tasks to requeue.
            FutexCmd::Requeue | FutexCmd::Futex2Requeue => a(Count, Count, Pointer, Unused),
            FutexCmd::CmpRequeue => a(Count, Count, Pointer, Expected),
            // val: tasks to wake on uaddr; val2: tasks to wake on uaddr2 if the op's
            // comparison holds.
            FutexCmd::WakeOp => a(Count, Count, Pointer, WakeOpEncoded),
            FutexCmd::LockPi | FutexCmd::LockPi2 => a(Unused, AbsoluteTimeout, Unused, Unused),
            FutexCmd::UnlockPi | FutexCmd::TrylockPi => a(Unused, Unused, Unused, Unused),
            FutexCmd::WaitBitset => a(Expected, AbsoluteTimeout, Unused, Bitset),
            FutexCmd::WakeBitset => a(Count, Unused, Unused, Bitset),
            // uaddr2: the PI futex the waiter is requeued to.
            FutexCmd::WaitRequeuePi => a(Expected, AbsoluteTimeout, Pointer, Unused),
            // val must be 1; val2: tasks to requeue onto the PI futex.
            FutexCmd::CmpRequeuePi => a(Count, Count, Pointer, Expected),
        }
    }
}

impl fmt::Display for FutexCmd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A decoded futex(2) `op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FutexOp {
    pub cmd: FutexCmd,
    /// `FUTEX_PRIVATE_FLAG`: the futex is private to the process (keyed by mm, not inode).
    pub private: bool,
    /// `FUTEX_CLOCK_REALTIME`: absolute timeouts are on CLOCK_REALTIME, not MONOTONIC.
    pub clock_realtime: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownOp(pub u32);

impl fmt::Display for UnknownOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown futex op {:#x}", self.0)
    }
}

impl FutexOp {
    /// Decode futex(2)'s `op`. Unknown commands (including stray high bits, which the
    /// kernel folds into the command and rejects with ENOSYS) are an error.
    pub fn decode(op: u32) -> Result<Self, UnknownOp> {
        let cmd = op & FUTEX_CMD_MASK;
        let cmd = FutexCmd::from_slot(cmd)
            .filter(|c| c.slot() <= FUTEX_LOCK_PI2)
            .ok_or(UnknownOp(op))?;
        Ok(FutexOp {
            cmd,
            private: op & FUTEX_PRIVATE_FLAG != 0,
            clock_realtime: op & FUTEX_CLOCK_REALTIME != 0,
        })
    }

    pub fn encode(self) -> u32 {
        self.cmd.slot()
            | if self.private { FUTEX_PRIVATE_FLAG } else { 0 }
            | if self.clock_realtime {
                FUTEX_CLOCK_REALTIME
            } else {
                0
            }
    }
}

impl fmt::Display for FutexOp {
    /// As strace prints it: `FUTEX_WAIT_BITSET_PRIVATE|FUTEX_CLOCK_REALTIME`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.cmd.name())?;
        if self.private {
            f.write_str("_PRIVATE")?;
        }
        if self.clock_realtime {
            f.write_str("|FUTEX_CLOCK_REALTIME")?;
        }
        Ok(())
    }
}

/// futex2 flags (`futex_wait`, `futex_wake`, each `futex_waitv` element).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Futex2Flags {
    /// Size of the futex word in bytes: 1, 2, 4 or 8.
    pub size: u8,
    pub numa: bool,
    pub mpol: bool,
    pub private: bool,
}

impl Futex2Flags {
    pub fn decode(flags: u32) -> Result<Self, UnknownOp> {
        let known = FUTEX2_SIZE_MASK | FUTEX2_NUMA | FUTEX2_MPOL | FUTEX2_PRIVATE;
        if flags & !known != 0 {
            return Err(UnknownOp(flags));
        }
        Ok(Self {
            size: 1 << (flags & FUTEX2_SIZE_MASK),
            numa: flags & FUTEX2_NUMA != 0,
            mpol: flags & FUTEX2_MPOL != 0,
            private: flags & FUTEX2_PRIVATE != 0,
        })
    }
}

/// `FUTEX_WAKE_OP`'s `val3`: `*uaddr2 = *uaddr2 OP oparg`, then wake on uaddr2 if the old
/// value CMP cmparg.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakeOp {
    /// 0 SET, 1 ADD, 2 OR, 3 ANDN, 4 XOR.
    pub op: u32,
    /// `FUTEX_OP_OPARG_SHIFT`: oparg is a shift count (`1 << oparg`).
    pub oparg_shift: bool,
    /// 0 EQ, 1 NE, 2 LT, 3 LE, 4 GT, 5 GE.
    pub cmp: u32,
    pub oparg: u32,
    pub cmparg: u32,
}

impl WakeOp {
    pub fn decode(val3: u32) -> Self {
        Self {
            op: (val3 >> 28) & 7,
            oparg_shift: val3 & (8 << 28) != 0,
            cmp: (val3 >> 24) & 15,
            oparg: (val3 >> 12) & 0xfff,
            cmparg: val3 & 0xfff,
        }
    }

    pub fn encode(self) -> u32 {
        ((self.op & 7) << 28)
            | if self.oparg_shift { 8 << 28 } else { 0 }
            | ((self.cmp & 15) << 24)
            | ((self.oparg & 0xfff) << 12)
            | (self.cmparg & 0xfff)
    }
}

/// The word of a PI futex: the owner's TID plus the waiters and owner-died bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PiWord {
    /// 0: unlocked.
    pub owner_tid: u32,
    /// `FUTEX_WAITERS`: someone waits in the kernel; unlock must go through the kernel.
    pub waiters: bool,
    /// `FUTEX_OWNER_DIED`: the owner exited holding the lock (robust futexes).
    pub owner_died: bool,
}

impl PiWord {
    pub fn decode(word: u32) -> Self {
        Self {
            owner_tid: word & FUTEX_TID_MASK,
            waiters: word & FUTEX_WAITERS != 0,
            owner_died: word & FUTEX_OWNER_DIED != 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_decodes_with_every_flag_combination() {
        for cmd in FutexCmd::ALL
            .into_iter()
            .filter(|c| c.slot() <= FUTEX_LOCK_PI2)
        {
            for private in [false, true] {
                for clock_realtime in [false, true] {
                    let op = FutexOp {
                        cmd,
                        private,
                        clock_realtime,
                    };
                    let raw = op.encode();
                    assert_eq!(FutexOp::decode(raw), Ok(op), "{raw:#x}");
                    // The probes count the same command slot.
                    assert_eq!(futex_cmd_slot(raw), cmd.slot(), "{raw:#x}");
                }
            }
        }
    }

    #[test]
    fn raw_ops_as_glibc_passes_them() {
        // FUTEX_WAIT_PRIVATE = 128, FUTEX_WAKE_PRIVATE = 129.
        let w = FutexOp::decode(128).unwrap();
        assert_eq!(
            (w.cmd, w.private, w.clock_realtime),
            (FutexCmd::Wait, true, false)
        );
        assert_eq!(w.to_string(), "FUTEX_WAIT_PRIVATE");
        assert_eq!(FutexOp::decode(129).unwrap().cmd, FutexCmd::Wake);
        // pthread_cond_timedwait on CLOCK_REALTIME: WAIT_BITSET | PRIVATE | CLOCK_REALTIME.
        let b = FutexOp::decode(9 | 128 | 256).unwrap();
        assert_eq!(b.cmd, FutexCmd::WaitBitset);
        assert!(b.private && b.clock_realtime);
        assert_eq!(
            b.to_string(),
            "FUTEX_WAIT_BITSET_PRIVATE|FUTEX_CLOCK_REALTIME"
        );
        assert_eq!(FutexOp::decode(6).unwrap().to_string(), "FUTEX_LOCK_PI");
        assert_eq!(FutexOp::decode(13 | 128).unwrap().cmd, FutexCmd::LockPi2);
        assert_eq!(FutexOp::decode(7 | 128).unwrap().cmd, FutexCmd::UnlockPi);
        assert_eq!(FutexOp::decode(8).unwrap().cmd, FutexCmd::TrylockPi);
        assert_eq!(
            FutexOp::decode(11 | 128).unwrap().cmd,
            FutexCmd::WaitRequeuePi
        );
        assert_eq!(
            FutexOp::decode(12 | 128).unwrap().cmd,
            FutexCmd::CmpRequeuePi
        );
        assert_eq!(FutexOp::decode(4 | 128).unwrap().cmd, FutexCmd::CmpRequeue);
        assert_eq!(FutexOp::decode(5 | 128).unwrap().cmd, FutexCmd::WakeOp);
        assert_eq!(FutexOp::decode(3).unwrap().cmd, FutexCmd::Requeue);
        assert_eq!(FutexOp::decode(10).unwrap().cmd, FutexCmd::WakeBitset);
        assert_eq!(FutexOp::decode(2).unwrap().cmd, FutexCmd::Fd);
    }

    #[test]
    fn unknown_commands_are_rejected() {
        assert_eq!(FutexOp::decode(14), Err(UnknownOp(14)));
        assert_eq!(FutexOp::decode(14 | 128), Err(UnknownOp(14 | 128)));
        // A stray high bit makes the command unknown, as in the kernel.
        assert_eq!(FutexOp::decode(1 << 9), Err(UnknownOp(1 << 9)));
        assert_eq!(futex_cmd_slot(1 << 9), FUTEX_CMD_UNKNOWN);
        assert_eq!(FutexCmd::from_slot(FUTEX_CMD_UNKNOWN), None);
    }

    #[test]
    fn slots_round_trip_and_agree_with_the_probes_classes() {
        for cmd in FutexCmd::ALL {
            assert_eq!(FutexCmd::from_slot(cmd.slot()), Some(cmd));
            assert!((cmd.slot() as usize) < FUTEX_CMD_SLOTS);
            let class = futex_class(cmd.slot());
            let expect = match cmd {
                FutexCmd::Wait
                | FutexCmd::WaitBitset
                | FutexCmd::WaitRequeuePi
                | FutexCmd::Futex2Wait
                | FutexCmd::Futex2Waitv => FUTEX_CLASS_WAIT,
                FutexCmd::Wake | FutexCmd::WakeBitset | FutexCmd::WakeOp | FutexCmd::Futex2Wake => {
                    FUTEX_CLASS_WAKE
                }
                FutexCmd::Requeue
                | FutexCmd::CmpRequeue
                | FutexCmd::CmpRequeuePi
                | FutexCmd::Futex2Requeue => FUTEX_CLASS_REQUEUE,
                FutexCmd::LockPi | FutexCmd::LockPi2 => FUTEX_CLASS_LOCK_PI,
                FutexCmd::UnlockPi => FUTEX_CLASS_UNLOCK_PI,
                FutexCmd::TrylockPi => FUTEX_CLASS_TRYLOCK_PI,
                FutexCmd::Fd => FUTEX_CLASS_OTHER,
            };
            assert_eq!(class, expect, "{cmd}");
        }
    }

    #[test]
    fn counts_are_not_pointers() {
        use ArgRole::*;
        // The fourth argument is a timeout for waits, a count for requeues and wake-op.
        assert_eq!(FutexCmd::Wait.args().utime_or_val2, RelativeTimeout);
        assert_eq!(FutexCmd::WaitBitset.args().utime_or_val2, AbsoluteTimeout);
        assert_eq!(FutexCmd::LockPi.args().utime_or_val2, AbsoluteTimeout);
        assert_eq!(FutexCmd::LockPi2.args().utime_or_val2, AbsoluteTimeout);
        assert_eq!(
            FutexCmd::WaitRequeuePi.args().utime_or_val2,
            AbsoluteTimeout
        );
        for c in [
            FutexCmd::Requeue,
            FutexCmd::CmpRequeue,
            FutexCmd::WakeOp,
            FutexCmd::CmpRequeuePi,
        ] {
            let a = c.args();
            assert_eq!(a.val, Count, "{c}");
            assert_eq!(a.utime_or_val2, Count, "{c}");
            assert_eq!(a.uaddr2, Pointer, "{c}");
        }
        assert_eq!(FutexCmd::Wake.args().val, Count);
        assert_eq!(FutexCmd::WakeBitset.args().val, Count);
        assert_eq!(FutexCmd::WakeBitset.args().val3, Bitset);
        assert_eq!(FutexCmd::WaitBitset.args().val3, Bitset);
        assert_eq!(FutexCmd::Wait.args().val, Expected);
        assert_eq!(FutexCmd::CmpRequeue.args().val3, Expected);
        assert_eq!(FutexCmd::WakeOp.args().val3, WakeOpEncoded);
        assert_eq!(FutexCmd::WaitRequeuePi.args().uaddr2, Pointer);
        assert_eq!(FutexCmd::Fd.args().val, Signal);
        assert_eq!(FutexCmd::UnlockPi.args(), FutexCmd::TrylockPi.args());
        assert_eq!(FutexCmd::UnlockPi.args().val, Unused);
    }

    #[test]
    fn pi_commands() {
        let pi: Vec<_> = FutexCmd::ALL.into_iter().filter(|c| c.is_pi()).collect();
        assert_eq!(
            pi,
            vec![
                FutexCmd::LockPi,
                FutexCmd::UnlockPi,
                FutexCmd::TrylockPi,
                FutexCmd::WaitRequeuePi,
                FutexCmd::CmpRequeuePi,
                FutexCmd::LockPi2
            ]
        );
    }

    #[test]
    fn futex2_flags() {
        let f = Futex2Flags::decode(2 | 128).unwrap();
        assert_eq!(f.size, 4);
        assert!(f.private && !f.numa && !f.mpol);
        let f = Futex2Flags::decode(3 | 4 | 8).unwrap();
        assert_eq!((f.size, f.numa, f.mpol, f.private), (8, true, true, false));
        assert_eq!(Futex2Flags::decode(0).unwrap().size, 1);
        assert_eq!(Futex2Flags::decode(1 << 12), Err(UnknownOp(1 << 12)));
    }

    #[test]
    fn wake_op_round_trips() {
        // glibc's FUTEX_OP_CLEAR_WAKE_IF_GT_ONE: SET 0, wake if old > 1.
        let v = WakeOp {
            op: 0,
            oparg_shift: false,
            cmp: 4,
            oparg: 0,
            cmparg: 1,
        };
        assert_eq!(v.encode(), (4 << 24) | 1);
        assert_eq!(WakeOp::decode(v.encode()), v);
        let w = WakeOp {
            op: 4,
            oparg_shift: true,
            cmp: 5,
            oparg: 0xabc,
            cmparg: 0x123,
        };
        assert_eq!(WakeOp::decode(w.encode()), w);
    }

    #[test]
    fn pi_words() {
        assert_eq!(
            PiWord::decode(0),
            PiWord {
                owner_tid: 0,
                waiters: false,
                owner_died: false
            }
        );
        let w = PiWord::decode(1234 | FUTEX_WAITERS);
        assert_eq!((w.owner_tid, w.waiters, w.owner_died), (1234, true, false));
        let d = PiWord::decode(77 | FUTEX_OWNER_DIED | FUTEX_WAITERS);
        assert_eq!((d.owner_tid, d.waiters, d.owner_died), (77, true, true));
        assert_eq!(PiWord::decode(u32::MAX).owner_tid, FUTEX_TID_MASK);
    }
}
