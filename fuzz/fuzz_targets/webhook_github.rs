//! A GitHub delivery's body, as the server reads it once the signature has
//! checked out: never a panic, whatever the event and the bytes. The first
//! byte picks the event.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wavegate::forge::events::parse_github;

const EVENTS: [&str; 6] = [
    "pull_request",
    "issue_comment",
    "pull_request_review",
    "installation",
    "check_run",
    "ping",
];

fuzz_target!(|data: &[u8]| {
    if let Some((pick, body)) = data.split_first() {
        let _ = parse_github(EVENTS[usize::from(*pick) % EVENTS.len()], body);
    }
});
