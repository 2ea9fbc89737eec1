//! Storage objects from watches: PersistentVolumeClaims, PersistentVolumes and
//! StorageClasses, resolved into a pod's volume rules by the reader the simulator uses
//! ([`kestrel_objects::volumes`]). A pod whose claims cannot be used yet (missing, being
//! deleted, unbound with `Immediate` binding) waits outside the engine with kube-
//! scheduler's reason and is read again when the storage objects change.

use super::LiveIndex;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kestrel_core::{ClaimTarget, PodId, PodSpec};
use kestrel_objects::fields::Ctx;
use kestrel_objects::live;
use kestrel_objects::volumes::{csi_limits, pod_claim_names, ClaimInfo, VolumeCatalog};
use kube::runtime::watcher::Event;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// A watch event of a storage kind.
#[derive(Debug)]
pub enum VolumeEvent {
    Claim(Box<Event<PersistentVolumeClaim>>),
    Volume(Box<Event<PersistentVolume>>),
    Class(Box<Event<StorageClass>>),
    /// A node's CSI volume limits.
    CsiNode(Box<Event<CSINode>>),
}

/// What the index knows of storage.
#[derive(Debug, Default)]
pub(super) struct VolumeBook {
    catalog: VolumeCatalog,
    /// Per kind, the objects a relist in progress has listed so far.
    relisted: HashMap<&'static str, HashSet<String>>,
    /// Unbound pods that mount claims (`namespace/name`), for reading them again when
    /// their claims change.
    pub(super) volume_pods: HashMap<String, Arc<Pod>>,
    /// Per node, its CSINode's volume limits by driver.
    pub(super) csi_limits: HashMap<String, BTreeMap<String, u32>>,
    /// CSINodes a relist in progress has listed so far.
    csi_relisted: Option<HashSet<String>>,
}

/// The storage objects an event changed, to find the pods to read again.
enum Changed {
    Claim(String),
    Volume(String),
    Class(String),
    /// A relist ended: any claim may have changed.
    All,
}

/// A claim not bound yet that a pod's bind binds first: the live scheduler writes the claim
/// on the PersistentVolume the engine chose for it, or the node on the claim for its
/// provisioner, and waits for the claim to be bound before binding the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvisionWrite {
    pub namespace: String,
    pub claim: String,
    /// The PersistentVolume chosen; `None`: provisioned on the node.
    pub volume: Option<String>,
}

fn object_key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    let name = meta.name.clone().unwrap_or_default();
    match &meta.namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name,
    }
}

impl LiveIndex {
    /// Applies a storage watch event; relists drop the objects they no longer list.
    pub fn apply_volume_event(&mut self, event: VolumeEvent) {
        let (kind, event) = match event {
            VolumeEvent::CsiNode(e) => return self.apply_csi_node_event(*e),
            VolumeEvent::Claim(e) => (
                "PersistentVolumeClaim",
                stored(*e, |c| Stored::Claim(Box::new(c))),
            ),
            VolumeEvent::Volume(e) => (
                "PersistentVolume",
                stored(*e, |v| Stored::Volume(Box::new(v))),
            ),
            VolumeEvent::Class(e) => ("StorageClass", stored(*e, |c| Stored::Class(Box::new(c)))),
        };
        let book = &mut self.volumes;
        let changed = match event {
            Event::Init => {
                book.relisted.insert(kind, HashSet::new());
                return;
            }
            Event::InitApply(o) => {
                if let Some(listed) = book.relisted.get_mut(kind) {
                    listed.insert(o.key());
                }
                // Pods are read again once, when the list ends.
                self.store_volume_object(&o);
                return;
            }
            Event::Apply(o) => {
                self.store_volume_object(&o);
                o.changed()
            }
            Event::Delete(o) => {
                self.remove_volume_object(kind, &o.key());
                o.changed()
            }
            Event::InitDone => {
                let listed = book.relisted.remove(kind).unwrap_or_default();
                let gone: Vec<String> = self
                    .volume_keys(kind)
                    .into_iter()
                    .filter(|k| !listed.contains(k))
                    .collect();
                for key in gone {
                    self.remove_volume_object(kind, &key);
                }
                Changed::All
            }
        };
        self.forget_overtaken_claim_bindings();
        self.reread_volume_pods(&changed);
    }

