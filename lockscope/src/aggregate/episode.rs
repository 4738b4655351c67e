//! Deep spinlock tier: episode records from the ring buffer -> [`StarvationEpisode`],
//! and [`replay`], which runs a scripted sequence of waits, acquisitions and holds
//! through the same detector steps the eBPF probes run (`lockscope_common::spin`).
//! Pure: names and stacks come in through closures.

use lockscope_common::*;

use super::rt::{Acquirer, EpisodeKind, StarvationEpisode, TaskRef};

use crate::decode::comm_to_string;

/// One step of a scripted run, as the probes see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpinEvent {
    /// A task enters the queued-spinlock slowpath for `lock` on `cpu`.
    WaitBegin {
        cpu: u32,
        lock: u64,
        ts_ns: u64,
        tid: u32,
    },
    /// `tid` on `cpu` acquired `lock` (exit of a `_raw_spin_lock*`).
    Acquire {
        cpu: u32,
        lock: u64,
        ts_ns: u64,
        tid: u32,
    },
    /// `tid` on `cpu` releases `lock` (entry of a `_raw_spin_unlock*`).
    Release { cpu: u32, lock: u64, ts_ns: u64 },
    /// The slowpath on `cpu` returns (the waiter holds the lock now).
    WaitEnd { cpu: u32, lock: u64, ts_ns: u64 },
}

/// Run scripted events through the detector: the episode records the probes would send.
/// `watched` says which locks are watched (the others are skipped, as in the kernel).
pub fn replay(
    events: &[SpinEvent],
    p: &SpinParams,
    watched: impl Fn(u64) -> bool,
) -> Vec<SpinEpisodeRecord> {
    let cpus = SPIN_MAX_CPUS as usize;
    let mut waits = vec![SpinWait::default(); cpus];
    let mut holds: Vec<Vec<SpinHold>> = vec![Vec::new(); cpus];
    let mut out = Vec::new();
    for ev in events {
        match *ev {
            SpinEvent::WaitBegin {
                cpu,
                lock,
                ts_ns,
                tid,
            } => {
                let w = &mut waits[cpu as usize];
                if watched(lock) && w.lock == 0 {
                    wait_begin(w, lock, ts_ns, tid, tid, IRQ_UNKNOWN);
                }
            }
            SpinEvent::Acquire {
                cpu,
                lock,
                ts_ns,
                tid,
            } => {
                if !watched(lock) {
                    continue;
                }
                holds[cpu as usize].push(SpinHold {
                    lock,
                    ts_ns,
                    tid,
                    tgid: tid,
                });
                for (other, w) in waits.iter_mut().enumerate() {
                    if other as u32 != cpu && w.lock == lock {
                        wait_foreign(w, tid, tid, cpu, &[0; 16]);
                    }
                }
            }
            SpinEvent::Release { cpu, lock, ts_ns } => {
                let held = &mut holds[cpu as usize];
                if let Some(i) = held.iter().rposition(|h| h.lock == lock) {
                    let h = held.remove(i);
                    let hold_ns = ts_ns.saturating_sub(h.ts_ns);
                    if is_long_hold(hold_ns, p) {
                        out.push(SpinEpisodeRecord {
                            kind: EPISODE_LONG_HOLD,
                            cpu,
                            lock,
                            ts_ns: h.ts_ns,
                            wait_ns: hold_ns,
                            tid: h.tid,
                            tgid: h.tgid,
                            ..Default::default()
                        });
                    }
                }
            }
            SpinEvent::WaitEnd { cpu, lock, ts_ns } => {
                let w = &mut waits[cpu as usize];
                if w.lock != lock || lock == 0 {
                    continue;
                }
                let wait_ns = ts_ns.saturating_sub(w.ts_ns);
                if is_starvation(wait_ns, w.foreign, p) {
                    let mut rec = SpinEpisodeRecord::default();
                    starvation_record(w, cpu, wait_ns, &mut rec);
                    out.push(rec);
                }
                w.lock = 0;
            }
        }
    }
    out
}

/// Lookups the decoder needs, kept out of the pure core.
pub trait EpisodeNames {
    /// The lock's name as in `"locks"` (`pi_lock of comm[pid]`, else the address).
    fn lock(&self, addr: u64) -> String;
    /// A stored stack (by hash), symbolized, innermost first; empty when unknown.
    fn stack(&self, hash: u64) -> Vec<String>;
}

/// Lock functions that disable interrupts before spinning.
const IRQ_OFF_LOCKS: [&str; 2] = ["_raw_spin_lock_irqsave+", "_raw_spin_lock_irq+"];

