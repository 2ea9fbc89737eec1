//! One scheduling cycle: the engine's decisions as API work (binds, pod status reports,
//! PodGroup statuses, evictions), and what the API said to each bind.

use super::evictions::{CheckpointWrite, EvictWrite, NominationWrite};
use super::groups::{GroupEventWrite, GroupStatusWrite};
use super::{LiveIndex, PodState, QUEUE_WAIT_REASON};
use k8s_openapi::api::core::v1::Pod;
use kestrel_core::{GangProblem, Millis, PodId};
use kestrel_objects::live;
use std::collections::HashSet;

/// A bind to carry out: annotate (when the pod has GPUs), then POST the binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindWrite {
    pub id: PodId,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    /// The [`GPU_INDICES_ANNOTATION`] value, for GPU pods (not for pods whose devices
    /// come through their ResourceClaims).
    pub gpu_indices: Option<String>,
    /// Claim statuses to write before the binding (allocation, reservation), in order.
    pub claims: Vec<super::ClaimWrite>,
    /// The claim to create for its `nvidia.com/gpu` on a node where DRA serves them.
    pub extended_claim: Option<super::ExtendedClaimWrite>,
    /// PersistentVolumeClaims to provision on the node first: the node is written on each,
    /// and the pod is bound once they are bound.
    pub provision: Vec<super::ProvisionWrite>,
}

/// A pod to mark `PodScheduled=False` with an explanation and a `FailedScheduling` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusWrite {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `Unschedulable` (no node fits), `WaitingForQueue` ([`QUEUE_WAIT_REASON`]) or
    /// `SchedulerError` (the pod cannot be read).
    pub reason: &'static str,
    pub message: String,
}

impl StatusWrite {
    /// The report for the pod `namespace/name` (`key`).
    pub(super) fn of(key: &str, uid: &str, reason: &'static str, message: String) -> Self {
        let (namespace, name) = key.split_once('/').expect("namespace/name");
        StatusWrite {
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: uid.to_string(),
            reason,
            message,
        }
    }
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
    pub binds: Vec<BindWrite>,
    pub unschedulable: Vec<StatusWrite>,
    /// PodGroup statuses that changed.
    pub group_status: Vec<GroupStatusWrite>,
    /// Warning events on PodGroups Kestrel cannot use.
    pub group_events: Vec<GroupEventWrite>,
    /// Victims asked to checkpoint before they are evicted.
    pub checkpoint_requests: Vec<CheckpointWrite>,
    /// Victims to evict now.
    pub evictions: Vec<EvictWrite>,
    /// Preemptors' nominated nodes to write.
    pub nominations: Vec<NominationWrite>,
}

