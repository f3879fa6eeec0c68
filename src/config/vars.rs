//! The server's settings, declared once: every `WAVEGATE_*` variable
//! `wavegate serve` reads is a field of [`ServerVars`] (the sandbox's
//! [`SandboxVars`] flattened in), with its default and what it is for. The
//! values come through a lookup, the process environment in the binary and a
//! map in the tests, trimmed, an empty one counting as unset; `Settings`
//! checks them. The same declaration lists the variables under `wavegate
//! serve --help` and tells the start-up warning which names are settings,
//! besides the families read by prefix ([`FAMILIES`]).

use super::secret::Secret;
use crate::sandbox::SandboxVars;
use clap::{Args as _, FromArgMatches as _};
use std::fmt::Write as _;
use std::path::PathBuf;

/// How soon a held member's apply is tried again the first time, unless
/// `WAVEGATE_HELD_RETRY` says otherwise.
pub(crate) const HELD_RETRY: std::time::Duration = std::time::Duration::from_secs(30);
/// How long a quiet command runs before the log says it still runs.
pub const DEFAULT_HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(30);

/// The server's settings as the operator gives them, before they are checked.
#[derive(clap::Args, Clone, Debug)]
pub struct ServerVars {
    /// Address to serve on, host:port.
    #[arg(
        long,
        env = "WAVEGATE_LISTEN",
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:8080"
    )]
    pub(crate) listen: String,
    /// The store, migrated at start: `sqlite://PATH` (one replica) or
    /// `postgres://USER:PASSWORD@HOST/DB` (several replicas on one database).
    #[arg(
        long,
        env = "WAVEGATE_DATABASE_URL",
        value_name = "URL",
        default_value = "sqlite://wavegate.db"
    )]
    pub database_url: String,
    /// Git mirrors, the App credentials the set-up page stores, and the
    /// ledger key the server generates (`ledger/key.pem`).
    #[arg(
        long,
        env = "WAVEGATE_DATA_DIR",
        value_name = "DIR",
        default_value = "wavegate-data"
    )]
    pub data_dir: PathBuf,
    /// The ledger key every fact is signed with, an Ed25519 private key
    /// (PKCS#8 PEM) readable by wavegate alone; unset: the data dir's.
    #[arg(long, env = "WAVEGATE_LEDGER_KEY_FILE", value_name = "FILE")]
    pub ledger_key_file: Option<PathBuf>,
    /// The GitHub App's id.
    #[arg(long, env = "WAVEGATE_GITHUB_APP_ID", value_name = "ID")]
    pub(crate) github_app_id: Option<String>,
    /// The App's private key: the PEM text, or a path to the `.pem`.
    #[arg(long, env = "WAVEGATE_GITHUB_PRIVATE_KEY", value_name = "PEM|FILE", value_parser = secret)]
    pub(crate) github_private_key: Option<Secret>,
    /// The App's webhook secret; comma-separated to rotate.
    #[arg(long, env = "WAVEGATE_GITHUB_WEBHOOK_SECRET", value_name = "SECRETS", value_parser = secret)]
    pub(crate) github_webhook_secret: Option<Secret>,
    /// GitHub's API; GitHub Enterprise: `https://HOST/api/v3`.
    #[arg(
        long,
        env = "WAVEGATE_GITHUB_API_URL",
        value_name = "URL",
        default_value = "https://api.github.com"
    )]
    pub(crate) github_api_url: String,
    /// The Forgejo/Gitea instance root, e.g. `https://codeberg.org`.
    #[arg(long, env = "WAVEGATE_FORGEJO_URL", value_name = "URL")]
    pub(crate) forgejo_url: Option<String>,
    /// The bot user's access token (scopes: repository and issue).
    #[arg(long, env = "WAVEGATE_FORGEJO_TOKEN", value_name = "TOKEN", value_parser = secret)]
    pub(crate) forgejo_token: Option<Secret>,
    /// The repository's webhook secret; comma-separated to rotate.
    #[arg(long, env = "WAVEGATE_FORGEJO_WEBHOOK_SECRET", value_name = "SECRETS", value_parser = secret)]
    pub(crate) forgejo_webhook_secret: Option<Secret>,
    /// Where the forges reach this server and the reports link its docs;
    /// unset: the request's host.
    #[arg(long, env = "WAVEGATE_PUBLIC_URL", value_name = "URL")]
    pub(crate) public_url: Option<String>,
    /// Who signs the OIDC tokens of GitHub Actions runs that claim jobs of
    /// profiles with `executor = "actions"` (GitHub Enterprise Server:
    /// `https://HOST/_services/token`).
    #[arg(
        long,
        env = "WAVEGATE_ACTIONS_OIDC_ISSUER",
        value_name = "URL",
        default_value = "https://token.actions.githubusercontent.com"
    )]
    pub(crate) actions_oidc_issuer: String,
    /// `on`: the pages and the JSON API (`/repos`, `/api/v1/…`) are shown to
    /// anyone who reaches this server; `off`: every one answers 404.
    #[arg(
        long,
        env = "WAVEGATE_PUBLIC_PAGES",
        value_name = "on|off",
        default_value = "off"
    )]
    pub(crate) public_pages: String,
    /// The GitHub App's client id (its settings page): visitors log in to
    /// the pages with GitHub (user authorisation of the App).
    #[arg(long, env = "WAVEGATE_GITHUB_CLIENT_ID", value_name = "ID")]
    pub(crate) github_client_id: Option<String>,
    /// The GitHub App's client secret, generated on its settings page.
    #[arg(long, env = "WAVEGATE_GITHUB_CLIENT_SECRET", value_name = "SECRET", value_parser = secret)]
    pub(crate) github_client_secret: Option<Secret>,
    /// The client id of an OAuth2 application on the Forgejo instance:
    /// visitors log in to the pages with Forgejo.
    #[arg(long, env = "WAVEGATE_FORGEJO_CLIENT_ID", value_name = "ID")]
    pub(crate) forgejo_client_id: Option<String>,
    /// That OAuth2 application's client secret.
    #[arg(long, env = "WAVEGATE_FORGEJO_CLIENT_SECRET", value_name = "SECRET", value_parser = secret)]
    pub(crate) forgejo_client_secret: Option<Secret>,
    /// Teams (slugs, comma-separated) of a repository's owner whose members
    /// may release its locks and retry its jobs from the pages, besides its
    /// admins (GitHub; on Forgejo only admins).
    #[arg(long, env = "WAVEGATE_OPERATOR_TEAMS", value_name = "SLUGS")]
    pub(crate) operator_teams: Option<String>,
    /// Jobs run at once.
    #[arg(long, env = "WAVEGATE_WORKERS", value_name = "N", default_value = "2")]
    pub(crate) workers: String,
    /// How long a claimed job is held without renewal.
    #[arg(
        long,
        env = "WAVEGATE_JOB_LEASE",
        value_name = "DURATION",
        default_value = "5m"
    )]
    pub(crate) job_lease: String,
    /// How often open pull requests and unfinished apply runs are checked
    /// against the forges (also once at start); `off`: never.
    #[arg(
        long,
        env = "WAVEGATE_RECONCILE_EVERY",
        value_name = "DURATION",
        default_value = "5m"
    )]
    pub(crate) reconcile_every: String,
    /// The shortest interval at which any repository's stage is checked
    /// for drift, whatever its `[drift] every` asks; `off`: no drift checks.
    #[arg(
        long,
        env = "WAVEGATE_DRIFT_MIN_INTERVAL",
        value_name = "DURATION",
        default_value = "1h"
    )]
    pub(crate) drift_min_interval: String,
    /// The share of each forge's request budget a sweep may spend, 1–100%.
    #[arg(
        long,
        env = "WAVEGATE_RECONCILE_BUDGET",
        value_name = "PERCENT",
        default_value = "50%"
    )]
    pub(crate) reconcile_budget: String,
    /// How soon an apply that answered `held` is tried again.
    #[arg(
        long,
        env = "WAVEGATE_HELD_RETRY",
        value_name = "DURATION",
        default_value_t = humantime::format_duration(HELD_RETRY).to_string()
    )]
    pub(crate) held_retry: String,
    /// How long a command prints nothing before the log says it still
    /// runs; `0`: never.
    #[arg(
        long,
        env = "WAVEGATE_HEARTBEAT",
        value_name = "DURATION",
        default_value_t = humantime::format_duration(DEFAULT_HEARTBEAT).to_string()
    )]
    pub(crate) heartbeat: String,
    /// The operator's central configuration, an absolute path, read and
    /// checked at start.
    #[arg(long, env = "WAVEGATE_REPOS_CONFIG", value_name = "FILE")]
    pub repos_config: Option<PathBuf>,
    /// Log filter, e.g. `info,wavegate=debug`.
    #[arg(
        long,
        env = "WAVEGATE_LOG",
        value_name = "FILTER",
        default_value = "info"
    )]
    pub log: String,
    /// `text`, or `json`: one JSON object per line, with its spans' fields.
    #[arg(
        long,
        env = "WAVEGATE_LOG_FORMAT",
        value_name = "FORMAT",
        default_value = "text"
    )]
    pub log_format: String,
    #[command(flatten)]
    pub sandbox: SandboxVars,
}

