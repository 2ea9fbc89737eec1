//! Kestrel's discrete-event simulator and its inputs and outputs.
//!
//! Loaders turn cluster specs, Kubernetes manifests, openb traces and the synthetic
//! generator into a [`SimCluster`] and a [`Workload`]; the simulator drives
//! `kestrel_core::Scheduler` on a virtual clock and measures a [`SimReport`].

pub mod duration;
pub mod error;
pub mod metrics;
pub mod workload;

pub use error::LoadError;
pub use metrics::SimReport;
pub use workload::{ClusterChange, ClusterEvent, JobKind, SimCluster, SimJob, Workload};
