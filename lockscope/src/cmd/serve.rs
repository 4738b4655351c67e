//! `lockscope serve`: the always-on daemon. Attaches the probes once (through
//! [`Session`], like `record`), reads the in-kernel maps every `interval`, and serves
//! `/metrics` (Prometheus text format), `/healthz` and `/api/snapshot` (the cumulative
//! recording, schema `lockscope.report/2`, as `record -o` writes it).
//!
//! Threads: the main thread owns the session and refreshes; one thread runs the HTTP
//! server (tokio) and turns SIGTERM/SIGINT into a stop request. On stop the server
//! finishes, the probes are detached, and lockscope exits 0.

use std::{
    os::fd::OwnedFd,
    process::ExitCode,
    sync::{Arc, Mutex, mpsc},
    thread,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use axum::{
    Router,
    extract::State,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};

use crate::{
    aggregate::Recording,
    cli::ServeArgs,
    config::{ConfigFile, Overrides, ServeSettings, paced_wait},
    probe::{LoadOptions, Target, features},
    session::Session,
    sink::prometheus::{
        Exporter, MetricsOptions, ProbeStatus, ProgramRuns, SelfStats, encode, families,
    },
};

/// What the HTTP handlers serve: the result of the last refresh.
struct Published {
    metrics: String,
    recording: Arc<Recording>,
    /// `/api/snapshot`'s body for this recording: rendered by the first request after a
    /// map read, shared by every later one.
    snapshot_json: Arc<std::sync::OnceLock<Result<axum::body::Bytes, String>>>,
    last_ok: Instant,
    last_error: Option<String>,
    interval: Duration,
}

type Shared = Arc<Mutex<Published>>;

/// The pthread ring buffer of an always-on daemon: a quarter of `record`'s. The reader
/// thread drains it as waits arrive, so it only absorbs bursts (about 2,500 waits here);
/// a burst past it is counted (`pthread_ring_full`). `record` keeps the larger one.
const SERVE_PTHREAD_RING_BYTES: u32 = 2 << 20;

/// Why serving stopped.
enum Stop {
    Signal(&'static str),
    ServerFailed(anyhow::Error),
}

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let file = match &args.config {
        Some(path) => ConfigFile::read(path)?,
        None => ConfigFile::default(),
    };
    let overrides = Overrides {
        listen: args.listen.clone(),
        interval: args.interval.clone(),
        max_cpu_percent: args.max_cpu_percent,
        pids: args.pids.clone(),
        cgroup: args.cgroup.clone(),
        web_config: args.web_config.clone(),
        redact_addresses: args.redact_addresses,
        bpf_run_stats: args.bpf_run_stats,
    };
    let settings = match &args.config {
        Some(path) => file
            .settings(&overrides)
            .with_context(|| format!("config {}", path.display()))?,
        None => file.settings(&overrides)?,
    };
    // The key and certificates are read now: a bad one fails here, before anything is
    // attached (and `--check-config` checks them too).
    let web = match &settings.web {
        Some((path, w)) => Web {
            tls: w
                .tls_server_config()
                .with_context(|| format!("web config {}", path.display()))?,
            auth: Arc::new(crate::webconfig::Authenticator::new(w.users.clone())),
            headers: w.headers.clone(),
        },
        None => Web::default(),
    };
    if args.check_config {
        println!("{}", describe(&settings));
        return Ok(ExitCode::SUCCESS);
    }

    features::require_privileges()?;
    features::ensure_tracefs()?;
    // Bind before attaching: a busy port is an error with nothing loaded.
    let listener = std::net::TcpListener::bind(settings.listen)
        .with_context(|| format!("cannot listen on {}", settings.listen))?;
    listener.set_nonblocking(true)?;
    if !settings.listen.ip().is_loopback() {
        let missing = match (web.tls.is_some(), web.auth.enabled()) {
            (true, true) => None,
            (false, false) => Some("over plain HTTP without authentication"),
            (false, true) => Some("over plain HTTP (passwords cross the network in clear)"),
            (true, false) => Some("without authentication"),
        };
        if let Some(missing) = missing {
            eprintln!(
                "lockscope: warning: serving on {} {missing}: whoever reaches it reads \
                 every traced process's name and pid{}; listen on 127.0.0.1 (the default), \
                 or give --web-config with tls_server_config and basic_auth_users",
                settings.listen,
                if settings.redact_addresses {
                    ""
                } else {
                    " and kernel addresses"
                }
            );
        }
    }

    let mut session = Session::start(
        // The probe groups pick the types: without a futex type the futex probes stay
        // detached.
        &LoadOptions {
            mmap_trylocks: settings.probes.kernel_locks
                && settings.probes.rwsem_events
                && settings.probes.mmap_trylocks,
            pthread_ring_bytes: SERVE_PTHREAD_RING_BYTES,
            futex_mode: settings.probes.futex_mode,
            ..LoadOptions::new(settings.target.clone(), Some(settings.load_types()))
        },
        describe_target(&settings.target),
    )?;
    for note in &session.probes().notes {
        eprintln!("lockscope: note: {note}");
    }
    session.set_detail(settings.detail);
    session.forget_exited(settings.forget_exited_after);
    // Kernel BPF run statistics, when asked for: on only while this fd is open (closed
    // at exit, even on a crash, which restores the previous state).
    let bpf_stats = match settings
        .bpf_run_stats
        .then(|| aya::sys::enable_stats(aya::sys::Stats::RunTime))
    {
        None => None,
        Some(Ok(fd)) => Some(fd),
        Some(Err(e)) => {
            eprintln!(
                "lockscope: BPF program run statistics unavailable ({:#}; needs \
                 CAP_SYS_ADMIN); lockscope_bpf_program_* metrics are left out",
                anyhow::Error::from(e)
            );
            None
        }
    };

    let kernel = settings.traces_kernel_locks();
    let mut refresher = Refresher {
        exporter: Exporter::default(),
        opts: MetricsOptions {
            top_locks: settings.top_locks,
            bucket_bounds: settings.bucket_bounds.clone(),
            futex: session.families().futex.enabled,
            rwsem_events: kernel && settings.probes.rwsem_events,
            starvation: kernel && settings.probes.pi_lock,
        },
        errors: 0,
        read_s: 0.0,
        reads: 0,
        bpf_stats,
        redactor: settings
            .redact_addresses
            .then(crate::sink::redact::Redactor::new),
    };
    let first = refresher.refresh(&session, settings.interval)?;
    let shared: Shared = Arc::new(Mutex::new(Published {
        metrics: first.0,
        recording: Arc::new(first.1),
        snapshot_json: Arc::default(),
        last_ok: Instant::now(),
        last_error: None,
        interval: settings.interval,
    }));

    let (stop_tx, stop_rx) = mpsc::channel::<Stop>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let server_state = shared.clone();
    let scheme = if web.tls.is_some() { "https" } else { "http" };
    let server = thread::Builder::new()
        .name("lockscope-http".into())
        .spawn(move || {
            if let Err(e) = serve_http(listener, server_state, web, stop_tx.clone()) {
                let _ = stop_tx.send(Stop::ServerFailed(e));
            }
            let _ = done_tx.send(());
        })?;
    eprintln!(
        "lockscope: serving {scheme}://{}/metrics (also /healthz, /api/snapshot); tier {}, \
         probes {}; reading maps every {:?}",
        settings.listen,
        session.probes().tier,
        session.probes().attached().join(", "),
        settings.interval
    );

    // Paced from the second read on: the first carries one-off costs (symbol tables).
    let mut pace = Pace::new(settings.interval, settings.max_cpu_percent);
    let stop = loop {
        match stop_rx.recv_timeout(pace.wait) {
            Ok(stop) => break stop,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break Stop::ServerFailed(anyhow::anyhow!("HTTP server thread ended"));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let cpu0 = thread_cpu_time();
                let result = refresher.refresh(&session, pace.wait);
                let mut p = shared.lock().unwrap_or_else(|e| e.into_inner());
                match result {
                    Ok((metrics, rec)) => {
                        p.metrics = metrics;
                        p.recording = Arc::new(rec);
                        p.snapshot_json = Arc::default();
                        p.last_ok = Instant::now();
                        p.last_error = None;
                    }
                    Err(e) => {
                        eprintln!("lockscope: reading the probe maps failed: {e:#}");
                        p.last_error = Some(format!("{e:#}"));
                    }
                }
                drop(p);
                crate::session::release_free_memory();
                if let Some(msg) = pace.after_read(thread_cpu_time().saturating_sub(cpu0)) {
                    eprintln!("lockscope: {msg}");
                }
                shared.lock().unwrap_or_else(|e| e.into_inner()).interval = pace.wait;
            }
        }
    };
    session.stop();
    drop(session);
    drop(refresher);
    // The server stops on the same signal; do not wait forever for slow clients.
    let _ = done_rx.recv_timeout(Duration::from_secs(5));
    drop(server);
    match stop {
        Stop::Signal(name) => {
            eprintln!("lockscope: {name}: stopped serving, probes detached");
            Ok(ExitCode::SUCCESS)
        }
        Stop::ServerFailed(e) => Err(e.context("HTTP server failed; probes detached")),
    }
}

