use which::which;

/// Building this crate requires bpf-linker: fail early, with the fix, when it is missing.
/// Cargo re-runs this script when bpf-linker changes, so the probes are relinked then.
fn main() {
    // aya-build passes `--cfg bpf_target_arch="..."` (the probes read pt_regs by arch).
    println!(
        "cargo::rustc-check-cfg=cfg(bpf_target_arch, values(\"aarch64\", \"arm\", \
         \"loongarch64\", \"mips\", \"mips64\", \"powerpc64\", \"riscv64\", \"s390x\", \
         \"x86_64\"))"
    );
    match which("bpf-linker") {
        Ok(path) => println!("cargo:rerun-if-changed={}", path.display()),
        Err(err) => panic!("bpf-linker not found ({err}); run `cargo xtask setup`"),
    }
}
