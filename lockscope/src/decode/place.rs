//! Names for locks inside slab objects and page-table pages (`LOCK_KIND_SLAB`,
//! `LOCK_KIND_PAGE_TABLE`), from what the probes found and the kernel's types.
//!
//! A slab cache lockscope knows the type of (its objects are one kernel struct) names the
//! lock's field exactly: `&shmem_inode_cache vfs_inode.i_rwsem (inode 4242)`. A general
//! cache (`kmalloc-*`) holds objects of any type: the type may be inferred from the
//! function that contended the lock, and the name says so with `~`
//! (`&kmalloc-cg-192 ~pipe_inode_info.mutex`). Otherwise the name is the cache and the
//! lock's offset in its object (`&kmalloc-64+0x10`).

use std::collections::{BTreeMap, HashMap};

use lockscope_common::{IDENT_ONE, IDENT_REUSED, LOCK_KIND_PAGE_TABLE, LOCK_KIND_SLAB, LockInfo};

use super::comm_to_string;

/// Slab caches that are not named after their objects' struct: (cache, struct).
pub const CACHE_TYPES: &[(&str, &str)] = &[
    ("shmem_inode_cache", "shmem_inode_info"),
    ("ext4_inode_cache", "ext4_inode_info"),
    ("proc_inode_cache", "proc_inode"),
    ("sock_inode_cache", "socket_alloc"),
    ("inode_cache", "inode"),
    ("hugetlbfs_inode_cache", "hugetlbfs_inode_info"),
    ("mqueue_inode_cache", "mqueue_inode_info"),
    ("bdev_cache", "bdev_inode"),
    ("sighand_cache", "sighand_struct"),
    ("signal_cache", "signal_struct"),
    ("files_cache", "files_struct"),
    ("fs_cache", "fs_struct"),
    ("filp", "file"),
    ("bfilp", "file"),
    ("cred_jar", "cred"),
    ("TCP", "tcp_sock"),
    ("UDP", "udp_sock"),
    ("UNIX", "unix_sock"),
    ("userfaultfd_ctx_cache", "userfaultfd_ctx"),
];

/// Kernel functions whose contended locks are in an object of a known type, though the
/// object comes from a general cache: (function, struct). The type is inferred, and the
/// name is marked `~`.
pub const CALLER_TYPES: &[(&str, &str)] = &[
    ("pipe_read", "pipe_inode_info"),
    ("pipe_write", "pipe_inode_info"),
    ("anon_pipe_read", "pipe_inode_info"),
    ("anon_pipe_write", "pipe_inode_info"),
    ("pipe_lock", "pipe_inode_info"),
    ("pipe_unlock", "pipe_inode_info"),
    ("pipe_double_lock", "pipe_inode_info"),
    ("pipe_release", "pipe_inode_info"),
    ("pipe_fcntl", "pipe_inode_info"),
    ("pipe_poll", "pipe_inode_info"),
    // A memory cgroup's per-node LRU lists (a node's own lruvec is no slab object).
    ("folio_lruvec_lock", "mem_cgroup_per_node"),
    ("folio_lruvec_lock_irq", "mem_cgroup_per_node"),
    ("folio_lruvec_lock_irqsave", "mem_cgroup_per_node"),
    // An inode's file locks (flock, POSIX locks, leases).
    ("flock_lock_inode", "file_lock_context"),
    ("posix_lock_inode", "file_lock_context"),
    ("locks_remove_flock", "file_lock_context"),
    ("__break_lease", "file_lock_context"),
    ("lease_modify", "file_lock_context"),
    // SLUB's per-node stores of sheaves.
    ("barn_put_empty_sheaf", "node_barn"),
    ("barn_put_full_sheaf", "node_barn"),
    ("barn_get_empty_sheaf", "node_barn"),
    ("barn_replace_empty_sheaf", "node_barn"),
    ("barn_replace_full_sheaf", "node_barn"),
    ("barn_shrink", "node_barn"),
];

