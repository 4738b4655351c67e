//! The privileged edge of `cargo xtask bench`: starting tracers and workloads, waiting
//! for them with their resource usage, reading /proc, scraping `lockscope serve`.

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::parse;

/// CPU time and peak RSS of a finished child (from `wait4`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub cpu_s: f64,
    pub maxrss_kib: u64,
}

/// A started child whose stdout and stderr go to files.
pub struct Proc {
    pub what: String,
    pub pid: i32,
    child: Child,
    pub stdin: Option<ChildStdin>,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    reaped: bool,
}

impl Proc {
    /// Start `cmd` with stdout/stderr in `<dir>/<name>.out|.err`; stdin piped if asked.
    pub fn spawn(mut cmd: Command, dir: &Path, name: &str, stdin: bool) -> Result<Proc> {
        let what = crate::util::display_cmd(&cmd);
        let stdout = dir.join(format!("{name}.out"));
        let stderr = dir.join(format!("{name}.err"));
        cmd.stdout(File::create(&stdout)?)
            .stderr(File::create(&stderr)?)
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() });
        let mut child = cmd
            .spawn()
            .with_context(|| format!("bench: could not start `{what}` (is it installed?)"))?;
        let pid = child.id() as i32;
        let stdin = child.stdin.take();
        Ok(Proc {
            what,
            pid,
            child,
            stdin,
            stdout,
            stderr,
            reaped: false,
        })
    }

    pub fn stdout_text(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    pub fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(8)..].join("\n")
    }

    pub fn alive(&self) -> bool {
        !self.reaped && Path::new(&format!("/proc/{}", self.pid)).exists() && !self.is_zombie()
    }

    fn is_zombie(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .ok()
            .and_then(|s| {
                let after = &s[s.rfind(')')? + 1..];
                after.split_whitespace().next().map(|st| st == "Z")
            })
            .unwrap_or(true)
    }

    pub fn signal(&self, sig: i32) {
        if !self.reaped {
            // SAFETY: kill(2) on our own unreaped child.
            unsafe { libc::kill(self.pid, sig) };
        }
    }

    /// Wait up to `timeout` for the child to exit; on timeout kill it (SIGKILL) and
    /// fail. A non-zero exit is an error carrying the tail of its stderr.
    pub fn wait(&mut self, timeout: Duration) -> Result<Usage> {
        let (usage, status) = self.wait_status(timeout)?;
        let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
        if !ok {
            let how = if libc::WIFEXITED(status) {
                format!("exit code {}", libc::WEXITSTATUS(status))
            } else {
                format!("signal {}", libc::WTERMSIG(status))
            };
            bail!(
                "bench: `{}` failed ({how}); its stderr ends with:\n{}",
                self.what,
                self.stderr_tail()
            );
        }
        Ok(usage)
    }

    /// [`Proc::wait`], but any exit is fine: its usage and raw wait status.
    pub fn wait_status(&mut self, timeout: Duration) -> Result<(Usage, i32)> {
        drop(self.stdin.take());
        let deadline = Instant::now() + timeout;
        loop {
            let mut status = 0;
            // SAFETY: rusage is plain data; zeroed is valid.
            let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: valid pointers; pid is our child, not yet reaped.
            let r = unsafe { libc::wait4(self.pid, &mut status, libc::WNOHANG, &mut ru) };
            if r == self.pid {
                self.reaped = true;
                let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
                let usage = Usage {
                    cpu_s: tv(ru.ru_utime) + tv(ru.ru_stime),
                    maxrss_kib: ru.ru_maxrss.max(0) as u64,
                };
                return Ok((usage, status));
            }
            if r < 0 {
                bail!(
                    "bench: waiting for `{}`: {}",
                    self.what,
                    std::io::Error::last_os_error()
                );
            }
            if Instant::now() >= deadline {
                self.signal(libc::SIGKILL);
                let _ = self.child.wait();
                self.reaped = true;
                bail!(
                    "bench: `{}` did not finish within {timeout:?} and was killed; its stderr \
                     ends with:\n{}",
                    self.what,
                    self.stderr_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.reaped {
            self.signal(libc::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

/// Whether a direct child of `pid` has exec'd `comm` (the tracer started its command,
/// which all of perf, bpftrace and `lockscope record` do only once they are tracing).
pub fn has_child_named(pid: i32, comm: &str) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|t| {
        std::fs::read_to_string(t.path().join("children"))
            .unwrap_or_default()
            .split_whitespace()
            .any(|c| {
                std::fs::read_to_string(format!("/proc/{c}/comm")).is_ok_and(|n| n.trim() == comm)
            })
    })
}

/// Pids of the processes whose `comm` is `comm`.
pub fn pids_named(comm: &str) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|n| n.trim() == comm)
        })
        .collect()
}

