//! The embedded eBPF object and its loading, the tracepoint links the probe families
//! share, and `doctor`'s trial loads. The families (`crate::family`) decide what is
//! configured and attached; `family::load` drives this, the one loader every sink uses.

use std::path::PathBuf;

use anyhow::{Context as _, anyhow, bail};
use aya::{
    Btf, Ebpf, EbpfLoader,
    maps::HashMap as BpfHashMap,
    programs::{BtfTracePoint, Link as _, TracePoint, links::FdLink, trace_point::TracePointLink},
};
use lockscope_common::{STACK_WALK_BURST, STACK_WALKS_PER_CPU_S};

use super::{
    btf::{KernelBtf, VMLINUX_BTF},
    groups::{self, Group},
    rwsem::{self, DeepTier},
    spin::SpinTier,
};
use crate::decode::LockType;

/// The eBPF object built by build.rs.
static PROBES_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lockscope"));

/// The kernel functions the probes call, by placeholder helper number: (placeholder,
/// function name).
pub const KFUNCS: &[(i32, &str)] = &[
    (lockscope_common::KFUNC_GET_KMEM_CACHE, "bpf_get_kmem_cache"),
    (lockscope_common::KFUNC_TASK_FROM_PID, "bpf_task_from_pid"),
    (lockscope_common::KFUNC_TASK_RELEASE, "bpf_task_release"),
];

/// The kernel functions of [`KFUNCS`] this kernel has: (placeholder, BTF id).
pub fn kernel_kfuncs(kbtf: &KernelBtf) -> Vec<(i32, u32)> {
    KFUNCS
        .iter()
        .filter_map(|(p, name)| Some((*p, kbtf.func_id(name)?)))
        .collect()
}

/// [`kernel_kfuncs`] of the running kernel, for `doctor`'s trial loads: its BTF read
/// once, not once per trial.
fn trial_kfuncs() -> &'static [(i32, u32)] {
    static KFUNCS_HERE: std::sync::OnceLock<Vec<(i32, u32)>> = std::sync::OnceLock::new();
    KFUNCS_HERE.get_or_init(|| {
        KernelBtf::load(&PathBuf::from(VMLINUX_BTF))
            .map(|k| kernel_kfuncs(&k))
            .unwrap_or_default()
    })
}

/// The probes' object, its calls to kernel functions resolved (see [`patch_kfunc_calls`]),
/// 8-byte aligned as the ELF reader wants.
pub struct ProbesObject(Vec<u64>, usize);

impl ProbesObject {
    pub fn new(kfuncs: &[(i32, u32)]) -> anyhow::Result<Self> {
        let mut words = vec![0u64; PROBES_OBJ.len().div_ceil(8)];
        // SAFETY: u64s viewed as bytes (any bit pattern is a byte), within the vector.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), PROBES_OBJ.len())
        };
        bytes.copy_from_slice(PROBES_OBJ);
        patch_kfunc_calls(bytes, kfuncs)?;
        Ok(Self(words, PROBES_OBJ.len()))
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: as in `new`: the first `self.1` bytes of the words.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast::<u8>(), self.1) }
    }
}

