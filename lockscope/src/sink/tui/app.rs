//! The live view's state and its key handling. No terminal here: `ui` draws an [`App`],
//! `mod.rs` feeds it recordings and keys.

use std::{
    collections::{HashMap, VecDeque},
    time::Duration,
};

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use crate::aggregate::{
    Recording,
    rates::{LockKey, LockRate, Rates, TaskRate, rates},
};

/// How much wait-rate history the detail view's chart keeps.
pub const HISTORY: Duration = Duration::from_secs(300);

/// What the screen shows; drives both key handling and drawing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// The table of locks.
    Locks,
    /// The table of waiting processes.
    Tasks,
    /// One lock: histogram, wait-rate chart, callers, tasks.
    Detail(LockKey),
    /// Typing a filter; the view underneath stays visible.
    Filter(Box<Mode>),
    /// The help overlay over a view.
    Help(Box<Mode>),
}

impl Mode {
    /// The view drawn underneath overlays.
    pub fn view(&self) -> &Mode {
        match self {
            Mode::Filter(m) | Mode::Help(m) => m.view(),
            m => m,
        }
    }
}

/// Columns of the lock table. Their order here is the order on screen and the number
/// key that sorts by them (`1` = type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockColumn {
    Type,
    Name,
    Contentions,
    Wait,
    Avg,
    P99,
    Max,
    Waiters,
    /// rwsem acquisition modes; "n/a" where the tier cannot see them.
    Modes,
}

impl LockColumn {
    pub const ALL: [LockColumn; 9] = [
        LockColumn::Type,
        LockColumn::Name,
        LockColumn::Contentions,
        LockColumn::Wait,
        LockColumn::Avg,
        LockColumn::P99,
        LockColumn::Max,
        LockColumn::Waiters,
        LockColumn::Modes,
    ];

    pub fn title(self) -> &'static str {
        match self {
            LockColumn::Type => "type",
            LockColumn::Name => "name",
            LockColumn::Contentions => "cont/s",
            LockColumn::Wait => "wait/s",
            LockColumn::Avg => "avg",
            LockColumn::P99 => "p99~",
            LockColumn::Max => "max",
            LockColumn::Waiters => "waiters",
            LockColumn::Modes => "steal/spin/handoff/sleep",
        }
    }

    /// What the column means, for the help overlay.
    pub fn help(self) -> &'static str {
        match self {
            LockColumn::Type => "lock type (rwsem:R = waited for read)",
            LockColumn::Name => "lock name, or its address",
            LockColumn::Contentions => "contended acquisitions per second",
            LockColumn::Wait => "time spent waiting per second, all waiters summed",
            LockColumn::Avg => "average wait in the interval",
            LockColumn::P99 => "99th percentile wait in the interval (log2 estimate)",
            LockColumn::Max => "longest single wait since start (exact)",
            LockColumn::Waiters => "processes that waited in the interval",
            LockColumn::Modes => "rwsem acquisition modes (n/a: needs the deep tier)",
        }
    }

    /// Numbers sort largest first, text ascending.
    fn numeric(self) -> bool {
        !matches!(self, LockColumn::Type | LockColumn::Name)
    }
}

/// Columns of the per-task table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskColumn {
    Pid,
    Comm,
    Contentions,
    Wait,
    Avg,
    Locks,
    TopLock,
}

impl TaskColumn {
    pub const ALL: [TaskColumn; 7] = [
        TaskColumn::Pid,
        TaskColumn::Comm,
        TaskColumn::Contentions,
        TaskColumn::Wait,
        TaskColumn::Avg,
        TaskColumn::Locks,
        TaskColumn::TopLock,
    ];

    pub fn title(self) -> &'static str {
        match self {
            TaskColumn::Pid => "pid",
            TaskColumn::Comm => "comm",
            TaskColumn::Contentions => "cont/s",
            TaskColumn::Wait => "wait/s",
            TaskColumn::Avg => "avg",
            TaskColumn::Locks => "locks",
            TaskColumn::TopLock => "top lock",
        }
    }

    fn numeric(self) -> bool {
        !matches!(
            self,
            TaskColumn::Comm | TaskColumn::TopLock | TaskColumn::Pid
        )
    }
}

/// What the main loop should do after a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Continue,
    Quit,
}

