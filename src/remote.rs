//! `wavegate runs` and `wavegate run show`: a running server's JSON API
//! (`/api/v1/repos/{forge}/{owner}/{name}/pulls[/{number}]`) read from a
//! terminal and printed as a table and a summary: where each pull request
//! stands, what its run waits for, and the comment that ends the wait.
//! Only the fields printed are read, so a server that says more still
//! reads. With `WAVEGATE_API_TOKEN` set, each call carries it as a bearer
//! token. Every failure is a [`RemoteError`] naming the problem and what to
//! do about it.

use crate::model::RepoId;
use serde::Deserialize;
use std::fmt::Write as _;
use std::time::Duration;

/// The variable an API token for the CLI is read from.
pub const TOKEN_VAR: &str = "WAVEGATE_API_TOKEN";

/// Why the server's answer could not be had.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("`{0}` is not a repository; write it as forge/owner/name, e.g. github/acme/infra")]
    NotARepo(String),
    #[error("`{0}` is not a server address; write it as http://host:port or https://host")]
    NotAServer(String),
    #[error("{server} cannot be reached ({why}); check --server and that wavegate runs there")]
    Unreachable { server: String, why: String },
    #[error(
        "{server} wants to know who asks ({said}); set {TOKEN_VAR} to an API token of that server"
    )]
    LogIn { server: String, said: String },
    #[error("{server} refused the token in {TOKEN_VAR} ({said}); ask its operator for a token that is still valid")]
    TokenRefused { server: String, said: String },
    #[error("{server} refused: {said}")]
    Forbidden { server: String, said: String },
    #[error("{server} has no such page: {said}")]
    NotFound { server: String, said: String },
    #[error("{server} answered {status}: {said}")]
    Failed {
        server: String,
        status: u16,
        said: String,
    },
    #[error("{url} answered {status} with something that is not wavegate's JSON (is --server a wavegate server, and are its pages on, WAVEGATE_PUBLIC_PAGES=on?): {start}")]
    NotJson {
        url: String,
        status: u16,
        start: String,
    },
}

/// `forge/owner/name` (or `forge:owner/name`) as `--repo` and `run show`
/// take it.
pub fn parse_repo(text: &str) -> Result<RepoId, RemoteError> {
    text.parse()
        .map_err(|_: String| RemoteError::NotARepo(text.to_owned()))
}

/// A server's JSON API, asked as the CLI's user.
pub struct Api {
    server: String,
    http: reqwest::Client,
    token: Option<String>,
}

impl Api {
    pub fn new(server: &str, token: Option<String>) -> Result<Self, RemoteError> {
        let server = server.trim_end_matches('/').to_owned();
        if !(server.starts_with("http://") || server.starts_with("https://")) {
            return Err(RemoteError::NotAServer(server));
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| RemoteError::Unreachable {
                server: server.clone(),
                why: e.to_string(),
            })?;
        Ok(Self {
            server,
            http,
            token: token.filter(|token| !token.is_empty()),
        })
    }

    async fn get<T: for<'de> Deserialize<'de>>(&self, path: &str) -> Result<T, RemoteError> {
        let url = format!("{}{path}", self.server);
        let mut request = self.http.get(&url);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let server = self.server.clone();
        let answer = request.send().await.map_err(|e| RemoteError::Unreachable {
            server: server.clone(),
            why: reason(&e),
        })?;
        let status = answer.status().as_u16();
        let body = answer.text().await.map_err(|e| RemoteError::Unreachable {
            server: server.clone(),
            why: reason(&e),
        })?;
        let not_json = || RemoteError::NotJson {
            url: url.clone(),
            status,
            start: match body.trim() {
                "" => "(nothing)".to_owned(),
                text => text.chars().take(120).collect(),
            },
        };
        if (200..300).contains(&status) {
            return serde_json::from_str(&body).map_err(|_| not_json());
        }
        #[derive(Deserialize)]
        struct Said {
            error: String,
        }
        let said = serde_json::from_str::<Said>(&body)
            .map_err(|_| not_json())?
            .error;
        Err(match status {
            401 if self.token.is_some() => RemoteError::TokenRefused { server, said },
            401 => RemoteError::LogIn { server, said },
            403 => RemoteError::Forbidden { server, said },
            404 => RemoteError::NotFound { server, said },
            status => RemoteError::Failed {
                server,
                status,
                said,
            },
        })
    }

