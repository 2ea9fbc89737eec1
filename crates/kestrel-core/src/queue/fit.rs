//! Whether a request fits a queue's quota, borrowing from its cohort, and in which flavors.

use super::*;
use crate::model::{TaintEffect, Toleration};

impl QueueBook {
    /// A ClusterQueue's quota and usage of `resource` in `flavor`.
    pub(super) fn queue_amounts(&self, cq: CqId, flavor: &str, resource: &str) -> TreeAmounts {
        let mut out = TreeAmounts::default();
        for g in &self.cqs[cq.0 as usize].groups {
            let Some(i) = g.covered.iter().position(|r| r == resource) else {
                continue;
            };
            for f in g.flavors.iter().filter(|f| f.flavor == flavor) {
                out.quota += f.nominal[i];
                out.guaranteed += f.guaranteed(i);
                out.usage += f.usage[i];
                out.borrowing_limit = f.borrowing_limit[i];
            }
        }
        out
    }

    /// A cohort's quota and usage of `resource` in `flavor`: its own quota plus what its
    /// children lend it, and what they take from it.
    pub(super) fn cohort_amounts(&self, cohort: &str, flavor: &str, resource: &str) -> TreeAmounts {
        let Some(book) = self.cohort_books.get(cohort) else {
            return TreeAmounts::default();
        };
        let own = book.quota.get(&(flavor.to_string(), resource.to_string()));
        let mut out = TreeAmounts {
            quota: own.map_or(0, |q| q.nominal),
            borrowing_limit: own.and_then(|q| q.borrowing_limit),
            ..Default::default()
        };
        let children = book
            .cohorts
            .iter()
            .map(|c| self.cohort_amounts(c, flavor, resource))
            .chain(
                book.queues
                    .iter()
                    .map(|&q| self.queue_amounts(q, flavor, resource)),
            );
        for child in children {
            out.quota += child.lent();
            out.usage += child.taken();
        }
        out.guaranteed = own
            .and_then(|q| q.lending_limit)
            .map_or(0, |l| (out.quota - l).max(0));
        out
    }

    /// What the cohort `cohort` can still give a child: what is free at its root, less
    /// at each cohort on the way down whose borrowing limit binds (Kueue's hierarchical
    /// cohorts), and the lowest such cohort.
    pub(super) fn cohort_available(
        &self,
        cohort: &str,
        flavor: &str,
        resource: &str,
    ) -> (i64, Option<String>) {
        let node = self.cohort_amounts(cohort, flavor, resource);
        let parent = self
            .cohort_books
            .get(cohort)
            .and_then(|b| b.parent.as_deref());
        let Some(parent) = parent else {
            return (node.quota - node.usage, None);
        };
        let kept = (node.guaranteed - node.usage).max(0);
        let (from_parent, mut bound) = self.cohort_available(parent, flavor, resource);
        let room = node.borrow_room().unwrap_or(i64::MAX);
        if room < from_parent {
            bound = Some(cohort.to_string());
        }
        (kept + from_parent.min(room), bound)
    }

    /// The size of the pool `cq`'s cohort tree shares of `resource` in `flavor`.
    pub(super) fn tree_quota(&self, cq: CqId, flavor: &str, resource: &str) -> i64 {
        let root = self.cqs[cq.0 as usize].root.as_deref().unwrap_or_default();
        self.cohort_amounts(root, flavor, resource).quota
    }

