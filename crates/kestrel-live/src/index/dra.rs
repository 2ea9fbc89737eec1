//! DRA objects from watches: DeviceClasses and ResourceSlices shape the nodes' devices;
//! ResourceClaims are what pods claim, and their status is the truth about what is
//! allocated (an allocation in a claim's status is held in the engine until it is gone,
//! whoever wrote it). A pod whose claims cannot be resolved yet (a template's claim not
//! created, a class missing) waits outside the engine with that reason and is read again
//! when the DRA objects change.

use super::{LiveIndex, PodState};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kestrel_core::{
    ClaimAllocation, DeviceClaim, DeviceResult, GpuAssignment, NodeId, NodeSpec, PodId, PodSpec,
};
use kestrel_objects::device_taint_rule::DeviceTaintRule;
use kestrel_objects::dra::{
    self, ClaimSource, DeviceClasses, ExtendedMapping, GpuBacking, SliceBook,
};
use kestrel_objects::fields::Ctx;
use kestrel_objects::live;
use kube::runtime::watcher::Event;
use serde_json::json;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// A watch event of a DRA kind.
#[derive(Debug)]
pub enum DraEvent {
    Class(Event<DeviceClass>),
    Slice(Event<ResourceSlice>),
    Claim(Event<ResourceClaim>),
    TaintRule(Event<DeviceTaintRule>),
}

/// What the index knows of DRA.
#[derive(Debug, Default)]
pub(super) struct DraBook {
    /// Per kind, the objects a relist in progress has listed so far: the ones it does not
    /// list were deleted while the watch was down.
    relisted: HashMap<&'static str, HashSet<String>>,
    classes: DeviceClasses,
    slices: SliceBook,
    /// `namespace/name` -> the claim as last seen.
    claims: HashMap<String, Arc<ResourceClaim>>,
    /// Nodes as their Node objects say, before their DRA devices are added.
    pub(super) node_bases: HashMap<String, NodeSpec>,
    /// Pods with claims (`namespace/name`), for reading them again.
    claim_pods: HashMap<String, Arc<Pod>>,
    /// Claim key -> the pods that name it (as far as their specs and statuses name them
    /// yet): the pods a claim's arrival or removal concerns, so that thousands of claims
    /// listed at a start do not each read every pod again.
    users: HashMap<String, BTreeSet<String>>,
    /// Pod key -> the claim keys it names, for taking it out of [`DraBook::users`].
    names: HashMap<String, Vec<String>>,
    /// The DeviceClass serving `nvidia.com/gpu` from DRA devices, as last chosen.
    backing: Option<GpuBacking>,
    /// Pending pods asking for `nvidia.com/gpu` (pod key): the requests of the claim
    /// written for them where a DRA device class serves it.
    extended: HashMap<String, ExtendedGpus>,
    /// Pod uid -> the name of the extended-resource claim made for it (by the claims'
    /// owner references): one left by a bind that failed is deleted before the next.
    extended_claims: HashMap<String, String>,
}

/// A pod's `nvidia.com/gpu` requests as the claim of a DRA-served node names them.
#[derive(Debug)]
pub(super) struct ExtendedGpus {
    requests: Vec<(String, u32)>,
    mappings: Vec<ExtendedMapping>,
}

impl DraBook {
    /// The pod `key` names these claims now (or is gone: none).
    fn set_names(&mut self, key: &str, claims: Vec<String>) {
        for old in self.names.remove(key).into_iter().flatten() {
            if let Some(users) = self.users.get_mut(&old) {
                users.remove(key);
                if users.is_empty() {
                    self.users.remove(&old);
                }
            }
        }
        for claim in &claims {
            self.users
                .entry(claim.clone())
                .or_default()
                .insert(key.to_string());
        }
        if !claims.is_empty() {
            self.names.insert(key.to_string(), claims);
        }
    }

    /// A pod is gone for good.
    pub(super) fn forget_pod(&mut self, key: &str) {
        self.claim_pods.remove(key);
        self.extended.remove(key);
        self.set_names(key, Vec::new());
    }
}

