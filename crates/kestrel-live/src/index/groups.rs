//! Gangs and their PodGroups: declared to the engine, their pods moved in and out of it,
//! and the PodGroup status and Warning events Kestrel writes.

use super::{GroupKey, LiveIndex, PodState, PLUGINS_GROUP, VOLCANO_GROUP};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kestrel_core::{GangPhase, GangProblem, GangSpec, GangTopology, PodSpec, Unschedulable};
use kestrel_objects::crds::{PodGroupPhase, PodGroupStatus};
use kestrel_objects::gangs::{self, GangDocument, KESTREL_GROUP};
use kestrel_objects::live::{self, ConvertError};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// Gangs as the live scheduler knows them and what Kestrel says about them: their
/// PodGroups' status and Warning events, and the topology levels in use.
#[derive(Debug, Default)]
pub(super) struct GroupBook {
    pub(super) groups: HashMap<GroupKey, Group>,
    /// Gangs whose status may have changed since the last cycle.
    pub(super) dirty_groups: HashSet<GroupKey>,
    pub(super) group_events: Vec<GroupEventWrite>,
    /// Topology levels in use, widest first.
    levels: Vec<String>,
}

impl GroupBook {
    /// A pod (`key`) leaves a gang; a gang nothing declares goes with its last member.
    pub(super) fn leave(&mut self, group: &GroupKey, key: &str) {
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        g.members.remove(key);
        if !g.declared && g.members.is_empty() {
            self.groups.remove(group);
            self.dirty_groups.remove(group);
        } else {
            self.dirty_groups.insert(group.clone());
        }
    }
}

/// A gang as the live scheduler knows it.
#[derive(Debug, Clone)]
pub(super) struct Group {
    /// Declared by a PodGroup; otherwise implied by its pods (Kueue's plain-pod groups) or
    /// only named by them.
    pub(super) declared: bool,
    /// Declared by a scheduler-plugins or Volcano PodGroup: read, but its status and
    /// events belong to that project's controllers, so Kestrel writes none.
    pub(super) foreign: bool,
    pub(super) uid: String,
    pub(super) generation: Option<i64>,
    /// The gang as declared, or why there is none to schedule (no PodGroup, or the
    /// PodGroup cannot be read).
    pub(super) spec: Result<GangSpec, String>,
    /// A member pod's topology annotations, for a gang that requests none itself.
    pub(super) pod_topology: Option<GangTopology>,
    /// The spec last offered to the engine, and why the engine refused it (if it did).
    pub(super) offered: Option<GangSpec>,
    pub(super) refused: Option<String>,
    /// Member pods (`namespace/name`).
    pub(super) members: BTreeSet<String>,
    /// The last failed bind of a member, until the gang is bound.
    pub(super) bind_error: Option<String>,
    /// The status last written (at first sight: the one the object carries).
    pub(super) last_status: Option<GroupStatusWrite>,
    /// The invalid-spec message last reported in an event.
    pub(super) warned: Option<String>,
    /// The ResourceQuota or LimitRange that refuses pods like its members, if one does
    /// ([`LiveIndex::apply_namespace_policy`]): said when the gang is incomplete.
    pub(super) admission_note: Option<String>,
}

impl Group {
    pub(super) fn new(declared: bool, spec: Result<GangSpec, String>) -> Self {
        Group {
            declared,
            foreign: false,
            uid: String::new(),
            generation: None,
            spec,
            pod_topology: None,
            offered: None,
            refused: None,
            members: BTreeSet::new(),
            bind_error: None,
            last_status: None,
            warned: None,
            admission_note: None,
        }
    }

    /// Why the gang cannot be scheduled now; `None` when the engine has it.
    pub(super) fn problem(&self) -> Option<&str> {
        match &self.spec {
            Err(why) => Some(why),
            Ok(_) => self.refused.as_deref(),
        }
    }

    /// The spec for the engine: a pod's topology request fills an empty one.
    pub(super) fn effective(&self) -> Option<GangSpec> {
        let mut spec = self.spec.clone().ok()?;
        if spec.topology == GangTopology::default() {
            if let Some(t) = &self.pod_topology {
                spec.topology = t.clone();
            }
        }
        Some(spec)
    }
}

