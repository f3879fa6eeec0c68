//! What varies from run to run, written as placeholders so that a reply or a
//! report section can be an inline `insta` snapshot: digests
//! (`sha256:<64 hex>` → `sha256:[digest]`), commit shas (40 hex → `[sha]`)
//! and their short forms (12 hex → `[short]`), times (`2026-12-01
//! 21:03:04 UTC` → `[time]`), ports on 127.0.0.1 (`127.0.0.1:[port]`) and
//! temporary directories (`/tmp/.tmpXXXXXX` → `[tmp]`). A plain function
//! (insta's `filters` feature is not enabled).

/// `text` with what varies replaced by placeholders.
pub fn redact(text: &str) -> String {
    let text = redact_tmp(text);
    let text = redact_ports(&text);
    let text = redact_times(&text);
    redact_hex(&text)
}

fn redact_hex(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        if starts_word && bytes[i].is_ascii_hexdigit() {
            let run = bytes[i..]
                .iter()
                .take_while(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
                .count();
            let ends_word = bytes
                .get(i + run)
                .is_none_or(|b| !b.is_ascii_alphanumeric());
            let word = &text[i..i + run];
            let has_digit = word.bytes().any(|b| b.is_ascii_digit());
            let after_digest_prefix = text[..i].ends_with("sha256:");
            let placeholder = match run {
                64 if after_digest_prefix => Some("[digest]"),
                40 => Some("[sha]"),
                12 => Some("[short]"),
                _ => None,
            };
            if let Some(placeholder) = placeholder.filter(|_| ends_word && has_digit) {
                out.push_str(placeholder);
                i += run;
                continue;
            }
        }
        let ch = text[i..].chars().next().unwrap();
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// `YYYY-MM-DD HH:MM[:SS] UTC` and RFC 3339 `YYYY-MM-DDTHH:MM:SSZ`.
fn redact_times(text: &str) -> String {
    const PATTERN: &[u8] = b"dddd-dd-dd?dd:dd";
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let matches = bytes.len() - i >= PATTERN.len()
            && PATTERN.iter().zip(&bytes[i..]).all(|(p, b)| match p {
                b'd' => b.is_ascii_digit(),
                b'?' => *b == b' ' || *b == b'T',
                other => other == b,
            });
        if matches {
            let mut end = i + PATTERN.len();
            let seconds = bytes.get(end..end + 3);
            if seconds.is_some_and(|s| s[0] == b':' && s[1..].iter().all(u8::is_ascii_digit)) {
                end += 3;
            }
            if text[end..].starts_with(" UTC") {
                end += 4;
            } else if text[end..].starts_with('Z') {
                end += 1;
            }
            out.push_str("[time]");
            i = end;
            continue;
        }
        let ch = text[i..].chars().next().unwrap();
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

fn redact_ports(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("127.0.0.1:") {
        let (before, after) = rest.split_at(at + "127.0.0.1:".len());
        out.push_str(before);
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 {
            out.push_str("[port]");
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

fn redact_tmp(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("/tmp/.tmp") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "/tmp/.tmp".len()..];
        let name = after.bytes().take_while(u8::is_ascii_alphanumeric).count();
        out.push_str("[tmp]");
        rest = &after[name..];
    }
    out.push_str(rest);
    out
}

#[test]
fn what_varies_is_written_as_placeholders() {
    let digest = format!("sha256:{}", "0a".repeat(32));
    let text = format!(
        "/approve {digest} at `37515e73e47a` ({}) expires: 2026-12-01 21:03:04 UTC, at 2026-12-01 21:20 UTC, \
         http://127.0.0.1:41234/x /tmp/.tmpAbC123/data deadbeefcafe added",
        "c46258b09c55c46258b09c55c46258b09c55c462"
    );
    assert_eq!(
        redact(&text),
        "/approve sha256:[digest] at `[short]` ([sha]) expires: [time], at [time], \
         http://127.0.0.1:[port]/x [tmp]/data deadbeefcafe added"
    );
}
