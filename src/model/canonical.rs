//! RFC 8785 canonical JSON and the `sha256:` digests built on it.
//!
//! Every digest wavegate shows a reviewer is computed here, so that the same
//! value always yields the same bytes: object keys sorted by UTF-16 code
//! units, no insignificant whitespace, numbers in ECMAScript form. Any JCS
//! implementation re-derives the same digest from the same JSON.
//!
//! # Numbers, and the one older rule kept to verify old records
//!
//! RFC 8785 §3.2.2.3 writes every number as ECMAScript's
//! `Number.prototype.toString` of its IEEE-754 double ([`NumberForm::Ecmascript`],
//! the default everywhere). Integers beyond ±2^53 therefore lose their last
//! digits: `9007199254740993` is bound as `9007199254740992`, and two values
//! that differ only there share a digest. That is what RFC 8785 (and I-JSON,
//! RFC 7493) promise and no more; a plan that needs an exact big integer
//! bound writes it as a string (RFC 8785 Appendix D). Coverage compares the
//! plans themselves, not only their digests, so such a difference is still
//! seen when a fresh plan is held against an approved one.
//!
//! Before change-set version 2, wavegate wrote integers that fit `i64`/`u64`
//! exactly, and picked the last digit of a few doubles differently from
//! ECMAScript (on an exact tie between two shortest forms, e.g.
//! `1424953923781206.25`): [`NumberForm::Version1`]. Records are verified with
//! the rule they were written with: a version-1 change set, and the member
//! plans inside it, are re-digested with the old rule, so every record
//! written before still verifies (`changeset::number_form`). The two rules
//! agree on every integer within ±2^53 and on all but those rare doubles, so
//! a plan digest moves between them only when its plan holds such a number;
//! plan digests therefore carry no version of their own: the change set that
//! stores them names the rule.
//!
//! Two other users keep the version-1 rule on purpose: the ledger's fact chain
//! (its facts carry no format version, and rehashing would break chains
//! written before; their numbers are ids and times, where the rules agree) and
//! config comparison (which must tell every two different values apart, and
//! is never shown or stored).
//!
//! # Speed (issue 12)
//!
//! Plans of many megabytes are digested on every plan, so the writer avoids
//! work that does not change a byte of the output: [`DigestWriter`] gathers
//! its output in a buffer and hands SHA-256 large blocks instead of one call
//! per token; strings are copied in runs between the characters that need an
//! escape (all ASCII, so the scan is over bytes); and an object's keys are
//! sorted only when they are not already in order. serde_json's map iterates
//! in UTF-8 byte order, which is UTF-16 order except where a character from
//! U+E000–U+FFFF meets one beyond U+FFFF ([`utf16_cmp`]), so the check is one
//! comparison per key and the sort almost never runs.

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::digest::Digest;

mod text;
pub use text::CanonicalJson;

/// How a canonical writer spells a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NumberForm {
    /// RFC 8785 §3.2.2.3: ECMAScript `Number.prototype.toString` of the
    /// number's IEEE-754 double, integers included.
    #[default]
    Ecmascript,
    /// What wavegate wrote before change-set version 2, kept byte for byte to
    /// verify records written with it and for comparisons that must tell all
    /// values apart: integers that fit `i64`/`u64` digit for digit, other
    /// numbers in ECMAScript's layout with the shortest digits Rust's `{:e}`
    /// picks (on an exact tie between two, not always ECMAScript's even one).
    Version1,
}

/// Canonical JSON text of `value` (RFC 8785).
pub fn canonical_json(value: &Value) -> String {
    canonical_json_with(value, NumberForm::Ecmascript)
}

/// Canonical JSON text of `value` with numbers written as `numbers` says.
pub fn canonical_json_with(value: &Value, numbers: NumberForm) -> String {
    let mut out = String::new();
    write_value(&mut out, value, numbers);
    out
}

/// Canonical JSON written straight into SHA-256, for documents too large to
/// render into a string first. Writers of known shapes use it key by key.
pub struct DigestWriter {
    hash: Sha256,
    /// Output not hashed yet: hashing in large blocks is several times faster
    /// than one `update` per token.
    buffer: Vec<u8>,
    numbers: NumberForm,
}

