//! Kernel struct field offsets from the running kernel's BTF. Nothing is hard-coded.

use std::path::Path;

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
            HOLDER_MUTEX, HOLDER_RTMUTEX, HOLDER_RWSEM, NAME_MMAP_LOCK, NAME_PI_LOCK, NAME_RQ_LOCK,
            NAME_SIGLOCK,
        };
        let mut o = Self {
            task_tgid: btf.member_offset("task_struct", "tgid")?,
            task_group_leader: btf.member_offset("task_struct", "group_leader")?,
            task_comm: btf.member_offset("task_struct", "comm")?,
            // PREEMPT_RT's rw_semaphore wraps an rtmutex and has no `wait_lock` of its
            // own: 0 never matches (offset 0 is the rwsem itself, named first).
            rwsem_wait_lock: btf.member_offset("rw_semaphore", "wait_lock").unwrap_or(0),
            ..Default::default()
        };
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
        }
        Ok(o)
    }
}

pub struct KernelBtf {
    btf: Btf,
}

impl KernelBtf {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        if !path.exists() {
            bail!(
                "no kernel BTF at {} (the kernel needs CONFIG_DEBUG_INFO_BTF=y)",
                path.display()
            );
        }
        let btf =
            Btf::from_file(path).with_context(|| format!("reading BTF {}", path.display()))?;
        Ok(Self { btf })
    }

    /// Does the kernel define a type with this name (e.g. `btf_trace_contention_begin`)?
    pub fn has_type(&self, name: &str) -> bool {
        self.btf
            .resolve_ids_by_name(name)
            .map(|ids| !ids.is_empty())
            .unwrap_or(false)
    }

    /// Number of parameters of the function prototype behind a typedef'd function
    /// pointer such as `btf_trace_mmap_lock_acquire_returned`.
    pub fn func_proto_params(&self, typedef: &str) -> Option<usize> {
        let types = self.btf.resolve_types_by_name(typedef).ok()?;
        for t in types {
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
        let types = self
            .btf
            .resolve_types_by_name(name)
            .map_err(|e| anyhow!("struct {name} not in kernel BTF: {e}"))?;
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
    fn strip(&self, mut t: Type) -> anyhow::Result<Type> {
        for _ in 0..16 {
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