/// A PodGroup's status to write (server-side apply of the status subresource).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupStatusWrite {
    pub namespace: String,
    pub name: String,
    pub phase: PodGroupPhase,
    /// Member pods bound to nodes.
    pub scheduled: i32,
    /// Member pods running.
    pub running: i32,
    /// The `Scheduled` condition: `"True"` or `"False"`, its reason and message.
    pub condition: &'static str,
    pub reason: String,
    pub message: String,
    /// `metadata.generation` of the PodGroup this status is about.
    pub observed_generation: Option<i64>,
    /// When the condition last changed; `None`: it changes with this write (now).
    pub since: Option<Time>,
}

impl GroupStatusWrite {
    /// Same status, whenever its condition changed.
    pub(super) fn same(&self, other: &GroupStatusWrite) -> bool {
        GroupStatusWrite {
            since: None,
            ..self.clone()
        } == GroupStatusWrite {
            since: None,
            ..other.clone()
        }
    }
}

/// A Warning event on a PodGroup: Kestrel cannot use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEventWrite {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub reason: &'static str,
    pub message: String,
}

impl LiveIndex {
    /// Reads a pod's gang into `spec.gang`; returns the gang's key. Declares gangs that
    /// pods imply (Kueue's plain-pod groups) and takes a topology request from the pods'
    /// annotations for a gang that has none.
    pub(super) fn gang_of(
        &mut self,
        pod: &Pod,
        spec: &mut PodSpec,
    ) -> Result<Option<GroupKey>, ConvertError> {
        let Some(gang) = live::pod_gang(pod)? else {
            return Ok(self.owner_gang(pod, spec));
        };
        let key: GroupKey = (spec.namespace.clone(), gang.membership.gang.clone());
        // A gang named by a Kueue plain-pod group is implied by its pods; the others
        // (Kestrel's, scheduler-plugins' and Volcano's) wait for their PodGroup.
        let kestrel = gang.implied.is_none();
        let entry = self
            .gangs
            .groups
            .entry(key.clone())
            .or_insert_with(|| Group::new(false, Err(not_found(&key))));
        let mut changed = false;
        if let (false, Some(implied)) = (kestrel, &gang.implied) {
            if !entry.declared && entry.spec.is_err() {
                entry.spec = Ok(implied.clone());
                changed = true;
            }
        }
        if gang.topology != GangTopology::default() && entry.pod_topology.is_none() {
            entry.pod_topology = Some(gang.topology.clone());
            changed = true;
        }
        spec.gang = Some(gang.membership);
        if changed {
            self.settle_group(&key);
        }
        Ok(Some(key))
    }

