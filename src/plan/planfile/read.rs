//! The plan file read in one pass, by hand, as most plan commands write it.
//!
//! Read by serde_json, each entry's `after` and `before` was passed over
//! once to find where it ends, then scanned again to find it canonical:
//! about a seventh of a large plan's parse (issue 12). Here one scan
//! ([`CanonicalJson::canonical_in_file`]) checks that a value is JSON, finds
//! its end and finds it canonical.
//!
//! serde_json stays the definition of a plan file and of what is wrong with
//! one. This reader gives up (`None`) on anything it is not sure it reads as
//! serde_json does: an escape in a key, a field twice or unknown, a value
//! that is not canonical and not plain, any defect at all. The file is then
//! read by serde_json from the start. So it returns only what serde_json's
//! reading gives, and never an error of its own. Values it does not read
//! itself (the outputs, a value to rewrite) are found by a lenient scan and
//! handed to serde_json, which checks them.

use super::{Action, CanonicalJson, RawEntry, RawPlanFile};
use crate::model::canonical::plain_prefix;
use serde::de::value::StrDeserializer;
use serde::de::{DeserializeOwned, IntoDeserializer as _};
use serde::Deserialize as _;
use std::sync::Arc;

/// Deeper values are left to serde_json, whose recursion limit (128) counts
/// from the top of the file.
const MAX_LENIENT_DEPTH: usize = 100;

/// The plan file in `file`, when this reader is sure of it; `None` leaves
/// the file to serde_json.
pub(super) fn plan_file(file: &Arc<String>) -> Option<RawPlanFile<CanonicalJson>> {
    let mut reader = Reader { file, at: 0 };
    let mut summary: Option<String> = None;
    let mut entries = None;
    let mut outputs = None;
    let mut destructive: Option<Option<bool>> = None;
    let mut denied = None;
    let mut empty: Option<Option<bool>> = None;
    reader.object(|r, key| match key {
        "summary" => once(&mut summary, r.value()?),
        "entries" => once(&mut entries, r.entries()?),
        "outputs" => once(&mut outputs, r.value()?),
        "destructive" => once(&mut destructive, r.value()?),
        "denied" => once(&mut denied, r.value()?),
        "empty" => once(&mut empty, r.value()?),
        _ => None,
    })?;
    reader.skip_whitespace();
    if reader.at != file.len() {
        return None;
    }
    Some(RawPlanFile {
        summary: summary.unwrap_or_default(),
        entries: entries.unwrap_or_default(),
        outputs: outputs.unwrap_or_default(),
        destructive: destructive.flatten(),
        denied: denied.flatten(),
        empty: empty.flatten(),
    })
}

/// Fills `slot` with a field's value; `None` when the field came before.
fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
}

struct Reader<'f> {
    file: &'f Arc<String>,
    at: usize,
}

