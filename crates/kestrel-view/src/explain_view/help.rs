//! "What would help" a pod or gang that capacity keeps waiting: the closest node and what
//! it lacks (the engine's shortfall), the earliest node where running pods' ends make room,
//! and the fewest lowest-priority pods whose preemption would.

use super::clock::secs;
use super::ExplainState;
use crate::estimates::Estimates;
use kestrel_core::{
    format_amount, static_check, Bytes, Demand, GpuRequest, Millis, NodeId, NodeReason, NodeState,
    PlacementConstraints, PodId, PodPhase, PodSpec, Scheduler, GPU_RESOURCE,
};
use serde::Serialize;
use std::collections::BTreeMap;

/// One missing amount on a node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lack {
    pub resource: String,
    /// In the resource's user units (GPUs, cores, bytes, a count).
    pub missing: f64,
    /// `2 more nvidia.com/gpu`.
    pub text: String,
}

/// The node that comes closest to holding the pod.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Closest {
    pub node: String,
    pub lacks: Vec<Lack>,
}

/// A running pod whose end frees room.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ending {
    pub pod: String,
    /// Estimated end, seconds from the start.
    pub ends_at_s: f64,
    pub gpus: f64,
}

/// The earliest node where running pods' estimated ends free enough room for the pod.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Room {
    pub node: String,
    pub at_s: f64,
    /// The pods on that node that end by then, in order.
    pub ending: Vec<Ending>,
}

/// A running pod whose preemption would make room.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Victim {
    pub pod: String,
    pub priority: i32,
    pub gpus: f64,
    /// Its gang, which would be preempted whole.
    pub gang: Option<String>,
}

/// The node where preempting the fewest, lowest-priority running pods makes room.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Preemption {
    pub node: String,
    pub victims: Vec<Victim>,
    /// Why the scheduler does not take them itself.
    pub why_not: String,
}

/// What would help a pod that capacity keeps waiting.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Help {
    /// `None` when no node may take it at all (taints, selectors, cordons).
    pub closest: Option<Closest>,
    /// `None` when no known end makes room on a single node.
    pub room: Option<Room>,
    /// `None` when preempting running pods makes room on no node (none run where it may
    /// go, or they are leaving already).
    pub preemption: Option<Preemption>,
    /// Nodes it may use that have the room now but hold it for other work (reserved for
    /// the head of the queue, or promised to a preemptor).
    pub held: u32,
    /// The taint that keeps it off the most nodes that could hold it, and how many: what
    /// a toleration would open.
    pub blocking_taint: Option<(String, u32)>,
}

/// Whether the node could ever hold the pod, empty: enough GPUs, cpu and memory in all.
/// Nodes that never could are no help, however close their free amounts look.
fn could_ever_hold(node: &NodeState, demand: &Demand) -> bool {
    let gpus_fit = match demand.gpu {
        GpuRequest::None => true,
        GpuRequest::Whole(n) => node.gpu_count() >= n,
        _ => node.gpu_count() > 0,
    };
    let alloc = &node.spec.allocatable;
    gpus_fit
        && demand.resources.cpu_milli <= alloc.cpu_milli
        && demand.resources.memory_bytes <= alloc.memory_bytes
}

/// One missing amount, in the engine's units, before it is put in words.
struct Missing<'a> {
    resource: &'a str,
    amount: i64,
}

/// What is missing on a node for one more pod: the engine's [`NodeState::shortfall`]
/// (empty when it fits), and the sum of each missing amount as a share of what the node
/// has (the closeness measure; memory no device has: a share of what the pod asks).
fn missing_on<'a>(
    node: &NodeState,
    demand: &'a Demand,
    constraints: &PlacementConstraints,
) -> (Vec<Missing<'a>>, f64) {
    let alloc = &node.spec.allocatable;
    let mut missing = Vec::new();
    let mut share = 0.0;
    for (resource, amount) in node.shortfall(demand, constraints) {
        let of = match resource {
            GPU_RESOURCE => node.gpu_count() as i64 * 1000,
            NodeState::GPU_MEMORY_SHORTFALL => match demand.gpu {
                GpuRequest::Memory { mib } => mib as i64,
                _ => 1,
            },
            "cpu" => alloc.cpu_milli,
            "memory" => alloc.memory_bytes,
            "ephemeral-storage" => alloc.ephemeral_storage_bytes,
            "pods" => node.spec.max_pods as i64,
            extended => alloc.extended(extended),
        };
        share += amount as f64 / of.max(1) as f64;
        missing.push(Missing { resource, amount });
    }
    (missing, share)
}

