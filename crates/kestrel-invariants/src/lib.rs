//! One definition of a correct cluster state, for the simulator and the live scheduler alike.
//!
//! A [`Snapshot`] is a plain picture of a cluster: nodes with what they can hold, pods with
//! the node and devices they are bound to, gangs, ClusterQueues and cohorts. [`check`]
//! recomputes every total from the bound pods alone (never from a scheduler's own usage or
//! free counters) and lists each rule that is broken; [`check_transition`] compares two
//! snapshots and finds pending pods that disappeared.
//!
//! Among [`check`]'s rules: a pod that requests whole `nvidia.com/gpu` and is bound to a
//! node with GPU devices holds them by index ([`Violation::GpuWithoutIndices`]) unless it
//! uses ResourceClaims ([`check_claims`] holds those) or kube-scheduler bound it (it records
//! no indices; any other scheduler is taken for Kestrel, which runs under several names).
//!
//! Progress is judged over successive snapshots, one per scheduling cycle: a
//! [`StrandedWatch`] reports a pod left pending for N snapshots in a row while it fits a
//! node that holds no pod, by this crate's own fit ([`Violation::Stranded`]); pods whose
//! wait a snapshot cannot judge (gated, queued, with claims or inter-pod rules, gangs that
//! cannot start whole) are left out, as its docs list.
//!
//! Placement rules that involve other pods and volumes are matched by this crate's own
//! code (a second opinion on the engine's), from pods' labels and terms, nodes' labels and
//! taints and namespaces' labels: [`check`] finds required pod anti-affinity broken from
//! either side, pods on nodes their bound PersistentVolume's node affinity excludes, and
//! `ReadWriteOncePod` claims used twice; [`check_transition`] judges pods newly bound in
//! the step by their required pod affinity and DoNotSchedule topology spread at binding.
//!
//! Snapshots come from the engine ([`Snapshot::from_engine`]) or from a real API server's
//! Nodes and Pods ([`Snapshot::from_k8s`]), so the simulator and the live scheduler are held
//! to the same rules.
//!
//! # Units
//!
//! Every amount is in **milli-units of the Kubernetes quantity**, as `Quantity.MilliValue()`
//! gives it: cpu in millicores, memory and storage in thousandths of a byte, `pods` in
//! thousandths of a pod, `nvidia.com/gpu` in thousandths of a device, any other extended
//! resource in thousandths of one. One scale for every resource: no table of exceptions.
//! Amounts are `i128`, so sums of many pods never overflow.

mod engine;
#[cfg(feature = "k8s")]
mod k8s;
mod placement;
mod progress;
pub mod quantity;
pub mod shared;

#[cfg(feature = "k8s")]
pub use k8s::{
    claims_from_k8s, parse_gpu_indices, pod_requests, FromK8sError, K8sExtras,
    GPU_INDICES_ANNOTATION,
};
pub use placement::{
    selects, Labels, NodeTerm, Operator, PodTerm, Requirement, Selector, SpreadRule, TaintView,
    TolerationView, VolumeAffinity,
};
pub use progress::{stranded, StrandedWatch};
pub use shared::{in_ci, shared_path};

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// An amount in milli-units (see the crate docs).
pub type Amount = i128;

/// The resource name of NVIDIA's whole GPUs.
pub const GPU: &str = "nvidia.com/gpu";
/// The pod-count resource: every bound pod takes one (1000 milli-units).
pub const PODS: &str = "pods";
/// kube-scheduler's `schedulerName`: it records no GPU indices.
pub const KUBE_SCHEDULER: &str = "default-scheduler";

/// A node and what it can hold.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct NodeView {
    pub name: String,
    /// Allocatable amounts per resource name, milli-units, including `pods` and
    /// `nvidia.com/gpu` (devices times 1000). A resource left out is zero.
    pub allocatable: BTreeMap<String, Amount>,
    /// GPU devices, indexed `0..gpu_devices`.
    pub gpu_devices: u32,
    /// For topology domains, node selectors and volume node affinity.
    pub labels: Labels,
    /// For spread constraints with `nodeTaintsPolicy: Honor`.
    pub taints: Vec<TaintView>,
    /// Most volumes each CSI driver may attach to it (its CSINode); a driver left out: no
    /// limit.
    pub volume_limits: BTreeMap<String, u32>,
    /// Cordoned (`spec.unschedulable`): no new pod goes there.
    pub unschedulable: bool,
    /// Kept for other pods: the head of the queue's reservation, or room promised to a
    /// preemptor (a pending pod's nominated node).
    pub reserved: bool,
    /// GPUs (by index) published with partitions: their counters.
    pub partitions: BTreeMap<u32, PartitionsView>,
}

/// The counters of one partitionable GPU, and what each of its partitions consumes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PartitionsView {
    pub capacity: BTreeMap<String, Amount>,
    /// Per partition number.
    pub consumes: Vec<BTreeMap<String, Amount>>,
}

/// The GPUs a bound pod holds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum GpuClaim {
    #[default]
    None,
    /// Whole devices by index.
    Whole(Vec<u32>),
    /// A share of one device, in thousandths.
    Share { index: u32, milli: u32 },
    /// Partitions: (device index, partition number).
    Partitions(Vec<(u32, u8)>),
}

