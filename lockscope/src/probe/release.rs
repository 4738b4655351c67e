//! Releasing perf-event attachments without making the user wait.
//!
//! Closing the last reference to a tracepoint perf event (the futex syscall tracepoints
//! are perf events) waits for an RCU grace period, one after the other under one kernel
//! mutex: about 70 ms each here, most of a second for the dozen lockscope attaches, and
//! far longer while something like a ptrace storm stretches grace periods. So when
//! lockscope is done, a small child process forked with a copy of the descriptors holds
//! those references until lockscope has exited, then lets them go: lockscope's own closes
//! are cheap (not the last reference) and the shell gets its prompt back at once.
//!
//! The probes behind those attachments are gated off before this (`FUTEX_GATE`,
//! `RT_GATE`), so nothing more is recorded in between.

/// Fork the keeper. Returns false when it could not be forked (then the caller detaches
/// the slow way). The child calls only async-signal-safe functions: it closes every
/// descriptor that is not an anonymous inode (files, sockets, pipes, the terminal: a
/// pipe reader sees its end of file, a listening port is free at once), waits until its
/// parent has exited (it is then reparented) and exits, releasing what it held.
pub fn keep_until_exit() -> bool {
    // SAFETY: plain libc calls; after fork the child runs only async-signal-safe calls
    // (setsid, prctl, fstat, close, getppid, nanosleep, _exit) and never returns.
    unsafe {
        let parent = libc::getpid();
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let max_fd = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            (lim.rlim_cur as i64).clamp(1024, 65536) as i32
        } else {
            4096
        };
        match libc::fork() {
            -1 => false,
            0 => {
                libc::setsid();
                libc::prctl(libc::PR_SET_NAME, c"lockscope-bg".as_ptr());
                let mut st: libc::stat = std::mem::zeroed();
                for fd in 0..max_fd {
                    if libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT != 0 {
                        libc::close(fd);
                    }
                }
                let tick = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 20_000_000,
                };
                // At most ten minutes: a parent that lives on does not need us.
                for _ in 0..30_000 {
                    if libc::getppid() != parent {
                        break;
                    }
                    libc::nanosleep(&tick, std::ptr::null_mut());
                }
                libc::_exit(0)
            }
            _ => true,
        }
    }
}

/// The comm of the keeper.
const KEEPER_COMM: &str = "lockscope-bg";

/// Pids of the keepers releasing an earlier run's attachments: alive (not zombies),
/// and left by the run that forked them (reparented), which is when they let go; a
/// keeper whose run is still going only holds.
pub fn keepers() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let comm = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|c| c.trim_end().to_owned())
    };
    let mut pids: Vec<u32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| comm(pid).is_ok_and(|c| c == KEEPER_COMM))
        .filter(|&pid| {
            let Some((state, ppid)) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .as_deref()
                .and_then(super::features::state_and_parent)
            else {
                return false;
            };
            state != 'Z' && comm(ppid).is_ok_and(|c| c != "lockscope")
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// What a start that is taking long tells the user, given the keepers alive.
pub fn slow_start_note(after_s: u64, keepers: &[u32]) -> String {
    let head = format!("lockscope: still attaching after {after_s} s");
    if keepers.is_empty() {
        return format!("{head} (the kernel's verifier and allocator: a busy machine slows them)");
    }
    let pids: Vec<String> = keepers.iter().map(u32::to_string).collect();
    format!(
        "{head}: the kernel is releasing an earlier run's futex tracepoints ({KEEPER_COMM}, \
         pid {}), one grace period each under a kernel mutex that attaching them needs too; \
         heavy ptrace or system-call load stretches that to tens of seconds",
        pids.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_start_names_the_keepers_it_waits_behind() {
        let n = slow_start_note(2, &[41, 7]);
        assert!(
            n.starts_with("lockscope: still attaching after 2 s: "),
            "{n}"
        );
        assert!(n.contains("(lockscope-bg, pid 41, 7)"), "{n}");
        let n = slow_start_note(2, &[]);
        assert!(!n.contains("lockscope-bg"), "{n}");
        assert!(n.contains("verifier"), "{n}");
    }

    #[test]
    fn keepers_are_found_by_their_name() {
        // A process whose comm is the keeper's: `sleep`, copied under that name.
        let dir = std::env::temp_dir().join(format!("lockscope-keepers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join(KEEPER_COMM);
        std::fs::copy("/bin/sleep", &exe).unwrap();
        let mut child = std::process::Command::new(&exe).arg("30").spawn().unwrap();
        let found = (0..100).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            keepers().contains(&child.id())
        });
        let _ = child.kill();
        let _ = child.wait();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(found, "pid {} not among {:?}", child.id(), keepers());
        assert!(!keepers().contains(&child.id()));
    }
}
