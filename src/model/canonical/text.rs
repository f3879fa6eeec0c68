//! A JSON value held as its canonical text, for the large values of a plan
//! (each entry's `after` and `before`).
//!
//! Building a `serde_json::Value` tree for every entry of a plan file of many
//! megabytes, walking it to digest it and freeing it cost several times the
//! digest itself (issue 12). Most readers never look inside these values: the
//! digest binds them, the change set stores them. So each is held as its
//! canonical text, with no tree: the file's own text when one scan finds it
//! canonical already (what serde_json writes; [`CanonicalJson::canonical_in_file`],
//! which the plan-file reader calls at each value, or [`CanonicalJson::from_raw`]
//! for a value serde_json found), else written anew in one pass; digesting
//! it is hashing that text.
//! Coverage and the report, which do
//! look inside, parse the text when they need it ([`CanonicalJson::to_value`]).
//!
//! The text is RFC 8785's with one difference that loses nothing: integers
//! are written digit for digit, as the file has them, where RFC 8785 rounds
//! those beyond ±2^53 to a double. A value that holds such an integer is
//! digested through a `Value` (rare); so is a value with a fraction when the
//! version-1 number rule is asked for, whose doubles can differ from
//! ECMAScript's on a tie. Every digest is therefore the one a `Value` of the
//! same JSON gives, byte for byte.

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

use super::{
    plain_prefix, utf16_cmp, write_f64, write_string, DigestWriter, NumberForm, EXACT_IN_DOUBLE,
};

/// A JSON value as canonical text (keys sorted by UTF-16 code units, no
/// whitespace, strings escaped as RFC 8785 says, integers exact). Two values
/// are equal when their texts are and they were read with the same kinds of
/// number (`5` and `5.0` have one text, but may digest apart under version
/// 1's number rule).
#[derive(Clone)]
pub struct CanonicalJson {
    text: Text,
    /// It holds an integer beyond ±2^53, which RFC 8785 writes rounded.
    big_integer: bool,
    /// It holds a number read as a double (a fraction or an exponent), which
    /// the version-1 rule may write with other digits.
    double: bool,
}

/// Where a value's text lives.
#[derive(Clone)]
enum Text {
    /// `null`, which a plan has once per entry that has no `before`.
    Null,
    Owned(Box<str>),
    /// A span of the file the value was read from, when the file already
    /// had it canonical: every value of a plan file shares the file's one
    /// copy, instead of an allocation (and a free) per entry (issue 12).
    InFile {
        file: Arc<String>,
        span: std::ops::Range<usize>,
    },
}

impl Text {
    fn as_str(&self) -> &str {
        match self {
            Text::Null => "null",
            Text::Owned(text) => text,
            Text::InFile { file, span } => &file[span.clone()],
        }
    }
}

impl CanonicalJson {
    pub fn null() -> Self {
        Self {
            text: Text::Null,
            big_integer: false,
            double: false,
        }
    }

    pub fn is_null(&self) -> bool {
        self.as_str() == "null"
    }

    /// The canonical text of `value`.
    pub fn from_value(value: &Value) -> Self {
        Self::deserialize(value).expect("every Value has a canonical text")
    }

    /// The value as a tree, for readers that look inside it.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.as_str()).expect("canonical text is JSON")
    }

    /// The text (integers exact: see the module's doc).
    pub fn as_str(&self) -> &str {
        self.text.as_str()
    }

    /// Writes the value into `w` as `w`'s number rule says.
    pub(super) fn write_to(&self, w: &mut DigestWriter) {
        let text_is_canonical = match w.numbers {
            NumberForm::Ecmascript => !self.big_integer,
            NumberForm::Version1 => !self.double,
        };
        if text_is_canonical {
            w.raw(self.as_str());
        } else {
            w.value(&self.to_value());
        }
    }
}