    /// A repository's pull requests, newest first (one page), in `state`.
    pub async fn pulls(&self, repo: &RepoId, state: Option<&str>) -> Result<Pulls, RemoteError> {
        let query = state.map(|s| format!("?state={s}")).unwrap_or_default();
        self.get(&format!("/api/v1{}/pulls{query}", repo.page_path()))
            .await
    }

    pub async fn pull(&self, repo: &RepoId, number: u64) -> Result<Pull, RemoteError> {
        self.get(&format!(
            "/api/v1{}",
            repo.pull_page_path(crate::model::PrNumber(number))
        ))
        .await
    }
}

/// What failed, down to its cause (reqwest's own message stops at "error
/// sending request").
fn reason(error: &reqwest::Error) -> String {
    let mut why = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        why = format!("{why}: {cause}");
        source = cause.source();
    }
    why
}

#[derive(Debug, Deserialize)]
pub struct Pulls {
    pub pulls: Vec<PullRow>,
    #[serde(default)]
    pub next: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct PullRow {
    pub number: u64,
    pub open: bool,
    pub state: Option<String>,
    pub report: Option<String>,
    pub run: Option<RunRow>,
}

#[derive(Debug, Deserialize)]
pub struct RunRow {
    pub id: i64,
    pub status: String,
}

#[derive(Debug, Deserialize)]
pub struct Pull {
    pub number: u64,
    pub head: String,
    pub base_ref: String,
    pub open: bool,
    pub state: Option<String>,
    pub report_status: Option<String>,
    pub digest: Option<String>,
    #[serde(default)]
    pub facts: Vec<FactLine>,
    pub run: Option<Run>,
}

#[derive(Debug, Deserialize)]
pub struct FactLine {
    pub seq: i64,
    pub gate: String,
    pub kind: String,
    pub by: String,
    pub counts: bool,
}

#[derive(Debug, Deserialize)]
pub struct Run {
    pub id: i64,
    pub status: String,
    #[serde(default)]
    pub approved_by: Vec<String>,
    pub at: Option<String>,
    pub waiting_for: Option<String>,
    #[serde(default)]
    pub line_to_copy: Option<String>,
    #[serde(default)]
    pub stages: Vec<Stage>,
}

#[derive(Debug, Deserialize)]
pub struct Stage {
    pub stage: String,
    pub waves: Vec<Vec<Member>>,
}

#[derive(Debug, Deserialize)]
pub struct Member {
    pub member: String,
    pub state: String,
}

/// `wavegate runs`: a table of the pull requests, then for each one that
/// waits, what for and the comment to copy (`waits`: the details of the
/// waiting ones, by number).
pub fn runs_table(repo: &RepoId, list: &Pulls, waits: &[(u64, Pull)]) -> String {
    let mut out = String::new();
    if list.pulls.is_empty() {
        let _ = writeln!(out, "{repo}: no pull request here");
        return out;
    }
    let rows: Vec<[String; 4]> = list
        .pulls
        .iter()
        .map(|pull| {
            [
                format!(
                    "#{}{}",
                    pull.number,
                    if pull.open { "" } else { " (closed)" }
                ),
                pull.state.clone().unwrap_or_else(|| "-".into()),
                pull.run.as_ref().map_or_else(
                    || "-".into(),
                    |run| format!("run {}: {}", run.id, run.status),
                ),
                pull.report.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    table(&mut out, ["PULL", "STATE", "RUN", "REPORT"], &rows);
    for (number, pull) in waits {
        let (waiting, line) = match &pull.run {
            Some(run) => (run.waiting_for.clone(), run.line_to_copy.clone()),
            None => (
                Some("an approval of its plan".to_owned()),
                pull.digest
                    .as_ref()
                    .map(|digest| format!("/approve {digest}")),
            ),
        };
        if let Some(waiting) = waiting {
            let _ = writeln!(out, "\n#{number} waits for {waiting}");
            if let Some(line) = line {
                let _ = writeln!(out, "  comment: {line}");
            }
        }
    }
    if list.next.is_some() {
        let _ = writeln!(
            out,
            "\n(older pull requests are on the next page of the API)"
        );
    }
    out
}

/// `wavegate run show`: one pull request, its run by stage and wave, what
/// it waits for and the ledger facts of its gates.
pub fn run_summary(repo: &RepoId, pull: &Pull) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{repo}#{}: {}{}",
        pull.number,
        pull.state.as_deref().unwrap_or("no run, nothing awaited"),
        if pull.open { "" } else { " (closed)" }
    );
    let _ = writeln!(out, "head {} onto {}", short(&pull.head), pull.base_ref);
    let _ = writeln!(
        out,
        "report: {}{}",
        pull.report_status.as_deref().unwrap_or("none"),
        pull.digest
            .as_deref()
            .map(|d| format!(", digest {d}"))
            .unwrap_or_default()
    );
    match &pull.run {
        None => {
            let _ = writeln!(out, "no apply run");
        }
        Some(run) => {
            let _ = writeln!(
                out,
                "\napply run {}: {}{}",
                run.id,
                run.status,
                run.at
                    .as_deref()
                    .map(|at| format!(" (at {at})"))
                    .unwrap_or_default()
            );
            if !run.approved_by.is_empty() {
                let _ = writeln!(out, "approved by {}", run.approved_by.join(", "));
            }
            if let Some(waiting) = &run.waiting_for {
                let _ = writeln!(out, "waits for {waiting}");
            }
            if let Some(line) = &run.line_to_copy {
                let _ = writeln!(out, "to go on, comment: {line}");
            }
            let rows: Vec<[String; 4]> = run
                .stages
                .iter()
                .flat_map(|stage| {
                    stage.waves.iter().enumerate().flat_map(move |(n, wave)| {
                        wave.iter().map(move |member| {
                            [
                                stage.stage.clone(),
                                (n + 1).to_string(),
                                member.member.clone(),
                                member.state.clone(),
                            ]
                        })
                    })
                })
                .collect();
            if !rows.is_empty() {
                let _ = writeln!(out);
                table(&mut out, ["STAGE", "WAVE", "MEMBER", "STATE"], &rows);
            }
        }
    }
    if !pull.facts.is_empty() {
        let _ = writeln!(out, "\nledger facts");
        let rows: Vec<[String; 4]> = pull
            .facts
            .iter()
            .map(|fact| {
                [
                    fact.seq.to_string(),
                    fact.gate.clone(),
                    if fact.counts {
                        fact.kind.clone()
                    } else {
                        format!(
                            "{} (not signed by this server: counts for nothing)",
                            fact.kind
                        )
                    },
                    fact.by.clone(),
                ]
            })
            .collect();
        table(&mut out, ["SEQ", "GATE", "FACT", "BY"], &rows);
    }
    out
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// Columns padded to their widest cell; the last is not padded.
fn table<const N: usize>(out: &mut String, head: [&str; N], rows: &[[String; N]]) {
    let mut widths = head.map(|h| h.chars().count());
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut line = |cells: Vec<&str>| {
        let mut text = String::new();
        for (n, cell) in cells.iter().enumerate() {
            if n + 1 == N {
                text.push_str(cell);
            } else {
                let _ = write!(text, "{cell:<width$}  ", width = widths[n]);
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    line(head.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repository_is_forge_owner_and_name() {
        let repo = parse_repo("github/acme/infra").unwrap();
        assert_eq!(
            repo,
            RepoId::new(crate::model::ForgeKind::GitHub, "acme/infra")
        );
        assert_eq!(parse_repo("github:acme/infra").unwrap(), repo);
        for bad in [
            "acme/infra",
            "gitlab/acme/infra",
            "github/acme",
            "github/a/b/c",
            "github//x",
        ] {
            assert!(
                matches!(parse_repo(bad), Err(RemoteError::NotARepo(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn columns_line_up_under_their_heads() {
        let mut out = String::new();
        table(
            &mut out,
            ["PULL", "STATE", "RUN"],
            &[
                ["#7".into(), "waiting".into(), "run 2: waiting".into()],
                ["#12".into(), "done".into(), "-".into()],
            ],
        );
        assert_eq!(
            out,
            "PULL  STATE    RUN\n#7    waiting  run 2: waiting\n#12   done     -\n"
        );
    }
}
