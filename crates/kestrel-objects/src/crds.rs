//! Kestrel's own API objects (`scheduling.kestrel.dev/v1alpha1`), as Rust types from which
//! the CustomResourceDefinitions are generated (`kestrel crds`).
//!
//! | kind | scope | short name | what it is |
//! |---|---|---|---|
//! | [`PodGroup`] | namespaced | `pg` | a gang: pods labelled `scheduling.kestrel.dev/pod-group: <name>` start together or not at all |
//! | [`Topology`] | cluster | | the topology levels (node labels), widest first |
//! | [`ClusterQueue`] | cluster | `cq` | a quota pool (Kueue's field names), with Kestrel's anti-thrash extensions |
//! | [`LocalQueue`] | namespaced | `lq` | a namespace's entry into a ClusterQueue |
//! | [`Cohort`] | cluster | | ClusterQueues that lend to and borrow from each other |
//! | [`ResourceFlavor`] | cluster | | a kind of node (labels, taints) quotas are counted in |
//! | [`NodeMaintenance`] | cluster | `nm` | a node drained for maintenance: cordoned, its workloads checkpointed, then evicted |
//! | [`TrainingJob`](crate::training::TrainingJob) | namespaced | `tj` | a distributed training run: pods, Service and gang made, restarted and reported as one |
//!
//! Field names are Kueue's and scheduler-plugins' so that existing manifests read the same.
//! The schemas validate what the API server can check (enums, minimums, required fields),
//! so a malformed object is refused at `kubectl apply`; what only Kestrel can check (e.g.
//! per-role minimums adding up to more than `minMember`) is reported on the object.
//!
//! The live scheduler reads all of them, and writes the status of PodGroups, ClusterQueues,
//! LocalQueues and NodeMaintenances.

use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use kube::CustomResourceExt;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The API group of Kestrel's objects.
pub const GROUP: &str = "scheduling.kestrel.dev";
/// The API version of Kestrel's objects.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of Kestrel's objects.
pub const API_VERSION: &str = "scheduling.kestrel.dev/v1alpha1";

/// A Kubernetes quantity (`"8"`, `"500m"`, `"80Gi"`, or a plain number), as the API server
/// validates resource quantities.
fn quantity(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-int-or-string": true,
        "pattern": QUANTITY_PATTERN,
    })
}

fn optional_quantity(g: &mut SchemaGenerator) -> Schema {
    let mut s = quantity(g);
    s.insert("nullable".into(), true.into());
    s
}

/// A map from resource name to quantity.
fn quantity_map(g: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "nullable": true,
        "additionalProperties": quantity(g),
    })
}

/// A map from role to a pod count (at least 0).
fn count_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {"type": "integer", "format": "int32", "minimum": 0},
    })
}

/// The quantity syntax, as controller-gen writes it for `resource.Quantity`.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

// ---- PodGroup ---------------------------------------------------------------------------

/// A gang: the pods labelled `scheduling.kestrel.dev/pod-group: <name>` in the PodGroup's
/// namespace start together (at least `minMember` of them at once) or not at all.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "scheduling.kestrel.dev",
    version = "v1alpha1",
    kind = "PodGroup",
    plural = "podgroups",
    namespaced,
    status = "PodGroupStatus",
    shortname = "pg",
    derive = "PartialEq",
    doc = "A gang of pods that start together or not at all (Kestrel).",
    printcolumn = r#"{"name": "MinMember", "type": "integer", "jsonPath": ".spec.minMember"}"#,
    printcolumn = r#"{"name": "Scheduled", "type": "integer", "jsonPath": ".status.scheduled"}"#,
    printcolumn = r#"{"name": "Running", "type": "integer", "jsonPath": ".status.running"}"#,
    printcolumn = r#"{"name": "Phase", "type": "string", "jsonPath": ".status.phase"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// Pods that must be placed together for the gang to start.
    #[schemars(range(min = 1))]
    pub min_member: i32,
    /// Accepted for compatibility with other PodGroups and not used: Kestrel sums the
    /// requests of the gang's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_map")]
    pub min_resources: Option<BTreeMap<String, Quantity>>,
    /// Give up when the gang has not started this many seconds after its first pod
    /// arrived; its waiting pods then stay pending with that reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub schedule_timeout_seconds: Option<i64>,
    /// Per-role minimums (role: pods), roles from the pod label
    /// `scheduling.kestrel.dev/role`; e.g. `{master: 1, worker: 4}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "count_map")]
    pub min_task_member: BTreeMap<String, i32>,
    /// Where the gang's pods must or should land, by topology level (node label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<PodGroupTopology>,
}

