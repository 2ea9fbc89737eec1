//! The discrete-event simulator: a virtual clock drives the same `Scheduler` the live
//! driver uses. Events at one instant are applied first (cluster changes, completions,
//! arrivals, in the order they were queued), then one scheduling cycle runs.

use crate::estimates::Estimates;
use crate::metrics::SimReport;
use crate::workload::{ClusterChange, JobKind, SimCluster, Workload};
use kestrel_core::leaving::CheckpointRequest;
use kestrel_core::{
    Binding, ClusterError, Decisions, GangError, GangId, GpuAssignment, Millis, NodeId, PodId,
    PodPhase, PodSpec, Policy, Scheduler, SchedulerConfig, VictimOrder, GPU_CLIQUE_LABEL,
    HOSTNAME_LABEL, RACK_LABEL,
};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};

pub mod events;
mod evictions;
mod measure;
mod namespace_quota;
mod training;

use training::TrainingState;

/// How to run a simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    pub policy: Policy,
    pub seed: u64,
    /// Stop at this simulated time; `None`: when no events are left.
    pub until: Option<Millis>,
    /// Time between samples of the time series; `None`: about 500 samples over the run.
    pub sample_every: Option<Millis>,
    pub scenario: String,
    /// How preemption victims are ranked.
    pub victim_order: VictimOrder,
    /// Whether victims that offer a checkpoint are asked for one before eviction.
    pub checkpoint_requests: bool,
    /// Delay between a decision and its effect (API round trips, controller latency).
    pub control_latency: Millis,
    /// How long a victim takes to write a checkpoint when asked (capped by its grace).
    pub checkpoint_duration: Millis,
    /// Longest hold of a head-of-queue reservation; 0: none.
    pub head_reservation: Millis,
    /// Half-life of the borrowing history fair share counts; 0: only borrowing now.
    pub fair_share_half_life: Millis,
    /// How long a gang that timed out waits before it is tried again.
    pub gang_backoff: Millis,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            policy: Policy::Kestrel,
            seed: 42,
            until: None,
            sample_every: None,
            scenario: String::new(),
            victim_order: VictimOrder::CheckpointAware,
            checkpoint_requests: true,
            control_latency: 0,
            checkpoint_duration: 20_000,
            head_reservation: 0,
            fair_share_half_life: 0,
            gang_backoff: kestrel_core::DEFAULT_GANG_BACKOFF,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("cluster: {0}")]
    Cluster(#[from] ClusterError),
    #[error("{0}")]
    Gang(#[from] GangError),
    #[error("gang {gang}: topology level {level:?}: no node carries this label; label the nodes or use another level")]
    UnknownLevel { gang: String, level: String },
    #[error("the cluster has no nodes at the start; give at least one node or pool")]
    NoNodes,
    #[error("{0}")]
    Queue(#[from] kestrel_core::QueueError),
    #[error("the engine ran {cycles} cycles at t={at} ms without the clock moving (decisions that undo each other); this is a Kestrel bug: please report it with the cluster and workload files")]
    NoProgress { at: Millis, cycles: u32 },
    #[error("predicted starts were not worked out within {seconds} s of forward runs (the cluster is large or much is pending); give --predict-budget more time, or --no-predict to leave them out")]
    PredictionOutOfTime { seconds: f64 },
}

/// Cycles at one instant after which a run is stopped as stuck: evictions and bindings
/// at one instant settle in a handful of cycles.
const MAX_CYCLES_AT_ONE_INSTANT: u32 = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Cluster(usize),
    /// (pod, epoch): an eviction bumps the epoch and voids the pending completion.
    PodDone(PodId, u32),
    /// (pod, epoch): a preempted pod leaves its node.
    Evict(PodId, u32),
    Arrival(usize),
    /// The engine asked for a cycle at this time (a minimum runtime or delay ends).
    Wake,
    /// (pod, epoch, failure): a TrainingJob member fails as injected.
    Fail(PodId, u32, usize),
    /// A TrainingJob's `activeDeadlineSeconds` ends: its controller looks again.
    TrainingDeadline(usize),
    Sample,
}

#[derive(Debug, Clone)]
struct JobState {
    created: u32,
    succeeded: u32,
    finished_at: Option<Millis>,
}

#[derive(Debug, Clone)]
struct PodState {
    job: usize,
    created_at: Millis,
    first_bound_at: Option<Millis>,
    epoch: u32,
    running: bool,
    /// Work saved by checkpoints in earlier runs (a restart resumes from it).
    done_work: Millis,
    /// When the current run started working (bind plus control latency).
    run_start: Millis,
    /// Asked to leave; `Some(t)`: asked to checkpoint at `t` first.
    evicting: Option<Option<Millis>>,
    /// GPU thousandths its current binding holds (a share by memory depends on the device).
    gpu_milli: u64,
}

/// A run in progress. Use [`simulate`] unless you need to step it. A clone goes on from
/// the same moment on its own (forward runs of a prediction).
#[derive(Clone)]
pub struct Simulation<'a> {
    cluster: &'a SimCluster,
    workload: &'a Workload,
    config: SimConfig,
    scheduler: Scheduler,
    queue: BinaryHeap<Reverse<(Millis, u64, Event)>>,
    next_seq: u64,
    now: Millis,
    jobs: Vec<JobState>,
    pods: HashMap<PodId, PodState>,
    sample_every: Millis,
    report: SimReport,
    reason_totals: BTreeMap<String, u64>,
    started_gangs: BTreeSet<GangId>,
    integrals: Integrals,
    events_total: usize,
    events_done: usize,
    /// Cycles run at the current instant (a guard against decisions that undo each other).
    cycles_at_instant: u32,
    /// Cycles run at multiples of this (0: at every instant something happens).
    cycle_resolution: Millis,
    /// The wake-up already queued.
    wake_queued: Option<Millis>,
    /// Preemptor -> when its victims were chosen.
    /// Preemptors not started yet: their first preemption decision, and their first that
    /// reclaimed from another queue.
    preempted_for: HashMap<PodId, (Millis, Option<Millis>)>,
    start_latencies: Vec<f64>,
    reclaim_latencies: Vec<f64>,
    /// Per ClusterQueue: (main resource, used and borrowed integrals).
    queue_integrals: Vec<(String, f64, f64)>,
    namespace_quota: NamespaceQuotas,
    /// Wall-clock time spent in the engine's cycles (not in the report: it varies).
    decide_time: std::time::Duration,
    /// Prediction mode: the duration each job's pods are taken to run (estimates instead
    /// of the truth), set by [`Simulation::switch_to_estimates`].
    estimates: Option<Estimates>,
    /// Bindings made since the log was last taken, when recording
    /// ([`Simulation::record_bindings`]).
    bind_log: Option<Vec<(PodId, Millis)>>,
    /// When the last event other than a sample happened.
    last_event_at: Millis,
    /// Per TrainingJob of the workload: where its controller stands.
    training: Vec<TrainingState>,
    /// TrainingJobs whose pods changed since their controller last looked.
    training_dirty: BTreeSet<usize>,
    /// What happened, when asked ([`Simulation::record_events`]).
    event_log: events::EventLog,
}

