//! How lockscope writes durations and rates: the report's perf-like units and the live
//! view's compact cells. Pure.

/// A duration in the unit that keeps 1-4 significant digits, like perf.
pub fn fmt_ns(ns: u64) -> String {
    let v = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.2} us", v / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2} ms", v / 1e6)
    } else {
        format!("{:.2} s", v / 1e9)
    }
}

/// A per-second count, compact: `0`, `12.5`, `812`, `12.3k`, `4.56M`.
pub fn fmt_rate(v: f64) -> String {
    if !v.is_finite() || v <= 0.0 {
        "0".to_owned()
    } else if v < 10.0 {
        format!("{v:.1}")
    } else if v < 1e3 {
        format!("{v:.0}")
    } else if v < 1e6 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{:.2}M", v / 1e6)
    }
}

/// A duration in nanoseconds, compact: `0`, `850ns`, `12.3us`, `4.56ms`, `1.20s`.
pub fn fmt_dur(ns: f64) -> String {
    if !ns.is_finite() || ns <= 0.0 {
        "0".to_owned()
    } else if ns < 999.5 {
        format!("{ns:.0}ns")
    } else if ns < 999_500.0 {
        format!("{}us", three_digits(ns / 1e3))
    } else if ns < 999_500_000.0 {
        format!("{}ms", three_digits(ns / 1e6))
    } else {
        format!("{}s", three_digits(ns / 1e9))
    }
}

/// Three significant digits: `4.56`, `12.3`, `812`.
fn three_digits(v: f64) -> String {
    if v < 9.995 {
        format!("{v:.2}")
    } else if v < 99.95 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// An interval as given on the command line: `500ms`, `1s`, `2.5s`, `1m`.
pub fn fmt_interval(secs: f64) -> String {
    if secs >= 60.0 && (secs % 60.0).abs() < 1e-9 {
        format!("{}m", secs / 60.0)
    } else if secs >= 1.0 {
        let s = format!("{secs:.1}");
        format!("{}s", s.trim_end_matches(".0"))
    } else {
        format!("{:.0}ms", secs * 1e3)
    }
}
