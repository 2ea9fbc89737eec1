//! `TrainingJob` (`scheduling.kestrel.dev/v1alpha1`): a distributed PyTorch training run
//! that Kestrel starts, restarts and reports as one.
//!
//! The decisions live here, without I/O or clock, so that the live controller
//! (`kestrel_live::training`) and the simulator take the same ones: [`plan()`] validates a
//! job and says which pods, Service and PodGroup it needs; [`reconcile()`] reads the pods
//! that exist and says what to create or delete and what the status is.
//!
//! Restarts are of the whole gang: one failed or vanished pod deletes every pod of the
//! attempt, and the next attempt starts once they are all gone, counted against the job's
//! one `runPolicy.backoffLimit`. A pod's own `restartPolicy` is always `Never`; the
//! replica's `restartPolicy` says which failures are worth a restart (`ExitCode`: exit
//! codes 128-255 and evictions are, 1-127 are not).

mod api;
#[cfg(test)]
mod example_tests;
mod plan;
mod reconcile;
mod status;
#[cfg(test)]
mod tests;

pub use api::*;
pub use plan::*;
pub use reconcile::*;
pub use status::*;
