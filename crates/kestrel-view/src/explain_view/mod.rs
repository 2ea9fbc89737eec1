//! What `kestrel explain` and `kestrel queue` show: views of the engine's state at one
//! moment ([`ExplainState`]: of a simulated run, in `kestrel_sim`, or of a live cluster,
//! [`EngineAt`] and the CLI's snapshot), and their terminal rendering.
//!
//! A pending pod's explanation is the engine's own: the `Unschedulable` that the cycle which
//! decided stored on the pod (`pending_reason`), never a second computation. Only "what would
//! help" is computed here, in one pass over the nodes: the node that comes closest (the
//! smallest missing share of a node) and the earliest node where running pods' ends (by
//! estimated durations) free enough room.
//!
//! - `lookup`: names to ids (`find_pod`, `find_gang`, `find_queue`, `find_node`);
//! - `views`: the pod, gang, queue and node views, with queue positions and predicted
//!   starts; `explanation`: the engine's explanation and a pod's requests as they show;
//! - `pending`: `kestrel queue`'s list of pending pods;
//! - `help`: "what would help" a pod or gang that capacity keeps waiting, asking the
//!   engine's own fit check (`Scheduler::could_place_on`, `NodeState::shortfall`,
//!   `NodeState::take_room`), never a copy of it;
//! - `render`: the terminal text; `clock`: moments as clock times.

mod clock;
mod explanation;
mod help;
mod lookup;
mod pending;
mod render;
mod views;

use crate::estimates::Estimates;
use kestrel_core::{Millis, PodId, PodPhase, Scheduler};

pub use clock::{clock, clock_approx, show_wall_clock};
pub use explanation::{Explanation, Fragmentation, NodeReasonCount, Problem, Requests};
pub use help::{help_for, Closest, Ending, GangHelp, Help, Lack, Preemption, Room, Victim};
pub use lookup::{find_gang, find_node, find_pod, find_queue, LookupError};
pub use pending::{
    apply_list_predictions, pending_list, queue_list, PendingEntry, QueueListView, Shared,
};
pub use render::{render_gang, render_node, render_pod, render_queue, render_queue_list};
pub use views::{
    gang_view, node_view, pod_view, queue_view, Amounts, GangView, GpuView, Member, NodePod,
    NodeView, PodView, Position, PredictedStart, QueueView, QuotaLine,
};

/// What the views read: the engine's state at one moment, and when running pods end. A
/// simulated run (`kestrel_sim::Simulation`) and a live cluster's snapshot both provide it.
pub trait ExplainState {
    fn scheduler(&self) -> &Scheduler;
    /// The moment shown.
    fn now(&self) -> Millis;
    /// When a running pod ends by `estimates`, knowing how long it has run; `None`: not
    /// running, or no known end.
    fn end_of_running(&self, pod: PodId, estimates: &Estimates) -> Option<Millis>;
    /// For a name no pod has: "; it is created later: ..." when its Job arrives later.
    fn created_later(&self, _name: &str) -> Option<String> {
        None
    }
}

/// When a running pod of a live cluster ends: its start plus its declared runtime estimate
/// (`kestrel.dev/runtime-estimate`), read within the estimates' error bound and how long it
/// has run ([`Estimates::runtime_for`]); `None`: not running, or no estimate. What a live
/// [`ExplainState`] answers for [`ExplainState::end_of_running`].
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

/// A copy of a live engine at one moment (the leader's, for its dashboard; a snapshot's):
/// running pods end by their declared estimates ([`end_of_running`]), no pod is created
/// later.
#[derive(Clone)]
pub struct EngineAt {
    pub scheduler: Scheduler,
    pub now: Millis,
}

impl ExplainState for EngineAt {
    fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    fn now(&self) -> Millis {
        self.now
    }

    fn end_of_running(&self, pod: PodId, estimates: &Estimates) -> Option<Millis> {
        end_of_running(&self.scheduler, self.now, pod, estimates)
    }
}
