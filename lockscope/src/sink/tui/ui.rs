//! Drawing: one frame from the [`App`] state. No state changes and no I/O here, so every
//! screen is testable with ratatui's `TestBackend`.

use lockscope_common::bucket_lower_ns;
use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Color, Modifier, Style, Stylize as _},
    symbols::Marker,
    text::{Line, Span},
    widgets::{
        Axis, Block, Cell, Chart, Clear, Dataset, GraphType, Paragraph, Row, Table, TableState,
        Wrap,
    },
};

use super::{
    app::{App, HistScope, LockColumn, Mode, TaskColumn, UserColumn, VIEWS},
    rt::Seen,
};
use crate::aggregate::{
    WaitStats,
    rates::{LockRate, TaskRate},
    rt::{EpisodeKind, LatencySpike, StarvationEpisode, TaskRef},
};
use crate::units::fmt_interval;
pub use crate::units::{fmt_dur, fmt_rate};

const HEADER_STYLE: Style = Style::new().add_modifier(Modifier::BOLD);
const SELECTED: Style = Style::new().add_modifier(Modifier::REVERSED);
const ALERT: Style = Style::new()
    .fg(Color::Red)
    .add_modifier(Modifier::BOLD)
    .add_modifier(Modifier::REVERSED);

pub fn draw(frame: &mut Frame, app: &App) {
    let [header, tabs, body, footer] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    draw_header(frame, app, header);
    draw_tabs(frame, app, tabs);
    match app.mode.view() {
        Mode::Tasks => draw_tasks(frame, app, body),
        Mode::Cgroups => draw_cgroups(frame, app, body),
        Mode::UserLocks => draw_user_locks(frame, app, body),
        Mode::Rt => draw_rt(frame, app, body),
        Mode::Detail(key) => match app.lock(key) {
            Some(l) => draw_detail(frame, app, l, body),
            None => frame.render_widget(
                Paragraph::new("this lock is no longer in the recording (Esc: back)"),
                body,
            ),
        },
        _ => draw_locks(frame, app, body),
    }
    draw_footer(frame, app, footer);
    if let Mode::Help(_) = app.mode {
        draw_help(frame, app, frame.area());
    }
}

fn draw_header(frame: &mut Frame, app: &App, area: Rect) {
    let mut first = vec![Span::styled("lockscope top", HEADER_STYLE)];
    let mut second = Vec::new();
    if let Some(rec) = &app.current {
        first.extend([
            Span::raw(format!("  kernel {}", rec.kernel)),
            Span::raw(format!("  tier {}", rec.tier)),
            Span::raw(format!("  target {}", rec.target)),
        ]);
    }
    first.push(Span::raw(format!(
        "  interval {}  {}",
        fmt_interval(app.source.interval.as_secs_f64()),
        app.source.description
    )));
    if let Some(r) = &app.rates {
        second.push(Span::raw(format!("events {}/s", fmt_rate(r.events_per_s))));
        let lost = if r.lost_interval > 0 {
            format!("lost {} (+{})", r.lost_total, r.lost_interval)
        } else {
            format!("lost {}", r.lost_total)
        };
        second.push(Span::raw("  "));
        second.push(if r.lost_total > 0 {
            Span::styled(lost, ALERT)
        } else {
            Span::raw(lost)
        });
        if r.since_start {
            second.push(Span::raw("  (rates since start)"));
        }
    } else {
        second.push(Span::raw("waiting for the first snapshot..."));
    }
    if !app.filter.is_empty() {
        second.push(Span::raw("  filter: "));
        second.push(Span::styled(app.filter.clone(), HEADER_STYLE));
    }
    if app.paused {
        second.push(Span::raw("  "));
        second.push(Span::styled("PAUSED", ALERT));
    }
    frame.render_widget(
        Paragraph::new(vec![Line::from(first), Line::from(second)]),
        area,
    );
}

