//! TrainingJobs in the run: the live controller's decisions
//! ([`kestrel_objects::training::reconcile`]) taken on the simulator's pods, and carried out
//! here as `kestrel serve` carries them out against the API server: create the attempt's
//! pods (one gang), delete pods, finish the job.
//!
//! The controller looks at a job after everything that happened at one instant (pods
//! bound, ended, failed, evicted; its deadline), as it would after a batch of watch
//! events. A restarted attempt resumes from the last checkpoint every member had reached
//! (pods' `checkpoint-interval`), else from the start.

use super::{Event, Simulation};
use crate::metrics::TrainingJobReport;
use crate::workload::Workload;
use k8s_openapi::jiff::Timestamp;
use kestrel_core::{Millis, PodId};
use kestrel_objects::training::{reconcile, Action, ObservedPod, PodPhase, TrainingJobStatus};

/// Where one TrainingJob's controller stands.
#[derive(Debug, Clone, Default)]
pub(super) struct TrainingState {
    status: TrainingJobStatus,
    /// Its pods that exist (deleted ones are dropped).
    pods: Vec<TrainingPod>,
    /// Work each pod of the next attempt resumes from: the last checkpoint all members of
    /// the last attempt reached.
    saved_work: Millis,
    /// Per injected failure of the job: whether it fired.
    fired: Vec<bool>,
    /// When the whole gang first ran.
    first_running_at: Option<Millis>,
    /// GPU-milliseconds its pods ran, and those of work restarts threw away.
    gpu_ms: f64,
    lost_gpu_ms: f64,
    /// A pod creation a namespace ResourceQuota refused: retried when quota frees up.
    quota_blocked: bool,
    /// `ttlSecondsAfterFinished` passed: the job and its pods are gone.
    deleted: bool,
}

/// A pod of a TrainingJob.
#[derive(Debug, Clone)]
struct TrainingPod {
    id: PodId,
    name: String,
    role: String,
    index: u32,
    attempt: i32,
    /// How it ended: phase, exit code, `status.reason`.
    ended: Option<(PodPhase, Option<i32>, Option<&'static str>)>,
    /// When ended: work reached (counting work resumed from), what its checkpoints kept
    /// of it, and its GPUs.
    reached: Millis,
    saved: Millis,
    gpus: f64,
}

/// How a run of a member's pod that stopped went.
pub(super) struct Run {
    /// How long it ran.
    pub ran: Millis,
    /// Work reached, counting work resumed from.
    pub reached: Millis,
    /// What checkpoints kept of it.
    pub saved: Millis,
}

/// How a member's pod ended.
pub(super) enum End {
    Succeeded,
    Exited(i32),
    /// Left its node (`Preempted`, `Evicted`, `Terminated`): the pod failed with that
    /// reason.
    Left(&'static str),
}

impl TrainingState {
    pub(super) fn for_workload(workload: &Workload) -> Vec<TrainingState> {
        workload
            .training
            .iter()
            .map(|t| TrainingState {
                fired: vec![false; t.failures.len()],
                ..Default::default()
            })
            .collect()
    }
}

/// The controller's clock at a simulated time (from the Unix epoch).
fn timestamp(at: Millis) -> Timestamp {
    Timestamp::from_millisecond(at as i64).expect("a simulated time fits a timestamp")
}

impl Simulation<'_> {
    /// The TrainingJob (an index into the workload's) a job holds a role of.
    pub(super) fn training_of(&self, job: usize) -> Option<usize> {
        self.workload
            .training
            .iter()
            .position(|t| t.role_jobs.contains(&job))
    }

    /// The TrainingJob a pod belongs to, and its place in the job's pods.
    fn training_pod(&self, pod: PodId) -> Option<(usize, usize)> {
        let t = self.training_of(self.pods.get(&pod)?.job)?;
        let i = self.training[t].pods.iter().position(|p| p.id == pod)?;
        Some((t, i))
    }