/// How much output [`DigestWriter`] gathers before it hashes it.
const DIGEST_BUFFER: usize = 32 * 1024;

/// Output this long is hashed where it lies instead of gathered. A plan
/// entry's value (hundreds of bytes) is gathered: hashing it on its own cost
/// more than copying it, SHA-256 being fastest over long runs (issue 12).
const DIRECT_HASH: usize = 16 * 1024;

impl DigestWriter {
    /// A writer with RFC 8785 numbers.
    pub fn new() -> Self {
        Self::with_numbers(NumberForm::Ecmascript)
    }

    /// A writer with numbers written as `numbers` says.
    pub fn with_numbers(numbers: NumberForm) -> Self {
        Self {
            hash: Sha256::new(),
            buffer: Vec::with_capacity(DIGEST_BUFFER),
            numbers,
        }
    }

    #[inline]
    fn bytes(&mut self, bytes: &[u8]) {
        if bytes.len() >= DIRECT_HASH {
            self.hash.update(&self.buffer);
            self.buffer.clear();
            self.hash.update(bytes);
            return;
        }
        if self.buffer.len() + bytes.len() > DIGEST_BUFFER {
            self.hash.update(&self.buffer);
            self.buffer.clear();
        }
        self.buffer.extend_from_slice(bytes);
    }

    pub fn raw(&mut self, text: &str) -> &mut Self {
        self.bytes(text.as_bytes());
        self
    }

    /// `"key":` — keys must be written in canonical (sorted) order by the caller.
    pub fn key(&mut self, key: &str) -> &mut Self {
        if key.bytes().any(needs_escape) {
            write_string(self, key);
            return self.raw(":");
        }
        self.raw("\"").raw(key).raw("\":")
    }

    pub fn value(&mut self, value: &Value) -> &mut Self {
        let numbers = self.numbers;
        write_value(self, value, numbers);
        self
    }

    /// A value held as canonical text: its text, unless this writer's number
    /// rule writes one of its numbers otherwise.
    pub fn canonical(&mut self, value: &CanonicalJson) -> &mut Self {
        value.write_to(self);
        self
    }

    pub fn object(&mut self, map: &serde_json::Map<String, Value>) -> &mut Self {
        let numbers = self.numbers;
        write_object(self, map, numbers);
        self
    }

    pub fn string(&mut self, text: &str) -> &mut Self {
        write_string(self, text);
        self
    }

    /// An array of strings, as [`Self::value`] writes `json!(items)`.
    pub fn strings<S: AsRef<str>>(&mut self, items: &[S]) -> &mut Self {
        self.raw("[");
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                self.raw(",");
            }
            write_string(self, item.as_ref());
        }
        self.raw("]")
    }

    pub fn finish(mut self) -> Digest {
        self.hash.update(&self.buffer);
        Digest::from_sha256(&self.hash.finalize().into())
    }
}

impl Default for DigestWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Write for DigestWriter {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.bytes(s.as_bytes());
        Ok(())
    }
}

/// `sha256:<hex>` of the canonical JSON of `value` (RFC 8785).
pub fn digest_value(value: &Value) -> Digest {
    digest_value_with(value, NumberForm::Ecmascript)
}

/// `sha256:<hex>` of the canonical JSON of `value`, numbers as `numbers` says.
pub fn digest_value_with(value: &Value, numbers: NumberForm) -> Digest {
    let mut writer = DigestWriter::with_numbers(numbers);
    writer.value(value);
    writer.finish()
}

fn write_value<W: std::fmt::Write>(out: &mut W, value: &Value, numbers: NumberForm) {
    match value {
        Value::Null => {
            let _ = out.write_str("null");
        }
        Value::Bool(b) => {
            let _ = out.write_str(if *b { "true" } else { "false" });
        }
        Value::Number(n) => write_number(out, n, numbers),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            let _ = out.write_char('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    let _ = out.write_char(',');
                }
                write_value(out, item, numbers);
            }
            let _ = out.write_char(']');
        }
        Value::Object(map) => write_object(out, map, numbers),
    }
}