/// One tab per view, the current one highlighted, each with its row count
/// (`shown/all` while a filter hides some).
fn draw_tabs(frame: &mut Frame, app: &App, area: Rect) {
    let count = |shown: usize, all: usize| {
        if shown == all {
            all.to_string()
        } else {
            format!("{shown}/{all}")
        }
    };
    let (kernel, user, tasks, cgroups) = match &app.rates {
        Some(r) => {
            let users = r.locks.iter().filter(|l| l.key.is_user()).count();
            (
                count(app.lock_rows.len(), r.locks.len() - users),
                count(app.user_rows.len(), users),
                count(app.task_rows.len(), r.tasks.len()),
                count(app.cgroup_rows.len(), r.cgroups.len()),
            )
        }
        None => ("-".into(), "-".into(), "-".into(), "-".into()),
    };
    let rt = &app.rt;
    let rt_label = match (rt.episodes_traced, rt.spikes_traced) {
        (false, false) => "rt: not traced".to_owned(),
        _ => format!(
            "rt: {} episodes, {} spikes",
            if rt.episodes_traced {
                rt.episodes.len().to_string()
            } else {
                "n/a".into()
            },
            if rt.spikes_traced {
                rt.spikes.len().to_string()
            } else {
                "n/a".into()
            }
        ),
    };
    let labels = [
        format!("[l] kernel locks {kernel}"),
        format!("[u] user locks {user}"),
        format!("[t] tasks {tasks}"),
        format!("[c] cgroups {cgroups}"),
        format!("[e] {rt_label}"),
    ];
    let current = app.mode.view();
    let mut spans = Vec::new();
    for (view, label) in VIEWS.iter().zip(labels) {
        if !spans.is_empty() {
            spans.push(Span::raw(" │ ").dim());
        }
        spans.push(if view == current {
            Span::styled(label, SELECTED.add_modifier(Modifier::BOLD))
        } else {
            Span::raw(label)
        });
    }
    let fresh = rt.new_episodes + rt.new_spikes;
    if fresh > 0 {
        spans.push(Span::raw(" "));
        spans.push(Span::styled(format!("+{fresh} new"), ALERT));
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn draw_footer(frame: &mut Frame, app: &App, area: Rect) {
    let line = if let Mode::Filter(_) = app.mode {
        Line::from(vec![
            Span::styled(format!("/{}", app.filter), HEADER_STYLE),
            Span::raw("_  type, name or process; Enter keep, Esc clear"),
        ])
    } else if let Some(e) = &app.error {
        Line::from(Span::styled(format!("error: {e}"), ALERT))
    } else {
        let keys = match app.mode.view() {
            Mode::Detail(_) => {
                "Esc back  Up/Down other lock  h histogram scope  l u t c e views  p pause  ? help  q quit"
            }
            Mode::Tasks => {
                "Tab next view  Enter its locks  1-7 sort  r reverse  / filter  p pause  ? help  q quit"
            }
            Mode::UserLocks => {
                "Tab next view  Enter detail  1-9,0 sort  r reverse  / filter  p pause  ? help  q quit"
            }
            Mode::Rt => "Tab next view  l u t c e views  / filter  p pause  ? help  q quit",
            Mode::Cgroups => "Tab next view  l u t c e views  / filter  p pause  ? help  q quit",
            _ => {
                "Tab next view  Enter detail  1-9 sort  r reverse  / filter  p pause  ? help  q quit"
            }
        };
        Line::from(Span::raw(keys).dim())
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// Width of each lock column; `Name` takes what is left (at least its value here).
fn lock_width(c: LockColumn) -> u16 {
    match c {
        LockColumn::Type => 11,
        LockColumn::Name => 12,
        LockColumn::Contentions | LockColumn::Wait => 8,
        LockColumn::Avg | LockColumn::P99 | LockColumn::Max => 9,
        LockColumn::Waiters => 8,
        LockColumn::Modes => 24,
    }
}

/// Columns dropped first when the terminal is too narrow; the rest always stay.
const LOCK_DROP_ORDER: [LockColumn; 6] = [
    LockColumn::Modes,
    LockColumn::Max,
    LockColumn::Waiters,
    LockColumn::Avg,
    LockColumn::Type,
    LockColumn::P99,
];

/// The lock columns that fit in `width`, in screen order.
pub fn fit_lock_columns(width: u16) -> Vec<LockColumn> {
    fit_columns(&LockColumn::ALL, lock_width, &LOCK_DROP_ORDER, width)
}

/// The columns of `all` that fit in `width` (one space between columns), dropping
/// columns in `drop_order` until they do; the others always stay.
fn fit_columns<C: Copy + PartialEq>(
    all: &[C],
    col_width: impl Fn(C) -> u16,
    drop_order: &[C],
    width: u16,
) -> Vec<C> {
    let mut cols = all.to_vec();
    let need = |cols: &[C]| -> u32 {
        cols.iter().map(|&c| u32::from(col_width(c))).sum::<u32>() + cols.len() as u32 - 1
    };
    for &drop in drop_order {
        if need(&cols) <= u32::from(width) {
            break;
        }
        cols.retain(|&c| c != drop);
    }
    cols
}

fn sort_title(title: &str, sorted: bool, reverse: bool) -> String {
    match (sorted, reverse) {
        (false, _) => title.to_owned(),
        (true, false) => format!("{title}▼"),
        (true, true) => format!("{title}▲"),
    }
}

fn draw_locks(frame: &mut Frame, app: &App, area: Rect) {
    let cols = fit_lock_columns(area.width);
    let header = Row::new(cols.iter().map(|&c| {
        let t = sort_title(c.title(), c == app.lock_sort, app.reverse);
        if matches!(c, LockColumn::Type | LockColumn::Name | LockColumn::Modes) {
            Cell::from(t)
        } else {
            Cell::from(Line::from(t).right_aligned())
        }
    }))
    .style(HEADER_STYLE);
    let rows: Vec<Row> = app
        .visible_locks()
        .into_iter()
        .map(|l| Row::new(cols.iter().map(|&c| lock_cell(l, c))))
        .collect();
    let empty = rows.is_empty();
    let widths = cols.iter().map(|&c| match c {
        LockColumn::Name => Constraint::Min(lock_width(c)),
        c => Constraint::Length(lock_width(c)),
    });
    let table = Table::new(rows, widths)
        .header(header)
        .row_highlight_style(SELECTED);
    let mut state = TableState::default().with_selected(app.selected_lock_row());
    frame.render_stateful_widget(table, area, &mut state);
    if empty {
        draw_empty(frame, app, area, "no contended locks");
    }
}

fn draw_empty(frame: &mut Frame, app: &App, area: Rect, what: &str) {
    let msg = if app.filter.is_empty() {
        format!("{what} yet")
    } else {
        format!("{what} match the filter `{}`", app.filter)
    };
    let area = Rect {
        y: area.y.saturating_add(1),
        height: area.height.saturating_sub(1),
        ..area
    };
    frame.render_widget(Paragraph::new(msg).dim(), area);
}

fn lock_cell(l: &LockRate, c: LockColumn) -> Cell<'static> {
    let idle = l.interval.count == 0;
    let right = |s: String| Cell::from(Line::from(s).right_aligned());
    match c {
        LockColumn::Type => Cell::from(l.key.lock_type.name()),
        LockColumn::Name => Cell::from(l.name.clone()),
        LockColumn::Contentions => right(fmt_rate(l.contentions_per_s)),
        LockColumn::Wait => right(fmt_dur(l.wait_ns_per_s)),
        LockColumn::Avg if idle => right("-".into()),
        LockColumn::P99 if idle => right("-".into()),
        LockColumn::Avg => right(fmt_dur(l.avg_ns() as f64)),
        LockColumn::P99 => right(fmt_dur(l.p99_ns() as f64)),
        LockColumn::Max => right(fmt_dur(l.max_ns() as f64)),
        LockColumn::Waiters => right(l.waiters.to_string()),
        LockColumn::Modes => Cell::from(match l.modes {
            Some(m) => format!("{}/{}/{}/{}", m.steals, m.spins, m.handoffs, m.sleeps),
            None if l.key.lock_type.name().starts_with("rwsem") => "n/a".to_owned(),
            None => "-".to_owned(),
        }),
    }
}

fn task_width(c: TaskColumn) -> u16 {
    match c {
        TaskColumn::Pid => 8,
        TaskColumn::Comm => 16,
        TaskColumn::Contentions | TaskColumn::Wait | TaskColumn::Avg => 9,
        TaskColumn::Locks => 5,
        TaskColumn::TopLock => 12,
    }
}

fn fit_task_columns(width: u16) -> Vec<TaskColumn> {
    fit_columns(
        &TaskColumn::ALL,
        task_width,
        &[
            TaskColumn::TopLock,
            TaskColumn::Locks,
            TaskColumn::Avg,
            TaskColumn::Pid,
        ],
        width,
    )
}

fn user_width(c: UserColumn) -> u16 {
    match c {
        UserColumn::Type => 14,
        UserColumn::Process => 18,
        UserColumn::Addr => 14,
        UserColumn::Contentions | UserColumn::Wait | UserColumn::Wakes => 8,
        UserColumn::Avg | UserColumn::P99 | UserColumn::Max => 9,
        UserColumn::Blocked => 8,
        UserColumn::Owner => 16,
    }
}

/// The user-space lock columns that fit in `width`, in screen order.
pub fn fit_user_columns(width: u16) -> Vec<UserColumn> {
    fit_columns(
        &UserColumn::ALL,
        user_width,
        &[
            UserColumn::Owner,
            UserColumn::Max,
            UserColumn::Avg,
            UserColumn::Blocked,
            UserColumn::Type,
            UserColumn::P99,
            UserColumn::Addr,
            UserColumn::Wakes,
        ],
        width,
    )
}

fn draw_user_locks(frame: &mut Frame, app: &App, area: Rect) {
    let cols = fit_user_columns(area.width);
    let header = Row::new(cols.iter().map(|&c| {
        let t = sort_title(c.title(), c == app.user_sort, app.reverse);
        if matches!(
            c,
            UserColumn::Type | UserColumn::Process | UserColumn::Addr | UserColumn::Owner
        ) {
            Cell::from(t)
        } else {
            Cell::from(Line::from(t).right_aligned())
        }
    }))
    .style(HEADER_STYLE);
    let blocking = app.futex_blocking();
    let rows: Vec<Row> = app
        .visible_user_locks()
        .into_iter()
        .map(|l| Row::new(cols.iter().map(|&c| user_cell(l, c, blocking))))
        .collect();
    let empty = rows.is_empty();
    let widths = cols.iter().map(|&c| match c {
        UserColumn::Process => Constraint::Min(user_width(c)),
        c => Constraint::Length(user_width(c)),
    });
    let table = Table::new(rows, widths)
        .header(header)
        .row_highlight_style(SELECTED);
    let mut state = TableState::default().with_selected(app.selected_user_row());
    frame.render_stateful_widget(table, area, &mut state);
    if empty {
        let traced = app
            .current
            .as_ref()
            .is_some_and(|r| r.futex_events.is_some() || r.locks.iter().any(|l| l.user.is_some()));
        if traced || !app.filter.is_empty() {
            draw_empty(frame, app, area, "no contended user-space locks");
        } else {
            let area = Rect {
                y: area.y.saturating_add(1),
                height: area.height.saturating_sub(1),
                ..area
            };
            frame.render_widget(
                Paragraph::new(
                    "user-space locks are not traced by this source (futex probes not attached)",
                )
                .dim(),
                area,
            );
        }
    }
}

/// Cell `c` of user-space lock `l`; `blocking`: the source sees no wakes (`--futex-mode
/// blocking`), so their rate is "-", not 0.
fn user_cell(l: &LockRate, c: UserColumn, blocking: bool) -> Cell<'static> {
    let idle = l.interval.count == 0;
    let right = |s: String| Cell::from(Line::from(s).right_aligned());
    let u = l.user.as_ref();
    match c {
        UserColumn::Type => Cell::from(l.key.lock_type.name()),
        UserColumn::Process => Cell::from(match u {
            Some(u) => format!("{}[{}]", u.comm, u.pid),
            None => l.key.pid.map(|p| format!("[{p}]")).unwrap_or_default(),
        }),
        UserColumn::Addr => Cell::from(l.key.addr.clone()),
        UserColumn::Contentions => right(fmt_rate(l.contentions_per_s)),
        UserColumn::Wait => right(fmt_dur(l.wait_ns_per_s)),
        UserColumn::Avg | UserColumn::P99 if idle => right("-".into()),
        UserColumn::Avg => right(fmt_dur(l.avg_ns() as f64)),
        UserColumn::P99 => right(fmt_dur(l.p99_ns() as f64)),
        UserColumn::Max => right(fmt_dur(l.max_ns() as f64)),
        UserColumn::Wakes if blocking => right("-".into()),
        UserColumn::Wakes => right(u.map_or("-".into(), |u| fmt_rate(u.wake_calls_per_s))),
        UserColumn::Blocked => right(u.map_or("-".into(), |u| u.blocked().to_string())),
        UserColumn::Owner => Cell::from(
            u.and_then(|u| u.pi_owner())
                .map(|o| {
                    if o.comm.is_empty() {
                        format!("tid {}", o.tid)
                    } else {
                        format!("{}[{}]", o.comm, o.tid)
                    }
                })
                .unwrap_or_else(|| "-".into()),
        ),
    }
}

fn draw_tasks(frame: &mut Frame, app: &App, area: Rect) {
    let cols = fit_task_columns(area.width);
    let header = Row::new(
        cols.iter()
            .map(|&c| sort_title(c.title(), c == app.task_sort, app.reverse)),
    )
    .style(HEADER_STYLE);
    let rows: Vec<Row> = app
        .visible_tasks()
        .into_iter()
        .map(|t| Row::new(cols.iter().map(|&c| task_cell(t, c))))
        .collect();
    let empty = rows.is_empty();
    let widths = cols.iter().map(|&c| match c {
        TaskColumn::TopLock => Constraint::Min(task_width(c)),
        c => Constraint::Length(task_width(c)),
    });
    let table = Table::new(rows, widths)
        .header(header)
        .row_highlight_style(SELECTED);
    let mut state = TableState::default().with_selected(app.selected_task_row());
    frame.render_stateful_widget(table, area, &mut state);
    if empty {
        draw_empty(frame, app, area, "no waiting processes");
    }
}

/// The waiting processes' cgroups, busiest first: every wait, kernel and user-space.
fn draw_cgroups(frame: &mut Frame, app: &App, area: Rect) {
    let header =
        Row::new(["WAIT/s", "CONT/s", "AVG", "TOTAL", "TYPES", "CGROUP"]).style(HEADER_STYLE);
    let rows: Vec<Row> = app
        .visible_cgroups()
        .into_iter()
        .map(|c| {
            let avg = if c.interval.count == 0 {
                "-".to_owned()
            } else {
                fmt_dur(c.interval.avg_ns() as f64)
            };
            Row::new([
                fmt_dur(c.wait_ns_per_s),
                fmt_rate(c.contentions_per_s),
                avg,
                fmt_dur(c.total.total_ns as f64),
                c.types.clone(),
                c.cgroup.clone(),
            ])
        })
        .collect();
    let empty = rows.is_empty();
    let widths = [
        Constraint::Length(9),
        Constraint::Length(8),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(22),
        Constraint::Min(20),
    ];
    let table = Table::new(rows, widths)
        .header(header)
        .row_highlight_style(SELECTED);
    let mut state = TableState::default().with_selected(app.selected_cgroup_row());
    frame.render_stateful_widget(table, area, &mut state);
    if empty {
        draw_empty(frame, app, area, "no waiting cgroups");
    }
}

fn task_cell(t: &TaskRate, c: TaskColumn) -> Cell<'static> {
    match c {
        TaskColumn::Pid => Cell::from(t.pid.to_string()),
        TaskColumn::Comm => Cell::from(t.comm.clone()),
        TaskColumn::Contentions => Cell::from(fmt_rate(t.contentions_per_s)),
        TaskColumn::Wait => Cell::from(fmt_dur(t.wait_ns_per_s)),
        TaskColumn::Avg if t.interval.count == 0 => Cell::from("-"),
        TaskColumn::Avg => Cell::from(fmt_dur(t.interval.avg_ns() as f64)),
        TaskColumn::Locks => Cell::from(t.locks.to_string()),
        TaskColumn::TopLock => Cell::from(t.top_lock.clone()),
    }
}

fn draw_detail(frame: &mut Frame, app: &App, l: &LockRate, area: Rect) {
    let [summary, graphs, lists] = Layout::vertical([
        Constraint::Length(5),
        Constraint::Fill(3),
        Constraint::Fill(2),
    ])
    .areas(area);

    let t = &l.total;
    let first = match &l.user {
        Some(u) => format!(
            "{} at {} in {}[{}]  blocked now {}",
            l.key.lock_type,
            l.key.addr,
            u.comm,
            u.pid,
            u.blocked()
        ),
        None => {
            let owner = l
                .owner_comm
                .as_ref()
                .map(|c| format!("  owner {c}"))
                .unwrap_or_default();
            format!(
                "{} at {}{}  waiters now {}",
                l.key.lock_type, l.key.addr, owner, l.waiters
            )
        }
    };
    let pi_owner = |u: &crate::aggregate::rates::UserRate| {
        u.pi_owner()
            .map(|o| format!("  PI owner {}[{}]", o.comm, o.tid))
            .unwrap_or_default()
    };
    let last = match (&l.user, l.modes) {
        (Some(u), _) if app.futex_blocking() => format!(
            "futex (blocking mode): sleeps {}/s; wakes, EAGAIN, timeouts and calls that did \
             not block are not seen{}",
            fmt_rate(l.contentions_per_s),
            pi_owner(u),
        ),
        (Some(u), _) => {
            let i = &u.interval;
            let owner = pi_owner(u);
            format!(
                "futex: wait calls {}/s (EAGAIN {}/s)  wake calls {}/s woke {}/s  \
                 timeouts {}  interrupted {}  errors {}{owner}",
                fmt_rate(u.wait_calls_per_s),
                fmt_rate(u.eagain_per_s),
                fmt_rate(u.wake_calls_per_s),
                fmt_rate(u.woken_per_s),
                i.timeouts,
                i.interrupted,
                i.errors,
            )
        }
        (None, Some(m)) => format!(
            "acquire modes (last interval): steals {}  spins {}  handoffs {}  sleeps {}  \
             (n/a: needs the deep tier, ~: estimate, -: not on this side)",
            m.steals, m.spins, m.handoffs, m.sleeps
        ),
        (None, None) => {
            "acquire modes: n/a (the tracepoint tier cannot see rwsem acquisition modes)".to_owned()
        }
    };
    let text = vec![
        Line::from(first),
        Line::from(format!(
            "now:   {} cont/s  wait {}/s  avg {}  p99~ {}",
            fmt_rate(l.contentions_per_s),
            fmt_dur(l.wait_ns_per_s),
            fmt_dur(l.avg_ns() as f64),
            fmt_dur(l.p99_ns() as f64),
        )),
        Line::from(format!(
            "total: {} waits ({} failed)  wait {}  avg {}  min {}  max {}  p50~ {}  p99~ {}",
            t.count,
            t.failed,
            fmt_dur(t.total_ns as f64),
            fmt_dur(t.avg_ns() as f64),
            fmt_dur(t.min_ns as f64),
            fmt_dur(t.max_ns as f64),
            fmt_dur(t.percentile_ns(50.0) as f64),
            fmt_dur(t.percentile_ns(99.0) as f64),
        )),
        Line::from(last),
    ];
    frame.render_widget(
        Paragraph::new(text)
            .wrap(Wrap { trim: false })
            .block(Block::default().title(Line::from(l.name.clone()).bold())),
        summary,
    );

    let [hist_area, chart_area] =
        Layout::horizontal([Constraint::Fill(1), Constraint::Fill(1)]).areas(graphs);
    let (stats, scope) = match app.hist_scope {
        HistScope::SinceStart => (&l.total, "since start"),
        HistScope::Interval => (&l.interval, "last interval"),
    };
    let block = Block::bordered().title(format!("wait histogram, {scope} (h)"));
    let inner = block.inner(hist_area);
    frame.render_widget(block, hist_area);
    frame.render_widget(Paragraph::new(histogram_lines(stats, inner.width)), inner);

    draw_wait_chart(frame, app, l, chart_area);

    let (callers_area, tasks_area, holders_area) = if l.holders.is_empty() {
        let [c, t] = Layout::horizontal([Constraint::Fill(3), Constraint::Fill(2)]).areas(lists);
        (c, t, None)
    } else {
        let [c, t, h] = Layout::horizontal([
            Constraint::Fill(3),
            Constraint::Fill(2),
            Constraint::Fill(2),
        ])
        .areas(lists);
        (c, t, Some(h))
    };
    if let Some(area) = holders_area {
        draw_holders(frame, l, area);
    }
    match &l.user {
        Some(u) => {
            // User-space locks have no kernel callers: their futex calls instead.
            let secs = app.rates.as_ref().map_or(0.0, |r| r.interval_s);
            let calls: Vec<Row> = u
                .total
                .calls
                .iter()
                .map(|(cmd, &total)| {
                    let now = u.interval.calls.get(cmd).copied().unwrap_or(0);
                    Row::new([
                        Cell::from(cmd.clone()),
                        Cell::from(fmt_rate(crate::aggregate::rates::per_second(now, secs))),
                        Cell::from(total.to_string()),
                    ])
                })
                .collect();
            frame.render_widget(
                Table::new(
                    calls,
                    [
                        Constraint::Min(12),
                        Constraint::Length(8),
                        Constraint::Length(10),
                    ],
                )
                .header(Row::new(["futex call", "calls/s", "total"]).style(HEADER_STYLE))
                .block(Block::bordered().title("futex calls")),
                callers_area,
            );
        }
        None => draw_callers(frame, l, callers_area),
    }
    let tasks: Vec<Row> = l
        .tasks
        .iter()
        .map(|t| {
            Row::new([
                Cell::from(format!("{}[{}]", t.comm, t.pid)),
                Cell::from(fmt_rate(t.contentions_per_s)),
                Cell::from(fmt_dur(t.wait_ns_per_s)),
            ])
        })
        .collect();
    frame.render_widget(
        Table::new(
            tasks,
            [
                Constraint::Min(10),
                Constraint::Length(8),
                Constraint::Length(8),
            ],
        )
        .header(Row::new(["process", "cont/s", "wait/s"]).style(HEADER_STYLE))
        .block(Block::bordered().title("top waiting processes")),
        tasks_area,
    );
}

/// Who held the lock: the wait each holder caused (per second now, and since start).
fn draw_holders(frame: &mut Frame, l: &LockRate, area: Rect) {
    let mut rows: Vec<Row> = l
        .holders
        .iter()
        .map(|h| {
            Row::new([
                Cell::from(h.name.clone()),
                Cell::from(fmt_dur(h.wait_ns_per_s)),
                Cell::from(fmt_dur(h.total_wait_ns as f64)),
            ])
        })
        .collect();
    if l.holder_unknown_ns > 0 {
        rows.push(Row::new([
            Cell::from(crate::aggregate::rows::UNKNOWN_HOLDER),
            Cell::from(""),
            Cell::from(fmt_dur(l.holder_unknown_ns as f64)),
        ]));
    }
    frame.render_widget(
        Table::new(
            rows,
            [
                Constraint::Min(10),
                Constraint::Length(8),
                Constraint::Length(9),
            ],
        )
        .header(Row::new(["holder", "wait/s", "total"]).style(HEADER_STYLE))
        .block(Block::bordered().title("holders (waits they caused)")),
        area,
    );
}

fn draw_callers(frame: &mut Frame, l: &LockRate, area: Rect) {
    let callers: Vec<Row> = l
        .callers
        .iter()
        .map(|c| {
            Row::new([
                Cell::from(c.caller.clone()),
                Cell::from(fmt_rate(c.contentions_per_s)),
                Cell::from(fmt_dur(c.wait_ns_per_s)),
                Cell::from(c.total.count.to_string()),
            ])
        })
        .collect();
    frame.render_widget(
        Table::new(
            callers,
            [
                Constraint::Min(12),
                Constraint::Length(8),
                Constraint::Length(8),
                Constraint::Length(9),
            ],
        )
        .header(Row::new(["caller", "cont/s", "wait/s", "total"]).style(HEADER_STYLE))
        .block(Block::bordered().title("top callers")),
        area,
    );
}

/// The log2 histogram as text bars, one line per bucket from the shortest to the longest
/// non-empty one: `  4.1us |#####   123`.
pub fn histogram_lines(stats: &WaitStats, width: u16) -> Vec<Line<'static>> {
    let (Some(lo), Some(hi)) = (
        stats.hist.iter().position(|&n| n != 0),
        stats.hist.iter().rposition(|&n| n != 0),
    ) else {
        return vec![Line::from("no waits").dim()];
    };
    let peak = stats.hist[lo..=hi]
        .iter()
        .copied()
        .max()
        .unwrap_or(1)
        .max(1);
    let count_w = peak.to_string().len();
    // label (7) + " │" (2) + bar + " " + count
    let bar_w = usize::from(width).saturating_sub(7 + 2 + 1 + count_w);
    (lo..=hi)
        .map(|i| {
            let n = stats.hist[i];
            let len = if n == 0 {
                0
            } else {
                ((n as f64 / peak as f64) * bar_w as f64).ceil() as usize
            };
            Line::from(vec![
                Span::raw(format!("{:>7} │", fmt_dur(bucket_lower_ns(i) as f64))),
                Span::styled("█".repeat(len), Style::new().fg(Color::Cyan)),
                Span::raw(format!("{:>w$} {n}", "", w = bar_w.saturating_sub(len))),
            ])
        })
        .collect()
}

