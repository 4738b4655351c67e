//! Kernel struct field offsets from the running kernel's BTF. Nothing is hard-coded.

use std::{
    collections::{BTreeMap, HashMap},
    path::Path,
};

use anyhow::{Context as _, anyhow, bail};
use btf_rs::{Btf, Type};

pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// The offsets the probes need to name locks and follow forks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelOffsets {
    pub task_mm: u32,
    pub task_tgid: u32,
    pub task_sighand: u32,
    pub task_pi_lock: u32,
    pub mm_mmap_lock: u32,
    pub sighand_siglock: u32,
    pub task_group_leader: u32,
    pub task_comm: u32,
    pub rwsem_wait_lock: u32,
    /// `NAME_*`: the lock fields whose offsets were found (the others are 0).
    pub name_kinds: u32,
    pub task_pid: u32,
    pub mutex_owner: u32,
    pub rwsem_owner: u32,
    pub rtmutex_owner: u32,
    /// The lock at `rwsem_wait_lock` is PREEMPT_RT's `rwbase.rtmutex`, not a spinlock.
    pub rwsem_rtmutex: bool,
    /// `rt_mutex_base.waiters.rb_leftmost`, `rt_mutex_waiter`'s tree node and `task`
    /// (`HOLDER_RTMUTEX_PENDING`).
    pub rtmutex_leftmost: u32,
    pub rtwaiter_entry: u32,
    pub rtwaiter_task: u32,
    /// `HOLDER_*`: the lock kinds whose owner field was found (PREEMPT_RT's mutex and
    /// rw_semaphore wrap an rtmutex: their waits are rtmutex waits).
    pub holder_kinds: u32,
    /// `task_struct.se.cfs_rq`, `cfs_rq.rq` (CONFIG_FAIR_GROUP_SCHED), `rq.__lock`.
    pub task_cfs_rq: u32,
    pub cfs_rq_rq: u32,
    pub rq_lock: u32,
    /// Why a lock field is not named, one line each.
    pub missing: Vec<String>,
}

