//! Library target so that `lockscope`'s build script can depend on this crate (and be rebuilt
//! when it changes); the probes themselves are the `lockscope` binary target.
#![no_std]
