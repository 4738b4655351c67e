//! Input: a thread that reads terminal events and hands key presses and resizes to the
//! main loop. Stopped and joined when dropped.

use std::{
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

impl Events {
    pub fn start() -> Self {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("lockscope-input".into())
            .spawn(move || {
                while !stop_flag.load(Ordering::Relaxed) {
                    if let Some(sig) = crate::signals::requested() {
                        let _ = tx.send(Event::Terminate(sig));
                        break;
                    }
                    let ev = match event::poll(POLL) {
                        Ok(false) => continue,
                        Ok(true) => match event::read() {
                            Ok(TermEvent::Key(k)) if k.kind != KeyEventKind::Release => {
                                Event::Key(k)
                            }
                            Ok(TermEvent::Resize(..)) => Event::Resize,
                            Ok(_) => continue,
                            Err(e) => Event::Failed(e.to_string()),
                        },
                        Err(e) => Event::Failed(e.to_string()),
                    };
                    let failed = matches!(ev, Event::Failed(_));
                    if tx.send(ev).is_err() || failed {
                        break;
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

impl Drop for Events {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