impl KernelOffsets {
    /// The fields every probe needs are required; a lock field the kernel's BTF lacks
    /// only stays unnamed (its locks show as addresses), said in `missing`.
    pub fn from_btf(btf: &KernelBtf) -> anyhow::Result<Self> {
        use lockscope_common::{
            HOLDER_MUTEX, HOLDER_RTMUTEX, HOLDER_RTMUTEX_PENDING, HOLDER_RWSEM, NAME_MMAP_LOCK,
            NAME_PI_LOCK, NAME_RQ_LOCK, NAME_SIGLOCK,
        };
        let mut o = Self {
            task_tgid: btf.member_offset("task_struct", "tgid")?,
            task_group_leader: btf.member_offset("task_struct", "group_leader")?,
            task_comm: btf.member_offset("task_struct", "comm")?,
            // The lock inside an rw_semaphore that its waiters also contend: its
            // `wait_lock`, or on PREEMPT_RT (no `wait_lock`: the rwsem wraps an rtmutex,
            // which its writers and slow readers queue on) `rwbase.rtmutex`; 0 never
            // matches (offset 0 is the rwsem itself, named first).
            ..Default::default()
        };
        if let Some((off, rt)) = rwsem_inner_lock(btf) {
            (o.rwsem_wait_lock, o.rwsem_rtmutex) = (off, rt);
        }
        let pair = |a: (&str, &str), b: (&str, &str)| -> anyhow::Result<(u32, u32)> {
            Ok((btf.member_offset(a.0, a.1)?, btf.member_offset(b.0, b.1)?))
        };
        match pair(("task_struct", "mm"), ("mm_struct", "mmap_lock")) {
            Ok((mm, lock)) => {
                (o.task_mm, o.mm_mmap_lock) = (mm, lock);
                o.name_kinds |= NAME_MMAP_LOCK;
            }
            Err(e) => o.missing.push(format!("mmap_lock is not named ({e:#})")),
        }
        match pair(("task_struct", "sighand"), ("sighand_struct", "siglock")) {
            Ok((sighand, lock)) => {
                (o.task_sighand, o.sighand_siglock) = (sighand, lock);
                o.name_kinds |= NAME_SIGLOCK;
            }
            Err(e) => o.missing.push(format!("siglock is not named ({e:#})")),
        }
        match btf.member_offset("task_struct", "pi_lock") {
            Ok(off) => {
                o.task_pi_lock = off;
                o.name_kinds |= NAME_PI_LOCK;
            }
            Err(e) => o.missing.push(format!(
                "pi_lock is not named, and its proxy and deep tier do not run ({e:#})"
            )),
        }
        // Runqueue locks: learnt per CPU from the running task's runqueue.
        let rq = (|| -> anyhow::Result<(u32, u32, u32)> {
            Ok((
                btf.member_offset("task_struct", "se")?
                    + btf.member_offset("sched_entity", "cfs_rq")?,
                btf.member_offset("cfs_rq", "rq")?,
                btf.member_offset("rq", "__lock")?,
            ))
        })();
        match rq {
            Ok((t, c, l)) => {
                (o.task_cfs_rq, o.cfs_rq_rq, o.rq_lock) = (t, c, l);
                o.name_kinds |= NAME_RQ_LOCK;
            }
            Err(e) => o
                .missing
                .push(format!("runqueue locks are not named ({e:#})")),
        }
        // Lock holders: the task's thread id, and each kind's owner word. A kind without
        // its field only leaves its waits' holders unknown.
        if let Ok(pid) = btf.member_offset("task_struct", "pid") {
            o.task_pid = pid;
            for (kind, s, off) in [
                (HOLDER_MUTEX, "mutex", &mut o.mutex_owner),
                (HOLDER_RWSEM, "rw_semaphore", &mut o.rwsem_owner),
                (HOLDER_RTMUTEX, "rt_mutex_base", &mut o.rtmutex_owner),
            ] {
                if let Ok(v) = btf.member_offset(s, "owner") {
                    *off = v;
                    o.holder_kinds |= kind;
                }
            }
            if let Some((leftmost, entry, task)) = rtmutex_top_waiter(btf)
                && o.holder_kinds & HOLDER_RTMUTEX != 0
            {
                (o.rtmutex_leftmost, o.rtwaiter_entry, o.rtwaiter_task) = (leftmost, entry, task);
                o.holder_kinds |= HOLDER_RTMUTEX_PENDING;
            }
        }
        Ok(o)
    }
}

pub struct KernelBtf {
    btf: Btf,
    /// Type ids by name, when `btf` is memory-mapped (its own lookup by name then scans
    /// every type); `None` when parsed whole (then its own lookup is indexed).
    names: Option<HashMap<String, Vec<u32>>>,
}