    /// A Kestrel PodGroup (the object as JSON) was added or changed. It is read with the
    /// simulator's parser; a PodGroup that cannot be read or scheduled is reported (a
    /// Warning event on it, the reason on its pods, its status) and its pods wait.
    pub fn apply_pod_group(&mut self, object: &Value) {
        let group = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .and_then(|v| v.split('/').next());
        let foreign = match group {
            Some(KESTREL_GROUP) => false,
            Some(PLUGINS_GROUP | VOLCANO_GROUP | gangs::KUBE_SCHEDULING_GROUP) => true,
            _ => return,
        };
        let meta = object.get("metadata");
        let text = |field: &str| {
            meta.and_then(|m| m.get(field))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let (namespace, name, uid) = (text("namespace"), text("name"), text("uid"));
        let namespace = if namespace.is_empty() {
            "default".to_string()
        } else {
            namespace
        };
        let generation = meta
            .and_then(|m| m.get("generation"))
            .and_then(Value::as_i64);
        let spec = match gangs::parse_gang_document(Path::new(live::API_SOURCE), object) {
            Ok(GangDocument::PodGroup(spec)) => Ok(spec),
            Ok(GangDocument::Topology(_)) => return,
            Err(e) => Err(format!(
                "PodGroup {namespace}/{name} is invalid: {}",
                ConvertError::from(e).message
            )),
        };
        let key: GroupKey = (namespace, name);
        let entry = self
            .gangs
            .groups
            .entry(key.clone())
            .or_insert_with(|| Group::new(true, spec.clone()));
        if entry.uid != uid {
            // First sight (or a new object of that name): the status it carries is the
            // last one written.
            entry.uid = uid;
            entry.last_status = object.get("status").and_then(|s| observed_status(&key, s));
            entry.warned = None;
            entry.bind_error = None;
        }
        entry.declared = true;
        entry.foreign = foreign;
        entry.spec = spec;
        entry.generation = generation;
        self.settle_group(&key);
    }

    /// A PodGroup was deleted: its waiting pods wait for it to come back.
    pub fn delete_pod_group(&mut self, namespace: &str, name: &str) {
        let key: GroupKey = (namespace.to_string(), name.to_string());
        let Some(g) = self.gangs.groups.get_mut(&key) else {
            return;
        };
        g.declared = false;
        g.uid.clear();
        g.spec = Err(not_found(&key));
        g.last_status = None;
        g.warned = None;
        g.bind_error = None;
        if g.members.is_empty() {
            self.gangs.groups.remove(&key);
            self.gangs.dirty_groups.remove(&key);
        } else {
            self.settle_group(&key);
        }
    }

    /// PodGroups not in `present` were deleted while the watch was down (after a relist).
    pub fn retain_pod_groups(&mut self, present: &HashSet<GroupKey>) {
        let gone: Vec<GroupKey> = self
            .gangs
            .groups
            .iter()
            .filter(|(k, g)| g.declared && !g.foreign && !present.contains(*k))
            .map(|(k, _)| k.clone())
            .collect();
        for (namespace, name) in gone {
            self.delete_pod_group(&namespace, &name);
        }
    }

    /// Sets the topology levels from Kestrel's Topology objects: the one named `default`,
    /// else the first by name. Gangs are checked against the new levels. Returns the
    /// Topologies that cannot be read.
    pub fn set_topologies<'a>(
        &mut self,
        objects: impl IntoIterator<Item = &'a Value>,
    ) -> Vec<String> {
        let mut errors = Vec::new();
        let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for object in objects {
            let api_version = object.get("apiVersion").and_then(Value::as_str);
            if api_version.and_then(|v| v.split('/').next()) != Some(KESTREL_GROUP) {
                continue;
            }
            let name = object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            match gangs::parse_gang_document(Path::new(live::API_SOURCE), object) {
                Ok(GangDocument::Topology(levels)) => {
                    found.insert(name, levels);
                }
                Ok(GangDocument::PodGroup(_)) => {}
                Err(e) => errors.push(format!(
                    "Topology {name} is invalid: {}",
                    ConvertError::from(e).message
                )),
            }
        }
        let levels = found
            .remove("default")
            .or_else(|| found.into_values().next())
            .unwrap_or_default();
        if levels != self.gangs.levels {
            self.gangs.levels = levels.clone();
            self.scheduler.set_topology_levels(levels);
            let keys: Vec<GroupKey> = self.gangs.groups.keys().cloned().collect();
            for key in keys {
                if let Some(g) = self.gangs.groups.get_mut(&key) {
                    g.offered = None;
                    g.refused = None;
                }
                self.settle_group(&key);
            }
        }
        errors
    }

    /// Whether a gang's status may have changed since the last cycle.
    pub fn groups_changed(&self) -> bool {
        !self.gangs.dirty_groups.is_empty()
    }

    /// The topology levels in use, widest first.
    pub fn topology_levels(&self) -> &[String] {
        &self.gangs.levels
    }

    /// Whether a PodGroup (Kestrel's) is known and usable: `Some(None)` usable,
    /// `Some(Some(why))` not, `None` unknown.
    pub fn pod_group_problem(&self, namespace: &str, name: &str) -> Option<Option<&str>> {
        let g = self
            .gangs
            .groups
            .get(&(namespace.to_string(), name.to_string()))?;
        Some(g.problem())
    }

