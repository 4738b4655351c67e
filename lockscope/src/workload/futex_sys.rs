//! Raw futex(2) calls and the run loop shared by the user-space lock workloads, which count
//! every futex call they make so that a tracer's figures can be checked exactly.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use super::sys;

pub(super) const FUTEX_WAIT: i32 = 0;
const FUTEX_WAKE: i32 = 1;
const FUTEX_LOCK_PI: i32 = 6;
const FUTEX_UNLOCK_PI: i32 = 7;
pub(super) const FUTEX_PRIVATE_FLAG: i32 = 128;

/// What one thread counted of its own futex calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FutexCounts {
    /// Lock/unlock pairs completed (for rwlocks: reads + writes).
    pub ops: u64,
    pub read_ops: u64,
    pub write_ops: u64,
    /// FUTEX_WAIT calls, and those of them that returned EAGAIN.
    pub wait_calls: u64,
    pub eagain: u64,
    /// FUTEX_WAIT calls interrupted by a signal (EINTR).
    pub interrupted: u64,
    /// FUTEX_WAKE calls, and the tasks they woke (sum of return values).
    pub wake_calls: u64,
    pub woken: u64,
    pub lock_pi_calls: u64,
    pub unlock_pi_calls: u64,
    /// Futex calls that failed otherwise (should stay 0).
    pub errors: u64,
}

impl FutexCounts {
    pub fn add(&mut self, o: &FutexCounts) {
        self.ops += o.ops;
        self.read_ops += o.read_ops;
        self.write_ops += o.write_ops;
        self.wait_calls += o.wait_calls;
        self.eagain += o.eagain;
        self.interrupted += o.interrupted;
        self.wake_calls += o.wake_calls;
        self.woken += o.woken;
        self.lock_pi_calls += o.lock_pi_calls;
        self.unlock_pi_calls += o.unlock_pi_calls;
        self.errors += o.errors;
    }

    /// `FUTEX_WAIT_PRIVATE(word, expected)`, counted.
    pub fn wait(&mut self, word: &AtomicU32, expected: u32) {
        self.wait_calls += 1;
        match futex(word, FUTEX_WAIT | FUTEX_PRIVATE_FLAG, expected) {
            Ok(_) => {}
            Err(libc::EAGAIN) => self.eagain += 1,
            Err(libc::EINTR) => self.interrupted += 1,
            Err(_) => self.errors += 1,
        }
    }

    /// `FUTEX_WAKE_PRIVATE(word, n)`, counted with the number of tasks woken.
    pub fn wake(&mut self, word: &AtomicU32, n: u32) {
        self.wake_calls += 1;
        match futex(word, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, n) {
            Ok(woke) => self.woken += woke as u64,
            Err(_) => self.errors += 1,
        }
    }

    /// `FUTEX_LOCK_PI_PRIVATE(word)`: returns once the kernel made us the owner.
    pub fn lock_pi(&mut self, word: &AtomicU32) {
        loop {
            self.lock_pi_calls += 1;
            match futex(word, FUTEX_LOCK_PI | FUTEX_PRIVATE_FLAG, 0) {
                Ok(_) => return,
                // The kernel retries internally; these are not expected, but stay correct.
                Err(libc::EINTR) | Err(libc::EAGAIN) => self.interrupted += 1,
                Err(_) => {
                    self.errors += 1;
                    return;
                }
            }
        }
    }

    pub fn unlock_pi(&mut self, word: &AtomicU32) {
        self.unlock_pi_calls += 1;
        if futex(word, FUTEX_UNLOCK_PI | FUTEX_PRIVATE_FLAG, 0).is_err() {
            self.errors += 1;
        }
    }
}

/// futex(word, op, val, NULL, NULL, 0): `Ok(return value)` or `Err(errno)`.
fn futex(word: &AtomicU32, op: i32, val: u32) -> Result<i64, i32> {
    futex_timed(word, op, val, None)
}

