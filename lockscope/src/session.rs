//! One tracing session: the pipeline core that every sink (record, serve, top) drives.
//! The probe families (`family`) load and attach; each snapshot, each reads its maps
//! (source), the lock table is built and each adds its part (decode/aggregate).

use std::{
    collections::HashMap,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use lockscope_common::COUNTERS_LEN;

use crate::{
    aggregate::forget::{ExitTracker, Forgotten, forget_candidates, forgettable},
    aggregate::timeline::LockTotals,
    aggregate::{
        Recording,
        recording::{Detail, EventCounts, SCHEMA},
    },
    family::{self, Families},
    probe::{LoadOptions, Probes, features, rt::RtOptions},
    source::{batch::delete_keys, read_counters, read_lock_totals},
    symbolize::KernelNames,
};

/// Give the memory a map read freed back to the system. A read's transient buffers are
/// as large as the kernel maps; without this the allocator keeps the high-water mark,
/// and a long-running sink's RSS would track the largest read rather than what it holds.
pub fn release_free_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory; no pointer is involved.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn process_alive(tgid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{tgid}")).exists()
}

pub struct Session {
    probes: Probes,
    families: Families,
    names: KernelNames,
    target: String,
    kernel: String,
    started_at: SystemTime,
    start: Instant,
    stopped_after: Option<f64>,
    /// How many callers and tasks each snapshot keeps.
    detail: Detail,
    /// Drop the figures of exited processes from the kernel maps after each snapshot
    /// (long-running sinks), and how many entries that dropped so far.
    forget_exited: Option<Duration>,
    exits: std::cell::RefCell<ExitTracker>,
    forgotten: std::cell::Cell<Forgotten>,
}

/// A start taking longer than this says why (`probe::release::slow_start_note`).
const SLOW_START_NOTE_AFTER: Duration = Duration::from_secs(2);

/// While alive, a thread that tells the user once when the start has taken `after`, and
/// what it is likely waiting for; dropped when the probes are attached.
struct SlowStartWatch {
    done: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SlowStartWatch {
    fn new(after: Duration) -> Self {
        let (done, rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("slow-start".into())
            .spawn(move || {
                if rx.recv_timeout(after) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                    let keepers = crate::probe::release::keepers();
                    eprintln!(
                        "{}",
                        crate::probe::release::slow_start_note(after.as_secs(), &keepers)
                    );
                }
            })
            .ok();
        Self {
            done: Some(done),
            thread,
        }
    }
}

impl Drop for SlowStartWatch {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Session {
    /// Load and attach the probes. `target` describes what is traced, for reports.
    pub fn start(opts: &LoadOptions, target: String) -> anyhow::Result<Self> {
        Self::start_with_rt(opts, target, None)
    }

    /// Start, with the real-time probes timing wakeups of real-time threads (`rt`).
    pub fn start_with_rt(
        opts: &LoadOptions,
        target: String,
        rt: Option<RtOptions>,
    ) -> anyhow::Result<Self> {
        // The user waits on this: it runs at a higher weight, and so do the loader's
        // threads; back at the nice lockscope was started with when attached.
        let _boost = crate::boost::Boost::new();
        let mut families = Families::default();
        // The targets' maps, before loading (seconds on a busy machine), in case they exit.
        if let crate::probe::Target::Pids(pids) = &opts.target {
            pids.iter()
                .for_each(|&p| families.futex.user_names.remember(p));
        }
        // The recording spans the loading too: the first probes count while the others
        // attach (seconds on a busy machine). Timed from after it, the first rates of a
        // live view divided all of that by a few milliseconds.
        let (started_at, start) = (SystemTime::now(), Instant::now());
        // Read once for choosing hooks and for naming kernel addresses (the loader lets
        // its cached copy go once attached; this one lives until naming is set up), on
        // a thread of its own: the kernel takes tens of milliseconds to write it, which
        // the loading's BTF parsing and verification overlap.
        let kallsyms =
            crate::probe::loader::Beside::start("kallsyms", crate::probe::hooks::kallsyms);
        let probes = {
            let _watch = SlowStartWatch::new(SLOW_START_NOTE_AFTER);
            family::load(opts, rt, &mut families)?
        };
        let kallsyms = kallsyms
            .join()
            .ok_or_else(|| anyhow::anyhow!("reading /proc/kallsyms panicked"))?;
        // The read may have finished after the loader let the cache go: let it go now.
        crate::probe::hooks::forget_kallsyms();
        let names = KernelNames::from_kallsyms(&kallsyms);
        Ok(Self {
            probes,
            families,
            names,
            target,
            kernel: features::kernel_release(),
            started_at,
            start,
            stopped_after: None,
            detail: Detail::ALL,
            forget_exited: None,
            exits: Default::default(),
            forgotten: Default::default(),
        })
    }

    /// Keep only this much per-lock detail in snapshots (long-running sinks: memory
    /// stays flat however many locks and stacks the kernel maps hold).
    pub fn set_detail(&mut self, detail: Detail) {
        self.detail = detail;
    }

    /// After each snapshot, delete the contention figures of processes that have exited
    /// from the kernel map: a daemon's maps and memory then follow the live processes,
    /// not every process since start. The snapshot that sees an exited process still
    /// has its figures (metrics keep them, folded into `lock="other"` afterwards).
    pub fn forget_exited(&mut self, after: Duration) {
        self.forget_exited = Some(after);
    }

    /// Delete the contention, rwsem-event, futex and `sched_wait_task` entries of
    /// processes gone for `after`, and the names of the locks they owned (see
    /// [`forgettable`]; the rwsem system totals are counters of their own).
    fn forget_expired(
        &self,
        raw: &crate::aggregate::RawSnapshot,
        wait_task: &[(lockscope_common::WaitTaskKey, u64)],
        after: Duration,
    ) -> anyhow::Result<()> {
        let gone = self.exits.borrow_mut().expired(
            &forget_candidates(raw, wait_task),
            Instant::now(),
            after,
            process_alive,
        );
        let forget = forgettable(raw, wait_task, &gone);
        if !gone.is_empty() {
            self.families
                .futex
                .pthread
                .forget(&gone.iter().copied().collect::<Vec<_>>());
            self.families.futex.forget_hot(&raw.futex.hot, &gone);
        }
        let ebpf = self.probes.ebpf();
        let mut forgotten = self.forgotten.get();
        forgotten.stats += delete_keys(ebpf, "CONTENTION_STATS", &forget.stats)?;
        forgotten.futex += delete_keys(ebpf, "FUTEX_STATS", &forget.futex)?;
        self.forgotten.set(forgotten);
        delete_keys(ebpf, "RWSEM_EVENT_STATS", &forget.rwsem_events)?;
        delete_keys(ebpf, "LOCK_INFO", &forget.lock_info)?;
        delete_keys(ebpf, "LOCK_INFO_PAST", &forget.past_lock_info)?;
        delete_keys(ebpf, "LOCK_GENS", &forget.lock_gens)?;
        delete_keys(ebpf, "WAIT_TASK_STATS", &forget.wait_task)?;
        Ok(())
    }

    /// Seconds since the probes were attached (frozen at `stop`).
    pub fn elapsed_s(&self) -> f64 {
        self.stopped_after
            .unwrap_or_else(|| self.start.elapsed().as_secs_f64())
    }

    /// The event and loss counters only: cheap enough for a live status line.
    pub fn counters(&self) -> anyhow::Result<[u64; COUNTERS_LEN as usize]> {
        read_counters(self.probes.ebpf())
    }

    /// Move the real-time probes' records out of their ring buffer (call it often: the
    /// buffer is finite and a full one drops records, counted). Returns how many.
    pub fn drain_rt(&self) -> usize {
        self.families.rt.drain()
    }

    /// cyclictest's output, to record its own latencies as spikes (`source: cyclictest`).
    pub fn feed_cyclictest_output(&self, text: String, pid: u32) {
        self.families.rt.feed_cyclictest_output(text, pid);
    }

    /// Name the lock holders seen so far while their threads are alive (a recording
    /// made after they exit still names them). Cheap: one batched read of the holder map.
    pub fn name_holders(&self) -> anyhow::Result<()> {
        self.families.contention.name_holders(self.probes.ebpf())
    }

    /// Everything aggregated since the start, as a recording: every family reads its
    /// maps, the contention family builds the lock table, and each adds its part.
    pub fn snapshot(&self) -> anyhow::Result<Recording> {
        let ebpf = self.probes.ebpf();
        let mut rec = Recording {
            schema: SCHEMA.to_owned(),
            lockscope_version: env!("CARGO_PKG_VERSION").to_owned(),
            kernel: self.kernel.clone(),
            tier: self.probes.tier.to_owned(),
            target: self.target.clone(),
            duration_s: self.elapsed_s(),
            started_at_unix_s: self
                .started_at
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
            // The rest is the families' to fill.
            ..Default::default()
        };
        let mut raw = crate::aggregate::RawSnapshot::default();
        let mut read = family::Read {
            ebpf,
            raw: &mut raw,
            wait_task: Vec::new(),
            deep_episodes: None,
            spin: None,
            lost: &mut rec.lost,
            names: &self.names,
            detail: self.detail,
        };
        for f in self.families.all() {
            f.read(&mut read)?;
        }
        let (wait_task, deep_episodes, spin) = (read.wait_task, read.deep_episodes, read.spin);
        rec.events = EventCounts::from_counters(&raw.counters, raw.in_progress);
        let mut comms = with_proc_comms(&raw.comms, &raw);
        for (k, _) in &wait_task {
            if !comms.contains_key(&k.waiter_tgid)
                && let Some(c) = proc_comm(k.waiter_tgid)
            {
                comms.insert(k.waiter_tgid, c);
            }
        }
        let mut build = family::Build {
            ebpf,
            raw: &mut raw,
            names: &self.names,
            detail: self.detail,
            wait_task: &wait_task,
            deep_episodes: &deep_episodes,
            spin: &spin,
            comms: &comms,
            rec: &mut rec,
        };
        for f in self.families.all() {
            f.entries(&mut build)?;
        }
        self.forgotten.get().discount(&mut build.rec.lost);
        for f in self.families.all() {
            f.build(&mut build)?;
        }
        if let Some(after) = self.forget_exited {
            self.forget_expired(&raw, &wait_task, after)?;
        }
        Ok(rec)
    }

    /// Set the starvation detector's thresholds (deep spinlock tier; no-op without it).
    pub fn set_starvation(&mut self, p: lockscope_common::SpinParams) -> anyhow::Result<()> {
        self.families.spin.set_params(&mut self.probes.ebpf, p)
    }

    /// Cumulative count and wait time per (lock, type): cheap enough to read every interval
    /// (no symbolization).
    pub fn lock_totals(&self) -> anyhow::Result<Vec<LockTotals>> {
        // Episodes wait in a ring buffer: empty it every interval.
        self.families.spin.tier.drain();
        read_lock_totals(self.probes.ebpf())
    }

    /// Detach every probe: no new events; maps stay readable for a last snapshot. What
    /// this thread does next (the last read, the report) is what the user waits for
    /// after a Ctrl-C: it runs at the start's weight until the process ends. Taken after
    /// the detach, so that the keeper it may fork (`probe::release`) does not inherit it.
    pub fn stop(&mut self) {
        if self.stopped_after.is_none() {
            self.stopped_after = Some(self.start.elapsed().as_secs_f64());
        }
        family::detach(&mut self.probes, &mut self.families);
        crate::boost::Boost::new().until_exit();
    }

    pub fn probes(&self) -> &Probes {
        &self.probes
    }

    /// The probe families as attached (what runs, and why something does not).
    pub fn families(&self) -> &Families {
        &self.families
    }

    /// Read the memory maps of processes with new pthread call sites while they live, so
    /// that the sites can be named after the processes exit. Cheap; call it often.
    pub fn observe_user_sites(&self) {
        let futex = &self.families.futex;
        let keys = futex.pthread.site_keys();
        if !keys.is_empty() {
            futex.user_names.observe(&keys);
        }
    }

    /// Trace `pid` (a launched command) when the kernel does not follow forks.
    pub fn add_target(&mut self, pid: u32) -> anyhow::Result<()> {
        self.probes.add_target(pid)
    }

    /// Read process `pid`'s maps now, to unwind its waits and name its call sites should
    /// it exit early.
    pub fn remember_process(&self, pid: u32) {
        let futex = &self.families.futex;
        futex.user_names.remember(pid);
        futex.pthread.remember(pid);
    }

    /// Record a note on pthread attribution (kept in the recording's `futex_events`).
    pub fn pthread_note(&mut self, note: String) {
        self.families.futex.pthread.notes.push(note);
    }
}

/// Process names: those the probes saw, then `/proc` for the waiters and tracees that the
/// sched_wait_task proxy and the real-time probes name by pid only.
fn with_proc_comms(
    seen: &HashMap<u32, String>,
    raw: &crate::aggregate::RawSnapshot,
) -> HashMap<u32, String> {
    let mut comms = seen.clone();
    for info in raw.lock_info.values().chain(raw.past_lock_info.values()) {
        comms
            .entry(info.tgid)
            .or_insert_with(|| crate::decode::comm_to_string(&info.comm));
    }
    comms
}

pub use crate::source::process_comm as proc_comm;
