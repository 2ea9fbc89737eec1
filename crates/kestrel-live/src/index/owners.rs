//! Owners as workloads: the pods of a queued Job, StatefulSet or ReplicaSet (one no
//! Deployment owns) are one gang (`job-<name>`, `statefulset-<name>`, `replicaset-<name>`),
//! admitted whole against the queue's quota or, for a Job, down to Kueue's
//! `job-min-parallelism` ([`kestrel_objects::workloads`]). A PyTorchJob's or JobSet's pods are
//! one gang over its roles (`pytorchjob-<name>`, `jobset-<name>`), queued or not. The
//! owner's queue is its pods' queue.
//!
//! A controller creates pods right after their owner, but the two watches do not keep
//! that order: a pod whose owner has not been seen yet waits outside the engine
//! ([`PodState::GangWait`]), so that it is never placed alone, bypassing the quota. Without
//! read access to a kind (an older ClusterRole) its pods are read as they are.
//!
//! A parent ([`kestrel_objects::kinds::Live::Parent`]: a TrainJob) creates no pods but
//! controls an owner (its JobSet) and gives it its queue: Kueue labels the TrainJob, and
//! Trainer does not copy that label down. An owner with a parent is read once its parent
//! has been seen, so its pods never start outside the parent's queue.

use super::groups::Group;
use super::{GroupKey, LiveIndex, PodState};
use k8s_openapi::api::core::v1::Pod;
use kestrel_core::{GangMembership, PodSpec};
use kestrel_objects::kinds;
use kestrel_objects::live::{self, ConvertError};
use kestrel_objects::warning::WarningBook;
use kestrel_objects::workloads::{
    controlling_owner, owner_role, workload_gang_name, Owner, OwnerWorkload,
};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;

/// What an owner says about its pods: `Ok(None)` not one workload, `Ok(Some)` its queue
/// and gang, `Err` why it cannot be read.
type OwnerReading = Result<Option<OwnerWorkload>, String>;

