//! The API writes a scheduler makes: the GPU annotation and the binding, the pod's
//! `PodScheduled` condition, `FailedScheduling` events, preemption (checkpoint requests,
//! `DisruptionTarget`, deletes, `Preempted` events), and the status of Kestrel's
//! PodGroups (server-side apply) with Warning events on those it cannot use, and Warning
//! events on other projects' objects with fields Kestrel does not honour.

use crate::index::{
    BindOutcome, BindWrite, CheckpointWrite, EvictWrite, GroupEventWrite, GroupStatusWrite,
    NominationWrite, ProvisionWrite, QueueStatusWrite, StatusWrite, DELETE_PROTECTION,
};
use crate::limiter::Limiter;
use k8s_openapi::api::core::v1::{
    Binding, ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod,
};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kestrel_objects::crds::{ClusterQueue, LocalQueue, PodGroup, API_VERSION};
use kestrel_objects::live::{CHECKPOINT_REQUEST_ANNOTATION, GPU_INDICES_ANNOTATION};
use kestrel_objects::volumes::{BOUND_BY_CONTROLLER_ANNOTATION, SELECTED_NODE_ANNOTATION};
use kestrel_objects::warning::FieldWarning;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions,
};
use kube::Client;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

mod reports;
pub use reports::{describe_write_error, pod_group_status_patch, warned_reference};

/// The field manager of every write Kestrel makes.
pub const FIELD_MANAGER: &str = "kestrel";
/// Longest event note the API server accepts (events.k8s.io/v1: 1 kB).
const MAX_NOTE: usize = 1024;
/// How long a bind waits for the claims it provisions to be bound (kube-scheduler's own
/// bind timeout is 600 s).
pub const VOLUME_BIND_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest condition message the API server accepts (metav1.Condition: 32 kB).
const MAX_CONDITION_MESSAGE: usize = 32 * 1024;

/// Whether a claim is bound (to `volume`, when given).
fn claim_bound_to(claim: &PersistentVolumeClaim, volume: Option<&str>) -> bool {
    let bound = claim.spec.as_ref().and_then(|s| s.volume_name.as_deref());
    match volume {
        Some(v) => bound == Some(v),
        None => bound.is_some_and(|v| !v.is_empty()),
    }
}

/// `text` cut to at most `max` bytes (on a character boundary), marked with "...".
fn truncated(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut cut = max - 3;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &text[..cut])
}

/// How the chosen GPU indices reach a pod.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GpuIndicesWrite {
    /// A merge patch of the annotation, then the binding: two writes, the annotation on
    /// the pod before it has a node.
    Patch,
    /// In the Binding's `metadata.annotations`, which the API server copies onto the pod
    /// as it sets the node: one write per bind, and no annotation left behind by a bind
    /// that fails. The default: every supported API server copies them.
    #[default]
    Binding,
}

/// Writes to the API server, rate limited.
#[derive(Clone)]
pub struct ApiWriter {
    client: Client,
    /// `reportingController` of events (the scheduler name).
    pub controller: String,
    /// `reportingInstance` of events (this replica).
    pub instance: String,
    limiter: Arc<Limiter>,
    gpu_indices: GpuIndicesWrite,
    /// Binds are refused once leadership lapsed by this replica's clock.
    lease: crate::leader::LeaseClock,
}

/// The HTTP status of an API error, if the server answered.
fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

impl ApiWriter {
    pub fn new(client: Client, controller: &str, instance: &str, limiter: Arc<Limiter>) -> Self {
        ApiWriter {
            client,
            controller: controller.to_string(),
            instance: instance.to_string(),
            limiter,
            gpu_indices: GpuIndicesWrite::default(),
            lease: crate::leader::LeaseClock::unelected(),
        }
    }

    /// Checks leadership against `lease` before each write of a bind.
    pub fn with_lease(mut self, lease: crate::leader::LeaseClock) -> Self {
        self.lease = lease;
        self
    }

    /// Writes the GPU indices this way from now on.
    pub fn with_gpu_indices_write(mut self, how: GpuIndicesWrite) -> Self {
        self.gpu_indices = how;
        self
    }

