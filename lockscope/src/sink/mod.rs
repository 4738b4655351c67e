//! Sinks of the pipeline: the report renderings (table, JSON, CSV).

pub mod report;
pub mod tui;
