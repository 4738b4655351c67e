//! lockscope's userspace: probe -> source -> decode -> aggregate -> sinks.
//!
//! `probe` and `source` are the privileged edge; `decode`, `aggregate`, `symbolize`'s pure
//! parts and `sink` are pure and unit-tested without root.

pub mod aggregate;
pub mod boost;
pub mod cli;
pub mod cmd;
pub mod config;
pub mod decode;
pub mod errors;
pub mod family;
pub mod probe;
pub mod session;
pub mod signals;
pub mod sink;
pub mod source;
pub mod symbolize;
pub mod units;
pub mod webconfig;
pub mod workload;
