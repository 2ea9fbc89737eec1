//! The queue book's state: quotas and usage per ClusterQueue, cohort and flavor.

use super::*;
use crate::model::Labels;
use crate::types::Millis;
use std::collections::{BTreeMap, HashMap};

/// Quota and usage of one flavor in one resource group, per covered resource.
#[derive(Debug, Clone)]
pub(crate) struct FlavorBook {
    pub(crate) flavor: String,
    pub(super) nominal: Vec<i64>,
    pub(super) borrowing_limit: Vec<Option<i64>>,
    pub(super) lending_limit: Vec<Option<i64>>,
    pub(crate) usage: Vec<i64>,
}

impl FlavorBook {
    /// What the queue keeps for itself (not lent).
    pub(super) fn guaranteed(&self, i: usize) -> i64 {
        self.lending_limit[i].map_or(0, |l| (self.nominal[i] - l).max(0))
    }
}

#[derive(Debug, Clone)]
pub(crate) struct GroupBook {
    pub(crate) covered: Vec<String>,
    pub(crate) flavors: Vec<FlavorBook>,
}

#[derive(Debug, Clone)]
pub(crate) struct CqBook {
    pub(crate) spec: ClusterQueueSpec,
    /// The root of its cohort tree: queues under one root share idle quota.
    pub(crate) root: Option<String>,
    pub(crate) groups: Vec<GroupBook>,
}

/// How a workload fits its queue's quota.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum QuotaFit {
    /// Inside nominal quota.
    Nominal(Admission),
    /// Only by borrowing from the cohort.
    Borrowing(Admission),
    No(QueueProblem),
}

/// All queues and their usage.
#[derive(Debug, Default, Clone)]
pub(crate) struct QueueBook {
    pub(crate) cqs: Vec<CqBook>,
    pub(crate) cq_ids: HashMap<String, CqId>,
    pub(crate) local: HashMap<(String, String), String>,
    pub(crate) cohorts: HashMap<String, CohortSpec>,
    pub(crate) flavors: HashMap<String, ResourceFlavor>,
    pub(crate) namespace_labels: HashMap<String, Labels>,
    /// Per ClusterQueue: its borrowed share averaged over time (decaying with a
    /// half-life), when fair share counts history; and when it was last updated.
    pub(crate) recent_share: Vec<f64>,
    pub(crate) recent_at: Millis,
    /// Every cohort of every tree (those only named by a queue or as a parent too).
    pub(super) cohort_books: HashMap<String, CohortBook>,
}

/// A cohort compiled for quota checks: where it hangs, what hangs below it, and the quota
/// it holds itself.
#[derive(Debug, Clone, Default)]
pub(super) struct CohortBook {
    pub(super) parent: Option<String>,
    pub(super) cohorts: Vec<String>,
    pub(super) queues: Vec<CqId>,
    /// (flavor, resource) -> the cohort's own quota.
    pub(super) quota: HashMap<(String, String), ResourceQuota>,
}

/// One resource in one flavor at a node of a cohort tree (a ClusterQueue or a cohort), as
/// Kueue's hierarchical cohorts count it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TreeAmounts {
    /// Its own nominal quota plus what its children lend it.
    pub(super) quota: i64,
    /// What it keeps from its parent: quota minus its lending limit (0 without one).
    pub(super) guaranteed: i64,
    /// A queue's usage; a cohort's: what its children take beyond what they keep.
    pub(super) usage: i64,
    pub(super) borrowing_limit: Option<i64>,
}

impl TreeAmounts {
    /// What it puts in its parent's pool.
    pub(super) fn lent(&self) -> i64 {
        self.quota - self.guaranteed
    }
    /// What it takes from its parent's pool.
    pub(super) fn taken(&self) -> i64 {
        (self.usage - self.guaranteed).max(0)
    }
    /// The most it may still take from its parent: its borrowing limit, if any.
    pub(super) fn borrow_room(&self) -> Option<i64> {
        self.borrowing_limit.map(|b| self.lent() - self.taken() + b)
    }
}

pub(super) fn compile_groups(groups: &[ResourceGroup]) -> Vec<GroupBook> {
    groups
        .iter()
        .map(|g| GroupBook {
            covered: g.covered.clone(),
            flavors: g
                .flavors
                .iter()
                .map(|f| {
                    let quota = |name: &str| f.resources.iter().find(|r| r.name == name);
                    FlavorBook {
                        flavor: f.flavor.clone(),
                        nominal: g
                            .covered
                            .iter()
                            .map(|r| quota(r).map_or(0, |q| q.nominal))
                            .collect(),
                        borrowing_limit: g
                            .covered
                            .iter()
                            .map(|r| quota(r).and_then(|q| q.borrowing_limit))
                            .collect(),
                        lending_limit: g
                            .covered
                            .iter()
                            .map(|r| quota(r).and_then(|q| q.lending_limit))
                            .collect(),
                        usage: vec![0; g.covered.len()],
                    }
                })
                .collect(),
        })
        .collect()
}

pub(super) fn validate_groups(
    kind: &'static str,
    object: &str,
    groups: &[ResourceGroup],
) -> Result<(), QueueError> {
    let err = |field, why: String| QueueError {
        kind,
        object: object.to_string(),
        field,
        why,
    };
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (gi, g) in groups.iter().enumerate() {
        if g.covered.is_empty() {
            return Err(err(
                "resourceGroups[].coveredResources",
                "is empty; list the resources this group's flavors give quota for".into(),
            ));
        }
        for r in &g.covered {
            if let Some(other) = seen.insert(r, gi) {
                return Err(err(
                    "resourceGroups[].coveredResources",
                    format!("{r} is covered by groups {other} and {gi}; cover each resource in one group"),
                ));
            }
        }
        for f in &g.flavors {
            for q in &f.resources {
                if !g.covered.contains(&q.name) {
                    return Err(err(
                        "resourceGroups[].flavors[].resources[].name",
                        format!(
                            "flavor {} gives quota for {}, which the group does not cover; add it to coveredResources",
                            f.flavor, q.name
                        ),
                    ));
                }
                if q.nominal < 0 || q.borrowing_limit.is_some_and(|l| l < 0) {
                    return Err(err(
                        "resourceGroups[].flavors[].resources[]",
                        format!("{} quota must not be negative", q.name),
                    ));
                }
                if q.lending_limit.is_some_and(|l| l < 0 || l > q.nominal) {
                    return Err(err(
                        "resourceGroups[].flavors[].resources[].lendingLimit",
                        format!("{}: must be between 0 and nominalQuota", q.name),
                    ));
                }
            }
        }
    }
    Ok(())
}