impl KernelBtf {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        if !path.exists() {
            bail!(
                "no kernel BTF at {} (the kernel needs CONFIG_DEBUG_INFO_BTF=y)",
                path.display()
            );
        }
        // Memory-mapped where the kernel allows it (recent kernels' vmlinux BTF), with an
        // index of the names: some 35 ms, against about 100 ms to parse every type into
        // memory and free it again.
        if let Ok(btf) = Btf::from_file_with_backend(path, btf_rs::Backend::Mmap) {
            let names = name_index(&btf);
            if !names.is_empty() {
                return Ok(Self {
                    btf,
                    names: Some(names),
                });
            }
        }
        Self::parse(path)
    }

    /// The BTF parsed whole into memory (kernels whose BTF cannot be memory-mapped).
    fn parse(path: &Path) -> anyhow::Result<Self> {
        // Read whole, parsed from memory: `Btf::from_file` parses through a buffered file
        // and asks the kernel for the file position once per type (some 126,000 `lseek`s
        // on a 6.18 kernel's BTF).
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let btf =
            Btf::from_bytes(&bytes).with_context(|| format!("parsing BTF {}", path.display()))?;
        Ok(Self { btf, names: None })
    }

    /// The ids of the types named `name`, in id order.
    fn ids_by_name(&self, name: &str) -> Vec<u32> {
        match &self.names {
            Some(index) => index.get(name).cloned().unwrap_or_default(),
            None => self.btf.resolve_ids_by_name(name).unwrap_or_default(),
        }
    }

    /// The types named `name`, in id order.
    fn types_by_name(&self, name: &str) -> Vec<Type> {
        match &self.names {
            Some(_) => self
                .ids_by_name(name)
                .into_iter()
                .filter_map(|id| self.btf.resolve_type_by_id(id).ok())
                .collect(),
            None => self.btf.resolve_types_by_name(name).unwrap_or_default(),
        }
    }

    /// Does the kernel define a type with this name (e.g. `btf_trace_contention_begin`)?
    pub fn has_type(&self, name: &str) -> bool {
        !self.ids_by_name(name).is_empty()
    }

    /// Number of parameters of the function prototype behind a typedef'd function
    /// pointer such as `btf_trace_mmap_lock_acquire_returned`.
    pub fn func_proto_params(&self, typedef: &str) -> Option<usize> {
        for t in self.types_by_name(typedef) {
            let mut t = t;
            for _ in 0..8 {
                match &t {
                    Type::FuncProto(fp) => return Some(fp.parameters.len()),
                    Type::Typedef(_) | Type::Ptr(_) | Type::Const(_) | Type::Volatile(_) => {
                        let bt = t.as_btf_type()?;
                        t = self.btf.resolve_chained_type(bt).ok()?;
                    }
                    _ => break,
                }
            }
        }
        None
    }

    /// Byte offset of `field` in `struct name`, looking inside anonymous structs and unions.
    pub fn member_offset(&self, name: &str, field: &str) -> anyhow::Result<u32> {
        if super::groups::switched_off(&format!("btf:{name}.{field}")) {
            bail!("{name}.{field}: {}", super::groups::SWITCHED_OFF);
        }
        let types = self.types_by_name(name);
        if types.is_empty() {
            bail!("struct {name} not in kernel BTF");
        }
        for t in types {
            if let Type::Struct(s) = t
                && let Some(bits) = self.find_member(&s, field, 0)?
            {
                if bits % 8 != 0 {
                    bail!("{name}.{field} is a bit field");
                }
                return Ok(bits / 8);
            }
        }
        bail!("struct {name} has no field `{field}` in this kernel's BTF")
    }

    fn find_member(
        &self,
        s: &btf_rs::Struct,
        field: &str,
        base_bits: u32,
    ) -> anyhow::Result<Option<u32>> {
        for m in &s.members {
            let name = self.btf.resolve_name(m).unwrap_or_default();
            if name == field {
                return Ok(Some(base_bits + m.bit_offset()));
            }
            if name.is_empty() {
                let inner = self.strip(self.btf.resolve_chained_type(m)?)?;
                if let Type::Struct(inner) | Type::Union(inner) = inner
                    && let Some(bits) =
                        self.find_member(&inner, field, base_bits + m.bit_offset())?
                {
                    return Ok(Some(bits));
                }
            }
        }
        Ok(None)
    }

    /// Follow typedefs and qualifiers to the underlying type.
    fn strip(&self, t: Type) -> anyhow::Result<Type> {
        self.strip_named(t, |_| {})
    }

    /// [`KernelBtf::strip`], telling `seen` each type's name on the way (`spinlock_t`,
    /// then `struct spinlock`).
    fn strip_named(&self, mut t: Type, mut seen: impl FnMut(&str)) -> anyhow::Result<Type> {
        for _ in 0..16 {
            if let Some(bt) = t.as_btf_type()
                && let Ok(n) = self.btf.resolve_name(bt)
                && !n.is_empty()
            {
                seen(&n);
            }
            match &t {
                Type::Typedef(_) | Type::Const(_) | Type::Volatile(_) | Type::Restrict(_) => {
                    let bt = t
                        .as_btf_type()
                        .ok_or_else(|| anyhow!("BTF type without reference"))?;
                    t = self.btf.resolve_chained_type(bt)?;
                }
                _ => return Ok(t),
            }
        }
        bail!("BTF type chain too long")
    }
}

