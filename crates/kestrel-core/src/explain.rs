//! Why a pod is pending: typed reasons, counted per node like kube-scheduler's
//! "0/N nodes are available: ..." message, computed by the pass that decided.

use crate::model::Taint;
use crate::queue::QueueProblem;
use serde::Serialize;
use std::fmt;

/// Why one node cannot take a pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum NodeReason {
    /// Cordoned (`spec.unschedulable`).
    Cordoned,
    /// A NoSchedule/NoExecute taint the pod does not tolerate.
    UntoleratedTaint(Taint),
    /// nodeSelector or required node affinity do not match.
    AffinityMismatch,
    /// The pod's RuntimeClass `scheduling.nodeSelector`/tolerations do not match.
    RuntimeClassMismatch(String),
    /// Not enough of a resource free (`cpu`, `memory`, `nvidia.com/gpu`, ...).
    Insufficient(String),
    /// The node holds its maximum pod count.
    TooManyPods,
    /// The node has enough free GPU share in total, but no single device that the request
    /// can use (whole GPUs split by shares, or shares spread thin).
    GpuFragmented,
    /// Held for the workload at the head of the queue (named) until it starts.
    Reserved(String),
    /// Its free room is promised to a preempting pod (named) of no lower priority whose
    /// victims are leaving (Kubernetes' nominated node), and this pod does not fit beside it.
    Nominated(String),
    /// DRA: the pod's claims cannot all be allocated here now (matching devices are taken);
    /// kube-scheduler's words.
    ClaimsUnallocatable,
    /// DRA: a claim's partition (a MIG instance) fits nowhere on the node, though one of its
    /// GPUs has the room free: the room is split between the partitions held.
    PartitionsFragmented,
    /// DRA: a claim cannot be allocated here at all (what is missing, the same on every
    /// node alike: no device matches a request, or the claim is allocated elsewhere).
    NoMatchingDevice(String),
    /// A host port the pod asks for is taken on the node.
    HostPortsTaken,
    /// A required pod affinity term finds no matching pod in the node's domain (or the
    /// node lacks the term's topology key).
    PodAffinityMismatch,
    /// A required pod anti-affinity term finds a matching pod in the node's domain.
    PodAntiAffinityMismatch,
    /// A pod placed in the node's domain has a required anti-affinity term this pod matches.
    ExistingAntiAffinity,
    /// Placing the pod here would take a DoNotSchedule topology spread over its maxSkew.
    SpreadSkew,
    /// The node lacks the topology key of a DoNotSchedule spread constraint.
    SpreadMissingLabel,
    /// A PersistentVolume the pod's claim is bound to may not be used on the node.
    VolumeNodeAffinityConflict,
    /// A claim to be provisioned where the pod goes cannot be provisioned on the node (its
    /// StorageClass's allowed topologies exclude it).
    VolumeBindConflict,
    /// A `ReadWriteOncePod` claim of the pod is in use by another pod.
    VolumeInUse,
    /// Attaching the pod's CSI volumes would take the node past its CSINode's limit for
    /// their driver.
    VolumeLimit,
}

/// What a node lacks when a `single-numa-node` pod's GPUs (with their NICs) cannot all sit
/// on one of its NUMA nodes, now or ever; counted as [`NodeReason::Insufficient`].
pub const NUMA_ALIGNED_GPUS: &str = "nvidia.com/gpu on one NUMA node (single-numa-node)";

impl NodeReason {
    /// The node cannot hold the pod's GPUs on one NUMA node.
    pub fn numa_unaligned() -> NodeReason {
        NodeReason::Insufficient(NUMA_ALIGNED_GPUS.to_string())
    }

    /// No device of the node has the memory a share by memory asks for (`mib` MiB), now
    /// or ever: "Insufficient GPU memory on one device (needs 20480 MiB)".
    pub fn gpu_memory_short(mib: u64) -> NodeReason {
        NodeReason::Insufficient(format!("GPU memory on one device (needs {mib} MiB)"))
    }

