//! The forges this server talks to, and the secrets their webhooks are signed
//! with. The GitHub App can arrive while the server runs (the manifest flow
//! stores its credentials in the data dir); it is used from then on without
//! a restart, and loaded from the data dir at the next start.

use super::client::{AppCredentials, ForgeClient};
use super::forgejo::ForgejoClient;
use super::github::GitHubClient;
use super::retry::RetryPolicy;
use super::ForgeKind;
use crate::config::settings::{Secret, Settings};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// The file in the data dir that holds credentials from the manifest flow.
pub(crate) const APP_CREDENTIALS_FILE: &str = "github-app.json";

pub struct Forges {
    github_api_url: String,
    github: RwLock<Option<ForgeClient>>,
    github_secrets: RwLock<Vec<Secret>>,
    forgejo: Option<ForgeClient>,
    forgejo_secrets: Vec<Secret>,
    data_dir: PathBuf,
}

/// What the manifest flow stores (mode 0600).
#[derive(Serialize, Deserialize)]
struct StoredApp {
    id: u64,
    slug: String,
    pem: String,
    webhook_secret: Option<String>,
    html_url: String,
}

impl Forges {
    pub fn from_settings(settings: &Settings) -> Result<Self> {
        let mut github_secrets = settings.github_webhook_secrets.clone();
        let github = match &settings.github {
            Some(app) => Some(github_client(
                &settings.github_api_url,
                app.app_id,
                &app.private_key,
            )?),
            None => match load_stored(&settings.data_dir)? {
                Some(stored) => {
                    if let Some(secret) = &stored.webhook_secret {
                        github_secrets.push(Secret::new(secret.clone()));
                    }
                    tracing::info!(app = %stored.slug, "using the GitHub App created through /setup");
                    Some(github_client(
                        &settings.github_api_url,
                        stored.id,
                        &Secret::new(stored.pem),
                    )?)
                }
                None => None,
            },
        };
        let forgejo = match &settings.forgejo {
            Some(forgejo) => Some(ForgeClient::Forgejo(Arc::new(
                ForgejoClient::new(&forgejo.url, forgejo.token.clone(), RetryPolicy::default())
                    .context("WAVEGATE_FORGEJO_URL / WAVEGATE_FORGEJO_TOKEN")?,
            ))),
            None => None,
        };
        Ok(Self {
            github_api_url: settings.github_api_url.clone(),
            github: RwLock::new(github),
            github_secrets: RwLock::new(github_secrets),
            forgejo,
            forgejo_secrets: settings.forgejo_webhook_secrets.clone(),
            data_dir: settings.data_dir.clone(),
        })
    }

    pub(crate) fn github_api_url(&self) -> &str {
        &self.github_api_url
    }

    pub(crate) fn github_configured(&self) -> bool {
        self.github.read().expect("forges lock").is_some()
    }

    /// The client for a repository's forge, or an error saying what to configure.
    pub fn client(&self, forge: ForgeKind) -> Result<ForgeClient> {
        match forge {
            ForgeKind::GitHub => match self.github.read().expect("forges lock").clone() {
                Some(client) => Ok(client),
                None => bail!("no GitHub App is configured: set WAVEGATE_GITHUB_APP_ID and WAVEGATE_GITHUB_PRIVATE_KEY, or create one at /setup"),
            },
            ForgeKind::Forgejo => match &self.forgejo {
                Some(client) => Ok(client.clone()),
                None => bail!("no Forgejo instance is configured: set WAVEGATE_FORGEJO_URL and WAVEGATE_FORGEJO_TOKEN"),
            },
        }
    }

    pub(crate) fn webhook_secrets(&self, forge: ForgeKind) -> Vec<Secret> {
        match forge {
            ForgeKind::GitHub => self.github_secrets.read().expect("forges lock").clone(),
            ForgeKind::Forgejo => self.forgejo_secrets.clone(),
        }
    }

    /// Stores an App created through the manifest flow and starts using it.
    pub(crate) fn install_github_app(&self, app: &AppCredentials) -> Result<()> {
        let client = github_client(&self.github_api_url, app.id, &app.pem)?;
        let stored = StoredApp {
            id: app.id,
            slug: app.slug.clone(),
            pem: app.pem.expose().to_owned(),
            webhook_secret: app.webhook_secret.as_ref().map(|s| s.expose().to_owned()),
            html_url: app.html_url.clone(),
        };
        write_private(
            &self.data_dir.join(APP_CREDENTIALS_FILE),
            &serde_json::to_vec_pretty(&stored)?,
        )?;
        if let Some(secret) = &app.webhook_secret {
            self.github_secrets
                .write()
                .expect("forges lock")
                .push(secret.clone());
        }
        *self.github.write().expect("forges lock") = Some(client);
        Ok(())
    }
}

fn github_client(api_url: &str, app_id: u64, key: &Secret) -> Result<ForgeClient> {
    let client = GitHubClient::new(api_url, app_id, key, RetryPolicy::default())
        .context("the GitHub App private key cannot be used; give the PEM downloaded from the App's settings page")?;
    Ok(ForgeClient::GitHub(Arc::new(client)))
}

fn load_stored(data_dir: &Path) -> Result<Option<StoredApp>> {
    let path = data_dir.join(APP_CREDENTIALS_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).with_context(|| {
            format!(
                "{} is not readable as stored App credentials; remove it and run /setup again",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Writes a file only its owner can read, replacing it atomically.
fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = path.parent().expect("a file in the data dir");
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let temp = path.with_extension("tmp");
    // A leftover temp file would keep its own (wider) mode through `open`.
    let _ = std::fs::remove_file(&temp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)
        .with_context(|| format!("cannot write {}", temp.display()))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