/// Rewrite the calls to placeholder helper numbers (`KFUNCS`) in the object's code: into
/// a call of the kernel function (`BPF_PSEUDO_KFUNC_CALL` with its BTF id) where `kfuncs`
/// has its id, else into `r0 = 0` (the functions return 0 for "none"). aya 0.14 resolves
/// no kernel-function calls itself.
pub fn patch_kfunc_calls(elf: &mut [u8], kfuncs: &[(i32, u32)]) -> anyhow::Result<usize> {
    use object::{Object as _, ObjectSection as _, SectionFlags, elf::SHF_EXECINSTR};
    const CALL: u8 = 0x85; // BPF_JMP | BPF_CALL
    const MOV64_IMM: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
    const PSEUDO_KFUNC_CALL: u8 = 2;
    let ranges: Vec<(usize, usize)> = {
        let file = object::File::parse(&*elf).context("parsing the eBPF object")?;
        file.sections()
            .filter(|s| {
                matches!(s.flags(), SectionFlags::Elf { sh_flags } if sh_flags & u64::from(SHF_EXECINSTR) != 0)
            })
            .filter_map(|s| s.file_range())
            .map(|(off, len)| (off as usize, len as usize))
            .collect()
    };
    let mut patched = 0;
    for (off, len) in ranges {
        let code = elf
            .get_mut(off..off + len)
            .ok_or_else(|| anyhow!("eBPF object section out of range"))?;
        for insn in code.chunks_exact_mut(8) {
            let imm = i32::from_le_bytes([insn[4], insn[5], insn[6], insn[7]]);
            if insn[0] != CALL || insn[1] != 0 {
                continue;
            }
            if !KFUNCS.iter().any(|(p, _)| *p == imm) {
                continue;
            }
            let id = kfuncs.iter().find(|(p, _)| *p == imm).map(|(_, id)| *id);
            match id {
                Some(id) => {
                    insn[1] = PSEUDO_KFUNC_CALL << 4;
                    insn[4..8].copy_from_slice(&id.to_le_bytes());
                }
                None => {
                    insn.copy_from_slice(&[MOV64_IMM, 0, 0, 0, 0, 0, 0, 0]);
                }
            }
            insn[2] = 0;
            insn[3] = 0;
            patched += 1;
        }
    }
    Ok(patched)
}

/// What to trace. Filtering happens in the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every task on the system.
    System,
    /// These processes and the processes they fork from now on.
    Pids(Vec<u32>),
    /// The command lockscope is about to start, and its whole process tree.
    Command,
    /// Tasks in this cgroup (v2) or below it.
    Cgroup(PathBuf),
}

#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub target: Target,
    /// Lock types to record; `None` for all.
    pub types: Option<Vec<LockType>>,
    /// Kernel stack walks per CPU per second (0: every wait's stack).
    pub stack_walks_per_cpu_s: u64,
    /// On the tracepoint tier, estimate mmap_lock trylock failures from
    /// `mmap_lock_acquire_returned`: a program on every mmap_lock acquisition, contended
    /// or not, so only on request.
    pub mmap_trylocks: bool,
    /// Bytes of the ring buffer pthread waits travel through to their unwinding (a power
    /// of two, a multiple of the page size). Mapped twice into lockscope (for records
    /// that wrap), so its RSS counts it twice.
    pub pthread_ring_bytes: u32,
    /// How user-space locks are found: every futex call, or only the waits that sleep.
    pub futex_mode: FutexMode,
}

/// How the futex family finds user-space lock waits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FutexMode {
    /// Every futex call, exact (the futex syscall tracepoints). While they are attached
    /// every system call of every process takes the kernel's traced path (tens of ns).
    #[default]
    Calls,
    /// Only the waits that sleep, found at the context switch (`sched_switch`): no
    /// syscall tracepoint, nothing on a futex call that does not block; wakes and EAGAIN
    /// are not seen, and a wait (and its pthread call site) counts once per sleep.
    Blocking,
}

impl LoadOptions {
    /// The default stack budget ([`STACK_WALKS_PER_CPU_S`]).
    pub fn new(target: Target, types: Option<Vec<LockType>>) -> Self {
        Self {
            target,
            types,
            stack_walks_per_cpu_s: STACK_WALKS_PER_CPU_S,
            mmap_trylocks: false,
            pthread_ring_bytes: lockscope_common::PTHREAD_EVENTS_BYTES,
            futex_mode: FutexMode::Calls,
        }
    }
}

/// (cost, burst) in ns of credit for a budget of `per_s` stack walks per CPU per second.
pub fn stack_budget(per_s: u64) -> (u64, u64) {
    if per_s == 0 {
        return (0, 0);
    }
    let cost = (1_000_000_000 / per_s).max(1);
    (cost, cost.saturating_mul(STACK_WALK_BURST))
}

/// The loaded eBPF object, the tracepoint links every family shares, and what a run
/// without some probe lacks. The families (`crate::family`) own the rest. Dropping it
/// detaches everything.
pub struct Probes {
    pub ebpf: Ebpf,
    pub links: TpLinks,
    pub tier: &'static str,
    /// Probe groups skipped because this kernel lacks what they need: one line each
    /// (everything else runs).
    pub notes: Vec<String>,
}

