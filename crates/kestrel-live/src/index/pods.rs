//! Pods in, the engine's pods out: each pod's [`PodState`], the classes pods resolve
//! against, relists, and the reports for pods that wait outside the engine.

use super::dra::ClaimWait;
use super::groups::{not_found, Group};
use super::{LiveIndex, PodState, StatusWrite, Tracked, REASON_KINDS};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kestrel_core::{GpuAssignment, Millis, PodPhase, PodSpec, Unschedulable};
use kestrel_objects::live::{self, ConvertError, GPU_INDICES_ANNOTATION};
use kestrel_objects::pods::{Catalog, WorkloadPriorityListing};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

impl LiveIndex {
    /// Takes pods to have arrived at their `metadata.creationTimestamp` and bound pods to
    /// have started at `status.startTime` (driver clock: since the wall origin, not before
    /// 0 nor after now), instead of when they are seen. For a snapshot that shows how long
    /// pods have waited (`kestrel explain --live`); the scheduler itself queues pods as it
    /// sees them.
    pub fn use_object_times(&mut self) {
        self.object_times = true;
    }

    /// When `pod` arrived (or, `started`, began to run) on the driver's clock.
    pub(super) fn pod_time(&self, pod: &Pod, started: bool) -> Millis {
        if !self.object_times {
            return self.now;
        }
        let created = pod.metadata.creation_timestamp.as_ref().map(|t| &t.0);
        let stamp = if started {
            pod.status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map(|t| &t.0)
                .or(created)
        } else {
            created
        };
        stamp.map_or(self.now, |t| {
            (t.as_millisecond() - self.wall_origin).clamp(0, self.now as i64) as Millis
        })
    }

    /// The state of a pod (`namespace/name`).
    pub fn pod_state(&self, key: &str) -> Option<&PodState> {
        self.pods.get(key).map(|t| &t.state)
    }

    pub fn tracked_pods(&self) -> usize {
        self.pods.len()
    }

