//! pthread attribution, the reading side: a thread drains `PTHREAD_EVENTS` every poll
//! period, and at once when the kernel side wakes it (once the ring holds an eighth of
//! its size, so a burst never waits for the next snapshot), unwinds each wait's user
//! stack and counts it in the shared [`PthreadTally`].
//!
//! Unwinding happens here, in userspace, so the kernel side stays one copy per blocking
//! futex call. A process's maps are read when its first wait arrives (or earlier, through
//! [`PthreadReader::remember`]), so its waits are attributed even after it exits.

use std::{
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread::JoinHandle,
};

use anyhow::Context as _;
use aya::maps::{HashMap as BpfHashMap, Map, MapData, RingBuf};
use lockscope_common::{PthreadSkipKey, PthreadWaitEvent};

use crate::{
    aggregate::pthread::{PthreadTally, WaitAttribution},
    symbolize::unwind::{StackUnwinder, Unwound},
};

/// What the reader thread shares with the session.
#[derive(Default)]
struct Shared {
    tally: PthreadTally,
    libraries: Vec<String>,
}

enum Request {
    /// Read a process's maps now (a launched or named target).
    Remember(u32),
    /// Forget a process (it exited and was forgotten by the session).
    Forget(u32),
}

/// The running reader; stopped (after a last drain) by [`PthreadReader::stop`] or drop.
pub struct PthreadReader {
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    wake: Arc<Wake>,
    requests: mpsc::Sender<Request>,
    thread: Option<JoinHandle<()>>,
}

/// How long the reader sleeps in poll: the longest a wait stays in the ring buffer while
/// the ring holds less than an eighth of its size (the kernel side does not wake the
/// reader for each wait: that cost each wait a self-interrupt and a switch). It also
/// wakes when told to stop or to read a process's maps.
const POLL_MS: i32 = 50;

