//! A pod's PersistentVolumeClaims, resolved against the claims, PersistentVolumes and
//! StorageClasses known (from workload files or from watches), into the engine's
//! [`VolumeRules`] — or into why the pod cannot be scheduled yet, in kube-scheduler's
//! words. One reader for the simulator and the live scheduler.
//!
//! Claims come from `volumes[].persistentVolumeClaim.claimName` and from generic
//! ephemeral volumes (`volumes[].ephemeral`, whose claim is `<pod>-<volume>`, made by the
//! ephemeral volume controller).

use crate::fields::Ctx;
use crate::LoadError;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1::CSINode;
use k8s_openapi::api::storage::v1::StorageClass;
use kestrel_core::{AttachedVolume, NodeSelectorTerm, VolumeRules, VolumeTopology};
use std::collections::BTreeMap;

/// The StorageClass annotation that makes a class the default for claims naming none.
pub const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";
/// The claim annotation naming the node a volume is to be provisioned for.
pub const SELECTED_NODE_ANNOTATION: &str = "volume.kubernetes.io/selected-node";
/// The annotation the volume controller puts on a claim once its binding is complete.
pub const BIND_COMPLETED_ANNOTATION: &str = "pv.kubernetes.io/bind-completed";
/// The provisioner of StorageClasses whose volumes are created by hand (local disks).
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// A claim as scheduling reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimInfo {
    /// `spec.volumeName`: the PersistentVolume it is bound (or pre-bound) to.
    pub volume: Option<String>,
    /// The binding is complete ([`BIND_COMPLETED_ANNOTATION`]); a claim pre-bound to a
    /// volume waits for it like an unbound claim with `Immediate` binding.
    pub bind_completed: bool,
    pub storage_class: Option<String>,
    /// `ReadWriteOncePod` among its access modes.
    pub read_write_once_pod: bool,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// The [`SELECTED_NODE_ANNOTATION`].
    pub selected_node: Option<String>,
}

impl ClaimInfo {
    pub fn of(claim: &core::PersistentVolumeClaim) -> ClaimInfo {
        let spec = claim.spec.as_ref();
        let annotations = claim.metadata.annotations.as_ref();
        ClaimInfo {
            bind_completed: annotations.is_some_and(|a| a.contains_key(BIND_COMPLETED_ANNOTATION)),
            volume: spec
                .and_then(|s| s.volume_name.clone())
                .filter(|v| !v.is_empty()),
            storage_class: spec.and_then(|s| s.storage_class_name.clone()),
            read_write_once_pod: spec
                .and_then(|s| s.access_modes.as_ref())
                .is_some_and(|m| m.iter().any(|m| m == "ReadWriteOncePod")),
            deleting: claim.metadata.deletion_timestamp.is_some(),
            selected_node: claim
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SELECTED_NODE_ANNOTATION).cloned()),
        }
    }
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
    /// PersistentVolume name -> its required node affinity (`None`: none).
    pub volumes: BTreeMap<String, Option<Vec<NodeSelectorTerm>>>,
    /// PersistentVolume name -> the CSI driver that attaches it (`spec.csi.driver`).
    pub drivers: BTreeMap<String, String>,
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
        match pv.spec.as_ref().and_then(|s| s.csi.as_ref()) {
            Some(csi) => self.drivers.insert(name.clone(), csi.driver.clone()),
            None => self.drivers.remove(&name),
        };
        self.volumes.insert(name, terms);
        Ok(())
    }

    /// Forgets a PersistentVolume.
    pub fn remove_volume(&mut self, name: &str) {
        self.volumes.remove(name);
        self.drivers.remove(name);
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
        // Inline CSI volumes are attached too, each its own.
        for v in spec.volumes.iter().flatten() {
            if let Some(csi) = &v.csi {
                rules.attach.push(AttachedVolume {
                    driver: csi.driver.clone(),
                    volume: format!("{namespace}/{pod_name}/{}", v.name),
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
            if claim.read_write_once_pod {
                rules.exclusive.push(key.clone());
            }
            if let Some(volume) = &claim.volume {
                if !claim.bind_completed {
                    return Err("pod has unbound immediate PersistentVolumeClaims".to_string());
                }
                let Some(terms) = self.volumes.get(volume) else {
                    return Err(
                        "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
                            .to_string(),
                    );
                };
                if let Some(driver) = self.drivers.get(volume) {
                    rules.attach.push(AttachedVolume {
                        driver: driver.clone(),
                        volume: volume.clone(),
                    });
                }
                if terms.is_some() {
                    rules.topology.push(VolumeTopology {
                        claim: key,
                        provision: false,
                        terms: terms.clone(),
                    });
                }
                continue;
            }
            match self.class_of(claim) {
                Some((_, class)) if class.wait_for_first_consumer => {
                    if class.provisioner == NO_PROVISIONER {
                        return Err(format!(
                            "persistentvolumeclaim \"{name}\" waits for a pre-created \
                             PersistentVolume of a class without a provisioner; Kestrel \
                             provisions WaitForFirstConsumer claims only (bind the claim to its \
                             PersistentVolume, spec.volumeName)"
                        ));
                    }
                    // A node already selected for it is the only one (the provisioner may
                    // be creating the volume there).
                    let terms = match &claim.selected_node {
                        Some(node) => Some(vec![NodeSelectorTerm {
                            match_expressions: Vec::new(),
                            match_fields: vec![kestrel_core::Requirement {
                                key: "metadata.name".to_string(),
                                operator: kestrel_core::SelectorOperator::In,
                                values: vec![node.clone()],
                            }],
                        }]),
                        None => class.allowed.clone(),
                    };
                    // Counted against the provisioner's limit, as the volume it will be.
                    rules.attach.push(AttachedVolume {
                        driver: class.provisioner.clone(),
                        volume: key.clone(),
                    });
                    rules.topology.push(VolumeTopology {
                        claim: key,
                        provision: true,
                        terms,
                    });
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
            read_write_once_pod: modes.contains(&"ReadWriteOncePod"),
            deleting: false,
            selected_node: None,
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
        assert!(!rules.topology[0].provision);
        assert!(
            rules.topology[1].provision,
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
        let attach: Vec<(&str, &str)> = rules
            .attach
            .iter()
            .map(|a| (a.driver.as_str(), a.volume.as_str()))
            .collect();
        assert_eq!(
            attach,
            [
                ("csi.example.com", "ns/scratch"),
                ("ebs.csi.aws.com", "disk-1"),
                ("secrets.csi.k8s.io", "ns/p/i"),
            ],
            "a bound volume by its PV, a claim to provision by its class's provisioner, an \
             inline volume of its own"
        );
        c.remove_volume("disk-1");
        assert!(c.drivers.is_empty());
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
}
