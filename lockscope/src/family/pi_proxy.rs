//! The pi-lock proxy: `sched_wait_task` fires while `wait_task_inactive` holds a task's
//! `pi_lock`, so its acquisitions by waiter are counted on any kernel (the tracepoint
//! tier has no spinlock hold hook); and the set of live tasks, from which a contended
//! `pi_lock` of any task is named. It also carries the real-time probes' configuration
//! (`RT_CONFIG`), which the proxy needs for the task pid offset.

use anyhow::bail;
use lockscope_common::{NAME_PI_LOCK, RtConfig};

use super::{Attach, Build, Doctor, Family, Globals, Prepare, Read};
use crate::{
    aggregate::{pi_lock::apply_wait_task, recording::lock_identity_at},
    probe::{groups::PI_LOCK_PROXY, rt::rt_config},
    source::rt::read_wait_task,
};

#[derive(Default)]
pub struct PiProxy {
    config: RtConfig,
    /// The kernel has what the proxy needs.
    ok: bool,
}

impl Family for PiProxy {
    fn name(&self) -> &'static str {
        PI_LOCK_PROXY.name
    }

    fn prepare(&mut self, cx: &mut Prepare<'_>) -> anyhow::Result<()> {
        let pi_lock = cx.offsets.name_kinds & NAME_PI_LOCK != 0;
        if cx.rt.is_some() && !pi_lock {
            bail!("--latency-threshold needs task_struct.pi_lock in the kernel's BTF");
        }
        // Asked for (--latency-threshold): an error if impossible; otherwise the pi_lock
        // proxy's own needs, skipped with a note when the kernel lacks them.
        match rt_config(cx.kbtf, cx.rt.as_ref()) {
            Ok(c) => (self.config, self.ok) = (c, pi_lock),
            Err(e) if cx.rt.is_none() => {
                cx.notes.push(format!(
                    "{}: not attached ({e:#}): {}",
                    PI_LOCK_PROXY.name, PI_LOCK_PROXY.without
                ));
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    fn globals(&self, out: &mut Globals) {
        out.set("RT_CONFIG", &self.config);
    }

    fn preload(&self, out: &mut Vec<crate::probe::loader::Preload>) {
        if self.ok {
            crate::probe::loader::Preload::group(&PI_LOCK_PROXY, out);
        }
    }

    fn attach(&mut self, cx: &mut Attach<'_>) -> anyhow::Result<()> {
        if self.ok {
            cx.group(&PI_LOCK_PROXY)?;
        }
        Ok(())
    }

    fn read(&self, cx: &mut Read<'_>) -> anyhow::Result<()> {
        cx.wait_task = read_wait_task(cx.ebpf)?;
        Ok(())
    }

    fn build(&self, cx: &mut Build<'_>) -> anyhow::Result<()> {
        let (raw, names) = (&*cx.raw, cx.names);
        let by_thread = raw.pi_lock_generations();
        let gen_of = |a: u64, tracee: u32| {
            by_thread
                .get(&(a, tracee))
                .copied()
                .unwrap_or_else(|| raw.current_gen(a))
        };
        let name = |a: u64, generation: u32| lock_identity_at(raw, names, a, generation, None);
        apply_wait_task(cx.wait_task, cx.comms, &gen_of, &name, &mut cx.rec.locks);
        Ok(())
    }

    fn doctor_rows(&self, cx: &Doctor<'_>) {
        super::doctor_group_rows(cx, &PI_LOCK_PROXY);
    }
}