/// Kernel functions that contend one kind of lock outside any slab object: (function,
/// the lock). A name from it is inferred, marked `~`, and keeps the address (two zones'
/// locks are two locks).
pub const CALLER_LOCKS: &[(&str, &str)] = &[
    ("free_pcppages_bulk", "zone.lock"),
    ("rmqueue_bulk", "zone.lock"),
    ("rmqueue_buddy", "zone.lock"),
    ("free_one_page", "zone.lock"),
    ("__free_pages_ok", "zone.lock"),
    ("unreserve_highatomic_pageblock", "zone.lock"),
];

/// The lock `caller` (a frame, `function+0xoff`) contends, where only one kind can be.
pub fn caller_lock(caller: &str) -> Option<&'static str> {
    let function = caller.trim_start_matches('~').split('+').next()?;
    CALLER_LOCKS
        .iter()
        .find(|(f, _)| *f == function)
        .map(|(_, l)| *l)
}

/// A kernel struct's lock fields, from BTF.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectType {
    pub name: String,
    /// Lock fields by offset (`vfs_inode.i_rwsem`).
    pub fields: BTreeMap<u32, String>,
    /// The word that tells one object from another, where the type has one.
    pub ident: Option<Ident>,
}

/// An object's identity word (read by the probes at the offset given).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ident {
    /// The inode number of the `struct inode` the struct is or embeds.
    Inode(u32),
    /// A `task_struct`'s `pid` and `tgid` (adjacent, read as one word).
    Task(u32),
}

impl Ident {
    pub fn offset(self) -> u32 {
        match self {
            Ident::Inode(o) | Ident::Task(o) => o,
        }
    }

    fn describe(self, word: u64) -> String {
        match self {
            Ident::Inode(_) => format!("inode {word}"),
            Ident::Task(_) => format!("thread {} of {}", word as u32, (word >> 32) as u32),
        }
    }
}

/// What lockscope knows about the types of the objects locks live in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockTypes {
    /// By slab cache name: caches whose objects are all of one type (not merged with
    /// another cache, so their name is theirs alone).
    pub caches: HashMap<String, ObjectType>,
    /// By kernel function (`CALLER_TYPES`).
    pub callers: HashMap<String, ObjectType>,
    /// Caches SLUB merged into one: each name, with all the names sharing its cache. A
    /// lock there may be in an object of any of them.
    pub merged: HashMap<String, Vec<String>>,
    /// The locks of static per-CPU variables.
    pub percpu: PercpuLocks,
    /// An `rw_semaphore` wraps an rtmutex (PREEMPT_RT): the lock the probes find at its
    /// inner offset is `rwbase.rtmutex`, not a `wait_lock`.
    pub rwsem_rtmutex: bool,
}

/// The lock fields of the kernel's static per-CPU variables, by offset in a CPU's
/// per-CPU area (`timer_bases[0].lock`). A CPU's area is found from its runqueue lock,
/// itself a per-CPU variable's field (`runqueues.__lock`), whose address the probes learn.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PercpuLocks {
    /// Size of the static per-CPU area (0: none known).
    pub size: u32,
    /// The offset of `runqueues.__lock` in the area.
    pub rq_lock: u32,
    pub fields: BTreeMap<u32, String>,
}

impl PercpuLocks {
    /// `addr`'s name as a per-CPU variable's lock field (`timer_bases[0].lock cpu 1`),
    /// given each CPU's runqueue lock address.
    pub fn name(&self, addr: u64, rq_locks: &HashMap<u64, u32>) -> Option<String> {
        if self.size == 0 {
            return None;
        }
        rq_locks.iter().find_map(|(&rq, &cpu)| {
            let base = rq.checked_sub(u64::from(self.rq_lock))?;
            let off = addr.checked_sub(base)?;
            if off >= u64::from(self.size) {
                return None;
            }
            let field = self.fields.get(&(off as u32))?;
            Some(format!("{field} cpu {cpu}"))
        })
    }
}