fn secret(text: &str) -> Result<Secret, std::convert::Infallible> {
    Ok(Secret::new(text))
}

/// The prefix of the notify targets' variables.
pub(crate) const NOTIFY_PREFIX: &str = "WAVEGATE_NOTIFY_";

/// Variables read by prefix, one name per member: the start-up warning
/// takes any name with the prefix as known.
pub(crate) struct Family {
    pub(crate) prefix: &'static str,
    /// How `serve --help` lists it; `None`: not a setting.
    pub(crate) listed: Option<(&'static str, &'static str)>,
}

pub(crate) const FAMILIES: &[Family] = &[
    // A name of the family that is not a target's fails the start instead.
    Family {
        prefix: NOTIFY_PREFIX,
        listed: Some((
            "WAVEGATE_NOTIFY_<NAME>_URL, _KEY, _FORMAT",
            "A `[notify] to` target: where its notices go, the key that signs them (required for `json`) and their format, `json` (default) or `slack`",
        )),
    },
    // The test suite's hooks, such as a test build's clock
    // (`WAVEGATE_TEST_CLOCK_SHIFT_FILE`).
    Family {
        prefix: "WAVEGATE_TEST_",
        listed: None,
    },
];

/// The declaration as clap holds it.
fn declaration() -> clap::Command {
    ServerVars::augment_args(clap::Command::new("wavegate serve"))
}

