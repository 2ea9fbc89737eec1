//! Kubernetes workload manifests as a simulator [`Workload`].
//!
//! Files hold any number of YAML documents, `kind: List` (and `PodList`, `JobList` ...)
//! included. Kinds:
//! - `Pod` -> one pod ([`JobKind::BarePod`]: deleted when preempted);
//! - `Job` -> [`JobKind::Job`]: `spec.parallelism` (default 1) pods at a time until
//!   `spec.completions` (default: parallelism) have run;
//! - `Deployment`, `StatefulSet`, `ReplicaSet` -> [`JobKind::Service`] with `spec.replicas`
//!   (default 1) pods;
//!
//! A queued Job, StatefulSet or ReplicaSet is one workload, admitted whole (or down to
//! Kueue's `job-min-parallelism`): its pods form the gang [`kestrel_objects::workloads`]
//! implies, unless they name a gang themselves.
//! - `PriorityClass`, `RuntimeClass` -> resolve the pods' priority (and `preemptionPolicy`)
//!   and runtime class, wherever they appear in the file set;
//! - `ClusterQueue`, `LocalQueue`, `Cohort`, `ResourceFlavor` (Kueue's or Kestrel's),
//!   `Namespace`, `ResourceQuota`, `LimitRange` -> [`Workload::queues`] and the namespaces'
//!   default container requests, read by [`kestrel_objects::queues`] (namespaces need not be
//!   declared).
//!
//! Objects that create no pods (`replicas: 0`, `parallelism: 0`, `completions: 0`) are left
//! out of the workload.
//!
//! How a pod template becomes the scheduler's pod (requests, priority, queue, preemption
//! terms, GPU annotations) is [`kestrel_objects::pods`]'s.

use crate::workload::{JobKind, PodSet, SimTraining, Workload};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kestrel_core::{GangSpec, GpuRequest, Millis};
use kestrel_objects::documents::{read_documents, supported_kinds, Document};
use kestrel_objects::duration::parse_duration;
use kestrel_objects::fields::Ctx;
use kestrel_objects::gangs::{pod_gang, pod_topology, GangCollector, PodGang};
use kestrel_objects::pods::{Annotations, Catalog};
use kestrel_objects::queues::{is_queue_document, QueueCollector, QueueSetup};
use kestrel_objects::warning::{FieldWarning, WarnedObject};
use kestrel_objects::workloads::{queued_workload, role_workload_with};
use kestrel_objects::LoadError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod cron;
mod dra;
mod failures;
mod references;
use references::{add_reference, referenced_by};
mod volumes;
pub use failures::{parse_failures, FAILURES_ANNOTATION};

/// When the object is created, from the simulation's start (default `0`).
pub const ARRIVAL_ANNOTATION: &str = "kestrel.dev/sim-arrival";
/// On a CronJob: how long after its arrival its schedule keeps creating Jobs.
pub const CRON_UNTIL_ANNOTATION: &str = "kestrel.dev/sim-until";
/// How long each pod runs once bound (default: to the end; required on a Job).
pub const DURATION_ANNOTATION: &str = "kestrel.dev/sim-duration";
/// Share of its GPUs a pod keeps busy, `0`..=`1` (default 1 for GPU pods).
pub const GPU_UTILIZATION_ANNOTATION: &str = "kestrel.dev/sim-gpu-utilization";

/// How manifests are read beyond what they say themselves.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadOptions {
    /// How long pods of Pods and Jobs without [`DURATION_ANNOTATION`] run (default: a Pod
    /// runs to the end; a Job is refused).
    pub default_duration: Option<Millis>,
}

/// Reads workload manifests with the default [`LoadOptions`].
pub fn load_manifests(files: &[(PathBuf, String)]) -> Result<Workload, LoadError> {
    load_manifests_with(files, &LoadOptions::default())
}

