//! Server settings, checked: what the `WAVEGATE_*` variables declared in
//! `config::vars` say, and the notify targets read by prefix. Every variable
//! is named in its error, and secrets never appear in `Debug` output or logs.

pub use super::secret::Secret;
use super::vars::ServerVars;
pub use super::vars::DEFAULT_HEARTBEAT;
pub(crate) use super::vars::HELD_RETRY;
use anyhow::{bail, Context, Result};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub(crate) struct GitHubSettings {
    pub(crate) app_id: u64,
    /// The App's private key, PEM.
    pub(crate) private_key: Secret,
    /// The file it was read from, when given as a path (no sandboxed
    /// command may see it).
    pub(crate) private_key_file: Option<PathBuf>,
}

/// Where a `[notify]` target's notifications go, as the operator defines it:
/// `WAVEGATE_NOTIFY_<NAME>_URL`, `_KEY` (signs JSON deliveries) and `_FORMAT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyTarget {
    /// Held as a secret: a Slack webhook's URL is its credential.
    pub(crate) url: Secret,
    pub(crate) key: Option<Secret>,
    pub(crate) format: NotifyFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyFormat {
    /// The notice as JSON, signed with the key like GitHub's webhooks.
    Json,
    /// `{"text": …}` for a Slack incoming webhook.
    Slack,
}

/// The notify targets a server defines, by name in the variables' spelling.
pub type NotifyTargets = std::sync::Arc<std::collections::BTreeMap<String, NotifyTarget>>;

/// The notify targets among `vars`, by the name `[notify] to` uses in its
/// variables' spelling (`INFRA_ALERTS`).
fn notify_targets(
    vars: &std::collections::BTreeMap<String, String>,
) -> Result<std::collections::BTreeMap<String, NotifyTarget>> {
    let mut targets = std::collections::BTreeMap::new();
    for name in vars.keys() {
        let Some(rest) = name.strip_prefix(super::vars::NOTIFY_PREFIX) else {
            continue;
        };
        let Some(target) = ["_URL", "_KEY", "_FORMAT"]
            .iter()
            .find_map(|suffix| rest.strip_suffix(suffix))
            .filter(|t| !t.is_empty())
        else {
            bail!("{name} is not a notify setting; define a target with WAVEGATE_NOTIFY_<NAME>_URL, _KEY and _FORMAT");
        };
        if targets.contains_key(target) {
            continue;
        }
        let get = |suffix: &str| {
            vars.get(&format!("WAVEGATE_NOTIFY_{target}_{suffix}"))
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let url = get("URL").with_context(|| format!("WAVEGATE_NOTIFY_{target}_KEY or _FORMAT is set but WAVEGATE_NOTIFY_{target}_URL is not; set it to where the notifications go"))?;
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            bail!("WAVEGATE_NOTIFY_{target}_URL is not an http(s) URL; give the receiver's address, e.g. https://alerts.example.com/wavegate");
        }
        let format = match get("FORMAT").as_deref() {
            None | Some("json") => NotifyFormat::Json,
            Some("slack") => NotifyFormat::Slack,
            Some(other) => bail!("WAVEGATE_NOTIFY_{target}_FORMAT=`{other}` is not a format; use `json` (signed, the default) or `slack`"),
        };
        let key = get("KEY").map(Secret::new);
        if format == NotifyFormat::Json && key.is_none() {
            bail!("WAVEGATE_NOTIFY_{target}_KEY is not set: JSON notifications are signed (X-Wavegate-Signature-256), so the receiver can tell them from anyone's; set a long random key and give the receiver the same");
        }
        targets.insert(
            target.to_owned(),
            NotifyTarget {
                url: Secret::new(url),
                key,
                format,
            },
        );
    }
    Ok(targets)
}

