//! What a pod's PersistentVolumeClaims decide about where it may go, as kube-scheduler's
//! VolumeBinding and VolumeRestrictions plugins read them. Readers resolve claims,
//! volumes and StorageClasses into these rules; the engine judges nodes by them.
//!
//! The rules of kube-scheduler kept here:
//! - A claim bound to a PersistentVolume with a required node affinity (a local disk, a
//!   zonal disk) allows only the nodes that affinity selects ("node(s) had volume node
//!   affinity conflict").
//! - A claim whose StorageClass binds `WaitForFirstConsumer` and that is not bound yet is
//!   provisioned where the pod goes: the StorageClass's `allowedTopologies`, when it has
//!   some, limit the nodes ("node(s) didn't find available persistent volumes to bind");
//!   the live scheduler writes the chosen node on the claim and binds the pod once the
//!   claim is bound.
//! - A `ReadWriteOncePod` claim is used by one pod at a time: while a placed pod uses it,
//!   no other pod using it may be placed anywhere.
//! - NodeVolumeLimits: a node attaches at most its CSINode's `allocatable.count` volumes of
//!   each CSI driver; a volume used by several pods of the node counts once ("node(s)
//!   exceed max volume count").
//!
//! Claims that are missing, being deleted, or unbound with `Immediate` binding keep the
//! pod out of the engine altogether (the readers say why); they are not rules here.

use crate::model::{NodeSelectorTerm, NodeSpec};
use serde::Serialize;

/// A pod's volume rules.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize)]
pub struct VolumeRules {
    /// Where each claim's volume is or may be; every one must allow the node.
    pub topology: Vec<VolumeTopology>,
    /// `ReadWriteOncePod` claims (`namespace/name`), sorted.
    pub exclusive: Vec<String>,
    /// The CSI volumes it attaches to its node, sorted: they count against the node's
    /// limit for their driver ([`NodeSpec::volume_limits`]).
    pub attach: Vec<AttachedVolume>,
    /// The claims that are the pod's own (generic ephemeral volumes, `<pod>-<volume>`),
    /// named again for each pod made from one template ([`VolumeRules::name_for_pod`]).
    pub own_claims: Vec<String>,
}

/// A volume a CSI driver attaches to the node: one per node however many pods use it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct AttachedVolume {
    pub driver: String,
    /// The PersistentVolume's name; for a claim not bound yet, the claim's
    /// `namespace/name`.
    pub volume: String,
}

/// Where one claim's volume is, or may be provisioned.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct VolumeTopology {
    /// `namespace/name` of the claim.
    pub claim: String,
    /// Not bound yet: provisioned on the node chosen (`WaitForFirstConsumer`).
    pub provision: bool,
    /// Node selector terms, ORed (a PV's required node affinity, or the StorageClass's
    /// allowed topologies); `None`: any node.
    pub terms: Option<Vec<NodeSelectorTerm>>,
}

/// Why a node cannot take a pod's volumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeConflict {
    /// A bound volume's node affinity excludes the node.
    NodeAffinity,
    /// A claim to be provisioned cannot be provisioned on the node.
    Provisioning,
}

impl VolumeRules {
    pub fn is_empty(&self) -> bool {
        self.topology.is_empty() && self.exclusive.is_empty() && self.attach.is_empty()
    }

    /// Whether every volume of the pod allows the node; bound volumes are judged first,
    /// as kube-scheduler does.
    pub fn allows(&self, node: &NodeSpec) -> Result<(), VolumeConflict> {
        let selects = |t: &VolumeTopology| {
            t.terms
                .as_ref()
                .is_none_or(|terms| terms.iter().any(|term| term.matches(node)))
        };
        if self.topology.iter().any(|t| !t.provision && !selects(t)) {
            return Err(VolumeConflict::NodeAffinity);
        }
        if self.topology.iter().any(|t| t.provision && !selects(t)) {
            return Err(VolumeConflict::Provisioning);
        }
        Ok(())
    }

