//! The writes that report rather than place: events, the pod's `PodScheduled` condition,
//! checkpoint requests, nominations, evictions, PodGroup and queue status, Warning events
//! on other projects' objects, and how a failed write reads in the log.

use super::*;

impl ApiWriter {
    /// Posts an event (events.k8s.io/v1), rate limited.
    async fn post_event(&self, namespace: &str, event: &Event) -> Result<(), kube::Error> {
        self.limiter.acquire().await;
        let events: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        events.create(&PostParams::default(), event).await?;
        Ok(())
    }

    /// The `Scheduled` event of a bound pod, as kube-scheduler records it (what
    /// `kubectl describe pod` users look for).
    pub async fn report_scheduled(&self, write: &BindWrite) -> Result<(), kube::Error> {
        let note = match &write.gpu_indices {
            Some(gpus) => format!(
                "Successfully assigned {}/{} to {} (GPUs {gpus})",
                write.namespace, write.name, write.node
            ),
            None => format!(
                "Successfully assigned {}/{} to {}",
                write.namespace, write.name, write.node
            ),
        };
        let event = self.event_of(
            "Normal",
            pod_reference(&write.namespace, &write.name, &write.uid),
            "Binding",
            "Scheduled",
            &note,
            Timestamp::now(),
        );
        match self.post_event(&write.namespace, &event).await {
            Ok(()) => Ok(()),
            // The namespace is going away with the pod: nothing to record.
            Err(e) if matches!(status_code(&e), Some(403 | 404)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Marks the pod `PodScheduled=False` with the explanation (status subresource,
    /// strategic merge on `conditions` by `type`), then records a `FailedScheduling` event.
    pub async fn report_unschedulable(&self, write: &StatusWrite) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let patch = json!({
            "status": {
                "conditions": [{
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": write.reason,
                    "message": write.message,
                    "lastProbeTime": null,
                    "lastTransitionTime": Time(now),
                }]
            }
        });
        self.limiter.acquire().await;
        let status = self
            .pods(&write.namespace)
            .patch_status(&write.name, &Self::params(), &Patch::Strategic(&patch))
            .await;
        match status {
            Ok(_) => {}
            Err(e) if status_code(&e) == Some(404) => return Ok(()),
            Err(e) => return Err(e),
        }
        self.post_event(&write.namespace, &self.event(write, now))
            .await
    }

    /// The `FailedScheduling` event for a pod (events.k8s.io/v1).
    pub fn event(&self, write: &StatusWrite, now: Timestamp) -> Event {
        let regarding = pod_reference(&write.namespace, &write.name, &write.uid);
        self.warning(
            regarding,
            "Scheduling",
            "FailedScheduling",
            &write.message,
            now,
        )
    }

    /// A Warning event (events.k8s.io/v1) about an object in a namespace.
    fn warning(
        &self,
        regarding: ObjectReference,
        action: &str,
        reason: &str,
        message: &str,
        now: Timestamp,
    ) -> Event {
        self.event_of("Warning", regarding, action, reason, message, now)
    }

    /// An event (events.k8s.io/v1) of a type (`Normal`, `Warning`) about an object.
    fn event_of(
        &self,
        type_: &str,
        regarding: ObjectReference,
        action: &str,
        reason: &str,
        message: &str,
        now: Timestamp,
    ) -> Event {
        let note = truncated(message, MAX_NOTE);
        let name = regarding.name.clone().unwrap_or_default();
        Event {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{:x}", now.as_nanosecond())),
                namespace: regarding.namespace.clone(),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some(action.into()),
            reason: Some(reason.into()),
            type_: Some(type_.into()),
            note: Some(note),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            regarding: Some(regarding),
            ..Default::default()
        }
    }

    /// Asks a preemption victim to checkpoint: the `kestrel.dev/checkpoint-request`
    /// annotation (merge patch, guarded by the pod's UID) and a `CheckpointRequested` event.
    pub async fn request_checkpoint(&self, write: &CheckpointWrite) -> Result<(), kube::Error> {
        self.lease_held()?;
        let patch = json!({
            "metadata": {
                "uid": write.uid,
                "annotations": {CHECKPOINT_REQUEST_ANNOTATION: write.requested_at},
            }
        });
        self.limiter.acquire().await;
        match self
            .pods(&write.namespace)
            .patch(&write.name, &Self::params(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            // Gone, or replaced by a pod of the same name (its UID differs, which the API
            // refuses as a change of an immutable field): nothing to ask.
            Err(e) if matches!(status_code(&e), Some(404 | 409 | 422)) => return Ok(()),
            Err(e) => return Err(e),
        }
        let note = format!(
            "checkpoint within {}s, then the pod is evicted: {}",
            write.grace_seconds, write.message
        );
        let event = self.event_of(
            "Normal",
            pod_reference(&write.namespace, &write.name, &write.uid),
            "Preempting",
            "CheckpointRequested",
            &note,
            Timestamp::now(),
        );
        self.post_event(&write.namespace, &event).await
    }

    /// Writes a preemptor's `status.nominatedNodeName` (status subresource, strategic
    /// merge), as kube-scheduler does.
    pub async fn nominate(&self, write: &NominationWrite) -> Result<(), kube::Error> {
        self.lease_held()?;
        let patch = json!({"status": {"nominatedNodeName": write.node}});
        self.limiter.acquire().await;
        match self
            .pods(&write.namespace)
            .patch_status(&write.name, &Self::params(), &Patch::Strategic(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if status_code(&e) == Some(404) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Evicts a preemption victim as kube-scheduler does: the `DisruptionTarget`
    /// condition (reason `PreemptionByScheduler`) on its status, then a delete guarded by
    /// its UID (the pod's own termination grace period applies), then a `Preempted` event.
    pub async fn evict(&self, write: &EvictWrite) -> Result<(), kube::Error> {
        self.lease_held()?;
        let now = Timestamp::now();
        let pods = self.pods(&write.namespace);
        let condition = json!({
            "status": {
                "conditions": [{
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "PreemptionByScheduler",
                    "message": truncated(&format!("{}: {}", self.controller, write.message), MAX_CONDITION_MESSAGE),
                    "lastTransitionTime": Time(now),
                }]
            }
        });
        self.limiter.acquire().await;
        match pods
            .patch_status(&write.name, &Self::params(), &Patch::Strategic(&condition))
            .await
        {
            Ok(_) => {}
            Err(e) if status_code(&e) == Some(404) => return Ok(()),
            Err(e) => return Err(e),
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(write.uid.clone()).filter(|u| !u.is_empty()),
                resource_version: None,
            }),
            ..Default::default()
        };
        self.limiter.acquire().await;
        match pods.delete(&write.name, &params).await {
            Ok(_) => {}
            // Gone already, or a new pod of that name (the victim is gone): done.
            Err(e) if matches!(status_code(&e), Some(404 | 409)) => return Ok(()),
            Err(e) => return Err(e),
        }
        let event = self.event_of(
            "Normal",
            pod_reference(&write.namespace, &write.name, &write.uid),
            "Preempting",
            "Preempted",
            &write.message,
            now,
        );
        self.post_event(&write.namespace, &event).await
    }

    /// Writes a PodGroup's status by server-side apply of the status subresource (field
    /// manager `kestrel`, forced: Kestrel owns these fields). Returns the time the
    /// `Scheduled` condition carries.
    pub async fn apply_pod_group_status(
        &self,
        write: &GroupStatusWrite,
    ) -> Result<Time, kube::Error> {
        let since = write.since.clone().unwrap_or(Time(Timestamp::now()));
        let body = pod_group_status_patch(write, &since);
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &write.namespace,
            &ApiResource::erase::<PodGroup>(&()),
        );
        self.limiter.acquire().await;
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match api
            .patch_status(&write.name, &params, &Patch::Apply(&body))
            .await
        {
            Ok(_) => Ok(since),
            // Deleted meanwhile: nothing to report on.
            Err(e) if status_code(&e) == Some(404) => Ok(since),
            Err(e) => Err(e),
        }
    }

    /// Writes a ClusterQueue's or LocalQueue's status by server-side apply of the status
    /// subresource (field manager `kestrel`, forced).
    pub async fn apply_queue_status(&self, write: &QueueStatusWrite) -> Result<(), kube::Error> {
        let resource = match write.kind {
            "ClusterQueue" => ApiResource::erase::<ClusterQueue>(&()),
            _ => ApiResource::erase::<LocalQueue>(&()),
        };
        let api: Api<DynamicObject> = match &write.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        let mut metadata = json!({"name": write.name});
        if let Some(ns) = &write.namespace {
            metadata["namespace"] = json!(ns);
        }
        let body = json!({
            "apiVersion": API_VERSION,
            "kind": write.kind,
            "metadata": metadata,
            "status": write.status,
        });
        self.limiter.acquire().await;
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match api
            .patch_status(&write.name, &params, &Patch::Apply(&body))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if status_code(&e) == Some(404) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// An event about any object (a TrainingJob's progress), rate limited.
    pub async fn post_object_event(
        &self,
        namespace: &str,
        type_: &str,
        regarding: ObjectReference,
        action: &str,
        reason: &str,
        note: &str,
    ) -> Result<(), kube::Error> {
        let event = self.event_of(type_, regarding, action, reason, note, Timestamp::now());
        self.post_event(namespace, &event).await
    }

    /// A Warning event (the warning's reason, `FieldNotHonoured` or `InconsistentVolumes`,
    /// and the warning as its note) on the object
    /// a warning is about; a cluster-scoped object's goes to `default`, as Kubernetes
    /// puts them. Nothing to post without an object to regard ([`warned_reference`]).
    pub async fn report_field_warning(&self, warning: &FieldWarning) -> Result<(), kube::Error> {
        let Some(regarding) = warned_reference(warning) else {
            return Ok(());
        };
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let mut event = self.warning(
            regarding,
            "Reading",
            warning.reason,
            &warning.to_string(),
            Timestamp::now(),
        );
        event.metadata.namespace = Some(namespace.clone());
        self.post_event(&namespace, &event).await
    }

    /// A Warning event on a PodGroup Kestrel cannot use (reason `InvalidSpec`).
    pub async fn report_pod_group(&self, write: &GroupEventWrite) -> Result<(), kube::Error> {
        let regarding = ObjectReference {
            api_version: Some(API_VERSION.into()),
            kind: Some("PodGroup".into()),
            namespace: Some(write.namespace.clone()),
            name: Some(write.name.clone()),
            uid: Some(write.uid.clone()).filter(|u| !u.is_empty()),
            ..Default::default()
        };
        let event = self.warning(
            regarding,
            "Validating",
            write.reason,
            &write.message,
            Timestamp::now(),
        );
        self.post_event(&write.namespace, &event).await
    }
}

/// A reference to the object a warning is about; `None` when the warning names an object
/// no listing gave (a parent queue that is not defined): there is nothing to post it on.
pub fn warned_reference(warning: &FieldWarning) -> Option<ObjectReference> {
    let o = &warning.object;
    let api_version = o.api_version.clone().filter(|v| !v.is_empty())?;
    (!o.name.is_empty()).then(|| ObjectReference {
        api_version: Some(api_version),
        kind: Some(o.kind.clone()),
        namespace: o.namespace.clone(),
        name: Some(o.name.clone()),
        uid: o.uid.clone(),
        ..Default::default()
    })
}

/// A reference to a pod, for events.
fn pod_reference(namespace: &str, name: &str, uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(namespace.to_string()),
        name: Some(name.to_string()),
        uid: Some(uid.to_string()).filter(|u| !u.is_empty()),
        ..Default::default()
    }
}

/// The server-side apply body of a PodGroup's status: only the fields Kestrel owns.
pub fn pod_group_status_patch(write: &GroupStatusWrite, since: &Time) -> serde_json::Value {
    let mut condition = json!({
        "type": "Scheduled",
        "status": write.condition,
        "reason": write.reason,
        "message": truncated(&write.message, MAX_CONDITION_MESSAGE),
        "lastTransitionTime": since,
    });
    if let Some(generation) = write.observed_generation {
        condition["observedGeneration"] = json!(generation);
    }
    json!({
        "apiVersion": API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": write.name, "namespace": write.namespace},
        "status": {
            "phase": write.phase.as_str(),
            "scheduled": write.scheduled,
            "running": write.running,
            "conditions": [condition],
        }
    })
}

/// A failed write's error as one readable line: the API server's message without the
/// client's debug dump of the whole Status, and, when RBAC refused it (`... is forbidden:
/// User ... cannot VERB resource ...`), where the missing verb is granted.
pub fn describe_write_error(error: &str) -> String {
    let message = error.split(" (Status {").next().unwrap_or(error).trim();
    if message.contains("is forbidden: User") {
        format!(
            "{message}; Kestrel's ServiceAccount lacks this verb: grant it in the ClusterRole kestrel-scheduler (`kestrel manifests`, deploy/kestrel.yaml, or the Helm chart of this version)"
        )
    } else {
        message.to_string()
    }
}

#[cfg(test)]
mod write_error_tests {
    use super::describe_write_error;

    #[test]
    fn a_forbidden_write_names_the_role_that_grants_it_and_drops_the_status_dump() {
        let refused = r#"ApiError: pods "p1" is forbidden: User "system:serviceaccount:kube-system:kestrel" cannot create resource "pods/binding" in API group "" in the namespace "ml": Forbidden (Status { status: Some(Failure), code: 403 })"#;
        let line = describe_write_error(refused);
        assert!(
            line.starts_with(r#"ApiError: pods "p1" is forbidden"#),
            "{line}"
        );
        assert!(
            line.contains(r#"cannot create resource "pods/binding""#),
            "{line}"
        );
        assert!(line.contains("ClusterRole kestrel-scheduler"), "{line}");
        assert!(!line.contains("Status {"), "{line}");
        let conflict = "ApiError: Operation cannot be fulfilled: Conflict (Status { code: 409 })";
        assert_eq!(
            describe_write_error(conflict),
            "ApiError: Operation cannot be fulfilled: Conflict"
        );
    }
}
