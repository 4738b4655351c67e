//! Writing an output file (recording, profile, report) over what a path held before.
//!
//! The file is overwritten in place and cut to the new length afterwards, not opened
//! with `O_TRUNC`. Truncating first frees every block of the old file before the new
//! bytes are written. On a file system that discards freed blocks at once (ext4
//! mounted `-o discard`), that free waits for the disk: beside a ptrace storm it was
//! measured at up to 3.7 s for a 4 KiB file, and slow `record -- true` runs were
//! sampled waiting in it. Writing over the old blocks frees only what the new file no
//! longer needs.

use std::{fs::OpenOptions, io::Write as _, path::Path};

use anyhow::Context as _;

/// Write `bytes` to `path`, creating it if needed. On a failed write the file is left
/// empty, never a new beginning with the old file's end after it.
pub fn write_output(path: &Path, bytes: impl AsRef<[u8]>) -> anyhow::Result<()> {
    let bytes = bytes.as_ref();
    let what = || format!("writing {}", path.display());
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(what)?;
    // Only a regular file has a length to cut (not /dev/stdout, a pipe, a FIFO).
    let regular = file.metadata().with_context(what)?.is_file();
    let written = file.write_all(bytes).and_then(|()| {
        if regular {
            file.set_len(bytes.len() as u64)
        } else {
            Ok(())
        }
    });
    if let Err(e) = written {
        if regular {
            let _ = file.set_len(0);
        }
        return Err(e).with_context(what);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of the test's own, removed by the test.
    fn scratch(test: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("lockscope-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_shorter_output_replaces_a_longer_file_whole() {
        let dir = scratch("output-shorter");
        let path = dir.join("out.json");
        std::fs::write(&path, "x".repeat(10_000)).unwrap();
        write_output(&path, "{\"a\": 1}\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"a\": 1}\n");
        write_output(&path, "y".repeat(20_000)).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), "y".repeat(20_000).as_bytes());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_new_file_is_created_and_a_device_is_written() {
        let dir = scratch("output-new");
        let path = dir.join("out.json");
        write_output(&path, "new\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new\n");
        std::fs::remove_dir_all(&dir).unwrap();
        write_output(Path::new("/dev/null"), "discarded").unwrap();
    }

    #[test]
    fn an_unwritable_path_says_which() {
        let e = write_output(Path::new("/nonexistent-dir/out.json"), "x").unwrap_err();
        assert!(
            format!("{e:#}").contains("writing /nonexistent-dir/out.json"),
            "{e:#}"
        );
    }
}
