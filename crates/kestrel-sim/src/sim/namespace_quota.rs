//! Namespace ResourceQuotas as the API server enforces them at pod creation: a pod set's
//! request counted against its namespace's quotas ([`kestrel_objects::quota`], the model
//! the live scheduler explains refusals with), creations refused past them and tried
//! again when quota frees up.

use super::*;
use kestrel_objects::quota::{refusal, PodUsage, Quota};

impl NamespaceQuotas {
    /// The files' quotas by namespace, nothing used yet.
    pub(super) fn of(quotas: &[Quota]) -> Self {
        let mut by_namespace: HashMap<String, Vec<Quota>> = HashMap::new();
        for q in quotas {
            by_namespace
                .entry(q.namespace.clone())
                .or_default()
                .push(q.clone());
        }
        NamespaceQuotas {
            quotas: by_namespace,
            refused: HashMap::new(),
        }
    }
}

impl Simulation<'_> {
    /// Whether the namespace's ResourceQuotas let one more pod of this job be created;
    /// if so it is counted.
    pub(super) fn namespace_quota_admits(&mut self, job_index: usize) -> bool {
        let job = &self.workload.jobs[job_index];
        let Some(quotas) = self.namespace_quota.quotas.get_mut(&job.namespace) else {
            return true;
        };
        let pod = PodUsage::of(&job.template);
        if refusal(quotas.iter(), &pod).is_some() {
            return false;
        }
        for q in quotas {
            q.count(&pod, 1);
        }
        true
    }

    /// A pod of this job is gone: its namespace quota frees up and refused creations are
    /// retried in order.
    pub(super) fn namespace_quota_release(&mut self, job_index: usize) {
        let job = &self.workload.jobs[job_index];
        let namespace = job.namespace.clone();
        let Some(quotas) = self.namespace_quota.quotas.get_mut(&namespace) else {
            return;
        };
        let pod = PodUsage::of(&job.template);
        for q in quotas {
            q.count(&pod, -1);
        }
        let refused = self
            .namespace_quota
            .refused
            .remove(&namespace)
            .unwrap_or_default();
        for job in refused {
            self.report.pods.rejected_by_quota -= 1;
            self.create_pod(job);
        }
        self.training_quota_freed(&namespace);
    }
}
