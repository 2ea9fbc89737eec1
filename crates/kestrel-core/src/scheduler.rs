//! The scheduling engine: the pending queue and `schedule(now) -> Decisions`.
//!
//! A cycle takes pods in queue order (priority, then arrival) and places each on the best
//! node that fits, committing it to the index before the next pod is looked at. A pod that
//! fits nowhere is parked with its explanation; parked pods are retried only after capacity
//! was freed or nodes changed, so an idle cycle costs nothing and a busy one costs what
//! changed. Pods with the same constraints and demand share one failure per generation.

use crate::cluster::{
    Bucket, ClassId, ClusterIndex, GpuAssignment, NodeId, NodeState, PER_NODE_LABELS,
};
use crate::explain::{GangProblem, NodeReason, Unschedulable};
use crate::gang::GangIndex;
use crate::hints::{Hints, WakeOn};
use crate::model::{
    Demand, GpuRequest, NodeSelectorTerm, NodeSpec, PlacementConstraints, PodSpec, TaintEffect,
};
use crate::packing::PackingScorer;
use crate::policy::Policy;
use crate::preempt::{Preemption, VictimOrder, WorkloadKey};
use crate::queue::{
    Admission, ClusterQueueSpec, CohortSpec, CqId, LocalQueueSpec, QueueBook, QueueError,
    QueueProblem, QuotaFit, QuotaUsage, ResourceFlavor, PODS_RESOURCE,
};
use crate::resources::{Resources, GPU_RESOURCE};
use crate::rng::Rng;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// Time in milliseconds, supplied by the driver (virtual or wall clock).
pub type Millis = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct PodId(pub u32);

#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum PodPhase {
    Pending,
    Bound {
        node: NodeId,
        gpus: GpuAssignment,
        at: Millis,
    },
    /// Finished or deleted; kept so ids stay valid.
    Gone,
}

#[derive(Debug, Clone)]
pub struct PodRecord {
    pub spec: PodSpec,
    pub phase: PodPhase,
    pub submitted_at: Millis,
    /// Why the pod is pending, from the last cycle that tried it.
    pub pending_reason: Option<Arc<Unschedulable>>,
    /// The queue quota it is charged to while bound.
    pub admission: Option<Admission>,
    /// Asked to leave for a preemptor; still holds its place until evicted.
    pub evicting: bool,
    /// When it last checkpointed (reported by the workload), for victim cost.
    pub last_checkpoint: Option<Millis>,
    pub(crate) link: QueueLink,
    /// What it counts against queue quota, per resource name. A share by GPU memory has
    /// its `nvidia.com/gpu` entry only while bound: the share its device holds (pending,
    /// it counts the most it could take, see [`Scheduler::workload_request`]).
    pub(crate) quota_request: QuotaRequest,
    seq: u64,
    pub(crate) constraint: u32,
    /// Its own constraints, before a flavor's node labels were added.
    pub(crate) base_constraint: u32,
    pub(crate) signature: u32,
    /// When it was parked (a [`crate::hints`] sequence number), and what wakes it.
    pub(crate) parked_at: u64,
    pub(crate) wake_on: WakeOn,
    /// Its last attempt found no room after an admission freed quota cannot change
    /// (within nominal quota, one flavor per resource group; or no queue).
    pub(crate) quota_settled: bool,
}

/// Which ClusterQueue a pod belongs to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum QueueLink {
    Unqueued,
    Cq(CqId),
    /// It names a queue that does not lead to a usable ClusterQueue.
    Broken(QueueProblem),
}

impl PodRecord {
    pub(crate) fn queue_key(&self, id: PodId) -> QueueKey {
        (Reverse(self.spec.priority), self.seq, id)
    }
}

pub(crate) type QueueKey = (Reverse<i32>, u64, PodId);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SchedulerConfig {
    pub policy: Policy,
    /// Seeds the Random policy; every other decision is seed-independent.
    pub seed: u64,
    /// How preemption victims are ranked.
    pub victim_order: VictimOrder,
    /// Longest hold of a reservation for the highest-priority workload that does not fit
    /// (so small work cannot starve a big gang forever); 0: no reservations.
    pub head_reservation: Millis,
    /// Fair share counts recent borrowing too: each queue's borrowed share decays with
    /// this half-life and adds to what it borrows now; 0: only what it borrows now.
    pub fair_share_half_life: Millis,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            policy: Policy::Kestrel,
            seed: 42,
            victim_order: VictimOrder::CheckpointAware,
            head_reservation: 0,
            fair_share_half_life: 0,
        }
    }
}

/// A pod placed on a node with its devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Binding {
    pub pod: PodId,
    pub node: NodeId,
    pub gpus: GpuAssignment,
}

/// What a cycle decided. `unschedulable` lists pods whose reason is new or changed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decisions {
    pub bindings: Vec<Binding>,
    pub unschedulable: Vec<(PodId, Arc<Unschedulable>)>,
    /// Pods dropped from the queue because their gang timed out (reason on the pod).
    pub expired: Vec<PodId>,
    /// Workloads asked to leave: the driver evicts them (after a checkpoint when they
    /// offer one) and reports each with [`Scheduler::evict`].
    pub preemptions: Vec<Preemption>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    #[error("node {0:?} already exists; node names must be unique")]
    DuplicateNode(String),
    #[error("node {0:?} does not exist")]
    UnknownNode(String),
    #[error("node {node:?}: {field}: {why}")]
    InvalidNode {
        node: String,
        field: &'static str,
        why: String,
    },
    #[error("pod {0:?} is not known to the scheduler")]
    UnknownPod(PodId),
    #[error("{0}")]
    Queue(#[from] QueueError),
}

/// A class-level verdict for one set of constraints.
#[derive(Debug, Clone)]
enum ClassVerdict {
    Feasible { score: i64 },
    Infeasible(NodeReason),
}

#[derive(Debug, Clone)]
struct ConstraintEntry {
    constraints: PlacementConstraints,
    /// The constraints name per-node labels or fields: check node by node.
    per_node: bool,
    verdicts: Vec<ClassVerdict>,
    /// Where to look for nodes (unless `per_node`), as of the cluster layout in `.0`.
    sources: Option<(u64, Vec<Source>)>,
}

/// Buckets a placement visits, with the static score of the nodes found there.
#[derive(Debug, Clone, Copy)]
enum Source {
    /// One class the constraints allow.
    Class { class: usize, score: i64 },
    /// A shape whose allowed classes all score alike, visited as one: nodes of classes
    /// the constraints rule out are skipped.
    Shape { shape: usize, score: i64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    neg_score: i64,
    key: u64,
    node: NodeId,
}

/// The engine. Drivers feed it nodes and pods, call [`Scheduler::schedule`], and carry out
/// the decisions.
#[derive(Debug, Clone)]
pub struct Scheduler {
    config: SchedulerConfig,
    pub(crate) cluster: ClusterIndex,
    pub(crate) pods: Vec<PodRecord>,
    pub(crate) active: BTreeSet<QueueKey>,
    pub(crate) parked: Vec<QueueKey>,
    pub(crate) gangs: GangIndex,
    /// Topology domains per level, until the next node change.
    pub(crate) domain_cache: HashMap<String, Vec<crate::gang::Domain>>,
    /// Off during gang attempts: a pod that fails while its peers hold capacity
    /// tentatively must not mark its signature as failed.
    pub(crate) record_failures: bool,
    /// Off for runs that only need decisions ([`Scheduler::set_full_explanations`]).
    full_explanations: bool,
    constraints: Vec<ConstraintEntry>,
    constraint_ids: HashMap<PlacementConstraints, u32>,
    signature_ids: HashMap<(u32, Demand), u32>,
    /// Per signature: the generation it last failed in, whether it could use reserved
    /// nodes, and the reason.
    failed: Vec<Option<(u64, bool, Arc<Unschedulable>)>>,
    /// Bumped whenever capacity may have grown (release, node added or changed).
    pub(crate) generation: u64,
    parked_generation: u64,
    rng: Rng,
    packing: PackingScorer,
    next_seq: u64,
    pub(crate) pending: usize,
    pub(crate) queues: QueueBook,
    /// Bound pods per ClusterQueue and by priority: preemption candidates.
    pub(crate) bound_by_cq: BTreeMap<CqId, BTreeSet<PodId>>,
    pub(crate) bound_by_priority: BTreeSet<(i32, PodId)>,
    /// PodDisruptionBudgets by (namespace, name): victims that would break one go last.
    pub(crate) disruption_budgets: BTreeMap<(String, String), crate::preempt::DisruptionBudget>,
    /// Victims still to leave, per preemptor.
    pub(crate) awaiting: HashMap<WorkloadKey, u32>,
    pub(crate) preemptor_of: HashMap<PodId, WorkloadKey>,
    /// Set while trying "what if these victims left": cached failures do not apply.
    pub(crate) probing: bool,
    pub(crate) reservation: Option<Reservation>,
    /// The last holder, which waits a turn before it may reserve again.
    last_holder: Option<WorkloadKey>,
    /// The time of the cycle in progress.
    now: Millis,
    /// Preemptors whose victims are all gone: they go first in the next cycle, so the room
    /// made for them is not taken by others.
    pub(crate) ready_preemptors: Vec<WorkloadKey>,
    /// When parked workloads should be retried for time's sake alone.
    pub(crate) wake_at: std::cell::Cell<Option<Millis>>,
    /// Room promised to preemptors whose victims are leaving (Kubernetes' nominated
    /// node): pods of no higher priority fit on these nodes only beside them, so the room
    /// made by an eviction is not taken by the victim itself or others below.
    pub(crate) holds: BTreeMap<NodeId, Vec<Hold>>,
    /// What changed since workloads were parked, and what wakes them.
    pub(crate) hints: Hints,
}

/// One pod of a preempting workload, promised room on a node.
#[derive(Debug, Clone)]
pub(crate) struct Hold {
    pub(crate) pod: PodId,
    pub(crate) workload: WorkloadKey,
    pub(crate) priority: i32,
    /// The devices it was planned on.
    pub(crate) gpus: GpuAssignment,
}

/// Nodes held for the workload at the head of the queue until it fits or `until`.
#[derive(Debug, Clone)]
pub(crate) struct Reservation {
    pub(crate) holder: WorkloadKey,
    pub(crate) holder_name: String,
    pub(crate) nodes: BTreeSet<NodeId>,
    pub(crate) until: Millis,
    /// When the reserved nodes' pods end by their runtime estimates (`None`: some pod
    /// has none); work that ends before it may backfill.
    pub(crate) start_estimate: Option<Millis>,
}

/// Per-cycle queue state.
#[derive(Debug, Default)]
pub(crate) struct Cycle {
    /// StrictFIFO queues whose head did not fit quota this cycle.
    pub(crate) blocked: BTreeSet<CqId>,
    /// Workloads that fit only by borrowing, taken after every queue's nominal work.
    pub(crate) borrowers: BTreeMap<CqId, BTreeSet<QueueKey>>,
    pub(crate) borrowing_phase: bool,
    /// Preemption searches that found nothing this cycle: workloads alike (same trigger,
    /// queue, priority, request and constraints) do not search again.
    pub(crate) no_victims: std::collections::HashSet<PreemptionSearch>,
    /// Quota refusals this cycle by (queue, gang?, pod signature or gang id).
    pub(crate) quota_refused: HashMap<(CqId, bool, u32), Arc<Unschedulable>>,
    /// Whether the cycle's first capacity failure was seen (it may reserve).
    pub(crate) head_seen: bool,
}

pub(crate) type PreemptionSearch = (bool, Option<CqId>, i32, QuotaRequest, u32);

/// What a workload counts against queue quota, by resource name in order: shared, so a
/// single pod's request is handed around without copying it.
pub(crate) type QuotaRequest = Arc<[(String, i64)]>;

/// What admission and placement made of a workload.
pub(crate) enum Attempt {
    Placed(Vec<(PodId, NodeId, GpuAssignment)>),
    /// Fits quota only by borrowing: wait for the borrowing phase of the cycle.
    Deferred,
    Failed(Arc<Unschedulable>),
}

/// Fitting nodes per bucket the packing scorer compares (the best by the policy key).
const PACKING_SHORTLIST: usize = 8;

impl Scheduler {
    pub fn new(config: SchedulerConfig) -> Self {
        Scheduler {
            config,
            cluster: ClusterIndex::default(),
            pods: Vec::new(),
            active: BTreeSet::new(),
            parked: Vec::new(),
            gangs: GangIndex::default(),
            domain_cache: HashMap::new(),
            record_failures: true,
            full_explanations: true,
            constraints: Vec::new(),
            constraint_ids: HashMap::new(),
            signature_ids: HashMap::new(),
            failed: Vec::new(),
            generation: 0,
            parked_generation: 0,
            rng: Rng::new(config.seed),
            packing: PackingScorer::default(),
            next_seq: 0,
            pending: 0,
            queues: QueueBook::default(),
            bound_by_cq: BTreeMap::new(),
            bound_by_priority: BTreeSet::new(),
            disruption_budgets: BTreeMap::new(),
            awaiting: HashMap::new(),
            preemptor_of: HashMap::new(),
            probing: false,
            reservation: None,
            last_holder: None,
            now: 0,
            wake_at: std::cell::Cell::new(None),
            ready_preemptors: Vec::new(),
            holds: BTreeMap::new(),
            hints: Hints::default(),
        }
    }

