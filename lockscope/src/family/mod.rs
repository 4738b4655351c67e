//! The probe families: each kind of event lockscope records is one module implementing
//! [`Family`], from what it needs of the kernel to what it adds to a recording, and
//! [`Families`] is the registry that the loader (`probe::loader`), the session, and
//! `doctor` iterate. The report sections a family's data gets are in
//! `sink::report::SECTIONS`.
//!
//! A family's life, each step in registry order:
//!
//! 1. [`Family::prepare`]: before the eBPF object loads, read what it needs from BTF
//!    and the options; a kernel that lacks it gives a note (or, for `contention`, the
//!    error that nothing can be traced).
//! 2. [`Family::globals`]: its read-only configuration and map sizes for the load.
//! 3. [`Family::attach`]: its hooks (tracepoint groups through [`Attach::group`], the
//!    deep tiers through `probe::hooks`); [`Family::start`] opens its gate once every
//!    family is attached.
//! 4. At each snapshot: [`Family::read`] its maps into the raw snapshot, then
//!    [`Family::entries`] (the lock table, `contention`'s) and [`Family::build`] its
//!    part of the recording.
//! 5. [`Family::stop`] closes its gate, then [`Family::detach`].

pub mod cgroups;
pub mod contention;
pub mod futex;
pub mod pi_proxy;
pub mod rt;
pub mod rwsem;
pub mod spin;

use std::collections::{BTreeMap, HashMap};

use aya::{Btf, Ebpf};

use crate::{
    aggregate::{
        RawSnapshot, Recording, recording::Detail, rt::StarvationEpisode, spin::SpinSnapshot,
    },
    probe::{
        LoadOptions,
        btf::{KernelBtf, KernelOffsets},
        groups::Group,
        loader::{Preload, TpLinks},
        rt::RtOptions,
    },
    symbolize::KernelNames,
};

/// One kind of lock event, from its hooks to its part of a recording. Every method but
/// `name` and `attach` has a default that does nothing.
pub trait Family {
    /// The registry name (notes, `doctor`, `LOCKSCOPE_TEST_UNAVAILABLE`).
    fn name(&self) -> &'static str;

    /// Before the object loads: what the family needs from BTF and the options.
    fn prepare(&mut self, _cx: &mut Prepare<'_>) -> anyhow::Result<()> {
        Ok(())
    }

    /// Read-only globals (name, bytes) and map sizes (name, entries) for the load.
    fn globals(&self, _out: &mut Globals) {}

    /// The tracepoint programs `attach` will load, verified beforehand on a pool of
    /// threads (`loader::preload`): the kernel's verifier takes most of a start.
    /// Heaviest first.
    fn preload(&self, _out: &mut Vec<Preload>) {}