/// The detail view's histogram: of the last interval, or since start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistScope {
    SinceStart,
    Interval,
}

/// Where recordings come from, for the header.
#[derive(Debug, Clone)]
pub struct SourceInfo {
    /// `standalone` or `connected to ADDR`.
    pub description: String,
    pub interval: Duration,
}

pub struct App {
    pub mode: Mode,
    pub source: SourceInfo,
    /// The latest recording (kernel, tier, target for the header).
    pub current: Option<Recording>,
    pub rates: Option<Rates>,
    pub lock_sort: LockColumn,
    pub task_sort: TaskColumn,
    /// Reverse the natural direction of the sort column.
    pub reverse: bool,
    /// Case-insensitive substring of a type, lock name or process name.
    pub filter: String,
    pub paused: bool,
    pub hist_scope: HistScope,
    /// Last error from the source (a server that went away); cleared by the next
    /// successful refresh.
    pub error: Option<String>,
    /// Indices into `rates.locks` / `rates.tasks` in display order (filtered, sorted).
    pub lock_rows: Vec<usize>,
    pub task_rows: Vec<usize>,
    /// The selected lock (follows the lock when rows move) and task.
    pub selected_lock: Option<LockKey>,
    pub selected_task: Option<u32>,
    /// Wait nanoseconds per second, one sample per refresh, oldest first.
    pub history: HashMap<LockKey, VecDeque<u64>>,
    pub refreshes: u64,
    /// Display order of the previous refresh, to keep rows in place on ties.
    prev_lock_order: HashMap<LockKey, usize>,
    prev_task_order: HashMap<u32, usize>,
    history_len: usize,
}

impl App {
    pub fn new(source: SourceInfo) -> Self {
        let samples = (HISTORY.as_secs_f64() / source.interval.as_secs_f64().max(0.001)).ceil();
        Self {
            mode: Mode::Locks,
            history_len: (samples as usize).clamp(10, 3_600),
            source,
            current: None,
            rates: None,
            lock_sort: LockColumn::Wait,
            task_sort: TaskColumn::Wait,
            reverse: false,
            filter: String::new(),
            paused: false,
            hist_scope: HistScope::SinceStart,
            error: None,
            lock_rows: Vec::new(),
            task_rows: Vec::new(),
            selected_lock: None,
            selected_task: None,
            history: HashMap::new(),
            refreshes: 0,
            prev_lock_order: HashMap::new(),
            prev_task_order: HashMap::new(),
        }
    }

    /// A new recording arrived: derive the interval's rates against the previous one.
    pub fn update(&mut self, rec: Recording) {
        let r = rates(self.current.as_ref(), &rec);
        for l in &r.locks {
            let h = self.history.entry(l.key.clone()).or_default();
            h.push_back(l.wait_ns_per_s.round() as u64);
            while h.len() > self.history_len {
                h.pop_front();
            }
        }
        // Locks gone from the recording (a restarted server) lose their history.
        self.history
            .retain(|k, _| r.locks.iter().any(|l| &l.key == k));
        self.rates = Some(r);
        self.current = Some(rec);
        self.error = None;
        self.refreshes += 1;
        self.reorder();
    }

    pub fn set_error(&mut self, e: &anyhow::Error) {
        self.error = Some(format!("{e:#}"));
    }

    /// Rows to show, in order.
    pub fn visible_locks(&self) -> Vec<&LockRate> {
        let Some(r) = &self.rates else {
            return Vec::new();
        };
        self.lock_rows.iter().map(|&i| &r.locks[i]).collect()
    }

    pub fn visible_tasks(&self) -> Vec<&TaskRate> {
        let Some(r) = &self.rates else {
            return Vec::new();
        };
        self.task_rows.iter().map(|&i| &r.tasks[i]).collect()
    }

    pub fn lock(&self, key: &LockKey) -> Option<&LockRate> {
        self.rates.as_ref()?.locks.iter().find(|l| &l.key == key)
    }

    /// Index of the selected row among the visible ones.
    pub fn selected_lock_row(&self) -> Option<usize> {
        let key = self.selected_lock.as_ref()?;
        self.visible_locks().iter().position(|l| &l.key == key)
    }

    pub fn selected_task_row(&self) -> Option<usize> {
        let pid = self.selected_task?;
        self.visible_tasks().iter().position(|t| t.pid == pid)
    }

