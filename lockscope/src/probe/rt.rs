//! Configuration of the real-time probes (`lockscope-ebpf/src/probes/rt.rs`): offsets
//! from BTF, `hrtimer_wakeup` from kallsyms, thresholds from the command line.

use anyhow::{Context as _, bail};
use lockscope_common::RtConfig;

use super::btf::KernelBtf;

/// What `record --latency-threshold` asks of the real-time probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtOptions {
    /// Wakeups of real-time threads slower than this are latency spikes.
    pub latency_threshold_ns: u64,
    /// A watched spinning wait at least this long can be a probable starvation episode.
    pub starvation_threshold_ns: u64,
    /// ... when other CPUs acquired the lock at least this many times during it.
    pub starvation_acquisitions: u64,
}

/// Spinning waits at least this long are sent to userspace as lock activity (lower when
/// the starvation threshold is lower).
pub const ACTIVITY_FLOOR_NS: u64 = 5_000;
/// `sched_wait_task` events of one waiter on one tracee closer than this form one burst.
pub const BURST_GAP_NS: u32 = 50_000;

/// Programs that always run: the `sched_wait_task` proxy and the task set.
pub const ALWAYS_PROGRAMS: [(&str, &str); 3] = [
    ("rt_sched_wait_task", "sched_wait_task"),
    ("rt_task_fork", "sched_process_fork"),
    ("rt_task_free", "sched_process_free"),
];
/// Programs of `--latency-threshold`: wakeup latency of real-time threads.
pub const LATENCY_PROGRAMS: [(&str, &str); 2] = [
    ("rt_hrtimer_expire_entry", "hrtimer_expire_entry"),
    ("rt_sched_switch", "sched_switch"),
];

/// The probes' configuration; disabled (proxy counts and task set only) without `rt`.
pub fn rt_config(kbtf: &KernelBtf, rt: Option<&RtOptions>) -> anyhow::Result<RtConfig> {
    let mut c = RtConfig {
        enabled: 0,
        off_task_pid: kbtf.member_offset("task_struct", "pid")?,
        latency_threshold_ns: u64::MAX,
        activity_floor_ns: u64::MAX,
        burst_gap_ns: BURST_GAP_NS,
        ..Default::default()
    };
    let Some(rt) = rt else {
        return Ok(c);
    };
    for (_, tp) in LATENCY_PROGRAMS {
        if !kbtf.has_type(&format!("btf_trace_{tp}")) {
            bail!("this kernel has no {tp} tracepoint: cannot time real-time wakeups");
        }
    }
    c.enabled = lockscope_common::RT_ENABLED | lockscope_common::RT_EVIDENCE_ALL;
    c.off_task_prio = kbtf.member_offset("task_struct", "prio")?;
    c.off_hrtimer_function = kbtf.member_offset("hrtimer", "function")?;
    c.off_hrtimer_softexpires = kbtf.member_offset("hrtimer", "_softexpires")?;
    c.off_sleeper_task = kbtf.member_offset("hrtimer_sleeper", "task")?;
    c.latency_threshold_ns = rt.latency_threshold_ns;
    c.activity_floor_ns = ACTIVITY_FLOOR_NS.min(rt.starvation_threshold_ns);
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").context("reading /proc/kallsyms")?;
    c.hrtimer_wakeup = symbol_address(&kallsyms, "hrtimer_wakeup")
        .filter(|&a| a != 0)
        .context(
            "hrtimer_wakeup not in /proc/kallsyms (or addresses hidden: needs root and \
         kernel.kptr_restrict < 2): cannot recognise sleeping real-time threads",
        )?;
    Ok(c)
}

/// Open (after every probe is attached) or close (before detaching) the wakeup timing.
pub fn set_gate(ebpf: &mut aya::Ebpf, on: bool) -> anyhow::Result<()> {
    let mut gate: aya::maps::Array<_, u32> =
        aya::maps::Array::try_from(ebpf.map_mut("RT_GATE").context("RT_GATE map")?)?;
    gate.set(0, u32::from(on), 0).context("setting RT_GATE")?;
    Ok(())
}

/// Address of a function in kallsyms text (`addr type name [module]`).
pub fn symbol_address(kallsyms: &str, func: &str) -> Option<u64> {
    kallsyms.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        let addr = it.next()?;
        let _kind = it.next()?;
        (it.next()? == func)
            .then(|| u64::from_str_radix(addr, 16).ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_function_address() {
        let text = "ffffffff8141e4a0 t __pfx_hrtimer_wakeup\nffffffff8141e4b0 t hrtimer_wakeup\n";
        assert_eq!(
            symbol_address(text, "hrtimer_wakeup"),
            Some(0xffff_ffff_8141_e4b0)
        );
        assert_eq!(symbol_address(text, "hrtimer_wake"), None);
    }
}