    /// Names the pod's own claims for pod `namespace/pod` made from a template read as
    /// `template`: `<template>-<volume>` becomes `<pod>-<volume>`.
    pub fn name_for_pod(&mut self, namespace: &str, template: &str, pod: &str) {
        let (from, to) = (
            format!("{namespace}/{template}-"),
            format!("{namespace}/{pod}-"),
        );
        let rename = |key: &mut String| {
            if let Some(volume) = key.strip_prefix(&from) {
                *key = format!("{to}{volume}");
            }
        };
        let own = std::mem::take(&mut self.own_claims);
        for mut key in own {
            let old = key.clone();
            rename(&mut key);
            for t in self.topology.iter_mut().filter(|t| t.claim == old) {
                t.claim = key.clone();
            }
            for c in self.exclusive.iter_mut().filter(|c| **c == old) {
                *c = key.clone();
            }
            for a in self.attach.iter_mut().filter(|a| a.volume == old) {
                a.volume = key.clone();
            }
            self.own_claims.push(key);
        }
        self.exclusive.sort();
        self.attach.sort();
    }

    /// The claims to be provisioned on the node chosen.
    pub fn to_provision(&self) -> impl Iterator<Item = &str> {
        self.topology
            .iter()
            .filter(|t| t.provision)
            .map(|t| t.claim.as_str())
    }

    /// Every node selector term of the rules.
    pub(crate) fn terms(&self) -> impl Iterator<Item = &NodeSelectorTerm> {
        self.topology.iter().flat_map(|t| t.terms.iter().flatten())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Requirement, SelectorOperator};

    fn node(name: &str, zone: &str) -> NodeSpec {
        let mut n = NodeSpec::new(name, crate::Resources::default());
        n.labels
            .insert("kubernetes.io/hostname".into(), name.into());
        n.labels.insert("zone".into(), zone.into());
        n
    }

    fn term(key: &str, value: &str) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: vec![Requirement {
                key: key.into(),
                operator: SelectorOperator::In,
                values: vec![value.into()],
            }],
            match_fields: vec![],
        }
    }

    #[test]
    fn a_bound_volume_keeps_the_pod_on_its_nodes_and_a_provisioned_one_in_its_topologies() {
        let rules = VolumeRules {
            topology: vec![
                VolumeTopology {
                    claim: "ns/data".into(),
                    provision: false,
                    terms: Some(vec![term("zone", "a")]),
                },
                VolumeTopology {
                    claim: "ns/scratch".into(),
                    provision: true,
                    terms: Some(vec![term("kubernetes.io/hostname", "n1")]),
                },
            ],
            ..VolumeRules::default()
        };
        assert_eq!(rules.allows(&node("n1", "a")), Ok(()));
        assert_eq!(
            rules.allows(&node("n1", "b")),
            Err(VolumeConflict::NodeAffinity),
            "the bound volume is judged first"
        );
        assert_eq!(
            rules.allows(&node("n2", "a")),
            Err(VolumeConflict::Provisioning)
        );
        assert_eq!(rules.to_provision().collect::<Vec<_>>(), ["ns/scratch"]);
        let anywhere = VolumeRules {
            topology: vec![VolumeTopology {
                claim: "ns/scratch".into(),
                provision: true,
                terms: None,
            }],
            ..VolumeRules::default()
        };
        assert_eq!(anywhere.allows(&node("n9", "c")), Ok(()));
    }

    #[test]
    fn a_pods_own_claims_are_named_after_each_pod_of_its_template() {
        let mut rules = VolumeRules {
            topology: vec![VolumeTopology {
                claim: "ns/train-scratch".into(),
                provision: true,
                terms: None,
            }],
            exclusive: vec!["ns/train-scratch".into(), "ns/train-shared".into()],
            attach: vec![crate::AttachedVolume {
                driver: "csi.example.com".into(),
                volume: "ns/train-scratch".into(),
            }],
            own_claims: vec!["ns/train-scratch".into()],
        };
        rules.name_for_pod("ns", "train", "train-3");
        assert_eq!(rules.topology[0].claim, "ns/train-3-scratch");
        assert_eq!(rules.exclusive, ["ns/train-3-scratch", "ns/train-shared"]);
        assert_eq!(rules.attach[0].volume, "ns/train-3-scratch");
        assert_eq!(rules.own_claims, ["ns/train-3-scratch"]);
    }
}
