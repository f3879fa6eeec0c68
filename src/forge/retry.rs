//! The one retry and timeout policy every forge call goes through: which
//! answers are worth another attempt, how long to wait (backoff, `retry-after`,
//! rate-limit resets), and when to give up with a reason a person can act on.
//! The decision is a pure function; the sleep is injectable so tests never wait.

use super::ForgeKind;
use anyhow::anyhow;
use reqwest::header::HeaderMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What to do after an attempt that did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Retry(Duration),
    /// Stop. `reason` is set when giving up needs explaining beyond the status
    /// (a rate limit that resets too far away).
    GiveUp {
        reason: Option<String>,
    },
}

/// How a sleep is performed; tests substitute one that records and returns.
pub(crate) type Sleep =
    Arc<dyn Fn(Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

#[derive(Clone)]
pub struct RetryPolicy {
    /// Attempts in total, the first included.
    pub max_attempts: u32,
    /// The first backoff; doubled per attempt.
    pub base_backoff: Duration,
    pub max_backoff: Duration,
    /// The longest wait worth sitting through (rate limits, `retry-after`).
    pub max_wait: Duration,
    /// Per attempt, connection to last body byte.
    pub attempt_timeout: Duration,
    pub sleep: Sleep,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            base_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            max_wait: Duration::from_secs(60),
            attempt_timeout: Duration::from_secs(30),
            sleep: Arc::new(|d| Box::pin(tokio::time::sleep(d))),
        }
    }
}

impl std::fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("max_attempts", &self.max_attempts)
            .field("base_backoff", &self.base_backoff)
            .field("max_backoff", &self.max_backoff)
            .field("max_wait", &self.max_wait)
            .field("attempt_timeout", &self.attempt_timeout)
            .finish_non_exhaustive()
    }
}

/// Decides after attempt number `attempt` (1 = the first) answered `status`
/// (`None`: no answer — connection error or timeout) with `headers`, at `now`.
pub(crate) fn decide(
    policy: &RetryPolicy,
    attempt: u32,
    status: Option<u16>,
    headers: &HeaderMap,
    now: SystemTime,
) -> Decision {
    let give_up = Decision::GiveUp { reason: None };
    let exhausted = attempt >= policy.max_attempts;
    let backoff = || {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
        policy
            .base_backoff
            .saturating_mul(factor)
            .min(policy.max_backoff)
    };
    let Some(status) = status else {
        return if exhausted {
            give_up
        } else {
            Decision::Retry(backoff())
        };
    };
    if status == 403 || status == 429 {
        if header_number(headers, "x-ratelimit-remaining") == Some(0) {
            if let Some(reset) = header_number(headers, "x-ratelimit-reset") {
                let now_secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
                let wait = Duration::from_secs(reset.saturating_sub(now_secs) + 1);
                if wait > policy.max_wait {
                    return Decision::GiveUp {
                        reason: Some(format!(
                            "rate limit exhausted; it resets at {reset} (unix time, in {} s)",
                            wait.as_secs()
                        )),
                    };
                }
                return if exhausted {
                    give_up
                } else {
                    Decision::Retry(wait)
                };
            }
        }
        if let Some(after) = header_number(headers, "retry-after") {
            let wait = Duration::from_secs(after);
            if wait > policy.max_wait {
                return Decision::GiveUp {
                    reason: Some(format!(
                        "rate limited; the forge asks to retry after {after} s"
                    )),
                };
            }
            return if exhausted {
                give_up
            } else {
                Decision::Retry(wait)
            };
        }
        return if status == 429 && !exhausted {
            Decision::Retry(backoff())
        } else {
            give_up
        };
    }
    if (500..600).contains(&status) && !exhausted {
        return Decision::Retry(backoff());
    }
    give_up
}