fn draw_wait_chart(frame: &mut Frame, app: &App, l: &LockRate, area: Rect) {
    let interval = app.source.interval.as_secs_f64();
    let samples: Vec<u64> = app
        .history
        .get(&l.key)
        .map(|h| h.iter().copied().collect())
        .unwrap_or_default();
    let n = samples.len();
    // x: seconds before now; y: milliseconds of waiting per second.
    let points: Vec<(f64, f64)> = samples
        .iter()
        .enumerate()
        .map(|(i, &v)| (-((n - 1 - i) as f64) * interval, v as f64 / 1e6))
        .collect();
    let peak = samples.iter().copied().max().unwrap_or(0);
    let span = (n.saturating_sub(1) as f64 * interval).max(interval);
    let y_max = (peak as f64 / 1e6).max(0.001) * 1.1;
    let title = format!(
        "wait/s, last {} (peak {}/s)",
        fmt_interval(span),
        fmt_dur(peak as f64)
    );
    let chart = Chart::new(vec![
        Dataset::default()
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(Color::Yellow))
            .data(&points),
    ])
    .block(Block::bordered().title(title))
    .x_axis(
        Axis::default()
            .bounds([-span, 0.0])
            .labels([format!("-{}", fmt_interval(span)), "now".to_owned()]),
    )
    .y_axis(
        Axis::default()
            .bounds([0.0, y_max])
            .labels(["0".to_owned(), fmt_dur(y_max * 1e6)]),
    );
    frame.render_widget(chart, area);
}

