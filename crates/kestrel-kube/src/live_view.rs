//! A live cluster's state for `kestrel explain --live` and `kestrel queue --live`: the
//! views of [`kestrel_sim::explain_view`] over the index's engine, taken by
//! [`crate::driver::snapshot`].
//!
//! Running pods end at their start plus their declared `kestrel.dev/runtime-estimate`,
//! read within the estimates' error bound and how long they have run
//! ([`Estimates::runtime_for`]); pods without one have no known end. Predicted starts run
//! the simulator forward from the snapshot ([`LiveState::predict`]).

use crate::index::ClusterState;
use kestrel_core::{Millis, PodId, PodPhase, Scheduler};
use kestrel_sim::explain_view::ExplainState;
use kestrel_sim::predict::{Deadline, Estimates, Predictions};
use kestrel_sim::{SimCluster, SimConfig, SimError, SimJob, Simulation, Workload};

/// The index after a snapshot's cycle, at the snapshot's moment.
pub struct LiveState {
    pub state: ClusterState,
    pub now: Millis,
}

impl ExplainState for LiveState {
    fn scheduler(&self) -> &Scheduler {
        self.state.scheduler()
    }

    fn now(&self) -> Millis {
        self.now
    }

    fn end_of_running(&self, pod: PodId, estimates: &Estimates) -> Option<Millis> {
        end_of_running(self.state.scheduler(), self.now, pod, estimates)
    }
}

/// When a running pod should end: its start plus its declared runtime estimate, read
/// within the estimates' error bound and how long it has run; `None`: no estimate.
pub fn end_of_running(
    scheduler: &Scheduler,
    now: Millis,
    pod: PodId,
    estimates: &Estimates,
) -> Option<Millis> {
    let record = scheduler.pod(pod);
    let PodPhase::Bound { at, .. } = record.phase else {
        return None;
    };
    let worked = now.saturating_sub(at);
    let runtime = estimates.runtime_for(record.spec.preemption.runtime_estimate, worked)?;
    Some((at + runtime).max(now))
}

impl LiveState {
    /// Predicted starts of `targets` (pending pods): the simulator resumed from this state
    /// ([`Simulation::resume`]), every pod a job that runs for its declared
    /// `kestrel.dev/runtime-estimate` (pods without one run on: what waits for them has no
    /// predicted start), read likely, shortest and longest within +/-20%. Nothing that does
    /// not exist now (new pods, nodes) is known to it.
    pub fn predict(
        &self,
        targets: &[PodId],
        deadline: Option<Deadline>,
    ) -> Result<Predictions, SimError> {
        predict(self.state.scheduler(), self.now, targets, deadline)
    }
}

/// [`LiveState::predict`] over any copy of the live engine at `now`.
pub fn predict(
    scheduler: &Scheduler,
    now: Millis,
    targets: &[PodId],
    deadline: Option<Deadline>,
) -> Result<Predictions, SimError> {
    let scheduler = scheduler.clone();
    let pods: Vec<PodId> = scheduler
        .pods()
        .filter(|(_, r)| r.phase != PodPhase::Gone)
        .map(|(id, _)| id)
        .collect();
    let jobs = pods
        .iter()
        .map(|&p| {
            let record = scheduler.pod(p);
            let spec = &record.spec;
            let mut job = SimJob::pod(
                &spec.namespace,
                &spec.name,
                record.submitted_at,
                0,
                spec.clone(),
            );
            job.duration = spec.preemption.runtime_estimate;
            job
        })
        .collect();
    let workload = Workload {
        jobs,
        ..Default::default()
    };
    let cluster = SimCluster {
        nodes: Vec::new(),
        events: Vec::new(),
    };
    let estimates = Estimates {
        runtimes: workload.jobs.iter().map(|j| j.duration).collect(),
        ..Estimates::declared()
    };
    let sim = Simulation::resume(
        &cluster,
        &workload,
        SimConfig::default(),
        scheduler,
        now,
        &pods,
    );
    kestrel_sim::predict::predict(sim, targets, &estimates, deadline)
}
