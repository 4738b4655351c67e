//! Rendering and key-handling tests on ratatui's `TestBackend`: scripted recordings in,
//! screen text out.

use std::time::Duration;

use ratatui::{
    Terminal,
    backend::TestBackend,
    buffer::Buffer,
    crossterm::event::{KeyCode, KeyEvent, KeyModifiers},
    style::Color,
};

use super::{
    app::{Action, App, LockColumn, Mode, SourceInfo},
    ui,
};
use crate::{
    aggregate::{
        LockEntry, Recording, WaitStats,
        recording::{CallerEntry, EventCounts, Owner, SCHEMA, TaskEntry, tests::wait},
    },
    decode::LockType,
};

fn merged(parts: &[&WaitStats]) -> WaitStats {
    let mut s = WaitStats::default();
    for p in parts {
        s.merge(p);
    }
    s
}

/// A lock with one caller and the given (pid, comm, stats) waiters.
fn lock(addr: &str, t: LockType, name: &str, tasks: &[(u32, &str, WaitStats)]) -> LockEntry {
    let stats = merged(&tasks.iter().map(|(_, _, s)| s).collect::<Vec<_>>());
    LockEntry {
        addr: addr.into(),
        lock_type: t,
        user: None,
        events: None,
        spin: None,
        name: name.into(),
        owner: name.starts_with("mmap_lock").then(|| Owner {
            field: "mmap_lock".into(),
            pid: 4242,
            comm: "churn".into(),
        }),
        callers: vec![CallerEntry {
            caller: format!("caller_of_{addr}+0x10"),
            stack: vec![format!("caller_of_{addr}+0x10")],
            stats: stats.clone(),
        }],
        tasks: tasks
            .iter()
            .map(|(pid, comm, s)| TaskEntry {
                pid: *pid,
                comm: (*comm).into(),
                stats: s.clone(),
                events: None,
            })
            .collect(),
        stats,
    }
}

fn recording(duration_s: f64, lost: u64, locks: Vec<LockEntry>) -> Recording {
    Recording {
        schema: SCHEMA.into(),
        lockscope_version: "0.1.0".into(),
        kernel: "6.18.0-test".into(),
        tier: "tracepoint".into(),
        target: "system".into(),
        duration_s,
        started_at_unix_s: 1000.0,
        command_exit_code: None,
        events: EventCounts {
            begin: (duration_s * 1000.0) as u64,
            ..Default::default()
        },
        lost: [("stats_map_full".to_owned(), lost)].into(),
        locks,
        timeline: None,
        futex_events: None,
        rwsem_events: None,
        starvation_episodes: None,
        latency_spikes: None,
        spin: None,
    }
}

const MMAP: &str = "mmap_lock of churn[4242]";

/// Two refreshes one second apart. In the second interval: mmap_lock read 1000 waits of
/// 2 us (2 ms/s), mmap_lock write 10 waits of 1 ms (10 ms/s), the runqueue spinlock 500
/// waits of 300 ns, rtnl_mutex nothing.
fn scripted() -> App {
    let first = recording(
        1.0,
        0,
        vec![
            lock(
                "0x1000",
                LockType::RwsemRead,
                MMAP,
                &[(4242, "churn", wait(2_000, 100))],
            ),
            lock(
                "0x1000",
                LockType::RwsemWrite,
                MMAP,
                &[(4242, "churn", wait(1_000_000, 1))],
            ),
            lock(
                "0x2000",
                LockType::Spinlock,
                "0x2000",
                &[(7, "kworker", wait(300, 10))],
            ),
            lock(
                "0x3000",
                LockType::Mutex,
                "rtnl_mutex",
                &[(9, "ip", wait(50_000, 2))],
            ),
        ],
    );
    let second = recording(
        2.0,
        0,
        vec![
            lock(
                "0x1000",
                LockType::RwsemRead,
                MMAP,
                &[(4242, "churn", wait(2_000, 1_100))],
            ),
            lock(
                "0x1000",
                LockType::RwsemWrite,
                MMAP,
                &[
                    (4242, "churn", wait(1_000_000, 6)),
                    (4243, "churn2", wait(1_000_000, 5)),
                ],
            ),
            lock(
                "0x2000",
                LockType::Spinlock,
                "0x2000",
                &[(7, "kworker", wait(300, 510))],
            ),
            lock(
                "0x3000",
                LockType::Mutex,
                "rtnl_mutex",
                &[(9, "ip", wait(50_000, 2))],
            ),
        ],
    );
    let mut app = App::new(SourceInfo {
        description: "standalone".into(),
        interval: Duration::from_secs(1),
    });
    app.update(first);
    app.update(second);
    app
}