/// Why a pod's claims cannot be given to it yet.
pub(super) enum ClaimWait {
    /// A claim or class is missing (the pod is read again when they change).
    Waiting(String),
    /// The pod cannot be read with its claims.
    Invalid(kestrel_objects::live::ConvertError),
}

/// A claim status to write before a bind: the claim's allocation (when Kestrel allocates
/// it, with the [`DELETE_PROTECTION`] finalizer) and the pod among its consumers, on the
/// version of the claim last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimWrite {
    pub namespace: String,
    pub name: String,
    /// The whole claim with its new status, `metadata.resourceVersion` included: the API
    /// refuses it (409) if the claim changed since.
    pub object: String,
    /// The claim did not carry [`DELETE_PROTECTION`]: the object is written first (with it),
    /// then its status.
    pub adds_finalizer: bool,
}

/// The claim a bind writes for a pod's `nvidia.com/gpu` on a node where a DRA device class
/// serves it (as kube-scheduler writes it for extended resources backed by DRA), with the
/// pod's `status.extendedResourceClaimStatus` naming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtendedClaimWrite {
    /// The ResourceClaim to create (`metadata.generateName`, owned by the pod).
    pub claim: serde_json::Value,
    /// Its status then: the allocation and the pod reserved.
    pub status: serde_json::Value,
    /// `requestMappings` of the pod's `status.extendedResourceClaimStatus`.
    pub mappings: Vec<serde_json::Value>,
    /// A claim an earlier try made for the pod, deleted first: its devices may not be
    /// the ones chosen now.
    pub stale: Option<String>,
}

/// The annotation that marks the claim made for a pod's extended resources.
pub const EXTENDED_CLAIM_ANNOTATION: &str = "resource.kubernetes.io/extended-resource-claim";

/// The pod an extended-resource claim was made for (its controller owner).
fn extended_claim_owner(claim: &ResourceClaim) -> Option<&OwnerReference> {
    let marked = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(EXTENDED_CLAIM_ANNOTATION))
        .is_some_and(|v| v == "true");
    if !marked {
        return None;
    }
    claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "Pod" && o.controller == Some(true))
}

/// The finalizer an allocated claim carries while its allocation is in use.
pub const DELETE_PROTECTION: &str = "resource.kubernetes.io/delete-protection";

/// The keys (`namespace/name`) of the claims a pod names, in `spec.resourceClaims`
/// order; `Err` for one made from a template whose name the pod's status does not
/// give yet (or a spec that cannot be read), saying what the pod waits for.
fn claim_names(pod: &Pod) -> Vec<Result<String, String>> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let key = live::pod_key(pod);
    let ctx = Ctx {
        path: src(),
        object: format!("Pod {key}"),
    };
    let entries = match dra::pod_claims(&ctx, "spec", spec) {
        Ok(entries) => entries,
        Err(e) => return vec![Err(e.to_string())],
    };
    let namespace = key.split_once('/').map(|(n, _)| n).unwrap_or("default");
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref());
    entries
        .into_iter()
        .map(|(entry, source)| {
            let name = match source {
                ClaimSource::Claim(name) => name,
                ClaimSource::Template(template) => statuses
                    .into_iter()
                    .flatten()
                    .find(|s| s.name == entry)
                    .and_then(|s| s.resource_claim_name.clone())
                    .ok_or_else(|| {
                        format!(
                            "waiting for the ResourceClaim of pod claim {entry:?} (from \
                             ResourceClaimTemplate {namespace}/{template}) to be created by \
                             the resource claim controller"
                        )
                    })?,
            };
            Ok(format!("{namespace}/{name}"))
        })
        .collect()
}

fn src() -> &'static Path {
    Path::new(live::API_SOURCE)
}

fn object_key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    let name = meta.name.clone().unwrap_or_default();
    match &meta.namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name,
    }
}