    pub fn config(&self) -> SchedulerConfig {
        self.config
    }

    pub fn cluster(&self) -> &ClusterIndex {
        &self.cluster
    }

    pub fn pod(&self, id: PodId) -> &PodRecord {
        &self.pods[id.0 as usize]
    }

    /// The GPU thousandths a pod counts: bound, what its devices hold; pending, its
    /// request, where a share by GPU memory counts the most it could take on the cluster's
    /// devices (0 when no device has the memory: it cannot be placed).
    pub fn gpu_milli(&self, id: PodId) -> u64 {
        let record = &self.pods[id.0 as usize];
        match (&record.phase, record.spec.demand.gpu) {
            (PodPhase::Bound { gpus, .. }, GpuRequest::Memory { .. }) => gpus.milli(),
            (_, gpu) => self.gpu_milli_bounds(gpu).1,
        }
    }

    /// The least GPU thousandths a pending pod may take on the cluster's devices (a share
    /// by memory: its share of the largest device).
    pub(crate) fn least_gpu_milli(&self, id: PodId) -> u64 {
        self.gpu_milli_bounds(self.pods[id.0 as usize].spec.demand.gpu)
            .0
    }

    /// The least and the most GPU thousandths a request may take on the cluster's devices:
    /// equal but for a share by GPU memory (its share on the largest device and on the
    /// smallest one that holds it; `(0, 0)` when none does).
    pub(crate) fn gpu_milli_bounds(&self, gpu: GpuRequest) -> (u64, u64) {
        match gpu {
            GpuRequest::Memory { mib } => {
                let most = self.cluster.memory_share_milli(mib).map_or(0, u64::from);
                let least = self
                    .cluster
                    .largest_device_memory()
                    .and_then(|m| crate::model::memory_share_milli(mib, m))
                    .map_or(0, u64::from);
                (least, most)
            }
            gpu => (gpu.milli(), gpu.milli()),
        }
    }

    pub fn pods(&self) -> impl Iterator<Item = (PodId, &PodRecord)> {
        self.pods
            .iter()
            .enumerate()
            .map(|(i, p)| (PodId(i as u32), p))
    }

    /// Pods waiting for a node.
    pub fn pending_count(&self) -> usize {
        self.pending
    }

    /// Pending pods in queue order (priority, then arrival).
    pub fn pending(&self) -> Vec<PodId> {
        let mut keys: Vec<QueueKey> = self.active.iter().copied().collect();
        keys.extend(self.parked.iter().copied());
        keys.sort_unstable();
        keys.into_iter().map(|(_, _, id)| id).collect()
    }

    fn node_key(&self) -> impl Fn(&ClusterIndex, &NodeState) -> u64 {
        let policy = self.config.policy;
        move |cluster, node| policy.node_key(cluster, node)
    }

    /// Nodes came, went or changed labels: topology domains are recomputed.
    fn nodes_changed(&mut self) {
        self.domain_cache.clear();
    }

    pub(crate) fn capacity_may_have_grown(&mut self) {
        self.generation += 1;
        self.hints.anything();
    }

    /// Queueing hints on (the default): a pod's end or binding wakes only the parked
    /// workloads it may help ([`crate::hints`]). Off, it wakes them all; decisions are
    /// the same either way.
    pub fn set_queueing_hints(&mut self, on: bool) {
        self.hints.off = !on;
    }

    pub(crate) fn constraint_of(&self, id: u32) -> &PlacementConstraints {
        &self.constraints[id as usize].constraints
    }

    pub fn add_node(&mut self, spec: NodeSpec) -> Result<NodeId, ClusterError> {
        if self.cluster.id_of(&spec.name).is_some() {
            return Err(ClusterError::DuplicateNode(spec.name));
        }
        validate_node(&spec)?;
        let max_cpu_before = self.cluster.max_node_cpu;
        let key = self.node_key();
        let id = self.cluster.insert(spec, &key);
        self.nodes_changed();
        if self.config.policy.uses_max_node_cpu() && self.cluster.max_node_cpu != max_cpu_before {
            self.cluster.rekey_all(&key);
        }
        self.capacity_may_have_grown();
        Ok(id)
    }

    /// Cordons (`true`) or uncordons a node. Pods on it keep running.
    pub fn set_unschedulable(
        &mut self,
        name: &str,
        unschedulable: bool,
    ) -> Result<(), ClusterError> {
        let id = self
            .cluster
            .id_of(name)
            .ok_or_else(|| ClusterError::UnknownNode(name.to_string()))?;
        let mut spec = self.cluster.node(id).spec.clone();
        if spec.unschedulable != unschedulable {
            spec.unschedulable = unschedulable;
            self.update_node(spec)?;
        }
        Ok(())
    }

    /// Adds a node, or replaces the spec of a known one (labels, taints, cordon, capacity,
    /// devices) keeping the pods on it, as a Node watch delivers changes.
    pub fn update_node(&mut self, spec: NodeSpec) -> Result<NodeId, ClusterError> {
        let Some(id) = self.cluster.id_of(&spec.name) else {
            return self.add_node(spec);
        };
        validate_node(&spec)?;
        let bound: Vec<(PodId, Resources, GpuAssignment)> = self
            .cluster
            .node(id)
            .pods
            .iter()
            .map(|&pod| {
                let record = &self.pods[pod.0 as usize];
                let PodPhase::Bound { gpus, .. } = &record.phase else {
                    unreachable!("pods on a node are bound")
                };
                (pod, record.spec.demand.resources.clone(), gpus.clone())
            })
            .collect();
        let max_cpu_before = self.cluster.max_node_cpu;
        let key = self.node_key();
        self.cluster.respec(id, spec, &bound, &key);
        self.nodes_changed();
        if self.config.policy.uses_max_node_cpu() && self.cluster.max_node_cpu != max_cpu_before {
            self.cluster.rekey_all(&key);
        }
        self.capacity_may_have_grown();
        Ok(id)
    }

    /// Accounts a pod that is already bound (by an earlier leader, another scheduler, or
    /// before a restart). Reality wins over capacity: the pod is counted even if the node
    /// looks full. `gpus`: the devices recorded on the pod; `None` picks free ones.
    pub fn restore_bound(
        &mut self,
        spec: PodSpec,
        node_name: &str,
        gpus: Option<GpuAssignment>,
        now: Millis,
    ) -> Result<PodId, ClusterError> {
        let node = self
            .cluster
            .id_of(node_name)
            .ok_or_else(|| ClusterError::UnknownNode(node_name.to_string()))?;
        let state = self.cluster.node(node);
        let gpus = match gpus {
            Some(gpus) => state.known_devices(&gpus),
            None if state.gpu_fits(spec.demand.gpu) => state.choose_gpus(spec.demand.gpu, None),
            None => GpuAssignment::None,
        };
        let id = self.submit(spec, now);
        let key = self.pods[id.0 as usize].queue_key(id);
        self.active.remove(&key);
        // A queued pod counts against its ClusterQueue's quota as it did when admitted.
        if let QueueLink::Cq(cq) = self.pods[id.0 as usize].link {
            let labels = &self.cluster.node(node).spec.labels;
            self.pods[id.0 as usize].admission = Some(self.queues.restored_admission(cq, labels));
        }
        self.bind(id, node, gpus, now);
        Ok(id)
    }

    /// Undoes a binding the driver could not carry out (the API refused it): frees what the
    /// pod held and puts it back in the queue.
    pub fn unbind(&mut self, id: PodId) -> Result<(), ClusterError> {
        let bound = self
            .pods
            .get(id.0 as usize)
            .ok_or(ClusterError::UnknownPod(id))?;
        if !matches!(bound.phase, PodPhase::Bound { .. }) {
            return Err(ClusterError::UnknownPod(id));
        }
        self.release_to_pending(id);
        let key = self.pods[id.0 as usize].queue_key(id);
        self.active.insert(key);
        self.capacity_may_have_grown();
        Ok(())
    }

