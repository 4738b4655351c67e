//! The live view's state and its key handling. No terminal here: `ui` draws an [`App`],
//! `mod.rs` feeds it recordings and keys.

use std::{
    collections::{HashMap, VecDeque},
    time::Duration,
};

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::rt::RtLog;
use crate::aggregate::{
    Recording,
    cgroup::CgroupRate,
    rates::{LockKey, LockRate, Rates, TaskRate, rates},
};

/// How much wait-rate history the detail view's chart keeps.
pub const HISTORY: Duration = Duration::from_secs(300);

/// What the screen shows; drives both key handling and drawing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// The table of kernel locks.
    Locks,
    /// The table of user-space locks (futex words, pthread locks).
    UserLocks,
    /// The table of waiting processes.
    Tasks,
    /// The table of the waiting processes' cgroups.
    Cgroups,
    /// Starvation episodes and latency spikes as they arrive.
    Rt,
    /// One lock: histogram, wait-rate chart, callers, tasks.
    Detail(LockKey),
    /// Typing a filter; the view underneath stays visible.
    Filter(Box<Mode>),
    /// The help overlay over a view.
    Help(Box<Mode>),
}

/// The views `Tab` cycles through, in order.
pub const VIEWS: [Mode; 5] = [
    Mode::Locks,
    Mode::UserLocks,
    Mode::Tasks,
    Mode::Cgroups,
    Mode::Rt,
];

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
            LockColumn::Modes => {
                "rwsem modes in the interval (n/a: needs the deep tier; ~ estimate)"
            }
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

/// Columns of the user-space lock table; `1`-`9` and `0` sort by the first ten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserColumn {
    Type,
    Process,
    Addr,
    Contentions,
    Wait,
    Avg,
    P99,
    Max,
    Wakes,
    Blocked,
    Owner,
}

impl UserColumn {
    pub const ALL: [UserColumn; 11] = [
        UserColumn::Type,
        UserColumn::Process,
        UserColumn::Addr,
        UserColumn::Contentions,
        UserColumn::Wait,
        UserColumn::Avg,
        UserColumn::P99,
        UserColumn::Max,
        UserColumn::Wakes,
        UserColumn::Blocked,
        UserColumn::Owner,
    ];