    /// A shortfall of free capacity (as opposed to a node the pod may not use at all).
    /// A refusal by the pods placed (inter-pod rules, host ports, a claim in use), which
    /// pods placed or ended anywhere in a domain may change.
    pub fn is_inter_pod(&self) -> bool {
        matches!(
            self,
            NodeReason::HostPortsTaken
                | NodeReason::PodAffinityMismatch
                | NodeReason::PodAntiAffinityMismatch
                | NodeReason::ExistingAntiAffinity
                | NodeReason::SpreadSkew
                | NodeReason::SpreadMissingLabel
                | NodeReason::VolumeInUse
                | NodeReason::VolumeLimit
        )
    }

    pub fn is_capacity(&self) -> bool {
        matches!(
            self,
            NodeReason::Insufficient(_)
                | NodeReason::TooManyPods
                | NodeReason::GpuFragmented
                | NodeReason::Reserved(_)
                | NodeReason::Nominated(_)
                | NodeReason::ClaimsUnallocatable
                | NodeReason::PartitionsFragmented
        )
    }
}

impl fmt::Display for NodeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeReason::Cordoned => write!(f, "node(s) were unschedulable (cordoned)"),
            NodeReason::UntoleratedTaint(t) => {
                write!(
                    f,
                    "node(s) had untolerated taint {{{}: {}}}",
                    t.key, t.value
                )
            }
            NodeReason::AffinityMismatch => {
                write!(f, "node(s) didn't match Pod's node affinity/selector")
            }
            NodeReason::RuntimeClassMismatch(rc) => {
                write!(f, "node(s) didn't match RuntimeClass {rc:?} scheduling")
            }
            NodeReason::Insufficient(r) => write!(f, "Insufficient {r}"),
            NodeReason::TooManyPods => write!(f, "Too many pods"),
            NodeReason::Reserved(holder) => {
                write!(
                    f,
                    "node(s) were reserved for {holder} at the head of the queue"
                )
            }
            NodeReason::GpuFragmented => {
                write!(
                    f,
                    "node(s) had free GPU capacity split across shared devices"
                )
            }
            NodeReason::ClaimsUnallocatable => write!(f, "cannot allocate all claims"),
            NodeReason::PartitionsFragmented => write!(
                f,
                "cannot allocate all claims (free GPU room split between MIG partitions)"
            ),
            NodeReason::NoMatchingDevice(what) => {
                write!(f, "cannot allocate all claims ({what})")
            }
            NodeReason::HostPortsTaken => write!(
                f,
                "node(s) didn't have free ports for the requested pod ports"
            ),
            NodeReason::PodAffinityMismatch => write!(f, "node(s) didn't match pod affinity rules"),
            NodeReason::PodAntiAffinityMismatch => {
                write!(f, "node(s) didn't match pod anti-affinity rules")
            }
            NodeReason::ExistingAntiAffinity => write!(
                f,
                "node(s) didn't satisfy existing pods anti-affinity rules"
            ),
            NodeReason::SpreadSkew => {
                write!(f, "node(s) didn't match pod topology spread constraints")
            }
            NodeReason::SpreadMissingLabel => write!(
                f,
                "node(s) didn't match pod topology spread constraints (missing required label)"
            ),
            NodeReason::VolumeNodeAffinityConflict => {
                write!(f, "node(s) had volume node affinity conflict")
            }
            NodeReason::VolumeBindConflict => write!(
                f,
                "node(s) didn't find available persistent volumes to bind"
            ),
            NodeReason::VolumeInUse => write!(
                f,
                "node(s) had pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
            ),
            NodeReason::VolumeLimit => write!(f, "node(s) exceed max volume count"),
            NodeReason::Nominated(preemptor) => {
                write!(
                    f,
                    "node(s) had room promised to preemptor {preemptor} whose victims are leaving"
                )
            }
        }
    }
}