/// Kernel types that are locks: a member of one of these is a lock field.
const LOCK_TYPES: &[&str] = &[
    "spinlock_t",
    "raw_spinlock_t",
    "rwlock_t",
    "spinlock",
    "raw_spinlock",
    "mutex",
    "rw_semaphore",
    "percpu_rw_semaphore",
    "rt_mutex",
    "rt_mutex_base",
    "semaphore",
    "seqlock_t",
];

/// What the probes need to name locks in slab objects and page-table pages, from BTF.
#[derive(Debug, Clone, Default)]
pub struct DynamicNaming {
    pub config: lockscope_common::SlabConfig,
    /// Why a kind is not named, one line each.
    pub missing: Vec<String>,
}

/// Type ids by name, for every named type of `btf` (ids from 1 until one does not
/// resolve).
fn name_index(btf: &Btf) -> HashMap<String, Vec<u32>> {
    let mut names: HashMap<String, Vec<u32>> = HashMap::new();
    let mut id = 1;
    while let Ok(t) = btf.resolve_type_by_id(id) {
        if let Some(bt) = t.as_btf_type()
            && let Ok(name) = btf.resolve_name(bt)
            && !name.is_empty()
        {
            names.entry(name).or_default().push(id);
        }
        id += 1;
    }
    names
}

impl KernelBtf {
    /// The BTF id of kernel function `name`, if the kernel has it.
    pub fn func_id(&self, name: &str) -> Option<u32> {
        self.ids_by_name(name)
            .into_iter()
            .find(|id| matches!(self.btf.resolve_type_by_id(*id), Ok(Type::Func(_))))
    }

    /// The value of `member` of `enum name`.
    pub fn enum_value(&self, name: &str, member: &str) -> Option<u32> {
        for t in self.types_by_name(name) {
            if let Type::Enum(e) = t {
                return e
                    .members
                    .iter()
                    .find(|m| self.btf.resolve_name(*m).is_ok_and(|n| n == member))
                    .map(|m| m.val());
            }
        }
        None
    }

    /// `sizeof(struct name)`.
    pub fn struct_size(&self, name: &str) -> Option<u32> {
        self.struct_named(name).map(|s| s.size() as u32)
    }

    /// Where the probes can name dynamic locks on this kernel.
    pub fn dynamic_naming(&self) -> DynamicNaming {
        use lockscope_common::{PLACE_PAGE_TABLE, PLACE_SLAB};
        let mut n = DynamicNaming::default();
        n.config.page_size = crate::workload::page_size() as u32;
        let cache = || -> anyhow::Result<[u32; 4]> {
            Ok([
                self.member_offset("kmem_cache", "name")?,
                self.member_offset("kmem_cache", "size")?,
                self.member_offset("kmem_cache", "oo")?,
                self.member_offset("kmem_cache", "red_left_pad")?,
            ])
        };
        match (self.func_id("bpf_get_kmem_cache"), cache()) {
            (Some(_), Ok([name, size, oo, red])) => {
                let c = &mut n.config;
                (c.off_cache_name, c.off_cache_size, c.off_cache_oo) = (name, size, oo);
                c.off_cache_red_left_pad = red;
                c.kinds |= PLACE_SLAB;
            }
            (None, _) => n.missing.push(
                "slab objects' locks are not named (no bpf_get_kmem_cache kfunc: Linux 6.13+)"
                    .to_owned(),
            ),
            (_, Err(e)) => n
                .missing
                .push(format!("slab objects' locks are not named ({e:#})")),
        }
        let table = || -> anyhow::Result<(u32, u32, u32, u32)> {
            let pgty = self
                .enum_value("pagetype", "PGTY_table")
                .ok_or_else(|| anyhow!("no PGTY_table page type (Linux 6.12+)"))?;
            let page = self
                .struct_size("page")
                .ok_or_else(|| anyhow!("no struct page"))?;
            if self.struct_size("ptdesc") != Some(page) {
                bail!("struct ptdesc is not the size of struct page");
            }
            if self.struct_size("spinlock") != Some(4) {
                bail!("page-table locks are allocated apart (ALLOC_SPLIT_PTLOCKS)");
            }
            Ok((
                self.member_offset("ptdesc", "ptl")?,
                self.member_offset("page", "page_type")?,
                pgty,
                page,
            ))
        };
        match table() {
            Ok((ptl, page_type, pgty, page)) => {
                let c = &mut n.config;
                (c.off_ptdesc_ptl, c.off_page_type) = (ptl, page_type);
                (c.page_type_table, c.page_struct_size) = (pgty, page);
                c.kinds |= PLACE_PAGE_TABLE;
            }
            Err(e) => n
                .missing
                .push(format!("page-table locks are not named ({e:#})")),
        }
        n
    }