    fn lock_matches(&self, l: &LockRate) -> bool {
        if self.filter.is_empty() {
            return true;
        }
        let f = self.filter.to_lowercase();
        let has = |s: &str| s.to_lowercase().contains(&f);
        has(l.key.lock_type.name())
            || has(&l.name)
            || has(&l.key.addr)
            || l.owner_comm.as_deref().is_some_and(has)
            || l.tasks.iter().any(|t| has(&t.comm))
    }

    fn task_matches(&self, t: &TaskRate) -> bool {
        if self.filter.is_empty() {
            return true;
        }
        let f = self.filter.to_lowercase();
        let has = |s: &str| s.to_lowercase().contains(&f);
        has(&t.comm) || has(&t.pid.to_string()) || has(&t.top_lock)
    }

    /// Recompute the display order: filter, sort by the sort column; rows that tie keep
    /// their previous place, so rows do not jump around unless the order really changes.
    pub fn reorder(&mut self) {
        let Some(r) = &self.rates else {
            return;
        };
        let prev = &self.prev_lock_order;
        let mut rows: Vec<usize> = (0..r.locks.len())
            .filter(|&i| self.lock_matches(&r.locks[i]))
            .collect();
        let (col, rev) = (self.lock_sort, self.reverse);
        rows.sort_by(|&a, &b| {
            let (a, b) = (&r.locks[a], &r.locks[b]);
            let primary = cmp_lock(col, a, b);
            let primary = if rev { primary.reverse() } else { primary };
            primary
                .then_with(|| {
                    let pa = prev.get(&a.key).copied().unwrap_or(usize::MAX);
                    let pb = prev.get(&b.key).copied().unwrap_or(usize::MAX);
                    pa.cmp(&pb)
                })
                .then_with(|| b.total.total_ns.cmp(&a.total.total_ns))
                .then_with(|| a.key.cmp(&b.key))
        });
        self.prev_lock_order = rows
            .iter()
            .enumerate()
            .map(|(pos, &i)| (r.locks[i].key.clone(), pos))
            .collect();

        let prev = &self.prev_task_order;
        let mut trows: Vec<usize> = (0..r.tasks.len())
            .filter(|&i| self.task_matches(&r.tasks[i]))
            .collect();
        let col = self.task_sort;
        trows.sort_by(|&a, &b| {
            let (a, b) = (&r.tasks[a], &r.tasks[b]);
            let primary = cmp_task(col, a, b);
            let primary = if rev { primary.reverse() } else { primary };
            primary
                .then_with(|| {
                    let pa = prev.get(&a.pid).copied().unwrap_or(usize::MAX);
                    let pb = prev.get(&b.pid).copied().unwrap_or(usize::MAX);
                    pa.cmp(&pb)
                })
                .then_with(|| a.pid.cmp(&b.pid))
        });
        self.prev_task_order = trows
            .iter()
            .enumerate()
            .map(|(pos, &i)| (r.tasks[i].pid, pos))
            .collect();

        // Keep the selection on its lock; pick the first row when it is gone.
        let lock_keys: Vec<&LockKey> = rows.iter().map(|&i| &r.locks[i].key).collect();
        if !self
            .selected_lock
            .as_ref()
            .is_some_and(|k| lock_keys.contains(&k))
        {
            self.selected_lock = lock_keys.first().map(|k| (*k).clone());
        }
        let pids: Vec<u32> = trows.iter().map(|&i| r.tasks[i].pid).collect();
        if !self.selected_task.is_some_and(|p| pids.contains(&p)) {
            self.selected_task = pids.first().copied();
        }
        self.lock_rows = rows;
        self.task_rows = trows;
    }