    /// A member was bound: its controller looks again. Returns the failure injected into
    /// this run, if any: (its index, run time when it fails).
    pub(super) fn training_bound(&mut self, pod: PodId) -> Option<(usize, Millis)> {
        let (t, i) = self.training_pod(pod)?;
        self.training_dirty.insert(t);
        let member = &self.training[t].pods[i];
        let failures = &self.workload.training[t].failures;
        failures
            .iter()
            .enumerate()
            .find(|(f, failure)| {
                !self.training[t].fired[*f]
                    && failure.role == member.role
                    && failure.index == member.index
            })
            .map(|(f, failure)| (f, failure.after))
    }

    /// A member's pod stopped for good: how it ended is what its controller sees.
    pub(super) fn training_pod_ended(&mut self, pod: PodId, run: Run, end: End) {
        let Some((t, i)) = self.training_pod(pod) else {
            return;
        };
        let gpus = self.pods[&pod].gpu_milli as f64 / 1000.0;
        let state = &mut self.training[t];
        state.gpu_ms += gpus * run.ran as f64;
        let p = &mut state.pods[i];
        p.ended = Some(match end {
            End::Succeeded => (PodPhase::Succeeded, None, None),
            End::Exited(code) => (PodPhase::Failed, Some(code), None),
            End::Left(reason) => (PodPhase::Failed, None, Some(reason)),
        });
        (p.reached, p.saved, p.gpus) = (run.reached, run.saved, gpus);
        self.training_dirty.insert(t);
    }

    /// A member's pod left its node (and was put back in the queue): no controller
    /// requeues a TrainingJob's pod, so it is gone, failed with `reason`. `done` is the
    /// work it resumed from, `saved` what it kept. Other pods are left alone.
    pub(super) fn training_pod_left(
        &mut self,
        pod: PodId,
        done: Millis,
        ran: Millis,
        saved: Millis,
        reason: &'static str,
    ) {
        if self.training_pod(pod).is_none() {
            return;
        }
        self.scheduler
            .finish(pod)
            .expect("a pod that left is pending");
        self.scheduler.release_unused_claims_of(pod);
        self.namespace_quota_release(self.pods[&pod].job);
        let run = Run {
            ran,
            reached: done + ran,
            saved,
        };
        self.training_pod_ended(pod, run, End::Left(reason));
    }

    /// An injected failure fires: the member's container exits with its code.
    pub(super) fn fail(&mut self, pod: PodId, epoch: u32, failure: usize) {
        let Some(state) = self.pods.get_mut(&pod) else {
            return;
        };
        if state.epoch != epoch || !state.running {
            return;
        }
        state.epoch += 1;
        state.running = false;
        let (job, done) = (state.job, state.done_work);
        let ran = self.now.saturating_sub(state.run_start);
        self.track_gpu_load(pod, -1.0);
        self.scheduler.finish(pod).expect("running pod is known");
        self.scheduler.release_unused_claims_of(pod);
        self.namespace_quota_release(job);
        let saved = done + self.periodic_checkpoint(pod, ran);
        let Some(t) = self.training_of(job) else {
            return;
        };
        self.training[t].fired[failure] = true;
        let exit = self.workload.training[t].failures[failure].exit;
        let run = Run {
            ran,
            reached: done + ran,
            saved,
        };
        self.training_pod_ended(pod, run, End::Exited(exit));
    }

    /// Quota freed up in `namespace`: TrainingJobs whose pods it refused try again.
    pub(super) fn training_quota_freed(&mut self, namespace: &str) {
        for (t, training) in self.workload.training.iter().enumerate() {
            let state = &mut self.training[t];
            if state.quota_blocked && training.plan.namespace == namespace {
                state.quota_blocked = false;
                self.report.pods.rejected_by_quota -= 1;
                self.training_dirty.insert(t);
            }
        }
    }

    /// Runs the controller of every TrainingJob whose pods changed.
    pub(super) fn reconcile_training(&mut self) {
        while let Some(t) = self.training_dirty.pop_first() {
            self.reconcile_one(t);
        }
    }

