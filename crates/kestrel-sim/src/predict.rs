//! When will a pending pod start? The simulator runs forward from a moment of a run, with
//! what was known at that moment.
//!
//! From the state at time `at`, the simulation goes on with every duration replaced by an
//! estimate: the true duration x (1 + e), with e drawn uniformly in [-20%, +20%] per job from
//! the run's seed. This stands in for what a live cluster has: declared runtimes (the
//! `kestrel.dev/runtime-estimate` annotation) or each queue's history of similar jobs. A pod
//! that declares `kestrel.dev/runtime-estimate` (`PodSpec.preemption.runtime_estimate`) runs
//! for exactly that in the forward run. Running pods end at their start plus the estimate
//! (not before `at`). Jobs that arrive after `at`, and cluster changes planned after it, are
//! not known to the predictor, as a live scheduler would not know them: the prediction uses
//! only what exists at `at`. A pending pod's predicted start is when it binds in that forward
//! run. Two more runs, with those estimates off by up to 20% again (never closer to the
//! truth: one estimate per job is all a cluster has), give a range (their min and max) and
//! a point (the median of the three).

use crate::sim::{SimError, Simulation};
use crate::workload::Workload;
use kestrel_core::{Millis, PodId, PodPhase, Rng};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Relative error of the runtime estimates: e is uniform in `[-ESTIMATE_ERROR, +ESTIMATE_ERROR]`.
pub const ESTIMATE_ERROR: f64 = 0.2;

/// Forward runs per prediction (estimate seeds).
pub const PREDICTION_RUNS: u64 = 3;

/// The estimate seeds derived from a run's seed: the first draws the known estimates, the
/// others how far they may be off.
pub fn prediction_seeds(seed: u64) -> Vec<u64> {
    (0..PREDICTION_RUNS).map(|i| seed.wrapping_add(i)).collect()
}

/// Estimated duration per job (the workload's job order): the declared runtime estimate
/// when the pod template has one, else the true duration x (1 + e), e uniform in
/// [-20%, +20%], drawn per job from `seed`. `None`: runs to the end.
pub fn estimated_durations(workload: &Workload, seed: u64) -> Vec<Option<Millis>> {
    estimated_durations_within(workload, seed, ESTIMATE_ERROR)
}

/// [`estimated_durations`] with another relative error bound (0: the true durations,
/// where no runtime estimate is declared).
pub fn estimated_durations_within(
    workload: &Workload,
    seed: u64,
    error: f64,
) -> Vec<Option<Millis>> {
    let known = workload.jobs.iter().map(|job| {
        job.template
            .preemption
            .runtime_estimate
            .map(|declared| (declared, false))
            .or(job.duration.map(|d| (d, true)))
    });
    jittered(known, seed, error)
}

/// Each duration x (1 + e), e uniform in [-error, +error] per job from `seed`, where the
/// flag says so.
fn jittered(
    durations: impl Iterator<Item = Option<(Millis, bool)>>,
    seed: u64,
    error: f64,
) -> Vec<Option<Millis>> {
    durations
        .enumerate()
        .map(|(i, d)| {
            let (duration, jitter) = d?;
            if !jitter {
                return Some(duration);
            }
            let mut rng = Rng::new(seed ^ (i as u64).wrapping_mul(0xA24B_AED4_963E_E407));
            let e = (rng.unit() * 2.0 - 1.0) * error;
            Some((duration as f64 * (1.0 + e)).round().max(0.0) as Millis)
        })
        .collect()
}

/// The estimates of each forward run: the known ones (`seeds[0]`), then for each further
/// seed the known ones off by up to `error` again.
fn run_estimates(workload: &Workload, seeds: &[u64], error: f64) -> Vec<Vec<Option<Millis>>> {
    let Some((&first, rest)) = seeds.split_first() else {
        return Vec::new();
    };
    let known = estimated_durations_within(workload, first, error);
    let mut runs: Vec<Vec<Option<Millis>>> = rest
        .iter()
        .map(|&seed| jittered(known.iter().map(|d| d.map(|d| (d, true))), seed, error))
        .collect();
    runs.insert(0, known);
    runs
}

