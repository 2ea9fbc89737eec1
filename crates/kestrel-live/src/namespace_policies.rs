//! The namespace policies the API server refuses pods by: ResourceQuotas ([`kestrel_objects::quota`])
//! and LimitRanges ([`kestrel_objects::limit_range`]).
//!
//! A Job whose pods its namespace's policies refuse cannot create the rest of its gang, and
//! the gang waits incomplete. The live scheduler keeps the policies it can use
//! ([`Policies`]) and names the one that refuses pods like a gang's members.

use k8s_openapi::api::core::v1::{LimitRange, ResourceQuota};
use kestrel_objects::limit_range::{self, Limits, PodResources};
use kestrel_objects::quota::{self, PodUsage, Quota};
use kestrel_objects::warning::{FieldWarning, WarningBook};
use kube::Resource;
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// A namespace policy as Kestrel uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    Quota(Quota),
    Limits(Limits),
}

/// A kind of namespace policy, read from its object.
pub trait NamespacePolicyObject: Resource {
    const KIND: &'static str;
    /// What Kestrel uses of the object (`None`: nothing), and warnings about the fields
    /// that cannot be read (skipped), each naming the object and the field.
    fn read(&self) -> (Option<Policy>, Vec<FieldWarning>);
}

impl NamespacePolicyObject for ResourceQuota {
    const KIND: &'static str = "ResourceQuota";
    fn read(&self) -> (Option<Policy>, Vec<FieldWarning>) {
        let (read, warnings) = quota::read_quota(self);
        (read.map(Policy::Quota), warnings)
    }
}

impl NamespacePolicyObject for LimitRange {
    const KIND: &'static str = "LimitRange";
    fn read(&self) -> (Option<Policy>, Vec<FieldWarning>) {
        let (read, warnings) = limit_range::read_limit_range(self);
        (read.map(Policy::Limits), warnings)
    }
}

/// The policies of every namespace, with what changed since they were last used.
#[derive(Debug, Default)]
pub struct Policies {
    /// namespace -> (kind, name) -> policy. LimitRanges come first, as the API server
    /// checks them first.
    by_namespace: BTreeMap<String, BTreeMap<(&'static str, String), Policy>>,
    /// Each object's warnings at its last reading, so that each is said once.
    warnings: WarningBook,
    /// Namespaces whose policies changed since [`Policies::take_changed`].
    changed: BTreeSet<String>,
}

/// A namespace policy's key in the [`WarningBook`].
fn warning_key(kind: &str, namespace: &str, name: &str) -> (String, Option<String>, String) {
    (kind.into(), Some(namespace.into()), name.into())
}

impl Policies {
    /// An object was added or changed. Returns whether what Kestrel uses of it changed,
    /// and its warnings not said before.
    pub fn apply<K: NamespacePolicyObject>(&mut self, object: &K) -> (bool, Vec<FieldWarning>) {
        let namespace = object.meta().namespace.clone().unwrap_or_default();
        let name = object.meta().name.clone().unwrap_or_default();
        let (read, warnings) = object.read();
        let key = warning_key(K::KIND, &namespace, &name);
        let new = self.warnings.read(key, warnings);
        let in_namespace = self.by_namespace.entry(namespace.clone()).or_default();
        let slot = (K::KIND, name);
        let changed = match read {
            Some(p) => in_namespace.insert(slot, p.clone()).as_ref() != Some(&p),
            None => in_namespace.remove(&slot).is_some(),
        };
        if in_namespace.is_empty() {
            self.by_namespace.remove(&namespace);
        }
        if changed {
            self.changed.insert(namespace);
        }
        (changed, new)
    }

    /// An object of `kind` was deleted. Returns whether Kestrel used it.
    pub fn delete(&mut self, kind: &'static str, namespace: &str, name: &str) -> bool {
        let key = warning_key(kind, namespace, name);
        self.warnings.retain(|k| *k != key);
        let Some(in_namespace) = self.by_namespace.get_mut(namespace) else {
            return false;
        };
        let changed = in_namespace.remove(&(kind, name.to_string())).is_some();
        if in_namespace.is_empty() {
            self.by_namespace.remove(namespace);
        }
        if changed {
            self.changed.insert(namespace.to_string());
        }
        changed
    }