    /// Frees what a bound pod holds and makes it pending again (not queued).
    pub(crate) fn release_to_pending(&mut self, id: PodId) {
        let record = &mut self.pods[id.0 as usize];
        let PodPhase::Bound { node, gpus, .. } =
            std::mem::replace(&mut record.phase, PodPhase::Pending)
        else {
            unreachable!("release_to_pending on a pod that is not bound")
        };
        let resources = record.spec.demand.resources.clone();
        self.cluster.unindex(node);
        self.cluster
            .node_mut_unindexed(node)
            .release(id, &resources, &gpus);
        let node_key = self.node_key();
        self.cluster.reindex(node, &node_key);
        self.unaccount(id);
        self.pending += 1;
    }

    /// Returns a pod's queue charge and takes it out of the preemption indexes.
    fn unaccount(&mut self, id: PodId) {
        let record = &mut self.pods[id.0 as usize];
        if let Some(admission) = record.admission.take() {
            self.queues.charge(&admission, &record.quota_request, -1);
            if let Some(set) = self.bound_by_cq.get_mut(&admission.cq) {
                set.remove(&id);
            }
        }
        if let GpuRequest::Memory { .. } = record.spec.demand.gpu {
            set_quota_gpu(&mut record.quota_request, 0);
        }
        self.bound_by_priority.remove(&(record.spec.priority, id));
        record.evicting = false;
        if let Some(preemptor) = self.preemptor_of.remove(&id) {
            if let Some(left) = self.awaiting.get_mut(&preemptor) {
                *left = left.saturating_sub(1);
                if *left == 0 {
                    self.awaiting.remove(&preemptor);
                    self.ready_preemptors.push(preemptor);
                }
            }
        }
    }

    /// The best node for a pod among `nodes` (a topology domain), by preference score and
    /// policy key.
    pub(crate) fn place_among(
        &mut self,
        id: PodId,
        nodes: &[NodeId],
    ) -> Option<(NodeId, GpuAssignment)> {
        let constraint = self.pods[id.0 as usize].constraint;
        self.verdicts(constraint);
        self.plan_sources(constraint);
        let reserved = match &self.reservation {
            Some(r) if !self.may_use_reserved(id) => Some(&r.nodes),
            _ => None,
        };
        let demand = &self.pods[id.0 as usize].spec.demand;
        let entry = &self.constraints[constraint as usize];
        let best = nodes
            .iter()
            .filter(|n| !reserved.is_some_and(|r| r.contains(n)))
            .filter_map(|&n| {
                let node = self.cluster.node(n);
                let score = if entry.per_node {
                    static_check(&entry.constraints, &node.spec).ok()?
                } else {
                    match &entry.verdicts[node.class.0 as usize] {
                        ClassVerdict::Feasible { score } => *score,
                        ClassVerdict::Infeasible(_) => return None,
                    }
                };
                (node.fits_pod(demand, &entry.constraints) && self.fits_beside_holds(id, n))
                    .then_some((-score, node.slot.1, n))
            })
            .min();
        best.map(|(_, _, node)| {
            let state = self.cluster.node(node);
            let gpus = if entry.constraints.single_numa_node {
                state.choose_gpus_single_numa(demand.gpu)
            } else {
                Some(state.choose_gpus(demand.gpu, None))
            };
            (node, gpus.expect("the node fits the pod"))
        })
    }

    /// Why this pod fits no node now (the full per-node count).
    pub(crate) fn explain_pod(&self, id: PodId) -> Unschedulable {
        let record = &self.pods[id.0 as usize];
        self.why_not(
            id,
            record.constraint,
            &record.spec.demand,
            self.may_use_reserved(id),
        )
    }

    /// Turns the node-by-node explanation of pods that fit nowhere on (the default) or off.
    /// Off, such a pod gets a one-line reason that says only whether some node passes its
    /// static predicates, which is all the engine's decisions read of an explanation: a
    /// forward run that predicts start times needs no more, and explaining every pending
    /// pod over every node after each completion is most of its cost.
    pub fn set_full_explanations(&mut self, on: bool) {
        self.full_explanations = on;
    }

    /// [`Scheduler::explain`], or its short form when explanations are off.
    fn why_not(&self, id: PodId, constraint: u32, demand: &Demand, access: bool) -> Unschedulable {
        if self.full_explanations {
            return self.explain(id, constraint, demand, access);
        }
        // Every reason a node that passes the static predicates gives is one of capacity
        // (resources, pod count, fragmentation, reservation, nomination): the short form
        // keeps `Unschedulable::is_capacity` as the full one has it.
        let entry = &self.constraints[constraint as usize];
        let passes = self
            .cluster
            .classes
            .iter()
            .enumerate()
            .filter(|(_, class)| class.len > 0)
            .any(|(ci, class)| match (&entry.verdicts[ci], entry.per_node) {
                (ClassVerdict::Feasible { .. }, false) => true,
                (ClassVerdict::Infeasible(_), false) => false,
                (_, true) => class.buckets.iter().flat_map(|b| b.iter()).any(|&(_, n)| {
                    static_check(&entry.constraints, &self.cluster.node(n).spec).is_ok()
                }),
            });
        let total = self.cluster.len() as u32;
        let reason = if passes {
            NodeReason::Insufficient("room (explanations off)".to_string())
        } else {
            NodeReason::AffinityMismatch
        };
        Unschedulable {
            queue: None,
            gang: None,
            total_nodes: total,
            reasons: vec![(reason, total)],
            gpu_fragmentation: None,
        }
    }

    /// Removes a node. The pods that ran on it return to the queue (in their original
    /// order), as controllers recreate the pods of a lost node; their ids are returned.
    pub fn remove_node(&mut self, name: &str) -> Result<Vec<PodId>, ClusterError> {
        let id = self
            .cluster
            .id_of(name)
            .ok_or_else(|| ClusterError::UnknownNode(name.to_string()))?;
        let sizes = self.cluster.device_memory_sizes();
        let state = self.cluster.remove(id);
        self.holds.remove(&id);
        self.nodes_changed();
        if self.cluster.device_memory_sizes() < sizes {
            // The most a pending share by memory could take may have shrunk: it may now
            // fit its queue's quota.
            self.capacity_may_have_grown();
        }
        let evicted: Vec<PodId> = state.pods.iter().copied().collect();
        for &pod in &evicted {
            self.unaccount(pod);
            let record = &mut self.pods[pod.0 as usize];
            record.phase = PodPhase::Pending;
            self.active.insert(record.queue_key(pod));
            self.pending += 1;
        }
        Ok(evicted)
    }

    /// Adds a pod to the queue.
    pub fn submit(&mut self, spec: PodSpec, now: Millis) -> PodId {
        let constraint = self.intern_constraints(&spec.constraints);
        let signature = self.intern_signature(constraint, spec.demand.clone());
        match spec.demand.gpu {
            // The mix learns a share by memory as the share it takes on the cluster's
            // smallest device that holds it.
            GpuRequest::Memory { mib } => {
                if let Some(milli) = self.cluster.memory_share_milli(mib) {
                    let gpu = match milli {
                        1000 => GpuRequest::Whole(1),
                        milli => GpuRequest::Shared { milli },
                    };
                    self.packing.observe(&Demand {
                        resources: spec.demand.resources.clone(),
                        gpu,
                    });
                }
            }
            _ => self.packing.observe(&spec.demand),
        }
        let id = PodId(self.pods.len() as u32);
        let link = self.link_of(&spec);
        let quota_request = quota_request(&spec);
        let record = PodRecord {
            spec,
            phase: PodPhase::Pending,
            submitted_at: now,
            pending_reason: None,
            admission: None,
            evicting: false,
            last_checkpoint: None,
            link,
            quota_request,
            seq: self.next_seq,
            constraint,
            base_constraint: constraint,
            signature,
            parked_at: 0,
            wake_on: WakeOn::Any,
            quota_settled: false,
        };
        self.next_seq += 1;
        self.active.insert(record.queue_key(id));
        if let Some(membership) = &record.spec.gang {
            let gang = self.gangs.id(&record.spec.namespace, &membership.gang);
            let state = &mut self.gangs.gangs[gang.0 as usize];
            state.first_seen.get_or_insert(now);
            let members = &mut state.members;
            // A new member may complete the gang: its waiting peers get another look.
            let peers: BTreeSet<PodId> = members.iter().copied().collect();
            members.insert(id);
            if !peers.is_empty() {
                let parked_peers: Vec<QueueKey> = self
                    .parked
                    .iter()
                    .copied()
                    .filter(|k| peers.contains(&k.2))
                    .collect();
                self.parked.retain(|k| !peers.contains(&k.2));
                self.active.extend(parked_peers);
            }
        }
        self.pods.push(record);
        self.pending += 1;
        id
    }

    /// A pod ended (completed, failed or deleted): releases what it held, or takes it out
    /// of the queue if it never ran.
    pub fn finish(&mut self, id: PodId) -> Result<(), ClusterError> {
        let record = self
            .pods
            .get_mut(id.0 as usize)
            .ok_or(ClusterError::UnknownPod(id))?;
        if let Some(membership) = &record.spec.gang {
            if let Some(gang) = self.gangs.lookup(&record.spec.namespace, &membership.gang) {
                self.gangs.gangs[gang.0 as usize].members.remove(&id);
            }
        }
        if matches!(record.phase, PodPhase::Pending) && !self.holds.is_empty() {
            let workload = self.workload_of(id);
            self.release_holds(workload);
        }
        let record = &mut self.pods[id.0 as usize];
        match std::mem::replace(&mut record.phase, PodPhase::Gone) {
            PodPhase::Gone => return Err(ClusterError::UnknownPod(id)),
            PodPhase::Pending => {
                let key = record.queue_key(id);
                if !self.active.remove(&key) {
                    self.parked.retain(|k| *k != key);
                }
                self.pending -= 1;
            }
            PodPhase::Bound { node, gpus, .. } => {
                let resources = record.spec.demand.resources.clone();
                let cq = record.admission.as_ref().map(|a| a.cq);
                let gang = record.spec.gang.is_some();
                self.cluster.unindex(node);
                self.cluster
                    .node_mut_unindexed(node)
                    .release(id, &resources, &gpus);
                let key = self.node_key();
                self.cluster.reindex(node, &key);
                self.unaccount(id);
                self.log_release(node, cq, gang);
            }
        }
        Ok(())
    }

