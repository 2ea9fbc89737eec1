//! A fake kubelet for the nodes of a test: a bound pod becomes Running (with `startTime`
//! and a Ready condition), and Succeeded after its `kestrel.dev/sim-duration`; a pod marked
//! for deletion (an eviction, a preemption) is removed at once, as a kubelet does once
//! its containers stopped. Status writes are tried again until the API server takes them,
//! as a kubelet does across an API server restart.
//!
//! Started with [`FakeKubelet::start_admitting`], like a real kubelet it admits a pod only if the node's allocatable `nvidia.com/gpu`
//! holds it beside the pods it already runs: a pod that does not fit ends `Failed` with
//! reason `OutOfnvidia.com/gpu` (the kubelet's words), so a scheduler that gives a GPU
//! twice sees its pod rejected, not silently over-committed.

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const DURATION_ANNOTATION: &str = "kestrel.dev/sim-duration";
/// The resource the kubelet admits pods against.
const GPU: &str = "nvidia.com/gpu";

/// `nvidia.com/gpu` a pod asks for: the most of its init containers, or the sum of its
/// containers, whichever is more (the kubelet's effective request; a limit stands in for
/// a missing request, as extended resources require them equal).
fn gpus_of(pod: &Pod) -> i64 {
    let amount = |c: &k8s_openapi::api::core::v1::Container| -> i64 {
        let r = c.resources.as_ref();
        r.and_then(|r| r.requests.as_ref().and_then(|q| q.get(GPU)))
            .or_else(|| r.and_then(|r| r.limits.as_ref().and_then(|q| q.get(GPU))))
            .and_then(|q| q.0.parse().ok())
            .unwrap_or(0)
    };
    let Some(spec) = pod.spec.as_ref() else {
        return 0;
    };
    let containers: i64 = spec.containers.iter().map(amount).sum();
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(amount)
        .max()
        .unwrap_or(0);
    containers.max(init)
}

/// What the kubelets of the test's nodes run, for admission: the pods admitted to each
/// node and their GPUs, and each node's allocatable GPUs.
#[derive(Default)]
struct Admitted {
    /// Whether pods that do not fit are rejected (else every pod is admitted).
    enforce: bool,
    /// node -> (pod uid -> GPUs)
    running: HashMap<String, HashMap<String, i64>>,
    allocatable: HashMap<String, i64>,
}

impl Admitted {
    /// Admits `uid` to `node`, or says why not in the kubelet's words. A node not seen
    /// yet (its watch lags its pods), or one that publishes no `nvidia.com/gpu` (DRA
    /// serves it), admits everything.
    fn admit(&mut self, node: &str, uid: &str, gpus: i64) -> Result<(), String> {
        let on_node = self.running.entry(node.to_string()).or_default();
        let used: i64 = on_node.values().sum();
        match self.allocatable.get(node) {
            Some(&capacity) if self.enforce && gpus > 0 && used + gpus > capacity => Err(format!(
                "Pod was rejected: Node didn't have enough resource: {GPU}, requested: {gpus}, used: {used}, capacity: {capacity}"
            )),
            _ => {
                on_node.insert(uid.to_string(), gpus);
                Ok(())
            }
        }
    }

    /// A pod found running: it holds its GPUs, fitting or not.
    fn adopt(&mut self, node: &str, uid: &str, gpus: i64) {
        self.running
            .entry(node.to_string())
            .or_default()
            .insert(uid.to_string(), gpus);
    }

    /// The pod no longer runs: its GPUs are free.
    fn release(&mut self, uid: &str) {
        for pods in self.running.values_mut() {
            pods.remove(uid);
        }
    }

    /// After a relist: pods not listed are gone (deleted while the watch was down).
    fn keep_only(&mut self, listed: &HashSet<String>) {
        for pods in self.running.values_mut() {
            pods.retain(|uid, _| listed.contains(uid));
        }
    }
}

/// Keeps each node's allocatable GPUs in `admitted` up to date.
async fn watch_nodes(client: kube::Client, prefix: String, admitted: Arc<Mutex<Admitted>>) {
    let api: Api<Node> = Api::all(client);
    let mut stream = std::pin::pin!(watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects());
    while let Some(item) = stream.next().await {
        let Ok(node) = item else { continue };
        let name = node.metadata.name.clone().unwrap_or_default();
        if !name.starts_with(&prefix) {
            continue;
        }
        let gpus: Option<i64> = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| a.get(GPU))
            .and_then(|q| q.0.parse().ok())
            .filter(|&n: &i64| n > 0);
        // A node publishing no `nvidia.com/gpu` (or none of it) serves it through DRA (an extended
        // resource a DeviceClass backs): its claim, not the kubelet, holds the devices.
        let mut admitted = admitted.lock().unwrap();
        match gpus {
            Some(gpus) => admitted.allocatable.insert(name, gpus),
            None => admitted.allocatable.remove(&name),
        };
    }
}

