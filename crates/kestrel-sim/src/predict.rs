//! When will a pending pod start? The simulator runs forward from a moment of a run, with
//! what was known at that moment.
//!
//! Each job has one runtime estimate: the declared `kestrel.dev/runtime-estimate`
//! (`PodSpec.preemption.runtime_estimate`), else (standing in for what a cluster learns from
//! each queue's history) the true duration x (1 + e), e drawn uniformly in [-20%, +20%] per
//! job from the run's seed. Estimates are taken to be off by at most 20% either way, so a
//! job estimated at T' truly runs between T'/1.2 and T'/0.8. A running pod also tells how
//! long it has run: a job that has worked W and not ended runs at least W, which rules out
//! the short end of that interval once W passes it ([`Estimates::runtime`]). Without that,
//! every job that outran its estimate would be taken to end at once.
//!
//! Three forward runs read the estimates three ways: the likely runtime (the middle of what
//! is still possible, the point prediction), the shortest and the longest (the range). Jobs
//! that arrive after the moment, and cluster changes planned after it, are not known to the
//! predictor, as a live scheduler would not know them: the prediction uses only what exists
//! at the moment. A pending pod's predicted start is when it binds in a forward run.

use crate::sim::{SimError, Simulation};
use crate::workload::Workload;
use kestrel_core::{Millis, PodId, PodPhase};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};

pub use crate::estimates::{
    estimated_durations, estimated_durations_within, known, Estimates, Reading, ESTIMATE_ERROR,
    PREDICTION_RUNS,
};
pub use kestrel_view::predictions::{Deadline, Predictions, StartPrediction};

/// Forward runs cycle every 30 simulated seconds, each cycle after all that ended since
/// the last, not after each completion: starts are read to the minute, and on a large
/// cluster completions come seconds apart (3-5 times fewer cycles).
pub const FORWARD_RUN_RESOLUTION: Millis = 30_000;

/// Switches a simulation standing at some moment to `estimates` and runs it until every
/// target pod has bound or nothing is left to happen. Returns the first binding time of
/// each target that bound. Past `deadline` (wall clock) it stops with
/// [`SimError::PredictionOutOfTime`].
pub fn run_forward(
    sim: &mut Simulation<'_>,
    estimates: Estimates,
    targets: &[PodId],
    deadline: Option<Deadline>,
) -> Result<HashMap<PodId, Millis>, SimError> {
    sim.switch_to_estimates(estimates);
    // Only start times are read from a forward run, to the minute.
    sim.set_full_explanations(false);
    sim.set_cycle_resolution(FORWARD_RUN_RESOLUTION);
    let mut waiting: HashSet<PodId> = targets.iter().copied().collect();
    let mut bound = HashMap::new();
    loop {
        if let Some(d) = deadline.filter(|d| std::time::Instant::now() > d.at) {
            return Err(SimError::PredictionOutOfTime {
                seconds: d.budget.as_secs_f64(),
            });
        }
        if waiting.is_empty() || !sim.step()? {
            break;
        }
        for (pod, at) in sim.take_bindings() {
            if waiting.remove(&pod) {
                bound.insert(pod, at);
            }
        }
    }
    Ok(bound)
}

/// Predicts the start of `targets` (pods pending now) from a simulation standing at its
/// clock's time with the runtime estimates `known` (read each of the three ways; the
/// reading given is ignored): clones of this simulation run forward with the shortest and
/// longest readings, and this one (used up) with the likely reading.
pub fn predict(
    mut sim: Simulation<'_>,
    targets: &[PodId],
    known: &Estimates,
    deadline: Option<Deadline>,
) -> Result<Predictions, SimError> {
    let at = sim.now();
    let mut runs: Vec<HashMap<PodId, Millis>> = Vec::new();
    for reading in Reading::ALL {
        let estimates = known.read_as(reading);
        if reading == Reading::Likely {
            continue;
        } else if known.error == 0.0 {
            // Exact estimates read every way alike.
            runs.push(HashMap::new());
        } else {
            runs.push(run_forward(&mut sim.clone(), estimates, targets, deadline)?);
        }
    }
    let likely = run_forward(&mut sim, known.read_as(Reading::Likely), targets, deadline)?;
    for run in &mut runs {
        if known.error == 0.0 {
            run.clone_from(&likely);
        }
    }
    runs.insert(0, likely);
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
        estimate_error: known.error,
        starts,
    })
}