/// One pod's predicted start over the forward runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StartPrediction {
    /// Per run: when the pod bound, `None` when it did not in that run (nothing known at
    /// `at` makes room for it).
    pub runs: Vec<Option<Millis>>,
}

impl StartPrediction {
    /// The median over runs (a run where the pod never starts counts as latest); `None`
    /// when that median run never starts it.
    pub fn point(&self) -> Option<Millis> {
        let mut runs = self.runs.clone();
        runs.sort_by_key(|r| r.unwrap_or(Millis::MAX));
        runs.get(runs.len() / 2).copied().flatten()
    }

    /// The earliest start over runs.
    pub fn from(&self) -> Option<Millis> {
        self.runs.iter().flatten().min().copied()
    }

    /// The latest start over runs; `None` when some run never starts it.
    pub fn to(&self) -> Option<Millis> {
        if self.runs.iter().any(Option::is_none) {
            return None;
        }
        self.runs.iter().flatten().max().copied()
    }
}

/// Predicted starts of pending pods at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Predictions {
    pub at: Millis,
    pub seeds: Vec<u64>,
    pub starts: HashMap<PodId, StartPrediction>,
}

/// Switches a simulation standing at some moment to estimated `durations` and runs it until
/// every target pod has bound or nothing is left to happen. Returns the first binding time
/// of each target that bound.
pub fn run_forward(
    sim: &mut Simulation<'_>,
    durations: Vec<Option<Millis>>,
    targets: &[PodId],
) -> Result<HashMap<PodId, Millis>, SimError> {
    sim.switch_to_estimates(durations);
    let mut waiting: HashSet<PodId> = targets.iter().copied().collect();
    let mut bound = HashMap::new();
    while !waiting.is_empty() && sim.step()? {
        for (pod, at) in sim.take_bindings() {
            if waiting.remove(&pod) {
                bound.insert(pod, at);
            }
        }
    }
    Ok(bound)
}

/// Predicts the start of `targets` (pods pending now) from a simulation standing at its
/// clock's time: this simulation runs forward with the known estimates (`seeds[0]`; it is
/// used up), and a replay of the same inputs to the same time does so with each further
/// seed's estimates off by up to 20% again.
pub fn predict(
    sim: Simulation<'_>,
    targets: &[PodId],
    seeds: &[u64],
) -> Result<Predictions, SimError> {
    predict_within(sim, targets, seeds, ESTIMATE_ERROR)
}

/// [`predict`] with runtimes estimated to within `error` (0: exactly).
pub fn predict_within(
    mut sim: Simulation<'_>,
    targets: &[PodId],
    seeds: &[u64],
    error: f64,
) -> Result<Predictions, SimError> {
    let at = sim.now();
    let (cluster, workload, config) = (sim.cluster_spec(), sim.workload(), sim.config().clone());
    let mut runs: Vec<HashMap<PodId, Millis>> = Vec::new();
    for (i, durations) in run_estimates(workload, seeds, error)
        .into_iter()
        .enumerate()
    {
        if i == 0 {
            runs.push(run_forward(&mut sim, durations, targets)?);
        } else {
            let mut replay = Simulation::new(cluster, workload, config.clone())?;
            replay.run_to(at)?;
            runs.push(run_forward(&mut replay, durations, targets)?);
        }
    }
    let starts = targets
        .iter()
        .map(|&pod| {
            let prediction = StartPrediction {
                runs: runs.iter().map(|r| r.get(&pod).copied()).collect(),
            };
            (pod, prediction)
        })
        .collect();
    Ok(Predictions {
        at,
        seeds: seeds.to_vec(),
        starts,
    })
}