/// `comm[pid]`, or `comm[pid/tid]` when the thread is not the process itself.
fn task_name(t: &TaskRef) -> String {
    match t.tid {
        Some(tid) if tid != t.pid => format!("{}[{}/{}]", t.comm, t.pid, tid),
        _ => format!("{}[{}]", t.comm, t.pid),
    }
}

/// Kernel monotonic nanoseconds as seconds, like trace timestamps: `12345.678901`.
fn fmt_mono(ns: u64) -> String {
    format!("{}.{:06}", ns / 1_000_000_000, (ns % 1_000_000_000) / 1_000)
}

/// Starvation episodes above, latency spikes below, newest first; ones that arrived with
/// the latest refresh are marked `*`.
fn draw_rt(frame: &mut Frame, app: &App, area: Rect) {
    let [top, bottom] = Layout::vertical([Constraint::Fill(1), Constraint::Fill(1)]).areas(area);
    let f = app.filter.to_lowercase();
    let has = |s: &str| f.is_empty() || s.to_lowercase().contains(&f);
    let rt = &app.rt;
    let new = |refresh: u64| if refresh == app.refreshes { "*" } else { "" };

    let episodes: Vec<&Seen<StarvationEpisode>> = rt
        .episodes
        .iter()
        .filter(|e| {
            let e = &e.item;
            has(&e.lock) || has(&e.addr) || has(&e.waiter.comm)
        })
        .collect();
    let title = rt_title(
        "starvation episodes",
        rt.episodes_traced,
        episodes.len(),
        rt.episodes.len(),
        rt.new_episodes,
        rt.episodes_dropped,
    );
    let block = Block::bordered().title(title);
    if !rt.episodes_traced {
        frame.render_widget(
            Paragraph::new("not traced: this source records no starvation episodes")
                .dim()
                .block(block),
            top,
        );
    } else if episodes.is_empty() {
        frame.render_widget(Paragraph::new(empty_rt(app)).dim().block(block), top);
    } else {
        let rows = episodes.iter().map(|s| {
            let e = &s.item;
            let kind = match (e.kind, e.probable) {
                (EpisodeKind::Starvation, false) => "starvation",
                (EpisodeKind::Starvation, true) => "starvation?",
                (EpisodeKind::LongHold, false) => "long-hold",
                (EpisodeKind::LongHold, true) => "long-hold?",
            };
            let top_acq = e
                .acquirers
                .first()
                .map(|a| format!("{} cpu{} x{}", task_name(&a.task), a.cpu, a.count))
                .unwrap_or_else(|| "-".into());
            Row::new([
                Cell::from(new(s.refresh)),
                Cell::from(fmt_mono(e.ts_ns)),
                Cell::from(kind),
                Cell::from(e.lock.clone()),
                Cell::from(task_name(&e.waiter)),
                Cell::from(e.cpu.to_string()),
                Cell::from(Line::from(fmt_dur(e.wait_ns as f64)).right_aligned()),
                Cell::from(Line::from(e.foreign_acquisitions.to_string()).right_aligned()),
                Cell::from(top_acq),
            ])
        });
        frame.render_widget(
            Table::new(
                rows,
                [
                    Constraint::Length(1),
                    Constraint::Length(15),
                    Constraint::Length(11),
                    Constraint::Min(12),
                    Constraint::Length(20),
                    Constraint::Length(3),
                    Constraint::Length(8),
                    Constraint::Length(7),
                    Constraint::Length(28),
                ],
            )
            .header(
                Row::new([
                    "",
                    "time (s)",
                    "kind",
                    "lock",
                    "waiter",
                    "cpu",
                    "wait",
                    "foreign",
                    "top other acquirer",
                ])
                .style(HEADER_STYLE),
            )
            .block(block),
            top,
        );
    }

    let spikes: Vec<&Seen<LatencySpike>> = rt
        .spikes
        .iter()
        .filter(|s| {
            let s = &s.item;
            has(&s.task.comm) || s.overlaps.iter().any(|o| has(&o.lock))
        })
        .collect();
    let title = rt_title(
        "latency spikes",
        rt.spikes_traced,
        spikes.len(),
        rt.spikes.len(),
        rt.new_spikes,
        rt.spikes_dropped,
    );
    let block = Block::bordered().title(title);
    if !rt.spikes_traced {
        frame.render_widget(
            Paragraph::new("not traced: this source records no latency spikes")
                .dim()
                .block(block),
            bottom,
        );
    } else if spikes.is_empty() {
        frame.render_widget(Paragraph::new(empty_rt(app)).dim().block(block), bottom);
    } else {
        let rows = spikes.iter().map(|s| {
            let p = &s.item;
            let overlap = p
                .overlaps
                .first()
                .map(|o| format!("{} {} {}", o.lock, o.kind, fmt_dur(o.overlap_ns as f64)))
                .unwrap_or_else(|| match p.timer_late_ns {
                    Some(l) if p.late_timer_on_idle_cpu() => {
                        format!("none; timer {} late, cpu idle", fmt_dur(l as f64))
                    }
                    _ => "none".into(),
                });
            let source = match p.source {
                crate::aggregate::rt::SpikeSource::Lockscope => "lockscope",
                crate::aggregate::rt::SpikeSource::Cyclictest => "cyclictest",
            };
            Row::new([
                Cell::from(new(s.refresh)),
                Cell::from(fmt_mono(p.ts_ns)),
                Cell::from(p.cpu.to_string()),
                Cell::from(task_name(&p.task)),
                Cell::from(Line::from(fmt_dur(p.latency_ns as f64)).right_aligned()),
                Cell::from(source),
                Cell::from(if p.explained { "yes" } else { "no" }),
                Cell::from(overlap),
            ])
        });
        frame.render_widget(
            Table::new(
                rows,
                [
                    Constraint::Length(1),
                    Constraint::Length(15),
                    Constraint::Length(3),
                    Constraint::Length(20),
                    Constraint::Length(8),
                    Constraint::Length(10),
                    Constraint::Length(9),
                    Constraint::Min(20),
                ],
            )
            .header(
                Row::new([
                    "",
                    "time (s)",
                    "cpu",
                    "task",
                    "latency",
                    "source",
                    "explained",
                    "largest lock overlap",
                ])
                .style(HEADER_STYLE),
            )
            .block(block),
            bottom,
        );
    }
}

