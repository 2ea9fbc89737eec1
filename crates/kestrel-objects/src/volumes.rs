//! A pod's PersistentVolumeClaims, resolved against the claims, PersistentVolumes and
//! StorageClasses known (from workload files or from watches), into the engine's
//! [`VolumeRules`] — or into why the pod cannot be scheduled yet, in kube-scheduler's
//! words. One reader for the simulator and the live scheduler.
//!
//! Claims come from `volumes[].persistentVolumeClaim.claimName` and from generic
//! ephemeral volumes (`volumes[].ephemeral`, whose claim is `<pod>-<volume>`, made by the
//! ephemeral volume controller).

use crate::fields::Ctx;
use crate::inter_pod::label_selector;
use crate::LoadError;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1::CSINode;
use k8s_openapi::api::storage::v1::StorageClass;
use kestrel_core::{
    selector_matches, AttachedVolume, LabelSelector, NodeSelectorTerm, StaticVolume, VolumeRules,
    VolumeTopology,
};
use std::collections::BTreeMap;

/// The StorageClass annotation that makes a class the default for claims naming none.
pub const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";
/// The claim annotation naming the node a volume is to be provisioned for.
pub const SELECTED_NODE_ANNOTATION: &str = "volume.kubernetes.io/selected-node";
/// The annotation the volume controller puts on a claim once its binding is complete.
pub const BIND_COMPLETED_ANNOTATION: &str = "pv.kubernetes.io/bind-completed";
/// The annotation kube-scheduler and the volume controller put on a PersistentVolume they
/// wrote a claim on.
pub const BOUND_BY_CONTROLLER_ANNOTATION: &str = "pv.kubernetes.io/bound-by-controller";
/// The provisioner of StorageClasses whose volumes are created by hand (local disks).
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// A claim as scheduling reads it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClaimInfo {
    /// `metadata.uid`: a volume pre-bound to the claim by uid names it.
    pub uid: Option<String>,
    /// `spec.volumeName`: the PersistentVolume it is bound (or pre-bound) to.
    pub volume: Option<String>,
    /// The binding is complete ([`BIND_COMPLETED_ANNOTATION`]); a claim pre-bound to a
    /// volume waits for it like an unbound claim with `Immediate` binding.
    pub bind_completed: bool,
    pub storage_class: Option<String>,
    /// `spec.accessModes`.
    pub access_modes: Vec<String>,
    /// `spec.volumeMode` is `Block`.
    pub block: bool,
    /// `spec.resources.requests.storage` in bytes.
    pub request: i64,
    /// `spec.selector`: the volumes it may be bound to carry these labels.
    pub selector: Option<LabelSelector>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The [`SELECTED_NODE_ANNOTATION`].
    pub selected_node: Option<String>,
}

impl ClaimInfo {
    /// Reads a claim; a size or selector that does not parse is an error naming the field
    /// (the API server refuses them too).
    pub fn read(ctx: &Ctx, claim: &core::PersistentVolumeClaim) -> Result<ClaimInfo, LoadError> {
        let spec = claim.spec.as_ref();
        let annotations = claim.metadata.annotations.as_ref();
        let request = match spec
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
        {
            Some(q) => bytes(ctx, "spec.resources.requests.storage", &q.0)?,
            None => 0,
        };
        let selector = match spec.and_then(|s| s.selector.as_ref()) {
            Some(selector) => Some(label_selector(ctx, "spec.selector", selector)?),
            None => None,
        };
        Ok(ClaimInfo {
            uid: claim.metadata.uid.clone(),
            bind_completed: annotations.is_some_and(|a| a.contains_key(BIND_COMPLETED_ANNOTATION)),
            volume: spec
                .and_then(|s| s.volume_name.clone())
                .filter(|v| !v.is_empty()),
            storage_class: spec.and_then(|s| s.storage_class_name.clone()),
            access_modes: spec
                .and_then(|s| s.access_modes.clone())
                .unwrap_or_default(),
            block: spec.and_then(|s| s.volume_mode.as_deref()) == Some("Block"),
            request,
            selector,
            deleting: claim.metadata.deletion_timestamp.is_some(),
            selected_node: annotations.and_then(|a| a.get(SELECTED_NODE_ANNOTATION).cloned()),
        })
    }

