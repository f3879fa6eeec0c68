//! RFC 8785 canonical JSON and the `sha256:` digests built on it.
//!
//! Every digest wavegate shows a reviewer is computed here, so that the same
//! value always yields the same bytes: object keys sorted by UTF-16 code
//! units, no insignificant whitespace, numbers in ECMAScript form.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// The prefix of every digest string.
pub const DIGEST_PREFIX: &str = "sha256:";

/// Canonical JSON text of `value` (RFC 8785).
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

/// Canonical JSON written straight into SHA-256, for documents too large to
/// render into a string first. Writers of known shapes use it key by key.
pub struct DigestWriter(Sha256);

impl DigestWriter {
    pub fn new() -> Self {
        Self(Sha256::new())
    }

    pub fn raw(&mut self, text: &str) -> &mut Self {
        self.0.update(text.as_bytes());
        self
    }

    /// `"key":` — keys must be written in canonical (sorted) order by the caller.
    pub fn key(&mut self, key: &str) -> &mut Self {
        write_string(self, key);
        self.raw(":")
    }

    pub fn value(&mut self, value: &Value) -> &mut Self {
        write_value(self, value);
        self
    }

    pub fn object(&mut self, map: &serde_json::Map<String, Value>) -> &mut Self {
        write_object(self, map);
        self
    }

    pub fn string(&mut self, text: &str) -> &mut Self {
        write_string(self, text);
        self
    }

    pub fn finish(self) -> String {
        format!("{DIGEST_PREFIX}{}", hex::encode(self.0.finalize()))
    }
}

impl Default for DigestWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Write for DigestWriter {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.update(s.as_bytes());
        Ok(())
    }
}

/// `sha256:<hex>` of the canonical JSON of anything serialisable.
pub fn digest_of<T: Serialize + ?Sized>(value: &T) -> String {
    let value = serde_json::to_value(value).expect("digest input serialises to JSON");
    digest_value(&value)
}

/// `sha256:<hex>` of the canonical JSON of `value`.
pub fn digest_value(value: &Value) -> String {
    let mut writer = DigestWriter::new();
    writer.value(value);
    writer.finish()
}

/// Whether `text` is a well-formed digest: `sha256:` and 64 lowercase hex digits.
pub fn is_digest(text: &str) -> bool {
    text.strip_prefix(DIGEST_PREFIX).is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The first 12 hex digits of a digest, for tables where the full one is also shown.
pub fn short_digest(digest: &str) -> &str {
    let hex = digest.strip_prefix(DIGEST_PREFIX).unwrap_or(digest);
    &hex[..hex.len().min(12)]
}

fn write_value<W: std::fmt::Write>(out: &mut W, value: &Value) {
    match value {
        Value::Null => {
            let _ = out.write_str("null");
        }
        Value::Bool(b) => {
            let _ = out.write_str(if *b { "true" } else { "false" });
        }
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            let _ = out.write_char('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    let _ = out.write_char(',');
                }
                write_value(out, item);
            }
            let _ = out.write_char(']');
        }
        Value::Object(map) => write_object(out, map),
    }
}

fn write_object<W: std::fmt::Write>(out: &mut W, map: &serde_json::Map<String, Value>) {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
    let _ = out.write_char('{');
    for (i, key) in keys.into_iter().enumerate() {
        if i > 0 {
            let _ = out.write_char(',');
        }
        write_string(out, key);
        let _ = out.write_char(':');
        write_value(out, &map[key]);
    }
    let _ = out.write_char('}');
}

fn write_string<W: std::fmt::Write>(out: &mut W, s: &str) {
    let _ = out.write_char('"');
    let mut plain = 0;
    for (i, c) in s.char_indices() {
        let escape = match c {
            '"' => "\\\"",
            '\\' => "\\\\",
            '\u{8}' => "\\b",
            '\u{c}' => "\\f",
            '\n' => "\\n",
            '\r' => "\\r",
            '\t' => "\\t",
            c if (c as u32) < 0x20 => "",
            _ => continue,
        };
        let _ = out.write_str(&s[plain..i]);
        if escape.is_empty() {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            let _ = out.write_str(escape);
        }
        plain = i + c.len_utf8();
    }
    let _ = out.write_str(&s[plain..]);
    let _ = out.write_char('"');
}

