//! Runtime estimates: what a prediction knows of how long jobs run, and how it reads them
//! (see [`crate::predict`]). The simulator reads them too, to switch a run to estimated
//! runtimes.

use crate::workload::Workload;
use kestrel_core::{Millis, Rng};
use serde::Serialize;

/// Relative error bound of runtime estimates: e is uniform in
/// `[-ESTIMATE_ERROR, +ESTIMATE_ERROR]`.
pub const ESTIMATE_ERROR: f64 = 0.2;

/// Forward runs per prediction: one per [`Reading`].
pub const PREDICTION_RUNS: u64 = 3;

/// How a forward run reads the runtime estimates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reading {
    /// The middle of what is still possible: the point prediction.
    Likely,
    /// Every job at the short end: the earliest starts.
    Shortest,
    /// Every job at the long end: the latest starts.
    Longest,
}

impl Reading {
    /// The forward runs of a prediction, in the order of [`crate::predict::StartPrediction::runs`].
    pub const ALL: [Reading; PREDICTION_RUNS as usize] =
        [Reading::Likely, Reading::Shortest, Reading::Longest];
}

/// Runtime estimates per workload job, how far off they may be, and how they are read.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimates {
    /// Per workload job: the estimated runtime; `None`: its pods run to the end.
    pub runtimes: Vec<Option<Millis>>,
    /// The relative error bound b: a job estimated at T' truly runs between T'/(1+b) and
    /// T'/(1-b). 0: the estimates are exact.
    pub error: f64,
    pub reading: Reading,
}

impl Estimates {
    /// Exact runtimes (the truth, or estimates taken at their word).
    pub fn exact(runtimes: Vec<Option<Millis>>) -> Self {
        Estimates {
            runtimes,
            error: 0.0,
            reading: Reading::Likely,
        }
    }

    /// The estimates a prediction from `seed` knows ([`estimated_durations`]), read as likely.
    pub fn known(workload: &Workload, seed: u64) -> Self {
        Estimates {
            runtimes: estimated_durations(workload, seed),
            error: ESTIMATE_ERROR,
            reading: Reading::Likely,
        }
    }

    /// Only what pods declare (`kestrel.dev/runtime-estimate`, read by
    /// [`Estimates::runtime_for`]), within +/-20%: a live cluster's estimates.
    pub fn declared() -> Self {
        Estimates {
            runtimes: Vec::new(),
            error: ESTIMATE_ERROR,
            reading: Reading::Likely,
        }
    }

    /// The same estimates read another way.
    pub fn read_as(&self, reading: Reading) -> Self {
        Estimates {
            reading,
            ..self.clone()
        }
    }

    /// How long job `job` is taken to run in all, knowing it has worked `worked` (0 when it
    /// has not started) and not ended. With the estimate T' and bound b, the error e =
    /// T'/T - 1 lies in [-b, b], and the job's survival says T >= W, so e <= T'/W - 1. The
    /// likely runtime takes e in the middle of what is left (the median, for e uniform), the
    /// shortest the largest e, the longest the smallest. A job that outran even T'/(1-b) is
    /// beyond what its estimate says: it is taken to end now. `None`: runs to the end.
    pub fn runtime(&self, job: usize, worked: Millis) -> Option<Millis> {
        self.runtime_for(self.runtimes[job], worked)
    }

    /// [`Estimates::runtime`] for a pod whose estimate is `estimate` (declared on the pod,
    /// on a live cluster), read with this bound and reading.
    pub fn runtime_for(&self, estimate: Option<Millis>, worked: Millis) -> Option<Millis> {
        let estimate = estimate? as f64;
        let bound = self.error.clamp(0.0, 0.99);
        let low = -bound;
        let mut high = bound;
        if worked > 0 {
            high = high.min(estimate / worked as f64 - 1.0);
        }
        if high < low {
            return Some(worked);
        }
        let e = match self.reading {
            Reading::Likely => (low + high) / 2.0,
            Reading::Shortest => high,
            Reading::Longest => low,
        };
        let runtime = (estimate / (1.0 + e)).round() as Millis;
        Some(runtime.max(worked))
    }
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
    workload
        .jobs
        .iter()
        .enumerate()
        .map(|(i, job)| {
            if let Some(declared) = job.template.preemption.runtime_estimate {
                return Some(declared);
            }
            let duration = job.duration?;
            let mut rng = Rng::new(seed ^ (i as u64).wrapping_mul(0xA24B_AED4_963E_E407));
            let e = (rng.unit() * 2.0 - 1.0) * error;
            Some((duration as f64 * (1.0 + e)).round().max(0.0) as Millis)
        })
        .collect()
}
