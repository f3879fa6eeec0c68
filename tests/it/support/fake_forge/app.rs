//! The GitHub App: its JWT, the installation tokens it is issued (each
//! expiring, revocable), `GET /app`, a repository's installation, the
//! manifest flow's conversion, and its webhook: deliveries sent to the
//! bot, each attempt logged, listed and redelivered through
//! `/app/hook/deliveries`.

use super::*;

/// The App's own routes (authenticated by its JWT, or by a manifest code).
pub(super) fn route(state: &mut State, req: &Request, path: &[&str]) -> Option<Answer> {
    let answer = match (req.method, path) {
        ("POST", ["app", "installations", id, "access_tokens"]) => issue_token(state, req, id),
        ("GET", ["app"]) => the_app(req),
        ("GET", ["app", "hook", "deliveries"]) => {
            verify_app_jwt(req).and_then(|()| list_hook_deliveries(state, req))
        }
        ("POST", ["app", "hook", "deliveries", id, "attempts"]) => redeliver(state, req, id),
        ("GET", ["repos", owner, name, "installation"]) => {
            installation_of_repo(state, req, &format!("{owner}/{name}"))
        }
        ("POST", ["app-manifests", code, "conversions"]) => convert_manifest(state, code),
        _ => return None,
    };
    Some(answer)
}

fn issue_token(state: &mut State, req: &Request, id: &str) -> Answer {
    verify_app_jwt(req)?;
    let installation = number(id)?;
    if !state.installations.contains_key(&installation) {
        return Err(not_found());
    }
    let token = format!("ghs_fake{}", state.id());
    let expires_at = state.now() + state.token_lifetime;
    state.tokens.push(IssuedToken {
        token: token.clone(),
        installation,
        expires_at,
        revoked: false,
    });
    Ok(answer(
        201,
        json!({
            "token": token,
            "expires_at": rfc3339(expires_at),
            "permissions": { "checks": "write", "issues": "write", "pull_requests": "write", "contents": "read" },
            "repository_selection": "all",
        }),
    ))
}

fn the_app(req: &Request) -> Answer {
    verify_app_jwt(req)?;
    Ok(answer(
        200,
        json!({
            "id": APP_ID,
            "slug": APP_SLUG,
            "name": APP_SLUG,
            "owner": people::github_user("acme", 1),
            "html_url": format!("https://github.com/apps/{APP_SLUG}"),
            "permissions": {},
            "events": [],
        }),
    ))
}

/// `POST /app/hook/deliveries/{id}/attempts`: the attempt's webhook is
/// sent again (once the fake's lock is released), as a redelivery.
fn redeliver(state: &mut State, req: &Request, id: &str) -> Answer {
    verify_app_jwt(req)?;
    let id = number(id)?;
    let attempt = state
        .hook_deliveries
        .iter()
        .find(|d| d.id == id)
        .cloned()
        .ok_or_else(not_found)?;
    state.outbox.push(Outgoing {
        guid: attempt.guid,
        event: attempt.event,
        payload: attempt.payload,
        redelivery: true,
    });
    Ok(answer(202, json!({})))
}

fn installation_of_repo(state: &mut State, req: &Request, full_name: &str) -> Answer {
    verify_app_jwt(req)?;
    let repo = state
        .repo_mut(ForgeKind::GitHub, full_name)
        .ok_or_else(not_found)?;
    let id = repo.handle.installation.ok_or_else(not_found)?;
    let account = state.installations.get(&id).cloned().unwrap_or_default();
    let account_id = state.user_id(&account);
    Ok(answer(
        200,
        json!({
            "id": id,
            "app_id": APP_ID,
            "app_slug": APP_SLUG,
            "target_type": "Organization",
            "account": people::github_user(&account, account_id),
            "permissions": {},
            "events": ["pull_request", "issue_comment"],
        }),
    ))
}

/// `POST /app-manifests/{code}/conversions`: a code from `manifest_code`,
/// once, for the App's credentials.
fn convert_manifest(state: &mut State, code: &str) -> Answer {
    if !state.manifest_codes.remove(code) {
        return Err(not_found());
    }
    Ok(answer(
        201,
        json!({
            "id": APP_ID,
            "slug": APP_SLUG,
            "node_id": "A_fake",
            "name": "wavegate",
            "owner": people::github_user("octo-org", 1),
            "html_url": format!("https://github.com/apps/{APP_SLUG}"),
            "pem": APP_PRIVATE_KEY,
            "webhook_secret": MANIFEST_WEBHOOK_SECRET,
            "client_id": "Iv1.fakeclientid",
            "client_secret": "fake-client-secret",
            "permissions": {},
            "events": [],
            "created_at": rfc3339(state.now()),
            "updated_at": rfc3339(state.now()),
        }),
    ))
}

