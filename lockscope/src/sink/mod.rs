//! Sinks of the pipeline: the report renderings (table, JSON, CSV) and Prometheus metrics.

pub mod prometheus;
pub mod report;