fn header_number(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// An answer the policy can judge: its status and headers.
pub(crate) trait Answer {
    fn status_code(&self) -> u16;
    fn header_map(&self) -> &HeaderMap;
}

/// A value an attempt produced with no status left to judge: a success.
pub(crate) struct Settled<T>(pub T);

impl<T> Answer for Settled<T> {
    fn status_code(&self) -> u16 {
        200
    }
    fn header_map(&self) -> &HeaderMap {
        static EMPTY: std::sync::OnceLock<HeaderMap> = std::sync::OnceLock::new();
        EMPTY.get_or_init(HeaderMap::new)
    }
}

/// A whole answer, body read, so a slow body counts against the attempt's timeout.
/// Its `Debug` leaves the body out (a token response carries a token).
#[derive(Clone)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: String,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reply")
            .field("status", &self.status)
            .field("body_bytes", &self.body.len())
            .finish_non_exhaustive()
    }
}

impl Answer for Reply {
    fn status_code(&self) -> u16 {
        self.status
    }
    fn header_map(&self) -> &HeaderMap {
        &self.headers
    }
}

impl Reply {
    /// This reply if it is a success, else an error naming `call`, the status
    /// and the forge's message.
    pub(crate) fn success(self, call: &str) -> anyhow::Result<Self> {
        if self.status < 400 {
            return Ok(self);
        }
        Err(anyhow!("{call}: {} {}", self.status, self.message()))
    }

    pub(crate) fn json<T: serde::de::DeserializeOwned>(&self, call: &str) -> anyhow::Result<T> {
        serde_json::from_str(&self.body).map_err(|e| {
            anyhow!(
                "{call}: {} answer is not the documented JSON: {e}",
                self.status
            )
        })
    }

    /// The forge's own error message (`{"message": …}`), or the start of the body.
    pub(crate) fn message(&self) -> String {
        let from_json = serde_json::from_str::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| v.get("message")?.as_str().map(str::to_owned));
        from_json.unwrap_or_else(|| self.body.chars().take(200).collect())
    }
}

/// An attempt that produced no answer to judge.
#[derive(Debug)]
pub(crate) struct Failure {
    /// The status, when the failure carries one (a token request refused inside the attempt).
    pub(crate) status: Option<u16>,
    pub(crate) headers: HeaderMap,
    /// Worth another attempt (connection reset, timeout) or not (a key that cannot sign).
    pub(crate) transient: bool,
    pub(crate) error: anyhow::Error,
}

impl Failure {
    pub(crate) fn transient(error: impl Into<anyhow::Error>) -> Self {
        Self {
            status: None,
            headers: HeaderMap::new(),
            transient: true,
            error: error.into(),
        }
    }

    pub(crate) fn permanent(error: impl Into<anyhow::Error>) -> Self {
        Self {
            transient: false,
            ..Self::transient(error)
        }
    }

    /// A failure the forge answered with `status` (judged like a reply with it).
    pub(crate) fn answered(
        status: u16,
        headers: HeaderMap,
        error: impl Into<anyhow::Error>,
    ) -> Self {
        Self {
            status: Some(status),
            headers,
            transient: false,
            error: error.into(),
        }
    }
}

/// One HTTP request to a forge's API, counted in
/// `wavegate_forge_requests_total` by the status it got (`error`: no answer,
/// including an attempt dropped at its timeout). Every client starts one
/// per request it sends, retries included, and finishes it where the answer
/// is first seen; the rate-limit remaining the answer reports is kept.
pub(crate) struct Exchange {
    forge: ForgeKind,
    finished: bool,
}

impl Exchange {
    pub(crate) fn start(forge: ForgeKind) -> Self {
        Self {
            forge,
            finished: false,
        }
    }

