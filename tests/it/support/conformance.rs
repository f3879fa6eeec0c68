//! Checks recorded requests against the forges' own API descriptions: the
//! method and path template exist (GitHub's OpenAPI 3 at `/`, Forgejo's
//! Swagger 2 under its basePath `/api/v1`), each path parameter has its
//! type (a run id is an integer), and a JSON body satisfies the operation's
//! schema (required fields, types, enums, lengths, how many fields, what
//! fields beyond the listed ones must be, `$ref`s resolved). Each
//! description is parsed once per test binary.

use super::fake_forge::RecordedRequest;
use super::payloads::fixtures_dir;
use serde_json::Value;
use std::sync::OnceLock;

fn load(name: &str) -> Value {
    let path = fixtures_dir().join("openapi").join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn github_doc() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| load("github-api.github.com.json"))
}

fn forgejo_doc() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| load("forgejo-swagger.v1.json"))
}

/// One line per problem, naming the request; empty when every request is allowed.
pub fn conformance_violations(requests: &[RecordedRequest]) -> Vec<String> {
    let mut out = Vec::new();
    for request in requests {
        let (doc, path, forge) = match request.path.strip_prefix("/api/v1") {
            Some(rest) if rest.starts_with('/') => (forgejo_doc(), rest, "Forgejo"),
            _ => (github_doc(), request.path.as_str(), "GitHub"),
        };
        let name = format!("{} {}", request.method, request.path);
        let Some((template, item)) = find_path(doc, path) else {
            out.push(format!("{name}: no such path in {forge}'s API description"));
            continue;
        };
        let Some(operation) = item.get(request.method.to_ascii_lowercase()) else {
            out.push(format!(
                "{name}: {forge} documents no {} for {template}",
                request.method
            ));
            continue;
        };
        check_path_parameters(doc, item, operation, template, path, &name, &mut out);
        let Some((schema, required)) = body_schema(doc, item, operation) else {
            continue;
        };
        match &request.body {
            None if required => out.push(format!("{name}: the body is required")),
            None => {}
            Some(body) => check(doc, schema, body, "body", &name, true, &mut out),
        }
    }
    out
}

fn find_path<'d>(doc: &'d Value, path: &str) -> Option<(&'d str, &'d Value)> {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    doc["paths"]
        .as_object()?
        .iter()
        .filter_map(|(template, item)| {
            let parts: Vec<&str> = template.trim_start_matches('/').split('/').collect();
            if parts.len() != segments.len() {
                return None;
            }
            let mut literal = 0;
            for (part, segment) in parts.iter().zip(&segments) {
                if part.starts_with('{') && part.ends_with('}') {
                    if segment.is_empty() {
                        return None;
                    }
                } else if part == segment {
                    literal += 1;
                } else {
                    return None;
                }
            }
            Some((literal, template.as_str(), item))
        })
        .max_by_key(|(literal, _, _)| *literal)
        .map(|(_, template, item)| (template, item))
}

/// The operation's parameters and its path's (resolved), both forms.
fn parameters<'d>(
    doc: &'d Value,
    item: &'d Value,
    operation: &'d Value,
) -> impl Iterator<Item = &'d Value> {
    operation["parameters"]
        .as_array()
        .into_iter()
        .chain(item["parameters"].as_array())
        .flatten()
        .map(move |p| resolve(doc, p))
}

/// Each `{name}` of the template against its `in: path` parameter's type
/// (OpenAPI 3 `schema`, Swagger 2 the parameter itself).
fn check_path_parameters(
    doc: &Value,
    item: &Value,
    operation: &Value,
    template: &str,
    path: &str,
    name: &str,
    out: &mut Vec<String>,
) {
    let parts = template.trim_start_matches('/').split('/');
    let segments = path.trim_start_matches('/').split('/');
    for (part, segment) in parts.zip(segments) {
        let Some(param) = part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) else {
            continue;
        };
        let declared =
            parameters(doc, item, operation).find(|p| p["in"] == "path" && p["name"] == param);
        let Some(declared) = declared else {
            continue;
        };
        let schema = resolve(doc, declared.get("schema").unwrap_or(declared));
        let numeric = matches!(schema["type"].as_str(), Some("integer" | "number"))
            || schema.get("oneOf").is_some();
        let value = match segment.parse::<i64>() {
            Ok(n) if numeric => Value::from(n),
            _ => Value::from(segment),
        };
        check(
            doc,
            schema,
            &value,
            &format!("path.{param}"),
            name,
            true,
            out,
        );
    }
}

