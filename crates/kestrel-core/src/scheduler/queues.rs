//! Queue admission glue: pods linked to their ClusterQueue, queue declarations, and the
//! quota checks a cycle makes before placing.

use super::{PreemptionSearch, QueueLink, QuotaRequest, Scheduler};
use crate::model::{GpuRequest, PodSpec};
use crate::outcome::ClusterError;
use crate::preempt::WorkloadKey;
use crate::queue::{
    ClusterQueueSpec, CohortSpec, CqId, LocalQueueSpec, QuotaUsage, ResourceFlavor,
};
use crate::resources::GPU_RESOURCE;
use crate::types::{PodId, PodPhase};
use std::collections::BTreeMap;

impl Scheduler {
    /// A member of the workload still pending: a gang's bound members do not end its
    /// wait, the rest of it still needs the room its victims leave.
    fn pending_member(&self, workload: WorkloadKey) -> Option<PodId> {
        match workload {
            WorkloadKey::Pod(p) => {
                Some(p).filter(|p| self.pods[p.0 as usize].phase == PodPhase::Pending)
            }
            WorkloadKey::Gang(g) => self.gangs.gangs[g.0 as usize]
                .members
                .iter()
                .copied()
                .find(|p| self.pods[p.0 as usize].phase == PodPhase::Pending),
        }
    }

    /// A ClusterQueue of `cq`'s cohort (another workload's) whose preemptor waits for
    /// victims it chose to get its quota back: borrowers wait, or they would take that
    /// quota again.
    pub(super) fn reclaim_in_cohort(&self, cq: CqId, workload: WorkloadKey) -> Option<String> {
        if self.preemption.awaiting.is_empty() {
            return None;
        }
        let root = self.queues.cqs[cq.0 as usize].root.as_ref()?;
        self.preemption
            .awaiting
            .keys()
            .filter(|w| **w != workload)
            .find_map(|w| {
                let rep = self.pending_member(*w)?;
                let QueueLink::Cq(other) = self.pods[rep.0 as usize].link else {
                    return None;
                };
                let book = &self.queues.cqs[other.0 as usize];
                let reclaiming = book.root.as_ref() == Some(root)
                    && !self
                        .queues
                        .is_borrowing(other, &self.workload_request(&[rep]));
                reclaiming.then(|| book.spec.name.clone())
            })
    }

    /// Whether a workload of `cq` with at least this priority waits for its victims: the
    /// room they leave is its, not for those behind it.
    pub(super) fn preemptor_ahead(&self, cq: CqId, pods: &[PodId]) -> bool {
        if self.preemption.awaiting.is_empty() {
            return false;
        }
        let priority = self.pods[pods[0].0 as usize].spec.priority;
        self.preemption.awaiting.keys().any(|w| {
            self.pending_member(*w).is_some_and(|p| {
                let record = &self.pods[p.0 as usize];
                record.link == QueueLink::Cq(cq) && record.spec.priority >= priority
            })
        })
    }

    pub(super) fn search_key(
        &self,
        quota: bool,
        cq: Option<CqId>,
        pods: &[PodId],
        request: &QuotaRequest,
    ) -> PreemptionSearch {
        let rep = &self.pods[pods[0].0 as usize];
        let priority = pods
            .iter()
            .map(|p| self.pods[p.0 as usize].spec.priority)
            .max()
            .unwrap_or(rep.spec.priority);
        (quota, cq, priority, request.clone(), rep.constraint)
    }

    /// The workload's total quota request. A pending share by GPU memory counts the most
    /// it could take on the cluster's devices now (the share on the smallest device that
    /// holds it), so what its binding charges, its device's share, is never more.
    pub(crate) fn workload_request(&self, pods: &[PodId]) -> QuotaRequest {
        if let [p] = pods {
            let record = &self.pods[p.0 as usize];
            let counts_most = matches!(
                (record.spec.demand.gpu, &record.phase),
                (GpuRequest::Memory { .. }, PodPhase::Pending)
            );
            if !counts_most {
                return record.quota_request.clone();
            }
        }
        let mut total: BTreeMap<&str, i64> = BTreeMap::new();
        for &p in pods {
            let record = &self.pods[p.0 as usize];
            for (r, a) in record.quota_request.iter() {
                *total.entry(r.as_str()).or_default() += a;
            }
            if let (GpuRequest::Memory { .. }, PodPhase::Pending) =
                (record.spec.demand.gpu, &record.phase)
            {
                let most = self.gpu_milli_bounds(record.spec.demand.gpu).1;
                if most > 0 {
                    *total.entry(GPU_RESOURCE).or_default() += most as i64;
                }
            }
        }
        total.into_iter().map(|(r, a)| (r.to_string(), a)).collect()
    }

    /// What `pods` and `missing` more pods like the first of them ask of their queue:
    /// a workload admitted before all of its pods exist.
    pub(crate) fn fast_admission_request(&self, pods: &[PodId], missing: u32) -> QuotaRequest {
        if missing == 0 {
            return self.workload_request(pods);
        }
        let mut total: BTreeMap<String, i64> =
            self.workload_request(pods).iter().cloned().collect();
        for (r, a) in self.copies_request(pods[0], missing) {
            *total.entry(r).or_default() += a;
        }
        total.into_iter().collect()
    }

