//! Sinks of the pipeline: the report renderings (table, JSON, CSV, HTML), Prometheus
//! metrics, and the live TUI.

pub mod html;

pub mod escape;
pub mod events;
pub mod folded;
pub mod output;
pub mod pprof;
pub mod prometheus;
pub mod redact;
pub mod report;
pub mod rt;
pub mod spin;
pub mod tui;
