//! `cargo xtask fuzz`: the cargo-fuzz targets in `fuzz/` (the recording reader and the
//! `top --connect` snapshot path), each for a bounded time from the committed seeds.
//! Installs cargo-fuzz when missing. A crash fails the run and leaves its input in
//! `fuzz/artifacts/TARGET/`, which `cargo +nightly fuzz run TARGET FILE` replays.

use anyhow::{Context, Result};

use crate::util::{self, run};

/// The targets (`fuzz/fuzz_targets/NAME.rs`).
pub const TARGETS: &[&str] = &["recording", "snapshot"];

/// The largest input libFuzzer makes (the seeds are real recordings, tens of KiB).
const MAX_LEN: usize = 128 * 1024;

pub fn fuzz(seconds: u64) -> Result<()> {
    crate::setup::setup()?;
    ensure_cargo_fuzz()?;
    let root = util::workspace_root();
    let fuzz_dir = root.join("fuzz");
    let seeds = fuzz_dir.join("seeds");
    for target in TARGETS {
        // Each target grows its own corpus from the seeds (kept under target/).
        let corpus = util::target_dir().join("fuzz-corpus").join(target);
        std::fs::create_dir_all(&corpus)?;
        for entry in std::fs::read_dir(&seeds).context("fuzz/seeds")? {
            let path = entry?.path();
            std::fs::copy(&path, corpus.join(path.file_name().unwrap()))?;
        }
        println!("fuzz: {target} for {seconds} s");
        let mut cmd = util::cargo();
        cmd.current_dir(&fuzz_dir)
            // The probes are never loaded here: skip building them for the fuzz target.
            .env("AYA_BUILD_SKIP", "1")
            .args(["+nightly", "fuzz", "run", "-O", target])
            .arg(&corpus)
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .arg(format!("-max_len={MAX_LEN}"));
        run(&mut cmd).with_context(|| {
            format!("fuzz target {target} failed: its input is in fuzz/artifacts/{target}/")
        })?;
    }
    Ok(())
}

fn ensure_cargo_fuzz() -> Result<()> {
    let installed = util::which("cargo-fuzz").is_some()
        || util::cargo_bin_dir().is_some_and(|d| d.join("cargo-fuzz").is_file());
    if !installed {
        println!("fuzz: installing cargo-fuzz (cargo install; about a minute)");
        run(util::cargo().args(["install", "cargo-fuzz", "--locked"]))?;
    }
    Ok(())
}