    /// `ReadWriteOncePod` among its access modes.
    pub fn read_write_once_pod(&self) -> bool {
        self.access_modes.iter().any(|m| m == "ReadWriteOncePod")
    }
}

/// A PersistentVolume as scheduling reads it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct VolumeInfo {
    /// Its required node affinity (`None`: any node).
    pub terms: Option<Vec<NodeSelectorTerm>>,
    /// The CSI driver that attaches it (`spec.csi.driver`).
    pub driver: Option<String>,
    /// `spec.storageClassName` (empty: none).
    pub class: String,
    /// `spec.capacity.storage` in bytes.
    pub capacity: i64,
    pub access_modes: Vec<String>,
    /// `spec.volumeMode` is `Block`.
    pub block: bool,
    /// `spec.claimRef`: the claim (`namespace/name`) it is bound or pre-bound to, and the
    /// claim's uid when the reference names one.
    pub claim_ref: Option<(String, Option<String>)>,
    /// `status.phase` is `Available`, or not written (workload files, where the
    /// simulator stands in for the volume controller).
    pub available: bool,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    pub labels: BTreeMap<String, String>,
}

impl VolumeInfo {
    /// A volume made for one claim, usable within `terms`.
    pub fn provisioned(terms: Option<Vec<NodeSelectorTerm>>) -> VolumeInfo {
        VolumeInfo {
            terms,
            ..VolumeInfo::default()
        }
    }

    /// Whether it is bound or pre-bound to claim `key` with uid `uid`.
    fn bound_to(&self, key: &str, uid: Option<&str>) -> bool {
        self.claim_ref.as_ref().is_some_and(|(k, ref_uid)| {
            k == key && (ref_uid.is_none() || ref_uid.as_deref() == uid)
        })
    }
}

/// The CSI driver an in-tree cloud disk migrated to, and the disk it names, for a
/// PersistentVolume's spec or a pod's inline volume (their fields have the same names).
/// Kubernetes 1.37 runs every in-tree cloud disk through its CSI driver, and kube-scheduler
/// counts such volumes against that driver's limit.
macro_rules! migrated_disk {
    ($source:expr) => {{
        let s = $source;
        if let Some(d) = &s.aws_elastic_block_store {
            Some(("ebs.csi.aws.com", d.volume_id.clone()))
        } else if let Some(d) = &s.gce_persistent_disk {
            Some(("pd.csi.storage.gke.io", d.pd_name.clone()))
        } else if let Some(d) = &s.azure_disk {
            Some(("disk.csi.azure.com", d.disk_uri.clone()))
        } else if let Some(d) = &s.azure_file {
            Some(("file.csi.azure.com", d.share_name.clone()))
        } else if let Some(d) = &s.cinder {
            Some(("cinder.csi.openstack.org", d.volume_id.clone()))
        } else if let Some(d) = &s.vsphere_volume {
            Some(("csi.vsphere.vmware.com", d.volume_path.clone()))
        } else if let Some(d) = &s.portworx_volume {
            Some(("pxd.portworx.com", d.volume_id.clone()))
        } else {
            None
        }
    }};
}

fn migrated_volume(spec: &core::PersistentVolumeSpec) -> Option<(&'static str, String)> {
    migrated_disk!(spec)
}

fn migrated_inline_volume(v: &core::Volume) -> Option<(&'static str, String)> {
    migrated_disk!(v)
}

/// A quantity of bytes at `field`.
fn bytes(ctx: &Ctx, field: &str, quantity: &str) -> Result<i64, LoadError> {
    kestrel_core::parse_quantity(quantity, 1)
        .map_err(|e| ctx.err(field, format!("{e}; write a size such as 10Gi")))
}

/// A StorageClass as scheduling reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassInfo {
    pub wait_for_first_consumer: bool,
    pub provisioner: String,
    /// `allowedTopologies` as node selector terms (`None`: anywhere).
    pub allowed: Option<Vec<NodeSelectorTerm>>,
    pub default: bool,
}

