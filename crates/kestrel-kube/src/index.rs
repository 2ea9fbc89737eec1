//! The watch-to-engine index: Pod and Node objects in, the engine's nodes and pods out.
//!
//! Synchronous and clock-free like the engine it wraps: the driver applies watch events
//! ([`ClusterState::apply_pod`], [`ClusterState::delete_pod`], ...), runs
//! [`ClusterState::cycle`], carries out the returned jobs, and reports each bind's result
//! ([`ClusterState::bind_result`]). Every pod has exactly one [`PodState`], so capacity is
//! counted once: a pod is in the queue, being bound, bound, or waiting for its node.

use crate::convert::{self, ConvertError, GPU_INDICES_ANNOTATION};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kestrel_core::{
    GpuAssignment, Millis, PodId, PodPhase, PodSpec, Scheduler, SchedulerConfig, Unschedulable,
};
use kestrel_sim::manifests::Catalog;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// Where a pod stands.
#[derive(Debug, Clone, PartialEq)]
pub enum PodState {
    /// Ours, waiting in the engine's queue.
    Queued(PodId),
    /// The engine placed it; the binder is carrying the decision out.
    Binding { id: PodId, node: String },
    /// Bound in the API (by Kestrel or anyone else) and counted on its node.
    Bound { id: PodId, node: String },
    /// Bound in the API to a node the engine does not know (not yet watched, or deleted):
    /// not counted until the node appears.
    Orphan {
        node: String,
        spec: Box<PodSpec>,
        gpus: Option<GpuAssignment>,
    },
    /// Ours, but `spec.schedulingGates` is not empty.
    Gated,
    /// Ours, but Kestrel cannot read it (the error is reported on the pod); retried when
    /// the pod or the PriorityClasses/RuntimeClasses change.
    Invalid(Box<Pod>),
}

#[derive(Debug, Clone)]
struct Tracked {
    uid: String,
    state: PodState,
}

/// A bind to carry out: annotate (when the pod has GPUs), then POST the binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindJob {
    pub id: PodId,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    /// The [`GPU_INDICES_ANNOTATION`] value, for GPU pods.
    pub gpu_indices: Option<String>,
}

/// A pod to mark `PodScheduled=False` with an explanation and a `FailedScheduling` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusJob {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `Unschedulable` (no node fits) or `SchedulerError` (the pod cannot be read).
    pub reason: &'static str,
    pub message: String,
}

/// What the API said to a bind.
#[derive(Debug, Clone, PartialEq)]
pub enum BindOutcome {
    Bound,
    /// 404: the pod is gone.
    PodGone,
    /// 409: the pod is already bound (or was replaced); the pod as the API has it now,
    /// `None` when it is gone.
    Conflict(Option<Box<Pod>>),
    /// Anything else (throttling, timeouts, 5xx): requeue and try again.
    Retry(String),
}

/// What one cycle decided, as API work.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CycleOutput {
    pub binds: Vec<BindJob>,
    pub unschedulable: Vec<StatusJob>,
}

/// Pending pods per reason kind (the `reason` label of `kestrel_pending_pods`).
pub const REASON_KINDS: [&str; 5] = ["capacity", "constraints", "gang", "invalid", "untried"];

pub struct ClusterState {
    scheduler: Scheduler,
    scheduler_name: String,
    catalog: Catalog,
    pods: HashMap<String, Tracked>,
    keys: HashMap<PodId, String>,
    /// Explanations for invalid pods, reported at the next cycle.
    invalid_reports: Vec<StatusJob>,
    catalog_errors: Vec<ConvertError>,
}

