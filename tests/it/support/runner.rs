//! A fake Actions runner: it takes each run the fake forge dispatches whose
//! `runner` labels it has (the others stay queued, as on a forge with no
//! such runner), checks out the run's `sha` in a directory of its own, runs
//! the workflow's one step — the real `wavegate job run`, told the server
//! the workflow file names — with its own
//! environment (where a stage's credentials live, and nowhere else) and,
//! on Forgejo, the repository's Actions secrets the workflow passes it, and
//! completes the run with the step's exit status, having handed the fake
//! forge what the step printed (the job's log) and which step ended how. A
//! test can kill the step mid-job, as a runner that dies would.

use super::fake_forge::{FakeForge, FakeRun, RunsHandle};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

/// A run the runner took, and how its step ended (`None`: still running).
#[derive(Debug, Clone)]
pub struct TakenRun {
    pub run: FakeRun,
    pub exit: Option<i32>,
    pub log: PathBuf,
}

pub struct FakeRunner {
    /// While true, runs taken wait before their step starts.
    held: tokio::sync::watch::Sender<bool>,
    taken: Arc<Mutex<Vec<TakenRun>>>,
    /// The step running now, by run id.
    running: Arc<Mutex<Vec<(u64, u32)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeRunner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeRunner {
    /// A runner with `labels` whose steps see `env` (and PATH, HOME) only;
    /// it works under `dir`.
    pub fn start(forge: &FakeForge, labels: &[&str], env: &[(&str, &str)], dir: &Path) -> Self {
        Self::start_held(forge, labels, env, dir, None)
    }

    /// [`FakeRunner::start`], the steps of the runs after the first
    /// `let_through` held back until [`release`](Self::release) (a runner
    /// slow to start, while a test knocks first).
    pub fn start_holding_after(
        forge: &FakeForge,
        labels: &[&str],
        env: &[(&str, &str)],
        dir: &Path,
        let_through: usize,
    ) -> Self {
        Self::start_held(forge, labels, env, dir, Some(let_through))
    }

    fn start_held(
        forge: &FakeForge,
        labels: &[&str],
        env: &[(&str, &str)],
        dir: &Path,
        let_through: Option<usize>,
    ) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let (held, hold) = tokio::sync::watch::channel(let_through.is_some());
        let mut let_through = let_through.unwrap_or(usize::MAX);
        let labels: BTreeSet<String> = labels.iter().map(|l| (*l).to_owned()).collect();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let taken = Arc::new(Mutex::new(Vec::new()));
        let running = Arc::new(Mutex::new(Vec::new()));
        let mut dispatches = forge.subscribe_dispatches();
        let runs = forge.runs();
        let oidc = forge.oidc_token_request_url(0);
        let (task_taken, task_running, task_dir) = (taken.clone(), running.clone(), dir.to_owned());
        let task = tokio::spawn(async move {
            while let Ok(run) = dispatches.recv().await {
                let wanted: Vec<String> = run
                    .inputs
                    .get("runner")
                    .and_then(|l| serde_json::from_str(l).ok())
                    .unwrap_or_default();
                if wanted.is_empty() || !wanted.iter().all(|l| labels.contains(l)) {
                    continue;
                }
                let hold = if let_through > 0 {
                    let_through -= 1;
                    None
                } else {
                    Some(hold.clone())
                };
                let step = Step {
                    hold,
                    oidc: oidc.replace("/0?", &format!("/{}?", run.id)),
                    runs: runs.clone(),
                    env: env.clone(),
                    dir: task_dir.join(format!("run-{}", run.id)),
                    taken: task_taken.clone(),
                    running: task_running.clone(),
                };
                tokio::spawn(step.take(run));
            }
        });
        Self {
            held,
            taken,
            running,
            task,
        }
    }

    /// Lets held runs go on.
    pub fn release(&self) {
        let _ = self.held.send(false);
    }

    /// The runs taken so far, oldest first.
    pub fn taken(&self) -> Vec<TakenRun> {
        self.taken.lock().unwrap().clone()
    }

    /// What the steps printed, every run's, oldest first.
    pub fn logs(&self) -> String {
        self.taken()
            .iter()
            .map(|t| std::fs::read_to_string(&t.log).unwrap_or_default())
            .collect()
    }

    /// Kills the step of every run going now, as a runner that dies.
    pub fn kill_running(&self) -> usize {
        let running = self.running.lock().unwrap().clone();
        for (_, pid) in &running {
            // The step's process group: `wavegate job run` and its sandbox.
            if let Some(group) = rustix::process::Pid::from_raw(*pid as i32) {
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            }
        }
        running.len()
    }
}

/// The workflow's step the runner runs, as `wavegate init actions` names it.
const STEP: &str = "wavegate job run";
/// The step before it, which the runner does as a `git clone`.
const CHECKOUT: &str = "Run actions/checkout@v4";

struct Step {
    /// Until it says go, when the run is held.
    hold: Option<tokio::sync::watch::Receiver<bool>>,
    /// Where the run's job asks for its OIDC tokens (GitHub).
    oidc: String,
    runs: RunsHandle,
    env: Vec<(String, String)>,
    dir: PathBuf,
    taken: Arc<Mutex<Vec<TakenRun>>>,
    running: Arc<Mutex<Vec<(u64, u32)>>>,
}

