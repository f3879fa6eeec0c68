//! A comment's body read for commands (CommonMark, then the grammar):
//! never a panic, and every command found is one a reader sees on a line of
//! the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wavegate::gate::commands::parse;

fuzz_target!(|data: &[u8]| {
    if let Ok(body) = std::str::from_utf8(data) {
        let _ = parse(body);
    }
});
