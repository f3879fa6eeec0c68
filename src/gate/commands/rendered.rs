//! Which lines of a comment a reader sees as starting with `/` (docs/approvals-and-applying.md):
//! the comment is read as CommonMark (pulldown-cmark), as the forge renders
//! it, and only a line of the comment's own text can hold a command.
//!
//! A command line is a line of a paragraph or heading, or of an HTML block,
//! that starts (after at most three spaces) with `/` as written. Never one:
//! - code: fenced and indented code blocks, code spans;
//! - quotes: block quotes with their lazy continuation lines, and a block
//!   that starts on the line right after a block quote (markdown ends the
//!   quote there, but a reader may take it as more of the quote: refusing a
//!   command is the safe mistake), until a blank line;
//! - list items, all their lines: an item reads as an entry of a list (a
//!   checklist, steps to take), not as something said to the bot;
//! - image descriptions, which a reader does not see;
//! - HTML comments, and text inside the HTML elements that show it as code
//!   or a quote, strike it out or do not show it: `<blockquote>`, `<q>`,
//!   `<pre>`, `<code>`, `<kbd>`, `<samp>`, `<tt>`, `<var>`, `<del>`, `<s>`,
//!   `<strike>`, `<script>`, `<style>`, `<textarea>`, `<title>`,
//!   `<template>`, whether written as an HTML block or inline, and across
//!   markdown blocks (an element left open hides all after it). Other
//!   elements (`<details>`, `<summary>`, `<div>`, …) show their text, which
//!   counts like any other.
//!
//! The line's text is taken as written, from its `/` to its end, with HTML
//! comments left out: `/approve <!-- from the phone --> prod` approves `prod`.
//! Anything else a reader might see differently (`**prod**`, `<b>prod</b>`)
//! stays in the text, so the command is refused with a reason rather than
//! read as something the reader did not see. Pure, and one pass of the
//! parser over the body.

use pulldown_cmark::{Event, Options, Parser, Tag};
use std::borrow::Cow;
use std::ops::Range;

/// A line a reader sees as starting with `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CommandLine<'a> {
    /// 1-based.
    pub(crate) line: usize,
    /// The whole line as written.
    pub(crate) source: &'a str,
    /// From the `/` to the end of the line as written, HTML comments left out.
    pub(crate) text: Cow<'a, str>,
}

/// Every command line of `body`, in order.
pub(super) fn command_lines(body: &str) -> Vec<CommandLine<'_>> {
    let mut reader = Reader::new(body);
    for (event, range) in Parser::new_ext(body, Options::empty()).into_offset_iter() {
        reader.event(&event, range);
    }
    let Reader {
        lines,
        html,
        starts,
        ..
    } = reader;
    let comments = html.comments(body.len());
    starts
        .into_iter()
        .map(|start| {
            let line = lines.line_of(start);
            let source = lines.text(body, line);
            let end = lines.range(body, line).end;
            CommandLine {
                line: line + 1,
                source,
                text: without(body, start..end, &comments),
            }
        })
        .collect()
}

/// `body[range]` with the parts inside `holes` (sorted, disjoint) left out.
fn without<'a>(body: &'a str, range: Range<usize>, holes: &[Range<usize>]) -> Cow<'a, str> {
    let first = holes.partition_point(|h| h.end <= range.start);
    let overlapping = holes[first..]
        .iter()
        .take_while(|h| h.start < range.end)
        .collect::<Vec<_>>();
    if overlapping.is_empty() {
        return Cow::Borrowed(&body[range]);
    }
    let mut text = String::with_capacity(range.len());
    let mut at = range.start;
    for hole in overlapping {
        if hole.start > at {
            text.push_str(&body[at..hole.start]);
        }
        at = at.max(hole.end);
    }
    if at < range.end {
        text.push_str(&body[at..range.end]);
    }
    Cow::Owned(text)
}

/// Where each line starts, to turn offsets into lines.
struct Lines {
    starts: Vec<usize>,
}

impl Lines {
    fn new(body: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(body.match_indices('\n').map(|(i, _)| i + 1));
        Self { starts }
    }

    /// The 0-based line `offset` is on.
    fn line_of(&self, offset: usize) -> usize {
        self.starts.partition_point(|&s| s <= offset) - 1
    }

