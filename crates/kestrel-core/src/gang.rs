//! Gang scheduling: pods that start together or not at all, on well-connected nodes.
//!
//! A gang is planned whole against the current index and committed whole, or rolled back:
//! no capacity is held for a partial gang between cycles. A gang whose pods do not all
//! exist yet waits without blocking anything else. With a topology request the gang is
//! placed inside one domain of a level (all pods in one rack), packed as tightly as a
//! preferred level allows, or in slices (every N pods in one NVLink domain), pods in rank
//! order so that neighbouring ranks share the fastest links.

use crate::types::{Millis, NodeId, PodId};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// Where a gang's pods must or should land, by node label (topology level).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct GangTopology {
    /// All pods in one domain of this level (e.g. `topology.kestrel.dev/rack`).
    pub required: Option<String>,
    /// Pack into one domain of this level if possible, else the next level up.
    pub preferred: Option<String>,
    /// Every `size` consecutive pods (by rank) in one domain of the level.
    pub slice: Option<(String, u32)>,
}

/// A gang as declared by a PodGroup (Kestrel's, scheduler-plugins', Volcano's) or by
/// Kueue's plain-pod group labels.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct GangSpec {
    pub namespace: String,
    pub name: String,
    /// Pods that must be running together for the gang to start.
    pub min_member: u32,
    /// Pods expected in all, when known (for "k of n exist").
    pub total: Option<u32>,
    /// Give up when the gang has not started this long after its first pod arrived (or
    /// after its last back-off ended); its pods then wait out a back-off and try again.
    pub schedule_timeout: Option<Millis>,
    /// Per-role minimums (role, pods), e.g. one master and four workers.
    pub role_minimums: Vec<(String, u32)>,
    pub topology: GangTopology,
    /// A queued workload (a Job, StatefulSet, JobSet ... as Kueue admits them): admitted
    /// whole once, it stays admitted while it has pods, so later pods (the next
    /// completions, replacements) start as they fit, without the minimum. Evicting all of
    /// its running pods puts it back to waiting whole.
    pub keeps_admission: bool,
    /// Kueue's fast admission, for workloads whose controller creates pods one at a time
    /// (a StatefulSet's `OrderedReady` pods): before it starts, the queue admits the gang
    /// for all `total` pods, counting the ones not created yet as copies of the first, and
    /// never partially; its pods then start as they come and fit (`min_member` is 1).
    pub fast_admission: bool,
}

impl GangSpec {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("gang {gang}: field {field}: {why}")]
pub struct GangError {
    pub gang: String,
    pub field: &'static str,
    pub why: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct GangId(pub u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum GangPhase {
    /// Declared or implied by a pod; not started.
    Waiting,
    /// Started: at least `min_member` pods were bound together.
    Running,
    /// Did not start within `schedule_timeout`; its pods stay pending and are tried again
    /// after the back-off (scheduler-plugins' coscheduling does the same).
    TimedOut,
}

#[derive(Debug, Clone)]
pub struct GangState {
    /// `None` while only pods name the gang and nothing declared it.
    pub spec: Option<GangSpec>,
    pub members: BTreeSet<PodId>,
    /// When the current `schedule_timeout` window begins: the first pod's arrival, the
    /// end of the last back-off (a time still ahead while it backs off), or when its last
    /// running member left.
    pub first_seen: Option<Millis>,
    pub phase: GangPhase,
    /// How often it timed out.
    pub timeouts: u32,
    /// Its place in the queue: that of its first pod.
    pub queue_place: Option<u64>,
    /// A running member was evicted (a drain, a preemption): the pods that replace its
    /// members queue at [`GangState::queue_place`], not behind work that came later.
    pub keeps_place: bool,
    /// Quota a started fast-admission gang holds for its pods not bound yet, charged to
    /// its admission: (admission, request).
    pub held: Option<(crate::queue::Admission, Vec<(String, i64)>)>,
}

/// Gangs by namespace/name.
#[derive(Debug, Default, Clone)]
pub(crate) struct GangIndex {
    pub(crate) gangs: Vec<GangState>,
    /// namespace -> name -> id (nested, so a lookup by `&str` allocates nothing).
    pub(crate) ids: BTreeMap<String, BTreeMap<String, GangId>>,
    /// Topology levels from the top (block) down (host), for preferred fallback.
    pub(crate) levels: Vec<String>,
    /// Gangs declared with fast admission, whose holds are kept up to date each cycle.
    pub(crate) fast_admission: BTreeSet<GangId>,
}

impl GangIndex {
    pub(crate) fn lookup(&self, namespace: &str, name: &str) -> Option<GangId> {
        self.ids.get(namespace)?.get(name).copied()
    }

    pub(crate) fn id(&mut self, namespace: &str, name: &str) -> GangId {
        if let Some(id) = self.lookup(namespace, name) {
            return id;
        }
        let id = GangId(self.gangs.len() as u32);
        self.gangs.push(GangState {
            spec: None,
            members: BTreeSet::new(),
            first_seen: None,
            phase: GangPhase::Waiting,
            timeouts: 0,
            queue_place: None,
            keeps_place: false,
            held: None,
        });
        self.ids
            .entry(namespace.to_string())
            .or_default()
            .insert(name.to_string(), id);
        id
    }
}

/// A topology domain: the label value and its nodes.
pub(crate) type Domain = (String, Vec<NodeId>);
