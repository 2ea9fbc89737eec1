//! One definition of a correct cluster state, for the simulator and the live scheduler alike.
//!
//! A [`Snapshot`] is a plain picture of a cluster: nodes with what they can hold, pods with
//! the node and devices they are bound to, gangs, ClusterQueues and cohorts. [`check`]
//! recomputes every total from the bound pods alone (never from a scheduler's own usage or
//! free counters) and lists each rule that is broken; [`check_transition`] compares two
//! snapshots and finds pending pods that disappeared.
//!
//! Among [`check`]'s rules: a pod that requests whole `nvidia.com/gpu` and is bound to a
//! node with GPU devices holds them by index ([`Violation::GpuWithoutIndices`]) unless it
//! uses ResourceClaims ([`check_claims`] holds those) or kube-scheduler bound it (it records
//! no indices; any other scheduler is taken for Kestrel, which runs under several names).
//!
//! Progress is judged over successive snapshots, one per scheduling cycle: a
//! [`StrandedWatch`] reports a pod left pending for N snapshots in a row while it fits a
//! node that holds no pod, by this crate's own fit ([`Violation::Stranded`]); pods whose
//! wait a snapshot cannot judge (gated, queued, with claims or inter-pod rules, gangs that
//! cannot start whole) are left out, as its docs list.
//!
//! Placement rules that involve other pods and volumes are matched by this crate's own
//! code (a second opinion on the engine's), from pods' labels and terms, nodes' labels and
//! taints and namespaces' labels: [`check`] finds required pod anti-affinity broken from
//! either side, pods on nodes their bound PersistentVolume's node affinity excludes, and
//! `ReadWriteOncePod` claims used twice; [`check_transition`] judges pods newly bound in
//! the step by their required pod affinity and DoNotSchedule topology spread at binding.
//!
//! Snapshots come from the engine ([`Snapshot::from_engine`]) or from a real API server's
//! Nodes and Pods ([`Snapshot::from_k8s`]), so the simulator and the live scheduler are held
//! to the same rules.
//!
//! # Units
//!
//! Every amount is in **milli-units of the Kubernetes quantity**, as `Quantity.MilliValue()`
//! gives it: cpu in millicores, memory and storage in thousandths of a byte, `pods` in
//! thousandths of a pod, `nvidia.com/gpu` in thousandths of a device, any other extended
//! resource in thousandths of one. One scale for every resource: no table of exceptions.
//! Amounts are `i128`, so sums of many pods never overflow.

mod checks;
mod claims;
mod engine;
#[cfg(feature = "k8s")]
mod k8s;
mod placement;
mod progress;
pub mod quantity;
pub mod shared;
mod snapshot;
mod violation;

pub use checks::*;
pub use claims::*;
#[cfg(feature = "k8s")]
pub use k8s::{
    claims_from_k8s, parse_gpu_indices, pod_requests, FromK8sError, K8sExtras,
    GPU_INDICES_ANNOTATION,
};
pub use placement::{
    selects, Labels, NodeTerm, Operator, PodTerm, Requirement, Selector, SpreadRule, TaintView,
    TolerationView, VolumeAffinity,
};
pub use progress::{stranded, StrandedWatch};
pub use shared::{in_ci, shared_path};
pub use snapshot::*;
pub use violation::*;

// The tests read these through `use super::*`, as when the checks lived in this file.
#[cfg(test)]
use std::collections::{BTreeMap, BTreeSet};

#[cfg(test)]
mod tests;