impl LiveIndex {
    /// Applies a DRA watch event; relists drop the objects they no longer list.
    pub fn apply_dra(&mut self, event: DraEvent) {
        let kind = match &event {
            DraEvent::Class(_) => "DeviceClass",
            DraEvent::Slice(_) => "ResourceSlice",
            DraEvent::Claim(_) => "ResourceClaim",
            DraEvent::TaintRule(_) => "DeviceTaintRule",
        };
        macro_rules! dispatch {
            ($event:expr, $apply:expr, $delete:expr) => {
                match $event {
                    Event::Init => {
                        self.dra.relisted.insert(kind, HashSet::new());
                    }
                    Event::InitApply(o) | Event::Apply(o) => {
                        if let Some(listed) = self.dra.relisted.get_mut(kind) {
                            listed.insert(object_key(&o.metadata));
                        }
                        $apply(self, &o);
                    }
                    Event::Delete(o) => $delete(self, object_key(&o.metadata)),
                    Event::InitDone => {
                        let listed = self.dra.relisted.remove(kind).unwrap_or_default();
                        for key in self.dra_keys(kind) {
                            if !listed.contains(&key) {
                                $delete(self, key);
                            }
                        }
                    }
                }
            };
        }
        match event {
            DraEvent::Class(e) => dispatch!(
                e,
                |s: &mut Self, o: &DeviceClass| {
                    let name = o.metadata.name.clone().unwrap_or_default();
                    s.apply_device_class(&name, Some(o))
                },
                |s: &mut Self, key: String| s.apply_device_class(&key, None)
            ),
            DraEvent::Slice(e) => dispatch!(
                e,
                |s: &mut Self, o: &ResourceSlice| {
                    let name = o.metadata.name.clone().unwrap_or_default();
                    s.apply_resource_slice(&name, Some(o))
                },
                |s: &mut Self, key: String| s.apply_resource_slice(&key, None)
            ),
            DraEvent::Claim(e) => dispatch!(
                e,
                |s: &mut Self, o: &ResourceClaim| s.apply_resource_claim(o),
                |s: &mut Self, key: String| {
                    let (namespace, name) = key.split_once('/').unwrap_or(("default", &key));
                    let (namespace, name) = (namespace.to_string(), name.to_string());
                    s.delete_resource_claim(&namespace, &name)
                }
            ),
            DraEvent::TaintRule(e) => dispatch!(
                e,
                |s: &mut Self, o: &DeviceTaintRule| {
                    let name = o.metadata.name.clone().unwrap_or_default();
                    s.apply_device_taint_rule(&name, Some(o))
                },
                |s: &mut Self, key: String| s.apply_device_taint_rule(&key, None)
            ),
        }
    }

    /// The keys of the objects of a DRA kind the index holds.
    fn dra_keys(&self, kind: &str) -> Vec<String> {
        match kind {
            "DeviceClass" => self.dra.classes.names(),
            "ResourceSlice" => self.dra.slices.names(),
            "DeviceTaintRule" => self.dra.slices.taint_rule_names(),
            _ => self.dra.claims.keys().cloned().collect(),
        }
    }

    /// A DeviceClass was added, changed (`Some`) or deleted.
    pub fn apply_device_class(&mut self, name: &str, class: Option<&DeviceClass>) {
        match class {
            Some(class) => {
                let ctx = Ctx {
                    path: src(),
                    object: format!("DeviceClass {name}"),
                };
                if let Err(e) = self.dra.classes.insert(&ctx, class) {
                    tracing::warn!(error = %e, "DeviceClass cannot be used; claims naming it wait");
                }
            }
            None => self.dra.classes.remove(name),
        }
        self.refresh_gpu_backing();
        self.reread_claim_pods(None, |_| true);
    }

    /// Chooses the class serving `nvidia.com/gpu` again; when it changed, every node
    /// with DRA devices is given the engine again (served or not).
    fn refresh_gpu_backing(&mut self) {
        let (backing, warning) = self.dra.classes.gpu_backing();
        if backing == self.dra.backing {
            return;
        }
        if let Some(warning) = warning {
            tracing::warn!("{warning}");
        }
        self.dra.backing = backing;
        let nodes: Vec<String> = self
            .dra
            .slices
            .nodes()
            .into_iter()
            .map(String::from)
            .collect();
        for node in nodes {
            self.refresh_node_devices(&node);
        }
    }