    /// Declares the gang to the engine if it changed, reports a PodGroup that cannot be
    /// used, and moves its waiting pods into the engine or out of it.
    pub(super) fn settle_group(&mut self, key: &GroupKey) {
        let Some(group) = self.gangs.groups.get_mut(key) else {
            return;
        };
        if let Some(spec) = group.effective() {
            if group.offered.as_ref() != Some(&spec) {
                let noun = if group.declared { "PodGroup" } else { "gang" };
                group.refused = self.scheduler.add_gang(spec.clone()).err().map(|e| {
                    format!(
                        "{noun} {}/{} is invalid: {}: {}",
                        key.0, key.1, e.field, e.why
                    )
                });
                group.offered = Some(spec);
            }
        }
        let problem = group.problem().map(str::to_string);
        if group.declared && !group.foreign {
            match &problem {
                Some(why) if group.warned.as_ref() != Some(why) => {
                    group.warned = Some(why.clone());
                    self.gangs.group_events.push(GroupEventWrite {
                        namespace: key.0.clone(),
                        name: key.1.clone(),
                        uid: group.uid.clone(),
                        reason: "InvalidSpec",
                        message: why.clone(),
                    });
                }
                Some(_) => {}
                None => group.warned = None,
            }
        }
        let members: Vec<String> = group.members.iter().cloned().collect();
        self.gangs.dirty_groups.insert(key.clone());
        for member in members {
            let Some(t) = self.pods.get_mut(&member) else {
                continue;
            };
            match (&problem, &mut t.state) {
                (None, PodState::GangWait { .. }) => {
                    let PodState::GangWait { spec, .. } =
                        std::mem::replace(&mut t.state, PodState::Gated)
                    else {
                        unreachable!()
                    };
                    let id = self.scheduler.submit(*spec, self.now);
                    self.keys.insert(id, member.clone());
                    t.state = PodState::Queued(id);
                    self.reported.remove(&member);
                }
                (Some(why), PodState::Queued(id)) => {
                    let id = *id;
                    let spec = self.scheduler.pod(id).spec.clone();
                    let _ = self.scheduler.finish(id);
                    self.keys.remove(&id);
                    t.state = PodState::GangWait {
                        spec: Box::new(spec),
                        reason: why.clone(),
                    };
                    self.report(&member, "Unschedulable", why.clone());
                }
                (Some(why), PodState::GangWait { reason, .. }) if reason != why => {
                    *reason = why.clone();
                    self.report(&member, "Unschedulable", why.clone());
                }
                _ => {}
            }
        }
    }

    /// The statuses of the gangs that changed, each only when it differs from the one
    /// last written.
    pub(super) fn group_statuses(&mut self) -> Vec<GroupStatusWrite> {
        let mut dirty: Vec<GroupKey> = self.gangs.dirty_groups.drain().collect();
        dirty.sort();
        let mut out = Vec::new();
        for key in dirty {
            let Some(write) = self.group_status(&key) else {
                continue;
            };
            let group = self
                .gangs
                .groups
                .get_mut(&key)
                .expect("group_status found it");
            if matches!(
                write.phase,
                PodGroupPhase::Scheduled | PodGroupPhase::Running
            ) {
                group.bind_error = None;
            }
            if group.last_status.as_ref().is_some_and(|l| l.same(&write)) {
                continue;
            }
            let since = group
                .last_status
                .as_ref()
                .filter(|l| l.condition == write.condition)
                .and_then(|l| l.since.clone());
            let write = GroupStatusWrite { since, ..write };
            group.last_status = Some(write.clone());
            out.push(write);
        }
        out
    }

