//! The watch-to-engine index: Pod and Node objects in, the engine's nodes and pods out.
//!
//! Synchronous and clock-free like the engine it wraps: the driver applies watch events
//! ([`ClusterState::apply_pod`], [`ClusterState::delete_pod`], ...), runs
//! [`ClusterState::cycle`], carries out the returned jobs, and reports each bind's result
//! ([`ClusterState::bind_result`]). Every pod has exactly one [`PodState`], so capacity is
//! counted once: a pod is in the queue, being bound, bound, or waiting for its node.
//!
//! Gangs: Kestrel's `PodGroup` objects ([`ClusterState::apply_pod_group`]) and the
//! cluster's `Topology` ([`ClusterState::set_topologies`]) are read with the simulator's
//! parser and declared to the engine, as are scheduler-plugins' and Volcano's PodGroups
//! (whose status Kestrel leaves alone); pods labelled `scheduling.kestrel.dev/pod-group`
//! (or the other projects' label or annotation, or Kueue's plain-pod group label) are
//! its members. A member whose PodGroup is missing
//! or unusable waits outside the engine ([`PodState::GangWait`]) with that reason. Each
//! cycle returns the PodGroup statuses that changed ([`GroupStatusJob`]). An incomplete
//! gang whose missing pods a ResourceQuota or LimitRange of its namespace refuses
//! ([`ClusterState::apply_admission`]) names that object in its status and its pods'.

use crate::admission::{AdmissionObject, Policies};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kestrel_core::{
    ClusterError, ClusterQueueSpec, GangPhase, GangProblem, GangSpec, GangTopology, GpuAssignment,
    Labels, Millis, PodId, PodPhase, PodSpec, Scheduler, SchedulerConfig, StopPolicy,
    Unschedulable,
};
use kestrel_k8s::crds::{PodGroupPhase, PodGroupStatus};
use kestrel_k8s::gangs::{self, GangDocument, KESTREL_GROUP};
use kestrel_k8s::limit_range::PodResources;
use kestrel_k8s::live::{self, ConvertError, GPU_INDICES_ANNOTATION, LAST_CHECKPOINT_ANNOTATION};
use kestrel_k8s::pods::Catalog;
use kestrel_k8s::queues::{parse_queue_document, queue_document_key, QueueDocument};
use kestrel_k8s::quota::PodUsage;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
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
    /// Ours and readable, but its gang cannot be scheduled: its PodGroup does not exist or
    /// is invalid (`reason`, reported on the pod). Not in the engine; submitted when the
    /// PodGroup becomes usable.
    GangWait { spec: Box<PodSpec>, reason: String },
    /// Its gang timed out (`scheduleTimeoutSeconds`): it stays pending with that reason
    /// until it is deleted.
    Expired,
}

/// scheduler-plugins' PodGroup API group, read as well as Kestrel's own.
pub const PLUGINS_GROUP: &str = "scheduling.x-k8s.io";
/// Volcano's PodGroup API group, read as well as Kestrel's own.
pub const VOLCANO_GROUP: &str = "scheduling.volcano.sh";

/// A gang's (namespace, name).
pub type GroupKey = (String, String);

#[derive(Debug, Clone)]
struct Tracked {
    uid: String,
    state: PodState,
    /// The gang it belongs to (ours only).
    group: Option<GroupKey>,
    /// `status.phase` is Running.
    running: bool,
    /// A gang member's containers' requests and limits, for the LimitRanges that may
    /// refuse pods like it.
    resources: Option<Arc<PodResources>>,
}

/// A gang as the live scheduler knows it.
#[derive(Debug, Clone)]
struct Group {
    /// Declared by a PodGroup; otherwise implied by its pods (Kueue's plain-pod groups) or
    /// only named by them.
    declared: bool,
    /// Declared by a scheduler-plugins or Volcano PodGroup: read, but its status and
    /// events belong to that project's controllers, so Kestrel writes none.
    foreign: bool,
    uid: String,
    generation: Option<i64>,
    /// The gang as declared, or why there is none to schedule (no PodGroup, or the
    /// PodGroup cannot be read).
    spec: Result<GangSpec, String>,
    /// A member pod's topology annotations, for a gang that requests none itself.
    pod_topology: Option<GangTopology>,
    /// The spec last offered to the engine, and why the engine refused it (if it did).
    offered: Option<GangSpec>,
    refused: Option<String>,
    /// Member pods (`namespace/name`).
    members: BTreeSet<String>,
    /// The last failed bind of a member, until the gang is bound.
    bind_error: Option<String>,
    /// The status last written (at first sight: the one the object carries).
    last_status: Option<GroupStatusJob>,
    /// The invalid-spec message last reported in an event.
    warned: Option<String>,
    /// The ResourceQuota or LimitRange that refuses pods like its members, if one does
    /// ([`ClusterState::apply_admission`]): said when the gang is incomplete.
    admission_note: Option<String>,
}

impl Group {
    fn new(declared: bool, spec: Result<GangSpec, String>) -> Self {
        Group {
            declared,
            foreign: false,
            uid: String::new(),
            generation: None,
            spec,
            pod_topology: None,
            offered: None,
            refused: None,
            members: BTreeSet::new(),
            bind_error: None,
            last_status: None,
            warned: None,
            admission_note: None,
        }
    }

    /// Why the gang cannot be scheduled now; `None` when the engine has it.
    fn problem(&self) -> Option<&str> {
        match &self.spec {
            Err(why) => Some(why),
            Ok(_) => self.refused.as_deref(),
        }
    }

    /// The spec for the engine: a pod's topology request fills an empty one.
    fn effective(&self) -> Option<GangSpec> {
        let mut spec = self.spec.clone().ok()?;
        if spec.topology == GangTopology::default() {
            if let Some(t) = &self.pod_topology {
                spec.topology = t.clone();
            }
        }
        Some(spec)
    }
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
    /// `Unschedulable` (no node fits), `WaitingForQueue` ([`QUEUE_WAIT_REASON`]) or
    /// `SchedulerError` (the pod cannot be read).
    pub reason: &'static str,
    pub message: String,
}

impl StatusJob {
    /// The report for the pod `namespace/name` (`key`).
    fn of(key: &str, uid: &str, reason: &'static str, message: String) -> Self {
        let (namespace, name) = key.split_once('/').expect("namespace/name");
        StatusJob {
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

/// A PodGroup's status to write (server-side apply of the status subresource).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupStatusJob {
    pub namespace: String,
    pub name: String,
    pub phase: PodGroupPhase,
    /// Member pods bound to nodes.
    pub scheduled: i32,
    /// Member pods running.
    pub running: i32,
    /// The `Scheduled` condition: `"True"` or `"False"`, its reason and message.
    pub condition: &'static str,
    pub reason: String,
    pub message: String,
    /// `metadata.generation` of the PodGroup this status is about.
    pub observed_generation: Option<i64>,
    /// When the condition last changed; `None`: it changes with this write (now).
    pub since: Option<Time>,
}

impl GroupStatusJob {
    /// Same status, whenever its condition changed.
    fn same(&self, other: &GroupStatusJob) -> bool {
        GroupStatusJob {
            since: None,
            ..self.clone()
        } == GroupStatusJob {
            since: None,
            ..other.clone()
        }
    }
}

/// A Warning event on a PodGroup: Kestrel cannot use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEventJob {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub reason: &'static str,
    pub message: String,
}

/// A preemption victim to take off its node: marked `DisruptionTarget` and deleted (its
/// own termination grace period applies), with a `Preempted` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictJob {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Who it makes room for and why.
    pub message: String,
}

/// A preempting pod's `status.nominatedNodeName`: where the room its victims leave is
/// held for it, so that other schedulers and autoscalers see the claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NominationJob {
    pub namespace: String,
    pub name: String,
    pub node: String,
}

/// A victim that declared it checkpoints on request (`kestrel.dev/checkpoint-grace`): it
/// is annotated `kestrel.dev/checkpoint-request` and evicted once it reports a checkpoint
/// at or after the request (`kestrel.dev/last-checkpoint`) or its grace is over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointJob {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// RFC 3339 time of the request (the annotation's value).
    pub requested_at: String,
    pub grace_seconds: u64,
    pub message: String,
}

/// A victim on its way out.
#[derive(Debug, Clone)]
struct Leaving {
    /// When it is evicted at the latest (driver clock).
    due: Millis,
    /// The checkpoint request's wall time (Unix ms), if it was asked for one.
    requested: Option<i64>,
    /// The eviction has been handed to the driver.
    sent: bool,
    job: EvictJob,
}