    /// A ResourceSlice was added, changed (`Some`) or deleted: its node's devices change.
    pub fn apply_resource_slice(&mut self, name: &str, slice: Option<&ResourceSlice>) {
        // Only the nodes of the slice's pool, before and after: refreshing every node for
        // each slice made a start with 1,000 slices take minutes.
        let mut nodes = self.dra.slices.nodes_of_pool_of(name);
        match slice {
            Some(slice) => {
                let ctx = Ctx {
                    path: src(),
                    object: format!("ResourceSlice {name}"),
                };
                if let Err(e) = self.dra.slices.insert(&ctx, slice) {
                    tracing::warn!(error = %e, "ResourceSlice cannot be read; its devices are not used");
                    self.dra.slices.remove(name);
                }
            }
            None => self.dra.slices.remove(name),
        }
        nodes.extend(self.dra.slices.nodes_of_pool_of(name));
        for node in nodes {
            self.refresh_node_devices(&node);
        }
    }

    /// A DeviceTaintRule was added, changed (`Some`) or deleted: the devices it names, before
    /// and after, change their taints.
    pub fn apply_device_taint_rule(&mut self, name: &str, rule: Option<&DeviceTaintRule>) {
        let mut nodes = self.dra.slices.nodes_of_taint_rule(name);
        match rule {
            Some(rule) => {
                let ctx = Ctx {
                    path: src(),
                    object: format!("DeviceTaintRule {name}"),
                };
                if let Err(e) = self.dra.slices.insert_taint_rule(&ctx, rule) {
                    tracing::warn!(error = %e, "DeviceTaintRule cannot be read; its taint is not applied");
                    self.dra.slices.remove_taint_rule(name);
                }
            }
            None => self.dra.slices.remove_taint_rule(name),
        }
        nodes.extend(self.dra.slices.nodes_of_taint_rule(name));
        for node in nodes {
            self.refresh_node_devices(&node);
        }
    }

    /// Gives the engine a node's spec with its current DRA devices and CSI volume limits.
    pub(super) fn refresh_node_devices(&mut self, node: &str) {
        let Some(spec) = self.dra.node_bases.get(node).cloned() else {
            return;
        };
        let spec = self.devices_added(spec);
        if let Err(e) = self.scheduler.update_node(spec) {
            tracing::warn!(node, error = %e, "node's DRA devices cannot be used");
        }
    }

    /// A node's spec as its Node object says, with its DRA devices and CSI volume limits
    /// added.
    pub(super) fn with_dra_devices(&mut self, spec: NodeSpec) -> NodeSpec {
        self.dra.node_bases.insert(spec.name.clone(), spec.clone());
        self.devices_added(spec)
    }

    /// `spec` (as its Node object says) with the node's CSI volume limits, its published
    /// GPUs, and whether they serve `nvidia.com/gpu`.
    fn devices_added(&self, mut spec: NodeSpec) -> NodeSpec {
        spec.volume_limits = self.volume_limits_of(&spec.name);
        let gpus = self.dra.slices.gpus_of(&spec.name);
        if let Some(warning) = dra::attach_gpus(&mut spec, &gpus) {
            tracing::warn!(node = %spec.name, "{warning}");
        }
        GpuBacking::apply(self.dra.backing.as_ref(), &mut spec);
        spec
    }

    /// A ResourceClaim was added or changed: its allocation is held (or released), and pods
    /// waiting for it are read again.
    pub fn apply_resource_claim(&mut self, claim: &ResourceClaim) {
        let key = format!(
            "{}/{}",
            claim.metadata.namespace.as_deref().unwrap_or("default"),
            claim.metadata.name.as_deref().unwrap_or_default()
        );
        let ctx = Ctx {
            path: src(),
            object: format!("ResourceClaim {key}"),
        };
        match dra::claim_allocation(&ctx, claim) {
            Ok(Some(allocation)) => self.scheduler.hold_claim(&key, allocation),
            Ok(None) => self.scheduler.release_claim(&key),
            Err(e) => tracing::warn!(error = %e, "claim's allocation cannot be read"),
        }
        if let Some(owner) = extended_claim_owner(claim) {
            let name = claim.metadata.name.clone().unwrap_or_default();
            self.dra.extended_claims.insert(owner.uid.clone(), name);
            self.follow_extended_claim(claim, owner);
        }
        let new = !self.dra.claims.contains_key(&key);
        self.dra.claims.insert(key.clone(), Arc::new(claim.clone()));
        if new {
            self.reread_claim_pods(Some(&key), |t| matches!(t, PodState::Invalid(_)));
        }
    }

