//! Drains of the plan's batches on a running simulation, by one of two strategies:
//!
//! - `plain`: cordon, evict everything on the batch's nodes at once (as `kubectl drain`
//!   does), upgrade, uncordon;
//! - `checkpoint-aware`: cordon; ask workloads that offer it (`checkpoint-grace`) for a
//!   checkpoint and evict them once it is written; evict workloads that only checkpoint
//!   periodically just at their next checkpoint when it comes before the deadline; then
//!   upgrade and uncordon.
//!
//! Both evict a gang whole: its members on other nodes leave with it, since a distributed
//! job loses every rank's work when one rank goes (plain) and never runs partly (aware).
//! Evicted pods wait in the queue at their original place (the engine's `evict`).

use super::{PlanOptions, UpgradePlan};
use crate::sim::{SimError, Simulation};
use crate::workload::{ClusterEvent, JobKind, SimCluster, Workload};
use crate::SimConfig;
use kestrel_core::leaving::{drain_wait, drain_workloads, DrainCandidate, DrainMember, DrainWait};
use kestrel_core::{Millis, NodeId, PodId, PodPhase};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// How a batch's nodes are emptied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    Plain,
    CheckpointAware,
}

impl Strategy {
    pub const ALL: [Strategy; 2] = [Strategy::Plain, Strategy::CheckpointAware];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::Plain => "plain",
            Strategy::CheckpointAware => "checkpoint-aware",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Strategy::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown strategy {s:?}; use plain or checkpoint-aware"))
    }
}

/// What one strategy's upgrade cost.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct StrategyReport {
    pub strategy: Option<Strategy>,
    /// When the first node was cordoned and the last one uncordoned.
    pub started_at: Millis,
    pub finished_at: Millis,
    /// GPU-hours of batch work (Pods, Jobs) thrown away: run time since the last
    /// checkpoint of every evicted pod.
    pub lost_gpu_hours: f64,
    /// Batch pods evicted, and gangs among their workloads.
    pub evicted_pods: u64,
    pub evicted_gangs: u64,
    /// Pods of Deployments and StatefulSets restarted elsewhere (no training lost).
    pub service_restarts: u64,
    /// Workloads asked to checkpoint before eviction.
    pub checkpoint_requests: u64,
    /// Workloads evicted at their next periodic checkpoint.
    pub evicted_at_checkpoint: u64,
    /// Workloads whose next checkpoint lay past the deadline, evicted at once.
    pub past_deadline: u64,
    /// The most nodes and GPUs the upgrade had offline at one time.
    pub max_nodes_offline: u32,
    pub max_gpus_offline: u32,
    pub nodes_upgraded: u32,
    /// Nodes of the plan that were gone (removed) when their batch came.
    pub nodes_gone: Vec<String>,
}

impl StrategyReport {
    pub fn duration(&self) -> Millis {
        self.finished_at - self.started_at
    }
}