/// A gang's topology request; levels are node labels, usually those of the cluster's
/// `Topology`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupTopology {
    /// All pods in one domain of this level (e.g. `topology.kestrel.dev/rack`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<String>,
    /// Pack into one domain of this level if possible, else the next level up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred: Option<String>,
    /// Every `sliceSize` consecutive pods (by rank) in one domain of this level (e.g.
    /// `nvidia.com/gpu.clique`); set together with `sliceSize`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slice_level: Option<String>,
    /// Pods per slice; divides `minMember`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub slice_size: Option<i32>,
}

/// Where a gang stands: `Pending` (fewer than `minMember` pods bound: waiting for pods,
/// for room, or for a valid spec), `Scheduled` (at least `minMember` bound), `Running` (at
/// least `minMember` running), `TimedOut` (not started within `scheduleTimeoutSeconds`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PodGroupPhase {
    /// Fewer than `minMember` pods are bound: waiting for pods, for room, or for a valid spec.
    Pending,
    /// At least `minMember` pods are bound to nodes.
    Scheduled,
    /// At least `minMember` pods are running.
    Running,
    /// The gang did not start within `scheduleTimeoutSeconds`; its waiting pods stay pending.
    TimedOut,
}

impl PodGroupPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            PodGroupPhase::Pending => "Pending",
            PodGroupPhase::Scheduled => "Scheduled",
            PodGroupPhase::Running => "Running",
            PodGroupPhase::TimedOut => "TimedOut",
        }
    }
}

/// What Kestrel reports about a gang (written with server-side apply, field manager
/// `kestrel`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PodGroupPhase>,
    /// Pods of the gang bound to nodes.
    #[serde(default)]
    pub scheduled: i32,
    /// Pods of the gang running.
    #[serde(default)]
    pub running: i32,
    /// `Scheduled`: True once `minMember` pods are bound; False with the reason
    /// (`Incomplete`, `Unschedulable`, `BindFailed`, `InvalidSpec`, `TimedOut`, `Pending`)
    /// and Kestrel's explanation otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

// ---- Topology ---------------------------------------------------------------------------

/// The cluster's topology levels, from the widest domain down (e.g. block, rack, NVLink
/// domain). Kestrel uses the Topology named `default`, else the first by name.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "scheduling.kestrel.dev",
    version = "v1alpha1",
    kind = "Topology",
    plural = "topologies",
    derive = "PartialEq",
    doc = "Topology levels of the cluster, widest first (Kestrel)."
)]
#[serde(rename_all = "camelCase")]
pub struct TopologySpec {
    /// The levels, widest first.
    #[schemars(length(min = 1))]
    pub levels: Vec<TopologyLevel>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyLevel {
    /// The node label whose values name the domains of this level.
    #[schemars(length(min = 1))]
    pub node_label: String,
}

// ---- Queues (Kueue's field names) -------------------------------------------------------

/// A quota pool. Kueue's fields, plus Kestrel's `minRuntimeSeconds`,
/// `preemptionDelaySeconds` and `defaultRuntimeSeconds`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "scheduling.kestrel.dev",
    version = "v1alpha1",
    kind = "ClusterQueue",
    plural = "clusterqueues",
    status = "ClusterQueueStatus",
    shortname = "cq",
    derive = "PartialEq",
    doc = "A quota pool shared by LocalQueues (Kestrel; Kueue's field names).",
    printcolumn = r#"{"name": "Cohort", "type": "string", "jsonPath": ".spec.cohortName"}"#,
    printcolumn = r#"{"name": "Strategy", "type": "string", "jsonPath": ".spec.queueingStrategy", "priority": 1}"#,
    printcolumn = r#"{"name": "Pending", "type": "integer", "jsonPath": ".status.pendingWorkloads"}"#,
    printcolumn = r#"{"name": "Admitted", "type": "integer", "jsonPath": ".status.admittedWorkloads"}"#,
    printcolumn = r#"{"name": "Active", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Active\")].status"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueueSpec {
    /// The Cohort this queue borrows from and lends to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohort_name: Option<String>,
    /// Namespaces whose LocalQueues may point here; unset: none (as in Kueue, `{}` is all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    #[serde(default)]
    pub queueing_strategy: QueueingStrategy,
    /// Quotas, per group of resources and flavor.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_groups: Vec<ResourceGroup>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<ClusterQueuePreemption>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_sharing: Option<FairSharing>,
    #[serde(default)]
    pub stop_policy: StopPolicy,
    /// Kestrel: admitted workloads of this queue are not preempted before they ran this
    /// long (anti-thrash).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_runtime_seconds: Option<i64>,
    /// Kestrel: a workload that could be admitted by preempting others waits this long
    /// first, in case capacity frees up by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub preemption_delay_seconds: Option<i64>,
    /// Kestrel: the runtime assumed for this queue's workloads that do not declare one,
    /// for backfill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub default_runtime_seconds: Option<i64>,
}

