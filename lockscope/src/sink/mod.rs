//! Sinks of the pipeline: the report renderings (table, JSON, CSV).

pub mod events;
pub mod report;