impl GpuClaim {
    /// Thousandths of a device the claim holds.
    pub fn milli(&self) -> Amount {
        match self {
            GpuClaim::None => 0,
            GpuClaim::Whole(v) => 1000 * v.len() as Amount,
            GpuClaim::Share { milli, .. } => Amount::from(*milli),
            // Counters, not thousandths, bound partitions: checked on their own.
            GpuClaim::Partitions(_) => 0,
        }
    }
}

/// A share of one GPU that a pod asks for (`requests` holds whole GPUs only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum ShareRequest {
    /// Thousandths of a device.
    Milli(u32),
    /// Device memory, MiB: it fits devices with that much.
    MemoryMib(u64),
}

/// A pod, pending (`node: None`) or bound.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PodView {
    /// `namespace/name`.
    pub key: String,
    pub node: Option<String>,
    /// What it requests per resource, milli-units (`pods` is implied: one per pod).
    /// Whole GPUs are `nvidia.com/gpu`; a share of a device is only in `gpu`.
    pub requests: BTreeMap<String, Amount>,
    pub gpu: GpuClaim,
    /// `namespace/gang`.
    pub gang: Option<String>,
    /// The ClusterQueue it is charged to.
    pub queue: Option<String>,
    /// The flavor it is charged to per resource; a resource left out is charged to the
    /// first flavor of its queue that has quota for it.
    pub flavors: BTreeMap<String, String>,
    pub priority: i32,
    /// Its labels, for other pods' affinity terms and spread constraints.
    pub labels: Labels,
    /// `podAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    pub affinity: Vec<PodTerm>,
    /// `podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    pub anti_affinity: Vec<PodTerm>,
    /// `topologySpreadConstraints` with `whenUnsatisfiable: DoNotSchedule`.
    pub spread: Vec<SpreadRule>,
    /// `nodeSelector`, for spread constraints that honour node affinity.
    pub node_selector: Labels,
    /// Required node affinity terms, ORed (`None`: any node), likewise.
    pub node_affinity: Option<Vec<NodeTerm>>,
    /// Its tolerations, for spread constraints that honour taints.
    pub tolerations: Vec<TolerationView>,
    /// The node affinity of the bound PersistentVolumes its claims mount.
    pub volume_affinity: Vec<VolumeAffinity>,
    /// Its `ReadWriteOncePod` claims (`namespace/name`).
    pub exclusive_claims: Vec<String>,
    /// Its PersistentVolumeClaims not bound yet, or not there (`namespace/name`): where it
    /// may go turns on which volumes are free or are yet to be made.
    pub claims_to_bind: Vec<String>,
    /// The CSI volumes it attaches to its node: (driver, volume).
    pub attached_volumes: Vec<(String, String)>,
    /// What the devices its ResourceClaims hold count against its queue, per quota
    /// resource (its classes'): set, its GPUs are DRA devices and count only here.
    pub device_quota: BTreeMap<String, Amount>,
    /// Its `spec.schedulerName` (`default-scheduler` where unset, as the API server
    /// defaults it); `None` in engine snapshots, whose pods are all the engine's.
    pub scheduler: Option<String>,
    /// The ResourceClaims it uses (`namespace/name`), the claim of its extended resources
    /// included; [`check_claims`] holds them allocated on its node.
    pub resource_claims: Vec<String>,
    /// The share of one GPU it asks for, if it asks for one.
    pub gpu_share: Option<ShareRequest>,
    /// It has scheduling gates: no scheduler may place it yet.
    pub gated: bool,
    /// Its GPUs and their NICs must sit on one NUMA node (`single-numa-node`).
    pub single_numa_node: bool,
}

impl PodView {
    /// What the pod counts against its queue per resource: its requests, one pod, and
    /// for `nvidia.com/gpu` the thousandths its devices hold when it holds any (DRA
    /// devices: their [`PodView::device_quota`]).
    pub fn quota_amounts(&self) -> BTreeMap<String, Amount> {
        let mut out: BTreeMap<String, Amount> = self
            .requests
            .iter()
            .filter(|(_, a)| **a != 0)
            .map(|(r, a)| (r.clone(), *a))
            .collect();
        *out.entry(PODS.to_string()).or_default() += 1000;
        if !self.device_quota.is_empty() {
            for (resource, a) in &self.device_quota {
                *out.entry(resource.clone()).or_default() += a;
            }
        } else if self.gpu != GpuClaim::None {
            out.insert(GPU.to_string(), self.gpu.milli());
        }
        out
    }
}

/// A gang: at least `min_member` of its pods run together, or none.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct GangView {
    /// `namespace/gang`.
    pub key: String,
    pub min_member: u32,
    pub total: Option<u32>,
    /// Members that left the running gang for reasons no scheduler decided (completed,
    /// deleted, lost with their node): they count towards `min_member`.
    pub departed: u32,
    /// All its pods in one domain of this node label (its required topology).
    pub required_domain: Option<String>,
    /// It has role minimums or slices, which the stranded rule does not model.
    pub roles_or_slices: bool,
    /// It did not start within its schedule timeout: it waits out a back-off (of a length
    /// the snapshot does not hold) before it is tried again.
    pub timed_out: bool,
}