impl Probes {
    /// Load the object with the families' globals and map sizes. `loader`: a new
    /// loader, which has parsed the kernel's BTF itself (`EbpfLoader::new`, made on
    /// another thread while the families prepare).
    pub fn load_object(
        loader: EbpfLoader<'static>,
        g: &crate::family::Globals,
    ) -> anyhow::Result<Ebpf> {
        let (globals, map_sizes) = (&g.globals, &g.map_sizes);
        let test_sizes = test_map_sizes()?;
        let mut loader: EbpfLoader<'_> = loader;
        // The futex calls in flight live in task storage, which aya loads but has no
        // userspace type for (read through the task iterator instead).
        loader.allow_unsupported_maps();
        for (map, n) in &test_sizes {
            loader.map_max_entries(map, *n);
        }
        for (map, n) in map_sizes {
            loader.map_max_entries(map, *n);
        }
        for (name, bytes) in globals {
            loader.override_global(name, bytes.as_slice(), true);
        }
        let ebpf = loader
            .load(ProbesObject::new(&g.kfuncs)?.bytes())
            .context("loading the eBPF probes into the kernel")?;
        // The loader ignores a size for a map the object lacks: a misspelt name would
        // silently leave a map at its full size.
        if let Some((map, _)) = map_sizes.iter().find(|(m, _)| ebpf.map(m).is_none()) {
            bail!("internal error: a family sized map {map}, which the eBPF object lacks");
        }
        Ok(ebpf)
    }

    /// Trace process `pid` from now on (a launched command, when forks are not followed).
    pub fn add_target(&mut self, pid: u32) -> anyhow::Result<()> {
        add_targets(&mut self.ebpf, &[pid])
    }

    /// Names of the attached probes.
    pub fn attached(&self) -> Vec<String> {
        self.links.names()
    }

    pub fn ebpf(&self) -> &Ebpf {
        &self.ebpf
    }

    /// Take a map out of the object (a ring buffer the session drains).
    pub fn take_map(&mut self, name: &str) -> Option<aya::maps::Map> {
        self.ebpf.take_map(name)
    }
}

/// A program to verify before the families attach it (see [`preload`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preload {
    /// A tracefs tracepoint program.
    Tracefs(&'static str),
    /// A `tp_btf` program and its BTF tracepoint.
    TpBtf(&'static str, &'static str),
}

impl Preload {
    /// The programs of group `g`, unless the test switch takes it for missing.
    pub fn group(g: &Group, out: &mut Vec<Preload>) {
        if !groups::switched_off(g.name) {
            out.extend(g.hooks.iter().map(|&(p, tp)| Preload::TpBtf(p, tp)));
        }
    }

    fn program(&self) -> &'static str {
        match *self {
            Preload::Tracefs(p) | Preload::TpBtf(p, _) => p,
        }
    }
}

/// Load (verify) the `wanted` programs of `ebpf` on as many threads as there are CPUs,
/// in the order given (heaviest first: a thread takes the next when it is done). The
/// verifier is most of a start, and one program at a time uses one CPU. A program that
/// fails here stays unloaded: attaching loads it again and reports why.
pub fn preload(ebpf: &mut Ebpf, btf: &Btf, wanted: &[Preload]) {
    let mut by_name: std::collections::HashMap<&str, &mut aya::programs::Program> =
        ebpf.programs_mut().collect();
    let mut jobs: Vec<(&mut aya::programs::Program, Preload)> = Vec::new();
    for w in wanted {
        if let Some(p) = by_name.remove(w.program()) {
            jobs.push((p, *w));
        }
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(jobs.len());
    let queue = std::sync::Mutex::new(jobs.into_iter());
    let work = || {
        loop {
            let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
            let Some((program, how)) = next else {
                return;
            };
            match (program, how) {
                (aya::programs::Program::TracePoint(p), Preload::Tracefs(_)) => {
                    let _ = p.load();
                }
                (aya::programs::Program::BtfTracePoint(p), Preload::TpBtf(_, tp)) => {
                    let _ = p.load(tp, btf);
                }
                _ => {}
            }
        }
    };
    std::thread::scope(|s| {
        for i in 1..threads {
            // A thread the system refuses (pids.max, RLIMIT_NPROC) only means fewer
            // verifying at once: this one drains the queue anyway.
            let _ = std::thread::Builder::new()
                .name(format!("verify-{i}"))
                .spawn_scoped(s, work);
        }
        work();
    });
}

/// Work started on a thread of its own beside the caller's, or, where the system grants
/// no thread (a container's `pids.max`, `RLIMIT_NPROC`), done at once on the caller's:
/// the thread is only a speed-up.
pub enum Beside<T> {
    Thread(std::thread::JoinHandle<Option<T>>),
    Done(T),
}

impl<T: Send + 'static> Beside<T> {
    pub fn start<F: FnOnce() -> T + Send + 'static>(name: &str, work: F) -> Self {
        // The work goes to the thread only once it runs: refused, it is still here.
        let (tx, rx) = std::sync::mpsc::channel::<F>();
        match std::thread::Builder::new()
            .name(name.into())
            .spawn(move || rx.recv().ok().map(|w| w()))
        {
            Ok(handle) => {
                // The thread holds the receiver until it has taken the work.
                let _ = tx.send(work);
                Beside::Thread(handle)
            }
            Err(_) => Beside::Done(work()),
        }
    }

    /// The work's result; `None` if its thread panicked.
    pub fn join(self) -> Option<T> {
        match self {
            Beside::Thread(handle) => handle.join().ok().flatten(),
            Beside::Done(result) => Some(result),
        }
    }
}