/// When to read the maps next: every `interval`, spaced out while reads cost more CPU
/// than the budget allows ([`paced_wait`]).
struct Pace {
    interval: Duration,
    max_cpu_percent: f64,
    wait: Duration,
    /// The paced wait last logged, while reads are paced.
    logged: Option<Duration>,
}

impl Pace {
    fn new(interval: Duration, max_cpu_percent: f64) -> Self {
        Self {
            interval,
            max_cpu_percent,
            wait: interval,
            logged: None,
        }
    }

    /// Set the next wait after a read that took `cpu`; a message when the pace changed
    /// much (reads spaced out to at least twice the interval, by a factor of two since
    /// the last message, or back to the interval): no message per read.
    fn after_read(&mut self, cpu: Duration) -> Option<String> {
        let next = paced_wait(self.interval, cpu, self.max_cpu_percent);
        self.wait = next;
        let msg = if next >= 2 * self.interval
            && self.logged.is_none_or(|l| next > 2 * l || 2 * next < l)
        {
            self.logged = Some(next);
            format!(
                "a map read took {:.0} ms of CPU; reading every {:.1} s to stay within \
                 max_cpu_percent = {}",
                cpu.as_secs_f64() * 1e3,
                next.as_secs_f64(),
                self.max_cpu_percent
            )
        } else if next == self.interval && self.logged.is_some() {
            self.logged = None;
            format!(
                "map reads within max_cpu_percent again: reading every {:?}",
                self.interval
            )
        } else {
            return None;
        };
        Some(msg)
    }
}