impl<'f> Reader<'f> {
    fn json(&self) -> &'f [u8] {
        self.file.as_bytes()
    }

    fn entries(&mut self) -> Option<Vec<RawEntry<CanonicalJson>>> {
        let mut entries = Vec::new();
        self.array(|r| {
            entries.push(r.entry()?);
            Some(())
        })?;
        Some(entries)
    }

    fn entry(&mut self) -> Option<RawEntry<CanonicalJson>> {
        let mut address = None;
        let mut action = None;
        let mut after = None;
        let mut unknown = None;
        let mut sensitive = None;
        let mut before = None;
        let mut forced_by = None;
        self.object(|r, key| match key {
            "address" => once(&mut address, r.string()?),
            "action" => once(&mut action, r.action()?),
            "after" => once(&mut after, r.canonical()?),
            "unknown" => once(&mut unknown, r.strings()?),
            "sensitive" => once(&mut sensitive, r.strings()?),
            "before" => once(&mut before, r.canonical()?),
            "forced_by" => once(&mut forced_by, r.strings()?),
            _ => None,
        })?;
        Some(RawEntry {
            address: address?,
            action: action?,
            after,
            unknown: unknown.unwrap_or_default(),
            sensitive: sensitive.unwrap_or_default(),
            before,
            forced_by: forced_by.unwrap_or_default(),
        })
    }

    /// An action's name, read by `Action`'s own `Deserialize`.
    fn action(&mut self) -> Option<Action> {
        let name: StrDeserializer<'_, serde::de::value::Error> =
            self.plain_string()?.into_deserializer();
        Action::deserialize(name).ok()
    }

    /// An entry's value: a span of the file when the file has it canonical
    /// (`null` as [`CanonicalJson::null`], as serde_json reads an absent
    /// value), else rewritten.
    fn canonical(&mut self) -> Option<CanonicalJson> {
        self.skip_whitespace();
        match CanonicalJson::canonical_in_file(self.file, self.at) {
            Some((value, end)) => {
                self.at = end;
                Some(value)
            }
            None => self.value(),
        }
    }

    fn string(&mut self) -> Option<String> {
        match self.plain_string() {
            Some(plain) => Some(plain.to_owned()),
            None => self.value(),
        }
    }

    /// A list of strings, most often of plain ones.
    fn strings(&mut self) -> Option<Vec<String>> {
        let start = self.at;
        let mut plain = Vec::new();
        let all_plain = self.array(|r| {
            plain.push(r.plain_string()?.to_owned());
            Some(())
        });
        if all_plain.is_some() {
            return Some(plain);
        }
        self.at = start;
        self.value()
    }

    /// A string with no escape, as the file has it; on `None` nothing is read.
    fn plain_string(&mut self) -> Option<&'f str> {
        self.skip_whitespace();
        if self.json().get(self.at) != Some(&b'"') {
            return None;
        }
        let start = self.at + 1;
        let end = start + plain_prefix(&self.json()[start..]);
        if self.json().get(end) != Some(&b'"') {
            return None;
        }
        self.at = end + 1;
        Some(&self.file[start..end])
    }

    /// Any value, read by serde_json from the span [`value_end`] finds.
    fn value<T: DeserializeOwned>(&mut self) -> Option<T> {
        self.skip_whitespace();
        let end = value_end(self.json(), self.at)?;
        let value = serde_json::from_str(&self.file[self.at..end]).ok()?;
        self.at = end;
        Some(value)
    }

    /// An object whose keys are plain strings, each member read by `member`.
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'f str) -> Option<()>) -> Option<()> {
        self.expect(b'{')?;
        if self.next_is(b'}') {
            return Some(());
        }
        loop {
            let key = self.plain_string()?;
            self.expect(b':')?;
            member(self, key)?;
            if !self.next_is(b',') {
                return self.expect(b'}');
            }
        }
    }

    fn array(&mut self, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.expect(b'[')?;
        if self.next_is(b']') {
            return Some(());
        }
        loop {
            item(self)?;
            if !self.next_is(b',') {
                return self.expect(b']');
            }
        }
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        self.next_is(byte).then_some(())
    }

    /// Whether `byte` comes next, after whitespace; if so it is read.
    fn next_is(&mut self, byte: u8) -> bool {
        self.skip_whitespace();
        let is = self.json().get(self.at) == Some(&byte);
        self.at += usize::from(is);
        is
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.json().get(self.at) {
            self.at += 1;
        }
    }
}

/// The index after the JSON value at `at`, found without checking it
/// (serde_json checks the span it is then given): a string runs to its
/// closing quote, an array or object to its closing bracket, anything else
/// to the next delimiter. `None` at the end of the file, or deeper than
/// [`MAX_LENIENT_DEPTH`].
fn value_end(json: &[u8], at: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = at;
    loop {
        match *json.get(i)? {
            b'"' => i = quoted_end(json, i)?,
            b'{' | b'[' if depth == MAX_LENIENT_DEPTH => return None,
            b'{' | b'[' => {
                depth += 1;
                i += 1;
            }
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                i += 1;
            }
            _ if depth > 0 => i += 1,
            _ => {
                let scalar = json[i..]
                    .iter()
                    .take_while(|b| !matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                    .count();
                return (scalar > 0).then_some(i + scalar);
            }
        }
        if depth == 0 {
            return Some(i);
        }
    }
}