/// futex(word, op, val, timeout or NULL, NULL, 0): `Ok(return value)` or `Err(errno)`.
pub(super) fn futex_timed(
    word: &AtomicU32,
    op: i32,
    val: u32,
    timeout: Option<&libc::timespec>,
) -> Result<i64, i32> {
    let timeout = timeout.map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned u32 and `timeout` null or a live timespec; no
    // second word is passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op,
            val,
            timeout,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(r)
    }
}

pub fn gettid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// Busy work of `n` steps that the compiler cannot drop.
#[inline]
pub fn spin_work(n: u32) {
    let mut x = 0u32;
    for i in 0..n {
        x = std::hint::black_box(x.wrapping_add(i));
    }
    std::hint::black_box(x);
}

/// Stack of each worker thread (64 KiB; the default 2 MiB would reserve 20 GiB of
/// address space for 10,000 threads).
const WORKER_STACK: usize = 64 << 10;

/// Run `threads` workers until `seconds` pass (or SIGINT/SIGTERM), each calling `step`
/// with its index and counters until told to stop. Returns per-thread counters and the
/// wall time.
pub fn run_threads<F>(
    name: &str,
    threads: usize,
    seconds: f64,
    step: F,
) -> anyhow::Result<(Vec<FutexCounts>, Duration)>
where
    F: Fn(usize, &mut FutexCounts) + Send + Sync + 'static,
{
    if threads == 0 {
        bail!("--threads must be at least 1");
    }
    if !(seconds > 0.0 && seconds.is_finite()) {
        bail!("--seconds must be a positive number, got {seconds}");
    }
    let _signals = sys::StopSignals::install()?;
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(threads + 1));
    let step = Arc::new(step);
    let mut handles = Vec::with_capacity(threads);
    for i in 0..threads {
        let (stop, start, step) = (stop.clone(), start.clone(), step.clone());
        let h = std::thread::Builder::new()
            .name(format!("{name}-{i}"))
            // Workers need little stack; small stacks let --threads go to 10,000 and more.
            .stack_size(WORKER_STACK)
            .spawn(move || {
                let mut c = FutexCounts::default();
                start.wait();
                while !stop.load(Ordering::Relaxed) {
                    step(i, &mut c);
                }
                c
            })
            .with_context(|| format!("spawning {name} thread"))?;
        handles.push(h);
    }
    start.wait();
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs_f64(seconds);
    while Instant::now() < deadline && !sys::stop_requested() {
        std::thread::sleep(
            deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(50)),
        );
    }
    stop.store(true, Ordering::Relaxed);
    let mut counts = Vec::with_capacity(threads);
    for h in handles {
        counts.push(
            h.join()
                .map_err(|_| anyhow::anyhow!("{name} thread panicked"))?,
        );
    }
    Ok((counts, t0.elapsed()))
}

/// The summary lines every futex workload prints (`key: value`, parsed by tests).
pub fn print_summary(lock_addr: usize, per_thread: &[FutexCounts], real: Duration) {
    let mut total = FutexCounts::default();
    for c in per_thread {
        total.add(c);
    }
    let rates: Vec<f64> = per_thread.iter().map(|c| sys::rate(c.ops, real)).collect();
    let avg = rates.iter().sum::<f64>() / rates.len().max(1) as f64;
    let min = rates.iter().copied().fold(f64::INFINITY, f64::min);
    let max = rates.iter().copied().fold(0.0, f64::max);
    println!("lock: {lock_addr:#x}");
    println!("real: {}", sys::fmt_secs(real));
    println!("ops: {}", total.ops);
    if total.read_ops + total.write_ops > 0 {
        println!("read ops: {}", total.read_ops);
        println!("write ops: {}", total.write_ops);
    }
    println!("futex_wait: {}", total.wait_calls);
    println!("eagain: {}", total.eagain);
    println!("futex_wake: {}", total.wake_calls);
    println!("woken: {}", total.woken);
    println!("lock_pi: {}", total.lock_pi_calls);
    println!("unlock_pi: {}", total.unlock_pi_calls);
    println!("interrupted: {}", total.interrupted);
    println!("errors: {}", total.errors);
    println!(
        "per-thread ops/s: avg {} min {} max {}",
        sys::fmt_rate(avg),
        sys::fmt_rate(if min.is_finite() { min } else { 0.0 }),
        sys::fmt_rate(max)
    );
}