#[derive(Debug, Clone)]
pub(crate) struct ForgejoSettings {
    /// The instance root, e.g. `https://codeberg.org`; the API is under `/api/v1`.
    pub(crate) url: String,
    pub(crate) token: Secret,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub(crate) listen: SocketAddr,
    pub(crate) database_url: String,
    pub(crate) data_dir: PathBuf,
    pub(crate) github_api_url: String,
    /// Absent until configured, or until the manifest flow stores credentials.
    pub(crate) github: Option<GitHubSettings>,
    /// Every accepted secret (rotation: old and new side by side).
    pub(crate) github_webhook_secrets: Vec<Secret>,
    pub(crate) forgejo: Option<ForgejoSettings>,
    pub(crate) forgejo_webhook_secrets: Vec<Secret>,
    /// Where this server is reached from outside (the manifest flow's URLs).
    pub(crate) public_url: Option<String>,
    /// Who signs GitHub Actions runs' OIDC tokens (`WAVEGATE_ACTIONS_OIDC_ISSUER`).
    pub(crate) actions_oidc_issuer: String,
    /// Whether the pages and the JSON API are shown to anyone who reaches
    /// the server (`WAVEGATE_PUBLIC_PAGES`).
    pub(crate) public_pages: bool,
    /// Logging in to the pages with the forges (none configured: no one
    /// logs in).
    pub(crate) login: LoginSettings,
    /// Worker tasks claiming jobs.
    pub(crate) workers: usize,
    /// How long a claimed job is held without renewal; a crashed server's
    /// jobs are picked up again after this.
    pub job_lease: std::time::Duration,
    /// How often open pull requests and unfinished apply runs are
    /// reconciled with the forges (also once at start); None: never.
    pub(crate) reconcile_every: Option<std::time::Duration>,
    /// The shortest drift interval (`WAVEGATE_DRIFT_MIN_INTERVAL`, default
    /// 1h); `None`: no drift checks at all.
    pub(crate) drift_min_interval: Option<std::time::Duration>,
    /// The share (0–1] of a forge's request budget a sweep may spend
    /// (`WAVEGATE_RECONCILE_BUDGET`, default 50%).
    pub(crate) reconcile_budget: f64,
    /// How plan, apply and outputs commands are isolated (`WAVEGATE_SANDBOX*`).
    pub(crate) sandbox: crate::sandbox::SandboxSettings,
    /// How soon an apply answered `held` is tried again (`WAVEGATE_HELD_RETRY`).
    pub held_retry: std::time::Duration,
    /// How long a quiet command runs before the log says so
    /// (`WAVEGATE_HEARTBEAT`); `None`: never.
    pub heartbeat: Option<std::time::Duration>,
    /// The ledger key `WAVEGATE_LEDGER_KEY_FILE` names, read and checked,
    /// with its path (no sandboxed command may see it); `None`: the server
    /// keeps its own in the data dir (`config::ledger_key`).
    pub(crate) ledger_key: Option<(
        std::path::PathBuf,
        std::sync::Arc<crate::model::signing::LedgerKey>,
    )>,
    /// The notify targets the environment defines (`WAVEGATE_NOTIFY_*`),
    /// by name in the variables' spelling; none when read by [`Settings::from_lookup`].
    pub(crate) notify: NotifyTargets,
    /// The operator's central configuration (`WAVEGATE_REPOS_CONFIG`),
    /// read and checked at start.
    pub(crate) operator: std::sync::Arc<super::operator::OperatorConfig>,
}

/// How log lines are written on standard error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line, with the fields of the spans it ran in.
    Json,
}

/// Reads `WAVEGATE_LOG_FORMAT`. `main` calls this before anything else is
/// checked, since logging starts first.
pub fn log_format(value: &str) -> Result<LogFormat> {
    match value.trim() {
        v if v.eq_ignore_ascii_case("text") => Ok(LogFormat::Text),
        v if v.eq_ignore_ascii_case("json") => Ok(LogFormat::Json),
        other => bail!(
            "WAVEGATE_LOG_FORMAT=`{other}` is not a log format; use `text` (the default) or `json`"
        ),
    }
}

/// How visitors log in to the pages, and who may act there.
#[derive(Debug, Clone, Default)]
pub(crate) struct LoginSettings {
    pub(crate) github: Option<OAuthClient>,
    pub(crate) forgejo: Option<OAuthClient>,
    /// Team slugs whose members may act on a repository's locks and jobs.
    pub(crate) operator_teams: Vec<String>,
}

/// An OAuth client the forge knows this server as.
#[derive(Debug, Clone)]
pub(crate) struct OAuthClient {
    pub(crate) client_id: String,
    pub(crate) client_secret: Secret,
}

impl LoginSettings {
    pub(crate) fn client(&self, forge: crate::model::ForgeKind) -> Option<&OAuthClient> {
        match forge {
            crate::model::ForgeKind::GitHub => self.github.as_ref(),
            crate::model::ForgeKind::Forgejo => self.forgejo.as_ref(),
        }
    }

    /// Whether anyone can log in.
    pub(crate) fn any(&self) -> bool {
        self.github.is_some() || self.forgejo.is_some()
    }

