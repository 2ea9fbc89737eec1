//! Charging and returning quota, borrowing and fair shares, and usage for reports.

use super::*;
use crate::model::{Labels, Toleration};
use crate::types::Millis;
use serde::Serialize;

impl QueueBook {
    /// Adds (`sign` 1) or returns (-1) a pod's request to the flavors of its admission.
    pub(crate) fn charge(&mut self, admission: &Admission, request: &[(String, i64)], sign: i64) {
        let book = &mut self.cqs[admission.cq.0 as usize];
        for (g, &fi) in book.groups.iter_mut().zip(&admission.flavors) {
            let Some(f) = g.flavors.get_mut(fi as usize) else {
                continue;
            };
            for (i, resource) in g.covered.iter().enumerate() {
                if let Some((_, a)) = request.iter().find(|(r, _)| r == resource) {
                    f.usage[i] += sign * a;
                }
            }
        }
    }

    /// Whether `cq` uses more than its nominal quota of any resource in `request`.
    pub(crate) fn is_borrowing(&self, cq: CqId, request: &[(String, i64)]) -> bool {
        self.cqs[cq.0 as usize].groups.iter().any(|g| {
            g.flavors.iter().any(|f| {
                g.covered.iter().enumerate().any(|(i, r)| {
                    f.usage[i] > f.nominal[i]
                        && (request.is_empty() || request.iter().any(|(q, a)| q == r && *a > 0))
                })
            })
        })
    }

    /// Weighted dominant share of what the queue borrows: the largest fraction of a
    /// cohort pool it uses beyond its nominal quota, divided by its weight.
    /// Moves each queue's recent share towards its share now: by half over each
    /// `half_life` that passed since the last update.
    pub(crate) fn decay_shares(&mut self, now: Millis, half_life: Millis) {
        let kept = 0.5f64.powf(now.saturating_sub(self.recent_at) as f64 / half_life as f64);
        self.recent_at = now;
        let current: Vec<f64> = (0..self.cqs.len())
            .map(|i| self.borrowed_share(CqId(i as u32)))
            .collect();
        self.recent_share.resize(current.len(), 0.0);
        for (recent, now) in self.recent_share.iter_mut().zip(current) {
            *recent = *recent * kept + now * (1.0 - kept);
        }
    }

    /// Weighted dominant share of what a queue borrows (now, plus its recent share when
    /// history counts): the borrowing phase serves the lowest first.
    pub(crate) fn fair_share(&self, cq: CqId) -> f64 {
        let share =
            self.borrowed_share(cq) + self.recent_share.get(cq.0 as usize).copied().unwrap_or(0.0);
        let weight = self.cqs[cq.0 as usize].spec.fair_weight;
        if weight <= 0.0 {
            return if share > 0.0 { f64::INFINITY } else { 0.0 };
        }
        share / weight
    }

    /// Dominant share of the cohort pool a queue borrows now (unweighted).
    pub(super) fn borrowed_share(&self, cq: CqId) -> f64 {
        let book = &self.cqs[cq.0 as usize];
        if book.root.is_none() {
            return 0.0;
        }
        let mut share: f64 = 0.0;
        for g in &book.groups {
            for f in &g.flavors {
                for (i, r) in g.covered.iter().enumerate() {
                    let borrowed = f.usage[i] - f.nominal[i];
                    if borrowed <= 0 {
                        continue;
                    }
                    let pool = self.tree_quota(cq, &f.flavor, r);
                    share = share.max(borrowed as f64 / pool.max(1) as f64);
                }
            }
        }
        share
    }

    /// The admission of a pod found already bound (by an earlier leader, before a restart):
    /// per resource group, the first flavor whose node labels the pod's node carries (the
    /// first flavor when none does). Reality wins: it is charged even past the quota.
    pub(crate) fn restored_admission(&self, cq: CqId, node_labels: &Labels) -> Admission {
        let book = &self.cqs[cq.0 as usize];
        let flavors = book
            .groups
            .iter()
            .map(|g| {
                g.flavors
                    .iter()
                    .position(|f| {
                        self.flavors.get(&f.flavor).is_some_and(|rf| {
                            rf.node_labels
                                .iter()
                                .all(|(k, v)| node_labels.get(k) == Some(v))
                        })
                    })
                    .unwrap_or(0) as u16
            })
            .collect();
        Admission { cq, flavors }
    }

    /// The flavors' node labels and tolerations for an admission (empty when none).
    pub(crate) fn flavor_constraints(&self, admission: &Admission) -> (Labels, Vec<Toleration>) {
        let mut labels = Labels::new();
        let mut tolerations = Vec::new();
        let book = &self.cqs[admission.cq.0 as usize];
        for (g, &fi) in book.groups.iter().zip(&admission.flavors) {
            let Some(f) = g.flavors.get(fi as usize) else {
                continue;
            };
            if let Some(flavor) = self.flavors.get(&f.flavor) {
                labels.extend(flavor.node_labels.clone());
                tolerations.extend(flavor.tolerations.iter().cloned());
            }
        }
        (labels, tolerations)
    }
}

/// Usage of one resource in one flavor of a queue, for reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuotaUsage {
    pub flavor: String,
    pub resource: String,
    pub nominal: i64,
    pub used: i64,
    /// Used beyond nominal (borrowed from the cohort).
    pub borrowed: i64,
}

impl CqBook {
    pub(crate) fn usage(&self) -> Vec<QuotaUsage> {
        let mut out = Vec::new();
        for g in &self.groups {
            for f in &g.flavors {
                for (i, r) in g.covered.iter().enumerate() {
                    out.push(QuotaUsage {
                        flavor: f.flavor.clone(),
                        resource: r.clone(),
                        nominal: f.nominal[i],
                        used: f.usage[i],
                        borrowed: (f.usage[i] - f.nominal[i]).max(0),
                    });
                }
            }
        }
        out
    }
}
