//! The TrainingJob controller of `kestrel serve`: carries out what
//! [`kestrel_objects::training::reconcile`] decides (the same decisions the simulator takes),
//! and records each job as an MLflow run when tracking is configured.
//!
//! It runs only while this replica leads, and only for jobs whose `spec.schedulerName`
//! is this scheduler's (so that several schedulers in one cluster do not fight over a
//! job). Each reconcile reads the job and its pods fresh from the API server: a cached
//! job one status write behind would take the new attempt's pods for stale ones.

use crate::api::ApiWriter;
use crate::mlflow::Mlflow;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kestrel_objects::crds::{LocalQueue, PodGroup, API_VERSION};
use kestrel_objects::training::{
    self, is_finished, set_condition, set_state, Action, ObservedPod, Plan, TrainingJob,
    TrainingJobStatus, JOB_LABEL,
};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action as Requeue, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Field manager of the status writes.
const FIELD_MANAGER: &str = "kestrel-training";
/// A job with nothing due is looked at again this often anyway (a missed watch event).
const RESYNC: Duration = Duration::from_secs(60);
/// GPU model of a node (NVIDIA's GPU feature discovery).
const GPU_PRODUCT_LABEL: &str = "nvidia.com/gpu.product";

#[derive(Debug, Clone)]
pub struct TrainingConfig {
    pub scheduler_name: String,
    /// The cluster-wide MLflow tracking server (`--mlflow-tracking-uri`).
    pub mlflow_tracking_uri: Option<String>,
}

struct Ctx {
    client: Client,
    writer: ApiWriter,
    config: TrainingConfig,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Error(#[from] kube::Error);

fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Runs the controller until shutdown, while this replica leads.
pub async fn run(
    client: Client,
    writer: ApiWriter,
    config: TrainingConfig,
    mut leader: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        writer,
        config,
    });
    loop {
        tokio::select! {
            biased;
            _ = shutdown.wait_for(|s| *s) => return,
            r = leader.wait_for(|l| *l) => if r.is_err() { return },
        }
        let stop = {
            let mut leader = leader.clone();
            let mut shutdown = shutdown.clone();
            async move {
                tokio::select! {
                    _ = leader.wait_for(|l| !*l) => {}
                    _ = shutdown.wait_for(|s| *s) => {}
                }
            }
        };
        let jobs: Api<TrainingJob> = Api::all(client.clone());
        let pods: Api<Pod> = Api::all(client.clone());
        let groups: Api<PodGroup> = Api::all(client.clone());
        Controller::new(jobs, watcher::Config::default())
            .owns(pods, watcher::Config::default().labels(JOB_LABEL))
            .owns(groups, watcher::Config::default().labels(JOB_LABEL))
            .graceful_shutdown_on(stop)
            .run(reconcile, error_policy, ctx.clone())
            .for_each(|_| async {})
            .await;
        if *shutdown.borrow() {
            return;
        }
    }
}

fn error_policy(job: Arc<TrainingJob>, error: &Error, _: Arc<Ctx>) -> Requeue {
    tracing::warn!(
        job = %format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any()),
        %error,
        "TrainingJob reconcile failed; retrying"
    );
    Requeue::requeue(Duration::from_secs(5))
}

fn reference(job: &TrainingJob) -> ObjectReference {
    ObjectReference {
        api_version: Some(API_VERSION.into()),
        kind: Some("TrainingJob".into()),
        namespace: job.metadata.namespace.clone(),
        name: job.metadata.name.clone(),
        uid: job.metadata.uid.clone(),
        ..Default::default()
    }
}

impl Ctx {
    async fn event(&self, job: &TrainingJob, kind: &str, reason: &str, note: &str) {
        let ns = job.namespace().unwrap_or_default();
        if let Err(e) = self
            .writer
            .post_object_event(&ns, kind, reference(job), "Training", reason, note)
            .await
        {
            tracing::warn!(job = %job.name_any(), %e, "recording a TrainingJob event failed");
        }
    }