/// Quota of one resource in one flavor of a ClusterQueue (milli-units).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct QuotaView {
    pub flavor: String,
    pub resource: String,
    pub nominal: Amount,
    /// How much above nominal the queue may borrow (`None`: as much as its cohort lends).
    pub borrowing_limit: Option<Amount>,
    /// How much of nominal the cohort may borrow (`None`: all of it).
    pub lending_limit: Option<Amount>,
}

/// A ClusterQueue.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct QueueView {
    pub name: String,
    /// Its cohort (queues of one cohort tree share what they lend).
    pub cohort: Option<String>,
    pub quotas: Vec<QuotaView>,
}

/// A cohort: where it hangs in its tree and the quota it holds itself. A cohort that
/// queues or other cohorts name and the snapshot lacks holds nothing and is a root.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct CohortView {
    pub name: String,
    pub parent: Option<String>,
    /// Its own quota; a borrowing limit bounds what its subtree takes from its parent, a
    /// lending limit what it lends its parent.
    pub quotas: Vec<QuotaView>,
}

/// A picture of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Snapshot {
    pub nodes: Vec<NodeView>,
    pub pods: Vec<PodView>,
    pub gangs: Vec<GangView>,
    pub queues: Vec<QueueView>,
    pub cohorts: Vec<CohortView>,
    /// Namespaces' labels, for pod affinity terms' namespace selectors (a namespace left
    /// out has only `kubernetes.io/metadata.name`).
    pub namespaces: BTreeMap<String, Labels>,
}

/// A broken rule, naming the objects and the amounts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum Violation {
    /// The bound pods' requests of a resource add up to more than the node's allocatable.
    OverAllocatable {
        node: String,
        resource: String,
        requested: Amount,
        allocatable: Amount,
        pods: Vec<String>,
    },
    /// A device held whole by one pod and also by another (whole or share).
    DeviceTwice {
        node: String,
        index: u32,
        pods: Vec<String>,
    },
    /// Shares on one device add up to more than the whole device.
    DeviceOverShared {
        node: String,
        index: u32,
        milli: Amount,
        pods: Vec<String>,
    },
    /// Partitions of one GPU held together consume more of a counter than it has.
    CountersOverCommitted {
        node: String,
        index: u32,
        counter: String,
        used: Amount,
        capacity: Amount,
        pods: Vec<String>,
    },
    /// A pod holds a partition the GPU does not publish.
    UnknownPartition {
        node: String,
        index: u32,
        partition: u8,
        pods: Vec<String>,
    },
    /// A pod holds a device the node does not have.
    DeviceOutOfRange {
        node: String,
        pod: String,
        index: u32,
        devices: u32,
    },
    /// A pod holds another number of whole devices than it requests.
    GpuClaimMismatch {
        pod: String,
        requested: Amount,
        claimed: Amount,
    },
    /// A pod that requests whole GPUs is bound to a node with GPU devices, yet holds no
    /// device by index and uses no ResourceClaim (pods of kube-scheduler are left out).
    GpuWithoutIndices {
        pod: String,
        node: String,
        requested: Amount,
    },
    /// A pod bound to a node the cluster does not have.
    UnknownNode { pod: String, node: String },
    /// Two pods with one key.
    DuplicatePod { pod: String },
    /// Some of a gang's pods run, fewer than its minimum.
    GangPartial {
        gang: String,
        bound: u32,
        departed: u32,
        min_member: u32,
    },
    /// A pod of a gang nobody declared is bound.
    UnknownGang { pod: String, gang: String },
    /// A queue uses more than nominal plus its borrowing limit (nominal alone without a
    /// cohort).
    QueueOverLimit {
        queue: String,
        flavor: String,
        resource: String,
        used: Amount,
        limit: Amount,
    },
    /// A queue's bound pod uses a resource the queue has no quota for.
    QueueNotCovered {
        queue: String,
        pod: String,
        resource: String,
    },
    /// A cohort subtree takes more from its parent than what it lends its parent plus its
    /// borrowing limit.
    CohortOverLimit {
        cohort: String,
        flavor: String,
        resource: String,
        taken: Amount,
        limit: Amount,
    },
    /// The queues of a cohort tree take more from its root's pool than the tree lends it
    /// (queues' nominal less what they keep, and the cohorts' own quota).
    CohortOverLent {
        cohort: String,
        flavor: String,
        resource: String,
        taken: Amount,
        pool: Amount,
    },
    /// A pod pending before a step is gone after it, though it did not leave.
    PendingPodDropped { pod: String },
    /// A pod has stayed pending for `cycles` snapshots in a row while it fitted a node
    /// that holds no pod (`node`, in the latest), with nothing in its way that the
    /// snapshot shows ([`StrandedWatch`]).
    Stranded {
        pod: String,
        node: String,
        cycles: u32,
    },
    /// DRA: one device in two allocated claims.
    DeviceInTwoClaims {
        node: String,
        device: String,
        claims: Vec<String>,
    },
    /// DRA: a bound pod's claim is missing, unallocated, allocated on another node, or not
    /// reserved for the pod.
    ClaimNotHeld {
        pod: String,
        claim: String,
        why: String,
    },
    /// A bound pod's required anti-affinity term (its index) matches other bound pods in
    /// its domain (`key=domain`).
    AntiAffinityBroken {
        pod: String,
        term: usize,
        key: String,
        domain: String,
        others: Vec<String>,
    },
    /// A newly bound pod's required pod affinity found no matching pod in its domain, and
    /// it could not have been the first of its series.
    AffinityUnmet {
        pod: String,
        node: String,
        key: String,
        domain: String,
    },
    /// A newly bound pod's node lacks the topology key of its required affinity or
    /// DoNotSchedule spread constraint.
    NoTopologyDomain {
        pod: String,
        node: String,
        key: String,
        rule: String,
    },
    /// A newly bound pod took its DoNotSchedule spread constraint over `max_skew`: its
    /// domain holds `count` matching pods (itself included), the least-loaded eligible
    /// domain `min`; `tolerance` pods newly bound in the same step match too.
    SpreadOverSkew {
        pod: String,
        node: String,
        key: String,
        domain: String,
        count: u32,
        min: u32,
        max_skew: u32,
        tolerance: u32,
    },
    /// A bound pod is on a node that the node affinity of the PersistentVolume bound to
    /// its claim excludes.
    VolumeNodeConflict {
        pod: String,
        node: String,
        claim: String,
    },
    /// A `ReadWriteOncePod` claim is used by more than one bound pod.
    ClaimUsedTwice { claim: String, pods: Vec<String> },
    /// A node attaches more volumes of a CSI driver than its CSINode allows.
    VolumeLimitExceeded {
        node: String,
        driver: String,
        volumes: usize,
        limit: u32,
    },
}

