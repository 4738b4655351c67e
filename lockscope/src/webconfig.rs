//! `serve --web-config FILE`: TLS and basic authentication, configured in the web
//! configuration format of the Prometheus exporter toolkit, so that a Prometheus scrape
//! configuration written for node_exporter works unchanged:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: lockscope.crt        # relative paths: to the file's directory
//!   key_file: lockscope.key
//!   client_auth_type: RequireAndVerifyClientCert   # optional, with client_ca_file
//!   client_ca_file: clients.crt
//!   min_version: TLS12               # TLS12 (default) or TLS13
//! basic_auth_users:
//!   prometheus: $2y$10$...           # bcrypt hashes (htpasswd -nBC 10 "" | tr -d ':\n')
//! http_server_config:
//!   headers:
//!     X-Content-Type-Options: nosniff
//! ```
//!
//! Parsing and the credential check are pure; loading the key and certificates is the
//! only file access.

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use anyhow::{Context as _, anyhow, bail};
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileFormat {
    #[serde(default)]
    tls_server_config: Option<TlsFile>,
    #[serde(default)]
    basic_auth_users: Option<BTreeMap<String, String>>,
    #[serde(default)]
    http_server_config: Option<HttpFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert_file: Option<String>,
    key_file: Option<String>,
    client_auth_type: Option<String>,
    client_ca_file: Option<String>,
    min_version: Option<String>,
    max_version: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    /// Accepted for compatibility; lockscope serves HTTP/1.1 only.
    http2: Option<bool>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// Client certificates must verify against these CAs (`RequireAndVerifyClientCert`),
    /// or must verify when given (`VerifyClientCertIfGiven`).
    pub client_ca_file: Option<PathBuf>,
    pub require_client_cert: bool,
    pub min_version: TlsVersion,
    pub max_version: TlsVersion,
}

/// A parsed web configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebConfig {
    pub tls: Option<TlsSettings>,
    /// User name -> bcrypt hash; empty: no authentication.
    pub users: BTreeMap<String, String>,
    /// Response headers added to every response.
    pub headers: Vec<(String, String)>,
}

fn version(field: &str, v: &str) -> anyhow::Result<TlsVersion> {
    match v {
        "TLS12" => Ok(TlsVersion::Tls12),
        "TLS13" => Ok(TlsVersion::Tls13),
        "TLS10" | "TLS11" => bail!("{field}: {v} is not supported (TLS12 or TLS13)"),
        _ => bail!("{field}: `{v}` is not a TLS version (TLS12 or TLS13)"),
    }
}

/// Does `h` look like a bcrypt hash (`$2a$`, `$2b$` or `$2y$`, a cost, 53 characters)?
fn is_bcrypt(h: &str) -> bool {
    let b = h.as_bytes();
    h.len() == 60
        && (h.starts_with("$2a$") || h.starts_with("$2b$") || h.starts_with("$2y$"))
        && b[4].is_ascii_digit()
        && b[5].is_ascii_digit()
        && b[6] == b'$'
}

