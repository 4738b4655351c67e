//! `lockscope serve` on the real kernel, scraped by a real Prometheus server (Debian's
//! `prometheus`, installed by `cargo xtask setup`) while `mmap-churn` and `futex-mutex`
//! over 10,000 distinct futex words run.

mod common;

use std::{
    collections::{BTreeMap, BTreeSet},
    io::{Read as _, Write as _},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use common::*;
use serde_json::Value;

/// A child process killed (SIGKILL) if the test ends before it does.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A minimal HTTP/1.1 GET: (status, body).
fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    Ok((
        status,
        if chunked {
            dechunk(body)
        } else {
            body.to_owned()
        },
    ))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn wait_until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(250));
    }
}

/// `f`'s first `Some` within `timeout`, polled every 50 ms; `None` if it never came.
fn wait_until_or_none<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// BPF program and link ids held open by a process (from its fdinfo).
fn bpf_ids_of(pid: u32) -> BTreeSet<(String, u64)> {
    let mut ids = BTreeSet::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return ids;
    };
    for entry in dir.flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines() {
            for kind in ["prog_id", "link_id"] {
                if let Some(v) = line.strip_prefix(kind).and_then(|v| v.strip_prefix(':'))
                    && let Ok(id) = v.trim().parse()
                {
                    ids.insert((kind.to_owned(), id));
                }
            }
        }
    }
    ids
}

/// None of `ours` (program and link ids) is loaded any more, within a minute: the kernel
/// frees a closed link's program after an RCU grace period, which a loaded machine can
/// stretch.
fn assert_all_released(ours: &BTreeSet<(String, u64)>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let left = loop {
        let still = loaded_bpf_ids();
        let left: Vec<_> = ours.intersection(&still).cloned().collect();
        if left.is_empty() || Instant::now() > deadline {
            break left;
        }
        thread::sleep(Duration::from_millis(100));
    };
    assert!(left.is_empty(), "left attached after exit: {left:?}");
}

/// Ids of every BPF program and link loaded in the kernel right now (bpftool).
fn loaded_bpf_ids() -> BTreeSet<(String, u64)> {
    let mut ids = BTreeSet::new();
    for (obj, kind) in [("prog", "prog_id"), ("link", "link_id")] {
        let out = Command::new("bpftool")
            .args([obj, "show", "--json"])
            .output()
            .expect("bpftool (installed by cargo xtask setup)");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        for p in v.as_array().into_iter().flatten() {
            if let Some(id) = p["id"].as_u64() {
                ids.insert((kind.to_owned(), id));
            }
        }
    }
    ids
}

/// Samples of one metric from a scrape: (labels, value).
fn samples(text: &str, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            if n != name {
                return None;
            }
            let mut map = BTreeMap::new();
            // Label values here contain no `",` sequences; split on them.
            for pair in labels.split("\",").filter(|p| !p.is_empty()) {
                let (k, v) = pair.split_once("=\"").unwrap();
                map.insert(k.to_owned(), v.trim_end_matches('"').to_owned());
            }
            Some((map, value.parse().unwrap()))
        })
        .collect()
}

/// `lockscope serve` with `args`. Its reads are not paced (`--max-cpu-percent 100`)
/// unless `args` sets a budget: these tests wait for refreshes at their interval.
fn start_serve(args: &[&str], stderr: &Path) -> Guard {
    let log = std::fs::File::create(stderr).unwrap();
    let unpaced: &[&str] = if args.contains(&"--max-cpu-percent") {
        &[]
    } else {
        &["--max-cpu-percent", "100"]
    };
    Guard(
        lockscope()
            .arg("serve")
            .args(args)
            .args(unpaced)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    )
}

fn wait_healthy(port: u16, serve: &mut Guard, stderr: &Path) {
    wait_until("lockscope serve /healthz", Duration::from_secs(60), || {
        if let Ok(Some(status)) = serve.0.try_wait() {
            panic!(
                "serve exited early ({status}): {}",
                std::fs::read_to_string(stderr).unwrap_or_default()
            );
        }
        match http_get(port, "/healthz") {
            Ok((200, body)) if body == "ok\n" => Some(()),
            _ => None,
        }
    });
}

/// Start serve on a free port with `config` (TOML) and wait until it is healthy;
/// returns (serve, port, its stderr log).
fn serve_with_config(dir: &Path, config: &str) -> (Guard, u16, PathBuf) {
    let file = dir.join("lockscope.toml");
    std::fs::write(&file, config).unwrap();
    let port = free_port();
    let log = dir.join("serve.stderr");
    let mut serve = start_serve(
        &[
            "--config",
            file.to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{port}"),
        ],
        &log,
    );
    wait_healthy(port, &mut serve, &log);
    (serve, port, log)
}

