//! What the fake holds, shared by every forge it speaks for: repositories
//! with their pull requests, issues, comments, reviews, checks, statuses,
//! reactions, workflow runs and Actions secrets, the users and teams, tokens, failure rules,
//! the requests it received, the App's webhook deliveries, who is told
//! of each workflow dispatch and the job logs downloaded.

use super::*;

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    /// As sent, `/api/v1` included for Forgejo.
    pub path: String,
    pub query: Option<String>,
    /// Lower-case name → value for `authorization`, `accept`, `content-type`, `user-agent`.
    pub headers: HashMap<String, String>,
    pub body: Option<Value>,
}

/// A repository registered with the fake, and how a client refers to it.
#[derive(Debug, Clone)]
pub struct RepoHandle {
    pub forge: ForgeKind,
    pub full_name: String,
    pub id: u64,
    pub clone_url: String,
    pub installation: Option<u64>,
}

impl RepoHandle {
    pub fn repo_ref(&self) -> RepoRef {
        RepoRef {
            id: RepoId::new(self.forge, self.full_name.clone()),
            forge_id: self.id,
            clone_url: self.clone_url.clone(),
            installation: self.installation,
        }
    }

    /// The same repository as a delivery without `installation` names it.
    pub fn without_installation(&self) -> RepoRef {
        RepoRef {
            installation: None,
            ..self.repo_ref()
        }
    }
}

#[derive(Debug, Clone)]
pub struct FakePr {
    pub number: u64,
    pub id: u64,
    pub title: String,
    pub head_sha: String,
    /// The head before the latest `push` (a `synchronize` payload's `before`).
    pub previous_head_sha: Option<String>,
    pub base_sha: String,
    pub head_ref: String,
    pub base_ref: String,
    pub author: String,
    pub open: bool,
    pub merged: bool,
    pub merge_sha: Option<String>,
    pub updated_at: SystemTime,
}

/// An issue that is not a pull request.
#[derive(Debug, Clone)]
pub struct FakeIssue {
    pub number: u64,
    pub id: u64,
    pub title: String,
    pub body: String,
    /// Who opened it: the bot's login when the bot did.
    pub author: String,
    pub open: bool,
    pub created_at: SystemTime,
    pub updated_at: SystemTime,
}

#[derive(Debug, Clone)]
pub struct FakeComment {
    pub id: u64,
    /// The pull request's or issue's number.
    pub pr: u64,
    pub body: String,
    pub author: String,
    pub author_is_bot: bool,
    pub created_at: SystemTime,
    /// Later than `created_at` once the comment was edited.
    pub updated_at: SystemTime,
}

/// A submitted review of a pull request.
#[derive(Debug, Clone)]
pub struct FakeReview {
    pub id: u64,
    pub pr: u64,
    pub author: String,
    /// GitHub's word: `APPROVED`, `CHANGES_REQUESTED` or `COMMENTED`.
    pub state: String,
    /// The pull request's head when it was submitted.
    pub commit: String,
    pub submitted_at: SystemTime,
    pub dismissed: bool,
}

#[derive(Debug, Clone)]
pub struct FakeCheckRun {
    pub id: u64,
    pub head_sha: String,
    pub name: String,
    pub status: String,
    pub conclusion: Option<String>,
    pub output: Value,
    pub details_url: Option<String>,
}

#[derive(Debug, Clone)]
pub struct FakeStatus {
    pub id: u64,
    pub sha: String,
    pub state: String,
    pub context: String,
    pub description: String,
    pub target_url: Option<String>,
}

#[derive(Debug, Clone)]
pub struct FakeReaction {
    pub comment_id: u64,
    pub content: String,
    pub user: String,
}

/// A workflow run a dispatch started (GitHub Actions, Forgejo Actions).
#[derive(Debug, Clone)]
pub struct FakeRun {
    /// What `GET …/actions/runs/{id}` takes on both forges.
    pub id: u64,
    /// The repository's count of runs (Forgejo's page is by this number).
    pub run_number: u64,
    /// The repository it runs in: its forge, name and clone URL.
    pub repo: RepoHandle,
    /// The file name the dispatch named, and where the forge found it.
    pub workflow: String,
    pub workflow_path: String,
    pub git_ref: String,
    /// The commit `git_ref` pointed at when the run was dispatched.
    pub head_sha: String,
    pub inputs: BTreeMap<String, String>,
    /// Who dispatched it.
    pub actor: String,
    /// GitHub's words: `queued`, `in_progress` or `completed` (Forgejo
    /// answers them in its own: `waiting`, `running`, the conclusion).
    pub status: String,
    /// With `completed`: `success`, `failure`, `cancelled`, `timed_out`, …
    pub conclusion: Option<String>,
    /// Its page, on the fake forge.
    pub html_url: String,
    pub created_at: SystemTime,
    pub updated_at: SystemTime,
    /// Its one job, which ends as the run does.
    pub job: FakeJob,
}

/// A run's one job: the workflow's first job, its steps, and the log its
/// runner handed in.
#[derive(Debug, Clone)]
pub struct FakeJob {
    /// What `GET …/actions/jobs/{id}/logs` takes on both forges.
    pub id: u64,
    /// The workflow's key under `jobs:`.
    pub name: String,
    /// The forge's `Set up job`, the workflow's steps, its `Complete job`.
    pub steps: Vec<FakeStep>,
    pub log: String,
}

/// One step of a job, in GitHub's words.
#[derive(Debug, Clone)]
pub struct FakeStep {
    pub name: String,
    /// `queued`, `in_progress` or `completed`.
    pub status: String,
    pub conclusion: Option<String>,
}