/// Called after each step of the drain (cordons, evictions, uncordons), before the engine
/// reacts: to check invariants on the engine's state.
pub type DrainObserver<'o> = &'o mut dyn FnMut(&Simulation<'_>);

/// One workload's pods to evict together (a pod, or a gang's running members).
struct Eviction {
    leave_at: Millis,
    /// (pod, node it runs on, start of its run): evicted only if still there.
    pods: Vec<(PodId, NodeId, Millis)>,
    /// Asked to checkpoint at this time.
    asked: Option<Millis>,
    gang: bool,
}

/// Runs the simulation to `start`, then upgrades the plan's batches one after the other
/// by `strategy`. Every node of a batch is checked to exist before any is cordoned.
pub fn run_upgrade(
    sim: &mut Simulation<'_>,
    plan: &UpgradePlan,
    strategy: Strategy,
    start: Millis,
    observe: DrainObserver<'_>,
) -> Result<StrategyReport, SimError> {
    sim.run_to(start)?;
    let mut report = StrategyReport {
        strategy: Some(strategy),
        started_at: sim.now(),
        ..Default::default()
    };
    for batch in &plan.batches {
        let t0 = sim.now();
        let mut nodes: Vec<(String, NodeId, u32)> = Vec::new();
        // Nodes someone else had cordoned stay cordoned after their upgrade.
        let mut cordoned_before = BTreeSet::new();
        for name in &batch.nodes {
            let cluster = sim.scheduler().cluster();
            match cluster.id_of(name) {
                Some(id) => {
                    if cluster.node(id).spec.unschedulable {
                        cordoned_before.insert(id);
                    }
                    nodes.push((name.clone(), id, cluster.node(id).gpu_count()));
                }
                None => report.nodes_gone.push(name.clone()),
            }
        }
        if nodes.is_empty() {
            continue;
        }
        for (name, _, _) in &nodes {
            sim.set_unschedulable(name, true)?;
        }
        report.max_nodes_offline = report.max_nodes_offline.max(nodes.len() as u32);
        let gpus: u32 = nodes.iter().map(|n| n.2).sum();
        report.max_gpus_offline = report.max_gpus_offline.max(gpus);
        observe(sim);

        let evictions = plan_evictions(sim, &nodes, strategy, &plan.options, &mut report);
        // Each node's upgrade starts once every workload on it has left.
        let mut ready: BTreeMap<NodeId, Millis> = nodes.iter().map(|n| (n.1, t0)).collect();
        for e in &evictions {
            for (_, node, _) in &e.pods {
                if let Some(at) = ready.get_mut(node) {
                    *at = (*at).max(e.leave_at);
                }
            }
        }
        // Steps in time order: evictions before uncordons at one instant.
        let mut steps: Vec<(Millis, u8, usize)> = evictions
            .iter()
            .enumerate()
            .map(|(i, e)| (e.leave_at, 0, i))
            .collect();
        for (i, (_, id, _)) in nodes.iter().enumerate() {
            steps.push((ready[id] + plan.options.node_duration, 1, i));
        }
        steps.sort_unstable();
        for (at, kind, i) in steps {
            sim.run_to(at)?;
            if kind == 0 {
                evict(sim, &evictions[i], &mut report);
            } else {
                if !cordoned_before.contains(&nodes[i].1) {
                    sim.set_unschedulable(&nodes[i].0, false)?;
                }
                report.nodes_upgraded += 1;
            }
            observe(sim);
        }
    }
    report.finished_at = sim.now();
    Ok(report)
}

/// The workloads on the batch's nodes and when each leaves.
fn plan_evictions(
    sim: &Simulation<'_>,
    nodes: &[(String, NodeId, u32)],
    strategy: Strategy,
    options: &PlanOptions,
    report: &mut StrategyReport,
) -> Vec<Eviction> {
    let now = sim.now();
    let scheduler = sim.scheduler();
    let batch: BTreeSet<NodeId> = nodes.iter().map(|n| n.1).collect();
    // Running pods in pod order: the drain's workloads, decided as the live drain does.
    let running: Vec<DrainCandidate<(PodId, NodeId), (String, String)>> = scheduler
        .pods()
        .filter_map(|(id, record)| {
            let PodPhase::Bound { node, .. } = record.phase else {
                return None;
            };
            Some(DrainCandidate {
                pod: (id, node),
                gang: record
                    .spec
                    .gang
                    .as_ref()
                    .map(|m| (record.spec.namespace.clone(), m.gang.clone())),
                on_drained_node: batch.contains(&node),
            })
        })
        .collect();
    let mut out = Vec::new();
    for members in drain_workloads(&running) {
        let pods: Vec<(PodId, NodeId, Millis)> = members
            .into_iter()
            .filter_map(|(p, n)| sim.run_start(p).map(|s| (p, n, s)))
            .collect();
        let Some(&(first, _, _)) = pods.first() else {
            continue;
        };
        let spec = &scheduler.pod(first).spec;
        // Signalled now, a pod stops within its termination grace.
        let stopped = now
            + pods
                .iter()
                .map(|(p, _, _)| scheduler.pod(*p).spec.preemption.termination_grace)
                .max()
                .unwrap_or(0);
        let service = pods.iter().all(|(p, _, _)| {
            sim.job_of(*p)
                .is_some_and(|j| sim.workload().jobs[j].kind == JobKind::Service)
        });
        let (leave_at, asked) = match strategy {
            Strategy::Plain => (stopped, None),
            Strategy::CheckpointAware if service => (stopped, None),
            Strategy::CheckpointAware => {
                let members: Vec<DrainMember<'_>> = pods
                    .iter()
                    .map(|&(p, _, start)| DrainMember {
                        terms: &scheduler.pod(p).spec.preemption,
                        run_start: Some(start),
                    })
                    .collect();
                match drain_wait(
                    &members,
                    now,
                    options.checkpoint_deadline,
                    options.ask_for_checkpoints,
                ) {
                    DrainWait::OnRequest { until } => {
                        // Asked now; it leaves once the checkpoint is written.
                        report.checkpoint_requests += 1;
                        ((now + options.checkpoint_duration).min(until), Some(now))
                    }
                    DrainWait::Periodic { next, .. } => {
                        report.evicted_at_checkpoint += 1;
                        (next, None)
                    }
                    DrainWait::PastDeadline { .. } => {
                        report.past_deadline += 1;
                        (stopped, None)
                    }
                    DrainWait::Now => (stopped, None),
                }
            }
        };
        out.push(Eviction {
            leave_at,
            gang: spec.gang.is_some(),
            pods,
            asked,
        });
    }
    out
}

/// Evicts a workload's pods that still run where and since when they were planned to.
fn evict(sim: &mut Simulation<'_>, eviction: &Eviction, report: &mut StrategyReport) {
    let mut any = false;
    for &(pod, node, start) in &eviction.pods {
        let still = matches!(sim.scheduler().pod(pod).phase, PodPhase::Bound { node: n, .. } if n == node)
            && sim.run_start(pod) == Some(start);
        if !still {
            continue;
        }
        let service = sim
            .job_of(pod)
            .is_some_and(|j| sim.workload().jobs[j].kind == JobKind::Service);
        let Some(lost) = sim.drain_evict(pod, eviction.asked) else {
            continue;
        };
        any = true;
        if service {
            report.service_restarts += 1;
        } else {
            report.lost_gpu_hours += lost;
            report.evicted_pods += 1;
        }
    }
    if any && eviction.gang {
        report.evicted_gangs += 1;
    }
}

/// Simulates the workload on the cluster with the upgrade starting at `start`, once per
/// strategy, with the same seed. The plan is made (and checked) on the nodes as they
/// stand at `start`, before anything is cordoned.
pub fn simulate_upgrade(
    cluster: &SimCluster,
    workload: &Workload,
    config: &SimConfig,
    options: &PlanOptions,
    start: Millis,
    strategies: &[Strategy],
) -> Result<(UpgradePlan, Vec<StrategyReport>), UpgradeError> {
    // Cluster changes after the start would fight the upgrade; those before it stand.
    let mut cluster = cluster.clone();
    cluster.events.retain(|e: &ClusterEvent| e.at <= start);
    let plan = super::plan(&super::nodes_at(&cluster, start), options)?;
    let mut reports = Vec::new();
    for &strategy in strategies {
        let mut sim = Simulation::new(&cluster, workload, config.clone())?;
        reports.push(run_upgrade(&mut sim, &plan, strategy, start, &mut |_| {})?);
    }
    Ok((plan, reports))
}

#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("{0}")]
    Plan(#[from] super::PlanError),
    #[error("{0}")]
    Sim(#[from] SimError),
}