    /// A bound pod's extended-resource claim came (or changed) after the pod: the pod
    /// holds the GPUs its claim names, not those it was counted on until then.
    fn follow_extended_claim(&mut self, claim: &ResourceClaim, owner: &OwnerReference) {
        let namespace = claim.metadata.namespace.as_deref().unwrap_or("default");
        let key = format!("{namespace}/{}", owner.name);
        let Some(t) = self.pods.get(&key).filter(|t| t.uid == owner.uid) else {
            return;
        };
        let PodState::Bound { id, node } = &t.state else {
            return;
        };
        let (id, node) = (*id, node.clone());
        if let Some(gpus) = self.claim_gpus(claim, &node) {
            if self.scheduler.move_bound_gpus(id, &gpus) {
                tracing::info!(pod = %key, ?gpus, "counted on the GPUs its claim names");
            }
        }
    }

    /// A ResourceClaim was deleted: its devices are free once no pod uses them.
    pub fn delete_resource_claim(&mut self, namespace: &str, name: &str) {
        let key = format!("{namespace}/{name}");
        self.scheduler.release_claim(&key);
        if let Some(claim) = self.dra.claims.remove(&key) {
            if let Some(owner) = extended_claim_owner(&claim) {
                if self
                    .dra
                    .extended_claims
                    .get(&owner.uid)
                    .is_some_and(|n| n == name)
                {
                    self.dra.extended_claims.remove(&owner.uid);
                }
            }
        }
        self.reread_claim_pods(Some(&key), |_| true);
    }

    /// The GPUs of `node` behind the devices of the extended-resource claim a bound pod's
    /// status names (a pod another scheduler bound: Kestrel's own carry their indices).
    pub(super) fn extended_claim_gpus(&self, pod: &Pod, node: &str) -> Option<GpuAssignment> {
        let name = &pod
            .status
            .as_ref()?
            .extended_resource_claim_status
            .as_ref()?
            .resource_claim_name;
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let claim = self.dra.claims.get(&format!("{namespace}/{name}"))?;
        self.claim_gpus(claim, node)
    }

    /// The GPUs of `node` behind the devices a claim's allocation names.
    fn claim_gpus(&self, claim: &ResourceClaim, node: &str) -> Option<GpuAssignment> {
        let results = claim
            .status
            .as_ref()?
            .allocation
            .as_ref()?
            .devices
            .as_ref()?
            .results
            .as_ref()?;
        let id = self.scheduler.cluster().id_of(node)?;
        let spec = &self.scheduler.cluster().node(id).spec;
        let results: Vec<DeviceResult> = results
            .iter()
            .map(|r| DeviceResult {
                request: r.request.clone(),
                driver: r.driver.clone(),
                pool: r.pool.clone(),
                device: r.device.clone(),
            })
            .collect();
        spec.allocation_assignment(&results)
    }

    /// Keeps the `nvidia.com/gpu` requests of a pending pod `key`, for the claim its bind
    /// writes on a node where a DRA device class serves them.
    pub(super) fn note_extended_gpus(&mut self, key: &str, pod: &Pod) {
        let requests = pod
            .spec
            .as_ref()
            .map(|spec| dra::extended_gpu_requests(spec, kestrel_core::GPU_RESOURCE))
            .filter(|(requests, _)| !requests.is_empty());
        match requests {
            Some((requests, mappings)) => {
                let gpus = ExtendedGpus { requests, mappings };
                self.dra.extended.insert(key.to_string(), gpus);
            }
            None => {
                self.dra.extended.remove(key);
            }
        }
    }