impl LiveIndex {
    /// One scheduling cycle: the binds and status reports to carry out.
    pub fn cycle(&mut self, now: Millis) -> CycleOutput {
        self.set_time(now);
        let decisions = self.scheduler.schedule(now);
        let noted = self.refresh_namespace_policy_notes();
        let mut out = CycleOutput {
            binds: Vec::with_capacity(decisions.bindings.len()),
            unschedulable: self.take_reports(),
            group_status: Vec::new(),
            group_events: std::mem::take(&mut self.gangs.group_events),
            checkpoint_requests: Vec::new(),
            evictions: Vec::new(),
            nominations: Vec::new(),
        };
        self.start_evictions(&decisions.preemptions, now, &mut out);
        out.evictions = self.evictions.due(now);
        // A gang's binds are consecutive: the binder sends them out together.
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
            if let Some(g) = &t.group {
                self.gangs.dirty_groups.insert(g.clone());
            }
            let (namespace, name) = key.split_once('/').expect("namespace/name");
            let uid = t.uid.clone();
            let claims = self.claim_writes(b.pod, name, &uid);
            let claimed = self.scheduler.pod(b.pod).spec.constraints.devices.is_some();
            let extended_claim = if claimed {
                None
            } else {
                self.extended_claim_write(&key, &uid, b.node, &b.gpus)
            };
            let provision = self.provision_writes(b.pod, namespace);
            out.binds.push(BindWrite {
                id: b.pod,
                namespace: namespace.to_string(),
                name: name.to_string(),
                uid,
                node,
                gpu_indices: live::format_gpu_indices(&b.gpus).filter(|_| !claimed),
                claims,
                extended_claim,
                provision,
            });
        }
        let mut explained = HashSet::new();
        for (id, reason) in decisions.unschedulable {
            let Some(key) = self.keys.get(&id) else {
                continue;
            };
            let t = &self.pods[key];
            let message = self.explain(&reason, t.group.as_ref());
            if let Some(g) = &t.group {
                self.gangs.dirty_groups.insert(g.clone());
            }
            // Cluster autoscalers add nodes for `Unschedulable` pods: a pod held by its
            // queue (quota, its turn, a reclaim) says so under another reason.
            let reason_kind = if reason.queue.is_some() {
                QUEUE_WAIT_REASON
            } else {
                "Unschedulable"
            };
            explained.insert(id);
            out.unschedulable
                .push(StatusWrite::of(key, &t.uid, reason_kind, message));
        }
        // Pods of incomplete gangs whose namespace-policy note changed say so again (the
        // engine reports a pod only when its own explanation changes).
        for key in &noted {
            let Some(g) = self.gangs.groups.get(key) else {
                continue;
            };
            for member in &g.members {
                let Some(t) = self.pods.get(member) else {
                    continue;
                };
                let PodState::Queued(id) = t.state else {
                    continue;
                };
                let Some(reason) = self.scheduler.pod(id).pending_reason.as_deref() else {
                    continue;
                };
                if explained.contains(&id)
                    || reason.queue.is_some()
                    || !matches!(reason.gang, Some(GangProblem::Incomplete { .. }))
                {
                    continue;
                }
                out.unschedulable.push(StatusWrite::of(
                    member,
                    &t.uid,
                    "Unschedulable",
                    self.explain(reason, Some(key)),
                ));
            }
        }
        // A gang that timed out is reported on its PodGroup; its pods stay queued, their
        // reasons (reported above) say so.
        for gang in decisions.timed_out {
            if let Some(spec) = &self.scheduler.gang(gang).spec {
                let key = (spec.namespace.clone(), spec.name.clone());
                self.gangs.dirty_groups.insert(key);
            }
        }
        out.group_status = self.group_statuses();
        out
    }

    /// The queued reports still true: the latest per pod, for pods that still wait
    /// outside the engine for that reason.
    pub(super) fn take_reports(&mut self) -> Vec<StatusWrite> {
        let reports = std::mem::take(&mut self.invalid_reports);
        let mut seen = HashSet::new();
        let pods = &self.pods;
        let mut out: Vec<StatusWrite> = reports
            .into_iter()
            .rev()
            .filter(|r| {
                let key = format!("{}/{}", r.namespace, r.name);
                let current = pods.get(&key).is_some_and(|t| {
                    t.uid == r.uid
                        && match &t.state {
                            PodState::Invalid(_) => true,
                            PodState::GangWait { reason, .. } => *reason == r.message,
                            _ => false,
                        }
                });
                current && seen.insert(key)
            })
            .collect();
        out.reverse();
        out
    }

    /// Applies what the API said to a bind. Results for pods that changed since (deleted,
    /// seen bound elsewhere) are ignored: the watch already settled them.
    pub fn bind_result(&mut self, id: PodId, outcome: BindOutcome) {
        let Some(key) = self.keys.get(&id).cloned() else {
            return;
        };
        let Some(t) = self.pods.get(&key) else {
            return;
        };
        let PodState::Binding { node, .. } = &t.state else {
            return;
        };
        let node = node.clone();
        let group = t.group.clone();
        if let Some(g) = &group {
            self.gangs.dirty_groups.insert(g.clone());
        }
        match outcome {
            BindOutcome::Bound => {
                self.pods.get_mut(&key).expect("present").state = PodState::Bound { id, node };
            }
            BindOutcome::PodGone | BindOutcome::Conflict(None) => self.forget(&key),
            BindOutcome::Conflict(Some(pod)) => {
                self.forget(&key);
                self.apply_pod(&pod);
            }
            BindOutcome::Retry(why) => {
                self.scheduler
                    .unbind(id)
                    .expect("a pod being bound is bound in the engine");
                self.pods.get_mut(&key).expect("present").state = PodState::Queued(id);
                if let Some(g) = group.and_then(|g| self.gangs.groups.get_mut(&g)) {
                    g.bind_error = Some(format!(
                        "binding pod {key} to node {node} failed ({why}); the pod was requeued"
                    ));
                }
            }
        }
    }
}
