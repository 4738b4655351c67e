//! The PREEMPT_RT guest's ptrace + cyclictest step (`ptrace-rt`): the scenario of the
//! original latency report, checked against cyclictest's own maxima.

use serde_json::Value;

use super::PTRACE_RT_THRESHOLD_NS;
use super::log::GuestLog;
use std::collections::BTreeMap;

/// `tracee pids: 12 13` of the ptrace-storm workload.
pub(super) fn tracee_pids(out: &str) -> Vec<u64> {
    out.lines()
        .find_map(|l| l.trim().strip_prefix("tracee pids:"))
        .map(|p| {
            p.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// `(tid, max us)` of every thread in cyclictest's summary (`T: 0 ( 123) ... Max: 456`).
pub(super) fn cyclictest_maxima(out: &str) -> Vec<(u64, u64)> {
    let mut found: Vec<(u64, u64)> = Vec::new();
    for l in out.lines().filter(|l| l.trim_start().starts_with("T:")) {
        let tid = l
            .split_once('(')
            .and_then(|(_, r)| r.split_once(')'))
            .and_then(|(t, _)| t.trim().parse().ok());
        let max = l
            .split_once("Max:")
            .and_then(|(_, r)| r.split_whitespace().next())
            .and_then(|m| m.parse().ok());
        if let (Some(tid), Some(max)) = (tid, max) {
            // cyclictest rewrites its lines while running: the last one counts.
            found.retain(|(t, _)| *t != tid);
            found.push((tid, max));
        }
    }
    found
}

/// The PREEMPT_RT guest's ptrace + cyclictest step (the original latency report's
/// scenario): the tracees' `pi_lock`s are named with their waits, every spike over the
/// threshold is recorded or counted lost and either carries the lock activity in its
/// window or says none overlapped, and starvation episodes are well-formed.
pub(super) fn check_ptrace_rt(
    g: &GuestLog,
    lines: &mut Vec<String>,
    check: &mut impl FnMut(bool, String),
) {
    let step = "ptrace-rt";
    let Some((_, out)) = g.steps.get(step) else {
        check(false, format!("guest ran no {step} step"));
        return;
    };
    let Some(rec) = g.recording("ptrace-rt.json", check) else {
        return;
    };
    let num = |v: &Value| v.as_u64().unwrap_or(0);
    let lost = |key: &str| rec["lost"].get(key).and_then(Value::as_u64);

    // The storm ran inside the recording: its own counts bound what was seen.
    let inside = out.contains("storm inside recording: yes");
    check(
        inside,
        format!("{step}: the ptrace storm ran inside the recording"),
    );
    // `peeks: 7352 (3602/s)`
    let count = |key: &str| {
        out.lines()
            .find_map(|l| l.trim().strip_prefix(key)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
    };
    let (peeks, detaches) = (count("peeks"), count("detaches"));
    let tracees = tracee_pids(out);
    check(
        tracees.len() == 2 && peeks.is_some_and(|p| p > 0),
        format!("{step}: storm printed 2 tracee pids ({tracees:?}) and peeks > 0 ({peeks:?})"),
    );
    let locks = rec["locks"].as_array().cloned().unwrap_or_default();
    let (mut waits_all, mut deep_all, mut proxy_all) = (0, 0, 0);
    for pid in &tracees {
        let name = format!("pi_lock of lockscope[{pid}]");
        let entries: Vec<&Value> = locks
            .iter()
            .filter(|l| l["name"] == name.as_str())
            .collect();
        let waits: u64 = entries.iter().map(|l| num(&l["contended"])).sum();
        let deep_waits: u64 = entries
            .iter()
            .filter(|l| l["tier"] == "deep")
            .map(|l| num(&l["contended"]))
            .sum();
        let proxy: u64 = entries
            .iter()
            .map(|l| num(&l["wait_task"]["acquisitions"]))
            .sum();
        let per_waiter: u64 = entries
            .iter()
            .filter_map(|l| l["wait_task"]["waiters"].as_array())
            .flatten()
            .map(|w| num(&w["acquisitions"]))
            .sum();
        lines.push(format!(
            "{step}: {name}: {} entries, waits {waits} (deep {deep_waits}), \
             sched_wait_task proxy acquisitions {proxy}",
            entries.len()
        ));
        check(
            !entries.is_empty()
                && entries
                    .iter()
                    .all(|l| l["owner"]["field"] == "pi_lock" && l["type"] == "spinlock"),
            format!("{step}: the recording names `{name}` (a spinlock, owner field pi_lock)"),
        );
        check(
            waits + proxy > 0 && per_waiter == proxy,
            format!(
                "{step}: {name} has waits ({waits} exact, {proxy} proxy; per-waiter sum \
                 {per_waiter})"
            ),
        );
        waits_all += waits;
        deep_all += deep_waits;
        proxy_all += proxy;
    }
    // The deep tier sees the tracers spin on the tracees' pi_lock exactly.
    check(
        rec["spin"]["tier"] == "deep" && deep_all > 0,
        format!(
            "{step}: spin tier deep ({}) with exact slowpath waits on the tracees' pi_lock \
             ({deep_all})",
            rec["spin"]["tier"]
        ),
    );
    let rounds = peeks.zip(detaches).map(|(p, d)| p + d);
    check(
        rounds.is_some_and(|r| proxy_all >= r),
        format!(
            "{step}: proxy acquisitions of the tracees' pi_lock {proxy_all} >= peeks + \
             detaches ({peeks:?} + {detaches:?})"
        ),
    );
    check(
        lost("wait_task_map_full") == Some(0),
        format!(
            "{step}: lost.wait_task_map_full is 0 (got {:?})",
            lost("wait_task_map_full")
        ),
    );

    // Spikes: lockscope's own, all over the threshold, recorded or counted lost.
    let rt = &rec["rt_summary"];
    let threshold = rt["latency_threshold_ns"].as_u64();
    check(
        threshold == Some(PTRACE_RT_THRESHOLD_NS),
        format!("{step}: latency threshold {threshold:?} ns as asked ({PTRACE_RT_THRESHOLD_NS})"),
    );
    let threshold = threshold.unwrap_or(PTRACE_RT_THRESHOLD_NS);
    let spikes = rec["latency_spikes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let own: Vec<&Value> = spikes
        .iter()
        .filter(|s| s["source"] == "lockscope")
        .collect();
    let theirs: Vec<&Value> = spikes
        .iter()
        .filter(|s| s["source"] == "cyclictest")
        .collect();
    let over = rt["spikes_over_threshold"].as_u64();
    let lost_spikes = lost("rt_ringbuf_lost_spikes");
    check(
        over.is_some() && lost_spikes.map(|l| l + own.len() as u64) == over,
        format!(
            "{step}: recorded spikes {} + lost {lost_spikes:?} == spikes over the threshold \
             {over:?}",
            own.len()
        ),
    );
    // lockscope times every wakeup of the real-time threads; whether any is over the
    // threshold is the guest's business (with the libc uprobes of earlier versions, ~50
    // were; without them, none in some runs), but cyclictest's own maxima always are
    // under TCG, so the recording must hold spikes from one source or the other.
    check(
        rt["wakeups_timed"].as_u64().unwrap_or(0) > 0 && !(own.is_empty() && theirs.is_empty()),
        format!(
            "{step}: {} wakeups timed; spikes over {} us recorded ({} timed by lockscope, {} \
             from cyclictest)",
            rt["wakeups_timed"],
            threshold / 1000,
            own.len(),
            theirs.len()
        ),
    );
    check(
        spikes
            .iter()
            .all(|s| num(&s["latency_ns"]) >= threshold && s["task"]["comm"] == "cyclictest"),
        format!("{step}: every spike is a cyclictest thread's, at or over the threshold"),
    );
    for key in ["rt_ringbuf_lost_activity", "rt_malformed_records"] {
        check(
            lost(key) == Some(0),
            format!("{step}: lost.{key} is 0 (got {:?})", lost(key)),
        );
    }
    // cyclictest's own maxima: one spike per thread over the threshold.
    let maxima = cyclictest_maxima(out);
    let over_ct: Vec<&(u64, u64)> = maxima
        .iter()
        .filter(|(_, max)| max * 1000 >= threshold)
        .collect();
    check(
        maxima.len() == 2
            && theirs.len() == over_ct.len()
            && rt["cyclictest_threads"].as_u64() == Some(over_ct.len() as u64)
            && over_ct.iter().all(|(tid, max)| {
                theirs
                    .iter()
                    .any(|s| s["task"]["tid"] == *tid && num(&s["latency_ns"]) == max * 1000)
            }),
        format!(
            "{step}: cyclictest's threads (tid, max us) {maxima:?}: one spike with its max for \
             each over the threshold ({} recorded)",
            theirs.len()
        ),
    );
    // lockscope times a wakeup from when the timer was due (the time cyclictest asked
    // for) to the switch-in: within what cyclictest measures for it, so no spike of a
    // thread exceeds that thread's max (truncated to whole us); the timer's lateness is
    // a part of the latency.
    let beyond: Vec<String> = own
        .iter()
        .filter(|s| {
            let lat = num(&s["latency_ns"]);
            let over_max = maxima
                .iter()
                .any(|(tid, max)| s["task"]["tid"] == *tid && lat >= (max + 1) * 1000);
            over_max || s["timer_late_ns"].as_u64().is_none_or(|l| l > lat)
        })
        .map(|s| s.to_string())
        .collect();
    check(
        beyond.is_empty(),
        format!(
            "{step}: lockscope's spikes lie within cyclictest's maxima {maxima:?}, timer \
             lateness within the latency (outside: {beyond:?})"
        ),
    );
    // Correlation: overlaps inside the window, the explained rule, and the report
    // saying so for every spike without overlaps.
    let mut bad = Vec::new();
    let mut overlapped: BTreeMap<String, u64> = BTreeMap::new();
    for s in &spikes {
        let lat = num(&s["latency_ns"]);
        let overlaps = s["overlaps"].as_array().cloned().unwrap_or_default();
        let sum: u64 = overlaps.iter().map(|o| num(&o["overlap_ns"])).sum();
        for o in &overlaps {
            let ns = num(&o["overlap_ns"]);
            let lock = o["lock"].as_str().unwrap_or("");
            if ns == 0 || ns > lat || lock.is_empty() {
                bad.push(format!("overlap {o} outside a {lat} ns window"));
            }
            *overlapped
                .entry(format!("{} {}", o["kind"].as_str().unwrap_or("?"), lock))
                .or_default() += 1;
        }
        if s["explained"] == true && 2 * sum < lat {
            bad.push(format!("explained with {sum} of {lat} ns"));
        }
        if s["explained"] == false && overlaps.iter().any(|o| 2 * num(&o["overlap_ns"]) >= lat) {
            bad.push(format!(
                "one overlap covers half of {lat} ns, not explained"
            ));
        }
    }
    check(
        bad.is_empty(),
        format!("{step}: overlaps lie in their windows, explained follows the rule {bad:?}"),
    );
    let silent = |timed: bool| {
        spikes
            .iter()
            .filter(|s| s["overlaps"].as_array().is_none_or(Vec::is_empty))
            .filter(|s| (s["ts_ns"] != 0) == timed)
            .count()
    };
    let (none, untimed) = (silent(true), silent(false));
    let said = out.matches("no lock activity overlapped").count();
    let said_untimed = out
        .matches("not correlated: cyclictest gives no time")
        .count();
    check(
        said == none && said_untimed == untimed,
        format!(
            "{step}: the report says `no lock activity overlapped` for each of the {none} \
             spikes without overlaps (said {said}; {untimed} untimed, said {said_untimed})"
        ),
    );

    // Starvation episodes: well-formed for their tier.
    let eps = rec["starvation_episodes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let spin = &rec["spin"];
    let starve_ns = rt["starvation_threshold_ns"]
        .as_u64()
        .or(spin["threshold_ns"].as_u64())
        .unwrap_or(u64::MAX);
    let min_foreign = rt["starvation_acquisitions"]
        .as_u64()
        .or(spin["min_foreign"].as_u64())
        .unwrap_or(u64::MAX);
    let hold_ns = spin["hold_threshold_ns"].as_u64().unwrap_or(u64::MAX);
    let malformed: Vec<String> = eps
        .iter()
        .filter(|e| {
            let deep = e["tier"] == "deep";
            let tier_ok = if deep {
                e["probable"] == false
            } else {
                e["tier"] == "tracepoint" && e["probable"] == true
            };
            let size_ok = match e["kind"].as_str() {
                Some("starvation") => {
                    num(&e["wait_ns"]) >= starve_ns
                        && num(&e["foreign_acquisitions"]) >= min_foreign
                }
                Some("long-hold") => num(&e["wait_ns"]) >= hold_ns,
                _ => false,
            };
            !(tier_ok && size_ok && e["waiter"]["pid"].as_u64().is_some())
        })
        .map(|e| e.to_string())
        .collect();
    let deep_eps = eps.iter().filter(|e| e["tier"] == "deep").count();
    let starvations = eps.iter().filter(|e| e["kind"] == "starvation").count();
    let on_tracees = eps
        .iter()
        .filter(|e| {
            tracees
                .iter()
                .any(|p| e["lock"] == format!("pi_lock of lockscope[{p}]").as_str())
        })
        .count();
    check(
        malformed.is_empty(),
        format!(
            "{step}: {} starvation episodes well-formed (deep: exact, tracepoint: probable; \
             wait >= {starve_ns} ns with >= {min_foreign} foreign acquisitions, or a hold >= \
             {hold_ns} ns) {malformed:?}",
            eps.len()
        ),
    );

    let max_us = spikes
        .iter()
        .map(|s| num(&s["latency_ns"]))
        .max()
        .unwrap_or(0)
        / 1000;
    let explained = spikes.iter().filter(|s| s["explained"] == true).count();
    lines.push(format!(
        "{step}: {} spikes over {} us ({} lockscope, {} cyclictest; max {max_us} us), {explained} \
         explained, {} with overlaps, {none} with none; tracee pi_lock waits {waits_all} ({deep_all} exact), proxy \
         {proxy_all} (peeks {peeks:?} + detaches {detaches:?}); {} episodes ({starvations} \
         starvation, {} long-hold; {deep_eps} deep; {on_tracees} on the tracees' pi_lock)",
        spikes.len(),
        threshold / 1000,
        own.len(),
        theirs.len(),
        spikes.len() - none - untimed,
        eps.len(),
        eps.len() - starvations
    ));
    for (what, n) in &overlapped {
        lines.push(format!("{step}: overlapped {n}x: {what}"));
    }
}