/// Reads workload manifests: all files are parsed and their PriorityClasses and
/// RuntimeClasses collected first, then jobs are built in file order, then document order.
pub fn load_manifests_with(
    files: &[(PathBuf, String)],
    options: &LoadOptions,
) -> Result<Workload, LoadError> {
    let mut parsed = Vec::new();
    for (path, text) in files {
        parsed.push((path.as_path(), read_documents(path, text, None)?));
    }
    let mut catalog = Catalog::new();
    let mut gangs = GangCollector::default();
    let mut queues = QueueCollector::default();
    let mut dra_objects = dra::DraObjects::default();
    let mut volume_objects = volumes::VolumeObjects::default();
    let mut references = kestrel_objects::kinds::References::new();
    for (path, docs) in &parsed {
        for doc in docs {
            if let Some(by) = referenced_by(doc) {
                add_reference(&mut references, path, doc, by)?;
            } else if dra::is_dra_kind(doc.kind()) {
                dra_objects.add(path, doc)?;
            } else if volumes::is_volume_kind(doc.kind()) {
                volume_objects.add(path, doc)?;
            } else if doc.is_gang_document() {
                gangs.add_document(path, &doc.value)?;
            } else if is_queue_document(doc.kind()) {
                queues.add_document(path, &doc.position(), &doc.value)?;
            } else {
                catalog.add(path, doc)?;
            }
        }
    }
    if parsed
        .iter()
        .flat_map(|(_, docs)| docs)
        .any(|doc| names_volcano_default_queue(&doc.value))
    {
        queues.add_volcano_default_queue()?;
    }
    catalog.set_container_defaults(queues.container_defaults());
    volume_objects.provision_immediate();
    let mut builder = Builder {
        catalog,
        gangs,
        queues: queues.into_setup(),
        seen: BTreeMap::new(),
        generated: BTreeMap::new(),
        jobs: Vec::new(),
        training: Vec::new(),
        options: options.clone(),
        dra: dra_objects,
        volumes: volume_objects,
        references,
    };
    for (path, docs) in &parsed {
        for doc in docs {
            builder.add(path, doc)?;
        }
    }
    let (gangs, topology_levels) = builder.gangs.into_parts();
    let (gpu_backing, clash) = builder.dra.gpu_backing();
    builder.queues.warnings.extend(clash);
    Ok(Workload {
        jobs: builder.jobs,
        gangs,
        topology_levels,
        queues: builder.queues,
        training: builder.training,
        gpu_backing,
    })
}

/// Whether an object names Volcano's `default` queue: a Volcano Job's or PodGroup's
/// `spec.queue`, or Volcano's queue annotation on it or a pod template inside it.
fn names_volcano_default_queue(value: &serde_json::Value) -> bool {
    use kestrel_objects::queues::{VOLCANO_JOB_QUEUE_ANNOTATION, VOLCANO_QUEUE_ANNOTATION};
    let volcano = value
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .is_some_and(|v| {
            v.starts_with("batch.volcano.sh/") || v.starts_with("scheduling.volcano.sh/")
        });
    if volcano && value.pointer("/spec/queue").and_then(|q| q.as_str()) == Some("default") {
        return true;
    }
    fn walk(v: &serde_json::Value) -> bool {
        match v {
            serde_json::Value::Object(map) => {
                let annotated = map.get("annotations").is_some_and(|a| {
                    [VOLCANO_QUEUE_ANNOTATION, VOLCANO_JOB_QUEUE_ANNOTATION]
                        .iter()
                        .any(|key| a.get(key).and_then(|q| q.as_str()) == Some("default"))
                });
                annotated || map.values().any(walk)
            }
            serde_json::Value::Array(items) => items.iter().any(walk),
            _ => false,
        }
    }
    walk(value)
}

struct Builder {
    /// Objects workloads refer to by name (a TrainJob's runtime).
    references: kestrel_objects::kinds::References,
    catalog: Catalog,
    gangs: GangCollector,
    queues: QueueSetup,
    /// (kind, namespace, name) -> where it was first defined.
    seen: BTreeMap<(String, String, String), String>,
    /// generateName prefix -> names generated so far.
    generated: BTreeMap<String, u32>,
    jobs: Vec<PodSet>,
    training: Vec<SimTraining>,
    options: LoadOptions,
    dra: dra::DraObjects,
    volumes: volumes::VolumeObjects,
}

/// Where a pod's template sits in its object.
struct Shape<'a> {
    kind: JobKind,
    /// The object's metadata, then the pod template's (for annotations).
    meta: &'a ObjectMeta,
    template_meta: Option<&'a ObjectMeta>,
    /// Field path of the pod spec (`spec`, `spec.template.spec`).
    spec_field: &'a str,
    spec: Option<&'a core::PodSpec>,
    parallelism: i64,
    completions: i64,
    /// One role of a multi-role workload: its pods' name (`<object>-<role>`), the gang of
    /// the whole workload, and the role.
    role: Option<(String, &'a GangSpec, &'a str)>,
}