fn amount(resource: &str, milli: Amount) -> String {
    let whole = |scale: Amount, unit: &str| {
        if milli % scale == 0 {
            format!("{}{unit}", milli / scale)
        } else {
            format!("{milli}m{unit}")
        }
    };
    match resource {
        "memory" | "ephemeral-storage" => whole(1000, " bytes"),
        GPU => whole(1000, " GPU"),
        _ => whole(1000, ""),
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::OverAllocatable {
                node,
                resource,
                requested,
                allocatable,
                pods,
            } => write!(
                f,
                "node {node}: bound pods request {} of {resource}, allocatable is {} (pods {})",
                amount(resource, *requested),
                amount(resource, *allocatable),
                pods.join(", ")
            ),
            Violation::DeviceTwice { node, index, pods } => write!(
                f,
                "node {node}: GPU {index} is held whole by one pod and also by another: {}",
                pods.join(", ")
            ),
            Violation::DeviceOverShared {
                node,
                index,
                milli,
                pods,
            } => write!(
                f,
                "node {node}: shares of GPU {index} add up to {milli}/1000: {}",
                pods.join(", ")
            ),
            Violation::CountersOverCommitted {
                node,
                index,
                counter,
                used,
                capacity,
                pods,
            } => write!(
                f,
                "node {node}: partitions of GPU {index} consume {used} of counter {counter}, \
                 which has {capacity}: {}",
                pods.join(", ")
            ),
            Violation::UnknownPartition {
                node,
                index,
                partition,
                pods,
            } => write!(
                f,
                "node {node}: GPU {index} publishes no partition {partition}, held by {}",
                pods.join(", ")
            ),
            Violation::DeviceOutOfRange {
                node,
                pod,
                index,
                devices,
            } => write!(
                f,
                "pod {pod} holds GPU {index} of node {node}, which has {devices} GPU(s)"
            ),
            Violation::GpuClaimMismatch {
                pod,
                requested,
                claimed,
            } => write!(
                f,
                "pod {pod} requests {} but holds {} whole",
                amount(GPU, *requested),
                amount(GPU, *claimed)
            ),
            Violation::GpuWithoutIndices {
                pod,
                node,
                requested,
            } => write!(
                f,
                "pod {pod} requests {} and is bound to node {node}, yet holds no GPU by index and uses no ResourceClaim",
                amount(GPU, *requested)
            ),
            Violation::UnknownNode { pod, node } => {
                write!(f, "pod {pod} is bound to node {node}, which does not exist")
            }
            Violation::DuplicatePod { pod } => write!(f, "pod {pod} appears twice"),
            Violation::GangPartial {
                gang,
                bound,
                departed,
                min_member,
            } => write!(
                f,
                "gang {gang} is partly bound: {bound} pod(s) bound (+{departed} departed) of minMember {min_member}"
            ),
            Violation::UnknownGang { pod, gang } => {
                write!(f, "pod {pod} of undeclared gang {gang} is bound")
            }
            Violation::QueueOverLimit {
                queue,
                flavor,
                resource,
                used,
                limit,
            } => write!(
                f,
                "ClusterQueue {queue} flavor {flavor}: bound pods use {} of {resource}, its limit is {}",
                amount(resource, *used),
                amount(resource, *limit)
            ),
            Violation::QueueNotCovered {
                queue,
                pod,
                resource,
            } => write!(
                f,
                "ClusterQueue {queue} has no quota for {resource}, yet its pod {pod} using it is bound"
            ),
            Violation::CohortOverLimit {
                cohort,
                flavor,
                resource,
                taken,
                limit,
            } => write!(
                f,
                "cohort {cohort} flavor {flavor}: its subtree takes {} of {resource} from its parent, which may lend it {} (what it lends plus its borrowing limit)",
                amount(resource, *taken),
                amount(resource, *limit)
            ),
            Violation::CohortOverLent {
                cohort,
                flavor,
                resource,
                taken,
                pool,
            } => write!(
                f,
                "cohort {cohort} flavor {flavor}: its queues take {} of {resource} from a pool of {}",
                amount(resource, *taken),
                amount(resource, *pool)
            ),
            Violation::PendingPodDropped { pod } => {
                write!(f, "pending pod {pod} disappeared without completing or being deleted")
            }
            Violation::Stranded { pod, node, cycles } => write!(
                f,
                "pod {pod} has been pending for {cycles} cycles in a row while it fits the empty node {node} (stranded)"
            ),
            Violation::DeviceInTwoClaims {
                node,
                device,
                claims,
            } => write!(f, "node {node}: device {device} is allocated to claims {}", claims.join(", ")),
            Violation::ClaimNotHeld { pod, claim, why } => {
                write!(f, "bound pod {pod}: its ResourceClaim {claim} {why}")
            }
            Violation::AntiAffinityBroken {
                pod,
                term,
                key,
                domain,
                others,
            } => write!(
                f,
                "pod {pod}: required pod anti-affinity (term {term}) broken in {key}={domain} by {}",
                others.join(", ")
            ),
            Violation::AffinityUnmet {
                pod,
                node,
                key,
                domain,
            } => write!(
                f,
                "pod {pod} bound to node {node}: required pod affinity finds no matching pod in {key}={domain}, and it is not the first of its series"
            ),
            Violation::NoTopologyDomain {
                pod,
                node,
                key,
                rule,
            } => write!(
                f,
                "pod {pod} bound to node {node}, which lacks the topology key {key} of its {rule}"
            ),
            Violation::SpreadOverSkew {
                pod,
                node,
                key,
                domain,
                count,
                min,
                max_skew,
                tolerance,
            } => write!(
                f,
                "pod {pod} bound to node {node}: topology spread (DoNotSchedule) over {key} has {count} matching pod(s) in {key}={domain} against {min} in the least-loaded domain, skew {} over maxSkew {max_skew} (+{tolerance} for pods bound in the same step)",
                count.saturating_sub(*min)
            ),
            Violation::VolumeNodeConflict { pod, node, claim } => write!(
                f,
                "pod {pod} is on node {node}, which the node affinity of the PersistentVolume bound to its claim {claim} excludes (volume node affinity conflict)"
            ),
            Violation::ClaimUsedTwice { claim, pods } => write!(
                f,
                "ReadWriteOncePod claim {claim} is used by bound pods {}",
                pods.join(", ")
            ),
            Violation::VolumeLimitExceeded {
                node,
                driver,
                volumes,
                limit,
            } => write!(
                f,
                "node {node} attaches {volumes} volumes of CSI driver {driver}, over its limit of {limit}"
            ),
        }
    }
}

