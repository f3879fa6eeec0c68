//! Jobs the bot hands to the forge's CI: who may claim and hand them back.
//!
//! `oidc` tells a GitHub Actions run by its OIDC token: signed by the
//! issuer's key, for this bot's audience, and of the repository,
//! environment, run, commit and base-branch workflow the bot dispatched.

pub mod oidc;