/// A ClusterQueue's or LocalQueue's status to write (server-side apply of the status
/// subresource): workload counts and, for ClusterQueues, usage per flavor.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueStatusJob {
    /// `ClusterQueue` or `LocalQueue`.
    pub kind: &'static str,
    /// For LocalQueues.
    pub namespace: Option<String>,
    pub name: String,
    /// The `status` object.
    pub status: Value,
}

/// A ClusterQueue or LocalQueue as listed, whether or not Kestrel could use it.
#[derive(Debug, Clone, Default)]
struct QueueObject {
    /// `metadata.generation`.
    generation: Option<i64>,
    /// Why its current spec cannot be used (unreadable, or refused by the engine); the
    /// previous version, if any, stays in force.
    refused: Option<String>,
}

/// Whether a queue can admit workloads: its `Active` condition.
#[derive(Debug, Clone, PartialEq)]
struct Activity {
    active: bool,
    /// `Ready` when nothing is wrong, else the first problem's reason (one that stops
    /// admission first).
    reason: &'static str,
    message: String,
    /// What stops admission (inactive queues): the problems, for the LocalQueues that
    /// point here.
    cause: String,
}

impl Activity {
    /// `problems` are (stops admission, reason, what is wrong and how to fix it).
    /// `can` and `cannot` open the message of an active and an inactive queue.
    fn new(mut problems: Vec<(bool, &'static str, String)>, can: String, cannot: &str) -> Self {
        problems.sort_by_key(|(stops, _, _)| !*stops);
        let active = !problems.iter().any(|(stops, _, _)| *stops);
        let reason = problems.first().map_or("Ready", |(_, r, _)| *r);
        let details: Vec<&str> = problems.iter().map(|(_, _, d)| d.as_str()).collect();
        let cause = problems
            .iter()
            .filter(|(stops, _, _)| *stops)
            .map(|(_, _, d)| d.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        let message = match (active, details.is_empty()) {
            (true, true) => can,
            (true, false) => format!("{can}; {}", details.join("; ")),
            (false, _) => format!("{cannot}: {}", details.join("; ")),
        };
        Activity {
            active,
            reason,
            message,
            cause,
        }
    }
}

/// The `PodScheduled=False` reason of a pod its queue holds back (not `Unschedulable`, so
/// that cluster autoscalers do not add nodes for quota).
pub const QUEUE_WAIT_REASON: &str = "WaitingForQueue";

/// How long a failed eviction waits before it is tried again.
const EVICTION_RETRY: Millis = 5_000;

/// What one cycle decided, as API work.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CycleOutput {
    pub binds: Vec<BindJob>,
    pub unschedulable: Vec<StatusJob>,
    /// PodGroup statuses that changed.
    pub group_status: Vec<GroupStatusJob>,
    /// Warning events on PodGroups Kestrel cannot use.
    pub group_events: Vec<GroupEventJob>,
    /// Victims asked to checkpoint before they are evicted.
    pub checkpoint_requests: Vec<CheckpointJob>,
    /// Victims to evict now.
    pub evictions: Vec<EvictJob>,
    /// Preemptors' nominated nodes to write.
    pub nominations: Vec<NominationJob>,
}

/// Pending pods per reason kind (the `reason` label of `kestrel_pending_pods`).
pub const REASON_KINDS: [&str; 5] = ["capacity", "constraints", "gang", "invalid", "untried"];

pub struct ClusterState {
    scheduler: Scheduler,
    scheduler_name: String,
    catalog: Catalog,
    pods: HashMap<String, Tracked>,
    keys: HashMap<PodId, String>,
    /// Explanations for invalid pods and pods waiting for their gang, reported at the next
    /// cycle.
    invalid_reports: Vec<StatusJob>,
    catalog_errors: Vec<ConvertError>,
    groups: HashMap<GroupKey, Group>,
    /// Gangs whose status may have changed since the last cycle.
    dirty_groups: HashSet<GroupKey>,
    group_events: Vec<GroupEventJob>,
    /// Topology levels in use, widest first.
    levels: Vec<String>,
    /// The message last reported per waiting pod (`namespace/name`), so that a pod's own
    /// status update does not report it again.
    reported: HashMap<String, String>,
    /// The driver's clock ([`ClusterState::set_time`]): when pods arrive, for gang timeouts.
    now: Millis,
    /// Wall time (Unix ms) at driver time 0, to read and write the checkpoint annotations.
    wall_origin: i64,
    /// Preemption victims still on their nodes, by `namespace/name`.
    leaving: BTreeMap<String, Leaving>,
    /// Queue objects (ClusterQueue, LocalQueue, Cohort, ResourceFlavor, Namespace) as the
    /// engine has them, by (kind, name).
    queue_docs: BTreeMap<(&'static str, String), QueueDocument>,
    /// Queue statuses last written (at first sight: the one the object carries), by
    /// (kind, name).
    queue_status: HashMap<(&'static str, String), Value>,
    /// The ClusterQueues and LocalQueues listed at the last [`ClusterState::set_queues`],
    /// readable or not, by (kind, name).
    queue_objects: BTreeMap<(&'static str, String), QueueObject>,
    /// The `Active` condition last written per queue (at first sight: the one the object
    /// carries), whose `lastTransitionTime` stays while its `status` does.
    queue_active: HashMap<(&'static str, String), Value>,
    /// The ResourceQuotas and LimitRanges Kestrel can use.
    admission: Policies,
    /// Gang members' containers' requests and limits, one copy of each distinct set,
    /// shared by the members ([`Tracked::resources`]).
    pod_resources: HashSet<Arc<PodResources>>,
    /// Pods arrive at their creationTimestamp and bound pods started at
    /// `status.startTime` ([`ClusterState::use_object_times`]), not when they are seen.
    object_times: bool,
    /// The pods (`namespace/name`) a pod relist in progress has listed so far: the driver
    /// keeps no store of Pod objects, so the index itself finds those deleted meanwhile.
    relisted_pods: Option<HashSet<String>>,
}

impl ClusterState {
    pub fn new(config: SchedulerConfig, scheduler_name: impl Into<String>) -> Self {
        ClusterState {
            scheduler: Scheduler::new(config),
            scheduler_name: scheduler_name.into(),
            catalog: Catalog::live(Path::new(live::API_SOURCE), [], []).0,
            pods: HashMap::new(),
            keys: HashMap::new(),
            invalid_reports: Vec::new(),
            catalog_errors: Vec::new(),
            groups: HashMap::new(),
            dirty_groups: HashSet::new(),
            group_events: Vec::new(),
            levels: Vec::new(),
            reported: HashMap::new(),
            now: 0,
            wall_origin: 0,
            leaving: BTreeMap::new(),
            queue_docs: BTreeMap::new(),
            queue_status: HashMap::new(),
            queue_objects: BTreeMap::new(),
            queue_active: HashMap::new(),
            admission: Policies::default(),
            pod_resources: HashSet::new(),
            object_times: false,
            relisted_pods: None,
        }
    }

    /// Takes pods to have arrived at their `metadata.creationTimestamp` and bound pods to
    /// have started at `status.startTime` (driver clock: since the wall origin, not before
    /// 0 nor after now), instead of when they are seen. For a snapshot that shows how long
    /// pods have waited (`kestrel explain --live`); the scheduler itself queues pods as it
    /// sees them.
    pub fn use_object_times(&mut self) {
        self.object_times = true;
    }

    /// When `pod` arrived (or, `started`, began to run) on the driver's clock.
    fn pod_time(&self, pod: &Pod, started: bool) -> Millis {
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

    /// The statuses of the ClusterQueues and LocalQueues that changed since they were last
    /// written: pending and admitted workloads (a gang counts once), the ClusterQueue's
    /// usage per flavor and resource, and the `Active` condition
    /// ([`ClusterState::queue_activity`]), whose `lastTransitionTime` changes only with
    /// its `status`. One pass over all pods: the driver calls it on a period, not every
    /// cycle.
    pub fn queue_statuses(&mut self) -> Vec<QueueStatusJob> {
        let declared: BTreeSet<(&'static str, String)> = self
            .queue_docs
            .keys()
            .filter(|(kind, _)| matches!(*kind, "ClusterQueue" | "LocalQueue"))
            .chain(self.queue_objects.keys())
            .cloned()
            .collect();
        if declared.is_empty() {
            return Vec::new();
        }
        let activity = self.queue_activity();
        let now = condition_time(self.wall_origin + self.now as i64);
        let cq_names: HashMap<kestrel_core::CqId, String> = self
            .scheduler
            .cluster_queues()
            .map(|(id, spec)| (id, spec.name.clone()))
            .collect();
        // (kind, name) -> (pending workloads, admitted workloads)
        type Workloads = (BTreeSet<String>, BTreeSet<String>);
        let mut counts: HashMap<(&'static str, String), Workloads> = HashMap::new();
        for (id, record) in self.scheduler.pods() {
            let spec = &record.spec;
            let workload = match &spec.gang {
                Some(m) => format!("{}/{}", spec.namespace, m.gang),
                None => format!("{}", id.0),
            };
            let (pending, cq) = match &record.phase {
                PodPhase::Pending => (true, self.scheduler.queue_of(id)),
                PodPhase::Bound { .. } => (false, record.admission.as_ref().map(|a| a.cq)),
                _ => continue,
            };
            let mut add = |key: (&'static str, String)| {
                let entry = counts.entry(key).or_default();
                let set = if pending { &mut entry.0 } else { &mut entry.1 };
                set.insert(workload.clone());
            };
            if let Some(name) = cq.and_then(|cq| cq_names.get(&cq)) {
                add(("ClusterQueue", name.clone()));
            }
            if let Some(local) = &spec.queue {
                add(("LocalQueue", format!("{}/{local}", spec.namespace)));
            }
        }
        let mut jobs = Vec::new();
        for key in &declared {
            let (pending, admitted) = counts
                .get(key)
                .map(|(p, a)| (p.len(), a.len()))
                .unwrap_or_default();
            let mut status = json!({
                "pendingWorkloads": pending,
                "admittedWorkloads": admitted,
            });
            if key.0 == "ClusterQueue" {
                status["reservingWorkloads"] = json!(admitted);
                let id = cq_names
                    .iter()
                    .find(|(_, n)| **n == key.1)
                    .map(|(id, _)| *id);
                let mut flavors: BTreeMap<String, Vec<Value>> = BTreeMap::new();
                for u in id
                    .map(|id| self.scheduler.queue_usage(id))
                    .unwrap_or_default()
                {
                    flavors.entry(u.flavor.clone()).or_default().push(json!({
                        "name": u.resource,
                        "total": quantity(&u.resource, u.used),
                        "borrowed": quantity(&u.resource, u.borrowed),
                    }));
                }
                status["flavorsUsage"] = flavors
                    .into_iter()
                    .map(|(name, resources)| json!({"name": name, "resources": resources}))
                    .collect();
            }
            let condition = {
                let a = &activity[key];
                let state = if a.active { "True" } else { "False" };
                let since = self
                    .queue_active
                    .get(key)
                    .filter(|last| last["status"] == state)
                    .and_then(|last| last.get("lastTransitionTime"))
                    .unwrap_or(&now);
                let mut c = json!({
                    "type": "Active",
                    "status": state,
                    "reason": a.reason,
                    "message": a.message,
                    "lastTransitionTime": since,
                });
                if let Some(g) = self.queue_objects.get(key).and_then(|o| o.generation) {
                    c["observedGeneration"] = json!(g);
                }
                c
            };
            status["conditions"] = json!([condition]);
            if self.queue_status.get(key) == Some(&status) {
                continue;
            }
            self.queue_status.insert(key.clone(), status.clone());
            self.queue_active.insert(key.clone(), condition);
            let (namespace, name) = match key.1.split_once('/') {
                Some((ns, n)) => (Some(ns.to_string()), n.to_string()),
                None => (None, key.1.clone()),
            };
            jobs.push(QueueStatusJob {
                kind: key.0,
                namespace,
                name,
                status,
            });
        }
        jobs
    }

    /// Whether each ClusterQueue and LocalQueue can admit workloads, as the engine has
    /// them, by (kind, name): their `Active` condition.
    ///
    /// A ClusterQueue is inactive when its `stopPolicy` holds it (`Stopped`) or when no
    /// version of its spec could be used (`InvalidSpec`). It stays active, saying what is
    /// wrong, when its current spec cannot be used but a previous one is in force
    /// (`InvalidSpec`), and when it names a ResourceFlavor that does not exist
    /// (`FlavorNotFound`: the engine admits in that flavor, without node labels or
    /// tolerations). A `cohortName` without a Cohort object is no problem: the queues that
    /// name it share their quota all the same.
    ///
    /// A LocalQueue is inactive when its ClusterQueue does not exist
    /// (`ClusterQueueDoesNotExist`), is inactive (`ClusterQueueIsInactive`) or does not
    /// select its namespace (`NamespaceNotSelected`), or when no version of its spec could
    /// be used (`InvalidSpec`); a previous version in force keeps it active, saying so.
    fn queue_activity(&self) -> HashMap<(&'static str, String), Activity> {
        let in_force: HashMap<&str, &ClusterQueueSpec> = self
            .scheduler
            .cluster_queues()
            .map(|(_, spec)| (spec.name.as_str(), spec))
            .collect();
        let refused = |key: &(&'static str, String)| {
            self.queue_objects.get(key).and_then(|o| o.refused.clone())
        };
        let known = || self.queue_objects.keys().chain(self.queue_docs.keys());
        let mut out = HashMap::new();
        let cluster_queues: BTreeSet<&String> = known()
            .filter(|(kind, _)| *kind == "ClusterQueue")
            .map(|(_, name)| name)
            .collect();
        for name in cluster_queues {
            let key = ("ClusterQueue", name.clone());
            let mut problems = Vec::new();
            let Some(spec) = in_force.get(name.as_str()) else {
                let why = refused(&key).unwrap_or_else(|| "it was not accepted".into());
                problems.push((
                    true,
                    "InvalidSpec",
                    format!("its spec cannot be used: {why}"),
                ));
                out.insert(
                    key,
                    Activity::new(problems, String::new(), "Can't admit new workloads"),
                );
                continue;
            };
            match spec.stop_policy {
                StopPolicy::None => {}
                StopPolicy::Hold => problems.push((
                    true,
                    "Stopped",
                    "spec.stopPolicy is Hold; set it to None to admit workloads".to_string(),
                )),
                StopPolicy::HoldAndDrain => problems.push((
                    true,
                    "Stopped",
                    "spec.stopPolicy is HoldAndDrain, so its admitted workloads are evicted too; set it to None to admit workloads".to_string(),
                )),
            }
            if let Some(why) = refused(&key) {
                problems.push((
                    false,
                    "InvalidSpec",
                    format!("its current spec cannot be used, so the previous one stays in force: {why}"),
                ));
            }
            for (gi, group) in spec.resource_groups.iter().enumerate() {
                for (fi, f) in group.flavors.iter().enumerate() {
                    if !self
                        .queue_docs
                        .contains_key(&("ResourceFlavor", f.flavor.clone()))
                    {
                        problems.push((
                            false,
                            "FlavorNotFound",
                            format!(
                                "spec.resourceGroups[{gi}].flavors[{fi}].name: ResourceFlavor {:?} does not exist, so workloads admitted in it get no node labels or tolerations; create it, or fix the name",
                                f.flavor
                            ),
                        ));
                    }
                }
            }
            out.insert(
                key,
                Activity::new(
                    problems,
                    "Can admit new workloads".to_string(),
                    "Can't admit new workloads",
                ),
            );
        }
        let local_queues: BTreeSet<&(&'static str, String)> =
            known().filter(|(kind, _)| *kind == "LocalQueue").collect();
        for key in local_queues {
            let mut problems = Vec::new();
            let Some(QueueDocument::LocalQueue(spec)) = self.queue_docs.get(key) else {
                let why = refused(key).unwrap_or_else(|| "it was not accepted".into());
                problems.push((
                    true,
                    "InvalidSpec",
                    format!("its spec cannot be used: {why}"),
                ));
                out.insert(
                    key.clone(),
                    Activity::new(problems, String::new(), "Can't submit new workloads"),
                );
                continue;
            };
            let (namespace, cq) = (&spec.namespace, &spec.cluster_queue);
            match (
                out.get(&("ClusterQueue", cq.clone())),
                in_force.get(cq.as_str()),
            ) {
                (Some(a), _) if !a.active => problems.push((
                    true,
                    "ClusterQueueIsInactive",
                    format!("ClusterQueue {cq} is inactive ({}): {}", a.reason, a.cause),
                )),
                (_, Some(cq_spec)) => {
                    // As the engine resolves a LocalQueue: every namespace carries its name
                    // as the label kubernetes.io/metadata.name.
                    if let Some(selector) = &cq_spec.namespace_selector {
                        let mut labels = match self.queue_docs.get(&("Namespace", namespace.clone())) {
                            Some(QueueDocument::Namespace(_, labels)) => labels.clone(),
                            _ => Labels::default(),
                        };
                        labels
                            .entry("kubernetes.io/metadata.name".to_string())
                            .or_insert_with(|| namespace.clone());
                        if !selector.iter().all(|r| r.matches(&labels)) {
                            problems.push((
                                true,
                                "NamespaceNotSelected",
                                format!("ClusterQueue {cq} does not admit namespace {namespace} (its spec.namespaceSelector); label the namespace, or change the selector"),
                            ));
                        }
                    }
                }
                _ => problems.push((
                    true,
                    "ClusterQueueDoesNotExist",
                    format!("ClusterQueue {cq:?} (spec.clusterQueue) does not exist; create it, or fix spec.clusterQueue"),
                )),
            }
            if let Some(why) = refused(key) {
                problems.push((
                    false,
                    "InvalidSpec",
                    format!("its current spec cannot be used, so the previous one stays in force: {why}"),
                ));
            }
            out.insert(
                key.clone(),
                Activity::new(
                    problems,
                    format!("Can submit new workloads to ClusterQueue {cq}"),
                    "Can't submit new workloads",
                ),
            );
        }
        out
    }

    /// What the API said to a queue status write: a failed one is written again at the
    /// next period.
    pub fn queue_status_result(&mut self, job: &QueueStatusJob, ok: bool) {
        if !ok {
            let name = match &job.namespace {
                Some(ns) => format!("{ns}/{}", job.name),
                None => job.name.clone(),
            };
            self.queue_status.remove(&(job.kind, name));
        }
    }

    /// Replaces the queue objects: every ClusterQueue, LocalQueue, Cohort and
    /// ResourceFlavor, and every Namespace (for namespaceSelectors), as JSON with `kind`
    /// and `apiVersion` set. What changed is declared to the engine; what is gone is
    /// removed. An object that cannot be read or that the engine refuses (a cohort cycle,
    /// an invalid quota) is returned with the reason and not applied: its previous version,
    /// if any, stays in force. ClusterQueues and LocalQueues are remembered either way, for
    /// their statuses ([`ClusterState::queue_statuses`]).
    pub fn set_queues<'a>(&mut self, objects: impl IntoIterator<Item = &'a Value>) -> Vec<String> {
        let mut errors = Vec::new();
        let mut wanted: BTreeMap<(&'static str, String), QueueDocument> = BTreeMap::new();
        let mut listed: BTreeMap<(&'static str, String), QueueObject> = BTreeMap::new();
        for object in objects {
            let name = object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("?");
            let queue = queue_document_key(object)
                .filter(|(kind, _)| matches!(*kind, "ClusterQueue" | "LocalQueue"));
            if let Some(key) = &queue {
                let generation = object
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64);
                listed.insert(
                    key.clone(),
                    QueueObject {
                        generation,
                        refused: None,
                    },
                );
                self.observe_queue_status(key, object);
            }
            match parse_queue_document(Path::new(live::API_SOURCE), name, object) {
                Ok(doc) => {
                    wanted.insert(doc.key(), doc);
                }
                Err(e) => {
                    if let Some(o) = queue.as_ref().and_then(|k| listed.get_mut(k)) {
                        o.refused = Some(match &e.field {
                            Some(field) => format!("field {field}: {}", e.message),
                            None => e.message.clone(),
                        });
                    }
                    errors.push(e.to_string());
                    // The version in force stays until a readable one replaces it.
                    let previous = queue_document_key(object)
                        .and_then(|key| Some((key.clone(), self.queue_docs.get(&key)?.clone())));
                    if let Some((key, doc)) = previous {
                        wanted.insert(key, doc);
                    }
                }
            }
        }
        // Removals first, then additions from the leaves of references up: flavors and
        // cohorts before the ClusterQueues that name them, ClusterQueues before LocalQueues.
        let gone: Vec<(&'static str, String)> = self
            .queue_docs
            .keys()
            .filter(|k| !wanted.contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            match self.queue_docs.remove(&key) {
                Some(QueueDocument::LocalQueue(q)) => {
                    self.scheduler.remove_local_queue(&q.namespace, &q.name)
                }
                Some(QueueDocument::ClusterQueue(q)) => {
                    self.scheduler.remove_cluster_queue(&q.name)
                }
                Some(QueueDocument::Cohort(c)) => self.scheduler.remove_cohort(&c.name),
                Some(QueueDocument::Flavor(f)) => self.scheduler.remove_flavor(&f.name),
                Some(QueueDocument::Namespace(n, _)) => {
                    self.scheduler.set_namespace_labels(&n, Default::default())
                }
                Some(QueueDocument::DisruptionBudget(b)) => self
                    .scheduler
                    .remove_disruption_budget(&b.namespace, &b.name),
                _ => {}
            }
        }
        let rank = |kind: &str| {
            [
                "ResourceFlavor",
                "Cohort",
                "ClusterQueue",
                "LocalQueue",
                "Namespace",
            ]
            .iter()
            .position(|k| *k == kind)
            .unwrap_or(usize::MAX)
        };
        let mut changed: Vec<((&'static str, String), QueueDocument)> = wanted
            .into_iter()
            .filter(|(k, doc)| self.queue_docs.get(k) != Some(doc))
            .collect();
        changed.sort_by_key(|((kind, _), _)| rank(kind));
        for (key, doc) in changed {
            let applied = match &doc {
                QueueDocument::Flavor(f) => {
                    self.scheduler.add_flavor(f.clone());
                    Ok(())
                }
                QueueDocument::Cohort(c) => self.scheduler.add_cohort(c.clone()).map(|_| ()),
                QueueDocument::ClusterQueue(q) => {
                    self.scheduler.add_cluster_queue(q.clone()).map(|_| ())
                }
                QueueDocument::LocalQueue(q) => {
                    self.scheduler.add_local_queue(q.clone());
                    Ok(())
                }
                QueueDocument::Namespace(n, labels) => {
                    self.scheduler.set_namespace_labels(n, labels.clone());
                    Ok(())
                }
                QueueDocument::DisruptionBudget(b) => {
                    self.scheduler.set_disruption_budget(b.clone());
                    Ok(())
                }
                // Not watched live: the API server enforces ResourceQuota and LimitRange.
                QueueDocument::Quota(_) | QueueDocument::LimitRange(_) => continue,
            };
            match applied {
                Ok(()) => {
                    self.queue_docs.insert(key, doc);
                }
                Err(e) => {
                    if let Some(o) = listed.get_mut(&key) {
                        o.refused = Some(match &e {
                            ClusterError::Queue(q) => format!("field {}: {}", q.field, q.why),
                            other => other.to_string(),
                        });
                    }
                    errors.push(format!("{} {}: {e}", key.0, key.1))
                }
            }
        }
        // A queue deleted (and perhaps created again) starts afresh.
        self.queue_status.retain(|k, _| listed.contains_key(k));
        self.queue_active.retain(|k, _| listed.contains_key(k));
        self.queue_objects = listed;
        errors
    }

    /// At first sight of a queue, the status it carries counts as written: an unchanged
    /// status is not written again (after a restart, or when another replica led), and its
    /// `Active` condition keeps its `lastTransitionTime`.
    fn observe_queue_status(&mut self, key: &(&'static str, String), object: &Value) {
        let Some(status) = object.get("status").filter(|s| s.is_object()) else {
            return;
        };
        if !self.queue_status.contains_key(key) {
            self.queue_status.insert(key.clone(), status.clone());
        }
        if !self.queue_active.contains_key(key) {
            let active = status
                .get("conditions")
                .and_then(Value::as_array)
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Active"));
            if let Some(c) = active {
                self.queue_active.insert(key.clone(), c.clone());
            }
        }
    }

    /// Sets the wall time (Unix ms) at driver time 0: checkpoint times in annotations are
    /// wall times.
    pub fn set_wall_origin(&mut self, unix_ms: i64) {
        self.wall_origin = unix_ms;
    }

    /// The earliest time (driver clock) something is due without any watch event: a
    /// victim's eviction after its checkpoint grace, or the engine's own wake-up (a
    /// minimum runtime or preemption delay ends).
    pub fn next_timer(&self) -> Option<Millis> {
        let eviction = self
            .leaving
            .values()
            .filter(|l| !l.sent)
            .map(|l| l.due)
            .min();
        match (eviction, self.scheduler.next_wakeup()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// What the API said to an eviction: on failure it is tried again shortly, unless the
    /// pod is gone.
    pub fn eviction_result(&mut self, job: &EvictJob, result: Result<(), String>) {
        let key = format!("{}/{}", job.namespace, job.name);
        if result.is_ok() {
            return;
        }
        if let Some(l) = self.leaving.get_mut(&key).filter(|l| l.job.uid == job.uid) {
            l.sent = false;
            l.due = self.now + EVICTION_RETRY;
        }
    }

    /// Victims chosen this cycle: asked to checkpoint or evicted at once.
    fn start_evictions(
        &mut self,
        preemptions: &[kestrel_core::Preemption],
        now: Millis,
        out: &mut CycleOutput,
    ) {
        for p in preemptions {
            let preemptor = p.preemptor.and_then(|id| self.keys.get(&id));
            let nominated = p.preemptor.and_then(|id| self.scheduler.nominated_node(id));
            if let (Some(key), Some(node)) = (preemptor, nominated) {
                let (namespace, name) = key.split_once('/').expect("namespace/name");
                out.nominations.push(NominationJob {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    node: self.scheduler.cluster().node(node).spec.name.clone(),
                });
            }
            let message = match preemptor {
                Some(k) => format!("{} (for {k})", p.reason),
                None => p.reason.clone(),
            };
            for v in &p.victims {
                let Some(key) = self.keys.get(&v.pod).cloned() else {
                    continue;
                };
                if self.leaving.contains_key(&key) {
                    continue;
                }
                let Some(t) = self.pods.get(&key) else {
                    continue;
                };
                let (namespace, name) = key.split_once('/').expect("namespace/name");
                let job = EvictJob {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    uid: t.uid.clone(),
                    message: message.clone(),
                };
                let (due, requested) = match v.checkpoint_grace {
                    Some(grace) => {
                        let at = self.wall_origin + now as i64;
                        out.checkpoint_requests.push(CheckpointJob {
                            namespace: job.namespace.clone(),
                            name: job.name.clone(),
                            uid: job.uid.clone(),
                            requested_at: rfc3339(at),
                            grace_seconds: grace.div_ceil(1000),
                            message: message.clone(),
                        });
                        (now + grace, Some(at))
                    }
                    None => (now, None),
                };
                self.leaving.insert(
                    key,
                    Leaving {
                        due,
                        requested,
                        sent: false,
                        job,
                    },
                );
            }
        }
    }

    /// Evictions whose time has come, handed out once.
    fn due_evictions(&mut self, now: Millis) -> Vec<EvictJob> {
        self.leaving
            .values_mut()
            .filter(|l| !l.sent && l.due <= now)
            .map(|l| {
                l.sent = true;
                l.job.clone()
            })
            .collect()
    }

    /// A bound pod's `kestrel.dev/last-checkpoint`: the engine prices its unsaved work
    /// from it, and a victim that checkpointed after the request may go at once.
    fn note_checkpoint(&mut self, key: &str, id: PodId, pod: &Pod) {
        let Some(value) = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(LAST_CHECKPOINT_ANNOTATION))
        else {
            return;
        };
        let Ok(at) = value.trim().parse::<Timestamp>() else {
            tracing::warn!(pod = %key, value = %value, "{LAST_CHECKPOINT_ANNOTATION} is not an RFC 3339 time; ignored");
            return;
        };
        let wall = at.as_millisecond();
        let driver_ms = (wall - self.wall_origin).clamp(0, self.now as i64) as Millis;
        let _ = self.scheduler.record_checkpoint(id, driver_ms);
        if let Some(l) = self.leaving.get_mut(key) {
            if l.requested.is_some_and(|r| wall >= r) {
                l.due = l.due.min(self.now);
            }
        }
    }

    /// Sets the clock that pods applied from now on arrive at (a gang's
    /// `scheduleTimeoutSeconds` counts from its first pod's arrival). Never goes back.
    pub fn set_time(&mut self, now: Millis) {
        self.now = self.now.max(now);
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
            Path::new(live::API_SOURCE),
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

    /// A Node was added or changed. An unreadable node is left as it was (and returned).
    pub fn apply_node(&mut self, node: &Node) -> Result<(), ConvertError> {
        let spec = live::node_spec(node)?;
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
            let state = self.restore(&key, *spec, node, gpus, self.now);
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
    /// [`ClusterState::end_pod_relist`] drops the ones it did not list.
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

    fn apply_pod_state(&mut self, pod: &Pod, key: &str) {
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
                if ours {
                    // A running member counts towards its gang (a gang grows around it).
                    let _ = self.gang_of(pod, &mut spec);
                }
                let gpus = pod
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(GPU_INDICES_ANNOTATION))
                    .and_then(|v| live::parse_gpu_indices(v));
                let started = self.pod_time(pod, true);
                let state = self.restore(&key, spec, n.to_string(), gpus, started);
                self.set(&key, uid, state);
            }
            (None, Some(PodState::Queued(_) | PodState::Binding { .. } | PodState::Expired)) => {
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
                let read = live::pod_spec(&self.catalog, pod).and_then(|mut spec| {
                    let group = self.gang_of(pod, &mut spec)?;
                    Ok((spec, group))
                });
                match read {
                    Ok((spec, group)) => {
                        let problem = group
                            .as_ref()
                            .and_then(|g| self.groups.get(g))
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
    fn track_membership(&mut self, key: &str, pod: &Pod) {
        let group = if live::scheduler_name(pod) == self.scheduler_name {
            live::pod_group_key(pod)
        } else {
            None
        };
        let running = live::is_running(pod);
        let resources = group.as_ref().map(|_| self.intern_resources(pod));
        let Some(t) = self.pods.get_mut(key) else {
            return;
        };
        let old = std::mem::replace(&mut t.group, group.clone());
        let changed = old != group || t.running != running || t.resources != resources;
        t.running = running;
        t.resources = resources;
        if old != group {
            if let Some(old) = &old {
                self.leave_group(old, key);
            }
            if let Some(g) = &group {
                self.groups
                    .entry(g.clone())
                    .or_insert_with(|| Group::new(false, Err(not_found(g))))
                    .members
                    .insert(key.to_string());
            }
        }
        if changed {
            self.dirty_groups.extend(group);
        }
    }

    /// Reads a pod's gang into `spec.gang`; returns the gang's key. Declares gangs that
    /// pods imply (Kueue's plain-pod groups) and takes a topology request from the pods'
    /// annotations for a gang that has none.
    fn gang_of(&mut self, pod: &Pod, spec: &mut PodSpec) -> Result<Option<GroupKey>, ConvertError> {
        let Some(gang) = live::pod_gang(pod)? else {
            return Ok(None);
        };
        let key: GroupKey = (spec.namespace.clone(), gang.membership.gang.clone());
        // A gang named by a Kueue plain-pod group is implied by its pods; the others
        // (Kestrel's, scheduler-plugins' and Volcano's) wait for their PodGroup.
        let kestrel = gang.implied.is_none();
        let entry = self
            .groups
            .entry(key.clone())
            .or_insert_with(|| Group::new(false, Err(not_found(&key))));
        let mut changed = false;
        if let (false, Some(implied)) = (kestrel, &gang.implied) {
            if !entry.declared && entry.spec.is_err() {
                entry.spec = Ok(implied.clone());
                changed = true;
            }
        }
        if gang.topology != GangTopology::default() && entry.pod_topology.is_none() {
            entry.pod_topology = Some(gang.topology.clone());
            changed = true;
        }
        spec.gang = Some(gang.membership);
        if changed {
            self.settle_group(&key);
        }
        Ok(Some(key))
    }

    /// A Pod was deleted.
    pub fn delete_pod(&mut self, pod: &Pod) {
        let key = live::pod_key(pod);
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if self
            .pods
            .get(&key)
            .is_some_and(|t| uid.is_empty() || t.uid == uid)
        {
            self.drop_pod(&key);
        }
    }

    /// Sets a pod's state, keeping what is known of its gang.
    fn set(&mut self, key: &str, uid: String, state: PodState) {
        if !matches!(state, PodState::Invalid(_) | PodState::GangWait { .. }) {
            self.reported.remove(key);
        }
        match self.pods.get_mut(key) {
            Some(t) => {
                t.uid = uid;
                t.state = state;
                if let Some(g) = &t.group {
                    self.dirty_groups.insert(g.clone());
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
    fn report(&mut self, key: &str, reason: &'static str, message: String) {
        if self.reported.get(key) == Some(&message) {
            return;
        }
        let Some(t) = self.pods.get(key) else {
            return;
        };
        self.reported.insert(key.to_string(), message.clone());
        self.invalid_reports
            .push(StatusJob::of(key, &t.uid, reason, message));
    }

    /// Drops a pod, releasing what it held in the engine.
    fn forget(&mut self, key: &str) {
        self.leaving.remove(key);
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
            self.leave_group(g, key);
        }
    }

    /// A pod is gone for good (deleted or finished).
    fn drop_pod(&mut self, key: &str) {
        self.forget(key);
        self.reported.remove(key);
    }

    fn leave_group(&mut self, group: &GroupKey, key: &str) {
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        g.members.remove(key);
        if !g.declared && g.members.is_empty() {
            self.groups.remove(group);
            self.dirty_groups.remove(group);
        } else {
            self.dirty_groups.insert(group.clone());
        }
    }

    fn restore(
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

    /// One scheduling cycle: the binds and status reports to carry out.
    pub fn cycle(&mut self, now: Millis) -> CycleOutput {
        self.set_time(now);
        let decisions = self.scheduler.schedule(now);
        let noted = self.refresh_admission_notes();
        let mut out = CycleOutput {
            binds: Vec::with_capacity(decisions.bindings.len()),
            unschedulable: self.take_reports(),
            group_status: Vec::new(),
            group_events: std::mem::take(&mut self.group_events),
            checkpoint_requests: Vec::new(),
            evictions: Vec::new(),
            nominations: Vec::new(),
        };
        self.start_evictions(&decisions.preemptions, now, &mut out);
        out.evictions = self.due_evictions(now);
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
                self.dirty_groups.insert(g.clone());
            }
            let (namespace, name) = key.split_once('/').expect("namespace/name");
            out.binds.push(BindJob {
                id: b.pod,
                namespace: namespace.to_string(),
                name: name.to_string(),
                uid: t.uid.clone(),
                node,
                gpu_indices: live::format_gpu_indices(&b.gpus),
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
                self.dirty_groups.insert(g.clone());
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
                .push(StatusJob::of(key, &t.uid, reason_kind, message));
        }
        // Pods of incomplete gangs whose admission note changed say so again (the
        // engine reports a pod only when its own explanation changes).
        for key in &noted {
            let Some(g) = self.groups.get(key) else {
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
                out.unschedulable.push(StatusJob::of(
                    member,
                    &t.uid,
                    "Unschedulable",
                    self.explain(reason, Some(key)),
                ));
            }
        }
        // Pods of a gang that timed out leave the engine and wait, saying so.
        for id in decisions.expired {
            let Some(key) = self.keys.remove(&id) else {
                continue;
            };
            let message = self
                .scheduler
                .pod(id)
                .pending_reason
                .as_ref()
                .map(|r| r.to_string())
                .unwrap_or_else(|| "its gang timed out (scheduleTimeoutSeconds)".into());
            let Some(t) = self.pods.get_mut(&key) else {
                continue;
            };
            t.state = PodState::Expired;
            if let Some(g) = &t.group {
                self.dirty_groups.insert(g.clone());
            }
            out.unschedulable
                .push(StatusJob::of(&key, &t.uid, "Unschedulable", message));
        }
        out.group_status = self.group_statuses();
        out
    }

    /// The queued reports still true: the latest per pod, for pods that still wait
    /// outside the engine for that reason.
    fn take_reports(&mut self) -> Vec<StatusJob> {
        let reports = std::mem::take(&mut self.invalid_reports);
        let mut seen = HashSet::new();
        let pods = &self.pods;
        let mut out: Vec<StatusJob> = reports
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
            self.dirty_groups.insert(g.clone());
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
                if let Some(g) = group.and_then(|g| self.groups.get_mut(&g)) {
                    g.bind_error = Some(format!(
                        "binding pod {key} to node {node} failed ({why}); the pod was requeued"
                    ));
                }
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
                PodState::GangWait { .. } | PodState::Expired => "gang",
                _ => continue,
            };
            *out.entry(kind).or_default() += 1;
        }
        out
    }

    // ---- Gangs ------------------------------------------------------------------------

    /// A Kestrel PodGroup (the object as JSON) was added or changed. It is read with the
    /// simulator's parser; a PodGroup that cannot be read or scheduled is reported (a
    /// Warning event on it, the reason on its pods, its status) and its pods wait.
    pub fn apply_pod_group(&mut self, object: &Value) {
        let group = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .and_then(|v| v.split('/').next());
        let foreign = match group {
            Some(KESTREL_GROUP) => false,
            Some(PLUGINS_GROUP | VOLCANO_GROUP) => true,
            _ => return,
        };
        let meta = object.get("metadata");
        let text = |field: &str| {
            meta.and_then(|m| m.get(field))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let (namespace, name, uid) = (text("namespace"), text("name"), text("uid"));
        let namespace = if namespace.is_empty() {
            "default".to_string()
        } else {
            namespace
        };
        let generation = meta
            .and_then(|m| m.get("generation"))
            .and_then(Value::as_i64);
        let spec = match gangs::parse_gang_document(Path::new(live::API_SOURCE), object) {
            Ok(GangDocument::PodGroup(spec)) => Ok(spec),
            Ok(GangDocument::Topology(_)) => return,
            Err(e) => Err(format!(
                "PodGroup {namespace}/{name} is invalid: {}",
                ConvertError::from(e).message
            )),
        };
        let key: GroupKey = (namespace, name);
        let entry = self
            .groups
            .entry(key.clone())
            .or_insert_with(|| Group::new(true, spec.clone()));
        if entry.uid != uid {
            // First sight (or a new object of that name): the status it carries is the
            // last one written.
            entry.uid = uid;
            entry.last_status = object.get("status").and_then(|s| observed_status(&key, s));
            entry.warned = None;
            entry.bind_error = None;
        }
        entry.declared = true;
        entry.foreign = foreign;
        entry.spec = spec;
        entry.generation = generation;
        self.settle_group(&key);
    }

    /// A PodGroup was deleted: its waiting pods wait for it to come back.
    pub fn delete_pod_group(&mut self, namespace: &str, name: &str) {
        let key: GroupKey = (namespace.to_string(), name.to_string());
        let Some(g) = self.groups.get_mut(&key) else {
            return;
        };
        g.declared = false;
        g.uid.clear();
        g.spec = Err(not_found(&key));
        g.last_status = None;
        g.warned = None;
        g.bind_error = None;
        if g.members.is_empty() {
            self.groups.remove(&key);
            self.dirty_groups.remove(&key);
        } else {
            self.settle_group(&key);
        }
    }

    /// PodGroups not in `present` were deleted while the watch was down (after a relist).
    pub fn retain_pod_groups(&mut self, present: &HashSet<GroupKey>) {
        let gone: Vec<GroupKey> = self
            .groups
            .iter()
            .filter(|(k, g)| g.declared && !g.foreign && !present.contains(*k))
            .map(|(k, _)| k.clone())
            .collect();
        for (namespace, name) in gone {
            self.delete_pod_group(&namespace, &name);
        }
    }

    /// Sets the topology levels from Kestrel's Topology objects: the one named `default`,
    /// else the first by name. Gangs are checked against the new levels. Returns the
    /// Topologies that cannot be read.
    pub fn set_topologies<'a>(
        &mut self,
        objects: impl IntoIterator<Item = &'a Value>,
    ) -> Vec<String> {
        let mut errors = Vec::new();
        let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for object in objects {
            let api_version = object.get("apiVersion").and_then(Value::as_str);
            if api_version.and_then(|v| v.split('/').next()) != Some(KESTREL_GROUP) {
                continue;
            }
            let name = object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            match gangs::parse_gang_document(Path::new(live::API_SOURCE), object) {
                Ok(GangDocument::Topology(levels)) => {
                    found.insert(name, levels);
                }
                Ok(GangDocument::PodGroup(_)) => {}
                Err(e) => errors.push(format!(
                    "Topology {name} is invalid: {}",
                    ConvertError::from(e).message
                )),
            }
        }
        let levels = found
            .remove("default")
            .or_else(|| found.into_values().next())
            .unwrap_or_default();
        if levels != self.levels {
            self.levels = levels.clone();
            self.scheduler.set_topology_levels(levels);
            let keys: Vec<GroupKey> = self.groups.keys().cloned().collect();
            for key in keys {
                if let Some(g) = self.groups.get_mut(&key) {
                    g.offered = None;
                    g.refused = None;
                }
                self.settle_group(&key);
            }
        }
        errors
    }

    /// Whether a gang's status may have changed since the last cycle.
    pub fn groups_changed(&self) -> bool {
        !self.dirty_groups.is_empty()
    }

    /// The topology levels in use, widest first.
    pub fn topology_levels(&self) -> &[String] {
        &self.levels
    }

    /// Whether a PodGroup (Kestrel's) is known and usable: `Some(None)` usable,
    /// `Some(Some(why))` not, `None` unknown.
    pub fn pod_group_problem(&self, namespace: &str, name: &str) -> Option<Option<&str>> {
        let g = self
            .groups
            .get(&(namespace.to_string(), name.to_string()))?;
        Some(g.problem())
    }

    // ---- ResourceQuotas and LimitRanges ------------------------------------------------

    /// A ResourceQuota or LimitRange was added or changed. They explain incomplete gangs:
    /// pods the API server refuses to create because their namespace's quota is used up or
    /// a LimitRange's bounds exclude them. Returns whether what Kestrel uses of it changed,
    /// and the warnings about fields that cannot be read (skipped), each once while it lasts.
    pub fn apply_admission<K: AdmissionObject>(&mut self, object: &K) -> (bool, Vec<String>) {
        self.admission.apply(object)
    }

    /// A ResourceQuota or LimitRange (`kind`) was deleted. Returns whether Kestrel used it.
    pub fn delete_admission(&mut self, kind: &'static str, namespace: &str, name: &str) -> bool {
        self.admission.delete(kind, namespace, name)
    }

    /// After a relist of `kind`: drops its objects not in it, (namespace, name).
    pub fn retain_admission(
        &mut self,
        kind: &'static str,
        present: &HashSet<(String, String)>,
    ) -> bool {
        self.admission.retain(kind, present)
    }

    /// A gang member's containers' requests and limits, shared with the members that
    /// have the same.
    fn intern_resources(&mut self, pod: &Pod) -> Arc<PodResources> {
        let resources = PodResources::of(pod);
        if let Some(shared) = self.pod_resources.get(&resources) {
            return shared.clone();
        }
        let shared = Arc::new(resources);
        self.pod_resources.insert(shared.clone());
        shared
    }

    /// The ResourceQuota or LimitRange that refuses pods like a gang's members (for a
    /// quota: any pod, while none exists), as a sentence; `None` when its namespace's
    /// policies admit them.
    fn admission_refusal(&self, key: &GroupKey) -> Option<String> {
        if !self.admission.has_namespace(&key.0) {
            return None;
        }
        let g = self.groups.get(key)?;
        // Only a gang with pods waiting in the engine (or none at all) can be incomplete.
        let waits = g.members.iter().any(|m| {
            matches!(
                self.pods.get(m).map(|t| &t.state),
                Some(PodState::Queued(_))
            )
        });
        if !waits && !g.members.is_empty() {
            return None;
        }
        let mut usages: Vec<PodUsage> = Vec::new();
        let mut resources: Vec<&PodResources> = Vec::new();
        for member in &g.members {
            let Some(t) = self.pods.get(member) else {
                continue;
            };
            let usage = match &t.state {
                PodState::Queued(id)
                | PodState::Binding { id, .. }
                | PodState::Bound { id, .. } => PodUsage::of(&self.scheduler.pod(*id).spec),
                PodState::GangWait { spec, .. } | PodState::Orphan { spec, .. } => {
                    PodUsage::of(spec)
                }
                PodState::Gated | PodState::Invalid(_) | PodState::Expired => continue,
            };
            if !usages.contains(&usage) {
                usages.push(usage);
            }
            if let Some(r) = t.resources.as_deref() {
                if !resources.contains(&r) {
                    resources.push(r);
                }
            }
        }
        if usages.is_empty() {
            usages.push(PodUsage::default());
        }
        self.admission.refusal(&key.0, &usages, &resources)
    }

    /// Works the admission notes out again for the gangs that changed and those in
    /// namespaces whose policies changed; returns the gangs whose note changed, marked for
    /// a status update. Forgets the members' resources no pod has any more.
    fn refresh_admission_notes(&mut self) -> Vec<GroupKey> {
        let namespaces = self.admission.take_changed();
        let mut keys: BTreeSet<GroupKey> = self.dirty_groups.iter().cloned().collect();
        if !namespaces.is_empty() {
            keys.extend(
                self.groups
                    .keys()
                    .filter(|k| namespaces.contains(&k.0))
                    .cloned(),
            );
        }
        let mut changed = Vec::new();
        for key in keys {
            let note = self.admission_refusal(&key);
            let Some(g) = self.groups.get_mut(&key) else {
                continue;
            };
            if g.admission_note != note {
                g.admission_note = note;
                self.dirty_groups.insert(key.clone());
                changed.push(key);
            }
        }
        self.pod_resources.retain(|r| Arc::strong_count(r) > 1);
        changed
    }

    /// Why a pod (or its gang) waits, as reported: the engine's explanation, with the
    /// ResourceQuota or LimitRange that refuses the missing pods when the gang is incomplete.
    fn explain(&self, reason: &Unschedulable, group: Option<&GroupKey>) -> String {
        let message = reason.to_string();
        let note = group
            .and_then(|g| self.groups.get(g))
            .and_then(|g| g.admission_note.as_deref());
        match (&reason.queue, &reason.gang, note) {
            (None, Some(problem @ GangProblem::Incomplete { .. }), Some(note)) => {
                with_admission_note(message, problem, note)
            }
            _ => message,
        }
    }

    /// Declares the gang to the engine if it changed, reports a PodGroup that cannot be
    /// used, and moves its waiting pods into the engine or out of it.
    fn settle_group(&mut self, key: &GroupKey) {
        let Some(group) = self.groups.get_mut(key) else {
            return;
        };
        if let Some(spec) = group.effective() {
            if group.offered.as_ref() != Some(&spec) {
                let noun = if group.declared { "PodGroup" } else { "gang" };
                group.refused = self.scheduler.add_gang(spec.clone()).err().map(|e| {
                    format!(
                        "{noun} {}/{} is invalid: {}: {}",
                        key.0, key.1, e.field, e.why
                    )
                });
                group.offered = Some(spec);
            }
        }
        let problem = group.problem().map(str::to_string);
        if group.declared && !group.foreign {
            match &problem {
                Some(why) if group.warned.as_ref() != Some(why) => {
                    group.warned = Some(why.clone());
                    self.group_events.push(GroupEventJob {
                        namespace: key.0.clone(),
                        name: key.1.clone(),
                        uid: group.uid.clone(),
                        reason: "InvalidSpec",
                        message: why.clone(),
                    });
                }
                Some(_) => {}
                None => group.warned = None,
            }
        }
        let members: Vec<String> = group.members.iter().cloned().collect();
        self.dirty_groups.insert(key.clone());
        for member in members {
            let Some(t) = self.pods.get_mut(&member) else {
                continue;
            };
            match (&problem, &mut t.state) {
                (None, PodState::GangWait { .. }) => {
                    let PodState::GangWait { spec, .. } =
                        std::mem::replace(&mut t.state, PodState::Gated)
                    else {
                        unreachable!()
                    };
                    let id = self.scheduler.submit(*spec, self.now);
                    self.keys.insert(id, member.clone());
                    t.state = PodState::Queued(id);
                    self.reported.remove(&member);
                }
                (Some(why), PodState::Queued(id)) => {
                    let id = *id;
                    let spec = self.scheduler.pod(id).spec.clone();
                    let _ = self.scheduler.finish(id);
                    self.keys.remove(&id);
                    t.state = PodState::GangWait {
                        spec: Box::new(spec),
                        reason: why.clone(),
                    };
                    self.report(&member, "Unschedulable", why.clone());
                }
                (Some(why), PodState::GangWait { reason, .. }) if reason != why => {
                    *reason = why.clone();
                    self.report(&member, "Unschedulable", why.clone());
                }
                _ => {}
            }
        }
    }

    /// The statuses of the gangs that changed, each only when it differs from the one
    /// last written.
    fn group_statuses(&mut self) -> Vec<GroupStatusJob> {
        let mut dirty: Vec<GroupKey> = self.dirty_groups.drain().collect();
        dirty.sort();
        let mut out = Vec::new();
        for key in dirty {
            let Some(job) = self.group_status(&key) else {
                continue;
            };
            let group = self.groups.get_mut(&key).expect("group_status found it");
            if matches!(job.phase, PodGroupPhase::Scheduled | PodGroupPhase::Running) {
                group.bind_error = None;
            }
            if group.last_status.as_ref().is_some_and(|l| l.same(&job)) {
                continue;
            }
            let since = group
                .last_status
                .as_ref()
                .filter(|l| l.condition == job.condition)
                .and_then(|l| l.since.clone());
            let job = GroupStatusJob { since, ..job };
            group.last_status = Some(job.clone());
            out.push(job);
        }
        out
    }

    /// What a declared gang's status is now; `None` while its binds are in flight (their
    /// results decide it) or for gangs without a PodGroup.
    fn group_status(&self, key: &GroupKey) -> Option<GroupStatusJob> {
        let g = self.groups.get(key)?;
        if !g.declared || g.foreign {
            return None;
        }
        let (mut bound, mut running, mut binding, mut expired, mut invalid) = (0, 0, 0, 0, 0);
        let mut waiting: Option<Arc<Unschedulable>> = None;
        for member in &g.members {
            let Some(t) = self.pods.get(member) else {
                continue;
            };
            match &t.state {
                PodState::Bound { .. } | PodState::Orphan { .. } => {
                    bound += 1;
                    running += i32::from(t.running);
                }
                PodState::Binding { .. } => binding += 1,
                PodState::Queued(id) => {
                    if waiting.is_none() {
                        waiting = self.scheduler.pod(*id).pending_reason.clone();
                    }
                }
                PodState::Expired => expired += 1,
                PodState::Invalid(_) => invalid += 1,
                PodState::Gated | PodState::GangWait { .. } => {}
            }
        }
        if binding > 0 && g.bind_error.is_none() {
            return None;
        }
        let min_member = g
            .effective()
            .or_else(|| g.offered.clone())
            .map(|s| s.min_member as i32);
        let gang = format!("{}/{}", key.0, key.1);
        let (phase, condition, reason, message) = match (min_member, g.problem()) {
            (Some(min), _) if bound >= min => (
                if running >= min {
                    PodGroupPhase::Running
                } else {
                    PodGroupPhase::Scheduled
                },
                "True",
                "Scheduled".to_string(),
                format!(
                    "{bound} of {} pods bound (minMember {min})",
                    g.members.len()
                ),
            ),
            (_, Some(why)) => (
                PodGroupPhase::Pending,
                "False",
                "InvalidSpec".into(),
                why.to_string(),
            ),
            _ if expired > 0
                || self
                    .scheduler
                    .gang_id(&key.0, &key.1)
                    .is_some_and(|id| self.scheduler.gang(id).phase == GangPhase::TimedOut) =>
            {
                let after = g
                    .effective()
                    .and_then(|s| s.schedule_timeout)
                    .unwrap_or(0)
                    / 1000;
                (
                    PodGroupPhase::TimedOut,
                    "False",
                    "TimedOut".into(),
                    GangProblem::TimedOut {
                        gang,
                        after_seconds: after,
                    }
                    .to_string(),
                )
            }
            _ if g.bind_error.is_some() => (
                PodGroupPhase::Pending,
                "False",
                "BindFailed".into(),
                format!(
                    "{}; {bound} of {} pods bound",
                    g.bind_error.as_deref().unwrap_or_default(),
                    min_member.unwrap_or_default()
                ),
            ),
            _ => match waiting {
                Some(why) => (
                    PodGroupPhase::Pending,
                    "False",
                    match why.gang {
                        Some(GangProblem::Incomplete { .. }) => "Incomplete".into(),
                        _ => "Unschedulable".into(),
                    },
                    self.explain(&why, Some(key)),
                ),
                None if invalid > 0 => (
                    PodGroupPhase::Pending,
                    "False",
                    "InvalidPod".into(),
                    format!("{invalid} pod(s) of gang {gang} cannot be read; see their PodScheduled condition"),
                ),
                None if g.members.is_empty() => (
                    PodGroupPhase::Pending,
                    "False",
                    "Incomplete".into(),
                    self.explain(
                        &Unschedulable::gang_only(
                            GangProblem::Incomplete {
                                gang,
                                exist: 0,
                                min_member: min_member.unwrap_or_default() as u32,
                                total: None,
                                role: None,
                            },
                            0,
                        ),
                        Some(key),
                    ),
                ),
                None => (
                    PodGroupPhase::Pending,
                    "False",
                    "Pending".into(),
                    format!("gang {gang} waits for a scheduling cycle"),
                ),
            },
        };
        Some(GroupStatusJob {
            namespace: key.0.clone(),
            name: key.1.clone(),
            phase,
            scheduled: bound,
            running,
            condition,
            reason,
            message,
            observed_generation: g.generation,
            since: None,
        })
    }

    /// What the API said to a PodGroup status write: the time its condition changed
    /// (stamped by the writer), or an error (it is written again at the next change).
    pub fn group_status_result(&mut self, job: &GroupStatusJob, result: Result<Time, ()>) {
        let key: GroupKey = (job.namespace.clone(), job.name.clone());
        let Some(g) = self.groups.get_mut(&key) else {
            return;
        };
        let Some(last) = g.last_status.as_mut().filter(|l| l.same(job)) else {
            return;
        };
        match result {
            Ok(time) => {
                last.since.get_or_insert(time);
            }
            Err(()) => g.last_status = None,
        }
    }
}

/// An incomplete gang's explanation with the ResourceQuota or LimitRange that refuses its
/// missing pods in place of "waiting for the rest to be created" (they will not be, until
/// the policy admits them).
fn with_admission_note(message: String, problem: &GangProblem, note: &str) -> String {
    let text = problem.to_string();
    let head = text
        .strip_suffix("; waiting for the rest to be created")
        .unwrap_or(&text);
    message.replacen(&text, &format!("{head}; {note}"), 1)
}

/// Why a gang's pods wait when nothing declares it.
fn not_found(key: &GroupKey) -> String {
    GangProblem::NotFound {
        gang: format!("{}/{}", key.0, key.1),
    }
    .to_string()
}

/// The status a PodGroup carries, as the job that would have written it.
fn observed_status(key: &GroupKey, status: &Value) -> Option<GroupStatusJob> {
    let status: PodGroupStatus = serde_json::from_value(status.clone()).ok()?;
    let condition = status.conditions.iter().find(|c| c.type_ == "Scheduled")?;
    Some(GroupStatusJob {
        namespace: key.0.clone(),
        name: key.1.clone(),
        phase: status.phase?,
        scheduled: status.scheduled,
        running: status.running,
        condition: if condition.status == "True" {
            "True"
        } else {
            "False"
        },
        reason: condition.reason.clone(),
        message: condition.message.clone(),
        observed_generation: condition.observed_generation,
        since: Some(condition.last_transition_time.clone()),
    })
}

fn reason_kind(reason: Option<&Unschedulable>) -> &'static str {
    match reason {
        None => "untried",
        Some(r) if r.gang.is_some() && !r.is_capacity() => "gang",
        Some(r) if r.is_capacity() => "capacity",
        Some(_) => "constraints",
    }
}

/// The names of a node listing, for [`ClusterState::retain_nodes`].
pub fn node_names<'a>(nodes: impl IntoIterator<Item = &'a Arc<Node>>) -> HashSet<String> {
    nodes
        .into_iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect()
}

/// An amount in the engine's units as a Kubernetes quantity.
fn quantity(resource: &str, amount: i64) -> String {
    match kestrel_core::quota_scale(resource) {
        1 => amount.to_string(),
        scale if amount % scale == 0 => (amount / scale).to_string(),
        _ => format!("{amount}m"),
    }
}

/// A wall time (Unix ms) as a condition's `lastTransitionTime` (RFC 3339, whole seconds,
/// as the API server keeps it).
fn condition_time(unix_ms: i64) -> Value {
    let at = Timestamp::from_millisecond(unix_ms).unwrap_or_default();
    serde_json::to_value(Time(at)).unwrap_or_default()
}

/// A wall time (Unix ms) in RFC 3339.
fn rfc3339(unix_ms: i64) -> String {
    Timestamp::from_millisecond(unix_ms)
        .map(|t| t.to_string())
        .unwrap_or_default()
}
