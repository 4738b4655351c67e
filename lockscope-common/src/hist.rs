//! Log2 wait-time histogram buckets, shared by the probes (which fill them) and userspace
//! (which turns them into percentiles and Prometheus buckets).

/// Number of log2 buckets. Bucket 0 holds waits of 0 and 1 ns; bucket `i` (1..) holds waits
/// in `[2^i, 2^(i+1))` ns; the last bucket also holds everything longer (2^47 ns is ~39 h).
pub const HIST_BUCKETS: usize = 48;

/// The bucket a wait of `ns` nanoseconds falls in: `floor(log2(ns))`, clamped.
///
/// Written as a branch-light binary search so that the eBPF verifier sees a bounded,
/// loop-free computation (BPF has no count-leading-zeros instruction).
#[inline(always)]
pub fn log2_bucket(ns: u64) -> usize {
    let mut v = ns;
    let mut r: usize = 0;
    if v >= 1 << 32 {
        v >>= 32;
        r += 32;
    }
    if v >= 1 << 16 {
        v >>= 16;
        r += 16;
    }
    if v >= 1 << 8 {
        v >>= 8;
        r += 8;
    }
    if v >= 1 << 4 {
        v >>= 4;
        r += 4;
    }
    if v >= 1 << 2 {
        v >>= 2;
        r += 2;
    }
    if v >= 1 << 1 {
        r += 1;
    }
    if r >= HIST_BUCKETS {
        HIST_BUCKETS - 1
    } else {
        r
    }
}

/// Lower bound (inclusive) of bucket `i` in nanoseconds.
pub const fn bucket_lower_ns(i: usize) -> u64 {
    if i == 0 { 0 } else { 1u64 << i }
}

/// Upper bound (exclusive) of bucket `i` in nanoseconds; `u64::MAX` for the last bucket.
pub const fn bucket_upper_ns(i: usize) -> u64 {
    if i + 1 >= HIST_BUCKETS {
        u64::MAX
    } else {
        1u64 << (i + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_match_floor_log2() {
        assert_eq!(log2_bucket(0), 0);
        assert_eq!(log2_bucket(1), 0);
        assert_eq!(log2_bucket(2), 1);
        assert_eq!(log2_bucket(3), 1);
        assert_eq!(log2_bucket(4), 2);
        assert_eq!(log2_bucket(1023), 9);
        assert_eq!(log2_bucket(1024), 10);
        for shift in 1..HIST_BUCKETS {
            let v = 1u64 << shift;
            assert_eq!(log2_bucket(v), shift, "2^{shift}");
            assert_eq!(log2_bucket(v - 1), shift - 1, "2^{shift}-1");
        }
        assert_eq!(log2_bucket(u64::MAX), HIST_BUCKETS - 1);
    }

    #[test]
    fn bounds_contain_their_values() {
        for v in [0u64, 1, 2, 5, 1000, 123_456_789, 1 << 40] {
            let b = log2_bucket(v);
            assert!(
                bucket_lower_ns(b) <= v && v < bucket_upper_ns(b),
                "{v} in {b}"
            );
        }
    }
}
