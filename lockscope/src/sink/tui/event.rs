//! Input: a thread that reads terminal events and hands key presses and resizes to the
//! main loop. Stopped when dropped.
//!
//! The thread waits on the terminal itself (poll(2)) and calls crossterm's reader only
//! while the terminal is there: once a terminal hangs up (its window closed, its tmux
//! session or ssh connection killed) it stays readable forever, and crossterm's Unix
//! event source then re-reads it in a loop that no timeout ends (crossterm issue 793).
//! A hang-up is reported as [`Event::HungUp`] instead, and the live view ends.

use std::{
    fs::File,
    io::IsTerminal as _,
    os::fd::{AsFd, AsRawFd as _, BorrowedFd},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc::{self, Receiver, RecvTimeoutError},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use ratatui::crossterm::event::{self, Event as TermEvent, KeyEvent, KeyEventKind};

#[derive(Debug)]
pub enum Event {
    Key(KeyEvent),
    /// The terminal changed size: redraw.
    Resize,
    /// Reading the terminal failed; the input thread has stopped.
    Failed(String),
    /// The terminal is gone (hung up); the input thread has stopped.
    HungUp,
    /// SIGTERM or SIGHUP arrived (see [`crate::signals`]): quit.
    Terminate(&'static str),
}

pub struct Events {
    rx: Receiver<Event>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// How often the input thread checks whether it should stop.
const POLL: Duration = Duration::from_millis(50);

/// How long dropping [`Events`] waits for the input thread. It only overruns this when
/// stuck in crossterm on a terminal that hung up between two checks; it is left behind
/// then and ends with the process.
const JOIN_WAIT: Duration = Duration::from_millis(250);

/// The terminal crossterm reads: standard input when it is one, else `/dev/tty`.
enum Tty {
    Stdin,
    Dev(File),
}

/// An error that means the terminal hung up: reads and writes on a terminal whose other
/// side is gone fail with EIO, and opening it (no controlling terminal left) with ENXIO.
pub fn is_hang_up(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENXIO | libc::EIO))
}

impl Tty {
    fn open() -> std::io::Result<Self> {
        if std::io::stdin().is_terminal() {
            Ok(Tty::Stdin)
        } else {
            File::options()
                .read(true)
                .write(true)
                .open("/dev/tty")
                .map(Tty::Dev)
        }
    }

    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            // SAFETY: standard input stays open for the life of the process.
            Tty::Stdin => unsafe { BorrowedFd::borrow_raw(0) },
            Tty::Dev(f) => f.as_fd(),
        }
    }
}

/// What the terminal did within one wait.
#[derive(Debug, PartialEq, Eq)]
enum Ready {
    Input,
    Timeout,
    HungUp,
}

/// Wait up to `timeout` for input on `fd`.
fn wait(fd: BorrowedFd<'_>, timeout: Duration) -> std::io::Result<Ready> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd for the duration of the call.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return if e.kind() == std::io::ErrorKind::Interrupted {
            Ok(Ready::Timeout)
        } else {
            Err(e)
        };
    }
    Ok(classify(n, p.revents))
}

fn classify(n: libc::c_int, revents: libc::c_short) -> Ready {
    if n == 0 {
        Ready::Timeout
    } else if revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
        Ready::HungUp
    } else {
        Ready::Input
    }
}

