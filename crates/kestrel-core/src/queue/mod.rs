//! Team queues: ClusterQueues hold quotas per resource flavor, cohorts lend idle quota
//! between them, LocalQueues are where a namespace submits.
//!
//! A workload (a pod, or a gang as a whole) is admitted when its ClusterQueue's quota
//! allows it and the nodes can hold it, in one step: quota is charged when the pods are
//! bound and returned when they end, so "admitted" and "placed" never disagree.
//!
//! Quota amounts are in the engine's units: CPU in millicores, `nvidia.com/gpu` in
//! thousandths of a GPU (so shared GPUs count their share), memory and storage in bytes,
//! `pods` as a count, other extended resources in their own units.

mod book;
mod fit;
mod problems;
mod registry;
mod spec;
mod usage;

pub(crate) use book::*;
pub use problems::*;
pub use spec::*;
pub use usage::*;