    pub fn title(self) -> &'static str {
        match self {
            UserColumn::Type => "type",
            UserColumn::Process => "process",
            UserColumn::Addr => "address",
            UserColumn::Contentions => "cont/s",
            UserColumn::Wait => "wait/s",
            UserColumn::Avg => "avg",
            UserColumn::P99 => "p99~",
            UserColumn::Max => "max",
            UserColumn::Wakes => "wake/s",
            UserColumn::Blocked => "blocked",
            UserColumn::Owner => "PI owner",
        }
    }

    pub fn help(self) -> &'static str {
        match self {
            UserColumn::Type => "futex, futex-pi (PI futex), pthread lock types",
            UserColumn::Process => "process the lock lives in (comm[pid])",
            UserColumn::Addr => "address of the futex word in that process",
            UserColumn::Contentions => "futex waits per second that blocked (not EAGAIN)",
            UserColumn::Wait => "time spent blocked per second, all waiters summed",
            UserColumn::Avg => "average blocked wait in the interval",
            UserColumn::P99 => "99th percentile blocked wait in the interval (log2 estimate)",
            UserColumn::Max => "longest single blocked wait since start (exact)",
            UserColumn::Wakes => "FUTEX_WAKE-type calls per second",
            UserColumn::Blocked => "calls blocked on the word right now",
            UserColumn::Owner => "PI futex: the owner found in the word at the latest LOCK_PI",
        }
    }

    fn numeric(self) -> bool {
        !matches!(
            self,
            UserColumn::Type | UserColumn::Process | UserColumn::Addr | UserColumn::Owner
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
    pub user_sort: UserColumn,
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
    /// Indices into `rates.locks` / `rates.tasks` in display order (filtered, sorted):
    /// kernel locks, user-space locks, tasks.
    pub lock_rows: Vec<usize>,
    pub user_rows: Vec<usize>,
    pub task_rows: Vec<usize>,
    /// Indices into `rates.cgroups` in display order (filtered; busiest first).
    pub cgroup_rows: Vec<usize>,
    /// The selected kernel lock, user-space lock (each follows its lock when rows move)
    /// and task.
    pub selected_lock: Option<LockKey>,
    pub selected_user: Option<LockKey>,
    pub selected_task: Option<u32>,
    pub selected_cgroup: Option<String>,
    /// Starvation episodes and latency spikes seen so far.
    pub rt: RtLog,
    /// Wait nanoseconds per second, one sample per refresh, oldest first.
    pub history: HashMap<LockKey, VecDeque<u64>>,
    pub refreshes: u64,
    /// Display order of the previous refresh, to keep rows in place on ties.
    prev_lock_order: HashMap<LockKey, usize>,
    prev_user_order: HashMap<LockKey, usize>,
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
            user_sort: UserColumn::Wait,
            task_sort: TaskColumn::Wait,
            reverse: false,
            filter: String::new(),
            paused: false,
            hist_scope: HistScope::SinceStart,
            error: None,
            lock_rows: Vec::new(),
            user_rows: Vec::new(),
            task_rows: Vec::new(),
            cgroup_rows: Vec::new(),
            selected_lock: None,
            selected_user: None,
            selected_task: None,
            selected_cgroup: None,
            rt: RtLog::default(),
            history: HashMap::new(),
            refreshes: 0,
            prev_lock_order: HashMap::new(),
            prev_user_order: HashMap::new(),
            prev_task_order: HashMap::new(),
        }
    }

    /// A new recording arrived: derive the interval's rates against the previous one.
    pub fn update(&mut self, mut rec: Recording) {
        // A process may name itself with an escape sequence: shown, never obeyed.
        crate::sink::escape::escape_recording(&mut rec);
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
        self.refreshes += 1;
        self.rt.update(&rec, self.refreshes);
        self.current = Some(rec);
        self.error = None;
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

    pub fn visible_user_locks(&self) -> Vec<&LockRate> {
        let Some(r) = &self.rates else {
            return Vec::new();
        };
        self.user_rows.iter().map(|&i| &r.locks[i]).collect()
    }

    pub fn visible_tasks(&self) -> Vec<&TaskRate> {
        let Some(r) = &self.rates else {
            return Vec::new();
        };
        self.task_rows.iter().map(|&i| &r.tasks[i]).collect()
    }

    pub fn visible_cgroups(&self) -> Vec<&CgroupRate> {
        let Some(r) = &self.rates else {
            return Vec::new();
        };
        self.cgroup_rows.iter().map(|&i| &r.cgroups[i]).collect()
    }

    pub fn selected_cgroup_row(&self) -> Option<usize> {
        let name = self.selected_cgroup.as_ref()?;
        self.visible_cgroups()
            .iter()
            .position(|c| &c.cgroup == name)
    }

    pub fn lock(&self, key: &LockKey) -> Option<&LockRate> {
        self.rates.as_ref()?.locks.iter().find(|l| &l.key == key)
    }

    /// Index of the selected row among the visible ones.
    pub fn selected_lock_row(&self) -> Option<usize> {
        let key = self.selected_lock.as_ref()?;
        self.visible_locks().iter().position(|l| &l.key == key)
    }

    /// The source traces futexes in blocking mode (`--futex-mode blocking`): it sees only
    /// the waits that sleep, no wakes, EAGAIN or timeouts.
    pub fn futex_blocking(&self) -> bool {
        self.current
            .as_ref()
            .and_then(|r| r.futex_events.as_ref())
            .is_some_and(|f| f.blocking)
    }

    pub fn selected_user_row(&self) -> Option<usize> {
        let key = self.selected_user.as_ref()?;
        self.visible_user_locks().iter().position(|l| &l.key == key)
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
        let rev = self.reverse;
        let (col, ucol) = (self.lock_sort, self.user_sort);
        let kernel: Vec<usize> = (0..r.locks.len())
            .filter(|&i| !r.locks[i].key.is_user() && self.lock_matches(&r.locks[i]))
            .collect();
        let rows = sort_rows(kernel, &r.locks, &self.prev_lock_order, rev, |a, b| {
            cmp_lock(col, a, b)
        });
        self.prev_lock_order = positions(&rows, &r.locks);
        let user: Vec<usize> = (0..r.locks.len())
            .filter(|&i| r.locks[i].key.is_user() && self.lock_matches(&r.locks[i]))
            .collect();
        let urows = sort_rows(user, &r.locks, &self.prev_user_order, rev, |a, b| {
            cmp_user(ucol, a, b)
        });
        self.prev_user_order = positions(&urows, &r.locks);

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

        // Cgroups stay in the busiest-first order of the rates.
        let f = self.filter.to_lowercase();
        let crows: Vec<usize> = (0..r.cgroups.len())
            .filter(|&i| {
                let c = &r.cgroups[i];
                f.is_empty()
                    || c.cgroup.to_lowercase().contains(&f)
                    || c.types.to_lowercase().contains(&f)
            })
            .collect();
        let names: Vec<&String> = crows.iter().map(|&i| &r.cgroups[i].cgroup).collect();
        if !self
            .selected_cgroup
            .as_ref()
            .is_some_and(|c| names.contains(&c))
        {
            self.selected_cgroup = names.first().map(|c| (*c).clone());
        }
        self.cgroup_rows = crows;

        // Keep each selection on its lock; pick the first row when it is gone.
        self.selected_lock = keep_selection(self.selected_lock.take(), &rows, &r.locks);
        self.selected_user = keep_selection(self.selected_user.take(), &urows, &r.locks);
        let pids: Vec<u32> = trows.iter().map(|&i| r.tasks[i].pid).collect();
        if !self.selected_task.is_some_and(|p| pids.contains(&p)) {
            self.selected_task = pids.first().copied();
        }
        self.lock_rows = rows;
        self.user_rows = urows;
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
            Mode::Locks | Mode::UserLocks | Mode::Tasks | Mode::Cgroups | Mode::Rt => {
                self.table_key(key)
            }
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
        match key.code {
            KeyCode::Esc if !self.filter.is_empty() => {
                self.filter.clear();
                self.reorder();
            }
            KeyCode::Esc => return Action::Quit,
            KeyCode::Char('/') => self.mode = Mode::Filter(Box::new(self.mode.clone())),
            KeyCode::Tab => self.step_view(1),
            KeyCode::BackTab => self.step_view(-1),
            KeyCode::Char('l') => self.mode = Mode::Locks,
            KeyCode::Char('u') | KeyCode::Char('f') => self.mode = Mode::UserLocks,
            KeyCode::Char('t') => self.mode = Mode::Tasks,
            KeyCode::Char('c') => self.mode = Mode::Cgroups,
            KeyCode::Char('e') => self.mode = Mode::Rt,
            KeyCode::Down | KeyCode::Char('j') => self.move_selection(1),
            KeyCode::Up | KeyCode::Char('k') => self.move_selection(-1),
            KeyCode::PageDown => self.move_selection(10),
            KeyCode::PageUp => self.move_selection(-10),
            KeyCode::Home | KeyCode::Char('g') => self.move_selection(isize::MIN / 2),
            KeyCode::End | KeyCode::Char('G') => self.move_selection(isize::MAX / 2),
            KeyCode::Char(c @ '0'..='9') => {
                // 1 = first column ... 9, then 0 = tenth.
                let i = (c as usize - '0' as usize + 9) % 10;
                match self.mode {
                    Mode::Tasks => {
                        if let Some(&col) = TaskColumn::ALL.get(i) {
                            self.set_task_sort(col);
                        }
                    }
                    Mode::UserLocks => {
                        if let Some(&col) = UserColumn::ALL.get(i) {
                            self.set_user_sort(col);
                        }
                    }
                    Mode::Locks => {
                        if let Some(&col) = LockColumn::ALL.get(i) {
                            self.set_lock_sort(col);
                        }
                    }
                    _ => {}
                }
            }
            KeyCode::Char('>') | KeyCode::Char('s') | KeyCode::Right => self.step_sort(1),
            KeyCode::Char('<') | KeyCode::Left => self.step_sort(-1),
            KeyCode::Char('r') => {
                self.reverse = !self.reverse;
                self.reorder();
            }
            KeyCode::Enter => match self.mode {
                Mode::Locks => {
                    if let Some(k) = self.selected_lock.clone() {
                        self.mode = Mode::Detail(k);
                    }
                }
                Mode::UserLocks => {
                    if let Some(k) = self.selected_user.clone() {
                        self.mode = Mode::Detail(k);
                    }
                }
                Mode::Tasks => self.task_to_locks(),
                _ => {}
            },
            _ => {}
        }
        Action::Continue
    }

    /// From the selected task to the locks it waits on: the view of its top lock,
    /// filtered by its name.
    fn task_to_locks(&mut self) {
        let Some(pid) = self.selected_task else {
            return;
        };
        let task = self
            .visible_tasks()
            .into_iter()
            .find(|t| t.pid == pid)
            .map(|t| (t.comm.clone(), t.top_lock_user));
        if let Some((comm, user)) = task {
            self.filter = comm;
            self.mode = if user { Mode::UserLocks } else { Mode::Locks };
            self.reorder();
        }
    }

    fn step_view(&mut self, step: isize) {
        let i = VIEWS.iter().position(|v| *v == self.mode).unwrap_or(0) as isize;
        self.mode = VIEWS[(i + step).rem_euclid(VIEWS.len() as isize) as usize].clone();
    }

    fn detail_key(&mut self, key: KeyEvent, lock: LockKey) -> Action {
        if let Some(a) = self.common_key(key) {
            return a;
        }
        let user = lock.is_user();
        match key.code {
            KeyCode::Esc | KeyCode::Backspace | KeyCode::Left | KeyCode::Enter => {
                self.mode = if user { Mode::UserLocks } else { Mode::Locks };
                self.set_selected(user, lock);
            }
            // The view keys leave the detail view for that view.
            KeyCode::Char(c @ ('l' | 'u' | 'f' | 't' | 'c' | 'e')) => {
                self.set_selected(user, lock);
                self.mode = match c {
                    'l' => Mode::Locks,
                    't' => Mode::Tasks,
                    'c' => Mode::Cgroups,
                    'e' => Mode::Rt,
                    _ => Mode::UserLocks,
                };
            }
            KeyCode::Char('h') => {
                self.hist_scope = match self.hist_scope {
                    HistScope::SinceStart => HistScope::Interval,
                    HistScope::Interval => HistScope::SinceStart,
                }
            }
            KeyCode::Down | KeyCode::Char('j') | KeyCode::Up | KeyCode::Char('k') => {
                let step = if matches!(key.code, KeyCode::Down | KeyCode::Char('j')) {
                    1
                } else {
                    -1
                };
                self.set_selected(user, lock);
                self.move_lock(user, step);
                let next = if user {
                    &self.selected_user
                } else {
                    &self.selected_lock
                };
                if let Some(k) = next.clone() {
                    self.mode = Mode::Detail(k);
                }
            }
            _ => {}
        }
        Action::Continue
    }

    fn set_selected(&mut self, user: bool, lock: LockKey) {
        if user {
            self.selected_user = Some(lock);
        } else {
            self.selected_lock = Some(lock);
        }
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

    fn set_user_sort(&mut self, col: UserColumn) {
        if self.user_sort == col {
            self.reverse = !self.reverse;
        } else {
            self.user_sort = col;
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
        fn next<T: Copy + PartialEq>(all: &[T], cur: T, step: isize) -> T {
            let i = all.iter().position(|&c| c == cur).unwrap_or(0) as isize;
            all[(i + step).rem_euclid(all.len() as isize) as usize]
        }
        match self.mode {
            Mode::Tasks => self.task_sort = next(&TaskColumn::ALL, self.task_sort, step),
            Mode::UserLocks => self.user_sort = next(&UserColumn::ALL, self.user_sort, step),
            Mode::Locks => self.lock_sort = next(&LockColumn::ALL, self.lock_sort, step),
            _ => return,
        }
        self.reverse = false;
        self.reorder();
    }

    fn move_selection(&mut self, step: isize) {
        match self.mode {
            Mode::Tasks => {
                let pids: Vec<u32> = self.visible_tasks().iter().map(|t| t.pid).collect();
                let cur = self.selected_task_row().unwrap_or(0);
                if let Some(i) = moved(cur, step, pids.len()) {
                    self.selected_task = Some(pids[i]);
                }
            }
            Mode::Cgroups => {
                let names: Vec<String> = self
                    .visible_cgroups()
                    .iter()
                    .map(|c| c.cgroup.clone())
                    .collect();
                let cur = self.selected_cgroup_row().unwrap_or(0);
                if let Some(i) = moved(cur, step, names.len()) {
                    self.selected_cgroup = Some(names[i].clone());
                }
            }
            Mode::UserLocks => self.move_lock(true, step),
            Mode::Locks => self.move_lock(false, step),
            _ => {}
        }
    }

    /// Move the selection among the kernel (or user-space) locks.
    fn move_lock(&mut self, user: bool, step: isize) {
        let (rows, cur) = if user {
            (self.visible_user_locks(), self.selected_user_row())
        } else {
            (self.visible_locks(), self.selected_lock_row())
        };
        let keys: Vec<LockKey> = rows.iter().map(|l| l.key.clone()).collect();
        if let Some(i) = moved(cur.unwrap_or(0), step, keys.len()) {
            self.set_selected(user, keys[i].clone());
        }
    }
}

/// Sort row indices by `cmp` (reversed with `rev`); ties keep their previous position,
/// then the longest total wait, then the key.
fn sort_rows(
    mut rows: Vec<usize>,
    locks: &[LockRate],
    prev: &HashMap<LockKey, usize>,
    rev: bool,
    cmp: impl Fn(&LockRate, &LockRate) -> std::cmp::Ordering,
) -> Vec<usize> {
    rows.sort_by(|&a, &b| {
        let (a, b) = (&locks[a], &locks[b]);
        let primary = cmp(a, b);
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
    rows
}

fn positions(rows: &[usize], locks: &[LockRate]) -> HashMap<LockKey, usize> {
    rows.iter()
        .enumerate()
        .map(|(pos, &i)| (locks[i].key.clone(), pos))
        .collect()
}

/// The selection stays on its lock while that is shown; else the first row.
fn keep_selection(sel: Option<LockKey>, rows: &[usize], locks: &[LockRate]) -> Option<LockKey> {
    match sel {
        Some(k) if rows.iter().any(|&i| locks[i].key == k) => Some(k),
        _ => rows.first().map(|&i| locks[i].key.clone()),
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
            LockColumn::Modes => l.modes.map_or(-1.0, |m| m.seen() as f64),
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

fn cmp_user(col: UserColumn, a: &LockRate, b: &LockRate) -> std::cmp::Ordering {
    let num = |l: &LockRate| -> f64 {
        let u = l.user.as_ref();
        match col {
            UserColumn::Contentions => l.contentions_per_s,
            UserColumn::Wait => l.wait_ns_per_s,
            UserColumn::Avg => l.avg_ns() as f64,
            UserColumn::P99 => l.p99_ns() as f64,
            UserColumn::Max => l.max_ns() as f64,
            UserColumn::Wakes => u.map_or(0.0, |u| u.wake_calls_per_s),
            UserColumn::Blocked => u.map_or(0.0, |u| u.blocked() as f64),
            _ => 0.0,
        }
    };
    let pid = |l: &LockRate| l.key.pid.unwrap_or(0);
    let comm = |l: &LockRate| l.user.as_ref().map_or("", |u| u.comm.as_str()).to_owned();
    let owner = |l: &LockRate| l.user.as_ref().and_then(|u| u.pi_owner()).map(|o| o.tid);
    match col {
        UserColumn::Type => a.key.lock_type.name().cmp(b.key.lock_type.name()),
        UserColumn::Process => comm(a).cmp(&comm(b)).then_with(|| pid(a).cmp(&pid(b))),
        UserColumn::Addr => (a.key.addr.len(), &a.key.addr).cmp(&(b.key.addr.len(), &b.key.addr)),
        UserColumn::Owner => owner(b).cmp(&owner(a)),
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
