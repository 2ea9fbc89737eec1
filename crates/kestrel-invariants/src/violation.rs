//! The broken rules a check reports (`Violation`), and how each reads.

use super::*;
use std::fmt;

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

pub(super) fn amount(resource: &str, milli: Amount) -> String {
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