impl WebConfig {
    /// Parse `text`; relative paths are taken relative to `base` (the file's directory).
    pub fn parse(text: &str, base: &Path) -> anyhow::Result<Self> {
        let f: FileFormat = if text.trim().is_empty() {
            FileFormat::default()
        } else {
            serde_norway::from_str(text).map_err(|e| anyhow!("{e}"))?
        };
        let path = |p: &str| {
            let p = Path::new(p);
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            }
        };
        let tls = match f.tls_server_config {
            None => None,
            Some(t) => {
                let (Some(cert), Some(key)) = (&t.cert_file, &t.key_file) else {
                    bail!("tls_server_config: both cert_file and key_file are needed");
                };
                let auth = t.client_auth_type.as_deref().unwrap_or("NoClientCert");
                let (require, wants_ca) = match auth {
                    "NoClientCert" => (false, false),
                    "VerifyClientCertIfGiven" => (false, true),
                    "RequireAndVerifyClientCert" => (true, true),
                    "RequestClientCert" | "RequireAnyClientCert" => bail!(
                        "tls_server_config.client_auth_type: {auth} accepts client \
                         certificates without verifying them; lockscope supports \
                         NoClientCert, VerifyClientCertIfGiven and \
                         RequireAndVerifyClientCert"
                    ),
                    other => bail!(
                        "tls_server_config.client_auth_type: `{other}` is not one of \
                         NoClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert"
                    ),
                };
                if wants_ca && t.client_ca_file.is_none() {
                    bail!("tls_server_config: client_auth_type {auth} needs client_ca_file");
                }
                if !wants_ca && t.client_ca_file.is_some() {
                    bail!(
                        "tls_server_config: client_ca_file is set but client_auth_type is \
                         NoClientCert (set RequireAndVerifyClientCert to check clients)"
                    );
                }
                let min = t
                    .min_version
                    .as_deref()
                    .map(|v| version("tls_server_config.min_version", v))
                    .transpose()?
                    .unwrap_or(TlsVersion::Tls12);
                let max = t
                    .max_version
                    .as_deref()
                    .map(|v| version("tls_server_config.max_version", v))
                    .transpose()?
                    .unwrap_or(TlsVersion::Tls13);
                if min == TlsVersion::Tls13 && max == TlsVersion::Tls12 {
                    bail!("tls_server_config: min_version is above max_version");
                }
                Some(TlsSettings {
                    cert_file: path(cert),
                    key_file: path(key),
                    client_ca_file: t.client_ca_file.as_deref().map(path),
                    require_client_cert: require,
                    min_version: min,
                    max_version: max,
                })
            }
        };
        let users = f.basic_auth_users.unwrap_or_default();
        for (user, hash) in &users {
            if user.is_empty() || user.contains(':') {
                bail!("basic_auth_users: `{user}` is not a user name (empty or with `:`)");
            }
            if !is_bcrypt(hash) {
                bail!(
                    "basic_auth_users.{user}: not a bcrypt hash (make one with \
                     `htpasswd -nBC 10 \"\" | tr -d ':\\n'`)"
                );
            }
        }
        let headers = match f.http_server_config {
            None => Vec::new(),
            Some(h) => {
                let _ = h.http2;
                for (name, value) in &h.headers {
                    axum::http::HeaderName::try_from(name.as_str()).map_err(|_| {
                        anyhow!("http_server_config.headers: `{name}` is not a header name")
                    })?;
                    axum::http::HeaderValue::try_from(value.as_str()).map_err(|_| {
                        anyhow!("http_server_config.headers.{name}: not a header value")
                    })?;
                }
                h.headers.into_iter().collect()
            }
        };
        Ok(Self {
            tls,
            users,
            headers,
        })
    }

    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("web config {}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base).with_context(|| format!("web config {}", path.display()))
    }

    /// The TLS server configuration (key and certificates read now), if TLS is on.
    pub fn tls_server_config(&self) -> anyhow::Result<Option<Arc<rustls::ServerConfig>>> {
        let Some(t) = &self.tls else { return Ok(None) };
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _};
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&t.cert_file)
            .with_context(|| format!("cert_file {}", t.cert_file.display()))?
            .collect::<Result<_, _>>()
            .with_context(|| format!("cert_file {}", t.cert_file.display()))?;
        if certs.is_empty() {
            bail!("cert_file {}: no certificate in it", t.cert_file.display());
        }
        let key = PrivateKeyDer::from_pem_file(&t.key_file)
            .with_context(|| format!("key_file {}", t.key_file.display()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions: &[&rustls::SupportedProtocolVersion] = match (t.min_version, t.max_version) {
            (TlsVersion::Tls13, _) => &[&rustls::version::TLS13],
            (TlsVersion::Tls12, TlsVersion::Tls12) => &[&rustls::version::TLS12],
            (TlsVersion::Tls12, TlsVersion::Tls13) => {
                &[&rustls::version::TLS13, &rustls::version::TLS12]
            }
        };
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)
            .context("TLS versions")?;
        let builder = match &t.client_ca_file {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in CertificateDer::pem_file_iter(ca)
                    .with_context(|| format!("client_ca_file {}", ca.display()))?
                {
                    roots
                        .add(c.with_context(|| format!("client_ca_file {}", ca.display()))?)
                        .with_context(|| format!("client_ca_file {}", ca.display()))?;
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                );
                let verifier = if t.require_client_cert {
                    verifier
                } else {
                    verifier.allow_unauthenticated()
                };
                builder.with_client_cert_verifier(verifier.build().context("client_ca_file")?)
            }
        };
        let mut cfg = builder
            .with_single_cert(certs, key)
            .context("the key does not match the certificate")?;
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Some(Arc::new(cfg)))
    }
}

/// Checks `Authorization: Basic` credentials against the bcrypt hashes. A verified
/// (user, password) is remembered, so that a scraper pays bcrypt once, not per scrape;
/// verifications run one at a time, so wrong guesses cannot take more than one CPU.
#[derive(Debug)]
pub struct Authenticator {
    users: BTreeMap<String, String>,
    verified: Mutex<HashMap<String, String>>,
    one_at_a_time: Mutex<()>,
}

