//! Whole-map reads of hash maps with `BPF_MAP_LOOKUP_BATCH` (Linux 5.6+): one syscall per
//! few thousand entries instead of two per entry (`get_next_key` + `lookup`), which is what
//! iterating an aya map costs. Kernels without batch operations fall back to iteration.
//!
//! A batch read of a hash map that changes meanwhile has the same guarantees as iterating
//! it: every entry present during the whole read is returned once.

use std::{
    mem::size_of,
    os::fd::{AsFd as _, AsRawFd as _},
};

use anyhow::{Context as _, bail};
use aya::{
    Ebpf, Pod,
    maps::{HashMap as BpfHashMap, Map, MapData, PerCpuHashMap},
};

const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;

/// `union bpf_attr`, the `batch` member.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Entries requested per syscall. A hash map's batch must hold at least one whole
/// bucket; buckets hold a few entries, so this is never too small in practice (and
/// `ENOSPC` doubles it). Not more: the kernel and this process each allocate a buffer
/// of this many values per call (a per-CPU futex word is 1.4 KB on 2 CPUs), given back
/// after every read; 4,096 made 5.6 MB buffers faulted in afresh at every read.
const BATCH: usize = 256;

fn map_data<'a>(ebpf: &'a Ebpf, name: &str) -> anyhow::Result<&'a MapData> {
    match ebpf.map(name).with_context(|| format!("{name} map"))? {
        Map::HashMap(d) | Map::LruHashMap(d) | Map::PerCpuHashMap(d) | Map::PerCpuLruHashMap(d) => {
            Ok(d)
        }
        _ => bail!("{name} is not a hash map"),
    }
}

/// Outcome of a batch read attempt.
enum Batch {
    Done,
    /// The kernel has no batch operations for this map (or at all).
    Unsupported,
}

/// Read every (key, value bytes) of a hash map. `value_len`: bytes per element in the
/// batch (for per-CPU maps, the value rounded up to 8 bytes, times the possible CPUs).
fn lookup_batch(
    map: &MapData,
    key_len: usize,
    value_len: usize,
    mut each: impl FnMut(&[u8], &[u8]),
) -> anyhow::Result<Batch> {
    let mut count = BATCH;
    let mut keys = vec![0u8; key_len * count];
    let mut values = vec![0u8; value_len * count];
    // The batch token of a hash map is a bucket index (u32); leave room for more.
    let mut token_in = [0u8; 8];
    let mut token_out = [0u8; 8];
    let mut first = true;
    loop {
        let mut attr = BatchAttr {
            in_batch: if first { 0 } else { token_in.as_ptr() as u64 },
            out_batch: token_out.as_mut_ptr() as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: count as u32,
            map_fd: map.fd().as_fd().as_raw_fd() as u32,
            ..Default::default()
        };
        // SAFETY: `attr` points at buffers sized for `count` keys and values, and at
        // 8-byte batch tokens; the kernel writes at most that much.
        let err = unsafe { bpf(BPF_MAP_LOOKUP_BATCH, &mut attr) }.err();
        match err {
            Some(libc::EINVAL | libc::ENOTSUP | libc::EOPNOTSUPP | libc::ENOSYS) if first => {
                return Ok(Batch::Unsupported);
            }
            Some(libc::ENOSPC) if attr.count == 0 => {
                // A bucket larger than the batch: retry the same position with more room.
                count *= 2;
                keys.resize(key_len * count, 0);
                values.resize(value_len * count, 0);
                continue;
            }
            Some(e) if e != libc::ENOENT => {
                return Err(std::io::Error::from_raw_os_error(e)).context("BPF_MAP_LOOKUP_BATCH");
            }
            _ => {}
        }
        let n = attr.count as usize;
        for i in 0..n {
            each(
                &keys[i * key_len..(i + 1) * key_len],
                &values[i * value_len..(i + 1) * value_len],
            );
        }
        if err == Some(libc::ENOENT) {
            return Ok(Batch::Done);
        }
        token_in = token_out;
        first = false;
    }
}

const BPF_MAP_DELETE_ELEM: libc::c_long = 3;

/// The `bpf(2)` syscall with `attr` as its `union bpf_attr`; the errno on failure.
///
/// # Safety
/// Every pointer in `attr` must be valid for what `cmd` reads and writes.
unsafe fn bpf<A>(cmd: libc::c_long, attr: &mut A) -> Result<(), i32> {
    // SAFETY: the caller vouches for the pointers inside `attr`; `attr` itself is a
    // valid, writable `A` of the size passed.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut A, size_of::<A>() as u32) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(())
    }
}

