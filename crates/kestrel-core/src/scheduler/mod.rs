//! The scheduling engine: the pending queue and `schedule(now) -> Decisions`.
//!
//! A cycle takes pods in queue order (priority, then arrival) and places each on the best
//! node that fits, committing it to the index before the next pod is looked at. A pod that
//! fits nowhere is parked with its explanation; parked pods are retried only after capacity
//! was freed or nodes changed, so an idle cycle costs nothing and a busy one costs what
//! changed. Pods with the same constraints and demand share one failure per generation.

mod claims;
mod cycle;
mod explanation;
mod gang;
mod holds;
mod inter_pod;
pub(crate) use inter_pod::volume_reason;
mod nodes;
mod placement;
mod pods;
mod preemption;
mod queues;
mod wake;

use crate::cluster::ClusterIndex;
use crate::constraints::ConstraintBook;
use crate::explain::Unschedulable;
use crate::fgd::FgdScorer;
use crate::gang::GangIndex;
use crate::hints::{Hints, WakeOn};
use crate::model::{GpuRequest, PodSpec};
use crate::packing::PackingScorer;
use crate::policy::Policy;
use crate::preempt::{PreemptionBook, VictimOrder, WorkloadKey};
use crate::queue::{Admission, CqId, QueueBook, QueueProblem};
use crate::rng::Rng;
use crate::types::{GpuAssignment, NodeId};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
// Kept at their old paths (`kestrel_core::scheduler::PodId`, ...) for drivers.
pub use crate::outcome::{ClusterError, Decisions};
pub use crate::types::{Binding, Millis, PodId, PodPhase};

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
    /// How long a gang that timed out waits before it is tried again.
    pub gang_backoff: Millis,
}

/// [`SchedulerConfig::gang_backoff`]'s default.
pub const DEFAULT_GANG_BACKOFF: Millis = 60_000;

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            policy: Policy::Kestrel,
            seed: 42,
            victim_order: VictimOrder::CheckpointAware,
            head_reservation: 0,
            fair_share_half_life: 0,
            gang_backoff: DEFAULT_GANG_BACKOFF,
        }
    }
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
    /// Within a cycle: parked pods only room freed by ended pods may help, tried in their
    /// turn if that room may still hold them ([`Scheduler::next_in_queue`]).
    pub(crate) room_waiting: BTreeSet<QueueKey>,
    /// Within a cycle: the nodes where pods ended since the last wake.
    pub(crate) freed_nodes: Vec<NodeId>,
    pub(crate) gangs: GangIndex,
    /// Topology domains per level, until the next node change.
    pub(crate) domain_cache: HashMap<String, Vec<crate::gang::Domain>>,
    /// Off during gang attempts: a pod that fails while its peers hold capacity
    /// tentatively must not mark its signature as failed.
    pub(crate) record_failures: bool,
    /// Off for runs that only need decisions ([`Scheduler::set_full_explanations`]).
    full_explanations: bool,
    /// Constraint sets and signatures, with their class verdicts and cached failures.
    constraints: ConstraintBook,
    /// Bumped whenever capacity may have grown (release, node added or changed).
    pub(crate) generation: u64,
    parked_generation: u64,
    rng: Rng,
    packing: PackingScorer,
    /// Learns the mix only under [`crate::Policy::Fgd`].
    fgd: FgdScorer,
    next_seq: u64,
    pub(crate) pending: usize,
    pub(crate) queues: QueueBook,
    /// Preemption candidates, budgets, and who waits for whose victims.
    pub(crate) preemption: PreemptionBook,
    /// Set while trying "what if these victims left": cached failures do not apply.
    pub(crate) probing: bool,
    pub(crate) reservation: Option<Reservation>,
    /// The last holder, which waits a turn before it may reserve again.
    last_holder: Option<WorkloadKey>,
    /// The time of the cycle in progress.
    now: Millis,
    /// When parked workloads should be retried for time's sake alone.
    pub(crate) wake_at: std::cell::Cell<Option<Millis>>,
    /// Room promised to preemptors whose victims are leaving (Kubernetes' nominated
    /// node): pods of no higher priority fit on these nodes only beside them, so the room
    /// made by an eviction is not taken by the victim itself or others below.
    pub(crate) holds: BTreeMap<NodeId, Vec<Hold>>,
    /// What changed since workloads were parked, and what wakes them.
    pub(crate) hints: Hints,
    /// The fitting nodes a placement compares, kept between placements so that none
    /// allocates.
    placement_candidates: Vec<placement::Candidate>,
    /// Allocated ResourceClaims by `namespace/name`.
    pub(crate) claims: BTreeMap<String, claims::HeldClaim>,
    /// The pods that use each claim (by `namespace/name`), whatever their phase.
    pub(crate) claim_users: HashMap<String, Vec<crate::types::PodId>>,
    /// Bound pods as inter-pod rules look them up.
    pub(crate) inter_pod: inter_pod::InterPodIndex,
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

impl Scheduler {
    pub fn new(config: SchedulerConfig) -> Self {
        Scheduler {
            config,
            cluster: ClusterIndex::default(),
            pods: Vec::new(),
            active: BTreeSet::new(),
            parked: Vec::new(),
            room_waiting: BTreeSet::new(),
            freed_nodes: Vec::new(),
            gangs: GangIndex::default(),
            domain_cache: HashMap::new(),
            record_failures: true,
            full_explanations: true,
            constraints: ConstraintBook::default(),
            generation: 0,
            parked_generation: 0,
            rng: Rng::new(config.seed),
            packing: PackingScorer::default(),
            fgd: FgdScorer::default(),
            next_seq: 0,
            pending: 0,
            queues: QueueBook::default(),
            preemption: PreemptionBook::default(),
            probing: false,
            reservation: None,
            last_holder: None,
            now: 0,
            wake_at: std::cell::Cell::new(None),
            holds: BTreeMap::new(),
            hints: Hints::default(),
            placement_candidates: Vec::new(),
            claims: BTreeMap::new(),
            claim_users: HashMap::new(),
            inter_pod: inter_pod::InterPodIndex::default(),
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

    pub(crate) fn workload_of(&self, id: PodId) -> WorkloadKey {
        let spec = &self.pods[id.0 as usize].spec;
        spec.gang
            .as_ref()
            .and_then(|m| self.gang_id(&spec.namespace, &m.gang))
            .map_or(WorkloadKey::Pod(id), WorkloadKey::Gang)
    }
}