fn write_object<W: std::fmt::Write>(
    out: &mut W,
    map: &serde_json::Map<String, Value>,
    numbers: NumberForm,
) {
    let in_order = map
        .keys()
        .zip(map.keys().skip(1))
        .all(|(a, b)| utf16_cmp(a, b).is_lt());
    let _ = out.write_char('{');
    if in_order {
        write_members(out, map.iter(), numbers);
    } else {
        let mut members: Vec<(&String, &Value)> = map.iter().collect();
        members.sort_unstable_by(|a, b| utf16_cmp(a.0, b.0));
        write_members(out, members.into_iter(), numbers);
    }
    let _ = out.write_char('}');
}

fn write_members<'v, W: std::fmt::Write>(
    out: &mut W,
    members: impl Iterator<Item = (&'v String, &'v Value)>,
    numbers: NumberForm,
) {
    for (i, (key, value)) in members.enumerate() {
        if i > 0 {
            let _ = out.write_char(',');
        }
        write_string(out, key);
        let _ = out.write_char(':');
        write_value(out, value, numbers);
    }
}

/// Compares two strings by their UTF-16 code units (RFC 8785 §3.2.3), on
/// their UTF-8 bytes. Byte order is code-point order, and UTF-16 order
/// differs from it only where the first differing character is in
/// U+E000–U+FFFF (lead byte 0xEE or 0xEF, one code unit at or above 0xE000)
/// on one side and beyond U+FFFF (lead byte 0xF0 or above, a surrogate from
/// 0xD800) on the other: then the order is reversed. Both strings agree up
/// to the first differing byte, so their characters start at the same
/// places and that byte is either both characters' lead byte or a
/// continuation byte of two characters of the same length.
fn utf16_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    match a.iter().zip(b).position(|(x, y)| x != y) {
        None => a.len().cmp(&b.len()),
        Some(i) => {
            let (x, y) = (a[i], b[i]);
            if x >= 0xee && y >= 0xee && (x >= 0xf0) != (y >= 0xf0) {
                y.cmp(&x)
            } else {
                x.cmp(&y)
            }
        }
    }
}

fn write_string<W: std::fmt::Write>(out: &mut W, s: &str) {
    let _ = out.write_char('"');
    // Every character that needs an escape is ASCII, so scanning bytes finds
    // them and the runs between them are whole characters.
    let bytes = s.as_bytes();
    let mut plain = 0;
    let mut i = 0;
    while i < bytes.len() {
        i += plain_prefix(&bytes[i..]);
        let Some(&b) = bytes.get(i) else { break };
        i += 1;
        debug_assert!(needs_escape(b), "plain_prefix stops only at an escape");
        let _ = out.write_str(&s[plain..i - 1]);
        let _ = match b {
            b'"' => out.write_str("\\\""),
            b'\\' => out.write_str("\\\\"),
            0x08 => out.write_str("\\b"),
            0x0c => out.write_str("\\f"),
            b'\n' => out.write_str("\\n"),
            b'\r' => out.write_str("\\r"),
            b'\t' => out.write_str("\\t"),
            _ => write!(out, "\\u{:04x}", b),
        };
        plain = i;
    }
    let _ = out.write_str(&s[plain..]);
    let _ = out.write_char('"');
}