/// Put `pids` in the kernel's target set.
pub fn add_targets(ebpf: &mut Ebpf, pids: &[u32]) -> anyhow::Result<()> {
    let mut targets: BpfHashMap<_, u32, u8> =
        BpfHashMap::try_from(ebpf.map_mut("TARGETS").context("TARGETS map")?)?;
    for pid in pids {
        targets
            .insert(pid, 1, 0)
            .with_context(|| format!("adding pid {pid} to the target map"))?;
    }
    Ok(())
}

/// The tracepoint links: `tp_btf` (released at once) and tracefs tracepoints (perf
/// events, the futex syscall probes: slow to release, see [`super::release`]).
#[derive(Default)]
pub struct TpLinks {
    btf: Vec<(String, FdLink)>,
    tracefs: Vec<(String, TracePointLink)>,
}

impl TpLinks {
    /// Attach `hooks` as group `g`, all or none. A group the kernel lacks (or the test
    /// switch takes for missing) is skipped with a note; a required one is an error.
    /// Whether it was attached.
    pub fn attach_group(
        &mut self,
        ebpf: &mut Ebpf,
        g: &Group,
        hooks: &[(&str, &str)],
        btf: &Btf,
        notes: &mut Vec<String>,
    ) -> anyhow::Result<bool> {
        let before = self.btf.len();
        let result = if groups::switched_off(g.name) {
            Err(anyhow!(groups::SWITCHED_OFF))
        } else {
            hooks
                .iter()
                .try_for_each(|(prog, tp)| self.attach_tp_btf(ebpf, prog, tp, btf))
        };
        match result {
            Ok(()) => Ok(true),
            Err(e) if g.required => Err(e.context(format!("{}: {}", g.name, g.without))),
            Err(e) => {
                for (_, link) in self.btf.drain(before..) {
                    let _ = link.detach();
                }
                notes.push(format!("{}: not attached ({e:#}): {}", g.name, g.without));
                Ok(false)
            }
        }
    }

    fn attach_tp_btf(
        &mut self,
        ebpf: &mut Ebpf,
        prog: &str,
        tp: &str,
        btf: &Btf,
    ) -> anyhow::Result<()> {
        let program: &mut BtfTracePoint = ebpf
            .program_mut(prog)
            .ok_or_else(|| anyhow!("program {prog} missing from the eBPF object"))?
            .try_into()?;
        if program.fd().is_err() {
            program
                .load(tp, btf)
                .with_context(|| format!("loading tp_btf/{tp}"))?;
        }
        let id = program
            .attach()
            .with_context(|| format!("attaching tp_btf/{tp}"))?;
        let link = program.take_link(id)?;
        self.btf.push((tp.to_owned(), link.into()));
        Ok(())
    }