    pub(crate) fn finish(mut self, outcome: &Result<Reply, Failure>) {
        self.finished = true;
        let (status, headers) = match outcome {
            Ok(reply) => (Some(reply.status), &reply.headers),
            Err(failure) => (failure.status, &failure.headers),
        };
        self.count(&status.map_or_else(|| "error".to_owned(), |s| s.to_string()));
        if let Some(remaining) = header_number(headers, "x-ratelimit-remaining") {
            crate::metrics::global()
                .forge_rate_limit_remaining
                .get_or_create(&crate::metrics::ForgeLabels {
                    forge: self.forge.as_str().to_owned(),
                })
                .set(i64::try_from(remaining).unwrap_or(i64::MAX));
        }
    }

    fn count(&self, status: &str) {
        crate::metrics::global()
            .forge_requests
            .get_or_create(&crate::metrics::ForgeRequestLabels {
                forge: self.forge.as_str().to_owned(),
                status: status.to_owned(),
            })
            .inc();
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        if !self.finished {
            self.count("error");
        }
    }
}

/// Runs `attempt` until it answers with a status the policy does not retry,
/// each attempt bounded by the policy's timeout. Returns the last answer —
/// success or a status the caller judges (e.g. 404) — or an error naming `call`
/// when the attempts ran out without an answer or a rate limit resets too late.
pub(crate) async fn send_with_retry<A, F, Fut>(
    policy: &RetryPolicy,
    call: &str,
    mut attempt: F,
) -> anyhow::Result<A>
where
    A: Answer,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<A, Failure>>,
{
    let mut number = 0;
    loop {
        number += 1;
        let outcome = match tokio::time::timeout(policy.attempt_timeout, attempt()).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Failure::transient(anyhow!(
                "no answer within {} s",
                policy.attempt_timeout.as_secs_f64()
            ))),
        };
        let decision = match &outcome {
            Ok(answer) if answer.status_code() < 400 => return outcome.map_err(|f| f.error),
            Ok(answer) => decide(
                policy,
                number,
                Some(answer.status_code()),
                answer.header_map(),
                SystemTime::now(),
            ),
            Err(failure) if failure.transient || failure.status.is_some() => decide(
                policy,
                number,
                failure.status,
                &failure.headers,
                SystemTime::now(),
            ),
            Err(_) => Decision::GiveUp { reason: None },
        };
        match decision {
            Decision::Retry(wait) => {
                match &outcome {
                    Ok(answer) => tracing::warn!(
                        call,
                        attempt = number,
                        status = answer.status_code(),
                        wait_ms = wait.as_millis() as u64,
                        "forge call failed; retrying"
                    ),
                    Err(failure) => {
                        tracing::warn!(call, attempt = number, error = ?failure.error, wait_ms = wait.as_millis() as u64, "forge call failed; retrying")
                    }
                }
                (policy.sleep)(wait).await;
            }
            Decision::GiveUp { reason } => {
                return match (outcome, reason) {
                    (Ok(answer), Some(reason)) => {
                        Err(anyhow!("{call}: {}: {reason}", answer.status_code()))
                    }
                    (Ok(answer), None) => Ok(answer),
                    (Err(failure), Some(reason)) => {
                        Err(failure.error.context(format!("{call}: {reason}")))
                    }
                    (Err(failure), None) => Err(failure
                        .error
                        .context(format!("{call}: failed after {number} attempt(s)"))),
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of one series in the global registry (0 when absent).
    fn sample(series: &str) -> f64 {
        crate::metrics::global()
            .render()
            .lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0)
    }

    #[test]
    fn every_exchange_is_counted_by_status_and_keeps_the_rate_limit() {
        let counted = |status: &str| {
            sample(&format!(
                "wavegate_forge_requests_total{{forge=\"forgejo\",status=\"{status}\"}}"
            ))
        };
        let (ok, error) = (counted("202"), counted("error"));
        let reply = Reply {
            status: 202,
            headers: headers(&[("x-ratelimit-remaining", "4321")]),
            body: String::new(),
        };
        Exchange::start(ForgeKind::Forgejo).finish(&Ok(reply));
        Exchange::start(ForgeKind::Forgejo).finish(&Err(Failure::transient(anyhow!("reset"))));
        // An attempt dropped at its timeout got no answer either.
        drop(Exchange::start(ForgeKind::Forgejo));
        assert!(counted("202") > ok);
        assert!(counted("error") >= error + 2.0);
        assert_eq!(
            sample("wavegate_forge_rate_limit_remaining{forge=\"forgejo\"}"),
            4321.0
        );
    }
    use std::sync::Mutex;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn policy() -> RetryPolicy {
        RetryPolicy::default()
    }

    #[test]
    fn server_errors_back_off_doubling_from_half_a_second() {
        let none = HeaderMap::new();
        let waits: Vec<Decision> = (1..=3)
            .map(|n| decide(&policy(), n, Some(502), &none, at(0)))
            .collect();
        assert_eq!(
            waits,
            vec![
                Decision::Retry(Duration::from_millis(500)),
                Decision::Retry(Duration::from_millis(1000)),
                Decision::Retry(Duration::from_millis(2000)),
            ]
        );
    }

    #[test]
    fn backoff_is_capped() {
        let policy = RetryPolicy {
            max_attempts: 20,
            ..policy()
        };
        assert_eq!(
            decide(&policy, 12, None, &HeaderMap::new(), at(0)),
            Decision::Retry(policy.max_backoff)
        );
    }

    #[test]
    fn the_fourth_failed_attempt_is_the_last() {
        assert_eq!(
            decide(&policy(), 4, Some(503), &HeaderMap::new(), at(0)),
            Decision::GiveUp { reason: None }
        );
        assert_eq!(
            decide(&policy(), 4, None, &HeaderMap::new(), at(0)),
            Decision::GiveUp { reason: None }
        );
    }

    #[test]
    fn no_answer_at_all_is_retried() {
        assert_eq!(
            decide(&policy(), 1, None, &HeaderMap::new(), at(0)),
            Decision::Retry(Duration::from_millis(500))
        );
    }

    #[test]
    fn client_errors_are_not_retried() {
        for status in [400, 401, 404, 422] {
            assert_eq!(
                decide(&policy(), 1, Some(status), &HeaderMap::new(), at(0)),
                Decision::GiveUp { reason: None },
                "{status}"
            );
        }
    }

    #[test]
    fn a_plain_forbidden_is_not_retried_but_too_many_requests_is() {
        assert_eq!(
            decide(&policy(), 1, Some(403), &HeaderMap::new(), at(0)),
            Decision::GiveUp { reason: None }
        );
        assert_eq!(
            decide(&policy(), 1, Some(429), &HeaderMap::new(), at(0)),
            Decision::Retry(Duration::from_millis(500))
        );
    }

    #[test]
    fn retry_after_seconds_are_honoured() {
        let h = headers(&[("retry-after", "7")]);
        assert_eq!(
            decide(&policy(), 1, Some(429), &h, at(0)),
            Decision::Retry(Duration::from_secs(7))
        );
        assert_eq!(
            decide(&policy(), 1, Some(403), &h, at(0)),
            Decision::Retry(Duration::from_secs(7))
        );
    }

    #[test]
    fn an_exhausted_rate_limit_waits_until_it_resets() {
        let h = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1010"),
        ]);
        assert_eq!(
            decide(&policy(), 1, Some(403), &h, at(1000)),
            Decision::Retry(Duration::from_secs(11))
        );
    }

    #[test]
    fn a_rate_limit_resetting_too_late_gives_up_saying_when() {
        let h = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "4600"),
        ]);
        let Decision::GiveUp {
            reason: Some(reason),
        } = decide(&policy(), 1, Some(403), &h, at(1000))
        else {
            panic!("expected a give-up with a reason");
        };
        assert!(reason.contains("4600"), "{reason}");
        assert!(reason.contains("3601 s"), "{reason}");
    }

    #[test]
    fn a_long_retry_after_gives_up_saying_so() {
        let h = headers(&[("retry-after", "3600")]);
        assert!(matches!(
            decide(&policy(), 1, Some(429), &h, at(0)),
            Decision::GiveUp { reason: Some(r) } if r.contains("3600 s")
        ));
    }

    #[test]
    fn remaining_quota_on_a_forbidden_is_a_plain_forbidden() {
        let h = headers(&[
            ("x-ratelimit-remaining", "12"),
            ("x-ratelimit-reset", "1010"),
        ]);
        assert_eq!(
            decide(&policy(), 1, Some(403), &h, at(1000)),
            Decision::GiveUp { reason: None }
        );
    }

    #[derive(Debug)]
    struct Canned(u16, HeaderMap);
    impl Answer for Canned {
        fn status_code(&self) -> u16 {
            self.0
        }
        fn header_map(&self) -> &HeaderMap {
            &self.1
        }
    }

    fn recording_policy() -> (RetryPolicy, Arc<Mutex<Vec<Duration>>>) {
        let slept = Arc::new(Mutex::new(Vec::new()));
        let log = slept.clone();
        let policy = RetryPolicy {
            sleep: Arc::new(move |d| {
                log.lock().unwrap().push(d);
                Box::pin(async {})
            }),
            ..RetryPolicy::default()
        };
        (policy, slept)
    }

    #[tokio::test]
    async fn two_bad_gateways_then_success_sleeps_twice_and_returns_the_success() {
        let (policy, slept) = recording_policy();
        let mut answers = vec![200, 502, 502];
        let answer = send_with_retry(&policy, "GET /x", || {
            let status = answers.pop().unwrap();
            async move { Ok::<_, Failure>(Canned(status, HeaderMap::new())) }
        })
        .await
        .unwrap();
        assert_eq!(answer.0, 200);
        assert_eq!(
            *slept.lock().unwrap(),
            vec![Duration::from_millis(500), Duration::from_secs(1)]
        );
    }

    #[tokio::test]
    async fn a_not_found_is_handed_back_to_the_caller_untried() {
        let (policy, slept) = recording_policy();
        let mut calls = 0;
        let answer = send_with_retry(&policy, "GET /x", || {
            calls += 1;
            async { Ok::<_, Failure>(Canned(404, HeaderMap::new())) }
        })
        .await
        .unwrap();
        assert_eq!((answer.0, calls), (404, 1));
        assert!(slept.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn connection_errors_exhaust_the_attempts_and_name_the_call() {
        let (policy, _) = recording_policy();
        let mut calls = 0;
        let error = send_with_retry(&policy, "POST /repos/o/r/check-runs", || {
            calls += 1;
            async { Err::<Canned, _>(Failure::transient(anyhow!("connection refused"))) }
        })
        .await
        .unwrap_err();
        assert_eq!(calls, 4);
        let text = format!("{error:#}");
        assert!(text.contains("POST /repos/o/r/check-runs"), "{text}");
        assert!(text.contains("connection refused"), "{text}");
    }

    #[tokio::test]
    async fn a_permanent_failure_is_not_retried() {
        let (policy, _) = recording_policy();
        let mut calls = 0;
        let result = send_with_retry(&policy, "GET /x", || {
            calls += 1;
            async { Err::<Canned, _>(Failure::permanent(anyhow!("bad key"))) }
        })
        .await;
        assert!(result.is_err());
        assert_eq!(calls, 1);
    }

    #[tokio::test]
    async fn an_attempt_that_hangs_times_out_and_is_retried() {
        let (mut policy, _) = recording_policy();
        policy.attempt_timeout = Duration::from_millis(20);
        let mut calls = 0;
        let answer = send_with_retry(&policy, "GET /x", || {
            calls += 1;
            let hang = calls == 1;
            async move {
                if hang {
                    std::future::pending::<()>().await;
                }
                Ok::<_, Failure>(Canned(200, HeaderMap::new()))
            }
        })
        .await
        .unwrap();
        assert_eq!((answer.0, calls), (200, 2));
    }
}