impl CanonicalJson {
    /// The canonical text of a JSON value read without a tree. Text a
    /// canonical writer wrote (serde_json, `jq -cS`, most plan converters)
    /// is taken as it is, after one scan that checks it byte by byte; any
    /// other is rewritten.
    pub fn from_raw(raw: &RawValue) -> Result<Self, serde_json::Error> {
        let text = raw.get();
        if is_canonical(text) {
            return Ok(Self::canonical_as_read(Text::Owned(text.into())));
        }
        serde_json::from_str(text)
    }

    /// [`Self::from_raw`] for a value read out of `file`: text taken as it is
    /// stays in `file`, shared, instead of being copied out.
    pub fn from_raw_in(file: &Arc<String>, raw: &RawValue) -> Result<Self, serde_json::Error> {
        let text = raw.get();
        let start = (text.as_ptr() as usize).wrapping_sub(file.as_ptr() as usize);
        let span = start..start.saturating_add(text.len());
        if !file
            .get(span.clone())
            .is_some_and(|s| std::ptr::eq(s, text))
        {
            return Self::from_raw(raw);
        }
        if is_canonical(text) {
            return Ok(Self::canonical_as_read(Text::InFile {
                file: Arc::clone(file),
                span,
            }));
        }
        serde_json::from_str(text)
    }

    /// The value at `at` in `file` and the index after it, when the file has
    /// it canonical already ([`canonical_end`], which also checks it is JSON):
    /// held as a span of the file, or as `null`. `None` when it is not, or is
    /// not JSON: then it is read as any JSON is.
    pub(crate) fn canonical_in_file(file: &Arc<String>, at: usize) -> Option<(Self, usize)> {
        let end = with_open(|open| canonical_end(file, at, open))?;
        let value = if &file[at..end] == "null" {
            Self::null()
        } else {
            Self::canonical_as_read(Text::InFile {
                file: Arc::clone(file),
                span: at..end,
            })
        };
        Some((value, end))
    }

    /// How many bytes of a file this value holds as a span of it.
    pub(crate) fn bytes_in_file(&self) -> usize {
        match &self.text {
            Text::InFile { span, .. } => span.len(),
            Text::Null | Text::Owned(_) => 0,
        }
    }

    /// Gives the value its own copy of its text, letting go of the file.
    pub(crate) fn detach(&mut self) {
        if let Text::InFile { .. } = self.text {
            self.text = Text::Owned(self.as_str().into());
        }
    }

    fn canonical_as_read(text: Text) -> Self {
        Self {
            text,
            big_integer: false,
            double: false,
        }
    }
}

impl PartialEq for CanonicalJson {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
            && self.big_integer == other.big_integer
            && self.double == other.double
    }
}

impl Eq for CanonicalJson {}

impl Default for CanonicalJson {
    fn default() -> Self {
        Self::null()
    }
}

impl fmt::Debug for CanonicalJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for CanonicalJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for CanonicalJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Written as the JSON it is, not as a string holding it. Storing is
        // off the hot path, so the check `from_string` makes is affordable.
        RawValue::from_string(self.as_str().to_owned())
            .map_err(serde::ser::Error::custom)?
            .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for CanonicalJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Every value of a plan is written into one buffer kept per thread,
        // then copied out at its exact size: growing a fresh buffer for each
        // entry (and the allocator's work to free them) cost more than the
        // writing.
        let written = SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut out) => out.canonicalise(deserializer),
            Err(_) => Writer::default().canonicalise(deserializer),
        });
        written
    }
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Writer> = std::cell::RefCell::default();
}

/// The text written so far, and where each key of the objects still open
/// sits in it (one stack for every depth).
#[derive(Default)]
struct Writer {
    text: String,
    keys: Vec<KeyAt>,
    big_integer: bool,
    double: bool,
}

impl Writer {
    fn canonicalise<'de, D: Deserializer<'de>>(
        &mut self,
        deserializer: D,
    ) -> Result<CanonicalJson, D::Error> {
        self.text.clear();
        self.keys.clear();
        self.big_integer = false;
        self.double = false;
        Canonicalise { out: self }.deserialize(deserializer)?;
        Ok(CanonicalJson {
            text: Text::Owned(self.text.as_str().into()),
            big_integer: self.big_integer,
            double: self.double,
        })
    }