    /// Handle one key press.
    pub fn handle_key(&mut self, key: KeyEvent) -> Action {
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Action::Quit;
        }
        match self.mode.clone() {
            Mode::Filter(back) => {
                match key.code {
                    KeyCode::Enter => self.mode = *back,
                    KeyCode::Esc => {
                        self.filter.clear();
                        self.mode = *back;
                    }
                    KeyCode::Backspace => {
                        self.filter.pop();
                    }
                    KeyCode::Char(c) => self.filter.push(c),
                    _ => {}
                }
                self.reorder();
                Action::Continue
            }
            Mode::Help(back) => {
                match key.code {
                    KeyCode::Char('q') => return Action::Quit,
                    _ => self.mode = *back,
                }
                Action::Continue
            }
            Mode::Detail(lock) => self.detail_key(key, lock),
            Mode::Locks | Mode::Tasks => self.table_key(key),
        }
    }

    fn common_key(&mut self, key: KeyEvent) -> Option<Action> {
        match key.code {
            KeyCode::Char('q') => Some(Action::Quit),
            KeyCode::Char('?') => {
                self.mode = Mode::Help(Box::new(self.mode.clone()));
                Some(Action::Continue)
            }
            KeyCode::Char('p') | KeyCode::Char(' ') => {
                self.paused = !self.paused;
                Some(Action::Continue)
            }
            _ => None,
        }
    }

    fn table_key(&mut self, key: KeyEvent) -> Action {
        if let Some(a) = self.common_key(key) {
            return a;
        }
        let tasks = self.mode == Mode::Tasks;
        match key.code {
            KeyCode::Esc if !self.filter.is_empty() => {
                self.filter.clear();
                self.reorder();
            }
            KeyCode::Esc => return Action::Quit,
            KeyCode::Char('/') => self.mode = Mode::Filter(Box::new(self.mode.clone())),
            KeyCode::Tab | KeyCode::BackTab => {
                self.mode = if tasks { Mode::Locks } else { Mode::Tasks };
            }
            KeyCode::Char('l') => self.mode = Mode::Locks,
            KeyCode::Char('t') => self.mode = Mode::Tasks,
            KeyCode::Down | KeyCode::Char('j') => self.move_selection(1),
            KeyCode::Up | KeyCode::Char('k') => self.move_selection(-1),
            KeyCode::PageDown => self.move_selection(10),
            KeyCode::PageUp => self.move_selection(-10),
            KeyCode::Home | KeyCode::Char('g') => self.move_selection(isize::MIN / 2),
            KeyCode::End | KeyCode::Char('G') => self.move_selection(isize::MAX / 2),
            KeyCode::Char(c @ '1'..='9') => {
                let i = c as usize - '1' as usize;
                if tasks {
                    if let Some(&col) = TaskColumn::ALL.get(i) {
                        self.set_task_sort(col);
                    }
                } else if let Some(&col) = LockColumn::ALL.get(i) {
                    self.set_lock_sort(col);
                }
            }
            KeyCode::Char('>') | KeyCode::Char('s') | KeyCode::Right => self.step_sort(1),
            KeyCode::Char('<') | KeyCode::Left => self.step_sort(-1),
            KeyCode::Char('r') => {
                self.reverse = !self.reverse;
                self.reorder();
            }
            KeyCode::Enter if !tasks => {
                if let Some(k) = self.selected_lock.clone() {
                    self.mode = Mode::Detail(k);
                }
            }
            KeyCode::Enter => {
                // From a task to the locks it waits on.
                if let Some(pid) = self.selected_task {
                    let comm = self
                        .visible_tasks()
                        .into_iter()
                        .find(|t| t.pid == pid)
                        .map(|t| t.comm.clone());
                    if let Some(comm) = comm {
                        self.filter = comm;
                        self.mode = Mode::Locks;
                        self.reorder();
                    }
                }
            }
            _ => {}
        }
        Action::Continue
    }

    fn detail_key(&mut self, key: KeyEvent, lock: LockKey) -> Action {
        if let Some(a) = self.common_key(key) {
            return a;
        }
        match key.code {
            KeyCode::Esc | KeyCode::Backspace | KeyCode::Left | KeyCode::Enter => {
                self.selected_lock = Some(lock);
                self.mode = Mode::Locks;
            }
            KeyCode::Char('h') => {
                self.hist_scope = match self.hist_scope {
                    HistScope::SinceStart => HistScope::Interval,
                    HistScope::Interval => HistScope::SinceStart,
                }
            }
            KeyCode::Down | KeyCode::Char('j') | KeyCode::Up | KeyCode::Char('k') => {
                self.selected_lock = Some(lock);
                let step = if matches!(key.code, KeyCode::Down | KeyCode::Char('j')) {
                    1
                } else {
                    -1
                };
                self.move_lock(step);
                if let Some(k) = self.selected_lock.clone() {
                    self.mode = Mode::Detail(k);
                }
            }
            _ => {}
        }
        Action::Continue
    }

    fn set_lock_sort(&mut self, col: LockColumn) {
        if self.lock_sort == col {
            self.reverse = !self.reverse;
        } else {
            self.lock_sort = col;
            self.reverse = false;
        }
        self.reorder();
    }

    fn set_task_sort(&mut self, col: TaskColumn) {
        if self.task_sort == col {
            self.reverse = !self.reverse;
        } else {
            self.task_sort = col;
            self.reverse = false;
        }
        self.reorder();
    }

    fn step_sort(&mut self, step: isize) {
        if self.mode == Mode::Tasks {
            let n = TaskColumn::ALL.len() as isize;
            let i = TaskColumn::ALL
                .iter()
                .position(|&c| c == self.task_sort)
                .unwrap_or(0) as isize;
            self.task_sort = TaskColumn::ALL[(i + step).rem_euclid(n) as usize];
        } else {
            let n = LockColumn::ALL.len() as isize;
            let i = LockColumn::ALL
                .iter()
                .position(|&c| c == self.lock_sort)
                .unwrap_or(0) as isize;
            self.lock_sort = LockColumn::ALL[(i + step).rem_euclid(n) as usize];
        }
        self.reverse = false;
        self.reorder();
    }

    fn move_selection(&mut self, step: isize) {
        if self.mode == Mode::Tasks {
            let pids: Vec<u32> = self.visible_tasks().iter().map(|t| t.pid).collect();
            let cur = self.selected_task_row().unwrap_or(0);
            if let Some(i) = moved(cur, step, pids.len()) {
                self.selected_task = Some(pids[i]);
            }
        } else {
            self.move_lock(step);
        }
    }

    fn move_lock(&mut self, step: isize) {
        let keys: Vec<LockKey> = self.visible_locks().iter().map(|l| l.key.clone()).collect();
        let cur = self.selected_lock_row().unwrap_or(0);
        if let Some(i) = moved(cur, step, keys.len()) {
            self.selected_lock = Some(keys[i].clone());
        }
    }
}