    /// Whether `request` (per resource name) fits `cq`'s quota, and with which flavors.
    /// Whether the workload fits its queue's quota, and in which flavors: per resource
    /// group the first flavor (in the queue's order) whose `nodeTaints` its pods tolerate
    /// (`tolerations`, with the flavor's own) and that has room without borrowing, else the
    /// first that has room by borrowing.
    pub(crate) fn fit(
        &self,
        cq: CqId,
        request: &[(String, i64)],
        tolerations: &[Toleration],
    ) -> QuotaFit {
        let book = &self.cqs[cq.0 as usize];
        let name = &book.spec.name;
        if book.spec.stop_policy != StopPolicy::None {
            return QuotaFit::No(QueueProblem::Stopped {
                cluster_queue: name.clone(),
            });
        }
        if let Some(why) = &book.spec.inactive {
            return QuotaFit::No(QueueProblem::Inactive {
                cluster_queue: name.clone(),
                why: why.clone(),
            });
        }
        for (resource, amount) in request {
            let covered = book.groups.iter().any(|g| g.covered.contains(resource));
            if *amount > 0 && resource != PODS_RESOURCE && !covered {
                return QuotaFit::No(QueueProblem::NotCovered {
                    cluster_queue: name.clone(),
                    resource: resource.clone(),
                });
            }
        }
        let mut flavors = Vec::with_capacity(book.groups.len());
        let mut borrowing = false;
        for g in &book.groups {
            let mut first_problem = None;
            let mut chosen: Option<(usize, bool)> = None;
            for (fi, f) in g.flavors.iter().enumerate() {
                if let Some(taint) = self.untolerated_taint(&f.flavor, tolerations) {
                    first_problem.get_or_insert(QueueProblem::FlavorTaint {
                        cluster_queue: name.clone(),
                        flavor: f.flavor.clone(),
                        taint,
                    });
                    continue;
                }
                match self.flavor_fit(cq, g, f, request) {
                    Ok(false) => {
                        chosen = Some((fi, false));
                        break;
                    }
                    Ok(true) => {
                        chosen.get_or_insert((fi, true));
                        if book.spec.borrow_in_first_fitting_flavor {
                            break;
                        }
                    }
                    Err(p) => {
                        first_problem.get_or_insert(p);
                    }
                }
            }
            match chosen {
                Some((fi, borrows)) => {
                    flavors.push(fi as u16);
                    borrowing |= borrows;
                }
                None => {
                    return QuotaFit::No(first_problem.unwrap_or(QueueProblem::NotCovered {
                        cluster_queue: name.clone(),
                        resource: g.covered.first().cloned().unwrap_or_default(),
                    }))
                }
            }
        }
        let admission = Admission { cq, flavors };
        if borrowing {
            QuotaFit::Borrowing(admission)
        } else {
            QuotaFit::Nominal(admission)
        }
    }

    /// A NoSchedule or NoExecute taint of the flavor's nodes that neither `tolerations`
    /// nor the flavor's own tolerations (added to the pods it admits) tolerate.
    pub(super) fn untolerated_taint(
        &self,
        flavor: &str,
        tolerations: &[Toleration],
    ) -> Option<String> {
        let flavor = self.flavors.get(flavor)?;
        flavor
            .node_taints
            .iter()
            .filter(|t| t.effect != TaintEffect::PreferNoSchedule)
            .find(|t| {
                !tolerations
                    .iter()
                    .chain(&flavor.tolerations)
                    .any(|tol| tol.tolerates(t))
            })
            .map(|t| t.to_string())
    }

    /// `Ok(borrows)` when the group's request fits flavor `f`.
    pub(super) fn flavor_fit(
        &self,
        cq: CqId,
        g: &GroupBook,
        f: &FlavorBook,
        request: &[(String, i64)],
    ) -> Result<bool, QueueProblem> {
        let book = &self.cqs[cq.0 as usize];
        let mut borrows = false;
        for (i, resource) in g.covered.iter().enumerate() {
            let need = request
                .iter()
                .find(|(r, _)| r == resource)
                .map_or(0, |(_, a)| *a);
            if need == 0 {
                continue;
            }
            let after = f.usage[i] + need;
            let within_nominal = after <= f.nominal[i];
            if within_nominal && book.root.is_none() {
                continue;
            }
            let problem = |limit: Option<i64>, cohort_free: Option<i64>| {
                QueueProblem::Quota(Box::new(QuotaShortfall {
                    cluster_queue: book.spec.name.clone(),
                    flavor: f.flavor.clone(),
                    resource: resource.clone(),
                    need,
                    used: f.usage[i],
                    nominal: f.nominal[i],
                    limit,
                    cohort_free,
                    cohort_limit: None,
                }))
            };
            if book.root.is_none() {
                return Err(problem(None, None));
            }
            // Lent quota is in use elsewhere until reclaimed: the cohort tree decides even
            // inside nominal quota.
            let own = self.queue_amounts(cq, &f.flavor, resource);
            let cohort = book.spec.cohort.as_deref().unwrap_or_default();
            let (cohort_free, cohort_limit) = self.cohort_available(cohort, &f.flavor, resource);
            let cohort_free = cohort_free.max(0);
            let kept = (own.guaranteed - own.usage).max(0);
            let limit = f.borrowing_limit[i].map(|b| f.nominal[i] + b);
            let over_limit = !within_nominal && limit.is_some_and(|l| after > l);
            if over_limit || need > kept + cohort_free {
                let mut shortfall = problem(limit, Some(cohort_free));
                if let QueueProblem::Quota(q) = &mut shortfall {
                    q.cohort_limit = cohort_limit.filter(|_| !over_limit);
                }
                return Err(shortfall);
            }
            if !within_nominal {
                borrows = true;
            }
        }
        Ok(borrows)
    }
}