/// The body's schema and whether a body is required (OpenAPI 3 `requestBody`
/// or a Swagger 2 `in: body` parameter).
fn body_schema<'d>(
    doc: &'d Value,
    item: &'d Value,
    operation: &'d Value,
) -> Option<(&'d Value, bool)> {
    if let Some(request_body) = operation.get("requestBody") {
        let request_body = resolve(doc, request_body);
        let schema = request_body.pointer("/content/application~1json/schema")?;
        let required = request_body["required"].as_bool().unwrap_or(false);
        return Some((schema, required));
    }
    parameters(doc, item, operation)
        .find(|p| p["in"] == "body")
        .map(|p| (&p["schema"], p["required"].as_bool().unwrap_or(false)))
}

fn resolve<'d>(doc: &'d Value, mut schema: &'d Value) -> &'d Value {
    while let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let pointer = reference.trim_start_matches('#');
        match doc.pointer(pointer) {
            Some(target) => schema = target,
            None => break,
        }
    }
    schema
}

/// `closed`: fields the schema does not list are reported (off inside
/// `allOf`, where each part lists only some of them).
fn check(
    doc: &Value,
    schema: &Value,
    value: &Value,
    at: &str,
    name: &str,
    closed: bool,
    out: &mut Vec<String>,
) {
    let schema = resolve(doc, schema);
    for part in schema["allOf"].as_array().into_iter().flatten() {
        check(doc, part, value, at, name, false, out);
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(alternatives) = schema[key].as_array() {
            let fits = alternatives.iter().any(|alternative| {
                let mut problems = Vec::new();
                check(doc, alternative, value, at, name, false, &mut problems);
                problems.is_empty()
            });
            if !fits {
                out.push(format!("{name}: {at} fits none of the {key} alternatives"));
            }
        }
    }
    if value.is_null() && (schema["nullable"] == true || schema["x-nullable"] == true) {
        return;
    }
    if let Some(kind) = schema["type"].as_str() {
        let fits = match kind {
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "object" => value.is_object(),
            "array" => value.is_array(),
            _ => true,
        };
        if !fits {
            out.push(format!("{name}: {at} should be {kind}, is {value}"));
            return;
        }
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(value) {
            out.push(format!(
                "{name}: {at} = {value} is not one of {}",
                Value::Array(allowed.clone())
            ));
        }
    }
    if let (Some(max), Some(text)) = (schema["maxLength"].as_u64(), value.as_str()) {
        let length = text.chars().count() as u64;
        if length > max {
            out.push(format!(
                "{name}: {at} is {length} characters; at most {max} allowed"
            ));
        }
    }
    if let Some(object) = value.as_object() {
        if let Some(max) = schema["maxProperties"].as_u64() {
            if object.len() as u64 > max {
                out.push(format!(
                    "{name}: {at} has {} fields; at most {max} allowed",
                    object.len()
                ));
            }
        }
        for field in schema["required"].as_array().into_iter().flatten() {
            if let Some(field) = field.as_str() {
                if !object.contains_key(field) {
                    out.push(format!("{name}: {at}.{field} is required"));
                }
            }
        }
        let properties = schema["properties"].as_object();
        for (field, inner) in object {
            match properties.and_then(|p| p.get(field)) {
                Some(property) => check(
                    doc,
                    property,
                    inner,
                    &format!("{at}.{field}"),
                    name,
                    true,
                    out,
                ),
                None if closed
                    && properties.is_some()
                    && !allows_more(&schema["additionalProperties"]) =>
                {
                    out.push(format!("{name}: {at}.{field} is not a documented field"))
                }
                None if schema["additionalProperties"].is_object() => check(
                    doc,
                    &schema["additionalProperties"],
                    inner,
                    &format!("{at}.{field}"),
                    name,
                    true,
                    out,
                ),
                None => {}
            }
        }
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for (i, element) in array.iter().enumerate() {
            check(doc, items, element, &format!("{at}[{i}]"), name, true, out);
        }
    }
}

fn allows_more(additional: &Value) -> bool {
    additional == &Value::Bool(true) || additional.is_object()
}