    /// The lock fields of `struct name` (nested structs included, pointers not followed),
    /// by offset: `vfs_inode.i_rwsem`, `vfs_inode.i_rwsem.wait_lock`, ...; and the
    /// offset of the `i_ino` of a `struct inode` it embeds (or is).
    pub fn lock_fields(
        &self,
        name: &str,
    ) -> Option<(BTreeMap<u32, String>, Option<crate::decode::place::Ident>)> {
        use crate::decode::place::Ident;
        let s = self.struct_named(name)?;
        let mut fields = BTreeMap::new();
        let mut inode = (name == "inode").then_some(0);
        self.walk_locks(&s, 0, "", &mut fields, &mut inode, 0);
        let ident = match inode {
            Some(base) => Some(Ident::Inode(
                base + self.member_offset("inode", "i_ino").ok()?,
            )),
            // pid and tgid side by side: one word names the thread and its process.
            None if name == "task_struct" => {
                let pid = self.member_offset("task_struct", "pid").ok()?;
                (self.member_offset("task_struct", "tgid").ok()? == pid + 4)
                    .then_some(Ident::Task(pid))
            }
            None => None,
        };
        Some((fields, ident))
    }

    fn walk_locks(
        &self,
        s: &btf_rs::Struct,
        base_bits: u32,
        prefix: &str,
        out: &mut BTreeMap<u32, String>,
        inode: &mut Option<u32>,
        depth: u32,
    ) {
        if depth > 6 {
            return;
        }
        for m in &s.members {
            let bits = base_bits + m.bit_offset();
            if !bits.is_multiple_of(8) {
                continue;
            }
            let name = self.btf.resolve_name(m).unwrap_or_default();
            let path = match (prefix.is_empty(), name.is_empty()) {
                (_, true) => prefix.to_owned(),
                (true, false) => name.clone(),
                (false, false) => format!("{prefix}.{name}"),
            };
            let Some((is_lock, t)) = self
                .btf
                .resolve_chained_type(m)
                .ok()
                .and_then(|t| self.lock_chain(t).ok())
            else {
                continue;
            };
            if is_lock && !path.is_empty() {
                out.entry(bits / 8).or_insert_with(|| path.clone());
            }
            if let Type::Struct(inner) | Type::Union(inner) = &t {
                if inode.is_none()
                    && !name.is_empty()
                    && self.btf.resolve_name(inner).is_ok_and(|n| n == "inode")
                {
                    *inode = Some(bits / 8);
                }
                self.walk_locks(inner, bits, &path, out, inode, depth + 1);
            }
        }
    }

    /// Follow typedefs and qualifiers: the type at the end, and whether a name on the
    /// way is a lock type's.
    fn lock_chain(&self, t: Type) -> anyhow::Result<(bool, Type)> {
        let mut is_lock = false;
        let t = self.strip_named(t, |n| is_lock |= LOCK_TYPES.contains(&n))?;
        Ok((is_lock, t))
    }

