//! Runtime estimates of a simulated workload: what a prediction from a seed knows of how
//! long jobs run (see [`crate::predict`]). The estimates themselves and how they are read
//! are `kestrel_view::estimates`', which the simulator reads too, to switch a run to
//! estimated runtimes.

use crate::workload::Workload;
use kestrel_core::{Millis, Rng};

pub use kestrel_view::estimates::{Estimates, Reading, ESTIMATE_ERROR, PREDICTION_RUNS};

/// The estimates a prediction from `seed` knows ([`estimated_durations`]), read as likely.
pub fn known(workload: &Workload, seed: u64) -> Estimates {
    Estimates {
        runtimes: estimated_durations(workload, seed),
        error: ESTIMATE_ERROR,
        reading: Reading::Likely,
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