/// The claims, volumes and classes a pod's volumes resolve against.
#[derive(Debug, Clone, Default)]
pub struct VolumeCatalog {
    /// `namespace/name` -> claim.
    pub claims: BTreeMap<String, ClaimInfo>,
    /// PersistentVolume name -> the volume.
    pub volumes: BTreeMap<String, VolumeInfo>,
    pub classes: BTreeMap<String, ClassInfo>,
}

/// A CSINode's per-driver volume limits (`spec.drivers[].allocatable.count`), for the node
/// of the same name; drivers without a count set no limit.
pub fn csi_limits(node: &CSINode) -> BTreeMap<String, u32> {
    node.spec
        .drivers
        .iter()
        .filter_map(|d| {
            let count = d.allocatable.as_ref()?.count?;
            Some((d.name.clone(), u32::try_from(count).unwrap_or(0)))
        })
        .collect()
}

/// The claims a pod spec names: (pod volume name, claim name).
pub fn pod_claim_names(pod_name: &str, spec: &core::PodSpec) -> Vec<(String, String)> {
    spec.volumes
        .iter()
        .flatten()
        .filter_map(|v| {
            if let Some(pvc) = &v.persistent_volume_claim {
                Some((v.name.clone(), pvc.claim_name.clone()))
            } else {
                v.ephemeral
                    .as_ref()
                    .map(|_| (v.name.clone(), format!("{pod_name}-{}", v.name)))
            }
        })
        .collect()
}

