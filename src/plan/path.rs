//! Paths into a JSON value (`tags.Name`, `ingress[0].cidr`, `tags["k8s.io/role"]`).
//!
//! Plan files mark unknown and sensitive parts of a resource by path, and
//! coverage names the path that moved, so one small grammar serves both.

use serde_json::Value;
use std::fmt;

/// One step into a value: an object key or an array index.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Segment {
    Key(String),
    Index(usize),
}

/// A path into a JSON value; the empty path is the value itself.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ValuePath(pub(crate) Vec<Segment>);

impl ValuePath {
    pub(crate) fn root() -> Self {
        Self(Vec::new())
    }

    pub(crate) fn child_key(&self, key: &str) -> Self {
        let mut segments = self.0.clone();
        segments.push(Segment::Key(key.to_owned()));
        Self(segments)
    }

    pub(crate) fn child_index(&self, index: usize) -> Self {
        let mut segments = self.0.clone();
        segments.push(Segment::Index(index));
        Self(segments)
    }

    /// Whether `self` equals `other` or lies inside it.
    pub(crate) fn starts_with(&self, other: &ValuePath) -> bool {
        self.0.starts_with(&other.0)
    }

    #[cfg(test)]
    /// The value at this path, if there is one.
    pub(crate) fn lookup<'v>(&self, value: &'v Value) -> Option<&'v Value> {
        self.0.iter().try_fold(value, |v, seg| match (seg, v) {
            (Segment::Key(k), Value::Object(map)) => map.get(k),
            (Segment::Index(i), Value::Array(items)) => items.get(*i),
            _ => None,
        })
    }

    /// Parses the path grammar; the error says what is wrong at which character.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let bytes = text.as_bytes();
        let mut segments = Vec::new();
        let mut i = 0;
        let bare = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
        while i < bytes.len() {
            match bytes[i] {
                b'.' if i > 0 => i += 1,
                b'[' => {
                    let close = text[i..]
                        .find(']')
                        .map(|c| c + i)
                        .ok_or_else(|| format!("path `{text}`: `[` at {i} is never closed"))?;
                    let inner = &text[i + 1..close];
                    if let Ok(index) = inner.parse::<usize>() {
                        segments.push(Segment::Index(index));
                        i = close + 1;
                    } else if inner.starts_with('"') {
                        // A quoted key may itself contain `]`: find the closing `"]`.
                        let end = text[i + 1..]
                            .find("\"]")
                            .filter(|e| *e > 0)
                            .map(|e| e + i + 1)
                            .ok_or_else(|| {
                                format!("path `{text}`: quoted key at {i} is never closed")
                            })?;
                        let key: String = serde_json::from_str(&text[i + 1..=end])
                            .map_err(|e| format!("path `{text}`: quoted key at {i}: {e}"))?;
                        segments.push(Segment::Key(key));
                        i = end + 2;
                    } else {
                        return Err(format!(
                            "path `{text}`: `[{inner}]` is neither an index nor a quoted key"
                        ));
                    }
                    continue;
                }
                _ => {}
            }
            let start = i;
            while i < bytes.len() && bare(bytes[i]) {
                i += 1;
            }
            if start == i {
                if i >= bytes.len() {
                    break;
                }
                let unexpected = text[i..].chars().next().unwrap_or_default();
                return Err(format!(
                    "path `{text}`: unexpected `{unexpected}` at {i}; quote odd keys as [\"key\"]"
                ));
            }
            segments.push(Segment::Key(text[start..i].to_owned()));
        }
        if text.ends_with('.') {
            return Err(format!("path `{text}` ends with `.`"));
        }
        Ok(Self(segments))
    }
}

impl fmt::Display for ValuePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Segment::Index(n) => write!(f, "[{n}]")?,
                Segment::Key(k)
                    if !k.is_empty()
                        && k.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') =>
                {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Segment::Key(k) => write!(f, "[{}]", Value::String(k.clone()))?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_every_form() {
        for text in [
            "id",
            "tags.Name",
            "ingress[0].cidr",
            "tags[\"k8s.io/role\"]",
            "[2]",
            "a[1][2].b",
        ] {
            let path = ValuePath::parse(text).unwrap();
            assert_eq!(path.to_string(), text);
        }
        assert_eq!(ValuePath::parse("").unwrap(), ValuePath::root());
    }

    #[test]
    fn quoted_keys_may_hold_brackets_and_dots() {
        let path = ValuePath::parse("m[\"a.b]c\"].x").unwrap();
        assert_eq!(
            path.0,
            vec![
                Segment::Key("m".into()),
                Segment::Key("a.b]c".into()),
                Segment::Key("x".into())
            ]
        );
    }

    #[test]
    fn refuses_malformed_paths_with_a_reason() {
        assert!(ValuePath::parse("a[").unwrap_err().contains("never closed"));
        assert!(ValuePath::parse("a[x]")
            .unwrap_err()
            .contains("neither an index"));
        assert!(ValuePath::parse("a b")
            .unwrap_err()
            .contains("unexpected ` `"));
        assert!(ValuePath::parse("a.").unwrap_err().contains("ends with"));
    }

    /// Found by the plan_file fuzzer: a character of more than one byte
    /// where a key was expected was sliced by byte and panicked.
    #[test]
    fn an_unexpected_character_of_several_bytes_is_named_whole() {
        for (text, named) in [
            ("ښ", "`ښ` at 0"),
            ("a.é", "`é` at 2"),
            ("a b😀", "` ` at 1"),
        ] {
            let error = ValuePath::parse(text).unwrap_err();
            assert!(
                error.contains(&format!("unexpected {named}")),
                "{text}: {error}"
            );
        }
    }

    #[test]
    fn looks_up_values() {
        let v = json!({"a": [{"b": 1}]});
        assert_eq!(
            ValuePath::parse("a[0].b").unwrap().lookup(&v),
            Some(&json!(1))
        );
        assert_eq!(ValuePath::parse("a[1]").unwrap().lookup(&v), None);
    }
}
