//! pthread lock attribution: uprobes on libc's lock functions (`pthread_mutex_lock`,
//! `pthread_rwlock_rdlock`, ... and their timed and clock forms; the attach cookie says
//! which) and a uretprobe on each.
//!
//! Entry remembers (lock object, function, user call site) per thread in `PTHREAD_CALLS`;
//! the futex exit probe calls [`attribute`] for a finished call, which counts it per
//! (process, futex word, call site, function) in `PTHREAD_SITES` when the thread is inside
//! a lock function and the word lies inside the lock object. Return forgets the entry.
//!
//! Hot path: every lock call of a traced task (contended or not) costs one target check
//! and one hash update at entry and one delete at return; untraced tasks cost the target
//! check. The futex exit of a traced task costs one lookup more.

use aya_ebpf::{
    EbpfContext as _, Global,
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_attach_cookie, bpf_get_current_pid_tgid},
    macros::{map, uprobe, uretprobe},
    maps::{LruHashMap, PerCpuArray, PerCpuHashMap},
    programs::{ProbeContext, RetProbeContext},
};
use lockscope_common::*;

use crate::maps::{CONFIG, current_is_target};

/// Set by the loader: the lock objects' sizes.
#[unsafe(no_mangle)]
pub static PTHREAD_CONFIG: Global<PthreadConfig> = Global::new(PthreadConfig {
    mutex_size: 0,
    rwlock_size: 0,
});

/// Lock functions in progress, by thread id. LRU: a call whose return never comes (the
/// thread was killed in it) does not hold its slot forever.
#[map]
static PTHREAD_CALLS: LruHashMap<u32, PthreadCall> =
    LruHashMap::with_max_entries(PTHREAD_CALLS_MAX_ENTRIES, 0);

/// Attributed futex calls per (tgid, word, call site, function). Preallocated (see
/// `FUTEX_STATS`); the loader sizes it to the number of CPUs.
#[map]
static PTHREAD_SITES: PerCpuHashMap<PthreadSiteKey, PthreadSiteStats> =
    PerCpuHashMap::with_max_entries(PTHREAD_SITES_MAX_ENTRIES, 0);

/// `PCNT_*` slots.
#[map]
static PTHREAD_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(PTHREAD_COUNTERS_LEN, 0);

static EMPTY_SITE: PthreadSiteStats = PthreadSiteStats::EMPTY;

#[inline(always)]
fn pcount(slot: u32) {
    if let Some(c) = PTHREAD_COUNTERS.get_ptr_mut(slot) {
        unsafe { *c += 1 };
    }
}

/// The return address at a function's first instruction: on x86_64 the word at the top of
/// the user stack, on aarch64 the link register.
#[inline(always)]
fn return_address(ctx: &ProbeContext) -> Option<u64> {
    let regs = unsafe { &*ctx.regs };
    #[cfg(bpf_target_arch = "x86_64")]
    {
        unsafe { aya_ebpf::helpers::bpf_probe_read_user(regs.rsp as *const u64) }.ok()
    }
    #[cfg(bpf_target_arch = "aarch64")]
    {
        Some(regs.regs[30])
    }
    #[cfg(not(any(bpf_target_arch = "x86_64", bpf_target_arch = "aarch64")))]
    {
        let _ = regs;
        None
    }
}

/// Entry of any lock function; the attach cookie is its `PTHREAD_FN_*`.
#[uprobe]
pub fn pthread_lock_enter(ctx: ProbeContext) -> u32 {
    let cfg = CONFIG.load();
    if !current_is_target(&cfg) {
        return 0;
    }
    pcount(PCNT_ENTER);
    let func = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    let obj: u64 = ctx.arg(0).unwrap_or(0);
    let (site, site_unreadable) = match return_address(&ctx) {
        Some(a) => (a, 0),
        None => {
            pcount(PCNT_SITE_UNREADABLE);
            (0, 1)
        }
    };
    let tid = bpf_get_current_pid_tgid() as u32;
    let call = PthreadCall {
        obj,
        site,
        func,
        site_unreadable,
    };
    // Replaces a call whose return we did not see (a longjmp out of a lock function).
    if PTHREAD_CALLS.insert(tid, call, 0).is_err() {
        pcount(PCNT_LOST_CALL_FULL);
    }
    0
}

#[uretprobe]
pub fn pthread_lock_return(_ctx: RetProbeContext) -> u32 {
    let tid = bpf_get_current_pid_tgid() as u32;
    if PTHREAD_CALLS.remove(tid).is_ok() {
        pcount(PCNT_RETURN);
    }
    0
}

/// A futex call of the current thread finished (called by the futex exit probe): count
/// it for the lock object the thread is locking, when its word lies inside the object.
/// `waited`: `PTHREAD_WAITED` / `PTHREAD_WAIT_FAILED` (then `wait_ns` is its wait time)
/// or `PTHREAD_NO_WAIT`. Integers only: the arguments of an out-of-line function go into
/// the object's BTF, which the kernel checks.
#[inline(never)]
pub fn attribute(tgid: u32, uaddr: u64, wait_ns: u64, waited: u32) {
    let tid = bpf_get_current_pid_tgid() as u32;
    let Some(call) = (unsafe { PTHREAD_CALLS.get(tid) }) else {
        return;
    };
    let cfg = PTHREAD_CONFIG.load();
    let size = if pthread_fn_is_rwlock(call.func) {
        cfg.rwlock_size
    } else {
        cfg.mutex_size
    };
    if !pthread_word_in_object(call.obj, size as u64, uaddr) {
        pcount(PCNT_OTHER_WORD);
        return;
    }
    let key = PthreadSiteKey {
        uaddr,
        site: call.site,
        tgid,
        func: call.func,
    };
    let obj = call.obj;
    let mut stats = PTHREAD_SITES.get_ptr_mut(key);
    if stats.is_none() {
        #[allow(clippy::needless_borrows_for_generic_args)]
        let _ = PTHREAD_SITES.insert(key, &EMPTY_SITE, BPF_NOEXIST as u64);
        stats = PTHREAD_SITES.get_ptr_mut(key);
    }
    let Some(s) = stats else {
        pcount(PCNT_LOST_SITE_FULL);
        return;
    };
    pcount(PCNT_ATTRIBUTED);
    let s = unsafe { &mut *s };
    s.obj = obj;
    s.calls += 1;
    if waited != PTHREAD_NO_WAIT {
        crate::probes::futex::add_wait(&mut s.wait, wait_ns, waited == PTHREAD_WAIT_FAILED);
    }
}
