//! Comment commands (DESIGN §8): parsed from a comment's markdown.
