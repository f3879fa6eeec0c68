//! One module per story the bot is told; each test reads like the pull
//! request's conversation.

mod apply;
mod approvals;
mod approvers;
mod attacks;
mod blast_radius;
mod bot;
mod branches;
mod build_inputs;
mod carried;
mod cost;
mod digest_over;
mod discover;
mod forge_clients;
mod forged_report;
mod git_paths;
mod groups;
mod hooks;
mod ledger_cli;
mod login;
mod merge_methods;
mod metrics;
mod notify;
mod overrides;
mod pages;
mod parallel;
mod plan_example;
mod profiles;
mod reconcile;
mod replicas;
mod run_states;
mod sandbox;
mod soak;
mod terraform_builtin;
mod webhook_fixtures;
mod worker;
