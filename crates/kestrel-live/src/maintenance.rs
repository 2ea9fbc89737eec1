//! Checkpoint-coordinated drains: the `NodeMaintenance` controller, run by the leader of
//! `kestrel serve`.
//!
//! Each pass reads every NodeMaintenance and the API objects it concerns and takes the
//! next step; everything it needs to resume is on the API server (the node's cordon
//! annotation, the pods' `kestrel.dev/checkpoint-request`, the object's status), so a
//! drain interrupted by a restart or a change of leader carries on where it was:
//!
//! 1. refuse a maintenance of a node that does not exist, or of a node another
//!    NodeMaintenance already holds (naming both);
//! 2. cordon the node (`spec.unschedulable`, with the annotation
//!    [`MAINTENANCE_ANNOTATION`] naming the maintenance, in one write: only a node
//!    Kestrel cordoned is uncordoned at the end);
//! 3. the pods to move: the node's pods (less DaemonSet and mirror pods, which stay) and
//!    every other pod of their gangs, so that no gang is left partly running;
//! 4. ask those that checkpoint (`kestrel.dev/checkpoint-grace`, or a
//!    `kestrel.dev/checkpoint-interval` whose next checkpoint falls before the deadline;
//!    a gang only when every member does) for a checkpoint, once, at the time recorded in `status.checkpointRequestedAt`, and
//!    wait until each reported one at or after it (`kestrel.dev/last-checkpoint`), its
//!    grace ran out, or the maintenance's deadline passed;
//! 5. evict them through the Eviction API (PodDisruptionBudgets apply; a refusal, HTTP
//!    429, is counted in the status and tried again next pass);
//! 6. `Drained` once none is left; `Completed` and uncordoned when `spec.done` is set or
//!    the object is deleted (a finalizer holds it until the node is uncordoned).
//!
//! Steps 3 and 4 are the engine's decisions ([`kestrel_core::leaving`]), the ones the
//! simulator's upgrade drains carry out on its clock.
//!
//! With the GPU Operator hook on, a node the NVIDIA GPU Operator's driver-upgrade
//! controller puts in `wait-for-jobs-required` (label [`GPU_OPERATOR_STATE_LABEL`]) gets a
//! NodeMaintenance of its own: the operator, whose `waitForCompletion.podSelector` matches
//! the workloads, waits while Kestrel checkpoints and evicts them, then goes on. The
//! maintenance is deleted once the node leaves the operator's drain states.

use crate::api::{ApiWriter, FIELD_MANAGER};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kestrel_core::leaving::{drain_wait, drain_workloads, DrainCandidate, DrainMember};
use kestrel_core::{Millis, PodSpec, PreemptionTerms};
use kestrel_objects::crds::{MaintenancePhase, NodeMaintenance, NodeMaintenanceStatus};
use kestrel_objects::live::{self, CHECKPOINT_REQUEST_ANNOTATION, LAST_CHECKPOINT_ANNOTATION};
use kestrel_objects::pods::Catalog;
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;
use tokio::sync::watch;

/// On a node Kestrel cordoned: the NodeMaintenance that did.
pub const MAINTENANCE_ANNOTATION: &str = "scheduling.kestrel.dev/maintenance";
/// Holds a NodeMaintenance until its node is uncordoned.
pub const FINALIZER: &str = "scheduling.kestrel.dev/uncordon";
/// `spec.checkpointDeadlineSeconds` when unset.
pub const DEFAULT_CHECKPOINT_DEADLINE_SECONDS: i64 = 1800;
/// How often the leader looks at the maintenances.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
/// The NVIDIA GPU Operator's per-node driver-upgrade state.
pub const GPU_OPERATOR_STATE_LABEL: &str = "nvidia.com/gpu-driver-upgrade-state";
/// The state in which the operator waits for the node's jobs: Kestrel drains then.
pub const GPU_OPERATOR_WAIT_STATE: &str = "wait-for-jobs-required";
/// The operator's states up to its own drain, during which Kestrel's maintenance stays.
const GPU_OPERATOR_DRAIN_STATES: [&str; 5] = [
    "upgrade-required",
    "cordon-required",
    "wait-for-jobs-required",
    "pod-deletion-required",
    "drain-required",
];
/// On a NodeMaintenance the GPU Operator hook created.
pub const HOOK_LABEL: &str = "scheduling.kestrel.dev/gpu-operator-hook";

