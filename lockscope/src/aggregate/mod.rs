//! Aggregation: wait statistics, the recording model, and report rows. Pure.

pub mod recording;
pub mod rows;
pub mod rwsem;
pub mod stats;

pub use recording::{Frame, LockEntry, Names, RawSnapshot, Recording};
pub use stats::WaitStats;
