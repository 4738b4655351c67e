//! `/proc/PID/maps` text -> file mappings, and user addresses -> (file, file offset). Pure.

/// One file-backed mapping of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    pub path: String,
}

/// The file-backed mappings in `/proc/PID/maps` text (anonymous, `[heap]`, `[vdso]`... and
/// malformed lines are skipped; a ` (deleted)` suffix is kept out of the path).
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.splitn(6, ' ');
            let range = f.next()?;
            let _perms = f.next()?;
            let offset = u64::from_str_radix(f.next()?, 16).ok()?;
            let _dev = f.next()?;
            let _inode = f.next()?;
            let path = f.next()?.trim_start();
            if !path.starts_with('/') {
                return None;
            }
            let path = path.strip_suffix(" (deleted)").unwrap_or(path);
            let (s, e) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(s, 16).ok()?,
                end: u64::from_str_radix(e, 16).ok()?,
                offset,
                path: path.to_owned(),
            })
        })
        .collect()
}

/// The file and file offset an address of the process falls in.
pub fn file_offset(maps: &[Mapping], addr: u64) -> Option<(&str, u64)> {
    maps.iter()
        .find(|m| (m.start..m.end).contains(&addr))
        .map(|m| (m.path.as_str(), addr - m.start + m.offset))
}

/// Is this file a C library that exports the pthread lock functions? glibc
/// (`libc.so.6`, old `libc-2.31.so`) and musl (`ld-musl-x86_64.so.1`, `libc.musl-*.so.1`).
pub fn is_libc(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name == "libc.so.6"
        || name == "libc.so"
        || (name.starts_with("libc-") && name.ends_with(".so"))
        || name.starts_with("ld-musl-")
        || name.starts_with("libc.musl-")
}

/// The C libraries a process maps, each once, in order of appearance.
pub fn libc_paths(maps: &[Mapping]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for m in maps {
        if is_libc(&m.path) && !out.contains(&m.path) {
            out.push(m.path.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c0a00000-55d0c0a9c000 r--p 00000000 fe:00 1234                       /usr/bin/app
55d0c0a9c000-55d0c0f00000 r-xp 0009c000 fe:00 1234                       /usr/bin/app
55d0c1e00000-55d0c1e21000 rw-p 00000000 00:00 0                          [heap]
7f773fc64000-7f773fc8a000 r--p 00000000 fe:00 326279                     /usr/lib/x86_64-linux-gnu/libc.so.6
7f773fc8a000-7f773fde0000 r-xp 00026000 fe:00 326279                     /usr/lib/x86_64-linux-gnu/libc.so.6
7f7740000000-7f7740021000 rw-p 00000000 00:00 0 
7f7741000000-7f7741001000 r-xp 00002000 fe:00 999                        /tmp/old lib.so (deleted)
7ffd1a5f0000-7ffd1a5f2000 r-xp 00000000 00:00 0                          [vdso]
garbage line
";

    #[test]
    fn file_mappings_only() {
        let m = parse_maps(MAPS);
        assert_eq!(m.len(), 5);
        assert_eq!(m[1].offset, 0x9c000);
        assert_eq!(m[1].path, "/usr/bin/app");
        assert_eq!(m[4].path, "/tmp/old lib.so");
    }

    #[test]
    fn addresses_to_file_offsets() {
        let m = parse_maps(MAPS);
        assert_eq!(
            file_offset(&m, 0x55d0c0a9c010),
            Some(("/usr/bin/app", 0x9c010))
        );
        assert_eq!(
            file_offset(&m, 0x7f773fc8a123),
            Some(("/usr/lib/x86_64-linux-gnu/libc.so.6", 0x26123))
        );
        // Anonymous memory and the end of a mapping (exclusive) are not in a file.
        assert_eq!(file_offset(&m, 0x7f7740000010), None);
        assert_eq!(file_offset(&m, 0x55d0c0f00000), None);
    }

    #[test]
    fn c_libraries_by_name() {
        let m = parse_maps(MAPS);
        assert_eq!(libc_paths(&m), vec!["/usr/lib/x86_64-linux-gnu/libc.so.6"]);
        assert!(is_libc("/lib/libc-2.31.so"));
        assert!(is_libc("/lib/ld-musl-x86_64.so.1"));
        assert!(!is_libc("/usr/lib/libcrypt.so.1"));
        assert!(!is_libc("/usr/lib/libc++.so.1"));
        assert!(!is_libc("/usr/bin/app"));
    }
}
