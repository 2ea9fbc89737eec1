//! The cluster and workload model: nodes with GPU devices, pods with their constraints.

use crate::resources::Resources;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// Node label naming the node's rack (a topology domain below the block).
pub const RACK_LABEL: &str = "topology.kestrel.dev/rack";
/// Node label naming the node's block (a group of racks on one spine).
pub const BLOCK_LABEL: &str = "topology.kestrel.dev/block";
/// Node label with the node's name, set by the kubelet.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// GPU Feature Discovery's label with the GPU product name.
pub const GPU_PRODUCT_LABEL: &str = "nvidia.com/gpu.product";
/// GPU Feature Discovery's label on nodes in a multi-node NVLink domain.
pub const GPU_CLIQUE_LABEL: &str = "nvidia.com/gpu.clique";

pub type Labels = BTreeMap<String, String>;

/// One GPU on a node, as the device plugin and NVML see it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct GpuDevice {
    pub index: u32,
    pub model: String,
    pub memory_mib: u64,
    pub numa_node: u32,
    /// GPUs with the same island id talk over NVLink; `None`: PCIe only.
    pub nvlink_island: Option<u32>,
    /// The PCIe switch the GPU hangs off; NICs on the same switch serve GPUDirect RDMA.
    pub pcie_switch: Option<u32>,
    /// Set when a DRA driver publishes the GPU (a ResourceSlice device) instead of the
    /// device plugin: only claims take it.
    pub dra: Option<std::sync::Arc<crate::devices::DraDevice>>,
}

/// One network interface usable for GPU traffic (RoCE / InfiniBand).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Nic {
    pub name: String,
    pub gbps: u32,
    pub numa_node: u32,
    pub pcie_switch: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    pub fn parse(s: &str) -> Option<TaintEffect> {
        match s {
            "NoSchedule" => Some(TaintEffect::NoSchedule),
            "PreferNoSchedule" => Some(TaintEffect::PreferNoSchedule),
            "NoExecute" => Some(TaintEffect::NoExecute),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: TaintEffect,
}

impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{:?}", self.key, self.effect)
        } else {
            write!(f, "{}={}:{:?}", self.key, self.value, self.effect)
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum TolerationOperator {
    Equal,
    Exists,
}

/// A pod's toleration, with Kubernetes semantics: an empty key with `Exists` tolerates
/// everything; an absent effect matches every effect.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Toleration {
    pub key: String,
    pub operator: TolerationOperator,
    pub value: String,
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if let Some(effect) = self.effect {
            if effect != taint.effect {
                return false;
            }
        }
        if self.key.is_empty() {
            return self.operator == TolerationOperator::Exists;
        }
        if self.key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value == taint.value,
        }
    }
}

/// What a node is: capacity, devices, labels, taints. The scheduler's view of a Node object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeSpec {
    pub name: String,
    pub labels: Labels,
    pub taints: Vec<Taint>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// Allocatable resources other than GPUs.
    pub allocatable: Resources,
    /// Allocatable pod count.
    pub max_pods: u32,
    pub gpus: Vec<GpuDevice>,
    pub nics: Vec<Nic>,
    /// Most volumes each CSI driver may attach to the node (its CSINode's
    /// `spec.drivers[].allocatable.count`); a driver not listed: no limit.
    pub volume_limits: BTreeMap<String, u32>,
    /// The DeviceClass through which DRA serves `nvidia.com/gpu` here (its
    /// `spec.extendedResourceName`, GA in Kubernetes 1.37): a node whose GPUs DRA publishes
    /// takes `nvidia.com/gpu` pods on them, and the binder writes the claim for the pod.
    /// `None`: such a node has no `nvidia.com/gpu`.
    pub gpu_extended_class: Option<String>,
}

impl NodeSpec {
    /// A node with cpu and memory only, 110 pods (the kubelet default).
    pub fn new(name: impl Into<String>, allocatable: Resources) -> Self {
        let name = name.into();
        let mut labels = Labels::new();
        labels.insert(HOSTNAME_LABEL.to_string(), name.clone());
        NodeSpec {
            name,
            labels,
            taints: Vec::new(),
            unschedulable: false,
            allocatable,
            max_pods: 110,
            gpus: Vec::new(),
            nics: Vec::new(),
            volume_limits: BTreeMap::new(),
            gpu_extended_class: None,
        }
    }