/// `GET /api/snapshot`, parsed.
fn api_snapshot(port: u16) -> Value {
    let (status, body) = http_get(port, "/api/snapshot").unwrap();
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// This test binary's lockscope under another name (`dir/name`): a workload run through
/// it has that process name, to find it in the `comm` label.
fn renamed_bin(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    std::os::unix::fs::symlink(bin(), &path).unwrap();
    path
}

/// Send `signal` to serve and wait for it to exit 0; returns its stderr log.
fn stop_serve(serve: &mut Guard, signal: i32, log: &Path) -> String {
    // SAFETY: kill has no memory preconditions.
    assert_eq!(unsafe { libc::kill(serve.0.id() as i32, signal) }, 0);
    let status = wait_until("serve to exit", Duration::from_secs(15), || {
        serve.0.try_wait().unwrap()
    });
    let text = std::fs::read_to_string(log).unwrap();
    assert!(status.success(), "{status}: {text}");
    text
}

/// A Prometheus server of the test's own on `port` with `config` (its YAML), its data
/// in `dir`; ready when this returns, killed on drop.
fn start_prometheus(dir: &Path, port: u16, config: &str) -> Guard {
    let prom_dir = dir.join("prometheus");
    std::fs::create_dir_all(&prom_dir).unwrap();
    let prom_config = dir.join("prometheus.yml");
    std::fs::write(&prom_config, config).unwrap();
    let prometheus = Guard(
        Command::new("prometheus")
            .arg(format!("--config.file={}", prom_config.display()))
            .arg(format!("--storage.tsdb.path={}", prom_dir.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.stderr")).unwrap())
            .spawn()
            .expect("prometheus (installed by cargo xtask setup)"),
    );
    wait_until("prometheus ready", Duration::from_secs(60), || {
        matches!(http_get(port, "/-/ready"), Ok((200, _))).then_some(())
    });
    prometheus
}

/// Query Prometheus's HTTP API: the first result's value, if any.
fn prom_query(port: u16, query: &str) -> Option<f64> {
    let (status, body) =
        http_get(port, &format!("/api/v1/query?query={}", url_encode(query))).ok()?;
    assert_eq!(status, 200, "query {query}: {body}");
    let v: Value = serde_json::from_str(&body).ok()?;
    assert_eq!(v["status"], "success", "{body}");
    v["data"]["result"][0]["value"][1]
        .as_str()
        .and_then(|s| s.parse().ok())
}

#[test]
fn prometheus_scrapes_serve_while_mmap_churn_runs() {
    let _serial = serial();
    let dir = scratch("serve-prom");
    let top = 20;
    let serve_port = free_port();
    let prom_port = free_port();
    let config = dir.join("lockscope.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{serve_port}\"\ninterval = \"500ms\"\n\
             [probes]\nfutex = true\n[metrics]\ntop_locks = {top}\nbpf_run_stats = true\n"
        ),
    )
    .unwrap();
    let futexload = renamed_bin(&dir, "futexload");
    let stats_sysctl = || std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").unwrap();
    let sysctl_before = stats_sysctl();

    let serve_log = dir.join("serve.stderr");
    let mut serve = start_serve(&["--config", config.to_str().unwrap()], &serve_log);
    wait_healthy(serve_port, &mut serve, &serve_log);
    let ours = bpf_ids_of(serve.0.id());
    assert!(
        ours.iter().filter(|(k, _)| k == "prog_id").count() >= 2
            && ours.iter().any(|(k, _)| k == "link_id"),
        "serve holds its programs and links: {ours:?}"
    );

    let _prometheus = start_prometheus(
        &dir,
        prom_port,
        &format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: lockscope\n    static_configs:\n\
             \x20     - targets: ['127.0.0.1:{serve_port}']\n"
        ),
    );

    // The churn runs in a cgroup of its own (exec keeps the pid, and the name).
    let cg = TestCgroup::create("serve");
    let mut churn = Guard(
        Command::new("sh")
            .arg("-c")
            .arg(cg.enter_then(&format!("'{}' workload mmap-churn --seconds 15", bin())))
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let lock = format!("mmap_lock of lockscope[{}]", churn.0.id());
    let selector = format!("lockscope_lock_contentions_total{{lock=\"{lock}\"}}");
    // 10,000 distinct futex mutexes, every one taken by all threads in turn.
    let futex_out = dir.join("futexload.out");
    let mut futex_mutex = Guard(
        Command::new(&futexload)
            .args([
                "workload",
                "futex-mutex",
                "--threads",
                "4",
                "--locks",
                "10000",
            ])
            .args(["--seconds", "15", "--load", "300"])
            .stdout(std::fs::File::create(&futex_out).unwrap())
            .spawn()
            .unwrap(),
    );

    // Prometheus sees the workload's mmap_lock contended, at a positive rate.
    let rate = wait_until(
        "a positive rate in Prometheus",
        Duration::from_secs(60),
        // Thousands per second on the test machines. The first rate Prometheus computes
        // spans two scrapes of a 10 s window (a fraction of the true rate): wait for one
        // over 10/s rather than judging the first.
        || prom_query(prom_port, &format!("sum(rate({selector}[10s]))")).filter(|&r| r > 10.0),
    );
    println!("first rate over 10/s of contention on {lock}: {rate:.0}/s");
    let up = prom_query(prom_port, "up{job=\"lockscope\"}").unwrap();
    assert_eq!(up, 1.0);
    // Label cardinality as Prometheus stores it: at most top-N locks + other.
    let locks = prom_query(
        prom_port,
        "count(count by (lock) (lockscope_lock_contentions_total))",
    )
    .unwrap();
    assert!(locks <= (top + 1) as f64, "{locks} lock label values");
    // The churn's cgroup, in Prometheus, at a positive rate; cgroups bounded like locks.
    let cg_rate = wait_until(
        "a positive per-cgroup rate in Prometheus",
        Duration::from_secs(60),
        || {
            prom_query(
                prom_port,
                &format!(
                    "sum(rate(lockscope_cgroup_lock_contentions_total{{cgroup=\"{}\"}}[10s]))",
                    cg.name
                ),
            )
            .filter(|&r| r > 0.0)
        },
    );
    println!("contentions of the churn's cgroup: {cg_rate:.0}/s");
    let cgroups = prom_query(
        prom_port,
        "count(count by (cgroup) (lockscope_cgroup_lock_contentions_total))",
    )
    .unwrap();
    assert!(cgroups <= (top + 1) as f64, "{cgroups} cgroup label values");
    // The futex workload's waits, in Prometheus, at a positive rate.
    let futex_rate = wait_until(
        "a positive futex wait rate in Prometheus",
        Duration::from_secs(60),
        || {
            prom_query(
                prom_port,
                "sum(rate(lockscope_futex_waits_total{comm=\"futexload\"}[10s]))",
            )
            .filter(|&r| r > 0.0)
        },
    );
    println!("futex waits of the 10,000-lock workload: {futex_rate:.0}/s");
    let futex_locks = prom_query(
        prom_port,
        "count(count by (lock) (lockscope_futex_waits_total))",
    )
    .unwrap();
    assert!(
        futex_locks <= (top + 1) as f64,
        "{futex_locks} futex lock labels"
    );
    // The histogram agrees with the counter.
    let hist_count = prom_query(
        prom_port,
        &format!("sum(lockscope_lock_wait_seconds_count{{lock=\"{lock}\"}})"),
    )
    .unwrap();
    assert!(hist_count > 0.0);

    // A live scrape: lints clean, buckets cumulative, +Inf = _count, bounded labels.
    let (status, text) = http_get(serve_port, "/metrics").unwrap();
    assert_eq!(status, 200);
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (installed by cargo xtask setup)");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let lint = promtool.wait_with_output().unwrap();
    assert!(
        lint.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr)
    );

    // Within one scrape every wait is under exactly one cgroup: the cgroup series add up
    // to the kernel lock series plus the futex words' blocking waits.
    let total = |name: &str| -> f64 { samples(&text, name).iter().map(|(_, v)| v).sum() };
    let by_cgroup = total("lockscope_cgroup_lock_contentions_total");
    let by_lock = total("lockscope_lock_contentions_total") + total("lockscope_futex_waits_total");
    assert_eq!(
        by_cgroup, by_lock,
        "per-cgroup and per-lock totals of one scrape"
    );
    let cg_series = samples(&text, "lockscope_cgroup_lock_contentions_total");
    assert!(
        cg_series.iter().any(|(l, _)| l["cgroup"] == cg.name),
        "{cg_series:?}"
    );

    let counts = samples(&text, "lockscope_lock_wait_seconds_count");
    let buckets = samples(&text, "lockscope_lock_wait_seconds_bucket");
    let contentions = samples(&text, "lockscope_lock_contentions_total");
    let names: BTreeSet<&str> = contentions
        .iter()
        .map(|(l, _)| l["lock"].as_str())
        .collect();
    assert!(names.len() <= top + 1, "{names:?}");
    assert!(
        names.contains("other"),
        "system-wide there are more than {top} locks"
    );
    assert!(names.contains(lock.as_str()), "{names:?}");
    // Every family with a `lock` label: at most top-N + 1 values, though the futex
    // workload alone has 10,000 futex words in the maps.
    let snap = api_snapshot(serve_port);
    let futex_words: Vec<&Value> = snap["locks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l.get("futex").is_some())
        .collect();
    let of_futexload = futex_words
        .iter()
        .filter(|l| l["comm"] == "futexload")
        .count();
    println!(
        "futex words in the recording: {} ({of_futexload} of the workload); \
         futex_stats_evicted: {}",
        futex_words.len(),
        snap["lost"]["futex_stats_evicted"]
    );
    // The workload alone has 10,000; on a busy machine other processes' words fill the
    // map first (the loss is counted): thousands of words either way.
    assert!(
        futex_words.len() > 1000,
        "{} futex words",
        futex_words.len()
    );
    let mut families: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        if let (Some(name), Some(v)) = (
            line.split(['{', ' ']).next(),
            line.split("lock=\"")
                .nth(1)
                .and_then(|r| r.split('"').next()),
        ) {
            families.entry(name).or_default().insert(v.to_owned());
        }
    }
    for family in [
        "lockscope_lock_contentions_total",
        "lockscope_lock_wait_seconds_bucket",
        "lockscope_futex_waits_total",
        "lockscope_futex_wakes_total",
        "lockscope_futex_wait_seconds_bucket",
    ] {
        assert!(families.contains_key(family), "{family} in the scrape");
    }
    for (family, values) in &families {
        assert!(
            values.len() <= top + 1,
            "{family}: {} lock label values",
            values.len()
        );
    }
    assert!(families["lockscope_futex_waits_total"].contains("other"));
    assert_eq!(counts.len(), contentions.len());
    for (labels, count) in &counts {
        let mut series: Vec<(f64, f64)> = buckets
            .iter()
            .filter(|(l, _)| l["type"] == labels["type"] && l["lock"] == labels["lock"])
            .map(|(l, v)| {
                let le = if l["le"] == "+Inf" {
                    f64::INFINITY
                } else {
                    l["le"].parse().unwrap()
                };
                (le, *v)
            })
            .collect();
        series.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert!(series.len() >= 2, "{labels:?}");
        assert!(
            series.windows(2).all(|w| w[0].1 <= w[1].1),
            "cumulative: {series:?}"
        );
        assert_eq!(
            series.last().unwrap(),
            &(f64::INFINITY, *count),
            "{labels:?}"
        );
        let contended = contentions
            .iter()
            .find(|(l, _)| l["type"] == labels["type"] && l["lock"] == labels["lock"])
            .unwrap()
            .1;
        assert_eq!(
            contended, *count,
            "counter and histogram count agree: {labels:?}"
        );
    }
    // Self-metrics: probes attached, BPF run statistics on and counting.
    let attached = samples(&text, "lockscope_probe_attached");
    assert!(
        attached
            .iter()
            .any(|(l, v)| l["probe"] == "contention_begin"
                && l["tier"] == "tracepoint"
                && *v == 1.0),
        "{attached:?}"
    );
    assert_eq!(samples(&text, "lockscope_bpf_stats_enabled")[0].1, 1.0);
    let runs = samples(&text, "lockscope_bpf_program_runs_total");
    let begin_runs = runs
        .iter()
        .find(|(l, _)| l["program"] == "contention_begin")
        .unwrap()
        .1;
    assert!(begin_runs > 0.0, "{runs:?}");
    let run_s = samples(&text, "lockscope_bpf_program_run_seconds_total");
    // Every program that ran took time (the futex2 syscall probes may never run).
    for (labels, n) in &runs {
        let s = run_s.iter().find(|(l, _)| l == labels).unwrap().1;
        assert!(*n == 0.0 || s > 0.0, "{labels:?}: {n} runs, {s} s");
    }
    for (reason, _) in samples(&text, "lockscope_events_lost_total") {
        assert!(reason.contains_key("reason"));
    }

    // /api/snapshot: the recording so far, in the schema `record -o` writes.
    let (status, body) = http_get(serve_port, "/api/snapshot").unwrap();
    assert_eq!(status, 200);
    let rec: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(rec["schema"], "lockscope.report/2");
    assert_eq!(rec["target"], "system");
    let entries = mmap_lock_entries(&rec, Some(churn.0.id() as u64));
    let waits: u64 = entries
        .iter()
        .map(|l| l["contended"].as_u64().unwrap())
        .sum();
    assert!(waits > 0, "snapshot has the workload's mmap_lock");
    // `lockscope report` reads it like a `record -o` file.
    let snap = dir.join("snapshot.json");
    std::fs::write(&snap, &body).unwrap();
    let report = run_ok(lockscope().arg("report").arg(&snap));
    assert!(String::from_utf8_lossy(&report.stdout).contains(&lock));
    // The metrics are cumulative too: the snapshot (read later) has at least as many.
    let metric_waits: f64 = contentions
        .iter()
        .filter(|(l, _)| l["lock"] == lock)
        .map(|(_, v)| v)
        .sum();
    assert!(waits as f64 >= metric_waits, "{waits} >= {metric_waits}");
    // Every metric the Grafana dashboard queries is in this live scrape.
    let dash = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/grafana/lockscope.json"
    ))
    .unwrap();
    let mut used = BTreeSet::new();
    for piece in dash.split("lockscope_").skip(1) {
        let end = piece
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(piece.len());
        used.insert(format!("lockscope_{}", &piece[..end]));
    }
    used.remove("lockscope_"); // the dashboard's title and uid
    for name in &used {
        assert!(
            !samples(&text, name).is_empty(),
            "dashboard queries {name}, not in the scrape"
        );
    }
    let (status, _) = http_get(serve_port, "/nope").unwrap();
    assert_eq!(status, 404);

    // Once the 10 s window is full of the workload: the steady rate, for the record.
    thread::sleep(Duration::from_secs(8));
    let steady = prom_query(prom_port, &format!("sum(rate({selector}[10s]))")).unwrap_or(0.0);
    println!("steady rate of contention on {lock}: {steady:.0}/s");
    assert!(churn.0.wait().unwrap().success());

    // Folding loses nothing: the metrics summed over the workload's process equal the
    // recording's entries of that process. And the workload's own mutexes (10,000 words,
    // 64 bytes apart) have exactly its own counts, unless the futex map filled up
    // system-wide on a busy machine (then the loss is counted, and nothing is more).
    let futex_pid = futex_mutex.0.id() as u64;
    assert!(futex_mutex.0.wait().unwrap().success());
    thread::sleep(Duration::from_millis(1500));
    let summary = std::fs::read_to_string(&futex_out).unwrap();
    let own = |key: &str| -> u64 {
        summary
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}: ")))
            .unwrap_or_else(|| panic!("{key} in {summary}"))
            .trim()
            .parse()
            .unwrap()
    };
    let first = summary
        .lines()
        .find_map(|l| l.strip_prefix("lock: 0x"))
        .map(|a| u64::from_str_radix(a.trim(), 16).unwrap())
        .unwrap();
    let (_, text) = http_get(serve_port, "/metrics").unwrap();
    let rec = api_snapshot(serve_port);
    let of_workload = |name: &str| -> u64 {
        samples(&text, name)
            .iter()
            .filter(|(l, _)| l["comm"] == "futexload")
            .map(|(_, v)| *v as u64)
            .sum()
    };
    let entries: Vec<&Value> = rec["locks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["comm"] == "futexload")
        .collect();
    let sum = |ls: &[&Value], f: &dyn Fn(&Value) -> u64| ls.iter().map(|l| f(l)).sum::<u64>();
    let contended = |l: &Value| l["contended"].as_u64().unwrap();
    let wake_calls = |l: &Value| l["futex"]["wake_calls"].as_u64().unwrap();
    // The futex map is LRU: system-wide, other processes' words may evict the workload's
    // (the exited workload's words are the coldest). An evicted word leaves the snapshot,
    // while its metrics stay (counters never go down), so then only `>=` holds.
    let futex_lost = rec["lost"]["futex_stats_map_full"].as_u64().unwrap()
        + rec["lost"]["futex_stats_evicted"].as_u64().unwrap();
    for (family, per_entry) in [
        (
            "lockscope_futex_waits_total",
            &contended as &dyn Fn(&Value) -> u64,
        ),
        ("lockscope_futex_wakes_total", &wake_calls),
    ] {
        let (metric, snapshot) = (of_workload(family), sum(&entries, per_entry));
        if futex_lost == 0 {
            assert_eq!(metric, snapshot, "{family}");
        } else {
            assert!(metric >= snapshot, "{family}: {metric} < {snapshot}");
        }
    }
    let mutexes: Vec<&Value> = entries
        .iter()
        .copied()
        .filter(|l| {
            let addr = lock_address(l);
            l["pid"].as_u64() == Some(futex_pid) && (first..first + 64 * 10_000).contains(&addr)
        })
        .collect();
    let slept = own("futex_wait") - own("eagain") - own("interrupted");
    let (waits, wakes) = (sum(&mutexes, &contended), sum(&mutexes, &wake_calls));
    println!(
        "futexload: {slept} waits slept, {} wake calls on {} of its mutexes; recorded: {waits} \
         waits, {wakes} wake calls",
        own("futex_wake"),
        mutexes.len()
    );
    assert!(waits > 0 && wakes > 0);
    if futex_lost == 0 {
        assert_eq!((waits, wakes), (slept, own("futex_wake")));
    } else {
        println!("futex map entries lost system-wide: {futex_lost}; exact check skipped");
        assert!(waits <= slept && wakes <= own("futex_wake"));
    }
    // promtool still passes with every family present.
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let lint = promtool.wait_with_output().unwrap();
    assert!(
        lint.status.success(),
        "{}",
        String::from_utf8_lossy(&lint.stdout)
    );
    for family in [
        "lockscope_rwsem_events_total",
        "lockscope_starvation_episodes_total",
        "lockscope_map_read_seconds_total",
    ] {
        assert!(!samples(&text, family).is_empty(), "{family} in the scrape");
    }

    // SIGTERM: exit 0, every program and link gone, BPF stats state restored.
    let log = stop_serve(&mut serve, libc::SIGTERM, &serve_log);
    assert!(
        log.contains("SIGTERM: stopped serving, probes detached"),
        "{log}"
    );
    // The futex tracepoints' perf events are let go by the `lockscope-bg` keeper once
    // serve has exited (one RCU grace period each): everything is gone soon after.
    assert_all_released(&ours);
    assert_eq!(stats_sysctl(), sysctl_before);
}

