//! Kernel addresses -> names, with blazesym over the running kernel's kallsyms; [`user`]:
//! user call sites over the mapped ELF files.

pub mod cgroup;
pub mod debugdir;
pub mod unwind;
pub mod user;

use std::{collections::HashMap, ops::Range};

use blazesym::symbolize::{
    Input, Symbolized, Symbolizer,
    source::{Kernel, Source},
};

use crate::aggregate::{Frame, Names};

/// Frames that belong to the tracing machinery rather than to the kernel path that waited.
pub fn is_tracing_frame(name: &str) -> bool {
    name.starts_with("bpf_prog_")
        || name.starts_with("bpf_trace_run")
        || name.starts_with("__bpf_trace_")
        || name.starts_with("__traceiter_")
        || name.starts_with("trace_contention_")
        || name.starts_with("__bpf_prog_")
        || name.starts_with("bpf_trampoline_")
}

/// `name+0xoff`.
pub fn frame_text(name: &str, offset: u64) -> String {
    format!("{name}+{offset:#x}")
}

/// Section ranges of the kernel image, from kallsyms marker symbols.
#[derive(Debug, Default, Clone)]
pub struct KernelLayout {
    /// `__lock_text` and `__sched_text`: where the locking slow paths live.
    pub lock_text: Vec<Range<u64>>,
    /// `_etext.._end`: kernel data, where static locks live. Needs data symbols in
    /// kallsyms (CONFIG_KALLSYMS_ALL); without them static locks stay addresses.
    pub image: Option<Range<u64>>,
}

impl KernelLayout {
    /// Parse the marker symbols out of `/proc/kallsyms` text.
    pub fn from_kallsyms(text: &str) -> Self {
        let mut marks: HashMap<&str, u64> = HashMap::new();
        for line in text.lines() {
            let mut f = line.split_whitespace();
            let (Some(addr), Some(_), Some(name)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            if matches!(
                name,
                "__lock_text_start"
                    | "__lock_text_end"
                    | "__sched_text_start"
                    | "__sched_text_end"
                    | "_etext"
                    | "_end"
            ) && let Ok(a) = u64::from_str_radix(addr, 16)
            {
                marks.insert(name, a);
            }
        }
        let range = |a: &str, b: &str| match (marks.get(a), marks.get(b)) {
            (Some(&s), Some(&e)) if s != 0 && s < e => Some(s..e),
            _ => None,
        };
        Self {
            lock_text: [
                range("__lock_text_start", "__lock_text_end"),
                range("__sched_text_start", "__sched_text_end"),
            ]
            .into_iter()
            .flatten()
            .collect(),
            image: range("_etext", "_end"),
        }
    }

    pub fn is_lock_text(&self, addr: u64) -> bool {
        self.lock_text.iter().any(|r| r.contains(&addr))
    }
}

/// The kernel symbolizer used for callers and static lock names.
pub struct KernelNames {
    symbolizer: Symbolizer,
    layout: KernelLayout,
    cache: std::cell::RefCell<HashMap<u64, Option<(String, u64)>>>,
}

impl KernelNames {
    /// From `/proc/kallsyms` text (read once at start: the kernel takes tens of ms to
    /// produce it).
    pub fn from_kallsyms(kallsyms: &str) -> Self {
        let layout = KernelLayout::from_kallsyms(kallsyms);
        Self {
            symbolizer: Symbolizer::new(),
            layout,
            cache: Default::default(),
        }
    }

    /// (symbol, offset) for each address; `None` where unknown.
    fn lookup(&self, addrs: &[u64]) -> Vec<Option<(String, u64)>> {
        let missing: Vec<u64> = {
            let cache = self.cache.borrow();
            let mut m: Vec<u64> = addrs
                .iter()
                .copied()
                .filter(|a| !cache.contains_key(a))
                .collect();
            m.sort_unstable();
            m.dedup();
            m
        };
        if !missing.is_empty() {
            let src = Source::Kernel(Kernel {
                // kallsyms only: fast, and what every kernel has.
                vmlinux: blazesym::MaybeDefault::None,
                debug_syms: false,
                ..Default::default()
            });
            let results = self
                .symbolizer
                .symbolize(&src, Input::AbsAddr(&missing))
                .unwrap_or_default();
            let mut cache = self.cache.borrow_mut();
            for (i, &addr) in missing.iter().enumerate() {
                let v = match results.get(i) {
                    Some(Symbolized::Sym(s)) => Some((s.name.to_string(), s.offset as u64)),
                    _ => None,
                };
                cache.insert(addr, v);
            }
        }
        let cache = self.cache.borrow();
        addrs
            .iter()
            .map(|a| cache.get(a).cloned().flatten())
            .collect()
    }
}

impl Names for KernelNames {
    fn static_lock(&self, addr: u64) -> Option<String> {
        let image = self.layout.image.as_ref()?;
        if !image.contains(&addr) {
            return None;
        }
        let (name, off) = self.lookup(&[addr]).pop().flatten()?;
        Some(if off == 0 {
            name
        } else {
            frame_text(&name, off)
        })
    }

    fn frames(&self, stack: &[u64]) -> Vec<Frame> {
        self.lookup(stack)
            .into_iter()
            .zip(stack)
            .map(|(sym, &addr)| match sym {
                Some((name, off)) => Frame {
                    addr,
                    tracing: is_tracing_frame(&name),
                    lock_internal: self.layout.is_lock_text(addr),
                    text: frame_text(&name, off),
                },
                None => Frame {
                    addr,
                    text: format!("{addr:#x}"),
                    tracing: false,
                    lock_internal: self.layout.is_lock_text(addr),
                },
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_from_kallsyms_markers() {
        let text = "ffffffff81000000 T _etext\n\
                    ffffffff81e00000 T __sched_text_start\n\
                    ffffffff81e10000 T __sched_text_end\n\
                    ffffffff81e20000 T __lock_text_start\n\
                    ffffffff81e28000 T __lock_text_end\n\
                    ffffffff83000000 B _end\n\
                    ffffffff81234567 t something\tmodule\n";
        let l = KernelLayout::from_kallsyms(text);
        assert!(l.is_lock_text(0xffffffff81e00010));
        assert!(l.is_lock_text(0xffffffff81e20010));
        assert!(!l.is_lock_text(0xffffffff81234567));
        assert!(l.image.unwrap().contains(&0xffffffff82000000));
        // Hidden addresses (kptr_restrict) read as zero: no ranges rather than bogus ones.
        let hidden =
            KernelLayout::from_kallsyms("0000000000000000 T _etext\n0000000000000000 B _end\n");
        assert!(hidden.image.is_none());
    }

    #[test]
    fn tracing_frames() {
        assert!(is_tracing_frame(
            "bpf_prog_6deef7357e7b4530_contention_begin"
        ));
        assert!(is_tracing_frame("bpf_trace_run2"));
        assert!(is_tracing_frame("__bpf_trace_contention_begin"));
        assert!(!is_tracing_frame("rwsem_down_read_slowpath"));
        assert_eq!(
            frame_text("do_user_addr_fault", 0x1a2),
            "do_user_addr_fault+0x1a2"
        );
    }
}
