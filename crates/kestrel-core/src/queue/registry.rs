//! Adding and removing ClusterQueues and cohorts, and which queue a pod goes to.

use super::*;
use std::collections::HashMap;

impl QueueBook {
    /// Takes a deleted ClusterQueue's quota out of its cohort: it lends nothing, and what
    /// it still runs counts as borrowed (others may reclaim it) until it ends.
    pub(crate) fn retire_cluster_queue(&mut self, name: &str) -> bool {
        let Some(id) = self.cq_ids.remove(name) else {
            return false;
        };
        for g in &mut self.cqs[id.0 as usize].groups {
            for f in &mut g.flavors {
                f.nominal.iter_mut().for_each(|n| *n = 0);
                f.lending_limit.iter_mut().for_each(|l| *l = None);
            }
        }
        true
    }

    pub(crate) fn add_cluster_queue(&mut self, spec: ClusterQueueSpec) -> Result<CqId, QueueError> {
        validate_groups("ClusterQueue", &spec.name, &spec.resource_groups)?;
        if spec.fair_weight < 0.0 || !spec.fair_weight.is_finite() {
            return Err(QueueError {
                kind: "ClusterQueue",
                object: spec.name.clone(),
                field: "fairSharing.weight",
                why: "must be a non-negative number".into(),
            });
        }
        let groups = compile_groups(&spec.resource_groups);
        match self.cq_ids.get(&spec.name) {
            Some(&id) => {
                let book = &mut self.cqs[id.0 as usize];
                // Keep usage of flavors and resources that stay.
                let old = std::mem::replace(&mut book.groups, groups);
                for g in &mut book.groups {
                    for f in &mut g.flavors {
                        for (i, r) in g.covered.iter().enumerate() {
                            f.usage[i] = old
                                .iter()
                                .filter_map(|og| {
                                    let ri = og.covered.iter().position(|c| c == r)?;
                                    let of = og.flavors.iter().find(|x| x.flavor == f.flavor)?;
                                    Some(of.usage[ri])
                                })
                                .sum();
                        }
                    }
                }
                book.spec = spec;
                self.refresh_roots();
                Ok(id)
            }
            None => {
                let id = CqId(self.cqs.len() as u32);
                self.cq_ids.insert(spec.name.clone(), id);
                self.cqs.push(CqBook {
                    spec,
                    root: None,
                    groups,
                });
                self.refresh_roots();
                Ok(id)
            }
        }
    }

    pub(crate) fn add_cohort(&mut self, spec: CohortSpec) -> Result<(), QueueError> {
        validate_groups("Cohort", &spec.name, &spec.resource_groups)?;
        // A parent chain that comes back to this cohort would make the tree a loop.
        let mut at = spec.parent.clone();
        let mut steps = 0;
        while let Some(p) = at {
            if p == spec.name || steps > self.cohorts.len() {
                return Err(QueueError {
                    kind: "Cohort",
                    object: spec.name.clone(),
                    field: "spec.parentName",
                    why: format!("{p} leads back to {}: cohorts form a tree", spec.name),
                });
            }
            at = self.cohorts.get(&p).and_then(|c| c.parent.clone());
            steps += 1;
        }
        self.cohorts.insert(spec.name.clone(), spec);
        self.refresh_roots();
        Ok(())
    }

    /// Drops a cohort (its children then root where it stood); whether it existed.
    pub(crate) fn remove_cohort(&mut self, name: &str) -> bool {
        let existed = self.cohorts.remove(name).is_some();
        if existed {
            self.refresh_roots();
        }
        existed
    }

    pub(super) fn root_of(&self, cohort: &str) -> String {
        let mut at = cohort.to_string();
        for _ in 0..=self.cohorts.len() {
            match self.cohorts.get(&at).and_then(|c| c.parent.clone()) {
                Some(p) => at = p,
                None => break,
            }
        }
        at
    }

    pub(super) fn refresh_roots(&mut self) {
        let roots: Vec<Option<String>> = self
            .cqs
            .iter()
            .map(|cq| cq.spec.cohort.as_deref().map(|c| self.root_of(c)))
            .collect();
        for (cq, root) in self.cqs.iter_mut().zip(roots) {
            cq.root = root;
        }
        let mut books: HashMap<String, CohortBook> = HashMap::new();
        for cohort in self.cohorts.values() {
            let book = books.entry(cohort.name.clone()).or_default();
            book.parent = cohort.parent.clone();
            for g in &cohort.resource_groups {
                for f in &g.flavors {
                    for q in &f.resources {
                        book.quota
                            .insert((f.flavor.clone(), q.name.clone()), q.clone());
                    }
                }
            }
            if let Some(parent) = &cohort.parent {
                books
                    .entry(parent.clone())
                    .or_default()
                    .cohorts
                    .push(cohort.name.clone());
            }
        }
        for (i, cq) in self.cqs.iter().enumerate() {
            if let Some(cohort) = &cq.spec.cohort {
                books
                    .entry(cohort.clone())
                    .or_default()
                    .queues
                    .push(CqId(i as u32));
            }
        }
        self.cohort_books = books;
    }

    /// The ClusterQueue a pod's LocalQueue leads to, or why none.
    pub(crate) fn resolve(&self, namespace: &str, local: &str) -> Result<CqId, QueueProblem> {
        let direct = || {
            self.cq_ids
                .get_key_value(local)
                .filter(|(_, id)| self.cqs[id.0 as usize].spec.cluster_scoped)
                .map(|(name, _)| name)
        };
        let Some(cq_name) = self
            .local
            .get(&(namespace.to_string(), local.to_string()))
            .or_else(direct)
        else {
            // A pod may name a ClusterQueue's LocalQueue that is missing; say so.
            return Err(QueueProblem::NoLocalQueue {
                namespace: namespace.to_string(),
                name: local.to_string(),
            });
        };
        let Some(&id) = self.cq_ids.get(cq_name) else {
            return Err(QueueProblem::NoClusterQueue {
                local_queue: format!("{namespace}/{local}"),
                cluster_queue: cq_name.clone(),
            });
        };
        if let Some(selector) = &self.cqs[id.0 as usize].spec.namespace_selector {
            let mut labels = self
                .namespace_labels
                .get(namespace)
                .cloned()
                .unwrap_or_default();
            labels
                .entry("kubernetes.io/metadata.name".to_string())
                .or_insert_with(|| namespace.to_string());
            if !selector.iter().all(|r| r.matches(&labels)) {
                return Err(QueueProblem::NamespaceNotSelected {
                    cluster_queue: cq_name.clone(),
                    namespace: namespace.to_string(),
                });
            }
        }
        Ok(id)
    }

    /// Queues sharing `cq`'s cohort root (including `cq`), with their ids.
    pub(crate) fn cohort_members(&self, cq: CqId) -> impl Iterator<Item = (CqId, &CqBook)> + '_ {
        let root = self.cqs[cq.0 as usize].root.clone();
        self.cqs
            .iter()
            .enumerate()
            .filter(move |(i, c)| *i == cq.0 as usize || (root.is_some() && c.root == root))
            .map(|(i, c)| (CqId(i as u32), c))
    }
}