impl ServerVars {
    /// The variables as this process's environment sets them.
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The variables as `get` gives them by name.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let declared = declaration();
        let mut argv = vec!["wavegate serve".to_owned()];
        for arg in declared.get_arguments() {
            let (Some(name), Some(long)) = (arg.get_env().and_then(|n| n.to_str()), arg.get_long())
            else {
                continue;
            };
            if let Some(value) = get(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
            {
                argv.push(format!("--{long}={value}"));
            }
        }
        // Only `get` speaks: clap would fall back on this process's environment.
        let matches = declared
            .mut_args(|arg| arg.env(None::<&'static str>))
            .try_get_matches_from(argv)
            .expect("every declared variable takes any text");
        Self::from_arg_matches(&matches).expect("the matches are the declaration's")
    }
}

/// Every variable the declaration names.
pub(crate) fn declared() -> Vec<String> {
    declaration()
        .get_arguments()
        .filter_map(|arg| arg.get_env())
        .map(|name| name.to_string_lossy().into_owned())
        .collect()
}

/// The names among `names` that are no setting: neither declared nor of a
/// family. Each comes with the declared name nearest to it, if one is near.
pub(crate) fn unknown(names: impl IntoIterator<Item = String>) -> Vec<(String, Option<String>)> {
    let declared = declared();
    names
        .into_iter()
        .filter(|name| name.starts_with("WAVEGATE_"))
        .filter(|name| !declared.contains(name))
        .filter(|name| !FAMILIES.iter().any(|f| name.starts_with(f.prefix)))
        .map(|name| {
            let nearest = declared
                .iter()
                .min_by_key(|known| strsim::levenshtein(known, &name))
                .filter(|known| strsim::levenshtein(known, &name) <= 4)
                .cloned();
            (name, nearest)
        })
        .collect()
}

/// The variables as `wavegate serve --help` lists them.
pub fn listing() -> String {
    let mut text = String::from(
        "Settings, from the environment (docs/configuration.md); an empty variable takes its default:\n",
    );
    for arg in declaration().get_arguments() {
        let Some(name) = arg.get_env() else {
            continue;
        };
        let default = arg
            .get_default_values()
            .first()
            .map(|d| format!(" [default: {}]", d.to_string_lossy()))
            .unwrap_or_default();
        let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
        let _ = write!(
            text,
            "\n  {}{default}\n          {help}\n",
            name.to_string_lossy()
        );
    }
    for (name, help) in FAMILIES.iter().filter_map(|f| f.listed) {
        let _ = write!(text, "\n  {name}\n          {help}\n");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> ServerVars {
        let map: HashMap<&str, &str> = pairs.iter().copied().collect();
        ServerVars::from_lookup(|name| map.get(name).map(|v| (*v).to_owned()))
    }

    #[test]
    fn each_field_is_its_variable_and_takes_any_text_as_given() {
        let mut names = declared();
        let count = names.len();
        for arg in declaration().get_arguments() {
            let name = arg.get_env().unwrap().to_str().unwrap();
            let long = arg.get_long().unwrap();
            assert_eq!(
                name.strip_prefix("WAVEGATE_").unwrap(),
                long.to_ascii_uppercase().replace('-', "_"),
                "the field is named after its variable"
            );
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), count, "each variable is declared once");
        let pem = "-----BEGIN PRIVATE KEY-----\nMII=\n-----END PRIVATE KEY-----\n";
        let read = vars(&[
            ("WAVEGATE_GITHUB_PRIVATE_KEY", pem),
            ("WAVEGATE_LOG", " --help "),
            ("WAVEGATE_DATABASE_URL", "postgres://u:p=w@h/db?x=1"),
            ("WAVEGATE_SANDBOX_READ", "/a:/b"),
            ("WAVEGATE_WORKERS", ""),
            ("WAVEGATE_JOB_LEASE", "  "),
        ]);
        assert_eq!(read.github_private_key.unwrap().expose(), pem.trim());
        assert_eq!(read.log, "--help");
        assert_eq!(read.database_url, "postgres://u:p=w@h/db?x=1");
        assert_eq!(read.sandbox.sandbox_read.as_deref(), Some("/a:/b"));
        assert_eq!(
            (read.workers.as_str(), read.job_lease.as_str()),
            ("2", "5m")
        );
    }

    #[test]
    fn what_the_lookup_leaves_unset_takes_the_declared_default() {
        let read = vars(&[]);
        assert_eq!(read.listen, "127.0.0.1:8080");
        assert_eq!(read.log_format, "text");
        assert!(read.ledger_key_file.is_none() && read.sandbox.profiles.is_none());
        assert_eq!(
            (read.held_retry.as_str(), read.heartbeat.as_str()),
            ("30s", "30s")
        );
    }

    #[test]
    fn the_settings_table_of_the_docs_lists_each_variable_with_its_default() {
        let docs = include_str!("../../docs/configuration.md");
        for arg in declaration().get_arguments() {
            let name = arg.get_env().unwrap().to_string_lossy();
            let row = docs
                .lines()
                .find(|line| line.starts_with(&format!("| `{name}` |")))
                .unwrap_or_else(|| panic!("docs/configuration.md has no row for {name}"));
            if let Some(default) = arg.get_default_values().first() {
                assert!(
                    row.starts_with(&format!("| `{name}` | `{}` |", default.to_string_lossy())),
                    "{row}"
                );
            }
        }
    }

    #[test]
    fn the_help_lists_every_variable_and_family() {
        let listing = listing();
        for name in declared() {
            assert!(listing.contains(&format!("\n  {name}")), "{name}");
        }
        assert!(listing.contains("\n  WAVEGATE_LISTEN [default: 127.0.0.1:8080]\n          Address to serve on, host:port\n"), "{listing}");
        assert!(listing.contains("WAVEGATE_NOTIFY_<NAME>_URL"));
        assert!(!listing.contains("WAVEGATE_TEST_"));
    }
}
