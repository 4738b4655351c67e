//! The privileged edge: kernel feature probing, BTF offsets, loading and attaching.

pub mod btf;
pub mod features;
pub mod groups;
pub mod hooks;
pub mod loader;
pub mod pthread;
pub mod release;
pub mod rt;
pub mod rwsem;
pub mod spin;

pub use loader::{FutexMode, LoadOptions, Probes, Target};
