//! What the simulator runs: pod sets (one per workload object) and timed cluster events.

use kestrel_core::{GangSpec, GangTopology, Millis, NodeSpec, PodSpec};
pub use kestrel_objects::queues::QueueSetup;
use kestrel_objects::training::Plan;
use serde::Serialize;

/// The controller kind a pod set came from; decides how its pods are created and replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum JobKind {
    /// One pod that its owner brings back when it is preempted (an openb row, a generated
    /// notebook): it waits in the queue again.
    Pod,
    /// A Pod object with no controller: one pod, deleted when preempted, as Kubernetes
    /// does; nothing creates it again.
    BarePod,
    /// A batch Job: `parallelism` pods at a time until `completions` pods have succeeded.
    Job,
    /// Deployment or StatefulSet: `replicas` pods that run for the duration (or to the end).
    Service,
    /// One role of a TrainingJob ([`SimTraining`]): its pods are created, restarted and
    /// finished by the TrainingJob controller's decisions, the whole gang at once.
    Training,
}

/// One workload object to simulate: the pods one Pod, Job, Deployment, StatefulSet or
/// TrainingJob role creates from one template (a pod set, not necessarily a Job).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PodSet {
    pub kind: JobKind,
    /// The object's kind as written (`Pod`, `Job`, `Deployment`, `StatefulSet`, `openb`,
    /// `synthetic/training` ...), for reports.
    pub source_kind: String,
    pub namespace: String,
    pub name: String,
    /// When the object is created, from the simulation's start.
    pub arrival: Millis,
    /// How long each pod runs once bound; `None`: until the simulation ends.
    pub duration: Option<Millis>,
    /// Pods running at once (Job parallelism, replicas).
    pub parallelism: u32,
    /// Pods that must finish for the pod set to complete (Job completions; else = parallelism).
    pub completions: u32,
    /// The pod template; its name is the pod set's name (pods get a suffix).
    pub template: PodSpec,
    /// Share of its allocated GPUs a pod keeps busy (0..=1), for the utilization chart.
    pub gpu_utilization: f64,
}

impl PodSet {
    /// A single pod (its owner brings it back when preempted) created at `arrival` that
    /// runs `duration` and keeps its GPUs busy.
    pub fn pod(
        namespace: &str,
        name: impl Into<String>,
        arrival: Millis,
        duration: Millis,
        template: PodSpec,
    ) -> PodSet {
        PodSet {
            kind: JobKind::Pod,
            source_kind: "Pod".to_string(),
            namespace: namespace.to_string(),
            name: name.into(),
            arrival,
            duration: Some(duration),
            parallelism: 1,
            completions: 1,
            template,
            gpu_utilization: 1.0,
        }
    }
}

/// A change to the cluster at a given time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum ClusterChange {
    AddNode(NodeSpec),
    RemoveNode(String),
    Cordon(String),
    Uncordon(String),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterEvent {
    pub at: Millis,
    pub change: ClusterChange,
}

/// A cluster to simulate: the nodes at the start, and what happens to them later.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SimCluster {
    pub nodes: Vec<NodeSpec>,
    pub events: Vec<ClusterEvent>,
}

/// Everything to run: pod sets in input order, the gangs their pods belong to, and the
/// cluster's topology levels (widest first) when a Topology object gave them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Workload {
    /// The pod sets, in input order (the field keeps its earlier name).
    pub jobs: Vec<PodSet>,
    pub gangs: Vec<GangSpec>,
    pub topology_levels: Vec<String>,
    pub queues: QueueSetup,
    /// TrainingJobs: their roles are pod sets of kind [`JobKind::Training`].
    pub training: Vec<SimTraining>,
    /// The DeviceClass that serves `nvidia.com/gpu` on nodes whose GPUs DRA publishes.
    #[serde(skip)]
    pub gpu_backing: Option<kestrel_objects::dra::GpuBacking>,
}

impl Workload {
    /// A cluster node as this workload's DeviceClasses make it: serving `nvidia.com/gpu`
    /// from its DRA-published GPUs when a class backs it.
    pub fn node_spec(&self, node: &NodeSpec) -> NodeSpec {
        let mut node = node.clone();
        kestrel_objects::dra::GpuBacking::apply(self.gpu_backing.as_ref(), &mut node);
        node
    }
}

/// A TrainingJob as the simulator runs it: the live controller's plan, the pod sets that hold
/// its roles' pod templates, and the failures to inject.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimTraining {
    /// What [`kestrel_objects::training::plan`] made of the object (validated).
    #[serde(skip)]
    pub plan: Plan,
    /// Per role of the plan, in its order: the index of the pod set in [`Workload::jobs`].
    pub role_jobs: Vec<usize>,
    pub failures: Vec<InjectedFailure>,
}

impl SimTraining {
    /// The pod set (an index into [`Workload::jobs`]) that holds a role's template.
    pub fn role_job(&self, role: &str) -> Option<usize> {
        let i = self.plan.roles.iter().position(|r| r.name == role)?;
        self.role_jobs.get(i).copied()
    }
}

/// A member's pod fails with `exit` once it has run `after` (each entry fires once, in
/// the first run of the member that lasts that long).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InjectedFailure {
    /// `Master` or `Worker`, as in the plan.
    pub role: String,
    pub index: u32,
    pub after: Millis,
    pub exit: i32,
}

impl Workload {
    /// The same workload with every gang's topology request (required, preferred, slice)
    /// dropped: gangs still start whole, wherever they fit.
    pub fn topology_blind(&self) -> Workload {
        let mut blind = self.clone();
        for gang in &mut blind.gangs {
            gang.topology = GangTopology::default();
        }
        blind
    }
}