    /// After a relist of `kind`: drops its objects not in it, (namespace, name).
    pub fn retain(&mut self, kind: &'static str, present: &HashSet<(String, String)>) -> bool {
        let gone: Vec<(String, String)> = self
            .by_namespace
            .iter()
            .flat_map(|(ns, ps)| {
                ps.keys()
                    .filter(|(k, _)| *k == kind)
                    .map(move |(_, n)| (ns.clone(), n.clone()))
            })
            .filter(|k| !present.contains(k))
            .collect();
        self.warnings.retain(|(k, ns, n)| {
            k != kind || present.contains(&(ns.clone().unwrap_or_default(), n.clone()))
        });
        let mut changed = false;
        for (ns, name) in gone {
            changed |= self.delete(kind, &ns, &name);
        }
        changed
    }

    /// The namespaces whose policies changed since the last call.
    pub fn take_changed(&mut self) -> BTreeSet<String> {
        std::mem::take(&mut self.changed)
    }

    pub fn has_namespace(&self, namespace: &str) -> bool {
        self.by_namespace.contains_key(namespace)
    }

    /// The first policy of `namespace` that refuses a pod like one of a gang's members,
    /// as a sentence: `usages` for quotas, `resources` (the members' containers) for
    /// LimitRanges. `None` when every policy admits them.
    pub fn refusal(
        &self,
        namespace: &str,
        usages: &[PodUsage],
        resources: &[&PodResources],
    ) -> Option<String> {
        self.by_namespace
            .get(namespace)?
            .values()
            .find_map(|policy| match policy {
                Policy::Quota(q) => usages
                    .iter()
                    .find_map(|u| quota::refusal([q], u))
                    .map(|r| r.to_string()),
                Policy::Limits(l) => resources
                    .iter()
                    .find_map(|r| limit_range::refusal([l], r))
                    .map(|r| r.to_string()),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn limit_range(name: &str, max_gpus: &str) -> LimitRange {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"limits": [{"type": "Container", "max": {"nvidia.com/gpu": max_gpus, "cpu": "8"}}]},
        }))
        .unwrap()
    }

    #[test]
    fn warnings_are_said_once_while_they_last() {
        let mut p = Policies::default();
        let (changed, warnings) = p.apply(&limit_range("gpu-limits", "many"));
        assert!(changed, "the cpu bound is used");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0]
            .to_string()
            .starts_with("LimitRange ml/gpu-limits: field spec.limits[0].max[nvidia.com/gpu]:"));
        assert_eq!(p.apply(&limit_range("gpu-limits", "many")), (false, vec![]));
        // Fixed, then broken again: said again.
        assert!(p.apply(&limit_range("gpu-limits", "4")).0);
        assert_eq!(p.apply(&limit_range("gpu-limits", "many")).1.len(), 1);
        assert_eq!(p.take_changed(), BTreeSet::from(["ml".to_string()]));
        assert!(p.take_changed().is_empty());
    }

    #[test]
    fn a_relist_drops_only_its_own_kind() {
        let mut p = Policies::default();
        p.apply(&limit_range("a", "4"));
        p.apply(&limit_range("b", "4"));
        let quota: ResourceQuota = serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "ml"},
            "status": {"hard": {"pods": "1"}, "used": {"pods": "1"}},
        }))
        .unwrap();
        assert!(p.apply(&quota).0);
        let present = HashSet::from([("ml".to_string(), "a".to_string())]);
        assert!(p.retain("LimitRange", &present), "b is gone");
        assert!(!p.retain("LimitRange", &present));
        assert!(!p.retain("ResourceQuota", &present));
        // The quota named `a` is still there, and refuses any pod.
        let refusal = p.refusal("ml", &[PodUsage::default()], &[]).unwrap();
        assert!(
            refusal.starts_with("ResourceQuota ml/a has pods 1 of 1 used"),
            "{refusal}"
        );
        assert!(p.delete("ResourceQuota", "ml", "a"));
        assert!(p.delete("LimitRange", "ml", "a"));
        assert!(!p.has_namespace("ml"));
    }
}