impl ClusterState {
    pub fn new(config: SchedulerConfig, scheduler_name: impl Into<String>) -> Self {
        ClusterState {
            scheduler: Scheduler::new(config),
            scheduler_name: scheduler_name.into(),
            catalog: Catalog::live(Path::new(convert::API_SOURCE), [], []).0,
            pods: HashMap::new(),
            keys: HashMap::new(),
            invalid_reports: Vec::new(),
            catalog_errors: Vec::new(),
        }
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    pub fn scheduler_name(&self) -> &str {
        &self.scheduler_name
    }

    /// The state of a pod (`namespace/name`).
    pub fn pod_state(&self, key: &str) -> Option<&PodState> {
        self.pods.get(key).map(|t| &t.state)
    }

    pub fn tracked_pods(&self) -> usize {
        self.pods.len()
    }

    /// Replaces the PriorityClasses and RuntimeClasses pods resolve against; invalid pods
    /// are tried again. Returns the classes that could not be read.
    pub fn set_classes<'a>(
        &mut self,
        priority_classes: impl IntoIterator<Item = &'a PriorityClass>,
        runtime_classes: impl IntoIterator<Item = &'a RuntimeClass>,
    ) -> &[ConvertError] {
        let (catalog, errors) = Catalog::live(
            Path::new(convert::API_SOURCE),
            priority_classes,
            runtime_classes,
        );
        self.catalog = catalog;
        self.catalog_errors = errors.into_iter().map(Into::into).collect();
        let invalid: Vec<Pod> = self
            .pods
            .values()
            .filter_map(|t| match &t.state {
                PodState::Invalid(pod) => Some((**pod).clone()),
                _ => None,
            })
            .collect();
        for pod in invalid {
            self.pods.remove(&convert::pod_key(&pod));
            self.apply_pod(&pod);
        }
        // Reports for pods that can be read now are stale.
        let pods = &self.pods;
        self.invalid_reports.retain(|r| {
            pods.get(&format!("{}/{}", r.namespace, r.name))
                .is_some_and(|t| matches!(t.state, PodState::Invalid(_)))
        });
        &self.catalog_errors
    }

