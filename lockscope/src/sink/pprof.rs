//! The recording as a gzipped pprof `profile.proto`, the format `go tool pprof`,
//! Pyroscope, Parca and Grafana read. Two sample types, named as Go's own mutex and block
//! profiles name them: `contentions/count` and `delay/nanoseconds`. One sample per (lock,
//! waiter stack), root last as pprof wants it (leaf first), with the lock itself as the
//! leaf frame, labelled `lock`, `lock_type` and, for user-space locks, `process`. Waits in
//! no caller are one `[no stack]` sample per lock, so the totals equal the recording's.
//! Encoded with prost from the published schema (messages below, field numbers as in
//! google/pprof `proto/profile.proto`). Pure.

use std::{collections::HashMap, io::Write as _};

use prost::Message;

use crate::aggregate::{LockEntry, Recording, WaitStats};

/// The messages of `profile.proto` that lockscope fills in.
pub mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
    }
}

/// Builds the tables: strings, functions and locations, each once.
#[derive(Default)]
struct Tables {
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    functions: Vec<proto::Function>,
    locations: Vec<proto::Location>,
    location_ids: HashMap<String, u64>,
}

impl Tables {
    fn new() -> Self {
        let mut t = Self::default();
        t.string(""); // index 0 is the empty string
        t
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.string_ids.get(s) {
            return i;
        }
        let i = self.strings.len() as i64;
        self.strings.push(s.to_owned());
        self.string_ids.insert(s.to_owned(), i);
        i
    }

    /// The location of a frame (`func+0xoff` or any text): one function per frame text.
    fn location(&mut self, frame: &str) -> u64 {
        if let Some(&id) = self.location_ids.get(frame) {
            return id;
        }
        let name = self.string(frame);
        let id = self.locations.len() as u64 + 1;
        self.functions.push(proto::Function {
            id,
            name,
            system_name: name,
        });
        self.locations.push(proto::Location {
            id,
            line: vec![proto::Line { function_id: id }],
        });
        self.location_ids.insert(frame.to_owned(), id);
        id
    }
}

fn values(s: &WaitStats) -> Vec<i64> {
    vec![
        s.count.min(i64::MAX as u64) as i64,
        s.total_ns.min(i64::MAX as u64) as i64,
    ]
}

fn labels(t: &mut Tables, l: &LockEntry) -> Vec<proto::Label> {
    let mut out = vec![
        proto::Label {
            key: t.string("lock"),
            str: t.string(&l.name),
        },
        proto::Label {
            key: t.string("lock_type"),
            str: t.string(l.lock_type.name()),
        },
    ];
    if let Some(u) = &l.user {
        out.push(proto::Label {
            key: t.string("process"),
            str: t.string(&format!("{}[{}]", u.comm, u.pid)),
        });
    }
    out
}

/// The profile message of a recording.
pub fn profile(rec: &Recording) -> proto::Profile {
    let mut t = Tables::new();
    let sample_type = vec![
        proto::ValueType {
            r#type: t.string("contentions"),
            unit: t.string("count"),
        },
        proto::ValueType {
            r#type: t.string("delay"),
            unit: t.string("nanoseconds"),
        },
    ];
    let mut samples = Vec::new();
    for l in &rec.locks {
        let lock_frame = t.location(&format!("{} [{}]", l.name, l.lock_type));
        let label = labels(&mut t, l);
        let (mut n, mut ns) = (0u64, 0u64);
        for c in &l.callers {
            // Leaf first: the lock, then the stack as stored (innermost first).
            let mut ids = vec![lock_frame];
            if c.stack.is_empty() {
                ids.push(t.location(&c.caller));
            } else {
                for f in &c.stack {
                    ids.push(t.location(f));
                }
            }
            n += c.stats.count;
            ns += c.stats.total_ns;
            samples.push(proto::Sample {
                location_id: ids,
                value: values(&c.stats),
                label: label.clone(),
            });
        }
        let rest = WaitStats {
            count: l.stats.count.saturating_sub(n),
            total_ns: l.stats.total_ns.saturating_sub(ns),
            ..Default::default()
        };
        if rest.count > 0 || rest.total_ns > 0 {
            let none = t.location("[no stack]");
            samples.push(proto::Sample {
                location_id: vec![lock_frame, none],
                value: values(&rest),
                label,
            });
        }
    }
    let comment = vec![t.string(&format!(
        "lockscope {} recording: {} ({}, tier {})",
        rec.lockscope_version, rec.target, rec.kernel, rec.tier
    ))];
    let period_type = Some(proto::ValueType {
        r#type: t.string("contentions"),
        unit: t.string("count"),
    });
    let default_sample_type = t.string("delay");
    proto::Profile {
        sample_type,
        sample: samples,
        location: t.locations,
        function: t.functions,
        string_table: t.strings,
        time_nanos: (rec.started_at_unix_s * 1e9) as i64,
        duration_nanos: (rec.duration_s * 1e9) as i64,
        period_type,
        period: 1,
        comment,
        default_sample_type,
    }
}

/// The gzipped encoding (what pprof files are).
pub fn pprof_gz(rec: &Recording) -> anyhow::Result<Vec<u8>> {
    let bytes = profile(rec).encode_to_vec();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&bytes)?;
    Ok(gz.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::recording::tests::sample_recording;

    #[test]
    fn totals_equal_the_recordings_and_the_file_decodes() {
        let rec = sample_recording();
        let gz = pprof_gz(&rec).unwrap();
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut raw).unwrap();
        let p = proto::Profile::decode(&raw[..]).unwrap();
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(s(p.sample_type[0].r#type), "contentions");
        assert_eq!(s(p.sample_type[1].unit), "nanoseconds");
        let sum = |k: usize| -> i64 { p.sample.iter().map(|x| x.value[k]).sum() };
        let want_n: u64 = rec.locks.iter().map(|l| l.stats.count).sum();
        let want_ns: u64 = rec.locks.iter().map(|l| l.stats.total_ns).sum();
        assert_eq!((sum(0) as u64, sum(1) as u64), (want_n, want_ns));
        // Every location id exists; the leaf is the lock.
        for x in &p.sample {
            for id in &x.location_id {
                assert!(p.location.iter().any(|l| l.id == *id));
            }
            let leaf = &p.location[x.location_id[0] as usize - 1];
            let f = &p.function[leaf.line[0].function_id as usize - 1];
            assert!(s(f.name).ends_with(']'), "{}", s(f.name));
            assert!(x.label.iter().any(|l| s(l.key) == "lock"));
        }
        assert_eq!(p.string_table[0], "");
    }
}
