//! The dashboard's HTML, JavaScript and CSS, hand-written and compiled into the binary: no
//! CDN, no network, no Node.js at run time or build time.

/// `(path, content type, body)` of every static file the dashboard serves.
pub const FILES: &[(&str, &str, &str)] = &[
    (
        "/",
        "text/html; charset=utf-8",
        include_str!("assets/index.html"),
    ),
    (
        "/assets/app.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/app.js"),
    ),
    (
        "/assets/style.css",
        "text/css; charset=utf-8",
        include_str!("assets/style.css"),
    ),
];

/// The static file at `path` (`/index.html` is `/`): its content type and body.
pub fn file(path: &str) -> Option<(&'static str, &'static str)> {
    let path = if path == "/index.html" { "/" } else { path };
    FILES
        .iter()
        .find(|(p, _, _)| *p == path)
        .map(|(_, t, body)| (*t, *body))
}