impl PthreadReader {
    /// Start on the `PTHREAD_EVENTS` ring buffer and the `PTHREAD_SKIP` map; `libc` (the
    /// system's C library) and the maps of `pids` are read before the first wait.
    pub fn start(
        events: Map,
        skip: Map,
        libc: Option<std::path::PathBuf>,
        pids: &[u32],
    ) -> anyhow::Result<Self> {
        let mut ring = RingBuf::try_from(events).context("PTHREAD_EVENTS ring buffer")?;
        let mut skip: BpfHashMap<MapData, PthreadSkipKey, u8> =
            BpfHashMap::try_from(skip).context("PTHREAD_SKIP map")?;
        let shared = Arc::new(Mutex::new(Shared::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let wake = Arc::new(Wake::new());
        let (tx, rx) = mpsc::channel();
        for &pid in pids {
            let _ = tx.send(Request::Remember(pid));
        }
        let thread = {
            let shared = shared.clone();
            let stop = stop.clone();
            let wake = wake.clone();
            std::thread::Builder::new()
                .name("pthread-unwind".into())
                .spawn(move || {
                    crate::boost::set_thread_nice(READER_NICE);
                    let mut unwinder = StackUnwinder::new();
                    if let Some(path) = libc {
                        unwinder.preload_libc(&path);
                    }
                    run(
                        &mut unwinder,
                        &mut ring,
                        &mut skip,
                        &shared,
                        &stop,
                        &wake,
                        &rx,
                    )
                })
                .context("starting the pthread unwinding thread")?
        };
        Ok(Self {
            shared,
            stop,
            wake,
            requests: tx,
            thread: Some(thread),
        })
    }

    /// Read process `pid`'s maps now, so its waits unwind even if it exits early.
    ///
    /// The thread is woken for it: a launched command is remembered right after its
    /// loader maps the C library, before its own work begins. Read a poll period later,
    /// the maps were read while a command that changes its mappings ran, and where a
    /// mapping was being changed the kernel read them under the command's `mmap_lock`
    /// (a reader that held up its writers, and was blamed for their waits).
    pub fn remember(&self, pid: u32) {
        let _ = self.requests.send(Request::Remember(pid));
        self.wake.wake();
    }

    /// Forget the waits and maps of these processes.
    pub fn forget(&self, pids: &[u32]) {
        let mut s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        s.tally.forget(|tgid| pids.contains(&tgid));
        drop(s);
        for &pid in pids {
            let _ = self.requests.send(Request::Forget(pid));
        }
    }

    /// (tgid, call site) of every site so far.
    pub fn site_keys(&self) -> Vec<(u32, u64)> {
        let s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        s.tally.sites.keys().map(|k| (k.tgid, k.site)).collect()
    }

    /// The tally so far and the C libraries unwound through.
    pub fn snapshot(&self) -> (PthreadTally, Vec<String>) {
        let s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        (s.tally.clone(), s.libraries.clone())
    }

    /// Drain what is left and stop the thread (the probes are detached first).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.wake.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for PthreadReader {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The reader keeps up with the waits of busy workloads only if it gets the CPU: at
/// nice 0 on a machine whose CPUs the traced threads keep busy it gets a share of one in
/// five and the ring buffer fills (counted, `pthread_ring_full`). A little more weight
/// than the workload's threads; its work is bounded by the waits it reads. Without
/// CAP_SYS_NICE the call fails and the thread stays at nice 0.
const READER_NICE: i32 = -5;

/// Wakes the reading thread out of its wait at once when it is told to stop or to read a
/// process's maps (an eventfd polled beside the ring buffer), so neither waits out a
/// poll period.
struct Wake(Option<OwnedFd>);

impl Wake {
    fn new() -> Self {
        // SAFETY: a plain syscall; the result is a new descriptor we own, or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        // SAFETY: fd is a fresh descriptor no one else owns.
        Self((fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The descriptor to poll, -1 (ignored by poll) without one.
    fn fd(&self) -> i32 {
        self.0.as_ref().map_or(-1, |f| f.as_raw_fd())
    }

    fn wake(&self) {
        if let Some(f) = &self.0 {
            let one = 1u64.to_ne_bytes();
            // SAFETY: writes 8 bytes from a live buffer to our eventfd.
            let _ = unsafe { libc::write(f.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        }
    }

    /// Reset the count after a wake-up, so that the next poll waits again.
    fn clear(&self) {
        if let Some(f) = &self.0 {
            let mut count = [0u8; 8];
            // SAFETY: reads 8 bytes into a live buffer from our non-blocking eventfd.
            let _ = unsafe { libc::read(f.as_raw_fd(), count.as_mut_ptr().cast(), count.len()) };
        }
    }
}

fn run(
    unwinder: &mut StackUnwinder,
    ring: &mut RingBuf<MapData>,
    skip: &mut BpfHashMap<MapData, PthreadSkipKey, u8>,
    shared: &Mutex<Shared>,
    stop: &AtomicBool,
    wake: &Wake,
    requests: &mpsc::Receiver<Request>,
) {
    let mut batch: Vec<(PthreadWaitEvent, WaitAttribution)> = Vec::new();
    let mut malformed = 0u64;
    loop {
        let stopping = stop.load(Ordering::Acquire);
        while let Ok(r) = requests.try_recv() {
            match r {
                Request::Remember(pid) => unwinder.remember(pid),
                Request::Forget(pid) => unwinder.forget(pid),
            }
        }
        while let Some(item) = ring.next() {
            if item.len() < size_of::<PthreadWaitEvent>() {
                malformed += 1;
                continue;
            }
            // SAFETY: PthreadWaitEvent is repr(C) plain integers; the record is its size.
            let ev = unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<PthreadWaitEvent>()) };
            drop(item);
            let a = match unwinder.unwind(&ev) {
                Unwound::Lock { func, site } => WaitAttribution::Lock { func, site },
                Unwound::NotALock { site_never_a_lock } => {
                    if site_never_a_lock {
                        // Later waits made there are counted by the kernel, not sent.
                        let key = PthreadSkipKey {
                            ip: ev.ip,
                            tgid: ev.tgid,
                            _pad: 0,
                        };
                        let _ = skip.insert(key, 1, 0);
                    }
                    WaitAttribution::NotALock
                }
                Unwound::NoMaps => WaitAttribution::NoMaps,
            };
            batch.push((ev, a));
            if batch.len() >= 1024 {
                flush(shared, &mut batch, &mut malformed, unwinder);
            }
        }
        flush(shared, &mut batch, &mut malformed, unwinder);
        if stopping {
            return;
        }
        let mut pfd = [ring.as_raw_fd(), wake.fd()].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        // SAFETY: two valid pollfds (a negative fd is ignored).
        unsafe { libc::poll(pfd.as_mut_ptr(), pfd.len() as libc::nfds_t, POLL_MS) };
        if pfd[1].revents & libc::POLLIN != 0 {
            wake.clear();
        }
    }
}

fn flush(
    shared: &Mutex<Shared>,
    batch: &mut Vec<(PthreadWaitEvent, WaitAttribution)>,
    malformed: &mut u64,
    unwinder: &StackUnwinder,
) {
    if batch.is_empty() && *malformed == 0 {
        return;
    }
    let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
    for (ev, a) in batch.drain(..) {
        if let WaitAttribution::Lock { func, .. } = a {
            s.tally
                .add_owner(ev.tgid, ev.uaddr, func, ev.waited, ev.owner, ev.wait_ns);
            // A holder's name, read once while it (likely) still runs.
            let comms = &mut s.tally.owners.comms;
            if ev.owner != 0
                && !comms.contains_key(&ev.owner)
                && let Some(c) = super::thread_comm(ev.tgid, ev.owner)
            {
                comms.insert(ev.owner, c);
            }
        }
        s.tally.add(ev.tgid, ev.uaddr, ev.wait_ns, ev.waited, a);
    }
    s.tally.counters.malformed += std::mem::take(malformed);
    s.libraries = unwinder.libraries();
}
