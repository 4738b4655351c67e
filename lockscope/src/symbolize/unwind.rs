//! pthread attribution from a wait's user stack: unwind through the C library's
//! `.eh_frame` (with [framehop]) from the futex syscall to the first frame outside the C
//! library (the user call site), and find the lock function on the way.
//!
//! Debian's glibc has no frame pointers, so the kernel's user stack walker stops at the
//! syscall; the wait's registers and the top of its stack (copied by the futex exit
//! probe) are enough for the few C library frames that matter. Modules are the ELF files
//! a process maps (read once per file, shared between processes); a process's memory map is
//! read when its first wait arrives and again when a frame falls outside it.

use std::{
    collections::HashMap,
    ops::{Deref, Range},
    os::unix::fs::MetadataExt as _,
    sync::Arc,
    time::{Duration, Instant},
};

use framehop::{
    ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder as _,
    x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64},
};
use lockscope_common::{PTHREAD_FN_NAMES, PthreadWaitEvent};
use object::{Object as _, ObjectSection as _, ObjectSegment as _, ObjectSymbol as _};

use crate::decode::procmaps::{is_libc, parse_maps};

/// Section bytes shared by every process that maps the file.
#[derive(Clone, Default)]
pub struct Bytes(Arc<Vec<u8>>);

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// What unwinding needs of one ELF file.
struct ElfFile {
    /// `p_vaddr - p_offset` of the first loadable segment: svma = file offset + this.
    vaddr_minus_offset: u64,
    text_svma: Option<Range<u64>>,
    text: Option<Bytes>,
    eh_frame_svma: Option<Range<u64>>,
    eh_frame: Option<Bytes>,
    eh_frame_hdr_svma: Option<Range<u64>>,
    eh_frame_hdr: Option<Bytes>,
    got_svma: Option<Range<u64>>,
    /// A C library: the lock functions it exports, as (svma range, `PTHREAD_FN_*`).
    lock_functions: Vec<(Range<u64>, u32)>,
    /// A C library: its `syscall()` wrapper, which no lock function calls.
    syscall_fn: Option<Range<u64>>,
}

fn section(obj: &object::File, name: &str) -> (Option<Range<u64>>, Option<Bytes>) {
    match obj.section_by_name(name) {
        Some(s) => (
            Some(s.address()..s.address() + s.size()),
            s.data().ok().map(|d| Bytes(Arc::new(d.to_vec()))),
        ),
        None => (None, None),
    }
}

impl ElfFile {
    fn parse(data: &[u8], libc: bool) -> anyhow::Result<Self> {
        let obj = object::File::parse(data)?;
        let vaddr_minus_offset = obj
            .segments()
            .next()
            .map(|s| s.address().wrapping_sub(s.file_range().0))
            .unwrap_or(0);
        let (text_svma, text) = section(&obj, ".text");
        let (eh_frame_svma, eh_frame) = section(&obj, ".eh_frame");
        let (eh_frame_hdr_svma, eh_frame_hdr) = section(&obj, ".eh_frame_hdr");
        let got_svma = obj
            .section_by_name(".got")
            .map(|s| s.address()..s.address() + s.size());
        let mut lock_functions = Vec::new();
        let mut syscall_fn = None;
        if libc {
            for sym in obj.dynamic_symbols().chain(obj.symbols()) {
                let Ok(name) = sym.name() else { continue };
                if name == "syscall" && !sym.is_undefined() && sym.size() > 0 {
                    syscall_fn = Some(sym.address()..sym.address() + sym.size());
                }
                let Some(func) = PTHREAD_FN_NAMES.iter().position(|n| *n == name) else {
                    continue;
                };
                if sym.is_undefined() || sym.size() == 0 {
                    continue;
                }
                let r = sym.address()..sym.address() + sym.size();
                if !lock_functions.iter().any(|(have, _)| *have == r) {
                    lock_functions.push((r, func as u32));
                }
            }
        }
        Ok(Self {
            vaddr_minus_offset,
            text_svma,
            text,
            eh_frame_svma,
            eh_frame,
            eh_frame_hdr_svma,
            eh_frame_hdr,
            got_svma,
            lock_functions,
            syscall_fn,
        })
    }

    fn lock_function(&self, svma: u64) -> Option<u32> {
        self.lock_functions
            .iter()
            .find(|(r, _)| r.contains(&svma))
            .map(|&(_, f)| f)
    }
}

