//! A snapshot from `lockscope serve` as `top --connect` takes it: parsed, then fed to the
//! live view twice (rates against the previous one) and drawn in every view. Any panic is
//! a bug: a hostile or broken server must not take down the terminal.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use lockscope::{
    aggregate::Recording,
    sink::tui::{
        app::{App, SourceInfo},
        ui,
    },
};
use ratatui::{
    Terminal,
    backend::TestBackend,
    crossterm::event::{KeyCode, KeyEvent, KeyModifiers},
};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(rec) = Recording::from_json(text) else {
        return;
    };
    let mut app = App::new(SourceInfo {
        description: "fuzz".into(),
        interval: Duration::from_secs(1),
    });
    app.update(rec.clone());
    app.update(rec);
    let mut term = Terminal::new(TestBackend::new(120, 40)).expect("a test backend");
    for code in [
        KeyCode::Char('l'),
        KeyCode::Enter,
        KeyCode::Esc,
        KeyCode::Char('u'),
        KeyCode::Enter,
        KeyCode::Esc,
        KeyCode::Char('t'),
        KeyCode::Char('e'),
        KeyCode::Char('s'),
    ] {
        let _ = app.handle_key(KeyEvent::new(code, KeyModifiers::NONE));
        let _ = term.draw(|f| ui::draw(f, &app));
    }
});