/// An owner by kind, namespace and name.
type OwnerKey = (&'static str, String, String);

#[derive(Debug, Default)]
pub(super) struct OwnerBook {
    /// Absent: not seen (yet).
    owners: HashMap<OwnerKey, OwnerReading>,
    /// Kinds the API does not let Kestrel read.
    unserved: BTreeSet<&'static str>,
    /// The volume warnings said of each owner, so each is posted once while it lasts.
    warned: WarningBook,
    /// The gangs of owners not seen yet, whose pods wait for them, with the owner's kind.
    awaited: HashMap<GroupKey, &'static str>,
    /// Parents seen, with the queue they name.
    parents: HashMap<OwnerKey, Option<String>>,
    /// Owners that have a parent, as last seen, so that a parent seen (or changed) later
    /// is passed on to them.
    children: HashMap<OwnerKey, Owner>,
}

impl LiveIndex {
    /// An owner (a Job, StatefulSet, ReplicaSet, PyTorchJob or JobSet) was added or changed.
    pub fn apply_owner(&mut self, owner: &Owner) {
        let kind = owner.kind();
        // Listed again: its CRD was installed, or Kestrel's ClusterRole now lets it read.
        self.owners.unserved.remove(kind);
        if kinds::is_live_parent(kind) {
            return self.apply_parent(owner);
        }
        let (namespace, name) = owner.key();
        let key: GroupKey = (namespace.clone(), workload_gang_name(kind, &name));
        let mut parent_queue = None;
        if let Some((parent_kind, parent)) = owner.parent() {
            let parent_key = (parent_kind, namespace.clone(), parent.to_string());
            self.owners
                .children
                .insert((kind, namespace.clone(), name.clone()), owner.clone());
            match self.owners.parents.get(&parent_key) {
                Some(queue) => parent_queue.clone_from(queue),
                None if self.owners.unserved.contains(parent_kind) => {}
                None => {
                    // Its pods wait, as for an owner not seen, until the parent is.
                    let why = format!(
                        "waiting to see its {parent_kind} {namespace}/{parent}, whose queue \
                         its {kind}'s pods are admitted in"
                    );
                    let group = self.gangs.groups.entry(key);
                    group
                        .or_insert_with(|| Group::new(false, Err(String::new())))
                        .spec = Err(why);
                    return;
                }
            }
        }
        let reading = owner
            .workload(Path::new(live::API_SOURCE))
            .map(|reading| {
                // The parent's queue is the one Kueue admits the whole in.
                reading.map(|(queue, gang)| (parent_queue.or(queue), gang))
            })
            .map_err(|e| {
                format!(
                    "{kind} {namespace}/{name} is invalid: {}",
                    ConvertError::from(e).message
                )
            });
        let warned = (kind.to_string(), Some(namespace.clone()), name.clone());
        let warnings = owner.volume_warnings(Path::new(live::API_SOURCE));
        let new = self.owners.warned.read(warned, warnings);
        self.field_warnings.extend(new);
        self.owners.awaited.remove(&key);
        self.owners
            .owners
            .insert((kind, namespace, name), reading.clone());
        let (queue, spec) = match reading {
            Ok(None) => {
                self.release_owner_pods(&key);
                return;
            }
            Ok(Some((queue, gang))) => (queue, Ok(gang)),
            Err(why) => (None, Err(why)),
        };
        let group = self
            .gangs
            .groups
            .entry(key.clone())
            .or_insert_with(|| Group::new(true, spec.clone()));
        // Its status is the owner's, written by its controller: Kestrel writes none.
        group.declared = true;
        group.foreign = true;
        group.spec = spec;
        // Pods that waited for their owner learn their queue from it.
        for member in group.members.clone() {
            if let Some(PodState::GangWait { spec, .. }) =
                self.pods.get_mut(&member).map(|t| &mut t.state)
            {
                if spec.queue.is_none() {
                    spec.queue.clone_from(&queue);
                }
            }
        }
        self.settle_group(&key);
    }

    /// A parent was added or changed: the owners it controls take its queue.
    fn apply_parent(&mut self, parent: &Owner) {
        let kind = parent.kind();
        let (namespace, name) = parent.key();
        let queue = parent.queue_label();
        let key = (kind, namespace.clone(), name.clone());
        if self.owners.parents.insert(key, queue.clone()) == Some(queue) {
            return;
        }
        for child in self.children_of(kind, &namespace, &name) {
            self.apply_owner(&child);
        }
    }

    /// The owners that a parent controls, as last seen.
    fn children_of(&self, kind: &str, namespace: &str, name: &str) -> Vec<Owner> {
        self.owners
            .children
            .iter()
            .filter(|((_, ns, _), child)| ns == namespace && child.parent() == Some((kind, name)))
            .map(|(_, child)| child.clone())
            .collect()
    }

    /// An owner was deleted: its pods go with it (the garbage collector deletes them).
    pub fn delete_owner(&mut self, kind: &'static str, namespace: &str, name: &str) {
        let key = (kind, namespace.to_string(), name.to_string());
        if self.owners.parents.remove(&key).is_some() {
            // The garbage collector deletes what it controls.
            return;
        }
        self.owners.children.remove(&key);
        self.owners.owners.remove(&key);
        let warned = (
            kind.to_string(),
            Some(namespace.to_string()),
            name.to_string(),
        );
        self.owners.warned.retain(|object| *object != warned);
        let key: GroupKey = (namespace.to_string(), workload_gang_name(kind, name));
        if let Some(g) = self.gangs.groups.get_mut(&key) {
            g.declared = false;
            if g.members.is_empty() {
                self.gangs.groups.remove(&key);
                self.gangs.dirty_groups.remove(&key);
            }
        }
    }

    /// Owners of `kind` not in `present` were deleted while the watch was down (after a
    /// relist).
    pub fn retain_owners(&mut self, kind: &'static str, present: &HashSet<(String, String)>) {
        let gone: Vec<(String, String)> = self
            .owners
            .owners
            .keys()
            .chain(self.owners.parents.keys())
            .filter(|(k, ns, name)| *k == kind && !present.contains(&(ns.clone(), name.clone())))
            .map(|(_, ns, name)| (ns.clone(), name.clone()))
            .collect();
        for (namespace, name) in gone {
            self.delete_owner(kind, &namespace, &name);
        }
    }

    /// The API does not let Kestrel read `kind`: its pods are read as they are.
    pub fn set_owner_kind_unserved(&mut self, kind: &'static str) {
        self.owners.unserved.insert(kind);
        if kinds::is_live_parent(kind) {
            // Owners that waited for a parent that cannot be seen go on without its queue.
            let waiting: Vec<Owner> = self
                .owners
                .children
                .values()
                .filter(|child| child.parent().is_some_and(|(k, _)| k == kind))
                .cloned()
                .collect();
            for child in waiting {
                self.apply_owner(&child);
            }
            return;
        }
        let waiting: Vec<GroupKey> = self
            .owners
            .awaited
            .iter()
            .filter(|(_, k)| **k == kind)
            .map(|(key, _)| key.clone())
            .collect();
        for key in waiting {
            self.owners.awaited.remove(&key);
            self.release_owner_pods(&key);
        }
    }

    /// The gang of a pod its owner makes one workload with its siblings (`None`: the pod
    /// is a workload of its own); sets the pod's queue from the owner's. Only for pods
    /// that name no gang themselves.
    pub(super) fn owner_gang(&mut self, pod: &Pod, spec: &mut PodSpec) -> Option<GroupKey> {
        let (key, kind, owner) = self.owner_of(pod)?;
        match self
            .owners
            .owners
            .get(&(kind, spec.namespace.clone(), owner.to_string()))
        {
            Some(Ok(Some((queue, _)))) if spec.queue.is_none() => {
                spec.queue.clone_from(queue);
            }
            Some(_) => {}
            None => {
                self.owners.awaited.insert(key.clone(), kind);
            }
        }
        let owner_key = format!("{kind} {}/{owner}", spec.namespace);
        self.gangs.groups.entry(key.clone()).or_insert_with(|| {
            Group::new(
                false,
                Err(format!(
                    "waiting to see its {owner_key}: a {kind}'s pods are admitted together"
                )),
            )
        });
        spec.gang = Some(GangMembership {
            gang: key.1.clone(),
            role: owner_role(pod),
            rank: None,
        });
        Some(key)
    }

    /// The owner's gang a pod of ours belongs to, if its owner is queued or not seen yet;
    /// pods that name a gang themselves keep theirs.
    pub(super) fn owner_group_key(&self, pod: &Pod) -> Option<GroupKey> {
        let (key, _, _) = self.owner_of(pod)?;
        matches!(live::pod_gang(pod), Ok(None)).then_some(key)
    }

    /// The gang of the owner that controls `pod`, its kind and name, if the owner is
    /// queued or not seen yet (whatever gang the pod names itself).
    fn owner_of<'p>(&self, pod: &'p Pod) -> Option<(GroupKey, &'static str, &'p str)> {
        let (kind, owner) = controlling_owner(pod)?;
        if self.owners.unserved.contains(kind) {
            return None;
        }
        let namespace = live::pod_namespace(pod).to_string();
        match self
            .owners
            .owners
            .get(&(kind, namespace.clone(), owner.to_string()))
        {
            Some(Ok(None)) => None,
            _ => Some(((namespace, workload_gang_name(kind, owner)), kind, owner)),
        }
    }

    /// The owner is not one workload (or cannot be seen): its pods that waited for it go
    /// on as workloads of their own.
    fn release_owner_pods(&mut self, key: &GroupKey) {
        let Some(group) = self.gangs.groups.remove(key) else {
            return;
        };
        self.gangs.dirty_groups.remove(key);
        for member in group.members {
            let Some(t) = self.pods.get_mut(&member) else {
                continue;
            };
            t.group = None;
            if !matches!(t.state, PodState::GangWait { .. }) {
                continue;
            }
            let PodState::GangWait { mut spec, .. } =
                std::mem::replace(&mut t.state, PodState::Gated)
            else {
                unreachable!("matched above")
            };
            spec.gang = None;
            let id = self.scheduler.submit(*spec, self.now);
            self.keys.insert(id, member.clone());
            t.state = PodState::Queued(id);
            self.reported.remove(&member);
        }
    }
}