    /// An error for a write a replica whose leadership lapsed must not make.
    fn lease_held(&self) -> Result<(), kube::Error> {
        match self.lease.held() {
            true => Ok(()),
            false => Err(kube::Error::Service(
                "leadership lapsed by this replica's clock (it was paused or cut off past \
                 its renew deadline): not writing"
                    .into(),
            )),
        }
    }

    fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Binds a claim that waited for its first consumer, as kube-scheduler's volume binding
    /// does: the claim is written on the PersistentVolume the engine chose for it (the
    /// volume controller then binds the claim to it), or, for one to be provisioned, `node`
    /// is written on the claim. Nothing is written for a claim bound already. `Err`: why
    /// the pod is tried again.
    async fn bind_claim(&self, write: &ProvisionWrite, node: &str) -> Result<(), String> {
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &write.namespace);
        let what = format!("PersistentVolumeClaim {}/{}", write.namespace, write.claim);
        self.limiter.acquire().await;
        let current = claims
            .get(&write.claim)
            .await
            .map_err(|e| format!("reading {what}: {e}"))?;
        if claim_bound_to(&current, write.volume.as_deref()) {
            return Ok(());
        }
        if let Some(volume) = &write.volume {
            return self.write_claim_ref(&current, volume, &what).await;
        }
        let selected = current
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SELECTED_NODE_ANNOTATION));
        if selected.map(String::as_str) != Some(node) {
            self.limiter.acquire().await;
            let patch = json!({"metadata": {
                "annotations": {SELECTED_NODE_ANNOTATION: node},
                "resourceVersion": current.metadata.resource_version,
            }});
            claims
                .patch(&write.claim, &Self::params(), &Patch::Merge(&patch))
                .await
                .map_err(|e| match status_code(&e) {
                    Some(409) => {
                        format!("{what} changed since it was read; the pod is tried again")
                    }
                    _ => format!("selecting node {node} for {what}: {e}"),
                })?;
        }
        Ok(())
    }

    /// Writes `claim` on PersistentVolume `volume` (`spec.claimRef`, with the
    /// `pv.kubernetes.io/bound-by-controller` annotation), as kube-scheduler does, unless
    /// the volume names it already; a volume another claim took refuses.
    async fn write_claim_ref(
        &self,
        claim: &PersistentVolumeClaim,
        volume: &str,
        what: &str,
    ) -> Result<(), String> {
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        self.limiter.acquire().await;
        let pv = volumes
            .get(volume)
            .await
            .map_err(|e| format!("reading PersistentVolume {volume} for {what}: {e}"))?;
        let namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
        let name = claim.metadata.name.as_deref().unwrap_or_default();
        match pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
            Some(r)
                if r.namespace.as_deref() == Some(namespace)
                    && r.name.as_deref() == Some(name)
                    && r.uid
                        .as_ref()
                        .is_none_or(|u| Some(u) == claim.metadata.uid.as_ref()) =>
            {
                return Ok(());
            }
            Some(r) => {
                return Err(format!(
                    "PersistentVolume {volume} was taken by claim {}/{} before {what}; the pod \
                     is tried again",
                    r.namespace.as_deref().unwrap_or_default(),
                    r.name.as_deref().unwrap_or_default()
                ))
            }
            None => {}
        }
        self.limiter.acquire().await;
        let patch = json!({
            "metadata": {
                "resourceVersion": pv.metadata.resource_version,
                "annotations": {BOUND_BY_CONTROLLER_ANNOTATION: "yes"},
            },
            "spec": {"claimRef": {
                "kind": "PersistentVolumeClaim", "apiVersion": "v1",
                "namespace": namespace, "name": name,
                "uid": claim.metadata.uid, "resourceVersion": claim.metadata.resource_version,
            }},
        });
        volumes
            .patch(volume, &Self::params(), &Patch::Merge(&patch))
            .await
            .map_err(|e| match status_code(&e) {
                Some(409) => format!(
                    "PersistentVolume {volume} changed since it was read; the pod is tried again"
                ),
                _ => format!("binding PersistentVolume {volume} to {what}: {e}"),
            })?;
        Ok(())
    }

    /// Waits until a claim [`Self::bind_claim`] bound is bound (up to
    /// [`VOLUME_BIND_TIMEOUT`]); `Err`: why the pod is tried again.
    async fn await_claim_bound(&self, write: &ProvisionWrite, node: &str) -> Result<(), String> {
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &write.namespace);
        let what = format!("PersistentVolumeClaim {}/{}", write.namespace, write.claim);
        let deadline = tokio::time::Instant::now() + VOLUME_BIND_TIMEOUT;
        loop {
            self.limiter.acquire().await;
            let claim = claims
                .get(&write.claim)
                .await
                .map_err(|e| format!("reading {what}: {e}"))?;
            if claim_bound_to(&claim, write.volume.as_deref()) {
                return Ok(());
            }
            let still_selected = claim
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SELECTED_NODE_ANNOTATION))
                .is_some_and(|n| n == node);
            if write.volume.is_none() && !still_selected {
                // The provisioner gave up on the node (it takes the annotation off).
                return Err(format!(
                    "{what} could not be provisioned on node {node}; the pod is tried again"
                ));
            }
            if tokio::time::Instant::now() >= deadline {
                let by = match &write.volume {
                    Some(volume) => format!(
                        "of writing it on PersistentVolume {volume} (is kube-controller-manager's \
                         volume controller running?)"
                    ),
                    None => format!(
                        "of selecting node {node} (is its StorageClass's provisioner running?)"
                    ),
                };
                return Err(format!(
                    "{what} was not bound within {}s {by}; the pod is tried again",
                    VOLUME_BIND_TIMEOUT.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn params() -> PatchParams {
        PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..Default::default()
        }
    }

    /// Writes the GPU choice onto the pod, then binds it (or both at once, see
    /// [`GpuIndicesWrite`]). `still_leader` is asked right before the binding is posted: a
    /// replica that lost its lease posts nothing.
    pub async fn bind(&self, write: &BindWrite, still_leader: impl Fn() -> bool) -> BindOutcome {
        let still_leader = || still_leader() && self.lease.held();
        let Some(extended) = &write.extended_claim else {
            return self.bind_claimed(write, &still_leader).await;
        };
        let claim = match self
            .write_extended_claim(write, extended, &still_leader)
            .await
        {
            Ok(claim) => claim,
            Err(outcome) => return outcome,
        };
        let outcome = self.bind_claimed(write, &still_leader).await;
        if outcome != BindOutcome::Bound {
            // Its devices would stay held for a pod that is not on the node.
            self.delete_extended_claim(&write.namespace, &claim).await;
        }
        outcome
    }

    /// Creates the claim for the pod's `nvidia.com/gpu` on a node where a DRA device class
    /// serves it, allocated and reserved for the pod, and names it in the pod's
    /// `status.extendedResourceClaimStatus`, as kube-scheduler does before it binds (the
    /// kubelet prepares the claim's devices through the DRA driver). Returns its name.
    async fn write_extended_claim(
        &self,
        write: &BindWrite,
        extended: &crate::index::ExtendedClaimWrite,
        still_leader: &impl Fn() -> bool,
    ) -> Result<String, BindOutcome> {
        let claims: Api<ResourceClaim> = Api::namespaced(self.client.clone(), &write.namespace);
        if let Some(stale) = &extended.stale {
            self.delete_extended_claim(&write.namespace, stale).await;
        }
        if !still_leader() {
            return Err(BindOutcome::Retry(
                "leadership lost before the extended-resource claim was written".into(),
            ));
        }
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..Default::default()
        };
        let what = format!(
            "the ResourceClaim for pod {}/{}'s nvidia.com/gpu",
            write.namespace, write.name
        );
        let claim: ResourceClaim = serde_json::from_value(extended.claim.clone())
            .map_err(|e| BindOutcome::Retry(format!("{what}: {e}")))?;
        self.limiter.acquire().await;
        let mut created = claims
            .create(&params, &claim)
            .await
            .map_err(|e| BindOutcome::Retry(format!("creating {what}: {e}")))?;
        let name = created.metadata.name.clone().unwrap_or_default();
        let written: Result<(), BindOutcome> = async {
            created.status = Some(
                serde_json::from_value(extended.status.clone())
                    .map_err(|e| BindOutcome::Retry(format!("{what}: {e}")))?,
            );
            self.limiter.acquire().await;
            claims
                .replace_status(&name, &params, &created)
                .await
                .map_err(|e| BindOutcome::Retry(format!("allocating {what}: {e}")))?;
            let status = json!({"metadata": {"uid": write.uid}, "status": {"extendedResourceClaimStatus": {
                "resourceClaimName": name, "requestMappings": extended.mappings}}});
            self.limiter.acquire().await;
            self.pods(&write.namespace)
                .patch_status(&write.name, &Self::params(), &Patch::Merge(&status))
                .await
                .map_err(|e| match status_code(&e) {
                    Some(404) | Some(409) => BindOutcome::PodGone,
                    _ => BindOutcome::Retry(format!("naming {what} in the pod's status: {e}")),
                })?;
            Ok(())
        }
        .await;
        if let Err(outcome) = written {
            self.delete_extended_claim(&write.namespace, &name).await;
            return Err(outcome);
        }
        Ok(name)
    }

    /// Deletes an extended-resource claim a bind made (its finalizer first: nothing else
    /// takes it off a claim that is not in use), best effort: one left behind is deleted
    /// before the pod's next bind.
    async fn delete_extended_claim(&self, namespace: &str, name: &str) {
        let claims: Api<ResourceClaim> = Api::namespaced(self.client.clone(), namespace);
        let unprotect = json!({"metadata": {"finalizers": null}});
        self.limiter.acquire().await;
        let patched = claims
            .patch(name, &Self::params(), &Patch::Merge(&unprotect))
            .await;
        if let Err(e) = patched {
            if status_code(&e) != Some(404) {
                tracing::warn!(claim = %format!("{namespace}/{name}"), error = %e, "cannot release a claim a failed bind made");
            }
            return;
        }
        self.limiter.acquire().await;
        if let Err(e) = claims.delete(name, &DeleteParams::default()).await {
            if status_code(&e) != Some(404) {
                tracing::warn!(claim = %format!("{namespace}/{name}"), error = %e, "cannot delete a claim a failed bind made");
            }
        }
    }

    /// [`ApiWriter::bind`] once any extended-resource claim is written.
    async fn bind_claimed(
        &self,
        write: &BindWrite,
        still_leader: &impl Fn() -> bool,
    ) -> BindOutcome {
        // DRA, as kube-scheduler does it: the claims' allocation and the pod's reservation
        // first, on the versions seen (a claim changed since is a conflict, and the pod is
        // tried again with what the watch then shows), then the binding.
        for claim in &write.claims {
            if !still_leader() {
                return BindOutcome::Retry("leadership lost before the claims were written".into());
            }
            let claims: Api<ResourceClaim> = Api::namespaced(self.client.clone(), &claim.namespace);
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..Default::default()
            };
            let mut object: ResourceClaim = match serde_json::from_str(&claim.object) {
                Ok(object) => object,
                Err(e) => return BindOutcome::Retry(format!("the claim to write: {e}")),
            };
            let what = format!("ResourceClaim {}/{}", claim.namespace, claim.name);
            let protected = |c: &ResourceClaim| {
                c.metadata
                    .finalizers
                    .iter()
                    .flatten()
                    .any(|f| f == DELETE_PROTECTION)
            };
            if protected(&object) && claim.adds_finalizer {
                // The finalizer first (the status subresource ignores metadata), on the
                // version seen; the status then goes on the version that answer gives.
                self.limiter.acquire().await;
                match claims.replace(&claim.name, &params, &object).await {
                    Ok(updated) => {
                        object.metadata.resource_version = updated.metadata.resource_version;
                    }
                    Err(e) => {
                        return BindOutcome::Retry(match status_code(&e) {
                            Some(409) => {
                                format!("{what} changed since it was read; the pod is tried again")
                            }
                            Some(404) => format!("{what} is gone"),
                            _ => format!("protecting {what}: {e}"),
                        })
                    }
                }
            }
            self.limiter.acquire().await;
            if let Err(e) = claims.replace_status(&claim.name, &params, &object).await {
                return BindOutcome::Retry(match status_code(&e) {
                    Some(409) => {
                        format!("{what} changed since it was read; the pod is tried again")
                    }
                    Some(404) => format!("{what} is gone"),
                    _ => format!("writing the allocation of {what}: {e}"),
                });
            }
        }
        // Volumes that wait for their first consumer: every claim is written on its volume
        // (or its node on it) first, then the pod waits for all of them to be bound, as
        // kube-scheduler's volume binding does.
        for claim in &write.provision {
            if !still_leader() {
                return BindOutcome::Retry("leadership lost before the volumes were bound".into());
            }
            if let Err(why) = self.bind_claim(claim, &write.node).await {
                return BindOutcome::Retry(why);
            }
        }
        for claim in &write.provision {
            if let Err(why) = self.await_claim_bound(claim, &write.node).await {
                return BindOutcome::Retry(why);
            }
        }
        let pods = self.pods(&write.namespace);
        let patch_first = self.gpu_indices == GpuIndicesWrite::Patch;
        if let Some(indices) = write.gpu_indices.as_ref().filter(|_| patch_first) {
            self.limiter.acquire().await;
            let patch = json!({"metadata": {"annotations": {GPU_INDICES_ANNOTATION: indices}}});
            if let Err(e) = pods
                .patch(&write.name, &Self::params(), &Patch::Merge(&patch))
                .await
            {
                return match status_code(&e) {
                    Some(404) => BindOutcome::PodGone,
                    _ => BindOutcome::Retry(format!("annotating the pod: {e}")),
                };
            }
        }
        if !still_leader() {
            return BindOutcome::Retry("leadership lost before the bind".into());
        }
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(write.name.clone()),
                namespace: Some(write.namespace.clone()),
                uid: Some(write.uid.clone()).filter(|u| !u.is_empty()),
                annotations: write
                    .gpu_indices
                    .as_ref()
                    .filter(|_| !patch_first)
                    .map(|i| [(GPU_INDICES_ANNOTATION.to_string(), i.clone())].into()),
                ..Default::default()
            },
            target: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(write.node.clone()),
                ..Default::default()
            },
        };
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..Default::default()
        };
        self.limiter.acquire().await;
        let result: Result<serde_json::Value, kube::Error> = pods
            .create_subresource("binding", &write.name, &params, &binding)
            .await;
        match result {
            Ok(_) => BindOutcome::Bound,
            Err(e) => match status_code(&e) {
                Some(404) => BindOutcome::PodGone,
                Some(409) => {
                    // Already bound, or replaced: read what the API has now.
                    self.limiter.acquire().await;
                    match pods.get_opt(&write.name).await {
                        Ok(pod) => BindOutcome::Conflict(pod.map(Box::new)),
                        Err(e) => {
                            BindOutcome::Retry(format!("reading the pod after a conflict: {e}"))
                        }
                    }
                }
                // Refused: nothing was written.
                Some(code) if code < 500 => BindOutcome::Retry(e.to_string()),
                _ => self.settle_unanswered_bind(write, &e, still_leader).await,
            },
        }
    }

    /// A binding whose answer was lost (connection cut, timeout, server error) may have
    /// been written. Requeueing the pod would free its GPUs in the engine while the API
    /// may hold it bound to them, and the next pod placed there over-commits the node. So
    /// the pod is read back, as often as it takes, and what the API holds decides.
    async fn settle_unanswered_bind(
        &self,
        write: &BindWrite,
        error: &kube::Error,
        still_leader: &impl Fn() -> bool,
    ) -> BindOutcome {
        let pods = self.pods(&write.namespace);
        let mut delay = Duration::from_millis(250);
        loop {
            if !still_leader() {
                return BindOutcome::Retry(format!(
                    "{error}; leadership lost before the pod could be read back"
                ));
            }
            self.limiter.acquire().await;
            match pods.get_opt(&write.name).await {
                Ok(None) => return BindOutcome::PodGone,
                Ok(Some(pod)) => {
                    let same_pod = write.uid.is_empty()
                        || pod.metadata.uid.as_deref() == Some(write.uid.as_str());
                    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
                    return match node {
                        Some(n) if same_pod && n == write.node => {
                            tracing::info!(pod = %format!("{}/{}", write.namespace, write.name), node = %write.node, error = %error, "the binding's answer was lost; the pod reads back bound");
                            BindOutcome::Bound
                        }
                        Some(_) => BindOutcome::Conflict(Some(Box::new(pod))),
                        None if !same_pod => BindOutcome::Conflict(Some(Box::new(pod))),
                        None => BindOutcome::Retry(format!("{error}; the pod reads back unbound")),
                    };
                }
                Err(_) => {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(4));
                }
            }
        }
    }
}
