//! What a run measures: samples of the cluster over time, and the report at the end
//! (time-weighted means, waits and completions per group, queues, node usage).

use super::Simulation;
use crate::metrics::{
    GroupStats, NodeUsage, PendingPod, Percentiles, QueueStats, Sample, SimReport,
};
use kestrel_core::{Millis, PodId, PodPhase, PodSpec};
use std::collections::{BTreeMap, HashMap};

impl Simulation<'_> {
    pub(super) fn take_sample(&mut self) {
        let cluster = self.scheduler.cluster();
        let (mut free_milli, mut cpu_alloc, mut cpu_total) = (0u64, 0i64, 0i64);
        for (_, node) in cluster.iter() {
            free_milli += node.free_gpu_milli();
            cpu_total += node.spec.allocatable.cpu_milli;
            cpu_alloc += node.spec.allocatable.cpu_milli - node.free.cpu_milli;
        }
        let pending = self.scheduler.pending();
        let mut reasons: BTreeMap<String, u32> = BTreeMap::new();
        // Distinct pending GPU demands (capped): free GPUs none of them can use are stranded.
        let mut shapes: Vec<&PodSpec> = Vec::new();
        for &id in &pending {
            let record = self.scheduler.pod(id);
            if let Some(reason) = &record.pending_reason {
                *reasons.entry(reason.headline()).or_default() += 1;
            }
            let spec = &record.spec;
            if spec.demand.gpu.milli() > 0
                && shapes.len() < 16
                && !shapes
                    .iter()
                    .any(|s| s.demand == spec.demand && s.constraints == spec.constraints)
            {
                shapes.push(spec);
            }
        }
        let fragmented_milli: u64 = if shapes.is_empty() {
            0
        } else {
            cluster
                .iter()
                .filter(|(_, n)| n.free_gpu_milli() > 0)
                .filter(|(id, _)| !shapes.iter().any(|s| self.scheduler.could_place_on(s, *id)))
                .map(|(_, n)| n.free_gpu_milli())
                .sum()
        };
        for (reason, n) in &reasons {
            *self.reason_totals.entry(reason.clone()).or_default() += *n as u64;
        }
        let mut top: Vec<(String, u32)> = reasons.into_iter().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        top.truncate(5);
        let running = self.pods.values().filter(|p| p.running).count() as u32;
        self.report.samples.push(Sample {
            at: self.now,
            gpus_allocated: self.integrals.gpu_milli_allocated / 1000.0,
            gpus_utilized: self.integrals.gpu_milli_utilized / 1000.0,
            cpu_allocated: if cpu_total > 0 {
                cpu_alloc as f64 / cpu_total as f64
            } else {
                0.0
            },
            pods_pending: pending.len() as u32,
            pods_running: running,
            gpus_fragmented: fragmented_milli as f64 / 1000.0,
            gpus_free: free_milli as f64 / 1000.0,
            top_pending_reasons: top,
        });
    }

    /// Ends the run and computes the report.
    pub fn finish(mut self) -> SimReport {
        let end = self.config.until.unwrap_or(self.now).max(self.now);
        self.advance_to(end);
        if self.report.samples.last().is_none_or(|s| s.at != end) {
            self.take_sample();
        }
        let cluster = self.scheduler.cluster();
        let total_gpus: u32 = cluster.iter().map(|(_, n)| n.gpu_count()).sum();
        let report = &mut self.report;
        report.gangs.declared = self.workload.gangs.len() as u64;
        let timeouts: Vec<u32> = self
            .workload
            .gangs
            .iter()
            .filter_map(|g| self.scheduler.gang_id(&g.namespace, &g.name))
            .map(|id| self.scheduler.gang(id).timeouts)
            .filter(|&n| n > 0)
            .collect();
        report.gangs.timed_out = timeouts.len() as u64;
        report.gangs.timeouts = timeouts.iter().map(|&n| u64::from(n)).sum();
        report.span = end;
        report.nodes = cluster.len() as u32;
        report.gpus = total_gpus;
        let capacity = total_gpus as f64 * 1000.0 * end as f64;
        if capacity > 0.0 {
            report.gpu_allocation_mean = self.integrals.allocated / capacity;
            report.gpu_utilization_mean = self.integrals.utilized / capacity;
        } else if total_gpus > 0 {
            // A run that never leaves its first instant (pods that never end, no later
            // event) has no time to average over: what is allocated at the end stands.
            let instant = total_gpus as f64 * 1000.0;
            report.gpu_allocation_mean = self.integrals.gpu_milli_allocated / instant;
            report.gpu_utilization_mean = self.integrals.gpu_milli_utilized / instant;
        }
        let (frag, free): (f64, f64) = pairwise_time_weighted(&report.samples);
        report.gpu_fragmentation_mean = if free > 0.0 { frag / free } else { 0.0 };

        // Waits and completion times, overall and per group.
        let mut waits: Vec<(i32, String, f64)> = Vec::new();
        let mut waits_by_pod: HashMap<PodId, f64> = HashMap::new();
        for (&id, pod) in &self.pods {
            if let Some(bound) = pod.first_bound_at {
                waits_by_pod.insert(id, (bound - pod.created_at) as f64 / 1000.0);
                let spec = &self.scheduler.pod(id).spec;
                waits.push((
                    spec.priority,
                    spec.namespace.clone(),
                    (bound - pod.created_at) as f64 / 1000.0,
                ));
            }
        }
        let mut jcts: Vec<(i32, String, f64)> = Vec::new();
        for (job, state) in self.workload.jobs.iter().zip(&self.jobs) {
            if let Some(done) = state.finished_at {
                jcts.push((
                    job.template.priority,
                    job.namespace.clone(),
                    (done - job.arrival) as f64 / 1000.0,
                ));
            }
        }
        report.queue_wait = Percentiles::of(&mut waits.iter().map(|w| w.2).collect::<Vec<_>>());
        report.completion_time = Percentiles::of(&mut jcts.iter().map(|w| w.2).collect::<Vec<_>>());
        report.by_priority = group_stats(&waits, &jcts, |(p, _, _)| *p, |p| p.to_string(), true);
        report.by_namespace = group_stats(&waits, &jcts, |(_, ns, _)| ns.clone(), |ns| ns, false);

        let mut pending_at_end: Vec<PendingPod> = self
            .scheduler
            .pending()
            .into_iter()
            .map(|id| {
                let record = self.scheduler.pod(id);
                PendingPod {
                    pod: record.spec.key(),
                    priority: record.spec.priority,
                    waiting_seconds: (end - self.pods[&id].created_at) as f64 / 1000.0,
                    reason: record
                        .pending_reason
                        .as_ref()
                        .map(|r| r.to_string())
                        .unwrap_or_else(|| "not tried yet".to_string()),
                }
            })
            .collect();
        pending_at_end.truncate(1000);
        report.pods.pending_at_end = self.scheduler.pending_count() as u64;
        report.pods.running_at_end = self
            .scheduler
            .pods()
            .filter(|(_, p)| matches!(p.phase, PodPhase::Bound { .. }))
            .count() as u64;
        report.pending_at_end = pending_at_end;
        report.node_usage = cluster
            .iter()
            .map(|(_, n)| NodeUsage {
                node: n.spec.name.clone(),
                gpus: n.gpu_count(),
                gpu_used_milli: n.gpus.iter().map(|g| 1000 - g.free_milli).collect(),
                cpu_allocated: if n.spec.allocatable.cpu_milli > 0 {
                    1.0 - n.free.cpu_milli as f64 / n.spec.allocatable.cpu_milli as f64
                } else {
                    0.0
                },
                cordoned: n.spec.unschedulable,
            })
            .collect();
        let mut totals: Vec<(String, u64)> = std::mem::take(&mut self.reason_totals)
            .into_iter()
            .collect();
        totals.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        report.pending_reasons = totals;
        report.preemption.start_latency = Percentiles::of(&mut self.start_latencies);
        report.preemption.reclaim_latency = Percentiles::of(&mut self.reclaim_latencies);
        self.queue_report(end, &waits_by_pod);
        self.report.training_jobs = self.training_report();
        self.report
    }

    /// Per-queue figures and Jain's fairness index over them.
    fn queue_report(&mut self, end: Millis, waits_by_pod: &HashMap<PodId, f64>) {
        let mut stats = Vec::new();
        for (i, (cq, (resource, used, borrowed))) in self
            .scheduler
            .cluster_queues()
            .zip(&self.queue_integrals)
            .enumerate()
        {
            let (id, spec) = cq;
            let scale = kestrel_core::quota_scale(resource) as f64;
            let nominal: i64 = self
                .scheduler
                .queue_usage(id)
                .iter()
                .filter(|u| u.resource == *resource)
                .map(|u| u.nominal)
                .sum();
            let mut waits: Vec<f64> = waits_by_pod
                .iter()
                .filter(|(pod, _)| self.scheduler.queue_of(**pod) == Some(id))
                .map(|(_, w)| *w)
                .collect();
            let _ = i;
            let span = end.max(1) as f64;
            stats.push(QueueStats {
                name: spec.name.clone(),
                cohort: spec.cohort.clone(),
                resource: resource.clone(),
                nominal: nominal as f64 / scale,
                used_mean: used / span / scale,
                borrowed_mean: borrowed / span / scale,
                used_hours: used / 3_600_000.0 / scale,
                borrowed_hours: borrowed / 3_600_000.0 / scale,
                pods_admitted: waits.len() as u64,
                queue_wait: Percentiles::of(&mut waits),
                ..Default::default()
            });
        }
        let total_nominal: f64 = stats.iter().map(|s| s.nominal).sum();
        let total_used: f64 = stats.iter().map(|s| s.used_hours).sum();
        for s in &mut stats {
            s.entitled_share = if total_nominal > 0.0 {
                s.nominal / total_nominal
            } else {
                0.0
            };
            s.used_share = if total_used > 0.0 {
                s.used_hours / total_used
            } else {
                0.0
            };
        }
        let ratios: Vec<f64> = stats
            .iter()
            .filter(|s| s.entitled_share > 0.0 && s.pods_admitted > 0)
            .map(|s| s.used_share / s.entitled_share)
            .collect();
        self.report.queue_fairness = (!ratios.is_empty()).then(|| {
            let sum: f64 = ratios.iter().sum();
            let squares: f64 = ratios.iter().map(|x| x * x).sum();
            sum * sum / (ratios.len() as f64 * squares)
        });
        self.report.queues = stats;
    }
}

/// Integrates fragmented and free GPUs over the sample series (step function).
fn pairwise_time_weighted(samples: &[Sample]) -> (f64, f64) {
    samples.windows(2).fold((0.0, 0.0), |(frag, free), w| {
        let dt = (w[1].at - w[0].at) as f64;
        (frag + dt * w[0].gpus_fragmented, free + dt * w[0].gpus_free)
    })
}

fn group_stats<K: Ord + Clone>(
    waits: &[(i32, String, f64)],
    jcts: &[(i32, String, f64)],
    key: impl Fn(&(i32, String, f64)) -> K,
    name: impl Fn(K) -> String,
    descending: bool,
) -> Vec<GroupStats> {
    let mut groups: BTreeMap<K, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for w in waits {
        groups.entry(key(w)).or_default().0.push(w.2);
    }
    for j in jcts {
        groups.entry(key(j)).or_default().1.push(j.2);
    }
    let mut out: Vec<GroupStats> = groups
        .into_iter()
        .map(|(k, (mut w, mut j))| GroupStats {
            group: name(k),
            queue_wait: Percentiles::of(&mut w),
            completion_time: Percentiles::of(&mut j),
        })
        .collect();
    if descending {
        out.reverse();
    }
    out
}