fn render(app: &App, w: u16, h: u16) -> Buffer {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| ui::draw(f, app)).unwrap();
    t.backend().buffer().clone()
}

fn lines(buf: &Buffer) -> Vec<String> {
    let w = buf.area.width as usize;
    buf.content
        .chunks(w)
        .map(|row| row.iter().map(|c| c.symbol()).collect::<String>())
        .collect()
}

fn screen(app: &App, w: u16, h: u16) -> String {
    lines(&render(app, w, h)).join("\n")
}

fn key(app: &mut App, code: KeyCode) -> Action {
    app.handle_key(KeyEvent::new(code, KeyModifiers::NONE))
}

fn keys(app: &mut App, s: &str) {
    for c in s.chars() {
        key(app, KeyCode::Char(c));
    }
}

/// Table rows (after the 2 header lines and the column titles), first cell trimmed.
fn table_rows(app: &App, w: u16, h: u16) -> Vec<String> {
    lines(&render(app, w, h))
        .into_iter()
        .skip(3)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

#[test]
fn table_shows_rates_of_the_last_interval() {
    let app = scripted();
    let s = screen(&app, 140, 20);
    assert!(s.contains("kernel 6.18.0-test"), "{s}");
    assert!(s.contains("tier tracepoint"), "{s}");
    assert!(s.contains("events 1.0k/s"), "{s}");
    assert!(s.contains("lost 0"), "{s}");
    assert!(s.contains("interval 1s"), "{s}");
    let rows = table_rows(&app, 140, 20);
    // Default sort: wait/s. Write: 10 waits of 1 ms in 1 s = 10 ms/s, 2 waiters.
    assert_eq!(
        rows[0],
        format!("rwsem:W {MMAP} 10 10.0ms 1.00ms 1.00ms 1.00ms 2 n/a")
    );
    assert_eq!(
        rows[1],
        format!("rwsem:R {MMAP} 1.0k 2.00ms 2.00us 2.00us 2.00us 1 n/a")
    );
    assert_eq!(rows[2], "spinlock 0x2000 500 150us 300ns 300ns 300ns 1 n/a");
    // Nothing new on rtnl_mutex: zero rates, no interval figures, max since start.
    assert_eq!(rows[3], "mutex rtnl_mutex 0 0 - - 50.0us 0 n/a");
    assert_eq!(rows.len(), 4);
}

#[test]
fn sorting_by_any_column() {
    let mut app = scripted();
    keys(&mut app, "3"); // cont/s
    let rows = table_rows(&app, 140, 20);
    assert!(rows[0].starts_with("rwsem:R"), "{rows:?}");
    assert!(rows[1].starts_with("spinlock"), "{rows:?}");
    let s = screen(&app, 140, 20);
    assert!(s.contains("cont/s▼"), "{s}");
    keys(&mut app, "3"); // again: reversed
    assert!(table_rows(&app, 140, 20)[0].starts_with("mutex"));
    assert!(screen(&app, 140, 20).contains("cont/s▲"));
    keys(&mut app, "2"); // name, ascending
    let names: Vec<String> = table_rows(&app, 140, 20)
        .iter()
        .map(|r| r.split(' ').nth(1).unwrap().to_owned())
        .collect();
    assert_eq!(
        names,
        vec!["0x2000", "mmap_lock", "mmap_lock", "rtnl_mutex"]
    );
    keys(&mut app, "7"); // max since start
    assert!(table_rows(&app, 140, 20)[0].starts_with("rwsem:W"));
    keys(&mut app, "8"); // waiters
    assert!(table_rows(&app, 140, 20)[0].starts_with("rwsem:W"));
    // Every column sorts without trouble, including steal/spin/... (all n/a).
    for c in ['1', '4', '5', '6', '9', '>', '<', 'r'] {
        keys(&mut app, &c.to_string());
        assert_eq!(table_rows(&app, 140, 20).len(), 4);
    }
}

#[test]
fn rows_keep_their_place_on_ties() {
    // Two locks idle in the interval (0/s) keep the order they had, even though sorting
    // them afresh (by total wait) would swap them.
    let big = wait(1_000_000, 1);
    let small = wait(1_000, 1);
    let a = |w: WaitStats| lock("0xa", LockType::Mutex, "lock_a", &[(1, "x", w)]);
    let b = |w: WaitStats| lock("0xb", LockType::Mutex, "lock_b", &[(2, "y", w)]);
    let mut app = App::new(SourceInfo {
        description: "standalone".into(),
        interval: Duration::from_secs(1),
    });
    app.update(recording(
        1.0,
        0,
        vec![a(small.clone()), b(WaitStats::default())],
    ));
    // Interval 2: lock_a waits a little, lock_b a lot -> b first.
    app.update(recording(
        2.0,
        0,
        vec![a(merged(&[&small, &small])), b(big.clone())],
    ));
    let order =
        |app: &App| -> Vec<String> { app.visible_locks().iter().map(|l| l.name.clone()).collect() };
    assert_eq!(order(&app), vec!["lock_b", "lock_a"]);
    // Interval 3: lock_a waits, b idle -> a first (the order really changed).
    let a3 = merged(&[&small, &small, &small]);
    app.update(recording(3.0, 0, vec![a(a3.clone()), b(big.clone())]));
    assert_eq!(order(&app), vec!["lock_a", "lock_b"]);
    // Interval 4: both idle -> tie, keep a first although b has more wait in total.
    app.update(recording(4.0, 0, vec![a(a3.clone()), b(big.clone())]));
    assert_eq!(order(&app), vec!["lock_a", "lock_b"]);
    // The selection follows its lock, not the row.
    key(&mut app, KeyCode::Down);
    assert_eq!(app.selected_lock.as_ref().unwrap().addr, "0xb");
    app.update(recording(5.0, 0, vec![a(a3), b(merged(&[&big, &big]))]));
    assert_eq!(order(&app), vec!["lock_b", "lock_a"]);
    assert_eq!(app.selected_lock.as_ref().unwrap().addr, "0xb");
    assert_eq!(app.selected_lock_row(), Some(0));
}

#[test]
fn filter_by_type_name_or_process() {
    let mut app = scripted();
    key(&mut app, KeyCode::Char('/'));
    assert!(matches!(app.mode, Mode::Filter(_)));
    keys(&mut app, "spin");
    // Filtering is live while typing; the footer shows what is typed.
    assert!(screen(&app, 140, 20).contains("/spin_"));
    key(&mut app, KeyCode::Enter);
    assert_eq!(app.mode, Mode::Locks);
    let rows = table_rows(&app, 140, 20);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0].starts_with("spinlock 0x2000"));
    let s = screen(&app, 140, 20);
    assert!(s.contains("locks 1/4"), "{s}");
    assert!(s.contains("filter: spin"), "{s}");

    // By lock name, case-insensitively.
    key(&mut app, KeyCode::Esc); // clears the filter, does not quit
    assert_eq!(table_rows(&app, 140, 20).len(), 4);
    keys(&mut app, "/MMAP_LOCK");
    key(&mut app, KeyCode::Enter);
    assert_eq!(table_rows(&app, 140, 20).len(), 2);
    // By a waiting process's name.
    keys(&mut app, "/");
    key(&mut app, KeyCode::Esc);
    keys(&mut app, "/churn2");
    key(&mut app, KeyCode::Enter);
    let rows = table_rows(&app, 140, 20);
    assert_eq!(rows.len(), 1);
    assert!(rows[0].starts_with("rwsem:W"));
    // Nothing matches: said so.
    keys(&mut app, "/");
    key(&mut app, KeyCode::Esc);
    keys(&mut app, "/zzz");
    key(&mut app, KeyCode::Enter);
    assert!(screen(&app, 140, 20).contains("no contended locks match the filter `zzz`"));
}