    fn check(vars: &ServerVars) -> Result<Self> {
        let client = |prefix: &str,
                      id: &Option<String>,
                      secret: &Option<Secret>,
                      fix: &str|
         -> Result<Option<OAuthClient>> {
            match (id.as_deref().map(str::trim).filter(|id| !id.is_empty()), secret) {
                (Some(id), Some(secret)) => Ok(Some(OAuthClient { client_id: id.to_owned(), client_secret: secret.clone() })),
                (None, None) => Ok(None),
                (Some(_), None) => bail!("{prefix}_CLIENT_ID is set but {prefix}_CLIENT_SECRET is not; set it to the client secret {fix}"),
                (None, Some(_)) => bail!("{prefix}_CLIENT_SECRET is set but {prefix}_CLIENT_ID is not; set it to the client id {fix}"),
            }
        };
        let github = client(
            "WAVEGATE_GITHUB",
            &vars.github_client_id,
            &vars.github_client_secret,
            "from the GitHub App's settings page",
        )?;
        let forgejo = client(
            "WAVEGATE_FORGEJO",
            &vars.forgejo_client_id,
            &vars.forgejo_client_secret,
            "of the OAuth2 application made for wavegate in Forgejo's settings (Applications)",
        )?;
        if forgejo.is_some() && vars.forgejo_url.is_none() {
            bail!("WAVEGATE_FORGEJO_CLIENT_ID is set but WAVEGATE_FORGEJO_URL is not; set it to the instance the OAuth2 application lives on");
        }
        let operator_teams = vars
            .operator_teams
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|slug| !slug.is_empty())
            .map(|slug| {
                if slug.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                    Ok(slug.to_owned())
                } else {
                    bail!("WAVEGATE_OPERATOR_TEAMS: `{slug}` is not a team slug; give slugs as the team's URL names them, comma-separated, e.g. `platform,sre`")
                }
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            github,
            forgejo,
            operator_teams,
        })
    }
}

/// Reads `WAVEGATE_PUBLIC_PAGES`: `on` or `off`.
fn public_pages(text: &str) -> Result<bool> {
    match text.trim() {
        v if v.eq_ignore_ascii_case("on") => Ok(true),
        v if v.eq_ignore_ascii_case("off") => Ok(false),
        other => bail!(
            "WAVEGATE_PUBLIC_PAGES=`{other}` is neither `on` nor `off`; `on` shows the pages to anyone who reaches this server, `off` (the default) shows none"
        ),
    }
}

/// Reads `WAVEGATE_RECONCILE_EVERY`: a duration of a second or more, or
/// `off` (or `0`) for no reconciliation at all, at start included.
fn reconcile_every(text: &str) -> Result<Option<std::time::Duration>> {
    if text.eq_ignore_ascii_case("off") || text == "0" {
        return Ok(None);
    }
    super::check::parse_duration(text)
        .ok()
        .filter(|d| d.as_secs() >= 1)
        .map(Some)
        .with_context(|| format!("WAVEGATE_RECONCILE_EVERY=`{text}` is not a duration of a second or more; write it like `5m` or `90s`, or `off` to never reconcile"))
}

/// Reads `WAVEGATE_DRIFT_MIN_INTERVAL`: a duration of a second or more,
/// or `off` for no drift checks.
fn drift_min_interval(text: &str) -> Result<Option<std::time::Duration>> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    super::check::parse_duration(text)
        .ok()
        .filter(|d| d.as_secs() >= 1)
        .map(Some)
        .with_context(|| format!("WAVEGATE_DRIFT_MIN_INTERVAL=`{text}` is not a duration of a second or more; write it like `1h` or `15m`, or `off` for no drift checks"))
}

/// Reads `WAVEGATE_RECONCILE_BUDGET`: a percentage from 1 to 100, with or
/// without its `%`.
fn reconcile_budget(text: &str) -> Result<f64> {
    text.trim_end_matches('%')
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|p| (1.0..=100.0).contains(p))
        .map(|percent| percent / 100.0)
        .with_context(|| format!("WAVEGATE_RECONCILE_BUDGET=`{text}` is not a share of the forge's request budget; write a percentage from 1 to 100, like `50%`"))
}

