//! What the engine hands back to drivers: a cycle's decisions, and the errors of its calls.

use crate::explain::Unschedulable;
use crate::gang::GangId;
use crate::preempt::Preemption;
use crate::queue::QueueError;
use crate::types::{Binding, PodId};
use std::sync::Arc;

/// What a cycle decided. `unschedulable` lists pods whose reason is new or changed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decisions {
    pub bindings: Vec<Binding>,
    pub unschedulable: Vec<(PodId, Arc<Unschedulable>)>,
    /// Gangs whose `schedule_timeout` passed this cycle: marked timed out, their pods stay
    /// pending (the reason is on each) and are tried again after the back-off.
    pub timed_out: Vec<GangId>,
    /// Workloads asked to leave: the driver evicts them (after a checkpoint when they
    /// offer one) and reports each with [`crate::Scheduler::evict`].
    pub preemptions: Vec<Preemption>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    #[error("node {0:?} already exists; node names must be unique")]
    DuplicateNode(String),
    #[error("node {0:?} does not exist")]
    UnknownNode(String),
    #[error("node {node:?}: {field}: {why}")]
    InvalidNode {
        node: String,
        field: &'static str,
        why: String,
    },
    #[error("pod {0:?} is not known to the scheduler")]
    UnknownPod(PodId),
    #[error("{0}")]
    Queue(#[from] QueueError),
}