/// The index after the string at `at`: after the next quote no backslash escapes.
fn quoted_end(json: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    loop {
        i += plain_prefix(json.get(i..)?);
        match *json.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MemberId;
    use crate::plan::planfile::{MemberPlan, PlanFileError};
    use serde_json::json;

    type Read = Result<MemberPlan, PlanFileError>;

    /// What wavegate makes of `text`, what serde_json's reading alone makes
    /// of it, and whether this reader read it itself.
    fn both_ways(text: &str) -> (Read, Read, bool) {
        let member: MemberId = "app@prod".parse().unwrap();
        let file = Arc::new(text.to_owned());
        let by_hand = plan_file(&file).is_some();
        let read = MemberPlan::parse_owned(&member, text.as_bytes().to_vec());
        (read, MemberPlan::parse_by_serde(&member, &file), by_hand)
    }

    fn rich_plan() -> serde_json::Value {
        json!({
            "summary": "2 to add, 1 to change, 1 to replace",
            "entries": [
                {
                    "address": "aws_instance.web[\"blue\"]",
                    "action": "create",
                    "after": {"ami": "ami-1", "tags": {"Name": "web \u{e9}", "team": "infra"}, "ports": [22, 443], "id": null},
                    "unknown": ["id", "arn"],
                    "sensitive": ["tags[\"secret\"]"]
                },
                {
                    "address": "aws_s3_bucket.logs",
                    "action": "replace",
                    "before": {"bucket": "old", "size": 1.5},
                    "after": {"bucket": "new", "size": 2, "big": 9_007_199_254_740_993_u64},
                    "forced_by": ["bucket"]
                },
                {"address": "aws_iam_role.r", "action": "update", "after": "line\nbreak \"quoted\""},
                {"address": "data.aws_ami.a", "action": "read", "after": null},
                {"address": "aws_eip.old", "action": "delete", "before": {"id": "eip-1"}},
                {"address": "aws_vpc.main", "action": "no-op", "after": {"id": "vpc-1"}}
            ],
            "outputs": {"known": {"url": "https://x", "n": [1, 2]}, "unknown": ["arn"], "sensitive": ["token"]},
            "destructive": true,
            "denied": {"rules": ["no-public-buckets"]},
            "empty": false
        })
    }

    #[test]
    fn a_plan_as_plan_commands_write_it_is_read_by_hand_as_serde_json_reads_it() {
        let plan = rich_plan();
        for text in [
            serde_json::to_string(&plan).unwrap(),
            serde_json::to_string_pretty(&plan).unwrap(),
            r#" { "entries" : [ { "action" : "create" , "address" : "a" , "after" : { "b" : 1 , "a" : [ ] } } ] } "#.to_owned(),
            r#"{"summary":"nothing","empty":true}"#.to_owned(),
            "{}".to_owned(),
        ] {
            let (read, by_serde, by_hand) = both_ways(&text);
            assert!(by_hand, "read by hand: {text}");
            assert!(read.is_ok(), "{read:?}: {text}");
            assert_eq!(read, by_serde, "{text}");
        }
    }

    #[test]
    fn what_it_is_not_sure_of_it_leaves_to_serde_json() {
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let entry = |after: &str| {
            format!(r#"{{"entries":[{{"address":"a","action":"create","after":{after}}}]}}"#)
        };
        for text in [
            // read the same by serde_json, but not plainly
            r#"{"summ\u0061ry":"x"}"#.to_owned(),
            r#"{"entries":[{"address":"a","action":"cr\u0065ate"}]}"#.to_owned(),
            entry(&nested(101)),
            // defects, which serde_json names
            r#"{"summary":"a","summary":"b"}"#.to_owned(),
            r#"{"entries":[{"address":"a","action":"create","after":{},"after":{}}]}"#.to_owned(),
            r#"{"entries":[{"address":"a","action":"create","after":null,"after":{}}]}"#.to_owned(),
            r#"{"extra":1}"#.to_owned(),
            r#"{"entries":[]} x"#.to_owned(),
            r#"["s"]"#.to_owned(),
            r#"{"entries":[{"address":"a","action":"make"}]}"#.to_owned(),
            r#"{"entries":[{"action":"create"}]}"#.to_owned(),
            r#"{"entries":null}"#.to_owned(),
            entry("01"),
            entry("[1,]"),
            entry("[1\"x\"]"),
            entry("tru"),
            entry(&nested(200)),
            entry("1e400"),
            entry("\"\\ud800\""),
        ] {
            let (read, by_serde, by_hand) = both_ways(&text);
            assert!(!by_hand, "left to serde_json: {text}");
            assert_eq!(read, by_serde, "{text}");
        }
    }

    /// Thousands of files one to three edits away from plans, each read as
    /// serde_json reads it: the same plan and digest, or the same error.
    #[test]
    fn every_file_near_a_plan_reads_as_serde_json_reads_it() {
        let plan = rich_plan();
        let seeds = [
            serde_json::to_string(&plan).unwrap(),
            serde_json::to_string_pretty(&plan).unwrap(),
        ];
        const BYTES: &[u8] = b"{}[],:\"\\ \n0123456789-.eE+tfnrula\x01";
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |below: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % below as u64) as usize
        };
        let (mut by_hand_ok, mut by_serde_err, mut tried) = (0, 0, 0);
        for round in 0..6000 {
            let mut bytes = seeds[round % seeds.len()].clone().into_bytes();
            for _ in 0..1 + next(3) {
                let at = next(bytes.len());
                let byte = BYTES[next(BYTES.len())];
                match next(3) {
                    0 => {
                        bytes.remove(at);
                    }
                    1 => bytes.insert(at, byte),
                    _ => bytes[at] = byte,
                }
            }
            let Ok(text) = String::from_utf8(bytes) else {
                continue;
            };
            let (read, by_serde, by_hand) = both_ways(&text);
            assert_eq!(read, by_serde, "{text}");
            tried += 1;
            by_hand_ok += usize::from(by_hand && read.is_ok());
            by_serde_err += usize::from(!by_hand && read.is_err());
        }
        // Both ways are taken often, so the comparison means something.
        assert!(by_hand_ok > tried / 10, "{by_hand_ok} of {tried}");
        assert!(by_serde_err > tried / 3, "{by_serde_err} of {tried}");
    }
}
