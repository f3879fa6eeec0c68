//! A `wavegate.toml` from a pull request: parsed and validated, or refused
//! with an error; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wavegate::config::repo::RepoConfig;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = RepoConfig::parse("wavegate.toml", text);
    }
});