impl std::error::Error for Violation {}

/// An allocated ResourceClaim as the API holds it (DRA).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ClaimView {
    /// `namespace/name`.
    pub key: String,
    /// The node its allocation names; `None`: not allocated.
    pub node: Option<String>,
    /// `pool/device` per result.
    pub devices: Vec<String>,
    /// Names of the pods in `status.reservedFor`.
    pub reserved_for: Vec<String>,
}

/// A bound pod and the claims it uses (`namespace/name`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ClaimUser {
    /// `namespace/name`.
    pub pod: String,
    pub node: String,
    pub claims: Vec<String>,
}

/// DRA's rules: no device in two allocated claims; every bound pod's claims allocated on
/// its node and reserved for it.
pub fn check_claims(claims: &[ClaimView], users: &[ClaimUser]) -> Result<(), Vec<Violation>> {
    let mut out = Vec::new();
    let mut holders: BTreeMap<(&str, &str), Vec<String>> = BTreeMap::new();
    for c in claims {
        if let Some(node) = &c.node {
            for d in &c.devices {
                holders.entry((node, d)).or_default().push(c.key.clone());
            }
        }
    }
    for ((node, device), claims) in holders {
        if claims.len() > 1 {
            out.push(Violation::DeviceInTwoClaims {
                node: node.to_string(),
                device: device.to_string(),
                claims,
            });
        }
    }
    let by_key: BTreeMap<&str, &ClaimView> = claims.iter().map(|c| (c.key.as_str(), c)).collect();
    for u in users {
        let name = u.pod.split_once('/').map_or(u.pod.as_str(), |(_, n)| n);
        for key in &u.claims {
            let why = match by_key.get(key.as_str()) {
                None => Some("does not exist".to_string()),
                Some(c) => match &c.node {
                    None => Some("is not allocated".to_string()),
                    Some(n) if *n != u.node => {
                        Some(format!("is allocated on node {n}, not {}", u.node))
                    }
                    Some(_) if !c.reserved_for.iter().any(|r| r == name) => {
                        Some("is not reserved for it".to_string())
                    }
                    Some(_) => None,
                },
            };
            if let Some(why) = why {
                out.push(Violation::ClaimNotHeld {
                    pod: u.pod.clone(),
                    claim: key.clone(),
                    why,
                });
            }
        }
    }
    if out.is_empty() {
        Ok(())
    } else {
        Err(out)
    }
}

