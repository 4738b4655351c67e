//! Reading a loaded BPF task iterator (`iter/task`) again and again: each read is a new
//! walk of the live tasks. aya can make an iterator's file once (it consumes the link);
//! a snapshot needs one per read from a shared `&Ebpf`, so the two `bpf(2)` commands are
//! made here: `BPF_LINK_CREATE` for the program, `BPF_ITER_CREATE` for the walk.

use std::{
    fs::File,
    io::Read as _,
    os::fd::{AsFd as _, AsRawFd as _, FromRawFd as _, OwnedFd},
};

use anyhow::{Context as _, anyhow};
use aya::{Ebpf, programs::Iter};

const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_ITER_CREATE: libc::c_long = 33;
const BPF_TRACE_ITER: u32 = 28;

/// `union bpf_attr`: `link_create` (prog_fd, target_fd, attach_type, flags) and
/// `iter_create` (link_fd, flags) both start with these words; the rest stays zero.
#[repr(C)]
#[derive(Default)]
struct Attr {
    words: [u32; 4],
    rest: [u64; 6],
}

fn bpf(cmd: libc::c_long, attr: &mut Attr) -> std::io::Result<OwnedFd> {
    // SAFETY: `attr` is a valid, zero-padded `bpf_attr` prefix of the size passed; the
    // kernel returns a new file descriptor or an error.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut Attr,
            size_of::<Attr>() as u32,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a file descriptor the kernel just gave us, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Task iterator program `prog` of the object, to load (`load("task", btf)`) before the
/// first [`read_task_iter`].
pub fn task_iter<'a>(ebpf: &'a mut Ebpf, prog: &str) -> anyhow::Result<&'a mut Iter> {
    Ok(ebpf
        .program_mut(prog)
        .ok_or_else(|| anyhow!("program {prog} missing from the eBPF object"))?
        .try_into()?)
}

/// Run the (loaded) task iterator `prog` once and return what it wrote.
pub fn read_task_iter(ebpf: &Ebpf, prog: &str) -> anyhow::Result<Vec<u8>> {
    let it: &Iter = ebpf
        .program(prog)
        .ok_or_else(|| anyhow!("program {prog} missing from the eBPF object"))?
        .try_into()?;
    let prog_fd = it.fd().with_context(|| format!("{prog} is not loaded"))?;
    let mut attr = Attr {
        words: [prog_fd.as_fd().as_raw_fd() as u32, 0, BPF_TRACE_ITER, 0],
        ..Default::default()
    };
    let link = bpf(BPF_LINK_CREATE, &mut attr).with_context(|| format!("linking {prog}"))?;
    let mut attr = Attr {
        words: [link.as_raw_fd() as u32, 0, 0, 0],
        ..Default::default()
    };
    let walk = bpf(BPF_ITER_CREATE, &mut attr).with_context(|| format!("starting {prog}"))?;
    let mut out = Vec::new();
    File::from(walk)
        .read_to_end(&mut out)
        .with_context(|| format!("walking the tasks ({prog})"))?;
    Ok(out)
}
