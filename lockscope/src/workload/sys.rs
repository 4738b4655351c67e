//! Small OS helpers shared by the workloads: CPU pinning, anonymous
//! mappings, resource usage, stop signals and number formatting.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};

/// Size of a base page in bytes.
/// A new file of this workload's in `dir`, already removed from it: it lives while open.
pub fn unlinked_file(dir: &std::path::Path, workload: &str) -> anyhow::Result<std::fs::File> {
    let path = dir.join(format!("lockscope-{workload}.{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    let _ = std::fs::remove_file(&path);
    Ok(file)
}

pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// The CPUs this process is allowed to run on (its affinity mask), in
/// ascending order. Falls back to `0..available_parallelism` if the mask
/// cannot be read.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: we pass a valid pointer and its exact size.
    let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    if rc == 0 {
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `cpu` is below CPU_SETSIZE, and `set` is initialised.
            .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
            .collect();
        if !cpus.is_empty() {
            return cpus;
        }
    }
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    (0..n).collect()
}

/// Round-robin placement: the CPU for the `index`-th thread of a role.
///
/// Returns `None` when `cpus` is empty (then the thread is left unpinned).
pub fn cpu_for(index: usize, cpus: &[usize]) -> Option<usize> {
    if cpus.is_empty() {
        None
    } else {
        Some(cpus[index % cpus.len()])
    }
}

/// Pins the calling thread to `cpu`.
/// Pin the calling thread to the first CPU it may run on; threads it spawns inherit it.
pub fn pin_to_one_cpu() -> anyhow::Result<()> {
    let cpu = *allowed_cpus()
        .first()
        .context("no CPU allowed to this process")?;
    pin_current_thread(cpu)
}

pub fn pin_current_thread(cpu: usize) -> anyhow::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        bail!("cpu {cpu} is beyond CPU_SETSIZE");
    }
    // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` was bounds-checked above.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 means the calling thread; pointer and size are valid.
    let rc = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error())
            .with_context(|| format!("sched_setaffinity(cpu {cpu})"));
    }
    Ok(())
}

/// Splits `total` items into `parts` contiguous ranges whose lengths differ
/// by at most one; returns `(start, len)` of range `index`.
pub fn split_range(total: usize, parts: usize, index: usize) -> (usize, usize) {
    assert!(parts > 0, "split_range: parts must be > 0");
    assert!(index < parts, "split_range: index out of range");
    let base = total / parts;
    let extra = total % parts;
    let start = index * base + index.min(extra);
    let len = base + usize::from(index < extra);
    (start, len)
}

