//! Runtime estimates: what a prediction knows of how long jobs run, and how it reads them
//! (the forward runs are the simulator's, `kestrel_sim::predict`). The views read them to
//! say when running pods end; the simulator, to switch a run to estimated runtimes.

use kestrel_core::Millis;
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
    /// The forward runs of a prediction, in the order of [`crate::predictions::StartPrediction::runs`].
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