/// CPU time of the calling thread (the map reads run on one thread).
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

struct Refresher {
    exporter: Exporter,
    opts: MetricsOptions,
    errors: u64,
    /// Time spent in refreshes, and how many, since the start.
    read_s: f64,
    reads: u64,
    bpf_stats: Option<OwnedFd>,
    /// `--redact-addresses`: every output is made from the redacted recording.
    redactor: Option<crate::sink::redact::Redactor>,
}

impl Refresher {
    /// Read the maps once: the metrics text and the recording. `wait`: the wait between
    /// reads in effect (`lockscope_read_interval_seconds`).
    fn refresh(
        &mut self,
        session: &Session,
        wait: Duration,
    ) -> anyhow::Result<(String, Recording)> {
        let t0 = Instant::now();
        let mut rec = match session.snapshot() {
            Ok(r) => r,
            Err(e) => {
                self.errors += 1;
                return Err(e);
            }
        };
        if let Some(r) = &self.redactor {
            r.recording(&mut rec)?;
        }
        let samples = self.exporter.samples(&rec, &self.opts);
        let probes = session.probes();
        let me = SelfStats {
            probes: probes
                .attached()
                .into_iter()
                .map(|probe| ProbeStatus {
                    probe,
                    tier: probes.tier.to_owned(),
                    attached: true,
                })
                .collect(),
            programs: self.bpf_stats.as_ref().map(|_| program_runs(session)),
            scrape_duration_s: t0.elapsed().as_secs_f64(),
            scrape_errors: self.errors,
            read_seconds_total: self.read_s + t0.elapsed().as_secs_f64(),
            reads_total: self.reads + 1,
            read_interval_s: wait.as_secs_f64(),
        };
        let text = encode(&families(&rec, &samples, &me, &self.opts))?;
        self.reads += 1;
        self.read_s += t0.elapsed().as_secs_f64();
        Ok((text, rec))
    }
}

