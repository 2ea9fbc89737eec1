//! Namespace ResourceQuotas as the API server enforces them at pod creation: a pod set's
//! request counted against its namespace's quotas, creations refused past them and tried
//! again when quota frees up.

use super::*;

impl Simulation<'_> {
    /// What a pod of this job counts against namespace ResourceQuotas.
    pub(super) fn namespace_request(&self, job_index: usize) -> Vec<(String, i64)> {
        let template = &self.workload.jobs[job_index].template;
        let d = &template.demand;
        // Only whole GPUs are requested as `nvidia.com/gpu`: a share by annotation is
        // invisible to the API server's quota, and claims count under their classes.
        let whole_gpus = match template.constraints.devices {
            Some(_) => 0,
            None => d.gpu.whole() as i64,
        };
        let mut out = vec![
            ("pods".to_string(), 1),
            ("cpu".to_string(), d.resources.cpu_milli),
            ("memory".to_string(), d.resources.memory_bytes),
            (kestrel_core::GPU_RESOURCE.to_string(), 1000 * whole_gpus),
        ];
        out.extend(d.resources.extended.iter().cloned());
        if let Some(devices) = &template.constraints.devices {
            out.extend(kestrel_objects::dra::claim_quota(devices));
        }
        out
    }

    /// Whether the namespace's ResourceQuotas let one more pod of this job be created;
    /// if so it is counted.
    pub(super) fn namespace_quota_admits(&mut self, job_index: usize) -> bool {
        let namespace = &self.workload.jobs[job_index].namespace;
        let quotas: Vec<_> = self
            .workload
            .queues
            .resource_quotas
            .iter()
            .filter(|q| q.namespace == *namespace)
            .collect();
        if quotas.is_empty() {
            return true;
        }
        let request = self.namespace_request(job_index);
        let used = self
            .namespace_quota
            .used
            .entry(namespace.clone())
            .or_default();
        let fits = quotas.iter().all(|q| {
            q.hard.iter().all(|(resource, hard)| {
                let need = request
                    .iter()
                    .find(|(r, _)| r == resource)
                    .map_or(0, |(_, a)| *a);
                need == 0 || used.get(resource).copied().unwrap_or(0) + need <= *hard
            })
        });
        if fits {
            for (r, a) in request {
                *used.entry(r).or_default() += a;
            }
        }
        fits
    }

    /// A pod of this job is gone: its namespace quota frees up and refused creations are
    /// retried in order.
    pub(super) fn namespace_quota_release(&mut self, job_index: usize) {
        let namespace = self.workload.jobs[job_index].namespace.clone();
        let request = self.namespace_request(job_index);
        let Some(used) = self.namespace_quota.used.get_mut(&namespace) else {
            return;
        };
        for (r, a) in request {
            *used.entry(r).or_default() -= a;
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
