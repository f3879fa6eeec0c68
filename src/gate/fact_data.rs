//! What a ledger fact carries beyond its kind, digest, actor and time: the
//! plan or run it was given in, the member an override is for, why it was
//! refused or revoked, what a pending gate asks. Typed, so the gate rules
//! read fields instead of magic keys.
//!
//! The JSON form is hashed into the chain and facts carry no format version,
//! so it must stay exactly what wavegate wrote before this type existed:
//! `null` when there is nothing, an object with only the keys that are set
//! otherwise. A key this version does not know, or a value that does not fit
//! its field (a fact written by another version), is kept as read in
//! `unknown`, and a `data` that is not an object at all in `foreign`, so the
//! hash of every fact ever written still checks.

use crate::model::{CommitSha, MemberId};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct FactData {
    /// The head a pull request's gate fact was given at.
    pub head: Option<CommitSha>,
    /// The base that plan was planned against.
    pub base: Option<CommitSha>,
    /// The apply run a run gate's or an override's fact belongs to.
    pub run: Option<i64>,
    /// The merge commit that run applies.
    pub merge: Option<CommitSha>,
    /// The member an override is for.
    pub member: Option<MemberId>,
    /// The policy rules that denied the overridden plan.
    pub rules: Option<Vec<String>>,
    /// Why it was refused or revoked, or an override's stated reason.
    pub reason: Option<String>,
    /// A revoke by a repository admin that withdraws everyone's approvals.
    pub all: Option<bool>,
    /// Why an override was refused (its `reason` is the overrider's own).
    pub refused: Option<String>,
    /// The members a pending gate waits on.
    pub members: Option<Vec<MemberId>>,
    /// What a pending gate asks, in a sentence.
    pub description: Option<String>,
    /// What became of a hook's call (`passed`, `failed`, `held`, `approved`).
    pub outcome: Option<String>,
    /// The job an operator queued again.
    pub job: Option<i64>,
    /// Keys this version does not read, kept as read.
    pub unknown: BTreeMap<String, Value>,
    /// A `data` that is not an object (only written outside wavegate), kept as read.
    pub foreign: Option<Value>,
}

impl FactData {
    /// Given for the plan of `head` on `base` (a pull request's gate).
    pub fn at_plan(head: &CommitSha, base: &CommitSha) -> Self {
        Self {
            head: Some(head.clone()),
            base: Some(base.clone()),
            ..Self::default()
        }
    }

    /// Given in apply run `run`, which applies `merge`.
    pub(crate) fn in_run(run: i64, merge: &CommitSha) -> Self {
        Self {
            run: Some(run),
            merge: Some(merge.clone()),
            ..Self::default()
        }
    }

    pub(crate) fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// Whether a revoke withdraws every approver's approval, not only its author's.
    pub(crate) fn withdraws_everyones(&self) -> bool {
        self.all == Some(true)
    }

    /// The form hashed and stored.
    pub fn to_value(&self) -> Value {
        if let Some(foreign) = &self.foreign {
            return foreign.clone();
        }
        let mut map = Map::new();
        let mut put = |key: &str, value: Option<Value>| {
            if let Some(value) = value {
                map.insert(key.to_owned(), value);
            }
        };
        let sha = |sha: &Option<CommitSha>| sha.as_ref().map(|s| Value::from(s.as_str()));
        let text = |text: &Option<String>| text.clone().map(Value::from);
        put("head", sha(&self.head));
        put("base", sha(&self.base));
        put("run", self.run.map(Value::from));
        put("merge", sha(&self.merge));
        put("member", self.member.as_ref().map(|m| m.to_string().into()));
        put("rules", self.rules.clone().map(Value::from));
        put("reason", text(&self.reason));
        put("all", self.all.map(Value::from));
        put("refused", text(&self.refused));
        put(
            "members",
            self.members
                .as_ref()
                .map(|ms| ms.iter().map(|m| Value::from(m.to_string())).collect()),
        );
        put("description", text(&self.description));
        put("outcome", text(&self.outcome));
        put("job", self.job.map(Value::from));
        for (key, value) in &self.unknown {
            map.insert(key.clone(), value.clone());
        }
        if map.is_empty() {
            Value::Null
        } else {
            Value::Object(map)
        }
    }

