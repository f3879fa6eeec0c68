//! The integration tests, one binary: `support/` is what the scenarios are
//! told in (the fake forge, webhook payloads, the API conformance check, a
//! database link that can be cut, the `Bot` harness around the real
//! `wavegate serve`, the bundled example as a fixture); `scenarios/` holds
//! one module per story. `scripts/test.sh --test it scenarios::apply` runs
//! one module.

mod scenarios;
mod support;