    /// The extended-resource claim a bind of pod `key` (no claims of its own, `gpus` on
    /// `node`) writes first, when a DRA device class serves `nvidia.com/gpu` there: the
    /// devices behind the GPUs the engine chose, over the claim's requests in order.
    pub(super) fn extended_claim_write(
        &self,
        key: &str,
        uid: &str,
        node: NodeId,
        gpus: &GpuAssignment,
    ) -> Option<ExtendedClaimWrite> {
        let spec = &self.scheduler.cluster().node(node).spec;
        let class = spec.gpu_extended_class.as_ref()?;
        let GpuAssignment::Whole(indices) = gpus else {
            return None;
        };
        let wanted = self.dra.extended.get(key)?;
        let (namespace, name) = key.split_once('/')?;
        let mut devices = indices
            .iter()
            .filter_map(|i| spec.gpus.iter().find(|g| g.index == *i)?.dra.clone());
        let mut results = Vec::new();
        let mut requests = Vec::new();
        for (request, count) in &wanted.requests {
            requests.push(json!({"name": request, "exactly": {
                "deviceClassName": class, "allocationMode": "ExactCount", "count": count}}));
            for _ in 0..*count {
                let Some(d) = devices.next() else {
                    tracing::warn!(
                        pod = key,
                        "the GPUs chosen are fewer than the claim's requests"
                    );
                    return None;
                };
                results.push(DeviceResult {
                    request: request.clone(),
                    driver: d.driver.clone(),
                    pool: d.pool.clone(),
                    device: d.name.clone(),
                });
            }
        }
        // As kube-scheduler 1.37 writes it (compared in live_dra): no blockOwnerDeletion
        // on the owner reference, the finalizer from the start.
        let claim = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {
                "namespace": namespace,
                "generateName": format!("{name}-extended-resources-"),
                "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid,
                                     "controller": true}],
                "finalizers": [DELETE_PROTECTION],
            },
            "spec": {"devices": {"requests": requests}},
        });
        let allocation = ClaimAllocation {
            node: spec.name.clone(),
            results,
        };
        let status = json!({
            "allocation": allocation_json(&allocation),
            "reservedFor": [{"resource": "pods", "name": name, "uid": uid}],
        });
        let mappings = wanted
            .mappings
            .iter()
            .map(|m| {
                json!({"containerName": m.container, "resourceName": kestrel_core::GPU_RESOURCE,
                            "requestName": m.request})
            })
            .collect();
        Some(ExtendedClaimWrite {
            claim,
            status,
            mappings,
            stale: self.dra.extended_claims.get(uid).cloned(),
        })
    }

    /// Reads again the pods with claims (those naming `claim`, when given) that wait in the
    /// queue or outside the engine and whose state `which` selects.
    fn reread_claim_pods(&mut self, claim: Option<&str>, which: impl Fn(&PodState) -> bool) {
        let candidates: Vec<&String> = match claim {
            Some(claim) => self.dra.users.get(claim).into_iter().flatten().collect(),
            None => self.dra.claim_pods.keys().collect(),
        };
        let again: Vec<Arc<Pod>> = candidates
            .into_iter()
            .filter(|key| {
                self.waits_for_a_node(key)
                    && self.pods.get(key.as_str()).is_some_and(|t| which(&t.state))
            })
            .filter_map(|key| self.dra.claim_pods.get(key).cloned())
            .collect();
        self.read_again(again);
    }

    /// Gives a pod with `spec.resourceClaims` its claims (and keeps the pod, to read it
    /// again when they change); a pod without claims is left as it is.
    pub(super) fn read_pod_claims(
        &mut self,
        key: &str,
        pod: &Pod,
        spec: &mut PodSpec,
    ) -> Result<(), ClaimWait> {
        let has_claims = pod
            .spec
            .as_ref()
            .and_then(|s| s.resource_claims.as_ref())
            .is_some_and(|c| !c.is_empty());
        if !has_claims {
            return Ok(());
        }
        self.dra
            .claim_pods
            .insert(key.to_string(), Arc::new(pod.clone()));
        let names = claim_names(pod);
        let known = names
            .iter()
            .filter_map(|n| n.as_ref().ok().cloned())
            .collect();
        self.dra.set_names(key, known);
        let claims = self.claims_named(names).map_err(ClaimWait::Waiting)?;
        let ctx = Ctx {
            path: src(),
            object: format!("Pod {key}"),
        };
        dra::set_pod_claims(&ctx, "spec", spec, claims).map_err(|e| ClaimWait::Invalid(e.into()))
    }

    /// The claims named (see [`claim_names`]), resolved against the claims and classes
    /// seen; `Err`: why the pod waits (in kube-scheduler's words where it has some).
    fn claims_named(&self, names: Vec<Result<String, String>>) -> Result<Vec<DeviceClaim>, String> {
        let mut out = Vec::new();
        for claim_key in names {
            let claim_key = claim_key?;
            let Some(claim) = self.dra.claims.get(&claim_key) else {
                return Err(format!(
                    "waiting for ResourceClaim {claim_key} to be created"
                ));
            };
            let cctx = Ctx {
                path: src(),
                object: format!("ResourceClaim {claim_key}"),
            };
            let mut read = dra::read_claim_spec(
                &cctx,
                "spec",
                claim_key,
                claim.spec.as_ref(),
                &self.dra.classes,
            )
            .map_err(|e| e.to_string())?;
            read.allocation = dra::claim_allocation(&cctx, claim).map_err(|e| e.to_string())?;
            out.push(read);
        }
        Ok(out)
    }

    /// The claim writes a bind of pod `id` (`namespace/name`, `uid`) needs first: for each
    /// of its claims, the allocation the engine chose (unless the claim has one) and the pod
    /// added to `status.reservedFor` (unless it is there).
    pub(super) fn claim_writes(&self, id: PodId, name: &str, uid: &str) -> Vec<ClaimWrite> {
        let mut out = Vec::new();
        for (key, allocation) in self.scheduler.pod_claim_allocations(id) {
            let Some(claim) = self.dra.claims.get(&key) else {
                continue;
            };
            if let Some(write) = claim_write(claim, &allocation, name, uid) {
                out.push(write);
            }
        }
        out
    }
}

