//! Where a slow stop went. While a process stops (Ctrl-C in `record`), a real-time
//! thread reads, every few milliseconds, each of its threads' state, kernel stack
//! (`/proc/PID/task/TID/stack`) and scheduler times (`schedstat`: on a CPU, and
//! runnable but waiting for one). A stop over its limit then says whether it ran, waited
//! for a CPU or slept, and in which kernel function it slept, instead of a bare number.
//! Sampling is the privileged edge; [`summarize`] is pure.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One look at one thread.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    tid: i32,
    comm: String,
    /// `R`, `S`, `D`, ... from `/proc/.../stat`.
    state: char,
    /// Kernel functions, innermost first, offsets stripped (empty while running).
    stack: Vec<String>,
}

/// A thread's scheduler times, nanoseconds: on a CPU, and runnable waiting for one.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct SchedTimes {
    run_ns: u64,
    wait_ns: u64,
}

/// Where one slow stop went.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StopProfile {
    /// The run (0-based) and its time, seconds.
    pub run: usize,
    pub seconds: f64,
    /// Looks taken (every thread each time).
    pub looks: u32,
    /// Summed over the threads from the signal to the last look: seconds on a CPU, and
    /// runnable but waiting for one.
    pub on_cpu_s: f64,
    pub runnable_s: f64,
    /// The main thread's looks, by state and (asleep) kernel stack, most first.
    pub main_thread: Vec<(String, u32)>,
    /// Looks at other threads in uninterruptible sleep (`D`), by stack, most first.
    pub other_d: Vec<(String, u32)>,
}

impl StopProfile {
    /// One line for BENCHMARKS.md and the bench's output.
    pub fn text(&self) -> String {
        let shown = |v: &[(String, u32)]| {
            v.iter()
                .take(3)
                .map(|(k, n)| format!("{k} ({n})"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut s = format!(
            "run {} ({:.3} s, {} looks): on a CPU {:.3} s and runnable waiting for one {:.3} s \
             (summed over its threads); main thread: {}",
            self.run + 1,
            self.seconds,
            self.looks,
            self.on_cpu_s,
            self.runnable_s,
            if self.main_thread.is_empty() {
                "never seen".into()
            } else {
                shown(&self.main_thread)
            }
        );
        if !self.other_d.is_empty() {
            s += &format!("; other threads in D: {}", shown(&self.other_d));
        }
        s
    }
}

/// The profile of run `run` (`seconds` long) of process `pid` from its looks and the
/// scheduler times at the signal (`before`) and at the last look (`after`), by thread.
fn summarize(
    pid: i32,
    run: usize,
    seconds: f64,
    looks: u32,
    samples: &[Sample],
    before: &BTreeMap<i32, SchedTimes>,
    after: &BTreeMap<i32, SchedTimes>,
) -> StopProfile {
    let mut on_cpu = 0u64;
    let mut runnable = 0u64;
    for (tid, a) in after {
        // A thread born during the stop counts from zero.
        let b = before.get(tid).copied().unwrap_or_default();
        on_cpu += a.run_ns.saturating_sub(b.run_ns);
        runnable += a.wait_ns.saturating_sub(b.wait_ns);
    }
    let mut main: BTreeMap<String, u32> = BTreeMap::new();
    let mut other: BTreeMap<String, u32> = BTreeMap::new();
    for s in samples {
        let where_ = if s.stack.is_empty() {
            s.state.to_string()
        } else {
            format!("{} in {}", s.state, s.stack.join(" < "))
        };
        if s.tid == pid {
            *main.entry(where_).or_default() += 1;
        } else if s.state == 'D' {
            *other.entry(format!("{}: {where_}", s.comm)).or_default() += 1;
        }
    }
    let most_first = |m: BTreeMap<String, u32>| {
        let mut v: Vec<(String, u32)> = m.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    };
    StopProfile {
        run,
        seconds,
        looks,
        on_cpu_s: on_cpu as f64 / 1e9,
        runnable_s: runnable as f64 / 1e9,
        main_thread: most_first(main),
        other_d: most_first(other),
    }
}

/// How many kernel frames name where a thread sleeps.
const FRAMES: usize = 4;

/// Functions from `/proc/.../stack` text, innermost first, at most [`FRAMES`]:
/// `[<0>] futex_wait_queue+0x60/0x90` gives `futex_wait_queue`.
fn parse_stack(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let f = l.rsplit("] ").next()?.trim();
            let f = f.split('+').next()?.trim();
            (!f.is_empty()).then(|| f.to_string())
        })
        .take(FRAMES)
        .collect()
}

/// `run_ns wait_ns slices` from a `schedstat` file.
fn parse_schedstat(text: &str) -> Option<SchedTimes> {
    let mut it = text.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some(SchedTimes {
        run_ns: it.next()??,
        wait_ns: it.next()??,
    })
}

/// The state letter and comm from a `stat` file (`pid (comm) S ...`).
fn parse_stat(text: &str) -> Option<(String, char)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let state = text.get(close + 1..)?.trim_start().chars().next()?;
    Some((comm, state))
}

