//! A live cluster's state for `kestrel explain --live` and `kestrel queue --live`: the
//! views of [`kestrel_view::explain_view`] over the index's engine, taken by
//! [`kestrel_live::driver::snapshot`]; and predicted starts on a live engine, for those
//! commands and for `kestrel serve`'s dashboard ([`predict`]).
//!
//! Running pods end at their start plus their declared `kestrel.dev/runtime-estimate`,
//! read within the estimates' error bound and how long they have run
//! ([`end_of_running`]); pods without one have no known end. Predicted starts run the
//! simulator forward from the snapshot ([`LiveState::predict`]). This is where the live
//! scheduler meets the simulator: `kestrel-live` does not link `kestrel-sim`.

use kestrel_core::{Millis, PodId, PodPhase, Scheduler};
use kestrel_live::index::LiveIndex;
use kestrel_sim::{PodSet, SimCluster, SimConfig, SimError, Simulation, Workload};
use kestrel_view::estimates::Estimates;
use kestrel_view::explain_view::{end_of_running, ExplainState};
use kestrel_view::predictions::{Deadline, Predictions};

/// The index after a snapshot's cycle, at the snapshot's moment.
pub struct LiveState {
    pub state: LiveIndex,
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
            let mut job = PodSet::pod(
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

#[cfg(test)]
mod tests {
    use super::*;
    use kestrel_live::dashboard::Source;
    use kestrel_live::live_dashboard::channel;
    use kestrel_sim::scenarios::preemption_heavy;
    use kestrel_view::dashboard::{answer, Context};
    use serde_json::Value;
    use std::sync::Arc;
    use std::time::Instant;

    /// The leader's dashboard, predicting as `kestrel serve` has it predict.
    fn leader_channel(
        identity: &str,
    ) -> (
        kestrel_live::live_dashboard::DashboardFeed,
        kestrel_live::live_dashboard::LeaderSource,
        tokio::sync::watch::Receiver<u64>,
    ) {
        channel(
            identity,
            Arc::new(|s, now, t, d| predict(s, now, t, d).ok()),
        )
    }

    /// The simulator's answer over the same state, as the sim dashboard gives it.
    fn simulated(sim: &Simulation<'_>, path: &str) -> Value {
        let estimates = Estimates::declared();
        let predict = |_: &[PodId]| None;
        let ctx = Context {
            estimates: &estimates,
            predict: &predict,
            events: &[],
            history: &[],
            source: "leader",
        };
        serde_json::from_str(&answer(sim, &ctx, path, None).unwrap()).unwrap()
    }

    #[test]
    fn a_standby_says_so_and_a_leader_answers_as_the_simulator_does_coalesced() {
        let (mut feed, source, version) = leader_channel("kestrel-0");
        let standby = source.answer("/api/summary", None).unwrap_err();
        assert_eq!(standby.status, 503);
        assert!(
            standby.message.contains("kestrel-0") && standby.message.contains("not the leader"),
            "{standby:?}"
        );
        let (cluster, workload) = preemption_heavy(7);
        let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
        sim.run_to(3_600_000).unwrap();
        assert!(feed.due().is_none(), "nothing changed yet");
        feed.changed();
        feed.publish_if_due(sim.scheduler(), sim.now());
        assert_eq!(*version.borrow(), 1);
        let map: Value = serde_json::from_str(&source.answer("/api/map", None).unwrap()).unwrap();
        assert!(
            map["counts"]["busy"].as_u64().unwrap() > 0,
            "{}",
            map["counts"]
        );
        for path in ["/api/summary", "/api/map", "/api/queues", "/api/pending"] {
            let live: Value = serde_json::from_str(&source.answer(path, None).unwrap()).unwrap();
            let sim = simulated(&sim, path);
            if path == "/api/queues" {
                // The leader keeps one usage point a minute; the simulator's are its stops.
                assert_eq!(live["page"], sim["page"]);
                assert_eq!(live["history"].as_array().unwrap().len(), 1);
            } else {
                assert_eq!(live, sim, "{path}");
            }
        }
        // Coalesced: a change right after a copy waits for the next due time.
        sim.run_to(7_200_000).unwrap();
        feed.changed();
        feed.publish_if_due(sim.scheduler(), sim.now());
        assert_eq!(*version.borrow(), 1);
        assert!(feed.due().unwrap() > Instant::now());
        let missing = source.answer("/api/pod/ml/ghost", None).unwrap_err();
        assert_eq!(missing.status, 404, "{missing:?}");
        assert_eq!(source.answer("/api/times", None).unwrap_err().status, 404);
        feed.withdraw();
        assert_eq!(*version.borrow(), 2);
        assert_eq!(source.answer("/api/map", None).unwrap_err().status, 503);
    }

    /// The live index as `kestrel_live::driver::snapshot` leaves it (moments from a day
    /// back, object times), fed these objects directly.
    fn snapshot_of(nodes: &[Value], pods: &[Value], unix_now: i64) -> LiveState {
        let now: Millis = 86_400_000;
        let mut state = LiveIndex::new(kestrel_core::SchedulerConfig::default(), "kestrel");
        state.set_wall_origin(unix_now - now as i64);
        state.set_time(now);
        state.use_object_times();
        for node in nodes {
            state
                .apply_node(&serde_json::from_value(node.clone()).unwrap())
                .unwrap();
        }
        for pod in pods {
            state.apply_pod(&serde_json::from_value(pod.clone()).unwrap());
        }
        let _ = state.cycle(now);
        LiveState { state, now }
    }

    #[test]
    fn a_snapshot_predicts_starts_by_resuming_the_simulator() {
        use kestrel_test_support::k8s::{gpu_node_json, PodJson, Stamps};
        use serde_json::json;
        const HOUR: i64 = 3_600_000;
        let unix_now: i64 = 1_800_000_000_000;
        let stamps = Stamps::at(unix_now);
        let pod = |name: &str, gpus: u32, created_ago: i64| {
            PodJson::listed("ml", name, gpus, "kestrel").created(&stamps.ago(created_ago))
        };
        // "big" has run 1 h of the 2 h it declares on GPUs 0-5; "four" (created 30 min ago)
        // cannot fit beside it, "two" (10 min ago) can.
        let mut big = pod("big", 6, HOUR + 60_000)
            .node("gpu-0")
            .phase("Running")
            .annotation("kestrel.dev/gpu-indices", "0,1,2,3,4,5")
            .annotation("kestrel.dev/runtime-estimate", "2h")
            .json();
        big["status"]["startTime"] = json!(stamps.ago(HOUR));
        let live = snapshot_of(
            &[gpu_node_json("gpu-0")],
            &[
                big,
                pod("four", 4, HOUR / 2).json(),
                pod("two", 2, HOUR / 6).json(),
            ],
            unix_now,
        );
        let now = live.now;
        let four = kestrel_view::explain_view::find_pod(&live, "ml/four").unwrap();

        // The simulator resumed from the snapshot: four starts when big ends (2 h declared,
        // read within +/-20%: 100 to 150 min in all, of which 1 h has run).
        let predicted = live.predict(&[four], None).unwrap();
        let p = &predicted.starts[&four];
        let minutes = |m: u64| now + m * 60_000;
        assert_eq!(
            (p.point(), p.from(), p.to()),
            (Some(minutes(60)), Some(minutes(40)), Some(minutes(90))),
            "{p:?}"
        );
    }
}