/// One ring-buffer record -> the shared episode type. Unknown kinds are an error.
pub fn decode_episode(
    rec: &SpinEpisodeRecord,
    names: &dyn EpisodeNames,
) -> Result<StarvationEpisode, String> {
    let kind = match rec.kind {
        EPISODE_STARVATION => EpisodeKind::Starvation,
        EPISODE_LONG_HOLD => EpisodeKind::LongHold,
        other => return Err(format!("unknown episode kind {other}")),
    };
    let stack = names.stack(rec.stack);
    let irqs_off = match rec.irq {
        IRQ_OFF => Some(true),
        IRQ_ON => Some(false),
        // fentry tier: the lock function under the slowpath says it.
        _ if stack
            .iter()
            .any(|f| IRQ_OFF_LOCKS.iter().any(|l| f.starts_with(l))) =>
        {
            Some(true)
        }
        _ => None,
    };
    let n = (rec.n_acq as usize).min(SPIN_ACQUIRERS);
    let mut acquirers: Vec<Acquirer> = rec.acq[..n]
        .iter()
        .map(|a| Acquirer {
            cpu: a.cpu,
            task: TaskRef {
                pid: a.tgid,
                tid: Some(a.tid),
                comm: comm_to_string(&a.comm),
                stack: names.stack(a.stack),
            },
            count: a.count,
        })
        .collect();
    acquirers.sort_by(|a, b| b.count.cmp(&a.count).then(a.cpu.cmp(&b.cpu)));
    Ok(StarvationEpisode {
        kind,
        ts_ns: rec.ts_ns,
        cpu: rec.cpu,
        lock: names.lock(rec.lock),
        addr: format!("{:#x}", rec.lock),
        waiter: TaskRef {
            pid: rec.tgid,
            tid: Some(rec.tid),
            comm: comm_to_string(&rec.comm),
            stack,
        },
        wait_ns: rec.wait_ns,
        foreign_acquisitions: rec.foreign,
        acquirers,
        irqs_off,
        probable: false,
        tier: "deep".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: u64 = 0xffff_8880_0000_07ec;
    const OTHER: u64 = 0xffff_8880_1234_0000;

    struct Names;
    impl EpisodeNames for Names {
        fn lock(&self, addr: u64) -> String {
            if addr == L {
                "pi_lock of victim[42]".into()
            } else {
                format!("{addr:#x}")
            }
        }
        fn stack(&self, hash: u64) -> Vec<String> {
            match hash {
                0 => vec![],
                7 => vec![
                    "native_queued_spin_lock_slowpath+0x10".into(),
                    "_raw_spin_lock_irqsave+0x30".into(),
                    "sched_getaffinity+0x20".into(),
                ],
                _ => vec!["_raw_spin_lock+0x10".into(), "x+0x1".into()],
            }
        }
    }

    /// A waiter on CPU 0 from t=0 to `wait_ns`, while `n` acquisitions happen on CPU 1
    /// (tid 200) and `own` on CPU 0 itself (an interrupt on the waiter's CPU).
    fn script(wait_ns: u64, n: u64, own: u64) -> Vec<SpinEvent> {
        let mut ev = vec![SpinEvent::WaitBegin {
            cpu: 0,
            lock: L,
            ts_ns: 0,
            tid: 100,
        }];
        for i in 0..n {
            ev.push(SpinEvent::Acquire {
                cpu: 1,
                lock: L,
                ts_ns: i + 1,
                tid: 200,
            });
            ev.push(SpinEvent::Release {
                cpu: 1,
                lock: L,
                ts_ns: i + 2,
            });
        }
        for i in 0..own {
            ev.push(SpinEvent::Acquire {
                cpu: 0,
                lock: L,
                ts_ns: i,
                tid: 300,
            });
        }
        ev.push(SpinEvent::WaitEnd {
            cpu: 0,
            lock: L,
            ts_ns: wait_ns,
        });
        ev
    }

    fn starvations(recs: &[SpinEpisodeRecord]) -> Vec<&SpinEpisodeRecord> {
        recs.iter()
            .filter(|r| r.kind == EPISODE_STARVATION)
            .collect()
    }

    #[test]
    fn fires_exactly_at_both_thresholds() {
        let p = SpinParams::default();
        let fired = replay(&script(20_000, 8, 0), &p, |l| l == L);
        let s = starvations(&fired);
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].wait_ns, s[0].foreign, s[0].cpu), (20_000, 8, 0));
        assert_eq!((s[0].n_acq, s[0].acq[0].count, s[0].acq[0].cpu), (1, 8, 1));
        // One acquisition short, or one nanosecond short: nothing.
        assert!(starvations(&replay(&script(20_000, 7, 0), &p, |l| l == L)).is_empty());
        assert!(starvations(&replay(&script(19_999, 8, 0), &p, |l| l == L)).is_empty());
        // Thresholds are parameters.
        let strict = SpinParams {
            threshold_ns: 50_000,
            min_foreign: 3,
            ..p
        };
        assert!(starvations(&replay(&script(40_000, 9, 0), &strict, |l| l == L)).is_empty());
        assert_eq!(
            starvations(&replay(&script(50_000, 3, 0), &strict, |l| l == L)).len(),
            1
        );
    }

    #[test]
    fn acquisitions_on_the_waiters_cpu_and_unwatched_locks_do_not_count() {
        let p = SpinParams::default();
        assert!(starvations(&replay(&script(90_000, 0, 20), &p, |l| l == L)).is_empty());
        // Nothing is watched: no episode at all.
        assert!(replay(&script(90_000, 20, 0), &p, |_| false).is_empty());
        // Acquisitions of another lock during the wait do not count.
        let mut ev = script(90_000, 0, 0);
        let end = ev.pop().unwrap();
        for i in 0..20 {
            ev.push(SpinEvent::Acquire {
                cpu: 1,
                lock: OTHER,
                ts_ns: i,
                tid: 200,
            });
        }
        ev.push(end);
        assert!(starvations(&replay(&ev, &p, |_| true)).is_empty());
    }

    #[test]
    fn acquirers_beyond_the_table_are_counted_together() {
        let p = SpinParams::default();
        let mut ev = vec![SpinEvent::WaitBegin {
            cpu: 0,
            lock: L,
            ts_ns: 0,
            tid: 100,
        }];
        // Six acquirers on CPUs 1..=6, acquirer k taking the lock k times.
        for k in 1..=6u32 {
            for _ in 0..k {
                ev.push(SpinEvent::Acquire {
                    cpu: k,
                    lock: L,
                    ts_ns: 1,
                    tid: 1000 + k,
                });
            }
        }
        ev.push(SpinEvent::WaitEnd {
            cpu: 0,
            lock: L,
            ts_ns: 30_000,
        });
        let recs = replay(&ev, &p, |l| l == L);
        let s = starvations(&recs);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].foreign, 21);
        assert_eq!(s[0].n_acq as usize, SPIN_ACQUIRERS);
        assert_eq!(s[0].other, 5 + 6);
        let e = decode_episode(s[0], &Names).unwrap();
        // Largest count first; the first four acquirers seen are the ones kept.
        let counts: Vec<u64> = e.acquirers.iter().map(|a| a.count).collect();
        assert_eq!(counts, [4, 3, 2, 1]);
        assert_eq!(e.acquirers[0].task.tid, Some(1004));
        assert_eq!(e.acquirers[0].cpu, 4);
    }

    #[test]
    fn long_holds_are_separate_episodes() {
        let p = SpinParams {
            hold_threshold_ns: 10_000,
            ..Default::default()
        };
        let ev = [
            SpinEvent::Acquire {
                cpu: 1,
                lock: L,
                ts_ns: 1_000,
                tid: 5,
            },
            SpinEvent::Release {
                cpu: 1,
                lock: L,
                ts_ns: 11_000,
            },
            SpinEvent::Acquire {
                cpu: 1,
                lock: L,
                ts_ns: 20_000,
                tid: 5,
            },
            SpinEvent::Release {
                cpu: 1,
                lock: L,
                ts_ns: 29_999,
            },
        ];
        let recs = replay(&ev, &p, |l| l == L);
        assert_eq!(recs.len(), 1);
        assert_eq!(
            (recs[0].kind, recs[0].wait_ns, recs[0].ts_ns),
            (EPISODE_LONG_HOLD, 10_000, 1_000)
        );
        let e = decode_episode(&recs[0], &Names).unwrap();
        assert_eq!(e.kind, EpisodeKind::LongHold);
        assert_eq!(e.foreign_acquisitions, 0);
    }

    #[test]
    fn decoded_episodes_name_the_lock_and_say_irqs_off() {
        let p = SpinParams::default();
        let recs = replay(&script(25_000, 9, 0), &p, |l| l == L);
        let mut rec = *starvations(&recs)[0];
        rec.stack = 7;
        rec.comm[..6].copy_from_slice(b"caller");
        let e = decode_episode(&rec, &Names).unwrap();
        assert_eq!(e.lock, "pi_lock of victim[42]");
        assert_eq!(e.addr, format!("{L:#x}"));
        assert_eq!((e.tier.as_str(), e.probable), ("deep", false));
        assert_eq!(e.waiter.comm, "caller");
        assert_eq!(e.waiter.tid, Some(100));
        // Spinning under _raw_spin_lock_irqsave: interrupts were off.
        assert_eq!(e.irqs_off, Some(true));
        // The kprobe tier's saved flags win; a plain _raw_spin_lock is unknown.
        rec.irq = IRQ_ON;
        assert_eq!(decode_episode(&rec, &Names).unwrap().irqs_off, Some(false));
        rec.irq = IRQ_UNKNOWN;
        rec.stack = 9;
        assert_eq!(decode_episode(&rec, &Names).unwrap().irqs_off, None);
        rec.kind = 77;
        assert!(decode_episode(&rec, &Names).unwrap_err().contains("77"));
        let json = serde_json::to_value(e).unwrap();
        assert_eq!(json["kind"], "starvation");
        assert_eq!(json["foreign_acquisitions"], 9);
    }
}