    /// A Node was added or changed. An unreadable node is left as it was (and returned).
    pub fn apply_node(&mut self, node: &Node) -> Result<(), ConvertError> {
        let spec = convert::node_spec(node)?;
        let name = spec.name.clone();
        self.scheduler.update_node(spec).map_err(|e| ConvertError {
            object: Some(format!("Node {name}")),
            field: None,
            message: e.to_string(),
        })?;
        // Pods bound to it before it was known now count.
        let waiting: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, t)| matches!(&t.state, PodState::Orphan { node, .. } if *node == name))
            .map(|(k, _)| k.clone())
            .collect();
        for key in waiting {
            let t = self.pods.get_mut(&key).expect("listed above");
            let PodState::Orphan { node, spec, gpus } =
                std::mem::replace(&mut t.state, PodState::Gated)
            else {
                unreachable!()
            };
            let state = self.restore(&key, *spec, node, gpus);
            self.pods.get_mut(&key).expect("listed above").state = state;
        }
        Ok(())
    }

    /// A Node was deleted: the pods bound to it stop counting and wait for it (the pod
    /// garbage collector deletes them); nothing is rescheduled that the API still binds.
    pub fn delete_node(&mut self, name: &str) {
        let Ok(ids) = self.scheduler.remove_node(name) else {
            return;
        };
        for id in ids {
            let spec = self.scheduler.pod(id).spec.clone();
            let _ = self.scheduler.finish(id);
            let Some(key) = self.keys.remove(&id) else {
                continue;
            };
            if let Some(t) = self.pods.get_mut(&key) {
                t.state = PodState::Orphan {
                    node: name.to_string(),
                    spec: Box::new(spec),
                    gpus: None,
                };
            }
        }
    }

    /// Nodes not in `present` were deleted while the watch was down (after a relist).
    pub fn retain_nodes(&mut self, present: &HashSet<String>) {
        let gone: Vec<String> = self
            .scheduler
            .cluster()
            .iter()
            .map(|(_, n)| n.spec.name.clone())
            .filter(|n| !present.contains(n))
            .collect();
        for name in gone {
            self.delete_node(&name);
        }
    }

    /// Pods not in `present` (`namespace/name`) were deleted while the watch was down.
    pub fn retain_pods(&mut self, present: &HashSet<String>) {
        let gone: Vec<String> = self
            .pods
            .keys()
            .filter(|k| !present.contains(*k))
            .cloned()
            .collect();
        for key in gone {
            self.forget(&key);
        }
    }

    /// A Pod was added or changed.
    pub fn apply_pod(&mut self, pod: &Pod) {
        let key = convert::pod_key(pod);
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if convert::is_terminal(pod) {
            self.forget(&key);
            return;
        }
        if self.pods.get(&key).is_some_and(|t| t.uid != uid) {
            // Deleted and created again under the same name.
            self.forget(&key);
        }
        let bound_to = convert::node_name(pod);
        let current = self.pods.get(&key).map(|t| &t.state);
        match (bound_to, current) {
            (Some(n), Some(PodState::Binding { id, node })) if node == n => {
                let state = PodState::Bound {
                    id: *id,
                    node: node.clone(),
                };
                self.set(&key, uid, state);
            }
            (Some(n), Some(PodState::Bound { node, .. } | PodState::Orphan { node, .. }))
                if node == n => {}
            (Some(n), _) => {
                // Bound by someone else, or first seen bound: count it where it is.
                self.forget(&key);
                let spec = match convert::pod_spec(&self.catalog, pod) {
                    Ok(spec) => spec,
                    Err(e) => {
                        tracing::warn!(pod = %key, error = %e, "bound pod cannot be read; its usage is not counted");
                        return;
                    }
                };
                let gpus = pod
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(GPU_INDICES_ANNOTATION))
                    .and_then(|v| convert::parse_gpu_indices(v));
                let state = self.restore(&key, spec, n.to_string(), gpus);
                self.set(&key, uid, state);
            }
            (None, Some(PodState::Queued(_) | PodState::Binding { .. })) => {
                if convert::is_deleting(pod) || convert::scheduler_name(pod) != self.scheduler_name
                {
                    self.forget(&key);
                }
            }
            (None, Some(PodState::Bound { .. } | PodState::Orphan { .. })) => {
                // Only an older object than the one we saw bound; the watch catches up.
            }
            (None, Some(PodState::Gated | PodState::Invalid(_)) | None) => {
                self.forget(&key);
                if convert::scheduler_name(pod) != self.scheduler_name || convert::is_deleting(pod)
                {
                    return;
                }
                if convert::is_gated(pod) {
                    self.set(&key, uid, PodState::Gated);
                    return;
                }
                match convert::pod_spec(&self.catalog, pod) {
                    Ok(spec) => {
                        let id = self.scheduler.submit(spec, 0);
                        self.keys.insert(id, key.clone());
                        self.set(&key, uid, PodState::Queued(id));
                    }
                    Err(e) => {
                        self.invalid_reports.push(StatusJob {
                            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                            name: pod.metadata.name.clone().unwrap_or_default(),
                            uid: uid.clone(),
                            reason: "SchedulerError",
                            message: e.message.clone(),
                        });
                        self.set(&key, uid, PodState::Invalid(Box::new(pod.clone())));
                    }
                }
            }
        }
    }

    /// A Pod was deleted.
    pub fn delete_pod(&mut self, pod: &Pod) {
        let key = convert::pod_key(pod);
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if self
            .pods
            .get(&key)
            .is_some_and(|t| uid.is_empty() || t.uid == uid)
        {
            self.forget(&key);
        }
    }

    fn set(&mut self, key: &str, uid: String, state: PodState) {
        self.pods.insert(key.to_string(), Tracked { uid, state });
    }

    /// Drops a pod, releasing what it held in the engine.
    fn forget(&mut self, key: &str) {
        let Some(t) = self.pods.remove(key) else {
            return;
        };
        if let PodState::Queued(id) | PodState::Binding { id, .. } | PodState::Bound { id, .. } =
            t.state
        {
            let _ = self.scheduler.finish(id);
            self.keys.remove(&id);
        }
    }

    fn restore(
        &mut self,
        key: &str,
        spec: PodSpec,
        node: String,
        gpus: Option<GpuAssignment>,
    ) -> PodState {
        if self.scheduler.cluster().id_of(&node).is_none() {
            return PodState::Orphan {
                node,
                spec: Box::new(spec),
                gpus,
            };
        }
        match self.scheduler.restore_bound(spec, &node, gpus, 0) {
            Ok(id) => {
                self.keys.insert(id, key.to_string());
                PodState::Bound { id, node }
            }
            Err(e) => unreachable!("node {node} is known: {e}"),
        }
    }

    /// One scheduling cycle: the binds and status reports to carry out.
    pub fn cycle(&mut self, now: Millis) -> CycleOutput {
        let decisions = self.scheduler.schedule(now);
        let mut out = CycleOutput {
            binds: Vec::with_capacity(decisions.bindings.len()),
            unschedulable: std::mem::take(&mut self.invalid_reports),
        };
        for b in decisions.bindings {
            let Some(key) = self.keys.get(&b.pod).cloned() else {
                continue;
            };
            let node = self.scheduler.cluster().node(b.node).spec.name.clone();
            let t = self.pods.get_mut(&key).expect("keys and pods agree");
            t.state = PodState::Binding {
                id: b.pod,
                node: node.clone(),
            };
            let (namespace, name) = key.split_once('/').expect("namespace/name");
            out.binds.push(BindJob {
                id: b.pod,
                namespace: namespace.to_string(),
                name: name.to_string(),
                uid: t.uid.clone(),
                node,
                gpu_indices: convert::format_gpu_indices(&b.gpus),
            });
        }
        for (id, reason) in decisions.unschedulable {
            let Some(key) = self.keys.get(&id) else {
                continue;
            };
            let (namespace, name) = key.split_once('/').expect("namespace/name");
            out.unschedulable.push(StatusJob {
                namespace: namespace.to_string(),
                name: name.to_string(),
                uid: self.pods[key].uid.clone(),
                reason: "Unschedulable",
                message: reason.to_string(),
            });
        }
        out
    }

    /// Applies what the API said to a bind. Results for pods that changed since (deleted,
    /// seen bound elsewhere) are ignored: the watch already settled them.
    pub fn bind_result(&mut self, id: PodId, outcome: BindOutcome) {
        let Some(key) = self.keys.get(&id).cloned() else {
            return;
        };
        let Some(PodState::Binding { node, .. }) = self.pods.get(&key).map(|t| &t.state) else {
            return;
        };
        match outcome {
            BindOutcome::Bound => {
                let state = PodState::Bound {
                    id,
                    node: node.clone(),
                };
                self.pods.get_mut(&key).expect("present").state = state;
            }
            BindOutcome::PodGone | BindOutcome::Conflict(None) => self.forget(&key),
            BindOutcome::Conflict(Some(pod)) => {
                self.forget(&key);
                self.apply_pod(&pod);
            }
            BindOutcome::Retry(_) => {
                self.scheduler
                    .unbind(id)
                    .expect("a pod being bound is bound in the engine");
                self.pods.get_mut(&key).expect("present").state = PodState::Queued(id);
            }
        }
    }

    /// Pending pods by reason kind ([`REASON_KINDS`]).
    pub fn pending_by_reason(&self) -> BTreeMap<&'static str, i64> {
        let mut out: BTreeMap<&'static str, i64> = REASON_KINDS.iter().map(|k| (*k, 0)).collect();
        for t in self.pods.values() {
            let kind = match &t.state {
                PodState::Queued(id) => {
                    let record = self.scheduler.pod(*id);
                    debug_assert!(matches!(record.phase, PodPhase::Pending));
                    reason_kind(record.pending_reason.as_deref())
                }
                PodState::Invalid(_) => "invalid",
                _ => continue,
            };
            *out.entry(kind).or_default() += 1;
        }
        out
    }
}

fn reason_kind(reason: Option<&Unschedulable>) -> &'static str {
    match reason {
        None => "untried",
        Some(r) if r.gang.is_some() && !r.is_capacity() => "gang",
        Some(r) if r.is_capacity() => "capacity",
        Some(_) => "constraints",
    }
}

/// Hashes the keys of a pod listing, for [`ClusterState::retain_pods`].
pub fn pod_keys<'a>(pods: impl IntoIterator<Item = &'a Arc<Pod>>) -> HashSet<String> {
    pods.into_iter().map(|p| convert::pod_key(p)).collect()
}

/// The names of a node listing, for [`ClusterState::retain_nodes`].
pub fn node_names<'a>(nodes: impl IntoIterator<Item = &'a Arc<Node>>) -> HashSet<String> {
    nodes
        .into_iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect()
}