#[test]
fn detail_view_shows_histogram_chart_callers_and_tasks() {
    let mut app = scripted();
    key(&mut app, KeyCode::Enter);
    assert!(matches!(app.mode, Mode::Detail(_)));
    let s = screen(&app, 140, 40);
    assert!(s.contains(MMAP), "{s}");
    assert!(
        s.contains("rwsem:W at 0x1000  owner churn  waiters now 2"),
        "{s}"
    );
    assert!(s.contains("wait histogram, since start"), "{s}");
    // 11 waits of 1 ms land in the [524us, 1.05ms) bucket: one full bar and the count.
    let bar = s
        .lines()
        .find(|l| l.contains("524us │"))
        .unwrap_or_else(|| panic!("{s}"));
    assert!(bar.contains("█████"), "{bar}");
    assert!(bar.contains("█ 11│"), "{bar}");
    assert!(s.contains("wait/s, last 1s (peak 10.0ms/s)"), "{s}");
    assert!(s.contains("top callers"), "{s}");
    assert!(s.contains("caller_of_0x1000+0x10"), "{s}");
    assert!(s.contains("churn2[4243]"), "{s}");
    assert!(s.contains("acquire modes: n/a"), "{s}");
    assert!(s.contains("total: 11 waits (0 failed)"), "{s}");
    // h: the histogram of the last interval (10 waits).
    keys(&mut app, "h");
    let s = screen(&app, 140, 40);
    assert!(s.contains("wait histogram, last interval"), "{s}");
    // Down: the next lock in table order; Esc: back to the table on that lock.
    key(&mut app, KeyCode::Down);
    assert!(screen(&app, 140, 40).contains("rwsem:R at 0x1000"));
    key(&mut app, KeyCode::Esc);
    assert_eq!(app.mode, Mode::Locks);
    assert_eq!(app.selected_lock_row(), Some(1));
}

