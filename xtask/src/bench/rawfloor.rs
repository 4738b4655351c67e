//! `cargo xtask raw-floor -- CMD`: empty BPF programs on the raw `sys_enter` and
//! `sys_exit` tracepoints while CMD runs. The floor of the futex probes' cost on x86_64,
//! where lockscope attaches them there (bpftrace of this machine's Debian release has no
//! raw tracepoints). Two instructions each (`r0 = 0; exit`), loaded with the `bpf(2)`
//! system call; the kernel runs a raw tracepoint program the same way whether it was
//! typed by BTF (lockscope's) or not (these), so their run time is the floor.

use std::{
    os::fd::{FromRawFd as _, OwnedFd},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;

/// `bpf(cmd, attr)` with `attr` a zero-padded `union bpf_attr`.
fn bpf(cmd: libc::c_long, attr: &mut [u8; 128]) -> std::io::Result<OwnedFd> {
    // SAFETY: the kernel reads `attr` (128 bytes, zeros past the fields it is given).
    let fd = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor the kernel just returned, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// An empty raw tracepoint program named `tp` (so the bench finds it by name), attached
/// to `tp`: (program, link).
fn empty_on(tp: &str) -> Result<(OwnedFd, OwnedFd)> {
    // r0 = 0 (BPF_ALU64 | BPF_MOV | BPF_K); exit (BPF_JMP | BPF_EXIT).
    let insns: [u64; 2] = [0xb7, 0x95];
    let license = c"GPL";
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&BPF_PROG_TYPE_RAW_TRACEPOINT.to_ne_bytes());
    attr[4..8].copy_from_slice(&(insns.len() as u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&(insns.as_ptr() as u64).to_ne_bytes());
    attr[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
    let name = tp.as_bytes();
    attr[48..48 + name.len().min(15)].copy_from_slice(&name[..name.len().min(15)]);
    let prog = bpf(BPF_PROG_LOAD, &mut attr).with_context(|| format!("loading {tp}"))?;
    let tp_name = std::ffi::CString::new(tp)?;
    let mut attr = [0u8; 128];
    attr[0..8].copy_from_slice(&(tp_name.as_ptr() as u64).to_ne_bytes());
    attr[8..12].copy_from_slice(&(std::os::fd::AsRawFd::as_raw_fd(&prog) as u32).to_ne_bytes());
    let link = bpf(BPF_RAW_TRACEPOINT_OPEN, &mut attr)
        .with_context(|| format!("attaching raw tracepoint {tp}"))?;
    Ok((prog, link))
}

pub fn run(cmd: &[String]) -> Result<()> {
    let Some((exe, args)) = cmd.split_first() else {
        bail!("raw-floor: give a command to run after --");
    };
    let _held = [empty_on("sys_enter")?, empty_on("sys_exit")?];
    let status = Command::new(exe)
        .args(args)
        .status()
        .with_context(|| format!("running {exe}"))?;
    if !status.success() {
        bail!("raw-floor: {exe} exited with {status}");
    }
    Ok(())
}
