//! `/docs/<page>.md`: this build's own documentation, as HTML. The reports
//! link here (when `WAVEGATE_PUBLIC_URL` says where the server is reached),
//! so what a reviewer reads about digests and gates is what the running
//! version does, with no site to publish and keep in step.
//!
//! The pages are `docs/*.md`, built into the binary; each heading gets the
//! `id` GitHub gives it, so `plan-files.md#digests` works here as there.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// The pages, by file name.
const PAGES: &[(&str, &str)] = &[
    (
        "approvals-and-applying.md",
        include_str!("../../docs/approvals-and-applying.md"),
    ),
    (
        "architecture.md",
        include_str!("../../docs/architecture.md"),
    ),
    ("atlantis.md", include_str!("../../docs/atlantis.md")),
    (
        "configuration.md",
        include_str!("../../docs/configuration.md"),
    ),
    ("deployment.md", include_str!("../../docs/deployment.md")),
    ("drift.md", include_str!("../../docs/drift.md")),
    ("glossary.md", include_str!("../../docs/glossary.md")),
    ("operations.md", include_str!("../../docs/operations.md")),
    ("pages.md", include_str!("../../docs/pages.md")),
    ("plan-files.md", include_str!("../../docs/plan-files.md")),
    ("terraform.md", include_str!("../../docs/terraform.md")),
];

/// The screenshots the pages link (`images/…`), by file name.
const IMAGES: &[(&str, &[u8])] = &[
    (
        "pages-ledger.png",
        include_bytes!("../../docs/images/pages-ledger.png"),
    ),
    (
        "pages-live.png",
        include_bytes!("../../docs/images/pages-live.png"),
    ),
    (
        "pages-login.png",
        include_bytes!("../../docs/images/pages-login.png"),
    ),
    (
        "pages-pull-request.png",
        include_bytes!("../../docs/images/pages-pull-request.png"),
    ),
    (
        "pages-pull-requests.png",
        include_bytes!("../../docs/images/pages-pull-requests.png"),
    ),
    (
        "pages-queue-operator.png",
        include_bytes!("../../docs/images/pages-queue-operator.png"),
    ),
    (
        "pages-server.png",
        include_bytes!("../../docs/images/pages-server.png"),
    ),
];

/// `/docs/images/<name>`: a screenshot a page links.
pub(crate) async fn image(Path(name): Path<String>) -> Response {
    match IMAGES.iter().find(|(image, _)| *image == name) {
        Some((_, bytes)) => ([(header::CONTENT_TYPE, "image/png")], *bytes).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            format!("no image {name} in this build's docs\n"),
        )
            .into_response(),
    }
}

pub(crate) async fn page(Path(name): Path<String>) -> Response {
    match PAGES.iter().find(|(page, _)| *page == name) {
        Some((page, markdown)) => (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            html(page, markdown),
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            format!(
                "no page `{name}`; the docs are: {}\n",
                PAGES.iter().map(|(p, _)| *p).collect::<Vec<_>>().join(", ")
            ),
        )
            .into_response(),
    }
}

/// `markdown` as a page of its own, each heading with GitHub's anchor.
fn html(title: &str, markdown: &str) -> String {
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH;
    let events: Vec<Event<'_>> = Parser::new_ext(markdown, options).collect();
    let mut with_ids = Vec::with_capacity(events.len());
    let mut seen = std::collections::HashMap::<String, usize>::new();
    for (at, event) in events.iter().enumerate() {
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                let text: String = events[at + 1..]
                    .iter()
                    .take_while(|e| !matches!(e, Event::End(TagEnd::Heading(_))))
                    .filter_map(|e| match e {
                        Event::Text(t) | Event::Code(t) => Some(t.as_ref()),
                        _ => None,
                    })
                    .collect();
                let mut id = anchor(&text);
                let n = seen.entry(id.clone()).or_insert(0);
                if *n > 0 {
                    id = format!("{id}-{n}");
                }
                *n += 1;
                with_ids.push(Event::Html(format!("<{level} id=\"{id}\">").into()));
            }
            Event::End(TagEnd::Heading(level)) => {
                with_ids.push(Event::Html(format!("</{level}>\n").into()))
            }
            other => with_ids.push(other.clone()),
        }
    }
    let mut body = String::new();
    pulldown_cmark::html::push_html(&mut body, with_ids.into_iter());
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>wavegate: {title}</title>\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <style>body{{max-width:52rem;margin:2rem auto;padding:0 1rem;font:16px/1.5 system-ui,sans-serif}}\
         pre,code{{background:#f4f4f4}}pre{{padding:.5rem;overflow:auto}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:.2rem .4rem}}</style></head><body>\n{body}</body></html>\n"
    )
}

/// The anchor GitHub gives a heading: lower case, spaces as `-`, and only
/// letters, digits, `-` and `_` kept.
fn anchor(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_page_under_docs_is_served() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
        for entry in std::fs::read_dir(dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".md") {
                assert!(
                    PAGES.iter().any(|(p, _)| *p == name),
                    "docs/{name} is not in PAGES"
                );
            }
        }
    }

    #[test]
    fn every_image_under_docs_is_served() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/images");
        for entry in std::fs::read_dir(dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            assert!(
                IMAGES.iter().any(|(image, _)| *image == name),
                "docs/images/{name} is not in IMAGES"
            );
        }
    }

    #[test]
    fn headings_get_githubs_anchors() {
        assert_eq!(anchor("Digests"), "digests");
        assert_eq!(
            anchor("Planning a change (`wavegate plan`)"),
            "planning-a-change-wavegate-plan"
        );
        assert_eq!(
            anchor("`wavegate.toml` reference"),
            "wavegatetoml-reference"
        );
    }

    #[test]
    fn a_page_is_html_with_its_anchors_and_every_linked_page_is_served() {
        let page = html(
            "plan-files.md",
            PAGES.iter().find(|(p, _)| *p == "plan-files.md").unwrap().1,
        );
        assert!(page.contains("<h2 id=\"digests\">Digests</h2>"), "{page}");
        assert!(page.starts_with("<!doctype html>"));
        // The glossary links to the other pages by file name: each is here.
        let glossary = PAGES.iter().find(|(p, _)| *p == "glossary.md").unwrap().1;
        for (at, _) in glossary.match_indices("](") {
            let target = &glossary[at + 2..];
            let file = target.split(['#', ')']).next().unwrap();
            if file.ends_with(".md") {
                assert!(
                    PAGES.iter().any(|(p, _)| *p == file),
                    "{file} is not served"
                );
            }
        }
    }
}