/// `WAVEGATE_HEARTBEAT`: how long a quiet plan or apply command runs before
/// the log says "still running after Ns" (and again each time after);
/// `0` turns it off.
fn heartbeat(text: &str) -> Result<Option<std::time::Duration>> {
    if text == "0" {
        return Ok(None);
    }
    super::check::parse_duration(text)
        .ok()
        .filter(|d| d.as_secs() >= 1)
        .map(Some)
        .with_context(|| format!("WAVEGATE_HEARTBEAT=`{text}` is not a duration of a second or more; write it like `30s` or `2m`, or `0` for no heartbeat"))
}

impl Settings {
    pub fn from_env() -> Result<Self> {
        // A variable that is not UTF-8 is none of wavegate's (and `vars` would panic).
        Self::from_vars(std::env::vars_os().filter_map(|(name, value)| {
            Some((name.into_string().ok()?, value.into_string().ok()?))
        }))
    }

    /// Reads settings from a whole environment, notify targets included.
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Result<Self> {
        let vars: std::collections::BTreeMap<String, String> = vars.into_iter().collect();
        let mut settings = Self::from_lookup(|name| vars.get(name).cloned())?;
        settings.notify = std::sync::Arc::new(notify_targets(&vars)?);
        Ok(settings)
    }

    /// Reads settings through `get` (the environment, or a map in tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        Self::check(&ServerVars::from_lookup(&get), &get)
    }

    /// The settings `vars` declare, checked; `env` is the environment the
    /// profiles file's `from_env` secrets are read from.
    fn check(vars: &ServerVars, env: &dyn Fn(&str) -> Option<String>) -> Result<Self> {
        let listen = vars.listen.parse().with_context(|| {
            format!(
                "WAVEGATE_LISTEN=`{}` is not an address; use host:port, e.g. 127.0.0.1:8080",
                vars.listen
            )
        })?;
        let github = match (&vars.github_app_id, &vars.github_private_key) {
            (Some(id), Some(key)) => Some(GitHubSettings {
                app_id: id.parse().with_context(|| format!("WAVEGATE_GITHUB_APP_ID=`{id}` is not a number; use the App ID from the App's settings page"))?,
                private_key: Secret::new(read_pem(key.expose())?),
                private_key_file: (!key.expose().contains("-----BEGIN")).then(|| PathBuf::from(key.expose())),
            }),
            (None, None) => None,
            (Some(_), None) => bail!("WAVEGATE_GITHUB_APP_ID is set but WAVEGATE_GITHUB_PRIVATE_KEY is not; set it to the App's private key (PEM text or a path to the .pem file)"),
            (None, Some(_)) => bail!("WAVEGATE_GITHUB_PRIVATE_KEY is set but WAVEGATE_GITHUB_APP_ID is not; set it to the App ID from the App's settings page"),
        };
        let forgejo = match (&vars.forgejo_url, &vars.forgejo_token) {
            (Some(url), Some(token)) => Some(ForgejoSettings { url: url.trim_end_matches('/').to_owned(), token: token.clone() }),
            (None, None) => None,
            (Some(_), None) => bail!("WAVEGATE_FORGEJO_URL is set but WAVEGATE_FORGEJO_TOKEN is not; create an access token for the bot user (scopes: repository, issue) and set it"),
            (None, Some(_)) => bail!("WAVEGATE_FORGEJO_TOKEN is set but WAVEGATE_FORGEJO_URL is not; set it to the instance root, e.g. https://codeberg.org"),
        };
        let secrets = |list: &Option<Secret>| -> Vec<Secret> {
            list.as_ref()
                .map(|v| {
                    v.expose()
                        .split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(Secret::new)
                        .collect()
                })
                .unwrap_or_default()
        };
        let workers = vars
            .workers
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .with_context(|| {
                format!(
                    "WAVEGATE_WORKERS=`{}` is not a positive number",
                    vars.workers
                )
            })?;
        let job_lease = super::check::parse_duration(&vars.job_lease)
            .ok()
            .filter(|d| d.as_secs() >= 1)
            .with_context(|| format!("WAVEGATE_JOB_LEASE=`{}` is not a duration of a second or more; write it like `90s` or `5m`", vars.job_lease))?;
        let reconcile_every = reconcile_every(&vars.reconcile_every)?;
        let drift_min_interval = drift_min_interval(&vars.drift_min_interval)?;
        let reconcile_budget = reconcile_budget(&vars.reconcile_budget)?;
        // Read by main before logging starts; checked here so a bad value fails the start.
        log_format(&vars.log_format)?;
        let sandbox = crate::sandbox::SandboxSettings::from_vars(&vars.sandbox, env)?;
        let held_retry = super::check::parse_duration(&vars.held_retry)
            .ok()
            .filter(|d| d.as_secs() >= 1)
            .with_context(|| format!("WAVEGATE_HELD_RETRY=`{}` is not a duration of a second or more; write it like `30s` or `2m`", vars.held_retry))?;
        let heartbeat = heartbeat(&vars.heartbeat)?;
        let ledger_key = match &vars.ledger_key_file {
            Some(path) => {
                let key = super::ledger_key::read_named(path)?;
                Some((path.clone(), std::sync::Arc::new(key)))
            }
            None => None,
        };
        let operator = match &vars.repos_config {
            Some(path) => super::operator::OperatorConfig::read(path)?,
            None => Default::default(),
        };
        let public_pages = public_pages(&vars.public_pages)?;
        let login = LoginSettings::check(vars)?;
        Ok(Self {
            public_pages,
            login,
            operator: std::sync::Arc::new(operator),
            listen,
            database_url: vars.database_url.clone(),
            data_dir: vars.data_dir.clone(),
            github_api_url: vars.github_api_url.trim_end_matches('/').to_owned(),
            github,
            github_webhook_secrets: secrets(&vars.github_webhook_secret),
            forgejo,
            forgejo_webhook_secrets: secrets(&vars.forgejo_webhook_secret),
            public_url: vars
                .public_url
                .as_ref()
                .map(|u| u.trim_end_matches('/').to_owned()),
            actions_oidc_issuer: vars.actions_oidc_issuer.trim_end_matches('/').to_owned(),
            workers,
            job_lease,
            reconcile_every,
            drift_min_interval,
            reconcile_budget,
            sandbox,
            held_retry,
            heartbeat,
            ledger_key,
            notify: std::sync::Arc::default(),
        })
    }
}

