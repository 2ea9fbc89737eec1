//! A live cluster's state for `kestrel explain --live` and `kestrel queue --live`: the
//! views of [`kestrel_sim::explain_view`] over the index's engine, taken by
//! [`crate::driver::snapshot`].
//!
//! Running pods end at their start plus their declared `kestrel.dev/runtime-estimate`,
//! read within the estimates' error bound and how long they have run
//! ([`Estimates::runtime_for`]); pods without one have no known end.

use crate::index::ClusterState;
use kestrel_core::{Millis, PodId, PodPhase, Scheduler};
use kestrel_sim::explain_view::ExplainState;
use kestrel_sim::predict::Estimates;

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
        let record = self.state.scheduler().pod(pod);
        let PodPhase::Bound { at, .. } = record.phase else {
            return None;
        };
        let worked = self.now.saturating_sub(at);
        let runtime = estimates.runtime_for(record.spec.preemption.runtime_estimate, worked)?;
        Some((at + runtime).max(self.now))
    }
}
