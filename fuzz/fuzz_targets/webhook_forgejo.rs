//! A Forgejo delivery's body, as the server reads it once the signature has
//! checked out: never a panic, whatever the event and the bytes. The first
//! byte picks the event.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wavegate::forge::events::parse_forgejo;

const EVENTS: [&str; 6] = [
    "pull_request",
    "pull_request_sync",
    "pull_request_comment",
    "pull_request_review_approved",
    "pull_request_review_rejected",
    "pull_request_review_comment",
];

fuzz_target!(|data: &[u8]| {
    if let Some((pick, body)) = data.split_first() {
        let _ = parse_forgejo(EVENTS[usize::from(*pick) % EVENTS.len()], body);
    }
});
