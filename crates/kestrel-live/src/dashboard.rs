//! The dashboard's HTTP server: the pages of [`kestrel_view::dashboard`] (compiled in), its
//! `/api/...` answers from a [`Source`], and `/api/stream`, server-sent events that say
//! "the state changed" (clients then fetch what they show).
//!
//! Each client's stream reads a [`watch`] channel: it holds the latest version only, so a
//! slow or stalled browser has one pending update at most and the publisher never waits
//! for it. Answers are computed on the blocking pool (predicted starts take seconds on a
//! large cluster), off the tasks that accept connections.

use futures::StreamExt;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use kestrel_view::dashboard::{assets, ApiError};
use std::convert::Infallible;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Where the answers come from: a simulated run's timeline, or the live leader's state.
pub trait Source: Send + Sync + 'static {
    /// Answers an `/api/...` path (`query`: after the `?`) as JSON.
    fn answer(&self, path: &str, query: Option<&str>) -> Result<String, ApiError>;
}

type Body = BoxBody<Bytes, Infallible>;

fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .header("cache-control", "no-store")
        .body(Full::new(body.into()).boxed())
        .expect("static response parts")
}

/// `/api/stream`: a comment to open, then `event: update` with the version on every change.
fn stream(mut updates: watch::Receiver<u64>) -> Response<Body> {
    let first = format!(
        ": kestrel\nretry: 2000\nevent: update\ndata: {}\n\n",
        *updates.borrow_and_update()
    );
    let changes = futures::stream::unfold(updates, |mut rx| async move {
        rx.changed().await.ok()?;
        let version = *rx.borrow_and_update();
        Some((format!("event: update\ndata: {version}\n\n"), rx))
    });
    let body = futures::stream::once(async move { first })
        .chain(changes)
        .map(|s| Ok::<_, Infallible>(Frame::data(Bytes::from(s))));
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-store")
        .body(BodyExt::boxed(StreamBody::new(body)))
        .expect("static response parts")
}

async fn respond(
    req: Request<Incoming>,
    source: Arc<dyn Source>,
    updates: watch::Receiver<u64>,
) -> Response<Body> {
    let path = req.uri().path().to_string();
    let query = req.uri().query().map(str::to_string);
    if let Some((content_type, body)) = assets::file(&path) {
        return full(StatusCode::OK, content_type, body);
    }
    if path == "/api/stream" {
        return stream(updates);
    }
    if !path.starts_with("/api/") {
        let e = ApiError::not_found(format!(
            "not found: no page {path:?}; open / for the dashboard"
        ));
        return full(StatusCode::NOT_FOUND, "application/json", e.json());
    }
    let answered =
        tokio::task::spawn_blocking(move || source.answer(&path, query.as_deref())).await;
    match answered {
        Ok(Ok(json)) => full(StatusCode::OK, "application/json", json),
        Ok(Err(e)) => full(
            StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            "application/json",
            e.json(),
        ),
        Err(e) => full(
            StatusCode::INTERNAL_SERVER_ERROR,
            "application/json",
            ApiError {
                status: 500,
                message: format!("the answer failed: {e}"),
            }
            .json(),
        ),
    }
}

/// Serves the dashboard until `shutdown` fires; `updates` carries the state's version.
pub async fn serve(
    listener: TcpListener,
    source: Arc<dyn Source>,
    updates: watch::Receiver<u64>,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    kestrel_http::serve(listener, shutdown, move |req| {
        let (source, updates) = (source.clone(), updates.clone());
        respond(req, source, updates)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct Fixed;
    impl Source for Fixed {
        fn answer(&self, path: &str, _query: Option<&str>) -> Result<String, ApiError> {
            match path {
                "/api/summary" => Ok("{\"source\":\"test\"}".into()),
                _ => Err(ApiError::not_found(format!("not found: {path:?}"))),
            }
        }
    }

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pages_answers_and_a_stream_that_stalled_clients_do_not_hold() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (publish, updates) = watch::channel(0u64);
        let (stop, shutdown) = watch::channel(false);
        let server = tokio::spawn(serve(listener, Arc::new(Fixed), updates, shutdown));
        let page = get(addr, "/").await;
        assert!(
            page.starts_with("HTTP/1.1 200") && page.contains("/assets/app.js"),
            "{page}"
        );
        assert!(get(addr, "/assets/app.js").await.contains("EventSource"));
        assert!(get(addr, "/api/summary")
            .await
            .ends_with("{\"source\":\"test\"}"));
        let missing = get(addr, "/api/pod/ns/ghost").await;
        assert!(
            missing.starts_with("HTTP/1.1 404")
                && missing.contains("not found: \\\"/api/pod/ns/ghost\\\""),
            "{missing}"
        );
        assert!(get(addr, "/nowhere").await.starts_with("HTTP/1.1 404"));
        // Clients that open the stream and never read.
        let mut stalled = Vec::new();
        for _ in 0..200 {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET /api/stream HTTP/1.1\r\nhost: x\r\n\r\n")
                .await
                .unwrap();
            stalled.push(s);
        }
        // Many updates: sending never waits for a client.
        for v in 1..=20_000u64 {
            publish.send_replace(v);
        }
        let mut reader = tokio::net::TcpStream::connect(addr).await.unwrap();
        reader
            .write_all(b"GET /api/stream HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut seen = String::new();
        let mut buf = [0u8; 4096];
        while !seen.contains("data: 20001") {
            if seen.contains("data: 20000\n") {
                publish.send_replace(20_001);
            }
            let n = reader.read(&mut buf).await.unwrap();
            assert!(n > 0, "stream closed: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        assert!(seen.contains("text/event-stream"));
        stop.send_replace(true);
        server.await.unwrap().unwrap();
        drop(stalled);
    }
}