impl Settings {
    /// What a server starting with these settings warns about before it
    /// serves, given the names of the variables in its environment:
    /// `WAVEGATE_*` names it does not read (with the nearest one it does),
    /// and a configured forge without a webhook secret.
    pub(crate) fn start_warnings(&self, names: impl IntoIterator<Item = String>) -> Vec<String> {
        let mut warnings: Vec<String> = super::vars::unknown(names)
            .into_iter()
            .map(|(name, nearest)| match nearest {
                Some(known) => format!("{name} is not a setting wavegate reads, so it is ignored; did you mean {known}?"),
                None => format!("{name} is not a setting wavegate reads, so it is ignored; the settings are listed in docs/configuration.md"),
            })
            .collect();
        warnings.sort();
        if self.github.is_some() && self.github_webhook_secrets.is_empty() {
            warnings.push("a GitHub App is configured but WAVEGATE_GITHUB_WEBHOOK_SECRET is not set: every GitHub delivery will be refused until it is set to the App's webhook secret".into());
        }
        if self.login.any() && self.public_url.is_none() {
            warnings.push("logging in to the pages is set up but WAVEGATE_PUBLIC_URL is not: the forge is sent back to http://<the request's Host> and the session cookie is not marked Secure; set WAVEGATE_PUBLIC_URL to the https address visitors use".into());
        }
        if self.forgejo.is_some() && self.forgejo_webhook_secrets.is_empty() {
            warnings.push("Forgejo is configured but WAVEGATE_FORGEJO_WEBHOOK_SECRET is not set: every Forgejo delivery will be refused until it is set to the secret of the repository's webhook".into());
        }
        warnings
    }
}

