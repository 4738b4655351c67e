//! The rwsem deep tier in the guests: lock events of mmap-churn (steals, optimistic
//! spins, queued reads and writes, and the write-slowpath identity) and mmap-handoff
//! (handoffs); on PREEMPT_RT, every one n/a. Beside the steps `churn` and `handoff`.

use serde_json::Value;

use super::GuestKernel;
use super::log::GuestLog;

pub(super) fn check_rwsem(
    k: &GuestKernel,
    g: &GuestLog,
    lines: &mut Vec<String>,
    check: &mut impl FnMut(bool, String),
) {
    if let Some(rec) = g.recording("churn.json", check) {
        let r = mmap_lock_events(&rec, "rwsem:R");
        let w = mmap_lock_events(&rec, "rwsem:W");
        lines.push(format!("churn mmap_lock R events: {}", short(&r)));
        lines.push(format!("churn mmap_lock W events: {}", short(&w)));
        lines.push(format!(
            "churn system: {}",
            short(&rec.pointer("/rwsem_events/system").cloned())
        ));
        if k.rt {
            let system = rec
                .pointer("/rwsem_events/system")
                .and_then(Value::as_object);
            check(
                system.is_some_and(|s| s.len() == 16 && s.values().all(Value::is_null)),
                "PREEMPT_RT: every rwsem_* system count is n/a (null), none is 0".into(),
            );
            let steal = event(&r, "rlock_steal");
            check(
                steal.is_none(),
                format!("PREEMPT_RT: rlock_steal is n/a (got {steal:?})"),
            );
        } else {
            for (side, name) in [
                (&r, "rlock_steal"),
                (&w, "opt_lock"),
                (&r, "rlock"),
                (&w, "wlock"),
            ] {
                let v = event(side, name);
                check(
                    v.is_some_and(|v| v > 0),
                    format!("churn: mmap_lock {name} > 0 (got {v:?})"),
                );
            }
            // Every write slowpath either spins to the lock or fails to (and queues).
            let sys = |n: &str| {
                rec.pointer(&format!("/rwsem_events/system/rwsem_{n}"))
                    .and_then(Value::as_u64)
            };
            let (opt_fail, wlock, wlock_fail) = (sys("opt_fail"), sys("wlock"), sys("wlock_fail"));
            check(
                opt_fail.is_some() && opt_fail == wlock.zip(wlock_fail).map(|(a, b)| a + b),
                format!(
                    "churn: rwsem_opt_fail ({opt_fail:?}) == rwsem_wlock + rwsem_wlock_fail \
                     ({wlock:?} + {wlock_fail:?})"
                ),
            );
        }
    }

    if let Some(rec) = g.recording("handoff.json", check) {
        let r = mmap_lock_events(&rec, "rwsem:R");
        let w = mmap_lock_events(&rec, "rwsem:W");
        let rh = event(&r, "rlock_handoff");
        let wh = event(&w, "wlock_handoff");
        lines.push(format!("handoff mmap_lock R events: {}", short(&r)));
        lines.push(format!("handoff mmap_lock W events: {}", short(&w)));
        if k.rt {
            check(
                rh.is_none() && wh.is_none(),
                format!("PREEMPT_RT: handoffs are n/a (got {rh:?}, {wh:?})"),
            );
        } else {
            check(
                rh.unwrap_or(0) + wh.unwrap_or(0) > 0,
                format!("handoff: rlock_handoff + wlock_handoff > 0 (got {rh:?} + {wh:?})"),
            );
        }
    }
}

/// The `events` object of the traced process's `mmap_lock` entry of this type.
pub(super) fn mmap_lock_events(rec: &Value, lock_type: &str) -> Option<Value> {
    rec.get("locks")?
        .as_array()?
        .iter()
        .filter(|l| l.get("type").and_then(Value::as_str) == Some(lock_type))
        .filter(|l| {
            l.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| n.starts_with("mmap_lock of lockscope"))
        })
        .find_map(|l| l.get("events").cloned())
}

pub(super) fn event(events: &Option<Value>, name: &str) -> Option<u64> {
    events.as_ref()?.get(name)?.as_u64()
}

pub(super) fn short(v: &Option<Value>) -> String {
    v.as_ref()
        .map(|v| v.to_string())
        .unwrap_or_else(|| "none".into())
}