    /// One scheduling cycle at time `now`.
    ///
    /// Workloads go in queue order (priority, then arrival). A queued workload that fits
    /// its ClusterQueue only by borrowing waits for the second phase, where queues take
    /// turns by fair share (the least borrowed, by weight, first), so every queue's
    /// nominal quota is served before anyone borrows.
    pub fn schedule(&mut self, now: Millis) -> Decisions {
        self.now = now;
        if self.reservation.as_ref().is_some_and(|r| now >= r.until) {
            self.release_reservation();
        }
        if self.wake_at.get().is_some_and(|w| now >= w) {
            self.wake_at.set(None);
            self.capacity_may_have_grown();
        }
        self.hints.begin_cycle();
        if self.parked_generation != self.generation {
            self.wake_parked();
            self.parked_generation = self.generation;
        }
        if self.config.fair_share_half_life > 0 {
            self.queues
                .decay_shares(now, self.config.fair_share_half_life);
        }
        let mut decisions = Decisions::default();
        self.drain_stopped_queues(now, &mut decisions);
        let mut cycle = Cycle::default();
        for preemptor in std::mem::take(&mut self.ready_preemptors) {
            let first = match preemptor {
                WorkloadKey::Pod(p) => Some(p),
                WorkloadKey::Gang(g) => self.gangs.gangs[g.0 as usize]
                    .members
                    .iter()
                    .copied()
                    .find(|&p| self.pods[p.0 as usize].phase == PodPhase::Pending),
            };
            let Some(pod) = first.filter(|&p| self.pods[p.0 as usize].phase == PodPhase::Pending)
            else {
                continue;
            };
            let key = self.pods[pod.0 as usize].queue_key(pod);
            if self.active.remove(&key) {
                self.consider(key, now, &mut cycle, &mut decisions);
            }
        }
        while let Some(key) = self.active.pop_first() {
            self.consider(key, now, &mut cycle, &mut decisions);
        }
        cycle.borrowing_phase = true;
        while let Some(key) = self.next_borrower(&mut cycle) {
            self.consider(key, now, &mut cycle, &mut decisions);
        }
        decisions
    }

    /// Whether a pod may use reserved nodes: the holder's pods, and work whose runtime
    /// estimate ends before the holder's estimated start (backfill).
    pub(crate) fn may_use_reserved(&self, id: PodId) -> bool {
        let Some(r) = &self.reservation else {
            return true;
        };
        if self.workload_of(id) == r.holder {
            return true;
        }
        let estimate = self.pods[id.0 as usize].spec.preemption.runtime_estimate;
        matches!((estimate, r.start_estimate), (Some(e), Some(start)) if self.now + e <= start)
    }

    /// Promises a preemptor the room of its planned placement until it binds or tries again.
    pub(crate) fn hold_for(
        &mut self,
        workload: WorkloadKey,
        placed: &[(PodId, NodeId, GpuAssignment)],
    ) {
        self.release_holds(workload);
        for (pod, node, gpus) in placed {
            let priority = self.pods[pod.0 as usize].spec.priority;
            self.holds.entry(*node).or_default().push(Hold {
                pod: *pod,
                workload,
                priority,
                gpus: gpus.clone(),
            });
        }
    }

    /// The node whose room is held for a preempting pod (Kubernetes' nominated node).
    pub fn nominated_node(&self, pod: PodId) -> Option<NodeId> {
        self.holds
            .iter()
            .find(|(_, held)| held.iter().any(|h| h.pod == pod))
            .map(|(node, _)| *node)
    }

    /// Drops a workload's promised room (it bound, left, or must choose again).
    pub(crate) fn release_holds(&mut self, workload: WorkloadKey) {
        if self.holds.is_empty() {
            return;
        }
        let before: usize = self.holds.values().map(Vec::len).sum();
        self.holds.retain(|_, held| {
            held.retain(|h| h.workload != workload);
            !held.is_empty()
        });
        if self.holds.values().map(Vec::len).sum::<usize>() != before {
            self.capacity_may_have_grown();
        }
    }

    /// The holds on a node that bind pod `id`: other workloads' of no lower priority.
    fn holds_against(&self, id: PodId, node: NodeId) -> impl Iterator<Item = &Hold> {
        let held = self.holds.get(&node).map_or(&[][..], Vec::as_slice);
        let priority = self.pods[id.0 as usize].spec.priority;
        let own = (!held.is_empty()).then(|| self.workload_of(id));
        held.iter()
            .filter(move |h| h.priority >= priority && Some(h.workload) != own)
    }

    /// Whether pod `id` (whose demand fits the node's free room) also fits beside the
    /// room promised there to preemptors it may not overtake: on a copy of the node with
    /// their planned devices taken (those free by now), by the engine's own fit, NUMA
    /// alignment included.
    fn fits_beside_holds(&self, id: PodId, node_id: NodeId) -> bool {
        if self.holds.is_empty() {
            return true;
        }
        let mut against = self.holds_against(id, node_id).peekable();
        if against.peek().is_none() {
            return true;
        }
        let mut node = self.cluster.node(node_id).clone();
        for h in against {
            let held = &self.pods[h.pod.0 as usize].spec;
            node.reserve_free(&held.demand.resources, &h.gpus);
        }
        let spec = &self.pods[id.0 as usize].spec;
        node.fits_pod(&spec.demand, &spec.constraints)
    }

    /// Whether any promised room can bind pod `id` (then failures are not shared by
    /// pods of the same shape, whose priorities may differ).
    fn held_against(&self, id: PodId) -> bool {
        let priority = self.pods[id.0 as usize].spec.priority;
        self.holds
            .values()
            .any(|held| held.iter().any(|h| h.priority >= priority))
    }

    pub(crate) fn workload_of(&self, id: PodId) -> WorkloadKey {
        let spec = &self.pods[id.0 as usize].spec;
        spec.gang
            .as_ref()
            .and_then(|m| self.gang_id(&spec.namespace, &m.gang))
            .map_or(WorkloadKey::Pod(id), WorkloadKey::Gang)
    }

    /// Holds nodes for the highest-priority workload that does not fit, when enabled and
    /// nobody holds any: the eligible nodes (inside its required topology domain, if any)
    /// with the most free GPUs, until they could hold it once their pods end.
    fn reserve_for(
        &mut self,
        workload: WorkloadKey,
        pods: &[PodId],
        gang: Option<&crate::gang::GangSpec>,
        now: Millis,
    ) {
        if self.config.head_reservation == 0
            || self.reservation.is_some()
            || self.last_holder == Some(workload)
        {
            return;
        }
        let need: u64 = pods.iter().map(|&p| self.gpu_milli(p)).sum();
        let largest = pods.iter().map(|&p| self.gpu_milli(p)).max().unwrap_or(0);
        if need == 0 {
            return;
        }
        // Shares by memory need a device with that much memory.
        let device_memory = pods
            .iter()
            .filter_map(|p| match self.pods[p.0 as usize].spec.demand.gpu {
                GpuRequest::Memory { mib } => Some(mib),
                _ => None,
            })
            .max();
        let rep = &self.pods[pods[0].0 as usize];
        let constraints = self.constraints[rep.constraint as usize]
            .constraints
            .clone();
        let holder_name = match gang {
            Some(g) => format!("gang {}", g.key()),
            None => format!("pod {}", rep.spec.key()),
        };
        let eligible = |s: &Scheduler, n: NodeId| {
            let node = s.cluster.node(n);
            let room = if constraints.single_numa_node {
                node.spec.max_gpus_on_one_numa()
            } else {
                node.gpu_count()
            };
            static_check(&constraints, &node.spec).is_ok()
                && room as u64 * 1000 >= largest
                && device_memory.is_none_or(|mib| node.has_device_memory(mib))
        };
        let mut groups: Vec<Vec<NodeId>> = match gang.and_then(|g| g.topology.required.clone()) {
            Some(level) => self
                .domains(&level, None)
                .into_iter()
                .map(|(_, n)| n)
                .collect(),
            None => vec![self.cluster.iter().map(|(id, _)| id).collect()],
        };
        for nodes in &mut groups {
            nodes.retain(|&n| eligible(self, n));
            nodes.sort_by_key(|&n| (std::cmp::Reverse(self.cluster.node(n).free_gpu_milli()), n));
        }
        let capacity = |s: &Scheduler, nodes: &[NodeId]| -> u64 {
            nodes
                .iter()
                .map(|&n| s.cluster.node(n).gpu_count() as u64 * 1000)
                .sum()
        };
        let free = |s: &Scheduler, nodes: &[NodeId]| -> u64 {
            nodes
                .iter()
                .map(|&n| s.cluster.node(n).free_gpu_milli())
                .sum()
        };
        let Some(nodes) = groups
            .into_iter()
            .filter(|nodes| capacity(self, nodes) >= need)
            .max_by_key(|nodes| free(self, nodes))
        else {
            return;
        };
        let mut chosen = BTreeSet::new();
        let mut total = 0;
        for n in nodes {
            if total >= need {
                break;
            }
            total += self.cluster.node(n).gpu_count() as u64 * 1000;
            chosen.insert(n);
        }
        let mut start_estimate = Some(now);
        for &n in &chosen {
            for &p in &self.cluster.node(n).pods {
                let record = &self.pods[p.0 as usize];
                let end = match (&record.phase, record.spec.preemption.runtime_estimate) {
                    (PodPhase::Bound { at, .. }, Some(e)) => Some(at + e),
                    _ => None,
                };
                start_estimate = match (start_estimate, end) {
                    (Some(s), Some(e)) => Some(s.max(e)),
                    _ => None,
                };
            }
        }
        let until = now + self.config.head_reservation;
        self.wake_at_least(until);
        self.reservation = Some(Reservation {
            holder: workload,
            holder_name,
            nodes: chosen,
            until,
            start_estimate,
        });
    }

    fn release_reservation(&mut self) {
        if let Some(r) = self.reservation.take() {
            self.last_holder = Some(r.holder);
            // What waited for the reserved nodes gets another look in this very cycle.
            self.capacity_may_have_grown();
            self.active.extend(self.parked.drain(..));
            self.parked_generation = self.generation;
        }
    }

    /// Nodes held for the head of the queue, its name and until when.
    pub fn reservation(&self) -> Option<(&str, Vec<NodeId>, Millis)> {
        self.reservation.as_ref().map(|r| {
            (
                r.holder_name.as_str(),
                r.nodes.iter().copied().collect(),
                r.until,
            )
        })
    }