/// A PEM given inline or as a path to a file.
fn read_pem(value: &str) -> Result<String> {
    if value.contains("-----BEGIN") {
        return Ok(value.replace("\\n", "\n"));
    }
    let path = value.trim();
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("WAVEGATE_GITHUB_PRIVATE_KEY names `{path}`, which cannot be read; give the PEM text or a readable path"))?;
    if !text.contains("-----BEGIN") {
        bail!("WAVEGATE_GITHUB_PRIVATE_KEY: `{path}` is not a PEM file; download the private key from the App's settings page");
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> Result<Settings> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn defaults_need_no_variables() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(s.database_url, "sqlite://wavegate.db");
        assert_eq!(s.github_api_url, "https://api.github.com");
        assert!(s.github.is_none() && s.forgejo.is_none());
        assert!(s.ledger_key.is_none());
    }

    #[test]
    fn a_ledger_key_file_is_read_and_checked_at_start() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.pem");
        let key = crate::model::signing::LedgerKey::from_seed(&[3; 32]);
        std::fs::write(&path, key.to_pkcs8_pem().as_bytes()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        let named = path.display().to_string();
        let s = settings(&[("WAVEGATE_LEDGER_KEY_FILE", &named)]).unwrap();
        let (file, read) = s.ledger_key.unwrap();
        assert_eq!((file, read.public()), (path.clone(), key.public()));
        let e = settings(&[("WAVEGATE_LEDGER_KEY_FILE", "/no/such/ledger.pem")])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("WAVEGATE_LEDGER_KEY_FILE names `/no/such/ledger.pem`"),
            "{e}"
        );
    }

    #[test]
    fn the_operators_repos_config_is_read_at_start_and_a_bad_one_stops_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("repos.toml");
        std::fs::write(
            &path,
            "[[repos]]\nmatch = [\"acme/*\"]\nlocked = [\"policy.required\"]\n",
        )
        .unwrap();
        let file = path.display().to_string();
        let read = settings(&[("WAVEGATE_REPOS_CONFIG", &file)]).unwrap();
        assert!(!read.operator.for_repo("acme/infra").is_empty());
        assert!(read.operator.for_repo("globex/infra").is_empty());
        let missing = settings(&[("WAVEGATE_REPOS_CONFIG", "/no/such/repos.toml")]).unwrap_err();
        assert!(
            format!("{missing:#}").contains("cannot read it"),
            "{missing:#}"
        );
        std::fs::write(&path, "[[repos]]\nmatch = [\"acme\"]\n").unwrap();
        let broken = settings(&[("WAVEGATE_REPOS_CONFIG", &file)]).unwrap_err();
        assert!(
            format!("{broken:#}").contains("is not `owner/name`"),
            "{broken:#}"
        );
    }

    #[test]
    fn the_heartbeat_is_a_duration_or_0_for_none() {
        assert_eq!(settings(&[]).unwrap().heartbeat, Some(DEFAULT_HEARTBEAT));
        let every_minute = settings(&[("WAVEGATE_HEARTBEAT", "1m")]).unwrap();
        assert_eq!(
            every_minute.heartbeat,
            Some(std::time::Duration::from_secs(60))
        );
        assert_eq!(
            settings(&[("WAVEGATE_HEARTBEAT", "0")]).unwrap().heartbeat,
            None
        );
        for bad in ["soon", "10ms", "-1s"] {
            let e = settings(&[("WAVEGATE_HEARTBEAT", bad)])
                .unwrap_err()
                .to_string();
            assert_eq!(
                e,
                format!("WAVEGATE_HEARTBEAT=`{bad}` is not a duration of a second or more; write it like `30s` or `2m`, or `0` for no heartbeat")
            );
        }
    }

    #[test]
    fn secrets_rotate_and_never_print() {
        let s = settings(&[
            ("WAVEGATE_GITHUB_WEBHOOK_SECRET", "old, new"),
            ("WAVEGATE_FORGEJO_URL", "https://f.example/"),
            ("WAVEGATE_FORGEJO_TOKEN", "tok123"),
        ])
        .unwrap();
        assert_eq!(s.github_webhook_secrets.len(), 2);
        let debug = format!("{s:?}");
        assert!(
            !debug.contains("tok123") && !debug.contains("old"),
            "{debug}"
        );
        assert_eq!(s.forgejo.unwrap().url, "https://f.example");
    }

    #[test]
    fn a_misspelt_variable_and_a_forge_without_a_webhook_secret_are_warned_about_at_start() {
        let s = settings(&[
            ("WAVEGATE_FORGEJO_URL", "https://f.example/"),
            ("WAVEGATE_FORGEJO_TOKEN", "tok123"),
        ])
        .unwrap();
        let names = [
            "WAVEGATE_SANDBOX_NETWORKS",
            "WAVEGATE_SOMETHING_ELSE_ENTIRELY",
            "WAVEGATE_LISTEN",
            "WAVEGATE_TEST_POSTGRES_URL",
            "HOME",
        ]
        .map(String::from);
        insta::assert_snapshot!(s.start_warnings(names).join("\n"), @"
        WAVEGATE_SANDBOX_NETWORKS is not a setting wavegate reads, so it is ignored; did you mean WAVEGATE_SANDBOX_NETWORK?
        WAVEGATE_SOMETHING_ELSE_ENTIRELY is not a setting wavegate reads, so it is ignored; the settings are listed in docs/configuration.md
        Forgejo is configured but WAVEGATE_FORGEJO_WEBHOOK_SECRET is not set: every Forgejo delivery will be refused until it is set to the secret of the repository's webhook
        ");
    }

    #[test]
    fn logins_need_both_halves_of_a_client_and_warn_without_a_public_url() {
        let e = settings(&[("WAVEGATE_GITHUB_CLIENT_ID", "Iv1.x")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("WAVEGATE_GITHUB_CLIENT_SECRET is not"), "{e}");
        let e = settings(&[
            ("WAVEGATE_FORGEJO_CLIENT_ID", "a"),
            ("WAVEGATE_FORGEJO_CLIENT_SECRET", "b"),
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("WAVEGATE_FORGEJO_URL is not"), "{e}");
        let e = settings(&[("WAVEGATE_OPERATOR_TEAMS", "platform, sre team")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("`sre team` is not a team slug"), "{e}");
        let login = [
            ("WAVEGATE_GITHUB_CLIENT_ID", "Iv1.x"),
            ("WAVEGATE_GITHUB_CLIENT_SECRET", "s"),
            ("WAVEGATE_OPERATOR_TEAMS", "platform,sre"),
        ];
        let s = settings(&login).unwrap();
        assert_eq!(s.login.operator_teams, ["platform", "sre"]);
        let warned = s.start_warnings([]).join("\n");
        assert!(warned.contains("WAVEGATE_PUBLIC_URL is not"), "{warned}");
        let mut with_url = login.to_vec();
        with_url.push(("WAVEGATE_PUBLIC_URL", "https://wavegate.example"));
        assert!(settings(&with_url).unwrap().start_warnings([]).is_empty());
    }

    #[test]
    fn mistakes_name_the_variable_and_the_fix() {
        let e = settings(&[("WAVEGATE_GITHUB_APP_ID", "12")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("WAVEGATE_GITHUB_PRIVATE_KEY is not"), "{e}");
        let e = settings(&[("WAVEGATE_LISTEN", "nope")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("WAVEGATE_LISTEN=`nope`"), "{e}");
        let e = settings(&[
            ("WAVEGATE_GITHUB_APP_ID", "x"),
            (
                "WAVEGATE_GITHUB_PRIVATE_KEY",
                "-----BEGIN RSA PRIVATE KEY-----",
            ),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("WAVEGATE_GITHUB_APP_ID=`x` is not a number"),
            "{e}"
        );
        let e = settings(&[
            ("WAVEGATE_GITHUB_APP_ID", "1"),
            ("WAVEGATE_GITHUB_PRIVATE_KEY", "/no/such.pem"),
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("`/no/such.pem`, which cannot be read"), "{e}");
    }

    #[test]
    fn reconciliation_runs_every_five_minutes_unless_told_otherwise() {
        let every = |v: &str| settings(&[("WAVEGATE_RECONCILE_EVERY", v)]);
        let minutes = |m: u64| Some(std::time::Duration::from_secs(60 * m));
        let drift = |v: &str| settings(&[("WAVEGATE_DRIFT_MIN_INTERVAL", v)]);
        assert_eq!(settings(&[]).unwrap().drift_min_interval, minutes(60));
        assert_eq!(
            drift("2s").unwrap().drift_min_interval,
            Some(std::time::Duration::from_secs(2))
        );
        assert_eq!(drift("off").unwrap().drift_min_interval, None);
        assert!(drift("10ms")
            .unwrap_err()
            .to_string()
            .contains("WAVEGATE_DRIFT_MIN_INTERVAL=`10ms`"));
        assert_eq!(settings(&[]).unwrap().reconcile_every, minutes(5));
        assert_eq!(every(" ").unwrap().reconcile_every, minutes(5));
        assert_eq!(every("2m").unwrap().reconcile_every, minutes(2));
        assert_eq!(every("OFF").unwrap().reconcile_every, None);
        assert_eq!(every("0").unwrap().reconcile_every, None);
        let budget = |v: &str| settings(&[("WAVEGATE_RECONCILE_BUDGET", v)]);
        assert_eq!(settings(&[]).unwrap().reconcile_budget, 0.5);
        assert_eq!(budget("80%").unwrap().reconcile_budget, 0.8);
        assert_eq!(budget("25").unwrap().reconcile_budget, 0.25);
        for bad in ["0", "101%", "half"] {
            assert_eq!(
                budget(bad).unwrap_err().to_string(),
                format!("WAVEGATE_RECONCILE_BUDGET=`{bad}` is not a share of the forge's request budget; write a percentage from 1 to 100, like `50%`")
            );
        }
        for bad in ["5", "500ms", "soon", "-1m"] {
            let e = every(bad).unwrap_err().to_string();
            assert_eq!(
                e,
                format!("WAVEGATE_RECONCILE_EVERY=`{bad}` is not a duration of a second or more; write it like `5m` or `90s`, or `off` to never reconcile")
            );
        }
    }

    #[test]
    fn the_log_format_is_text_unless_json_is_asked_for() {
        assert!(settings(&[("WAVEGATE_LOG_FORMAT", " JSON ")]).is_ok());
        assert!(settings(&[("WAVEGATE_LOG_FORMAT", " ")]).is_ok());
        assert_eq!(log_format(" JSON ").unwrap(), LogFormat::Json);
        assert_eq!(log_format("text").unwrap(), LogFormat::Text);
        let e = settings(&[("WAVEGATE_LOG_FORMAT", "logfmt")])
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "WAVEGATE_LOG_FORMAT=`logfmt` is not a log format; use `text` (the default) or `json`"
        );
    }

    #[test]
    fn the_pages_are_closed_unless_opened_with_on() {
        assert!(!settings(&[]).unwrap().public_pages);
        assert!(
            settings(&[("WAVEGATE_PUBLIC_PAGES", " ON ")])
                .unwrap()
                .public_pages
        );
        assert!(
            !settings(&[("WAVEGATE_PUBLIC_PAGES", "off")])
                .unwrap()
                .public_pages
        );
        let e = settings(&[("WAVEGATE_PUBLIC_PAGES", "yes")])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("WAVEGATE_PUBLIC_PAGES=`yes` is neither `on` nor `off`;"),
            "{e}"
        );
    }

    #[test]
    fn notify_targets_are_read_by_name_and_json_ones_must_be_signed() {
        let vars = |pairs: &[(&str, &str)]| {
            Settings::from_vars(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
        };
        let read = vars(&[
            (
                "WAVEGATE_NOTIFY_INFRA_ALERTS_URL",
                "https://alerts.example.com/hook",
            ),
            ("WAVEGATE_NOTIFY_INFRA_ALERTS_KEY", "k3y"),
            (
                "WAVEGATE_NOTIFY_CHAT_URL",
                "https://hooks.slack.com/services/T/B/x",
            ),
            ("WAVEGATE_NOTIFY_CHAT_FORMAT", "slack"),
        ])
        .unwrap();
        assert_eq!(read.notify.len(), 2);
        let alerts = &read.notify["INFRA_ALERTS"];
        assert_eq!(alerts.format, NotifyFormat::Json);
        assert_eq!(alerts.key.as_ref().unwrap().expose(), "k3y");
        assert_eq!(read.notify["CHAT"].format, NotifyFormat::Slack);
        assert!(
            !format!("{read:?}").contains("hooks.slack.com"),
            "the URL is a secret"
        );

        for (pairs, expected) in [
            (
                &[("WAVEGATE_NOTIFY_OPS_URL", "https://x.example")][..],
                "WAVEGATE_NOTIFY_OPS_KEY is not set: JSON notifications are signed",
            ),
            (
                &[("WAVEGATE_NOTIFY_OPS_KEY", "k")][..],
                "WAVEGATE_NOTIFY_OPS_URL is not",
            ),
            (
                &[
                    ("WAVEGATE_NOTIFY_OPS_URL", "alerts.example.com"),
                    ("WAVEGATE_NOTIFY_OPS_KEY", "k"),
                ][..],
                "WAVEGATE_NOTIFY_OPS_URL is not an http(s) URL",
            ),
            (
                &[
                    ("WAVEGATE_NOTIFY_OPS_URL", "https://x.example"),
                    ("WAVEGATE_NOTIFY_OPS_FORMAT", "xml"),
                ][..],
                "WAVEGATE_NOTIFY_OPS_FORMAT=`xml` is not a format",
            ),
            (
                &[("WAVEGATE_NOTIFY_OPS_ADDRESS", "https://x.example")][..],
                "WAVEGATE_NOTIFY_OPS_ADDRESS is not a notify setting",
            ),
        ] {
            let e = format!("{:#}", vars(pairs).unwrap_err());
            assert!(e.contains(expected), "expected `{expected}` in: {e}");
        }
    }
}