/// `GET /app/hook/deliveries`: newest first, `per_page` (default 30, at
/// most 100) from `cursor` on, `status` (`success`: 200-399, `failure`:
/// 400-599) filtering, and the next page's cursor in the `Link` header.
fn list_hook_deliveries(state: &State, req: &Request) -> Answer {
    let per_page: usize = match req.query.get("per_page") {
        Some(n) => n
            .parse()
            .map_err(|_| unprocessable(format!("per_page `{n}` is not a number")))?,
        None => 30,
    };
    let per_page = per_page.clamp(1, 100);
    let from = match req.query.get("cursor") {
        Some(cursor) => Some(
            cursor
                .strip_prefix("v1_")
                .and_then(|id| id.parse::<u64>().ok())
                .ok_or_else(|| answer(400, json!({ "message": "Invalid cursor" })))?,
        ),
        None => None,
    };
    let wanted = |code: u16| match req.query.get("status").map(String::as_str) {
        Some("success") => (200..400).contains(&code),
        Some("failure") => (400..600).contains(&code),
        _ => true,
    };
    let mut matching: Vec<&FakeHookDelivery> = state
        .hook_deliveries
        .iter()
        .filter(|d| from.is_none_or(|from| d.id <= from) && wanted(d.status_code))
        .collect();
    matching.sort_by_key(|d| std::cmp::Reverse(d.id));
    let page: Vec<Value> = matching
        .iter()
        .take(per_page)
        .map(|d| {
            json!({
                "id": d.id,
                "guid": d.guid,
                "delivered_at": rfc3339(d.delivered_at),
                "redelivery": d.redelivery,
                "duration": d.duration,
                "status": d.status,
                "status_code": d.status_code,
                "event": d.event,
                "action": d.action,
                "installation_id": d.installation_id,
                "repository_id": d.repository_id,
                "throttled_at": null,
            })
        })
        .collect();
    let mut response = answer(200, Value::Array(page));
    if let Some(next) = matching.get(per_page) {
        let host = req
            .headers
            .get("host")
            .and_then(|h| h.to_str().ok())
            .unwrap_or("127.0.0.1");
        let link = format!(
            "<http://{host}/app/hook/deliveries?per_page={per_page}&cursor=v1_{}>; rel=\"next\"",
            next.id
        );
        response
            .headers_mut()
            .insert("link", link.parse().expect("a header value"));
    }
    Ok(response)
}

#[derive(Deserialize)]
struct AppClaims {
    iss: Value,
    iat: u64,
    exp: u64,
}

pub(super) fn verify_app_jwt(req: &Request) -> Result<(), Response> {
    let Some(("Bearer", jwt)) = req.authorization() else {
        return Err(unauthorized("A JSON web token could not be decoded"));
    };
    let key = DecodingKey::from_rsa_pem(APP_PUBLIC_KEY.as_bytes()).expect("test public key");
    let mut validation = Validation::new(Algorithm::RS256);
    validation.set_required_spec_claims(&["exp"]);
    validation.leeway = 0;
    let claims = decode::<AppClaims>(jwt, &key, &validation)
        .map_err(|e| unauthorized(&format!("A JSON web token could not be decoded: {e}")))?
        .claims;
    let issuer_ok = claims.iss == json!(APP_ID) || claims.iss == json!(APP_ID.to_string());
    if !issuer_ok {
        return Err(unauthorized("'Issuer' claim ('iss') must be the App's id"));
    }
    if claims.exp.saturating_sub(claims.iat) > 600 {
        return Err(unauthorized(
            "'Expiration time' claim ('exp') is too far in the future",
        ));
    }
    Ok(())
}

pub(super) fn installation_of_token(state: &State, req: &Request) -> Result<u64, Response> {
    let Some((scheme, token)) = req.authorization() else {
        return Err(unauthorized("Requires authentication"));
    };
    if scheme != "token" && scheme != "Bearer" {
        return Err(unauthorized("Bad credentials"));
    }
    let issued = state
        .tokens
        .iter()
        .find(|t| t.token == token)
        .ok_or_else(|| unauthorized("Bad credentials"))?;
    if issued.revoked || issued.expires_at <= state.now() {
        return Err(unauthorized("Bad credentials"));
    }
    Ok(issued.installation)
}

