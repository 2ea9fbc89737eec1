//! The API writes a scheduler makes: the GPU annotation and the binding, the pod's
//! `PodScheduled` condition, and `FailedScheduling` events.

use crate::convert::GPU_INDICES_ANNOTATION;
use crate::index::{BindJob, BindOutcome, StatusJob};
use crate::limiter::Limiter;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;
use std::sync::Arc;

/// The field manager of every write Kestrel makes.
pub const FIELD_MANAGER: &str = "kestrel";
/// Longest event note the API server accepts (events.k8s.io/v1: 1 kB).
const MAX_NOTE: usize = 1024;

/// Writes to the API server, rate limited.
#[derive(Clone)]
pub struct ApiWriter {
    client: Client,
    /// `reportingController` of events (the scheduler name).
    pub controller: String,
    /// `reportingInstance` of events (this replica).
    pub instance: String,
    limiter: Arc<Limiter>,
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
        }
    }

    fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn params() -> PatchParams {
        PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..Default::default()
        }
    }

    /// Writes the GPU choice onto the pod, then binds it. `still_leader` is asked right
    /// before the binding is posted: a replica that lost its lease posts nothing.
    pub async fn bind(&self, job: &BindJob, still_leader: impl Fn() -> bool) -> BindOutcome {
        let pods = self.pods(&job.namespace);
        if let Some(indices) = &job.gpu_indices {
            self.limiter.acquire().await;
            let patch = json!({"metadata": {"annotations": {GPU_INDICES_ANNOTATION: indices}}});
            if let Err(e) = pods
                .patch(&job.name, &Self::params(), &Patch::Merge(&patch))
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
                name: Some(job.name.clone()),
                namespace: Some(job.namespace.clone()),
                uid: Some(job.uid.clone()).filter(|u| !u.is_empty()),
                ..Default::default()
            },
            target: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(job.node.clone()),
                ..Default::default()
            },
        };
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..Default::default()
        };
        self.limiter.acquire().await;
        let result: Result<serde_json::Value, kube::Error> = pods
            .create_subresource("binding", &job.name, &params, &binding)
            .await;
        match result {
            Ok(_) => BindOutcome::Bound,
            Err(e) => match status_code(&e) {
                Some(404) => BindOutcome::PodGone,
                Some(409) => {
                    // Already bound, or replaced: read what the API has now.
                    self.limiter.acquire().await;
                    match pods.get_opt(&job.name).await {
                        Ok(pod) => BindOutcome::Conflict(pod.map(Box::new)),
                        Err(e) => {
                            BindOutcome::Retry(format!("reading the pod after a conflict: {e}"))
                        }
                    }
                }
                _ => BindOutcome::Retry(e.to_string()),
            },
        }
    }

    /// Marks the pod `PodScheduled=False` with the explanation (status subresource,
    /// strategic merge on `conditions` by `type`), then records a `FailedScheduling` event.
    pub async fn report_unschedulable(&self, job: &StatusJob) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let patch = json!({
            "status": {
                "conditions": [{
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": job.reason,
                    "message": job.message,
                    "lastProbeTime": null,
                    "lastTransitionTime": Time(now),
                }]
            }
        });
        self.limiter.acquire().await;
        let status = self
            .pods(&job.namespace)
            .patch_status(&job.name, &Self::params(), &Patch::Strategic(&patch))
            .await;
        match status {
            Ok(_) => {}
            Err(e) if status_code(&e) == Some(404) => return Ok(()),
            Err(e) => return Err(e),
        }
        self.limiter.acquire().await;
        let events: Api<Event> = Api::namespaced(self.client.clone(), &job.namespace);
        events
            .create(&PostParams::default(), &self.event(job, now))
            .await?;
        Ok(())
    }

    /// The `FailedScheduling` event for a pod (events.k8s.io/v1).
    pub fn event(&self, job: &StatusJob, now: Timestamp) -> Event {
        let mut note = job.message.clone();
        if note.len() > MAX_NOTE {
            let mut cut = MAX_NOTE - 3;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
            note.push_str("...");
        }
        Event {
            metadata: ObjectMeta {
                name: Some(format!("{}.{:x}", job.name, now.as_nanosecond())),
                namespace: Some(job.namespace.clone()),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some("Scheduling".into()),
            reason: Some("FailedScheduling".into()),
            type_: Some("Warning".into()),
            note: Some(note),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            regarding: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(job.namespace.clone()),
                name: Some(job.name.clone()),
                uid: Some(job.uid.clone()).filter(|u| !u.is_empty()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}
