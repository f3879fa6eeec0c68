//! Redaction of secret-looking values in command output before it is kept or
//! shown: key material, well-known token shapes, `password=…`-style pairs,
//! and the values of the variables passed on to the command whose names say
//! they are secrets (`DEPLOY_TOKEN`), wherever they appear bare.

const SECRET_KEYS: &[&str] = &[
    "password",
    "passwd",
    "secret",
    "token",
    "api_key",
    "apikey",
    "api-key",
    "private_key",
    "access_key",
    "credential",
    "authorization",
];
const TOKEN_PREFIXES: &[&str] = &[
    "ghp_",
    "gho_",
    "ghs_",
    "ghu_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "sk_live_",
];
pub(crate) const REDACTED: &str = "[redacted]";

/// Redacts line by line; remembers whether it is inside a PEM private-key block.
#[derive(Debug, Default)]
pub(crate) struct Redactor {
    in_private_key: bool,
    /// Values that are secrets wherever they appear, longest first.
    values: Vec<String>,
}

/// The shortest value redacted by name alone: shorter ones (`1`, `dev`)
/// would blank out ordinary words.
const SHORTEST_SECRET_VALUE: usize = 8;

impl Redactor {
    /// A redactor that also hides the values of those of `env` (a command's
    /// environment) whose names say they are secrets.
    pub(crate) fn for_env(env: &[(String, String)]) -> Self {
        let mut values: Vec<String> = env
            .iter()
            .filter(|(name, value)| {
                let name = name.to_ascii_lowercase().replace('-', "_");
                value.len() >= SHORTEST_SECRET_VALUE
                    && SECRET_KEYS
                        .iter()
                        .any(|k| name.contains(&k.replace('-', "_")))
            })
            .map(|(_, value)| value.clone())
            .collect();
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        values.dedup();
        Self {
            in_private_key: false,
            values,
        }
    }

    /// Also hides `values` (secrets the operator passes on, whatever their
    /// names) wherever they appear.
    pub(crate) fn with_values(mut self, values: &[String]) -> Self {
        self.values
            .extend(values.iter().filter(|v| !v.is_empty()).cloned());
        self.values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        self.values.dedup();
        self
    }

    pub(crate) fn line(&mut self, line: &str) -> String {
        let line = &self.values.iter().fold(line.to_owned(), |line, value| {
            line.replace(value.as_str(), REDACTED)
        });
        if self.in_private_key {
            if line.contains("-----END") {
                self.in_private_key = false;
            }
            return REDACTED.into();
        }
        if line.contains("-----BEGIN") && line.contains("PRIVATE KEY-----") {
            self.in_private_key = !line.contains("-----END");
            return REDACTED.into();
        }
        redact_tokens(&redact_pairs(line))
    }
}

/// `password=hunter2`, `"api_key": "abc"`, `Authorization: Bearer x` → value redacted.
fn redact_pairs(line: &str) -> String {
    let lower = line.to_ascii_lowercase();
    let mut out = String::with_capacity(line.len());
    let mut copied = 0;
    let mut search = 0;
    while let Some((pos, key)) = SECRET_KEYS
        .iter()
        .filter_map(|k| lower[search..].find(k).map(|p| (p + search, *k)))
        .min_by_key(|(p, _)| *p)
    {
        let mut i = pos + key.len();
        let bytes = line.as_bytes();
        // The rest of an identifier (`password_hash`, `TOKEN"`) up to the separator.
        while i < bytes.len()
            && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'-')
        {
            i += 1;
        }
        while i < bytes.len() && matches!(bytes[i], b'"' | b'\'' | b' ') {
            i += 1;
        }
        if i < bytes.len() && matches!(bytes[i], b'=' | b':') {
            i += 1;
            while i < bytes.len() && matches!(bytes[i], b' ' | b'"' | b'\'') {
                i += 1;
            }
            for scheme in ["bearer ", "basic ", "token "] {
                if lower[i..].starts_with(scheme) {
                    i += scheme.len();
                }
            }
            let end = line[i..]
                .find(|c: char| {
                    c.is_whitespace() || matches!(c, '"' | '\'' | ',' | ';' | '}' | ')')
                })
                .map_or(line.len(), |e| e + i);
            if end > i {
                out.push_str(&line[copied..i]);
                out.push_str(REDACTED);
                copied = end;
            }
            search = end.max(i);
        } else {
            search = i.max(pos + 1);
        }
        if search >= line.len() {
            break;
        }
    }
    out.push_str(&line[copied..]);
    out
}

