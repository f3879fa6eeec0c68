//! Text a pull request controls, and the only ways it enters a comment.
//!
//! A pull request writes the plan files (addresses, output names and values,
//! summaries, policy rule names), what its commands print, the paths it
//! changes and the messages that quote them. A reviewer decides on the
//! report those land in, so none of it may become markdown: a newline that
//! starts a heading, a backtick that closes a code span, an HTML comment
//! that forges the bot's markers, an `@team` mention, a terminal escape.
//!
//! [`Untrusted`] holds such text and has no `Display`: it reaches a comment
//! through [`code`], [`cell_code`], [`fenced`], [`prose`] or [`message`]
//! (wavegate's own words that quote a pull request's), each inert by
//! construction and
//! the same on GitHub and Forgejo (both render CommonMark with GitHub's
//! extensions):
//! - code spans and fences are longer than any run of backticks inside;
//!   a code span holds one line;
//! - control characters, terminal escape sequences and bidirectional
//!   overrides are removed, and `<!--` is broken, so nothing a pull request
//!   writes contains the bot's own markers;
//! - prose escapes every markdown character and HTML, and breaks mentions,
//!   references and links;
//! - lengths are capped (code spans and prose; a fence's body is shortened
//!   by the report's own size budget, which says so).

use serde::{Deserialize, Serialize};

/// Longest code span, in characters, before it is cut with `…`.
pub const LONGEST_SPAN: usize = 300;
/// Longest prose, in characters, before it is cut with `…`.
pub const LONGEST_PROSE: usize = 2_000;

/// Text a pull request controls. Compare, sort and digest it through
/// [`Untrusted::as_str`]; show it only through the renderings below.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Untrusted(String);

impl Untrusted {
    /// The text as written, for comparing, digesting and machine output
    /// (JSON), never for a comment.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }

    /// An inline code span (see [`code`]).
    pub fn code(&self) -> String {
        code(&self.0)
    }
}

impl From<String> for Untrusted {
    fn from(text: String) -> Self {
        Self(text)
    }
}

impl From<&str> for Untrusted {
    fn from(text: &str) -> Self {
        Self(text.to_owned())
    }
}

impl PartialEq<str> for Untrusted {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Untrusted {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl AsRef<str> for Untrusted {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// How [`clean`] treats line breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// Kept as `\n` (a `\r\n` or a lone `\r` becomes one): for fences.
    Keep,
    /// Shown as `⏎`: for one line of text.
    Fold,
}

/// `text` without what could act on a reader rather than be read: terminal
/// escape sequences (CSI, OSC and the rest), other control characters
/// (tabs kept), bidirectional overrides and isolates, and the `<!--` that
/// opens an HTML comment (broken by a zero-width space, so no text a pull
/// request writes can spell the bot's markers, even inside code).
pub fn clean(text: &str, lines: Lines) -> String {
    // Most text (a plan's output, an address) holds nothing to remove.
    let plain = text
        .bytes()
        .all(|b| ((0x20..0x7f).contains(&b) && b != b'<') || b == b'\n' || b == b'\t');
    if plain && (lines == Lines::Keep || !text.contains('\n')) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => skip_escape(&mut chars),
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                newline(&mut out, lines);
            }
            '\n' | '\u{2028}' | '\u{2029}' | '\u{85}' => newline(&mut out, lines),
            '\t' => out.push('\t'),
            c if c.is_control() || is_bidi_control(c) => {}
            c => out.push(c),
        }
    }
    // Checked on what is left, so a removed character between `<` and
    // `!--` does not let one through.
    if out.contains("<!--") {
        out = out.replace("<!--", "<!\u{200b}--");
    }
    out
}

fn newline(out: &mut String, lines: Lines) {
    match lines {
        Lines::Keep => out.push('\n'),
        Lines::Fold => out.push('⏎'),
    }
}