    /// Attach tracefs tracepoint program `prog` to `category:tp` (loaded on first use).
    pub fn attach_tracefs(
        &mut self,
        ebpf: &mut Ebpf,
        prog: &str,
        category: &str,
        tp: &str,
    ) -> anyhow::Result<()> {
        let program: &mut TracePoint = ebpf
            .program_mut(prog)
            .ok_or_else(|| anyhow!("program {prog} missing from the eBPF object"))?
            .try_into()?;
        if program.fd().is_err() {
            program
                .load()
                .map_err(|e| anyhow!("loading {prog}: {}", error_chain(&e)))?;
        }
        let id = program
            .attach(category, tp)
            .with_context(|| format!("attaching tracepoint/{category}/{tp}"))?;
        let link = program.take_link(id)?;
        self.tracefs.push((tp.to_owned(), link));
        Ok(())
    }

    pub fn has_tracefs(&self) -> bool {
        !self.tracefs.is_empty()
    }

    fn names(&self) -> Vec<String> {
        self.btf
            .iter()
            .map(|(n, _)| n.clone())
            .chain(self.tracefs.iter().map(|(n, _)| n.clone()))
            .collect()
    }

    /// Detach the `tp_btf` links (no new events from them after this returns), the last
    /// attached first. Programs of several families share `sched_process_fork`: taking
    /// away the first of a tracepoint's two functions makes the kernel wait for an RCU
    /// grace period (so that no caller pairs the remaining function with the removed
    /// one's data), taking away the second does not. Beside `stress-ng --ptrace 4` that
    /// one wait held Ctrl-C for up to 3.4 s.
    pub fn detach_btf(&mut self) {
        for (_, link) in self.btf.drain(..).rev() {
            let _ = link.detach();
        }
    }

    /// Release the tracefs links. `gated`: their programs record nothing any more, so
    /// the slow release can be left to a keeper process after lockscope exits.
    pub fn release_tracefs(&mut self, gated: bool) {
        if !self.tracefs.is_empty() && gated && std::env::var_os(SYNC_DETACH_ENV).is_none() {
            super::release::keep_until_exit();
        }
        for (_, link) in self.tracefs.drain(..) {
            let _ = link.detach();
        }
    }
}

/// Test-only: `MAP=ENTRIES,...` shrinks maps, so that the tests can fill them and check
/// that what they drop is counted.
pub const TEST_MAP_SIZES_ENV: &str = "LOCKSCOPE_TEST_MAP_SIZES";

fn test_map_sizes() -> anyhow::Result<Vec<(String, u32)>> {
    let Some(v) = std::env::var_os(TEST_MAP_SIZES_ENV) else {
        return Ok(Vec::new());
    };
    v.to_string_lossy()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|pair| {
            let (map, n) = pair
                .split_once('=')
                .ok_or_else(|| anyhow!("{TEST_MAP_SIZES_ENV}: `{pair}` is not MAP=ENTRIES"))?;
            let n: u32 = n
                .parse()
                .map_err(|_| anyhow!("{TEST_MAP_SIZES_ENV}: `{n}` is not a number"))?;
            Ok((map.to_owned(), n))
        })
        .collect()
}

/// Set to release every attachment in lockscope itself at exit (slow, see
/// [`super::release`]), for measuring that cost.
pub const SYNC_DETACH_ENV: &str = "LOCKSCOPE_SYNC_DETACH";

/// Try the rwsem deep-tier hooks for real (load and attach each, then detach), for
/// `doctor`. System-wide attach for a moment: nothing is recorded.
pub fn probe_rwsem_hooks() -> anyhow::Result<DeepTier> {
    let kbtf = KernelBtf::load(&PathBuf::from(VMLINUX_BTF))?;
    let rwsem_config = rwsem::rwsem_config(&kbtf);
    let btf = Btf::from_sys_fs().context("reading kernel BTF")?;
    let mut ebpf = EbpfLoader::new()
        .allow_unsupported_maps()
        .btf(Some(&btf))
        .override_global("RWSEM_CONFIG", &rwsem_config.unwrap_or_default(), true)
        .load(ProbesObject::new(&kernel_kfuncs(&kbtf))?.bytes())
        .context("loading the eBPF probes into the kernel")?;
    let mut tier = DeepTier::attach(&mut ebpf, &btf, rwsem_config.is_some());
    tier.detach(&mut ebpf);
    Ok(tier)
}

