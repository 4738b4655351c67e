//! One module per source of events.

pub mod contention;
pub mod feature;
pub mod futex;
pub mod rwsem;
pub mod sched;
pub mod spin;