    async fn write_status(
        &self,
        job: &TrainingJob,
        status: &TrainingJobStatus,
    ) -> Result<(), Error> {
        if job.status.as_ref() == Some(status) {
            return Ok(());
        }
        let ns = job.namespace().unwrap_or_default();
        let api: Api<TrainingJob> = Api::namespaced(self.client.clone(), &ns);
        let body = json!({
            "apiVersion": API_VERSION, "kind": "TrainingJob",
            "metadata": {"name": job.name_any(), "namespace": ns},
            "status": status,
        });
        api.patch_status(
            &job.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await?;
        Ok(())
    }

    fn tracker(&self, job: &TrainingJob) -> Option<Result<Mlflow, String>> {
        let uri = job
            .spec
            .mlflow
            .as_ref()
            .and_then(|m| m.tracking_uri.clone())
            .or_else(|| self.config.mlflow_tracking_uri.clone())?;
        Some(Mlflow::new(&uri))
    }
}

/// Refuses a job before anything is created: Failed (reason `Invalid`) with the message,
/// and a Warning event, once per message. Looked at again on change or resync: a job
/// fixed (or whose queue appeared) then starts.
async fn refuse(ctx: &Ctx, job: &TrainingJob, message: String) -> Result<Requeue, Error> {
    let mut status = job.status.clone().unwrap_or_default();
    let same = status
        .conditions
        .iter()
        .any(|c| c.type_ == "Failed" && c.reason == "Invalid" && c.message == message);
    if !same {
        status = TrainingJobStatus::default();
        set_state(&mut status, "Failed", "Invalid", &message, Timestamp::now());
        ctx.write_status(job, &status).await?;
        ctx.event(job, "Warning", "Invalid", &message).await;
        tracing::warn!(job = %job.name_any(), %message, "TrainingJob refused");
    }
    Ok(Requeue::requeue(RESYNC))
}

fn refused(status: &TrainingJobStatus) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == "Failed" && c.status == "True" && c.reason == "Invalid")
}

fn millis(t: Timestamp) -> i64 {
    t.as_millisecond()
}