/// ResourceQuota accounting per namespace, as the API server keeps it: each quota (in
/// the model the live scheduler reads quotas into) counts the pods that exist, pending
/// or running.
#[derive(Debug, Default, Clone)]
struct NamespaceQuotas {
    quotas: HashMap<String, Vec<kestrel_objects::quota::Quota>>,
    /// Jobs whose pod creation was refused, per namespace, in order: retried when quota
    /// frees up.
    refused: HashMap<String, Vec<usize>>,
}

/// Time integrals for the time-weighted means.
#[derive(Debug, Default, Clone)]
struct Integrals {
    last_at: Millis,
    allocated: f64,
    utilized: f64,
    gpu_milli_allocated: f64,
    gpu_milli_utilized: f64,
}

/// Runs a whole simulation. `progress(done, total)` is called now and then with the
/// number of events processed and the number known so far.
pub fn simulate(
    cluster: &SimCluster,
    workload: &Workload,
    config: SimConfig,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<SimReport, SimError> {
    let mut sim = Simulation::new(cluster, workload, config)?;
    while sim.step()? {
        if sim.events_done % 4096 == 0 {
            progress(sim.events_done, sim.events_total);
        }
    }
    progress(sim.events_done, sim.events_total);
    Ok(sim.finish())
}

/// [`simulate`], then the same run with every gang's topology request dropped
/// ([`Workload::topology_blind`]), whose gang counts go in
/// [`SimReport::topology_blind_gangs`]: what topology-aware placement gained.
pub fn simulate_with_topology_blind(
    cluster: &SimCluster,
    workload: &Workload,
    config: SimConfig,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<SimReport, SimError> {
    let mut report = simulate(cluster, workload, config.clone(), progress)?;
    let blind = simulate(cluster, &workload.topology_blind(), config, &mut |_, _| {})?;
    report.topology_blind_gangs = Some(blind.gangs);
    Ok(report)
}

impl<'a> Simulation<'a> {
    pub fn new(
        cluster: &'a SimCluster,
        workload: &'a Workload,
        config: SimConfig,
    ) -> Result<Self, SimError> {
        if cluster.nodes.is_empty() {
            return Err(SimError::NoNodes);
        }
        let mut scheduler = Scheduler::new(SchedulerConfig {
            policy: config.policy,
            seed: config.seed,
            victim_order: config.victim_order,
            head_reservation: config.head_reservation,
            fair_share_half_life: config.fair_share_half_life,
            gang_backoff: config.gang_backoff,
        });
        for node in &cluster.nodes {
            scheduler.add_node(workload.node_spec(node))?;
        }
        scheduler.set_topology_levels(workload.topology_levels.clone());
        for gang in &workload.gangs {
            let t = &gang.topology;
            // Required levels must exist; a preferred one falls back upward when absent.
            let levels = t.required.iter().chain(t.slice.iter().map(|(l, _)| l));
            for level in levels {
                let known = cluster.nodes.iter().any(|n| n.labels.contains_key(level))
                    || cluster.events.iter().any(|e| matches!(&e.change, ClusterChange::AddNode(n) if n.labels.contains_key(level)));
                if !known {
                    return Err(SimError::UnknownLevel {
                        gang: gang.key(),
                        level: level.clone(),
                    });
                }
            }
            scheduler.add_gang(gang.clone())?;
        }
        let horizon = workload
            .jobs
            .iter()
            .map(|j| j.arrival + j.duration.unwrap_or(0))
            .chain(cluster.events.iter().map(|e| e.at))
            .max()
            .unwrap_or(0);
        let horizon = config.until.unwrap_or(horizon).max(1);
        let sample_every = config.sample_every.unwrap_or((horizon / 500).max(1000));
        let mut sim = Self::with_engine(cluster, workload, config, scheduler, sample_every);
        sim.register_queues()?;
        for (i, event) in cluster.events.iter().enumerate() {
            sim.push(event.at, Event::Cluster(i));
        }
        for (i, job) in workload.jobs.iter().enumerate() {
            sim.push(job.arrival, Event::Arrival(i));
        }
        sim.push(0, Event::Sample);
        Ok(sim)
    }

    /// A run that goes on from an engine's state instead of from the start, for predictions
    /// from a live cluster: `scheduler` holds the nodes, queues and pods as they stand at
    /// `now`, and `workload` has one single-pod job per pod of `pods`, in that order, all
    /// created already (no arrivals; `cluster` has no changes to come). Bound pods run from
    /// their binding; pods the engine is evicting leave now.
    pub fn resume(
        cluster: &'a SimCluster,
        workload: &'a Workload,
        config: SimConfig,
        scheduler: Scheduler,
        now: Millis,
        pods: &[PodId],
    ) -> Self {
        assert_eq!(workload.jobs.len(), pods.len(), "one job per pod");
        let mut sim = Self::with_engine(cluster, workload, config, scheduler, Millis::MAX);
        sim.now = now;
        sim.last_event_at = now;
        for (job, &pod) in pods.iter().enumerate() {
            let record = sim.scheduler.pod(pod);
            let bound_at = match record.phase {
                PodPhase::Bound { at, .. } => Some(at),
                _ => None,
            };
            let evicting = record.evicting;
            sim.jobs[job].created = 1;
            sim.pods.insert(
                pod,
                PodState {
                    job,
                    created_at: record.submitted_at,
                    first_bound_at: bound_at,
                    epoch: 0,
                    running: bound_at.is_some(),
                    done_work: 0,
                    run_start: bound_at.unwrap_or(now),
                    evicting: None,
                    gpu_milli: sim.scheduler.gpu_milli(pod),
                },
            );
            if evicting && bound_at.is_some() {
                sim.push(now, Event::Evict(pod, 0));
            }
        }
        sim
    }

    /// The run's state around an engine, before anything happens.
    fn with_engine(
        cluster: &'a SimCluster,
        workload: &'a Workload,
        config: SimConfig,
        scheduler: Scheduler,
        sample_every: Millis,
    ) -> Self {
        Simulation {
            cluster,
            workload,
            report: SimReport {
                scenario: config.scenario.clone(),
                policy: config.policy.name().to_string(),
                seed: config.seed,
                ..Default::default()
            },
            config,
            scheduler,
            queue: BinaryHeap::new(),
            next_seq: 0,
            now: 0,
            jobs: vec![
                JobState {
                    created: 0,
                    succeeded: 0,
                    finished_at: None,
                };
                workload.jobs.len()
            ],
            pods: HashMap::new(),
            sample_every,
            reason_totals: BTreeMap::new(),
            started_gangs: BTreeSet::new(),
            integrals: Integrals::default(),
            events_total: 0,
            events_done: 0,
            cycles_at_instant: 0,
            cycle_resolution: 0,
            wake_queued: None,
            preempted_for: HashMap::new(),
            start_latencies: Vec::new(),
            reclaim_latencies: Vec::new(),
            queue_integrals: Vec::new(),
            namespace_quota: NamespaceQuotas::of(&workload.queues.resource_quotas),
            decide_time: std::time::Duration::ZERO,
            estimates: None,
            bind_log: None,
            last_event_at: 0,
            training: TrainingState::for_workload(workload),
            training_dirty: BTreeSet::new(),
            event_log: events::EventLog::default(),
        }
    }

    fn push(&mut self, at: Millis, event: Event) {
        self.queue.push(Reverse((at, self.next_seq, event)));
        self.next_seq += 1;
        self.events_total += 1;
    }

    /// The scheduler, to inspect state mid-run.
    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// Pending pods explained node by node (the default) or in short, for runs that only
    /// read decisions ([`Scheduler::set_full_explanations`]).
    pub fn set_full_explanations(&mut self, on: bool) {
        self.scheduler.set_full_explanations(on);
    }

    /// Runs cycles only at multiples of `resolution` (0: at every instant something
    /// happens), each after all that happened since the last: for runs that read start
    /// times to that resolution, far fewer cycles when completions come close together.
    pub fn set_cycle_resolution(&mut self, resolution: Millis) {
        self.cycle_resolution = resolution;
    }

    pub fn now(&self) -> Millis {
        self.now
    }

    /// Wall-clock time the engine spent deciding so far.
    pub fn decide_time(&self) -> std::time::Duration {
        self.decide_time
    }

    /// The workload this run simulates.
    pub fn workload(&self) -> &'a Workload {
        self.workload
    }

    /// The cluster this run simulates.
    pub fn cluster_spec(&self) -> &'a SimCluster {
        self.cluster
    }

    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Runs every event up to and including `t`, then moves the clock to `t`. Returns
    /// whether the run still goes on at `t`: `false` when nothing was left to happen after
    /// [`Simulation::last_event_at`], which is earlier than `t` (the clock then stays there).
    pub fn run_to(&mut self, t: Millis) -> Result<bool, SimError> {
        while self
            .queue
            .peek()
            .is_some_and(|Reverse((at, _, _))| *at <= t)
        {
            if !self.step_until(Some(t))? {
                break;
            }
        }
        let going = self.last_event_at >= t
            || self
                .queue
                .iter()
                .any(|Reverse((_, _, e))| !matches!(e, Event::Sample));
        // After the last event the state stands: the clock still moves to `t`, so waits
        // read as long as they are by then.
        if t > self.now {
            self.advance_to(t);
        }
        Ok(going)
    }

    /// When the last event other than a sample happened (a cluster change, an arrival, a
    /// completion, an eviction, a wake-up).
    pub fn last_event_at(&self) -> Millis {
        self.last_event_at
    }

    /// From now on, logs every binding (pod, time) for [`Simulation::take_bindings`].
    pub fn record_bindings(&mut self) {
        self.bind_log.get_or_insert_with(Vec::new);
    }

    /// The bindings logged since the last call, in order.
    pub fn take_bindings(&mut self) -> Vec<(PodId, Millis)> {
        self.bind_log
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The job (an index into the workload's jobs) a pod was created for.
    pub fn job_of(&self, pod: PodId) -> Option<usize> {
        self.pods.get(&pod).map(|s| s.job)
    }

    /// When a running pod ends if its job runs as `estimates` say, knowing how long it has
    /// worked: the start of its current run plus what is left of that runtime after work
    /// saved by checkpoints, not before now. `None`: not running, or it runs to the end.
    pub fn end_of_running(&self, pod: PodId, estimates: &Estimates) -> Option<Millis> {
        let state = self.pods.get(&pod).filter(|s| s.running)?;
        let worked = state.done_work + self.now.saturating_sub(state.run_start);
        let runtime = estimates.runtime(state.job, worked)?;
        Some((state.run_start + runtime.saturating_sub(state.done_work)).max(self.now))
    }

    /// Switches to prediction: from now on pods run as `estimates` say (one entry per
    /// workload job; `None` runs to the end) instead of their true duration. Pods running
    /// now end as [`Simulation::end_of_running`] says. Nothing that is not known
    /// now happens later: arrivals and cluster changes still to come are dropped, as a live
    /// scheduler would not know them (pods that known Jobs still create, and evictions
    /// under way, go on). Samples stop; bindings are logged ([`Simulation::take_bindings`]).
    pub fn switch_to_estimates(&mut self, estimates: Estimates) {
        assert_eq!(
            estimates.runtimes.len(),
            self.workload.jobs.len(),
            "one duration per workload job"
        );
        let kept: Vec<_> = std::mem::take(&mut self.queue)
            .into_iter()
            .filter(|Reverse((_, _, e))| matches!(e, Event::Evict(..) | Event::Wake))
            .collect();
        self.queue = kept.into_iter().collect();
        let mut running: Vec<(PodId, u32)> = self
            .pods
            .iter()
            .filter(|(_, s)| s.running)
            .map(|(&pod, s)| (pod, s.epoch))
            .collect();
        running.sort_unstable();
        for (pod, epoch) in running {
            if let Some(end) = self.end_of_running(pod, &estimates) {
                self.push(end, Event::PodDone(pod, epoch));
            }
        }
        self.estimates = Some(estimates);
        self.record_bindings();
    }

    /// Applies all events of the next instant (with a cycle resolution, of the next
    /// multiple of it) and runs one cycle. `false` when done.
    pub fn step(&mut self) -> Result<bool, SimError> {
        self.step_until(None)
    }

    /// [`Simulation::step`], with the cycle no later than `limit` (a stop of
    /// [`Simulation::run_to`]) when one is given.
    fn step_until(&mut self, limit: Option<Millis>) -> Result<bool, SimError> {
        let Some(Reverse((first, _, _))) = self.queue.peek().copied() else {
            return Ok(false);
        };
        let at = match self.cycle_resolution {
            0 => first,
            r => {
                let at = first.div_ceil(r) * r;
                limit.map_or(at, |l| at.min(l.max(first)))
            }
        };
        if self.config.until.is_some_and(|until| first > until) {
            return Ok(false);
        }
        if at == self.now && self.report.cycles > 0 {
            self.cycles_at_instant += 1;
            if self.cycles_at_instant > MAX_CYCLES_AT_ONE_INSTANT {
                return Err(SimError::NoProgress {
                    at,
                    cycles: self.cycles_at_instant,
                });
            }
        } else {
            self.cycles_at_instant = 0;
        }
        let mut sample = false;
        while let Some(Reverse((t, _, event))) = self.queue.peek().copied() {
            if t > at {
                break;
            }
            self.advance_to(t);
            self.queue.pop();
            self.events_done += 1;
            match event {
                Event::Cluster(i) => self.apply_cluster_change(i)?,
                Event::PodDone(pod, epoch) => self.pod_done(pod, epoch),
                Event::Evict(pod, epoch) => self.evict(pod, epoch),
                Event::Arrival(job) => self.arrive(job),
                Event::Wake => self.wake_queued = None,
                Event::Fail(pod, epoch, failure) => self.fail(pod, epoch, failure),
                Event::TrainingDeadline(job) => {
                    self.training_dirty.insert(job);
                }
                Event::Sample => sample = true,
            }
            if !matches!(event, Event::Sample) {
                self.last_event_at = t;
            }
        }
        self.advance_to(at);
        self.reconcile_training();
        let started = std::time::Instant::now();
        let decisions = self.scheduler.schedule(at);
        self.decide_time += started.elapsed();
        self.report.cycles += 1;
        self.apply(decisions);
        self.reconcile_training();
        if let Some(wake) = self.scheduler.next_wakeup().filter(|&w| w > at) {
            if self.wake_queued.is_none_or(|q| wake < q) {
                self.wake_queued = Some(wake);
                self.push(wake, Event::Wake);
            }
        }
        if sample {
            self.take_sample();
            // Keep sampling while anything can still happen.
            if !self.queue.is_empty() {
                self.push(at + self.sample_every, Event::Sample);
            }
        }
        Ok(true)
    }

    fn advance_to(&mut self, at: Millis) {
        let dt = (at - self.integrals.last_at) as f64;
        if dt > 0.0 {
            for (i, (resource, used, borrowed)) in self.queue_integrals.iter_mut().enumerate() {
                let usage = self.scheduler.queue_usage(kestrel_core::CqId(i as u32));
                for u in usage.iter().filter(|u| u.resource == *resource) {
                    *used += dt * u.used as f64;
                    *borrowed += dt * u.borrowed as f64;
                }
            }
        }
        self.integrals.allocated += dt * self.integrals.gpu_milli_allocated;
        self.integrals.utilized += dt * self.integrals.gpu_milli_utilized;
        self.integrals.last_at = at;
        self.now = at;
    }

    fn apply_cluster_change(&mut self, index: usize) -> Result<(), SimError> {
        self.log_cluster_change(&self.cluster.events[index].change);
        match &self.cluster.events[index].change {
            ClusterChange::AddNode(spec) => {
                self.scheduler.add_node(self.workload.node_spec(spec))?;
            }
            ClusterChange::RemoveNode(name) => {
                for pod in self.scheduler.remove_node(name)? {
                    self.report.pods.evicted += 1;
                    let state = self.pods.get_mut(&pod).expect("evicted pod is tracked");
                    let (done, ran) = (state.done_work, self.now.saturating_sub(state.run_start));
                    state.epoch += 1;
                    state.running = false;
                    self.track_gpu_load(pod, -1.0);
                    // Kept: what its periodic checkpoints saved.
                    let saved = self.periodic_checkpoint(pod, ran);
                    self.training_pod_left(pod, done, ran, done + saved, "Terminated");
                }
            }
            ClusterChange::Cordon(name) => self.scheduler.set_unschedulable(name, true)?,
            ClusterChange::Uncordon(name) => self.scheduler.set_unschedulable(name, false)?,
        }
        Ok(())
    }

    fn create_pod(&mut self, job_index: usize) {
        let job = &self.workload.jobs[job_index];
        if !self.namespace_quota_admits(job_index) {
            self.report.pods.rejected_by_quota += 1;
            self.namespace_quota
                .refused
                .entry(job.namespace.clone())
                .or_default()
                .push(job_index);
            return;
        }
        let created = self.jobs[job_index].created;
        let name = match job.kind {
            JobKind::Pod | JobKind::BarePod => job.name.clone(),
            JobKind::Job | JobKind::Service | JobKind::Training => {
                format!("{}-{created}", job.name)
            }
        };
        // Pods of a Job or set take their index as rank, as torchrun's RANK does.
        self.submit_pod(job_index, name, created, 0);
    }

    /// Creates a pod of a job named `name` with gang rank `rank` (unless the template
    /// gives one), resuming from `done_work` of saved work.
    fn submit_pod(
        &mut self,
        job_index: usize,
        name: String,
        rank: u32,
        done_work: Millis,
    ) -> PodId {
        let job = &self.workload.jobs[job_index];
        let mut spec: PodSpec = job.template.clone();
        spec.namespace = job.namespace.clone();
        spec.name = name;
        if let Some(devices) = &mut spec.constraints.devices {
            devices.name_for_pod(&spec.namespace, &spec.name);
        }
        if let Some(volumes) = &mut spec.constraints.volumes {
            volumes.name_for_pod(&spec.namespace, &job.template.name, &spec.name);
        }
        if let Some(membership) = &mut spec.gang {
            membership.rank.get_or_insert(rank);
        }
        self.jobs[job_index].created += 1;
        let id = self.scheduler.submit(spec, self.now);
        self.pods.insert(
            id,
            PodState {
                job: job_index,
                created_at: self.now,
                first_bound_at: None,
                epoch: 0,
                running: false,
                done_work,
                run_start: 0,
                evicting: None,
                gpu_milli: 0,
            },
        );
        self.report.pods.created += 1;
        id
    }

    fn arrive(&mut self, job_index: usize) {
        self.report.jobs.submitted += 1;
        let job = &self.workload.jobs[job_index];
        if job.kind == JobKind::Training {
            // Its controller creates the pods, all roles at once.
            if let Some(training) = self.training_of(job_index) {
                self.training_dirty.insert(training);
            }
            return;
        }
        let initial = job.parallelism.min(job.completions);
        for _ in 0..initial {
            self.create_pod(job_index);
        }
    }

    fn pod_done(&mut self, pod: PodId, epoch: u32) {
        let Some(state) = self.pods.get_mut(&pod) else {
            return;
        };
        if state.epoch != epoch || !state.running {
            return;
        }
        state.running = false;
        let job_index = state.job;
        let (done, ran) = (state.done_work, self.now.saturating_sub(state.run_start));
        self.track_gpu_load(pod, -1.0);
        self.scheduler.finish(pod).expect("running pod is known");
        self.scheduler.release_unused_claims_of(pod);
        self.namespace_quota_release(job_index);
        self.report.pods.completed += 1;
        let job = &self.workload.jobs[job_index];
        if job.kind == JobKind::Training {
            // Its controller decides what the end of one member means for the job.
            let run = training::Run {
                ran,
                reached: done + ran,
                saved: done + ran,
            };
            self.training_pod_ended(pod, run, training::End::Succeeded);
            return;
        }
        let state = &mut self.jobs[job_index];
        state.succeeded += 1;
        if state.succeeded >= job.completions {
            state.finished_at = Some(self.now);
            self.report.jobs.completed += 1;
        } else if job.kind == JobKind::Job {
            // Creations a ResourceQuota refused are still owed, and retried below.
            let refused = self
                .namespace_quota
                .refused
                .get(&job.namespace)
                .map_or(0, |jobs| jobs.iter().filter(|&&j| j == job_index).count());
            if state.created + (refused as u32) < job.completions {
                self.create_pod(job_index);
            }
        }
    }

    /// Adds (`sign` 1) or removes (-1) a bound pod's GPUs, and their busy share, from the
    /// running totals the time-weighted means integrate.
    fn track_gpu_load(&mut self, pod: PodId, sign: f64) {
        let state = &self.pods[&pod];
        let job = &self.workload.jobs[state.job];
        let milli = sign * state.gpu_milli as f64;
        self.integrals.gpu_milli_allocated += milli;
        self.integrals.gpu_milli_utilized += milli * job.gpu_utilization;
    }

    fn apply(&mut self, decisions: Decisions) {
        self.count_started_gangs(&decisions.bindings);
        for binding in decisions.bindings {
            self.report.bindings += 1;
            let state = self
                .pods
                .get_mut(&binding.pod)
                .expect("bound pod is tracked");
            if state.first_bound_at.is_none() {
                state.first_bound_at = Some(self.now);
                self.report.pods.scheduled += 1;
            }
            state.running = true;
            state.gpu_milli = binding.gpus.milli();
            state.run_start = self.now + self.config.control_latency;
            let epoch = state.epoch;
            let job = &self.workload.jobs[state.job];
            let (run_start, done_work) = (state.run_start, state.done_work);
            let duration = match &self.estimates {
                Some(estimates) => estimates.runtime(state.job, done_work),
                None => job.duration,
            };
            if let Some(log) = &mut self.bind_log {
                log.push((binding.pod, self.now));
            }
            self.log_bind(&binding);
            let remaining = duration.map(|d| d.saturating_sub(done_work));
            if let Some(remaining) = remaining {
                self.push(run_start + remaining, Event::PodDone(binding.pod, epoch));
            }
            if let Some((failure, after)) = self.training_bound(binding.pod) {
                if remaining.is_none_or(|r| after < r) {
                    self.push(run_start + after, Event::Fail(binding.pod, epoch, failure));
                }
            }
            if let Some((chosen_at, reclaimed_at)) = self.preempted_for.remove(&binding.pod) {
                let started = self.now + self.config.control_latency;
                let seconds = |since: Millis| (started - since) as f64 / 1000.0;
                self.start_latencies.push(seconds(chosen_at));
                if let Some(at) = reclaimed_at {
                    self.reclaim_latencies.push(seconds(at));
                }
            }
            self.track_gpu_load(binding.pod, 1.0);
        }
        // After the bindings: a victim may have been bound earlier in the same cycle.
        self.start_evictions(&decisions.preemptions);
    }

    /// Counts gangs that started in this cycle and how tightly they landed.
    fn count_started_gangs(&mut self, bindings: &[Binding]) {
        // (nodes, whether every pod got a GPU) per gang started this cycle.
        let mut started: BTreeMap<GangId, (Vec<NodeId>, bool)> = BTreeMap::new();
        for b in bindings {
            let spec = &self.scheduler.pod(b.pod).spec;
            if let Some(m) = &spec.gang {
                if let Some(gang) = self.scheduler.gang_id(&spec.namespace, &m.gang) {
                    let entry = started.entry(gang).or_insert((Vec::new(), true));
                    entry.0.push(b.node);
                    entry.1 &= b.gpus.milli() > 0;
                }
            }
        }
        let rack_level = rack_level(&self.workload.topology_levels);
        for (gang, (mut nodes, all_gpu)) in started {
            if !self.started_gangs.insert(gang) {
                continue; // a replacement, not a start
            }
            self.report.gangs.started += 1;
            let cluster = self.scheduler.cluster();
            let label = |n: &NodeId, l: &str| cluster.node(*n).spec.labels.get(l).cloned();
            let one = |values: Vec<Option<String>>| {
                values[0].is_some() && values.iter().all(|v| *v == values[0])
            };
            if one(nodes.iter().map(|n| label(n, rack_level)).collect()) {
                self.report.gangs.started_in_one_rack += 1;
            }
            nodes.dedup();
            let one_node = nodes.iter().all(|n| *n == nodes[0]);
            // NVLink joins GPUs: a gang with CPU-only pods is in no NVLink domain.
            if all_gpu
                && (one_node || one(nodes.iter().map(|n| label(n, GPU_CLIQUE_LABEL)).collect()))
            {
                self.report.gangs.started_in_one_nvlink_domain += 1;
            }
        }
    }

    /// Declares the workload's queues to the engine; a bad one stops the run.
    fn register_queues(&mut self) -> Result<(), SimError> {
        let mut sized;
        let mut queues = &self.workload.queues;
        if queues.cluster_queues.iter().any(|q| q.cluster_scoped) {
            // Volcano's and KAI's queues share the cluster: their root cohorts hold it.
            let capacity = kestrel_objects::queues::cluster_wide::cluster_capacity(
                self.scheduler.cluster().iter().map(|(_, n)| &n.spec),
            );
            sized = queues.clone();
            sized.size_cluster_pools(&capacity);
            queues = &sized;
        }
        for flavor in &queues.flavors {
            self.scheduler.add_flavor(flavor.clone());
        }
        for cohort in &queues.cohorts {
            self.scheduler.add_cohort(cohort.clone())?;
        }
        for cq in &queues.cluster_queues {
            self.scheduler.add_cluster_queue(cq.clone())?;
            let main = cq
                .resource_groups
                .iter()
                .flat_map(|g| g.covered.iter())
                .find(|r| *r == kestrel_core::GPU_RESOURCE)
                .cloned()
                .unwrap_or_else(|| "cpu".to_string());
            self.queue_integrals.push((main, 0.0, 0.0));
        }
        for local in &queues.local_queues {
            self.scheduler.add_local_queue(local.clone());
        }
        for (namespace, labels) in &queues.namespaces {
            self.scheduler
                .set_namespace_labels(namespace, labels.clone());
        }
        for budget in &queues.disruption_budgets {
            self.scheduler.set_disruption_budget(budget.clone());
        }
        Ok(())
    }

    /// Cordons (`true`) or uncordons a node now, for a driver that steps the run (a
    /// rolling upgrade); the next cycle runs at this instant.
    pub fn set_unschedulable(&mut self, node: &str, unschedulable: bool) -> Result<(), SimError> {
        self.scheduler.set_unschedulable(node, unschedulable)?;
        self.push(self.now, Event::Wake);
        Ok(())
    }

    /// When a running pod's current run started working (its periodic checkpoints fall at
    /// this plus multiples of its interval); `None`: not running.
    pub fn run_start(&self, pod: PodId) -> Option<Millis> {
        self.pods
            .get(&pod)
            .filter(|s| s.running)
            .map(|s| s.run_start)
    }

    /// Evicts a running pod now for a drain: it goes back to the queue at its original
    /// place. `checkpoint_asked`: it was asked to checkpoint at that time and saved its work
    /// up to it; otherwise it keeps what its last periodic checkpoint saved. Returns the
    /// GPU-hours of work lost, `None` when the pod was not running. The next cycle runs at
    /// this instant.
    pub fn drain_evict(&mut self, pod: PodId, checkpoint_asked: Option<Millis>) -> Option<f64> {
        let state = self.pods.get_mut(&pod).filter(|s| s.running)?;
        state.evicting = Some(checkpoint_asked);
        let (epoch, done) = (state.epoch, state.done_work);
        let ran = self.now.saturating_sub(state.run_start);
        let lost = self.leave(pod, epoch)?;
        let saved = self.pods[&pod].done_work;
        self.training_pod_left(pod, done, ran, saved, "Evicted");
        self.report.pods.evicted += 1;
        self.log_eviction(pod, lost, "drained");
        self.push(self.now, Event::Wake);
        Some(lost)
    }

    /// Where each bound pod runs now: (pod, node name, GPUs), for inspection and tests.
    pub fn placements(&self) -> Vec<(String, String, GpuAssignment)> {
        self.scheduler
            .pods()
            .filter_map(|(_, p)| match &p.phase {
                PodPhase::Bound { node, gpus, .. } => Some((
                    p.spec.key(),
                    self.scheduler.cluster().node(*node).spec.name.clone(),
                    gpus.clone(),
                )),
                _ => None,
            })
            .collect()
    }
}

/// The label that makes a "rack" for the report: the narrowest level of the workload's
/// Topology above hosts and NVLink domains (Kueue's levels name racks their own way),
/// else Kestrel's rack label.
fn rack_level(levels: &[String]) -> &str {
    levels
        .iter()
        .rev()
        .map(String::as_str)
        .find(|l| *l != HOSTNAME_LABEL && *l != GPU_CLIQUE_LABEL)
        .unwrap_or(RACK_LABEL)
}
