//! Runs one plan/apply/outputs command: argv (never a shell string), a
//! scrubbed environment, its own process group killed at the timeout, output
//! streamed line by line to the log with a heartbeat when quiet, and kept for
//! the report (size-capped, secrets redacted).

use super::redact::Redactor;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Output kept per command unless configured otherwise.
pub const DEFAULT_OUTPUT_CAP: usize = 1024 * 1024;
/// Longest line passed on as one; longer ones are split.
const MAX_LINE: usize = 16 * 1024;
/// How long output may still drain after the command ended.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
pub struct CommandSpec {
    /// Prefix of every log line, e.g. `[plan] app@dev`.
    pub label: String,
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    /// The whole environment the command sees.
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    pub heartbeat: Duration,
    pub output_cap: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    Exited(i32),
    Signalled(i32),
    /// Killed, with its process group, at the timeout.
    TimedOut,
}

#[derive(Debug, Clone)]
pub struct CommandOutcome {
    pub termination: Termination,
    /// stdout and stderr interleaved as they arrived, redacted and capped.
    pub output: String,
    pub elapsed: Duration,
}

impl CommandOutcome {
    pub fn succeeded(&self) -> bool {
        self.termination == Termination::Exited(0)
    }

    /// One line saying how the command ended, for a report or an error.
    pub fn describe(&self, what: &str, timeout: Duration) -> String {
        match self.termination {
            Termination::Exited(0) => format!("{what} succeeded"),
            Termination::Exited(code) => format!("{what} exited with status {code}"),
            Termination::Signalled(sig) => format!("{what} was killed by signal {sig}"),
            Termination::TimedOut => format!(
                "{what} did not finish within its timeout of {} and was killed with its process group; raise `timeout` in wavegate.toml if it needs longer",
                humanize(timeout)
            ),
        }
    }

    /// The last `n` non-empty output lines, for an error message.
    pub fn tail(&self, n: usize) -> String {
        let lines: Vec<&str> = self
            .output
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot start `{program}` (cwd {cwd}): {source}; check the command in wavegate.toml and that the program exists and is executable")]
pub struct SpawnError {
    pub program: String,
    pub cwd: String,
    #[source]
    pub source: std::io::Error,
}

pub fn humanize(d: Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0 => format!("{}ms", d.as_millis()),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

impl CommandSpec {
    /// What the command is for, from its label's `[kind]`: `plan`, `apply`
    /// or `outputs` (`other` for a label without one).
    pub fn kind(&self) -> &str {
        self.label
            .strip_prefix('[')
            .and_then(|rest| rest.split_once(']'))
            .map(|(kind, _)| kind)
            .filter(|kind| ["plan", "apply", "outputs"].contains(kind))
            .unwrap_or("other")
    }
}

/// Runs `spec` and counts it in `wavegate_command_duration_seconds` by kind
/// and result (`ok`, `failed`, `timeout`; a command that cannot start failed).
pub async fn run_command(spec: &CommandSpec) -> Result<CommandOutcome, SpawnError> {
    let started = Instant::now();
    let run = run(spec).await;
    let result = match &run {
        Ok(outcome) if outcome.succeeded() => "ok",
        Ok(outcome) if outcome.termination == Termination::TimedOut => "timeout",
        _ => "failed",
    };
    crate::metrics::COMMAND_DURATION.observe(
        &[("kind", spec.kind()), ("result", result)],
        started.elapsed().as_secs_f64(),
    );
    run
}

async fn run(spec: &CommandSpec) -> Result<CommandOutcome, SpawnError> {
    let started = Instant::now();
    let mut command = tokio::process::Command::new(&spec.argv[0]);
    command
        .args(&spec.argv[1..])
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|source| SpawnError {
        program: spec.argv[0].clone(),
        cwd: spec.cwd.display().to_string(),
        source,
    })?;
    let group = child.id().map(|id| id as i32);
    let (tx, mut lines) = mpsc::channel::<String>(256);
    if let Some(out) = child.stdout.take() {
        tokio::spawn(forward_lines(out, tx.clone()));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(forward_lines(err, tx.clone()));
    }
    drop(tx);

    let mut kept = KeptOutput::new(spec.output_cap);
    let mut redactor = Redactor::default();
    let mut on_line = |line: String| {
        let line = redactor.line(&line);
        log_line(&spec.label, &line);
        kept.push(&line);
    };
    let deadline = started + spec.timeout;
    let mut heartbeat = tokio::time::interval_at(started + spec.heartbeat, spec.heartbeat);
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
                tracing::warn!(target: "wavegate::command", "{} | timed out after {}; killed its process group", spec.label, humanize(spec.timeout));
                break Termination::TimedOut;
            }
            Some(line) = lines.recv() => {
                last_output = Instant::now();
                on_line(line);
            }
            _ = heartbeat.tick() => {
                if last_output.elapsed() >= spec.heartbeat.mul_f32(0.9) {
                    log_line(&spec.label, &format!("still running after {}s", started.elapsed().as_secs()));
                }
            }
        }
    };
    // Anything the command left running in its group goes with it.
    kill_group(group);
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
    Ok(CommandOutcome {
        termination,
        output: kept.finish(),
        elapsed: started.elapsed(),
    })
}

/// Every line of a command's life goes through one call site, `label | text`.
fn log_line(label: &str, text: &str) {
    tracing::info!(target: "wavegate::command", "{label} | {text}");
}