    /// When a cycle should run even if nothing changes (a victim's minimum runtime or a
    /// preemption delay ends); drivers schedule a wake-up for it.
    pub fn next_wakeup(&self) -> Option<Millis> {
        self.wake_at.get()
    }

    /// The head of the borrowing queue with the lowest fair share.
    fn next_borrower(&self, cycle: &mut Cycle) -> Option<QueueKey> {
        let cq = cycle
            .borrowers
            .iter()
            .filter_map(|(cq, keys)| keys.first().map(|k| (*cq, *k)))
            .min_by(|a, b| {
                let (sa, sb) = (self.queues.fair_share(a.0), self.queues.fair_share(b.0));
                sa.total_cmp(&sb).then(a.1.cmp(&b.1))
            })?
            .0;
        let keys = cycle.borrowers.get_mut(&cq)?;
        let key = keys.pop_first();
        if keys.is_empty() {
            cycle.borrowers.remove(&cq);
        }
        key
    }

    fn consider(
        &mut self,
        key: QueueKey,
        now: Millis,
        cycle: &mut Cycle,
        decisions: &mut Decisions,
    ) {
        let id = key.2;
        let spec = &self.pods[id.0 as usize].spec;
        if let Some(membership) = &spec.gang {
            let gang = self.gangs.id(&spec.namespace, &membership.gang);
            self.schedule_gang(gang, now, cycle, decisions);
            return;
        }
        match self.admit_and_place(WorkloadKey::Pod(id), &[id], None, now, cycle, decisions) {
            Attempt::Placed(placed) => {
                for (pod, node, gpus) in placed {
                    decisions.bindings.push(Binding { pod, node, gpus });
                }
            }
            Attempt::Deferred => {
                if let QueueLink::Cq(cq) = self.pods[id.0 as usize].link {
                    cycle.borrowers.entry(cq).or_default().insert(key);
                }
            }
            Attempt::Failed(reason) => {
                let wake = self.wake_on(&[id], &reason);
                let record = &mut self.pods[id.0 as usize];
                let changed = !record
                    .pending_reason
                    .as_ref()
                    .is_some_and(|r| Arc::ptr_eq(r, &reason) || **r == *reason);
                if changed {
                    record.pending_reason = Some(reason.clone());
                    decisions.unschedulable.push((id, reason));
                }
                self.park(id, wake);
            }
        }
    }

    /// Admits a workload's pending `pods` through its queue and places them: a single pod
    /// (`gang` = None) or a gang's pods (its spec, running members and how many must start).
    /// Placed pods are bound in the index and charged to the queue.
    pub(crate) fn admit_and_place(
        &mut self,
        workload: WorkloadKey,
        pods: &[PodId],
        gang: Option<(&crate::gang::GangSpec, &[PodId], usize)>,
        now: Millis,
        cycle: &mut Cycle,
        decisions: &mut Decisions,
    ) -> Attempt {
        let total_nodes = self.cluster.len() as u32;
        let queue_failure =
            |p: QueueProblem| Attempt::Failed(Arc::new(Unschedulable::queue_only(p, total_nodes)));
        // Victims already leave for it: no second round of preemption, but it may start
        // earlier if room turns up elsewhere.
        let waiting = self.awaiting.get(&workload).copied();
        let waiting_failure = |victims| queue_failure(QueueProblem::WaitingForVictims { victims });
        let rep = pods[0];
        for &p in pods {
            self.pods[p.0 as usize].quota_settled = false;
        }
        let mut within_nominal = false;
        let admission = match self.pods[rep.0 as usize].link.clone() {
            QueueLink::Unqueued => None,
            QueueLink::Broken(problem) => return queue_failure(problem),
            QueueLink::Cq(cq) => {
                if cycle.blocked.contains(&cq) {
                    return queue_failure(QueueProblem::BehindHead {
                        cluster_queue: self.queues.cqs[cq.0 as usize].spec.name.clone(),
                    });
                }
                if waiting.is_none() && self.preemptor_ahead(cq, pods) {
                    return queue_failure(QueueProblem::BehindPreemptor {
                        cluster_queue: self.queues.cqs[cq.0 as usize].spec.name.clone(),
                    });
                }
                // Workloads alike that quota refused this cycle are refused again: usage
                // only grows within a cycle.
                let shape = match workload {
                    WorkloadKey::Pod(p) => (cq, false, self.pods[p.0 as usize].signature),
                    WorkloadKey::Gang(g) => (cq, true, g.0),
                };
                if let Some(reason) = cycle.quota_refused.get(&shape) {
                    if waiting.is_none() {
                        return Attempt::Failed(reason.clone());
                    }
                }
                let request = self.workload_request(pods);
                match self.queues.fit(cq, &request) {
                    QuotaFit::Nominal(admission) => {
                        within_nominal = true;
                        Some(admission)
                    }
                    QuotaFit::Borrowing(_) if !cycle.borrowing_phase => return Attempt::Deferred,
                    QuotaFit::Borrowing(admission) => {
                        if waiting.is_none() {
                            if let Some(cluster_queue) = self.reclaim_in_cohort(cq, workload) {
                                return queue_failure(QueueProblem::BehindReclaim {
                                    cluster_queue,
                                });
                            }
                        }
                        Some(admission)
                    }
                    QuotaFit::No(_) if waiting.is_some() => {
                        return waiting_failure(waiting.unwrap_or_default())
                    }
                    QuotaFit::No(problem) => {
                        let search = self.search_key(true, Some(cq), pods, &request);
                        if !cycle.no_victims.contains(&search) {
                            match self.preempt_for_quota(
                                workload, cq, pods, gang, &request, now, decisions,
                            ) {
                                Some(victims) => return waiting_failure(victims),
                                None => {
                                    cycle.no_victims.insert(search);
                                }
                            }
                        }
                        let strict = self.queues.cqs[cq.0 as usize].spec.queueing_strategy
                            == crate::queue::QueueingStrategy::StrictFifo;
                        if strict {
                            cycle.blocked.insert(cq);
                        }
                        let reason = Arc::new(Unschedulable::queue_only(problem, total_nodes));
                        cycle.quota_refused.insert(shape, reason.clone());
                        return Attempt::Failed(reason);
                    }
                }
            }
        };
        match self.place_workload(pods, gang, admission.as_ref(), now) {
            Ok(placed) => {
                if self
                    .reservation
                    .as_ref()
                    .is_some_and(|r| r.holder == workload)
                {
                    self.release_reservation();
                }
                self.release_holds(workload);
                Attempt::Placed(placed)
            }
            Err(_) if waiting.is_some() => waiting_failure(waiting.unwrap_or_default()),
            Err(reason) => {
                let settled = admission.as_ref().is_none_or(|a| {
                    within_nominal
                        && self.queues.cqs[a.cq.0 as usize]
                            .spec
                            .resource_groups
                            .iter()
                            .all(|g| g.flavors.len() == 1)
                });
                for &p in pods {
                    self.pods[p.0 as usize].quota_settled = settled;
                }
                // Its victims are gone and it still does not fit: the promise is void.
                self.release_holds(workload);
                let cq = admission.as_ref().map(|a| a.cq);
                let request = self.workload_request(pods);
                let search = self.search_key(false, cq, pods, &request);
                if cycle.no_victims.contains(&search) {
                    return Attempt::Failed(Arc::new(reason));
                }
                if let Some(victims) = self.preempt_for_capacity(
                    workload,
                    pods,
                    gang,
                    admission.as_ref(),
                    within_nominal,
                    now,
                    decisions,
                ) {
                    return waiting_failure(victims);
                }
                cycle.no_victims.insert(search);
                if reason.is_capacity() && !std::mem::replace(&mut cycle.head_seen, true) {
                    self.reserve_for(workload, pods, gang.map(|g| g.0), now);
                }
                Attempt::Failed(Arc::new(reason))
            }
        }
    }

    /// Places the pods under an admission (flavor node labels applied); on failure nothing
    /// stays bound or charged.
    pub(crate) fn place_workload(
        &mut self,
        pods: &[PodId],
        gang: Option<(&crate::gang::GangSpec, &[PodId], usize)>,
        admission: Option<&Admission>,
        now: Millis,
    ) -> Result<Vec<(PodId, NodeId, GpuAssignment)>, Unschedulable> {
        self.apply_admission(pods, admission);
        let result = match gang {
            Some((spec, running, needed)) => {
                let record = self.record_failures;
                self.record_failures = false;
                let outcome = self.place_gang_pods(spec, pods, running, needed, now);
                self.record_failures = record;
                outcome
            }
            None => match self.place(pods[0]) {
                Ok((node, gpus)) => {
                    self.bind(pods[0], node, gpus.clone(), now);
                    Ok(vec![(pods[0], node, gpus)])
                }
                Err(reason) => Err((*reason).clone()),
            },
        };
        if result.is_err() {
            self.apply_admission(pods, None);
        }
        result
    }

    /// Sets the admission pods are charged under when bound, with its flavor's node labels
    /// and tolerations added to their constraints (`None` restores their own).
    pub(crate) fn apply_admission(&mut self, pods: &[PodId], admission: Option<&Admission>) {
        let extra = admission
            .map(|a| self.queues.flavor_constraints(a))
            .filter(|(labels, tolerations)| !labels.is_empty() || !tolerations.is_empty());
        for &p in pods {
            let record = &self.pods[p.0 as usize];
            if matches!(record.phase, PodPhase::Bound { .. }) {
                continue;
            }
            let base = record.base_constraint;
            let constraint = match &extra {
                Some((labels, tolerations)) => {
                    let mut c = self.constraints[base as usize].constraints.clone();
                    c.node_selector.extend(labels.clone());
                    c.tolerations.extend(tolerations.iter().cloned());
                    self.intern_constraints(&c)
                }
                None => base,
            };
            if constraint != self.pods[p.0 as usize].constraint {
                let demand = self.pods[p.0 as usize].spec.demand.clone();
                let signature = self.intern_signature(constraint, demand);
                let record = &mut self.pods[p.0 as usize];
                record.constraint = constraint;
                record.signature = signature;
            }
            self.pods[p.0 as usize].admission = admission.cloned();
        }
    }

    /// The pod that stands for a workload (a gang's first member) in queue checks.
    fn representative(&self, workload: WorkloadKey) -> Option<PodId> {
        match workload {
            WorkloadKey::Pod(p) => Some(p),
            WorkloadKey::Gang(g) => self.gangs.gangs[g.0 as usize].members.first().copied(),
        }
    }

