//! DRA on a real kube-apiserver with kube-controller-manager's resourceclaim-controller:
//! the test plays NVIDIA's DRA driver (it publishes ResourceSlices as the driver writes
//! them), Kestrel allocates the claims. Checked on what the API server holds by the shared
//! checker (every bound pod's claims allocated on its node and reserved for it, no device in
//! two claims), sampled while the tests run: claims allocated before the bind, a claim no
//! device matches keeping its pod pending with its reason, preemption of pods that hold
//! devices (victims with a grace period keep them until they are gone), Kestrel killed
//! between an allocation and its bind (the next one reuses the allocation), and
//! kube-scheduler allocating on the same nodes at the same time.

#![allow(clippy::await_holding_lock)]

#[path = "../live/mod.rs"]
mod live;

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use live::*;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
mod allocation;
mod beside_kube_scheduler;
mod restart;

const NS: &str = "dra";
const SCHEDULER: &str = "kestrel-dra";

/// A pod of namespace `ns` for `scheduler` (staying on the namespace's nodes) whose one
/// container uses its one claim, named `gpu`; no termination grace period.
fn pod_in(ns: &str, scheduler: &str, name: &str, claim: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": {POOL_LABEL: ns},
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [claim],
            "containers": [{"name": "main", "image": "trainer:1",
                            "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}}],
        },
    })
}

fn to_pod(pod: serde_json::Value) -> Pod {
    serde_json::from_value(pod).expect("a Pod")
}

/// A claim of the pod from template `template`.
fn from_template(template: &str) -> serde_json::Value {
    json!({"name": "gpu", "resourceClaimTemplateName": template})
}

async fn apply(client: &kube::Client, objects: &[serde_json::Value]) {
    let text = objects
        .iter()
        .map(|o| serde_json::to_string(o).unwrap())
        .collect::<Vec<_>>()
        .join("\n---\n");
    kestrel_testenv::apply_yaml(client, &text, false)
        .await
        .expect("applying DRA objects");
}

/// NVIDIA's DeviceClass.
fn gpu_class() -> serde_json::Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
           "metadata": {"name": "gpu.nvidia.com"},
           "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}})
}

/// A ResourceClaimTemplate of `ns` asking `count` GPUs of the class.
fn gpu_template(ns: &str, name: &str, count: u32) -> serde_json::Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"spec": {"devices": {"requests": [
               {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}]}}}})
}

/// The processes a test started on the control plane, stopped when it ends (a test that
/// panics included: the next one starts them again).
struct Started<'a> {
    cp: &'a kestrel_testenv::ControlPlane,
    controller_manager: bool,
    kube_scheduler: bool,
}

impl<'a> Started<'a> {
    /// kube-controller-manager's resourceclaim-controller (claims from templates created,
    /// the claims of ended pods released).
    fn claim_controller(env: &'a Env) -> Self {
        env.cp
            .start_controller_manager(&["resourceclaim-controller"], &[]);
        Started {
            cp: &env.cp,
            controller_manager: true,
            kube_scheduler: false,
        }
    }

    fn with_kube_scheduler(mut self) -> Self {
        self.cp.start_kube_scheduler(&[]);
        self.kube_scheduler = true;
        self
    }
}

impl Drop for Started<'_> {
    fn drop(&mut self) {
        let cp = self.cp;
        if self.kube_scheduler {
            let _ =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cp.stop_kube_scheduler()));
        }
        if self.controller_manager {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                cp.stop_controller_manager()
            }));
        }
    }
}

/// A test's DRA cluster: namespace `ns`, `nodes` nodes `{ns}-N` without `nvidia.com/gpu`
/// whose `gpus` GPUs each are published through DRA, NVIDIA's class and the templates
/// `one-gpu` and `two-gpu` in the namespace.
async fn dra_cluster(client: &kube::Client, ns: &str, nodes: usize, gpus: u32) {
    create_namespace(client, ns).await;
    let list = (0..nodes)
        .map(|i| kestrel_testenv::gpu_node(&format!("{ns}-{i}"), 0, &[(POOL_LABEL, ns)]))
        .collect();
    kestrel_testenv::create_gpu_nodes(client, list).await;
    let mut objects = vec![
        gpu_class(),
        gpu_template(ns, "one-gpu", 1),
        gpu_template(ns, "two-gpu", 2),
    ];
    objects.extend(
        (0..nodes).map(|i| kestrel_testenv::nodes::nvidia_gpu_slice(&format!("{ns}-{i}"), gpus)),
    );
    apply(client, &objects).await;
}

/// The namespace's claims by name, as the invariant checker reads them.
async fn claims_in(
    client: &kube::Client,
    ns: &str,
) -> BTreeMap<String, kestrel_invariants::ClaimView> {
    let items = Api::<ResourceClaim>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("listing claims")
        .items;
    let prefix = format!("{ns}/");
    kestrel_invariants::claims_from_k8s(&items, &[])
        .0
        .into_iter()
        .map(|c| (c.key.trim_start_matches(&prefix).to_string(), c))
        .collect()
}

async fn claims(client: &kube::Client) -> BTreeMap<String, kestrel_invariants::ClaimView> {
    claims_in(client, NS).await
}

/// The claims as one line each, for failure messages.
fn describe(claims: &BTreeMap<String, kestrel_invariants::ClaimView>) -> String {
    claims
        .iter()
        .map(|(n, c)| {
            format!(
                "  {n}: {:?} {:?} reserved for {:?}",
                c.node, c.devices, c.reserved_for
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The name of the claim the resourceclaim-controller made for the pod's claim `gpu`.
fn generated_claim(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .resource_claim_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == "gpu")?
        .resource_claim_name
        .clone()
}

/// Until the scheduler has reported pod `name` unschedulable (`PodScheduled=False`): the
/// positive sign that it saw the pod and found no room.
async fn reported_unschedulable(api: &Api<Pod>, name: &str, what: &str) {
    eventually(Duration::from_secs(30), what, || async {
        let pod = api.get(name).await.ok()?;
        pod.status?
            .conditions?
            .into_iter()
            .any(|c| c.type_ == "PodScheduled" && c.status == "False")
            .then_some(())
    })
    .await;
}

fn name_of(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}
