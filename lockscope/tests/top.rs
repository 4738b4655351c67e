//! `lockscope top` in a real terminal: tmux runs it, `send-keys` types, `capture-pane`
//! reads the screen. Standalone against the real kernel while mmap-churn runs, and as a
//! client of a (fake) `lockscope serve`.

mod common;

use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::TcpListener,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use common::*;

/// A tmux server of our own (own socket), with one session; killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(name: &str, shell_cmd: &str) -> Self {
        let t = Tmux {
            socket: format!("lockscope-test-{name}-{}", std::process::id()),
        };
        let _ = t.cmd(&["kill-server"]).output();
        let out = t
            .cmd(&[
                "new-session",
                "-d",
                "-x",
                "160",
                "-y",
                "45",
                "-s",
                "top",
                shell_cmd,
            ])
            .output()
            .expect("tmux (installed by cargo xtask setup)");
        assert!(out.status.success(), "tmux: {out:?}");
        // Keep the pane after the command ends, to read what it left.
        t.cmd(&["set-option", "-t", "top", "remain-on-exit", "on"])
            .output()
            .unwrap();
        t
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket, "-f", "/dev/null"]).args(args);
        c
    }

    /// The screen, preceded by the pane's scrollback: when the pane dies, tmux's "Pane is
    /// dead" line may scroll the first line of output off the screen.
    fn screen(&self) -> String {
        let out = self
            .cmd(&["capture-pane", "-p", "-S", "-", "-t", "top"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn display(&self, format: &str) -> String {
        let out = self
            .cmd(&["display-message", "-p", "-t", "top", format])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn send(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "top"];
        args.extend_from_slice(keys);
        assert!(self.cmd(&args).status().unwrap().success());
    }

    /// Poll the screen until `ok` holds on a settled screen; fail with the last screen
    /// after `secs`.
    ///
    /// A capture can fall in the middle of a redraw (tmux processes the program's output
    /// in pieces), showing part of the new frame over the old one: the table half
    /// re-sorted, or a view's title without its contents. So a screen counts only when
    /// two captures in a row are identical and `ok` holds on it: lockscope top redraws
    /// once per interval (1 s, 500 ms here), and is idle in between.
    fn wait_for(&self, what: &str, secs: u64, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut last = String::new();
        loop {
            let s = self.screen();
            if s == last && ok(&s) {
                return s;
            }
            if Instant::now() > deadline {
                panic!("timed out waiting for {what}; screen:\n{s}");
            }
            last = s;
            thread::sleep(Duration::from_millis(60));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]).output();
    }
}

/// A child process killed (by its pid) when the test ends, even on failure.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// After the command: its exit code, and whether the tty is back in cooked mode; then
/// the pane stays alive (a dead pane reports no cursor) until the tmux server is killed.
fn shell_cmd(top_args: &str) -> String {
    format!(
        "'{}' top {top_args}; echo \"top exited: $?\"; \
         case \"$(stty -a)\" in *-icanon*) echo 'tty: raw';; *) echo 'tty: cooked';; esac; sleep 60",
        bin()
    )
}

/// Table rows: lines after the column titles, whitespace-split.
fn rows(screen: &str) -> Vec<Vec<String>> {
    screen
        .lines()
        .skip_while(|l| !l.contains("cont/s"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

/// `812`, `1.2k`, `4.56M` -> number.
fn rate(cell: &str) -> f64 {
    let (num, mult) = match cell.chars().last() {
        Some('k') => (&cell[..cell.len() - 1], 1e3),
        Some('M') => (&cell[..cell.len() - 1], 1e6),
        _ => (cell, 1.0),
    };
    num.parse::<f64>()
        .unwrap_or_else(|_| panic!("not a rate: {cell}"))
        * mult
}

/// `850ns`, `12.3us`, `4.56ms`, `1.20s` -> nanoseconds.
fn dur(cell: &str) -> f64 {
    let (num, mult) = [("ns", 1.0), ("us", 1e3), ("ms", 1e6), ("s", 1e9)]
        .iter()
        .find_map(|(suffix, m)| cell.strip_suffix(suffix).map(|n| (n, *m)))
        .unwrap_or((cell, 1.0));
    num.parse::<f64>()
        .unwrap_or_else(|_| panic!("not a duration: {cell}"))
        * mult
}

/// The cells after the lock name `mmap_lock of lockscope[pid]` (4 words).
fn mmap_row<'a>(screen: &'a str, pid: u32, ty: &str) -> Option<Vec<&'a str>> {
    let name_end = format!("lockscope[{pid}]");
    screen.lines().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        (w.len() > 6 && w[0] == ty && w[1] == "mmap_lock" && w[3] == name_end)
            .then(|| w[4..].to_vec())
    })
}