/// Sends one webhook to the App's webhook (none set: nothing answers) and
/// logs the attempt as GitHub would.
pub(super) async fn send_webhook(shared: Shared, outgoing: Outgoing) -> (u16, Value) {
    let target = shared.lock().unwrap().app_webhook.clone();
    let started = std::time::Instant::now();
    let answered = match &target {
        Some(target) => {
            let signature = super::super::payloads::sign_github(&target.secret, &outgoing.payload);
            let sent = reqwest::Client::new()
                .post(&target.url)
                .timeout(Duration::from_secs(10))
                .header("content-type", "application/json")
                .header("user-agent", "GitHub-Hookshot/fake")
                .header("x-github-event", &outgoing.event)
                .header("x-github-delivery", &outgoing.guid)
                .header("x-hub-signature-256", signature)
                .body(outgoing.payload.clone())
                .send()
                .await;
            match sent {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let body = response.json::<Value>().await.unwrap_or(Value::Null);
                    Some((status, body))
                }
                Err(_) => None,
            }
        }
        None => None,
    };
    let duration = started.elapsed().as_secs_f64();
    let (status, body) = answered.unwrap_or((0, Value::Null));
    log_attempt(&mut shared.lock().unwrap(), outgoing, duration, status);
    (status, body)
}

fn log_attempt(state: &mut State, outgoing: Outgoing, duration: f64, status_code: u16) {
    let payload: Value = serde_json::from_slice(&outgoing.payload).unwrap_or(Value::Null);
    let status = match status_code {
        0 => "failed to connect".to_owned(),
        200..=299 => "OK".to_owned(),
        code => format!("Invalid HTTP Response: {code}"),
    };
    let id = state.id();
    state.hook_deliveries.push(FakeHookDelivery {
        id,
        guid: outgoing.guid,
        delivered_at: state.now(),
        redelivery: outgoing.redelivery,
        duration,
        status,
        status_code,
        event: outgoing.event,
        action: payload["action"].as_str().map(str::to_owned),
        installation_id: payload["installation"]["id"].as_u64(),
        repository_id: payload["repository"]["id"].as_u64(),
        payload: outgoing.payload,
    });
}

impl FakeForge {
    /// How long installation tokens issued from now on live.
    pub fn set_token_lifetime(&self, lifetime: Duration) {
        self.with(|s| s.token_lifetime = lifetime)
    }

    /// Every installation token issued so far stops working (GitHub answers 401).
    pub fn revoke_tokens(&self) {
        self.with(|s| s.tokens.iter_mut().for_each(|t| t.revoked = true))
    }

    /// A one-time manifest-flow code `POST /app-manifests/{code}/conversions` accepts.
    pub fn manifest_code(&self) -> String {
        self.with(|s| {
            let code = format!("manifest-code-{}", s.id());
            s.manifest_codes.insert(code.clone());
            code
        })
    }

    /// Where the App's webhook deliveries go (`url`, signed with `secret`).
    pub fn set_app_webhook(&self, url: &str, secret: &str) {
        self.with(|s| {
            s.app_webhook = Some(AppWebhook {
                url: url.to_owned(),
                secret: secret.to_owned(),
            })
        })
    }

    /// Delivers `payload` as an `event` webhook to the App's webhook, as
    /// GitHub does, and logs the attempt; the bot's status and JSON answer,
    /// and the delivery's guid (`X-GitHub-Delivery`).
    pub async fn deliver_webhook(&self, event: &str, payload: Vec<u8>) -> (u16, Value, String) {
        let guid = self.with(|s| {
            let n = s.id();
            format!("{n:08x}-0000-4000-8000-{n:012x}")
        });
        let outgoing = Outgoing {
            guid: guid.clone(),
            event: event.to_owned(),
            payload,
            redelivery: false,
        };
        let (status, body) = send_webhook(self.state.clone(), outgoing).await;
        (status, body, guid)
    }

    /// Logs an attempt of `guid` answered `status_code` without sending it
    /// (an answer the bot gave that GitHub did not wait for, say).
    pub fn log_webhook_attempt(&self, guid: &str, event: &str, payload: Vec<u8>, status_code: u16) {
        self.with(|s| {
            let outgoing = Outgoing {
                guid: guid.to_owned(),
                event: event.to_owned(),
                payload,
                redelivery: false,
            };
            log_attempt(s, outgoing, 10.0, status_code);
        })
    }

    /// Every delivery attempt logged, oldest first.
    pub fn hook_deliveries(&self) -> Vec<FakeHookDelivery> {
        self.with(|s| s.hook_deliveries.clone())
    }

    /// The redeliveries the App asked for (`POST /app/hook/deliveries/{id}/attempts`).
    pub fn redelivery_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| {
                r.method == "POST"
                    && r.path.starts_with("/app/hook/deliveries/")
                    && r.path.ends_with("/attempts")
            })
            .collect()
    }

    pub fn token_requests(&self) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/access_tokens"))
            .count()
    }
}
