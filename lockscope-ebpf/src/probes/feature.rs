//! Programs that exist only so `lockscope doctor` can ask the kernel what it allows.

use aya_ebpf::{macros::fentry, programs::FEntryContext};

/// Loaded (never attached) to learn whether fentry/fexit programs are allowed.
#[fentry(function = "down_read_trylock")]
pub fn feature_fentry(_ctx: FEntryContext) -> i32 {
    0
}