/// Skips one escape sequence after ESC: CSI (`[` parameters, a final byte),
/// OSC, DCS and the like (up to BEL or ST), or one character.
fn skip_escape(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    match chars.next() {
        Some('[') => {
            for c in chars.by_ref() {
                if ('\u{40}'..='\u{7e}').contains(&c) {
                    break;
                }
            }
        }
        Some(']' | 'P' | 'X' | '^' | '_') => {
            while let Some(c) = chars.next() {
                if c == '\u{7}' {
                    break;
                }
                if c == '\u{1b}' {
                    if chars.peek() == Some(&'\\') {
                        chars.next();
                    }
                    break;
                }
            }
        }
        _ => {}
    }
}

/// Embedding, override and isolate controls, and the marks that reorder
/// what a reader sees without showing themselves.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{061c}')
}

/// `text` cut to `most` characters, `…` saying so.
fn capped(text: String, most: usize) -> String {
    match text.char_indices().nth(most) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// The longest run of backticks in `text`.
fn longest_backtick_run(text: &str) -> usize {
    text.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

/// An inline code span of `text` on one line: line breaks shown as `⏎`,
/// delimited by one backtick more than its longest run, padded where it
/// starts or ends with a backtick or a space (CommonMark strips one space
/// each side), capped at [`LONGEST_SPAN`] characters. Nothing inside a code
/// span is markdown, a mention or a link, on either forge.
pub fn code(text: &str) -> String {
    span(capped(clean(text, Lines::Fold), LONGEST_SPAN))
}

/// [`code`] for a cell of a table, where `|` would end the cell even inside
/// a code span unless escaped (GitHub shows `\|` there as `|`).
pub fn cell_code(text: &str) -> String {
    let text = capped(clean(text, Lines::Fold), LONGEST_SPAN);
    let mut escaped = String::with_capacity(text.len() + 4);
    for c in text.chars() {
        if c == '|' {
            // A backslash of the text's own before it would escape the
            // escape: a zero-width space keeps them apart.
            if escaped.ends_with('\\') {
                escaped.push('\u{200b}');
            }
            escaped.push_str("\\|");
        } else {
            escaped.push(c);
        }
    }
    span(escaped)
}

fn span(text: String) -> String {
    if text.is_empty() {
        return "` `".to_owned();
    }
    let ticks = "`".repeat(longest_backtick_run(&text) + 1);
    let pad = if text.starts_with(['`', ' ']) || text.ends_with(['`', ' ']) {
        " "
    } else {
        ""
    };
    format!("{ticks}{pad}{text}{pad}{ticks}")
}

/// A backtick fence longer than any run of backticks in `body` (three at
/// least), so no line of it closes the block.
fn fence_for(body: &str) -> String {
    "`".repeat(longest_backtick_run(body).max(2) + 1)
}

/// A fenced code block of `text` with the info string `info` (the bot's
/// own, e.g. `text` or `diff`), without a final newline: cleaned, line
/// breaks kept, fenced longer than any backtick run inside.
pub fn fenced(text: &str, info: &str) -> String {
    fenced_in(text, info, "")
}

/// [`fenced`] inside a container whose lines start with `prefix` (`"> "` in
/// a quote, spaces in a list item): every line carries it, so no line of
/// the text leaves the container.
pub fn fenced_in(text: &str, info: &str, prefix: &str) -> String {
    let body = clean(text, Lines::Keep);
    let fence = fence_for(&body);
    let mut out = format!("{prefix}{fence}{info}\n");
    for line in body.lines() {
        out.push_str(prefix);
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(prefix);
    out.push_str(&fence);
    out
}

/// `text` as running markdown text on one line: every character markdown
/// or HTML could read escaped; `@` (mentions, emails), `#1`, `!1` and
/// `GH-1` references broken by a zero-width space (the forges link them in
/// text); `://` and `www.` broken so no link is made of them; line breaks
/// shown as `⏎`; capped at [`LONGEST_PROSE`] characters.
pub fn prose(text: &str) -> String {
    escaped(&capped(clean(text, Lines::Fold), LONGEST_PROSE), true)
}

/// [`prose`] of cleaned, capped text; `line_start` when it may begin a
/// line, where a block marker would be read.
fn escaped(text: &str, line_start: bool) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    // Where a block marker (`- `, `1. `, `> `, `=`) would be read: the
    // first character after leading spaces, or after a list number there.
    let indent = text.chars().take_while(|c| *c == ' ' || *c == '\t').count();
    let list_number = indent
        + text
            .chars()
            .skip(indent)
            .take_while(char::is_ascii_digit)
            .count();
    let mut chars = text.chars().enumerate().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            // `app@prod` after a word is neither a mention nor an email.
            '@' if out.ends_with(|c: char| c.is_ascii_alphanumeric())
                && !text[text
                    .char_indices()
                    .nth(at + 1)
                    .map_or(text.len(), |(i, _)| i)..]
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '-'))
                    .next()
                    .is_some_and(|domain| domain.trim_end_matches(['.', '-']).contains('.')) =>
            {
                out.push('@')
            }
            '@' => out.push_str("@\u{200b}"),
            '#' => out.push_str("\\#\u{200b}"),
            '!' if chars.peek().is_some_and(|(_, c)| c.is_ascii_digit()) => {
                out.push_str("\\!\u{200b}")
            }
            '-' if out.ends_with("GH") => out.push_str("-\u{200b}"),
            ':' if chars.peek().is_some_and(|(_, c)| *c == '/') => out.push_str(":\u{200b}"),
            '.' if out.ends_with("www") => out.push_str(".\u{200b}"),
            '\\' | '`' | '*' | '_' | '[' | ']' | '!' | '|' | '~' | '$' => {
                out.push('\\');
                out.push(c);
            }
            c if line_start
                && c.is_ascii_punctuation()
                && (at == indent || (at == list_number && at > indent)) =>
            {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// A message of wavegate's own that quotes what a pull request wrote
/// between backticks (a config error naming a value, a coverage reason
/// naming an address): each quoted part becomes a code span through
/// [`code`], the rest [`prose`], so it reads as written and nothing in it
/// is markdown. A quote the text does not close is prose.
pub fn message(text: &str) -> String {
    message_with(text, code)
}

/// [`message`] for a cell of a table: quoted parts through [`cell_code`],
/// so no `|` in them ends the cell ([`prose`] escapes the others).
pub fn cell_message(text: &str) -> String {
    message_with(text, cell_code)
}

fn message_with(text: &str, code: fn(&str) -> String) -> String {
    let text = capped(clean(text, Lines::Fold), LONGEST_PROSE);
    let pieces: Vec<&str> = text.split('`').collect();
    let mut out = String::with_capacity(text.len() + 16);
    for (i, piece) in pieces.iter().enumerate() {
        let quoted = i % 2 == 1;
        if quoted && i + 1 < pieces.len() {
            out.push_str(&code(piece));
        } else {
            if quoted {
                out.push_str("\\`");
            }
            out.push_str(&escaped(piece, i == 0));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_span_outlasts_the_backticks_inside_it() {
        assert_eq!(code("plain"), "`plain`");
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("`edge"), "`` `edge ``");
        assert_eq!(code("x```y"), "````x```y````");
        assert_eq!(code(""), "` `");
    }

    #[test]
    fn a_code_span_holds_one_line() {
        assert_eq!(code("a\n## fake\r\nb\rc"), "`a⏎## fake⏎b⏎c`");
    }

    #[test]
    fn a_table_cell_escapes_its_pipes() {
        assert_eq!(cell_code("a|b"), "`a\\|b`");
        assert_eq!(cell_code("a\\|b"), "`a\\\u{200b}\\|b`");
        assert_eq!(code("a|b"), "`a|b`");
    }

    #[test]
    fn terminal_escapes_and_controls_are_removed() {
        assert_eq!(
            clean("\u{1b}[31mred\u{1b}[0m \u{1b}]8;;http://x\u{7}link\u{1b}]8;;\u{1b}\\ \u{7}bell\u{0}", Lines::Keep),
            "red link bell"
        );
        assert_eq!(clean("a\u{202e}b\u{2066}c", Lines::Keep), "abc");
        assert_eq!(clean("tab\there", Lines::Fold), "tab\there");
    }

    #[test]
    fn nothing_untrusted_spells_an_html_comment() {
        let cleaned = clean("x <!-- wavegate:report --> y", Lines::Keep);
        assert!(!cleaned.contains("<!--"));
        assert_eq!(cleaned, "x <!\u{200b}-- wavegate:report --> y");
        assert!(!code("<!-- /wavegate:approvals -->").contains("<!--"));
        for hidden in ["<\0!--", "<\u{202e}!--", "<\u{1b}[m!--", "<!-\0-"] {
            assert!(!clean(hidden, Lines::Keep).contains("<!--"), "{hidden:?}");
        }
        assert!(!fenced("<!--", "text").contains("<!--"));
    }

    #[test]
    fn a_fence_is_longer_than_any_run_inside_and_keeps_its_container() {
        assert_eq!(fenced("a\n```\nb", "text"), "````text\na\n```\nb\n````");
        assert_eq!(fenced_in("a\nb", "", "> "), "> ```\n> a\n> b\n> ```");
        assert_eq!(fenced("one\r\ntwo", ""), "```\none\ntwo\n```");
    }

    #[test]
    fn prose_escapes_markdown_and_breaks_mentions_and_links() {
        assert_eq!(prose("*a* [b](c)"), "\\*a\\* \\[b\\](c)");
        assert_eq!(prose("@acme/team"), "@\u{200b}acme/team");
        assert_eq!(prose("dns@dev (@erin)"), "dns@dev (@\u{200b}erin)");
        assert_eq!(
            prose("é@erin ops@evil.io"),
            "é@\u{200b}erin ops@\u{200b}evil.io"
        );
        assert_eq!(prose("!12 GH-12"), "\\!\u{200b}12 GH-\u{200b}12");
        assert_eq!(prose("  - x"), "  \\- x");
        assert_eq!(prose(" 1. x"), " 1\\. x");
        assert_eq!(prose("#12"), "\\#\u{200b}12");
        assert_eq!(prose("<b>&"), "&lt;b&gt;&amp;");
        assert_eq!(prose("https://x"), "https:\u{200b}//x");
        assert_eq!(prose("www.x.io"), "www.\u{200b}x.io");
        assert_eq!(prose("a\n# b"), "a⏎\\#\u{200b} b");
        assert_eq!(prose("- item"), "\\- item");
        assert_eq!(prose("12. item"), "12\\. item");
        assert_eq!(prose("plain words, a-b (c)."), "plain words, a-b (c).");
    }

    #[test]
    fn a_message_keeps_its_quotes_as_code_and_the_rest_inert() {
        assert_eq!(
            message("`x\n## fake` is not a valid name; use `a-z`"),
            "`x⏎## fake` is not a valid name; use `a-z`"
        );
        assert_eq!(
            message("@team said `a` and `b"),
            "@\u{200b}team said `a` and \\`b"
        );
        assert_eq!(cell_message("held by `a|b`"), "held by `a\\|b`");
        assert_eq!(
            message("`<!-- wavegate:report -->`"),
            "`<!\u{200b}-- wavegate:report -->`"
        );
    }

    #[test]
    fn lengths_are_capped_and_say_so() {
        let long = "a".repeat(LONGEST_SPAN + 10);
        let shown = code(&long);
        assert_eq!(shown.chars().count(), LONGEST_SPAN + 3);
        assert!(shown.ends_with("…`"));
    }
}
