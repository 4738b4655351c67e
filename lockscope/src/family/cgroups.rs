//! Cgroups: the v2 cgroup of each process seen waiting (recorded by the contention and
//! futex probes with its name), refreshed when a process moves (`cgroup-moves`); every
//! lock entry's tasks are labelled with their cgroup path and the waits summed per
//! (cgroup, type). Last in the registry: it labels the entries of every other family.

use std::{cell::RefCell, collections::BTreeSet};

use super::{Attach, Build, Doctor, Family, Read};
use crate::{aggregate::cgroup, probe::groups::CGROUP_MOVES, symbolize::cgroup::CgroupNames};

#[derive(Default)]
pub struct Cgroups {
    /// Cgroup ids -> paths, kept so a removed cgroup keeps its name.
    names: RefCell<CgroupNames>,
}

impl Family for Cgroups {
    fn name(&self) -> &'static str {
        CGROUP_MOVES.name
    }

    fn preload(&self, out: &mut Vec<crate::probe::loader::Preload>) {
        crate::probe::loader::Preload::group(&CGROUP_MOVES, out);
    }

    fn attach(&mut self, cx: &mut Attach<'_>) -> anyhow::Result<()> {
        cx.group(&CGROUP_MOVES)?;
        Ok(())
    }

    fn read(&self, cx: &mut Read<'_>) -> anyhow::Result<()> {
        crate::source::read_cgroups(cx.ebpf, cx.raw)
    }

    fn build(&self, cx: &mut Build<'_>) -> anyhow::Result<()> {
        let locks = &mut cx.rec.locks;
        let tgids: BTreeSet<u32> = cx
            .raw
            .stats
            .iter()
            .map(|(k, _)| k.tgid)
            .chain(locks.iter().flat_map(|l| l.tasks.iter().map(|t| t.pid)))
            .chain(locks.iter().filter_map(|l| l.user.as_ref().map(|u| u.pid)))
            .collect();
        let cgroup_of = self.names.borrow_mut().processes(tgids, &cx.raw.cgroups);
        cgroup::label_tasks(locks, &cgroup_of);
        cx.rec.cgroups = Some(cgroup::summarize(cx.raw, locks, &cgroup_of));
        Ok(())
    }

    fn doctor_rows(&self, cx: &Doctor<'_>) {
        super::doctor_group_rows(cx, &CGROUP_MOVES);
    }
}
