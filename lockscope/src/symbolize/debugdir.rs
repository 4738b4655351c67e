//! `report --debug-dir DIR`: user call sites a recording could only show as
//! `file+0xADDR` (a stripped program: no symbol covered them when it was recorded; ADDR is
//! the address in the ELF file) are named from that file's debug file or an unstripped
//! copy in DIR (`DIR/FILE.debug`, else `DIR/FILE`), looked up with blazesym.

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
};

use blazesym::symbolize::{
    Input, Symbolized, Symbolizer,
    source::{Elf, Source},
};

use super::frame_text;
use crate::aggregate::Recording;

/// `(file, address)` of a frame shown as `file+0xADDR`.
pub fn module_frame(text: &str) -> Option<(&str, u64)> {
    let (module, off) = text.rsplit_once("+0x")?;
    if module.is_empty() || module.contains(['/', ' ']) {
        return None;
    }
    Some((module, u64::from_str_radix(off, 16).ok()?))
}

/// The file in `dir` that names `module`'s offsets, if any.
fn debug_file(dir: &Path, module: &str) -> Option<PathBuf> {
    [format!("{module}.debug"), module.to_owned()]
        .into_iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file())
}

/// What `resolve` did: frames named, and frames of files found in the directory that
/// no symbol covers there either.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    pub named: usize,
    pub unnamed: usize,
}

/// Name the `file+0xoffset` frames of the user-space lock entries (callers and their
/// stacks) from the files in `dir`. Frames whose file is not in `dir` stay as they are.
pub fn resolve(rec: &mut Recording, dir: &Path) -> Resolved {
    // Every distinct frame, grouped by the file that can name it.
    let mut by_file: BTreeMap<PathBuf, Vec<(String, u64)>> = BTreeMap::new();
    let mut files: HashMap<String, Option<PathBuf>> = HashMap::new();
    let frames = rec
        .locks
        .iter()
        .filter(|l| l.user.is_some())
        .flat_map(|l| l.callers.iter())
        .flat_map(|c| std::iter::once(&c.caller).chain(c.stack.iter()));
    for text in frames {
        let Some((module, off)) = module_frame(text) else {
            continue;
        };
        let file = files
            .entry(module.to_owned())
            .or_insert_with(|| debug_file(dir, module));
        if let Some(f) = file {
            let v = by_file.entry(f.clone()).or_default();
            if !v.iter().any(|(t, _)| t == text) {
                v.push((text.clone(), off));
            }
        }
    }
    let symbolizer = Symbolizer::new();
    let mut names: HashMap<String, String> = HashMap::new();
    let mut done = Resolved::default();
    for (file, wanted) in by_file {
        let offsets: Vec<u64> = wanted.iter().map(|(_, off)| *off).collect();
        let src = Source::Elf(Elf {
            debug_syms: true,
            ..Elf::new(file)
        });
        let results = symbolizer
            .symbolize(&src, Input::VirtOffset(&offsets))
            .unwrap_or_default();
        for (i, (text, _)) in wanted.into_iter().enumerate() {
            match results.get(i) {
                Some(Symbolized::Sym(s)) => {
                    names.insert(text, frame_text(&s.name, s.offset as u64));
                    done.named += 1;
                }
                _ => done.unnamed += 1,
            }
        }
    }
    for l in rec.locks.iter_mut().filter(|l| l.user.is_some()) {
        for c in &mut l.callers {
            for t in std::iter::once(&mut c.caller).chain(c.stack.iter_mut()) {
                if let Some(n) = names.get(t.as_str()) {
                    *t = n.clone();
                }
            }
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_file_and_offset_frames_are_taken() {
        assert_eq!(
            module_frame("memcached+0x2ceb68"),
            Some(("memcached", 0x2ceb68))
        );
        assert_eq!(
            module_frame("libfoo.so.1+0x10"),
            Some(("libfoo.so.1", 0x10))
        );
        assert_eq!(module_frame("[unknown]"), None);
        assert_eq!(module_frame("+0x10"), None);
        assert_eq!(module_frame("a b+0x10"), None);
        assert_eq!(module_frame("x+0xzz"), None);
    }

    #[test]
    fn files_not_in_the_directory_leave_frames_alone() {
        let dir = std::env::temp_dir().join(format!("lockscope-debugdir-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("prog.debug"), b"").unwrap();
        assert_eq!(debug_file(&dir, "prog"), Some(dir.join("prog.debug")));
        assert_eq!(debug_file(&dir, "other"), None);
        let mut rec = Recording::default();
        assert_eq!(resolve(&mut rec, &dir), Resolved::default());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