/// A missing amount in words and user units.
fn lack(m: &Missing<'_>, whole_gpus: bool) -> Lack {
    let (missing, text) = match m.resource {
        GPU_RESOURCE if whole_gpus => {
            let n = m.amount / 1000;
            (
                n as f64,
                format!("{n} more GPU{}", if n == 1 { "" } else { "s" }),
            )
        }
        GPU_RESOURCE => (
            m.amount as f64 / 1000.0,
            format!("{} more of one GPU", format_amount(GPU_RESOURCE, m.amount)),
        ),
        NodeState::GPU_MEMORY_SHORTFALL => (
            m.amount as f64,
            format!("{} MiB more memory on one GPU", m.amount),
        ),
        "cpu" => (
            m.amount as f64 / 1000.0,
            format!("{} more cpu", format_amount("cpu", m.amount)),
        ),
        "memory" | "ephemeral-storage" => (
            m.amount as f64,
            format!("{} more {}", Bytes(m.amount), m.resource),
        ),
        "pods" => (1.0, "room for one more pod".to_string()),
        other => (m.amount as f64, format!("{} more {other}", m.amount)),
    };
    Lack {
        resource: m.resource.to_string(),
        missing,
        text,
    }
}

/// Frees a bound pod's share of a copy of its node, to play pods' ends forward.
fn release_pod(free: &mut NodeState, scheduler: &Scheduler, pod: PodId) {
    let record = scheduler.pod(pod);
    if let PodPhase::Bound { gpus, .. } = &record.phase {
        free.release(pod, &record.spec.demand.resources, gpus);
    }
}

/// Running pods with their estimated ends.
type Ends = Vec<(Millis, PodId)>;

/// Of the pods whose going makes room on a node (in the order they go), those that are
/// needed: each earlier one is left out when the room suffices without it (the last one is
/// always needed).
fn needed<K: Copy>(
    node: &NodeState,
    ends: &[(K, PodId)],
    scheduler: &Scheduler,
    spec: &PodSpec,
) -> Vec<(K, PodId)> {
    let fits_after = |kept: &[(K, PodId)]| {
        let mut free = node.clone();
        for (_, pod) in kept {
            release_pod(&mut free, scheduler, *pod);
        }
        free.fits_pod(&spec.demand, &spec.constraints)
    };
    let mut kept = ends.to_vec();
    let mut i = 0;
    while i + 1 < kept.len() {
        let mut without = kept.clone();
        without.remove(i);
        if fits_after(&without) {
            kept = without;
        } else {
            i += 1;
        }
    }
    kept
}