    /// Attach the family's hooks. A kernel that lacks them gives a note, not an error.
    fn attach(&mut self, cx: &mut Attach<'_>) -> anyhow::Result<()>;

    /// Every family is attached: open the family's gate, if it has one.
    fn start(&mut self, _ebpf: &mut Ebpf) -> anyhow::Result<()> {
        Ok(())
    }

    /// Read the family's maps into the snapshot being taken.
    fn read(&self, _cx: &mut Read<'_>) -> anyhow::Result<()> {
        Ok(())
    }

    /// Build the lock table from what was read (the contention family's).
    fn entries(&self, _cx: &mut Build<'_>) -> anyhow::Result<()> {
        Ok(())
    }

    /// Add the family's part to the recording (after the lock table is built).
    fn build(&self, _cx: &mut Build<'_>) -> anyhow::Result<()> {
        Ok(())
    }

    /// Stop recording (close the gate) before anything is detached.
    fn stop(&mut self, _ebpf: &mut Ebpf) {}

    /// Detach the family's own hooks (after the shared `tp_btf` links; in reverse
    /// registry order).
    fn detach(&mut self, _cx: &mut Detach<'_>) {}

    /// `doctor`: rows of the probe table (tracepoints, each loaded for real).
    fn doctor_rows(&self, _cx: &Doctor<'_>) {}

    /// `doctor`: a section of the family's own (a deep tier's hooks).
    fn doctor_section(&self, _cx: &Doctor<'_>) {}
}

/// Globals and map sizes the families set on the object before it loads.
#[derive(Debug, Default)]
pub struct Globals {
    pub globals: Vec<(&'static str, Vec<u8>)>,
    pub map_sizes: Vec<(&'static str, u32)>,
    /// Kernel functions to call: (placeholder helper number, the function's BTF id).
    pub kfuncs: Vec<(i32, u32)>,
}

impl Globals {
    pub fn set<T: aya::Pod>(&mut self, name: &'static str, value: &T) {
        // SAFETY: a Pod value viewed as its bytes (plain integers, no padding rules).
        let bytes = unsafe {
            std::slice::from_raw_parts(std::ptr::from_ref(value).cast::<u8>(), size_of::<T>())
        };
        self.globals.push((name, bytes.to_vec()));
    }
}

/// What `prepare` sees.
pub struct Prepare<'a> {
    pub opts: &'a LoadOptions,
    pub rt: Option<RtOptions>,
    pub kbtf: &'a KernelBtf,
    pub offsets: &'a KernelOffsets,
    pub notes: &'a mut Vec<String>,
}

/// What `attach` sees: the loaded object and the shared tracepoint links.
pub struct Attach<'a> {
    pub ebpf: &'a mut Ebpf,
    pub btf: &'a Btf,
    pub opts: &'a LoadOptions,
    pub links: &'a mut TpLinks,
    pub notes: &'a mut Vec<String>,
    /// `tracepoint`, or `deep` once the rwsem slowpaths are hooked.
    pub tier: &'a mut &'static str,
}

impl Attach<'_> {
    /// Attach a tracepoint group, all of it or none (see [`TpLinks::attach_group`]).
    pub fn group(&mut self, g: &Group) -> anyhow::Result<bool> {
        self.links
            .attach_group(self.ebpf, g, g.hooks, self.btf, self.notes)
    }

    /// Attach `hooks` as group `g` (a group whose program the family picks).
    pub fn group_hooks(&mut self, g: &Group, hooks: &[(&str, &str)]) -> anyhow::Result<bool> {
        self.links
            .attach_group(self.ebpf, g, hooks, self.btf, self.notes)
    }
}

/// What `detach` sees.
pub struct Detach<'a> {
    pub ebpf: &'a mut Ebpf,
    pub links: &'a mut TpLinks,
}

/// What `read` sees.
pub struct Read<'a> {
    pub ebpf: &'a Ebpf,
    pub raw: &'a mut RawSnapshot,
    /// `sched_wait_task` acquisitions (the pi-lock proxy's).
    pub wait_task: Vec<(lockscope_common::WaitTaskKey, u64)>,
    /// The deep spinlock tier's starvation episodes, decoded (`None`: the tier is off).
    pub deep_episodes: Option<Vec<StarvationEpisode>>,
    /// The deep spinlock tier's maps (`None`: the tier is off).
    pub spin: Option<SpinSnapshot>,
    pub lost: &'a mut BTreeMap<String, u64>,
    pub names: &'a KernelNames,
    pub detail: Detail,
}

/// What `entries` and `build` see: the recording as it is built.
pub struct Build<'a> {
    pub ebpf: &'a Ebpf,
    pub raw: &'a mut RawSnapshot,
    pub names: &'a KernelNames,
    pub detail: Detail,
    pub wait_task: &'a [(lockscope_common::WaitTaskKey, u64)],
    pub deep_episodes: &'a Option<Vec<StarvationEpisode>>,
    pub spin: &'a Option<SpinSnapshot>,
    /// Process names: the probes', then `/proc` for the pids other families name.
    pub comms: &'a HashMap<u32, String>,
    pub rec: &'a mut Recording,
}

/// What the `doctor` rows see.
pub struct Doctor<'a> {
    pub kbtf: Option<&'a KernelBtf>,
    pub tracefs: Option<&'a std::path::Path>,
    /// BTF and privileges: programs can be loaded to ask the verifier.
    pub can_load: bool,
    /// Set by the required family: every one of its hooks loads.
    pub ready: std::cell::Cell<bool>,
}

/// `doctor`: one row per hook of tracepoint group `g`, each loaded for real. How many
/// loaded.
pub fn doctor_group_rows(cx: &Doctor<'_>, g: &Group) -> usize {
    use crate::probe::loader::{HookKind, try_load};
    let mut ok = 0;
    for &(prog, tp) in g.hooks {
        let exists = cx
            .kbtf
            .is_some_and(|b| b.has_type(&format!("btf_trace_{tp}")));
        let status = if crate::probe::groups::switched_off(g.name) {
            Err(crate::probe::groups::SWITCHED_OFF.to_owned())
        } else if !cx.can_load {
            Err("not tried: needs BTF and privileges".to_owned())
        } else if !exists {
            Err(format!("no {tp} tracepoint in this kernel"))
        } else {
            try_load(prog, HookKind::TpBtf, tp)
        };
        if status.is_ok() {
            ok += 1;
        }
        let (word, detail) = match status {
            Ok(()) => ("available", format!("{}: {}", g.name, g.gives)),
            Err(e) if g.required => ("missing", format!("{}: {e}", g.name)),
            Err(e) => ("missing", format!("{}: {e}; {}", g.name, g.without)),
        };
        println!("{tp:<22} {:<11} {word:<10} {detail}", "tracepoint");
    }
    ok
}

/// The registry: every family, in the order the loader attaches them and a snapshot
/// reads and builds them. Adding a family is one field here and one line in
/// [`Families::all`] / [`Families::all_mut`].
#[derive(Default)]
pub struct Families {
    /// `sched_wait_task` pi_lock acquisitions and the task set (first: a contended
    /// task's pi_lock is named from it).
    pub pi_proxy: pi_proxy::PiProxy,
    pub contention: contention::Contention,
    pub futex: futex::Futex,
    pub rwsem: rwsem::Rwsem,
    /// Before `spin` in the registry (its report sections come first); it builds from
    /// the deep tier's episodes, which `spin` decodes when it reads.
    pub rt: rt::RealTime,
    pub spin: spin::Spin,
    /// Last: labels every lock entry's tasks with their cgroup.
    pub cgroups: cgroups::Cgroups,
}