    /// The controller's passes over one job until it has nothing left to do now (a
    /// restart takes two: delete the attempt, then create the next).
    fn reconcile_one(&mut self, t: usize) {
        const PASSES: usize = 8;
        let workload = self.workload;
        let plan = &workload.training[t].plan;
        for _ in 0..PASSES {
            if self.training[t].deleted {
                return;
            }
            let observed = self.observe(t);
            let waiting = self.training_waiting(t);
            let status = &self.training[t].status;
            let d = reconcile(
                plan,
                status,
                &observed,
                waiting.as_deref(),
                timestamp(self.now),
            );
            if d.actions.is_empty() && d.status == *status {
                return;
            }
            if d.restarted {
                self.count_restart_loss(t);
            }
            let mut created = true;
            for action in &d.actions {
                match action {
                    Action::CreatePods(members) => created &= self.create_members(t, members),
                    Action::DeletePods(names) => self.delete_pods(t, names),
                    Action::DeleteJob => {
                        let names: Vec<String> = self.training[t]
                            .pods
                            .iter()
                            .map(|p| p.name.clone())
                            .collect();
                        self.delete_pods(t, &names);
                        self.training[t].deleted = true;
                    }
                }
            }
            // As live: a creation the API server refused leaves the status unwritten.
            if !created {
                return;
            }
            let started =
                self.training[t].status.start_time.is_none() && d.status.start_time.is_some();
            if let (true, Some(deadline)) = (started, plan.active_deadline_seconds) {
                let at = self.now + u64::try_from(deadline).unwrap_or(0) * 1000;
                self.push(at, Event::TrainingDeadline(t));
            }
            let state = &mut self.training[t];
            if d.status.running_time.is_some() && state.first_running_at.is_none() {
                state.first_running_at = Some(self.now);
            }
            state.status = d.status;
            if d.finished && state.status.state.as_deref() == Some("Succeeded") {
                for &job in &workload.training[t].role_jobs {
                    let job = &mut self.jobs[job];
                    if job.finished_at.is_none() {
                        job.finished_at = Some(self.now);
                        self.report.jobs.completed += 1;
                    }
                }
            }
            if d.actions.is_empty() {
                return;
            }
        }
    }

    /// The job's pods as the controller reads them.
    fn observe(&self, t: usize) -> Vec<ObservedPod> {
        let plan = &self.workload.training[t].plan;
        self.training[t]
            .pods
            .iter()
            .map(|p| {
                let (phase, exit, reason) = p.ended.unwrap_or_else(|| {
                    let running = self.pods[&p.id].running;
                    let phase = if running {
                        PodPhase::Running
                    } else {
                        PodPhase::Pending
                    };
                    (phase, None, None)
                });
                let container = plan
                    .roles
                    .iter()
                    .find(|r| r.name == p.role)
                    .and_then(|r| r.template.spec.as_ref()?.containers.first())
                    .map(|c| c.name.clone())
                    .unwrap_or_default();
                ObservedPod {
                    name: p.name.clone(),
                    attempt: p.attempt,
                    role: p.role.clone(),
                    phase,
                    bound: phase != PodPhase::Pending,
                    deleting: false,
                    exit: exit.map(|code| (container, code)),
                    reason: reason.map(str::to_string),
                }
            })
            .collect()
    }

    /// Why the gang waits, as the scheduler explains its first pending pod.
    fn training_waiting(&self, t: usize) -> Option<String> {
        self.training[t]
            .pods
            .iter()
            .filter(|p| p.ended.is_none() && !self.pods[&p.id].running)
            .find_map(|p| self.scheduler.pod(p.id).pending_reason.as_ref())
            .map(|r| r.headline())
    }

    /// Creates the members' pods of the current attempt; `false` when a namespace
    /// ResourceQuota refused one (the rest wait for quota).
    fn create_members(&mut self, t: usize, members: &[(String, u32)]) -> bool {
        let training = &self.workload.training[t];
        let attempt = self.training[t].status.restarts;
        for (role, index) in members {
            let job = training.role_job(role).expect("a role of the plan");
            if !self.namespace_quota_admits(job) {
                if !self.training[t].quota_blocked {
                    self.report.pods.rejected_by_quota += 1;
                    self.training[t].quota_blocked = true;
                }
                return false;
            }
            let first_rank = training
                .plan
                .roles
                .iter()
                .find(|r| r.name == *role)
                .map_or(0, |r| r.first_rank);
            let name = training.plan.pod_name(role, *index);
            let resume = self.training[t].saved_work;
            let id = self.submit_pod(job, name.clone(), first_rank + index, resume);
            self.training[t].pods.push(TrainingPod {
                id,
                name,
                role: role.clone(),
                index: *index,
                attempt,
                ended: None,
                reached: 0,
                saved: 0,
                gpus: 0.0,
            });
        }
        true
    }