/// One attempt to deliver a webhook to the App's webhook, as GitHub logs it.
#[derive(Debug, Clone)]
pub struct FakeHookDelivery {
    pub id: u64,
    pub guid: String,
    pub delivered_at: SystemTime,
    pub redelivery: bool,
    /// Seconds.
    pub duration: f64,
    pub status: String,
    /// 0 when nothing answered.
    pub status_code: u16,
    pub event: String,
    pub action: Option<String>,
    pub installation_id: Option<u64>,
    pub repository_id: Option<u64>,
    pub payload: Vec<u8>,
}

/// Where the App's webhook is, and the secret it is signed with.
#[derive(Debug, Clone)]
pub(super) struct AppWebhook {
    pub(super) url: String,
    pub(super) secret: String,
}

/// A webhook the fake is to send once its lock is released.
pub(super) struct Outgoing {
    pub(super) guid: String,
    pub(super) event: String,
    pub(super) payload: Vec<u8>,
    pub(super) redelivery: bool,
}

pub(super) struct Repo {
    pub(super) handle: RepoHandle,
    /// `main` unless a test says otherwise.
    pub(super) default_branch: String,
    pub(super) permissions: HashMap<String, String>,
    pub(super) prs: Vec<FakePr>,
    pub(super) issues: Vec<FakeIssue>,
    pub(super) comments: Vec<FakeComment>,
    pub(super) reviews: Vec<FakeReview>,
    pub(super) check_runs: Vec<FakeCheckRun>,
    pub(super) statuses: Vec<FakeStatus>,
    pub(super) reactions: Vec<FakeReaction>,
    pub(super) runs: Vec<FakeRun>,
    /// Forgejo: the repository's Actions secrets, by name.
    pub(super) secrets: BTreeMap<String, String>,
}

pub(super) struct IssuedToken {
    pub(super) token: String,
    pub(super) installation: u64,
    pub(super) expires_at: SystemTime,
    pub(super) revoked: bool,
}

pub(super) struct FailRule {
    pub(super) method: String,
    pub(super) path_prefix: String,
    pub(super) status: u16,
    pub(super) headers: Vec<(String, String)>,
}

pub(super) struct State {
    pub(super) next_id: u64,
    pub(super) users: HashMap<String, u64>,
    pub(super) repos: Vec<Repo>,
    pub(super) installations: HashMap<u64, String>,
    pub(super) tokens: Vec<IssuedToken>,
    pub(super) token_lifetime: Duration,
    pub(super) forgejo_tokens: HashMap<String, String>,
    pub(super) forgejo_bot_admin: bool,
    pub(super) manifest_codes: HashSet<String>,
    pub(super) fail_rules: Vec<FailRule>,
    pub(super) requests: Vec<RecordedRequest>,
    /// GitHub's hourly budget per installation (0: the App's own JWT calls).
    pub(super) rate_limit: u64,
    pub(super) rate_reset: u64,
    pub(super) budget_used: HashMap<u64, u64>,
    /// GETs answered 304.
    pub(super) not_modified: u64,
    /// (org, team slug) → member logins.
    pub(super) teams: HashMap<(String, String), Vec<String>>,
    pub(super) app_webhook: Option<AppWebhook>,
    pub(super) hook_deliveries: Vec<FakeHookDelivery>,
    pub(super) outbox: Vec<Outgoing>,
    /// How far the forge's clock runs behind the wall clock (`set_clock_behind`).
    pub(super) clock_behind: Duration,
    /// OAuth clients, codes and user tokens (`oauth`).
    pub(super) oauth: super::oauth::OAuthState,
    /// Where the fake is served (the pages it links to are under it).
    pub(super) base_url: String,
    /// Each workflow run as it is dispatched, to whoever subscribed.
    pub(super) dispatched: tokio::sync::broadcast::Sender<FakeRun>,
    /// Each download of a job's log from where GitHub's redirect points.
    pub(super) log_downloads: Vec<RecordedRequest>,
    /// What the Actions OIDC issuer served (`oidc`).
    pub(super) oidc: super::oidc::OidcState,
}

impl State {
    /// The forge's clock, which dates everything it holds: the wall clock,
    /// `clock_behind` late.
    pub(super) fn now(&self) -> SystemTime {
        SystemTime::now() - self.clock_behind
    }

    /// The forge's clock in unix seconds.
    pub(super) fn unix_now(&self) -> u64 {
        unix_secs(self.now())
    }

    pub(super) fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub(super) fn user_id(&mut self, login: &str) -> u64 {
        if let Some(id) = self.users.get(login) {
            return *id;
        }
        let id = self.id();
        self.users.insert(login.to_owned(), id);
        id
    }

    pub(super) fn repo_mut(&mut self, forge: ForgeKind, full_name: &str) -> Option<&mut Repo> {
        self.repos
            .iter_mut()
            .find(|r| r.handle.forge == forge && r.handle.full_name == full_name)
    }

    /// The repository `full_name` on `forge`, which the router found.
    pub(super) fn repo_at(&mut self, forge: ForgeKind, full_name: &str) -> &mut Repo {
        self.repo_mut(forge, full_name)
            .unwrap_or_else(|| panic!("{full_name} is not registered with the fake"))
    }

    pub(super) fn repo_of(&mut self, handle: &RepoHandle) -> &mut Repo {
        self.repo_at(handle.forge, &handle.full_name)
    }
}

impl Repo {
    pub(super) fn new(handle: RepoHandle) -> Self {
        Self {
            handle,
            default_branch: "main".into(),
            permissions: HashMap::new(),
            prs: Vec::new(),
            issues: Vec::new(),
            comments: Vec::new(),
            reviews: Vec::new(),
            check_runs: Vec::new(),
            statuses: Vec::new(),
            reactions: Vec::new(),
            runs: Vec::new(),
            secrets: BTreeMap::new(),
        }
    }
}
