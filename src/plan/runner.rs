//! Runs one plan/apply/outputs command: argv (never a shell string) through
//! the sandbox, a scrubbed environment, killed at its timeout (or when its
//! job is given up) with everything it started, output streamed line by
//! line to the log with a heartbeat when quiet, and kept for the report
//! (size-capped, secrets redacted).

use super::live::{Console, Ending};
use super::redact::Redactor;
use crate::sandbox::process::{self, ProcessId};
use crate::sandbox::profile::{self, LimitHit};
use crate::sandbox::{self, CommandKind, Confinement, Launch, LaunchError, Profile, Sandbox};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Output kept per command unless configured otherwise.
pub(crate) const DEFAULT_OUTPUT_CAP: usize = 1024 * 1024;
/// Longest line passed on as one; longer ones are split.
const MAX_LINE: usize = 16 * 1024;
/// How long output may still drain after the command ended.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
pub(crate) struct CommandSpec {
    /// Prefix of every log line, e.g. `[plan] app@dev`.
    pub(crate) label: String,
    pub(crate) kind: CommandKind,
    pub(crate) argv: Vec<String>,
    pub(crate) cwd: PathBuf,
    /// The whole environment the command sees.
    pub(crate) env: Vec<(String, String)>,
    pub(crate) timeout: Duration,
    /// The repository asked for longer than the profile's `max_timeout`:
    /// `timeout` is that maximum.
    pub(crate) timeout_capped: bool,
    /// The operator's profile it runs with: paths, network, limits.
    pub(crate) profile: Arc<Profile>,
    /// How long a quiet command runs before the log says it still runs, and
    /// again each time after; `None`: never.
    pub(crate) heartbeat: Option<Duration>,
    pub(crate) output_cap: usize,
    pub(crate) sandbox: Arc<Sandbox>,
    /// What the command may write.
    pub(crate) confinement: Confinement,
    pub(crate) cancel: Cancel,
    /// Its profile's setup, run once per job before the first command
    /// that needs it; `None`: nothing to set up.
    pub(crate) setup: Option<Arc<Setup>>,
    /// Told which process the command is once it started (an apply's
    /// attempt record keeps it, so a restarted server can tell whether it
    /// still runs).
    pub(crate) started: Option<mpsc::UnboundedSender<ProcessId>>,
    /// Where its lines are shown while it runs and kept afterwards; `None`
    /// (the CLI, a command of no pull request): only the log and the report.
    pub(crate) console: Option<Console>,
    /// Hears each of its lines, redacted, as it is printed.
    pub(crate) tap: Option<LineTap>,
}

/// Hears each line of a command's output as it is printed, redacted as it
/// is kept: a job on the forge's CI streams them back to the bot. It is
/// called from the command's run and must not wait.
#[derive(Clone)]
pub(crate) struct LineTap(Arc<dyn Fn(&str) + Send + Sync>);

impl LineTap {
    pub(crate) fn new(hear: impl Fn(&str) + Send + Sync + 'static) -> Self {
        Self(Arc::new(hear))
    }
}

impl std::fmt::Debug for LineTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LineTap")
    }
}

/// A profile's `setup` for one stage of a job: its commands, run in order
/// once (however many commands need it at once), and how that went.
#[derive(Debug)]
pub(crate) struct Setup {
    /// `the setup of execution profile `p` for stage `s``, for its errors.
    pub(crate) what: String,
    pub(crate) commands: Vec<CommandSpec>,
    done: tokio::sync::OnceCell<Result<(), String>>,
}

impl Setup {
    pub(crate) fn new(what: String, commands: Vec<CommandSpec>) -> Self {
        Self {
            what,
            commands,
            done: tokio::sync::OnceCell::new(),
        }
    }