impl Default for Authenticator {
    fn default() -> Self {
        Self::new(BTreeMap::new())
    }
}

impl Authenticator {
    pub fn new(users: BTreeMap<String, String>) -> Self {
        Self {
            users,
            verified: Mutex::new(HashMap::new()),
            one_at_a_time: Mutex::new(()),
        }
    }

    pub fn enabled(&self) -> bool {
        !self.users.is_empty()
    }

    /// Whether the `Authorization` header's value admits the request (blocking: bcrypt).
    pub fn admits(&self, authorization: Option<&[u8]>) -> bool {
        if !self.enabled() {
            return true;
        }
        let Some((user, password)) = authorization.and_then(basic_credentials) else {
            return false;
        };
        let Some(hash) = self.users.get(&user) else {
            return false;
        };
        let known = self
            .verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&user)
            .is_some_and(|p| constant_time_eq(p.as_bytes(), password.as_bytes()));
        if known {
            return true;
        }
        let _turn = self.one_at_a_time.lock().unwrap_or_else(|e| e.into_inner());
        if bcrypt::verify(&password, hash).unwrap_or(false) {
            self.verified
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(user, password);
            true
        } else {
            false
        }
    }
}

/// (user, password) of a `Basic` authorization header value.
fn basic_credentials(value: &[u8]) -> Option<(String, String)> {
    use base64::Engine as _;
    let text = std::str::from_utf8(value).ok()?;
    let (scheme, encoded) = text.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let (user, password) = String::from_utf8(decoded)
        .ok()?
        .split_once(':')
        .map(|(u, p)| (u.to_owned(), p.to_owned()))?;
    Some((user, password))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "/etc/lockscope";

    fn parse(text: &str) -> anyhow::Result<WebConfig> {
        WebConfig::parse(text, Path::new(BASE))
    }

    fn err(text: &str) -> String {
        format!("{:#}", parse(text).unwrap_err())
    }

    #[test]
    fn the_exporter_toolkit_format_is_read() {
        let hash = bcrypt::hash("secret", 4).unwrap();
        let c = parse(&format!(
            "tls_server_config:\n  cert_file: a.crt\n  key_file: /k/a.key\n  min_version: TLS13\n\
             basic_auth_users:\n  prometheus: {hash}\n\
             http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
        ))
        .unwrap();
        let t = c.tls.unwrap();
        assert_eq!(t.cert_file, Path::new("/etc/lockscope/a.crt"));
        assert_eq!(t.key_file, Path::new("/k/a.key"));
        assert_eq!(t.min_version, TlsVersion::Tls13);
        assert!(!t.require_client_cert);
        assert_eq!(c.users["prometheus"], hash);
        assert_eq!(c.headers, vec![("X-Frame-Options".into(), "deny".into())]);
        assert_eq!(parse("").unwrap(), WebConfig::default());
    }

    #[test]
    fn mistakes_get_clear_errors() {
        assert!(
            err("tls_server_config:\n  cert_file: a\n").contains("both cert_file and key_file")
        );
        assert!(
            err("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS10\n")
                .contains("not supported")
        );
        assert!(err("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAndVerifyClientCert\n").contains("needs client_ca_file"));
        assert!(err("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAnyClientCert\n").contains("without verifying"));
        assert!(err("basic_auth_users:\n  alice: plaintext\n").contains("not a bcrypt hash"));
        assert!(err("tls_config:\n  cert_file: a\n").contains("unknown field"));
        assert!(
            err("tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [x]\n")
                .contains("unknown field")
        );
    }

    #[test]
    fn basic_auth_admits_only_the_right_password() {
        let users = BTreeMap::from([("prom".to_owned(), bcrypt::hash("s3cret", 4).unwrap())]);
        let a = Authenticator::new(users);
        let header = |u: &str, p: &str| {
            use base64::Engine as _;
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
            )
        };
        assert!(a.admits(Some(header("prom", "s3cret").as_bytes())));
        // Remembered: the second time needs no bcrypt, and still checks the password.
        assert!(a.admits(Some(header("prom", "s3cret").as_bytes())));
        assert!(!a.admits(Some(header("prom", "s3cre").as_bytes())));
        assert!(!a.admits(Some(header("other", "s3cret").as_bytes())));
        assert!(!a.admits(Some(b"Bearer abc")));
        assert!(!a.admits(Some(b"Basic !!!")));
        assert!(!a.admits(None));
        assert!(Authenticator::new(BTreeMap::new()).admits(None));
    }
}