fn moved(cur: usize, step: isize, len: usize) -> Option<usize> {
    if len == 0 {
        return None;
    }
    Some(
        (cur as isize)
            .saturating_add(step)
            .clamp(0, len as isize - 1) as usize,
    )
}

/// Natural order of a column: numbers largest first, text ascending.
fn cmp_lock(col: LockColumn, a: &LockRate, b: &LockRate) -> std::cmp::Ordering {
    let num = |l: &LockRate| -> f64 {
        match col {
            LockColumn::Contentions => l.contentions_per_s,
            LockColumn::Wait => l.wait_ns_per_s,
            LockColumn::Avg => l.avg_ns() as f64,
            LockColumn::P99 => l.p99_ns() as f64,
            LockColumn::Max => l.max_ns() as f64,
            LockColumn::Waiters => l.waiters as f64,
            LockColumn::Modes => l.modes.map_or(-1.0, |m| {
                (m.steals + m.spins + m.handoffs + m.sleeps) as f64
            }),
            LockColumn::Type | LockColumn::Name => 0.0,
        }
    };
    match col {
        LockColumn::Type => a.key.lock_type.name().cmp(b.key.lock_type.name()),
        LockColumn::Name => a.name.cmp(&b.name),
        c if c.numeric() => num(b).total_cmp(&num(a)),
        _ => std::cmp::Ordering::Equal,
    }
}

fn cmp_task(col: TaskColumn, a: &TaskRate, b: &TaskRate) -> std::cmp::Ordering {
    let num = |t: &TaskRate| -> f64 {
        match col {
            TaskColumn::Contentions => t.contentions_per_s,
            TaskColumn::Wait => t.wait_ns_per_s,
            TaskColumn::Avg => t.interval.avg_ns() as f64,
            TaskColumn::Locks => t.locks as f64,
            _ => 0.0,
        }
    };
    match col {
        TaskColumn::Pid => a.pid.cmp(&b.pid),
        TaskColumn::Comm => a.comm.cmp(&b.comm),
        TaskColumn::TopLock => a.top_lock.cmp(&b.top_lock),
        c if c.numeric() => num(b).total_cmp(&num(a)),
        _ => std::cmp::Ordering::Equal,
    }
}