    /// Replaces the PriorityClasses, RuntimeClasses and Kueue WorkloadPriorityClasses
    /// (as far as they are known) pods resolve against; invalid pods (those
    /// naming a class that was missing among them) are read again. A pod read before keeps
    /// the priority it was read with, as Kueue's workloads keep theirs. Returns the
    /// classes that could not be read.
    pub fn set_classes<'a>(
        &mut self,
        priority_classes: impl IntoIterator<Item = &'a PriorityClass>,
        runtime_classes: impl IntoIterator<Item = &'a RuntimeClass>,
        workload_priority_classes: WorkloadPriorityListing,
    ) -> &[ConvertError] {
        let (catalog, errors) = Catalog::live(
            Path::new(live::API_SOURCE),
            priority_classes,
            runtime_classes,
            workload_priority_classes,
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
            self.pods.remove(&live::pod_key(&pod));
            self.apply_pod(&pod);
        }
        // Reports for pods that can be read now are stale.
        let pods = &self.pods;
        self.invalid_reports.retain(|r| {
            pods.get(&format!("{}/{}", r.namespace, r.name))
                .is_some_and(|t| {
                    matches!(t.state, PodState::Invalid(_) | PodState::GangWait { .. })
                })
        });
        &self.catalog_errors
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
            self.drop_pod(&key);
        }
    }

    /// A Pod was added or changed.
    pub fn apply_pod(&mut self, pod: &Pod) {
        let key = live::pod_key(pod);
        self.apply_pod_state(pod, &key);
        self.track_membership(&key, pod);
        if let Some(listed) = &mut self.relisted_pods {
            listed.insert(key);
        }
    }

    /// The pod watch (re)starts its listing: the pods it lists are applied as usual, and
    /// [`LiveIndex::end_pod_relist`] drops the ones it did not list.
    pub fn begin_pod_relist(&mut self) {
        self.relisted_pods = Some(HashSet::new());
    }

    /// The pod listing is complete: tracked pods it did not list were deleted while the
    /// watch was down. Without a listing begun, nothing is dropped.
    pub fn end_pod_relist(&mut self) {
        if let Some(listed) = self.relisted_pods.take() {
            self.retain_pods(&listed);
        }
    }

    pub(super) fn apply_pod_state(&mut self, pod: &Pod, key: &str) {
        let key = key.to_string();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if live::is_terminal(pod) {
            self.drop_pod(&key);
            return;
        }
        if self.pods.get(&key).is_some_and(|t| t.uid != uid) {
            // Deleted and created again under the same name.
            self.drop_pod(&key);
        }
        let ours = live::scheduler_name(pod) == self.scheduler_name;
        let bound_to = live::node_name(pod);
        let current = self.pods.get(&key).map(|t| &t.state);
        match (bound_to, current) {
            (Some(n), Some(PodState::Binding { id, node })) if node == n => {
                let state = PodState::Bound {
                    id: *id,
                    node: node.clone(),
                };
                self.set(&key, uid, state);
            }
            (Some(n), Some(PodState::Bound { id, node })) if node == n => {
                let id = *id;
                self.note_checkpoint(&key, id, pod);
            }
            (Some(n), Some(PodState::Orphan { node, .. })) if node == n => {}
            (Some(n), _) => {
                // Bound by someone else, or first seen bound: count it where it is.
                self.forget(&key);
                let mut spec = match live::pod_spec(&self.catalog, pod) {
                    Ok(spec) => spec,
                    Err(e) => {
                        tracing::warn!(pod = %key, error = %e, "bound pod cannot be read; its usage is not counted");
                        return;
                    }
                };
                // Its devices are held by its claims, as their status says; its
                // ReadWriteOncePod claims are in use.
                let _ = self.read_pod_claims(&key, pod, &mut spec);
                let _ = self.read_pod_volumes(&key, pod, &mut spec);
                if ours {
                    // A running member counts towards its gang (a gang grows around it).
                    let _ = self.gang_of(pod, &mut spec);
                }
                let gpus = pod
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(GPU_INDICES_ANNOTATION))
                    .and_then(|v| live::parse_gpu_indices(v))
                    .or_else(|| self.extended_claim_gpus(pod, n));
                let started = self.pod_time(pod, true);
                let state = self.restore(&key, spec, n.to_string(), gpus, started);
                self.set(&key, uid, state);
            }
            (None, Some(PodState::Queued(_) | PodState::Binding { .. })) => {
                if live::is_deleting(pod) || !ours {
                    self.forget(&key);
                }
            }
            (None, Some(PodState::Bound { .. } | PodState::Orphan { .. })) => {
                // Only an older object than the one we saw bound; the watch catches up.
            }
            (
                None,
                Some(PodState::Gated | PodState::Invalid(_) | PodState::GangWait { .. }) | None,
            ) => {
                self.forget(&key);
                if !ours || live::is_deleting(pod) {
                    return;
                }
                if live::is_gated(pod) {
                    self.set(&key, uid, PodState::Gated);
                    return;
                }
                self.note_extended_gpus(&key, pod);
                let read = live::pod_spec(&self.catalog, pod).and_then(|mut spec| {
                    let group = self.gang_of(pod, &mut spec)?;
                    Ok((spec, group))
                });
                // A pod with claims waits until they can be read (created, their classes
                // known), then takes their devices.
                let read = match read {
                    Ok((mut spec, group)) => {
                        match self.read_pod_claims(&key, pod, &mut spec).and_then(|()| {
                            self.read_pod_volumes(&key, pod, &mut spec)
                                .map_err(ClaimWait::Waiting)
                        }) {
                            Ok(()) => Ok((spec, group)),
                            Err(ClaimWait::Invalid(e)) => Err(e),
                            Err(ClaimWait::Waiting(reason)) => {
                                self.set(&key, uid, PodState::Invalid(Box::new(pod.clone())));
                                self.report(&key, "Unschedulable", reason);
                                return;
                            }
                        }
                    }
                    other => other,
                };
                match read {
                    Ok((spec, group)) => {
                        let problem = group
                            .as_ref()
                            .and_then(|g| self.gangs.groups.get(g))
                            .and_then(|g| g.problem().map(str::to_string));
                        match problem {
                            None => {
                                let id = self.scheduler.submit(spec, self.pod_time(pod, false));
                                self.keys.insert(id, key.clone());
                                self.set(&key, uid, PodState::Queued(id));
                            }
                            Some(reason) => {
                                self.set(
                                    &key,
                                    uid,
                                    PodState::GangWait {
                                        spec: Box::new(spec),
                                        reason: reason.clone(),
                                    },
                                );
                                self.report(&key, "Unschedulable", reason);
                            }
                        }
                    }
                    Err(e) => {
                        self.set(&key, uid, PodState::Invalid(Box::new(pod.clone())));
                        self.report(&key, "SchedulerError", e.message);
                    }
                }
            }
        }
    }

    /// Records a pod's gang and whether it runs, for its PodGroup's status.
    pub(super) fn track_membership(&mut self, key: &str, pod: &Pod) {
        let group = if live::scheduler_name(pod) == self.scheduler_name {
            live::pod_group_key(pod).or_else(|| self.owner_group_key(pod))
        } else {
            None
        };
        let running = live::is_running(pod);
        let resources = group.as_ref().map(|_| self.refusals.intern(pod));
        let Some(t) = self.pods.get_mut(key) else {
            return;
        };
        let old = std::mem::replace(&mut t.group, group.clone());
        let changed = old != group || t.running != running || t.resources != resources;
        t.running = running;
        t.resources = resources;
        if old != group {
            if let Some(old) = &old {
                self.gangs.leave(old, key);
            }
            if let Some(g) = &group {
                self.gangs
                    .groups
                    .entry(g.clone())
                    .or_insert_with(|| Group::new(false, Err(not_found(g))))
                    .members
                    .insert(key.to_string());
            }
        }
        if changed {
            self.gangs.dirty_groups.extend(group);
        }
    }

    /// A Pod was deleted. A running pod deleted as a disruption (the Eviction API,
    /// Kestrel's preemption: `DisruptionTarget`) keeps its gang's place in the queue for
    /// the pods that replace it.
    pub fn delete_pod(&mut self, pod: &Pod) {
        let key = live::pod_key(pod);
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let Some(t) = self
            .pods
            .get(&key)
            .filter(|t| uid.is_empty() || t.uid == uid)
        else {
            return;
        };
        if let (PodState::Bound { id, .. }, true) = (&t.state, live::is_disrupted(pod)) {
            self.scheduler.keep_queue_place(*id);
        }
        self.drop_pod(&key);
    }

    /// Sets a pod's state, keeping what is known of its gang.
    pub(super) fn set(&mut self, key: &str, uid: String, state: PodState) {
        if !matches!(state, PodState::Invalid(_) | PodState::GangWait { .. }) {
            self.reported.remove(key);
        }
        match self.pods.get_mut(key) {
            Some(t) => {
                t.uid = uid;
                t.state = state;
                if let Some(g) = &t.group {
                    self.gangs.dirty_groups.insert(g.clone());
                }
            }
            None => {
                self.pods.insert(
                    key.to_string(),
                    Tracked {
                        uid,
                        state,
                        group: None,
                        running: false,
                        resources: None,
                    },
                );
            }
        }
    }

    /// Queues a `PodScheduled=False` report for a pod that waits outside the engine, once
    /// per distinct message.
    pub(super) fn report(&mut self, key: &str, reason: &'static str, message: String) {
        if self.reported.get(key) == Some(&message) {
            return;
        }
        let Some(t) = self.pods.get(key) else {
            return;
        };
        self.reported.insert(key.to_string(), message.clone());
        self.invalid_reports
            .push(StatusWrite::of(key, &t.uid, reason, message));
    }

    /// Whether a tracked pod waits to be placed, in the engine's queue or outside it
    /// (unreadable as yet): a change to what it depends on may let it in.
    pub(super) fn waits_for_a_node(&self, key: &str) -> bool {
        self.pods
            .get(key)
            .is_some_and(|t| matches!(t.state, PodState::Queued(_) | PodState::Invalid(_)))
    }

    /// Reads pods again from their objects, as if they had just arrived: what they
    /// depend on changed.
    pub(super) fn read_again(&mut self, pods: Vec<Arc<Pod>>) {
        for pod in pods {
            let key = live::pod_key(&pod);
            self.forget(&key);
            self.apply_pod(&pod);
        }
    }

    /// Drops a pod, releasing what it held in the engine.
    pub(super) fn forget(&mut self, key: &str) {
        self.evictions.cancel(key);
        let Some(t) = self.pods.remove(key) else {
            return;
        };
        if let PodState::Queued(id) | PodState::Binding { id, .. } | PodState::Bound { id, .. } =
            t.state
        {
            let _ = self.scheduler.finish(id);
            self.keys.remove(&id);
        }
        if let Some(g) = &t.group {
            self.gangs.leave(g, key);
        }
    }

    /// A pod is gone for good (deleted or finished).
    pub(super) fn drop_pod(&mut self, key: &str) {
        self.forget(key);
        self.dra.forget_pod(key);
        self.volumes.volume_pods.remove(key);
        self.reported.remove(key);
    }

    pub(super) fn restore(
        &mut self,
        key: &str,
        spec: PodSpec,
        node: String,
        gpus: Option<GpuAssignment>,
        started: Millis,
    ) -> PodState {
        if self.scheduler.cluster().id_of(&node).is_none() {
            return PodState::Orphan {
                node,
                spec: Box::new(spec),
                gpus,
            };
        }
        match self.scheduler.restore_bound(spec, &node, gpus, started) {
            Ok(id) => {
                self.keys.insert(id, key.to_string());
                PodState::Bound { id, node }
            }
            Err(e) => unreachable!("node {node} is known: {e}"),
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
                PodState::GangWait { .. } => "gang",
                _ => continue,
            };
            *out.entry(kind).or_default() += 1;
        }
        out
    }
}

pub(super) fn reason_kind(reason: Option<&Unschedulable>) -> &'static str {
    match reason {
        None => "untried",
        Some(r) if r.gang.is_some() && !r.is_capacity() => "gang",
        Some(r) if r.is_capacity() => "capacity",
        Some(_) => "constraints",
    }
}
