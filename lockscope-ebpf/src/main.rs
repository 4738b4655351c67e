//! lockscope's eBPF probes. One module per source of events under `probes/`; maps shared
//! by several probes live in `maps.rs`.
#![no_std]
#![no_main]

mod maps;
mod probes;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
