//! One module per source of events.

pub mod contention;
pub mod feature;
pub mod futex;
pub mod pthread;
pub mod rt;
pub mod rwsem;
pub mod sched;
pub mod spin;