/// What the controller does besides the NodeMaintenances users create.
#[derive(Debug, Clone)]
pub struct MaintenanceConfig {
    pub interval: Duration,
    /// Drain nodes the GPU Operator waits on (`wait-for-jobs-required`).
    pub gpu_operator_hook: bool,
    /// The checkpoint deadline of the hook's maintenances, in seconds.
    pub hook_checkpoint_deadline_seconds: i64,
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        MaintenanceConfig {
            interval: DEFAULT_INTERVAL,
            gpu_operator_hook: false,
            hook_checkpoint_deadline_seconds: DEFAULT_CHECKPOINT_DEADLINE_SECONDS,
        }
    }
}

fn api_err(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Runs the controller while this replica leads, until shutdown. `client` should not
/// retry refused (429) requests itself: a refused eviction is reported and tried again
/// on the next pass.
pub async fn run(
    client: Client,
    writer: ApiWriter,
    config: MaintenanceConfig,
    mut leader: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut failing: Option<String> = None;
    loop {
        if *shutdown.borrow() {
            return;
        }
        if *leader.borrow() {
            match reconcile_all(&client, &writer, &config, Timestamp::now()).await {
                Ok(()) => failing = None,
                Err(e) => {
                    // Said once per kind of failure, not every pass.
                    let text = e.to_string();
                    if failing.as_deref() != Some(text.as_str()) {
                        tracing::warn!(error = %text, "node maintenance: pass failed; retrying");
                        failing = Some(text);
                    }
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(config.interval) => {}
            _ = leader.changed() => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// One pass over every NodeMaintenance, oldest first.
pub async fn reconcile_all(
    client: &Client,
    writer: &ApiWriter,
    config: &MaintenanceConfig,
    now: Timestamp,
) -> Result<(), kube::Error> {
    let api: Api<NodeMaintenance> = Api::all(client.clone());
    let mut all = api.list(&ListParams::default()).await?.items;
    if config.gpu_operator_hook && gpu_operator_hook(client, config, &all).await? {
        all = api.list(&ListParams::default()).await?.items;
    }
    if all.is_empty() {
        return Ok(());
    }
    all.sort_by_key(order_key);
    let classes: Vec<PriorityClass> = Api::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let runtimes: Vec<RuntimeClass> = Api::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let (catalog, _) = Catalog::live(
        Path::new(live::API_SOURCE),
        &classes,
        &runtimes,
        kestrel_objects::pods::WorkloadPriorityListing::NotServed,
    );
    let pass = Pass {
        client: client.clone(),
        writer: writer.clone(),
        catalog,
        now,
    };
    // One maintenance failing (its node's API refusing a write) does not hold the others.
    let mut first_error = None;
    for nm in &all {
        if let Err(e) = pass.reconcile(nm, &all).await {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Creates a NodeMaintenance for each node the GPU Operator waits on and deletes those of
/// nodes it has moved past its drain; returns whether it changed any.
async fn gpu_operator_hook(
    client: &Client,
    config: &MaintenanceConfig,
    all: &[NodeMaintenance],
) -> Result<bool, kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let api: Api<NodeMaintenance> = Api::all(client.clone());
    let labelled = nodes
        .list(&ListParams::default().labels(GPU_OPERATOR_STATE_LABEL))
        .await?
        .items;
    let state = |node: &str| {
        labelled
            .iter()
            .find(|n| n.name_any() == node)
            .and_then(|n| n.labels().get(GPU_OPERATOR_STATE_LABEL).cloned())
    };
    let mut changed = false;
    for node in &labelled {
        let name = node.name_any();
        if state(&name).as_deref() != Some(GPU_OPERATOR_WAIT_STATE) {
            continue;
        }
        let held = all.iter().any(|nm| {
            nm.spec.node_name == name
                && !nm.spec.done
                && MaintenancePhase::holds_node(nm.status.as_ref().and_then(|s| s.phase))
        });
        if held {
            continue;
        }
        let mut nm = NodeMaintenance::new(
            &format!("gpu-operator-{name}"),
            kestrel_objects::crds::NodeMaintenanceSpec {
                node_name: name.clone(),
                checkpoint_deadline_seconds: Some(config.hook_checkpoint_deadline_seconds),
                reason: Some("NVIDIA GPU Operator driver upgrade".into()),
                done: false,
            },
        );
        nm.metadata.labels = Some([(HOOK_LABEL.to_string(), "true".to_string())].into());
        match api.create(&Default::default(), &nm).await {
            Ok(_) => {
                tracing::info!(node = %name, "GPU Operator waits for the node's jobs: draining it");
                changed = true;
            }
            // A finished one of that name is still there: replaced next pass.
            Err(e) if api_err(&e) == Some(409) => {
                let stale = all.iter().any(|o| {
                    o.name_any() == nm.name_any()
                        && !MaintenancePhase::holds_node(o.status.as_ref().and_then(|s| s.phase))
                });
                if stale {
                    api.delete(&nm.name_any(), &Default::default()).await?;
                    changed = true;
                }
            }
            Err(e) => return Err(e),
        }
    }
    for nm in all.iter().filter(|nm| nm.labels().contains_key(HOOK_LABEL)) {
        let past_drain = state(&nm.spec.node_name)
            .is_none_or(|s| !GPU_OPERATOR_DRAIN_STATES.contains(&s.as_str()));
        if past_drain && nm.metadata.deletion_timestamp.is_none() {
            api.delete(&nm.name_any(), &Default::default()).await?;
            changed = true;
        }
    }
    Ok(changed)
}

/// Creation time, then name: who came first holds the node.
fn order_key(nm: &NodeMaintenance) -> (Option<Timestamp>, String) {
    (
        nm.metadata.creation_timestamp.as_ref().map(|t| t.0),
        nm.name_any(),
    )
}

/// Which NodeMaintenance, other than `nm`, holds `nm`'s node: one that acted on it, or
/// an older one that is about to.
pub fn holder<'a>(nm: &NodeMaintenance, all: &'a [NodeMaintenance]) -> Option<&'a NodeMaintenance> {
    let phase = |o: &NodeMaintenance| o.status.as_ref().and_then(|s| s.phase);
    all.iter().find(|o| {
        o.name_any() != nm.name_any()
            && o.spec.node_name == nm.spec.node_name
            && o.metadata.deletion_timestamp.is_none()
            && !o.spec.done
            && MaintenancePhase::holds_node(phase(o))
            && (phase(o).is_some() || order_key(o) < order_key(nm))
    })
}

struct Pass {
    client: Client,
    /// Events, as the scheduler's others are written.
    writer: ApiWriter,
    catalog: Catalog,
    now: Timestamp,
}

/// A pod to move off the node, and what it said about checkpoints.
struct Leaving {
    pod: Pod,
    /// It checkpoints and is waited for until this time (Unix ms), unless it answers.
    wait_until: Option<i64>,
}

impl Pass {
    fn params() -> PatchParams {
        PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..Default::default()
        }
    }

    async fn reconcile(
        &self,
        nm: &NodeMaintenance,
        all: &[NodeMaintenance],
    ) -> Result<(), kube::Error> {
        let name = nm.name_any();
        let status = nm.status.clone().unwrap_or_default();
        let node_name = nm.spec.node_name.as_str();
        let nodes: Api<Node> = Api::all(self.client.clone());
        if nm.metadata.deletion_timestamp.is_some() {
            if nm.finalizers().iter().any(|f| f == FINALIZER) {
                self.uncordon(&nodes, node_name, &name).await?;
                self.remove_finalizer(nm).await?;
            }
            return Ok(());
        }
        if matches!(
            status.phase,
            Some(MaintenancePhase::Refused | MaintenancePhase::Completed)
        ) {
            return Ok(());
        }
        if nm.spec.done {
            self.uncordon(&nodes, node_name, &name).await?;
            let mut next = status.clone();
            next.phase = Some(MaintenancePhase::Completed);
            let message = format!("maintenance ended (spec.done); node {node_name} uncordoned");
            return self
                .write_status(nm, next, "False", "MaintenanceEnded", &message)
                .await;
        }
        let started = status.phase.is_some();
        if !started {
            if let Some(other) = holder(nm, all) {
                let message = format!(
                    "NodeMaintenance {name}: spec.nodeName: node {node_name} is already under maintenance by NodeMaintenance {}; delete this one, or end that one (spec.done: true) first",
                    other.name_any()
                );
                let mut next = status.clone();
                next.phase = Some(MaintenancePhase::Refused);
                return self
                    .write_status(nm, next, "False", "AlreadyUnderMaintenance", &message)
                    .await;
            }
        }
        let Some(node) = nodes.get_opt(node_name).await? else {
            let mut next = status.clone();
            let (reason, message) = if started {
                next.phase = Some(MaintenancePhase::Drained);
                next.pods_left = 0;
                next.checkpoints_awaited = 0;
                (
                    "NodeGone",
                    format!("node {node_name} was deleted during the maintenance"),
                )
            } else {
                next.phase = Some(MaintenancePhase::Refused);
                (
                    "NodeNotFound",
                    format!("NodeMaintenance {name}: spec.nodeName: node {node_name} does not exist; name an existing node (kubectl get nodes)"),
                )
            };
            let condition = if started { "True" } else { "False" };
            return self
                .write_status(nm, next, condition, reason, &message)
                .await;
        };
        if !nm.finalizers().iter().any(|f| f == FINALIZER) {
            self.add_finalizer(nm).await?;
        }
        self.cordon(&nodes, &node, &name).await?;

        let leaving = self.pods_leaving(node_name).await?;
        let deadline_ms = nm
            .spec
            .checkpoint_deadline_seconds
            .unwrap_or(DEFAULT_CHECKPOINT_DEADLINE_SECONDS)
            .max(0)
            * 1000;
        let mut next = status.clone();
        let now_ms = self.now.as_millisecond();
        // The request's time is written before any pod is asked, so a restart asks again
        // with the same time rather than moving the deadline.
        let requested_ms = match next
            .checkpoint_requested_at
            .as_deref()
            .and_then(|t| t.parse::<Timestamp>().ok())
        {
            Some(t) => t.as_millisecond(),
            None => {
                let at = Timestamp::from_millisecond(now_ms).unwrap_or(self.now);
                next.checkpoint_requested_at = Some(at.to_string());
                next.phase = Some(MaintenancePhase::Checkpointing);
                let message = format!("node {node_name} cordoned; asking for checkpoints");
                self.write_status(nm, next.clone(), "False", "AwaitingCheckpoints", &message)
                    .await?;
                now_ms
            }
        };
        let requested_at = next.checkpoint_requested_at.clone().unwrap_or_default();
        let leaving: Vec<Leaving> = leaving
            .into_iter()
            .flat_map(|workload| {
                let wait_until = self.wait_until(&workload, requested_ms, deadline_ms);
                workload
                    .into_iter()
                    .map(move |pod| Leaving { pod, wait_until })
            })
            .collect();
        let pods = |ns: &str| -> Api<Pod> { Api::namespaced(self.client.clone(), ns) };
        let mut awaited = Vec::new();
        let mut waiting_gangs = BTreeSet::new();
        for l in &leaving {
            let Some(until) = l.wait_until else { continue };
            if answered(&l.pod, requested_ms) || now_ms >= until || live::is_deleting(&l.pod) {
                continue;
            }
            if live::annotation(&l.pod, CHECKPOINT_REQUEST_ANNOTATION) != Some(&requested_at) {
                let patch = json!({"metadata": {
                    "uid": l.pod.metadata.uid,
                    "annotations": {CHECKPOINT_REQUEST_ANNOTATION: requested_at},
                }});
                match pods(live::pod_namespace(&l.pod))
                    .patch(&l.pod.name_any(), &Self::params(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {}
                    Err(e) if matches!(api_err(&e), Some(404 | 409 | 422)) => continue,
                    Err(e) => return Err(e),
                }
            }
            awaited.push(live::pod_key(&l.pod));
            if let Some(gang) = live::pod_group_key(&l.pod) {
                waiting_gangs.insert(gang);
            }
        }
        next.pods_left = leaving.len() as i32;
        next.checkpoints_awaited = awaited.len() as i32;

        // A pod goes once it is not waited for, a gang's pods once none of them is.
        let mut refused = Vec::new();
        let ready = leaving.iter().filter(|l| {
            !live::is_deleting(&l.pod)
                && !awaited.contains(&live::pod_key(&l.pod))
                && live::pod_group_key(&l.pod).is_none_or(|g| !waiting_gangs.contains(&g))
        });
        for l in ready {
            let name = l.pod.name_any();
            match pods(live::pod_namespace(&l.pod))
                .evict(&name, &EvictParams::default())
                .await
            {
                Ok(_) => next.evicted += 1,
                Err(kube::Error::Api(s)) if s.code == 429 => {
                    refused.push(format!("{} ({})", live::pod_key(&l.pod), s.message));
                }
                Err(e) if matches!(api_err(&e), Some(404 | 409)) => {}
                Err(e) => return Err(e),
            }
        }
        next.evictions_refused = refused.len() as i32;
        let refusals = if refused.is_empty() {
            String::new()
        } else {
            format!(
                "; {} eviction(s) refused by PodDisruptionBudgets, tried again: {}",
                refused.len(),
                refused.join("; ")
            )
        };
        if !awaited.is_empty() {
            next.phase = Some(MaintenancePhase::Checkpointing);
            let until = Timestamp::from_millisecond(requested_ms + deadline_ms)
                .map(|t| t.to_string())
                .unwrap_or_default();
            let message = format!(
                "waiting for {} checkpoint(s), until {until} at the latest: {}{refusals}",
                awaited.len(),
                awaited.join(", ")
            );
            return self
                .write_status(nm, next, "False", "AwaitingCheckpoints", &message)
                .await;
        }
        if leaving.is_empty() {
            next.phase = Some(MaintenancePhase::Drained);
            let message = format!("node {node_name} is drained and cordoned; set spec.done: true when its maintenance is over");
            return self
                .write_status(nm, next, "True", "Drained", &message)
                .await;
        }
        next.phase = Some(MaintenancePhase::Evicting);
        let (reason, message) = if refused.is_empty() {
            (
                "PodsTerminating",
                format!("{} pod(s) evicted, terminating", leaving.len()),
            )
        } else {
            (
                "EvictionsRefused",
                refusals.trim_start_matches("; ").to_string(),
            )
        };
        self.write_status(nm, next, "False", reason, &message).await
    }

    /// Until when (Unix ms) a workload (a pod, or a gang's pods) is waited for, if it
    /// checkpoints: the engine's drain decision ([`drain_wait`]) for a drain that asked at
    /// `requested_ms` and waits `deadline_ms` at most. A pod whose spec cannot be read
    /// offers no checkpoint.
    fn wait_until(&self, workload: &[Pod], requested_ms: i64, deadline_ms: i64) -> Option<i64> {
        let specs: Vec<Option<PodSpec>> = workload
            .iter()
            .map(|p| live::pod_spec(&self.catalog, p).ok())
            .collect();
        let no_terms = PreemptionTerms::default();
        let members: Vec<DrainMember<'_>> = workload
            .iter()
            .zip(&specs)
            .map(|(pod, spec)| DrainMember {
                terms: spec.as_ref().map_or(&no_terms, |s| &s.preemption),
                run_start: pod
                    .status
                    .as_ref()
                    .and_then(|s| s.start_time.as_ref())
                    .map(|t| t.0.as_millisecond().max(0) as Millis),
            })
            .collect();
        let wait = drain_wait(
            &members,
            requested_ms.max(0) as Millis,
            deadline_ms.max(0) as Millis,
            true,
        );
        wait.until().map(|t| t as i64)
    }

    /// What the drain of the node moves, per workload ([`drain_workloads`]): the node's
    /// movable pods, and the other running pods of their gangs, wherever they run.
    async fn pods_leaving(&self, node_name: &str) -> Result<Vec<Vec<Pod>>, kube::Error> {
        let all: Api<Pod> = Api::all(self.client.clone());
        let on_node = all
            .list(&ListParams::default().fields(&format!("spec.nodeName={node_name}")))
            .await?
            .items;
        let mut running: BTreeMap<String, Pod> = BTreeMap::new();
        let mut gangs: BTreeSet<(String, String)> = BTreeSet::new();
        for pod in on_node.into_iter().filter(movable) {
            if let Some(gang) = live::pod_group_key(&pod) {
                gangs.insert(gang);
            }
            running.insert(live::pod_key(&pod), pod);
        }
        let namespaces: BTreeSet<&str> = gangs.iter().map(|(ns, _)| ns.as_str()).collect();
        for ns in namespaces {
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            for pod in pods.list(&ListParams::default()).await?.items {
                let mate = live::pod_group_key(&pod).is_some_and(|g| gangs.contains(&g));
                if mate && live::node_name(&pod).is_some() && movable(&pod) {
                    running.entry(live::pod_key(&pod)).or_insert(pod);
                }
            }
        }
        let candidates: Vec<DrainCandidate<Pod, (String, String)>> = running
            .into_values()
            .map(|pod| DrainCandidate {
                gang: live::pod_group_key(&pod),
                on_drained_node: live::node_name(&pod) == Some(node_name),
                pod,
            })
            .collect();
        Ok(drain_workloads(&candidates))
    }

    /// Cordons the node, marking it as this maintenance's; a node already unschedulable
    /// (cordoned by someone else) is left as it is, and not uncordoned at the end.
    async fn cordon(&self, nodes: &Api<Node>, node: &Node, nm: &str) -> Result<(), kube::Error> {
        let unschedulable = node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        if unschedulable {
            return Ok(());
        }
        let patch = json!({
            "metadata": {"annotations": {MAINTENANCE_ANNOTATION: nm}},
            "spec": {"unschedulable": true},
        });
        nodes
            .patch(&node.name_any(), &Self::params(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// Uncordons the node if this maintenance cordoned it.
    async fn uncordon(
        &self,
        nodes: &Api<Node>,
        node_name: &str,
        nm: &str,
    ) -> Result<(), kube::Error> {
        let Some(node) = nodes.get_opt(node_name).await? else {
            return Ok(());
        };
        if node
            .annotations()
            .get(MAINTENANCE_ANNOTATION)
            .map(String::as_str)
            != Some(nm)
        {
            return Ok(());
        }
        let patch = json!({
            "metadata": {"annotations": {MAINTENANCE_ANNOTATION: null}},
            "spec": {"unschedulable": null},
        });
        nodes
            .patch(node_name, &Self::params(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    async fn add_finalizer(&self, nm: &NodeMaintenance) -> Result<(), kube::Error> {
        let mut finalizers = nm.finalizers().to_vec();
        finalizers.push(FINALIZER.to_string());
        self.set_finalizers(nm, finalizers).await
    }

    async fn remove_finalizer(&self, nm: &NodeMaintenance) -> Result<(), kube::Error> {
        let finalizers = nm
            .finalizers()
            .iter()
            .filter(|f| *f != FINALIZER)
            .cloned()
            .collect();
        self.set_finalizers(nm, finalizers).await
    }

    /// Replaces the finalizers, guarded by the resource version (a JSON merge patch
    /// replaces the whole list).
    async fn set_finalizers(
        &self,
        nm: &NodeMaintenance,
        finalizers: Vec<String>,
    ) -> Result<(), kube::Error> {
        let api: Api<NodeMaintenance> = Api::all(self.client.clone());
        let patch = json!({"metadata": {
            "finalizers": finalizers,
            "resourceVersion": nm.metadata.resource_version,
        }});
        match api
            .patch(&nm.name_any(), &Self::params(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            // Changed meanwhile (409) or gone (404): the next pass sees it as it is.
            Err(e) if matches!(api_err(&e), Some(404 | 409)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Writes the status with its `Drained` condition, if anything changed.
    async fn write_status(
        &self,
        nm: &NodeMaintenance,
        mut next: NodeMaintenanceStatus,
        condition: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), kube::Error> {
        let old = nm.status.clone().unwrap_or_default();
        let previous = old.conditions.iter().find(|c| c.type_ == "Drained");
        let since = previous
            .filter(|c| c.status == condition && c.reason == reason)
            .map(|c| c.last_transition_time.clone())
            .unwrap_or(Time(self.now));
        next.conditions = vec![Condition {
            type_: "Drained".into(),
            status: condition.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: since,
            observed_generation: nm.metadata.generation,
        }];
        if next == old {
            return Ok(());
        }
        if next.phase != old.phase {
            let phase = next.phase.map_or("", |p| p.as_str());
            tracing::info!(maintenance = %nm.name_any(), node = %nm.spec.node_name,
                phase, "{message}");
            self.event(nm, reason, message).await;
        }
        let api: Api<NodeMaintenance> = Api::all(self.client.clone());
        let patch = json!({"status": next});
        match api
            .patch_status(&nm.name_any(), &Self::params(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if api_err(&e) == Some(404) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl Pass {
    /// A Normal event on the NodeMaintenance for each phase it enters, with the reason of
    /// its `Drained` condition (`kubectl describe
    /// nm`); events of cluster-scoped objects live in `default`. A failed post is only
    /// logged: the status says the same.
    async fn event(&self, nm: &NodeMaintenance, reason: &str, message: &str) {
        let regarding = ObjectReference {
            api_version: Some(kestrel_objects::crds::API_VERSION.into()),
            kind: Some("NodeMaintenance".into()),
            name: Some(nm.name_any()),
            uid: nm.metadata.uid.clone(),
            ..Default::default()
        };
        let posted = self
            .writer
            .post_object_event("default", "Normal", regarding, "Draining", reason, message)
            .await;
        if let Err(e) = posted {
            tracing::debug!(error = %e, "posting a NodeMaintenance event");
        }
    }
}

/// A pod a drain moves: not finished, not a DaemonSet's (it belongs on every node) nor a
/// static pod's mirror (the kubelet runs it from a file).
fn movable(pod: &Pod) -> bool {
    let daemon = pod.owner_references().iter().any(|o| o.kind == "DaemonSet");
    let mirror = pod
        .annotations()
        .contains_key("kubernetes.io/config.mirror");
    !live::is_terminal(pod) && !daemon && !mirror
}

/// It reported a checkpoint at or after the request (Unix ms).
fn answered(pod: &Pod, requested_ms: i64) -> bool {
    live::annotation(pod, LAST_CHECKPOINT_ANNOTATION)
        .and_then(|v| v.trim().parse::<Timestamp>().ok())
        .is_some_and(|t| t.as_millisecond() >= requested_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kestrel_objects::crds::NodeMaintenanceSpec;

    fn nm(
        name: &str,
        node: &str,
        created_s: i64,
        phase: Option<MaintenancePhase>,
    ) -> NodeMaintenance {
        let mut nm = NodeMaintenance::new(
            name,
            NodeMaintenanceSpec {
                node_name: node.into(),
                ..Default::default()
            },
        );
        nm.metadata.creation_timestamp = Some(Time(Timestamp::from_second(created_s).unwrap()));
        nm.status = phase.map(|p| NodeMaintenanceStatus {
            phase: Some(p),
            ..Default::default()
        });
        nm
    }

    #[test]
    fn the_first_maintenance_of_a_node_holds_it_and_finished_ones_do_not() {
        let a = nm("a", "n1", 10, None);
        let b = nm("b", "n1", 20, None);
        let c = nm("c", "n2", 5, None);
        let all = vec![a.clone(), b.clone(), c.clone()];
        // Both new: the older one goes first, the newer one is refused naming it.
        assert!(holder(&a, &all).is_none());
        assert_eq!(holder(&b, &all).map(|h| h.name_any()), Some("a".into()));
        assert!(holder(&c, &all).is_none());
        // One that acted holds the node even if it is newer.
        let acting = nm("b", "n1", 20, Some(MaintenancePhase::Checkpointing));
        let all = vec![a.clone(), acting];
        assert_eq!(holder(&a, &all).map(|h| h.name_any()), Some("b".into()));
        // Refused, completed or ended ones hold nothing.
        for phase in [MaintenancePhase::Refused, MaintenancePhase::Completed] {
            let all = vec![nm("a", "n1", 10, Some(phase)), b.clone()];
            assert!(holder(&b, &all).is_none(), "{phase:?}");
        }
        let mut ended = nm("a", "n1", 10, Some(MaintenancePhase::Drained));
        ended.spec.done = true;
        assert!(holder(&b, &[ended, b.clone()]).is_none());
    }

    fn pod(annotations: &[(&str, &str)]) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns",
                         "annotations": annotations.iter().copied().collect::<BTreeMap<_, _>>()},
        }))
        .unwrap()
    }

    #[test]
    fn a_checkpoint_answers_only_if_at_or_after_the_request() {
        let at = "2026-12-02T08:00:00Z"
            .parse::<Timestamp>()
            .unwrap()
            .as_millisecond();
        assert!(answered(
            &pod(&[(LAST_CHECKPOINT_ANNOTATION, "2026-12-02T08:00:00Z")]),
            at
        ));
        assert!(answered(
            &pod(&[(LAST_CHECKPOINT_ANNOTATION, "2026-12-02T08:00:05Z")]),
            at
        ));
        assert!(!answered(
            &pod(&[(LAST_CHECKPOINT_ANNOTATION, "2026-12-02T07:59:59Z")]),
            at
        ));
        assert!(!answered(
            &pod(&[(LAST_CHECKPOINT_ANNOTATION, "yesterday")]),
            at
        ));
        assert!(!answered(&pod(&[]), at));
    }

    #[test]
    fn daemonset_and_mirror_pods_stay() {
        let mut daemon = pod(&[]);
        daemon.metadata.owner_references = Some(vec![serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "u"
        }))
        .unwrap()]);
        assert!(!movable(&daemon));
        assert!(!movable(&pod(&[("kubernetes.io/config.mirror", "x")])));
        assert!(movable(&pod(&[])));
    }
}