/// Is `pid` a zombie (exited, everything it held let go, not yet reaped)?
fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
        st.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            == Some("Z")
    })
}

/// Wait (polling every 20 ms, at most `timeout`) until every process named `comm` has
/// exited (a zombie has: it holds nothing, and this machine's init may reap it a second
/// later); how long that took, and whether some were still running at the timeout.
pub fn wait_gone(comm: &str, timeout: Duration) -> (Duration, bool) {
    let start = Instant::now();
    loop {
        if pids_named(comm).into_iter().all(is_zombie) {
            return (start.elapsed(), false);
        }
        if start.elapsed() >= timeout {
            return (start.elapsed(), true);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Poll `ready` every 20 ms until it holds; fail if `proc` dies or `timeout` passes.
pub fn wait_ready(
    proc: &mut Proc,
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if ready() {
            return Ok(());
        }
        if !proc.alive() {
            // Collect its exit status and stderr for the error.
            proc.wait(Duration::from_secs(5))?;
            bail!("bench: `{}` exited before it was ready", proc.what);
        }
        if Instant::now() >= deadline {
            bail!(
                "bench: `{}` was not ready within {timeout:?}; its stderr ends with:\n{}",
                proc.what,
                proc.stderr_tail()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// CPU time of a live process so far, in seconds: the sum of its threads' on-CPU
/// nanoseconds (`/proc/PID/task/*/schedstat`), else utime + stime in clock ticks.
pub fn cpu_seconds(pid: i32) -> Option<f64> {
    let from_schedstat = std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()
        .map(|tasks| {
            tasks
                .flatten()
                .filter_map(|t| {
                    let s = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
                    s.split_whitespace().next()?.parse::<u64>().ok()
                })
                .sum::<u64>()
        })
        .filter(|ns| *ns > 0);
    if let Some(ns) = from_schedstat {
        return Some(ns as f64 / 1e9);
    }
    cpu_seconds_ticks(pid)
}

fn cpu_seconds_ticks(pid: i32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = parse::stat_cpu_ticks(&stat)?;
    Some(ticks as f64 / clock_ticks_per_s())
}

/// The unit of /proc's tick counts (USER_HZ).
fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
}

/// CPU seconds the whole machine spent busy (user, nice, system, irq, softirq), from
/// /proc/stat.
pub fn busy_cpu_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse::busy_jiffies(&stat).map(|j| j as f64 / clock_ticks_per_s())
}

/// Steal (time the hypervisor took from this machine's ready virtual CPUs), read from
/// /proc/stat when started, every 20 ms on a thread of its own, and when finished: the
/// run's whole steal, and whether the host held one CPU long enough, at once, to make a
/// spike.
pub struct StealSampler {
    /// The whole machine's steal jiffies when started.
    start_total: Option<u64>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<(f64, Vec<u64>)>>,
}

/// What a [`StealSampler`] saw, in ms (`None`: /proc/stat did not say).
pub struct Steal {
    /// All CPUs' steal over the run.
    pub total_ms: Option<u64>,
    /// The most one CPU took within any window of the length `finish` was given.
    pub burst_ms: Option<u64>,
}

/// The whole machine's steal jiffies (the `cpu` line of /proc/stat).
fn total_steal_jiffies() -> Option<u64> {
    parse::steal_jiffies(&std::fs::read_to_string("/proc/stat").ok()?)
}

impl StealSampler {
    pub fn start() -> Self {
        let start_total = total_steal_jiffies();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut samples = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                if let Ok(stat) = std::fs::read_to_string("/proc/stat") {
                    let v = parse::steal_jiffies_per_cpu(&stat);
                    if !v.is_empty() {
                        samples.push((t0.elapsed().as_secs_f64(), v));
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            samples
        });
        StealSampler {
            start_total,
            stop,
            thread,
        }
    }

    /// Stop sampling and sum up: the whole steal since `start`, and the most on one CPU
    /// within any `window_s`.
    pub fn finish(self, window_s: f64) -> Steal {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self.thread.join().unwrap_or_default();
        let ms = |j: u64| (j as f64 / clock_ticks_per_s() * 1000.0).round() as u64;
        Steal {
            total_ms: total_steal_jiffies()
                .zip(self.start_total)
                .map(|(end, start)| ms(end.saturating_sub(start))),
            burst_ms: parse::max_steal_in_window(&samples, window_s).map(ms),
        }
    }
}

/// CPU seconds of this process and of its children that have been waited for.
pub fn own_cpu_s() -> f64 {
    let secs = |who| {
        // SAFETY: getrusage fills the struct it is given.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid out pointer.
        unsafe { libc::getrusage(who, &mut ru) };
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(ru.ru_utime) + tv(ru.ru_stime)
    };
    secs(libc::RUSAGE_SELF) + secs(libc::RUSAGE_CHILDREN)
}

/// (VmRSS, VmHWM) of a live process, in KiB.
pub fn rss_kib(pid: i32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some((
        parse::status_kib(&status, "VmRSS")?,
        parse::status_kib(&status, "VmHWM")?,
    ))
}

/// Run statistics of every BPF program `pid` holds open (`/proc/PID/fdinfo`).
pub fn prog_fdinfos(pid: i32) -> Vec<parse::ProgFdInfo> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let mut out: Vec<parse::ProgFdInfo> = fds
        .flatten()
        .filter(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|l| l.to_string_lossy() == "anon_inode:bpf-prog")
        })
        .filter_map(|fd| {
            let info = std::fs::read_to_string(format!(
                "/proc/{pid}/fdinfo/{}",
                fd.file_name().to_string_lossy()
            ))
            .ok()?;
            parse::parse_prog_fdinfo(&info)
        })
        .collect();
    // One program can be open through several fds.
    out.sort_by_key(|p| p.prog_id);
    out.dedup_by_key(|p| p.prog_id);
    out
}

/// `GET path` on 127.0.0.1:port: (status code, body).
pub fn http_get(port: u16, path: &str) -> Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("bench: malformed HTTP response")?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((code, body))
}