fn redact_tokens(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    'scan: while !rest.is_empty() {
        for (i, _) in rest.char_indices() {
            let tail = &rest[i..];
            let token_len = TOKEN_PREFIXES
                .iter()
                .find(|p| tail.starts_with(*p))
                .map(|p| {
                    p.len()
                        + run(&tail[p.len()..], |c| {
                            c.is_ascii_alphanumeric() || c == '_' || c == '-'
                        })
                })
                .filter(|&n| n >= 20)
                .or_else(|| aws_key_len(tail));
            if let Some(n) = token_len {
                let boundary = i == 0 || !rest[..i].ends_with(|c: char| c.is_ascii_alphanumeric());
                if boundary {
                    out.push_str(&rest[..i]);
                    out.push_str(REDACTED);
                    rest = &rest[i + n..];
                    continue 'scan;
                }
            }
        }
        out.push_str(rest);
        break;
    }
    out
}

fn aws_key_len(text: &str) -> Option<usize> {
    let prefixed = text.starts_with("AKIA") || text.starts_with("ASIA");
    (prefixed && run(&text[4..], |c| c.is_ascii_uppercase() || c.is_ascii_digit()) >= 16)
        .then_some(20)
}

fn run(text: &str, ok: impl Fn(char) -> bool) -> usize {
    text.find(|c: char| !ok(c)).unwrap_or(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(line: &str) -> String {
        Redactor::default().line(line)
    }

    #[test]
    fn pairs_lose_their_values() {
        assert_eq!(r("db password=hunter2 ok"), "db password=[redacted] ok");
        assert_eq!(
            r(r#"{"api_key": "abc123", "n": 1}"#),
            r#"{"api_key": "[redacted]", "n": 1}"#
        );
        assert_eq!(r("DB_PASSWORD: s3cret"), "DB_PASSWORD: [redacted]");
        assert_eq!(
            r("Authorization: Bearer abc.def"),
            "Authorization: Bearer [redacted]"
        );
        assert_eq!(
            r("token_count 5"),
            "token_count 5",
            "no separator, no value"
        );
    }

    #[test]
    fn token_shapes_are_redacted() {
        assert_eq!(
            r("using ghp_0123456789abcdefghijABCDEFGHIJ0123 now"),
            "using [redacted] now"
        );
        assert_eq!(r("key AKIAIOSFODNN7EXAMPLE."), "key [redacted].");
        assert_eq!(r("ghp_short"), "ghp_short");
    }

    #[test]
    fn private_key_blocks_are_redacted_whole() {
        let mut red = Redactor::default();
        let lines = [
            "-----BEGIN RSA PRIVATE KEY-----",
            "MIIEow",
            "-----END RSA PRIVATE KEY-----",
            "after",
        ];
        let out: Vec<String> = lines.iter().map(|l| red.line(l)).collect();
        assert_eq!(out, vec![REDACTED, REDACTED, REDACTED, "after"]);
    }

    #[test]
    fn ordinary_lines_pass_untouched() {
        let line = "+ aws_instance.web (create) — 1 to add, ünïcode";
        assert_eq!(r(line), line);
    }

    #[test]
    fn the_values_of_secret_variables_are_redacted_wherever_they_appear() {
        let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let mut r = Redactor::for_env(&env(&[
            ("DEPLOY_TOKEN", "s3cr3t-v4lue-99"),
            ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI"),
            ("AWS_PROFILE", "production-account"),
            ("API_KEY", "short"),
        ]));
        assert_eq!(
            r.line("using s3cr3t-v4lue-99 and wJalrXUtnFEMI/K7MDENG"),
            "using [redacted] and [redacted]/K7MDENG"
        );
        assert_eq!(
            r.line("profile production-account, key short"),
            "profile production-account, key short",
            "names that say nothing secret, and short values, are left"
        );
    }
}