/// All violations, one per line (for `assert!`/`prop_assert!` messages).
pub fn describe(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| format!("  - {v}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Checks a snapshot: every rule, recomputed from the bound pods.
pub fn check(snapshot: &Snapshot) -> Result<(), Vec<Violation>> {
    let mut out = Vec::new();
    let nodes: BTreeMap<&str, &NodeView> = snapshot
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n))
        .collect();
    let mut seen = BTreeSet::new();
    for p in &snapshot.pods {
        if !seen.insert(p.key.as_str()) {
            out.push(Violation::DuplicatePod { pod: p.key.clone() });
        }
    }
    check_nodes(snapshot, &nodes, &mut out);
    check_gangs(snapshot, &mut out);
    check_queues(snapshot, &mut out);
    placement::check_anti_affinity(snapshot, &mut out);
    placement::check_volumes(snapshot, &mut out);
    if out.is_empty() {
        Ok(())
    } else {
        Err(out)
    }
}

fn check_nodes(snapshot: &Snapshot, nodes: &BTreeMap<&str, &NodeView>, out: &mut Vec<Violation>) {
    // node -> its bound pods
    let mut on: BTreeMap<&str, Vec<&PodView>> = BTreeMap::new();
    for p in &snapshot.pods {
        let Some(node) = &p.node else { continue };
        if !nodes.contains_key(node.as_str()) {
            out.push(Violation::UnknownNode {
                pod: p.key.clone(),
                node: node.clone(),
            });
            continue;
        }
        on.entry(node.as_str()).or_default().push(p);
        let whole_gpus = p.requests.get(GPU).copied().unwrap_or(0);
        if whole_gpus > 0
            && p.gpu == GpuClaim::None
            && nodes[node.as_str()].gpu_devices > 0
            && p.resource_claims.is_empty()
            && p.scheduler.as_deref() != Some(KUBE_SCHEDULER)
        {
            out.push(Violation::GpuWithoutIndices {
                pod: p.key.clone(),
                node: node.clone(),
                requested: whole_gpus,
            });
        }
        // Whole GPUs a pod's ResourceClaims hold are the claims' to count, not its requests.
        if let (GpuClaim::Whole(v), true) = (&p.gpu, p.resource_claims.is_empty()) {
            let requested = p.requests.get(GPU).copied().unwrap_or(0);
            if requested != 1000 * v.len() as Amount {
                out.push(Violation::GpuClaimMismatch {
                    pod: p.key.clone(),
                    requested,
                    claimed: 1000 * v.len() as Amount,
                });
            }
        }
    }
    for (name, pods) in on {
        let node = nodes[name];
        // Resources, with one pod slot per pod.
        let mut used: BTreeMap<&str, Amount> = BTreeMap::new();
        for p in &pods {
            *used.entry(PODS).or_default() += 1000;
            for (r, a) in &p.requests {
                *used.entry(r.as_str()).or_default() += a;
            }
        }
        for (resource, requested) in used {
            let allocatable = node.allocatable.get(resource).copied().unwrap_or(0);
            if requested > allocatable {
                out.push(Violation::OverAllocatable {
                    node: name.to_string(),
                    resource: resource.to_string(),
                    requested,
                    allocatable,
                    pods: pods
                        .iter()
                        .filter(|p| {
                            resource == PODS || p.requests.get(resource).is_some_and(|a| *a > 0)
                        })
                        .map(|p| p.key.clone())
                        .collect(),
                });
            }
        }
        // Devices: who holds each, whole or in part.
        let mut whole: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
        let mut shares: BTreeMap<u32, (Amount, Vec<&str>)> = BTreeMap::new();
        let mut parts: BTreeMap<u32, Vec<(u8, &str)>> = BTreeMap::new();
        for p in &pods {
            let indices: Vec<u32> = match &p.gpu {
                GpuClaim::None => continue,
                GpuClaim::Whole(v) => {
                    for &i in v {
                        whole.entry(i).or_default().push(&p.key);
                    }
                    v.clone()
                }
                GpuClaim::Share { index, milli } => {
                    let e = shares.entry(*index).or_default();
                    e.0 += Amount::from(*milli);
                    e.1.push(&p.key);
                    vec![*index]
                }
                GpuClaim::Partitions(v) => {
                    for &(index, k) in v {
                        parts.entry(index).or_default().push((k, &p.key));
                    }
                    v.iter().map(|(i, _)| *i).collect()
                }
            };
            for index in indices.into_iter().filter(|&i| i >= node.gpu_devices) {
                out.push(Violation::DeviceOutOfRange {
                    node: name.to_string(),
                    pod: p.key.clone(),
                    index,
                    devices: node.gpu_devices,
                });
            }
        }
        for (index, holders) in &whole {
            let sharers = shares.get(index).map(|(_, p)| p.as_slice()).unwrap_or(&[]);
            let partitioners: Vec<&str> = parts
                .get(index)
                .into_iter()
                .flatten()
                .map(|(_, p)| *p)
                .collect();
            let sharers: Vec<&str> = sharers.iter().copied().chain(partitioners).collect();
            if holders.len() + sharers.len() > 1 {
                out.push(Violation::DeviceTwice {
                    node: name.to_string(),
                    index: *index,
                    pods: holders
                        .iter()
                        .chain(&sharers)
                        .map(|s| s.to_string())
                        .collect(),
                });
            }
        }
        for (index, held) in &parts {
            let pods: Vec<String> = held.iter().map(|(_, p)| p.to_string()).collect();
            let Some(view) = node.partitions.get(index) else {
                out.push(Violation::UnknownPartition {
                    node: name.to_string(),
                    index: *index,
                    partition: held[0].0,
                    pods,
                });
                continue;
            };
            for (counter, capacity) in &view.capacity {
                let used: Amount = held
                    .iter()
                    .filter_map(|(k, _)| view.consumes.get(*k as usize)?.get(counter))
                    .sum();
                if used > *capacity {
                    out.push(Violation::CountersOverCommitted {
                        node: name.to_string(),
                        index: *index,
                        counter: counter.clone(),
                        used,
                        capacity: *capacity,
                        pods: pods.clone(),
                    });
                }
            }
            if let Some((k, _)) = held
                .iter()
                .find(|(k, _)| *k as usize >= view.consumes.len())
            {
                out.push(Violation::UnknownPartition {
                    node: name.to_string(),
                    index: *index,
                    partition: *k,
                    pods: pods.clone(),
                });
            }
        }
        for (index, (milli, holders)) in shares {
            if milli > 1000 {
                out.push(Violation::DeviceOverShared {
                    node: name.to_string(),
                    index,
                    milli,
                    pods: holders.iter().map(|s| s.to_string()).collect(),
                });
            }
        }
    }
}