fn write_number<W: std::fmt::Write>(out: &mut W, n: &serde_json::Number) {
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else {
        write_f64(out, n.as_f64().unwrap_or(0.0));
    }
}

/// ECMAScript `Number.prototype.toString` for a finite double (RFC 8785 §3.2.2.3).
fn write_f64<W: std::fmt::Write>(out: &mut W, f: f64) {
    if f == 0.0 {
        let _ = out.write_char('0');
        return;
    }
    if f < 0.0 {
        let _ = out.write_char('-');
    }
    // Rust's `{:e}` prints the shortest digits that round-trip: "d.ddde±x".
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let k = digits.len() as i32;
    let n = exp.parse::<i32>().expect("exponent is an integer") + 1;
    if k <= n && n <= 21 {
        let _ = out.write_str(&digits);
        let _ = out.write_str(&"0".repeat((n - k) as usize));
    } else if 0 < n && n <= 21 {
        let _ = out.write_str(&digits[..n as usize]);
        let _ = out.write_char('.');
        let _ = out.write_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        let _ = out.write_str("0.");
        let _ = out.write_str(&"0".repeat((-n) as usize));
        let _ = out.write_str(&digits);
    } else {
        let _ = out.write_str(&digits[..1]);
        if k > 1 {
            let _ = out.write_char('.');
            let _ = out.write_str(&digits[1..]);
        }
        let e = n - 1;
        let _ = write!(out, "e{}{}", if e >= 0 { "+" } else { "-" }, e.abs());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn num(text: &str) -> String {
        canonical_json(&serde_json::from_str(text).unwrap())
    }

    #[test]
    fn keys_are_sorted_and_whitespace_dropped() {
        let v = json!({"b": [1, {"z": null, "a": true}], "a": "x"});
        assert_eq!(
            canonical_json(&v),
            r#"{"a":"x","b":[1,{"a":true,"z":null}]}"#
        );
    }

    #[test]
    fn keys_sort_by_utf16_code_units() {
        // From RFC 8785's example: U+FB33 sorts before U+1F600 in UTF-8 but after it in UTF-16.
        let v = json!({"\u{fb33}": 1, "\u{1f600}": 2, "\r": 3, "1": 4, "\u{20ac}": 5});
        assert_eq!(
            canonical_json(&v),
            "{\"\\r\":3,\"1\":4,\"\u{20ac}\":5,\"\u{1f600}\":2,\"\u{fb33}\":1}"
        );
    }

    #[test]
    fn numbers_follow_ecmascript() {
        assert_eq!(num("1.0"), "1");
        assert_eq!(num("-0.0"), "0");
        assert_eq!(num("1e21"), "1e+21");
        assert_eq!(num("1e20"), "100000000000000000000");
        assert_eq!(num("0.000001"), "0.000001");
        assert_eq!(num("1e-7"), "1e-7");
        assert_eq!(num("123.456"), "123.456");
        assert_eq!(num("4.5e-300"), "4.5e-300");
        assert_eq!(num("9007199254740993"), "9007199254740993");
        assert_eq!(num("333333333.33333329"), "333333333.3333333");
    }

    #[test]
    fn strings_escape_only_what_json_requires() {
        let v = json!("tab\there \"q\" \u{1} é");
        assert_eq!(canonical_json(&v), "\"tab\\there \\\"q\\\" \\u0001 é\"");
    }

    #[test]
    fn digest_is_stable_and_well_formed() {
        let a = digest_value(&json!({"x": 1, "y": [true]}));
        let b = digest_value(&json!({"y": [true], "x": 1}));
        assert_eq!(a, b);
        assert!(is_digest(&a));
        assert!(!is_digest("sha256:abc"));
        assert_eq!(short_digest(&a).len(), 12);
    }
}