fn sched_times(pid: i32) -> BTreeMap<i32, SchedTimes> {
    tids(pid)
        .into_iter()
        .filter_map(|tid| Some((tid, read_schedstat(pid, tid)?)))
        .collect()
}

fn read_schedstat(pid: i32, tid: i32) -> Option<SchedTimes> {
    parse_schedstat(&std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?)
}

fn tids(pid: i32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// What the sampler saw of a process until told to stop or the process was gone.
struct Seen {
    looks: u32,
    samples: Vec<Sample>,
    before: BTreeMap<i32, SchedTimes>,
    after: BTreeMap<i32, SchedTimes>,
}

/// A thread looking at a stopping process every [`EVERY`] at a real-time priority (a
/// normal thread beside the ptrace storm would itself wait seconds for a CPU).
pub struct Sampler {
    pid: i32,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Seen>,
}

const EVERY: Duration = Duration::from_millis(10);

impl Sampler {
    /// Start looking at `pid`; call just before the signal that stops it.
    pub fn start(pid: i32) -> Sampler {
        let before = sched_times(pid);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let _rt = super::RtObserver::enter();
            let mut seen = Seen {
                looks: 0,
                samples: Vec::new(),
                after: before.clone(),
                before,
            };
            while !flag.load(Ordering::SeqCst) {
                let tids = tids(pid);
                if tids.is_empty() {
                    break;
                }
                seen.looks += 1;
                for tid in tids {
                    let dir = format!("/proc/{pid}/task/{tid}");
                    let Some((comm, state)) = std::fs::read_to_string(format!("{dir}/stat"))
                        .ok()
                        .as_deref()
                        .and_then(parse_stat)
                    else {
                        continue;
                    };
                    // A zombie's times are its last ones: keep those seen before.
                    if state == 'Z' {
                        continue;
                    }
                    let stack = if state == 'R' {
                        Vec::new()
                    } else {
                        std::fs::read_to_string(format!("{dir}/stack"))
                            .map(|t| parse_stack(&t))
                            .unwrap_or_default()
                    };
                    if let Some(t) = read_schedstat(pid, tid) {
                        seen.after.insert(tid, t);
                    }
                    seen.samples.push(Sample {
                        tid,
                        comm,
                        state,
                        stack,
                    });
                }
                std::thread::sleep(EVERY);
            }
            seen
        });
        Sampler { pid, stop, thread }
    }

    /// Stop looking; the profile of run `run` if it took more than `limit` seconds.
    pub fn finish(self, run: usize, seconds: f64, limit: f64) -> Option<StopProfile> {
        self.stop.store(true, Ordering::SeqCst);
        let seen = self.thread.join().ok()?;
        (seconds > limit).then(|| {
            summarize(
                self.pid,
                run,
                seconds,
                seen.looks,
                &seen.samples,
                &seen.before,
                &seen.after,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sampler_sees_a_sleeping_process_until_it_is_gone() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.3")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let sampler = Sampler::start(pid);
        child.wait().unwrap();
        let p = sampler.finish(0, 0.3, 0.0).expect("over a limit of 0 s");
        assert!(p.looks >= 5, "{p:?}");
        let (most, n) = &p.main_thread[0];
        assert!(most.starts_with('S'), "{p:?}");
        assert!(*n >= 5, "{p:?}");
        // Root reads the kernel stack.
        // SAFETY: geteuid(2) has no arguments and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            assert!(most.contains("nanosleep"), "{p:?}");
        }
        assert!(p.on_cpu_s < 0.2, "{p:?}");
        // Within its limit: no profile.
        let quick = Sampler::start(std::process::id() as i32);
        assert_eq!(quick.finish(0, 0.1, 0.5), None);
    }

    #[test]
    fn stacks_lose_their_offsets_and_keep_the_innermost_frames() {
        let text = "[<0>] futex_wait_queue+0x60/0x90\n[<0>] __futex_wait+0x8f/0x100\n\
                    [<0>] futex_wait+0x73/0x110\n[<0>] do_futex+0xc6/0x190\n\
                    [<0>] __x64_sys_futex+0x11a/0x1e0\n";
        assert_eq!(
            parse_stack(text),
            ["futex_wait_queue", "__futex_wait", "futex_wait", "do_futex"]
        );
        assert!(parse_stack("").is_empty());
    }

    #[test]
    fn schedstat_and_stat_are_read() {
        assert_eq!(
            parse_schedstat("106180364 10897148 180\n"),
            Some(SchedTimes {
                run_ns: 106_180_364,
                wait_ns: 10_897_148
            })
        );
        assert_eq!(parse_schedstat("x"), None);
        assert_eq!(
            parse_stat("42 (tokio (rt)) D 1 42 42 0"),
            Some(("tokio (rt)".into(), 'D'))
        );
    }

    #[test]
    fn a_profile_splits_cpu_waiting_and_sleep_and_ranks_stacks() {
        let s = |tid, state, stack: &[&str]| Sample {
            tid,
            comm: if tid == 10 { "lockscope" } else { "tokio-rt" }.into(),
            state,
            stack: stack.iter().map(|f| f.to_string()).collect(),
        };
        let samples = [
            s(10, 'R', &[]),
            s(10, 'D', &["synchronize_rcu", "tracepoint_probe_unregister"]),
            s(10, 'D', &["synchronize_rcu", "tracepoint_probe_unregister"]),
            s(11, 'S', &["futex_wait_queue"]),
            s(11, 'D', &["mmap_read_lock"]),
        ];
        let before = BTreeMap::from([(
            10,
            SchedTimes {
                run_ns: 1_000_000_000,
                wait_ns: 0,
            },
        )]);
        let after = BTreeMap::from([
            (
                10,
                SchedTimes {
                    run_ns: 1_100_000_000,
                    wait_ns: 1_500_000_000,
                },
            ),
            // Born during the stop.
            (
                11,
                SchedTimes {
                    run_ns: 50_000_000,
                    wait_ns: 0,
                },
            ),
        ]);
        let p = summarize(10, 1, 2.3, 3, &samples, &before, &after);
        assert!((p.on_cpu_s - 0.15).abs() < 1e-9, "{p:?}");
        assert!((p.runnable_s - 1.5).abs() < 1e-9, "{p:?}");
        assert_eq!(
            p.main_thread,
            [
                (
                    "D in synchronize_rcu < tracepoint_probe_unregister".to_string(),
                    2
                ),
                ("R".to_string(), 1)
            ]
        );
        assert_eq!(
            p.other_d,
            [("tokio-rt: D in mmap_read_lock".to_string(), 1)]
        );
        let t = p.text();
        assert!(
            t.starts_with("run 2 (2.300 s, 3 looks): on a CPU 0.150 s"),
            "{t}"
        );
        assert!(
            t.contains("D in synchronize_rcu < tracepoint_probe_unregister (2), R (1)"),
            "{t}"
        );
        assert!(
            t.contains("other threads in D: tokio-rt: D in mmap_read_lock (1)"),
            "{t}"
        );
    }
}