/// Run time and count of every loaded program of the session.
fn program_runs(session: &Session) -> Vec<ProgramRuns> {
    let mut out: Vec<ProgramRuns> = session
        .probes()
        .ebpf()
        .programs()
        .filter_map(|(name, prog)| {
            let info = prog.info().ok()?;
            Some(ProgramRuns {
                program: name.to_owned(),
                run_time_ns: info.run_time().as_nanos() as u64,
                run_count: info.run_count(),
            })
        })
        .collect();
    out.sort_by(|a, b| a.program.cmp(&b.program));
    out
}

/// At most this many connections at once; one more is closed as soon as it is accepted.
pub const MAX_CONNECTIONS: usize = 512;
/// A client must send its request headers within this time of connecting (or of its
/// previous response), else the connection is closed.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// No connection lives longer, whatever it does (a reader that stopped reading a large
/// response, an idle keep-alive): Prometheus reconnects for its next scrape.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
/// Request line and headers larger than this are refused (hyper's minimum is 8 KiB).
pub const MAX_REQUEST_BYTES: usize = 16 * 1024;

/// TLS, basic auth and extra response headers (`--web-config`); none by default.
#[derive(Default)]
struct Web {
    tls: Option<Arc<rustls::ServerConfig>>,
    auth: Arc<crate::webconfig::Authenticator>,
    headers: Vec<(String, String)>,
}

/// Basic auth on every route, and the configured response headers on every response.
/// What [`guard`] checks and adds: the credentials and the extra response headers.
type Guard = (
    Arc<crate::webconfig::Authenticator>,
    Arc<Vec<(String, String)>>,
);

async fn guard(
    State(web): State<Guard>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let (auth, headers) = web;
    let mut resp = if auth.enabled() {
        let value = req
            .headers()
            .get(header::AUTHORIZATION)
            .map(|v| v.as_bytes().to_vec());
        // bcrypt is slow by design: off the event loop.
        let check = auth.clone();
        let ok = tokio::task::spawn_blocking(move || check.admits(value.as_deref()))
            .await
            .unwrap_or(false);
        if ok {
            next.run(req).await
        } else {
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Basic realm=\"lockscope\"")],
                "unauthorized\n",
            )
                .into_response()
        }
    } else {
        next.run(req).await
    };
    for (name, value) in headers.iter() {
        if let (Ok(n), Ok(v)) = (
            axum::http::HeaderName::try_from(name.as_str()),
            axum::http::HeaderValue::try_from(value.as_str()),
        ) {
            resp.headers_mut().insert(n, v);
        }
    }
    resp
}