impl VolumeCatalog {
    /// Reads a PersistentVolume; a node affinity that does not parse is an error naming
    /// the field.
    pub fn add_volume(&mut self, ctx: &Ctx, pv: &core::PersistentVolume) -> Result<(), LoadError> {
        let name = pv.metadata.name.clone().unwrap_or_default();
        let terms = match pv
            .spec
            .as_ref()
            .and_then(|s| s.node_affinity.as_ref())
            .and_then(|a| a.required.as_ref())
        {
            Some(selector) => Some(
                selector
                    .node_selector_terms
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        ctx.term(
                            &format!("spec.nodeAffinity.required.nodeSelectorTerms[{i}]"),
                            t,
                        )
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            None => None,
        };
        let spec = pv.spec.as_ref();
        let capacity = match spec
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage"))
        {
            Some(q) => bytes(ctx, "spec.capacity.storage", &q.0)?,
            None => 0,
        };
        let claim_ref = spec.and_then(|s| s.claim_ref.as_ref()).map(|r| {
            (
                format!(
                    "{}/{}",
                    r.namespace.as_deref().unwrap_or("default"),
                    r.name.as_deref().unwrap_or_default()
                ),
                r.uid.clone().filter(|u| !u.is_empty()),
            )
        });
        let volume = VolumeInfo {
            terms,
            driver: spec.and_then(|s| {
                s.csi
                    .as_ref()
                    .map(|c| c.driver.clone())
                    .or_else(|| migrated_volume(s).map(|(driver, _)| driver.to_string()))
            }),
            class: spec
                .and_then(|s| s.storage_class_name.clone())
                .unwrap_or_default(),
            capacity,
            access_modes: spec
                .and_then(|s| s.access_modes.clone())
                .unwrap_or_default(),
            block: spec.and_then(|s| s.volume_mode.as_deref()) == Some("Block"),
            claim_ref,
            available: pv
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_none_or(|p| p == "Available"),
            deleting: pv.metadata.deletion_timestamp.is_some(),
            labels: pv.metadata.labels.clone().unwrap_or_default(),
        };
        self.volumes.insert(name, volume);
        Ok(())
    }

    /// Forgets a PersistentVolume.
    pub fn remove_volume(&mut self, name: &str) {
        self.volumes.remove(name);
    }

    /// The volumes claim `key` may be bound to, smallest first, as kube-scheduler's volume
    /// binding finds them: of the volumes large enough, in its volume mode and not being
    /// deleted, one bound or pre-bound to the claim alone; else those of the claim's class
    /// that are available and bound to no claim, that its selector and access modes accept.
    pub fn volumes_for(&self, key: &str, claim: &ClaimInfo, class: &str) -> Vec<StaticVolume> {
        let fits =
            |v: &VolumeInfo| v.capacity >= claim.request && v.block == claim.block && !v.deleting;
        let as_static = |(name, v): (&String, &VolumeInfo)| StaticVolume {
            name: name.clone(),
            terms: v.terms.clone(),
        };
        if let Some(own) = self
            .volumes
            .iter()
            .find(|(_, v)| fits(v) && v.bound_to(key, claim.uid.as_deref()))
        {
            return vec![as_static(own)];
        }
        let mut matching: Vec<(&String, &VolumeInfo)> = self
            .volumes
            .iter()
            .filter(|(_, v)| {
                fits(v)
                    && v.available
                    && v.claim_ref.is_none()
                    && v.class == class
                    && claim
                        .selector
                        .as_ref()
                        .is_none_or(|s| selector_matches(s, &v.labels))
                    && claim
                        .access_modes
                        .iter()
                        .all(|m| v.access_modes.contains(m))
            })
            .collect();
        matching.sort_by_key(|(name, v)| (v.capacity, *name));
        matching.into_iter().map(as_static).collect()
    }

    /// Reads a StorageClass; `allowedTopologies` become node selector terms.
    pub fn add_class(&mut self, sc: &StorageClass) {
        let name = sc.metadata.name.clone().unwrap_or_default();
        let allowed = sc
            .allowed_topologies
            .as_ref()
            .filter(|t| !t.is_empty())
            .map(|terms| {
                terms
                    .iter()
                    .map(|t| NodeSelectorTerm {
                        match_expressions: t
                            .match_label_expressions
                            .iter()
                            .flatten()
                            .map(|e| kestrel_core::Requirement {
                                key: e.key.clone(),
                                operator: kestrel_core::SelectorOperator::In,
                                values: e.values.clone(),
                            })
                            .collect(),
                        match_fields: Vec::new(),
                    })
                    .collect()
            });
        let default = sc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
            .is_some_and(|v| v == "true");
        self.classes.insert(
            name,
            ClassInfo {
                wait_for_first_consumer: sc.volume_binding_mode.as_deref()
                    == Some("WaitForFirstConsumer"),
                provisioner: sc.provisioner.clone(),
                allowed,
                default,
            },
        );
    }

    /// The class a claim uses: the one it names, else the default class (as the API server
    /// fills it in when the claim is created).
    fn class_of(&self, claim: &ClaimInfo) -> Option<(&str, &ClassInfo)> {
        match &claim.storage_class {
            Some(name) if !name.is_empty() => self
                .classes
                .get_key_value(name)
                .map(|(k, v)| (k.as_str(), v)),
            Some(_) => None,
            None => self
                .classes
                .iter()
                .find(|(_, c)| c.default)
                .map(|(k, v)| (k.as_str(), v)),
        }
    }

    /// The rules a pod's claims make (`None`: it has none), or why it cannot be scheduled
    /// yet, in kube-scheduler's words.
    pub fn pod_rules(
        &self,
        namespace: &str,
        pod_name: &str,
        spec: &core::PodSpec,
    ) -> Result<Option<VolumeRules>, String> {
        let names = pod_claim_names(pod_name, spec);
        let mut rules = VolumeRules::default();
        // Claims to bind, with their sizes: kube-scheduler binds the smallest first.
        let mut unbound: Vec<(i64, VolumeTopology)> = Vec::new();
        // Inline CSI volumes are attached too, each its own; inline in-tree disks count
        // under the CSI driver they migrated to, by the disk they name.
        for v in spec.volumes.iter().flatten() {
            if let Some(csi) = &v.csi {
                rules.attach.push(AttachedVolume {
                    driver: csi.driver.clone(),
                    volume: format!("{namespace}/{pod_name}/{}", v.name),
                });
            } else if let Some((driver, disk)) = migrated_inline_volume(v) {
                rules.attach.push(AttachedVolume {
                    driver: driver.to_string(),
                    volume: disk,
                });
            }
        }
        for (_, name) in names {
            if name.contains('/') {
                return Err(format!(
                    "persistentVolumeClaim.claimName \"{name}\" is not a claim name: a pod \
                     mounts claims of its own namespace only; write the claim's name alone and \
                     create the claim in namespace {namespace}"
                ));
            }
            let key = format!("{namespace}/{name}");
            if spec
                .volumes
                .iter()
                .flatten()
                .any(|v| v.ephemeral.is_some() && name == format!("{pod_name}-{}", v.name))
            {
                rules.own_claims.push(key.clone());
            }
            let Some(claim) = self.claims.get(&key) else {
                return Err(format!("persistentvolumeclaim \"{name}\" not found"));
            };
            if claim.deleting {
                return Err(format!("persistentvolumeclaim \"{name}\" is being deleted"));
            }
            if claim.read_write_once_pod() {
                rules.exclusive.push(key.clone());
            }
            if let Some(volume) = &claim.volume {
                if !claim.bind_completed {
                    return Err("pod has unbound immediate PersistentVolumeClaims".to_string());
                }
                let Some(pv) = self.volumes.get(volume) else {
                    return Err(
                        "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
                            .to_string(),
                    );
                };
                if let Some(driver) = &pv.driver {
                    rules.attach.push(AttachedVolume {
                        driver: driver.clone(),
                        volume: volume.clone(),
                    });
                }
                if pv.terms.is_some() {
                    rules
                        .topology
                        .push(VolumeTopology::bound(key, pv.terms.clone()));
                }
                continue;
            }
            match self.class_of(claim) {
                Some((class_name, class)) if class.wait_for_first_consumer => {
                    let volumes = self.volumes_for(&key, claim, class_name);
                    let provisioner = class.provisioner != NO_PROVISIONER;
                    // A node already selected for it is the only one the provisioner will
                    // use (it may be creating the volume there).
                    let terms = match &claim.selected_node {
                        Some(node) if provisioner => Some(vec![NodeSelectorTerm::node_named(node)]),
                        _ => class.allowed.clone(),
                    };
                    if provisioner {
                        // Counted against the provisioner's limit, as the volume it will be.
                        rules.attach.push(AttachedVolume {
                            driver: class.provisioner.clone(),
                            volume: key.clone(),
                        });
                    }
                    unbound.push((
                        claim.request,
                        VolumeTopology {
                            claim: key,
                            unbound: true,
                            terms,
                            provisioner,
                            volumes,
                        },
                    ));
                }
                Some(_) => {
                    return Err("pod has unbound immediate PersistentVolumeClaims".to_string())
                }
                None => {
                    return Err(match &claim.storage_class {
                        Some(class) if !class.is_empty() => format!(
                            "persistentvolumeclaim \"{name}\" names StorageClass \"{class}\", \
                             which does not exist"
                        ),
                        _ => "pod has unbound immediate PersistentVolumeClaims".to_string(),
                    })
                }
            }
        }
        unbound.sort_by_key(|(size, _)| *size);
        rules.topology.extend(unbound.into_iter().map(|(_, t)| t));
        rules.exclusive.sort();
        rules.exclusive.dedup();
        rules.attach.sort();
        rules.attach.dedup();
        Ok((!rules.is_empty()).then_some(rules))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(volumes: serde_json::Value) -> core::PodSpec {
        serde_json::from_value(json!({"containers": [{"name": "c"}], "volumes": volumes})).unwrap()
    }

    fn catalog() -> VolumeCatalog {
        let mut c = VolumeCatalog::default();
        let ctx = Ctx {
            path: std::path::Path::new("test.yaml"),
            object: "PersistentVolume local-n1".into(),
        };
        let pv: core::PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "local-n1"},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}
            ]}}}
        }))
        .unwrap();
        c.add_volume(&ctx, &pv).unwrap();
        let wffc: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": "fast", "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}},
            "provisioner": "csi.example.com",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [{"key": "zone", "values": ["a"]}]}]
        }))
        .unwrap();
        c.add_class(&wffc);
        let immediate: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": "slow"}, "provisioner": "csi.example.com"
        }))
        .unwrap();
        c.add_class(&immediate);
        let claim = |volume: Option<&str>, class: Option<&str>, modes: &[&str]| ClaimInfo {
            volume: volume.map(String::from),
            bind_completed: volume.is_some(),
            storage_class: class.map(String::from),
            access_modes: modes.iter().map(|m| m.to_string()).collect(),
            ..ClaimInfo::default()
        };
        c.claims
            .insert("ns/data".into(), claim(Some("local-n1"), None, &[]));
        c.claims.insert("ns/scratch".into(), claim(None, None, &[]));
        c.claims.insert(
            "ns/solo".into(),
            claim(None, Some("fast"), &["ReadWriteOncePod"]),
        );
        c.claims
            .insert("ns/later".into(), claim(None, Some("slow"), &[]));
        c.claims
            .insert("ns/lost".into(), claim(Some("gone"), None, &[]));
        c
    }

    #[test]
    fn claims_become_rules_or_the_reason_the_pod_waits() {
        let c = catalog();
        let rules = c
            .pod_rules(
                "ns",
                "p",
                &pod(json!([
                    {"name": "a", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "b", "persistentVolumeClaim": {"claimName": "scratch"}},
                    {"name": "c", "persistentVolumeClaim": {"claimName": "solo"}},
                    {"name": "cfg", "configMap": {"name": "x"}}
                ])),
            )
            .unwrap()
            .unwrap();
        assert_eq!(rules.topology.len(), 3);
        assert!(!rules.topology[0].unbound);
        assert!(
            rules.topology[1].unbound && rules.topology[1].provisioner,
            "no class named: the default class, WaitForFirstConsumer"
        );
        assert_eq!(rules.exclusive, ["ns/solo"]);
        let wait = |v| c.pod_rules("ns", "p", &pod(v)).unwrap_err();
        assert_eq!(
            wait(json!([{"name": "a", "persistentVolumeClaim": {"claimName": "nope"}}])),
            "persistentvolumeclaim \"nope\" not found"
        );
        assert_eq!(
            wait(json!([{"name": "a", "persistentVolumeClaim": {"claimName": "later"}}])),
            "pod has unbound immediate PersistentVolumeClaims"
        );
        assert!(
            wait(json!([{"name": "a", "persistentVolumeClaim": {"claimName": "lost"}}]))
                .contains("non-existent pv")
        );
        let mut prebound = c.clone();
        prebound.claims.get_mut("ns/data").unwrap().bind_completed = false;
        assert_eq!(
            prebound
                .pod_rules(
                    "ns",
                    "p",
                    &pod(json!([{"name": "a", "persistentVolumeClaim": {"claimName": "data"}}]))
                )
                .unwrap_err(),
            "pod has unbound immediate PersistentVolumeClaims",
            "pre-bound, not bound yet"
        );
        let mut selected = c.clone();
        selected.claims.get_mut("ns/scratch").unwrap().selected_node = Some("n7".into());
        let rules = selected
            .pod_rules(
                "ns",
                "p",
                &pod(json!([{"name": "b", "persistentVolumeClaim": {"claimName": "scratch"}}])),
            )
            .unwrap()
            .unwrap();
        assert_eq!(
            rules.topology[0].terms.as_ref().unwrap()[0].match_fields[0].values,
            ["n7"],
            "a node selected for the claim is the only one"
        );
        assert_eq!(
            wait(json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}])),
            "persistentvolumeclaim \"p-scratch\" not found",
            "an ephemeral volume's claim is <pod>-<volume>"
        );
        assert_eq!(
            c.pod_rules("ns", "p", &pod(json!([{"name": "e", "emptyDir": {}}])))
                .unwrap(),
            None
        );
    }

    /// The rules' attached volumes as (driver, volume).
    fn attached(rules: &VolumeRules) -> Vec<(&str, &str)> {
        rules
            .attach
            .iter()
            .map(|a| (a.driver.as_str(), a.volume.as_str()))
            .collect()
    }

    #[test]
    fn csi_volumes_count_by_driver_and_csinodes_give_the_limits() {
        let mut c = catalog();
        let ctx = Ctx {
            path: std::path::Path::new("test.yaml"),
            object: "PersistentVolume disk-1".into(),
        };
        let pv: core::PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "disk-1"},
            "spec": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}}
        }))
        .unwrap();
        c.add_volume(&ctx, &pv).unwrap();
        c.claims.get_mut("ns/data").unwrap().volume = Some("disk-1".into());
        let rules = c
            .pod_rules(
                "ns",
                "p",
                &pod(json!([
                    {"name": "a", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "b", "persistentVolumeClaim": {"claimName": "scratch"}},
                    {"name": "i", "csi": {"driver": "secrets.csi.k8s.io"}}
                ])),
            )
            .unwrap()
            .unwrap();
        assert_eq!(
            attached(&rules),
            [
                ("csi.example.com", "ns/scratch"),
                ("ebs.csi.aws.com", "disk-1"),
                ("secrets.csi.k8s.io", "ns/p/i"),
            ],
            "a bound volume by its PV, a claim to provision by its class's provisioner, an \
             inline volume of its own"
        );
        c.remove_volume("disk-1");
        assert!(!c.volumes.contains_key("disk-1"));

        // In-tree cloud disks count under the CSI driver they migrated to.
        let pv: core::PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "old-ebs"},
            "spec": {"awsElasticBlockStore": {"volumeID": "vol-0abc"}}
        }))
        .unwrap();
        c.add_volume(&ctx, &pv).unwrap();
        c.claims.get_mut("ns/data").unwrap().volume = Some("old-ebs".into());
        let rules = c
            .pod_rules(
                "ns",
                "p",
                &pod(json!([
                    {"name": "a", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "g", "gcePersistentDisk": {"pdName": "disk-7"}}
                ])),
            )
            .unwrap()
            .unwrap();
        assert_eq!(
            attached(&rules),
            [
                ("ebs.csi.aws.com", "old-ebs"),
                ("pd.csi.storage.gke.io", "disk-7")
            ]
        );
        let node: CSINode = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "spec": {"drivers": [
                {"name": "ebs.csi.aws.com", "nodeID": "i-1", "allocatable": {"count": 25}},
                {"name": "secrets.csi.k8s.io", "nodeID": "n1"}
            ]}
        }))
        .unwrap();
        assert_eq!(
            csi_limits(&node),
            BTreeMap::from([("ebs.csi.aws.com".to_string(), 25)])
        );
    }

    /// A catalog of local volumes (class `local`, no provisioner, WaitForFirstConsumer)
    /// read from objects as the API gives them.
    fn local_volumes(volumes: &[serde_json::Value]) -> VolumeCatalog {
        let mut c = VolumeCatalog::default();
        let ctx = Ctx {
            path: std::path::Path::new("test.yaml"),
            object: "test".into(),
        };
        c.add_class(
            &serde_json::from_value(json!({
                "metadata": {"name": "local"}, "provisioner": NO_PROVISIONER,
                "volumeBindingMode": "WaitForFirstConsumer"
            }))
            .unwrap(),
        );
        for pv in volumes {
            c.add_volume(&ctx, &serde_json::from_value(pv.clone()).unwrap())
                .unwrap();
        }
        c
    }

    fn local_pv(name: &str, node: &str, size: &str, extra: serde_json::Value) -> serde_json::Value {
        let mut pv = json!({
            "metadata": {"name": name, "labels": {"disk": "nvme"}},
            "spec": {
                "storageClassName": "local",
                "capacity": {"storage": size},
                "accessModes": ["ReadWriteOnce"],
                "local": {"path": "/mnt/disks/1"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}
            },
            "status": {"phase": "Available"}
        });
        json_merge(&mut pv, extra);
        pv
    }

    fn json_merge(into: &mut serde_json::Value, from: serde_json::Value) {
        match (into, from) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    json_merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (slot, v) => *slot = v,
        }
    }

    fn read_claim(spec: serde_json::Value) -> ClaimInfo {
        let ctx = Ctx {
            path: std::path::Path::new("test.yaml"),
            object: "PersistentVolumeClaim ns/data".into(),
        };
        ClaimInfo::read(
            &ctx,
            &serde_json::from_value(json!({
                "metadata": {"name": "data", "namespace": "ns", "uid": "u-1"}, "spec": spec
            }))
            .unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn an_unbound_claim_may_take_the_volumes_that_match_it_smallest_first() {
        let c = local_volumes(&[
            local_pv("big-n1", "n1", "1Ti", json!({})),
            local_pv("small-n2", "n2", "100Gi", json!({})),
            local_pv("tiny-n3", "n3", "1Gi", json!({})),
            local_pv(
                "ssd-n4",
                "n4",
                "100Gi",
                json!({"metadata": {"labels": {"disk": "ssd"}}}),
            ),
            local_pv(
                "rox-n5",
                "n5",
                "100Gi",
                json!({"spec": {"accessModes": ["ReadOnlyMany"]}}),
            ),
            local_pv(
                "block-n6",
                "n6",
                "100Gi",
                json!({"spec": {"volumeMode": "Block"}}),
            ),
            local_pv(
                "other-class-n7",
                "n7",
                "100Gi",
                json!({"spec": {"storageClassName": "x"}}),
            ),
            local_pv(
                "taken-n8",
                "n8",
                "100Gi",
                json!({"spec": {"claimRef": {"namespace": "ns", "name": "else"}}}),
            ),
            local_pv(
                "released-n9",
                "n9",
                "100Gi",
                json!({"status": {"phase": "Released"}}),
            ),
        ]);
        let claim = read_claim(json!({
            "storageClassName": "local", "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "50Gi"}},
            "selector": {"matchLabels": {"disk": "nvme"}}
        }));
        assert_eq!(claim.request, 50 << 30);
        let names = |c: &VolumeCatalog, claim: &ClaimInfo| -> Vec<String> {
            c.volumes_for("ns/data", claim, "local")
                .into_iter()
                .map(|v| v.name)
                .collect()
        };
        assert_eq!(
            names(&c, &claim),
            ["small-n2", "big-n1"],
            "large enough, the selector's labels, the access modes, the volume mode, the class,              bound to no claim and Available; the smallest first"
        );
        // A volume pre-bound to the claim is the only one.
        let mut prebound = c.clone();
        prebound.volumes.get_mut("big-n1").unwrap().claim_ref =
            Some(("ns/data".into(), Some("u-1".into())));
        assert_eq!(names(&prebound, &claim), ["big-n1"]);
        prebound.volumes.get_mut("big-n1").unwrap().claim_ref =
            Some(("ns/data".into(), Some("u-old".into())));
        assert_eq!(
            names(&prebound, &claim),
            ["small-n2"],
            "a reference to an earlier claim of the same name is another claim's"
        );

        // The pod: its claim binds one of them or nothing (no provisioner).
        let mut c = c;
        c.claims.insert("ns/data".into(), claim);
        let rules = c
            .pod_rules(
                "ns",
                "p",
                &pod(json!([{"name": "a", "persistentVolumeClaim": {"claimName": "data"}}])),
            )
            .unwrap()
            .unwrap();
        let t = &rules.topology[0];
        assert!(t.unbound && !t.provisioner && t.terms.is_none());
        assert_eq!(t.volumes.len(), 2);
        assert!(rules.attach.is_empty(), "local volumes attach nothing");
        c.volumes.clear();
        let rules = c
            .pod_rules(
                "ns",
                "p",
                &pod(json!([{"name": "a", "persistentVolumeClaim": {"claimName": "data"}}])),
            )
            .unwrap()
            .unwrap();
        assert!(
            rules.topology[0].volumes.is_empty(),
            "no volume yet: every node refuses the pod until one is made"
        );
    }

    #[test]
    fn a_claim_or_volume_size_that_does_not_parse_names_its_field() {
        let ctx = Ctx {
            path: std::path::Path::new("test.yaml"),
            object: "PersistentVolumeClaim ns/data".into(),
        };
        let claim: core::PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "data"},
            "spec": {"resources": {"requests": {"storage": "ten gigs"}}}
        }))
        .unwrap();
        let err = ClaimInfo::read(&ctx, &claim).unwrap_err().to_string();
        assert!(err.contains("spec.resources.requests.storage"), "{err}");
        let mut c = VolumeCatalog::default();
        let pv: core::PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pv"}, "spec": {"capacity": {"storage": "-"}}
        }))
        .unwrap();
        let err = c.add_volume(&ctx, &pv).unwrap_err().to_string();
        assert!(err.contains("spec.capacity.storage"), "{err}");
        let claim: core::PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "data"},
            "spec": {"selector": {"matchExpressions": [{"key": "disk", "operator": "Near"}]}}
        }))
        .unwrap();
        let err = ClaimInfo::read(&ctx, &claim).unwrap_err().to_string();
        assert!(
            err.contains("spec.selector.matchExpressions[0].operator"),
            "{err}"
        );
    }
}
