//! The handlers of each kind of job, as methods on the job's [`JobCtx`]: a
//! plan (`plan`), a comment's commands (`comment`), a review (`review`),
//! what both of those share about a pull request's gate (`gate`), and an
//! apply run, the interpreter of the apply machine (`apply`).
//!
//! [`JobCtx`]: super::ctx::JobCtx

mod apply;
mod comment;
mod gate;
mod plan;
mod review;

pub(super) use comment::CommentIn;