/// Can waits be unwound through this C library? The lock functions it exports, or why
/// not.
pub fn check_library(path: &std::path::Path) -> Result<Vec<&'static str>, String> {
    let data = std::fs::read(path).map_err(|e| format!("reading it: {e}"))?;
    let f = ElfFile::parse(&data, true).map_err(|e| format!("parsing it: {e}"))?;
    if f.eh_frame.is_none() {
        return Err("no .eh_frame to unwind with".into());
    }
    let mut names: Vec<&'static str> = f
        .lock_functions
        .iter()
        .map(|&(_, func)| PTHREAD_FN_NAMES[func as usize])
        .collect();
    names.sort_unstable();
    names.dedup();
    if names.is_empty() {
        return Err("exports no pthread lock function".into());
    }
    Ok(names)
}

/// One file as one process maps it.
struct Mapped {
    path: String,
    avma: Range<u64>,
    /// avma = svma + bias.
    bias: u64,
    /// The parsed file, for C libraries only (`None`: another file).
    file: Option<Arc<ElfFile>>,
}

/// A process's modules and its unwinder.
struct Process {
    unwinder: UnwinderX86_64<Bytes>,
    mapped: Vec<Mapped>,
    read_at: Instant,
}

impl Process {
    fn module_of(&self, avma: u64) -> Option<&Mapped> {
        self.mapped.iter().find(|m| m.avma.contains(&avma))
    }
}

/// What one wait's stack says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unwound {
    /// Made inside a lock function; `site` is its user call site (0: the stack ended or
    /// could not be unwound before leaving the C library).
    Lock { func: u32, site: u64 },
    /// Not made by a pthread lock function (a raw futex call, a condition variable, ...).
    /// `site_never_a_lock`: the syscall site itself says so (outside the C library, or in
    /// its `syscall()` wrapper): every wait made there can be skipped.
    NotALock { site_never_a_lock: bool },
    /// The process's maps could not be read (it exited before its first wait was seen).
    NoMaps,
}

/// Unwinds waits of many processes; files are parsed once.
pub struct StackUnwinder {
    cache: CacheX86_64,
    files: HashMap<(u64, u64), Arc<ElfFile>>,
    processes: HashMap<u32, Process>,
}

impl Default for StackUnwinder {
    fn default() -> Self {
        Self::new()
    }
}

/// Frames unwound at most per wait: the C library's part is a handful deep.
const MAX_FRAMES: usize = 16;
/// A process's maps are read again at most this often when a frame is outside them.
const MAPS_REREAD: Duration = Duration::from_millis(500);

impl StackUnwinder {
    pub fn new() -> Self {
        Self {
            cache: CacheX86_64::new(),
            files: HashMap::new(),
            processes: HashMap::new(),
        }
    }

    /// Forget a process (it exited and its waits were read).
    pub fn forget(&mut self, tgid: u32) {
        self.processes.remove(&tgid);
    }

    /// Read process `tgid`'s maps now (a target known before its first wait), so that
    /// its waits can be unwound even if it exits before they are read.
    pub fn remember(&mut self, tgid: u32) {
        if !self.processes.contains_key(&tgid)
            && let Some(p) = self.load_process(tgid)
        {
            self.processes.insert(tgid, p);
        }
    }

    /// Parse a C library now (the system's, before any wait arrives).
    pub fn preload_libc(&mut self, path: &std::path::Path) {
        let _ = self.load_path(path);
    }

    /// A C library as process `tgid` maps it (through its root, for containers).
    fn load_file(&mut self, tgid: u32, mapped_path: &str) -> Option<Arc<ElfFile>> {
        let via_root = format!("/proc/{tgid}/root{mapped_path}");
        let path = if std::path::Path::new(&via_root).exists() {
            via_root
        } else {
            mapped_path.to_owned()
        };
        self.load_path(std::path::Path::new(&path))
    }

    fn load_path(&mut self, path: &std::path::Path) -> Option<Arc<ElfFile>> {
        let meta = std::fs::metadata(path).ok()?;
        let id = (meta.dev(), meta.ino());
        if let Some(f) = self.files.get(&id) {
            return Some(f.clone());
        }
        let data = std::fs::read(path).ok()?;
        let f = Arc::new(ElfFile::parse(&data, true).ok()?);
        self.files.insert(id, f.clone());
        Some(f)
    }

