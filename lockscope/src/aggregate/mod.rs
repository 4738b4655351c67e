//! Aggregation: wait statistics, the recording model, and report rows. Pure.

pub mod cgroup;
pub mod correlate;
pub mod episode;
pub mod forget;
pub mod futex;
pub mod holders;
pub mod model;
pub mod pi_lock;
pub mod pthread;
pub mod rates;
pub mod recording;
pub mod rows;
pub mod rt;
pub mod rwsem;
pub mod series;
pub mod spin;
pub mod stats;
pub mod timeline;

pub use model::{LockEntry, Recording};
pub use recording::{Frame, Names, RawSnapshot};
pub use stats::WaitStats;
