//! Watch events into the index: [`apply_change`] hands each [`Change`] to the
//! [`LiveIndex`] method that reads it, re-reading from the stores what is read whole
//! (classes, queues, Topologies).

use super::listings::{FOREIGN_POD_GROUPS, NOT_SERVED, SERVED};
use super::watches::Stores;
use super::Change;
use crate::index::{self, GroupKey, LiveIndex};
use crate::namespace_policies::NamespacePolicyObject;
use kestrel_objects::kinds;
use kestrel_objects::pods::WorkloadPriorityListing;
use kestrel_objects::workloads::Owner;
use kube::api::DynamicObject;
use kube::runtime::reflector::Store;
use kube::runtime::watcher::Event;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The WorkloadPriorityClasses of the served versions (each class once, the newer
/// version's object first); `None` while a version is not listed yet, and an empty
/// `Some` when no version is served (Kueue is not installed).
pub(super) fn workload_priority_classes(stores: &Stores) -> Option<(bool, Vec<serde_json::Value>)> {
    let mut seen = std::collections::HashSet::new();
    let mut objects = Vec::new();
    let mut served = false;
    for watch in &stores.workload_priority_classes {
        match watch.served.load(Ordering::Acquire) {
            SERVED => served = true,
            NOT_SERVED => continue,
            _ => return None,
        }
        for o in watch.store.state() {
            if seen.insert(o.metadata.name.clone()) {
                objects.push(to_json(&o));
            }
        }
    }
    Some((served, objects))
}

/// A watched object as JSON, for the simulator's parser.
pub(super) fn to_json(object: &DynamicObject) -> serde_json::Value {
    serde_json::to_value(object).unwrap_or_default()
}

/// A watched object with its type: listed items may come without theirs, and the
/// readers check it.
pub(super) fn typed(
    mut json: serde_json::Value,
    api_version: &str,
    kind: &str,
) -> serde_json::Value {
    json["apiVersion"] = serde_json::json!(api_version);
    json["kind"] = serde_json::json!(kind);
    json
}

/// A watched PyTorchJob or JobSet as an owner.
pub(super) fn role_owner(kind: &'static str, object: &DynamicObject) -> Owner {
    let json = match kinds::live_untyped_owners().find(|k| k.kind() == kind) {
        Some(k) => typed(
            to_json(object),
            &kinds::api_version(k.group(), k.versions()[0]),
            kind,
        ),
        None => to_json(object),
    };
    Owner::roles(kind, json)
}

/// The (namespace, name) of PodGroups in a listing, for [`LiveIndex::retain_pod_groups`].
pub fn pod_group_keys<'a>(
    objects: impl IntoIterator<Item = &'a Arc<DynamicObject>>,
) -> std::collections::HashSet<GroupKey> {
    objects
        .into_iter()
        .filter_map(|o| {
            Some((
                o.metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into()),
                o.metadata.name.clone()?,
            ))
        })
        .collect()
}

/// Applies a watch event of ResourceQuotas or LimitRanges (whose listing is `store`).
/// Returns whether what Kestrel uses of them changed.
pub(super) fn namespace_policy_change<K>(
    state: &mut LiveIndex,
    store: &Store<K>,
    event: Event<K>,
) -> bool
where
    K: NamespacePolicyObject + kube::Resource<DynamicType = ()> + Clone,
{
    match event {
        Event::Apply(o) | Event::InitApply(o) => state.apply_namespace_policy(&o),
        Event::Delete(o) => state.delete_namespace_policy(
            K::KIND,
            o.meta().namespace.as_deref().unwrap_or_default(),
            o.meta().name.as_deref().unwrap_or_default(),
        ),
        Event::Init => false,
        Event::InitDone => state.retain_namespace_policies(K::KIND, &namespaced_keys(store)),
    }
}

/// The (namespace, name) of the namespaced objects a relist left in `store`.
pub(super) fn namespaced_keys<K>(store: &Store<K>) -> std::collections::HashSet<(String, String)>
where
    K: kube::Resource + Clone,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store
        .state()
        .iter()
        .filter_map(|o| Some((o.meta().namespace.clone()?, o.meta().name.clone()?)))
        .collect()
}

/// Reads every queue object again into the state (each kind's store, typed).
pub(super) fn refresh_queues(state: &mut LiveIndex, stores: &Stores) {
    let mut objects: Vec<serde_json::Value> = Vec::new();
    for (watch, store) in &stores.queues {
        for o in store.state() {
            objects.push(typed(to_json(&o), watch.api_version, watch.kind));
        }
    }
    for ns in stores.namespaces.state() {
        let json = serde_json::to_value(&*ns).unwrap_or_default();
        objects.push(typed(json, "v1", "Namespace"));
    }
    for pdb in stores.disruption_budgets.state() {
        let json = serde_json::to_value(&*pdb).unwrap_or_default();
        objects.push(typed(json, "policy/v1", "PodDisruptionBudget"));
    }
    for e in state.set_queues(&objects) {
        tracing::warn!(error = %e, "queue object cannot be used; its previous version (if any) stays in force");
    }
}