fn rt_title(
    what: &str,
    traced: bool,
    shown: usize,
    all: usize,
    new: usize,
    dropped: u64,
) -> String {
    if !traced {
        return format!("{what}: not traced");
    }
    let mut t = if shown == all {
        format!("{what}: {all}")
    } else {
        format!("{what}: {shown}/{all}")
    };
    if all > 0 {
        t.push_str(", newest first");
    }
    if new > 0 {
        t.push_str(&format!(", {new} new (*)"));
    }
    if dropped > 0 {
        t.push_str(&format!(", {dropped} older not kept"));
    }
    t
}

fn empty_rt(app: &App) -> String {
    if app.filter.is_empty() {
        "none yet".to_owned()
    } else {
        format!("none match the filter `{}`", app.filter)
    }
}

fn draw_help(frame: &mut Frame, app: &App, area: Rect) {
    let w = area.width.saturating_sub(4).min(84);
    let h = area.height.saturating_sub(2).min(36);
    let popup = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    let mut lines = vec![
        Line::from("keys").bold(),
        Line::from("  q, Esc        quit (Esc: back from a detail view, clear a filter)"),
        Line::from("  Up/Down j/k   select a row      PgUp/PgDn Home/End  jump"),
        Line::from("  Enter         detail of the selected lock (histogram, chart, callers)"),
        Line::from("  Tab, S-Tab    next / previous view"),
        Line::from("  l u t c e     views: kernel locks, user-space locks (futex, pthread),"),
        Line::from("                waiting processes, their cgroups, RT episodes and spikes"),
        Line::from("  1-9, 0        sort by that column (0: the tenth; again: reverse)"),
        Line::from("  < > s         previous / next sort column     r  reverse the order"),
        Line::from("  /             filter by type, lock name or process name (every view)"),
        Line::from("  p, space      pause (figures freeze; the next refresh covers the pause)"),
        Line::from("  h             detail: histogram since start / of the last interval"),
        Line::from("  ?             this help (any key closes it)"),
        Line::from(""),
        Line::from("columns").bold(),
    ];
    let column = |i: usize, title: &str, help: &str| {
        let key = match i {
            0..=8 => (i + 1).to_string(),
            9 => "0".to_owned(),
            _ => " ".to_owned(),
        };
        Line::from(format!("  {key} {title:<9} {help}"))
    };
    match app.mode.view() {
        Mode::UserLocks => lines.extend(
            UserColumn::ALL
                .iter()
                .enumerate()
                .map(|(i, c)| column(i, c.title(), c.help())),
        ),
        _ => lines.extend(
            LockColumn::ALL
                .iter()
                .enumerate()
                .map(|(i, c)| column(i, c.title(), c.help())),
        ),
    }
    lines.push(Line::from(""));
    lines.push(Line::from(format!(
        "Rates cover the last interval ({}); ~ marks log2-histogram estimates.",
        fmt_interval(app.source.interval.as_secs_f64())
    )));
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(Block::bordered().title("help")),
        popup,
    );
}
