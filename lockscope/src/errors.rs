//! Errors as one line: an error and its sources, with a verifier log cut to its verdict.

/// An error and its sources on one line (the kernel's errno is usually the last), with a
/// verifier log cut to its verdict.
/// `LOCKSCOPE_VERIFIER_LOG=1` keeps the whole verifier log.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    if std::env::var_os("LOCKSCOPE_VERIFIER_LOG").is_some() {
        return s;
    }
    match s.split_once("Verifier output:") {
        Some((head, log)) => {
            let verdict: Vec<&str> = log
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with(':') && !l.starts_with(';'))
                .filter(|l| {
                    l.contains("invalid")
                        || l.contains("outside")
                        || l.contains("not allowed")
                        || l.contains("unknown")
                })
                .collect();
            format!(
                "{}{}",
                head.trim_end().trim_end_matches('.'),
                if verdict.is_empty() {
                    String::new()
                } else {
                    format!(" (verifier: {})", verdict.join("; "))
                }
            )
        }
        None => s,
    }
}