    /// Line `line` without its line ending.
    fn range(&self, body: &str, line: usize) -> Range<usize> {
        let start = self.starts[line];
        let mut end = self
            .starts
            .get(line + 1)
            .map_or(body.len(), |next| next - 1);
        if end > start && body.as_bytes()[end - 1] == b'\r' {
            end -= 1;
        }
        start..end
    }

    fn text<'a>(&self, body: &'a str, line: usize) -> &'a str {
        &body[self.range(body, line)]
    }
}

struct Reader<'a> {
    body: &'a str,
    lines: Lines,
    html: HtmlScan,
    /// For each open markdown element, whether its text is never a command.
    open: Vec<bool>,
    /// How many entries of `open` are `true`.
    excluded: usize,
    /// The last line of the block quote that ended last at the top level.
    quote_last_line: Option<usize>,
    /// The block being read started right after a block quote.
    continues_quote: bool,
    /// Offsets of the `/` of each command line found.
    starts: Vec<usize>,
}

impl<'a> Reader<'a> {
    fn new(body: &'a str) -> Self {
        Self {
            body,
            lines: Lines::new(body),
            html: HtmlScan::default(),
            open: Vec::new(),
            excluded: 0,
            quote_last_line: None,
            continues_quote: false,
            starts: Vec::new(),
        }
    }

    fn event(&mut self, event: &Event<'_>, range: Range<usize>) {
        match event {
            Event::Start(tag) => {
                let text_block =
                    matches!(tag, Tag::Paragraph | Tag::Heading { .. } | Tag::HtmlBlock);
                if text_block && self.excluded == 0 {
                    let line = self.lines.line_of(range.start);
                    self.continues_quote = self.quote_last_line.is_some_and(|q| line == q + 1);
                }
                let excludes = !matches!(
                    tag,
                    Tag::Paragraph
                        | Tag::Heading { .. }
                        | Tag::HtmlBlock
                        | Tag::Emphasis
                        | Tag::Strong
                        | Tag::Link { .. }
                );
                self.open.push(excludes);
                self.excluded += usize::from(excludes);
            }
            Event::End(_) => {
                if self.open.pop() == Some(true) {
                    self.excluded -= 1;
                }
                if self.excluded == 0 {
                    if matches!(event, Event::End(pulldown_cmark::TagEnd::BlockQuote(_))) {
                        let last = range.end.saturating_sub(1).max(range.start);
                        self.quote_last_line = Some(self.lines.line_of(last));
                    }
                    if self.open.is_empty() {
                        self.continues_quote = false;
                    }
                }
            }
            Event::Text(_) if self.may_command() && self.starts_a_line(range.start) => {
                self.starts.push(range.start);
            }
            Event::InlineHtml(html) => self.html.scan(html, range.start),
            Event::Html(html) => {
                // One line of an HTML block (or several): each line is checked
                // before the HTML on it is read. At the top level the event's
                // text is the source from `range.start`; inside a quote or a
                // list (where no line counts) the container's markers are
                // left out, so the offsets recorded there only approximate,
                // staying within the container's own lines.
                let mut at = range.start;
                for piece in html.split_inclusive('\n') {
                    let slash = self
                        .may_command()
                        .then(|| self.line_start_slash(at))
                        .flatten();
                    if let Some(slash) = slash.filter(|s| (at..at + piece.len()).contains(s)) {
                        self.starts.push(slash);
                    }
                    self.html.scan(piece, at);
                    at += piece.len();
                }
            }
            _ => {}
        }
    }

    /// Whether text read now is outside everything that hides a command.
    fn may_command(&self) -> bool {
        self.excluded == 0 && !self.continues_quote && !self.html.hides()
    }

    /// Whether `offset` holds a `/` written at the start of its line, after at
    /// most three columns of indentation.
    fn starts_a_line(&self, offset: usize) -> bool {
        self.line_start_slash(offset) == Some(offset)
    }

    /// The offset of the `/` that starts the line of `offset`, if one does
    /// (after at most three columns of spaces and tabs, tab stops every 4).
    /// Reads at most four bytes of the line, however long its indentation.
    fn line_start_slash(&self, offset: usize) -> Option<usize> {
        let line = self.lines.range(self.body, self.lines.line_of(offset));
        let mut column = 0;
        for (i, byte) in self.body.as_bytes()[line.clone()].iter().enumerate() {
            match byte {
                b'/' => return Some(line.start + i),
                b' ' => column += 1,
                b'\t' => column += 4 - column % 4,
                _ => return None,
            }
            if column > 3 {
                return None;
            }
        }
        None
    }
}

