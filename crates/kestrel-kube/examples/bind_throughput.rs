//! Decisions/s in memory vs binds/s through the binder against an in-process mock API
//! server that answers at once: `cargo run --release -p kestrel-kube --example bind_throughput`.
//! The second figure measures Kestrel's client side (serialisation, HTTP request building,
//! 16 binds in flight); a real API server's latency and write rate come on top.

use futures::stream::{self, StreamExt};
use http::{Request, Response};
use k8s_openapi::api::core::v1::{Node, Pod};
use kestrel_core::SchedulerConfig;
use kestrel_kube::api::ApiWriter;
use kestrel_kube::index::ClusterState;
use kestrel_kube::limiter::Limiter;
use kube::client::Body;
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

const NODES: usize = 1000;
const PODS: usize = 5000;

fn main() {
    let mut state = ClusterState::new(SchedulerConfig::default(), "kestrel");
    for i in 0..NODES {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": format!("gpu-{i:04}"),
            "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            "status": {"allocatable": {"cpu": "224", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": "8"}}}))
        .unwrap();
        state.apply_node(&node).unwrap();
    }
    let t = Instant::now();
    for i in 0..PODS {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": format!("p-{i}"), "namespace": "ml", "uid": format!("u{i}")},
            "spec": {"schedulerName": "kestrel", "priority": 0, "containers": [{"name": "c",
                "resources": {"requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "1"}}}]}}))
        .unwrap();
        state.apply_pod(&pod);
    }
    let ingest = t.elapsed();
    let t = Instant::now();
    let out = state.cycle(0);
    let cycle = t.elapsed();
    assert_eq!(out.binds.len(), PODS);
    println!(
        "in memory: {PODS} pods ingested from Pod objects in {:.1} ms; one cycle placed them in {:.1} ms = {:.0} decisions/s",
        ingest.as_secs_f64() * 1e3,
        cycle.as_secs_f64() * 1e3,
        PODS as f64 / cycle.as_secs_f64()
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        tokio::spawn(async move {
            while let Some((req, send)) = handle.next_request().await {
                let _ = req.into_body().collect_bytes().await;
                send.send_response(
                    Response::builder()
                        .status(201)
                        .body(Body::from(
                            br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","code":201}"#.to_vec(),
                        ))
                        .unwrap(),
                );
            }
        });
        let client = kube::Client::new(service, "default");
        let writer = ApiWriter::new(client, "kestrel", "bench", Arc::new(Limiter::unlimited()));
        let t = Instant::now();
        let done = stream::iter(out.binds)
            .map(|job| {
                let writer = writer.clone();
                async move { writer.bind(&job, || true).await }
            })
            .buffer_unordered(16)
            .count()
            .await;
        let took = t.elapsed();
        println!(
            "binder vs mock API: {done} binds (annotation PATCH + binding POST each) in {:.0} ms = {:.0} binds/s",
            took.as_secs_f64() * 1e3,
            done as f64 / took.as_secs_f64()
        );
    });
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        if let Some(line) = status.lines().find(|l| l.starts_with("VmHWM")) {
            println!(
                "peak resident memory: {}",
                line.trim_start_matches("VmHWM:").trim()
            );
        }
    }
}