fn check_gangs(snapshot: &Snapshot, out: &mut Vec<Violation>) {
    let gangs: BTreeMap<&str, &GangView> =
        snapshot.gangs.iter().map(|g| (g.key.as_str(), g)).collect();
    let mut bound: BTreeMap<&str, u32> = BTreeMap::new();
    for p in snapshot.pods.iter().filter(|p| p.node.is_some()) {
        let Some(gang) = &p.gang else { continue };
        if !gangs.contains_key(gang.as_str()) {
            out.push(Violation::UnknownGang {
                pod: p.key.clone(),
                gang: gang.clone(),
            });
            continue;
        }
        *bound.entry(gang.as_str()).or_default() += 1;
    }
    for (key, n) in bound {
        let g = gangs[key];
        if n + g.departed < g.min_member {
            out.push(Violation::GangPartial {
                gang: key.to_string(),
                bound: n,
                departed: g.departed,
                min_member: g.min_member,
            });
        }
    }
}

fn check_queues(snapshot: &Snapshot, out: &mut Vec<Violation>) {
    let queues: BTreeMap<&str, &QueueView> = snapshot
        .queues
        .iter()
        .map(|q| (q.name.as_str(), q))
        .collect();
    // (queue, flavor, resource) -> used
    let mut used: BTreeMap<(&str, String, String), Amount> = BTreeMap::new();
    for p in snapshot.pods.iter().filter(|p| p.node.is_some()) {
        // A pod of a queue the snapshot does not have (deleted, still draining) is
        // charged nowhere.
        let Some(q) = p.queue.as_deref().and_then(|q| queues.get(q)) else {
            continue;
        };
        for (resource, a) in p.quota_amounts() {
            let flavor = p.flavors.get(&resource).cloned().or_else(|| {
                q.quotas
                    .iter()
                    .find(|x| x.resource == resource)
                    .map(|x| x.flavor.clone())
            });
            match flavor {
                Some(flavor) => *used.entry((&q.name, flavor, resource)).or_default() += a,
                None if resource == PODS => {}
                None => out.push(Violation::QueueNotCovered {
                    queue: q.name.clone(),
                    pod: p.key.clone(),
                    resource,
                }),
            }
        }
    }
    let usage = |q: &str, flavor: &str, resource: &str| {
        used.get(&(q, flavor.to_string(), resource.to_string()))
            .copied()
            .unwrap_or(0)
    };
    for q in &snapshot.queues {
        for quota in &q.quotas {
            let u = usage(&q.name, &quota.flavor, &quota.resource);
            let limit = match (&q.cohort, quota.borrowing_limit) {
                (None, _) => Some(quota.nominal),
                (Some(_), Some(b)) => Some(quota.nominal + b),
                (Some(_), None) => None,
            };
            if let Some(limit) = limit.filter(|l| u > *l) {
                out.push(Violation::QueueOverLimit {
                    queue: q.name.clone(),
                    flavor: quota.flavor.clone(),
                    resource: quota.resource.clone(),
                    used: u,
                    limit,
                });
            }
        }
    }
    check_cohorts(snapshot, &usage, out);
}

/// One resource in one flavor at a node of a cohort tree, as Kueue counts hierarchical
/// cohorts: what it holds (its nominal plus what its children lend it), what it keeps
/// from its parent (that less its lending limit), and what it uses (a cohort: what its
/// children take beyond what they keep).
#[derive(Default, Clone, Copy)]
struct Held {
    quota: Amount,
    kept: Amount,
    used: Amount,
}

impl Held {
    fn of(quota: Amount, lending_limit: Option<Amount>, used: Amount) -> Held {
        Held {
            quota,
            kept: lending_limit.map_or(0, |l| (quota - l).max(0)),
            used,
        }
    }
    fn lent(&self) -> Amount {
        self.quota - self.kept
    }
    fn taken(&self) -> Amount {
        (self.used - self.kept).max(0)
    }
}