/// The same summary as one JSON object on one line: `head` (the workload's name and
/// parameters) plus the lock address, wall time, ops, ops per second, every futex call
/// counter and the process's CPU time (for `cargo xtask bench`).
pub fn print_summary_json(
    head: serde_json::Value,
    lock_addr: usize,
    per_thread: &[FutexCounts],
    real: Duration,
) {
    println!("{}", summary_json(head, lock_addr, per_thread, real));
}

fn summary_json(
    mut head: serde_json::Value,
    lock_addr: usize,
    per_thread: &[FutexCounts],
    real: Duration,
) -> serde_json::Value {
    let mut t = FutexCounts::default();
    for c in per_thread {
        t.add(c);
    }
    let (usr, sys) = sys::cpu_times();
    let body = serde_json::json!({
        "lock": format!("{lock_addr:#x}"),
        "real_s": real.as_secs_f64(),
        "ops": t.ops,
        "ops_per_s": sys::rate(t.ops, real),
        "read_ops": t.read_ops,
        "write_ops": t.write_ops,
        "futex_wait": t.wait_calls,
        "eagain": t.eagain,
        "futex_wake": t.wake_calls,
        "woken": t.woken,
        "lock_pi": t.lock_pi_calls,
        "unlock_pi": t.unlock_pi_calls,
        "interrupted": t.interrupted,
        "errors": t.errors,
        "usr_s": usr.as_secs_f64(),
        "sys_s": sys.as_secs_f64(),
    });
    if let (Some(h), serde_json::Value::Object(b)) = (head.as_object_mut(), body) {
        h.extend(b);
    }
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_on_a_changed_word_is_eagain_and_wake_without_waiters_wakes_none() {
        let w = AtomicU32::new(1);
        let mut c = FutexCounts::default();
        c.wait(&w, 0);
        assert_eq!((c.wait_calls, c.eagain), (1, 1));
        c.wake(&w, 1);
        assert_eq!((c.wake_calls, c.woken, c.errors), (1, 0, 0));
    }

    #[test]
    fn json_summary_sums_threads_and_keeps_the_head() {
        let a = FutexCounts {
            ops: 10,
            wait_calls: 3,
            eagain: 1,
            ..Default::default()
        };
        let b = FutexCounts {
            ops: 5,
            wake_calls: 2,
            woken: 2,
            ..Default::default()
        };
        let v = summary_json(
            serde_json::json!({"workload": "w", "threads": 2}),
            0x1000,
            &[a, b],
            Duration::from_millis(500),
        );
        assert_eq!(v["workload"], "w");
        assert_eq!(v["threads"], 2);
        assert_eq!(v["lock"], "0x1000");
        assert_eq!(v["ops"], 15);
        assert_eq!(v["ops_per_s"], 30.0);
        assert_eq!(
            (v["futex_wait"].as_u64(), v["eagain"].as_u64()),
            (Some(3), Some(1))
        );
        assert_eq!(
            (v["futex_wake"].as_u64(), v["woken"].as_u64()),
            (Some(2), Some(2))
        );
        assert!(v["usr_s"].as_f64().is_some());
    }

    #[test]
    fn pi_lock_of_a_free_word_makes_us_owner() {
        let w = AtomicU32::new(0);
        let mut c = FutexCounts::default();
        c.lock_pi(&w);
        assert_eq!(w.load(Ordering::SeqCst) & 0x3fff_ffff, gettid());
        c.unlock_pi(&w);
        assert_eq!(w.load(Ordering::SeqCst), 0);
        assert_eq!((c.lock_pi_calls, c.unlock_pi_calls, c.errors), (1, 1, 0));
    }
}
