//! Sinks of the pipeline: the report renderings (table, JSON, CSV, HTML).

pub mod html;
pub mod report;
pub mod tui;
