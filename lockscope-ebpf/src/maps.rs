//! Maps and read-only configuration shared by the probes.

use aya_ebpf::{
    Global,
    helpers::{
        bpf_get_current_ancestor_cgroup_id, bpf_get_current_cgroup_id, bpf_get_current_comm,
        bpf_get_current_pid_tgid, bpf_get_current_task, bpf_probe_read_kernel,
    },
    macros::map,
    maps::{HashMap, LruHashMap, PerCpuArray},
};
use lockscope_common::{
    COMMS_MAX_ENTRIES, COUNTERS_LEN, FILTER_ALL, FILTER_CGROUP, FILTER_TGIDS, ProbeConfig,
    TARGETS_MAX_ENTRIES,
};

/// Set by the loader: filter, type mask and kernel struct offsets from BTF.
#[unsafe(no_mangle)]
pub static CONFIG: Global<ProbeConfig> = Global::new(ProbeConfig {
    filter_mode: FILTER_ALL,
    cgroup_level: 0,
    cgroup_id: 0,
    flags_mask: u64::MAX,
    off_task_mm: 0,
    off_task_tgid: 0,
    off_task_sighand: 0,
    off_task_pi_lock: 0,
    off_mm_mmap_lock: 0,
    off_sighand_siglock: 0,
    off_task_group_leader: 0,
    off_task_comm: 0,
    off_rwsem_wait_lock: 0,
    launcher_tgid: 0,
    name_kinds: 0,
    off_task_pid: 0,
    off_mutex_owner: 0,
    off_rwsem_owner: 0,
    off_rtmutex_owner: 0,
    holder_kinds: 0,
    off_task_cfs_rq: 0,
    off_cfs_rq_rq: 0,
    off_rq_lock: 0,
    off_rtmutex_leftmost: 0,
    stack_cost_ns: 0,
    stack_burst_ns: 0,
    off_rtwaiter_entry: 0,
    off_rtwaiter_task: 0,
});

/// Events seen and everything that could not be stored (`CNT_*` slots).
#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(COUNTERS_LEN, 0);

/// Processes to record in `FILTER_TGIDS` mode.
#[map]
pub static TARGETS: HashMap<u32, u8> = HashMap::with_max_entries(TARGETS_MAX_ENTRIES, 0);

/// The cgroup (v2 id) of each process seen waiting, written with its name in `COMMS` or
/// `FUTEX_COMMS` (so: once per process, off the common path) and forgotten when the
/// process execs or moves to another cgroup (see `probes::sched`).
#[map]
pub static TASK_CGROUPS: LruHashMap<u32, u64> = LruHashMap::with_max_entries(COMMS_MAX_ENTRIES, 0);

/// Record the current task's cgroup for its process `tgid`.
#[inline(always)]
pub fn remember_cgroup(tgid: u32) {
    // SAFETY: a helper without arguments that reads the current task.
    let id = unsafe { bpf_get_current_cgroup_id() };
    let _ = TASK_CGROUPS.insert(tgid, id, 0);
}

/// The current process's name: its thread group leader's `comm` (thread names differ).
#[inline(always)]
pub fn current_process_comm(cfg: &ProbeConfig) -> [u8; 16] {
    // SAFETY: a BPF helper without pointer arguments.
    let task = unsafe { bpf_get_current_task() };
    let leader: u64 =
        // SAFETY: a checked read: a bad address gives an error, never a fault.
        unsafe { bpf_probe_read_kernel((task + cfg.off_task_group_leader as u64) as *const u64) }
            .unwrap_or(0);
    if leader != 0
        && let Ok(comm) =
            // SAFETY: a checked read: a bad address gives an error, never a fault.
            unsafe {
                bpf_probe_read_kernel((leader + cfg.off_task_comm as u64) as *const [u8; 16])
            }
    {
        return comm;
    }
    bpf_get_current_comm().unwrap_or_default()
}

#[inline(always)]
pub fn count(slot: u32) {
    count_n(slot, 1);
}

#[inline(always)]
pub fn count_n(slot: u32, n: u64) {
    if let Some(c) = COUNTERS.get_ptr_mut(slot) {
        // A per-CPU slot: only an interrupt on this CPU running another of our programs in
        // the middle of this add could race with it.
        // SAFETY: a live map value (per-CPU: this CPU's), used before the program returns, not aliased.
        unsafe { *c += n };
    }
}

/// Does the current task belong to what we trace? Filtering happens here, in the kernel.
#[inline(always)]
pub fn current_is_target(cfg: &ProbeConfig) -> bool {
    match cfg.filter_mode {
        FILTER_TGIDS => {
            let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
            // SAFETY: a map value, only read, before the program returns.
            unsafe { TARGETS.get(tgid).is_some() }
        }
        FILTER_CGROUP => {
            // SAFETY: a BPF helper without pointer arguments.
            let id = unsafe { bpf_get_current_ancestor_cgroup_id(cfg.cgroup_level as i32) };
            id == cfg.cgroup_id
        }
        _ => true,
    }
}