/// Try the deep spinlock hooks for real (load and attach each, then detach), for
/// `doctor`. Nothing is recorded.
pub fn probe_spin_hooks() -> anyhow::Result<SpinTier> {
    let btf = Btf::from_sys_fs().context("reading kernel BTF")?;
    let mut ebpf = EbpfLoader::new()
        .allow_unsupported_maps()
        .btf(Some(&btf))
        .load(ProbesObject::new(trial_kfuncs())?.bytes())
        .context("loading the eBPF probes into the kernel")?;
    let mut tier = SpinTier::attach(&mut ebpf, &btf, false);
    tier.detach(&mut ebpf);
    Ok(tier)
}

/// How a probe hooks into the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookKind {
    TpBtf,
    Fentry,
    /// A tracefs tracepoint program (the futex syscall probes); `target` is ignored.
    TracePoint,
}

/// Ask the kernel whether it accepts a program: load it (verifier included), never attach.
/// `Err` carries the kernel's answer.
pub fn try_load(prog: &str, kind: HookKind, target: &str) -> Result<(), String> {
    let btf = Btf::from_sys_fs().map_err(|e| format!("no kernel BTF: {e}"))?;
    let mut ebpf = EbpfLoader::new()
        .allow_unsupported_maps()
        .btf(Some(&btf))
        .load(
            ProbesObject::new(trial_kfuncs())
                .map_err(|e| format!("{e:#}"))?
                .bytes(),
        )
        .map_err(|e| format!("{e}"))?;
    let program = ebpf
        .program_mut(prog)
        .ok_or_else(|| format!("program {prog} missing"))?;
    let result = match kind {
        HookKind::TpBtf => {
            let p: &mut BtfTracePoint = program.try_into().map_err(|e| format!("{e}"))?;
            p.load(target, &btf)
        }
        HookKind::Fentry => {
            let p: &mut aya::programs::FEntry = program.try_into().map_err(|e| format!("{e}"))?;
            p.load(target, &btf)
        }
        HookKind::TracePoint => {
            let p: &mut TracePoint = program.try_into().map_err(|e| format!("{e}"))?;
            p.load()
        }
    };
    result.map_err(|e| error_chain(&e))
}

pub use crate::errors::error_chain;

#[cfg(test)]
mod tests {
    use super::*;

    /// The instructions of the object's code sections that call `imm` with `src` as the
    /// call kind, and those that are `r0 = 0`.
    fn calls(obj: &ProbesObject, src: u8, imm: i32) -> usize {
        obj.bytes()
            .chunks_exact(8)
            .filter(|i| i[0] == 0x85 && i[1] >> 4 == src && i[4..8] == imm.to_le_bytes())
            .count()
    }

    #[test]
    fn work_beside_gives_its_result_or_none_when_it_panicked() {
        let answer = Beside::start("test-beside", || 6 * 7);
        assert_eq!(answer.join(), Some(42));
        let panicked = Beside::start("test-beside-panic", || -> u32 { panic!("on purpose") });
        assert_eq!(panicked.join(), None);
        assert_eq!(Beside::Done(5).join(), Some(5));
    }

    #[test]
    fn kernel_function_calls_are_resolved_or_made_harmless() {
        use lockscope_common::KFUNC_GET_KMEM_CACHE as P;
        // Found by chunks of the whole file: an upper bound on the code's calls.
        let raw = PROBES_OBJ
            .chunks_exact(8)
            .filter(|i| i[0] == 0x85 && i[1] == 0 && i[4..8] == P.to_le_bytes())
            .count();
        assert!(raw >= 1, "the probes call bpf_get_kmem_cache");
        let with = ProbesObject::new(&[(P, 4242)]).unwrap();
        assert_eq!(calls(&with, 0, P), 0);
        assert_eq!(calls(&with, 2, 4242), raw);
        let without = ProbesObject::new(&[]).unwrap();
        assert_eq!(calls(&without, 0, P), 0);
        assert_eq!(calls(&without, 2, 4242), 0);
        assert_eq!(without.bytes().len(), PROBES_OBJ.len());
    }
}
