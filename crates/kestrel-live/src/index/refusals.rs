//! Namespace-policy refusals: the ResourceQuotas and LimitRanges that refuse an incomplete
//! gang's missing pods, named in the gang's status and its pods'.

use super::{GroupKey, LiveIndex, PodState};
use crate::namespace_policies::{NamespacePolicyObject, Policies};
use k8s_openapi::api::core::v1::Pod;
use kestrel_core::{GangProblem, Unschedulable};
use kestrel_objects::limit_range::PodResources;
use kestrel_objects::quota::PodUsage;
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

/// What explains an incomplete gang: the ResourceQuotas and LimitRanges that may refuse
/// its missing pods, and the members' containers' requests and limits they are checked
/// against.
#[derive(Default)]
pub(super) struct Refusals {
    /// The ResourceQuotas and LimitRanges Kestrel can use.
    policies: Policies,
    /// Gang members' containers' requests and limits, one copy of each distinct set,
    /// shared by the members (`Tracked::resources`).
    pod_resources: HashSet<Arc<PodResources>>,
}

impl Refusals {
    /// A gang member's containers' requests and limits, shared with the members that
    /// have the same.
    pub(super) fn intern(&mut self, pod: &Pod) -> Arc<PodResources> {
        let resources = PodResources::of(pod);
        if let Some(shared) = self.pod_resources.get(&resources) {
            return shared.clone();
        }
        let shared = Arc::new(resources);
        self.pod_resources.insert(shared.clone());
        shared
    }
}

impl LiveIndex {
    /// A ResourceQuota or LimitRange was added or changed. They explain incomplete gangs:
    /// pods the API server refuses to create because their namespace's quota is used up or
    /// a LimitRange's bounds exclude them. Returns whether what Kestrel uses of it changed.
    /// The warnings about fields that cannot be read (skipped) are said once while they
    /// last ([`LiveIndex::take_field_warnings`]).
    pub fn apply_namespace_policy<K: NamespacePolicyObject>(&mut self, object: &K) -> bool {
        let (changed, warnings) = self.refusals.policies.apply(object);
        self.field_warnings.extend(warnings);
        changed
    }

    /// A ResourceQuota or LimitRange (`kind`) was deleted. Returns whether Kestrel used it.
    pub fn delete_namespace_policy(
        &mut self,
        kind: &'static str,
        namespace: &str,
        name: &str,
    ) -> bool {
        self.refusals.policies.delete(kind, namespace, name)
    }

    /// After a relist of `kind`: drops its objects not in it, (namespace, name).
    pub fn retain_namespace_policies(
        &mut self,
        kind: &'static str,
        present: &HashSet<(String, String)>,
    ) -> bool {
        self.refusals.policies.retain(kind, present)
    }

    /// The ResourceQuota or LimitRange that refuses pods like a gang's members (for a
    /// quota: any pod, while none exists), as a sentence; `None` when its namespace's
    /// policies admit them.
    pub(super) fn admission_refusal(&self, key: &GroupKey) -> Option<String> {
        if !self.refusals.policies.has_namespace(&key.0) {
            return None;
        }
        let g = self.gangs.groups.get(key)?;
        // Only a gang with pods waiting in the engine (or none at all) can be incomplete.
        let waits = g.members.iter().any(|m| {
            matches!(
                self.pods.get(m).map(|t| &t.state),
                Some(PodState::Queued(_))
            )
        });
        if !waits && !g.members.is_empty() {
            return None;
        }
        let mut usages: Vec<PodUsage> = Vec::new();
        let mut resources: Vec<&PodResources> = Vec::new();
        for member in &g.members {
            let Some(t) = self.pods.get(member) else {
                continue;
            };
            let usage = match &t.state {
                PodState::Queued(id)
                | PodState::Binding { id, .. }
                | PodState::Bound { id, .. } => PodUsage::of(&self.scheduler.pod(*id).spec),
                PodState::GangWait { spec, .. } | PodState::Orphan { spec, .. } => {
                    PodUsage::of(spec)
                }
                PodState::Gated | PodState::Invalid(_) => continue,
            };
            if !usages.contains(&usage) {
                usages.push(usage);
            }
            if let Some(r) = t.resources.as_deref() {
                if !resources.contains(&r) {
                    resources.push(r);
                }
            }
        }
        if usages.is_empty() {
            usages.push(PodUsage::default());
        }
        self.refusals.policies.refusal(&key.0, &usages, &resources)
    }

    /// Works the admission notes out again for the gangs that changed and those in
    /// namespaces whose policies changed; returns the gangs whose note changed, marked for
    /// a status update. Forgets the members' resources no pod has any more.
    pub(super) fn refresh_namespace_policy_notes(&mut self) -> Vec<GroupKey> {
        let namespaces = self.refusals.policies.take_changed();
        let mut keys: BTreeSet<GroupKey> = self.gangs.dirty_groups.iter().cloned().collect();
        if !namespaces.is_empty() {
            keys.extend(
                self.gangs
                    .groups
                    .keys()
                    .filter(|k| namespaces.contains(&k.0))
                    .cloned(),
            );
        }
        let mut changed = Vec::new();
        for key in keys {
            let note = self.admission_refusal(&key);
            let Some(g) = self.gangs.groups.get_mut(&key) else {
                continue;
            };
            if g.admission_note != note {
                g.admission_note = note;
                self.gangs.dirty_groups.insert(key.clone());
                changed.push(key);
            }
        }
        self.refusals
            .pod_resources
            .retain(|r| Arc::strong_count(r) > 1);
        changed
    }

    /// Why a pod (or its gang) waits, as reported: the engine's explanation, with the
    /// ResourceQuota or LimitRange that refuses the missing pods when the gang is incomplete.
    pub(super) fn explain(&self, reason: &Unschedulable, group: Option<&GroupKey>) -> String {
        let message = reason.to_string();
        let note = group
            .and_then(|g| self.gangs.groups.get(g))
            .and_then(|g| g.admission_note.as_deref());
        match (&reason.queue, &reason.gang, note) {
            (None, Some(problem @ GangProblem::Incomplete { .. }), Some(note)) => {
                with_admission_note(message, problem, note)
            }
            _ => message,
        }
    }
}

/// An incomplete gang's explanation with the ResourceQuota or LimitRange that refuses its
/// missing pods in place of "waiting for the rest to be created" (they will not be, until
/// the policy admits them).
pub(super) fn with_admission_note(message: String, problem: &GangProblem, note: &str) -> String {
    let text = problem.to_string();
    let head = text
        .strip_suffix("; waiting for the rest to be created")
        .unwrap_or(&text);
    message.replacen(&text, &format!("{head}; {note}"), 1)
}
