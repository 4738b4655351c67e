//! The guests' initramfs: busybox, the release lockscope with the libraries `ldd` names,
//! cyclictest, `/init` and the steps, in a newc cpio written here.

use std::io::Write as _;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use super::{GUEST_INIT, guest_steps};
use crate::util::{self, output};

pub(super) fn build_initramfs(exe: &Path, out: &Path) -> Result<()> {
    let mut cpio = Cpio::default();
    for d in [
        "bin", "dev", "proc", "sys", "tmp", "lib", "lib64", "usr", "etc",
    ] {
        cpio.dir(d);
    }
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .context("busybox not found (is busybox-static installed?)")?;
    cpio.file("bin/busybox", 0o755, &std::fs::read(busybox)?);
    // lockscope, cyclictest (the RT guest's latency probe), the dynamic loader and the
    // shared libraries each one links.
    let cyclictest = util::which("cyclictest")
        .context("cyclictest not found (is rt-tests installed? `cargo xtask setup`)")?;
    let binaries = [
        (exe.to_path_buf(), "bin/lockscope"),
        (cyclictest, "bin/cyclictest"),
    ];
    let mut libs: Vec<String> = Vec::new();
    for (path, dest) in &binaries {
        let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        cpio.file(dest, 0o755, &data);
        let ldd = output(Command::new("ldd").arg(path))?;
        for lib in ldd_paths(&ldd) {
            if !libs.contains(&lib) {
                libs.push(lib);
            }
        }
    }
    for lib in libs {
        let data = std::fs::read(&lib).with_context(|| format!("reading {lib}"))?;
        let rel = lib.trim_start_matches('/');
        let mut dir = String::new();
        for part in Path::new(rel)
            .parent()
            .into_iter()
            .flat_map(|p| p.components())
        {
            if !dir.is_empty() {
                dir.push('/');
            }
            dir.push_str(&part.as_os_str().to_string_lossy());
            cpio.dir(&dir);
        }
        cpio.file(rel, 0o755, &data);
    }
    cpio.file("init", 0o755, GUEST_INIT.as_bytes());
    cpio.file("vm-steps.sh", 0o644, guest_steps().as_bytes());
    let bytes = cpio.finish();
    std::fs::File::create(out)
        .and_then(|mut f| f.write_all(&bytes))
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}

/// Absolute paths of the loader and libraries in `ldd` output.
pub fn ldd_paths(ldd: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in ldd.lines() {
        let line = line.trim();
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path
            && p.starts_with('/')
            && !out.iter().any(|o| o == p)
        {
            out.push(p.to_owned());
        }
    }
    out
}

/// A newc-format cpio archive, as the kernel unpacks an initramfs.
#[derive(Default)]
pub struct Cpio {
    buf: Vec<u8>,
    ino: u32,
    dirs: Vec<String>,
}

impl Cpio {
    pub fn dir(&mut self, path: &str) {
        if self.dirs.iter().any(|d| d == path) {
            return;
        }
        self.dirs.push(path.to_owned());
        self.entry(path, 0o040_755, 2, &[]);
    }

    pub fn file(&mut self, path: &str, perm: u32, data: &[u8]) {
        self.entry(path, 0o100_000 | perm, 1, data);
    }

    fn entry(&mut self, name: &str, mode: u32, nlink: u32, data: &[u8]) {
        self.ino += 1;
        let fields = [
            self.ino,
            mode,
            0,
            0,
            nlink,
            0,
            data.len() as u32,
            0,
            0,
            0,
            0,
            name.len() as u32 + 1,
            0,
        ];
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.ino = 0;
        self.entry("TRAILER!!!", 0, 1, &[]);
        self.buf
    }
}

// ---------------------------------------------------------------- running a guest
