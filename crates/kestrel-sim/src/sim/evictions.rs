//! Preemption victims on their way out: checkpoint-then-evict as the engine decides it
//! ([`kestrel_core::leaving`]), on the virtual clock, and the work each loses.

use super::*;

impl Simulation<'_> {
    /// Victims chosen this cycle: asked to checkpoint first when they offer it (and the
    /// run asks), then evicted.
    pub(super) fn start_evictions(&mut self, preemptions: &[kestrel_core::Preemption]) {
        let latency = self.config.control_latency;
        for p in preemptions {
            self.report.preemption.preemptions += 1;
            self.log_preemption(p);
            if let Some(preemptor) = p.preemptor {
                let own = self.scheduler.queue_of(preemptor);
                let reclaim = p.victims.iter().any(|v| {
                    let victim_queue = self.scheduler.pod(v.pod).admission.as_ref().map(|a| a.cq);
                    victim_queue.is_some() && victim_queue != own
                });
                let first = self
                    .preempted_for
                    .entry(preemptor)
                    .or_insert((self.now, None));
                if reclaim && first.1.is_none() {
                    first.1 = Some(self.now);
                }
            }
            for v in &p.victims {
                let Some(state) = self.pods.get_mut(&v.pod) else {
                    continue;
                };
                if !state.running || state.evicting.is_some() {
                    continue;
                }
                let grace = v
                    .checkpoint_grace
                    .filter(|_| self.config.checkpoint_requests);
                let (leave_at, checkpoint) =
                    match CheckpointRequest::for_victim(grace, self.now + latency) {
                        Some(request) => {
                            self.report.preemption.checkpoint_requests += 1;
                            (
                                request.leaves_after_writing(self.config.checkpoint_duration),
                                Some(request.asked),
                            )
                        }
                        None => (self.now + latency + v.termination_grace, None),
                    };
                state.evicting = Some(checkpoint);
                let epoch = state.epoch;
                self.push(leave_at, Event::Evict(v.pod, epoch));
                if checkpoint.is_some() {
                    self.log_checkpoint(v.pod, leave_at - self.now);
                }
            }
        }
    }

    /// A victim leaves: the work since its last checkpoint is lost, the rest is kept for
    /// its next run.
    pub(super) fn evict(&mut self, pod: PodId, epoch: u32) {
        let before = self
            .pods
            .get(&pod)
            .map(|s| (s.done_work, self.now.saturating_sub(s.run_start)));
        if let Some(lost) = self.leave(pod, epoch) {
            if let Some((done, ran)) = before {
                let saved = self.pods[&pod].done_work;
                self.training_pod_left(pod, done, ran, saved, "Preempted");
            }
            self.report.preemption.lost_gpu_hours += lost;
            self.report.preemption.victim_pods += 1;
            self.log_eviction(pod, lost, "preempted");
            let job = self.pods.get(&pod).map(|s| s.job);
            if job.is_some_and(|j| self.workload.jobs[j].kind == JobKind::BarePod) {
                // A preempted Pod is deleted; without a controller nothing brings it back.
                self.scheduler.finish(pod).expect("evicted pod is pending");
                self.scheduler.release_unused_claims_of(pod);
                self.report.preemption.deleted_pods += 1;
            }
        }
    }

    /// A running pod of this epoch leaves its node and waits in the queue again; returns
    /// the GPU-hours of work it lost (`None`: it was not running in this epoch).
    pub(super) fn leave(&mut self, pod: PodId, epoch: u32) -> Option<f64> {
        let state = self.pods.get_mut(&pod)?;
        if state.epoch != epoch || !state.running {
            return None;
        }
        let (run_start, asked) = (state.run_start, state.evicting.flatten());
        let ran = self.now.saturating_sub(run_start);
        let saved = match asked {
            Some(asked) => asked.saturating_sub(run_start).min(ran),
            None => self.periodic_checkpoint(pod, ran),
        };
        let state = self.pods.get_mut(&pod).expect("checked above");
        state.done_work += saved;
        state.epoch += 1;
        state.running = false;
        state.evicting = None;
        let gpus = self.scheduler.gpu_milli(pod) as f64 / 1000.0;
        self.track_gpu_load(pod, -1.0);
        self.scheduler.evict(pod).expect("running pod is known");
        Some(gpus * (ran - saved) as f64 / 3_600_000.0)
    }

    /// Work of a run of `ran` that the pod's periodic checkpoints saved.
    pub(super) fn periodic_checkpoint(&self, pod: PodId, ran: Millis) -> Millis {
        let interval = self.scheduler.pod(pod).spec.preemption.checkpoint_interval;
        interval.filter(|&i| i > 0).map_or(0, |i| ran / i * i)
    }
}