    /// What a declared gang's status is now; `None` while its binds are in flight (their
    /// results decide it) or for gangs without a PodGroup.
    pub(super) fn group_status(&self, key: &GroupKey) -> Option<GroupStatusWrite> {
        let g = self.gangs.groups.get(key)?;
        if !g.declared || g.foreign {
            return None;
        }
        let (mut bound, mut running, mut binding, mut invalid) = (0, 0, 0, 0);
        let mut waiting: Option<Arc<Unschedulable>> = None;
        for member in &g.members {
            let Some(t) = self.pods.get(member) else {
                continue;
            };
            match &t.state {
                PodState::Bound { .. } | PodState::Orphan { .. } => {
                    bound += 1;
                    running += i32::from(t.running);
                }
                PodState::Binding { .. } => binding += 1,
                PodState::Queued(id) => {
                    if waiting.is_none() {
                        waiting = self.scheduler.pod(*id).pending_reason.clone();
                    }
                }
                PodState::Invalid(_) => invalid += 1,
                PodState::Gated | PodState::GangWait { .. } => {}
            }
        }
        if binding > 0 && g.bind_error.is_none() {
            return None;
        }
        let min_member = g
            .effective()
            .or_else(|| g.offered.clone())
            .map(|s| s.min_member as i32);
        let gang = format!("{}/{}", key.0, key.1);
        let (phase, condition, reason, message) = match (min_member, g.problem()) {
            (Some(min), _) if bound >= min => (
                if running >= min {
                    PodGroupPhase::Running
                } else {
                    PodGroupPhase::Scheduled
                },
                "True",
                "Scheduled".to_string(),
                format!(
                    "{bound} of {} pods bound (minMember {min})",
                    g.members.len()
                ),
            ),
            (_, Some(why)) => (
                PodGroupPhase::Pending,
                "False",
                "InvalidSpec".into(),
                why.to_string(),
            ),
            _ if self
                .scheduler
                .gang_id(&key.0, &key.1)
                .is_some_and(|id| self.scheduler.gang(id).phase == GangPhase::TimedOut) =>
            {
                let after = g
                    .effective()
                    .and_then(|s| s.schedule_timeout)
                    .unwrap_or(0)
                    / 1000;
                let state = self.scheduler.gang(self.scheduler.gang_id(&key.0, &key.1)?);
                // No countdown: the message stays the same until something changes.
                let retry = format!(
                    "; its pods are tried again after a back-off of {} s",
                    self.scheduler.config().gang_backoff / 1000
                );
                (
                    PodGroupPhase::TimedOut,
                    "False",
                    "TimedOut".into(),
                    format!(
                        "{} ({} times){retry}",
                        GangProblem::TimedOut {
                            gang,
                            after_seconds: after,
                        },
                        state.timeouts
                    ),
                )
            }
            _ if g.bind_error.is_some() => (
                PodGroupPhase::Pending,
                "False",
                "BindFailed".into(),
                format!(
                    "{}; {bound} of {} pods bound",
                    g.bind_error.as_deref().unwrap_or_default(),
                    min_member.unwrap_or_default()
                ),
            ),
            _ => match waiting {
                Some(why) => (
                    PodGroupPhase::Pending,
                    "False",
                    match why.gang {
                        Some(GangProblem::Incomplete { .. }) => "Incomplete".into(),
                        _ => "Unschedulable".into(),
                    },
                    self.explain(&why, Some(key)),
                ),
                None if invalid > 0 => (
                    PodGroupPhase::Pending,
                    "False",
                    "InvalidPod".into(),
                    format!("{invalid} pod(s) of gang {gang} cannot be read; see their PodScheduled condition"),
                ),
                None if g.members.is_empty() => (
                    PodGroupPhase::Pending,
                    "False",
                    "Incomplete".into(),
                    self.explain(
                        &Unschedulable::gang_only(
                            GangProblem::Incomplete {
                                gang,
                                exist: 0,
                                min_member: min_member.unwrap_or_default() as u32,
                                total: None,
                                role: None,
                            },
                            0,
                        ),
                        Some(key),
                    ),
                ),
                None => (
                    PodGroupPhase::Pending,
                    "False",
                    "Pending".into(),
                    format!("gang {gang} waits for a scheduling cycle"),
                ),
            },
        };
        Some(GroupStatusWrite {
            namespace: key.0.clone(),
            name: key.1.clone(),
            phase,
            scheduled: bound,
            running,
            condition,
            reason,
            message,
            observed_generation: g.generation,
            since: None,
        })
    }

    /// What the API said to a PodGroup status write: the time its condition changed
    /// (stamped by the writer), or an error (it is written again at the next change).
    pub fn group_status_result(&mut self, write: &GroupStatusWrite, result: Result<Time, ()>) {
        let key: GroupKey = (write.namespace.clone(), write.name.clone());
        let Some(g) = self.gangs.groups.get_mut(&key) else {
            return;
        };
        let Some(last) = g.last_status.as_mut().filter(|l| l.same(write)) else {
            return;
        };
        match result {
            Ok(time) => {
                last.since.get_or_insert(time);
            }
            Err(()) => g.last_status = None,
        }
    }
}

/// Why a gang's pods wait when nothing declares it.
pub(super) fn not_found(key: &GroupKey) -> String {
    GangProblem::NotFound {
        gang: format!("{}/{}", key.0, key.1),
    }
    .to_string()
}

/// The status a PodGroup carries, as the write that would have written it.
pub(super) fn observed_status(key: &GroupKey, status: &Value) -> Option<GroupStatusWrite> {
    let status: PodGroupStatus = serde_json::from_value(status.clone()).ok()?;
    let condition = status.conditions.iter().find(|c| c.type_ == "Scheduled")?;
    Some(GroupStatusWrite {
        namespace: key.0.clone(),
        name: key.1.clone(),
        phase: status.phase?,
        scheduled: status.scheduled,
        running: status.running,
        condition: if condition.status == "True" {
            "True"
        } else {
            "False"
        },
        reason: condition.reason.clone(),
        message: condition.message.clone(),
        observed_generation: condition.observed_generation,
        since: Some(condition.last_transition_time.clone()),
    })
}