#[test]
fn sigint_detaches_and_exits_zero() {
    let _serial = serial();
    let dir = scratch("serve-int");
    let port = free_port();
    let log = dir.join("serve.stderr");
    let mut serve = start_serve(
        &["--listen", &format!("127.0.0.1:{port}"), "--pid", "1"],
        &log,
    );
    wait_healthy(port, &mut serve, &log);
    let ours = bpf_ids_of(serve.0.id());
    // Contention begin/end, the fork follower for a pid target, the name refresh at exec,
    // the cgroup refresh at a move, the tracepoint-tier mmap_lock estimate probe where
    // that tracepoint exists, and the pi_lock proxy with its task set (sched_wait_task,
    // sched_process_fork, sched_process_free); and the futex probes, on by default, with
    // their task iterator: on x86_64 one program on the raw sys_enter and one on
    // sys_exit, elsewhere futex(2) entry and exit, restart_syscall, and each futex2 call
    // the kernel has.
    let futex2 = ["waitv", "wait", "wake", "requeue"]
        .iter()
        .filter(|c| {
            ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
                .iter()
                .any(|t| Path::new(&format!("{t}/events/syscalls/sys_enter_futex_{c}")).exists())
        })
        .count();
    let futex_progs = if cfg!(target_arch = "x86_64") {
        3
    } else {
        3 + futex2
    };
    let progs = ours.iter().filter(|(k, _)| k == "prog_id").count();
    assert!(
        (8 + futex_progs..=9 + futex_progs).contains(&progs),
        "{progs} programs: {ours:?}"
    );
    let (_, text) = http_get(port, "/metrics").unwrap();
    assert!(
        text.contains("lockscope_probe_attached{probe=\"sched_process_fork\""),
        "{text}"
    );
    // The kernel's BPF run statistics (a clock read before and after every BPF program
    // of the machine) stay off unless asked for (`--bpf-run-stats`).
    assert!(text.contains("lockscope_bpf_stats_enabled 0"), "{text}");
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").unwrap(),
        "0\n"
    );
    let rec = api_snapshot(port);
    assert_eq!(rec["target"], "pid 1");
    // The pull endpoint of continuous profilers: a gzipped pprof profile go can read.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET /debug/pprof/lockscope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let at = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(
        raw.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    let prof = dir.join("serve.pb.gz");
    std::fs::write(&prof, &raw[at..]).unwrap();
    let out = Command::new("go")
        .args(["tool", "pprof", "-raw"])
        .arg(&prof)
        .env("HOME", &dir)
        .output()
        .expect("go (golang-go, installed by cargo xtask setup)");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("contentions/count delay/nanoseconds"),
        "{out:?}"
    );

    stop_serve(&mut serve, libc::SIGINT, &log);
    assert_all_released(&ours);
}