#[test]
fn tasks_view_and_help_overlay() {
    let mut app = scripted();
    key(&mut app, KeyCode::Tab);
    assert_eq!(app.mode, Mode::Tasks);
    let rows = table_rows(&app, 140, 20);
    // churn (pid 4242) waited 2 ms/s on R and 5 ms/s on W; churn2 5 ms/s.
    assert!(rows[0].starts_with("4242 churn 1.0k 7.00ms"), "{rows:?}");
    assert!(
        rows[0].ends_with("2 mmap_lock of churn[4242] (rwsem:W)"),
        "{rows:?}"
    );
    assert!(rows[1].starts_with("4243 churn2 5.0 5.00ms"), "{rows:?}");
    // Enter on a task: the locks it waits on.
    key(&mut app, KeyCode::Down);
    key(&mut app, KeyCode::Enter);
    assert_eq!(app.mode, Mode::Locks);
    assert_eq!(app.filter, "churn2");

    key(&mut app, KeyCode::Char('?'));
    let s = screen(&app, 100, 40);
    assert!(s.contains("sort by that column"), "{s}");
    assert!(s.contains("needs the deep tier"), "{s}");
    key(&mut app, KeyCode::Char('x'));
    assert_eq!(app.mode, Mode::Locks);
}

#[test]
fn quit_pause_and_escape() {
    let mut app = scripted();
    assert_eq!(key(&mut app, KeyCode::Char('p')), Action::Continue);
    assert!(app.paused);
    assert!(screen(&app, 140, 20).contains("PAUSED"));
    key(&mut app, KeyCode::Char(' '));
    assert!(!app.paused);
    key(&mut app, KeyCode::Enter);
    assert_eq!(key(&mut app, KeyCode::Esc), Action::Continue);
    assert_eq!(key(&mut app, KeyCode::Esc), Action::Quit);
    key(&mut app, KeyCode::Enter);
    assert_eq!(key(&mut app, KeyCode::Char('q')), Action::Quit);
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(app.handle_key(ctrl_c), Action::Quit);
}

