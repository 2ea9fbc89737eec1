//! The Queues page: per ClusterQueue, nominal, used, borrowed and lent per flavor and
//! resource, pending and admitted counts, its fair-share standing in its cohort, and the
//! cohort tree.
//!
//! *Lent* is what others in the cohort borrow, taken from each queue in proportion to its
//! unused nominal quota (within its lending limit the engine keeps no per-lender book, so
//! this is the share each lender stands for, not a ledger).

use super::super::explain_view::{clock, ExplainState};
use kestrel_core::{quota_scale, PodPhase};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QuotaRow {
    pub flavor: String,
    pub resource: String,
    /// In user units (GPUs, cores, bytes, a count).
    pub nominal: f64,
    pub used: f64,
    pub borrowed: f64,
    pub lent: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueRow {
    pub name: String,
    pub cohort: Option<String>,
    pub fair_weight: f64,
    /// Borrowed GPUs (`nvidia.com/gpu`, all flavors) over the fair-share weight: the
    /// lower, the sooner it borrows next.
    pub fair_share: f64,
    /// 1: the first to borrow next among its cohort's queues.
    pub fair_share_rank: u32,
    pub pending: u32,
    pub admitted: u32,
    pub quota: Vec<QuotaRow>,
}

/// A cohort, its parent and what hangs below it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CohortNode {
    pub name: String,
    pub parent: Option<String>,
    pub cohorts: Vec<String>,
    pub queues: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueuesPage {
    pub at_s: f64,
    pub at: String,
    pub queues: Vec<QueueRow>,
    pub cohorts: Vec<CohortNode>,
}

const GPU: &str = "nvidia.com/gpu";

pub fn queues_page(state: &dyn ExplainState) -> QueuesPage {
    let scheduler = state.scheduler();
    let now = state.now();
    let mut pending: HashMap<_, u32> = HashMap::new();
    let mut admitted: HashMap<_, u32> = HashMap::new();
    for (id, record) in scheduler.pods() {
        match record.phase {
            PodPhase::Pending => {
                if let Some(cq) = scheduler.queue_of(id) {
                    *pending.entry(cq).or_default() += 1;
                }
            }
            PodPhase::Bound { .. } => {
                if let Some(a) = &record.admission {
                    *admitted.entry(a.cq).or_default() += 1;
                }
            }
            PodPhase::Gone => {}
        }
    }
    let mut rows: Vec<QueueRow> = scheduler
        .cluster_queues()
        .map(|(cq, spec)| {
            let quota: Vec<QuotaRow> = scheduler
                .queue_usage(cq)
                .into_iter()
                .map(|u| {
                    let scale = quota_scale(&u.resource) as f64;
                    QuotaRow {
                        flavor: u.flavor,
                        resource: u.resource,
                        nominal: u.nominal as f64 / scale,
                        used: u.used as f64 / scale,
                        borrowed: u.borrowed as f64 / scale,
                        lent: 0.0,
                    }
                })
                .collect();
            let borrowed_gpus: f64 = quota
                .iter()
                .filter(|q| q.resource == GPU)
                .map(|q| q.borrowed)
                .sum();
            QueueRow {
                name: spec.name.clone(),
                cohort: spec.cohort.clone(),
                fair_weight: spec.fair_weight,
                fair_share: if spec.fair_weight > 0.0 {
                    borrowed_gpus / spec.fair_weight
                } else {
                    f64::MAX
                },
                fair_share_rank: 1,
                pending: pending.get(&cq).copied().unwrap_or(0),
                admitted: admitted.get(&cq).copied().unwrap_or(0),
                quota,
            }
        })
        .collect();
    share_out_lending(&mut rows);
    rank_fair_shares(&mut rows);
    QueuesPage {
        at_s: now as f64 / 1000.0,
        at: clock(now),
        cohorts: cohort_tree(state, &rows),
        queues: rows,
    }
}

/// Per cohort, flavor and resource: what its queues borrow, taken from the others in
/// proportion to their unused nominal quota.
fn share_out_lending(rows: &mut [QueueRow]) {
    type Key = (String, String, String);
    let mut borrowed: HashMap<Key, f64> = HashMap::new();
    let mut unused: HashMap<Key, f64> = HashMap::new();
    for row in rows.iter() {
        let Some(cohort) = &row.cohort else { continue };
        for q in &row.quota {
            let key = (cohort.clone(), q.flavor.clone(), q.resource.clone());
            *borrowed.entry(key.clone()).or_default() += q.borrowed;
            *unused.entry(key).or_default() += (q.nominal - q.used).max(0.0);
        }
    }
    for row in rows.iter_mut() {
        let Some(cohort) = row.cohort.clone() else {
            continue;
        };
        for q in &mut row.quota {
            let key = (cohort.clone(), q.flavor.clone(), q.resource.clone());
            let own_unused = (q.nominal - q.used).max(0.0);
            let total_unused = unused.get(&key).copied().unwrap_or(0.0);
            let others_borrow = borrowed.get(&key).copied().unwrap_or(0.0) - q.borrowed;
            if total_unused > 0.0 && others_borrow > 0.0 {
                q.lent = (others_borrow * own_unused / total_unused).min(own_unused);
            }
        }
    }
}

/// Ranks queues within their cohort by fair share, lowest first (ties: by name).
fn rank_fair_shares(rows: &mut [QueueRow]) {
    let mut by_cohort: BTreeMap<Option<String>, Vec<usize>> = BTreeMap::new();
    for (i, row) in rows.iter().enumerate() {
        by_cohort.entry(row.cohort.clone()).or_default().push(i);
    }
    for members in by_cohort.values_mut() {
        members.sort_by(|&a, &b| {
            rows[a]
                .fair_share
                .total_cmp(&rows[b].fair_share)
                .then_with(|| rows[a].name.cmp(&rows[b].name))
        });
        for (rank, &i) in members.iter().enumerate() {
            rows[i].fair_share_rank = rank as u32 + 1;
        }
    }
}

/// Every cohort named by a queue or declared, with its parent, child cohorts and queues.
fn cohort_tree(state: &dyn ExplainState, rows: &[QueueRow]) -> Vec<CohortNode> {
    let mut tree: BTreeMap<String, CohortNode> = BTreeMap::new();
    let node = |name: &str| CohortNode {
        name: name.to_string(),
        parent: None,
        cohorts: Vec::new(),
        queues: Vec::new(),
    };
    for spec in state.scheduler().cohorts() {
        let mut n = node(&spec.name);
        n.parent = spec.parent.clone();
        tree.insert(spec.name.clone(), n);
    }
    for row in rows {
        if let Some(c) = &row.cohort {
            tree.entry(c.clone())
                .or_insert_with(|| node(c))
                .queues
                .push(row.name.clone());
        }
    }
    let children: Vec<(String, String)> = tree
        .values()
        .filter_map(|n| Some((n.parent.clone()?, n.name.clone())))
        .collect();
    for (parent, child) in children {
        tree.entry(parent.clone())
            .or_insert_with(|| node(&parent))
            .cohorts
            .push(child);
    }
    tree.into_values().collect()
}
