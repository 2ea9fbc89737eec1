//! The driver against a mocked API server (`tower-test`): the exact requests it makes.

use http::{Request, Response};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kestrel_core::PodId;
use kestrel_live::api::{ApiWriter, GpuIndicesWrite};
use kestrel_live::driver::{self, DriverConfig, Ended};
use kestrel_live::index::{
    BindOutcome, BindWrite, CheckpointWrite, EvictWrite, NominationWrite, QueueStatusWrite,
    StatusWrite,
};
use kestrel_live::leader::{LeaderElector, LeaseConfig};
use kestrel_live::limiter::Limiter;
use kestrel_live::metrics::Metrics;
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tower_test::mock::{self, Handle, SendResponse};

mod binds;
mod leading;
mod lease;

type MockHandle = Handle<Request<Body>, Response<Body>>;

fn mock_client() -> (Client, MockHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), handle)
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    /// Path and query.
    uri: String,
    content_type: Option<String>,
    body: Value,
}

async fn next(handle: &mut MockHandle) -> (Seen, SendResponse<Response<Body>>) {
    let (req, send) = handle.next_request().await.expect("a request");
    let method = req.method().to_string();
    let uri = req.uri().to_string();
    let content_type = req
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = req.into_body().collect_bytes().await.unwrap();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (
        Seen {
            method,
            uri,
            content_type,
            body,
        },
        send,
    )
}

/// The next request, checked for its method, path and query, and content type.
async fn expect(
    handle: &mut MockHandle,
    method: &str,
    uri: &str,
    content_type: Option<&str>,
) -> (Seen, SendResponse<Response<Body>>) {
    let (seen, send) = next(handle).await;
    assert_eq!(seen.method, method);
    assert_eq!(seen.uri, uri);
    if content_type.is_some() {
        assert_eq!(seen.content_type.as_deref(), content_type);
    }
    (seen, send)
}

fn reply(send: SendResponse<Response<Body>>, code: u16, body: Value) {
    send.send_response(
        Response::builder()
            .status(code)
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap(),
    );
}

fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": reason, "reason": reason, "code": code})
}

/// A writer in `patch` mode (the annotation, then the binding), whose request shapes most
/// tests check; `binding` mode has its own test.
fn writer(client: Client) -> ApiWriter {
    ApiWriter::new(
        client,
        "kestrel",
        "kestrel-replica-a",
        Arc::new(Limiter::unlimited()),
    )
    .with_gpu_indices_write(GpuIndicesWrite::Patch)
}

fn job(gpus: Option<&str>) -> BindWrite {
    BindWrite {
        id: PodId(0),
        namespace: "ml".into(),
        name: "train-0".into(),
        uid: "uid-1".into(),
        node: "gpu-0".into(),
        gpu_indices: gpus.map(str::to_string),
        claims: Vec::new(),
        extended_claim: None,
        provision: Vec::new(),
    }
}

fn lease(holder: &str, transitions: i32) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "kestrel", "namespace": "kube-system", "resourceVersion": "7"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                 "acquireTime": "2025-01-01T00:00:00.000000Z",
                 "renewTime": "2025-01-01T00:00:05.000000Z",
                 "leaseTransitions": transitions}
    })
}

// For the whole loop (listing -> rebuilt state -> binds, against a scripted API server).

fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": format!("{kind}List"), "metadata": {"resourceVersion": "100"}, "items": items})
}