#[test]
fn bad_config_fails_before_attaching() {
    let _serial = serial();
    let dir = scratch("serve-config");
    let bad = dir.join("bad.toml");
    for (text, key) in [
        (
            "[metrics]\ntop_lock = 5\n",
            "line 2: unknown field `top_lock`",
        ),
        ("[metrics]\ntop_locks = 0\n", "metrics.top_locks"),
        ("listen = \"nowhere\"\n", "listen:"),
        (
            "[probes]\nkernel_locks = false\nfutex = false\n",
            "probes.kernel_locks",
        ),
        ("max_cpu_percent = 0\n", "max_cpu_percent"),
        ("[probes]\nfutx = true\n", "unknown field `futx`"),
        ("[target]\npids = [4000000000]\n", "target.pids"),
        (
            "[metrics.histogram]\nfactor = 3\n",
            "metrics.histogram.factor",
        ),
    ] {
        std::fs::write(&bad, text).unwrap();
        for extra in [&[][..], &["--check-config"][..]] {
            // A config that is not refused would serve until killed: bounded.
            let mut child = lockscope()
                .args(["serve", "--config"])
                .arg(&bad)
                .args(extra)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let ended = wait_until_or_none(Duration::from_secs(30), || child.try_wait().unwrap());
            if ended.is_none() {
                let _ = child.kill();
            }
            let out = child.wait_with_output().unwrap();
            assert!(ended.is_some(), "{text}: accepted, serve kept running");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{text}: should fail");
            let lines: Vec<&str> = stderr.lines().collect();
            assert_eq!(lines.len(), 1, "one line: {stderr}");
            assert!(lines[0].starts_with("lockscope: config "), "{stderr}");
            assert!(lines[0].contains(key), "{key} in {stderr}");
            assert!(!stderr.contains("serving"), "{stderr}");
        }
    }
    let good = dir.join("good.toml");
    std::fs::write(
        &good,
        "listen = \"0.0.0.0:9999\"\n[metrics]\ntop_locks = 7\n",
    )
    .unwrap();
    let out = run_ok(
        lockscope()
            .args(["serve", "--check-config", "--config"])
            .arg(&good),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("config OK: listen 0.0.0.0:9999"),
        "{stdout}"
    );
    assert!(stdout.contains("top 7 locks"), "{stdout}");

    // A busy port: refused before any probe is loaded.
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let out = lockscope()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.starts_with("lockscope: cannot listen on 127.0.0.1:"),
        "{stderr}"
    );
    assert!(!stderr.contains("serving"), "{stderr}");
}

