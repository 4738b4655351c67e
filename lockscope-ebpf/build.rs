use which::which;

/// Building this crate requires bpf-linker: fail early, with the fix, when it is missing.
/// Cargo re-runs this script when bpf-linker changes, so the probes are relinked then.
fn main() {
    match which("bpf-linker") {
        Ok(path) => println!("cargo:rerun-if-changed={}", path.display()),
        Err(err) => panic!("bpf-linker not found ({err}); run `cargo xtask setup`"),
    }
}