    pub fn rack(&self) -> Option<&str> {
        self.labels.get(RACK_LABEL).map(String::as_str)
    }

    pub fn block(&self) -> Option<&str> {
        self.labels.get(BLOCK_LABEL).map(String::as_str)
    }

    /// The NICs on the same PCIe switch as GPU `index` (the ones it uses for GPUDirect RDMA).
    pub fn nics_of_gpu(&self, index: u32) -> impl Iterator<Item = &Nic> {
        let switch = self
            .gpus
            .iter()
            .find(|g| g.index == index)
            .and_then(|g| g.pcie_switch);
        self.nics
            .iter()
            .filter(move |n| switch.is_some() && n.pcie_switch == switch)
    }

    /// Whether GPU `gpus[position]` and the NICs on its PCIe switch sit on one NUMA node.
    pub fn gpu_numa_local(&self, position: usize) -> bool {
        let g = &self.gpus[position];
        self.nics_of_gpu(g.index)
            .all(|n| n.numa_node == g.numa_node)
    }

    /// The most GPUs (each with its NICs on the same NUMA node) that one NUMA node holds.
    pub fn max_gpus_on_one_numa(&self) -> u32 {
        let mut per_numa: BTreeMap<u32, u32> = BTreeMap::new();
        for (i, g) in self.gpus.iter().enumerate() {
            if self.gpu_numa_local(i) {
                *per_numa.entry(g.numa_node).or_default() += 1;
            }
        }
        per_numa.into_values().max().unwrap_or(0)
    }
}

/// How many GPUs a pod asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
pub enum GpuRequest {
    #[default]
    None,
    /// Whole devices (`nvidia.com/gpu: n`).
    Whole(u32),
    /// A share of one device in thousandths (1..=999); shares never sit on a device that a
    /// whole-GPU pod holds.
    Shared { milli: u32 },
    /// A share of one device given as device memory in MiB (KAI Scheduler's `gpu-memory`):
    /// it fits only devices with at least `mib` MiB, and on a device of `M` MiB it takes
    /// `ceil(mib * 1000 / M)` thousandths ([`memory_share_milli`]), which the binding
    /// records as a share. Like shares, never on a device that a whole-GPU pod holds; a
    /// request of a device's full memory takes it all as a share (1000 thousandths).
    Memory { mib: u64 },
}

/// The thousandths of a device with `device_mib` MiB that a share of `mib` MiB takes:
/// `ceil(mib * 1000 / device_mib)`, at least 1; `None` when the device has less memory.
pub fn memory_share_milli(mib: u64, device_mib: u64) -> Option<u32> {
    if device_mib == 0 || device_mib < mib {
        return None;
    }
    let milli = (mib as u128 * 1000).div_ceil(device_mib as u128);
    Some(milli.clamp(1, 1000) as u32)
}

impl GpuRequest {
    /// GPU demand in thousandths of a device. A [`GpuRequest::Memory`] share depends on
    /// the device it gets; without a cluster to look at it counts as the most it can ever
    /// take, one device (it only fits devices with at least its memory). The scheduler
    /// counts it closer ([`crate::Scheduler::gpu_milli`]): pending, its share of the
    /// smallest device in the cluster that holds it; bound, what its device holds.
    pub fn milli(self) -> u64 {
        match self {
            GpuRequest::None => 0,
            GpuRequest::Whole(n) => 1000 * n as u64,
            GpuRequest::Shared { milli } => milli as u64,
            GpuRequest::Memory { .. } => 1000,
        }
    }

    pub fn whole(self) -> u32 {
        match self {
            GpuRequest::Whole(n) => n,
            _ => 0,
        }
    }

