//! Recordings from a running `lockscope serve`: `GET http://ADDR/api/snapshot` returns the
//! same JSON a recording file holds (schema `lockscope.report/2`), cumulative since the
//! server started.

use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::aggregate::Recording;

/// The path `lockscope serve` answers snapshots on.
pub const SNAPSHOT_PATH: &str = "/api/snapshot";

/// Largest snapshot accepted (a busy system's recording is a few MiB).
const MAX_BODY: u64 = 256 << 20;

pub struct RemoteSnapshots {
    agent: ureq::Agent,
    addr: String,
    url: String,
}

impl RemoteSnapshots {
    /// `addr` is `HOST:PORT` (an `http://` prefix is accepted). Nothing is contacted yet.
    pub fn new(addr: &str, timeout: Duration) -> anyhow::Result<Self> {
        let bare = addr.strip_prefix("http://").unwrap_or(addr);
        let bare = bare.trim_end_matches('/');
        if bare.starts_with("https://") || addr.starts_with("https://") {
            bail!("--connect {addr}: lockscope serve speaks plain HTTP; give HOST:PORT");
        }
        let ok = bare
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !ok || bare.contains('/') {
            bail!("--connect {addr}: expected HOST:PORT, for example 127.0.0.1:9464");
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build()
            .into();
        Ok(Self {
            agent,
            addr: bare.to_owned(),
            url: format!("http://{bare}{SNAPSHOT_PATH}"),
        })
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub fn fetch(&self) -> anyhow::Result<Recording> {
        let mut resp = self
            .agent
            .get(&self.url)
            .header("Accept", "application/json")
            .call()
            .map_err(|e| anyhow::anyhow!("cannot reach lockscope serve at {}: {e}", self.addr))?;
        let status = resp.status();
        if !status.is_success() {
            bail!(
                "lockscope serve at {} answered {status} for {SNAPSHOT_PATH} \
                 (is it a lockscope serve with the snapshot API?)",
                self.addr
            );
        }
        let text = resp
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_string()
            .with_context(|| format!("reading the snapshot from {}", self.addr))?;
        Recording::from_json(&text).with_context(|| format!("snapshot from {}", self.addr))
    }
}

#[cfg(test)]
mod tests {
    use std::{
        io::{BufRead as _, BufReader, Write as _},
        net::TcpListener,
        thread,
    };

    use super::*;
    use crate::aggregate::recording::tests::sample_recording;

    /// A tiny HTTP server: answers each of `replies` (status, body) to one connection,
    /// recording the request lines.
    fn fake_server(replies: Vec<(u16, String)>) -> (String, thread::JoinHandle<Vec<String>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let handle = thread::spawn(move || {
            let mut requests = Vec::new();
            for (status, body) in replies {
                let (stream, _) = listener.accept().unwrap();
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                requests.push(line.trim_end().to_owned());
                loop {
                    let mut h = String::new();
                    reader.read_line(&mut h).unwrap();
                    if h == "\r\n" || h.is_empty() {
                        break;
                    }
                }
                let mut stream = reader.into_inner();
                write!(
                    stream,
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .unwrap();
            }
            requests
        });
        (addr, handle)
    }

    #[test]
    fn fetches_a_recording_from_the_snapshot_api() {
        let rec = sample_recording();
        let body = serde_json::to_string(&rec).unwrap();
        let (addr, server) = fake_server(vec![(200, body)]);
        let remote =
            RemoteSnapshots::new(&format!("http://{addr}/"), Duration::from_secs(5)).unwrap();
        assert_eq!(remote.addr(), addr);
        let got = remote.fetch().unwrap();
        assert_eq!(got, rec);
        let requests = server.join().unwrap();
        assert_eq!(requests, vec!["GET /api/snapshot HTTP/1.1"]);
    }

    #[test]
    fn server_errors_are_clear() {
        let (addr, server) = fake_server(vec![
            (404, "no".into()),
            (200, r#"{"schema":"other/1"}"#.into()),
        ]);
        let remote = RemoteSnapshots::new(&addr, Duration::from_secs(5)).unwrap();
        let e = format!("{:#}", remote.fetch().unwrap_err());
        assert!(e.contains("answered 404"), "{e}");
        let e = format!("{:#}", remote.fetch().unwrap_err());
        assert!(e.contains("not a lockscope recording"), "{e}");
        server.join().unwrap();

        // Nobody listening.
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let remote =
            RemoteSnapshots::new(&format!("127.0.0.1:{port}"), Duration::from_secs(5)).unwrap();
        let e = format!("{:#}", remote.fetch().unwrap_err());
        assert!(
            e.contains("cannot reach lockscope serve at 127.0.0.1:"),
            "{e}"
        );
    }

    #[test]
    fn bad_addresses_are_refused() {
        for a in ["localhost", "1.2.3.4:http", ":9464", "https://x:1", "h:1/x"] {
            let e = RemoteSnapshots::new(a, Duration::from_secs(1))
                .err()
                .unwrap_or_else(|| panic!("{a} accepted"))
                .to_string();
            assert!(e.contains("--connect"), "{e}");
        }
        assert!(RemoteSnapshots::new("[::1]:9464", Duration::from_secs(1)).is_ok());
    }
}