/// Why a gang as a whole cannot start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum GangProblem {
    /// The pod names a gang that was never declared.
    NotFound { gang: String },
    /// Fewer pods exist than the gang's minimum (or a role's minimum).
    Incomplete {
        gang: String,
        exist: u32,
        min_member: u32,
        total: Option<u32>,
        /// (role, pods of that role, its minimum) when a role is short.
        role: Option<(String, u32, u32)>,
    },
    /// The pods exist but only `placed` of the `needed` fit together.
    Unplaceable {
        gang: String,
        placed: u32,
        needed: u32,
    },
    /// No domain of the required topology level holds the gang.
    NoDomain {
        gang: String,
        level: String,
        domains: u32,
    },
    /// The gang waited longer than its `scheduleTimeoutSeconds`.
    TimedOut { gang: String, after_seconds: u64 },
}

impl fmt::Display for GangProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GangProblem::NotFound { gang } => write!(
                f,
                "gang {gang} does not exist: create its PodGroup, or fix the pod's group label"
            ),
            GangProblem::Incomplete {
                gang,
                exist,
                min_member,
                total,
                role,
            } => {
                match role {
                    Some((role, have, min)) => write!(
                        f,
                        "gang {gang} is incomplete: {have} pod(s) of role {role} exist, its minimum is {min}"
                    )?,
                    None => write!(
                        f,
                        "gang {gang} is incomplete: {exist} of {} pods exist (minMember {min_member})",
                        total.unwrap_or(*min_member)
                    )?,
                }
                write!(f, "; waiting for the rest to be created")
            }
            GangProblem::Unplaceable {
                gang,
                placed,
                needed,
            } => write!(
                f,
                "gang {gang} cannot start whole: only {placed} of the {needed} pods it needs fit together"
            ),
            GangProblem::NoDomain {
                gang,
                level,
                domains,
            } => write!(
                f,
                "gang {gang} needs all its pods in one {level} domain; none of the {domains} domains can hold it"
            ),
            GangProblem::TimedOut {
                gang,
                after_seconds,
            } => write!(
                f,
                "gang {gang} timed out after {after_seconds} s waiting to start (scheduleTimeoutSeconds)"
            ),
        }
    }
}

/// Why a pod fits no node, and what would have to change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unschedulable {
    /// Set when the workload's queue does not admit it (quota, missing queue, ...): no
    /// node was tried, and adding nodes would not help.
    pub queue: Option<Box<QueueProblem>>,
    /// Set when the pod waits because of its gang; `reasons` then describe the first of the
    /// gang's pods that did not fit (empty when the gang did not get that far).
    pub gang: Option<GangProblem>,
    pub total_nodes: u32,
    /// Node counts per reason, most frequent first. A node may count under several
    /// resource shortfalls, as in kube-scheduler.
    pub reasons: Vec<(NodeReason, u32)>,
    /// Set when the cluster has enough free whole GPUs in total but no eligible node
    /// has enough: `(free whole GPUs on eligible nodes, most on one eligible node)`.
    pub gpu_fragmentation: Option<(u32, u32)>,
}