/// The systemd unit's capability bounding set (deploy/lockscope.service) is enough:
/// serve runs with only those capabilities, traces, and names callers.
#[test]
fn serve_runs_with_only_the_systemd_units_capabilities() {
    let _serial = serial();
    require_root();
    let dir = scratch("serve-caps");
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/lockscope.service"
    ))
    .unwrap();
    let caps: Vec<String> = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .unwrap()
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    let port = free_port();
    let log = dir.join("serve.stderr");
    let mut serve = Guard(
        Command::new("setpriv")
            .arg(format!("--bounding-set=-all,{}", caps.join(",")))
            .arg("--inh-caps=-all")
            // NoNewPrivileges=yes in the unit.
            .arg("--no-new-privs")
            .arg(bin())
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--interval",
                "250ms",
                "--max-cpu-percent",
                "100",
                "--bpf-run-stats",
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("setpriv (util-linux)"),
    );
    wait_healthy(port, &mut serve, &log);
    let status = std::fs::read_to_string(format!("/proc/{}/status", serve.0.id())).unwrap();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .unwrap()
        .trim();
    // CAP_PERFMON (38), CAP_BPF (39), CAP_SYSLOG (34): nothing else.
    assert_eq!(
        u64::from_str_radix(eff, 16).unwrap(),
        (1 << 34) | (1 << 38) | (1 << 39)
    );

    let churn = run_ok(lockscope().args(["workload", "mmap-churn", "--seconds", "2"]));
    assert!(churn.status.success());
    thread::sleep(Duration::from_millis(1000));
    let rec = api_snapshot(port);
    let entries = mmap_lock_entries(&rec, None);
    let waits: u64 = entries
        .iter()
        .map(|l| l["contended"].as_u64().unwrap())
        .sum();
    assert!(waits > 100, "traced with reduced capabilities: {waits}");
    // CAP_SYSLOG: kallsyms addresses are real, so callers have names.
    let caller = entries[0]["callers"][0]["caller"].as_str().unwrap();
    assert!(
        caller.contains('+') && !caller.starts_with("0x"),
        "{caller}"
    );
    let (_, text) = http_get(port, "/metrics").unwrap();
    // No CAP_SYS_ADMIN: BPF run statistics are off, and said so.
    assert!(text.contains("lockscope_bpf_stats_enabled 0"), "{text}");
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("needs CAP_SYS_ADMIN")
    );

    stop_serve(&mut serve, libc::SIGTERM, &log);
}