    /// Runs the commands the first time; answers how that went every time.
    async fn run(&self) -> Result<(), String> {
        self.done
            .get_or_init(|| async {
                for spec in &self.commands {
                    let shown = spec.argv.join(" ");
                    let ran = run(spec)
                        .await
                        .map_err(|e| format!("{}: `{shown}` could not start: {e}", self.what))?;
                    if !ran.succeeded() {
                        let error =
                            format!("{}: {}", self.what, ran.describe(&format!("`{shown}`")));
                        return Err(with_last_output(error, &ran.tail(10)));
                    }
                }
                Ok(())
            })
            .await
            .clone()
    }
}

/// Stops a job's commands when the job is given up (its lease went to
/// another worker): nothing a command started outlives its job.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Option<watch::Receiver<bool>>);

/// The side that gives a job up.
#[derive(Debug)]
pub(crate) struct Canceller(watch::Sender<bool>);

impl Canceller {
    pub(crate) fn cancel(&self) {
        let _ = self.0.send(true);
    }
}

impl Cancel {
    pub(crate) fn new() -> (Canceller, Cancel) {
        let (tx, rx) = watch::channel(false);
        (Canceller(tx), Cancel(Some(rx)))
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.0.as_ref().is_some_and(|rx| *rx.borrow())
    }