    /// A ClusterQueue of `cq`'s cohort (another workload's) whose preemptor waits for
    /// victims it chose to get its quota back: borrowers wait, or they would take that
    /// quota again.
    fn reclaim_in_cohort(&self, cq: CqId, workload: WorkloadKey) -> Option<String> {
        if self.awaiting.is_empty() {
            return None;
        }
        let root = self.queues.cqs[cq.0 as usize].root.as_ref()?;
        self.awaiting
            .keys()
            .filter(|w| **w != workload)
            .find_map(|w| {
                let rep = self.representative(*w)?;
                let record = &self.pods[rep.0 as usize];
                let QueueLink::Cq(other) = record.link else {
                    return None;
                };
                let book = &self.queues.cqs[other.0 as usize];
                let reclaiming = record.phase == PodPhase::Pending
                    && book.root.as_ref() == Some(root)
                    && !self
                        .queues
                        .is_borrowing(other, &self.workload_request(&[rep]));
                reclaiming.then(|| book.spec.name.clone())
            })
    }

    /// Whether a workload of `cq` with at least this priority waits for its victims: the
    /// room they leave is its, not for those behind it.
    fn preemptor_ahead(&self, cq: CqId, pods: &[PodId]) -> bool {
        if self.awaiting.is_empty() {
            return false;
        }
        let priority = self.pods[pods[0].0 as usize].spec.priority;
        self.awaiting.keys().any(|w| {
            self.representative(*w).is_some_and(|p| {
                let record = &self.pods[p.0 as usize];
                record.link == QueueLink::Cq(cq)
                    && record.phase == PodPhase::Pending
                    && record.spec.priority >= priority
            })
        })
    }

    fn search_key(
        &self,
        quota: bool,
        cq: Option<CqId>,
        pods: &[PodId],
        request: &QuotaRequest,
    ) -> PreemptionSearch {
        let rep = &self.pods[pods[0].0 as usize];
        let priority = pods
            .iter()
            .map(|p| self.pods[p.0 as usize].spec.priority)
            .max()
            .unwrap_or(rep.spec.priority);
        (quota, cq, priority, request.clone(), rep.constraint)
    }

    /// The workload's total quota request. A pending share by GPU memory counts the most
    /// it could take on the cluster's devices now (the share on the smallest device that
    /// holds it), so what its binding charges, its device's share, is never more.
    pub(crate) fn workload_request(&self, pods: &[PodId]) -> QuotaRequest {
        if let [p] = pods {
            let record = &self.pods[p.0 as usize];
            let counts_most = matches!(
                (record.spec.demand.gpu, &record.phase),
                (GpuRequest::Memory { .. }, PodPhase::Pending)
            );
            if !counts_most {
                return record.quota_request.clone();
            }
        }
        let mut total: BTreeMap<&str, i64> = BTreeMap::new();
        for &p in pods {
            let record = &self.pods[p.0 as usize];
            for (r, a) in record.quota_request.iter() {
                *total.entry(r.as_str()).or_default() += a;
            }
            if let (GpuRequest::Memory { .. }, PodPhase::Pending) =
                (record.spec.demand.gpu, &record.phase)
            {
                let most = self.gpu_milli_bounds(record.spec.demand.gpu).1;
                if most > 0 {
                    *total.entry(GPU_RESOURCE).or_default() += most as i64;
                }
            }
        }
        total.into_iter().map(|(r, a)| (r.to_string(), a)).collect()
    }

    /// Queues on HoldAndDrain evict what they admitted.
    fn drain_stopped_queues(&mut self, now: Millis, decisions: &mut Decisions) {
        let draining: Vec<CqId> = self
            .queues
            .cqs
            .iter()
            .enumerate()
            .filter(|(_, cq)| cq.spec.stop_policy == crate::queue::StopPolicy::HoldAndDrain)
            .map(|(i, _)| CqId(i as u32))
            .collect();
        for cq in draining {
            let victims: Vec<PodId> = self
                .bound_by_cq
                .get(&cq)
                .into_iter()
                .flatten()
                .copied()
                .filter(|&p| !self.pods[p.0 as usize].evicting)
                .collect();
            if victims.is_empty() {
                continue;
            }
            for &v in &victims {
                self.pods[v.0 as usize].evicting = true;
            }
            let name = self.queues.cqs[cq.0 as usize].spec.name.clone();
            decisions.preemptions.push(self.preemption_notice(
                None,
                victims,
                format!("ClusterQueue {name} is draining (stopPolicy HoldAndDrain)"),
                now,
            ));
        }
    }

    fn link_of(&self, spec: &PodSpec) -> QueueLink {
        match &spec.queue {
            None => QueueLink::Unqueued,
            Some(local) => match self.queues.resolve(&spec.namespace, local) {
                Ok(cq) => QueueLink::Cq(cq),
                Err(problem) => QueueLink::Broken(problem),
            },
        }
    }

    /// Queues changed: pending pods find their ClusterQueue again and get another look;
    /// bound pods that were not charged to a queue (restored before their queue was known)
    /// are charged to the one they now lead to.
    fn queues_changed(&mut self) {
        for i in 0..self.pods.len() {
            match self.pods[i].phase {
                PodPhase::Pending => self.pods[i].link = self.link_of(&self.pods[i].spec),
                PodPhase::Bound { node, .. } if self.pods[i].admission.is_none() => {
                    self.pods[i].link = self.link_of(&self.pods[i].spec);
                    if let QueueLink::Cq(cq) = self.pods[i].link {
                        let labels = &self.cluster.node(node).spec.labels;
                        self.pods[i].admission = Some(self.queues.restored_admission(cq, labels));
                        self.charge_admission(PodId(i as u32));
                    }
                }
                _ => {}
            }
        }
        self.capacity_may_have_grown();
    }

    /// Declares or updates a ClusterQueue (usage of what stays is kept).
    pub fn add_cluster_queue(&mut self, spec: ClusterQueueSpec) -> Result<CqId, ClusterError> {
        let id = self.queues.add_cluster_queue(spec)?;
        self.queues_changed();
        Ok(id)
    }

    pub fn add_local_queue(&mut self, spec: LocalQueueSpec) {
        self.queues
            .local
            .insert((spec.namespace, spec.name), spec.cluster_queue);
        self.queues_changed();
    }

    pub fn add_cohort(&mut self, spec: CohortSpec) -> Result<(), ClusterError> {
        self.queues.add_cohort(spec)?;
        self.queues_changed();
        Ok(())
    }

    pub fn add_flavor(&mut self, flavor: ResourceFlavor) {
        self.queues.flavors.insert(flavor.name.clone(), flavor);
        self.queues_changed();
    }

    /// Removes a ClusterQueue: its pending workloads wait, saying it is missing; its quota
    /// leaves the cohort, and what it admitted counts as borrowed until it ends.
    pub fn remove_cluster_queue(&mut self, name: &str) {
        if self.queues.retire_cluster_queue(name) {
            self.queues_changed();
        }
    }

    /// Removes a LocalQueue: its pending workloads wait, saying it is missing.
    pub fn remove_local_queue(&mut self, namespace: &str, name: &str) {
        let key = (namespace.to_string(), name.to_string());
        if self.queues.local.remove(&key).is_some() {
            self.queues_changed();
        }
    }

    /// Removes a Cohort: its quota no longer adds to its tree's pool.
    pub fn remove_cohort(&mut self, name: &str) {
        if self.queues.remove_cohort(name) {
            self.queues_changed();
        }
    }

    /// Removes a ResourceFlavor: admissions under it add no node labels or tolerations.
    pub fn remove_flavor(&mut self, name: &str) {
        if self.queues.flavors.remove(name).is_some() {
            self.queues_changed();
        }
    }

    /// A namespace's labels, for ClusterQueue namespaceSelectors.
    pub fn set_namespace_labels(&mut self, namespace: &str, labels: crate::model::Labels) {
        self.queues
            .namespace_labels
            .insert(namespace.to_string(), labels);
        self.queues_changed();
    }

    /// The ClusterQueues in force, in the order they were declared (deleted ones, still
    /// draining, left out).
    pub fn cluster_queues(&self) -> impl Iterator<Item = (CqId, &ClusterQueueSpec)> {
        self.queues
            .cqs
            .iter()
            .enumerate()
            .map(|(i, cq)| (CqId(i as u32), &cq.spec))
            .filter(|(id, spec)| self.queues.cq_ids.get(&spec.name) == Some(id))
    }

    /// Quota and usage of a ClusterQueue, per flavor and resource.
    pub fn queue_usage(&self, cq: CqId) -> Vec<QuotaUsage> {
        self.queues.cqs[cq.0 as usize].usage()
    }

    /// The ClusterQueue a pod is queued in, if any.
    pub fn queue_of(&self, id: PodId) -> Option<CqId> {
        match self.pods[id.0 as usize].link {
            QueueLink::Cq(cq) => Some(cq),
            _ => None,
        }
    }

    /// The workload reports a checkpoint (e.g. `kestrel.dev/last-checkpoint`).
    pub fn record_checkpoint(&mut self, id: PodId, at: Millis) -> Result<(), ClusterError> {
        let record = self
            .pods
            .get_mut(id.0 as usize)
            .ok_or(ClusterError::UnknownPod(id))?;
        record.last_checkpoint = Some(record.last_checkpoint.map_or(at, |t| t.max(at)));
        Ok(())
    }

    /// A preempted (or drained) pod left its node: what it held is free and it waits in
    /// the queue again, with its original place in line.
    pub fn evict(&mut self, id: PodId) -> Result<(), ClusterError> {
        let record = self
            .pods
            .get(id.0 as usize)
            .ok_or(ClusterError::UnknownPod(id))?;
        if !matches!(record.phase, PodPhase::Bound { .. }) {
            return Err(ClusterError::UnknownPod(id));
        }
        self.release_to_pending(id);
        let record = &self.pods[id.0 as usize];
        let key = record.queue_key(id);
        if let Some(membership) = &record.spec.gang {
            let gang = self
                .gangs
                .id(&record.spec.namespace.clone(), &membership.gang.clone());
            let still_running = self.gangs.gangs[gang.0 as usize]
                .members
                .iter()
                .any(|p| matches!(self.pods[p.0 as usize].phase, PodPhase::Bound { .. }));
            if !still_running {
                self.gangs.gangs[gang.0 as usize].phase = crate::gang::GangPhase::Waiting;
            }
        }
        self.active.insert(key);
        self.capacity_may_have_grown();
        Ok(())
    }

