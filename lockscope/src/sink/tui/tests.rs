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
        omitted: None,
        wait_task: None,
        spin: None,
        holders: None,
        name: name.into(),
        owner: name.starts_with("mmap_lock").then(|| Owner {
            tid: None,
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
                cgroup: None,
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
        rt_summary: None,
        spin: None,
        cgroups: None,
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

/// Table rows (after the 2 header lines, the view tabs and the column titles), cells
/// separated by one space.
fn table_rows(app: &App, w: u16, h: u16) -> Vec<String> {
    lines(&render(app, w, h))
        .into_iter()
        .skip(4)
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
    // No acquisition modes for other lock types.
    assert_eq!(rows[2], "spinlock 0x2000 500 150us 300ns 300ns 300ns 1 -");
    // Nothing new on rtnl_mutex: zero rates, no interval figures, max since start.
    assert_eq!(rows[3], "mutex rtnl_mutex 0 0 - - 50.0us 0 -");
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
    assert!(s.contains("[l] kernel locks 1/4"), "{s}");
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
    // Tab cycles the views: kernel locks, user locks, tasks, RT, and around.
    key(&mut app, KeyCode::Tab);
    assert_eq!(app.mode, Mode::UserLocks);
    key(&mut app, KeyCode::Tab);
    assert_eq!(app.mode, Mode::Tasks);
    key(&mut app, KeyCode::Tab);
    assert_eq!(app.mode, Mode::Cgroups);
    key(&mut app, KeyCode::Tab);
    assert_eq!(app.mode, Mode::Rt);
    key(&mut app, KeyCode::Tab);
    assert_eq!(app.mode, Mode::Locks);
    key(&mut app, KeyCode::BackTab);
    assert_eq!(app.mode, Mode::Rt);
    key(&mut app, KeyCode::Char('t'));
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
    assert!(s.contains("rwsem modes in the interval"), "{s}");
    assert!(s.contains("l u t c e"), "{s}");
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
        for view in ['u', 't', 'e'] {
            key(&mut app, KeyCode::Char(view));
            render(&app, w, h);
        }
        let mut app = with_futexes();
        key(&mut app, KeyCode::Char('u'));
        render(&app, w, h);
        key(&mut app, KeyCode::Enter);
        render(&app, w, h);
        let mut app = scripted();
        app.update(rt_recording(
            3.0,
            Some(vec![episode(1, 3_000_000_000)]),
            Some(vec![spike(2)]),
        ));
        key(&mut app, KeyCode::Char('e'));
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

/// A futex word of `app[pid]`: `waits` blocking waits of 20 us, `calls` wait calls
/// (`eagain` of them returned EAGAIN), `wakes` wake calls that woke as many, `blocked`
/// calls blocked now.
fn futex_word(
    pid: u32,
    uaddr: &str,
    waits: u64,
    [calls, eagain, wakes]: [u64; 3],
    blocked: u64,
) -> LockEntry {
    use crate::aggregate::futex::{FutexInfo, UserLock};
    let stats = if waits > 0 {
        wait(20_000, waits)
    } else {
        WaitStats::default()
    };
    LockEntry {
        addr: uaddr.into(),
        lock_type: LockType::Futex,
        name: format!("futex {uaddr} of app[{pid}]"),
        owner: None,
        callers: Vec::new(),
        tasks: vec![TaskEntry {
            cgroup: None,
            pid,
            comm: "app".into(),
            stats: stats.clone(),
            events: None,
        }],
        stats,
        user: Some(UserLock {
            pid,
            comm: "app".into(),
            futex: FutexInfo {
                wait_calls: calls,
                eagain,
                wake_calls: wakes,
                woken: wakes,
                in_progress: blocked,
                calls: [
                    ("FUTEX_WAIT".to_owned(), calls),
                    ("FUTEX_WAKE".to_owned(), wakes),
                ]
                .into(),
                ..Default::default()
            },
            pthread: None,
        }),
        events: None,
        omitted: None,
        wait_task: None,
        spin: None,
        holders: None,
    }
}

/// The scripted kernel locks plus two futex words, one second apart: in the second
/// interval `app[50]`'s word 0x7f00 blocked 300 times (20 us each: 6 ms/s) out of 400
/// wait calls and saw 300 wakes, 2 calls blocked now; `app[51]`'s word at the same
/// address blocked 10 times.
fn with_futexes() -> App {
    let mut app = scripted();
    let mut a = app.current.clone().unwrap();
    a.duration_s = 3.0;
    a.locks
        .push(futex_word(50, "0x7f00", 100, [150, 50, 100], 0));
    a.locks.push(futex_word(51, "0x7f00", 0, [0, 0, 0], 0));
    let mut b = a.clone();
    b.duration_s = 4.0;
    b.locks.truncate(4);
    b.locks
        .push(futex_word(50, "0x7f00", 400, [550, 150, 400], 2));
    b.locks.push(futex_word(51, "0x7f00", 10, [10, 0, 10], 0));
    app.update(a);
    app.update(b);
    app
}

#[test]
fn user_lock_view_lists_futex_words_apart_from_kernel_locks() {
    let mut app = with_futexes();
    // The kernel view keeps its four kernel locks only.
    let rows = table_rows(&app, 160, 20);
    assert_eq!(rows.len(), 4, "{rows:?}");
    assert!(rows.iter().all(|r| !r.starts_with("futex")), "{rows:?}");
    let s = screen(&app, 160, 20);
    assert!(
        s.contains("[l] kernel locks 4 │ [u] user locks 2 │ [t] tasks"),
        "{s}"
    );
    assert!(s.contains("[e] rt: not traced"), "{s}");

    key(&mut app, KeyCode::Char('u'));
    assert_eq!(app.mode, Mode::UserLocks);
    let s = screen(&app, 160, 20);
    assert!(s.contains("process"), "{s}");
    assert!(s.contains("wake/s"), "{s}");
    assert!(s.contains("PI owner"), "{s}");
    let rows = table_rows(&app, 160, 20);
    // Same address, two processes: two rows. Sorted by wait/s.
    assert_eq!(
        rows,
        vec![
            "futex app[50] 0x7f00 300 6.00ms 20.0us 20.0us 20.0us 300 2 -",
            "futex app[51] 0x7f00 10 200us 20.0us 20.0us 20.0us 10 0 -",
        ]
    );
    // 0 sorts by the tenth column (blocked now), 1-9 by the others.
    keys(&mut app, "0");
    assert!(screen(&app, 160, 20).contains("blocked▼"));
    assert!(table_rows(&app, 160, 20)[0].contains("app[50]"));
    keys(&mut app, "0");
    assert!(table_rows(&app, 160, 20)[0].contains("app[51]"));
    keys(&mut app, "2"); // process, ascending
    assert!(table_rows(&app, 160, 20)[0].contains("app[50]"));
    // The filter applies here too.
    keys(&mut app, "/app[51");
    key(&mut app, KeyCode::Enter);
    assert_eq!(table_rows(&app, 160, 20).len(), 1);
    assert!(screen(&app, 160, 20).contains("[u] user locks 1/2"));
    key(&mut app, KeyCode::Esc);

    // Enter: the detail view of a futex word: futex calls instead of kernel callers.
    key(&mut app, KeyCode::Home);
    key(&mut app, KeyCode::Enter);
    let s = screen(&app, 160, 40);
    assert!(
        s.contains("futex at 0x7f00 in app[50]  blocked now 2"),
        "{s}"
    );
    assert!(s.contains("now:   300 cont/s  wait 6.00ms/s"), "{s}");
    assert!(
        s.contains("futex: wait calls 400/s (EAGAIN 100/s)  wake calls 300/s woke 300/s"),
        "{s}"
    );
    assert!(s.contains("futex calls"), "{s}");
    let wait_row = s.lines().find(|l| l.contains("FUTEX_WAIT")).unwrap();
    assert!(
        wait_row.contains("400") && wait_row.contains("550"),
        "{wait_row}"
    );
    assert!(s.contains("wait histogram"), "{s}");
    assert!(!s.contains("top callers"), "{s}");
    // Down: the next user lock; Esc: back to the user view on it.
    key(&mut app, KeyCode::Down);
    assert!(screen(&app, 160, 40).contains("in app[51]"));
    key(&mut app, KeyCode::Esc);
    assert_eq!(app.mode, Mode::UserLocks);
    assert_eq!(app.selected_user_row(), Some(1));
    // The kernel view's selection did not move.
    assert_eq!(app.selected_lock_row(), Some(0));
    // View keys leave a detail view for their view.
    key(&mut app, KeyCode::Enter);
    key(&mut app, KeyCode::Char('t'));
    assert_eq!(app.mode, Mode::Tasks);
    key(&mut app, KeyCode::Char('u'));
    assert_eq!(app.selected_user_row(), Some(1));
}

#[test]
fn blocking_futex_mode_shows_no_wake_rate() {
    let mut app = with_futexes();
    let mut rec = app.current.clone().unwrap();
    rec.duration_s = 5.0;
    rec.futex_events = Some(crate::aggregate::futex::FutexEvents {
        blocking: true,
        ..Default::default()
    });
    app.update(rec);
    key(&mut app, KeyCode::Char('u'));
    let rows = table_rows(&app, 160, 20);
    // wake/s (the ninth column) is "-", not a rate: this mode sees no wakes.
    assert!(!rows.is_empty(), "{rows:?}");
    for r in &rows {
        assert_eq!(r.split(' ').nth(8), Some("-"), "{r}");
    }
}

#[test]
fn user_lock_view_says_when_futexes_are_not_traced() {
    let mut app = scripted();
    key(&mut app, KeyCode::Char('u'));
    let s = screen(&app, 160, 20);
    assert!(
        s.contains("user-space locks are not traced by this source"),
        "{s}"
    );
    // Traced but quiet: said so instead.
    let mut rec = app.current.clone().unwrap();
    rec.duration_s = 3.0;
    rec.futex_events = Some(Default::default());
    app.update(rec);
    let s = screen(&app, 160, 20);
    assert!(s.contains("no contended user-space locks yet"), "{s}");
}

#[test]
fn tasks_view_covers_futex_waiters_and_leads_to_their_view() {
    let mut app = with_futexes();
    key(&mut app, KeyCode::Char('t'));
    let rows = table_rows(&app, 160, 20);
    // app[50] waited 6 ms/s, more than anyone: first, its top lock its futex word.
    assert!(
        rows[0].starts_with("50 app 300 6.00ms 20.0us 1 futex 0x7f00 of app[50] (futex)"),
        "{rows:?}"
    );
    key(&mut app, KeyCode::Home);
    key(&mut app, KeyCode::Enter);
    assert_eq!(app.mode, Mode::UserLocks);
    assert_eq!(app.filter, "app");
    // A kernel waiter leads to the kernel view.
    keys(&mut app, "t");
    key(&mut app, KeyCode::Esc);
    let pos = app
        .visible_tasks()
        .iter()
        .position(|t| t.pid == 4242)
        .unwrap();
    key(&mut app, KeyCode::Home);
    for _ in 0..pos {
        key(&mut app, KeyCode::Down);
    }
    key(&mut app, KeyCode::Enter);
    assert_eq!(app.mode, Mode::Locks);
    assert_eq!(app.filter, "churn");
}

fn task(pid: u32, tid: u32, comm: &str) -> crate::aggregate::rt::TaskRef {
    crate::aggregate::rt::TaskRef {
        pid,
        tid: Some(tid),
        comm: comm.into(),
        stack: Vec::new(),
    }
}

fn episode(n: u32, ts_ns: u64) -> crate::aggregate::rt::StarvationEpisode {
    use crate::aggregate::rt::{Acquirer, EpisodeKind, StarvationEpisode};
    StarvationEpisode {
        kind: EpisodeKind::Starvation,
        ts_ns,
        cpu: 1,
        lock: format!("pi_lock of stress-ng[{n}]"),
        addr: format!("0xffff88800000{n:04x}"),
        waiter: task(100 + n, 100 + n, "cyclictest"),
        wait_ns: 250_000 * u64::from(n),
        foreign_acquisitions: 40,
        acquirers: vec![Acquirer {
            cpu: 0,
            task: task(200, 201, "stress-ng"),
            count: 40,
        }],
        irqs_off: None,
        probable: true,
        tier: "tracepoint".into(),
    }
}

fn spike(n: u32) -> crate::aggregate::rt::LatencySpike {
    use crate::aggregate::rt::{LatencySpike, Overlap, SpikeSource};
    LatencySpike {
        cpu: 1,
        ts_ns: 1_000_000_000 * u64::from(n),
        latency_ns: 100_000 * u64::from(n),
        source: SpikeSource::Lockscope,
        task: task(300, 300 + n, "cyclictest"),
        overlaps: vec![Overlap {
            lock: "pi_lock of stress-ng[1]".into(),
            addr: None,
            kind: "probable-starvation".into(),
            task: None,
            overlap_ns: 90_000,
        }],
        explained: n.is_multiple_of(2),
        timer_late_ns: None,
        cpu_idle: None,
    }
}

fn rt_recording(
    duration_s: f64,
    episodes: Option<Vec<crate::aggregate::rt::StarvationEpisode>>,
    spikes: Option<Vec<crate::aggregate::rt::LatencySpike>>,
) -> Recording {
    let mut r = recording(duration_s, 0, Vec::new());
    r.starvation_episodes = episodes;
    r.latency_spikes = spikes;
    r
}

#[test]
fn rt_view_lists_episodes_and_spikes_as_they_arrive() {
    let mut app = App::new(SourceInfo {
        description: "standalone".into(),
        interval: Duration::from_secs(1),
    });
    // A source without the RT probes: said so, never "none".
    app.update(rt_recording(1.0, None, None));
    key(&mut app, KeyCode::Char('e'));
    assert_eq!(app.mode, Mode::Rt);
    let s = screen(&app, 160, 30);
    assert!(s.contains("starvation episodes: not traced"), "{s}");
    assert!(s.contains("latency spikes: not traced"), "{s}");
    assert!(s.contains("[e] rt: not traced"), "{s}");
    assert!(!s.contains("none yet"), "{s}");

    // Traced, nothing yet.
    app.update(rt_recording(2.0, Some(vec![]), Some(vec![])));
    let s = screen(&app, 160, 30);
    assert!(s.contains("starvation episodes: 0"), "{s}");
    assert_eq!(s.matches("none yet").count(), 2, "{s}");
    assert!(s.contains("[e] rt: 0 episodes, 0 spikes"), "{s}");

    // One episode and one spike arrive: listed and marked new.
    let e1 = episode(1, 1_500_000_000);
    app.update(rt_recording(
        3.0,
        Some(vec![e1.clone()]),
        Some(vec![spike(1)]),
    ));
    let s = screen(&app, 160, 30);
    assert!(
        s.contains("starvation episodes: 1, newest first, 1 new (*)"),
        "{s}"
    );
    assert!(s.contains("+2 new"), "{s}");
    let row = s
        .lines()
        .find(|l| l.contains("pi_lock of stress-ng[1]") && l.contains("starvation?"))
        .unwrap_or_else(|| panic!("{s}"));
    for cell in [
        "*",
        "1.500000",
        "cyclictest[101]",
        "250us",
        "40",
        "stress-ng[200/201] cpu0 x40",
    ] {
        assert!(row.contains(cell), "{cell}: {row}");
    }
    let row = s
        .lines()
        .find(|l| l.contains("cyclictest[300/301]"))
        .unwrap_or_else(|| panic!("{s}"));
    for cell in [
        "*",
        "1.000000",
        "100us",
        "lockscope",
        "no",
        "pi_lock of stress-ng[1] probable-starvation 90.0us",
    ] {
        assert!(row.contains(cell), "{cell}: {row}");
    }

    // The next snapshot repeats them (recordings are cumulative) and adds newer ones:
    // no duplicates, newest first, only the new ones marked.
    let mut e1_done = e1.clone();
    e1_done.foreign_acquisitions = 41;
    app.update(rt_recording(
        4.0,
        Some(vec![e1_done, episode(2, 3_000_000_000)]),
        Some(vec![spike(1), spike(3), spike(2)]),
    ));
    assert_eq!(app.rt.episodes.len(), 2);
    assert_eq!(app.rt.spikes.len(), 3);
    assert_eq!((app.rt.new_episodes, app.rt.new_spikes), (1, 2));
    let s = screen(&app, 160, 30);
    assert!(s.contains("[e] rt: 2 episodes, 3 spikes"), "{s}");
    let lines: Vec<&str> = s.lines().collect();
    let at = |needle: &str| {
        lines
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| {
                panic!(
                    "{needle}
{s}"
                )
            })
    };
    assert!(
        at("stress-ng[2]") < at("stress-ng[1]  "),
        "episodes newest first:
{s}"
    );
    assert!(at("cyclictest[300/303]") < at("cyclictest[300/302]"));
    assert!(at("cyclictest[300/302]") < at("cyclictest[300/301]"));
    assert!(lines[at("stress-ng[2]")].contains('*'));
    assert!(!lines[at("cyclictest[300/301]")].contains('*'), "{s}");
    // Seen again: updated in place, still once.
    assert_eq!(app.rt.episodes[1].item.foreign_acquisitions, 41);
    assert_eq!(app.rt.episodes[1].refresh, 3);

    // The filter narrows both lists.
    keys(&mut app, "/stress-ng[2]");
    key(&mut app, KeyCode::Enter);
    let s = screen(&app, 160, 30);
    assert!(s.contains("starvation episodes: 1/2"), "{s}");
    assert!(s.contains("latency spikes: 0/3"), "{s}");
    assert!(s.contains("none match the filter"), "{s}");
}

#[test]
fn rt_log_keeps_a_bounded_number_and_counts_the_rest() {
    use super::rt::{KEEP, RtLog};
    let mut log = RtLog::default();
    let many: Vec<_> = (0..KEEP as u64 + 7).map(|i| episode(1, i)).collect();
    log.update(&rt_recording(1.0, Some(many.clone()), None), 1);
    assert_eq!(log.episodes.len(), KEEP);
    assert_eq!(log.episodes_dropped, 7);
    assert_eq!(log.episodes[0].item.ts_ns, KEEP as u64 + 6);
    // The dropped ones do not come back as new.
    log.update(&rt_recording(2.0, Some(many), None), 2);
    assert_eq!(log.new_episodes, 0);
    assert_eq!(log.episodes_dropped, 7);
    assert!(!log.spikes_traced);
}

#[test]
fn rwsem_acquisition_modes_show_where_known() {
    use crate::aggregate::rwsem::{EventKind, RwsemEventsSummary};
    let mut app = scripted();
    let mut rec = app.current.clone().unwrap();
    rec.duration_s = 3.0;
    // The read side's events: steals n/a, 4 handoffs (estimated) since the last refresh.
    rec.locks[0].events = Some(
        [
            ("rlock_steal".to_owned(), None),
            ("rlock_handoff".to_owned(), Some(4)),
            ("sleep_reader".to_owned(), None),
        ]
        .into(),
    );
    rec.rwsem_events = Some(RwsemEventsSummary {
        tier: "tracepoint".into(),
        hooks: Default::default(),
        kinds: [("rlock_handoff".to_owned(), EventKind::Estimate)].into(),
        note: None,
        system: Default::default(),
        lost: Default::default(),
    });
    app.update(rec);
    let rows = table_rows(&app, 160, 20);
    let read = rows
        .iter()
        .find(|r| r.starts_with("rwsem:R"))
        .unwrap_or_else(|| panic!("{rows:?}"));
    assert!(read.ends_with(" n/a/-/4~/n/a"), "{read}");
    // The write side has no events in this recording: n/a.
    let write = rows.iter().find(|r| r.starts_with("rwsem:W")).unwrap();
    assert!(write.ends_with(" n/a"), "{write}");
    // Sorting by modes puts the one with events first.
    keys(&mut app, "9");
    assert!(table_rows(&app, 160, 20)[0].starts_with("rwsem:R"));
    key(&mut app, KeyCode::Home);
    key(&mut app, KeyCode::Enter);
    let s = screen(&app, 160, 40);
    assert!(
        s.contains("acquire modes (last interval): steals n/a  spins -  handoffs 4~  sleeps n/a"),
        "{s}"
    );
}

#[test]
fn cgroups_view_shows_each_cgroups_rate_and_filters() {
    use crate::aggregate::cgroup::CgroupEntry;
    let cg = |cgroup: &str, t: LockType, stats: WaitStats| CgroupEntry {
        cgroup: cgroup.into(),
        lock_type: t,
        stats,
    };
    let mut first = recording(1.0, 0, Vec::new());
    first.cgroups = Some(vec![
        cg("system.slice/db.service", LockType::Mutex, wait(1_000, 10)),
        cg("system.slice/web.service", LockType::Futex, wait(1_000, 10)),
    ]);
    let mut second = recording(2.0, 0, Vec::new());
    // In the second interval db waited 100 more mutex waits (1.09 ms) and 10 spinlock
    // waits (1 ms); web nothing more.
    second.cgroups = Some(vec![
        cg(
            "system.slice/db.service",
            LockType::Mutex,
            wait(10_000, 110),
        ),
        cg(
            "system.slice/db.service",
            LockType::Spinlock,
            wait(100_000, 10),
        ),
        cg("system.slice/web.service", LockType::Futex, wait(1_000, 10)),
    ]);
    let mut app = App::new(SourceInfo {
        description: "standalone".into(),
        interval: Duration::from_secs(1),
    });
    app.update(first);
    app.update(second);
    key(&mut app, KeyCode::Char('c'));
    assert_eq!(app.mode, Mode::Cgroups);
    let rows = table_rows(&app, 120, 20);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(
        rows,
        [
            "2.09ms 110 19.0us 2.10ms mutex,spinlock system.slice/db.service",
            "0 0 - 10.0us futex system.slice/web.service",
        ]
    );
    assert!(screen(&app, 120, 20).contains("[c] cgroups 2"));
    keys(&mut app, "/web");
    key(&mut app, KeyCode::Enter);
    let rows = table_rows(&app, 120, 20);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        app.selected_cgroup.as_deref(),
        Some("system.slice/web.service")
    );
}

#[test]
fn detail_view_shows_who_held_the_lock() {
    use crate::aggregate::model::{HolderEntry, Holders};
    let holders = |long_ns: u64| Holders {
        owners: vec![
            HolderEntry {
                comm: "holder-long".into(),
                pid: 4242,
                tid: 4244,
                contended: 3,
                wait_total_ns: long_ns,
                stack: Vec::new(),
            },
            HolderEntry {
                comm: "readers".into(),
                pid: 0,
                tid: 0,
                contended: 1,
                wait_total_ns: 1_000,
                stack: Vec::new(),
            },
        ],
        owner_unknown_wait_ns: 5_000,
        owners_omitted_wait_ns: 0,
    };
    let with = |duration: f64, n: u64, long_ns: u64| {
        let mut l = lock(
            "0x1000",
            LockType::RwsemWrite,
            MMAP,
            &[(4242, "churn", wait(1_000_000, n))],
        );
        l.holders = Some(holders(long_ns));
        recording(duration, 0, vec![l])
    };
    let mut app = App::new(SourceInfo {
        description: "standalone".into(),
        interval: Duration::from_secs(1),
    });
    app.update(with(1.0, 1, 1_000_000));
    // 3 ms more held by holder-long in the second interval.
    app.update(with(2.0, 4, 4_000_000));
    key(&mut app, KeyCode::Enter);
    let s = screen(&app, 160, 40);
    assert!(s.contains("holders (waits they caused)"), "{s}");
    let row = s
        .lines()
        .find(|l| l.contains("holder-long[4242]/4244"))
        .unwrap_or_else(|| panic!("{s}"));
    assert!(
        row.contains("holder-long[4242]/4244    3.00ms   4.00ms"),
        "{row}"
    );
    assert!(s.contains("[holder unknown]"), "{s}");
    // A lock whose waits found no holder has no holders pane.
    let mut app = scripted();
    key(&mut app, KeyCode::Enter);
    assert!(!screen(&app, 160, 40).contains("holders (waits"));
}
