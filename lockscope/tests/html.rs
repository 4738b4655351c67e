//! The HTML report in a real browser: headless Chromium opens a report of a real
//! `record` of mmap-churn; no console errors, and every chart is there and non-empty.

mod common;

use std::process::Command;

use common::*;

#[test]
fn html_report_renders_in_chromium_without_errors() {
    let _serial = serial();
    let dir = scratch("html");
    let (file, html) = (dir.join("rec.json"), dir.join("report.html"));
    run_ok(
        lockscope()
            .args(["record", "--interval", "0.5", "-o"])
            .arg(&file)
            .arg("--html")
            .arg(&html)
            .args(["--", bin(), "workload", "mmap-churn", "--seconds", "2"]),
    );
    // `report --format html` renders the same page from the file.
    let again = dir.join("again.html");
    run_ok(
        lockscope()
            .arg("report")
            .arg(&file)
            .args(["--format", "html", "-o"])
            .arg(&again),
    );
    assert_eq!(
        std::fs::read_to_string(&html).unwrap(),
        std::fs::read_to_string(&again).unwrap()
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(!page.contains("src=\"http"), "network fetch in the page");

    let chromium = |extra: &[&str]| {
        let mut c = Command::new("chromium");
        c.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=3000",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .args(extra)
        .arg(format!("file://{}", html.display()));
        c.output()
            .expect("chromium (installed by cargo xtask setup)")
    };
    let shot = dir.join("report.png");
    let out = chromium(&[
        "--window-size=1280,2400",
        &format!("--screenshot={}", shot.display()),
    ]);
    let log = String::from_utf8_lossy(&out.stderr);
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:#?}");
    assert!(
        std::fs::metadata(&shot).unwrap().len() > 10_000,
        "screenshot too small"
    );

    let dom = chromium(&["--dump-dom"]);
    let dom = String::from_utf8_lossy(&dom.stdout);
    let rec = read_json(&file);
    // Histogram bars, timeline lines and flame-graph frames, all non-empty.
    assert!(dom.matches("class=\"bar\"").count() >= 5, "histogram bars");
    assert!(
        dom.contains("class=\"timeline\"") && dom.contains("<polyline"),
        "timeline"
    );
    let flames = dom.matches("class=\"flame\"").count();
    assert!(flames >= 1, "flame graphs");
    assert!(
        page.contains("rect x=") && page.contains("mmap_lock"),
        "flame frames"
    );
    // The numbers are the report's: the top lock's count appears in the summary table.
    let top = &rec["locks"][0];
    assert!(
        dom.contains(&format!(">{}<", top["contended"])),
        "top lock count"
    );
    assert_eq!(rec["schema"], "lockscope.report/2");
    let series = rec["timeline"]["series"].as_array().unwrap();
    assert!(!series.is_empty());
}