    /// The thousandths a share takes on a device of `device_mib` MiB (`None`: the device
    /// cannot hold it, or the request is not a share).
    pub fn share_on(self, device_mib: u64) -> Option<u32> {
        match self {
            GpuRequest::Shared { milli } => Some(milli),
            GpuRequest::Memory { mib } => memory_share_milli(mib, device_mib),
            GpuRequest::None | GpuRequest::Whole(_) => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

impl SelectorOperator {
    pub fn parse(s: &str) -> Option<SelectorOperator> {
        Some(match s {
            "In" => SelectorOperator::In,
            "NotIn" => SelectorOperator::NotIn,
            "Exists" => SelectorOperator::Exists,
            "DoesNotExist" => SelectorOperator::DoesNotExist,
            "Gt" => SelectorOperator::Gt,
            "Lt" => SelectorOperator::Lt,
            _ => return None,
        })
    }
}

/// One node selector requirement (`matchExpressions` entry).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Requirement {
    pub key: String,
    pub operator: SelectorOperator,
    pub values: Vec<String>,
}

impl Requirement {
    pub fn matches(&self, labels: &Labels) -> bool {
        self.matches_value(labels.get(&self.key))
    }

    /// Whether the requirement holds where its key has `value` (`None`: absent).
    fn matches_value(&self, value: Option<&String>) -> bool {
        match self.operator {
            SelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            SelectorOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
            SelectorOperator::Gt | SelectorOperator::Lt => {
                let (Some(v), Some(bound)) = (value, self.values.first()) else {
                    return false;
                };
                let (Ok(v), Ok(bound)) = (v.parse::<i64>(), bound.parse::<i64>()) else {
                    return false;
                };
                if self.operator == SelectorOperator::Gt {
                    v > bound
                } else {
                    v < bound
                }
            }
        }
    }
}

/// A node selector term: all requirements must hold. `match_fields` only supports
/// `metadata.name`, as in Kubernetes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize)]
pub struct NodeSelectorTerm {
    pub match_expressions: Vec<Requirement>,
    pub match_fields: Vec<Requirement>,
}

impl NodeSelectorTerm {
    /// The term that selects one node by name (`metadata.name` in it).
    pub fn node_named(name: &str) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: Vec::new(),
            match_fields: vec![Requirement {
                key: "metadata.name".to_string(),
                operator: SelectorOperator::In,
                values: vec![name.to_string()],
            }],
        }
    }

    pub fn matches(&self, node: &NodeSpec) -> bool {
        // Kubernetes: a term with no requirements matches no node.
        if self.match_expressions.is_empty() && self.match_fields.is_empty() {
            return false;
        }
        self.match_expressions
            .iter()
            .all(|r| r.matches(&node.labels))
            && self.match_fields.iter().all(|r| {
                let name = (r.key == "metadata.name").then_some(&node.name);
                r.matches_value(name)
            })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize)]
pub struct NodeAffinity {
    /// `requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`, ORed.
    /// `None` means no requirement; `Some(vec![])` matches nothing.
    pub required: Option<Vec<NodeSelectorTerm>>,
    /// `preferredDuringSchedulingIgnoredDuringExecution`: (weight 1..=100, term).
    pub preferred: Vec<(i32, NodeSelectorTerm)>,
}

/// What a RuntimeClass adds to the pods that name it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct RuntimeClassScheduling {
    pub name: String,
    pub node_selector: Labels,
    pub tolerations: Vec<Toleration>,
}

/// Where a pod may go: everything about placement except the amounts it asks for.
/// Pods with equal constraints share feasibility results per node class.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize)]
pub struct PlacementConstraints {
    pub node_selector: Labels,
    pub affinity: NodeAffinity,
    pub tolerations: Vec<Toleration>,
    pub runtime_class: Option<RuntimeClassScheduling>,
    /// All the pod's GPUs, and the NICs on their PCIe switches, on one NUMA node
    /// (kubelet's `single-numa-node` Topology Manager policy); nodes that cannot do that
    /// are refused. Otherwise one NUMA node is preferred, not required.
    pub single_numa_node: bool,
    /// The pod's ResourceClaims: it takes DRA devices, on a node that publishes them.
    pub devices: Option<crate::devices::DeviceClaims>,
    /// Inter-pod affinity, anti-affinity and topology spread: where it may go by the pods
    /// already placed.
    pub inter_pod: Option<Box<crate::inter_pod::InterPodRules>>,
    /// Host ports its containers take (`ports[].hostPort`), sorted.
    pub host_ports: Vec<crate::inter_pod::HostPort>,
    /// Its PersistentVolumeClaims: volumes that narrow its nodes, claims it may not share.
    pub volumes: Option<Box<crate::volumes::VolumeRules>>,
}

/// What a pod asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize)]
pub struct Demand {
    /// Requests of all containers (max with init containers) plus RuntimeClass overhead.
    pub resources: Resources,
    pub gpu: GpuRequest,
}