/// The naive estimate ("work ahead / capacity") for every pending pod: now plus the
/// GPU-seconds of the pending pods ahead of it in queue order and the remaining
/// GPU-seconds of running pods, divided by the cluster's GPUs, with the same runtime
/// `estimates` as the predictor. Pods that run to the end count no remaining work.
pub fn naive_starts(sim: &Simulation<'_>, estimates: &Estimates) -> HashMap<PodId, Millis> {
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
            if let Some(end) = sim.end_of_running(id, estimates) {
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
        if let Some(d) = sim.job_of(pod).and_then(|j| estimates.runtime(j, 0)) {
            work += demand * d as f64;
        }
    }
    out
}

/// When a prediction is asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Moments {
    /// At these times, for every pod pending then.
    At(Vec<Millis>),
    /// At each pod's submission, once the scheduler has had its look at it: what a user
    /// asks right after submitting. The times are the submissions of the true run.
    Submissions,
}

/// Pods that start within this long of the moment are left out of the medians: they wait
/// for the next cycle, not for anything a prediction is about.
pub const QUICK_START: Millis = 60_000;

/// The predictor against the naive estimate, pooled over estimate seeds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Evaluation {
    /// One set of runtime estimates per seed.
    pub seeds: Vec<u64>,
    /// The runtime estimates' relative error bound.
    pub estimate_error: f64,
    /// Distinct moments predicted from.
    pub moments: usize,
    /// (seed, moment, pod) triples: a pod pending at a moment that started later in the
    /// true run.
    pub pods: usize,
    /// Of those, how many started within [`QUICK_START`] of the moment (left out).
    pub quick: usize,
    /// Of the rest, how many the likely forward run starts (the medians are over these).
    pub predicted: usize,
    /// Median of |predicted start - actual start|, seconds.
    pub predictor_median_error_s: f64,
    pub naive_median_error_s: f64,
    /// Median of the remaining wait (actual start - the moment), seconds.
    pub median_wait_s: f64,
    /// Median over pods of |error| / remaining wait.
    pub predictor_median_relative_error: f64,
    pub naive_median_relative_error: f64,
    /// Median of the whole wait (actual start - submission), seconds, and the predictor's
    /// median error as a share of it.
    pub median_whole_wait_s: f64,
    pub predictor_median_error_of_whole_wait: f64,
    /// Share of pods whose actual start fell inside the predicted range.
    pub within_range: f64,
    /// Every pod compared.
    pub details: Vec<PodOutcome>,
}

/// One pending pod at one moment: its actual start and the estimates, ms from the start.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PodOutcome {
    pub seed: u64,
    pub at: Millis,
    pub pod: String,
    pub submitted: Millis,
    pub actual: Millis,
    pub predicted: Option<Millis>,
    pub runs: Vec<Option<Millis>>,
    pub naive: Millis,
}

/// A moment of the true run: its time, where the binding log stood, the pods asked about
/// and their naive starts.
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

/// Compares the predictor and the naive estimate with the truth, with runtimes estimated
/// to +/-20%, at `moments`, pooled over `seeds` (one set of estimates each).
pub fn evaluate(
    cluster: &crate::SimCluster,
    workload: &Workload,
    config: &crate::SimConfig,
    moments: &Moments,
    seeds: &[u64],
) -> Result<Evaluation, SimError> {
    evaluate_within(cluster, workload, config, moments, seeds, ESTIMATE_ERROR)
}

/// [`evaluate`] with runtimes estimated to within `error` (0: exactly, which leaves the
/// error that arrivals unknown at each moment cause).
pub fn evaluate_within(
    cluster: &crate::SimCluster,
    workload: &Workload,
    config: &crate::SimConfig,
    moments: &Moments,
    seeds: &[u64],
    error: f64,
) -> Result<Evaluation, SimError> {
    let (times, at_submission) = match moments {
        Moments::At(times) => (times.clone(), false),
        Moments::Submissions => {
            let mut truth = Simulation::new(cluster, workload, config.clone())?;
            while truth.step()? {}
            let times = truth.scheduler().pods().map(|(_, r)| r.submitted_at);
            (times.collect(), true)
        }
    };
    let mut times = times;
    times.sort_unstable();
    times.dedup();
    let mut details = Vec::new();
    let mut moments_seen = 0;
    for &seed in seeds {
        let known = Estimates {
            runtimes: estimated_durations_within(workload, seed, error),
            error,
            reading: Reading::Likely,
        };
        let (outcomes, moments) =
            outcomes(cluster, workload, config, &times, at_submission, &known)?;
        moments_seen = moments;
        details.extend(outcomes.into_iter().map(|o| PodOutcome { seed, ..o }));
    }
    Ok(summarize(seeds, error, moments_seen, details))
}