impl Families {
    pub fn all(&self) -> [&dyn Family; 7] {
        [
            &self.pi_proxy,
            &self.contention,
            &self.futex,
            &self.rwsem,
            &self.rt,
            &self.spin,
            &self.cgroups,
        ]
    }

    pub fn all_mut(&mut self) -> [&mut dyn Family; 7] {
        [
            &mut self.pi_proxy,
            &mut self.contention,
            &mut self.futex,
            &mut self.rwsem,
            &mut self.rt,
            &mut self.spin,
            &mut self.cgroups,
        ]
    }
}

/// Load the eBPF object configured by every family and attach what the kernel allows,
/// family by family: the one loader every sink uses.
pub fn load(
    opts: &LoadOptions,
    rt: Option<RtOptions>,
    families: &mut Families,
) -> anyhow::Result<crate::probe::Probes> {
    use crate::probe::{Probes, btf::VMLINUX_BTF, features, loader::Beside};
    use anyhow::Context as _;
    features::require_privileges()?;
    features::bump_memlock_rlimit();
    // aya's parses of the kernel's BTF (ours, for the programs that name kernel types
    // and functions; the loader's own, for relocations) run on threads of their own
    // while the families prepare: tens of milliseconds each.
    let btf = Beside::start("btf", Btf::from_sys_fs);
    let loader = Beside::start("loader", aya::EbpfLoader::new);
    let kbtf = KernelBtf::load(std::path::Path::new(VMLINUX_BTF))?;
    let offsets = KernelOffsets::from_btf(&kbtf)?;
    let mut notes: Vec<String> = offsets
        .missing
        .iter()
        .map(|m| format!("btf: {m}"))
        .collect();
    for f in families.all_mut() {
        f.prepare(&mut Prepare {
            opts,
            rt,
            kbtf: &kbtf,
            offsets: &offsets,
            notes: &mut notes,
        })?;
    }
    let mut globals = Globals::default();
    for f in families.all() {
        f.globals(&mut globals);
    }
    let joined = |what| anyhow::anyhow!("{what} panicked");
    let btf = btf
        .join()
        .ok_or_else(|| joined("parsing the kernel's BTF"))?
        .context("reading kernel BTF")?;
    let loader = loader
        .join()
        .ok_or_else(|| joined("starting the eBPF loader"))?;
    let mut ebpf = Probes::load_object(loader, &globals)?;
    // Verify what will be attached on every CPU at once. The futex family's exit program
    // takes the verifier longest: that family is asked first, so that the others verify
    // beside it.
    let mut wanted = Vec::new();
    let all = families.all();
    let (futex, others): (Vec<&dyn Family>, Vec<&dyn Family>) = all
        .into_iter()
        .partition(|f| f.name() == crate::probe::groups::FUTEX);
    for f in futex.into_iter().chain(others) {
        f.preload(&mut wanted);
    }
    crate::probe::loader::preload(&mut ebpf, &btf, &wanted);
    let mut probes = Probes {
        ebpf,
        links: TpLinks::default(),
        tier: "tracepoint",
        notes,
    };
    for f in families.all_mut() {
        f.attach(&mut Attach {
            ebpf: &mut probes.ebpf,
            btf: &btf,
            opts,
            links: &mut probes.links,
            notes: &mut probes.notes,
            tier: &mut probes.tier,
        })?;
    }
    crate::probe::hooks::forget_kallsyms();
    for f in families.all_mut() {
        f.start(&mut probes.ebpf)?;
    }
    Ok(probes)
}

/// Detach every program: no new events after this returns; maps stay readable. Every
/// gate closes first; the tracefs tracepoints (slow to release) go last, to a keeper
/// process that lets them go once lockscope has exited (`probe::release`).
pub fn detach(probes: &mut crate::probe::Probes, families: &mut Families) {
    for f in families.all_mut() {
        f.stop(&mut probes.ebpf);
    }
    probes.links.detach_btf();
    for f in families.all_mut().into_iter().rev() {
        f.detach(&mut Detach {
            ebpf: &mut probes.ebpf,
            links: &mut probes.links,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_has_its_own_name() {
        let f = Families::default();
        let mut names: Vec<&str> = f.all().iter().map(|f| f.name()).collect();
        assert_eq!(names[1], "contention");
        let registry = names.clone();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), f.all().len());
        // The report sections name registry families, in registry order.
        let sections: Vec<usize> = crate::sink::report::SECTIONS
            .iter()
            .map(|(n, _)| registry.iter().position(|r| r == n).expect(n))
            .collect();
        assert!(sections.is_sorted(), "{sections:?}");
    }
}
