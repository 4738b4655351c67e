//! User addresses (pthread call sites) -> names, with blazesym over the mapped ELF files.
//!
//! A user address only means something with its process's memory map, and a traced
//! process may exit before the report is made (a `record -- CMD` always has). So the
//! maps are read while the process lives ([`UserNames::observe`], called as sites appear)
//! and kept; names are made later from the file and file offset, which outlive the process.

use std::{
    cell::RefCell,
    collections::{BTreeMap, HashMap},
    path::PathBuf,
};

use blazesym::symbolize::{
    Input, Symbolized, Symbolizer,
    source::{Elf, Source},
};

use super::frame_text;
use crate::decode::procmaps::{Mapping, file_offset, parse_maps};

/// A call site: (tgid, user address).
type Site = (u32, u64);

#[derive(Default)]
pub struct UserNames {
    symbolizer: Symbolizer,
    /// Memory maps of traced processes, as last read while they lived.
    maps: RefCell<HashMap<u32, Vec<Mapping>>>,
    /// (tgid, address) -> name (`None`: no symbol covers it).
    names: RefCell<HashMap<(u32, u64), Option<String>>>,
}

impl UserNames {
    pub fn new() -> Self {
        Self::default()
    }

    /// Read process `pid`'s maps now (a target known before its call sites are): its
    /// sites can then be named even if it exits before they are observed.
    pub fn remember(&self, pid: u32) {
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) {
            let parsed = parse_maps(&text);
            if !parsed.is_empty() {
                self.maps.borrow_mut().insert(pid, parsed);
            }
        }
    }

    /// Make sure the maps of each site's process cover the site, reading
    /// `/proc/PID/maps` again where they do not (a library loaded later). Processes that
    /// are gone keep the maps read before.
    pub fn observe(&self, sites: &[(u32, u64)]) {
        let mut maps = self.maps.borrow_mut();
        for &(tgid, addr) in sites {
            if addr == 0 {
                continue;
            }
            let covered = maps
                .get(&tgid)
                .is_some_and(|m| file_offset(m, addr).is_some());
            if covered {
                continue;
            }
            if let Ok(text) = std::fs::read_to_string(format!("/proc/{tgid}/maps")) {
                let parsed = parse_maps(&text);
                if !parsed.is_empty() {
                    maps.insert(tgid, parsed);
                }
            }
        }
    }

    /// `function+0xoff` of each site that a symbol covers (observing first).
    pub fn names(&self, sites: &[(u32, u64)]) -> HashMap<(u32, u64), String> {
        self.observe(sites);
        let maps = self.maps.borrow();
        let mut names = self.names.borrow_mut();
        // Unnamed sites grouped by file: one symbolizer call per file.
        let mut by_file: BTreeMap<PathBuf, Vec<(Site, u64, String)>> = BTreeMap::new();
        for &(tgid, addr) in sites {
            if names.contains_key(&(tgid, addr)) {
                continue;
            }
            let Some((path, off)) = maps.get(&tgid).and_then(|m| file_offset(m, addr)) else {
                continue;
            };
            // Through the process's root while it lives (containers), else as named.
            let via_root = PathBuf::from(format!("/proc/{tgid}/root{path}"));
            let file = if via_root.exists() {
                via_root
            } else {
                PathBuf::from(path)
            };
            let shown = module_name(path);
            by_file
                .entry(file)
                .or_default()
                .push(((tgid, addr), off, shown));
        }
        for (file, wanted) in by_file {
            let offsets: Vec<u64> = wanted.iter().map(|(_, off, _)| *off).collect();
            let src = Source::Elf(Elf {
                debug_syms: false,
                ..Elf::new(file.clone())
            });
            let results = self
                .symbolizer
                .symbolize(&src, Input::FileOffset(&offsets))
                .unwrap_or_default();
            let mut elf: Option<Option<Vec<u8>>> = None;
            for (i, (site, off, module)) in wanted.iter().enumerate() {
                // No symbol (a stripped binary): the file and the address in it, which its
                // debug file names later (`addr2line -e FILE.debug ADDR`, `report
                // --debug-dir`); the file offset if the file cannot be read.
                let name = match results.get(i) {
                    Some(Symbolized::Sym(s)) => frame_text(&s.name, s.offset as u64),
                    _ => {
                        let data = elf.get_or_insert_with(|| std::fs::read(&file).ok());
                        let addr = data.as_deref().and_then(|d| elf_address(d, *off));
                        frame_text(module, addr.unwrap_or(*off))
                    }
                };
                names.insert(*site, Some(name));
            }
        }
        sites
            .iter()
            .filter_map(|s| names.get(s).cloned().flatten().map(|n| (*s, n)))
            .collect()
    }
}

/// The address in the ELF file (`p_vaddr`-based, as symbol tables and debug files use)
/// of file offset `off`, from the loadable segment that holds it.
fn elf_address(data: &[u8], off: u64) -> Option<u64> {
    use object::{Object as _, ObjectSegment as _};
    let file = object::File::parse(data).ok()?;
    file.segments().find_map(|s| {
        let (start, len) = s.file_range();
        (off >= start && off - start < len).then(|| s.address() + (off - start))
    })
}

/// The file name a frame without a symbol is shown by (`memcached`, `libfoo.so.1`).
fn module_name(path: &str) -> String {
    path.rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or(path)
        .trim_end_matches(" (deleted)")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_without_symbols_are_module_and_offset() {
        assert_eq!(module_name("/usr/bin/memcached"), "memcached");
        assert_eq!(module_name("/usr/lib/libx.so.1 (deleted)"), "libx.so.1");
        assert_eq!(
            frame_text(&module_name("/usr/bin/memcached"), 0x2ceb68),
            "memcached+0x2ceb68"
        );
    }

    /// A function of this test binary, called through a pointer so it stays out of line.
    #[inline(never)]
    fn lockscope_user_names_probe_target() -> u64 {
        std::hint::black_box(7)
    }

    #[test]
    fn names_this_processs_own_function() {
        let f: fn() -> u64 = lockscope_user_names_probe_target;
        let addr = f as usize as u64 + 1;
        let me = std::process::id();
        let n = UserNames::new();
        let names = n.names(&[(me, addr), (me, 0)]);
        let name = names
            .get(&(me, addr))
            .unwrap_or_else(|| panic!("not symbolized: {names:?}"));
        assert!(
            name.contains("lockscope_user_names_probe_target+0x1"),
            "{name}"
        );
        assert!(!names.contains_key(&(me, 0)));
    }
}
