//! Builds the eBPF probes (lockscope-ebpf) for the BPF target and leaves the object in
//! OUT_DIR, where `probe::loader` embeds it.

use anyhow::{Context as _, anyhow};
use aya_build::{Package, Toolchain};

fn main() -> anyhow::Result<()> {
    let metadata = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    let ebpf = metadata
        .packages
        .into_iter()
        .find(|p| p.name.as_str() == "lockscope-ebpf")
        .ok_or_else(|| anyhow!("lockscope-ebpf package not found"))?;
    let root_dir = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("lockscope-ebpf manifest has no parent"))?
        .as_str()
        .to_owned();
    // aya-build forwards every line the inner cargo prints as a build warning; keep the
    // inner cargo quiet so only its real diagnostics (warnings, errors) surface.
    if std::env::var_os("CARGO_TERM_QUIET").is_none() {
        // SAFETY: the build script is single-threaded here; nothing reads the environment
        // concurrently.
        unsafe { std::env::set_var("CARGO_TERM_QUIET", "true") };
    }
    aya_build::build_ebpf(
        [Package {
            name: ebpf.name.as_str(),
            root_dir: &root_dir,
            ..Default::default()
        }],
        Toolchain::default(),
    )?;
    // AYA_BUILD_SKIP (the fuzz targets, which never load probes): aya-build built nothing;
    // an empty object lets the crate compile, and loading it fails with a clear error.
    if std::env::var_os("AYA_BUILD_SKIP").is_some() {
        let obj = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("lockscope");
        if !obj.exists() {
            std::fs::write(obj, [])?;
        }
    }
    Ok(())
}