    /// The first `struct name` of the kernel's BTF.
    fn struct_named(&self, name: &str) -> Option<btf_rs::Struct> {
        self.types_by_name(name).into_iter().find_map(|t| match t {
            Type::Struct(s) => Some(s),
            _ => None,
        })
    }

    /// The lock fields of the static per-CPU variables (`.data..percpu`), arrays of
    /// structs included (`timer_bases[1].lock`).
    pub fn percpu_locks(&self) -> anyhow::Result<crate::decode::place::PercpuLocks> {
        let mut p = crate::decode::place::PercpuLocks::default();
        let sec = self
            .types_by_name(".data..percpu")
            .into_iter()
            .find_map(|t| match t {
                Type::Datasec(d) => Some(d),
                _ => None,
            })
            .ok_or_else(|| anyhow!("no .data..percpu section in BTF"))?;
        let mut runqueues = None;
        for v in &sec.variables {
            let end = v.offset() + v.size() as u32;
            p.size = p.size.max(end);
            let Ok(var) = self.btf.resolve_chained_type(v) else {
                continue;
            };
            let Some(bt) = var.as_btf_type() else {
                continue;
            };
            let name = self.btf.resolve_name(bt).unwrap_or_default();
            if name == "runqueues" {
                runqueues = Some(v.offset());
            }
            let Some((is_lock, t)) = self
                .btf
                .resolve_chained_type(bt)
                .ok()
                .and_then(|t| self.lock_chain(t).ok())
            else {
                continue;
            };
            if is_lock {
                p.fields.insert(v.offset(), name.clone());
            }
            let mut inode = None;
            match t {
                Type::Struct(s) | Type::Union(s) => {
                    self.walk_locks(&s, v.offset() * 8, &name, &mut p.fields, &mut inode, 0);
                }
                Type::Array(a) => {
                    let elem = self.btf.resolve_chained_type(&a).ok();
                    if let Some(Ok(Type::Struct(s))) = elem.map(|e| self.strip(e)) {
                        let n = a.len().min(64) as u32;
                        for i in 0..n {
                            let base = (v.offset() + i * s.size() as u32) * 8;
                            let prefix = format!("{name}[{i}]");
                            self.walk_locks(&s, base, &prefix, &mut p.fields, &mut inode, 0);
                        }
                    }
                }
                _ => {}
            }
        }
        p.rq_lock = runqueues.ok_or_else(|| anyhow!("no per-CPU runqueues"))?
            + self.member_offset("rq", "__lock")?;
        Ok(p)
    }
}

/// Where the kernel lists its slab caches (SLUB's sysfs).
pub const SLAB_SYSFS: &str = "/sys/kernel/slab";

/// Where an rtmutex keeps its top waiter's tree node (`rt_mutex_base.waiters.rb_leftmost`),
/// and that node's place in its `rt_mutex_waiter` (`tree.entry`; before Linux 6.6
/// `tree_entry`) and the waiter's `task`.
fn rtmutex_top_waiter(btf: &KernelBtf) -> Option<(u32, u32, u32)> {
    let leftmost = btf.member_offset("rt_mutex_base", "waiters").ok()?
        + btf.member_offset("rb_root_cached", "rb_leftmost").ok()?;
    let entry = match btf.member_offset("rt_mutex_waiter", "tree") {
        Ok(tree) => tree + btf.member_offset("rt_waiter_node", "entry").ok()?,
        Err(_) => btf.member_offset("rt_mutex_waiter", "tree_entry").ok()?,
    };
    let task = btf.member_offset("rt_mutex_waiter", "task").ok()?;
    Some((leftmost, entry, task))
}