    pub(crate) fn bind(&mut self, id: PodId, node: NodeId, gpus: GpuAssignment, now: Millis) {
        let key = self.node_key();
        if let GpuRequest::Memory { .. } = self.pods[id.0 as usize].spec.demand.gpu {
            // Charged what its device holds; a restored pod whose device is unknown counts
            // the most it could take (one device if no device here holds it).
            let milli = match &gpus {
                GpuAssignment::Shared { milli, .. } => *milli as u64,
                _ => match self
                    .gpu_milli_bounds(self.pods[id.0 as usize].spec.demand.gpu)
                    .1
                {
                    0 => 1000,
                    most => most,
                },
            };
            set_quota_gpu(&mut self.pods[id.0 as usize].quota_request, milli);
        }
        let record = &mut self.pods[id.0 as usize];
        self.cluster.unindex(node);
        self.cluster
            .node_mut_unindexed(node)
            .allocate(id, &record.spec.demand.resources, &gpus);
        self.cluster.reindex(node, &key);
        record.phase = PodPhase::Bound {
            node,
            gpus,
            at: now,
        };
        record.pending_reason = None;
        self.charge_admission(id);
        let record = &self.pods[id.0 as usize];
        self.bound_by_priority.insert((record.spec.priority, id));
        let (cq, priority) = (
            record.admission.as_ref().map(|a| a.cq),
            record.spec.priority,
        );
        self.log_bind(node, cq, priority);
        self.pending -= 1;
    }

    /// Charges a bound pod's admission (if any) to its ClusterQueue's usage.
    fn charge_admission(&mut self, id: PodId) {
        let record = &self.pods[id.0 as usize];
        if let Some(admission) = &record.admission {
            self.queues.charge(admission, &record.quota_request, 1);
            self.bound_by_cq.entry(admission.cq).or_default().insert(id);
        }
    }

    fn intern_signature(&mut self, constraint: u32, demand: Demand) -> u32 {
        let next = self.signature_ids.len() as u32;
        let signature = *self
            .signature_ids
            .entry((constraint, demand))
            .or_insert(next);
        if signature == next {
            self.failed.push(None);
        }
        signature
    }

    fn intern_constraints(&mut self, constraints: &PlacementConstraints) -> u32 {
        if let Some(&id) = self.constraint_ids.get(constraints) {
            return id;
        }
        let id = self.constraints.len() as u32;
        self.constraints.push(ConstraintEntry {
            constraints: constraints.clone(),
            per_node: names_per_node_labels(constraints),
            verdicts: Vec::new(),
            sources: None,
        });
        self.constraint_ids.insert(constraints.clone(), id);
        id
    }

    /// Class verdicts for a constraint set, computed for classes created since last asked.
    fn verdicts(&mut self, constraint: u32) -> &[ClassVerdict] {
        let entry = &mut self.constraints[constraint as usize];
        for class in &self.cluster.classes[entry.verdicts.len()..] {
            entry.verdicts.push(
                match static_check(&entry.constraints, &class.representative) {
                    Ok(score) => ClassVerdict::Feasible { score },
                    Err(reason) => ClassVerdict::Infeasible(reason),
                },
            );
        }
        &entry.verdicts
    }

    /// Plans where placements under a constraint set look (after [`Scheduler::verdicts`]),
    /// unless the plan is as new as the cluster's layout. Classes of one shape the
    /// constraints allow alike are visited as that shape when that visits fewer nodes: a
    /// shape holds `shape.len` nodes of which `allowed` pass, so finding a fitting node
    /// there takes about `shape.len / allowed` visits, against one shortlist per class.
    fn plan_sources(&mut self, constraint: u32) {
        let cluster = &self.cluster;
        let entry = &mut self.constraints[constraint as usize];
        if entry.per_node
            || entry
                .sources
                .as_ref()
                .is_some_and(|(at, _)| *at == cluster.layout)
        {
            return;
        }
        let mut by_shape: BTreeMap<usize, Vec<(usize, i64)>> = BTreeMap::new();
        for (ci, class) in cluster.classes.iter().enumerate() {
            if let (true, ClassVerdict::Feasible { score }) = (class.len > 0, &entry.verdicts[ci]) {
                by_shape.entry(class.shape).or_default().push((ci, *score));
            }
        }
        let mut sources = Vec::new();
        for (shape, members) in by_shape {
            let score = members[0].1;
            let allowed: usize = members.iter().map(|&(c, _)| cluster.classes[c].len).sum();
            if members.len() > 1
                && members.iter().all(|m| m.1 == score)
                && cluster.shapes[shape].len < members.len() * allowed
            {
                sources.push(Source::Shape { shape, score });
            } else {
                sources.extend(
                    members
                        .into_iter()
                        .map(|(class, score)| Source::Class { class, score }),
                );
            }
        }
        entry.sources = Some((cluster.layout, sources));
    }

    /// Finds the best node for a pod, or says why there is none.
    pub(crate) fn place(
        &mut self,
        id: PodId,
    ) -> Result<(NodeId, GpuAssignment), Arc<Unschedulable>> {
        let record = &self.pods[id.0 as usize];
        let (constraint, signature) = (record.constraint, record.signature);
        let access = self.may_use_reserved(id);
        let cacheable = !self.probing && !self.held_against(id);
        if let Some((generation, had_access, reason)) = &self.failed[signature as usize] {
            if *generation == self.generation && *had_access == access && cacheable {
                return Err(reason.clone());
            }
        }
        self.verdicts(constraint);
        self.plan_sources(constraint);
        let reserved = match &self.reservation {
            Some(r) if !access => Some(&r.nodes),
            _ => None,
        };
        let record = &self.pods[id.0 as usize];
        let demand = &record.spec.demand;
        let entry = &self.constraints[constraint as usize];
        let policy = self.config.policy;
        // How many fitting nodes each bucket contributes: the first fit for key-ranked
        // policies, a shortlist for the packing scorer, all of them for Random.
        let per_bucket = match policy {
            Policy::Random => usize::MAX,
            Policy::Kestrel => PACKING_SHORTLIST,
            _ => 1,
        };
        let mut best: Option<Candidate> = None;
        let mut found: Vec<Candidate> = Vec::new();
        let first_bucket = match demand.gpu {
            GpuRequest::Whole(n) => n as usize,
            _ => 0,
        };
        // Visits one class's or shape's buckets; `allowed_only`: skip nodes whose class
        // the constraints rule out (a shape mixes classes).
        let mut visit = |buckets: &[Bucket], class_score: i64, allowed_only: bool| {
            for bucket in buckets.iter().skip(first_bucket) {
                let mut taken = 0;
                for &(key, node_id) in bucket.may_hold(&demand.resources) {
                    if reserved.is_some_and(|r| r.contains(&node_id)) {
                        continue;
                    }
                    let mut score = class_score;
                    let node = self.cluster.node(node_id);
                    if allowed_only
                        && !matches!(
                            entry.verdicts[node.class.0 as usize],
                            ClassVerdict::Feasible { .. }
                        )
                    {
                        continue;
                    }
                    if entry.per_node {
                        match static_check(&entry.constraints, &node.spec) {
                            Ok(s) => score = s,
                            Err(_) => continue,
                        }
                    }
                    let candidate = Candidate {
                        neg_score: -score,
                        key,
                        node: node_id,
                    };
                    // Later entries in this bucket only have larger keys: stop when they
                    // cannot beat the best (unless scores vary node by node).
                    if per_bucket == 1 && !entry.per_node && best.is_some_and(|b| b <= candidate) {
                        break;
                    }
                    if !node.fits_pod(demand, &entry.constraints)
                        || !self.fits_beside_holds(id, node_id)
                    {
                        continue;
                    }
                    if per_bucket > 1 {
                        found.push(candidate);
                        taken += 1;
                        if taken >= per_bucket && !entry.per_node {
                            break;
                        }
                        continue;
                    }
                    if best.is_none_or(|b| candidate < b) {
                        best = Some(candidate);
                    }
                    if !entry.per_node {
                        break;
                    }
                }
            }
        };
        if entry.per_node {
            for (ci, class) in self.cluster.classes.iter().enumerate() {
                if class.len > 0 {
                    let score = match &entry.verdicts[ci] {
                        ClassVerdict::Feasible { score } => *score,
                        ClassVerdict::Infeasible(_) => 0,
                    };
                    visit(&class.buckets, score, false);
                }
            }
        } else {
            let (_, sources) = entry.sources.as_ref().expect("planned above");
            for source in sources {
                match *source {
                    Source::Class { class, score } => {
                        visit(&self.cluster.classes[class].buckets, score, false)
                    }
                    Source::Shape { shape, score } => {
                        visit(&self.cluster.shapes[shape].buckets, score, true)
                    }
                }
            }
        }
        let chosen = match policy {
            Policy::Random if found.is_empty() => None,
            Policy::Random => {
                found.sort_unstable_by_key(|c| c.node);
                Some(found[self.rng.below(found.len() as u64) as usize].node)
            }
            Policy::Kestrel => {
                // Preferences first, then what the placement does to packing, then the key.
                self.packing.refresh();
                let packing = &self.packing;
                found
                    .iter()
                    .map(|c| {
                        let node = self.cluster.node(c.node);
                        (
                            c.neg_score,
                            Reverse(packing.score(node, demand)),
                            c.key,
                            c.node,
                        )
                    })
                    .min()
                    .map(|(_, _, _, node)| node)
            }
            _ => best.map(|b| b.node),
        };
        match chosen {
            Some(node) => {
                let state = self.cluster.node(node);
                let gpus = match policy {
                    _ if entry.constraints.single_numa_node => state
                        .choose_gpus_single_numa(demand.gpu)
                        .expect("the node fits the pod"),
                    // The packing scorer puts a share on the device it scored.
                    Policy::Kestrel => self.packing.choose_gpus(state, demand),
                    _ => {
                        let rng = (policy == Policy::Random).then_some(&mut self.rng);
                        state.choose_gpus(demand.gpu, rng)
                    }
                };
                Ok((node, gpus))
            }
            // Inside a gang attempt the gang explains itself once, after rolling back.
            None if !self.record_failures || self.probing => {
                Err(Arc::new(Unschedulable::gang_only(
                    GangProblem::Unplaceable {
                        gang: String::new(),
                        placed: 0,
                        needed: 0,
                    },
                    0,
                )))
            }
            None => {
                let reason = Arc::new(self.why_not(id, constraint, &demand.clone(), access));
                if cacheable {
                    self.failed[signature as usize] =
                        Some((self.generation, access, reason.clone()));
                }
                Err(reason)
            }
        }
    }