#[test]
fn lost_events_are_highlighted() {
    let mut app = scripted();
    let mut rec = app.current.clone().unwrap();
    rec.duration_s = 3.0;
    rec.lost.insert("stats_map_full".into(), 7);
    app.update(rec);
    let buf = render(&app, 140, 20);
    let s = lines(&buf).join("\n");
    assert!(s.contains("lost 7 (+7)"), "{s}");
    let row = &lines(&buf)[1];
    let col = row.find("lost 7").unwrap();
    let col = row[..col].chars().count() as u16;
    assert_eq!(buf[(col, 1)].fg, Color::Red);
    // A source error shows in the footer, and the next refresh clears it.
    app.set_error(&anyhow::anyhow!(
        "cannot reach lockscope serve at 127.0.0.1:1"
    ));
    assert!(screen(&app, 140, 20).contains("error: cannot reach lockscope serve"));
}

#[test]
fn small_terminals_drop_columns_instead_of_panicking() {
    assert_eq!(ui::fit_lock_columns(200).len(), LockColumn::ALL.len());
    let narrow = ui::fit_lock_columns(40);
    assert!(narrow.contains(&LockColumn::Name));
    assert!(narrow.contains(&LockColumn::Contentions));
    assert!(narrow.contains(&LockColumn::Wait));
    assert!(!narrow.contains(&LockColumn::Modes));

    let mut app = scripted();
    let s = screen(&app, 40, 10);
    assert!(s.contains("mmap_lock"), "{s}");
    assert!(s.contains("cont/s"), "{s}");
    assert!(!s.contains("steal"), "{s}");
    // Every view at a few tiny sizes: no panic.
    for (w, h) in [(40, 10), (20, 5), (1, 1), (0, 0), (80, 3)] {
        let mut app = scripted();
        render(&app, w, h);
        key(&mut app, KeyCode::Enter);
        render(&app, w, h);
        key(&mut app, KeyCode::Char('?'));
        render(&app, w, h);
        key(&mut app, KeyCode::Esc);
        key(&mut app, KeyCode::Esc);
        key(&mut app, KeyCode::Tab);
        render(&app, w, h);
    }
    key(&mut app, KeyCode::Enter);
    let s = screen(&app, 40, 10);
    assert!(s.contains("mmap_lock"), "{s}");
}

#[test]
fn number_formats() {
    assert_eq!(ui::fmt_rate(0.0), "0");
    assert_eq!(ui::fmt_rate(f64::NAN), "0");
    assert_eq!(ui::fmt_rate(2.5), "2.5");
    assert_eq!(ui::fmt_rate(812.4), "812");
    assert_eq!(ui::fmt_rate(12_345.0), "12.3k");
    assert_eq!(ui::fmt_rate(4_560_000.0), "4.56M");
    assert_eq!(ui::fmt_dur(0.0), "0");
    assert_eq!(ui::fmt_dur(850.0), "850ns");
    assert_eq!(ui::fmt_dur(12_345.0), "12.3us");
    assert_eq!(ui::fmt_dur(999_999.0), "1.00ms");
    assert_eq!(ui::fmt_dur(4_560_000.0), "4.56ms");
    assert_eq!(ui::fmt_dur(1.2e9), "1.20s");
}