    /// Resolves once cancelled; never, for a command nobody can cancel.
    pub(crate) async fn cancelled(&mut self) {
        match &mut self.0 {
            Some(rx) => {
                if rx.wait_for(|stop| *stop).await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending().await,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Termination {
    Exited(i32),
    Signalled(i32),
    /// Killed, with everything it started, at the timeout.
    TimedOut,
    /// Killed, with everything it started, because its job was given up.
    Cancelled,
}

impl Termination {
    pub(crate) fn ending(self) -> Ending {
        match self {
            Termination::Exited(code) => Ending::Exited(code),
            Termination::Signalled(sig) => Ending::Signalled(sig),
            Termination::TimedOut => Ending::TimedOut,
            Termination::Cancelled => Ending::Cancelled,
        }
    }
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct CommandOutcome {
    pub(crate) termination: Termination,
    /// stdout and stderr interleaved as they arrived, redacted and capped.
    pub(crate) output: String,
    /// The timeout it ran with.
    pub(crate) timeout: Duration,
    /// The profile's limit that stopped it, if one did.
    pub(crate) limit: Option<LimitHit>,
    /// The profile whose `max_timeout` its timeout was, when the
    /// repository asked for longer.
    pub(crate) capped_by: Option<String>,
    #[cfg(test)]
    #[serde(skip)]
    pub(crate) elapsed: Duration,
}

impl CommandOutcome {
    pub(crate) fn succeeded(&self) -> bool {
        self.termination == Termination::Exited(0)
    }

    /// One line saying how the command ended, for a report or an error.
    pub(crate) fn describe(&self, what: &str) -> String {
        let timeout = self.timeout;
        if let Some(limit) = self.limit {
            return format!(
                "{what} was stopped at {limit} (set by the server's execution profile); make it need less, or ask the operator to raise the limit"
            );
        }
        if let (Termination::TimedOut, Some(profile)) = (self.termination, &self.capped_by) {
            return format!(
                "{what} did not finish within {}, the longest timeout the server's execution profile `{profile}` allows (its `max_timeout`; wavegate.toml asked for longer), and was killed with everything it started; make it faster, or ask the operator to raise `max_timeout`",
                humanize(timeout)
            );
        }
        match self.termination {
            Termination::Exited(0) => format!("{what} succeeded"),
            Termination::Exited(code) => format!("{what} exited with status {code}"),
            Termination::Signalled(sig) => format!("{what} was killed by signal {sig}"),
            Termination::TimedOut => format!(
                "{what} did not finish within its timeout of {} and was killed with everything it started; raise `timeout` in wavegate.toml if it needs longer",
                humanize(timeout)
            ),
            Termination::Cancelled => format!(
                "{what} was stopped because its job was given up (another worker took it over); it runs again there"
            ),
        }
    }

    /// How it failed, as [`describe`](Self::describe) says, with its last
    /// output lines.
    pub(crate) fn failure(&self, what: &str) -> String {
        with_last_output(self.describe(what), &self.tail(5))
    }

    /// The last `n` non-empty output lines, for an error message.
    pub(crate) fn tail(&self, n: usize) -> String {
        let lines: Vec<&str> = self
            .output
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

/// `error`, then `tail` (a command's last output lines) when there is any.
pub(crate) fn with_last_output(mut error: String, tail: &str) -> String {
    if !tail.is_empty() {
        error.push_str(&format!("; last output:\n{tail}"));
    }
    error
}

/// A command that never started.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpawnError {
    #[error("{0}")]
    Sandbox(String),
    /// Its profile cannot be used where it would run.
    #[error("{0}")]
    Profile(String),
    /// Its profile's setup failed: nothing of the stage runs.
    #[error("{0}")]
    Setup(String),
    /// It was handed to the forge's CI and did not come back; `run`: the
    /// forge's page of the run it was handed to, once dispatched.
    #[error("{why}")]
    Elsewhere { why: String, run: Option<String> },
    #[error("cannot start `{program}` (cwd {cwd}): {why}; check the command in wavegate.toml and that the program exists and is executable{where_}")]
    Start {
        program: String,
        cwd: String,
        why: String,
        /// Where a sandboxed command's programs must be.
        where_: &'static str,
    },
}

const IN_THE_SANDBOX: &str =
    " inside the sandbox (under /usr, in the repository, or on a WAVEGATE_SANDBOX_READ path)";

impl SpawnError {
    /// The forge's page of the CI run the command was handed to.
    pub(crate) fn ran_on(&self) -> Option<String> {
        match self {
            SpawnError::Elsewhere { run, .. } => run.clone(),
            _ => None,
        }
    }
}

pub(crate) use crate::model::time::humanize;

impl CommandSpec {
    /// What the command is for: `plan`, `apply` or `outputs`.
    pub(crate) fn kind(&self) -> &'static str {
        self.kind.as_str()
    }

    fn start_error(&self, why: String) -> SpawnError {
        SpawnError::Start {
            program: self.argv[0].clone(),
            cwd: self.cwd.display().to_string(),
            why,
            where_: if self.sandbox.is_off() {
                ""
            } else {
                IN_THE_SANDBOX
            },
        }
    }
}

/// Runs `spec` and counts it in `wavegate_command_duration_seconds` by kind
/// and result (`ok`, `failed`, `timeout`; a command that cannot start failed).
pub(crate) async fn run_command(spec: &CommandSpec) -> Result<CommandOutcome, SpawnError> {
    let started = Instant::now();
    let run = run(spec).await;
    let result = match &run {
        Ok(outcome) if outcome.succeeded() => "ok",
        Ok(outcome) if outcome.termination == Termination::TimedOut => "timeout",
        _ => "failed",
    };
    crate::metrics::global()
        .command_duration
        .get_or_create(&crate::metrics::CommandLabels {
            kind: spec.kind().to_owned(),
            result: result.to_owned(),
        })
        .observe(started.elapsed().as_secs_f64());
    run
}

async fn run(spec: &CommandSpec) -> Result<CommandOutcome, SpawnError> {
    if let Some(setup) = &spec.setup {
        Box::pin(setup.run()).await.map_err(SpawnError::Setup)?;
    }
    let started = Instant::now();
    let mut cancel = spec.cancel.clone();
    if cancel.is_cancelled() {
        return Err(SpawnError::Sandbox(
            "its job was given up before it started".into(),
        ));
    }
    let launch = Launch {
        argv: &spec.argv,
        cwd: &spec.cwd,
        env: &spec.env,
        timeout: spec.timeout,
        confinement: &spec.confinement,
        profile: &spec.profile,
    };
    let mut launched = spec.sandbox.launch(&launch).await.map_err(|e| match e {
        LaunchError::Spawn { source, .. } => spec.start_error(source.to_string()),
        other => SpawnError::Sandbox(other.to_string()),
    })?;
    let child = &mut launched.child;
    // The process group of what was started (bwrap, or the command itself).
    let group = child.id().map(|id| id as i32);
    let mut killer = GroupKiller(group);
    if let (Some(started), Some(pid)) = (&spec.started, child.id()) {
        if let Some(process) = process::identify(pid) {
            let _ = started.send(process);
        }
    }
    let (tx, mut lines) = mpsc::channel::<String>(256);
    if let Some(out) = child.stdout.take() {
        tokio::spawn(forward_lines(out, tx.clone()));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(forward_lines(err, tx.clone()));
    }
    drop(tx);

    let mut kept = KeptOutput::new(spec.output_cap);
    let mut live = spec
        .console
        .as_ref()
        .map(|console| console.start(&spec.label, spec.kind()));
    // Every profile's secrets, not only this command's: whatever reached it.
    let mut redactor =
        Redactor::for_env(&spec.env).with_values(&spec.sandbox.profiles().all_secrets());
    let mut on_line = |line: String| {
        let line = redactor.line(&line);
        log_line(&spec.label, &line);
        let whole = kept.push(&line);
        if let Some(live) = &mut live {
            live.line(&line, whole);
        }
        if let Some(tap) = &spec.tap {
            (tap.0)(&line);
        }
    };
    let deadline = started + spec.timeout;
    let mut heartbeat = spec
        .heartbeat
        .map(|every| tokio::time::interval_at(started + every, every));
    let mut last_output = started;
    let termination = loop {
        tokio::select! {
            status = child.wait() => {
                break match status {
                    Ok(s) => match (s.code(), std::os::unix::process::ExitStatusExt::signal(&s)) {
                        (Some(code), _) => Termination::Exited(code),
                        (None, Some(sig)) => Termination::Signalled(sig),
                        (None, None) => Termination::Exited(-1),
                    },
                    Err(_) => Termination::Exited(-1),
                };
            }
            _ = tokio::time::sleep_until(deadline) => {
                kill_group(group);
                let _ = child.wait().await;
                tracing::warn!(target: "wavegate::command", "{} | timed out after {}; killed with everything it started", spec.label, humanize(spec.timeout));
                break Termination::TimedOut;
            }
            _ = cancel.cancelled() => {
                kill_group(group);
                let _ = child.wait().await;
                tracing::warn!(target: "wavegate::command", "{} | stopped: its job was given up", spec.label);
                break Termination::Cancelled;
            }
            Some(line) = lines.recv() => {
                last_output = Instant::now();
                on_line(line);
            }
            every = next_heartbeat(&mut heartbeat) => {
                if last_output.elapsed() >= every.mul_f32(0.9) {
                    log_line(&spec.label, &format!("still running after {}s", started.elapsed().as_secs()));
                }
            }
        }
    };
    // Anything the command left running in its group goes with it (in the
    // sandbox, its pid namespace ended with it).
    kill_group(group);
    killer.0 = None;
    let cgroup_hit = launched.limit_hit(&spec.profile.limits);
    launched.finish().await;
    let drain_until = Instant::now() + DRAIN_GRACE;
    loop {
        tokio::select! {
            line = lines.recv() => match line {
                Some(line) => on_line(line),
                None => break,
            },
            _ = tokio::time::sleep_until(drain_until) => break,
        }
    }
    let cut = kept.is_cut();
    let output = kept.finish();
    if let (Termination::Exited(code), false) = (termination, spec.sandbox.is_off()) {
        if let Some(why) = sandbox::launch_failure(code, &output) {
            if let Some(live) = live {
                live.end(Ending::NotStarted, &output, cut);
            }
            return Err(spec.start_error(why));
        }
    }
    if let Some(live) = live {
        live.end(termination.ending(), &output, cut);
    }
    let code = match termination {
        Termination::Exited(code) => Some(code),
        Termination::Signalled(sig) => Some(128 + sig),
        Termination::TimedOut | Termination::Cancelled => None,
    };
    // A command killed at its timeout or given up says so, whatever else;
    // a limit a cgroup holds is told by the cgroup's count alone, and only
    // the limits rlimits hold are read from how the command ended.
    let rlimited = spec.sandbox.limits_by_rlimit(&spec.profile.limits);
    let limit =
        code.and_then(|code| cgroup_hit.or_else(|| profile::limit_hit(&rlimited, code, &output)));
    Ok(CommandOutcome {
        termination,
        output,
        timeout: spec.timeout,
        limit,
        capped_by: spec.timeout_capped.then(|| spec.profile.name.clone()),
        #[cfg(test)]
        elapsed: started.elapsed(),
    })
}

/// Kills the group when the run is dropped half-way (its job was aborted);
/// disarmed once the command was reaped and its group killed.
struct GroupKiller(Option<i32>);

impl Drop for GroupKiller {
    fn drop(&mut self) {
        kill_group(self.0);
    }
}

/// Every line of a command's life goes through one call site, `label | text`.
fn log_line(label: &str, text: &str) {
    tracing::info!(target: "wavegate::command", "{label} | {text}");
}

/// The next heartbeat's tick, with its period; never without a heartbeat.
async fn next_heartbeat(heartbeat: &mut Option<tokio::time::Interval>) -> Duration {
    match heartbeat {
        Some(interval) => {
            interval.tick().await;
            interval.period()
        }
        None => std::future::pending().await,
    }
}

fn kill_group(group: Option<i32>) {
    if let Some(pgid) = group
        .filter(|p| *p > 0)
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
    }
}

async fn forward_lines(mut pipe: impl AsyncRead + Unpin, tx: mpsc::Sender<String>) {
    let mut buf = vec![0u8; 8192];
    let mut line: Vec<u8> = Vec::new();
    let send = |bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes);
        text.trim_end_matches('\r').to_owned()
    };
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                if tx.send(send(&line)).await.is_err() {
                    return;
                }
                line.clear();
            } else {
                line.push(b);
                if line.len() >= MAX_LINE {
                    if tx.send(send(&line)).await.is_err() {
                        return;
                    }
                    line.clear();
                }
            }
        }
    }
    if !line.is_empty() {
        let _ = tx.send(send(&line)).await;
    }
}

