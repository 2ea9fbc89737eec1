//! Admissions, and why a workload is not admitted: `QueueProblem`, quota shortfalls.

use super::*;
use crate::resources::GPU_RESOURCE;
use crate::types::Millis;
use serde::Serialize;
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct CqId(pub u32);

/// The flavor chosen per resource group of a ClusterQueue.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Admission {
    pub cq: CqId,
    pub flavors: Vec<u16>,
}

/// Why quota does not admit a workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum QueueProblem {
    /// The pod names a LocalQueue that does not exist in its namespace.
    NoLocalQueue { namespace: String, name: String },
    /// The LocalQueue points at a ClusterQueue that does not exist.
    NoClusterQueue {
        local_queue: String,
        cluster_queue: String,
    },
    /// The ClusterQueue's namespaceSelector does not select the pod's namespace.
    NamespaceNotSelected {
        cluster_queue: String,
        namespace: String,
    },
    /// The ClusterQueue's stopPolicy holds it.
    Stopped { cluster_queue: String },
    /// The ClusterQueue is inactive (see [`ClusterQueueSpec::inactive`]).
    Inactive {
        cluster_queue: String,
        why: Inactive,
    },
    /// The workload asks for a resource no resource group of the queue covers.
    NotCovered {
        cluster_queue: String,
        resource: String,
    },
    /// Not enough quota: the first resource that does not fit in any flavor.
    Quota(Box<QuotaShortfall>),
    /// The only flavors with room taint their nodes (`spec.nodeTaints`) with what the pod
    /// does not tolerate: the first such flavor and taint.
    FlavorTaint {
        cluster_queue: String,
        flavor: String,
        taint: String,
    },
    /// A StrictFIFO queue whose head does not fit holds everything behind it.
    BehindHead { cluster_queue: String },
    /// A workload of the queue at this priority or higher is making room by preemption;
    /// the quota it frees is its own.
    BehindPreemptor { cluster_queue: String },
    /// It would borrow, while a ClusterQueue of its cohort takes quota back by preemption:
    /// the quota the victims free is that queue's, not for borrowers.
    BehindReclaim { cluster_queue: String },
    /// Victims were asked to leave for this workload; it starts when they are gone.
    WaitingForVictims { victims: u32 },
    /// The queue's preemption delay has not passed yet.
    PreemptionDelay { until: Millis },
}

/// A resource a workload needs more of than its queue can give.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuotaShortfall {
    pub cluster_queue: String,
    pub flavor: String,
    pub resource: String,
    pub need: i64,
    pub used: i64,
    pub nominal: i64,
    /// Nominal plus borrowing limit, when the queue may borrow.
    pub limit: Option<i64>,
    /// What the cohort could still lend.
    pub cohort_free: Option<i64>,
    /// The cohort whose own `borrowingLimit` bounds what its tree may lend the queue,
    /// when one does (its subtree uses all it may take from above).
    pub cohort_limit: Option<String>,
}

/// Prints an amount in the units users write quotas in.
pub fn format_amount(resource: &str, amount: i64) -> String {
    match resource {
        "cpu" | GPU_RESOURCE => {
            if amount % 1000 == 0 {
                format!("{}", amount / 1000)
            } else {
                format!("{}m", amount)
            }
        }
        "memory" | "ephemeral-storage" => format!("{}", crate::resources::Bytes(amount)),
        _ => amount.to_string(),
    }
}

/// The scale from a quantity as written to the engine's units (see the module docs).
pub fn quota_scale(resource: &str) -> i64 {
    match resource {
        "cpu" | GPU_RESOURCE => 1000,
        _ => 1,
    }
}

impl fmt::Display for QueueProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueProblem::NoLocalQueue { namespace, name } => write!(
                f,
                "LocalQueue {namespace}/{name} does not exist: create it, or fix the pod's queue label"
            ),
            QueueProblem::NoClusterQueue { local_queue, cluster_queue } => write!(
                f,
                "LocalQueue {local_queue} points at ClusterQueue {cluster_queue:?}, which does not exist: create it, or fix spec.clusterQueue"
            ),
            QueueProblem::NamespaceNotSelected { cluster_queue, namespace } => write!(
                f,
                "ClusterQueue {cluster_queue} does not admit namespace {namespace} (spec.namespaceSelector): label the namespace or change the selector"
            ),
            QueueProblem::Inactive { cluster_queue, why } => {
                write!(
                    f,
                    "ClusterQueue {cluster_queue} is inactive: {}: {}",
                    why.reason, why.message
                )
            }
            QueueProblem::Stopped { cluster_queue } => write!(
                f,
                "ClusterQueue {cluster_queue} is stopped (spec.stopPolicy): set it to None to admit work"
            ),
            QueueProblem::FlavorTaint { cluster_queue, flavor, taint } => write!(
                f,
                "ClusterQueue {cluster_queue}: the nodes of flavor {flavor} carry the taint {taint} (its spec.nodeTaints), which the pod does not tolerate: add a toleration, or quota in a flavor it may use"
            ),
            QueueProblem::NotCovered { cluster_queue, resource } => write!(
                f,
                "ClusterQueue {cluster_queue} has no quota for {resource}: add it to a resourceGroup's coveredResources"
            ),
            QueueProblem::Quota(q) => {
                let a = |v: i64| format_amount(&q.resource, v);
                write!(
                    f,
                    "quota: ClusterQueue {} flavor {} needs {} more {}: {} in use of nominal {}",
                    q.cluster_queue,
                    q.flavor,
                    a(q.need),
                    q.resource,
                    a(q.used),
                    a(q.nominal)
                )?;
                if let Some(limit) = q.limit {
                    write!(f, ", borrowing up to {}", a(limit))?;
                }
                if let Some(free) = q.cohort_free {
                    write!(f, ", cohort can lend {}", a(free))?;
                }
                if let Some(cohort) = &q.cohort_limit {
                    write!(
                        f,
                        " (Cohort {cohort} is at its borrowingLimit: its queues use all it may take from its parent)"
                    )?;
                }
                Ok(())
            }
            QueueProblem::BehindHead { cluster_queue } => write!(
                f,
                "waiting behind the head of StrictFIFO ClusterQueue {cluster_queue}"
            ),
            QueueProblem::BehindPreemptor { cluster_queue } => write!(
                f,
                "waiting: a workload of ClusterQueue {cluster_queue} with the same or higher priority is making room by preemption"
            ),
            QueueProblem::BehindReclaim { cluster_queue } => write!(
                f,
                "waiting to borrow: ClusterQueue {cluster_queue} of its cohort is taking back its quota by preemption"
            ),
            QueueProblem::WaitingForVictims { victims } => write!(
                f,
                "waiting for {victims} preempted pod(s) to leave"
            ),
            QueueProblem::PreemptionDelay { until } => write!(
                f,
                "may preempt from t={} s on (preemption delay)",
                until / 1000
            ),
        }
    }
}
