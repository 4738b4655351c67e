//! Terminal setup and restore: raw mode and the alternate screen on the way in; on the
//! way out (normal exit, error, or panic) the terminal is given back as it was.
//!
//! Frames reach the terminal whole: they are buffered and written at once, inside a
//! synchronized update (DEC mode 2026) for terminals that support it, so that neither
//! a person nor a screen reader (tmux `capture-pane`) sees a half-drawn frame.

use std::{
    io::{self, BufWriter, Stdout, Write as _},
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    sync::{
        Once,
        atomic::{AtomicBool, Ordering},
    },
};

use ratatui::{
    Frame, Terminal,
    backend::{ClearType, CrosstermBackend, WindowSize},
    buffer::Cell,
    crossterm::{
        cursor, execute, queue,
        terminal::{
            BeginSynchronizedUpdate, EndSynchronizedUpdate, EnterAlternateScreen,
            LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
        },
    },
    layout::{Position, Size},
};

/// Large enough for any frame of a big terminal: each frame is one write.
const FRAME_BUFFER: usize = 1 << 20;

/// crossterm's backend, except that the cursor position is the one last set, never
/// asked of the terminal. ratatui asks for it to clear the screen (at start, on each
/// resize) and crossterm waits up to 2 s for the answer, then fails; the answer is
/// terminal input, and beside a load that starves the kernel's terminal worker (see
/// docs/top.md) it came too late and `top` failed to start ("The cursor position could
/// not be read within a normal duration"). In the alternate screen the position
/// ratatui restores after clearing is its own anyway.
pub struct Backend {
    inner: CrosstermBackend<BufWriter<Stdout>>,
    cursor: Position,
}

impl io::Write for Backend {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        io::Write::flush(&mut self.inner)
    }
}

impl ratatui::backend::Backend for Backend {
    type Error = io::Error;

    fn draw<'a, I>(&mut self, content: I) -> io::Result<()>
    where
        I: Iterator<Item = (u16, u16, &'a Cell)>,
    {
        self.inner.draw(content)
    }
    fn hide_cursor(&mut self) -> io::Result<()> {
        self.inner.hide_cursor()
    }
    fn show_cursor(&mut self) -> io::Result<()> {
        self.inner.show_cursor()
    }
    fn get_cursor_position(&mut self) -> io::Result<Position> {
        Ok(self.cursor)
    }
    fn set_cursor_position<P: Into<Position>>(&mut self, position: P) -> io::Result<()> {
        self.cursor = position.into();
        self.inner.set_cursor_position(self.cursor)
    }
    fn clear(&mut self) -> io::Result<()> {
        self.inner.clear()
    }
    fn clear_region(&mut self, clear_type: ClearType) -> io::Result<()> {
        self.inner.clear_region(clear_type)
    }
    fn size(&self) -> io::Result<Size> {
        self.inner.size()
    }
    fn window_size(&mut self) -> io::Result<WindowSize> {
        self.inner.window_size()
    }
    fn flush(&mut self) -> io::Result<()> {
        ratatui::backend::Backend::flush(&mut self.inner)
    }
}

/// Whether the terminal is ours right now (raw mode, alternate screen).
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// The live terminal. Dropping it restores the terminal.
pub struct Tui {
    pub terminal: Terminal<Backend>,
}

impl Tui {
    /// Draw one frame, written to the terminal in one piece.
    pub fn draw(&mut self, render: impl FnOnce(&mut Frame)) -> io::Result<()> {
        queue!(self.terminal.backend_mut(), BeginSynchronizedUpdate)?;
        self.terminal.draw(render)?;
        let out = self.terminal.backend_mut();
        queue!(out, EndSynchronizedUpdate)?;
        out.flush()
    }
}

/// Take over the terminal. A panic from here on restores it before the panic message is
/// printed, so the message stays readable.
pub fn enter() -> anyhow::Result<Tui> {
    install_panic_hook();
    enable_raw_mode().map_err(|e| anyhow::anyhow!("cannot use this terminal: {e}"))?;
    ACTIVE.store(true, Ordering::SeqCst);
    // From here on, any failure must give the terminal back.
    let setup = || -> io::Result<Terminal<Backend>> {
        execute!(io::stdout(), EnterAlternateScreen, cursor::Hide)?;
        let out = BufWriter::with_capacity(FRAME_BUFFER, io::stdout());
        let mut t = Terminal::new(Backend {
            inner: CrosstermBackend::new(out),
            cursor: Position::ORIGIN,
        })?;
        t.clear()?;
        Ok(t)
    };
    match setup() {
        Ok(terminal) => Ok(Tui { terminal }),
        Err(e) => {
            restore();
            Err(anyhow::anyhow!("cannot use this terminal: {e}"))
        }
    }
}

/// Leave the alternate screen, show the cursor, leave raw mode. Does nothing when the
/// terminal is not ours (already restored).
pub fn restore() {
    if !ACTIVE.swap(false, Ordering::SeqCst) {
        return;
    }
    let _ = execute!(io::stdout(), LeaveAlternateScreen, cursor::Show);
    let _ = disable_raw_mode();
}

fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}

impl Drop for Tui {
    fn drop(&mut self) {
        restore();
    }
}

/// A pseudo-terminal of `rows` x `cols`: (master, slave), both close-on-exec (a child
/// that inherited the master would keep the terminal up after its owner closed it). For
/// driving the live view from tests and harnesses.
pub fn open_pty(rows: u16, cols: u16) -> io::Result<(OwnedFd, OwnedFd)> {
    let (mut master, mut slave) = (0, 0);
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty writes two descriptors; null name and termios, a valid winsize.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &ws,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: descriptors openpty just gave us, owned by no one else.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    for fd in [&master, &slave] {
        // SAFETY: fcntl on a descriptor we own.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((master, slave))
}