/// How the line marking a cut in kept output starts.
const CUT_MARK: &str = "[wavegate: output cut at ";

/// Whether kept output (what [`KeptOutput::finish`] made) marks a cut.
pub(crate) fn is_cut_output(output: &str) -> bool {
    output.lines().any(|line| line.starts_with(CUT_MARK))
}

/// Output kept up to a byte cap, and its last lines past it (where the
/// error or the "complete" line is); what is cut is counted and said.
#[derive(Debug)]
pub(crate) struct KeptOutput {
    text: String,
    cap: usize,
    cut: usize,
    /// The last lines past the cap, at most `TAIL_LINES` of them.
    last: std::collections::VecDeque<String>,
}

impl KeptOutput {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            text: String::new(),
            cap,
            cut: 0,
            last: std::collections::VecDeque::new(),
        }
    }

    /// Keeps `line`; true when it went into the text under the cap.
    pub(crate) fn push(&mut self, line: &str) -> bool {
        if self.cut == 0 && self.text.len() + line.len() < self.cap {
            self.text.push_str(line);
            self.text.push('\n');
            true
        } else {
            self.last.push_back(line.to_owned());
            if self.last.len() > super::tail::TAIL_LINES {
                let gone = self.last.pop_front().expect("a line");
                self.cut += gone.len() + 1;
            }
            false
        }
    }

    /// Some output is not kept (the cut is marked).
    pub(crate) fn is_cut(&self) -> bool {
        self.cut > 0
    }

    pub(crate) fn finish(mut self) -> String {
        if self.cut > 0 {
            self.text.push_str(&format!(
                "{CUT_MARK}{} bytes; {} more bytes were not kept, but for the last lines, which follow]\n",
                self.cap, self.cut
            ));
        }
        for line in self.last {
            self.text.push_str(&line);
            self.text.push('\n');
        }
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sandbox::testing::{bwrap, Job};

    /// A command in a job of its own, in the sandbox as production runs it.
    struct Sandboxed {
        /// Kept so the job's directories live as long as the command.
        _job: Job,
        spec: CommandSpec,
    }

    impl std::ops::Deref for Sandboxed {
        type Target = CommandSpec;
        fn deref(&self) -> &CommandSpec {
            &self.spec
        }
    }

    impl std::ops::DerefMut for Sandboxed {
        fn deref_mut(&mut self) -> &mut CommandSpec {
            &mut self.spec
        }
    }

    async fn spec(script: &str, timeout: Duration) -> Sandboxed {
        let job = Job::new();
        let spec = spec_in(&job, bwrap().await, script, timeout);
        Sandboxed { _job: job, spec }
    }

    fn spec_in(job: &Job, sandbox: Arc<Sandbox>, script: &str, timeout: Duration) -> CommandSpec {
        CommandSpec {
            label: "[plan] x@dev".into(),
            kind: CommandKind::Plan,
            argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
            cwd: job.confinement.tree.clone(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            timeout,
            timeout_capped: false,
            profile: Arc::new(Profile::default()),
            heartbeat: Some(Duration::from_millis(100)),
            output_cap: 200,
            sandbox,
            confinement: job.confinement.clone(),
            cancel: Cancel::default(),
            setup: None,
            started: None,
            console: None,
            tap: None,
        }
    }

    #[tokio::test]
    async fn every_run_is_timed_by_kind_and_result() {
        let mut timed_out = spec("sleep 5", Duration::from_millis(200)).await;
        timed_out.label = "[apply] metrics@dev".into();
        timed_out.kind = CommandKind::Apply;
        run_command(&timed_out).await.unwrap();
        let text = crate::metrics::global().render();
        assert!(
            text.contains(
                "wavegate_command_duration_seconds_count{kind=\"apply\",result=\"timeout\"}"
            ),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_commands_lines_reach_a_watcher_as_it_prints_them_and_the_reports_output_is_kept() {
        use crate::plan::live::{testing::Remembers, Hub, Owner, Seen};
        let secret = "s3cr3t-deploy-value";
        let script = "echo \"token is $DEPLOY_TOKEN\"; sleep 0.5; \
                      for n in $(seq 1 50); do echo \"line $n of the plan\"; done";
        let mut sandboxed = spec(script, Duration::from_secs(10)).await;
        sandboxed.env.push(("DEPLOY_TOKEN".into(), secret.into()));
        let hub = Hub::default();
        let keeper = Arc::new(Remembers::default());
        let owner = Owner {
            repo: crate::model::RepoId::new(crate::model::ForgeKind::GitHub, "acme/infra"),
            pr: crate::model::PrNumber(1),
            run: None,
        };
        sandboxed.console = Some(Console::new(hub.clone(), keeper.clone(), owner));
        let running = tokio::spawn(async move { run_command(&sandboxed.spec).await });

        let channel = loop {
            if let Some(channel) = hub.get(7) {
                break channel;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let mut watch = channel.watch(0);
        let Some(Seen::Line(0, first)) = watch.next().await else {
            panic!("the first line first");
        };
        assert_eq!(&*first, "token is [redacted]");
        assert!(!running.is_finished(), "it came while the command ran");
        let mut seen = vec![first.to_string()];
        while let Some(next) = watch.next().await {
            match next {
                Seen::Line(_, line) => seen.push(line.to_string()),
                Seen::End(ending) => assert_eq!(ending, Ending::Exited(0)),
                Seen::Skipped(n) => panic!("{n} lines skipped"),
            }
        }
        let out = running.await.unwrap().unwrap();
        assert_eq!(seen.len(), 51, "every line, past the cap too: {seen:#?}");
        assert!(seen.iter().all(|line| !line.contains(secret)));

        tokio::time::sleep(crate::plan::live::FLUSH_EVERY * 2).await;
        let told = keeper.told();
        assert_eq!(told[0], "open [plan] x@dev");
        assert_eq!(
            told.last().unwrap(),
            &format!("finish 7 {:?} cut=true exited:0", Some(&out.output)),
            "the report's output is kept: {told:#?}"
        );
        let appended: String = told[1..told.len() - 1]
            .iter()
            .map(|call| {
                let quoted = call.strip_prefix("append 7 ").unwrap();
                let quoted = quoted.rsplit_once(" cut=").unwrap().0;
                serde_json::from_str::<String>(quoted).unwrap()
            })
            .collect();
        assert!(
            out.output.starts_with(&appended) && appended.lines().count() >= 1,
            "what was written as it ran is the start of what is kept: {appended:?} / {:?}",
            out.output
        );
    }

    #[tokio::test]
    async fn output_is_kept_in_order_with_the_exit_status() {
        let out = run_command(
            &spec(
                "echo one; echo two >&2; sleep 0.1; echo three; exit 3",
                Duration::from_secs(10),
            )
            .await
            .spec,
        )
        .await
        .unwrap();
        assert_eq!(out.termination, Termination::Exited(3));
        assert_eq!(out.output, "one\ntwo\nthree\n");
        assert_eq!(out.tail(2), "two\nthree");
    }

    #[tokio::test]
    async fn the_environment_is_scrubbed() {
        std::env::set_var("WAVEGATE_TEST_SECRET_IN_PARENT", "leak");
        let out = run_command(&spec("env | sort", Duration::from_secs(10)).await.spec)
            .await
            .unwrap();
        assert!(!out.output.contains("leak"), "{}", out.output);
        assert!(out.output.contains("PATH=/usr/bin:/bin"));
    }

    /// A hanging command whose background child would write `survived` into
    /// the job's tree after 2s if it outlived the kill.
    fn hanging(job: &Job) -> (String, PathBuf) {
        let marker = job.confinement.tree.join("marker");
        std::fs::write(&marker, "").unwrap();
        let script = format!(
            "(sleep 2; echo survived > {}) & echo started; sleep 60",
            marker.display()
        );
        (script, marker)
    }

    #[tokio::test]
    async fn a_hanging_command_and_its_children_are_killed_at_the_timeout() {
        let job = Job::new();
        let (script, marker) = hanging(&job);
        let spec = spec_in(&job, bwrap().await, &script, Duration::from_millis(500));
        let out = run_command(&spec).await.unwrap();
        assert_eq!(out.termination, Termination::TimedOut);
        assert!(out.elapsed < Duration::from_secs(10));
        assert!(out
            .describe("the plan command")
            .contains("timeout of 500ms"));
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(
            std::fs::read_to_string(&marker).unwrap(),
            "",
            "the background child was killed too"
        );
    }

    #[tokio::test]
    async fn a_given_up_job_stops_its_command_and_everything_it_started() {
        let job = Job::new();
        let (script, marker) = hanging(&job);
        let (canceller, cancel) = Cancel::new();
        let mut spec = spec_in(&job, bwrap().await, &script, Duration::from_secs(60));
        spec.cancel = cancel;
        let running = tokio::spawn(async move { run_command(&spec).await });
        tokio::time::sleep(Duration::from_millis(500)).await;
        canceller.cancel();
        let out = running.await.unwrap().unwrap();
        assert_eq!(out.termination, Termination::Cancelled);
        assert!(out.describe("the apply command").contains("given up"));
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(std::fs::read_to_string(&marker).unwrap(), "");
    }

    #[tokio::test]
    async fn an_aborted_run_takes_its_command_with_it() {
        let job = Job::new();
        let (script, marker) = hanging(&job);
        let spec = spec_in(&job, bwrap().await, &script, Duration::from_secs(60));
        let running = tokio::spawn(async move { run_command(&spec).await });
        tokio::time::sleep(Duration::from_millis(500)).await;
        running.abort();
        let _ = running.await;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(std::fs::read_to_string(&marker).unwrap(), "");
    }

    #[tokio::test]
    async fn output_over_the_cap_is_cut_with_a_note() {
        let out = run_command(
            &spec(
                "for i in $(seq 1 100); do echo line-$i; done",
                Duration::from_secs(10),
            )
            .await
            .spec,
        )
        .await
        .unwrap();
        assert!(out.output.starts_with("line-1\nline-2\n"));
        assert!(
            out.output.contains("[wavegate: output cut at 200 bytes;"),
            "{}",
            out.output
        );
        // The end is kept past the cap: that is where the error is.
        assert!(
            out.output.ends_with("line-71\n") || out.output.ends_with("line-100\n"),
            "{}",
            out.output
        );
        assert!(
            !out.output.contains("line-50\n"),
            "the middle is cut: {}",
            out.output
        );
        assert!(out.output.len() < 600);
    }

    #[tokio::test]
    async fn secrets_are_redacted_from_kept_output() {
        let out = run_command(
            &spec("echo password=hunter2", Duration::from_secs(10))
                .await
                .spec,
        )
        .await
        .unwrap();
        assert_eq!(out.output, "password=[redacted]\n");

        // A secret variable passed on is redacted even when printed bare.
        let mut printing = spec("echo using $DEPLOY_TOKEN", Duration::from_secs(10)).await;
        printing
            .env
            .push(("DEPLOY_TOKEN".into(), "tok-0123456789".into()));
        let out = run_command(&printing.spec).await.unwrap();
        assert_eq!(out.output, "using [redacted]\n");
    }

    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What `spec` logs while it runs, its lines picked by its label from
    /// one process-wide subscriber (a thread's own subscriber could miss
    /// events whose callsite another test's thread reached first).
    async fn logged(spec: &CommandSpec) -> String {
        static LOG: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
        let log = LOG.get_or_init(|| {
            let captured = Captured::default();
            let writer = captured.clone();
            let subscriber = tracing_subscriber::fmt()
                .with_writer(move || writer.clone())
                .with_ansi(false)
                .finish();
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other test sets a global subscriber");
            captured
        });
        run_command(spec).await.unwrap();
        let text = String::from_utf8_lossy(&log.0.lock().unwrap()).into_owned();
        let label = format!("{} |", spec.label);
        text.lines()
            .filter(|l| l.contains(&label))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[tokio::test]
    async fn lines_are_streamed_with_the_label_and_a_quiet_command_gets_a_heartbeat() {
        let mut s = spec("echo hello; sleep 2.2; echo bye", Duration::from_secs(10)).await;
        s.heartbeat = Some(Duration::from_millis(500));
        s.label = "[plan] x@dev".into();
        let log = logged(&s).await;
        assert!(log.contains("[plan] x@dev | hello"), "{log}");
        // How many heartbeats fit depends on the machine's load; one must.
        assert!(log.contains("[plan] x@dev | still running after "), "{log}");
        assert!(log.contains("[plan] x@dev | bye"), "{log}");
    }

    #[tokio::test]
    async fn without_a_heartbeat_a_quiet_command_logs_only_what_it_prints() {
        let mut s = spec("echo hello; sleep 1.2; echo bye", Duration::from_secs(10)).await;
        s.heartbeat = None;
        s.label = "[plan] quiet@dev".into();
        let log = logged(&s).await;
        assert!(log.contains("[plan] quiet@dev | hello"), "{log}");
        assert!(log.contains("[plan] quiet@dev | bye"), "{log}");
        assert!(!log.contains("still running"), "{log}");
    }

    #[tokio::test]
    async fn a_missing_program_is_a_clear_error() {
        let mut s = spec("", Duration::from_secs(1)).await;
        s.argv = vec!["./no-such-plan.sh".into()];
        let e = run_command(&s).await.unwrap_err().to_string();
        assert!(
            e.contains("cannot start `./no-such-plan.sh`") && e.contains("No such file"),
            "{e}"
        );
        let job = Job::new();
        let mut s = spec_in(&job, bwrap().await, "", Duration::from_secs(10));
        s.argv = vec!["no-such-tool".into()];
        let e = run_command(&s).await.unwrap_err().to_string();
        assert!(
            e.contains("cannot start `no-such-tool`")
                && e.contains("No such file")
                && e.ends_with("inside the sandbox (under /usr, in the repository, or on a WAVEGATE_SANDBOX_READ path)"),
            "{e}"
        );
    }
}