    /// Reads any JSON a fact's `data` ever held; never fails (see the module doc).
    pub(crate) fn from_value(value: Value) -> Self {
        let mut map = match value {
            Value::Null => return Self::default(),
            Value::Object(map) if !map.is_empty() => map,
            other => {
                return Self {
                    foreign: Some(other),
                    ..Self::default()
                }
            }
        };
        let mut take = |key: &str, read: &dyn Fn(&Value) -> bool| -> Option<Value> {
            match map.get(key) {
                Some(value) if read(value) => map.remove(key),
                _ => None,
            }
        };
        let is_sha = |v: &Value| v.as_str().is_some_and(|s| CommitSha::parse(s).is_ok());
        let is_text = |v: &Value| v.is_string();
        let is_member = |v: &Value| v.as_str().is_some_and(|s| s.parse::<MemberId>().is_ok());
        let is_texts = |v: &Value| v.as_array().is_some_and(|a| a.iter().all(Value::is_string));
        let is_members = |v: &Value| v.as_array().is_some_and(|a| a.iter().all(is_member));
        let sha = |v: Option<Value>| v.and_then(|v| CommitSha::parse(v.as_str()?).ok());
        let text = |v: Option<Value>| v.and_then(|v| v.as_str().map(str::to_owned));
        let member = |v: &Value| v.as_str().and_then(|s| s.parse::<MemberId>().ok());
        let data = Self {
            head: sha(take("head", &is_sha)),
            base: sha(take("base", &is_sha)),
            run: take("run", &|v| v.is_i64()).and_then(|v| v.as_i64()),
            merge: sha(take("merge", &is_sha)),
            member: take("member", &is_member).and_then(|v| member(&v)),
            rules: take("rules", &is_texts).and_then(|v| {
                v.as_array()
                    .map(|a| a.iter().filter_map(|r| text(Some(r.clone()))).collect())
            }),
            reason: text(take("reason", &is_text)),
            all: take("all", &|v| v.is_boolean()).and_then(|v| v.as_bool()),
            refused: text(take("refused", &is_text)),
            members: take("members", &is_members)
                .and_then(|v| v.as_array().map(|a| a.iter().filter_map(member).collect())),
            description: text(take("description", &is_text)),
            outcome: text(take("outcome", &is_text)),
            job: take("job", &|v| v.is_i64()).and_then(|v| v.as_i64()),
            unknown: BTreeMap::new(),
            foreign: None,
        };
        Self {
            unknown: map.into_iter().collect(),
            ..data
        }
    }
}

impl Serialize for FactData {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for FactData {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(Self::from_value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sha(c: char) -> CommitSha {
        CommitSha::parse(&c.to_string().repeat(40)).unwrap()
    }

    #[test]
    fn nothing_is_null_and_each_field_is_its_key() {
        assert_eq!(FactData::default().to_value(), Value::Null);
        let data = FactData::at_plan(&sha('a'), &sha('b')).with_reason("no");
        assert_eq!(
            data.to_value(),
            json!({"head": "a".repeat(40), "base": "b".repeat(40), "reason": "no"})
        );
        assert_eq!(FactData::from_value(data.to_value()), data);
    }

    #[test]
    fn what_this_version_cannot_read_is_kept_as_it_was_read() {
        let read = json!({"run": "twelve", "head": "not a sha", "later": [1, 2.5], "all": true});
        let data = FactData::from_value(read.clone());
        assert_eq!(data.run, None);
        assert_eq!(data.head, None);
        assert!(data.withdraws_everyones());
        assert_eq!(data.unknown.len(), 3);
        assert_eq!(data.to_value(), read);

        for foreign in [json!("a string"), json!([1, 2]), json!(7), json!({})] {
            assert_eq!(FactData::from_value(foreign.clone()).to_value(), foreign);
        }
    }
}