/// The offset of the lock inside an `rw_semaphore` that its waiters contend too, and
/// whether it is PREEMPT_RT's rtmutex (`rwbase.rtmutex`) rather than the `wait_lock`
/// spinlock.
fn rwsem_inner_lock(btf: &KernelBtf) -> Option<(u32, bool)> {
    if let Ok(off) = btf.member_offset("rw_semaphore", "wait_lock") {
        return Some((off, false));
    }
    let base = btf.member_offset("rw_semaphore", "rwbase").ok()?;
    let rtmutex = btf.member_offset("rwbase_rt", "rtmutex").ok()?;
    Some((base + rtmutex, true))
}

/// The types of slab caches' objects and of the objects `CALLER_TYPES`' functions lock.
/// Only a cache listed under its own name as a directory is typed: SLUB lists a cache
/// that other caches may be merged into (so whose name is not its objects' alone) as a
/// link to a `:...` directory.
pub fn lock_types(btf: &KernelBtf, slab_dir: &Path) -> crate::decode::place::LockTypes {
    use crate::decode::place::{CACHE_TYPES, CALLER_TYPES, LockTypes, ObjectType};
    let object = |ty: &str| {
        btf.lock_fields(ty).map(|(fields, ident)| ObjectType {
            name: ty.to_owned(),
            fields,
            ident,
        })
    };
    let mut types = LockTypes::default();
    let mut shared: HashMap<std::path::PathBuf, Vec<String>> = HashMap::new();
    for entry in std::fs::read_dir(slab_dir).into_iter().flatten().flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if entry.file_type().is_ok_and(|t| t.is_symlink()) {
            if let Ok(target) = std::fs::read_link(entry.path()) {
                shared.entry(target).or_default().push(name);
            }
            continue;
        }
        if name.starts_with(':') || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let ty = CACHE_TYPES
            .iter()
            .find(|(c, _)| *c == name)
            .map_or(name.as_str(), |(_, t)| t);
        if let Some(t) = object(ty) {
            types.caches.insert(name, t);
        }
    }
    for mut names in shared.into_values().filter(|n| n.len() > 1) {
        names.sort();
        for n in &names {
            types.merged.insert(n.clone(), names.clone());
        }
    }
    types.percpu = btf.percpu_locks().unwrap_or_default();
    for (function, ty) in CALLER_TYPES {
        if let Some(t) = object(ty) {
            types.callers.insert((*function).to_owned(), t);
        }
    }
    types
}

#[cfg(test)]
mod kernel_tests {
    use super::*;

    /// The memory-mapped BTF and its name index find what the whole parse finds: every
    /// offset, function, per-CPU lock and lock type of the running kernel.
    #[test]
    fn the_mapped_index_finds_what_the_parsed_btf_finds() {
        let path = Path::new(VMLINUX_BTF);
        let (Ok(mapped), Ok(parsed)) = (KernelBtf::load(path), KernelBtf::parse(path)) else {
            eprintln!("skipped: no readable {VMLINUX_BTF}");
            return;
        };
        if mapped.names.is_none() {
            eprintln!("skipped: this kernel's BTF cannot be memory-mapped");
            return;
        }
        assert_eq!(
            KernelOffsets::from_btf(&mapped).unwrap(),
            KernelOffsets::from_btf(&parsed).unwrap()
        );
        for f in ["schedule", "rwsem_down_write_slowpath", "do_mprotect_pkey"] {
            assert_eq!(mapped.func_id(f), parsed.func_id(f), "{f}");
            assert!(mapped.func_id(f).is_some(), "{f}");
        }
        for t in [
            "btf_trace_contention_begin",
            "task_struct",
            "no_such_type_here",
        ] {
            assert_eq!(mapped.has_type(t), parsed.has_type(t), "{t}");
        }
        assert_eq!(
            mapped.percpu_locks().unwrap(),
            parsed.percpu_locks().unwrap()
        );
        let slabs = Path::new("/sys/kernel/slab");
        assert_eq!(lock_types(&mapped, slabs), lock_types(&parsed, slabs));
        assert_eq!(
            mapped.dynamic_naming().config,
            parsed.dynamic_naming().config
        );
    }
}