/// How pending workloads are ordered (Kueue).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum QueueingStrategy {
    /// By priority, then creation; the head blocks the queue when it does not fit.
    StrictFIFO,
    /// By priority, then creation; workloads that fit are admitted past one that does not.
    #[default]
    BestEffortFIFO,
}

/// What the queue does when stopped (Kueue).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum StopPolicy {
    #[default]
    None,
    /// Admit nothing new.
    Hold,
    /// Admit nothing new and evict what is admitted.
    HoldAndDrain,
}

/// Resources whose quotas are given together, per flavor.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceGroup {
    /// Resource names, e.g. `[cpu, memory, nvidia.com/gpu]`.
    #[schemars(length(min = 1))]
    pub covered_resources: Vec<String>,
    #[schemars(length(min = 1))]
    pub flavors: Vec<FlavorQuotas>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlavorQuotas {
    /// A ResourceFlavor's name.
    #[schemars(length(min = 1))]
    pub name: String,
    #[schemars(length(min = 1))]
    pub resources: Vec<ResourceQuota>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceQuota {
    #[schemars(length(min = 1))]
    pub name: String,
    /// The quota this queue owns.
    #[schemars(schema_with = "quantity")]
    pub nominal_quota: Quantity,
    /// At most this much above `nominalQuota` from the cohort; unset: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_quantity")]
    pub borrowing_limit: Option<Quantity>,
    /// At most this much of `nominalQuota` lent to the cohort; unset: all of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_quantity")]
    pub lending_limit: Option<Quantity>,
}

/// When a workload may preempt others (Kueue).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueuePreemption {
    #[serde(default)]
    pub within_cluster_queue: WithinClusterQueue,
    #[serde(default)]
    pub reclaim_within_cohort: ReclaimWithinCohort,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_within_cohort: Option<BorrowWithinCohort>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum WithinClusterQueue {
    #[default]
    Never,
    LowerPriority,
    LowerOrNewerEqualPriority,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum ReclaimWithinCohort {
    #[default]
    Never,
    LowerPriority,
    Any,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BorrowWithinCohort {
    #[serde(default)]
    pub policy: BorrowWithinCohortPolicy,
    /// Only workloads of at most this priority are preempted to borrow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority_threshold: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum BorrowWithinCohortPolicy {
    #[default]
    Never,
    LowerPriority,
}

fn one() -> Quantity {
    Quantity("1".into())
}

/// Fair sharing between the queues of a cohort (Kueue).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FairSharing {
    /// The queue's share relative to its siblings; 0 lends everything first.
    #[serde(default = "one")]
    #[schemars(schema_with = "quantity")]
    pub weight: Quantity,
}

impl Default for FairSharing {
    fn default() -> Self {
        FairSharing { weight: one() }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueueStatus {
    #[serde(default)]
    pub pending_workloads: i32,
    #[serde(default)]
    pub admitted_workloads: i32,
    #[serde(default)]
    pub reserving_workloads: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flavors_usage: Vec<FlavorUsage>,
    /// `Active`: True when Kestrel can admit workloads through the queue (reason `Ready`;
    /// `InvalidSpec` when it admits with something wrong), False with the reason
    /// (`Stopped`, `FlavorNotFound`, `InvalidSpec`) and the field to fix otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlavorUsage {
    pub name: String,
    #[serde(default)]
    pub resources: Vec<ResourceUsage>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceUsage {
    pub name: String,
    /// In use, borrowed included.
    #[schemars(schema_with = "quantity")]
    pub total: Quantity,
    /// In use above the nominal quota.
    #[schemars(schema_with = "quantity")]
    pub borrowed: Quantity,
}

/// A namespace's queue, pointing at a ClusterQueue.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "scheduling.kestrel.dev",
    version = "v1alpha1",
    kind = "LocalQueue",
    plural = "localqueues",
    namespaced,
    status = "LocalQueueStatus",
    shortname = "lq",
    derive = "PartialEq",
    doc = "A namespace's queue into a ClusterQueue (Kestrel; Kueue's field names).",
    printcolumn = r#"{"name": "ClusterQueue", "type": "string", "jsonPath": ".spec.clusterQueue"}"#,
    printcolumn = r#"{"name": "Pending", "type": "integer", "jsonPath": ".status.pendingWorkloads"}"#,
    printcolumn = r#"{"name": "Admitted", "type": "integer", "jsonPath": ".status.admittedWorkloads"}"#,
    printcolumn = r#"{"name": "Active", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Active\")].status"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct LocalQueueSpec {
    /// The ClusterQueue this queue submits to.
    #[schemars(length(min = 1))]
    pub cluster_queue: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalQueueStatus {
    #[serde(default)]
    pub pending_workloads: i32,
    #[serde(default)]
    pub admitted_workloads: i32,
    /// `Active`: True (reason `Ready`) when its ClusterQueue exists, is active and admits
    /// its namespace; False with the reason (`ClusterQueueDoesNotExist`,
    /// `ClusterQueueIsInactive`, `NamespaceNotSelected`, `InvalidSpec`) otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// ClusterQueues (and Cohorts) that lend to and borrow from each other.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "scheduling.kestrel.dev",
    version = "v1alpha1",
    kind = "Cohort",
    plural = "cohorts",
    derive = "PartialEq",
    doc = "A cohort of ClusterQueues sharing quota (Kestrel; Kueue's field names)."
)]
#[serde(rename_all = "camelCase")]
pub struct CohortSpec {
    /// The Cohort this one belongs to, for a hierarchy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_name: Option<String>,
    /// Quota the cohort itself holds, lent to its members.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_groups: Vec<ResourceGroup>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_sharing: Option<FairSharing>,
}

/// A kind of node that quotas are counted in (Kueue).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "scheduling.kestrel.dev",
    version = "v1alpha1",
    kind = "ResourceFlavor",
    plural = "resourceflavors",
    derive = "PartialEq",
    doc = "A kind of node quotas are counted in (Kestrel; Kueue's field names)."
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceFlavorSpec {
    /// The labels of this flavor's nodes; workloads admitted in it get them as node
    /// selector.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_labels: BTreeMap<String, String>,
    /// The taints of this flavor's nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_taints: Vec<Taint>,
    /// Tolerations added to workloads admitted in this flavor.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
}

// ---- NodeMaintenance ---------------------------------------------------------------------

/// A node taken out of service: Kestrel cordons it, asks the workloads on it that
/// checkpoint to do so and waits for them up to a deadline, then evicts its pods through
/// the Eviction API (PodDisruptionBudgets apply). The maintenance ends, and the node is
/// uncordoned, when `spec.done` is set or the object is deleted.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "scheduling.kestrel.dev",
    version = "v1alpha1",
    kind = "NodeMaintenance",
    plural = "nodemaintenances",
    status = "NodeMaintenanceStatus",
    shortname = "nm",
    derive = "PartialEq",
    doc = "A node drained for maintenance after its workloads checkpoint (Kestrel).",
    printcolumn = r#"{"name": "Node", "type": "string", "jsonPath": ".spec.nodeName"}"#,
    printcolumn = r#"{"name": "Phase", "type": "string", "jsonPath": ".status.phase"}"#,
    printcolumn = r#"{"name": "Pods", "type": "integer", "jsonPath": ".status.podsLeft"}"#,
    printcolumn = r#"{"name": "Checkpoints", "type": "integer", "jsonPath": ".status.checkpointsAwaited"}"#,
    printcolumn = r#"{"name": "Refused", "type": "integer", "jsonPath": ".status.evictionsRefused"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeMaintenanceSpec {
    /// The node to drain.
    #[schemars(length(min = 1))]
    pub node_name: String,
    /// Longest wait for the checkpoints asked for (a workload that declares a shorter
    /// `kestrel.dev/checkpoint-grace` is waited for that long); then its pods are
    /// evicted. Default 1800.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub checkpoint_deadline_seconds: Option<i64>,
    /// Why (shown in events and status messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The maintenance is over: Kestrel uncordons the node (if it cordoned it) and the
    /// phase becomes `Completed`. Deleting the object does the same.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub done: bool,
}

/// Where a maintenance stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum MaintenancePhase {
    /// Not acted on: the node does not exist or another NodeMaintenance holds it (see the
    /// `Drained` condition). Terminal: fix and create a new one.
    Refused,
    /// Cordoned; waiting for the checkpoints asked for, up to the deadline.
    Checkpointing,
    /// Evicting the node's pods; some are left (refused by a PodDisruptionBudget, or
    /// terminating).
    Evicting,
    /// No pod of a workload is left on the node: it may be serviced.
    Drained,
    /// The maintenance ended (`spec.done`); the node was uncordoned.
    Completed,
}

impl MaintenancePhase {
    pub fn as_str(self) -> &'static str {
        match self {
            MaintenancePhase::Refused => "Refused",
            MaintenancePhase::Checkpointing => "Checkpointing",
            MaintenancePhase::Evicting => "Evicting",
            MaintenancePhase::Drained => "Drained",
            MaintenancePhase::Completed => "Completed",
        }
    }

    /// Whether the maintenance holds its node (cordoned, or on its way to).
    pub fn holds_node(phase: Option<Self>) -> bool {
        !matches!(
            phase,
            Some(MaintenancePhase::Refused | MaintenancePhase::Completed)
        )
    }
}

/// What Kestrel reports about a maintenance; also where a drain resumes from after a
/// restart (the checkpoint request's time).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeMaintenanceStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<MaintenancePhase>,
    /// When checkpoints were asked for (RFC 3339): the value of the pods'
    /// `kestrel.dev/checkpoint-request`; checkpoints reported at or after it answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_requested_at: Option<String>,
    /// Pods still to move: the node's, and the other pods of their gangs wherever they
    /// run (DaemonSet and mirror pods stay and are not counted).
    #[serde(default)]
    pub pods_left: i32,
    /// Pods asked to checkpoint that have not answered and whose wait is not over.
    #[serde(default)]
    pub checkpoints_awaited: i32,
    /// Pods whose eviction was refused (HTTP 429: a PodDisruptionBudget allows no
    /// disruption now) at the last attempt; tried again.
    #[serde(default)]
    pub evictions_refused: i32,
    /// Pods evicted so far.
    #[serde(default)]
    pub evicted: i32,
    /// `Drained`: True once no workload pod is left; False with the reason
    /// (`NodeNotFound`, `AlreadyUnderMaintenance`, `AwaitingCheckpoints`,
    /// `EvictionsRefused`, `PodsTerminating`, `MaintenanceEnded`) otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Every CRD, in install order.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![
        PodGroup::crd(),
        Topology::crd(),
        ClusterQueue::crd(),
        LocalQueue::crd(),
        without_required_spec(Cohort::crd()),
        without_required_spec(ResourceFlavor::crd()),
        NodeMaintenance::crd(),
        crate::training::TrainingJob::crd(),
    ]
}

/// A kind whose every field is optional may be written with `metadata` alone (Kueue's
/// default flavor is `kind: ResourceFlavor` and a name): `spec` is not required.
fn without_required_spec(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        let root = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut());
        if let Some(root) = root {
            if let Some(required) = root.required.as_mut() {
                required.retain(|field| field != "spec");
            }
            if root.required.as_ref().is_some_and(Vec::is_empty) {
                root.required = None;
            }
        }
    }
    crd
}
