//! Kestrel's discrete-event simulator and its inputs and outputs.
//!
//! Loaders turn cluster specs, Kubernetes manifests, openb traces and the synthetic
//! generator into a [`SimCluster`] and a [`Workload`]; the simulator drives
//! `kestrel_core::Scheduler` on a virtual clock and measures a [`SimReport`].

pub mod cluster_spec;
pub mod dashboard;
pub mod estimates;
mod explain_state;
pub mod generator;
pub mod inputs;
pub mod manifests;
pub mod metrics;
pub mod openb;
pub mod predict;
pub mod report;
#[cfg(test)]
mod sample_report;
pub mod scenarios;
pub mod sim;
pub mod summary;
mod text;
pub mod upgrade;
pub mod workload;

pub use kestrel_objects::LoadError;
pub use metrics::SimReport;
pub use sim::{simulate, simulate_with_topology_blind, SimConfig, SimError, Simulation};
pub use workload::{ClusterChange, ClusterEvent, JobKind, PodSet, SimCluster, Workload};