impl Builder {
    fn add(&mut self, path: &Path, doc: &Document) -> Result<(), LoadError> {
        let object = doc.object();
        let ctx = Ctx {
            path,
            object: object.clone(),
        };
        if doc.is_gang_document()
            || referenced_by(doc).is_some()
            || is_queue_document(doc.kind())
            || dra::is_dra_kind(doc.kind())
            || volumes::is_volume_kind(doc.kind())
        {
            return Ok(());
        }
        if doc.kind() == "ResourceSlice" {
            return Err(ctx.err(
                "kind",
                "a ResourceSlice publishes a node's devices: put it in the cluster file, \
                 beside the Nodes (kubectl get nodes,resourceslices -o yaml)",
            ));
        }
        if doc.kind() == "DeviceTaintRule" {
            return Err(ctx.err(
                "kind",
                "a DeviceTaintRule taints published devices: put it in the cluster file, \
                 beside the Nodes and their ResourceSlices (kubectl get \
                 nodes,resourceslices,devicetaintrules -o yaml)",
            ));
        }
        if doc.kind() == "CSINode" {
            return Err(ctx.err(
                "kind",
                "a CSINode gives a node's volume limits: put it in the cluster file, beside \
                 the Nodes (kubectl get nodes,csinodes -o yaml)",
            ));
        }
        if doc.kind() == "LeaderWorkerSet" {
            return self.leader_worker_set(&ctx, doc);
        }
        if let Some(jobs) = self.role_workload(&ctx, doc)? {
            self.jobs.extend(jobs);
            return Ok(());
        }
        if kestrel_objects::kinds::of_object(&doc.value)
            .is_some_and(|k| k.gang() == kestrel_objects::kinds::GangScope::PerObject)
        {
            // Read, with no pods to run (every role at 0 replicas, a RayJob on a cluster
            // that exists already).
            return Ok(());
        }
        let job = match doc.kind() {
            "PriorityClass" | "RuntimeClass" | "WorkloadPriorityClass" => return Ok(()),
            "Pod" => {
                let pod: core::Pod = doc.typed(path)?;
                self.warn_unknown_fields(path, doc, &pod);
                self.job(
                    &ctx,
                    doc,
                    Shape {
                        kind: JobKind::BarePod,
                        meta: &pod.metadata,
                        template_meta: None,
                        spec_field: "spec",
                        spec: pod.spec.as_ref(),
                        parallelism: 1,
                        completions: 1,
                        role: None,
                    },
                )?
            }
            "Job" => {
                let job: Job = doc.typed(path)?;
                self.warn_unknown_fields(path, doc, &job);
                self.batch_job(&ctx, path, doc, &job)?
            }
            "CronJob" => {
                let cron_job: CronJob = doc.typed(path)?;
                self.warn_unknown_fields(path, doc, &cron_job);
                for job in self.cron_jobs(&ctx, path, &cron_job)? {
                    if let Some(sim_job) = self.batch_job(&ctx, path, doc, &job)? {
                        self.jobs.push(sim_job);
                    }
                }
                return Ok(());
            }
            "Deployment" => {
                let d: Deployment = doc.typed(path)?;
                self.warn_unknown_fields(path, doc, &d);
                let spec = &d.spec;
                self.service(&ctx, doc, &d.metadata, spec.replicas, &spec.template)?
            }
            "StatefulSet" => {
                let s: StatefulSet = doc.typed(path)?;
                self.warn_unknown_fields(path, doc, &s);
                let spec = &s.spec;
                self.service(&ctx, doc, &s.metadata, spec.replicas, &spec.template)?
            }
            "ReplicaSet" => {
                let r: ReplicaSet = doc.typed(path)?;
                self.warn_unknown_fields(path, doc, &r);
                let spec = &r.spec;
                let template = spec
                    .template
                    .as_ref()
                    .ok_or_else(|| ctx.err("spec.template", "a ReplicaSet needs spec.template"))?;
                self.service(&ctx, doc, &r.metadata, spec.replicas, template)?
            }
            other => {
                let api_version = doc.value.get("apiVersion").and_then(|v| v.as_str());
                if let Some(why) = kestrel_objects::documents::unread_version(
                    other,
                    api_version.unwrap_or_default(),
                ) {
                    return Err(ctx.err("apiVersion", why));
                }
                return Err(ctx.err(
                    "kind",
                    format!(
                        "Kestrel does not simulate {other} objects; workload files \
                            may hold {} (and Lists of them): remove it or move it to a \
                            file the simulator does not read",
                        supported_kinds().join(", ")
                    ),
                ));
            }
        };
        if let Some(job) = job {
            self.jobs.push(job);
        }
        Ok(())
    }