/// The name of a lock in a slab object or a page-table page; `None` for other kinds.
/// `caller` is the function that contended it (its first frame outside the lock code).
pub fn place_name(info: &LockInfo, types: &LockTypes, caller: Option<&str>) -> Option<String> {
    match info.kind {
        LOCK_KIND_SLAB => Some(slab_name(info, types, caller)),
        LOCK_KIND_PAGE_TABLE => Some(format!(
            "page-table lock of page {:#x} (~mm of {}[{}])",
            info.object,
            comm_to_string(&info.comm),
            info.tgid
        )),
        _ => None,
    }
}

fn slab_name(info: &LockInfo, types: &LockTypes, caller: Option<&str>) -> String {
    let cache = comm_to_string(&info.cache);
    let off = info.offset;
    if let Some(t) = types.caches.get(&cache) {
        let field = t
            .fields
            .get(&off)
            .cloned()
            .unwrap_or_else(|| format!("+{off:#x}"));
        let ident = match (info.has_ident, t.ident) {
            (IDENT_ONE, Some(i)) => format!(" ({})", i.describe(info.ident)),
            (IDENT_REUSED, Some(i)) => format!(
                " ({}, then other objects at this address)",
                i.describe(info.ident)
            ),
            _ => String::new(),
        };
        return format!("&{cache} {field}{ident}");
    }
    let function = caller.map(|c| c.trim_start_matches('~').split('+').next().unwrap_or(c));
    if let Some(field) = function
        .and_then(|f| types.callers.get(f))
        .and_then(|t| t.fields.get(&off).map(|f| format!("{}.{f}", t.name)))
    {
        return format!("&{cache} ~{field}");
    }
    match types.merged.get(&cache) {
        Some(names) => format!("&{cache}+{off:#x} (one cache for {})", names.join(", ")),
        None => format!("&{cache}+{off:#x}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_common::{CACHE_NAME_LEN, IDENT_NONE};

    fn cache(name: &str) -> [u8; CACHE_NAME_LEN] {
        let mut c = [0; CACHE_NAME_LEN];
        c[..name.len()].copy_from_slice(name.as_bytes());
        c
    }

    fn types() -> LockTypes {
        let shmem = ObjectType {
            name: "shmem_inode_info".into(),
            fields: [(0x10, "lock".into()), (0x98, "vfs_inode.i_rwsem".into())].into(),
            ident: Some(Ident::Inode(0x58)),
        };
        let pipe = ObjectType {
            name: "pipe_inode_info".into(),
            fields: [(0, "mutex".into()), (0x20, "rd_wait.lock".into())].into(),
            ident: None,
        };
        let task = ObjectType {
            name: "task_struct".into(),
            fields: [(0x9c0, "pi_lock".into())].into(),
            ident: Some(Ident::Task(0x9a0)),
        };
        LockTypes {
            caches: [
                ("shmem_inode_cache".to_owned(), shmem),
                ("task_struct".to_owned(), task),
            ]
            .into(),
            callers: [("anon_pipe_write".to_owned(), pipe)].into(),
            merged: [(
                "pool_workqueue".to_owned(),
                vec![
                    "mem_cgroup_per_node".to_owned(),
                    "pool_workqueue".to_owned(),
                ],
            )]
            .into(),
            ..LockTypes::default()
        }
    }

    fn slab(name: &str, offset: u32, has_ident: u32) -> LockInfo {
        LockInfo {
            kind: LOCK_KIND_SLAB,
            cache: cache(name),
            offset,
            has_ident,
            ident: 4242,
            ..LockInfo::default()
        }
    }

    #[test]
    fn a_typed_cache_names_the_field_and_the_inode() {
        let t = types();
        let name = |i: &LockInfo| place_name(i, &t, None).unwrap();
        assert_eq!(
            name(&slab("shmem_inode_cache", 0x98, IDENT_ONE)),
            "&shmem_inode_cache vfs_inode.i_rwsem (inode 4242)"
        );
        assert_eq!(
            name(&slab("shmem_inode_cache", 0x98, IDENT_REUSED)),
            "&shmem_inode_cache vfs_inode.i_rwsem (inode 4242, then other objects at this address)"
        );
        let task = LockInfo {
            ident: (100 << 32) | 123,
            ..slab("task_struct", 0x9c0, IDENT_ONE)
        };
        assert_eq!(name(&task), "&task_struct pi_lock (thread 123 of 100)");
        // An offset that is no lock field of the type is not guessed at.
        assert_eq!(
            name(&slab("shmem_inode_cache", 0x11, IDENT_NONE)),
            "&shmem_inode_cache +0x11"
        );
    }

    #[test]
    fn a_general_cache_is_typed_only_by_its_caller_and_marked_inferred() {
        let t = types();
        let pipe = slab("kmalloc-cg-192", 0, IDENT_NONE);
        assert_eq!(
            place_name(&pipe, &t, Some("anon_pipe_write+0x5a")).unwrap(),
            "&kmalloc-cg-192 ~pipe_inode_info.mutex"
        );
        assert_eq!(
            place_name(&pipe, &t, Some("do_sys_poll+0x10")).unwrap(),
            "&kmalloc-cg-192+0x0"
        );
        assert_eq!(place_name(&pipe, &t, None).unwrap(), "&kmalloc-cg-192+0x0");
        // A merged cache: its name is not its objects' alone, and the name says so.
        assert_eq!(
            place_name(&slab("pool_workqueue", 0x98, IDENT_NONE), &t, None).unwrap(),
            "&pool_workqueue+0x98 (one cache for mem_cgroup_per_node, pool_workqueue)"
        );
        // The caller's type with no lock at that offset: not named by it.
        let odd = slab("kmalloc-cg-192", 0x8, IDENT_NONE);
        assert_eq!(
            place_name(&odd, &t, Some("anon_pipe_write")).unwrap(),
            "&kmalloc-cg-192+0x8"
        );
    }

    #[test]
    fn per_cpu_locks_are_found_from_each_cpus_runqueue_lock() {
        let p = PercpuLocks {
            size: 0x1000,
            rq_lock: 0x800,
            fields: [
                (0x100, "timer_bases[1].lock".into()),
                (0x800, "runqueues.__lock".into()),
            ]
            .into(),
        };
        let rq: HashMap<u64, u32> = [(0xa800, 0), (0x2_0800, 1)].into();
        assert_eq!(
            p.name(0xa100, &rq).as_deref(),
            Some("timer_bases[1].lock cpu 0")
        );
        assert_eq!(
            p.name(0x2_0100, &rq).as_deref(),
            Some("timer_bases[1].lock cpu 1")
        );
        // Inside an area but no lock field there; outside every area.
        assert_eq!(p.name(0xa104, &rq), None);
        assert_eq!(p.name(0xb100, &rq), None);
        assert_eq!(p.name(0x100, &rq), None);
        assert_eq!(PercpuLocks::default().name(0xa100, &rq), None);
    }

    #[test]
    fn only_functions_of_one_lock_name_it() {
        assert_eq!(caller_lock("free_pcppages_bulk+0x37"), Some("zone.lock"));
        assert_eq!(caller_lock("~rmqueue_bulk+0x10"), Some("zone.lock"));
        assert_eq!(caller_lock("try_to_wake_up+0x4e"), None);
    }

    #[test]
    fn page_table_locks_name_the_waiters_mm_as_inferred() {
        let mut comm = [0u8; 16];
        comm[..5].copy_from_slice(b"storm");
        let info = LockInfo {
            kind: LOCK_KIND_PAGE_TABLE,
            tgid: 77,
            comm,
            object: 0xffff_ea00_0012_3440,
            ..LockInfo::default()
        };
        assert_eq!(
            place_name(&info, &LockTypes::default(), None).unwrap(),
            "page-table lock of page 0xffffea0000123440 (~mm of storm[77])"
        );
        let other = LockInfo {
            kind: lockscope_common::LOCK_KIND_MMAP_LOCK,
            ..LockInfo::default()
        };
        assert_eq!(place_name(&other, &LockTypes::default(), None), None);
    }
}
