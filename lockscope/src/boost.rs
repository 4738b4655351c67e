//! A higher CPU weight for the work a user waits on: loading and attaching the probes,
//! and what follows the detach at the stop (the last read, the report).
//!
//! Both are short bursts of CPU (a few hundred milliseconds here, most of it the kernel's
//! verifier). On a machine whose CPUs are busy they get a fair share of what is left:
//! beside `stress-ng --ptrace 4` started from the same shell, `record -- true` took
//! 1.1-1.5 s at nice 0 against 0.39-0.66 s at nice -10, and the stop's last read and
//! report take up to about 0.1 s of CPU. So the thread doing that work runs at
//! [`BOOST_NICE`] meanwhile (the loader's threads inherit it, and end with the start).
//! Between the two, while tracing, every thread lockscope keeps is back at the nice it
//! was started with: the command `record` runs, and any thread created then, inherit
//! nothing; so is the keeper the detach may fork (`probe::release`). Only the
//! scheduler's fair class is concerned; real-time threads (cyclictest) come first anyway.
//!
//! A user who started lockscope at a positive nice asked for less CPU: no boost then.
//! Without `CAP_SYS_NICE` the call fails and the thread stays where it was.

/// The nice of the start and the stop.
pub const BOOST_NICE: i32 = -10;

/// The nice to set for a thread at `current`, if any: [`BOOST_NICE`] unless the user
/// asked for less (a positive nice) or the thread already has at least that weight.
pub fn boosted_nice(current: i32) -> Option<i32> {
    (current <= 0 && current > BOOST_NICE).then_some(BOOST_NICE)
}

fn gettid() -> libc::id_t {
    // SAFETY: a plain syscall without arguments.
    unsafe { libc::syscall(libc::SYS_gettid) as libc::id_t }
}

/// The calling thread's nice; `None` if it cannot be read.
pub fn thread_nice() -> Option<i32> {
    // getpriority returns the nice itself, and -1 both for nice -1 and for an error:
    // errno tells them apart.
    // SAFETY: plain libc calls on the calling thread; errno is thread-local.
    unsafe {
        *libc::__errno_location() = 0;
        let n = libc::getpriority(libc::PRIO_PROCESS, gettid());
        (*libc::__errno_location() == 0).then_some(n)
    }
}

/// Set the calling thread's nice; false if refused (no `CAP_SYS_NICE` to lower it).
pub fn set_thread_nice(nice: i32) -> bool {
    // SAFETY: setpriority on the calling thread, no pointers.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, gettid(), nice) == 0 }
}

/// The calling thread at [`BOOST_NICE`] while this lives; back at its nice when dropped.
/// Threads it creates meanwhile inherit the boost: only for threads that end with it.
pub struct Boost {
    restore: Option<i32>,
}

impl Boost {
    pub fn new() -> Self {
        let restore = thread_nice()
            .and_then(|now| boosted_nice(now).map(|to| (now, to)))
            .and_then(|(now, to)| set_thread_nice(to).then_some(now));
        Self { restore }
    }

    /// Keep the boost until the thread ends (after the stop: the process exits).
    pub fn until_exit(mut self) {
        self.restore = None;
    }
}

impl Default for Boost {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Boost {
    fn drop(&mut self) {
        if let Some(nice) = self.restore {
            set_thread_nice(nice);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boosts_from_the_default_and_never_against_the_users_nice() {
        assert_eq!(boosted_nice(0), Some(BOOST_NICE));
        assert_eq!(boosted_nice(-5), Some(BOOST_NICE));
        // A user who asked for less CPU keeps it.
        assert_eq!(boosted_nice(1), None);
        assert_eq!(boosted_nice(19), None);
        // Already at least that weight: left as it is.
        assert_eq!(boosted_nice(BOOST_NICE), None);
        assert_eq!(boosted_nice(-20), None);
    }

    #[test]
    fn a_thread_that_cannot_boost_keeps_its_nice_and_a_dropped_boost_restores_it() {
        // Own thread: the test harness's threads are shared.
        std::thread::spawn(|| {
            let before = thread_nice().expect("own nice");
            let boost = Boost::new();
            let during = thread_nice().unwrap();
            // With CAP_SYS_NICE (root) the boost takes; without, nothing changes.
            match boosted_nice(before) {
                Some(to) if boost.restore.is_some() => assert_eq!(during, to),
                _ => assert_eq!(during, before),
            }
            drop(boost);
            assert_eq!(thread_nice(), Some(before));
        })
        .join()
        .unwrap();
    }
}