/// The naive estimate ("work ahead / capacity") for every pending pod: `at` plus the
/// GPU-seconds of the pending pods ahead of it in queue order and the remaining
/// GPU-seconds of running pods, divided by the cluster's GPUs. Durations are `durations`
/// (estimates); pods that run to the end count no remaining work.
pub fn naive_starts(sim: &Simulation<'_>, durations: &[Option<Millis>]) -> HashMap<PodId, Millis> {
    let scheduler = sim.scheduler();
    let at = sim.now();
    let gpus: u64 = scheduler
        .cluster()
        .iter()
        .map(|(_, n)| n.gpu_count() as u64)
        .sum();
    let mut work: f64 = 0.0; // GPU-thousandths x ms
    for (id, record) in scheduler.pods() {
        if matches!(record.phase, PodPhase::Bound { .. }) {
            if let Some(end) = sim.end_of_running(id, durations) {
                work += scheduler.gpu_milli(id) as f64 * (end - at) as f64;
            }
        }
    }
    let mut out = HashMap::new();
    for pod in scheduler.pending() {
        let start = if gpus == 0 {
            Millis::MAX
        } else {
            at + (work / (gpus as f64 * 1000.0)).round() as Millis
        };
        out.insert(pod, start);
        let demand = scheduler.gpu_milli(pod) as f64;
        if let Some(Some(d)) = sim.job_of(pod).map(|j| durations[j]) {
            work += demand * d as f64;
        }
    }
    out
}

/// The predictor against the naive estimate on a run's pending pods at several moments.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Evaluation {
    pub seed: u64,
    /// The runtime estimates' relative error bound.
    pub estimate_error: f64,
    pub times: Vec<Millis>,
    /// Pods pending at one of `times` that started later in the true run (pairs of a
    /// moment and a pod).
    pub pods: usize,
    /// Of those, how many the predictor saw start in its median run.
    pub predicted: usize,
    /// Median over the predicted pods of |predicted start - actual start|, seconds.
    pub predictor_median_error_s: f64,
    pub naive_median_error_s: f64,
    /// Median of the remaining wait (actual start - the moment), seconds.
    pub median_wait_s: f64,
    /// Median over pods of |error| / remaining wait.
    pub predictor_median_relative_error: f64,
    pub naive_median_relative_error: f64,
    /// Share of pods whose actual start fell inside the predicted range.
    pub within_range: f64,
    /// Per moment: (time, pods pending, predictor median error s, naive median error s).
    pub per_time: Vec<(Millis, usize, f64, f64)>,
    /// Median error of the first forward run alone (the known estimates, no range),
    /// seconds and relative.
    pub single_run_median_error_s: f64,
    pub single_run_median_relative_error: f64,
    /// Every pod compared.
    pub details: Vec<PodOutcome>,
}

/// One pending pod at one moment: its actual start and the estimates, ms from the start.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PodOutcome {
    pub at: Millis,
    pub pod: String,
    pub actual: Millis,
    pub predicted: Option<Millis>,
    pub runs: Vec<Option<Millis>>,
    pub naive: Millis,
}

/// A moment of the true run: its time, where the binding log stood, the pods pending and
/// their naive starts.
type Snapshot = (Millis, usize, Vec<PodId>, HashMap<PodId, Millis>);

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs the inputs once with the truth, noting the pods pending at each of `times` and when
/// they actually started; predicts each moment's starts (three seeds from `seed`) and the
/// naive estimate (first seed's estimates), and compares both with the truth. Pods that
/// never start in the true run, or that the predictor's median run does not start, are left
/// out of both medians.
pub fn evaluate(
    cluster: &crate::SimCluster,
    workload: &Workload,
    config: &crate::SimConfig,
    times: &[Millis],
    seed: u64,
) -> Result<Evaluation, SimError> {
    evaluate_within(cluster, workload, config, times, seed, ESTIMATE_ERROR)
}

