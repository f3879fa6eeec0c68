//! The end of a command's output as a report shows it: its last lines,
//! within a size a comment can carry, and how much of it that is. The
//! output itself is redacted and capped by the runner before it gets here.

use serde::{Deserialize, Serialize};

/// How many of a command's last lines a report shows.
pub(crate) const TAIL_LINES: usize = 30;
/// The most characters of them a report shows.
pub(crate) const TAIL_CHARS: usize = 4_000;

/// The last lines of what a command printed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OutputTail {
    /// The lines shown, newline-separated.
    pub(crate) text: String,
    /// How many lines are shown.
    pub(crate) shown: usize,
    /// How many lines of its output were kept (the runner keeps the first
    /// 1 MiB and the last lines, and says what it cut between).
    pub(crate) lines: usize,
}

impl OutputTail {
    /// The last [`TAIL_LINES`] lines of `output` within [`TAIL_CHARS`]
    /// characters (a longer last line is cut from its start); `None` when
    /// it printed nothing but blank lines.
    pub(crate) fn of(output: &str) -> Option<Self> {
        let all: Vec<&str> = output.trim_end().lines().collect();
        let start = all.iter().position(|l| !l.trim().is_empty())?;
        let all = &all[start..];
        let mut kept: Vec<String> = Vec::new();
        let mut used = 0;
        for line in all.iter().rev().take(TAIL_LINES) {
            let len = line.chars().count() + 1;
            if used + len > TAIL_CHARS {
                if kept.is_empty() {
                    let skip = (len - 1) - (TAIL_CHARS - 1);
                    kept.push(format!("…{}", line.chars().skip(skip).collect::<String>()));
                }
                break;
            }
            used += len;
            kept.push((*line).to_owned());
        }
        kept.reverse();
        Some(Self {
            shown: kept.len(),
            text: kept.join("\n"),
            lines: all.len(),
        })
    }

    /// "all 3 lines" or "last 30 of 120 lines".
    pub(crate) fn extent(&self) -> String {
        match (self.shown, self.lines) {
            (1, 1) => "1 line".into(),
            (shown, lines) if shown == lines => format!("all {lines} lines"),
            (shown, lines) => format!("last {shown} of {lines} lines"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_output_is_shown_whole_without_its_blank_edges() {
        let tail = OutputTail::of("\n\nApplying…\nApply complete!\n\n").unwrap();
        assert_eq!(tail.text, "Applying…\nApply complete!");
        assert_eq!(tail.extent(), "all 2 lines");
        assert_eq!(OutputTail::of("ok").unwrap().extent(), "1 line");
    }

    #[test]
    fn nothing_printed_is_no_tail() {
        assert_eq!(OutputTail::of(""), None);
        assert_eq!(OutputTail::of("\n  \n\n"), None);
    }

    #[test]
    fn a_long_output_keeps_its_last_lines() {
        let output: String = (1..=100).map(|i| format!("line {i}\n")).collect();
        let tail = OutputTail::of(&output).unwrap();
        assert_eq!(tail.shown, TAIL_LINES);
        assert_eq!(tail.lines, 100);
        assert!(tail.text.starts_with("line 71\n"), "{}", tail.text);
        assert!(tail.text.ends_with("line 100"));
        assert_eq!(tail.extent(), "last 30 of 100 lines");
    }

    #[test]
    fn wide_lines_are_kept_within_the_size_a_comment_can_carry() {
        let wide = "x".repeat(1_500);
        let output = format!("{wide}\n{wide}\n{wide}\nend\n");
        let tail = OutputTail::of(&output).unwrap();
        assert_eq!(tail.shown, 3, "two wide lines and the last one fit");
        assert!(tail.text.chars().count() <= TAIL_CHARS);

        let huge = "y".repeat(10_000);
        let tail = OutputTail::of(&huge).unwrap();
        assert_eq!(tail.shown, 1);
        assert!(tail.text.starts_with('…'));
        assert!(
            tail.text.chars().count() <= TAIL_CHARS,
            "{}",
            tail.text.len()
        );
    }
}
