//! The handlers of each kind of job, as free functions whose signatures
//! name the parts of the job they touch ([`super::ctx`]): a plan (`plan`),
//! a comment's commands (`comment`), a review (`review`), what both of
//! those share about a pull request's gate (`gate`), what a pull request
//! shows of wavegate (`publish`), an apply run, the interpreter of the
//! apply machine (`apply`), the notifications of its news (`notify`), and
//! drift checks with their issues (`drift`).

pub(super) mod apply;
pub(super) mod comment;
pub(super) mod drift;
mod gate;
mod in_flight;
pub(super) mod notify;
pub(super) mod plan;
mod publish;
pub(super) mod review;

pub(super) use comment::CommentIn;