/// `"`, `\` and the control characters: what a JSON string must escape.
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// How many leading bytes need no escape: a word of 8 bytes at a time, with
/// the usual bit tricks (`has_less` and `has_zero`, which may flag a byte
/// above one that needs an escape but never miss one, so the lowest flagged
/// byte is the first that needs one), then the last few bytes one by one.
pub(crate) fn plain_prefix(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_le_bytes([0x80; 8]);
    let has_zero = |w: u64| w.wrapping_sub(ONES) & !w & HIGH;
    let mut n = 0;
    for chunk in bytes.chunks_exact(8) {
        let w = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
        let quote = has_zero(w ^ (ONES * u64::from(b'"')));
        let backslash = has_zero(w ^ (ONES * u64::from(b'\\')));
        let flagged = control | quote | backslash;
        if flagged != 0 {
            return n + (flagged.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    n + bytes[n..].iter().take_while(|&&b| !needs_escape(b)).count()
}

/// The largest integer below which every integer is a double exactly (2^53).
const EXACT_IN_DOUBLE: u64 = 1 << 53;

fn write_number<W: std::fmt::Write>(out: &mut W, n: &serde_json::Number, numbers: NumberForm) {
    let exact = |magnitude: u64| numbers == NumberForm::Version1 || magnitude < EXACT_IN_DOUBLE;
    // Integers written as integers are ECMAScript's form too while they are
    // below 2^53 (each is its own double, and below 1e21 it prints as digits).
    if let Some(i) = n.as_i64().filter(|i| exact(i.unsigned_abs())) {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64().filter(|u| exact(*u)) {
        let _ = write!(out, "{u}");
    } else {
        // `as_f64` rounds an integer to the nearest double (ties to even), as
        // ECMAScript reads the same digits.
        let f = n.as_f64().unwrap_or(0.0);
        match numbers {
            NumberForm::Ecmascript => write_f64(out, f),
            NumberForm::Version1 => write_f64_version_1(out, f),
        }
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
    // Ryu prints the shortest digits that read back as `f`, the closest of
    // them to `f` and, of two as close, the even one: ECMAScript's choice.
    let mut buffer = ryu::Buffer::new();
    let digits = Digits::of(buffer.format_finite(f.abs()));
    write_ecmascript_layout(out, digits.as_str(), digits.n);
}

/// The significant digits of a positive decimal, and `n` such that the
/// number is `0.<digits> × 10^n`.
struct Digits {
    buf: [u8; 24],
    len: usize,
    n: i32,
}

impl Digits {
    /// Reads `int[.frac][e±exp]` as Ryu writes it (at most 17 significant digits).
    fn of(text: &str) -> Self {
        let (mantissa, exp) = text.split_once(['e', 'E']).unwrap_or((text, "0"));
        let exp: i32 = exp.parse().expect("ryu writes an integer exponent");
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let mut digits = Self {
            buf: [0; 24],
            len: 0,
            n: int.len() as i32 + exp,
        };
        for b in int.bytes().chain(frac.bytes()) {
            if digits.len == 0 && b == b'0' {
                digits.n -= 1;
            } else {
                digits.buf[digits.len] = b;
                digits.len += 1;
            }
        }
        while digits.len > 1 && digits.buf[digits.len - 1] == b'0' {
            digits.len -= 1;
        }
        digits
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).expect("ASCII digits")
    }
}

/// Version 1's float writer, kept byte for byte to verify what it digested:
/// the shortest digits Rust's `{:e}` picks, which on an exact tie between two
/// shortest candidates is not always ECMAScript's even one
/// (1424953923781206.25 was written `1424953923781206.3`, ECMAScript writes
/// `1424953923781206.2`).
fn write_f64_version_1<W: std::fmt::Write>(out: &mut W, f: f64) {
    if f == 0.0 {
        let _ = out.write_char('0');
        return;
    }
    if f < 0.0 {
        let _ = out.write_char('-');
    }
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let n = exp.parse::<i32>().expect("exponent is an integer") + 1;
    write_ecmascript_layout(out, &digits, n);
}

/// ECMAScript's layout of `0.<digits> × 10^n` (Number::toString steps 6–10):
/// plain digits up to 21 integer digits, `0.000…` down to 6 zeros, else
/// exponential with an explicit sign.
fn write_ecmascript_layout<W: std::fmt::Write>(out: &mut W, digits: &str, n: i32) {
    let k = digits.len() as i32;
    if k <= n && n <= 21 {
        let _ = out.write_str(digits);
        for _ in 0..n - k {
            let _ = out.write_char('0');
        }
    } else if 0 < n && n <= 21 {
        let _ = out.write_str(&digits[..n as usize]);
        let _ = out.write_char('.');
        let _ = out.write_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        let _ = out.write_str("0.");
        for _ in 0..-n {
            let _ = out.write_char('0');
        }
        let _ = out.write_str(digits);
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
    use std::fmt::Write as _;

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
    fn utf16_order_on_bytes_is_utf16_order() {
        let chars = [
            "",
            "a",
            "A",
            "\r",
            "\u{7f}",
            "\u{80}",
            "é",
            "\u{7ff}",
            "\u{800}",
            "\u{20ac}",
            "\u{d7ff}",
            "\u{e000}",
            "\u{fb33}",
            "\u{ffff}",
            "\u{10000}",
            "\u{1f600}",
            "\u{10ffff}",
        ];
        let mut keys = Vec::new();
        for a in chars {
            for b in chars {
                keys.push(format!("{a}{b}"));
                keys.push(format!("k{a}x{b}"));
            }
        }
        for a in &keys {
            for b in &keys {
                assert_eq!(
                    utf16_cmp(a, b),
                    a.encode_utf16().cmp(b.encode_utf16()),
                    "{a:?} against {b:?}"
                );
            }
        }
    }

    /// The writer before the word-at-a-time scan, character by character.
    fn escaped_char_by_char(s: &str) -> String {
        let mut out = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if (c as u32) < 0x20 => write!(out, "\\u{:04x}", c as u32).unwrap(),
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }

    #[test]
    fn strings_escape_alike_wherever_the_escape_falls_in_a_word() {
        let specials = [
            "\"", "\\", "\n", "\u{0}", "\u{1f}", "\u{7f}", " ", "~", "é", "😀", "\u{2028}",
        ];
        for len in 0..20 {
            for at in 0..=len {
                for special in specials {
                    let text = format!("{}{special}{}", "a".repeat(at), "b".repeat(len - at));
                    let mut written = String::new();
                    write_string(&mut written, &text);
                    assert_eq!(written, escaped_char_by_char(&text), "{text:?}");
                }
            }
        }
        let every: String = (0u32..0x100).filter_map(char::from_u32).collect();
        let mut written = String::new();
        write_string(&mut written, &every);
        assert_eq!(written, escaped_char_by_char(&every));
    }

    #[test]
    fn keys_out_of_utf16_order_are_sorted() {
        // serde_json's map iterates in byte order, where U+1F600 comes after
        // U+FB33; UTF-16 puts it first, so the writer must sort.
        let v = json!({"k\u{fb33}": 1, "k\u{1f600}": 2, "k": 3});
        assert_eq!(
            canonical_json(&v),
            "{\"k\":3,\"k\u{1f600}\":2,\"k\u{fb33}\":1}"
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
        assert_eq!(num("-0"), "0");
        assert_eq!(num("1e21"), "1e+21");
        assert_eq!(num("1e20"), "100000000000000000000");
        assert_eq!(num("0.000001"), "0.000001");
        assert_eq!(num("1e-7"), "1e-7");
        assert_eq!(num("123.456"), "123.456");
        assert_eq!(num("4.5e-300"), "4.5e-300");
        // RFC 8785 §3.2.2.3 and the values of its test vector (Appendix B's neighbours).
        assert_eq!(num("333333333.33333329"), "333333333.3333333");
        assert_eq!(num("1E30"), "1e+30");
        assert_eq!(num("4.50"), "4.5");
        assert_eq!(num("2e-3"), "0.002");
        assert_eq!(num("0.000000000000000000000000001"), "1e-27");
    }

    #[test]
    fn integers_beyond_2_to_the_53_are_written_as_their_double() {
        // serde_json keeps these exactly (u64/i64); RFC 8785 writes the double.
        for (text, ecmascript) in [
            ("9007199254740991", "9007199254740991"),
            ("9007199254740992", "9007199254740992"),
            ("9007199254740993", "9007199254740992"),
            ("-9007199254740993", "-9007199254740992"),
            ("9007199254740995", "9007199254740996"),
            ("18446744073709551615", "18446744073709552000"),
            ("9223372036854775807", "9223372036854776000"),
            ("-9223372036854775808", "-9223372036854776000"),
            ("123456789012345678901234", "1.2345678901234569e+23"),
        ] {
            assert_eq!(num(text), ecmascript, "{text}");
        }
    }

    #[test]
    fn the_version_1_form_writes_what_version_1_wrote() {
        let exact = |text: &str| {
            canonical_json_with(&serde_json::from_str(text).unwrap(), NumberForm::Version1)
        };
        assert_eq!(exact("9007199254740993"), "9007199254740993");
        assert_eq!(exact("-9223372036854775808"), "-9223372036854775808");
        assert_eq!(exact("18446744073709551615"), "18446744073709551615");
        // An exact tie between two shortest forms: version 1 took Rust's, RFC 8785 the even one.
        assert_eq!(exact("1424953923781206.25"), "1424953923781206.3");
        assert_eq!(num("1424953923781206.25"), "1424953923781206.2");
        // Everything else is written alike by both forms.
        for text in [
            "0",
            "-0.0",
            "1e21",
            "4.50",
            "333333333.33333329",
            "-17",
            "9007199254740991",
        ] {
            assert_eq!(exact(text), num(text), "{text}");
        }
        let value = json!({"n": 9007199254740993u64});
        assert_ne!(
            digest_value(&value),
            digest_value_with(&value, NumberForm::Version1)
        );
        let mut writer = DigestWriter::with_numbers(NumberForm::Version1);
        writer.value(&value);
        assert_eq!(
            writer.finish(),
            digest_value_with(&value, NumberForm::Version1)
        );
    }

    /// RFC 8785 Appendix B: IEEE-754 bit patterns and their canonical form.
    #[test]
    fn rfc_8785_appendix_b_numbers() {
        for (bits, expected) in [
            (0x0000000000000000u64, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ] {
            let value = Value::Number(serde_json::Number::from_f64(f64::from_bits(bits)).unwrap());
            assert_eq!(canonical_json(&value), expected, "{bits:016x}");
        }
    }

    /// The input and output files of cyberphone/json-canonicalization's
    /// `testdata` (tests/data/jcs/NOTICE.md says where they come from).
    #[test]
    fn published_jcs_test_vectors() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/jcs");
        let mut seen = 0;
        for name in [
            "arrays",
            "french",
            "structures",
            "unicode",
            "values",
            "weird",
        ] {
            let input = std::fs::read(dir.join(format!("input/{name}.json"))).unwrap();
            let expected = std::fs::read(dir.join(format!("output/{name}.json"))).unwrap();
            let value: Value = serde_json::from_slice(&input).unwrap();
            assert_eq!(
                canonical_json(&value).as_bytes(),
                expected.as_slice(),
                "{name}.json"
            );
            let mut writer = DigestWriter::new();
            writer.value(&value);
            assert_eq!(
                writer.finish(),
                Digest::from_sha256(&Sha256::digest(&expected).into())
            );
            seen += 1;
        }
        assert_eq!(seen, 6);
    }

    /// The ES6 number test file of the same repository: its inputs are made
    /// by a published algorithm (the first values fixed, then 2000 subnormal
    /// neighbours, then doubles drawn from a SHA-256 chain), and the SHA-256
    /// of its first N lines (`<hex of the double>,<expected>\n`) is published.
    /// Writing the expected side with our writer and matching those checksums
    /// checks 100,000 numbers against ECMAScript without shipping the file.
    #[test]
    fn es6_number_test_file_checksums() {
        const FIXED: [u64; 168] = [
            0x0000000000000000,
            0x8000000000000000,
            0x0000000000000001,
            0x8000000000000001,
            0xc46696695dbd1cc3,
            0xc43211ede4974a35,
            0xc3fce97ca0f21056,
            0xc3c7213080c1a6ac,
            0xc39280f39a348556,
            0xc35d9b1f5d20d557,
            0xc327af4c4a80aaac,
            0xc2f2f2a36ecd5556,
            0xc2be51057e155558,
            0xc28840d131aaaaac,
            0xc253670dc1555557,
            0xc21f0b4935555557,
            0xc1e8d5d42aaaaaac,
            0xc1b3de4355555556,
            0xc17fca0555555556,
            0xc1496e6aaaaaaaab,
            0xc114585555555555,
            0xc0e046aaaaaaaaab,
            0xc0aa0aaaaaaaaaaa,
            0xc074d55555555555,
            0xc040aaaaaaaaaaab,
            0xc00aaaaaaaaaaaab,
            0xbfd5555555555555,
            0xbfa1111111111111,
            0xbf6b4e81b4e81b4f,
            0xbf35d867c3ece2a5,
            0xbf0179ec9cbd821e,
            0xbecbf647612f3696,
            0xbe965e9f80f29212,
            0xbe61e54c672874db,
            0xbe2ca213d840baf8,
            0xbdf6e80fe033c8c6,
            0xbdc2533fe68fd3d2,
            0xbd8d51ffd74c861c,
            0xbd5774ccac3d3817,
            0xbd22c3d6f030f9ac,
            0xbcee0624b3818f79,
            0xbcb804ea293472c7,
            0xbc833721ba905bd3,
            0xbc4ebe9c5db3c61e,
            0xbc18987d17c304e5,
            0xbbe3ad30dfcf371d,
            0xbbaf7b816618582f,
            0xbb792f9ab81379bf,
            0xbb442615600f9499,
            0xbb101e77800c76e1,
            0xbad9ca58cce0be35,
            0xbaa4a1e0a3e6fe90,
            0xba708180831f320d,
            0xba3a68cd9e985016,
            0x446696695dbd1cc3,
            0x443211ede4974a35,
            0x43fce97ca0f21056,
            0x43c7213080c1a6ac,
            0x439280f39a348556,
            0x435d9b1f5d20d557,
            0x4327af4c4a80aaac,
            0x42f2f2a36ecd5556,
            0x42be51057e155558,
            0x428840d131aaaaac,
            0x4253670dc1555557,
            0x421f0b4935555557,
            0x41e8d5d42aaaaaac,
            0x41b3de4355555556,
            0x417fca0555555556,
            0x41496e6aaaaaaaab,
            0x4114585555555555,
            0x40e046aaaaaaaaab,
            0x40aa0aaaaaaaaaaa,
            0x4074d55555555555,
            0x4040aaaaaaaaaaab,
            0x400aaaaaaaaaaaab,
            0x3fd5555555555555,
            0x3fa1111111111111,
            0x3f6b4e81b4e81b4f,
            0x3f35d867c3ece2a5,
            0x3f0179ec9cbd821e,
            0x3ecbf647612f3696,
            0x3e965e9f80f29212,
            0x3e61e54c672874db,
            0x3e2ca213d840baf8,
            0x3df6e80fe033c8c6,
            0x3dc2533fe68fd3d2,
            0x3d8d51ffd74c861c,
            0x3d5774ccac3d3817,
            0x3d22c3d6f030f9ac,
            0x3cee0624b3818f79,
            0x3cb804ea293472c7,
            0x3c833721ba905bd3,
            0x3c4ebe9c5db3c61e,
            0x3c18987d17c304e5,
            0x3be3ad30dfcf371d,
            0x3baf7b816618582f,
            0x3b792f9ab81379bf,
            0x3b442615600f9499,
            0x3b101e77800c76e1,
            0x3ad9ca58cce0be35,
            0x3aa4a1e0a3e6fe90,
            0x3a708180831f320d,
            0x3a3a68cd9e985016,
            0x4024000000000000,
            0x4014000000000000,
            0x3fe0000000000000,
            0x3fa999999999999a,
            0x3f747ae147ae147b,
            0x3f40624dd2f1a9fc,
            0x3f0a36e2eb1c432d,
            0x3ed4f8b588e368f1,
            0x3ea0c6f7a0b5ed8d,
            0x3e6ad7f29abcaf48,
            0x3e35798ee2308c3a,
            0x3ed539223589fa95,
            0x3ed4ff26cd5a7781,
            0x3ed4f95a762283ff,
            0x3ed4f8c60703520c,
            0x3ed4f8b72f19cd0d,
            0x3ed4f8b5b31c0c8d,
            0x3ed4f8b58d1c461a,
            0x3ed4f8b5894f7f0e,
            0x3ed4f8b588ee37f3,
            0x3ed4f8b588e47da4,
            0x3ed4f8b588e3849c,
            0x3ed4f8b588e36bb5,
            0x3ed4f8b588e36937,
            0x3ed4f8b588e368f8,
            0x3ed4f8b588e368f1,
            0x3ff0000000000000,
            0xbff0000000000000,
            0xbfeffffffffffffa,
            0xbfeffffffffffffb,
            0x3feffffffffffffa,
            0x3feffffffffffffb,
            0x3feffffffffffffc,
            0x3feffffffffffffe,
            0xbfefffffffffffff,
            0xbfefffffffffffff,
            0x3fefffffffffffff,
            0x3fefffffffffffff,
            0x3fd3333333333332,
            0x3fd3333333333333,
            0x3fd3333333333334,
            0x0010000000000000,
            0x000ffffffffffffd,
            0x000fffffffffffff,
            0x7fefffffffffffff,
            0xffefffffffffffff,
            0x4340000000000000,
            0xc340000000000000,
            0x4430000000000000,
            0x44b52d02c7e14af5,
            0x44b52d02c7e14af6,
            0x44b52d02c7e14af7,
            0x444b1ae4d6e2ef4e,
            0x444b1ae4d6e2ef4f,
            0x444b1ae4d6e2ef50,
            0x3eb0c6f7a0b5ed8c,
            0x3eb0c6f7a0b5ed8d,
            0x41b3de4355555553,
            0x41b3de4355555554,
            0x41b3de4355555555,
            0x41b3de4355555556,
            0x41b3de4355555557,
            0xbecbf647612f3696,
            0x43143ff3c1cb0959,
        ];
        const SERIAL: u64 = 2000;
        let mut block = [0u8; 32];
        let mut drawn: Vec<f64> = Vec::new();
        let mut next = |index: u64| -> f64 {
            if let Some(&bits) = FIXED.get(index as usize) {
                return f64::from_bits(bits);
            }
            if index < FIXED.len() as u64 + SERIAL {
                return f64::from_bits(0x0010000000000000 + index - FIXED.len() as u64);
            }
            loop {
                if drawn.is_empty() {
                    block = Sha256::digest(block).into();
                    drawn = block
                        .chunks_exact(8)
                        .rev()
                        .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
                        .collect();
                }
                let f = drawn.pop().unwrap();
                if f != 0.0 && f.is_finite() {
                    return f;
                }
            }
        };
        let published = [
            (
                1_000u64,
                37_967usize,
                "be18b62b6f69cdab33a7e0dae0d9cfa869fda80ddc712221570f9f40a5878687",
            ),
            (
                10_000,
                399_022,
                "b9f7a8e75ef22a835685a52ccba7f7d6bdc99e34b010992cbc5864cd12be6892",
            ),
            (
                100_000,
                4_031_728,
                "22776e6d4b49fa294a0d0f349268e5c28808fe7e0cb2bcbe28f63894e494d4c7",
            ),
        ];
        let mut hash = Sha256::new();
        let mut bytes = 0;
        let mut line = String::new();
        let mut index = 0;
        for (lines, size, checksum) in published {
            while index < lines {
                let f = next(index);
                line.clear();
                let _ = write!(line, "{:x},", f.to_bits());
                write_f64(&mut line, f);
                line.push('\n');
                hash.update(line.as_bytes());
                bytes += line.len();
                index += 1;
            }
            assert_eq!(bytes, size, "bytes in the first {lines} lines");
            assert_eq!(
                hex::encode(hash.clone().finalize()),
                checksum,
                "first {lines} lines"
            );
        }
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
        assert!(Digest::is_digest(a.as_str()));
    }
}