/// One pass over the nodes the pod may use (static predicates): the closest one by missing
/// share, and the earliest one where running pods' ends (`estimates`) make room.
pub fn help_for(sim: &dyn ExplainState, id: PodId, estimates: &Estimates) -> Help {
    let scheduler = sim.scheduler();
    let spec = &scheduler.pod(id).spec;
    let demand = &spec.demand;
    let mut probe = spec.clone();
    probe.demand = Demand::default();
    // (missing share, missing count, node name, node)
    let mut closest: Option<(f64, usize, &str, NodeId)> = None;
    // (time, pods that end, node name, the ends)
    let mut room: Option<(Millis, usize, &str, Ends)> = None;
    let mut ends: Ends = Vec::new();
    // (highest victim priority, victims, node name, the victims)
    let mut preemption: Option<(i32, usize, &str, Victims)> = None;
    let mut held = 0;
    let mut taints: BTreeMap<String, u32> = BTreeMap::new();
    for (node_id, node) in scheduler.cluster().iter() {
        if !could_ever_hold(node, demand) {
            continue;
        }
        // Static predicates only: a pod with no demand fits wherever they pass.
        if !scheduler.could_place_on(&probe, node_id) {
            if let Err(NodeReason::UntoleratedTaint(t)) =
                static_check(&spec.constraints, &node.spec)
            {
                *taints.entry(t.to_string()).or_default() += 1;
            }
            continue;
        }
        let (missing, share) = missing_on(node, demand, &spec.constraints);
        if missing.is_empty() {
            // Room enough, though maybe not NUMA-aligned the way the pod asks.
            held += node.fits_pod(demand, &spec.constraints) as u32;
            continue;
        }
        let name = node.spec.name.as_str();
        let key = (share, missing.len(), name);
        if closest
            .as_ref()
            .is_none_or(|(s, n, c, _)| key < (*s, *n, *c))
        {
            closest = Some((share, missing.len(), name, node_id));
        }
        if let Some(victims) = victims_on(node, scheduler, spec, preemption.as_ref()) {
            let top = victims.last().map_or(i32::MIN, |v| v.0 .0);
            let key = (top, victims.len(), name);
            if preemption
                .as_ref()
                .is_none_or(|(t, n, c, _)| key < (*t, *n, *c))
            {
                preemption = Some((top, victims.len(), name, victims));
            }
        }
        ends.clear();
        ends.extend(
            node.pods
                .iter()
                .filter_map(|&p| sim.end_of_running(p, estimates).map(|e| (e, p))),
        );
        let best = room.as_ref().map(|r| r.0);
        if ends.is_empty() || best.is_some_and(|t| ends.iter().all(|(e, _)| *e > t)) {
            continue;
        }
        ends.sort_unstable();
        let mut free = node.clone();
        for k in 0..ends.len() {
            let (end, pod) = ends[k];
            if best.is_some_and(|t| end > t) {
                break;
            }
            release_pod(&mut free, scheduler, pod);
            if free.fits_pod(demand, &spec.constraints) {
                let needed = needed(node, &ends[..=k], scheduler, spec);
                let key = (end, needed.len(), name);
                if room.as_ref().is_none_or(|(t, n, c, _)| key < (*t, *n, *c)) {
                    room = Some((end, needed.len(), name, needed));
                }
                break;
            }
        }
    }
    let whole = matches!(demand.gpu, GpuRequest::Whole(_));
    Help {
        closest: closest.map(|(_, _, name, node)| Closest {
            node: name.to_string(),
            lacks: missing_on(scheduler.cluster().node(node), demand, &spec.constraints)
                .0
                .iter()
                .map(|m| lack(m, whole))
                .collect(),
        }),
        room: room.map(|(at, _, node, ending)| Room {
            node: node.to_string(),
            at_s: secs(at),
            ending: ending
                .into_iter()
                .map(|(end, pod)| {
                    let spec = &scheduler.pod(pod).spec;
                    Ending {
                        pod: spec.key(),
                        ends_at_s: secs(end),
                        gpus: scheduler.gpu_milli(pod) as f64 / 1000.0,
                    }
                })
                .collect(),
        }),
        preemption: preemption.map(|(top, _, node, victims)| Preemption {
            node: node.to_string(),
            why_not: why_not_preempted(scheduler, id, top),
            victims: victims
                .into_iter()
                .map(|(_, pod)| {
                    let spec = &scheduler.pod(pod).spec;
                    Victim {
                        pod: spec.key(),
                        priority: spec.priority,
                        gpus: scheduler.gpu_milli(pod) as f64 / 1000.0,
                        gang: spec.gang.as_ref().map(|g| g.gang.clone()),
                    }
                })
                .collect(),
        }),
        held,
        // The most nodes; ties by name.
        blocking_taint: taints
            .into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0))),
    }
}

/// Running pods ordered as preemption takes them: lowest priority first, then the newest.
type Victims = Vec<((i32, std::cmp::Reverse<PodId>), PodId)>;

/// The fewest, lowest-priority running pods on `node` whose preemption makes room for the
/// pod (`None` when even all of them do not, or `best` already needs lower priorities).
fn victims_on(
    node: &NodeState,
    scheduler: &Scheduler,
    spec: &PodSpec,
    best: Option<&(i32, usize, &str, Victims)>,
) -> Option<Victims> {
    let mut candidates: Victims = node
        .pods
        .iter()
        .filter(|&&p| !scheduler.pod(p).evicting)
        .map(|&p| ((scheduler.pod(p).spec.priority, std::cmp::Reverse(p)), p))
        .collect();
    candidates.sort_unstable();
    let mut free = node.clone();
    for k in 0..candidates.len() {
        let (key, pod) = candidates[k];
        if best.is_some_and(|b| key.0 > b.0) {
            return None;
        }
        release_pod(&mut free, scheduler, pod);
        if free.fits_pod(&spec.demand, &spec.constraints) {
            return Some(needed(node, &candidates[..=k], scheduler, spec));
        }
    }
    None
}

/// Why the scheduler leaves victims of priority up to `top` where they are.
fn why_not_preempted(scheduler: &Scheduler, id: PodId, top: i32) -> String {
    let spec = &scheduler.pod(id).spec;
    if top >= spec.priority {
        format!(
            "they have priority {top}, not below its {}: Kestrel preempts only lower priorities",
            spec.priority
        )
    } else if spec.preemption.never_preempt {
        "its preemptionPolicy is Never: it waits for room instead".into()
    } else {
        "their priority is lower, but its queue's preemption policy, a PodDisruptionBudget \
         or a preemption under way keeps them (see the reasons above)"
            .into()
    }
}