fn kill_group(group: Option<i32>) {
    if let Some(pgid) = group.filter(|p| *p > 0) {
        // SAFETY: kill(2) with a negative pid signals the process group we created; no memory is touched.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
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

/// Output kept up to a byte cap; what is cut is counted and said.
struct KeptOutput {
    text: String,
    cap: usize,
    cut: usize,
}

impl KeptOutput {
    fn new(cap: usize) -> Self {
        Self {
            text: String::new(),
            cap,
            cut: 0,
        }
    }

    fn push(&mut self, line: &str) {
        if self.cut == 0 && self.text.len() + line.len() < self.cap {
            self.text.push_str(line);
            self.text.push('\n');
        } else {
            self.cut += line.len() + 1;
        }
    }

    fn finish(mut self) -> String {
        if self.cut > 0 {
            self.text.push_str(&format!(
                "[wavegate: output cut at {} bytes; {} more bytes were not kept]\n",
                self.cap, self.cut
            ));
        }
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(script: &str, timeout: Duration) -> CommandSpec {
        CommandSpec {
            label: "[test] x@dev".into(),
            argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
            cwd: std::env::temp_dir(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            timeout,
            heartbeat: Duration::from_millis(100),
            output_cap: 200,
        }
    }

    #[test]
    fn the_kind_comes_from_the_label() {
        let mut s = spec("true", Duration::from_secs(1));
        for (label, kind) in [
            ("[plan] app@dev", "plan"),
            ("[apply] app@prod", "apply"),
            ("[outputs] net@dev", "outputs"),
            ("[test] x@dev", "other"),
            ("no brackets", "other"),
        ] {
            s.label = label.into();
            assert_eq!(s.kind(), kind, "{label}");
        }
    }

    #[tokio::test]
    async fn every_run_is_timed_by_kind_and_result() {
        let mut timed_out = spec("sleep 5", Duration::from_millis(200));
        timed_out.label = "[apply] metrics@dev".into();
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
    async fn output_is_kept_in_order_with_the_exit_status() {
        let out = run_command(&spec(
            "echo one; echo two >&2; sleep 0.1; echo three; exit 3",
            Duration::from_secs(10),
        ))
        .await
        .unwrap();
        assert_eq!(out.termination, Termination::Exited(3));
        assert_eq!(out.output, "one\ntwo\nthree\n");
        assert_eq!(out.tail(2), "two\nthree");
    }

    #[tokio::test]
    async fn the_environment_is_scrubbed() {
        std::env::set_var("WAVEGATE_TEST_SECRET_IN_PARENT", "leak");
        let out = run_command(&spec("env | sort", Duration::from_secs(10)))
            .await
            .unwrap();
        assert!(!out.output.contains("leak"), "{}", out.output);
        assert!(out.output.contains("PATH=/usr/bin:/bin"));
    }

    #[tokio::test]
    async fn a_hanging_command_and_its_children_are_killed_at_the_timeout() {
        let marker = tempfile::NamedTempFile::new().unwrap();
        let path = marker.path().display().to_string();
        // The child in the background would write the marker after 2s if it survived.
        let script = format!("(sleep 2; echo survived > {path}) & echo started; sleep 60");
        let out = run_command(&spec(&script, Duration::from_millis(300)))
            .await
            .unwrap();
        assert_eq!(out.termination, Termination::TimedOut);
        assert!(out.elapsed < Duration::from_secs(10));
        assert!(out
            .describe("the plan command", Duration::from_millis(300))
            .contains("timeout of 300ms"));
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "",
            "the background child was killed too"
        );
    }

    #[tokio::test]
    async fn output_over_the_cap_is_cut_with_a_note() {
        let out = run_command(&spec(
            "for i in $(seq 1 100); do echo line-$i; done",
            Duration::from_secs(10),
        ))
        .await
        .unwrap();
        assert!(out.output.starts_with("line-1\nline-2\n"));
        assert!(out.output.len() < 300);
        assert!(
            out.output.contains("[wavegate: output cut at 200 bytes;"),
            "{}",
            out.output
        );
    }

    #[tokio::test]
    async fn secrets_are_redacted_from_kept_output() {
        let out = run_command(&spec("echo password=hunter2", Duration::from_secs(10)))
            .await
            .unwrap();
        assert_eq!(out.output, "password=[redacted]\n");
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

    #[tokio::test]
    async fn lines_are_streamed_with_the_label_and_a_quiet_command_gets_a_heartbeat() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let mut s = spec("echo hello; sleep 2.2; echo bye", Duration::from_secs(10));
        s.heartbeat = Duration::from_millis(500);
        run_command(&s).await.unwrap();
        let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert!(log.contains("[test] x@dev | hello"), "{log}");
        // How many heartbeats fit depends on the machine's load; one must.
        assert!(log.contains("[test] x@dev | still running after "), "{log}");
        assert!(log.contains("[test] x@dev | bye"), "{log}");
    }

    #[tokio::test]
    async fn a_missing_program_is_a_clear_error() {
        let mut s = spec("", Duration::from_secs(1));
        s.argv = vec!["./no-such-plan.sh".into()];
        let e = run_command(&s).await.unwrap_err().to_string();
        assert!(
            e.contains("cannot start `./no-such-plan.sh`") && e.contains("No such file"),
            "{e}"
        );
    }
}