    /// Counts, over all nodes, why a pod with these constraints and demand fits none.
    fn explain(&self, id: PodId, constraint: u32, demand: &Demand, access: bool) -> Unschedulable {
        let entry = &self.constraints[constraint as usize];
        let reserved = self.reservation.as_ref().filter(|_| !access);
        let mut reasons: BTreeMap<NodeReason, u32> = BTreeMap::new();
        let (mut eligible_free_whole, mut best_free_whole) = (0u32, 0u32);
        for (ci, class) in self.cluster.classes.iter().enumerate() {
            if class.len == 0 {
                continue;
            }
            if !entry.per_node {
                if let ClassVerdict::Infeasible(reason) = &entry.verdicts[ci] {
                    *reasons.entry(reason.clone()).or_default() += class.len as u32;
                    continue;
                }
            }
            for bucket in &class.buckets {
                for &(_, node_id) in bucket.iter() {
                    let node = self.cluster.node(node_id);
                    if entry.per_node {
                        if let Err(reason) = static_check(&entry.constraints, &node.spec) {
                            *reasons.entry(reason).or_default() += 1;
                            continue;
                        }
                    }
                    if let Some(r) = reserved.filter(|r| r.nodes.contains(&node_id)) {
                        let holder = NodeReason::Reserved(r.holder_name.clone());
                        *reasons.entry(holder).or_default() += 1;
                        continue;
                    }
                    let free_whole = node.free_whole_gpus();
                    eligible_free_whole += free_whole;
                    best_free_whole = best_free_whole.max(free_whole);
                    let short = node_shortfalls(node, demand, &entry.constraints);
                    if short.is_empty() && !self.fits_beside_holds(id, node_id) {
                        let preemptor =
                            self.holds_against(id, node_id)
                                .next()
                                .map_or_else(String::new, |h| {
                                    let spec = &self.pods[h.pod.0 as usize].spec;
                                    format!("{}/{}", spec.namespace, spec.name)
                                });
                        *reasons.entry(NodeReason::Nominated(preemptor)).or_default() += 1;
                    }
                    for reason in short {
                        *reasons.entry(reason).or_default() += 1;
                    }
                }
            }
        }
        let mut reasons: Vec<(NodeReason, u32)> = reasons.into_iter().collect();
        reasons.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let need = demand.gpu.whole();
        Unschedulable {
            queue: None,
            gang: None,
            total_nodes: self.cluster.len() as u32,
            reasons,
            gpu_fragmentation: (need > 0 && eligible_free_whole >= need && best_free_whole < need)
                .then_some((eligible_free_whole, best_free_whole)),
        }
    }

    /// Whether a pod with this spec could go on this node now (static and amounts).
    pub fn could_place_on(&self, spec: &PodSpec, node: NodeId) -> bool {
        let node = self.cluster.node(node);
        static_check(&spec.constraints, &node.spec).is_ok()
            && node.fits_pod(&spec.demand, &spec.constraints)
    }

    /// The node's rank key under the configured policy (lower is better).
    pub fn node_rank(&self, node: NodeId) -> u64 {
        self.config
            .policy
            .node_key(&self.cluster, self.cluster.node(node))
    }

    /// The class a node belongs to (nodes of one class are interchangeable for static
    /// predicates); exposed for metrics that group nodes.
    pub fn node_class(&self, node: NodeId) -> u32 {
        let ClassId(c) = self.cluster.class_of(node);
        c
    }
}

fn validate_node(spec: &NodeSpec) -> Result<(), ClusterError> {
    let invalid = |field, why: String| ClusterError::InvalidNode {
        node: spec.name.clone(),
        field,
        why,
    };
    if spec.name.is_empty() {
        return Err(invalid("metadata.name", "must not be empty".into()));
    }
    let mut seen = BTreeSet::new();
    for gpu in &spec.gpus {
        if !seen.insert(gpu.index) {
            return Err(invalid(
                "gpus[].index",
                format!(
                    "GPU index {} appears twice; give each device its own index",
                    gpu.index
                ),
            ));
        }
    }
    if spec.allocatable.cpu_milli < 0 || spec.allocatable.memory_bytes < 0 {
        return Err(invalid(
            "allocatable",
            "cpu and memory must not be negative".into(),
        ));
    }
    Ok(())
}

/// The resource reasons a node that passes static predicates cannot take the demand now.
fn node_shortfalls(node: &NodeState, demand: &Demand, c: &PlacementConstraints) -> Vec<NodeReason> {
    let mut out: Vec<NodeReason> = node
        .free
        .shortfalls(&demand.resources)
        .map(|r| NodeReason::Insufficient(r.to_string()))
        .collect();
    if node.free_pods == 0 {
        out.push(NodeReason::TooManyPods);
    }
    let memory_short = match demand.gpu {
        GpuRequest::Memory { mib } if !node.has_device_memory(mib) => Some(mib),
        _ => None,
    };
    if let Some(mib) = memory_short {
        out.push(NodeReason::gpu_memory_short(mib));
    } else if !node.gpu_fits(demand.gpu) {
        let enough_in_total = match demand.gpu {
            // Free thousandths on the devices with the memory, against the least share
            // it takes on one of them.
            GpuRequest::Memory { mib } => {
                let (free, need) = node
                    .spec
                    .gpus
                    .iter()
                    .zip(&node.gpus)
                    .filter_map(|(d, g)| {
                        crate::model::memory_share_milli(mib, d.memory_mib)
                            .map(|m| (g.free_milli as u64, m as u64))
                    })
                    .fold((0, u64::MAX), |(f, n), (free, m)| (f + free, n.min(m)));
                free >= need
            }
            gpu => node.free_gpu_milli() >= gpu.milli(),
        };
        out.push(if enough_in_total {
            NodeReason::GpuFragmented
        } else {
            NodeReason::Insufficient(GPU_RESOURCE.to_string())
        });
    } else if c.single_numa_node && node.choose_gpus_single_numa(demand.gpu).is_none() {
        out.push(NodeReason::numa_unaligned());
    }
    out
}

/// Cordoned nodes are skipped unless the pod tolerates the taint that stands for the cordon.
static CORDON_TAINT_VIEW: std::sync::LazyLock<crate::model::Taint> =
    std::sync::LazyLock::new(|| crate::model::Taint {
        key: "node.kubernetes.io/unschedulable".to_string(),
        value: String::new(),
        effect: TaintEffect::NoSchedule,
    });

/// Static predicates in kube-scheduler's order (NodeUnschedulable, NodeAffinity,
/// TaintToleration), plus the RuntimeClass's own selector. On success, the node's
/// preference score: matched preferred-affinity weights, minus 100 per untolerated
/// PreferNoSchedule taint.
pub fn static_check(c: &PlacementConstraints, node: &NodeSpec) -> Result<i64, NodeReason> {
    if node.unschedulable
        && !c
            .tolerations
            .iter()
            .any(|t| t.tolerates(&CORDON_TAINT_VIEW))
    {
        return Err(NodeReason::Cordoned);
    }
    let selector_ok = c
        .node_selector
        .iter()
        .all(|(k, v)| node.labels.get(k) == Some(v));
    let affinity_ok = c
        .affinity
        .required
        .as_ref()
        .is_none_or(|terms| terms.iter().any(|t| t.matches(node)));
    if !selector_ok || !affinity_ok {
        return Err(NodeReason::AffinityMismatch);
    }
    let runtime_tolerations = c.runtime_class.iter().flat_map(|rc| rc.tolerations.iter());
    let tolerations: Vec<_> = c.tolerations.iter().chain(runtime_tolerations).collect();
    if let Some(rc) = &c.runtime_class {
        if !rc
            .node_selector
            .iter()
            .all(|(k, v)| node.labels.get(k) == Some(v))
        {
            return Err(NodeReason::RuntimeClassMismatch(rc.name.clone()));
        }
    }
    let mut score = 0i64;
    for taint in &node.taints {
        let tolerated = tolerations.iter().any(|t| t.tolerates(taint));
        match taint.effect {
            TaintEffect::NoSchedule | TaintEffect::NoExecute if !tolerated => {
                return Err(NodeReason::UntoleratedTaint(taint.clone()));
            }
            TaintEffect::PreferNoSchedule if !tolerated => score -= 100,
            _ => {}
        }
    }
    score += c
        .affinity
        .preferred
        .iter()
        .filter(|(_, term)| term.matches(node))
        .map(|(w, _)| *w as i64)
        .sum::<i64>();
    Ok(score)
}

fn names_per_node_labels(c: &PlacementConstraints) -> bool {
    let term_names = |t: &NodeSelectorTerm| {
        !t.match_fields.is_empty()
            || t.match_expressions
                .iter()
                .any(|r| PER_NODE_LABELS.contains(&r.key.as_str()))
    };
    let per_node_key = |k: &String| PER_NODE_LABELS.contains(&k.as_str());
    c.node_selector.keys().any(per_node_key)
        || c.runtime_class
            .as_ref()
            .is_some_and(|rc| rc.node_selector.keys().any(per_node_key))
        || c.affinity.required.iter().flatten().any(term_names)
        || c.affinity.preferred.iter().any(|(_, t)| term_names(t))
}

/// What a pod counts against queue quota: each resource it requests, and one pod, by name.
/// A share by GPU memory gets its `nvidia.com/gpu` amount when bound (see
/// [`set_quota_gpu`]).
fn quota_request(spec: &PodSpec) -> QuotaRequest {
    let r = &spec.demand.resources;
    let mut out: BTreeMap<String, i64> = BTreeMap::from([(PODS_RESOURCE.to_string(), 1)]);
    for (name, amount) in [
        ("cpu", r.cpu_milli),
        ("memory", r.memory_bytes),
        ("ephemeral-storage", r.ephemeral_storage_bytes),
        (
            GPU_RESOURCE,
            match spec.demand.gpu {
                GpuRequest::Memory { .. } => 0,
                gpu => gpu.milli() as i64,
            },
        ),
    ] {
        if amount > 0 {
            *out.entry(name.to_string()).or_default() += amount;
        }
    }
    for (name, amount) in r.extended.iter().filter(|(_, a)| *a > 0) {
        *out.entry(name.clone()).or_default() += amount;
    }
    out.into_iter().collect()
}

/// Sets the `nvidia.com/gpu` amount of a quota request (0: none).
fn set_quota_gpu(request: &mut QuotaRequest, milli: u64) {
    let mut out: BTreeMap<String, i64> = request
        .iter()
        .filter(|(r, _)| r != GPU_RESOURCE)
        .cloned()
        .collect();
    if milli > 0 {
        out.insert(GPU_RESOURCE.to_string(), milli as i64);
    }
    *request = out.into_iter().collect();
}