fn serve_http(
    listener: std::net::TcpListener,
    shared: Shared,
    web: Web,
    stop: mpsc::Sender<Stop>,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let shutdown = async move {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = tokio::signal::ctrl_c() => "SIGINT",
            };
            let _ = stop.send(Stop::Signal(name));
        };
        tokio::pin!(shutdown);
        let app = Router::new()
            .route("/metrics", get(metrics))
            .route("/healthz", get(healthz))
            .route("/api/snapshot", get(snapshot))
            .route("/debug/pprof/lockscope", get(pprof))
            .route("/", get(index))
            .fallback(not_found)
            .with_state(shared)
            .layer(axum::middleware::from_fn_with_state(
                (web.auth.clone(), Arc::new(web.headers.clone())),
                guard,
            ));
        let tls = web.tls.map(tokio_rustls::TlsAcceptor::from);
        let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        loop {
            let (socket, _) = tokio::select! {
                _ = &mut shutdown => return Ok(()),
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    // Out of descriptors or an aborted handshake: let the system breathe.
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                },
            };
            // Over the cap: closed at once (the client sees the connection end).
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                drop(socket);
                continue;
            };
            let service = hyper_util::service::TowerToHyperService::new(app.clone());
            let tls = tls.clone();
            tokio::spawn(async move {
                let http = || {
                    let mut b = hyper::server::conn::http1::Builder::new();
                    b.timer(hyper_util::rt::TokioTimer::new())
                        .header_read_timeout(HEADER_READ_TIMEOUT)
                        .max_buf_size(MAX_REQUEST_BYTES);
                    b
                };
                let _ = tokio::time::timeout(CONNECTION_LIFETIME, async move {
                    match tls {
                        None => {
                            let io = hyper_util::rt::TokioIo::new(socket);
                            let _ = http().serve_connection(io, service).await;
                        }
                        Some(acceptor) => {
                            // The handshake, too, within the header timeout.
                            let Ok(Ok(stream)) =
                                tokio::time::timeout(HEADER_READ_TIMEOUT, acceptor.accept(socket))
                                    .await
                            else {
                                return;
                            };
                            let io = hyper_util::rt::TokioIo::new(stream);
                            let _ = http().serve_connection(io, service).await;
                        }
                    }
                })
                .await;
                drop(permit);
            });
        }
    })
}

const INDEX: &str = "lockscope serve\n\n\
    /metrics        Prometheus metrics (text format)\n\
    /healthz        200 when the probe maps were read recently\n\
    /api/snapshot   the recording so far, JSON (schema lockscope.report/2)\n\
    /debug/pprof/lockscope  the recording so far as a gzipped pprof profile\n";

async fn index() -> &'static str {
    INDEX
}

async fn not_found() -> (StatusCode, &'static str) {
    (StatusCode::NOT_FOUND, INDEX)
}

async fn metrics(State(shared): State<Shared>) -> Response {
    let text = shared
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .metrics
        .clone();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn snapshot(State(shared): State<Shared>) -> Response {
    let (rec, body) = {
        let p = shared.lock().unwrap_or_else(|e| e.into_inner());
        (p.recording.clone(), p.snapshot_json.clone())
    };
    let body = body.get_or_init(|| {
        serde_json::to_vec(&*rec)
            .map(axum::body::Bytes::from)
            .map_err(|e| e.to_string())
    });
    match body {
        Ok(b) => ([(header::CONTENT_TYPE, "application/json")], b.clone()).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// The recording so far as a gzipped pprof profile (the pull model of continuous
/// profilers such as Pyroscope and Parca).
async fn pprof(State(shared): State<Shared>) -> Response {
    let rec = shared
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .recording
        .clone();
    match crate::sink::pprof::pprof_gz(&rec) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/octet-stream")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}\n")).into_response(),
    }
}

async fn healthz(State(shared): State<Shared>) -> Response {
    let p = shared.lock().unwrap_or_else(|e| e.into_inner());
    let age = p.last_ok.elapsed();
    let limit = p.interval * 3 + Duration::from_secs(2);
    if age <= limit {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        let why = p.last_error.as_deref().unwrap_or("no map read finished");
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "stale: last map read {:.1} s ago ({why})\n",
                age.as_secs_f64()
            ),
        )
            .into_response()
    }
}