/// Elements whose text a reader does not see as text said to them: shown as
/// code or a quote, struck out, or not shown.
const HIDING: &[&str] = &[
    "blockquote",
    "q",
    "pre",
    "code",
    "kbd",
    "samp",
    "tt",
    "var",
    "del",
    "s",
    "strike",
    "script",
    "style",
    "textarea",
    "title",
    "template",
];

/// Elements whose content is raw text to the HTML parser: tags in it are text.
const RAW_TEXT: &[&str] = &["script", "style", "textarea", "title"];

/// A scan of the raw HTML of a comment (HTML blocks and inline HTML, in
/// order), enough to know whether text that follows is in a comment, a tag,
/// or a hiding element, and where the comments are.
#[derive(Default)]
struct HtmlScan {
    state: HtmlState,
    /// Hiding elements open.
    hiding: usize,
    /// Comments seen, by offset in the body.
    comments: Vec<Range<usize>>,
    comment_start: usize,
}

#[derive(Default, Clone, PartialEq, Eq)]
enum HtmlState {
    #[default]
    Text,
    Comment,
    /// Inside `<name …` or `</name …` until its `>`.
    Tag {
        name: String,
        closing: bool,
        quote: Option<u8>,
    },
    /// Inside a raw-text element, until `</name`.
    RawText(&'static str),
}

impl HtmlScan {
    fn hides(&self) -> bool {
        self.hiding > 0 || self.state != HtmlState::Text
    }

    /// The comments, one left open running to the end of the body.
    fn comments(mut self, body_len: usize) -> Vec<Range<usize>> {
        if self.state == HtmlState::Comment {
            self.comments.push(self.comment_start..body_len);
        }
        self.comments
    }

    /// Reads `text`, found at `base` in the body.
    fn scan(&mut self, text: &str, base: usize) {
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match &mut self.state {
                HtmlState::Text => {
                    let Some(lt) = text[i..].find('<') else {
                        return;
                    };
                    i += lt;
                    let rest = &text[i..];
                    if let Some(after) = rest.strip_prefix("<!--") {
                        self.comment_start = base + i;
                        // `<!-->` and `<!--->` are whole (empty) comments.
                        let empty = [">", "->"].into_iter().find(|end| after.starts_with(end));
                        match empty {
                            Some(end) => {
                                i += 4 + end.len();
                                self.comments.push(self.comment_start..base + i);
                            }
                            None => {
                                i += 4;
                                self.state = HtmlState::Comment;
                            }
                        }
                    } else if let Some((name, len, closing)) = tag_name(rest) {
                        self.state = HtmlState::Tag {
                            name,
                            closing,
                            quote: None,
                        };
                        i += len;
                    } else if rest.starts_with("<!") || rest.starts_with("<?") {
                        self.state = HtmlState::Tag {
                            name: String::new(),
                            closing: false,
                            quote: None,
                        };
                        i += 2;
                    } else {
                        i += 1;
                    }
                }
                HtmlState::Comment => match text[i..].find("-->") {
                    Some(end) => {
                        i += end + 3;
                        self.comments.push(self.comment_start..base + i);
                        self.state = HtmlState::Text;
                    }
                    None => return,
                },
                HtmlState::Tag {
                    name,
                    closing,
                    quote,
                } => {
                    let b = bytes[i];
                    i += 1;
                    match (*quote, b) {
                        (Some(q), b) if b == q => *quote = None,
                        (Some(_), _) => {}
                        (None, b'"' | b'\'') => *quote = Some(b),
                        (None, b'>') => {
                            let (name, closing) = (std::mem::take(name), *closing);
                            self.end_tag(&name, closing);
                        }
                        (None, _) => {}
                    }
                }
                HtmlState::RawText(name) => {
                    let name = *name;
                    match find_closing(&text[i..], name) {
                        Some(at) => {
                            i += at;
                            self.state = HtmlState::Text;
                        }
                        None => return,
                    }
                }
            }
        }
    }

