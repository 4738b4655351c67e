//! A recording file as `lockscope report` reads it: parsed and checked, then rendered in
//! every format. Any panic is a bug: a bad file must give `lockscope: FILE: ...`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockscope::{
    aggregate::{Recording, rows::GroupBy},
    sink::{
        folded::Weight,
        report::{Format, ReportOptions, render},
    },
};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(rec) = Recording::from_json(text) else {
        return;
    };
    for format in [
        Format::Table,
        Format::Csv,
        Format::Json,
        Format::Html,
        Format::Folded,
    ] {
        for by in [GroupBy::Lock, GroupBy::Caller, GroupBy::Task, GroupBy::Type] {
            let opts = ReportOptions {
                format,
                by,
                limit: 0,
                weight: Weight::Count,
                ..Default::default()
            };
            let _ = render(&rec, &opts);
        }
    }
    let _ = lockscope::sink::pprof::pprof_gz(&rec);
});