    /// Compares two keys written in `text` in canonical (UTF-16) order. A key
    /// with no escape is written as it reads; one with an escape (rare) is
    /// read back first.
    fn key_cmp(&self, a: &KeyAt, b: &KeyAt) -> std::cmp::Ordering {
        let (x, y) = (&self.text[a.key()], &self.text[b.key()]);
        if !x.contains('\\') && !y.contains('\\') {
            return utf16_cmp(x, y);
        }
        let read = |escaped: &str| -> String {
            serde_json::from_str(&format!("\"{escaped}\"")).expect("a key this writer escaped")
        };
        utf16_cmp(&read(x), &read(y))
    }
}

/// A member of an open object: its text starts at `member` (`"key":value`),
/// and its key's closing quote is at `key_end`.
#[derive(Clone, Copy)]
struct KeyAt {
    member: usize,
    key_end: usize,
}

impl KeyAt {
    fn key(&self) -> std::ops::Range<usize> {
        self.member + 1..self.key_end
    }
}

/// Writes the next value of a deserializer as canonical text.
struct Canonicalise<'w> {
    out: &'w mut Writer,
}

impl<'de> DeserializeSeed<'de> for Canonicalise<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Canonicalise<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.out.text.push_str("null");
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<(), E> {
        self.out.text.push_str(if b { "true" } else { "false" });
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, u: u64) -> Result<(), E> {
        self.out.big_integer |= u >= EXACT_IN_DOUBLE;
        write_digits(&mut self.out.text, false, u);
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, i: i64) -> Result<(), E> {
        self.out.big_integer |= i.unsigned_abs() >= EXACT_IN_DOUBLE;
        write_digits(&mut self.out.text, i < 0, i.unsigned_abs());
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<(), E> {
        if !f.is_finite() {
            return Err(E::custom("a JSON number must be finite"));
        }
        self.out.double = true;
        write_f64(&mut self.out.text, f);
        Ok(())
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        write_string(&mut self.out.text, s);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let out = self.out;
        out.text.push('[');
        let items = out.text.len();
        loop {
            let mark = out.text.len();
            if mark > items {
                out.text.push(',');
            }
            let item = seq.next_element_seed(Canonicalise { out: &mut *out })?;
            if item.is_none() {
                out.text.truncate(mark);
                break;
            }
        }
        out.text.push(']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let out = self.out;
        out.text.push('{');
        let body = out.text.len();
        let base = out.keys.len();
        let mut in_order = true;
        loop {
            let mark = out.text.len();
            if mark > body {
                out.text.push(',');
            }
            let member = out.text.len();
            if map.next_key_seed(Key { out: &mut *out })?.is_none() {
                out.text.truncate(mark);
                break;
            }
            let key = KeyAt {
                member,
                key_end: out.text.len() - 1,
            };
            if let Some(last) = out.keys[base..].last() {
                in_order &= out.key_cmp(last, &key).is_lt();
            }
            out.keys.push(key);
            out.text.push(':');
            map.next_value_seed(Canonicalise { out: &mut *out })?;
        }
        if !in_order {
            sort_members(out, body, base);
        }
        out.keys.truncate(base);
        out.text.push('}');
        Ok(())
    }
}

/// Whether `json` is byte for byte what [`Canonicalise`] would write for
/// it: see [`canonical_end`].
fn is_canonical(json: &str) -> bool {
    with_open(|open| canonical_end(json, 0, open)) == Some(json.len())
}

/// Runs `scan` with this thread's stack of open arrays and objects: a plan
/// scans every entry's values.
fn with_open<T>(scan: impl FnOnce(&mut Vec<Open>) -> T) -> T {
    OPEN.with(|cell| match cell.try_borrow_mut() {
        Ok(mut open) => {
            open.clear();
            scan(&mut open)
        }
        Err(_) => scan(&mut Vec::new()),
    })
}

thread_local! {
    static OPEN: std::cell::RefCell<Vec<Open>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Deeper values are rewritten instead, where serde_json's own recursion
/// limit (128) refuses what is too deep for any later reader of the text.
const MAX_SCANNED_DEPTH: usize = 100;

/// The index after the JSON value at `at` in `text`, if that value is
/// valid JSON written byte for byte as [`Canonicalise`] would write it, with
/// nothing this scan cannot vouch for: no whitespace; every string escaped
/// as RFC 8785 escapes it; each object's keys, none with an escape, strictly
/// in UTF-16 order; every number an integer below 2^53 written as its
/// digits; at most [`MAX_SCANNED_DEPTH`] deep. `None` only costs the
/// rewrite. It checks the grammar too, so it finds a value's end in a file
/// no parser has read (the plan-file reader).
fn canonical_end(text: &str, at: usize, open: &mut Vec<Open>) -> Option<usize> {
    let json = text.as_bytes();
    let mut i = at;
    loop {
        // A value starts at `i`.
        match *json.get(i)? {
            b'{' | b'[' if open.len() == MAX_SCANNED_DEPTH => return None,
            b'{' if json.get(i + 1) == Some(&b'}') => i += 2,
            b'{' => {
                let mut last_key = None;
                i = object_key(text, i + 1, &mut last_key)?;
                open.push(Open::Object { last_key });
                continue;
            }
            b'[' if json.get(i + 1) == Some(&b']') => i += 2,
            b'[' => {
                open.push(Open::Array);
                i += 1;
                continue;
            }
            b'"' => i = string_end(json, i)?,
            b't' => i = literal_end(json, i, b"true")?,
            b'f' => i = literal_end(json, i, b"false")?,
            b'n' => i = literal_end(json, i, b"null")?,
            b'-' | b'0'..=b'9' => i = integer_end(json, i)?,
            _ => return None,
        }
        // A value ended at `i`: close what it ends, up to the next value.
        loop {
            match open.last_mut() {
                None => return Some(i),
                Some(Open::Array) => match *json.get(i)? {
                    b',' => {
                        i += 1;
                        break;
                    }
                    b']' => {
                        open.pop();
                        i += 1;
                    }
                    _ => return None,
                },
                Some(Open::Object { last_key }) => match *json.get(i)? {
                    b',' => {
                        i = object_key(text, i + 1, last_key)?;
                        break;
                    }
                    b'}' => {
                        open.pop();
                        i += 1;
                    }
                    _ => return None,
                },
            }
        }
    }
}

/// The index after `literal` at `at`, if it is there.
fn literal_end(json: &[u8], at: usize, literal: &[u8]) -> Option<usize> {
    let end = at + literal.len();
    (json.get(at..end)? == literal).then_some(end)
}

/// What [`canonical_end`] is inside of.
enum Open {
    Array,
    /// An object, with where its last key so far sits.
    Object {
        last_key: Option<std::ops::Range<usize>>,
    },
}

/// Checks the key at `at` (after an object's `{` or `,`) against the last
/// key of its object, and records it; the index after its `:`.
fn object_key(
    text: &str,
    at: usize,
    last_key: &mut Option<std::ops::Range<usize>>,
) -> Option<usize> {
    let json = text.as_bytes();
    if json.get(at) != Some(&b'"') {
        return None;
    }
    let end = string_end(json, at)?;
    let key = at + 1..end - 1;
    if json[key.clone()].contains(&b'\\') {
        return None;
    }
    if let Some(last) = last_key.take() {
        // Both spans lie between quotes, so they are whole characters.
        if !utf16_cmp(text.get(last)?, text.get(key.clone())?).is_lt() {
            return None;
        }
    }
    *last_key = Some(key);
    (json.get(end) == Some(&b':')).then_some(end + 1)
}

/// The index after the string starting at `at`, if it is escaped as RFC
/// 8785 escapes it.
fn string_end(json: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    loop {
        i += plain_prefix(&json[i..]);
        match *json.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => {
                i += match *json.get(i + 1)? {
                    b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't' => 2,
                    b'u' => {
                        // Only a control character without a short escape, in lower case.
                        let hex = json.get(i + 2..i + 6)?;
                        let short = matches!(hex, b"0008" | b"0009" | b"000a" | b"000c" | b"000d");
                        let control = hex[..2] == *b"00"
                            && matches!(hex[2], b'0' | b'1')
                            && matches!(hex[3], b'0'..=b'9' | b'a'..=b'f');
                        if short || !control {
                            return None;
                        }
                        6
                    }
                    _ => return None,
                };
            }
            // A control character as it is: not JSON, so not canonical.
            _ => return None,
        }
    }
}

/// The index after the number at `at`, if it is an integer below 2^53
/// written as its digits (no `-0`, no leading zero, no fraction or exponent).
fn integer_end(json: &[u8], at: usize) -> Option<usize> {
    let negative = json[at] == b'-';
    let digits = at + usize::from(negative);
    let end = digits
        + json[digits..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
    let text = &json[digits..end];
    if text.is_empty()
        || matches!(json.get(end), Some(b'.' | b'e' | b'E'))
        || (text[0] == b'0' && (text.len() > 1 || negative))
        || text.len() > 16
    {
        return None;
    }
    let value: u64 = std::str::from_utf8(text).ok()?.parse().ok()?;
    (value < EXACT_IN_DOUBLE).then_some(end)
}

/// An integer's digits, without the formatting machinery.
fn write_digits(text: &mut String, negative: bool, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if negative {
        text.push('-');
    }
    text.push_str(std::str::from_utf8(&digits[at..]).expect("ASCII digits"));
}

/// Puts the members of the object whose text starts at `body` (its keys from
/// `base` on the key stack) in canonical order; of a repeated key the last
/// is kept, as a `Value` keeps it.
fn sort_members(out: &mut Writer, body: usize, base: usize) {
    let members = &out.keys[base..];
    let span = |i: usize| {
        let start = members[i].member;
        let end = members
            .get(i + 1)
            .map_or(out.text.len(), |next| next.member - 1);
        start..end
    };
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by(|&a, &b| out.key_cmp(&members[a], &members[b]).then(a.cmp(&b)));
    let mut kept: Vec<usize> = Vec::with_capacity(order.len());
    for i in order {
        match kept.last_mut() {
            Some(last) if out.key_cmp(&members[*last], &members[i]).is_eq() => *last = i,
            _ => kept.push(i),
        }
    }
    let mut sorted = String::with_capacity(out.text.len() - body);
    for (n, &i) in kept.iter().enumerate() {
        if n > 0 {
            sorted.push(',');
        }
        sorted.push_str(&out.text[span(i)]);
    }
    out.text.truncate(body);
    out.text.push_str(&sorted);
}

/// Writes an object's key, escaped, as a string.
struct Key<'w> {
    out: &'w mut Writer,
}

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        write_string(&mut self.out.text, s);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::canonical::{canonical_json, digest_value_with};
    use serde_json::json;
    use serde_json::value::RawValue;

    fn read(text: &str) -> CanonicalJson {
        serde_json::from_str(text).unwrap()
    }

    /// Every digest is the one the `Value` of the same JSON gives, with
    /// either number rule.
    fn digests_as_a_value_does(text: &str) {
        let value: Value = serde_json::from_str(text).unwrap();
        let held = read(text);
        for numbers in [NumberForm::Ecmascript, NumberForm::Version1] {
            let mut w = DigestWriter::with_numbers(numbers);
            held.write_to(&mut w);
            assert_eq!(
                w.finish(),
                digest_value_with(&value, numbers),
                "{text} with {numbers:?}"
            );
        }
        // Read back, it is the same JSON value (`5.0` may come back as `5`,
        // `-0` as `0`: the same number to RFC 8785).
        for numbers in [NumberForm::Ecmascript, NumberForm::Version1] {
            assert_eq!(
                digest_value_with(&held.to_value(), numbers),
                digest_value_with(&value, numbers),
                "{text} reads back"
            );
        }
        assert_eq!(
            CanonicalJson::from_value(&value),
            held,
            "{text} from a Value"
        );
        let raw: &RawValue = serde_json::from_str(text).unwrap();
        assert_eq!(
            CanonicalJson::from_raw(raw).unwrap(),
            held,
            "{text} from raw text"
        );
    }

    #[test]
    fn text_is_rfc_8785_for_values_without_big_integers() {
        let text = r#" { "b" : [1, 2.50, -3, 1e21, true, null, {}], "a": {"z": "é\u0001\"", "y": []},
            "\u20ac": 1, "\ud83d\ude00": 2, "\ufb33": 3, "": -0.0 } "#;
        let held = read(text);
        let value: Value = serde_json::from_str(text).unwrap();
        assert_eq!(held.as_str(), canonical_json(&value));
        assert_eq!(
            held.as_str(),
            r#"{"":0,"a":{"y":[],"z":"é\u0001\""},"b":[1,2.5,-3,1e+21,true,null,{}],"€":1,"😀":2,"דּ":3}"#
        );
    }

    #[test]
    fn digests_match_a_value_for_every_shape() {
        for text in [
            "null",
            "true",
            r#""plain""#,
            "[]",
            "{}",
            "[[], [{}], [1, [2, [3]]]]",
            r#"{"id": "vpc-1", "tags": {"Name": "x", "Env": "prod"}, "ports": [22, 443]}"#,
            // out of order at several depths, and a key repeated (the last wins)
            r#"{"z": 1, "a": {"d": 4, "c": 3}, "m": [{"y": 1, "x": 2}], "a": {"k": 0}}"#,
            r#"{"a": 1, "a": 2}"#,
            // numbers: big integers, doubles, a version-1 tie
            r#"{"big": 9007199254740993, "neg": -9007199254740993, "max": 18446744073709551615}"#,
            r#"{"f": 0.1, "e": 1e-7, "tie": 1424953923781206.25, "i": 5.0, "z": -0}"#,
            // escapes in keys and strings
            r#"{"a\"b": "tab\there", "\\": "\u0000\u001f", "é": "\ud83d\ude00"}"#,
        ] {
            digests_as_a_value_does(text);
        }
    }

    #[test]
    fn text_is_taken_as_written_only_where_rewriting_it_would_change_nothing() {
        for (text, as_written) in [
            (
                r#"{"a":1,"b":[true,false,null,"x",-5,0,{}],"c":{"d":[]}}"#,
                true,
            ),
            ("[]", true),
            (r#""plain é😀""#, true),
            (r#""\u001f\n\"\\\b\f\r\t\u0000""#, true),
            (r#"{"":0,"€":1,"😀":2,"דּ":3}"#, true),
            ("9007199254740991", true),
            // not canonical, so rewritten
            (r#"{"b":1,"a":2}"#, false),
            (r#"{"a":1,"a":2}"#, false),
            (r#"{"a": 1}"#, false),
            ("[1, 2]", false),
            (r#"{"":0,"דּ":3,"😀":2}"#, false),
            (r#"{"a\"b":1}"#, false),
            (r#""\u000a""#, false),
            (r#""\u001F""#, false),
            (r#""\u0041""#, false),
            (r#""\u2028""#, false),
            (r#""\/""#, false),
            ("1.5", false),
            ("1e2", false),
            ("-0", false),
            ("9007199254740992", false),
            ("-9007199254740993", false),
        ] {
            assert_eq!(is_canonical(text), as_written, "{text}");
            let raw: &RawValue = serde_json::from_str(text).unwrap();
            let held = CanonicalJson::from_raw(raw).unwrap();
            assert_eq!(held, read(text), "{text}: the same as the rewrite");
            if as_written {
                assert_eq!(held.as_str(), text);
            }
        }
    }

    #[test]
    fn the_scan_finds_where_a_value_ends_and_refuses_what_is_not_json() {
        let end = |text: &str| with_open(|open| canonical_end(text, 0, open));
        let value = r#"{"a":[1,{},[]],"b":"}\"]","c":{"d":null}}"#;
        assert_eq!(end(&format!("{value},\"next\":1}}")), Some(value.len()));
        assert_eq!(end("null,1"), Some(4));
        assert_eq!(end("[]]"), Some(2));
        assert_eq!(end("-12}"), Some(3));
        for not_json in [
            "[1\"x\"]",
            "[1,]",
            "[,1]",
            r#"{"a":1"b":2}"#,
            r#"{"a"}"#,
            r#"{"a":}"#,
            r#"{"a":1,}"#,
            r#"{"a":1]"#,
            "[1}",
            "tru",
            "nul",
            "fals",
            "trux",
            "[",
            "{",
            "\"abc",
            "-",
            "",
            "}",
            ",",
        ] {
            assert!(
                serde_json::from_str::<Value>(not_json).is_err(),
                "{not_json}"
            );
            assert_eq!(end(not_json), None, "{not_json}");
        }
        let held = CanonicalJson::canonical_in_file(&Arc::new(format!("[{value},null]")), 1);
        assert!(matches!(held, Some((v, end)) if v.as_str() == value && end == value.len() + 1));
        let null = CanonicalJson::canonical_in_file(&Arc::new("[null]".to_owned()), 1);
        assert!(matches!(null, Some((v, 5)) if matches!(v.text, Text::Null)));
    }

    #[test]
    fn values_a_file_has_canonical_are_held_as_spans_of_it() {
        #[derive(Deserialize)]
        struct Entry<'a> {
            #[serde(borrow)]
            after: &'a RawValue,
        }
        let file =
            Arc::new(r#"[{"after":{"a":[1,"x"],"b":null}},{"after":{"b": 1, "a": 2}}]"#.to_owned());
        let entries: Vec<Entry> = serde_json::from_str(&file).unwrap();
        let held: Vec<CanonicalJson> = entries
            .iter()
            .map(|e| CanonicalJson::from_raw_in(&file, e.after).unwrap())
            .collect();
        assert!(matches!(&held[0].text, Text::InFile { file: f, .. } if Arc::ptr_eq(f, &file)));
        assert_eq!(held[0].as_str(), r#"{"a":[1,"x"],"b":null}"#);
        assert!(
            matches!(held[1].text, Text::Owned(_)),
            "rewritten, so its own"
        );
        assert_eq!(held[1].as_str(), r#"{"a":2,"b":1}"#);
        assert_eq!(
            held[0],
            read(r#"{"b": null, "a": [1, "x"]}"#),
            "equal to its rewrite"
        );
        assert_eq!(Arc::strong_count(&file), 2, "one span holds the file");

        // Text that is not from the file is copied, never sliced out of it.
        let elsewhere: &RawValue = serde_json::from_str(r#"{"a":[1,"x"],"b":null}"#).unwrap();
        let copied = CanonicalJson::from_raw_in(&file, elsewhere).unwrap();
        assert!(matches!(copied.text, Text::Owned(_)));
        assert_eq!(copied, held[0]);
    }

    #[test]
    fn a_value_too_deep_to_read_back_is_refused_not_held() {
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let deep = nested(110);
        let raw: &RawValue = serde_json::from_str(&deep).unwrap();
        let held = CanonicalJson::from_raw(raw).unwrap();
        assert_eq!(held.as_str(), deep, "rewritten, the same text");
        assert!(held.to_value().is_array());

        let too_deep = nested(200);
        let raw: &RawValue = serde_json::from_str(&too_deep).unwrap();
        let error = CanonicalJson::from_raw(raw).unwrap_err();
        assert!(error.to_string().contains("recursion limit"), "{error}");
    }

    #[test]
    fn serialises_as_the_json_it_holds() {
        let held = read(r#"{"b": 1, "a": [true]}"#);
        let stored = serde_json::to_string(&json!({ "after": held })).unwrap();
        assert_eq!(stored, r#"{"after":{"a":[true],"b":1}}"#);
        let back: CanonicalJson = serde_json::from_value(
            serde_json::from_str::<Value>(&stored).unwrap()["after"].clone(),
        )
        .unwrap();
        assert_eq!(back, held);
        assert!(CanonicalJson::default().is_null());
    }
}
