//! Read-only API tokens for integrations: a name, the SHA-256 of the token
//! (never the token), and the repositories it may read. Made and revoked
//! with `wavegate api-token`; asked by the pages for every request that
//! carries one.

use super::Store;
use crate::model::{RepoId, UnixMs};
use anyhow::{Context, Result};
use sqlx::Row;

/// A token as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiToken {
    pub name: String,
    /// The repositories it may read; None: every one.
    pub repos: Option<Vec<RepoId>>,
    pub created_at: UnixMs,
}

impl ApiToken {
    pub(crate) fn may_read(&self, repo: &RepoId) -> bool {
        self.repos.as_ref().is_none_or(|repos| repos.contains(repo))
    }
}

fn token_from_row(row: &sqlx::any::AnyRow) -> Result<ApiToken> {
    let repos: Option<String> = row.try_get("repos")?;
    let repos = repos
        .map(|text| {
            serde_json::from_str::<Vec<String>>(&text)
                .context("a token's repositories are not a JSON list")?
                .iter()
                .map(|repo| repo.parse().map_err(anyhow::Error::msg))
                .collect::<Result<Vec<RepoId>>>()
        })
        .transpose()?;
    Ok(ApiToken {
        name: row.try_get("name")?,
        repos,
        created_at: row.try_get("created_at")?,
    })
}

impl Store {
    /// Keeps a new token by its hash; false when the name is taken.
    pub async fn add_api_token(
        &self,
        name: &str,
        hash: &str,
        repos: Option<&[RepoId]>,
    ) -> Result<bool> {
        let repos = repos.map(|repos| {
            serde_json::to_string(&repos.iter().map(RepoId::ledger_key).collect::<Vec<_>>())
                .expect("names serialise")
        });
        let _writer = self.writer.lock().await;
        let added = sqlx::query(
            "INSERT INTO api_tokens (name, hash, repos, created_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(hash)
        .bind(repos)
        .bind(self.now())
        .execute(&self.pool)
        .await
        .with_context(|| format!("recording the API token {name}"))?;
        Ok(added.rows_affected() == 1)
    }

    /// The token whose SHA-256 is `hash`, if it exists.
    pub(crate) async fn api_token(&self, hash: &str) -> Result<Option<ApiToken>> {
        sqlx::query("SELECT name, repos, created_at FROM api_tokens WHERE hash = $1")
            .bind(hash)
            .fetch_optional(&self.pool)
            .await
            .context("looking up an API token")?
            .as_ref()
            .map(token_from_row)
            .transpose()
    }

    /// Every token, by name.
    pub async fn api_tokens(&self) -> Result<Vec<ApiToken>> {
        sqlx::query("SELECT name, repos, created_at FROM api_tokens ORDER BY name")
            .fetch_all(&self.pool)
            .await
            .context("reading the API tokens")?
            .iter()
            .map(token_from_row)
            .collect()
    }

    /// Forgets the token named `name`; false when there is none.
    pub async fn revoke_api_token(&self, name: &str) -> Result<bool> {
        let _writer = self.writer.lock().await;
        let gone = sqlx::query("DELETE FROM api_tokens WHERE name = $1")
            .bind(name)
            .execute(&self.pool)
            .await
            .with_context(|| format!("revoking the API token {name}"))?;
        Ok(gone.rows_affected() == 1)
    }
}