fn describe_target(target: &Target) -> String {
    match target {
        Target::System | Target::Command => "system".to_owned(),
        Target::Pids(p) => format!(
            "pid {}",
            p.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
        ),
        Target::Cgroup(path) => format!("cgroup {}", path.display()),
    }
}

/// `--check-config` output: what would be served.
fn describe(s: &ServeSettings) -> String {
    let types = match &s.types {
        None => "all".to_owned(),
        Some(t) => t.iter().map(|t| t.name()).collect::<Vec<_>>().join(","),
    };
    let first = s.bucket_bounds.first().map_or(0, |&i| 1u64 << (i + 1));
    let last = s.bucket_bounds.last().map_or(0, |&i| 1u64 << (i + 1));
    let p = &s.probes;
    let groups: Vec<&str> = [
        ("kernel_locks", p.kernel_locks),
        ("rwsem_events", p.kernel_locks && p.rwsem_events),
        (
            "mmap_trylocks",
            p.kernel_locks && p.rwsem_events && p.mmap_trylocks,
        ),
        (
            match p.futex_mode {
                crate::probe::FutexMode::Calls => "futex",
                crate::probe::FutexMode::Blocking => "futex (blocking waits)",
            },
            s.traces_futex(),
        ),
        ("pi_lock", p.kernel_locks && p.pi_lock),
    ]
    .into_iter()
    .filter_map(|(n, on)| on.then_some(n))
    .collect();
    let d = s.detail;
    let web = match &s.web {
        None => "plain HTTP, no authentication".to_owned(),
        Some((path, w)) => format!(
            "{} ({})",
            match (w.tls.is_some(), w.users.len()) {
                (true, 0) => "TLS, no authentication".to_owned(),
                (tls, n) => format!(
                    "{}, basic auth for {n} user{}",
                    if tls { "TLS" } else { "plain HTTP" },
                    if n == 1 { "" } else { "s" }
                ),
            },
            path.display()
        ),
    };
    format!(
        "config OK: listen {} ({web}{}), interval {:?} (map reads within {}% of a CPU), \
         target {}, probes {}, lock types \
         {types}, top {} locks labelled, {} histogram buckets from {:.3e} s to {:.3e} s; \
         snapshots keep the callers and tasks of {} locks ({} callers, {} tasks each){}",
        s.listen,
        if s.redact_addresses {
            ", kernel addresses redacted"
        } else {
            ""
        },
        s.interval,
        s.max_cpu_percent,
        describe_target(&s.target),
        groups.join(","),
        s.top_locks,
        s.bucket_bounds.len(),
        first as f64 / 1e9,
        last as f64 / 1e9,
        d.locks,
        d.callers_per_lock,
        d.tasks_per_lock,
        if s.bpf_run_stats {
            "; BPF run statistics on (every BPF program of the machine pays two clock reads \
             per run)"
        } else {
            ""
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_of_pace_is_told_once_not_at_every_read() {
        let ms = Duration::from_millis;
        let mut p = Pace::new(Duration::from_secs(1), 1.0);
        // Cheap reads, and reads paced to less than twice the interval: nothing said.
        assert_eq!(p.after_read(ms(5)), None);
        assert_eq!(p.after_read(ms(15)), None);
        assert_eq!(p.wait, ms(1485));
        assert_eq!(p.after_read(ms(5)), None);
        // Spaced out: said once, while the pace stays within a factor of two.
        let m = p.after_read(ms(300)).unwrap();
        assert!(m.contains("300 ms") && m.contains("every 29.7 s"), "{m}");
        assert_eq!(p.wait, ms(29_700));
        assert_eq!(p.after_read(ms(250)), None);
        assert_eq!(p.after_read(ms(400)), None);
        // Much slower: said again.
        assert!(p.after_read(ms(900)).unwrap().contains("every 89.1 s"));
        // Back within the interval: said once.
        assert!(p.after_read(ms(5)).unwrap().contains("again"));
        assert_eq!(p.after_read(ms(5)), None);
        assert_eq!(p.wait, Duration::from_secs(1));
    }
}