/// `union bpf_attr`, the element-operation member.
#[repr(C)]
#[derive(Default)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// Delete `keys` from a hash map (plain, LRU or per-CPU); returns how many were there.
/// Through the map's fd, so a shared `&Ebpf` suffices.
pub fn delete_keys<K: Pod>(ebpf: &Ebpf, name: &str, keys: &[K]) -> anyhow::Result<u64> {
    let map = map_data(ebpf, name)?;
    let mut deleted = 0;
    for key in keys {
        let mut attr = ElemAttr {
            map_fd: map.fd().as_fd().as_raw_fd() as u32,
            key: key as *const K as u64,
            ..Default::default()
        };
        // SAFETY: `attr.key` points at a whole `K`, the map's key type; the kernel only
        // reads it.
        match unsafe { bpf(BPF_MAP_DELETE_ELEM, &mut attr) } {
            Ok(()) => deleted += 1,
            Err(libc::ENOENT) => {}
            Err(e) => {
                return Err(std::io::Error::from_raw_os_error(e))
                    .with_context(|| format!("deleting from {name}"));
            }
        }
    }
    Ok(deleted)
}

fn read_pod<T: Pod>(bytes: &[u8]) -> T {
    assert!(bytes.len() >= size_of::<T>());
    // SAFETY: `T: Pod` (plain old data: any bit pattern is valid), and `bytes` holds at
    // least `size_of::<T>()` bytes; the read is unaligned.
    unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) }
}

/// Every entry of a hash map (plain or LRU), in kernel order.
pub fn hash_entries<K: Pod, V: Pod>(ebpf: &Ebpf, name: &str) -> anyhow::Result<Vec<(K, V)>> {
    let map = map_data(ebpf, name)?;
    let mut out = Vec::new();
    match lookup_batch(map, size_of::<K>(), size_of::<V>(), |k, v| {
        out.push((read_pod(k), read_pod(v)))
    })
    .with_context(|| format!("reading {name}"))?
    {
        Batch::Done => Ok(out),
        Batch::Unsupported => {
            let m: BpfHashMap<&MapData, K, V> = BpfHashMap::try_from(ebpf.map(name).unwrap())?;
            m.iter()
                .map(|e| e.with_context(|| format!("reading {name}")))
                .collect()
        }
    }
}

/// Every entry of a per-CPU hash map (plain or LRU), each value folded over the CPUs
/// by `fold` (called with every possible CPU's value).
pub fn percpu_entries<K: Pod, V: Pod, T>(
    ebpf: &Ebpf,
    name: &str,
    mut fold: impl FnMut(&mut dyn Iterator<Item = V>) -> T,
) -> anyhow::Result<Vec<(K, T)>> {
    let map = map_data(ebpf, name)?;
    let cpus = aya::util::nr_cpus().map_err(|(what, e)| anyhow::anyhow!("{what}: {e}"))?;
    let stride = size_of::<V>().next_multiple_of(8);
    let mut out = Vec::new();
    match lookup_batch(map, size_of::<K>(), stride * cpus, |k, v| {
        let mut per_cpu = (0..cpus).map(|c| read_pod::<V>(&v[c * stride..]));
        out.push((read_pod(k), fold(&mut per_cpu)))
    })
    .with_context(|| format!("reading {name}"))?
    {
        Batch::Done => Ok(out),
        Batch::Unsupported => {
            let m: PerCpuHashMap<&MapData, K, V> =
                PerCpuHashMap::try_from(ebpf.map(name).unwrap())?;
            m.iter()
                .map(|e| {
                    let (k, values) = e.with_context(|| format!("reading {name}"))?;
                    Ok((k, fold(&mut values.iter().copied())))
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_attr_matches_the_kernels_layout() {
        // struct { __aligned_u64 in_batch, out_batch, keys, values; __u32 count, map_fd;
        // __u64 elem_flags, flags; }
        assert_eq!(size_of::<BatchAttr>(), 56);
        assert_eq!(std::mem::offset_of!(BatchAttr, count), 32);
        assert_eq!(std::mem::offset_of!(BatchAttr, map_fd), 36);
        assert_eq!(std::mem::offset_of!(BatchAttr, flags), 48);
    }

    #[test]
    fn pod_reads_are_unaligned_and_exact() {
        let bytes = [0u8, 1, 0, 0, 0, 0, 0, 0, 0, 9];
        assert_eq!(read_pod::<u64>(&bytes[1..]), 1);
        assert_eq!(read_pod::<u8>(&bytes[9..]), 9);
    }
}
