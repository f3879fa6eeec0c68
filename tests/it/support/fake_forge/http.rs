//! The HTTP both forges are served over, written once: a request as the
//! handlers read it, the answers they refuse with, recording every request,
//! failures injected on demand, `ETag`s and 304s, and the paging of a list
//! (`page` and a page size, a `Link` to the next page) in each forge's words.

use super::*;

/// A request as the handlers read it.
pub(super) struct Request<'a> {
    pub(super) method: &'a str,
    pub(super) query: &'a HashMap<String, String>,
    pub(super) headers: &'a HeaderMap,
    pub(super) body: Option<&'a Value>,
}

impl Request<'_> {
    pub(super) fn body_str(&self, field: &str) -> Option<&str> {
        self.body?.get(field)?.as_str()
    }

    /// The JSON body the request must carry (422 without one).
    pub(super) fn required_body(&self) -> Result<&Value, Response> {
        self.body
            .ok_or_else(|| unprocessable("a body is required".into()))
    }

    /// A body string field the request must carry (422 without it).
    pub(super) fn required_str(&self, field: &str) -> Result<String, Response> {
        self.body_str(field)
            .map(str::to_owned)
            .ok_or_else(|| unprocessable(format!("{field} is required")))
    }

    pub(super) fn authorization(&self) -> Option<(&str, &str)> {
        let value = self.headers.get("authorization")?.to_str().ok()?;
        let (scheme, credential) = value.split_once(' ')?;
        Some((scheme, credential.trim()))
    }
}

/// A handler's answer; a refusal is the `Err`, so `?` answers early.
pub(super) type Answer = Result<Response, Response>;

pub(super) fn answer(status: u16, body: Value) -> Response {
    (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response()
}

pub(super) fn not_found() -> Response {
    answer(404, json!({ "message": "Not Found" }))
}

pub(super) fn forbidden(why: &str) -> Response {
    answer(403, json!({ "message": why }))
}

pub(super) fn unauthorized(why: &str) -> Response {
    answer(401, json!({ "message": why }))
}

pub(super) fn unprocessable(why: String) -> Response {
    answer(
        422,
        json!({ "message": "Validation Failed", "errors": [why] }),
    )
}

/// A path segment that must be a number (404 otherwise, as both forges answer).
pub(super) fn number(segment: &str) -> Result<u64, Response> {
    segment.parse().map_err(|_| not_found())
}

pub(super) fn parse_query(query: Option<&str>) -> HashMap<String, String> {
    query
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

pub(super) fn record(
    state: &mut State,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Option<Value>,
) {
    let interesting = ["authorization", "accept", "content-type", "user-agent"];
    state.requests.push(RecordedRequest {
        method: method.as_str().to_owned(),
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers: interesting
            .iter()
            .filter_map(|name| {
                let value = headers.get(*name)?.to_str().ok()?;
                Some(((*name).to_owned(), value.to_owned()))
            })
            .collect(),
        body,
    });
}

/// The answer of the first failure rule that matches, which is used up.
pub(super) fn take_failure(state: &mut State, method: &str, path: &str) -> Option<Response> {
    let index = state
        .fail_rules
        .iter()
        .position(|r| r.method == method && path.starts_with(&r.path_prefix))?;
    let rule = state.fail_rules.remove(index);
    let mut response = answer(rule.status, json!({ "message": "injected failure" }));
    for (name, value) in rule.headers {
        response.headers_mut().insert(
            axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    Some(response)
}

/// A GET answered 200 carries an `ETag` of its body; asked again with it in
/// `If-None-Match`, it is answered 304 with no body, as both forges do.
pub(super) async fn conditional(
    method: &Method,
    headers: &HeaderMap,
    response: Response,
) -> Response {
    if method != Method::GET || response.status() != StatusCode::OK {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .expect("the fake's own answer is in memory");
    let etag = format!("\"{}\"", sha256_hex(&bytes));
    let asked = headers
        .get("if-none-match")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|t| t.trim() == etag));
    parts.headers.insert("etag", etag.parse().unwrap());
    if asked {
        parts.status = StatusCode::NOT_MODIFIED;
        parts.headers.remove("content-type");
        return Response::from_parts(parts, axum::body::Body::empty());
    }
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The page size parameter of `forge` and the most a page holds: GitHub's
/// `per_page` (at most 100), Forgejo's `limit` (at most 50, its default
/// `MAX_RESPONSE_ITEMS`).
fn page_size(forge: ForgeKind) -> (&'static str, usize) {
    match forge {
        ForgeKind::GitHub => ("per_page", 100),
        ForgeKind::Forgejo => ("limit", 50),
    }
}

/// `page` (from 1) and the page size (30 unless asked), as `forge` reads them.
fn page_of(req: &Request, forge: ForgeKind) -> Result<(usize, usize), Response> {
    let (size, most) = page_size(forge);
    let read = |name: &str, default: usize| match req.query.get(name) {
        None => Ok(default),
        Some(text) => text
            .parse::<usize>()
            .map_err(|_| unprocessable(format!("{name} `{text}` is not a number"))),
    };
    Ok((read("page", 1)?.max(1), read(size, 30)?.clamp(1, most)))
}

/// One page of `items`, each rendered by `render`, as `forge` pages a list:
/// with a `Link: <…page=N+1…>; rel="next"` header when more items follow.
pub(super) fn one_page<T>(
    state: &mut State,
    req: &Request,
    forge: ForgeKind,
    items: &[T],
    render: impl Fn(&mut State, &T) -> Value,
) -> Answer {
    let (page, size) = page_of(req, forge)?;
    let shown: Vec<Value> = items
        .iter()
        .skip((page - 1) * size)
        .take(size)
        .map(|item| render(state, item))
        .collect();
    let mut response = answer(200, Value::Array(shown));
    if page * size < items.len() {
        let mut query: Vec<String> = req
            .query
            .iter()
            .filter(|(k, _)| k.as_str() != "page")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        query.sort();
        query.push(format!("page={}", page + 1));
        let link = format!("<http://fake.invalid/?{}>; rel=\"next\"", query.join("&"));
        response.headers_mut().insert("link", link.parse().unwrap());
    }
    Ok(response)
}

/// The `since` query parameter (ISO 8601 `YYYY-MM-DDTHH:MM:SSZ`), read as
/// both forges document it: what was updated at or after that time.
pub(super) fn since_filter(req: &Request) -> Result<Option<String>, Response> {
    let Some(since) = req.query.get("since") else {
        return Ok(None);
    };
    let since = since.replace("%3A", ":").replace("%3a", ":");
    let b = since.as_bytes();
    let shaped = b.len() == 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'Z';
    if !shaped {
        return Err(unprocessable(format!(
            "since `{since}` is not an ISO 8601 time"
        )));
    }
    Ok(Some(since))
}