    /// A LeaderWorkerSet (`leaderworkerset.x-k8s.io/v1`): `spec.replicas` groups of
    /// `size` pods, a leader (its `leaderTemplate`, else the `workerTemplate`) and
    /// `size - 1` workers, each group a gang of its own through the labels and the size
    /// annotation LeaderWorkerSet's controller puts on its pods, as live; with
    /// `leaderworkerset.sigs.k8s.io/exclusive-topology`, each group alone in its domain.
    fn leader_worker_set(&mut self, ctx: &Ctx, doc: &Document) -> Result<(), LoadError> {
        use kestrel_objects::gangs::{
            LWS_EXCLUSIVE_ANNOTATION, LWS_GROUP_INDEX_LABEL, LWS_GROUP_KEY_LABEL, LWS_NAME_LABEL,
            LWS_SIZE_ANNOTATION, LWS_WORKER_INDEX_LABEL,
        };
        let value = &doc.value;
        let api_version = value.get("apiVersion").and_then(|v| v.as_str());
        if let Some(why) = kestrel_objects::documents::unread_version(
            "LeaderWorkerSet",
            api_version.unwrap_or_default(),
        ) {
            return Err(ctx.err("apiVersion", why));
        }
        let meta: ObjectMeta = serde_json::from_value(value["metadata"].clone())
            .map_err(|e| ctx.err("metadata", e.to_string()))?;
        let name = meta
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ctx.err("metadata.name", "no name; set metadata.name"))?;
        let count = |field: &str, v: &serde_json::Value, default: i64| -> Result<i64, LoadError> {
            let n = match v {
                serde_json::Value::Null => default,
                v => v.as_i64().filter(|n| *n >= 0).ok_or_else(|| {
                    ctx.err(field, format!("{v} is not a count; write a whole number"))
                })?,
            };
            kestrel_objects::workloads::check_pod_count(field, n)
                .map_err(|why| ctx.err(field, why))?;
            Ok(n)
        };
        let groups = count("spec.replicas", &value["spec"]["replicas"], 1)?;
        let lwt = &value["spec"]["leaderWorkerTemplate"];
        let size = count("spec.leaderWorkerTemplate.size", &lwt["size"], 1)?;
        if size == 0 {
            return Err(ctx.err(
                "spec.leaderWorkerTemplate.size",
                "0 pods; a group has its leader at least: set 1 or more",
            ));
        }
        let template =
            |field: &str, v: &serde_json::Value| -> Result<core::PodTemplateSpec, LoadError> {
                serde_json::from_value(v.clone())
                    .map_err(|e| ctx.err(field, format!("not a pod template: {e}")))
            };
        if lwt["workerTemplate"].is_null() {
            return Err(ctx.err(
                "spec.leaderWorkerTemplate.workerTemplate",
                "missing; add the workers' pod template",
            ));
        }
        let worker = template(
            "spec.leaderWorkerTemplate.workerTemplate",
            &lwt["workerTemplate"],
        )?;
        let (leader, leader_field) = match &lwt["leaderTemplate"] {
            serde_json::Value::Null => (worker.clone(), "spec.leaderWorkerTemplate.workerTemplate"),
            v => (
                template("spec.leaderWorkerTemplate.leaderTemplate", v)?,
                "spec.leaderWorkerTemplate.leaderTemplate",
            ),
        };
        let exclusive = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(LWS_EXCLUSIVE_ANNOTATION))
            .filter(|t| !t.is_empty())
            .cloned();
        for group in 0..groups {
            let group_key = format!("{name}-{group}");
            let pods = [
                (
                    leader.clone(),
                    leader_field,
                    format!("{name}-{group}"),
                    1,
                    "0",
                ),
                (
                    worker.clone(),
                    "spec.leaderWorkerTemplate.workerTemplate",
                    format!("{name}-{group}-workers"),
                    size - 1,
                    "1",
                ),
            ];
            for (mut template, field, job_name, count, worker_index) in pods {
                if count == 0 {
                    continue;
                }
                let pod_meta = template.metadata.get_or_insert_with(Default::default);
                let labels = pod_meta.labels.get_or_insert_with(Default::default);
                labels.insert(LWS_NAME_LABEL.into(), name.clone());
                labels.insert(LWS_GROUP_INDEX_LABEL.into(), group.to_string());
                labels.insert(LWS_WORKER_INDEX_LABEL.into(), worker_index.into());
                pod_meta
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(LWS_SIZE_ANNOTATION.into(), size.to_string());
                if let Some(topology) = &exclusive {
                    template = kestrel_objects::workloads::exclusive_template(
                        template,
                        LWS_GROUP_KEY_LABEL,
                        &group_key,
                        topology,
                    );
                }
                let job_meta = ObjectMeta {
                    name: Some(job_name),
                    ..meta.clone()
                };
                let spec_field = format!("{field}.spec");
                let job = self.job(
                    ctx,
                    doc,
                    Shape {
                        kind: JobKind::Service,
                        meta: &job_meta,
                        template_meta: template.metadata.as_ref(),
                        spec_field: &spec_field,
                        spec: template.spec.as_ref(),
                        parallelism: count,
                        completions: count,
                        role: None,
                    },
                )?;
                self.jobs.extend(job);
            }
        }
        Ok(())
    }

    /// A batch Job: `parallelism` pods at a time until `completions`; a suspended one
    /// without a queue gets none (and a warning).
    fn batch_job(
        &mut self,
        ctx: &Ctx,
        path: &Path,
        doc: &Document,
        job: &Job,
    ) -> Result<Option<PodSet>, LoadError> {
        let spec = job
            .spec
            .as_ref()
            .ok_or_else(|| ctx.err("spec", "a Job needs spec.template"))?;
        let parallelism = i64::from(spec.parallelism.unwrap_or(1));
        let completions = spec.completions.map(i64::from).unwrap_or(parallelism);
        for (field, v) in [
            ("spec.parallelism", parallelism),
            ("spec.completions", completions),
        ] {
            if v < 0 {
                return Err(ctx.err(field, format!("{v} is negative; set 0 or more")));
            }
            kestrel_objects::workloads::check_pod_count(field, v)
                .map_err(|why| ctx.err(field, why))?;
        }
        let sim_job = self.job(
            ctx,
            doc,
            Shape {
                kind: JobKind::Job,
                meta: &job.metadata,
                template_meta: spec.template.metadata.as_ref(),
                spec_field: "spec.template.spec",
                spec: spec.template.spec.as_ref(),
                // Kubernetes never runs more pods than completions remain.
                parallelism: parallelism.min(completions),
                completions,
                role: None,
            },
        )?;
        // A suspended Job gets no pods until something resumes it: the queue
        // that admits it (as Kueue does), or nobody.
        let unqueued = sim_job.as_ref().is_some_and(|j| j.template.queue.is_none());
        if spec.suspend == Some(true) && unqueued {
            self.warn(
                path,
                job,
                "spec.suspend",
                "the Job is suspended and names no queue, so Kubernetes creates no pods for \
                 it and the simulator runs none; remove suspend, or name a LocalQueue (label \
                 kueue.x-k8s.io/queue-name) to admit it",
            );
            return Ok(None);
        }
        Ok(sim_job)
    }

    /// The Jobs a CronJob creates on its schedule (`spec.schedule`, from its arrival for
    /// `kestrel.dev/sim-until`, default a day), each named `<cronjob>-<minute>` and
    /// arriving when it fires, from its `jobTemplate`.
    fn cron_jobs(
        &mut self,
        ctx: &Ctx,
        path: &Path,
        cron_job: &CronJob,
    ) -> Result<Vec<Job>, LoadError> {
        let spec = &cron_job.spec;
        let schedule = cron::parse(&spec.schedule).map_err(|why| ctx.err("spec.schedule", why))?;
        let mut warn = |field: &str, message: &str| self.warn(path, cron_job, field, message);
        if spec.suspend == Some(true) {
            warn(
                "spec.suspend",
                "the CronJob is suspended, so it creates no Jobs and the simulator runs none",
            );
            return Ok(Vec::new());
        }
        if matches!(
            spec.concurrency_policy.as_deref(),
            Some("Forbid" | "Replace")
        ) {
            warn(
                "spec.concurrencyPolicy",
                "the simulator creates a Job at every fire time (Allow), whether the last \
                 one still runs or not",
            );
        }
        let annotations = cron_job.metadata.annotations.clone().unwrap_or_default();
        let at = |key: &str, default: Millis| -> Result<Millis, LoadError> {
            match annotations.get(key) {
                Some(v) => kestrel_objects::duration::parse_duration(v)
                    .map_err(|e| ctx.err(format!("metadata.annotations[{key:?}]"), e.to_string())),
                None => Ok(default),
            }
        };
        let from = at(ARRIVAL_ANNOTATION, 0)?;
        let until = from.saturating_add(at(CRON_UNTIL_ANNOTATION, 24 * 3_600_000)?);
        const MOST: usize = 10_000;
        let times = schedule.fire_times(from, until, MOST + 1);
        if times.len() > MOST {
            return Err(ctx.err(
                "spec.schedule",
                format!(
                    "fires more than {MOST} times before {CRON_UNTIL_ANNOTATION}; set a shorter \
                     {CRON_UNTIL_ANNOTATION} on the CronJob"
                ),
            ));
        }
        let name = cron_job.metadata.name.clone().unwrap_or_default();
        let mut jobs = Vec::new();
        for t in times {
            let template = &spec.job_template;
            let mut meta = template.metadata.clone().unwrap_or_default();
            meta.name = Some(format!("{name}-{}", t / 60_000));
            meta.namespace = cron_job.metadata.namespace.clone();
            let mut job_annotations = annotations.clone();
            job_annotations.remove(CRON_UNTIL_ANNOTATION);
            job_annotations.extend(meta.annotations.take().unwrap_or_default());
            job_annotations.insert(ARRIVAL_ANNOTATION.to_string(), format!("{t}ms"));
            meta.annotations = Some(job_annotations);
            jobs.push(Job {
                metadata: meta,
                spec: template.spec.clone(),
                status: None,
            });
        }
        Ok(jobs)
    }

    /// Warns of the fields of `doc` its Kubernetes type has not (a misspelt field would
    /// otherwise be dropped without a word).
    fn warn_unknown_fields<K>(&mut self, path: &Path, doc: &Document, typed: &K)
    where
        K: k8s_openapi::Resource + k8s_openapi::Metadata<Ty = ObjectMeta> + serde::Serialize,
    {
        let fields = kestrel_objects::documents::unknown_fields(&doc.value, typed);
        if fields.is_empty() {
            return;
        }
        for field in fields {
            let message = format!(
                "unknown field: not a field of {} {} (Kubernetes 1.34's schema, which Kestrel \
                 reads), so Kestrel ignores it, where kubectl's strict validation would refuse \
                 it; check its spelling and place",
                K::API_VERSION,
                K::KIND
            );
            self.warn(path, typed, field, message);
        }
    }

    /// Warns of `field` of a workload object read from `path`: printed by the simulator
    /// with the queue readers' warnings.
    fn warn<K>(
        &mut self,
        path: &Path,
        object: &K,
        field: impl Into<String>,
        message: impl Into<String>,
    ) where
        K: k8s_openapi::Resource + k8s_openapi::Metadata<Ty = ObjectMeta>,
    {
        let mut warned = WarnedObject::of(object);
        warned
            .namespace
            .get_or_insert_with(|| "default".to_string());
        self.queues.warnings.push(FieldWarning {
            source: Some(path.display().to_string()),
            ..warned.warning(field, message)
        });
    }

    /// A PyTorchJob, Volcano Job or JobSet: one job per role, all in one gang. A
    /// TrainingJob's roles are run by its controller's decisions ([`SimTraining`]).
    fn role_workload(
        &mut self,
        ctx: &Ctx,
        doc: &Document,
    ) -> Result<Option<Vec<PodSet>>, LoadError> {
        let meta: ObjectMeta = match doc.value.get("metadata") {
            Some(m) => serde_json::from_value(m.clone())
                .map_err(|e| ctx.err("metadata", format!("not object metadata: {e}")))?,
            None => ObjectMeta::default(),
        };
        let namespace = meta
            .namespace
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or("default");
        let name = meta.name.as_deref().unwrap_or_default();
        let Some(mut workload) =
            role_workload_with(ctx, &doc.value, namespace, name, Some(&self.references))?
        else {
            return Ok(None);
        };
        let object = WarnedObject::of_value(&doc.value, namespace, name);
        for warning in workload.volume_warnings(&object) {
            let source = Some(ctx.path.display().to_string());
            self.queues
                .warnings
                .push(FieldWarning { source, ..warning });
        }
        let training = match doc.kind() {
            "TrainingJob" => Some(self.training(ctx, &doc.value, &meta)?),
            _ => None,
        };
        if training.is_some() {
            // The controller's PodGroup: every attempt starts whole, none keeps the last
            // one's admission.
            workload.gang.keeps_admission = false;
        }
        let kind = match training {
            Some(_) => JobKind::Training,
            None => JobKind::Job,
        };
        let first_job = self.jobs.len();
        let mut jobs = Vec::new();
        for role in &workload.roles {
            // Errors point at the role's template, not the object's spec.
            let spec_field = format!("{}.spec", role.field);
            let job = self.job(
                ctx,
                doc,
                Shape {
                    kind,
                    meta: &meta,
                    template_meta: role.template.metadata.as_ref(),
                    spec_field: &spec_field,
                    spec: role.template.spec.as_ref(),
                    parallelism: i64::from(role.pods),
                    completions: i64::from(role.completions),
                    role: Some((
                        format!("{name}-{}", role.name.to_ascii_lowercase()),
                        &workload.gang,
                        &role.name,
                    )),
                },
            )?;
            jobs.extend(job);
        }
        if let Some(mut training) = training {
            training.role_jobs = (first_job..first_job + jobs.len()).collect();
            self.training.push(training);
        }
        Ok(Some(jobs))
    }

    /// A TrainingJob's plan (the live controller's) and the failures it is to suffer.
    fn training(
        &self,
        ctx: &Ctx,
        value: &serde_json::Value,
        meta: &ObjectMeta,
    ) -> Result<SimTraining, LoadError> {
        let job: kestrel_objects::training::TrainingJob = serde_json::from_value(value.clone())
            .map_err(|e| ctx.err("spec", format!("not a TrainingJob: {e}")))?;
        let plan = kestrel_objects::training::plan(ctx.path, &job)?;
        let annotations = meta.annotations.clone().unwrap_or_default();
        let failures = match annotations.get(FAILURES_ANNOTATION) {
            Some(text) => parse_failures(&plan, text).map_err(|e| {
                ctx.err(
                    format!("metadata.annotations[\"{FAILURES_ANNOTATION}\"]"),
                    e,
                )
            })?,
            None => Vec::new(),
        };
        Ok(SimTraining {
            plan,
            role_jobs: Vec::new(),
            failures,
        })
    }

    fn service(
        &mut self,
        ctx: &Ctx,
        doc: &Document,
        meta: &ObjectMeta,
        replicas: Option<i32>,
        template: &core::PodTemplateSpec,
    ) -> Result<Option<PodSet>, LoadError> {
        let replicas = i64::from(replicas.unwrap_or(1));
        if replicas < 0 {
            return Err(ctx.err(
                "spec.replicas",
                format!("{replicas} is negative; set 0 or more"),
            ));
        }
        kestrel_objects::workloads::check_pod_count("spec.replicas", replicas)
            .map_err(|why| ctx.err("spec.replicas", why))?;
        self.job(
            ctx,
            doc,
            Shape {
                kind: JobKind::Service,
                meta,
                template_meta: template.metadata.as_ref(),
                spec_field: "spec.template.spec",
                spec: template.spec.as_ref(),
                parallelism: replicas,
                completions: replicas,
                role: None,
            },
        )
    }

    fn job(
        &mut self,
        ctx: &Ctx,
        doc: &Document,
        shape: Shape,
    ) -> Result<Option<PodSet>, LoadError> {
        let namespace = shape
            .meta
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_string());
        let name = match (&shape.role, &shape.meta.name, &shape.meta.generate_name) {
            (Some((name, _, _)), _, _) => name.clone(),
            (None, Some(name), _) if !name.is_empty() => name.clone(),
            (None, _, Some(prefix)) if !prefix.is_empty() => {
                let n = self
                    .generated
                    .entry(format!("{namespace}/{prefix}"))
                    .or_default();
                *n += 1;
                format!("{prefix}{}", *n - 1)
            }
            _ => {
                return Err(ctx.err(
                    "metadata.name",
                    "no name; set metadata.name (or metadata.generateName)",
                ))
            }
        };
        let key = (doc.kind().to_string(), namespace.clone(), name.clone());
        let here = format!("{} {}", ctx.path.display(), doc.position());
        if let Some(first) = self.seen.get(&key) {
            return Err(ctx.err(
                "metadata.name",
                format!(
                    "a {} {namespace}/{name} is already defined in {first}; rename or remove one",
                    doc.kind()
                ),
            ));
        }
        self.seen.insert(key, here);

        let spec = shape.spec.ok_or_else(|| {
            ctx.err(
                shape.spec_field,
                format!("no pod spec; set {}.containers", shape.spec_field),
            )
        })?;
        let annotations = Annotations {
            sources: [
                Some(("metadata", shape.meta)),
                shape.template_meta.map(|m| ("spec.template.metadata", m)),
            ],
        };
        let labels = shape
            .template_meta
            .unwrap_or(shape.meta)
            .labels
            .clone()
            .unwrap_or_default();
        let mut template = self.catalog.pod(
            ctx,
            shape.spec_field,
            spec,
            &annotations,
            namespace.clone(),
            name.clone(),
            labels,
        )?;
        self.dra
            .apply(ctx, shape.spec_field, spec, &namespace, &mut template)?;
        self.volumes
            .apply(ctx, shape.spec_field, spec, &namespace, &mut template)?;
        let mut all_annotations = BTreeMap::new();
        for meta in [Some(shape.meta), shape.template_meta]
            .into_iter()
            .flatten()
        {
            all_annotations.extend(meta.annotations.clone().unwrap_or_default());
        }
        let scheduling_group = spec
            .scheduling_group
            .as_ref()
            .and_then(|g| g.pod_group_name.as_deref());
        if let Some(gang) = pod_gang(
            ctx.path,
            &ctx.object,
            &namespace,
            (&template.labels, &all_annotations),
            scheduling_group,
        )? {
            self.gangs.add_pod(&namespace, &gang);
            template.gang = Some(gang.membership);
        } else {
            // The gang the object implies: its multi-role workload's, or a queued object's.
            let implied = match shape.role {
                Some((_, whole, role)) => Some((whole.clone(), Some(role.to_string()))),
                None if template.queue.is_some() => {
                    let pods = u32::try_from(shape.parallelism).unwrap_or(u32::MAX);
                    let meta_annotations = shape.meta.annotations.clone().unwrap_or_default();
                    let policy = doc.value.pointer("/spec/podManagementPolicy");
                    queued_workload(
                        ctx,
                        doc.kind(),
                        &namespace,
                        &name,
                        pods,
                        policy.and_then(serde_json::Value::as_str),
                        &meta_annotations,
                    )?
                    .map(|gang| (gang, None))
                }
                None => None,
            };
            if let Some((whole, role)) = implied {
                let gang = PodGang {
                    membership: kestrel_core::GangMembership {
                        gang: whole.name.clone(),
                        role,
                        rank: None,
                    },
                    implied: Some(whole),
                    topology: pod_topology(ctx.path, &ctx.object, &all_annotations)?,
                };
                self.gangs.add_pod(&namespace, &gang);
                template.gang = Some(gang.membership);
            }
        }

        if shape.kind != JobKind::Training {
            if let Some((field, _)) = annotations.get(FAILURES_ANNOTATION) {
                return Err(ctx.err(
                    field,
                    format!(
                        "only TrainingJobs fail on purpose in the simulator (a {} is not \
                         restarted by Kestrel); remove the annotation or make the object a \
                         TrainingJob",
                        doc.kind()
                    ),
                ));
            }
        }
        let arrival = match annotations.get(ARRIVAL_ANNOTATION) {
            Some((field, v)) => parse_duration(v).map_err(|e| ctx.err(field, e))?,
            None => 0,
        };
        let duration: Option<Millis> = match annotations.get(DURATION_ANNOTATION) {
            Some((field, v)) => Some(parse_duration(v).map_err(|e| ctx.err(field, e))?),
            // Services run to the end: their pods are restarted when they exit.
            None if shape.kind != JobKind::Service && self.options.default_duration.is_some() => {
                self.options.default_duration
            }
            None if matches!(shape.kind, JobKind::Job | JobKind::Training) => {
                return Err(ctx.err(
                    format!("metadata.annotations[\"{DURATION_ANNOTATION}\"]"),
                    format!(
                        "a {} needs to say how long its pods run; add the \
                        annotation {DURATION_ANNOTATION}: \"2h\" (or the time you \
                        expect), or run with --default-duration 2h",
                        doc.kind()
                    ),
                ))
            }
            None => None,
        };
        let gpu_utilization = match annotations.get(GPU_UTILIZATION_ANNOTATION) {
            Some((field, v)) => match v.trim().parse::<f64>() {
                Ok(u) if (0.0..=1.0).contains(&u) => u,
                _ => {
                    return Err(ctx.err(
                        field,
                        format!("{v:?} is not a share from 0 to 1; write e.g. \"0.5\""),
                    ))
                }
            },
            None if template.demand.gpu != GpuRequest::None => 1.0,
            None => 0.0,
        };
        if shape.parallelism == 0 || shape.completions == 0 {
            return Ok(None);
        }
        let count = |v: i64| u32::try_from(v).unwrap_or(u32::MAX);
        Ok(Some(PodSet {
            kind: shape.kind,
            source_kind: doc.kind().to_string(),
            namespace,
            name,
            arrival,
            duration,
            parallelism: count(shape.parallelism),
            completions: count(shape.completions),
            template,
            gpu_utilization,
        }))
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod example_tests;