    fn load_process(&mut self, tgid: u32) -> Option<Process> {
        let text = std::fs::read_to_string(format!("/proc/{tgid}/maps")).ok()?;
        let maps = parse_maps(&text);
        if maps.is_empty() {
            return None;
        }
        // One module per file: from its lowest to its highest mapped address.
        let mut by_path: Vec<(String, Range<u64>, u64)> = Vec::new();
        for m in &maps {
            match by_path.iter_mut().find(|(p, _, _)| *p == m.path) {
                Some((_, r, _)) => {
                    r.start = r.start.min(m.start);
                    r.end = r.end.max(m.end);
                }
                // The first mapping of a file maps its lowest offset.
                None => by_path.push((m.path.clone(), m.start..m.end, m.start - m.offset)),
            }
        }
        let mut unwinder = UnwinderX86_64::new();
        let mut mapped = Vec::new();
        for (path, avma, start_minus_offset) in by_path {
            // Only the C library is unwound through: the first frame outside it ends the
            // walk, so other files need no parsing, just their address ranges.
            if !is_libc(&path) {
                mapped.push(Mapped {
                    path,
                    avma,
                    bias: 0,
                    file: None,
                });
                continue;
            }
            let Some(file) = self.load_file(tgid, &path) else {
                continue;
            };
            // avma of file offset 0 minus its svma.
            let bias = start_minus_offset.wrapping_sub(file.vaddr_minus_offset);
            let info = ExplicitModuleSectionInfo {
                base_svma: 0,
                text_svma: file.text_svma.clone(),
                text: file.text.clone(),
                got_svma: file.got_svma.clone(),
                eh_frame_svma: file.eh_frame_svma.clone(),
                eh_frame: file.eh_frame.clone(),
                eh_frame_hdr_svma: file.eh_frame_hdr_svma.clone(),
                eh_frame_hdr: file.eh_frame_hdr.clone(),
                ..Default::default()
            };
            unwinder.add_module(Module::new(path.clone(), avma.clone(), bias, info));
            mapped.push(Mapped {
                path,
                avma,
                bias,
                file: Some(file),
            });
        }
        Some(Process {
            unwinder,
            mapped,
            read_at: Instant::now(),
        })
    }

    /// Make sure process `tgid`'s modules cover `addr` (a library loaded since).
    fn refresh(&mut self, tgid: u32, addr: u64) {
        let stale = match self.processes.get(&tgid) {
            None => true,
            Some(p) => p.module_of(addr).is_none() && p.read_at.elapsed() >= MAPS_REREAD,
        };
        if stale && let Some(p) = self.load_process(tgid) {
            self.processes.insert(tgid, p);
        }
    }

    /// The C libraries of the processes seen so far.
    pub fn libraries(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for p in self.processes.values() {
            for m in p.mapped.iter().filter(|m| m.file.is_some()) {
                if !out.contains(&m.path) {
                    out.push(m.path.clone());
                }
            }
        }
        out.sort();
        out
    }

    /// Attribute one wait.
    pub fn unwind(&mut self, ev: &PthreadWaitEvent) -> Unwound {
        let stack_len = (ev.stack_len as usize).min(ev.stack.len());
        let stack = &ev.stack[..stack_len];
        let sp = ev.sp;
        self.refresh(ev.tgid, ev.ip);
        let Some(p) = self.processes.get(&ev.tgid) else {
            return Unwound::NoMaps;
        };
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            let off = addr.checked_sub(sp).ok_or(())? as usize;
            let bytes = stack.get(off..off.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
        };
        let mut frames = p.unwinder.iter_frames(
            ev.ip,
            UnwindRegsX86_64::new(ev.ip, ev.sp, ev.bp),
            &mut self.cache,
            &mut read_stack,
        );
        let never = match p.module_of(ev.ip) {
            Some(Mapped {
                file: Some(f),
                bias,
                ..
            }) => f
                .syscall_fn
                .as_ref()
                .is_some_and(|r| r.contains(&ev.ip.wrapping_sub(*bias))),
            _ => true,
        };
        if never {
            return Unwound::NotALock {
                site_never_a_lock: true,
            };
        }
        let mut func = None;
        for _ in 0..MAX_FRAMES {
            let frame: FrameAddress = match frames.next() {
                Ok(Some(f)) => f,
                _ => break,
            };
            let lookup = frame.address_for_lookup();
            match p.module_of(lookup) {
                Some(Mapped {
                    file: Some(file),
                    bias,
                    ..
                }) => {
                    if let Some(f) = file.lock_function(lookup.wrapping_sub(*bias)) {
                        // The outermost one counts (a timed lock calls the plain one's helpers).
                        func = Some(f);
                    }
                }
                _ => {
                    // The first frame outside the C library: the call site, when the wait
                    // came from a lock function; otherwise not a pthread lock.
                    return match func {
                        Some(func) => Unwound::Lock {
                            func,
                            site: frame.address(),
                        },
                        None => Unwound::NotALock {
                            site_never_a_lock: false,
                        },
                    };
                }
            }
        }
        match func {
            Some(func) => Unwound::Lock { func, site: 0 },
            None => Unwound::NotALock {
                site_never_a_lock: false,
            },
        }
    }
}