/// A private anonymous read/write mapping, unmapped on drop.
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory; sharing the base address between
// threads is fine as long as callers synchronise their own accesses.
unsafe impl Send for Mapping {}
// SAFETY: see above; `Mapping` itself exposes no interior mutability.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of fresh, zero-filled anonymous memory.
    pub fn anonymous(len: usize) -> anyhow::Result<Self> {
        Self::anonymous_at(std::ptr::null_mut(), len).with_context(|| format!("mmap({len} bytes)"))
    }

    /// Like [`Mapping::anonymous`], but asks for exactly address `addr`
    /// (`MAP_FIXED_NOREPLACE`) unless `addr` is null. Fails with `EEXIST`
    /// if something is already mapped there; never replaces a mapping.
    pub fn anonymous_at(addr: *mut u8, len: usize) -> io::Result<Self> {
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        if !addr.is_null() {
            flags |= libc::MAP_FIXED_NOREPLACE;
        }
        // SAFETY: without MAP_FIXED the kernel never clobbers an existing
        // mapping; MAP_FIXED_NOREPLACE fails instead of replacing.
        let p = unsafe {
            libc::mmap(
                addr.cast(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        if !addr.is_null() && p != addr.cast() {
            // Kernels before 4.17 treat the flag as a mere hint.
            // SAFETY: unmapping the mapping we just created.
            unsafe { libc::munmap(p, len) };
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        let ptr =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(Self { ptr, len })
    }

    /// Unmaps everything except `[offset, offset + len)`, which is returned.
    pub fn keep_only(self, offset: usize, len: usize) -> Self {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len));
        let base = self.ptr.as_ptr();
        let total = self.len;
        std::mem::forget(self);
        // SAFETY: both ranges lie inside the mapping we own (checked
        // above); munmap of an empty range is skipped.
        unsafe {
            if offset > 0 {
                libc::munmap(base.cast(), offset);
            }
            let end = offset + len;
            if end < total {
                libc::munmap(base.add(end).cast(), total - end);
            }
            Self {
                ptr: NonNull::new_unchecked(base.add(offset)),
                len,
            }
        }
    }

    /// `madvise(advice)` over the whole mapping.
    pub fn advise(&self, advice: libc::c_int) -> io::Result<()> {
        // SAFETY: the range is exactly our own live mapping.
        let rc = unsafe { libc::madvise(self.ptr.as_ptr().cast(), self.len, advice) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the range we mapped; no references into
        // it outlive `self` (callers only hold raw pointers while borrowing).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// User and system CPU time consumed by the whole process so far.
pub fn cpu_times() -> (Duration, Duration) {
    // SAFETY: rusage is plain data; zeroed is valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to an rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    (timeval(ru.ru_utime), timeval(ru.ru_stime))
}

fn timeval(tv: libc::timeval) -> Duration {
    let secs = u64::try_from(tv.tv_sec).unwrap_or(0);
    let micros = u32::try_from(tv.tv_usec).unwrap_or(0);
    Duration::from_secs(secs) + Duration::from_micros(u64::from(micros))
}

/// Events per second, or 0 for an empty interval.
pub fn rate(count: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 { count as f64 / secs } else { 0.0 }
}

/// Formats a rate as a whole number (rates here are large; decimals are
/// noise).
pub fn fmt_rate(r: f64) -> String {
    format!("{:.0}", r.max(0.0))
}

/// Formats a duration as seconds with millisecond precision, e.g. `0.412 s`.
pub fn fmt_secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP_REQUESTED.store(true, Ordering::Relaxed);
}

/// Installs SIGINT/SIGTERM handlers that set a flag (see [`stop_requested`])
/// instead of killing the process; the previous handlers are restored when
/// the guard is dropped.
pub struct StopSignals {
    old: Vec<(libc::c_int, libc::sigaction)>,
}

impl StopSignals {
    pub fn install() -> anyhow::Result<Self> {
        STOP_REQUESTED.store(false, Ordering::Relaxed);
        let mut guard = Self { old: Vec::new() };
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: sigaction is plain data; zeroed is a valid value.
            let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
            sa.sa_sigaction = on_stop_signal as *const () as libc::sighandler_t;
            // SAFETY: `sa` and `old` are valid; the handler is async-signal-safe.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: valid pointer to a sigset_t inside `sa`.
            unsafe { libc::sigemptyset(&mut sa.sa_mask) };
            // SAFETY: see above.
            if unsafe { libc::sigaction(sig, &sa, &mut old) } != 0 {
                return Err(io::Error::last_os_error()).context("sigaction");
            }
            guard.old.push((sig, old));
        }
        Ok(guard)
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        for (sig, old) in self.old.drain(..) {
            // SAFETY: restoring a handler previously returned by the kernel.
            unsafe { libc::sigaction(sig, &old, std::ptr::null_mut()) };
        }
    }
}

/// True once SIGINT or SIGTERM arrived while [`StopSignals`] was installed.
pub fn stop_requested() -> bool {
    STOP_REQUESTED.load(Ordering::Relaxed)
}

/// Let worker threads run for `duration` (or until SIGINT/SIGTERM), then raise `stop`
/// and join them all. Returns the time they ran and the first error any of them
/// returned (or that one panicked; `what` names the threads in that message).
pub fn run_then_join(
    duration: Duration,
    stop: &AtomicBool,
    handles: Vec<std::thread::JoinHandle<anyhow::Result<()>>>,
    what: &str,
) -> (Duration, Option<anyhow::Error>) {
    let t0 = std::time::Instant::now();
    while t0.elapsed() < duration && !stop_requested() {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    let elapsed = t0.elapsed();
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert(anyhow::anyhow!("{what} panicked"));
            }
        }
    }
    (elapsed, first_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_range_covers_everything_once() {
        for total in [0usize, 1, 7, 100, 131072] {
            for parts in 1..=9 {
                let mut next = 0;
                for i in 0..parts {
                    let (start, len) = split_range(total, parts, i);
                    assert_eq!(start, next, "total={total} parts={parts} i={i}");
                    next = start + len;
                }
                assert_eq!(next, total);
            }
        }
    }

    #[test]
    fn split_range_is_balanced() {
        let lens: Vec<usize> = (0..4).map(|i| split_range(10, 4, i).1).collect();
        assert_eq!(lens, [3, 3, 2, 2]);
        assert_eq!(split_range(2, 4, 3), (2, 0));
    }

    #[test]
    fn cpu_for_is_round_robin() {
        let cpus = [0, 2, 5];
        let got: Vec<_> = (0..7).map(|i| cpu_for(i, &cpus).unwrap()).collect();
        assert_eq!(got, [0, 2, 5, 0, 2, 5, 0]);
        assert_eq!(cpu_for(3, &[]), None);
    }

    #[test]
    fn allowed_cpus_is_nonempty_and_sorted() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty());
        assert!(cpus.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn rate_and_formatting() {
        assert_eq!(rate(10, Duration::from_secs(2)), 5.0);
        assert_eq!(rate(10, Duration::ZERO), 0.0);
        assert_eq!(fmt_rate(1234.6), "1235");
        assert_eq!(fmt_rate(-1.0), "0");
        assert_eq!(fmt_secs(Duration::from_millis(412)), "0.412 s");
    }

    #[test]
    fn mapping_is_writable() {
        let ps = page_size();
        let m = Mapping::anonymous(2 * ps).unwrap();
        // SAFETY: both offsets are inside the live mapping.
        unsafe {
            m.as_ptr().write(1);
            m.as_ptr().add(ps).write(2);
            assert_eq!(m.as_ptr().add(ps).read(), 2);
        }
    }

    #[test]
    fn keep_only_and_fixed_noreplace() {
        let ps = page_size();
        let m = Mapping::anonymous(3 * ps).unwrap();
        let base = m.as_ptr();
        let mid = m.keep_only(ps, ps);
        assert_eq!(mid.as_ptr(), base.wrapping_add(ps));
        // The middle page is still mapped, so asking for it fails ...
        let err = Mapping::anonymous_at(mid.as_ptr(), ps).err().unwrap();
        assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
        // ... while the freed neighbours can be mapped again (unless some
        // other thread of the test binary grabbed them in between).
        if let Ok(below) = Mapping::anonymous_at(base, ps) {
            assert_eq!(below.as_ptr(), base);
        }
    }
}