/// serve forgets a process `snapshot.forget_exited_after` after it exited: its waits,
/// and the names of the locks it owned (a later process reusing the memory of its
/// `mm_struct` must not inherit `mmap_lock of lockscope[<its pid>]`). Until then the run
/// that just ended stays visible.
#[test]
fn an_exited_process_is_forgotten_with_the_names_of_its_locks() {
    let _serial = serial();
    require_root();
    let dir = scratch("serve-forget");
    let (mut serve, port, log) = serve_with_config(
        &dir,
        "interval = \"250ms\"\n[snapshot]\nforget_exited_after = \"2s\"\n",
    );
    let snapshot = || api_snapshot(port);
    let mentions = |rec: &Value, pid: u64| -> Vec<String> {
        rec["locks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| {
                l["owner"]["pid"].as_u64() == Some(pid)
                    || l["tasks"]
                        .as_array()
                        .is_some_and(|t| t.iter().any(|t| t["pid"].as_u64() == Some(pid)))
            })
            .map(|l| l["name"].as_str().unwrap_or("?").to_owned())
            .collect()
    };

    let mut live = Guard(
        lockscope()
            .args(["workload", "mmap-churn", "--seconds", "30"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut gone = lockscope()
        .args(["workload", "mmap-churn", "--seconds", "1.5"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let gone_pid = gone.id() as u64;
    // This (live) process reads the other one's maps while it churns: waits on the
    // exited process's mmap_lock by a process that stays.
    let reader = thread::spawn(move || {
        let path = format!("/proc/{gone_pid}/maps");
        while std::fs::read(&path).is_ok() {}
    });
    assert!(gone.wait().unwrap().success());
    let exited = Instant::now();
    reader.join().unwrap();
    let rec = snapshot();
    let entries = mmap_lock_entries(&rec, Some(gone_pid));
    assert!(
        !entries.is_empty(),
        "the process that just exited still shows its mmap_lock: {:?}",
        mentions(&rec, gone_pid)
    );
    let me = std::process::id() as u64;
    assert!(
        entries.iter().any(|l| l["tasks"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["pid"].as_u64() == Some(me)))),
        "this process waited on the exited one's mmap_lock: {entries:#?}"
    );
    let addrs: Vec<String> = entries
        .iter()
        .map(|l| l["addr"].as_str().unwrap().to_owned())
        .collect();
    let rec = wait_until(
        "serve to forget the exited process",
        Duration::from_secs(20),
        || {
            let rec = snapshot();
            mentions(&rec, gone_pid).is_empty().then_some(rec)
        },
    );
    // Nor is its lock left behind unnamed, with this process's waits.
    let left: Vec<&Value> = rec["locks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| addrs.iter().any(|a| l["addr"] == a.as_str()))
        .collect();
    assert!(left.is_empty(), "{left:#?}");
    let after = exited.elapsed();
    assert!(
        after >= Duration::from_secs(2),
        "forgotten {after:?} after its exit, before forget_exited_after (2s)"
    );
    // The live process keeps its entries and its lock's name.
    let live_pid = live.0.id() as u64;
    assert!(
        !mmap_lock_entries(&rec, Some(live_pid)).is_empty(),
        "{:?}",
        mentions(&rec, live_pid)
    );
    let _ = live.0.kill();
    stop_serve(&mut serve, libc::SIGTERM, &log);
}

/// serve also forgets an exited process's futex words and its `sched_wait_task` proxy
/// (a plain hash map: it would otherwise fill with every tracer since start), and no
/// metric goes down when it does.
#[test]
fn an_exited_process_leaves_no_futex_words_or_ptrace_waits_behind() {
    let _serial = serial();
    require_root();
    let dir = scratch("serve-forget-futex");
    let futexgone = renamed_bin(&dir, "futexgone");
    let (mut serve, port, log) = serve_with_config(
        &dir,
        "interval = \"250ms\"\n[probes]\nfutex = true\n\
         [snapshot]\nforget_exited_after = \"2s\"\n",
    );
    let snapshot = || api_snapshot(port);
    // (futex words of `futex_pid`, locks with `sched_wait_task` waits by `storm_pid`).
    let left = |rec: &Value, futex_pid: u64, storm_pid: u64| -> (usize, usize) {
        let locks = rec["locks"].as_array().unwrap();
        let words = locks
            .iter()
            .filter(|l| l.get("futex").is_some() && l["pid"].as_u64() == Some(futex_pid))
            .count();
        let proxied = locks
            .iter()
            .filter(|l| {
                l["wait_task"]["waiters"]
                    .as_array()
                    .is_some_and(|w| w.iter().any(|w| w["pid"].as_u64() == Some(storm_pid)))
            })
            .count();
        (words, proxied)
    };
    let futex_series = || -> BTreeMap<BTreeMap<String, String>, f64> {
        let (_, text) = http_get(port, "/metrics").unwrap();
        samples(&text, "lockscope_futex_waits_total")
            .into_iter()
            .collect()
    };

    let futex = Command::new(&futexgone)
        .args([
            "workload",
            "futex-mutex",
            "--threads",
            "2",
            "--seconds",
            "1",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let storm = lockscope()
        .args([
            "workload",
            "ptrace-storm",
            "--tracers",
            "1",
            "--seconds",
            "1",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let (futex_pid, storm_pid) = (futex.id() as u64, storm.id() as u64);
    for mut c in [futex, storm] {
        assert!(c.wait().unwrap().success());
    }
    let exited = Instant::now();
    // Within the window the latest read still shows both.
    let (words, proxied) = left(&snapshot(), futex_pid, storm_pid);
    assert!(words > 0, "futexgone's words right after its exit");
    assert!(
        proxied > 0,
        "the storm's tracee pi_lock right after its exit"
    );
    let before = futex_series();
    assert!(
        before.keys().any(|l| l["comm"] == "futexgone"),
        "futexgone in the metrics: {before:?}"
    );

    wait_until(
        "serve to forget the futex words and the proxy",
        Duration::from_secs(20),
        || (left(&snapshot(), futex_pid, storm_pid) == (0, 0)).then_some(()),
    );
    let after = exited.elapsed();
    assert!(
        after >= Duration::from_secs(2),
        "forgotten {after:?} after the exits, before forget_exited_after (2s)"
    );
    // Every futex series still there is where it was or higher; futexgone's figures
    // stay under its own name (a top word's own series may end).
    let now = futex_series();
    for (labels, v) in &now {
        if let Some(was) = before.get(labels) {
            assert!(v >= was, "{labels:?} went down: {was} -> {v}");
        }
    }
    for labels in before.keys() {
        if labels["comm"] == "futexgone" && labels["lock"] == "other" {
            assert!(
                now.contains_key(labels),
                "futexgone's folded words left their series: {now:?}"
            );
        }
    }
    stop_serve(&mut serve, libc::SIGTERM, &log);
}

/// Hostile clients: 400 connections that send half a request line and stall, and 32 that
/// ask for the snapshot and never read it. `/metrics` still answers at once, the stalled
/// connections are closed after the header timeout, serve's memory stays small, and a
/// connection past the cap is closed as soon as it is accepted.
#[test]
fn stalled_and_greedy_clients_do_not_take_serve_down() {
    let _serial = serial();
    let dir = scratch("serve-hostile");
    let port = free_port();
    let log = dir.join("serve.stderr");
    let mut serve = start_serve(&["--listen", &format!("127.0.0.1:{port}")], &log);
    wait_healthy(port, &mut serve, &log);
    let mut stalled = Vec::new();
    for _ in 0..400 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"GET /metr").unwrap();
        stalled.push(s);
    }
    let mut greedy = Vec::new();
    for _ in 0..32 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"GET /api/snapshot HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        greedy.push(s);
    }
    let t0 = Instant::now();
    let (status, body) = http_get(port, "/metrics").unwrap();
    let took = t0.elapsed();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("lockscope_"), "{body}");
    assert!(took < Duration::from_secs(2), "/metrics took {took:?}");
    // Past the cap (512): 432 held, fill up to it, then one more is closed at once.
    let mut filler = Vec::new();
    for _ in 0..(512 - 432) {
        filler.push(TcpStream::connect(("127.0.0.1", port)).unwrap());
    }
    thread::sleep(Duration::from_millis(300));
    let mut over = TcpStream::connect(("127.0.0.1", port)).unwrap();
    over.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 16];
    let t1 = Instant::now();
    let r = over.read(&mut buf);
    assert!(
        matches!(r, Ok(0) | Err(_)) && t1.elapsed() < Duration::from_secs(3),
        "a connection past the cap was kept: {r:?} after {:?}",
        t1.elapsed()
    );
    let rss_kib = std::fs::read_to_string(format!("/proc/{}/status", serve.0.id()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap();
    assert!(rss_kib < 256 * 1024, "serve RSS {rss_kib} KiB");
    // The stalled connections are closed by the header timeout (10 s), well within 40 s.
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut closed = 0;
    for s in &mut stalled {
        let left = deadline.saturating_duration_since(Instant::now());
        s.set_read_timeout(Some(left.max(Duration::from_millis(10))))
            .unwrap();
        // Whatever serve sends first (a 408 or nothing), the connection must end.
        let ended = loop {
            match s.read(&mut buf) {
                Ok(0) => break true,
                Ok(_) => continue,
                Err(e) => {
                    break !matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    );
                }
            }
        };
        if ended && Instant::now() < deadline {
            closed += 1;
        }
    }
    assert!(closed * 100 >= 95 * stalled.len(), "{closed} of 400 closed");
    // And serve still answers.
    assert_eq!(http_get(port, "/healthz").unwrap().0, 200);
    drop((greedy, filler));
    stop_serve(&mut serve, libc::SIGTERM, &log);
}

/// Serving off loopback is allowed, with a warning saying what it exposes.
#[test]
fn serving_off_loopback_warns() {
    let _serial = serial();
    let dir = scratch("serve-wide");
    let port = free_port();
    let log = dir.join("serve.stderr");
    let mut serve = start_serve(&["--listen", &format!("0.0.0.0:{port}")], &log);
    wait_healthy(port, &mut serve, &log);
    let text = stop_serve(&mut serve, libc::SIGTERM, &log);
    assert!(
        text.contains(&format!(
            "lockscope: warning: serving on 0.0.0.0:{port} over plain HTTP without authentication"
        )),
        "{text}"
    );
    // The default, loopback, says nothing of the kind.
    let port = free_port();
    let mut serve = start_serve(&["--listen", &format!("127.0.0.1:{port}")], &log);
    wait_healthy(port, &mut serve, &log);
    assert!(!stop_serve(&mut serve, libc::SIGTERM, &log).contains("warning: serving"));
}

/// `curl` against serve: (HTTP status, body); status 0 when no HTTP answer came.
fn curl(args: &[&str], url: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "10", "-w", "\n%{http_code}"])
        .args(args)
        .arg(url)
        .output()
        .expect("curl (installed by cargo xtask setup)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

#[test]
fn tls_basic_auth_and_redaction_from_a_web_config() {
    let _serial = serial();
    let dir = scratch("serve-tls");
    let (cert, key) = (dir.join("serve.crt"), dir.join("serve.key"));
    let openssl = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=lockscope-test"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl");
    assert!(openssl.status.success(), "{openssl:?}");
    let hash = bcrypt::hash("s3cret", 6).unwrap();
    let web = dir.join("web.yml");
    // Relative paths: to the file's directory, as the exporter toolkit has it.
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: serve.crt\n  key_file: serve.key\n\
             basic_auth_users:\n  prometheus: {hash}\n\
             http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"
        ),
    )
    .unwrap();
    let port = free_port();
    let log = dir.join("serve.stderr");
    let _serve = start_serve(
        &[
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--web-config",
            web.to_str().unwrap(),
            "--redact-addresses",
        ],
        &log,
    );
    let base = format!("https://127.0.0.1:{port}");
    let ca = cert.to_str().unwrap();
    let good = ["--cacert", ca, "-u", "prometheus:s3cret"];
    wait_until("serve over TLS", Duration::from_secs(60), || {
        (curl(&good, &format!("{base}/healthz")).0 == 200).then_some(())
    });
    // Without credentials, or with wrong ones: 401 and a Basic challenge.
    assert_eq!(curl(&["--cacert", ca], &format!("{base}/metrics")).0, 401);
    assert_eq!(
        curl(
            &["--cacert", ca, "-u", "prometheus:guess"],
            &format!("{base}/metrics")
        )
        .0,
        401
    );
    assert_eq!(
        curl(
            &["--cacert", ca, "-u", "root:s3cret"],
            &format!("{base}/api/snapshot")
        )
        .0,
        401
    );
    // Plain HTTP gets no answer.
    assert_eq!(curl(&[], &format!("http://127.0.0.1:{port}/metrics")).0, 0);
    let (status, text) = curl(&good, &format!("{base}/metrics"));
    assert_eq!(status, 200);
    assert!(text.contains("lockscope_build_info"), "{text}");
    let (_, headers) = curl(&[&good[..], &["-I"]].concat(), &format!("{base}/metrics"));
    assert!(
        headers
            .to_lowercase()
            .contains("x-content-type-options: nosniff"),
        "{headers}"
    );
    // Redacted: unnamed kernel locks (the churn's spinlocks) carry opaque names, and no
    // kernel address is anywhere.
    let _churn = Guard(
        lockscope()
            .args(["workload", "mmap-churn", "--seconds", "20"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let (text, snap) = wait_until("redacted lock names", Duration::from_secs(30), || {
        let text = curl(&good, &format!("{base}/metrics")).1;
        let snap = curl(&good, &format!("{base}/api/snapshot")).1;
        (text.contains("lock=\"kaddr-") && snap.contains("kaddr-")).then_some((text, snap))
    });
    for body in [&text, &snap] {
        assert!(!body.contains("0xffff"), "a kernel address in {body}");
    }

    // A real Prometheus, configured as for any exporter with TLS and basic auth.
    let prom_port = free_port();
    let _prometheus = start_prometheus(
        &dir,
        prom_port,
        &format!(
            "global:\n  scrape_interval: 1s\n\
             scrape_configs:\n  - job_name: lockscope\n    scheme: https\n\
             \x20   tls_config:\n      ca_file: {ca}\n\
             \x20   basic_auth:\n      username: prometheus\n      password: s3cret\n\
             \x20   static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ),
    );
    let n = wait_until(
        "Prometheus to scrape over TLS",
        Duration::from_secs(60),
        || {
            prom_query(prom_port, "count(lockscope_build_info{job=\"lockscope\"})")
                .filter(|&n| n > 0.0)
        },
    );
    assert_eq!(n, 1.0);
    assert_eq!(prom_query(prom_port, "up{job=\"lockscope\"}"), Some(1.0));
}

/// User plus system CPU time of a process, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces): utime and stime are the
    // 12th and 13th.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<u64> = rest
        .split(' ')
        .skip(11)
        .take(2)
        .map(|v| v.parse().unwrap())
        .collect();
    // SAFETY: sysconf has no memory preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (f[0] + f[1]) as f64 / hz
}

#[test]
fn slow_map_reads_are_spaced_to_the_cpu_budget() {
    let _serial = serial();
    let dir = scratch("serve-pace");
    let port = free_port();
    let log = dir.join("serve.stderr");
    // 15,000 futex words (on by default) make a read cost a few hundred ms of CPU: at a
    // 1 s interval, a third of a CPU. A 5% budget spaces the reads out.
    let mut serve = start_serve(
        &[
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--interval",
            "1s",
            "--max-cpu-percent",
            "5",
        ],
        &log,
    );
    wait_healthy(port, &mut serve, &log);
    let _words = Guard(
        Command::new(bin())
            .args([
                "workload",
                "syscall-loop",
                "--futex-wake",
                "--words",
                "15000",
            ])
            .args(["--seconds", "120"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let paced = |text: &str| {
        samples(text, "lockscope_read_interval_seconds")
            .first()
            .map(|s| s.1)
            .filter(|&v| v > 1.5)
    };
    let wait = wait_until("reads spaced out", Duration::from_secs(90), || {
        paced(&http_get(port, "/metrics").ok()?.1)
    });
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("to stay within max_cpu_percent = 5"),
        "the change of pace is logged: {text}"
    );
    // Over a window of several paced reads, serve's CPU stays near its budget (about a
    // third of a CPU unpaced).
    let pid = serve.0.id();
    let (c0, t0) = (cpu_seconds(pid), Instant::now());
    thread::sleep(Duration::from_secs_f64((3.0 * wait).clamp(10.0, 40.0)));
    let share = (cpu_seconds(pid) - c0) / t0.elapsed().as_secs_f64();
    println!(
        "reads every {wait:.1} s; serve used {:.1}% of a CPU",
        share * 100.0
    );
    assert!(
        share < 0.10,
        "{:.1}% of a CPU with a 5% budget",
        share * 100.0
    );
    // Healthy all along: the staleness limit follows the paced interval.
    let (status, body) = http_get(port, "/healthz").unwrap();
    assert_eq!(status, 200, "{body}");
    stop_serve(&mut serve, libc::SIGTERM, &log);
}
