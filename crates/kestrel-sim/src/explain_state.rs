//! A moment of a simulated run as the views read it ([`ExplainState`]): the engine, the
//! clock, running pods' ends by estimated durations, and pods whose Job arrives later.

use crate::estimates::Estimates;
use crate::sim::Simulation;
use kestrel_core::{Millis, PodId, Scheduler};
use kestrel_view::explain_view::{clock, ExplainState};

impl ExplainState for Simulation<'_> {
    fn scheduler(&self) -> &Scheduler {
        Simulation::scheduler(self)
    }
    fn now(&self) -> Millis {
        Simulation::now(self)
    }
    fn end_of_running(&self, pod: PodId, estimates: &Estimates) -> Option<Millis> {
        Simulation::end_of_running(self, pod, estimates)
    }
    fn created_later(&self, name: &str) -> Option<String> {
        created_later(self, name)
    }
}

/// "; it is created at 13:30 (Job llm/x arrives then)" for a pod of a job still to come.
fn created_later(sim: &Simulation<'_>, name: &str) -> Option<String> {
    let (ns, pod) = match name.split_once('/') {
        Some((ns, pod)) => (Some(ns), pod),
        None => (None, name),
    };
    let job = sim.workload().jobs.iter().find(|j| {
        ns.is_none_or(|ns| j.namespace == ns)
            && j.arrival > sim.now()
            && (j.name == pod
                || pod
                    .strip_prefix(j.name.as_str())
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())))
    })?;
    Some(format!(
        "; it is created later: {} {}/{} arrives at {}",
        job.source_kind,
        job.namespace,
        job.name,
        clock(job.arrival)
    ))
}