    /// Forgets the engine's claim bindings that the API has overtaken: the claim is bound
    /// now (or gone), or the volume chosen for it is gone or names another claim. The
    /// claim's rules say where its pods may go from then on.
    fn forget_overtaken_claim_bindings(&mut self) {
        let catalog = &self.volumes.catalog;
        let overtaken: Vec<String> = self
            .scheduler
            .claim_bindings()
            .filter(|(claim, binding)| {
                let Some(info) = catalog.claims.get(*claim) else {
                    return true;
                };
                info.volume.is_some()
                    || match &binding.target {
                        ClaimTarget::Volume(volume) => {
                            catalog.volumes.get(volume).is_none_or(|pv| {
                                pv.claim_ref.as_ref().is_some_and(|(k, _)| k != claim)
                            })
                        }
                        ClaimTarget::Provisioned => false,
                    }
            })
            .map(|(claim, _)| claim.to_string())
            .collect();
        for claim in overtaken {
            self.scheduler.forget_claim_binding(&claim);
        }
    }

    /// A CSINode changed: its node's volume limits change (pods are not read again: the
    /// limits are judged per node when pods are placed).
    fn apply_csi_node_event(&mut self, event: Event<CSINode>) {
        let mut changed = Vec::new();
        match event {
            Event::Init => self.volumes.csi_relisted = Some(HashSet::new()),
            Event::InitApply(node) | Event::Apply(node) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                if let Some(listed) = self.volumes.csi_relisted.as_mut() {
                    listed.insert(name.clone());
                }
                let limits = csi_limits(&node);
                if self.volumes.csi_limits.get(&name) != Some(&limits) {
                    self.volumes.csi_limits.insert(name.clone(), limits);
                    changed.push(name);
                }
            }
            Event::Delete(node) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                if self.volumes.csi_limits.remove(&name).is_some() {
                    changed.push(name);
                }
            }
            Event::InitDone => {
                let listed = self.volumes.csi_relisted.take().unwrap_or_default();
                let gone: Vec<String> = self
                    .volumes
                    .csi_limits
                    .keys()
                    .filter(|n| !listed.contains(*n))
                    .cloned()
                    .collect();
                for name in gone {
                    self.volumes.csi_limits.remove(&name);
                    changed.push(name);
                }
            }
        }
        for node in changed {
            self.refresh_node_devices(&node);
        }
    }

    /// A node's volume limits as its CSINode says (none without one).
    pub(super) fn volume_limits_of(&self, node: &str) -> BTreeMap<String, u32> {
        self.volumes
            .csi_limits
            .get(node)
            .cloned()
            .unwrap_or_default()
    }

    fn volume_keys(&self, kind: &str) -> Vec<String> {
        let c = &self.volumes.catalog;
        match kind {
            "PersistentVolumeClaim" => c.claims.keys().cloned().collect(),
            "PersistentVolume" => c.volumes.keys().cloned().collect(),
            _ => c.classes.keys().cloned().collect(),
        }
    }

    fn store_volume_object(&mut self, object: &Stored) {
        let c = &mut self.volumes.catalog;
        match object {
            Stored::Claim(claim) => {
                let key = object_key(&claim.metadata);
                let ctx = Ctx {
                    path: Path::new(live::API_SOURCE),
                    object: format!("PersistentVolumeClaim {key}"),
                };
                match ClaimInfo::read(&ctx, claim) {
                    Ok(info) => {
                        c.claims.insert(key, info);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "PersistentVolumeClaim cannot be read; its pods wait");
                        c.claims.remove(&key);
                    }
                }
            }
            Stored::Volume(pv) => {
                let ctx = Ctx {
                    path: Path::new(live::API_SOURCE),
                    object: format!("PersistentVolume {}", object.key()),
                };
                if let Err(e) = c.add_volume(&ctx, pv) {
                    tracing::warn!(error = %e, "PersistentVolume cannot be read; claims bound to it wait");
                    c.remove_volume(&object.key());
                }
            }
            Stored::Class(class) => c.add_class(class),
        }
    }

    fn remove_volume_object(&mut self, kind: &str, key: &str) {
        let c = &mut self.volumes.catalog;
        match kind {
            "PersistentVolumeClaim" => {
                c.claims.remove(key);
            }
            "PersistentVolume" => c.remove_volume(key),
            _ => {
                c.classes.remove(key);
            }
        }
    }

    /// Reads again the pods that wait in the queue or outside the engine on a claim the
    /// change touched: what their claims allow may have changed. A claim is touched by its
    /// own change, by its volume's and by its class's.
    fn reread_volume_pods(&mut self, changed: &Changed) {
        let catalog = &self.volumes.catalog;
        let touched = |namespace: &str, claim: &str| -> bool {
            let key = format!("{namespace}/{claim}");
            match changed {
                Changed::All => true,
                Changed::Claim(k) => *k == key,
                // Claims not bound yet may be bound to any volume.
                Changed::Volume(v) => catalog
                    .claims
                    .get(&key)
                    .is_some_and(|c| c.volume.is_none() || c.volume.as_ref() == Some(v)),
                Changed::Class(class) => catalog
                    .claims
                    .get(&key)
                    .is_some_and(|c| c.storage_class.as_ref() == Some(class)),
            }
        };
        let again: Vec<Arc<Pod>> = self
            .volumes
            .volume_pods
            .iter()
            .filter(|(key, pod)| {
                let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
                self.waits_for_a_node(key)
                    && pod.spec.as_ref().is_some_and(|spec| {
                        pod_claim_names(name, spec)
                            .iter()
                            .any(|(_, claim)| touched(namespace, claim))
                    })
            })
            .map(|(_, pod)| pod.clone())
            .collect();
        self.read_again(again);
    }

    /// Gives a pod that mounts claims its volume rules (and keeps the pod, to read it again
    /// when the storage objects change); `Err`: why it cannot be scheduled yet.
    pub(super) fn read_pod_volumes(
        &mut self,
        key: &str,
        pod: &Pod,
        spec: &mut PodSpec,
    ) -> Result<(), String> {
        let Some(pod_spec) = pod.spec.as_ref() else {
            return Ok(());
        };
        let mounts_claims = pod_spec.volumes.iter().flatten().any(|v| {
            v.persistent_volume_claim.is_some() || v.ephemeral.is_some() || v.csi.is_some()
        });
        if !mounts_claims {
            return Ok(());
        }
        // Only a pod still to be placed is read again; a bound pod's claims are settled.
        if pod_spec.node_name.is_none() {
            self.volumes
                .volume_pods
                .insert(key.to_string(), Arc::new(pod.clone()));
        } else {
            self.volumes.volume_pods.remove(key);
        }
        let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
        let rules = self.volumes.catalog.pod_rules(namespace, name, pod_spec)?;
        spec.constraints.volumes = rules.map(Box::new);
        Ok(())
    }

    /// The claims a bind of pod `id` binds first, as the engine bound them.
    pub(super) fn provision_writes(&self, id: PodId, namespace: &str) -> Vec<ProvisionWrite> {
        let spec = &self.scheduler.pod(id).spec;
        spec.constraints
            .volumes
            .iter()
            .flat_map(|v| v.unbound_claims())
            .map(|key| ProvisionWrite {
                namespace: namespace.to_string(),
                claim: key
                    .split_once('/')
                    .map(|(_, n)| n)
                    .unwrap_or(key)
                    .to_string(),
                volume: match self.scheduler.claim_binding(key).map(|b| &b.target) {
                    Some(ClaimTarget::Volume(volume)) => Some(volume.clone()),
                    _ => None,
                },
            })
            .collect()
    }
}

/// The event with its object wrapped.
fn stored<K>(event: Event<K>, wrap: impl Fn(K) -> Stored) -> Event<Stored> {
    match event {
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(wrap(o)),
        Event::Apply(o) => Event::Apply(wrap(o)),
        Event::Delete(o) => Event::Delete(wrap(o)),
        Event::InitDone => Event::InitDone,
    }
}

/// A storage object as the watch gave it.
enum Stored {
    Claim(Box<PersistentVolumeClaim>),
    Volume(Box<PersistentVolume>),
    Class(Box<StorageClass>),
}

impl Stored {
    fn changed(&self) -> Changed {
        match self {
            Stored::Claim(_) => Changed::Claim(self.key()),
            Stored::Volume(_) => Changed::Volume(self.key()),
            Stored::Class(_) => Changed::Class(self.key()),
        }
    }

    fn key(&self) -> String {
        match self {
            Stored::Claim(o) => object_key(&o.metadata),
            Stored::Volume(o) => object_key(&o.metadata),
            Stored::Class(o) => object_key(&o.metadata),
        }
    }
}
