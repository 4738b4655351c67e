//! `serve --redact-addresses`: kernel addresses (`0xffff` and 12 more hex digits, the
//! upper half where x86-64 and arm64 kernels live) become opaque names. The name is a
//! keyed hash of the address, with a key drawn at start: stable for one `serve`, so that
//! each lock keeps its series, but it tells nothing of the kernel's memory layout.

use std::hash::{BuildHasher as _, RandomState};

use crate::aggregate::Recording;

#[derive(Debug, Default)]
pub struct Redactor {
    key: RandomState,
}

impl Redactor {
    pub fn new() -> Self {
        Self::default()
    }

    /// `kaddr-` and 12 hex digits (48 bits: thousands of locks do not collide).
    pub fn name(&self, addr: u64) -> String {
        format!("kaddr-{:012x}", self.key.hash_one(addr) & 0xffff_ffff_ffff)
    }

    /// `text` with every kernel address replaced.
    pub fn text(&self, text: &str) -> String {
        const PREFIX: &str = "0xffff";
        const LEN: usize = 18;
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(i) = rest.find(PREFIX) {
            let cand = &rest[i..];
            let hex = cand.get(2..LEN).filter(|h| {
                h.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            });
            let more = cand
                .as_bytes()
                .get(LEN)
                .is_some_and(|b| b.is_ascii_hexdigit());
            match hex.map(|h| u64::from_str_radix(h, 16)) {
                Some(Ok(addr)) if !more => {
                    out.push_str(&rest[..i]);
                    out.push_str(&self.name(addr));
                    rest = &rest[i + LEN..];
                }
                _ => {
                    out.push_str(&rest[..i + PREFIX.len()]);
                    rest = &rest[i + PREFIX.len()..];
                }
            }
        }
        out.push_str(rest);
        out
    }

    /// Every string of the recording redacted (through its JSON form, so that no field
    /// added later is missed).
    pub fn recording(&self, rec: &mut Recording) -> anyhow::Result<()> {
        let mut v = serde_json::to_value(&*rec)?;
        self.value(&mut v);
        *rec = serde_json::from_value(v)?;
        Ok(())
    }

    fn value(&self, v: &mut serde_json::Value) {
        use serde_json::Value;
        match v {
            Value::String(s) if s.contains("0xffff") => *s = self.text(s),
            Value::Array(a) => a.iter_mut().for_each(|x| self.value(x)),
            Value::Object(o) => o.values_mut().for_each(|x| self.value(x)),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_addresses_become_stable_opaque_names() {
        let r = Redactor::new();
        let a = "0xffff888627c2fcc0";
        let t = r.text(&format!(
            "spinlock {a} and mmap_lock.wait_lock of x[1] at {a}"
        ));
        assert!(!t.contains("0xffff"), "{t}");
        let name = r.name(0xffff_8886_27c2_fcc0);
        assert_eq!(
            t,
            format!("spinlock {name} and mmap_lock.wait_lock of x[1] at {name}")
        );
        assert_ne!(r.name(0xffff_8886_27c2_fcc8), name);
        assert_ne!(
            Redactor::new().name(0xffff_8886_27c2_fcc0),
            name,
            "keyed per start"
        );
        // User addresses, symbols with offsets, short or longer numbers stay.
        for keep in [
            "futex 0x55d1c0a0 of db[7]",
            "do_mmap+0xffff",
            "0xffff12",
            "0xffff888627c2fcc0a",
        ] {
            assert_eq!(r.text(keep), keep);
        }
    }

    #[test]
    fn every_string_of_a_recording_is_redacted() {
        let mut rec = crate::aggregate::recording::tests::sample_recording();
        let before = serde_json::to_string(&rec).unwrap();
        assert!(before.contains("0xffff"));
        Redactor::new().recording(&mut rec).unwrap();
        let after = serde_json::to_string(&rec).unwrap();
        assert!(!after.contains("0xffff"), "{after}");
        assert_eq!(
            rec.locks.len(),
            serde_json::from_str::<Recording>(&before)
                .unwrap()
                .locks
                .len()
        );
    }
}