impl Step {
    async fn take(mut self, run: FakeRun) {
        if let Some(hold) = &mut self.hold {
            let _ = hold.wait_for(|held| !*held).await;
        }
        let index = {
            let mut taken = self.taken.lock().unwrap();
            taken.push(TakenRun {
                run: run.clone(),
                exit: None,
                log: self.dir.join("step.log"),
            });
            taken.len() - 1
        };
        self.runs.set(&run.repo, run.id, "in_progress", None);
        std::fs::create_dir_all(&self.dir).unwrap();
        let checkout = self.dir.join("checkout");
        let sha = run.inputs.get("sha").cloned().unwrap_or_default();
        let cloned = std::process::Command::new("git")
            .args(["clone", "-q", &run.repo.clone_url])
            .arg(&checkout)
            .status()
            .unwrap()
            .success()
            && std::process::Command::new("git")
                .arg("-C")
                .arg(&checkout)
                .args(["checkout", "-q", &sha])
                .status()
                .unwrap()
                .success();
        let (step, exit) = if cloned {
            (STEP, self.step(&run, &checkout).await)
        } else {
            (CHECKOUT, 1)
        };
        self.taken.lock().unwrap()[index].exit = Some(exit);
        let printed = std::fs::read_to_string(self.dir.join("step.log"))
            .unwrap_or_else(|_| format!("fatal: cannot check out {sha}\n"));
        let ended = if exit == 0 { "success" } else { "failure" };
        self.runs
            .step_ended(&run.repo, run.id, step, ended, &printed);
        // A run whose step was killed was cancelled already, or is failed.
        if self.runs.status(&run.repo, run.id).as_deref() != Some("completed") {
            let conclusion = if exit == 0 { "success" } else { "failure" };
            self.runs
                .set(&run.repo, run.id, "completed", Some(conclusion));
        }
    }

    /// `wavegate job run`, as the workflow's step runs it.
    async fn step(&self, run: &FakeRun, checkout: &Path) -> i32 {
        let log = std::fs::File::create(self.dir.join("step.log")).unwrap();
        let input = |name: &str| run.inputs.get(name).cloned().unwrap_or_default();
        let workflow = workflow_text(run, checkout);
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_wavegate"));
        command
            .args(["job", "run", "--tree"])
            .arg(checkout)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .env("HOME", &self.dir)
            .env("WAVEGATE_LOG", "info")
            .env("WAVEGATE_SERVER", server_in_workflow(run, &workflow))
            .env("WAVEGATE_JOB", input("job"))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .kill_on_drop(true);
        match run.repo.forge {
            wavegate::model::ForgeKind::GitHub => {
                command
                    .env("ACTIONS_ID_TOKEN_REQUEST_URL", &self.oidc)
                    .env("ACTIONS_ID_TOKEN_REQUEST_TOKEN", "request-token");
            }
            wavegate::model::ForgeKind::Forgejo => {
                command.env("WAVEGATE_JOB_TOKEN", input("token"));
                // As Forgejo fills them in when the run starts; a secret
                // the repository does not have is empty.
                for (variable, secret) in secrets_in_workflow(&workflow) {
                    let value = self.runs.secret(&run.repo, &secret).unwrap_or_default();
                    command.env(variable, value);
                }
            }
        }
        let mut child = command.spawn().unwrap();
        let pid = child.id().unwrap();
        self.running.lock().unwrap().push((run.id, pid));
        let status = child.wait().await.unwrap();
        self.running.lock().unwrap().retain(|(id, _)| *id != run.id);
        status.code().unwrap_or(137)
    }
}

/// The run's workflow file, at the commit it was dispatched from.
fn workflow_text(run: &FakeRun, checkout: &Path) -> String {
    let shown = std::process::Command::new("git")
        .arg("-C")
        .arg(checkout)
        .args(["show", &format!("{}:{}", run.head_sha, run.workflow_path)])
        .output()
        .unwrap();
    String::from_utf8_lossy(&shown.stdout).into_owned()
}

/// The server the run's workflow file names in its step's `WAVEGATE_SERVER`.
fn server_in_workflow(run: &FakeRun, workflow: &str) -> String {
    workflow
        .lines()
        .find_map(|l| l.trim().strip_prefix("WAVEGATE_SERVER: "))
        .unwrap_or_else(|| panic!("no WAVEGATE_SERVER in {}", run.workflow_path))
        .to_owned()
}

/// The variables of the step's `env` the workflow fills from the
/// repository's Actions secrets (`NAME: ${{ secrets.SECRET }}`): the
/// variable and the secret.
fn secrets_in_workflow(workflow: &str) -> Vec<(String, String)> {
    workflow
        .lines()
        .filter_map(|l| {
            let (variable, value) = l.trim().split_once(": ")?;
            let secret = value.strip_prefix("${{ secrets.")?.strip_suffix(" }}")?;
            Some((variable.to_owned(), secret.to_owned()))
        })
        .collect()
}