/// Every cohort tree within its root's pool, and every inner cohort within what its
/// parent may lend it.
fn check_cohorts(
    snapshot: &Snapshot,
    usage: &dyn Fn(&str, &str, &str) -> Amount,
    out: &mut Vec<Violation>,
) {
    let declared: BTreeMap<&str, &CohortView> = snapshot
        .cohorts
        .iter()
        .map(|c| (c.name.as_str(), c))
        .collect();
    let mut names: BTreeSet<&str> = declared.keys().copied().collect();
    names.extend(snapshot.cohorts.iter().filter_map(|c| c.parent.as_deref()));
    names.extend(snapshot.queues.iter().filter_map(|q| q.cohort.as_deref()));
    let parent = |c: &str| declared.get(c).and_then(|v| v.parent.as_deref());
    let resources: BTreeSet<(&str, &str)> = snapshot
        .queues
        .iter()
        .flat_map(|q| &q.quotas)
        .chain(snapshot.cohorts.iter().flat_map(|c| &c.quotas))
        .map(|q| (q.flavor.as_str(), q.resource.as_str()))
        .collect();
    for (flavor, resource) in resources {
        let own = |quotas: &[QuotaView]| {
            quotas
                .iter()
                .find(|q| q.flavor == flavor && q.resource == resource)
                .cloned()
                .unwrap_or_default()
        };
        // Children before parents: a cohort's amounts are its own and its children's.
        let mut held: BTreeMap<&str, Held> = BTreeMap::new();
        let depth = |c: &str| {
            let mut at = c;
            let mut d = 0;
            while let Some(p) = parent(at).filter(|_| d <= names.len()) {
                at = p;
                d += 1;
            }
            d
        };
        let mut order: Vec<&str> = names.iter().copied().collect();
        order.sort_by_key(|c| std::cmp::Reverse(depth(c)));
        for c in order {
            let (mut quota, mut used) = (0, 0);
            for q in snapshot
                .queues
                .iter()
                .filter(|q| q.cohort.as_deref() == Some(c))
            {
                let mine = own(&q.quotas);
                let h = Held::of(
                    mine.nominal,
                    mine.lending_limit,
                    usage(&q.name, flavor, resource),
                );
                quota += h.lent();
                used += h.taken();
            }
            for child in names.iter().filter(|n| parent(n) == Some(c)) {
                let h = held.get(child).copied().unwrap_or_default();
                quota += h.lent();
                used += h.taken();
            }
            let mine = declared.get(c).map(|v| own(&v.quotas)).unwrap_or_default();
            let h = Held::of(quota + mine.nominal, mine.lending_limit, used);
            held.insert(c, h);
            match (parent(c), mine.borrowing_limit) {
                (None, _) if h.used > h.quota => out.push(Violation::CohortOverLent {
                    cohort: c.to_string(),
                    flavor: flavor.to_string(),
                    resource: resource.to_string(),
                    taken: h.used,
                    pool: h.quota,
                }),
                (Some(_), Some(b)) if h.taken() > h.lent() + b => {
                    out.push(Violation::CohortOverLimit {
                        cohort: c.to_string(),
                        flavor: flavor.to_string(),
                        resource: resource.to_string(),
                        taken: h.taken(),
                        limit: h.lent() + b,
                    })
                }
                _ => {}
            }
        }
    }
}

/// Checks a step from `before` to `after`: every pod pending before is still there
/// (pending or bound) unless it is in `left` (completed or deleted during the step); every
/// pod newly bound had its required pod affinity met and kept its DoNotSchedule topology
/// spread constraints at the moment of binding, as far as the two snapshots tell. The
/// order of the bindings between them is unknown, so what any order allows passes:
/// - other pods newly bound in the step count as affinity partners, and a spread's skew
///   may exceed `maxSkew` by the number of them that match the constraint (on eligible
///   nodes): they may have been bound after the pod;
/// - pods bound before and not after (ended, evicted, on a removed node) may have left
///   after the binding: they count as affinity partners and in the least-loaded spread
///   domain (never in the pod's own);
/// - "first of a series" (a pod matching its own affinity terms may go where none match
///   when no pod in the cluster does) is judged against the pods bound throughout the step.
///
/// Affinity is not checked by [`check`]: the partner may have ended since
/// (`IgnoredDuringExecution`).
pub fn check_transition(
    before: &Snapshot,
    after: &Snapshot,
    left: &BTreeSet<String>,
) -> Result<(), Vec<Violation>> {
    let present: BTreeSet<&str> = after.pods.iter().map(|p| p.key.as_str()).collect();
    let mut out: Vec<Violation> = before
        .pods
        .iter()
        .filter(|p| p.node.is_none())
        .filter(|p| !present.contains(p.key.as_str()) && !left.contains(&p.key))
        .map(|p| Violation::PendingPodDropped { pod: p.key.clone() })
        .collect();
    placement::check_bindings(before, after, &mut out);
    if out.is_empty() {
        Ok(())
    } else {
        Err(out)
    }
}

impl Snapshot {
    pub fn pod(&self, key: &str) -> Option<&PodView> {
        self.pods.iter().find(|p| p.key == key)
    }

    /// Sets how many members of each gang (by key) departed on their own (see
    /// [`GangView::departed`]).
    pub fn set_departed(&mut self, departed: &BTreeMap<String, u32>) {
        for g in &mut self.gangs {
            g.departed = departed.get(&g.key).copied().unwrap_or(0);
        }
    }
}

#[cfg(test)]
mod tests;