/// A task local storage map (`BPF_MAP_TYPE_TASK_STORAGE`, Linux 5.11+), defined in BTF as
/// the kernel requires (aya-ebpf has no wrapper for it): one value per task, found from
/// the task itself (no hash, no lock) and freed with the task.
#[repr(C)]
pub struct TaskStorage<T> {
    r#type: *const [i32; aya_ebpf::bindings::bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE as usize],
    key: *const i32,
    value: *const T,
    max_entries: *const [i32; 0],
    map_flags: *const [i32; aya_ebpf::bindings::BPF_F_NO_PREALLOC as usize],
}

// SAFETY: the fields are placeholders the loader reads from BTF; they are never
// dereferenced, so sharing the static between programs shares nothing.
unsafe impl<T> Sync for TaskStorage<T> {}

impl<T> TaskStorage<T> {
    pub const fn new() -> Self {
        Self {
            r#type: core::ptr::null(),
            key: core::ptr::null(),
            value: core::ptr::null(),
            max_entries: core::ptr::null(),
            map_flags: core::ptr::null(),
        }
    }

    /// The current task's value; with `create`, a zeroed one is made if it has none
    /// (`None` then means the kernel could not allocate it).
    #[inline(always)]
    pub fn current(&self, create: bool) -> Option<*mut T> {
        let flags = if create {
            aya_ebpf::bindings::BPF_LOCAL_STORAGE_GET_F_CREATE as u64
        } else {
            0
        };
        // SAFETY: the helper takes this map and the current task (a BTF pointer from
        // bpf_get_current_task_btf, never null); a null value pointer asks for zeroes.
        let p = unsafe {
            aya_ebpf::helpers::bpf_task_storage_get(
                core::ptr::from_ref(self).cast_mut().cast(),
                aya_ebpf::helpers::bpf_get_current_task_btf(),
                core::ptr::null_mut(),
                flags,
            )
        };
        (!p.is_null()).then_some(p.cast())
    }

    /// Task `task`'s value, if it has one. `task` must be a BTF task pointer the verifier
    /// knows (e.g. a task iterator's).
    #[inline(always)]
    pub fn of_task(&self, task: *mut aya_ebpf::bindings::task_struct) -> Option<*mut T> {
        // SAFETY: the helper checks the map and takes a verifier-typed task pointer.
        let p = unsafe {
            aya_ebpf::helpers::bpf_task_storage_get(
                core::ptr::from_ref(self).cast_mut().cast(),
                task,
                core::ptr::null_mut(),
                0,
            )
        };
        (!p.is_null()).then_some(p.cast())
    }

    /// The body of an `iter/task` program: write the value of the task in the iterator's
    /// context (`struct bpf_iter__task`) to the iterator's file when `live` says it holds
    /// something. Userspace reads the records back to back.
    #[inline(always)]
    pub fn write_live(&self, ctx: *mut core::ffi::c_void, live: impl Fn(&T) -> bool)
    where
        T: Copy,
    {
        // struct bpf_iter__task { struct bpf_iter_meta *meta; struct task_struct *task; }
        // SAFETY: an iter/task program's context is a `bpf_iter__task`.
        let (meta, task) = unsafe { (*(ctx as *const u64), *(ctx as *const u64).add(1)) };
        if task == 0 || meta == 0 {
            return;
        }
        let Some(v) = self.of_task(task as *mut aya_ebpf::bindings::task_struct) else {
            return;
        };
        // SAFETY: the task's storage, read before the program returns.
        let value = unsafe { *v };
        if live(&value) {
            // struct bpf_iter_meta { struct seq_file *seq; ... }
            // SAFETY: `meta` is the iterator's (verifier-typed) meta pointer; `seq` is its
            // first field.
            let seq = unsafe { *(meta as *const u64) };
            // SAFETY: the helper writes `size_of::<T>()` bytes from a stack copy.
            unsafe {
                aya_ebpf::helpers::bpf_seq_write(
                    seq as *mut aya_ebpf::bindings::seq_file,
                    core::ptr::from_ref(&value).cast(),
                    size_of::<T>() as u32,
                )
            };
        }
    }
}

/// Count one wait of `ns` into a shared map's entry (`ContentionStats::add_shared`);
/// false when its minimum or maximum could not be stored. Out of line: its retry loops
/// are then verified at the call, not again along every path of the caller that reaches
/// it (inline, they tripled the verifier's time for the futex exit).
#[inline(never)]
pub fn add_wait_shared(s: *mut lockscope_common::ContentionStats, ns: u64, failed: bool) -> bool {
    // SAFETY: callers pass a live value of a shared map, updated only through this.
    unsafe { lockscope_common::ContentionStats::add_shared(s, ns, failed) }
}
