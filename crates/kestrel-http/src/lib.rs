//! The HTTP server loop of Kestrel's small servers: the scheduler's metrics and health
//! endpoints and its dashboard (`kestrel-live`), and the node agent's metrics and health
//! endpoints (`kestrel-agent`). Each answers requests its own way; this crate only
//! accepts connections, serves each over HTTP/1.1 on its own task, and stops accepting
//! when told to shut down. It depends on nothing of Kestrel.

use hyper::body::{Body, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::future::Future;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Accepts connections on `listener` until `shutdown` is true, answering every request
/// with `respond` (HTTP/1.1, one task per connection). Returns an accept error as it
/// comes; a connection's own errors end that connection only.
pub async fn serve<R, F, B>(
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
    respond: R,
) -> std::io::Result<()>
where
    R: Fn(Request<Incoming>) -> F + Clone + Send + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => accepted?,
            _ = shutdown.wait_for(|s| *s) => return Ok(()),
        };
        let respond = respond.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let response = respond(req);
                async move { Ok::<_, Infallible>(response.await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