async fn reconcile(cached: Arc<TrainingJob>, ctx: Arc<Ctx>) -> Result<Requeue, Error> {
    let scheduler = cached.spec.scheduler_name.as_deref().unwrap_or("kestrel");
    if scheduler != ctx.config.scheduler_name {
        return Ok(Requeue::await_change());
    }
    let ns = cached.namespace().unwrap_or_default();
    let name = cached.name_any();
    let jobs: Api<TrainingJob> = Api::namespaced(ctx.client.clone(), &ns);
    let job = match jobs.get(&name).await {
        Ok(job) => job,
        Err(e) if code(&e) == Some(404) => return Ok(Requeue::await_change()),
        Err(e) => return Err(e.into()),
    };
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(Requeue::await_change());
    }
    let mut status = job.status.clone().unwrap_or_default();
    let plan = match training::plan(Path::new("cluster"), &job) {
        Ok(plan) => plan,
        Err(e) => return refuse(&ctx, &job, e.to_string()).await,
    };
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let listed = pods_api
        .list(&ListParams::default().labels(&format!("{JOB_LABEL}={name}")))
        .await?
        .items;
    let pods: Vec<ObservedPod> = listed
        .iter()
        .filter_map(|p| ObservedPod::read(p, &name))
        .collect();
    let now = Timestamp::now();
    let fresh = (status.state.is_none() || refused(&status)) && pods.is_empty();
    if fresh {
        if let Some(queue) = &plan.queue {
            let queues: Api<LocalQueue> = Api::namespaced(ctx.client.clone(), &ns);
            match queues.get(queue).await {
                Ok(_) => {}
                Err(e) if code(&e) == Some(404) => {
                    let message = format!(
                        "cluster: TrainingJob {ns}/{name}: field spec.queue: LocalQueue \
                         {ns}/{queue} does not exist; create it or name an existing queue"
                    );
                    return refuse(&ctx, &job, message).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        status = TrainingJobStatus::default();
        if let Some(tracker) = ctx.tracker(&job) {
            start_run(&ctx, &job, &plan, tracker, &mut status, now).await;
        }
    }
    let group: Api<PodGroup> = Api::namespaced(ctx.client.clone(), &ns);
    let waiting = match group.get_opt(&name).await? {
        Some(pg) => pg.status.and_then(|s| {
            s.conditions
                .into_iter()
                .find(|c| c.type_ == "Scheduled" && c.status == "False")
                .map(|c| c.message)
        }),
        None => None,
    };
    let decision = training::reconcile(&plan, &status, &pods, waiting.as_deref(), now);
    let tracker = ctx.tracker(&job).and_then(Result::ok);
    let mut next = decision.status.clone();
    for action in &decision.actions {
        match action {
            Action::CreatePods(members) => {
                let uri = tracker.as_ref().map(Mlflow::uri);
                create(&ctx, &plan, &next, uri, members).await?
            }
            Action::DeletePods(names) => {
                for pod in names {
                    match pods_api.delete(pod, &DeleteParams::default()).await {
                        Ok(_) => {}
                        Err(e) if code(&e) == Some(404) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            Action::DeleteJob => {
                match jobs.delete(&name, &DeleteParams::background()).await {
                    Ok(_) => {}
                    Err(e) if code(&e) == Some(404) => {}
                    Err(e) => return Err(e.into()),
                }
                return Ok(Requeue::await_change());
            }
        }
    }
    if let Some(tracker) = &tracker {
        track(
            &ctx, &job, &plan, tracker, &status, &mut next, &decision, &listed, now,
        )
        .await;
    }
    ctx.write_status(&job, &next).await?;
    if next.state != job.status.as_ref().and_then(|s| s.state.clone()) {
        tracing::info!(
            job = %format!("{ns}/{name}"),
            state = next.state.as_deref().unwrap_or_default(),
            restarts = next.restarts,
            "TrainingJob"
        );
    }
    for (kind, reason, note) in &decision.events {
        ctx.event(&job, kind, reason, note).await;
    }
    Ok(requeue_after(&plan, &next, now))
}

/// When to look again without a change: at the active deadline or the TTL, else resync.
fn requeue_after(plan: &Plan, status: &TrainingJobStatus, now: Timestamp) -> Requeue {
    let left = |since: &Option<Time>, secs: Option<i64>| -> Option<u64> {
        let since = since.as_ref()?.0.as_second();
        Some((since + secs? - now.as_second()).max(1) as u64)
    };
    let due = if is_finished(status) {
        left(&status.completion_time, plan.ttl_seconds_after_finished)
    } else {
        left(&status.start_time, plan.active_deadline_seconds)
    };
    Requeue::requeue(due.map_or(RESYNC, |s| Duration::from_secs(s).min(RESYNC)))
}

/// Creates the PodGroup and Service (if missing) and the pods, with the MLflow variables
/// when the job has a run.
async fn create(
    ctx: &Ctx,
    plan: &Plan,
    status: &TrainingJobStatus,
    tracking_uri: Option<&str>,
    members: &[(String, u32)],
) -> Result<(), Error> {
    let ok = |r: Result<(), kube::Error>| match r {
        Err(e) if code(&e) != Some(409) => Err(Error(e)),
        _ => Ok(()),
    };
    let groups: Api<PodGroup> = Api::namespaced(ctx.client.clone(), &plan.namespace);
    ok(groups
        .create(&PostParams::default(), &plan.pod_group())
        .await
        .map(|_| ()))?;
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &plan.namespace);
    ok(services
        .create(&PostParams::default(), &plan.service())
        .await
        .map(|_| ()))?;
    let mut env = Vec::new();
    if let (Some(run), Some(uri)) = (&status.mlflow_run_id, tracking_uri) {
        env.push(("MLFLOW_TRACKING_URI".to_string(), uri.to_string()));
        env.push(("MLFLOW_RUN_ID".to_string(), run.clone()));
    }
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &plan.namespace);
    for (role, index) in members {
        let pod = plan.pod(role, *index, status.restarts, &env);
        ok(pods.create(&PostParams::default(), &pod).await.map(|_| ()))?;
    }
    Ok(())
}

/// Marks tracking failed on the status (condition `Tracking=False`) and in an event; the
/// job runs on.
async fn tracking_failed(
    ctx: &Ctx,
    job: &TrainingJob,
    status: &mut TrainingJobStatus,
    why: &str,
    now: Timestamp,
) {
    let message = format!("{why}; the job runs without MLflow tracking (field spec.mlflow.trackingUri or kestrel serve --mlflow-tracking-uri)");
    let already = status
        .conditions
        .iter()
        .any(|c| c.type_ == "Tracking" && c.status == "False" && c.message == message);
    set_condition(
        status,
        "Tracking",
        false,
        "MlflowUnavailable",
        &message,
        now,
    );
    if !already {
        ctx.event(job, "Warning", "MlflowUnavailable", &message)
            .await;
    }
}

/// Opens the job's MLflow run with what is known before it starts.
async fn start_run(
    ctx: &Ctx,
    job: &TrainingJob,
    plan: &Plan,
    tracker: Result<Mlflow, String>,
    status: &mut TrainingJobStatus,
    now: Timestamp,
) {
    let mlflow = match tracker {
        Ok(m) => m,
        Err(why) => return tracking_failed(ctx, job, status, &why, now).await,
    };
    let experiment = job
        .spec
        .mlflow
        .as_ref()
        .and_then(|m| m.experiment_name.clone())
        .unwrap_or_else(|| plan.namespace.clone());
    let tags = vec![
        ("kestrel.namespace".to_string(), plan.namespace.clone()),
        ("kestrel.job".to_string(), plan.name.clone()),
        ("kestrel.uid".to_string(), plan.uid.clone()),
    ];
    let topology = plan
        .topology
        .as_ref()
        .and_then(|t| t.required.clone().or(t.preferred.clone()))
        .unwrap_or_else(|| "none".into());
    let params = vec![
        (
            "queue".to_string(),
            plan.queue.clone().unwrap_or_else(|| "none".into()),
        ),
        ("gpus".to_string(), plan.gpus().to_string()),
        ("nodes".to_string(), plan.pods().to_string()),
        (
            "nproc_per_node".to_string(),
            plan.nproc_per_node.to_string(),
        ),
        ("topology_level".to_string(), topology),
        ("backoff_limit".to_string(), plan.backoff_limit.to_string()),
    ];
    let opened = async {
        let experiment = mlflow.experiment(&experiment).await?;
        let run = mlflow
            .create_run(&experiment, &plan.name, millis(now), &tags)
            .await?;
        mlflow
            .log_batch(&run, &params, &[], &[], millis(now))
            .await?;
        Ok::<_, crate::mlflow::MlflowError>(run)
    };
    match opened.await {
        Ok(run) => {
            let message = format!("MLflow run {run} at {}", mlflow.uri());
            set_condition(status, "Tracking", true, "RunCreated", &message, now);
            status.mlflow_run_id = Some(run);
        }
        Err(e) => tracking_failed(ctx, job, status, &e.to_string(), now).await,
    }
}

/// Logs what this step changed into the job's run: where and when the gang first ran,
/// restarts, and the end.
#[allow(clippy::too_many_arguments)]
async fn track(
    ctx: &Ctx,
    job: &TrainingJob,
    plan: &Plan,
    mlflow: &Mlflow,
    before: &TrainingJobStatus,
    next: &mut TrainingJobStatus,
    decision: &training::Decision,
    pods: &[Pod],
    now: Timestamp,
) {
    let Some(run) = next.mlflow_run_id.clone() else {
        return;
    };
    let at = millis(now);
    let attempt = i64::from(next.restarts);
    let mut result = Ok(());
    if before.running_time.is_none() && next.running_time.is_some() {
        let nodes: Vec<String> = pods
            .iter()
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect();
        let (model, domain) = node_facts(ctx, plan, &nodes).await;
        let wait = next
            .start_time
            .as_ref()
            .map_or(0, |s| now.as_second() - s.0.as_second());
        let mut tags = vec![("kestrel.nodes".to_string(), nodes.join(","))];
        if let Some(reason) = &before.waiting_reason {
            tags.push(("kestrel.waited_for".to_string(), reason.clone()));
        }
        result = mlflow
            .log_batch(
                &run,
                &[
                    ("gpu_model".to_string(), model),
                    ("topology_domain".to_string(), domain),
                ],
                &tags,
                &[("queue_wait_seconds".to_string(), wait as f64, attempt)],
                at,
            )
            .await;
    }
    if result.is_ok() && decision.restarted {
        result = mlflow
            .log_batch(
                &run,
                &[],
                &[],
                &[("restarts".to_string(), attempt as f64, attempt)],
                at,
            )
            .await;
    }
    if result.is_ok() && decision.finished {
        let hours = next
            .running_time
            .as_ref()
            .map_or(0.0, |r| (now.as_second() - r.0.as_second()) as f64 / 3600.0);
        let state = next.state.clone().unwrap_or_default();
        result = mlflow
            .log_batch(
                &run,
                &[],
                &[("kestrel.outcome".to_string(), state.clone())],
                &[
                    ("restarts".to_string(), attempt as f64, attempt),
                    ("gpu_hours".to_string(), plan.gpus() as f64 * hours, attempt),
                ],
                at,
            )
            .await;
        if result.is_ok() {
            let end = if state == "Succeeded" {
                "FINISHED"
            } else {
                "FAILED"
            };
            result = mlflow.end_run(&run, end, at).await;
        }
    }
    if let Err(e) = result {
        tracking_failed(ctx, job, next, &e.to_string(), now).await;
    }
}

/// The GPU model of the job's nodes and the topology domain it landed in (the value of
/// its topology level's label on the first node).
async fn node_facts(ctx: &Ctx, plan: &Plan, nodes: &[String]) -> (String, String) {
    let unknown = || "unknown".to_string();
    let Some(first) = nodes.first() else {
        return (unknown(), unknown());
    };
    let api: Api<Node> = Api::all(ctx.client.clone());
    let labels = match api.get(first).await {
        Ok(node) => node.metadata.labels.unwrap_or_default(),
        Err(_) => return (unknown(), unknown()),
    };
    let model = labels
        .get(GPU_PRODUCT_LABEL)
        .cloned()
        .unwrap_or_else(unknown);
    let level = plan
        .topology
        .as_ref()
        .and_then(|t| t.required.clone().or(t.preferred.clone()));
    let domain = match level {
        Some(level) => labels.get(&level).cloned().unwrap_or_else(unknown),
        None => "none".into(),
    };
    (model, domain)
}