/// A claim's `status.allocation` as the API takes it: the devices, and the node they are on.
fn allocation_json(allocation: &ClaimAllocation) -> serde_json::Value {
    let results: Vec<serde_json::Value> = allocation
        .results
        .iter()
        .map(|r| json!({"request": r.request, "driver": r.driver, "pool": r.pool, "device": r.device}))
        .collect();
    json!({
        "devices": {"results": results},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [allocation.node]}
        ]}]},
    })
}

/// The claim with `allocation` in its status (when it has none) and the pod reserved.
fn claim_write(
    claim: &ResourceClaim,
    allocation: &ClaimAllocation,
    pod: &str,
    uid: &str,
) -> Option<ClaimWrite> {
    let mut object = serde_json::to_value(claim).ok()?;
    let status = object
        .as_object_mut()?
        .entry("status")
        .or_insert_with(|| json!({}));
    let mut changed = false;
    let fresh = status.get("allocation").is_none_or(|a| a.is_null());
    if fresh {
        status["allocation"] = allocation_json(allocation);
        changed = true;
    }
    let reserved = status
        .as_object_mut()?
        .entry("reservedFor")
        .or_insert_with(|| json!([]));
    if reserved.is_null() {
        *reserved = json!([]);
    }
    let list = reserved.as_array_mut()?;
    if !list.iter().any(|r| r["uid"] == uid) {
        list.push(json!({"resource": "pods", "name": pod, "uid": uid}));
        changed = true;
    }
    let had_finalizer = claim
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == DELETE_PROTECTION);
    if fresh {
        // As kube-scheduler does: the claim controller deallocates (and lets go) only
        // claims that carry this finalizer, and the claim cannot be deleted while allocated.
        let finalizers = object["metadata"]
            .as_object_mut()?
            .entry("finalizers")
            .or_insert_with(|| json!([]));
        if finalizers.is_null() {
            *finalizers = json!([]);
        }
        let list = finalizers.as_array_mut()?;
        if !list.iter().any(|f| f == DELETE_PROTECTION) {
            list.push(json!(DELETE_PROTECTION));
        }
    }
    changed.then(|| ClaimWrite {
        namespace: claim.metadata.namespace.clone().unwrap_or_default(),
        name: claim.metadata.name.clone().unwrap_or_default(),
        object: object.to_string(),
        adds_finalizer: fresh && !had_finalizer,
    })
}
