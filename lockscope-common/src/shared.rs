//! Updates of map values that every CPU writes at once (plain, not per-CPU, hash maps).
//!
//! The large aggregation maps are shared rather than per-CPU: a per-CPU entry costs its
//! size once per possible CPU (16,384 wait entries of 424 bytes are 7 MB shared and 890 MB
//! on a 128-CPU machine), and each per-CPU element is one allocation under the kernel's
//! `pcpu_alloc_mutex` when the map is made and one more free when it goes (65,536 of
//! each per run before, and that mutex was seen held for seconds on a busy machine: see
//! docs/development.md). Additions are atomic; a minimum or maximum is a
//! compare-and-exchange retried while other CPUs keep moving it, up to [`MINMAX_TRIES`]
//! times: the caller counts a give-up, so nothing is lost silently.

#[cfg(not(target_arch = "bpf"))]
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Compare-and-exchange attempts for one minimum or maximum. An attempt fails only when
/// another CPU stored a new extreme of the same entry between the read and the exchange
/// (new extremes grow rare as an entry fills); two in a row are counted by the caller.
/// More attempts multiply the paths the verifier walks (four made the futex exit's
/// verification half as long again).
pub const MINMAX_TRIES: u32 = 2;

/// `*p += n`, atomically.
///
/// # Safety
/// `p` points at a live, 8-byte aligned u64 that is only ever accessed atomically or by
/// readers that tolerate a value in progress (a map value read from userspace).
#[inline(always)]
pub unsafe fn add(p: *mut u64, n: u64) {
    // The BPF target has no `AtomicU64` read-modify-write methods (its spec declares no
    // compare-and-swap, which v1 of the instruction set lacked): the intrinsics emit the
    // instructions themselves.
    #[cfg(target_arch = "bpf")]
    // SAFETY: the caller's contract.
    unsafe {
        core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
            p, n,
        );
    }
    #[cfg(not(target_arch = "bpf"))]
    // SAFETY: the caller's contract.
    unsafe { AtomicU64::from_ptr(p) }.fetch_add(n, Relaxed);
}

/// Replace `*p` with `new` if it is `cur`; the value found either way.
///
/// # Safety
/// As [`add`].
#[inline(always)]
unsafe fn cmpxchg(p: *mut u64, cur: u64, new: u64) -> u64 {
    #[cfg(target_arch = "bpf")]
    {
        use core::intrinsics::{AtomicOrdering::Relaxed, atomic_cxchg};
        // SAFETY: the caller's contract.
        unsafe { atomic_cxchg::<u64, { Relaxed }, { Relaxed }>(p, cur, new) }.0
    }
    #[cfg(not(target_arch = "bpf"))]
    // SAFETY: the caller's contract.
    match unsafe { AtomicU64::from_ptr(p) }.compare_exchange(cur, new, Relaxed, Relaxed) {
        Ok(v) | Err(v) => v,
    }
}

/// Move `*p` towards `v` while `keep(*p, v)` is false, atomically; false when other CPUs
/// kept moving it for [`MINMAX_TRIES`] attempts (then `*p` may miss `v`).
#[inline(always)]
unsafe fn store_extreme(p: *mut u64, v: u64, keep: impl Fn(u64, u64) -> bool) -> bool {
    // SAFETY: the caller's contract; a plain read that a concurrent writer may race is
    // only a first guess, checked by the exchange.
    let mut cur = unsafe { core::ptr::read_volatile(p) };
    for _ in 0..MINMAX_TRIES {
        if keep(cur, v) {
            return true;
        }
        // SAFETY: the caller's contract.
        let found = unsafe { cmpxchg(p, cur, v) };
        if found == cur {
            return true;
        }
        cur = found;
    }
    keep(cur, v)
}

/// `*p = min(*p, v)`, atomically; false when other CPUs kept moving it for
/// [`MINMAX_TRIES`] attempts (then `*p` may miss `v`).
///
/// # Safety
/// As [`add`].
#[inline(always)]
pub unsafe fn store_min(p: *mut u64, v: u64) -> bool {
    // SAFETY: the caller's contract.
    unsafe { store_extreme(p, v, |cur, v| v >= cur) }
}

/// `*p = max(*p, v)`, atomically; false as for [`store_min`].
///
/// # Safety
/// As [`add`].
#[inline(always)]
pub unsafe fn store_max(p: *mut u64, v: u64) -> bool {
    // SAFETY: the caller's contract.
    unsafe { store_extreme(p, v, |cur, v| v <= cur) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extremes_move_only_outward() {
        let mut lo = u64::MAX;
        let mut hi = 0u64;
        for v in [50, 20, 90, 20, 70] {
            // SAFETY: locals, accessed by this thread only.
            unsafe {
                assert!(store_min(&mut lo, v));
                assert!(store_max(&mut hi, v));
            }
        }
        assert_eq!((lo, hi), (20, 90));
        let mut n = 5u64;
        // SAFETY: a local.
        unsafe { add(&mut n, 7) };
        assert_eq!(n, 12);
    }

    #[test]
    fn concurrent_updates_stay_exact() {
        extern crate std;
        use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
        use std::{sync::Arc, thread, vec::Vec};
        let cells = Arc::new([
            AtomicU64::new(0),
            AtomicU64::new(u64::MAX),
            AtomicU64::new(0),
        ]);
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let c = cells.clone();
                thread::spawn(move || {
                    let mut gave_up = 0;
                    for i in 0..20_000u64 {
                        let v = 1 + (i * 7919 + t * 104_729) % 1_000_000;
                        // SAFETY: the cells are only accessed atomically.
                        unsafe {
                            add(c[0].as_ptr(), v);
                            gave_up += !store_min(c[1].as_ptr(), v) as u32;
                            gave_up += !store_max(c[2].as_ptr(), v) as u32;
                        }
                    }
                    gave_up
                })
            })
            .collect();
        let gave_up: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        let all: Vec<u64> = (0..4u64)
            .flat_map(|t| (0..20_000u64).map(move |i| 1 + (i * 7919 + t * 104_729) % 1_000_000))
            .collect();
        assert_eq!(gave_up, 0);
        assert_eq!(cells[0].load(Relaxed), all.iter().sum::<u64>());
        assert_eq!(cells[1].load(Relaxed), *all.iter().min().unwrap());
        assert_eq!(cells[2].load(Relaxed), *all.iter().max().unwrap());
    }
}