    /// Deletes pods of the job: running ones stop where they are.
    fn delete_pods(&mut self, t: usize, names: &[String]) {
        for name in names {
            let Some(i) = self.training[t].pods.iter().position(|p| p.name == *name) else {
                continue;
            };
            let pod = self.training[t].pods.remove(i);
            if pod.ended.is_some() {
                continue; // it released what it held when it ended
            }
            let state = self.pods.get_mut(&pod.id).expect("a job's pod is tracked");
            let job = state.job;
            if state.running {
                let ran = self.now.saturating_sub(state.run_start);
                let gpus = state.gpu_milli as f64 / 1000.0;
                state.running = false;
                // Voids its completion, failure or eviction to come.
                state.epoch += 1;
                self.training[t].gpu_ms += gpus * ran as f64;
                self.track_gpu_load(pod.id, -1.0);
            }
            self.scheduler.finish(pod.id).expect("a job's pod is known");
            self.scheduler.release_unused_claims_of(pod.id);
            self.namespace_quota_release(job);
        }
    }

    /// The gang restarts: the next attempt resumes from the last checkpoint all members
    /// of this one reached; the work beyond it is lost.
    fn count_restart_loss(&mut self, t: usize) {
        let state = &self.training[t];
        let attempt = state.status.restarts;
        let mut members = Vec::new();
        for p in state.pods.iter().filter(|p| p.attempt == attempt) {
            members.push(match p.ended {
                Some(_) => (p.reached, p.saved, p.gpus),
                None => {
                    let s = &self.pods[&p.id];
                    if s.running {
                        let ran = self.now.saturating_sub(s.run_start);
                        let kept = s.done_work + self.periodic_checkpoint(p.id, ran);
                        (s.done_work + ran, kept, s.gpu_milli as f64 / 1000.0)
                    } else {
                        (s.done_work, s.done_work, 0.0)
                    }
                }
            });
        }
        let saved = members
            .iter()
            .map(|m| m.1)
            .min()
            .unwrap_or(state.saved_work);
        let lost: f64 = members
            .iter()
            .map(|(reached, _, gpus)| gpus * reached.saturating_sub(saved) as f64)
            .sum();
        let state = &mut self.training[t];
        state.saved_work = saved;
        state.lost_gpu_ms += lost;
    }

    /// Per TrainingJob: how it ended (or stands at the end), its restarts, wait and GPU
    /// time.
    pub(super) fn training_report(&self) -> Vec<TrainingJobReport> {
        const HOUR: f64 = 3_600_000.0;
        self.workload
            .training
            .iter()
            .zip(&self.training)
            .map(|(training, state)| {
                // Pods still running count up to the end.
                let running_ms: f64 = state
                    .pods
                    .iter()
                    .filter(|p| p.ended.is_none())
                    .map(|p| &self.pods[&p.id])
                    .filter(|s| s.running)
                    .map(|s| {
                        s.gpu_milli as f64 / 1000.0 * self.now.saturating_sub(s.run_start) as f64
                    })
                    .sum();
                let arrival = training
                    .role_jobs
                    .iter()
                    .map(|&j| self.workload.jobs[j].arrival)
                    .min()
                    .unwrap_or(0);
                let status = &state.status;
                let state_name = status.state.clone().unwrap_or_else(|| "NotCreated".into());
                let condition = status.conditions.iter().find(|c| c.type_ == state_name);
                TrainingJobReport {
                    job: format!("{}/{}", training.plan.namespace, training.plan.name),
                    state: state_name.clone(),
                    reason: condition.map(|c| c.reason.clone()),
                    message: condition.map(|c| c.message.clone()),
                    restarts: status.restarts,
                    queue_wait_seconds: state
                        .first_running_at
                        .map(|at| at.saturating_sub(arrival) as f64 / 1000.0),
                    gpu_hours: (state.gpu_ms + running_ms) / HOUR,
                    lost_gpu_hours: state.lost_gpu_ms / HOUR,
                }
            })
            .collect()
    }
}