#[test]
fn top_shows_mmap_churn_live_and_restores_the_terminal() {
    let _serial = serial();
    require_root();
    let workload = Killed(
        Command::new(bin())
            .args(["workload", "mmap-churn", "--seconds", "60"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = workload.0.id();
    let tmux = Tmux::start("live", &shell_cmd(&format!("--interval 1s --pid {pid}")));

    // The mmap_lock rows appear with non-zero rates once a full interval has passed.
    let s = tmux.wait_for("mmap_lock rows with non-zero rates", 30, |s| {
        ["rwsem:R", "rwsem:W"].iter().all(|ty| {
            mmap_row(s, pid, ty).is_some_and(|c| !s.contains("since start") && c[0] != "0")
        })
    });
    assert!(s.contains("tier tracepoint"), "{s}");
    assert!(s.contains(&format!("target pid {pid}")), "{s}");
    assert!(s.contains("interval 1s"), "{s}");
    for ty in ["rwsem:R", "rwsem:W"] {
        let c = mmap_row(&s, pid, ty).unwrap();
        // cont/s, wait/s, avg, p99~, max. The rates swing with the machine's load (from
        // thousands per second down to a few when other builds and workloads compete for
        // the 2 CPUs), so no threshold: they are non-zero (waited for above) and agree
        // with each other. avg = wait/s / cont/s, within the 3-digit rounding shown.
        let (cont, wait_s, avg, max) = (rate(c[0]), dur(c[1]), dur(c[2]), dur(c[4]));
        assert!(cont > 0.0 && wait_s > 0.0, "{ty}: {c:?}\n{s}");
        let want = wait_s / cont;
        assert!(
            (avg - want).abs() <= 0.1 * want,
            "{ty}: avg {avg} ns, wait/s over cont/s {want} ns: {c:?}\n{s}"
        );
        assert!(
            max >= avg * 0.95,
            "{ty}: max since start below the average: {c:?}\n{s}"
        );
    }

    // Sort by cont/s (column 3): the header marks it, rows are in descending order.
    tmux.send(&["3"]);
    let s = tmux.wait_for("sort marker", 10, |s| s.contains("cont/s▼"));
    let r = rows(&s);
    assert!(r.len() >= 2, "{s}");
    // Cells: type, name (several words), cont/s, wait/s, avg,
    // p99~, max, waiters, modes (n/a) -> cont/s is the 7th cell from the end.
    let conts: Vec<f64> = r.iter().map(|w| rate(&w[w.len() - 7])).collect();
    assert!(
        conts.windows(2).all(|p| p[0] >= p[1]),
        "not sorted by cont/s: {conts:?}\n{s}"
    );
    // Acquisition modes (steal/spin/handoff/sleep): on the tracepoint tier steals, spins
    // and sleeps are n/a, handoffs an estimate (~); "-" where a side or type has no such
    // mode.
    for w in &r {
        let modes = w.last().unwrap();
        match w[0].as_str() {
            "rwsem:R" | "rwsem:W" => {
                let parts: Vec<&str> = modes.split('/').collect();
                // "n/a" itself holds a slash: rejoin it.
                let cells = modes.replace("n/a", "NA");
                let cells: Vec<&str> = cells.split('/').collect();
                assert_eq!(cells.len(), 4, "{modes}: {parts:?}\n{s}");
                let (steal, spin, handoff, sleep) = (cells[0], cells[1], cells[2], cells[3]);
                let is_r = w[0] == "rwsem:R";
                assert_eq!(steal, if is_r { "NA" } else { "-" }, "{modes}\n{s}");
                assert_eq!(spin, if is_r { "-" } else { "NA" }, "{modes}\n{s}");
                assert!(
                    handoff
                        .strip_suffix('~')
                        .is_some_and(|n| n.parse::<u64>().is_ok()),
                    "handoffs are an estimate: {modes}\n{s}"
                );
                assert_eq!(sleep, "NA", "{modes}\n{s}");
            }
            _ => assert_eq!(modes, "-", "{s}"),
        }
    }

    // Filter: rwsem rows only.
    tmux.send(&["/", "rwsem", "Enter"]);
    let s = tmux.wait_for("filter applied", 10, |s| s.contains("filter: rwsem"));
    let r = rows(&s);
    assert!(!r.is_empty(), "{s}");
    assert!(r.iter().all(|w| w[0].starts_with("rwsem:")), "{s}");
    assert!(!s.contains("spinlock"), "{s}");

    // Enter: the detail view of the selected (first) row, a mmap_lock, with its histogram.
    tmux.send(&["g", "Enter"]);
    // Wait for the whole view (bars and callers), not just the first frame title: the
    // screen may be captured mid-draw.
    let s = tmux.wait_for("detail view", 10, |s| {
        s.contains("wait histogram") && s.contains('█') && s.contains("top callers")
    });
    assert!(s.contains(&format!("mmap_lock of lockscope[{pid}]")), "{s}");
    let bars: Vec<&str> = s
        .lines()
        .filter(|l| l.contains(" │█") || l.contains("us │") || l.contains("ms │"))
        .collect();
    assert!(
        bars.iter().any(|l| l.contains('█')),
        "no histogram bars:\n{s}"
    );
    assert!(s.contains("top callers"), "{s}");
    assert!(s.contains("acquire modes (last interval): steals "), "{s}");
    assert!(s.contains("sleeps n/a"), "{s}");
    assert!(s.contains("wait/s, last"), "{s}");

    // q: top exits 0, the alternate screen is left and the tty is cooked again.
    tmux.send(&["q"]);
    let s = tmux.wait_for("top to exit", 15, |s| s.contains("tty: "));
    assert!(s.contains("top exited: 0"), "{s}");
    assert!(s.contains("tty: cooked"), "{s}");
    assert!(
        !s.contains("wait histogram"),
        "still on the alternate screen:\n{s}"
    );
    assert_eq!(tmux.display("#{alternate_on}"), "0");
    assert_eq!(tmux.display("#{cursor_flag}"), "1", "cursor left hidden");
    drop(workload);
}

/// The cells of the user-lock view's row for a futex word of `lockscope[pid]`:
/// type, process, address, cont/s, wait/s, avg, p99~, max, wake/s, blocked, PI owner.
fn futex_rows(screen: &str, pid: u32) -> Vec<Vec<&str>> {
    let process = format!("lockscope[{pid}]");
    screen
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() == 11 && w[0] == "futex" && w[1] == process)
        .collect()
}

#[test]
fn top_shows_futex_words_in_the_user_lock_view() {
    let _serial = serial();
    require_root();
    let workload = Killed(
        Command::new(bin())
            .args([
                "workload",
                "futex-mutex",
                "--threads",
                "4",
                "--seconds",
                "60",
            ])
            .args(["--load", "300"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let pid = workload.0.id();
    let tmux = Tmux::start("futex", &shell_cmd(&format!("--interval 1s --pid {pid}")));

    // The kernel-lock view (the default) holds no futex words.
    let s = tmux.wait_for("rates of an interval", 30, |s| {
        s.contains("[u] user locks") && !s.contains("since start") && s.contains("cont/s")
    });
    assert!(
        rows(&s).iter().all(|w| w[0] != "futex"),
        "futex rows in the kernel view:\n{s}"
    );

    // u: the user-space lock view; the mutex's futex word blocks thousands of times a
    // second on these machines (>= 10/s is generous) and is woken as often.
    tmux.send(&["u"]);
    // The rates are judged on a screen where they reached 10/s, not the first non-zero
    // one: an interval of a loaded machine may see only a few.
    let s = tmux.wait_for("the futex word with rates of 10/s", 30, |s| {
        !s.contains("since start")
            && futex_rows(s, pid)
                .first()
                .is_some_and(|c| rate(c[3]) >= 10.0 && rate(c[8]) >= 10.0)
    });
    assert!(s.contains("wake/s"), "{s}");
    let busiest = futex_rows(&s, pid)[0].clone();
    assert!(rate(busiest[3]) >= 10.0, "cont/s: {busiest:?}\n{s}");
    assert_ne!(busiest[4], "0", "wait/s: {busiest:?}\n{s}");
    assert!(rate(busiest[8]) >= 10.0, "wake/s: {busiest:?}\n{s}");
    assert_eq!(busiest[10], "-", "not a PI futex: {busiest:?}");
    let addr = busiest[2].to_owned();

    // Enter: its detail view, with the futex calls instead of kernel callers.
    tmux.send(&["g", "Enter"]);
    let s = tmux.wait_for("futex detail view", 10, |s| {
        s.contains("wait histogram") && s.contains('█') && s.contains("futex calls")
    });
    assert!(
        s.contains(&format!("futex at {addr} in lockscope[{pid}]")),
        "{s}"
    );
    assert!(s.contains("FUTEX_WAIT"), "{s}");
    assert!(s.contains("FUTEX_WAKE"), "{s}");
    assert!(s.contains("futex: wait calls"), "{s}");

    tmux.send(&["q"]);
    let s = tmux.wait_for("top to exit", 15, |s| s.contains("tty: "));
    assert!(s.contains("top exited: 0"), "{s}");
    assert!(s.contains("tty: cooked"), "{s}");

    // The row was the workload's own mutex: it prints the address when stopped.
    let mut workload = workload;
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let mut out = String::new();
    std::io::Read::read_to_string(workload.0.stdout.as_mut().unwrap(), &mut out).unwrap();
    let lock = out
        .lines()
        .find_map(|l| l.strip_prefix("lock: "))
        .unwrap_or_else(|| panic!("no lock address in the workload's output:\n{out}"));
    assert_eq!(lock, addr, "{out}");
}

/// Recording JSON as `lockscope serve` returns it: `n` seconds after its start, one lock
/// that got 100 waits of 10 us every second; no starvation episodes, and from the second
/// snapshot on one latency spike (every later snapshot repeats it).
fn served_recording(n: u64) -> String {
    let mut hist = vec![0u64; 14];
    hist[13] = 100 * n; // 10 us lies in [8192, 16384) ns
    let spikes: Vec<serde_json::Value> = (n >= 2)
        .then(|| {
            serde_json::json!({
                "cpu": 1, "ts_ns": 5_000_123_000u64, "latency_ns": 150_000,
                "source": "lockscope", "task": {"pid": 77, "comm": "cyclictest"},
                "overlaps": [{"lock": "pi_lock of stress-ng[9]", "kind": "wait",
                              "overlap_ns": 120_000}],
                "explained": true
            })
        })
        .into_iter()
        .collect();
    serde_json::json!({
        "starvation_episodes": [],
        "latency_spikes": spikes,
        "schema": "lockscope.report/1",
        "lockscope_version": "0.1.0",
        "kernel": "6.18.0-served",
        "tier": "tracepoint",
        "target": "system",
        "duration_s": n as f64,
        "started_at_unix_s": 1000.0,
        "events": {"begin": 100 * n, "end": 100 * n, "in_progress_at_end": 0,
                   "unpaired_end": 0, "unpaired_begin": 0, "type_filtered": 0},
        "lost": {"stats_map_full": 0},
        "locks": [{
            "addr": "0xffff888000001000", "type": "rwsem:W", "name": "mmap_lock of fake[1]",
            "owner": {"field": "mmap_lock", "pid": 1, "comm": "fake"},
            "contended": 100 * n, "failed": 0, "wait_total_ns": 1_000_000 * n,
            "wait_min_ns": 10_000, "wait_max_ns": 10_000, "histogram": hist,
            "callers": [{"caller": "vm_mmap_pgoff+0x30", "stack": ["vm_mmap_pgoff+0x30"],
                         "contended": 100 * n, "failed": 0, "wait_total_ns": 1_000_000 * n,
                         "wait_min_ns": 10_000, "wait_max_ns": 10_000, "histogram": hist}],
            "tasks": [{"pid": 1, "comm": "fake",
                       "contended": 100 * n, "failed": 0, "wait_total_ns": 1_000_000 * n,
                       "wait_min_ns": 10_000, "wait_max_ns": 10_000, "histogram": hist}]
        }]
    })
    .to_string()
}

/// A stand-in for `lockscope serve`'s `/api/snapshot`: the k-th request gets the
/// recording of k seconds. Serves until dropped (at most 60 s).
struct FakeServe {
    addr: String,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<Vec<String>>>,
}

impl FakeServe {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = thread::spawn(move || {
            let mut paths = Vec::new();
            let end = Instant::now() + Duration::from_secs(60);
            while !flag.load(Ordering::Relaxed) && Instant::now() < end {
                let Ok((stream, _)) = listener.accept() else {
                    thread::sleep(Duration::from_millis(20));
                    continue;
                };
                stream.set_nonblocking(false).unwrap();
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                paths.push(line.split_whitespace().nth(1).unwrap_or("").to_owned());
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap() == 0 || h == "\r\n" {
                        break;
                    }
                }
                let body = served_recording(paths.len() as u64);
                let mut s = reader.into_inner();
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
            paths
        });
        FakeServe {
            addr,
            stop,
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

#[test]
fn top_as_a_client_of_serve() {
    let serve = FakeServe::start();
    let tmux = Tmux::start(
        "connect",
        &shell_cmd(&format!("--interval 500ms --connect {}", serve.addr)),
    );
    // 100 waits of 10 us per served second: 100 cont/s, 1 ms of waiting per second.
    // Rates of an interval (not since start): a second snapshot has arrived.
    let s = tmux.wait_for("served rates", 20, |s| {
        !s.contains("since start")
            && s.lines()
                .any(|l| l.contains("mmap_lock of fake[1]") && l.contains(" 100 "))
    });
    assert!(s.contains(&format!("connected to {}", serve.addr)), "{s}");
    assert!(s.contains("kernel 6.18.0-served"), "{s}");
    let row: Vec<&str> = s
        .lines()
        .find(|l| l.contains("mmap_lock of fake[1]"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        row,
        [
            "rwsem:W",
            "mmap_lock",
            "of",
            "fake[1]",
            "100",
            "1.00ms",
            "10.0us",
            "10.0us",
            "10.0us",
            "1",
            "n/a"
        ],
        "{s}"
    );
    tmux.send(&["Enter"]);
    // Wait for the drawn bars, not just the frame title: the screen may be captured
    // between the two.
    let s = tmux.wait_for("detail view", 10, |s| {
        s.contains("wait histogram") && s.contains("8.19us │█")
    });
    assert!(s.contains("vm_mmap_pgoff+0x30"), "{s}");
    tmux.send(&["Escape"]);
    // e: the RT view; the spike is listed once although every snapshot repeats it.
    tmux.send(&["e"]);
    let s = tmux.wait_for("the latency spike", 10, |s| {
        s.contains("latency spikes: 1") && s.contains("cyclictest[77]")
    });
    assert_eq!(s.matches("cyclictest[77]").count(), 1, "{s}");
    let spike = s.lines().find(|l| l.contains("cyclictest[77]")).unwrap();
    for cell in [
        "5.000123",
        "150us",
        "lockscope",
        "yes",
        "pi_lock of stress-ng[9] wait 120us",
    ] {
        assert!(spike.contains(cell), "{cell}: {spike}\n{s}");
    }
    assert!(s.contains("starvation episodes: 0"), "{s}");
    assert!(s.contains("none yet"), "{s}");
    tmux.send(&["q"]);
    let s = tmux.wait_for("top to exit", 10, |s| s.contains("tty: "));
    assert!(s.contains("top exited: 0"), "{s}");
    assert!(s.contains("tty: cooked"), "{s}");
    assert_eq!(tmux.display("#{alternate_on}"), "0");
    assert_eq!(tmux.display("#{cursor_flag}"), "1", "cursor left hidden");
    let paths = serve.stop();
    assert!(paths.len() >= 2, "{paths:?}");
    assert!(paths.iter().all(|p| p == "/api/snapshot"), "{paths:?}");
}

#[test]
fn top_errors_are_one_line_and_leave_the_terminal_alone() {
    // Nobody listening: a plain error before the screen is taken over.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let tmux = Tmux::start("errors", &shell_cmd(&format!("--connect 127.0.0.1:{port}")));
    let s = tmux.wait_for("top to exit", 15, |s| s.contains("tty: "));
    assert!(
        s.contains(&format!(
            "lockscope: cannot reach lockscope serve at 127.0.0.1:{port}"
        )),
        "{s}"
    );
    assert!(s.contains("top exited: 1"), "{s}");
    assert!(s.contains("tty: cooked"), "{s}");
    assert_eq!(tmux.display("#{alternate_on}"), "0");

    // Not on a terminal.
    let out = Command::new(bin())
        .args(["top", "--connect", "127.0.0.1:9"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("lockscope: top needs a terminal"), "{err}");
    // Bad input.
    for (args, msg) in [
        (&["top", "--interval", "5ms"][..], "out of range"),
        (&["top", "--connect", "nohost"][..], "expected HOST:PORT"),
        (
            &["top", "--connect", "127.0.0.1:1", "--pid", "1"][..],
            "cannot be used with",
        ),
    ] {
        let out = Command::new(bin()).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(msg),
            "{args:?}: {err}"
        );
    }
}

/// SIGTERM and SIGHUP quit the live view like `q`: the terminal comes back cooked, off the
/// alternate screen, with one line saying why.
#[test]
fn sigterm_and_sighup_restore_the_terminal() {
    let _serial = serial();
    require_root();
    for (sig, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGHUP, "SIGHUP")] {
        let tmux = Tmux::start(&format!("sig{sig}"), &shell_cmd("--interval 500ms"));
        tmux.wait_for("the live view", 60, |s| s.contains("tier tracepoint"));
        let shell: u32 = tmux.display("#{pane_pid}").parse().unwrap();
        let top = *children_of(shell)
            .first()
            .unwrap_or_else(|| panic!("no top under the pane's shell {shell}"));
        // SAFETY: kill(2) on a process this test started (through tmux).
        unsafe { libc::kill(top as i32, sig) };
        let s = tmux.wait_for("top to exit", 15, |s| s.contains("tty: "));
        assert!(
            s.contains(&format!("lockscope: {name}: live view stopped")),
            "{name}: {s}"
        );
        assert!(s.contains("top exited: 0"), "{name}: {s}");
        assert!(s.contains("tty: cooked"), "{name}: {s}");
        assert_eq!(tmux.display("#{alternate_on}"), "0", "{name}");
    }
}

#[test]
fn top_cgroups_view_shows_the_workloads_cgroup() {
    let _serial = serial();
    require_root();
    let cg = TestCgroup::create("top");
    let workload = Killed(
        Command::new("sh")
            .arg("-c")
            .arg(cg.enter_then(&format!("'{}' workload mmap-churn --seconds 60", bin())))
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = workload.0.id();
    let tmux = Tmux::start("cgroups", &shell_cmd(&format!("--interval 1s --pid {pid}")));
    tmux.wait_for("the first refresh", 30, |s| s.contains("[c] cgroups"));
    tmux.send(&["c"]);
    // WAIT/s, CONT/s, AVG, TOTAL, TYPES, CGROUP: the workload's cgroup, waiting.
    let row = |s: &str| -> Option<Vec<String>> {
        s.lines()
            .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .find(|w| w.len() == 6 && w[5] == cg.name && w[1] != "0")
    };
    let s = tmux.wait_for("the cgroup's row with a non-zero rate", 30, |s| {
        !s.contains("since start") && row(s).is_some()
    });
    assert!(s.contains("WAIT/s"), "{s}");
    let w = row(&s).unwrap();
    let (wait_s, cont, avg) = (dur(&w[0]), rate(&w[1]), dur(&w[2]));
    assert!(cont > 0.0 && wait_s > 0.0, "{w:?}\n{s}");
    let want = wait_s / cont;
    assert!(
        (avg - want).abs() <= 0.1 * want,
        "avg {avg} ns, wait/s over cont/s {want} ns: {w:?}\n{s}"
    );
    assert!(
        w[4].contains("rwsem"),
        "mmap-churn waits on its mmap_lock: {w:?}\n{s}"
    );
    tmux.send(&["q"]);
    tmux.wait_for("top to exit", 15, |s| s.contains("top exited: 0"));
}

/// What the terminal's master side has to read within `ms`: `None` if nothing, else the
/// read (an error once top has closed the terminal).
fn read_ready(m: &mut std::fs::File, ms: i32) -> Option<std::io::Result<Vec<u8>>> {
    let mut p = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(m),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    if unsafe { libc::poll(&mut p, 1, ms) } <= 0 {
        return None;
    }
    let mut buf = [0u8; 65536];
    Some(std::io::Read::read(m, &mut buf).map(|n| buf[..n].to_vec()))
}

/// The terminal goes away under a running live view (its window closed, its tmux server
/// or ssh connection killed): top ends at once and leaves nothing loaded, whether it
/// leads the terminal's session (the kernel sends SIGHUP) or not (the terminal only
/// hangs up). Crossterm's reader spins forever on a hung-up terminal, which once left a
/// top behind using a whole CPU and deaf to SIGTERM.
#[test]
fn top_ends_when_its_terminal_hangs_up() {
    let _serial = serial();
    require_root();
    let watch = ProgramWatch::start();
    for leader in [true, false] {
        let err = scratch("top-hangup").join(format!("leader-{leader}.err"));
        let mut c = Command::new(bin());
        c.args(["top", "--interval", "500ms"])
            .stderr(std::fs::File::create(&err).unwrap());
        let master = on_pty(&mut c, leader);
        let child = Killed(c.spawn().unwrap());
        drop(c);
        // Read the screen until the first frame.
        let mut screen = Vec::new();
        let mut m = std::fs::File::from(master.try_clone().unwrap());
        let deadline = Instant::now() + Duration::from_secs(60);
        while !String::from_utf8_lossy(&screen).contains("tier") {
            assert!(Instant::now() < deadline, "leader {leader}: no screen");
            if let Some(read) = read_ready(&mut m, 100) {
                screen.extend_from_slice(&read.unwrap());
            }
        }
        drop(m);
        drop(master);
        let hung_up = Instant::now();
        let mut child = child;
        let status = loop {
            if let Some(s) = child.0.try_wait().unwrap() {
                break s;
            }
            assert!(
                hung_up.elapsed() < Duration::from_secs(10),
                "leader {leader}: top still running 10 s after its terminal hung up"
            );
            thread::sleep(Duration::from_millis(10));
        };
        let text = std::fs::read_to_string(&err).unwrap();
        assert!(
            status.success(),
            "leader {leader}: {status}; stderr: {text}"
        );
        assert!(!text.contains("panicked"), "leader {leader}: {text}");
        println!(
            "leader {leader}: exited {:.2} s after the hang-up",
            hung_up.elapsed().as_secs_f64()
        );
    }
    watch.assert_none_left();
}

/// A terminal that never answers a cursor position query (as one whose input the kernel
/// holds back for seconds, beside a ptrace storm): ratatui asks for the cursor to clear
/// the screen, and crossterm failed after 2 s without an answer ("cannot use this
/// terminal"). top asks nothing of the terminal now: the first screen comes, `q` ends it.
#[test]
fn top_starts_on_a_terminal_that_never_answers() {
    let _serial = serial();
    require_root();
    let err = scratch("top-no-answer").join("top.err");
    let mut c = Command::new(bin());
    c.args(["top", "--interval", "500ms"])
        .stderr(std::fs::File::create(&err).unwrap());
    let master = on_pty(&mut c, false);
    let mut child = Killed(c.spawn().unwrap());
    drop(c);
    let mut screen = Vec::new();
    let mut m = std::fs::File::from(master.try_clone().unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    while !String::from_utf8_lossy(&screen).contains("tier") {
        if let Some(s) = child.0.try_wait().unwrap() {
            panic!(
                "top exited ({s}) before its first screen: {}",
                std::fs::read_to_string(&err).unwrap()
            );
        }
        assert!(Instant::now() < deadline, "no screen within 60 s");
        match read_ready(&mut m, 100) {
            Some(Ok(bytes)) => screen.extend_from_slice(&bytes),
            // EIO: top has closed the terminal, so it is exiting.
            Some(Err(e)) => panic!(
                "top left the terminal ({e}) before its first screen: {}",
                std::fs::read_to_string(&err).unwrap()
            ),
            None => {}
        }
    }
    assert!(
        !screen.windows(4).any(|w| w == b"\x1b[6n"),
        "top asked the terminal for the cursor position"
    );
    m.write_all(b"q").unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "q did not end top");
        // Keep the terminal drained so the last frames and the restore can be written.
        let _ = read_ready(&mut m, 10);
    };
    let text = std::fs::read_to_string(&err).unwrap();
    assert!(status.success(), "{status}; stderr: {text}");
}
