//! `fpos-holders`: two threads writing through one open file, one holding its position
//! lock long and one briefly, so that the holder of every wait on a kernel mutex is
//! known. `write(2)` through a file description that another thread can also use holds
//! the file's position lock (`file.f_pos_lock`, a mutex) for the whole call: the long
//! holder writes a large buffer and seeks back to the start (the file stays that size),
//! the short holder writes one byte. Each waits behind the other.

use std::io::{Seek as _, SeekFrom, Write as _};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};

use super::sys;

/// Options for `lockscope workload fpos-holders`.
#[derive(Debug, Clone, clap::Args)]
pub struct FposHoldersArgs {
    /// How long to run, in seconds (fractions allowed).
    #[arg(long, short = 's', value_name = "S", default_value_t = 3.0)]
    pub seconds: f64,
    /// The long holder's write, in MiB: how long one of its holds lasts.
    #[arg(long, value_name = "MIB", default_value_t = 8)]
    pub write_mib: usize,
    /// Run both holders on one CPU: a wait then never finds its holder running on
    /// another CPU, where the kernel does not walk a task's stack, so the holder's
    /// stack is taken at its first wait.
    #[arg(long)]
    pub one_cpu: bool,
    /// Directory to create the file in (tmpfs by default, so writes never wait for a
    /// disk); the file is removed at once, and its memory freed at the end.
    #[arg(long, value_name = "DIR", default_value = "/dev/shm")]
    pub dir: PathBuf,
    /// Print the summary as one JSON object instead of `key: value` lines.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &FposHoldersArgs) -> anyhow::Result<()> {
    if !(args.seconds.is_finite() && args.seconds > 0.0) {
        bail!("--seconds must be a positive number, got {}", args.seconds);
    }
    if !(1..=256).contains(&args.write_mib) {
        bail!("--write-mib must be 1 to 256, got {}", args.write_mib);
    }
    let _signals = sys::StopSignals::install()?;
    // Gone from the directory at once; the open file lives until the end.
    let file = sys::unlinked_file(&args.dir, "fpos-holders")?;
    if args.one_cpu {
        // The holders are spawned from here: they inherit the affinity.
        sys::pin_to_one_cpu()?;
    }
    let file = Arc::new(file);
    let long = vec![7u8; args.write_mib << 20];
    let step = move |i: usize| -> anyhow::Result<()> {
        // `&File` writes and seeks: one file description, one position, one lock.
        let mut f = &*file;
        if i == 0 {
            f.write_all(&long).context("write")?;
            f.seek(SeekFrom::Start(0)).context("lseek")?;
        } else {
            f.write_all(&[1]).context("write")?;
        }
        Ok(())
    };
    super::holders::run_pair("fpos-holders", args.seconds, None, args.json, step)
}
