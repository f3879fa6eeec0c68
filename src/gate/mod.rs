//! Gates: who may let which plan through. The comment-command grammar, the
//! hash-chained ledger of facts and its evaluation, and the approval policy.
//! Pure decisions; the worker does the I/O.

pub mod commands;
pub(crate) mod counting;
pub(crate) mod fact_data;
pub mod ledger;
pub(crate) mod policy;