    /// What `copies` pods like `pod` ask of their queue: pods of a workload not created yet.
    pub(crate) fn copies_request(&self, pod: PodId, copies: u32) -> Vec<(String, i64)> {
        self.workload_request(&[pod])
            .iter()
            .map(|(r, a)| (r.clone(), a * i64::from(copies)))
            .collect()
    }

    pub(super) fn link_of(&self, spec: &PodSpec) -> QueueLink {
        match &spec.queue {
            None => QueueLink::Unqueued,
            Some(local) => match self.queues.resolve(&spec.namespace, local) {
                Ok(cq) => QueueLink::Cq(cq),
                Err(problem) => QueueLink::Broken(problem),
            },
        }
    }

    /// Queues changed: pending pods find their ClusterQueue again and get another look;
    /// bound pods that were not charged to a queue (restored before their queue was known)
    /// are charged to the one they now lead to.
    fn queues_changed(&mut self) {
        for i in 0..self.pods.len() {
            match self.pods[i].phase {
                PodPhase::Pending => self.pods[i].link = self.link_of(&self.pods[i].spec),
                PodPhase::Bound { node, .. } if self.pods[i].admission.is_none() => {
                    self.pods[i].link = self.link_of(&self.pods[i].spec);
                    if let QueueLink::Cq(cq) = self.pods[i].link {
                        let labels = &self.cluster.node(node).spec.labels;
                        self.pods[i].admission = Some(self.queues.restored_admission(cq, labels));
                        self.charge_admission(PodId(i as u32));
                    }
                }
                _ => {}
            }
        }
        self.capacity_may_have_grown();
    }

    /// Declares or updates a ClusterQueue (usage of what stays is kept).
    pub fn add_cluster_queue(&mut self, spec: ClusterQueueSpec) -> Result<CqId, ClusterError> {
        let id = self.queues.add_cluster_queue(spec)?;
        self.queues_changed();
        Ok(id)
    }

    pub fn add_local_queue(&mut self, spec: LocalQueueSpec) {
        self.queues
            .local
            .insert((spec.namespace, spec.name), spec.cluster_queue);
        self.queues_changed();
    }

    pub fn add_cohort(&mut self, spec: CohortSpec) -> Result<(), ClusterError> {
        self.queues.add_cohort(spec)?;
        self.queues_changed();
        Ok(())
    }

    pub fn add_flavor(&mut self, flavor: ResourceFlavor) {
        self.queues.flavors.insert(flavor.name.clone(), flavor);
        self.queues_changed();
    }

    /// Removes a ClusterQueue: its pending workloads wait, saying it is missing; its quota
    /// leaves the cohort, and what it admitted counts as borrowed until it ends.
    pub fn remove_cluster_queue(&mut self, name: &str) {
        if self.queues.retire_cluster_queue(name) {
            self.queues_changed();
        }
    }

    /// Removes a LocalQueue: its pending workloads wait, saying it is missing.
    pub fn remove_local_queue(&mut self, namespace: &str, name: &str) {
        let key = (namespace.to_string(), name.to_string());
        if self.queues.local.remove(&key).is_some() {
            self.queues_changed();
        }
    }

    /// Removes a Cohort: its quota no longer adds to its tree's pool.
    pub fn remove_cohort(&mut self, name: &str) {
        if self.queues.remove_cohort(name) {
            self.queues_changed();
        }
    }

    /// Removes a ResourceFlavor: admissions under it add no node labels or tolerations.
    pub fn remove_flavor(&mut self, name: &str) {
        if self.queues.flavors.remove(name).is_some() {
            self.queues_changed();
        }
    }

    /// A namespace's labels, for ClusterQueue namespaceSelectors.
    pub fn set_namespace_labels(&mut self, namespace: &str, labels: crate::model::Labels) {
        self.queues
            .namespace_labels
            .insert(namespace.to_string(), labels);
        self.queues_changed();
    }

    /// The ClusterQueues in force, in the order they were declared (deleted ones, still
    /// draining, left out).
    pub fn cluster_queues(&self) -> impl Iterator<Item = (CqId, &ClusterQueueSpec)> {
        self.queues
            .cqs
            .iter()
            .enumerate()
            .map(|(i, cq)| (CqId(i as u32), &cq.spec))
            .filter(|(id, spec)| self.queues.cq_ids.get(&spec.name) == Some(id))
    }

    /// The cohorts declared as objects (with a parent or quota of their own), by name;
    /// cohorts only named by ClusterQueues are not among them.
    pub fn cohorts(&self) -> impl Iterator<Item = &CohortSpec> {
        self.queues.cohorts.values()
    }

    /// Quota and usage of a ClusterQueue, per flavor and resource.
    pub fn queue_usage(&self, cq: CqId) -> Vec<QuotaUsage> {
        self.queues.cqs[cq.0 as usize].usage()
    }

    /// The ClusterQueue a pod is queued in, if any.
    pub fn queue_of(&self, id: PodId) -> Option<CqId> {
        match self.pods[id.0 as usize].link {
            QueueLink::Cq(cq) => Some(cq),
            _ => None,
        }
    }
}