impl Unschedulable {
    /// The reason that matters most, for one-line summaries: what stops the pod on the
    /// nodes it is otherwise allowed on (a shortfall), else the most common exclusion.
    pub fn headline(&self) -> String {
        if let Some(problem) = &self.queue {
            return match problem.as_ref() {
                QueueProblem::Quota(q) => format!("quota: {}", q.resource),
                QueueProblem::WaitingForVictims { .. } => "waiting for preemption".to_string(),
                QueueProblem::PreemptionDelay { .. } => "preemption delay".to_string(),
                QueueProblem::BehindHead { .. } => "behind StrictFIFO head".to_string(),
                QueueProblem::BehindPreemptor { .. } => "behind a preemptor".to_string(),
                QueueProblem::BehindReclaim { .. } => "behind a reclaim".to_string(),
                QueueProblem::Stopped { .. } => "queue stopped".to_string(),
                QueueProblem::Inactive { .. } => "queue inactive".to_string(),
                QueueProblem::FlavorTaint { flavor, .. } => {
                    format!("flavor {flavor}'s taint not tolerated")
                }
                QueueProblem::NotCovered { resource, .. } => {
                    format!("queue has no quota for {resource}")
                }
                QueueProblem::NoLocalQueue { .. }
                | QueueProblem::NoClusterQueue { .. }
                | QueueProblem::NamespaceNotSelected { .. } => "queue misconfigured".to_string(),
            };
        }
        if let Some(problem) = &self.gang {
            return match problem {
                GangProblem::NotFound { .. } => "gang not found".to_string(),
                GangProblem::Incomplete { .. } => "gang incomplete".to_string(),
                GangProblem::TimedOut { .. } => "gang timed out".to_string(),
                GangProblem::NoDomain { level, .. } => {
                    format!("gang does not fit one {level} domain")
                }
                GangProblem::Unplaceable { .. } => {
                    match self.reasons.iter().find(|(r, _)| r.is_capacity()) {
                        Some((reason, _)) => format!("gang does not fit: {reason}"),
                        None => "gang does not fit".to_string(),
                    }
                }
            };
        }
        let shortfall = self.reasons.iter().find(|(r, _)| r.is_capacity());
        match shortfall.or(self.reasons.first()) {
            Some((reason, _)) => reason.to_string(),
            None => "no nodes in the cluster".to_string(),
        }
    }

    /// Whether a capacity problem (not configuration) blocks the pod: adding nodes could help.
    pub fn is_capacity(&self) -> bool {
        if self.queue.is_some() {
            return false;
        }
        let gang_waits_for_capacity = matches!(
            self.gang,
            None | Some(GangProblem::Unplaceable { .. }) | Some(GangProblem::NoDomain { .. })
        );
        gang_waits_for_capacity && self.reasons.iter().any(|(r, _)| r.is_capacity())
    }

    /// The same explanation, attributed to a gang.
    pub fn for_gang(mut self, problem: GangProblem) -> Self {
        self.gang = Some(problem);
        self
    }

    /// An explanation that is about the queue only (no node was tried).
    pub fn queue_only(problem: QueueProblem, total_nodes: u32) -> Self {
        Unschedulable {
            queue: Some(Box::new(problem)),
            gang: None,
            total_nodes,
            reasons: Vec::new(),
            gpu_fragmentation: None,
        }
    }

    /// An explanation that is about the gang only (no node was tried).
    pub fn gang_only(problem: GangProblem, total_nodes: u32) -> Self {
        Unschedulable {
            queue: None,
            gang: Some(problem),
            total_nodes,
            reasons: Vec::new(),
            gpu_fragmentation: None,
        }
    }
}

impl fmt::Display for Unschedulable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(problem) = &self.queue {
            return write!(f, "{problem}");
        }
        if let Some(problem) = &self.gang {
            write!(f, "{problem}")?;
            if self.reasons.is_empty() {
                return Ok(());
            }
            write!(f, ". First pod that did not fit: ")?;
        }
        write!(f, "0/{} nodes are available", self.total_nodes)?;
        if self.total_nodes == 0 {
            return write!(f, ": the cluster has no nodes");
        }
        let parts: Vec<String> = self
            .reasons
            .iter()
            .map(|(r, n)| format!("{n} {r}"))
            .collect();
        write!(f, ": {}.", parts.join(", "))?;
        if let Some((free, best)) = self.gpu_fragmentation {
            write!(
                f,
                " GPUs are fragmented: {free} whole GPUs are free on eligible nodes, at most {best} on any one node."
            )?;
        }
        Ok(())
    }
}
