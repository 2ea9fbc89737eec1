//! A fake kubelet for the nodes of a test: a bound pod becomes Running (with `startTime`
//! and a Ready condition), and Succeeded after its `kestrel.dev/sim-duration`; a pod marked
//! for deletion (an eviction, a preemption) is removed at once, as a kubelet does once
//! its containers stopped. Status writes are tried again until the API server takes them,
//! as a kubelet does across an API server restart.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use serde_json::json;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const DURATION_ANNOTATION: &str = "kestrel.dev/sim-duration";

/// Runs until dropped.
pub struct FakeKubelet {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `90s`, `2m`, `1h` or plain seconds.
fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (number, unit) =
        text.split_at(text.find(|c: char| c.is_alphabetic()).unwrap_or(text.len()));
    let n: f64 = number.parse().ok()?;
    let seconds = match unit {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(seconds))
}

/// Writes a pod's status as a kubelet does: again until the API server takes it (it may be
/// restarting), unless the pod is gone or replaced (the patch names its uid).
async fn write_status(pods: &Api<Pod>, name: &str, status: &serde_json::Value) {
    for _ in 0..240 {
        match pods
            .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => return,
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

impl FakeKubelet {
    /// Runs pods bound to nodes whose name starts with `node_prefix`.
    pub fn start(client: kube::Client, node_prefix: &str) -> FakeKubelet {
        let prefix = node_prefix.to_string();
        let task = tokio::spawn(async move {
            let api: Api<Pod> = Api::all(client.clone());
            let started: Arc<Mutex<HashSet<String>>> = Arc::default();
            let mut stream = std::pin::pin!(watcher::watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects());
            while let Some(item) = stream.next().await {
                let Ok(pod) = item else { continue };
                let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                    continue;
                };
                if !node.starts_with(&prefix) {
                    continue;
                }
                let namespace = pod.metadata.namespace.clone().unwrap_or_default();
                let name = pod.metadata.name.clone().unwrap_or_default();
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
                if pod.metadata.deletion_timestamp.is_some() {
                    let _ = pods
                        .delete(&name, &DeleteParams::default().grace_period(0))
                        .await;
                    continue;
                }
                let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
                if phase.is_some_and(|p| p != "Pending")
                    || !started.lock().unwrap().insert(uid.clone())
                {
                    continue;
                }
                let runtime = pod
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(DURATION_ANNOTATION))
                    .and_then(|d| parse_duration(d));
                tokio::spawn(async move {
                    let now = Timestamp::now().to_string();
                    let running = json!({"metadata": {"uid": uid}, "status": {
                        "phase": "Running", "startTime": now,
                        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
                    }});
                    write_status(&pods, &name, &running).await;
                    let Some(runtime) = runtime else { return };
                    tokio::time::sleep(runtime).await;
                    let now = Timestamp::now().to_string();
                    let done = json!({"metadata": {"uid": uid}, "status": {
                        "phase": "Succeeded",
                        "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now}],
                    }});
                    write_status(&pods, &name, &done).await;
                });
            }
        });
        FakeKubelet { task }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations_read_as_the_simulator_writes_them() {
        assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Some(Duration::from_secs(3)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("soon"), None);
    }
}