/// One set of estimates: the outcome of every pod asked about at `times` (all pending
/// ones, or those submitted at that very time), and how many moments had any.
fn outcomes(
    cluster: &crate::SimCluster,
    workload: &Workload,
    config: &crate::SimConfig,
    times: &[Millis],
    at_submission: bool,
    known: &Estimates,
) -> Result<(Vec<PodOutcome>, usize), SimError> {
    let mut truth = Simulation::new(cluster, workload, config.clone())?;
    truth.record_bindings();
    let mut log: Vec<(PodId, Millis)> = Vec::new();
    let mut snapshots: Vec<Snapshot> = Vec::new();
    for &t in times {
        if !truth.run_to(t)? {
            break;
        }
        log.extend(truth.take_bindings());
        let scheduler = truth.scheduler();
        let asked: Vec<PodId> = scheduler
            .pending()
            .into_iter()
            .filter(|&p| !at_submission || scheduler.pod(p).submitted_at == t)
            .collect();
        if asked.is_empty() {
            continue;
        }
        let naive = naive_starts(&truth, known);
        snapshots.push((t, log.len(), asked, naive));
    }
    while truth.step()? {}
    log.extend(truth.take_bindings());

    let mut out = Vec::new();
    for (t, index, asked, naive) in &snapshots {
        let wanted: HashSet<PodId> = asked.iter().copied().collect();
        let mut actual: BTreeMap<PodId, Millis> = BTreeMap::new();
        for &(pod, at) in &log[*index..] {
            if wanted.contains(&pod) {
                actual.entry(pod).or_insert(at);
            }
        }
        let mut replay = Simulation::new(cluster, workload, config.clone())?;
        replay.run_to(*t)?;
        let predictions = predict(replay, asked, known, None)?;
        for (pod, &actual_start) in &actual {
            let prediction = &predictions.starts[pod];
            let record = truth.scheduler().pod(*pod);
            out.push(PodOutcome {
                seed: 0,
                at: *t,
                pod: record.spec.key(),
                submitted: record.submitted_at,
                actual: actual_start,
                predicted: prediction.point(),
                runs: prediction.runs.clone(),
                naive: naive[pod],
            });
        }
    }
    Ok((out, snapshots.len()))
}

/// The medians over `details` (quick starts and pods the likely run never starts left out).
fn summarize(seeds: &[u64], error: f64, moments: usize, details: Vec<PodOutcome>) -> Evaluation {
    let mut eval = Evaluation {
        seeds: seeds.to_vec(),
        estimate_error: error,
        moments,
        pods: details.len(),
        ..Default::default()
    };
    let seconds = |ms: Millis| ms as f64 / 1000.0;
    let (mut errors, mut naive_errors, mut waits) = (Vec::new(), Vec::new(), Vec::new());
    let (mut relative, mut naive_relative) = (Vec::new(), Vec::new());
    let (mut whole_waits, mut of_whole) = (Vec::new(), Vec::new());
    let mut inside = 0usize;
    for d in &details {
        if d.actual - d.at < QUICK_START {
            eval.quick += 1;
            continue;
        }
        let Some(point) = d.predicted else {
            continue;
        };
        eval.predicted += 1;
        let wait = seconds(d.actual - d.at);
        let whole_wait = seconds(d.actual.saturating_sub(d.submitted));
        let error = seconds(point.abs_diff(d.actual));
        let naive_error = seconds(d.naive.abs_diff(d.actual));
        let runs = d.runs.iter().flatten();
        if runs.clone().min().is_some_and(|&f| f <= d.actual)
            && d.runs.iter().all(Option::is_some)
            && runs.max().is_some_and(|&to| d.actual <= to)
        {
            inside += 1;
        }
        waits.push(wait);
        whole_waits.push(whole_wait);
        errors.push(error);
        naive_errors.push(naive_error);
        relative.push(error / wait);
        of_whole.push(error / whole_wait.max(1.0));
        naive_relative.push(naive_error / wait);
    }
    eval.predictor_median_error_s = median(errors);
    eval.naive_median_error_s = median(naive_errors);
    eval.median_wait_s = median(waits);
    eval.predictor_median_relative_error = median(relative);
    eval.naive_median_relative_error = median(naive_relative);
    eval.median_whole_wait_s = median(whole_waits);
    eval.predictor_median_error_of_whole_wait = median(of_whole);
    eval.within_range = if eval.predicted > 0 {
        inside as f64 / eval.predicted as f64
    } else {
        0.0
    };
    eval.details = details;
    eval
}