/// [`evaluate`] with runtimes estimated to within `error` (0: exactly, which leaves the
/// error that arrivals unknown at each moment cause).
pub fn evaluate_within(
    cluster: &crate::SimCluster,
    workload: &Workload,
    config: &crate::SimConfig,
    times: &[Millis],
    seed: u64,
    error: f64,
) -> Result<Evaluation, SimError> {
    let seeds = prediction_seeds(seed);
    let naive_durations = estimated_durations_within(workload, seeds[0], error);
    let mut truth = Simulation::new(cluster, workload, config.clone())?;
    truth.record_bindings();
    let mut log: Vec<(PodId, Millis)> = Vec::new();
    let mut snapshots: Vec<Snapshot> = Vec::new();
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    for &t in &sorted {
        if !truth.run_to(t)? {
            break;
        }
        log.extend(truth.take_bindings());
        let pending = truth.scheduler().pending();
        let naive = naive_starts(&truth, &naive_durations);
        snapshots.push((t, log.len(), pending, naive));
    }
    while truth.step()? {}
    log.extend(truth.take_bindings());

    let mut eval = Evaluation {
        seed,
        estimate_error: error,
        times: snapshots.iter().map(|s| s.0).collect(),
        ..Default::default()
    };
    let (mut errors, mut naive_errors, mut waits) = (Vec::new(), Vec::new(), Vec::new());
    let (mut relative, mut naive_relative) = (Vec::new(), Vec::new());
    let mut inside = 0usize;
    let (mut single, mut single_relative) = (Vec::new(), Vec::new());
    for (t, index, pending, naive) in &snapshots {
        let mut actual: BTreeMap<PodId, Millis> = BTreeMap::new();
        let wanted: HashSet<PodId> = pending.iter().copied().collect();
        for &(pod, at) in &log[*index..] {
            if wanted.contains(&pod) {
                actual.entry(pod).or_insert(at);
            }
        }
        let mut replay = Simulation::new(cluster, workload, config.clone())?;
        replay.run_to(*t)?;
        let predictions = predict_within(replay, pending, &seeds, error)?;
        let (mut here, mut here_naive) = (Vec::new(), Vec::new());
        for (pod, &actual_start) in &actual {
            eval.pods += 1;
            let prediction = &predictions.starts[pod];
            let naive_start = naive[pod];
            eval.details.push(PodOutcome {
                at: *t,
                pod: truth.scheduler().pod(*pod).spec.key(),
                actual: actual_start,
                predicted: prediction.point(),
                runs: prediction.runs.clone(),
                naive: naive_start,
            });
            let Some(point) = prediction.point() else {
                continue;
            };
            if let Some(Some(run)) = prediction.runs.first() {
                let error = (*run as f64 - actual_start as f64).abs() / 1000.0;
                single.push(error);
                single_relative.push(error / ((actual_start - t) as f64 / 1000.0).max(1.0));
            }
            eval.predicted += 1;
            let wait = (actual_start - t) as f64 / 1000.0;
            let error = (point as f64 - actual_start as f64).abs() / 1000.0;
            let naive_error = (naive_start as f64 - actual_start as f64).abs() / 1000.0;
            if prediction.from().is_some_and(|f| f <= actual_start)
                && prediction.to().is_none_or(|to| actual_start <= to)
            {
                inside += 1;
            }
            waits.push(wait);
            relative.push(error / wait.max(1.0));
            naive_relative.push(naive_error / wait.max(1.0));
            here.push(error);
            here_naive.push(naive_error);
        }
        eval.per_time.push((
            *t,
            pending.len(),
            median(here.clone()),
            median(here_naive.clone()),
        ));
        errors.extend(here);
        naive_errors.extend(here_naive);
    }
    eval.predictor_median_error_s = median(errors);
    eval.naive_median_error_s = median(naive_errors);
    eval.median_wait_s = median(waits);
    eval.predictor_median_relative_error = median(relative);
    eval.naive_median_relative_error = median(naive_relative);
    eval.single_run_median_error_s = median(single);
    eval.single_run_median_relative_error = median(single_relative);
    eval.within_range = if eval.predicted > 0 {
        inside as f64 / eval.predicted as f64
    } else {
        0.0
    };
    Ok(eval)
}