/// Decode an HTTP/1.1 chunked body.
pub fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
    }
    out
}

/// A free TCP port on 127.0.0.1 (bound and released: good enough for one serve).
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Scrapes `/metrics` once per second in a thread, keeping the last body.
pub struct Scraper {
    stop: Arc<AtomicBool>,
    state: Arc<Mutex<ScrapeState>>,
    handle: Option<JoinHandle<()>>,
}

#[derive(Default, Clone)]
pub struct ScrapeState {
    pub ok: u64,
    pub failed: u64,
    pub last: String,
}

impl Scraper {
    pub fn start(port: u16) -> Scraper {
        let stop = Arc::new(AtomicBool::new(false));
        let state = Arc::new(Mutex::new(ScrapeState::default()));
        let (s, st) = (stop.clone(), state.clone());
        let handle = std::thread::spawn(move || {
            let mut next = Instant::now();
            while !s.load(Ordering::Relaxed) {
                if Instant::now() >= next {
                    next += Duration::from_secs(1);
                    let r = http_get(port, "/metrics");
                    let mut g = st.lock().unwrap_or_else(|e| e.into_inner());
                    match r {
                        Ok((200, body)) => {
                            g.ok += 1;
                            g.last = body;
                        }
                        _ => g.failed += 1,
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Scraper {
            stop,
            state,
            handle: Some(handle),
        }
    }

    /// Scrape once more now, stop the thread, return the state.
    pub fn finish(mut self, port: u16) -> ScrapeState {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match http_get(port, "/metrics") {
            Ok((200, body)) => {
                g.ok += 1;
                g.last = body;
            }
            _ => g.failed += 1,
        }
        g
    }
}

impl Drop for Scraper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Sets `kernel.bpf_stats_enabled` and restores the previous value when dropped.
pub struct BpfStats {
    previous: String,
}

const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStats {
    pub fn enable() -> Result<BpfStats> {
        let previous = std::fs::read_to_string(BPF_STATS)
            .with_context(|| format!("bench: reading {BPF_STATS}"))?;
        std::fs::write(BPF_STATS, "1").with_context(|| format!("bench: writing {BPF_STATS}"))?;
        Ok(BpfStats {
            previous: previous.trim().to_string(),
        })
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = std::fs::write(BPF_STATS, &self.previous);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exited_child_not_yet_reaped_counts_as_gone() {
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        let zombie = (0..500).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            is_zombie(pid)
        });
        child.wait().unwrap();
        assert!(zombie, "pid {pid} never showed as a zombie");
        assert!(!is_zombie(std::process::id() as i32));
    }

    #[test]
    fn chunked_bodies() {
        assert_eq!(
            dechunk("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
            "hello world"
        );
        assert_eq!(dechunk("0\r\n\r\n"), "");
    }

    #[test]
    fn usage_and_failure_of_children() {
        let dir = std::env::temp_dir().join(format!("xtask-bench-proc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut ok = Proc::spawn(Command::new("true"), &dir, "ok", false).unwrap();
        ok.wait(Duration::from_secs(10)).unwrap();
        let mut sh = Command::new("sh");
        sh.args(["-c", "echo boom >&2; exit 3"]);
        let mut bad = Proc::spawn(sh, &dir, "bad", false).unwrap();
        let err = format!("{:#}", bad.wait(Duration::from_secs(10)).unwrap_err());
        assert!(err.contains("exit code 3") && err.contains("boom"), "{err}");
        // A child waiting on its stdin ends when the pipe closes.
        let mut cat = Proc::spawn(Command::new("cat"), &dir, "cat", true).unwrap();
        assert!(cat.alive());
        cat.wait(Duration::from_secs(10)).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
