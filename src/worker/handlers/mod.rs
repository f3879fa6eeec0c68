//! The handlers of each kind of job, as methods on the job's [`JobCtx`]: a
//! plan (`plan`), a comment's commands (`comment`), a review (`review`),
//! what both of those share about a pull request's gate (`gate`), an
//! apply run, the interpreter of the apply machine (`apply`), and the
//! notifications of its news (`notify`).
//!
//! [`JobCtx`]: super::ctx::JobCtx

mod apply;
mod comment;
mod gate;
mod in_flight;
mod notify;
mod plan;
mod review;

pub(super) use comment::CommentIn;