    /// A tag ended: count hiding elements, and enter raw text after one.
    fn end_tag(&mut self, name: &str, closing: bool) {
        self.state = HtmlState::Text;
        let Some(&hiding) = HIDING.iter().find(|h| h.eq_ignore_ascii_case(name)) else {
            return;
        };
        if closing {
            self.hiding = self.hiding.saturating_sub(1);
        } else {
            self.hiding += 1;
            if let Some(&raw) = RAW_TEXT.iter().find(|r| **r == hiding) {
                self.state = HtmlState::RawText(raw);
            }
        }
    }
}

/// `<name` or `</name` at the start of `text`: the name (lowercase), the
/// length read, and whether it closes.
fn tag_name(text: &str) -> Option<(String, usize, bool)> {
    let (closing, after) = match text.strip_prefix("</") {
        Some(after) => (true, after),
        None => (false, text.strip_prefix('<')?),
    };
    if !after.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return None;
    }
    let len = after
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .unwrap_or(after.len());
    let name = after[..len].to_ascii_lowercase();
    Some((name, text.len() - after.len() + len, closing))
}

/// Where `</name` (any case) starts in `text`.
fn find_closing(text: &str, name: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(at) = text[from..].find("</") {
        let start = from + at;
        let candidate = &bytes[start + 2..];
        if candidate.len() >= name.len()
            && candidate[..name.len()].eq_ignore_ascii_case(name.as_bytes())
        {
            return Some(start);
        }
        from = start + 2;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(body: &str) -> Vec<(usize, String)> {
        command_lines(body)
            .into_iter()
            .map(|l| (l.line, l.text.into_owned()))
            .collect()
    }

    #[test]
    fn a_line_is_numbered_and_its_comments_are_left_out() {
        assert_eq!(
            lines("hi\n\n/approve <!-- a --> prod <!-- b\nc --> x\n"),
            vec![(3, "/approve  prod ".to_owned())]
        );
    }

    #[test]
    fn a_comment_left_open_hides_the_rest() {
        assert_eq!(lines("<!-- open\n\n/approve\n"), vec![]);
        // Inline, an unclosed `<!--` is no comment: a reader sees it as text.
        assert_eq!(
            lines("/approve <!-- open\n\nx"),
            vec![(1, "/approve <!-- open".to_owned())]
        );
    }

    #[test]
    fn raw_text_elements_hide_tags_inside_them() {
        // `<pre>` inside a <textarea> is text: no second element to close.
        assert_eq!(
            lines("<textarea>\n<pre>\n</textarea>\n\n/approve"),
            vec![(5, "/approve".to_owned())]
        );
    }

    #[test]
    fn quoted_attribute_values_may_hold_a_closing_bracket() {
        assert_eq!(
            lines("<div title=\"a > b\n/approve\">\n\n/plan"),
            vec![(4, "/plan".to_owned())]
        );
    }

    #[test]
    fn the_scan_reads_tag_names_in_any_case() {
        assert_eq!(
            lines("x <CODE>\n\n/approve\n\n</Code>\n\n/plan"),
            vec![(7, "/plan".to_owned())]
        );
    }

    /// Bodies built to make a careless reader slow: each must be read in
    /// linear time (a quadratic reader takes minutes on 64 KB).
    #[test]
    fn pathological_bodies_are_read_quickly() {
        let n = 64 * 1024;
        let bodies = [
            format!("x\n{}{}", " ".repeat(n / 2), "/a*".repeat(n / 6)),
            "<code>".repeat(n / 6),
            "</code>".repeat(n / 7),
            format!("<textarea>{}", "</x".repeat(n / 3)),
            "<!--".repeat(n / 4),
            "> ".repeat(n / 2),
            "- ".repeat(n / 2),
            "*a ".repeat(n / 3),
            "[a](".repeat(n / 4),
            "`".repeat(n),
            "<a title=\"".repeat(n / 10),
            "/approve\n".repeat(n / 9),
        ];
        for body in &bodies {
            let started = std::time::Instant::now();
            let _ = command_lines(body);
            let took = started.elapsed();
            assert!(
                took < std::time::Duration::from_secs(2),
                "{took:?} for {:?}…",
                &body[..40]
            );
        }
    }
}