/// A pod's place in a gang: the gang (in the pod's namespace), its role and rank.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize)]
pub struct GangMembership {
    pub gang: String,
    /// Role for per-role minimums (`master`, `worker` ...).
    pub role: Option<String>,
    /// Rank (Job completion index, `RANK`): neighbouring ranks are placed close together.
    pub rank: Option<u32>,
}

/// A pod as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct PodSpec {
    pub namespace: String,
    pub name: String,
    pub labels: Labels,
    /// Set for pods that must start together with others.
    pub gang: Option<GangMembership>,
    /// Resolved PriorityClass value.
    pub priority: i32,
    pub priority_class: Option<String>,
    pub demand: Demand,
    pub constraints: PlacementConstraints,
    /// The LocalQueue (in the pod's namespace) it is submitted to; `None`: not queued,
    /// scheduled as soon as it fits, like kube-scheduler does.
    pub queue: Option<String>,
    pub preemption: PreemptionTerms,
}

/// How a pod takes part in preemption, as preemptor and as victim.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize)]
pub struct PreemptionTerms {
    /// `preemptionPolicy: Never` on its PriorityClass: it never preempts others.
    pub never_preempt: bool,
    /// It may not be preempted before it ran this long (ms).
    pub min_runtime: Option<u64>,
    /// It checkpoints every this many ms from its start (declared, for victim cost).
    pub checkpoint_interval: Option<u64>,
    /// It checkpoints on request within this many ms (`kestrel.dev/checkpoint-grace`):
    /// Kestrel asks it to checkpoint before evicting it.
    pub checkpoint_grace: Option<u64>,
    /// How long it takes to stop (terminationGracePeriodSeconds, in ms).
    pub termination_grace: u64,
    /// Declared runtime estimate (ms), for backfill and start-time prediction.
    pub runtime_estimate: Option<u64>,
}

impl PodSpec {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>, demand: Demand) -> Self {
        PodSpec {
            namespace: namespace.into(),
            name: name.into(),
            demand,
            ..Default::default()
        }
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req(key: &str, op: SelectorOperator, values: &[&str]) -> Requirement {
        Requirement {
            key: key.into(),
            operator: op,
            values: values.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn requirement_operators_follow_kubernetes() {
        use SelectorOperator::*;
        let l = labels(&[("gpu", "H100"), ("count", "8")]);
        assert!(req("gpu", In, &["A100", "H100"]).matches(&l));
        assert!(!req("gpu", NotIn, &["H100"]).matches(&l));
        assert!(
            req("zone", NotIn, &["a"]).matches(&l),
            "NotIn on absent key"
        );
        assert!(req("gpu", Exists, &[]).matches(&l));
        assert!(req("zone", DoesNotExist, &[]).matches(&l));
        assert!(req("count", Gt, &["7"]).matches(&l));
        assert!(!req("count", Lt, &["8"]).matches(&l));
        assert!(
            !req("gpu", Gt, &["1"]).matches(&l),
            "non-integer never matches Gt"
        );
    }

    #[test]
    fn tolerations_follow_kubernetes() {
        let t = Taint {
            key: "nvidia.com/gpu".into(),
            value: "true".into(),
            effect: TaintEffect::NoSchedule,
        };
        let tol = |key: &str, op, value: &str, effect| Toleration {
            key: key.into(),
            operator: op,
            value: value.into(),
            effect,
        };
        use TolerationOperator::*;
        assert!(tol("nvidia.com/gpu", Exists, "", None).tolerates(&t));
        assert!(tol(
            "nvidia.com/gpu",
            Equal,
            "true",
            Some(TaintEffect::NoSchedule)
        )
        .tolerates(&t));
        assert!(!tol("nvidia.com/gpu", Equal, "false", None).tolerates(&t));
        assert!(!tol("nvidia.com/gpu", Exists, "", Some(TaintEffect::NoExecute)).tolerates(&t));
        assert!(tol("", Exists, "", None).tolerates(&t));
        assert!(!tol("", Equal, "", None).tolerates(&t));
    }

    #[test]
    fn empty_term_matches_nothing_and_fields_match_name() {
        let node = NodeSpec::new("n1", Resources::new(1000, 1));
        assert!(!NodeSelectorTerm::default().matches(&node));
        let term = NodeSelectorTerm {
            match_expressions: vec![],
            match_fields: vec![req("metadata.name", SelectorOperator::In, &["n1"])],
        };
        assert!(term.matches(&node));
    }
}
