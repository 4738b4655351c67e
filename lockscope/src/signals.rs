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

/// After a hang-up (the terminal's window closed, its tmux server or ssh connection
/// killed): standard input, output and error that are a terminal that hung up now point to
/// `/dev/null`. What is left to write (the restored screen, notes, the report) then goes
/// nowhere, where `print!` and `eprintln!` would panic on the dead terminal, and the
/// files a run writes are still written. Descriptors that are not a hung-up terminal
/// (a live one, a pipe, a file) are left alone.
pub fn release_hung_up_terminal() {
    for fd in 0..=2 {
        if is_hung_up_terminal(fd) {
            // SAFETY: open(2) of a constant path; dup2(2) onto a standard descriptor
            // and close(2) of the one just opened.
            unsafe {
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
                if null >= 0 {
                    libc::dup2(null, fd);
                    libc::close(null);
                }
            }
        }
    }
}

/// A character device reporting a hang-up or an error: a terminal that is gone. (A
/// pipe whose writer closed reports POLLHUP too, hence the device check.)
fn is_hung_up_terminal(fd: libc::c_int) -> bool {
    // SAFETY: stat is plain data; zeroed is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into a valid stat; an invalid descriptor only fails.
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFCHR {
        return false;
    }
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; no wait.
    let ready = unsafe { libc::poll(&mut p, 1, 0) };
    ready > 0 && p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
}
