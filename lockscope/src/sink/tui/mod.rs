//! `lockscope top`: the live view (ratatui).
//!
//! - `event`: the input thread (keys, resizes).
//! - `app`: state and key handling; one [`app::Mode`] drives keys and drawing.
//! - `ui`: draws a frame from the state (pure; tested with ratatui's `TestBackend`).
//! - `rt`: the log of starvation episodes and latency spikes as they arrive.
//! - `terminal`: setup and restore, also on error and panic.
//!
//! Figures (rates, deltas, percentiles) come from `aggregate::rates`, pure functions over
//! two recordings; this module only schedules refreshes.

pub mod app;
pub mod event;
pub mod rt;
pub mod terminal;
pub mod ui;

use std::time::{Duration, Instant};

use crate::aggregate::Recording;
use app::{Action, App, SourceInfo};
use event::{Event, Events};

/// Where the live view's recordings come from: a local tracing session, or a running
/// `lockscope serve`. Each call returns everything since that source started.
pub trait Feed {
    fn next(&mut self) -> anyhow::Result<Recording>;
    /// For the header: `standalone`, `connected to ADDR`.
    fn describe(&self) -> String;
}

/// Run the live view until the user quits. The first recording is fetched before the
/// terminal is taken over, so a source that does not work fails with a plain error.
pub fn run(feed: &mut dyn Feed, interval: Duration) -> anyhow::Result<()> {
    let first = feed.next()?;
    let mut app = App::new(SourceInfo {
        description: feed.describe(),
        interval,
    });
    app.update(first);

    let mut tui = terminal::enter()?;
    // SIGTERM and SIGHUP quit like `q`: the terminal is restored on the way out.
    crate::signals::catch_terminate();
    let events = Events::start();
    let mut terminated = None;
    let mut next_refresh = Instant::now() + interval;
    loop {
        if let Err(e) = tui.draw(|f| ui::draw(f, &app)) {
            // A terminal that hangs up between two events fails the next frame before
            // the input thread reports it: that is the same hang-up.
            if event::is_hang_up(&e) {
                break;
            }
            return Err(e.into());
        }
        match events.next_until(next_refresh) {
            Some(Event::Key(k)) => {
                if app.handle_key(k) == Action::Quit {
                    break;
                }
            }
            Some(Event::Resize) => match tui.terminal.autoresize() {
                Err(e) if event::is_hang_up(&e) => break,
                r => r?,
            },
            Some(Event::Failed(e)) => anyhow::bail!("reading the terminal failed: {e}"),
            Some(Event::Terminate(sig)) => {
                terminated = Some(sig);
                break;
            }
            Some(Event::HungUp) => break,
            None => {
                if !app.paused {
                    match feed.next() {
                        Ok(rec) => app.update(rec),
                        Err(e) => app.set_error(&e),
                    }
                }
                next_refresh += interval;
                let now = Instant::now();
                if next_refresh < now {
                    // A slow refresh: skip the missed ticks instead of bursting.
                    next_refresh = now + interval;
                }
            }
        }
    }
    drop(events);
    // A terminal that hung up (or sent SIGHUP for that) takes no more output.
    crate::signals::release_hung_up_terminal();
    drop(tui);
    if let Some(sig) = terminated {
        eprintln!("lockscope: {sig}: live view stopped");
    }
    Ok(())
}

#[cfg(test)]
mod tests;
