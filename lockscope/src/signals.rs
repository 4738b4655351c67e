//! SIGTERM and SIGHUP as requests to stop cleanly, for loops that are not tokio's (the
//! live view's): the handler only notes the signal; the loop sees it within its poll
//! interval, restores the terminal and exits.

use std::sync::atomic::{AtomicI32, Ordering};

static REQUESTED: AtomicI32 = AtomicI32::new(0);

extern "C" fn note(sig: libc::c_int) {
    // Async-signal-safe: one atomic store.
    REQUESTED.store(sig, Ordering::Relaxed);
}

/// From now on SIGTERM and SIGHUP are noted instead of killing the process.
pub fn catch_terminate() {
    for sig in [libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction with a handler that only stores an atomic.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = note as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// The stop signal received, if any.
pub fn requested() -> Option<&'static str> {
    match REQUESTED.load(Ordering::Relaxed) {
        libc::SIGTERM => Some("SIGTERM"),
        libc::SIGHUP => Some("SIGHUP"),
        _ => None,
    }
}