impl Events {
    pub fn start() -> Self {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("lockscope-input".into())
            .spawn(move || {
                let tty = match Tty::open() {
                    Ok(t) => t,
                    // The terminal hung up before this thread began (a slow start): the
                    // session has no terminal left to open.
                    Err(e) if is_hang_up(&e) => {
                        let _ = tx.send(Event::HungUp);
                        return;
                    }
                    Err(e) => {
                        let _ = tx.send(Event::Failed(format!("opening the terminal: {e}")));
                        return;
                    }
                };
                while !stop_flag.load(Ordering::Relaxed) {
                    if let Some(sig) = crate::signals::requested() {
                        let _ = tx.send(Event::Terminate(sig));
                        return;
                    }
                    match wait(tty.fd(), POLL) {
                        Ok(Ready::HungUp) => {
                            let _ = tx.send(Event::HungUp);
                            return;
                        }
                        Err(e) => {
                            let _ = tx.send(Event::Failed(e.to_string()));
                            return;
                        }
                        // Keys after input; a resize (SIGWINCH) can be pending either way.
                        Ok(Ready::Input | Ready::Timeout) => {}
                    }
                    if !forward_pending(&tx) {
                        return;
                    }
                }
            })
            .expect("spawning the input thread");
        Self {
            rx,
            stop,
            thread: Some(thread),
        }
    }

    /// The next input event, or `None` when `deadline` passes first.
    pub fn next_until(&self, deadline: Instant) -> Option<Event> {
        let wait = deadline.saturating_duration_since(Instant::now());
        match self.rx.recv_timeout(wait) {
            Ok(ev) => Some(ev),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                Some(Event::Failed("terminal input stopped".into()))
            }
        }
    }
}

/// Hand every event crossterm has ready to the main loop without waiting. False when
/// the thread should stop (the main loop is gone, or reading failed).
fn forward_pending(tx: &mpsc::Sender<Event>) -> bool {
    loop {
        let ev = match event::poll(Duration::ZERO) {
            Ok(false) => return true,
            Ok(true) => match event::read() {
                Ok(TermEvent::Key(k)) if k.kind != KeyEventKind::Release => Event::Key(k),
                Ok(TermEvent::Resize(..)) => Event::Resize,
                Ok(_) => continue,
                Err(e) => Event::Failed(e.to_string()),
            },
            Err(e) => Event::Failed(e.to_string()),
        };
        let failed = matches!(ev, Event::Failed(_));
        if tx.send(ev).is_err() || failed {
            return false;
        }
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let Some(t) = self.thread.take() else { return };
        let deadline = Instant::now() + JOIN_WAIT;
        while !t.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        if t.is_finished() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hang_up_is_told_apart_from_input_and_timeouts() {
        assert_eq!(classify(0, 0), Ready::Timeout);
        assert_eq!(classify(1, libc::POLLIN), Ready::Input);
        // A hung-up terminal reports itself readable too: the hang-up wins.
        assert_eq!(classify(1, libc::POLLIN | libc::POLLHUP), Ready::HungUp);
        assert_eq!(classify(1, libc::POLLERR), Ready::HungUp);
        assert_eq!(classify(1, libc::POLLNVAL), Ready::HungUp);
    }

    /// A real pseudo-terminal: input is seen, and closing the other side is a hang-up
    /// (not input, which is what sent crossterm's reader spinning).
    #[test]
    fn a_closed_pseudo_terminal_is_a_hang_up() {
        use std::io::Write as _;
        let (master, slave) = crate::sink::tui::terminal::open_pty(45, 160).unwrap();
        assert_eq!(
            wait(slave.as_fd(), Duration::from_millis(10)).unwrap(),
            Ready::Timeout
        );
        File::from(master.try_clone().unwrap())
            .write_all(b"q\n")
            .unwrap();
        assert_eq!(
            wait(slave.as_fd(), Duration::from_secs(5)).unwrap(),
            Ready::Input
        );
        drop(master);
        assert_eq!(
            wait(slave.as_fd(), Duration::from_secs(5)).unwrap(),
            Ready::HungUp
        );
        // A frame drawn now fails, and the failure reads as the same hang-up.
        let err = File::from(slave.try_clone().unwrap())
            .write_all(b"frame")
            .unwrap_err();
        assert!(is_hang_up(&err), "{err}");
        assert!(!is_hang_up(&std::io::Error::from_raw_os_error(
            libc::EAGAIN
        )));
    }
}
