//! The deployment files in `deploy/` agree with what lockscope really does. No root needed.

use std::{collections::BTreeSet, path::PathBuf};

use lockscope::sink::prometheus::sample_names;
use serde_json::Value;

fn deploy(path: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every `lockscope_*` name in the query strings of a dashboard.
fn metric_names_in_queries(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                if let (true, Value::String(q)) =
                    (matches!(k.as_str(), "expr" | "definition" | "query"), v)
                {
                    extract_names(q, out);
                }
                metric_names_in_queries(v, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|v| metric_names_in_queries(v, out)),
        _ => {}
    }
}

fn extract_names(query: &str, out: &mut BTreeSet<String>) {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut rest = query;
    while let Some(i) = rest.find("lockscope_") {
        let preceded = rest[..i].chars().next_back().is_some_and(is_ident);
        let tail = &rest[i..];
        let end = tail.find(|c: char| !is_ident(c)).unwrap_or(tail.len());
        if !preceded {
            out.insert(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
}

#[test]
fn grafana_dashboard_queries_only_exported_metrics() {
    let dash: Value = serde_json::from_str(&deploy("grafana/lockscope.json")).unwrap();
    let mut used = BTreeSet::new();
    metric_names_in_queries(&dash, &mut used);
    let exported: BTreeSet<String> = sample_names().into_iter().collect();
    let unknown: Vec<&String> = used.difference(&exported).collect();
    assert!(
        unknown.is_empty(),
        "dashboard queries metrics lockscope does not export: {unknown:?}"
    );
    for core in [
        "lockscope_lock_wait_seconds_bucket",
        "lockscope_lock_wait_seconds_sum",
        "lockscope_lock_contentions_total",
        "lockscope_events_lost_total",
        "lockscope_futex_waits_total",
        "lockscope_rwsem_events_total",
        "lockscope_starvation_episodes_total",
    ] {
        assert!(used.contains(core), "dashboard shows {core}: {used:?}");
    }
}

#[test]
fn name_extraction_finds_names_in_promql() {
    let mut out = BTreeSet::new();
    extract_names(
        "histogram_quantile(0.9, sum by (le) (rate(lockscope_lock_wait_seconds_bucket{a=\"b\"}[5m]))) / x_lockscope_no",
        &mut out,
    );
    assert_eq!(
        out.into_iter().collect::<Vec<_>>(),
        vec!["lockscope_lock_wait_seconds_bucket"]
    );
}

/// `CapabilityBoundingSet=` of the systemd unit, as `CAP_*` names.
pub fn unit_capabilities() -> Vec<String> {
    deploy("lockscope.service")
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("the unit bounds its capabilities")
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

#[test]
fn systemd_unit_and_daemonset_grant_the_same_minimal_capabilities() {
    let unit = unit_capabilities();
    assert_eq!(unit, ["CAP_BPF", "CAP_PERFMON", "CAP_SYSLOG"]);
    let ambient = deploy("lockscope.service")
        .lines()
        .find_map(|l| l.strip_prefix("AmbientCapabilities=").map(str::to_owned))
        .unwrap();
    assert_eq!(ambient.split_whitespace().collect::<Vec<_>>(), unit);
    let ds = deploy("kubernetes/daemonset.yaml");
    let k8s: Vec<String> = unit.iter().map(|c| format!("\"{}\"", &c[4..])).collect();
    assert!(
        ds.contains(&format!("add: [{}]", k8s.join(", "))),
        "daemonset adds {k8s:?}"
    );
    assert!(ds.contains("drop: [\"ALL\"]"));
    assert!(ds.contains("privileged: false") && ds.contains("hostPID: true"));
    assert!(ds.contains("args: [\"serve\", \"--config\""));
    assert!(!ds.contains("CAP_SYS_ADMIN") && !unit.iter().any(|c| c == "CAP_SYS_ADMIN"));
}

/// The DaemonSet serves on the node's loopback only and mounts no service-account token;
/// the systemd unit listens on loopback and allows only loopback peers.
#[test]
fn deployments_expose_nothing_beyond_the_node() {
    let ds = deploy("kubernetes/daemonset.yaml");
    assert!(ds.contains("listen = \"127.0.0.1:9464\""), "{ds}");
    assert!(!ds.contains("0.0.0.0"), "{ds}");
    assert!(ds.contains("hostNetwork: true"));
    assert!(ds.contains("automountServiceAccountToken: false"));
    let unit = deploy("lockscope.service");
    assert!(unit.contains("serve --listen 127.0.0.1:9464"));
    assert!(unit.contains("IPAddressDeny=any") && unit.contains("IPAddressAllow=localhost"));
}

/// `systemd-analyze security` rates the unit at most 2.5.
#[test]
fn the_systemd_unit_is_tightly_confined() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/lockscope.service");
    let out = std::process::Command::new("systemd-analyze")
        .args(["security", "--offline=yes"])
        .arg(&path)
        .output()
        .expect("systemd-analyze (package systemd, installed by cargo xtask setup)");
    let text = String::from_utf8_lossy(&out.stdout);
    let level: f64 = text
        .lines()
        .find_map(|l| l.split("exposure level for lockscope.service: ").nth(1))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{text}"));
    assert!(level <= 2.5, "exposure {level}:\n{text}");
}
