//! A snapshot of a cluster: the views of nodes, pods, gangs, queues and cohorts it holds.

use super::*;
use std::collections::BTreeMap;

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