/// Runs until dropped.
pub struct FakeKubelet {
    task: tokio::task::JoinHandle<()>,
    nodes: tokio::task::JoinHandle<()>,
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.task.abort();
        self.nodes.abort();
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
        Self::run(client, node_prefix, false)
    }

    /// [`FakeKubelet::start`], rejecting pods that do not fit beside what the node runs
    /// (`OutOfnvidia.com/gpu`), as a real kubelet does.
    pub fn start_admitting(client: kube::Client, node_prefix: &str) -> FakeKubelet {
        Self::run(client, node_prefix, true)
    }

    fn run(client: kube::Client, node_prefix: &str, enforce: bool) -> FakeKubelet {
        let prefix = node_prefix.to_string();
        let admitted: Arc<Mutex<Admitted>> = Arc::new(Mutex::new(Admitted {
            enforce,
            ..Admitted::default()
        }));
        let nodes = tokio::spawn(watch_nodes(
            client.clone(),
            prefix.clone(),
            admitted.clone(),
        ));
        let task = tokio::spawn(async move {
            let api: Api<Pod> = Api::all(client.clone());
            let started: Arc<Mutex<HashSet<String>>> = Arc::default();
            let mut listed: HashSet<String> = HashSet::new();
            let mut stream =
                std::pin::pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
            while let Some(event) = stream.next().await {
                let pod = match event {
                    Ok(watcher::Event::Apply(pod)) => pod,
                    Ok(watcher::Event::InitApply(pod)) => {
                        listed.extend(pod.metadata.uid.clone());
                        pod
                    }
                    Ok(watcher::Event::Init) => {
                        listed.clear();
                        continue;
                    }
                    Ok(watcher::Event::InitDone) => {
                        admitted.lock().unwrap().keep_only(&listed);
                        continue;
                    }
                    Ok(watcher::Event::Delete(pod)) => {
                        admitted
                            .lock()
                            .unwrap()
                            .release(pod.metadata.uid.as_deref().unwrap_or_default());
                        continue;
                    }
                    Err(_) => continue,
                };
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
                    admitted.lock().unwrap().release(&uid);
                    let _ = pods
                        .delete(&name, &DeleteParams::default().grace_period(0))
                        .await;
                    continue;
                }
                let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
                if matches!(phase.as_deref(), Some("Succeeded" | "Failed")) {
                    admitted.lock().unwrap().release(&uid);
                    continue;
                }
                if phase.as_deref().is_some_and(|p| p != "Pending")
                    || !started.lock().unwrap().insert(uid.clone())
                {
                    // Running before this kubelet started: it holds its GPUs.
                    if phase.as_deref() == Some("Running") {
                        admitted.lock().unwrap().adopt(&node, &uid, gpus_of(&pod));
                    }
                    continue;
                }
                let admission = admitted.lock().unwrap().admit(&node, &uid, gpus_of(&pod));
                let runtime = pod
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(DURATION_ANNOTATION))
                    .and_then(|d| parse_duration(d));
                let admitted = admitted.clone();
                tokio::spawn(async move {
                    let now = Timestamp::now().to_string();
                    if let Err(message) = admission {
                        let rejected = json!({"metadata": {"uid": uid}, "status": {
                            "phase": "Failed", "reason": format!("OutOf{GPU}"), "message": message,
                        }});
                        write_status(&pods, &name, &rejected).await;
                        return;
                    }
                    let running = json!({"metadata": {"uid": uid}, "status": {
                        "phase": "Running", "startTime": now,
                        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
                    }});
                    write_status(&pods, &name, &running).await;
                    let Some(runtime) = runtime else { return };
                    tokio::time::sleep(runtime).await;
                    // Its containers stopped: its GPUs are free before anyone hears it ended.
                    admitted.lock().unwrap().release(&uid);
                    let now = Timestamp::now().to_string();
                    let done = json!({"metadata": {"uid": uid}, "status": {
                        "phase": "Succeeded",
                        "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now}],
                    }});
                    write_status(&pods, &name, &done).await;
                });
            }
        });
        FakeKubelet { task, nodes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_is_admitted_only_beside_what_fits_and_frees_its_gpus_when_gone() {
        let mut a = Admitted {
            enforce: true,
            ..Admitted::default()
        };
        a.allocatable.insert("n".into(), 8);
        assert_eq!(a.admit("n", "big", 6), Ok(()));
        let refused = a.admit("n", "over", 4).unwrap_err();
        assert_eq!(
            refused,
            "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 4, used: 6, capacity: 8"
        );
        assert_eq!(a.admit("n", "two", 2), Ok(()));
        assert_eq!(
            a.admit("n", "cpu-only", 0),
            Ok(()),
            "no GPU asked, none checked"
        );
        a.release("big");
        assert_eq!(a.admit("n", "over", 4), Ok(()));
        // Deleted while the watch was down: a relist lists only what is left.
        a.keep_only(&HashSet::from(["two".to_string()]));
        assert_eq!(a.admit("n", "six", 6), Ok(()));
        assert_eq!(a.admit("unseen", "any", 100), Ok(()), "a node not seen yet");
    }

    #[test]
    fn a_pods_gpus_are_its_containers_or_its_largest_init_container() {
        let pod: Pod = serde_json::from_value(json!({"spec": {
            "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "3"}}}],
            "containers": [
                {"name": "a", "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}},
                {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
            ]}}))
        .unwrap();
        assert_eq!(gpus_of(&pod), 3);
        let pod: Pod = serde_json::from_value(json!({"spec": {"containers": [
            {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2"}}},
            {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}))
        .unwrap();
        assert_eq!(gpus_of(&pod), 4);
    }

    #[test]
    fn durations_read_as_the_simulator_writes_them() {
        assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Some(Duration::from_secs(3)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("soon"), None);
    }
}