/// Applies one watch event to the state. Returns whether anything may have changed.
pub fn apply_change(state: &mut LiveIndex, stores: &Stores, change: Change) -> bool {
    match change {
        Change::Pod(event) => match *event {
            Event::Apply(p) | Event::InitApply(p) => state.apply_pod(&p),
            Event::Delete(p) => state.delete_pod(&p),
            Event::Init => {
                state.begin_pod_relist();
                return false;
            }
            Event::InitDone => state.end_pod_relist(),
        },
        Change::Node(event) => {
            match *event {
                Event::Apply(n) | Event::InitApply(n) => {
                    if let Err(e) = state.apply_node(&n) {
                        tracing::warn!(error = %e, object = ?e.object, "node cannot be read; it keeps its last readable state");
                    }
                }
                Event::Delete(n) => {
                    if let Some(name) = &n.metadata.name {
                        state.delete_node(name);
                    }
                }
                Event::Init => return false,
                Event::InitDone => state.retain_nodes(&index::node_names(&stores.nodes.state())),
            }
            // Volcano's and KAI's root cohorts hold the cluster: they follow its capacity.
            if state.queue_pools_outdated() {
                refresh_queues(state, stores);
            }
        }
        Change::PriorityClasses { .. }
        | Change::RuntimeClasses { .. }
        | Change::WorkloadPriorityClasses { .. } => {
            let pcs = stores.priority_classes.state();
            let rcs = stores.runtime_classes.state();
            let wpcs = workload_priority_classes(stores);
            let listing = match &wpcs {
                None => WorkloadPriorityListing::Pending,
                Some((false, _)) => WorkloadPriorityListing::NotServed,
                Some((true, objects)) => WorkloadPriorityListing::Listed(objects),
            };
            for e in state.set_classes(pcs.iter().map(|a| &**a), rcs.iter().map(|a| &**a), listing)
            {
                tracing::warn!(error = %e, object = ?e.object, "class cannot be read");
            }
        }
        Change::PodGroup(event) => match *event {
            Event::Apply(o) | Event::InitApply(o) => state.apply_pod_group(&to_json(&o)),
            Event::Delete(o) => {
                let namespace = o.metadata.namespace.as_deref().unwrap_or("default");
                state.delete_pod_group(namespace, o.metadata.name.as_deref().unwrap_or_default());
            }
            Event::Init => return false,
            Event::InitDone => state.retain_pod_groups(&pod_group_keys(&stores.pod_groups.state())),
        },
        Change::ForeignPodGroup { kind, event } => match *event {
            Event::Apply(o) | Event::InitApply(o) => {
                // Listed items come without their type (those of Kubernetes' own kinds
                // always): the watch says which it is.
                let watched = FOREIGN_POD_GROUPS.iter().find(|(k, _, _)| *k == kind);
                let json = match watched {
                    Some((_, group, version)) => {
                        typed(to_json(&o), &kinds::api_version(group, version), "PodGroup")
                    }
                    None => to_json(&o),
                };
                state.apply_pod_group(&json)
            }
            Event::Delete(o) => {
                let namespace = o.metadata.namespace.as_deref().unwrap_or("default");
                state.delete_pod_group(namespace, o.metadata.name.as_deref().unwrap_or_default());
            }
            Event::Init | Event::InitDone => return false,
        },
        Change::Topologies { .. } => {
            let objects: Vec<serde_json::Value> = stores
                .topologies
                .state()
                .iter()
                .map(|o| to_json(o))
                .collect();
            for e in state.set_topologies(&objects) {
                tracing::warn!(error = %e, "Topology cannot be read; it is not used");
            }
        }
        Change::Dra(event) => state.apply_dra(*event),
        Change::Volume(event) => state.apply_volume_event(*event),
        Change::Queues { .. } => refresh_queues(state, stores),
        Change::ResourceQuota(event) => {
            return namespace_policy_change(state, &stores.resource_quotas, *event)
        }
        Change::LimitRange(event) => {
            return namespace_policy_change(state, &stores.limit_ranges, *event)
        }
        Change::Owner { kind, event } => match *event {
            Event::Apply(o) | Event::InitApply(o) => state.apply_owner(&o),
            Event::Delete(o) => {
                let (namespace, name) = o.key();
                state.delete_owner(kind, &namespace, &name)
            }
            Event::Init => return false,
            Event::InitDone => state.retain_owners(kind, &stores.owner_keys(kind)),
        },
        Change::Unserved { kind } if kinds::is_whole_workload(kind) => {
            tracing::warn!(kind, "Kestrel may not list this kind (add its list and watch to Kestrel's ClusterRole): a queued one's pods are admitted one by one");
            state.set_owner_kind_unserved(kind);
        }
        Change::Unserved { kind } if kinds::is_live_owner(kind) => {
            // Its CRD is not installed (or not readable): its pods, if any, go one by one.
            tracing::info!(
                kind,
                "not served or not readable: its pods are read one by one"
            );
            state.set_owner_kind_unserved(kind);
        }
        Change::Unserved { kind } if kind.starts_with("WorkloadPriorityClass") => {
            for watch in stores
                .workload_priority_classes
                .iter()
                .filter(|w| w.kind == kind)
            {
                watch.served.store(NOT_SERVED, Ordering::Release);
            }
            return apply_change(state, stores, Change::PriorityClasses { listed: false });
        }
        Change::Unserved { .. } => {}
    }
    true
}