/// Where a waiting gang comes closest to starting whole.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GangHelp {
    /// The topology level it must start within (`None`: anywhere in the cluster).
    pub level: Option<String>,
    /// The domain (a value of `level`; `None`: the whole cluster) where the most pending
    /// members fit together now.
    pub domain: Option<String>,
    /// How many of the pending members fit there together now, of how many.
    pub fit: u32,
    pub pending: u32,
    /// The node of that domain that comes closest to holding the next member, and what it
    /// lacks.
    pub closest: Option<Closest>,
}

/// How many of `pending` fit together on `nodes` (copies, taken from as they fit), each on
/// the first node that holds it; and the first that does not fit.
fn fit_together(
    scheduler: &Scheduler,
    nodes: &mut [(NodeId, NodeState)],
    pending: &[PodId],
) -> (u32, Option<PodId>) {
    let mut fit = 0;
    let mut first_left = None;
    // Nodes before `from` are full for the previous member: valid while members are alike.
    let mut from = 0;
    let mut previous: Option<&PodSpec> = None;
    for &pod in pending {
        let spec = &scheduler.pod(pod).spec;
        let alike =
            previous.is_some_and(|p| p.demand == spec.demand && p.constraints == spec.constraints);
        if !alike {
            from = 0;
        }
        previous = Some(spec);
        let mut probe = spec.clone();
        probe.demand = Demand::default();
        let found = (from..nodes.len()).find(|&i| {
            let (id, node) = &mut nodes[i];
            scheduler.could_place_on(&probe, *id) && node.take_room(&spec.demand, &spec.constraints)
        });
        match found {
            Some(i) => {
                fit += 1;
                from = i;
            }
            None => {
                from = nodes.len();
                first_left.get_or_insert(pod);
            }
        }
    }
    (fit, first_left)
}

/// A domain's nodes after its gang members were fitted: (fit, nodes, first member left,
/// domain).
type Fitted<'a> = (
    u32,
    Vec<(NodeId, NodeState)>,
    Option<PodId>,
    Option<&'a str>,
);

/// The domain of `level` (or the whole cluster) where the most of a gang's pending members
/// fit together now, and what the closest node there lacks for the next one.
pub(super) fn gang_help(scheduler: &Scheduler, level: Option<&str>, pending: &[PodId]) -> GangHelp {
    let mut domains: BTreeMap<Option<&str>, Vec<NodeId>> = BTreeMap::new();
    for (id, node) in scheduler.cluster().iter() {
        match level {
            Some(level) => {
                if let Some(value) = node.spec.labels.get(level) {
                    domains.entry(Some(value.as_str())).or_default().push(id);
                }
            }
            None => domains.entry(None).or_default().push(id),
        }
    }
    let mut best: Option<Fitted<'_>> = None;
    for (domain, ids) in domains {
        let mut nodes: Vec<(NodeId, NodeState)> = ids
            .iter()
            .map(|&id| (id, scheduler.cluster().node(id).clone()))
            .collect();
        let (fit, left) = fit_together(scheduler, &mut nodes, pending);
        if best.as_ref().is_none_or(|b| fit > b.0) {
            best = Some((fit, nodes, left, domain));
        }
    }
    let (fit, nodes, left, domain) =
        best.unwrap_or((0, Vec::new(), pending.first().copied(), None));
    let closest = left.and_then(|pod| {
        let spec = &scheduler.pod(pod).spec;
        let mut probe = spec.clone();
        probe.demand = Demand::default();
        let whole = matches!(spec.demand.gpu, GpuRequest::Whole(_));
        let mut best: Option<(f64, usize, &str, &NodeState)> = None;
        for (id, node) in &nodes {
            if !scheduler.could_place_on(&probe, *id) {
                continue;
            }
            let (missing, share) = missing_on(node, &spec.demand, &spec.constraints);
            let key = (share, missing.len(), node.spec.name.as_str());
            if !missing.is_empty() && best.as_ref().is_none_or(|(s, n, c, _)| key < (*s, *n, *c)) {
                best = Some((share, missing.len(), node.spec.name.as_str(), node));
            }
        }
        best.map(|(_, _, name, node)| Closest {
            node: name.to_string(),
            lacks: missing_on(node, &spec.demand, &spec.constraints)
                .0
                .iter()
                .map(|m| lack(m, whole))
                .collect(),
        })
    });
    GangHelp {
        level: level.map(str::to_string),
        domain: domain.map(str::to_string),
        fit,
        pending: pending.len() as u32,
        closest,
    }
}
