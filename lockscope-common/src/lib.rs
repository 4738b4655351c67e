//! Records shared by lockscope's eBPF probes and its userspace.
//!
//! Every type here is `#[repr(C)]`, made of integers and arrays only (no `bool`, no enums
//! with payload), and its size is asserted at compile time, so the kernel and user sides
//! agree byte for byte. Decoding on the user side rejects unknown values instead of
//! transmuting them.
#![no_std]
// The BPF target's atomics (see `shared`).
#![cfg_attr(target_arch = "bpf", feature(core_intrinsics))]
#![cfg_attr(target_arch = "bpf", allow(internal_features))]

pub mod contention;
pub mod futex;
pub mod hist;
pub mod pthread;
pub mod rt;
pub mod rwsem;
pub mod shared;
pub mod spin;

pub use contention::*;
pub use futex::*;
pub use hist::*;
pub use pthread::*;
pub use rt::*;
pub use rwsem::*;
pub use spin::*;

/// Compile-time size check for a wire record.
#[macro_export]
macro_rules! assert_size {
    ($t:ty, $n:expr) => {
        const _: () = assert!(core::mem::size_of::<$t>() == $n);
    };
}
