//! Lock holders: who held each sleeping lock while its waits waited, from the in-kernel
//! per-(lock, flags, holder) aggregates. Pure.

use std::collections::HashMap;

use lockscope_common::{HOLDER_READERS, HolderKey, HolderStats, flags_gen, flags_kind};

use super::model::{HOLDERS_PER_LOCK, HolderEntry, Holders, READERS};
use crate::decode::LockType;

/// The holders of every (lock, owner generation, type), grouped once per snapshot.
#[derive(Debug, Default)]
pub struct HolderIndex(HashMap<(u64, u32, LockType), Vec<(HolderKey, HolderStats)>>);

impl HolderIndex {
    pub fn new(holders: &[(HolderKey, HolderStats)]) -> Self {
        let mut m: HashMap<_, Vec<_>> = HashMap::new();
        for &(k, v) in holders {
            if let Ok(t) = LockType::from_flags(flags_kind(k.flags)) {
                m.entry((k.lock, flags_gen(k.flags), t))
                    .or_default()
                    .push((k, v));
            }
        }
        Self(m)
    }

    /// The holders of `(addr, generation, lock_type)` for an entry whose waits total
    /// `wait_total_ns`, or `None` when no wait found a holder. `comm` names a holder
    /// (tid, tgid).
    pub fn holders(
        &self,
        addr: u64,
        generation: u32,
        lock_type: LockType,
        wait_total_ns: u64,
        comm: impl Fn(u32, u32) -> String,
        stack: impl Fn(&HolderKey) -> Vec<String>,
    ) -> Option<Holders> {
        let list = self.0.get(&(addr, generation, lock_type))?;
        let mut owners: Vec<HolderEntry> = list
            .iter()
            .map(|(k, v)| {
                let readers = k.tid == HOLDER_READERS;
                HolderEntry {
                    comm: if readers {
                        READERS.to_owned()
                    } else {
                        comm(k.tid, k.tgid)
                    },
                    pid: if readers { 0 } else { k.tgid },
                    tid: if readers { 0 } else { k.tid },
                    contended: v.count,
                    wait_total_ns: v.total_ns,
                    stack: if readers { Vec::new() } else { stack(k) },
                }
            })
            .collect();
        owners.sort_by(|a, b| {
            b.wait_total_ns
                .cmp(&a.wait_total_ns)
                .then(a.tid.cmp(&b.tid))
        });
        let known = crate::aggregate::stats::saturating_sum(owners.iter().map(|o| o.wait_total_ns));
        let omitted = crate::aggregate::stats::saturating_sum(
            owners
                .iter()
                .skip(HOLDERS_PER_LOCK)
                .map(|o| o.wait_total_ns),
        );
        owners.truncate(HOLDERS_PER_LOCK);
        Some(Holders {
            owners,
            owner_unknown_wait_ns: wait_total_ns.saturating_sub(known),
            owners_omitted_wait_ns: omitted,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_common::{LCB_F_MUTEX, LCB_F_WRITE};

    fn key(lock: u64, tid: u32, tgid: u32, flags: u32) -> HolderKey {
        HolderKey {
            lock,
            tid,
            tgid,
            flags,
            _pad: 0,
        }
    }

    fn st(count: u64, total_ns: u64) -> HolderStats {
        HolderStats { count, total_ns }
    }

    #[test]
    fn holders_by_wait_with_readers_unknown_and_omitted() {
        let mut raw = vec![
            (key(0x10, 7, 5, LCB_F_WRITE), st(3, 300)),
            (key(0x10, 8, 5, LCB_F_WRITE), st(1, 900)),
            (key(0x10, HOLDER_READERS, 0, LCB_F_WRITE), st(2, 50)),
            // Another type and another lock: not this entry's.
            (key(0x10, 9, 5, LCB_F_MUTEX), st(1, 1)),
            (key(0x20, 7, 5, LCB_F_WRITE), st(1, 1)),
        ];
        for tid in 100..110 {
            raw.push((key(0x10, tid, 6, LCB_F_WRITE), st(1, 1)));
        }
        let idx = HolderIndex::new(&raw);
        let w = LockType::from_flags(LCB_F_WRITE).unwrap();
        let h = idx
            .holders(
                0x10,
                0,
                w,
                2000,
                |tid, pid| format!("t{tid}p{pid}"),
                |k| vec![format!("stack of {}", k.tid)],
            )
            .unwrap();
        assert_eq!(h.owners.len(), HOLDERS_PER_LOCK);
        assert_eq!(
            (h.owners[0].comm.as_str(), h.owners[0].tid, h.owners[0].pid),
            ("t8p5", 8, 5)
        );
        assert_eq!(h.owners[1].wait_total_ns, 300);
        assert_eq!((h.owners[2].comm.as_str(), h.owners[2].tid), (READERS, 0));
        // A holder thread's stack is its key's; readers have none.
        assert_eq!(h.owners[0].stack, ["stack of 8"]);
        assert!(h.owners[2].stack.is_empty());
        // 1250 + 10 known, 5 of the 1-ns holders past the first 8.
        assert_eq!(h.owner_unknown_wait_ns, 2000 - 1260);
        assert_eq!(h.owners_omitted_wait_ns, 5);
        assert!(
            idx.holders(0x30, 0, w, 10, |_, _| String::new(), |_| Vec::new())
                .is_none()
        );
        // More holder time than the entry's waits (a later snapshot of the holders):
        // unknown saturates at 0.
        assert_eq!(
            idx.holders(0x20, 0, w, 0, |_, _| String::new(), |_| Vec::new())
                .unwrap()
                .owner_unknown_wait_ns,
            0
        );
    }

    #[test]
    fn each_owner_generation_of_an_address_has_its_own_holders() {
        use lockscope_common::GEN_SHIFT;
        let raw = [
            (key(0x10, 7, 5, LCB_F_WRITE), st(1, 100)),
            (key(0x10, 8, 6, LCB_F_WRITE | (1 << GEN_SHIFT)), st(2, 200)),
        ];
        let idx = HolderIndex::new(&raw);
        let w = LockType::from_flags(LCB_F_WRITE).unwrap();
        let tids = |g| {
            idx.holders(0x10, g, w, 1000, |_, _| String::new(), |_| Vec::new())
                .unwrap()
                .owners
                .iter()
                .map(|o| o.tid)
                .collect::<Vec<_>>()
        };
        assert_eq!(tids(0), [7]);
        assert_eq!(tids(1), [8]);
        assert!(
            idx.holders(0x10, 2, w, 10, |_, _| String::new(), |_| Vec::new())
                .is_none()
        );
    }
}
