//! A probe breakpoint's request scope: the W3C baggage entries a request must
//! carry for the point to hold. The probe libraries evaluate it; the daemon
//! only checks that every entry is one a `baggage` header can carry as is.

use stepd_proto::v1::BaggageEntry;

/// The most entries one breakpoint may require.
pub const MAX_ENTRIES: usize = 8;
/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// The longest value, in bytes.
pub const MAX_VALUE_BYTES: usize = 256;

/// An HTTP token character (RFC 9110 `tchar`), what a W3C baggage key is made of.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A W3C `baggage-octet` that needs no percent-decoding: `%` is left out so
/// the value reads the same in a header and in the program's baggage API.
fn is_plain_value_octet(b: u8) -> bool {
    matches!(b, 0x21 | 0x23..=0x24 | 0x26..=0x2B | 0x2D..=0x3A | 0x3C..=0x5B | 0x5D..=0x7E)
}

/// What is wrong with a key, if anything.
pub fn key_problem(key: &str) -> Option<String> {
    if key.is_empty() {
        return Some("must not be empty".into());
    }
    if key.len() > MAX_KEY_BYTES {
        return Some(format!(
            "{} bytes is longer than the limit of {MAX_KEY_BYTES}",
            key.len()
        ));
    }
    if let Some(c) = key.bytes().find(|b| !is_tchar(*b)) {
        return Some(format!(
            "{:?} is not allowed in a W3C baggage key (letters, digits and !#$%&'*+-.^_`|~)",
            char::from(c)
        ));
    }
    None
}

/// What is wrong with a value, if anything.
pub fn value_problem(value: &str) -> Option<String> {
    if value.is_empty() {
        return Some("must not be empty".into());
    }
    if value.len() > MAX_VALUE_BYTES {
        return Some(format!(
            "{} bytes is longer than the limit of {MAX_VALUE_BYTES}",
            value.len()
        ));
    }
    if let Some(c) = value
        .chars()
        .find(|c| !c.is_ascii() || !is_plain_value_octet(*c as u8))
    {
        return Some(format!(
            "{c:?} is not allowed: use printable ASCII without space, '\"', ',', ';', '\\' or '%'"
        ));
    }
    None
}

/// Every problem of `entries` as (field under `probe.baggage`, description).
pub fn problems(entries: &[BaggageEntry]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if entries.len() > MAX_ENTRIES {
        out.push((
            "probe.baggage".into(),
            format!(
                "{} entries is more than the limit of {MAX_ENTRIES}",
                entries.len()
            ),
        ));
        return out;
    }
    for (i, entry) in entries.iter().enumerate() {
        if let Some(problem) = key_problem(&entry.key) {
            out.push((format!("probe.baggage[{i}].key"), problem));
        } else if entries[..i].iter().any(|e| e.key == entry.key) {
            out.push((
                format!("probe.baggage[{i}].key"),
                format!("{:?} is already required by an earlier entry", entry.key),
            ));
        }
        if let Some(problem) = value_problem(&entry.value) {
            out.push((format!("probe.baggage[{i}].value"), problem));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, value: &str) -> BaggageEntry {
        BaggageEntry {
            key: key.into(),
            value: value.into(),
        }
    }

    fn fields(entries: &[BaggageEntry]) -> Vec<String> {
        problems(entries).into_iter().map(|(f, _)| f).collect()
    }

    #[test]
    fn header_ready_entries_pass() {
        assert!(fields(&[entry("debug-session", "ana")]).is_empty());
        assert!(fields(&[entry("a.b_c~1", "x/y:z=1+2&3")]).is_empty());
    }

    #[test]
    fn bad_keys_and_values_name_their_entry() {
        assert_eq!(
            fields(&[
                entry("ok", "v"),
                entry("", "v"),
                entry("sp ace", "v"),
                entry("k", ""),
                entry("k2", "a,b"),
                entry("k3", "50%"),
                entry("k4", "é"),
                entry("ok", "again"),
            ]),
            [
                "probe.baggage[1].key",
                "probe.baggage[2].key",
                "probe.baggage[3].value",
                "probe.baggage[4].value",
                "probe.baggage[5].value",
                "probe.baggage[6].value",
                "probe.baggage[7].key",
            ]
        );
    }

    #[test]
    fn limits_are_enforced() {
        assert_eq!(
            fields(&[entry(&"k".repeat(MAX_KEY_BYTES + 1), "v")]),
            ["probe.baggage[0].key"]
        );
        assert_eq!(
            fields(&[entry("k", &"v".repeat(MAX_VALUE_BYTES + 1))]),
            ["probe.baggage[0].value"]
        );
        let many: Vec<_> = (0..=MAX_ENTRIES)
            .map(|i| entry(&format!("k{i}"), "v"))
            .collect();
        assert_eq!(fields(&many), ["probe.baggage"]);
    }
}
