//! Test support for talking to forges: a stateful fake GitHub/Forgejo over
//! HTTP, webhook bodies built from the forges' published examples, and a
//! check of recorded requests against the forges' API descriptions.
//! Integration tests use it with `mod support;`.

#![allow(dead_code, unused_imports)]

pub mod conformance;
pub mod fake_forge;
pub mod outage;
pub mod payloads;

pub use conformance::conformance_violations;
pub use fake_forge::{FakeForge, RecordedRequest, RepoHandle};
pub use payloads::{
    forgejo_comment, forgejo_pull_request, forgejo_pushed_by, forgejo_review_approved,
    github_comment, github_pull_request, github_pushed_by, github_review, sign_forgejo,
    sign_github,
};
