//! What a pod's PersistentVolumeClaims decide about where it may go, as kube-scheduler's
//! VolumeBinding and VolumeRestrictions plugins read them. Readers resolve claims,
//! volumes and StorageClasses into these rules; the engine judges nodes by them.
//!
//! The rules of kube-scheduler kept here:
//! - A claim bound to a PersistentVolume with a required node affinity (a local disk, a
//!   zonal disk) allows only the nodes that affinity selects ("node(s) had volume node
//!   affinity conflict").
//! - A claim whose StorageClass binds `WaitForFirstConsumer` and that is not bound yet is
//!   bound where the pod goes: to the smallest PersistentVolume that matches it and that
//!   the node may use, not taken by another claim; else, when the class has a
//!   provisioner, to a volume provisioned on the node, within the class's
//!   `allowedTopologies` ("node(s) didn't find available persistent volumes to bind").
//!   The engine keeps each such choice while a pod using the claim is placed, so pods that
//!   share the claim follow it and no volume is chosen twice; the live scheduler writes
//!   the claim on the chosen volume (or the chosen node on the claim) and binds the pod
//!   once the claim is bound.
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

/// Where one claim's volume is, or may be.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct VolumeTopology {
    /// `namespace/name` of the claim.
    pub claim: String,
    /// Not bound yet (`WaitForFirstConsumer`): bound on the node chosen, to one of
    /// `volumes` or else to a volume provisioned there.
    pub unbound: bool,
    /// Node selector terms, ORed; `None`: any node. Bound: its PersistentVolume's required
    /// node affinity. Unbound: where the class's provisioner may provision (its
    /// `allowedTopologies`).
    pub terms: Option<Vec<NodeSelectorTerm>>,
    /// Unbound: the class has a provisioner; without one only `volumes` will do.
    pub provisioner: bool,
    /// Unbound: the PersistentVolumes that match the claim, smallest first (kube-scheduler
    /// binds the smallest that fits).
    pub volumes: Vec<StaticVolume>,
}

impl VolumeTopology {
    /// A claim bound to a volume with node affinity `terms`.
    pub fn bound(claim: impl Into<String>, terms: Option<Vec<NodeSelectorTerm>>) -> Self {
        VolumeTopology {
            claim: claim.into(),
            unbound: false,
            terms,
            provisioner: false,
            volumes: Vec::new(),
        }
    }

    /// A claim to be provisioned where the pod goes, within `terms`.
    pub fn to_provision(claim: impl Into<String>, terms: Option<Vec<NodeSelectorTerm>>) -> Self {
        VolumeTopology {
            claim: claim.into(),
            unbound: true,
            terms,
            provisioner: true,
            volumes: Vec::new(),
        }
    }
}

/// A PersistentVolume an unbound claim may be bound to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct StaticVolume {
    pub name: String,
    /// Its required node affinity; `None`: any node.
    pub terms: Option<Vec<NodeSelectorTerm>>,
}

/// What an unbound claim is bound to on the node chosen.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub enum ClaimTarget {
    /// A PersistentVolume that exists: the claim is written on it.
    Volume(String),
    /// A volume the class's provisioner creates: the node is written on the claim.
    Provisioned,
}

/// An unbound claim's binding on one node: the target, and the nodes its volume may be
/// used from afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimBinding {
    pub claim: String,
    pub target: ClaimTarget,
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

    /// Whether every volume of the pod may allow the node, judged from the rules alone;
    /// bound volumes are judged first, as kube-scheduler does. Unbound claims pass when
    /// one of their volumes, or their provisioner, may serve the node: which volumes other
    /// pods took is the engine's to judge ([`VolumeRules::bind_on`]).
    pub fn allows(&self, node: &NodeSpec) -> Result<(), VolumeConflict> {
        if self
            .topology
            .iter()
            .any(|t| !t.unbound && !selects(t.terms.as_deref(), node))
        {
            return Err(VolumeConflict::NodeAffinity);
        }
        let may_bind = |t: &VolumeTopology| {
            (t.provisioner && selects(t.terms.as_deref(), node))
                || t.volumes.iter().any(|v| selects(v.terms.as_deref(), node))
        };
        if self.topology.iter().any(|t| t.unbound && !may_bind(t)) {
            return Err(VolumeConflict::Provisioning);
        }
        Ok(())
    }

    /// Whether some claim is not bound yet.
    pub fn binds_claims(&self) -> bool {
        self.topology.iter().any(|t| t.unbound)
    }

    /// How the unbound claims are bound on `node`, as kube-scheduler's volume binding
    /// chooses: claim by claim, a claim bound already by a pod placed earlier (`settled`,
    /// with the nodes its volume allows) keeps its binding; else the smallest of its
    /// volumes that the node may use, not `taken` and not chosen for an earlier claim of
    /// the pod; else a volume provisioned on the node where the class's provisioner may.
    /// `Err`: why the node will not do.
    pub fn bind_on<'a>(
        &self,
        node: &NodeSpec,
        taken: impl Fn(&str) -> bool,
        settled: impl Fn(&str) -> Option<&'a Option<Vec<NodeSelectorTerm>>>,
    ) -> Result<Vec<ClaimBinding>, VolumeConflict> {
        let mut out: Vec<ClaimBinding> = Vec::new();
        for t in self.topology.iter().filter(|t| t.unbound) {
            if let Some(terms) = settled(&t.claim) {
                if !selects(terms.as_deref(), node) {
                    return Err(VolumeConflict::NodeAffinity);
                }
                continue;
            }
            let chosen_here = |name: &str| {
                out.iter()
                    .any(|b| b.target == ClaimTarget::Volume(name.to_string()))
            };
            let volume = t.volumes.iter().find(|v| {
                selects(v.terms.as_deref(), node) && !taken(&v.name) && !chosen_here(&v.name)
            });
            let binding = match volume {
                Some(v) => ClaimBinding {
                    claim: t.claim.clone(),
                    target: ClaimTarget::Volume(v.name.clone()),
                    terms: v.terms.clone(),
                },
                None if t.provisioner && selects(t.terms.as_deref(), node) => ClaimBinding {
                    claim: t.claim.clone(),
                    target: ClaimTarget::Provisioned,
                    terms: Some(vec![NodeSelectorTerm::node_named(&node.name)]),
                },
                None => return Err(VolumeConflict::Provisioning),
            };
            out.push(binding);
        }
        Ok(out)
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

    /// The claims not bound yet.
    pub fn unbound_claims(&self) -> impl Iterator<Item = &str> {
        self.topology
            .iter()
            .filter(|t| t.unbound)
            .map(|t| t.claim.as_str())
    }

    /// Every node selector term of the rules, its claims' volumes' included.
    pub(crate) fn terms(&self) -> impl Iterator<Item = &NodeSelectorTerm> {
        self.topology.iter().flat_map(|t| {
            t.terms
                .iter()
                .flatten()
                .chain(t.volumes.iter().flat_map(|v| v.terms.iter().flatten()))
        })
    }
}

/// Whether node selector terms (ORed; `None`: any node) select the node.
fn selects(terms: Option<&[NodeSelectorTerm]>, node: &NodeSpec) -> bool {
    terms.is_none_or(|terms| terms.iter().any(|term| term.matches(node)))
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
                VolumeTopology::bound("ns/data", Some(vec![term("zone", "a")])),
                VolumeTopology::to_provision(
                    "ns/scratch",
                    Some(vec![term("kubernetes.io/hostname", "n1")]),
                ),
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
        assert_eq!(rules.unbound_claims().collect::<Vec<_>>(), ["ns/scratch"]);
        let anywhere = VolumeRules {
            topology: vec![VolumeTopology::to_provision("ns/scratch", None)],
            ..VolumeRules::default()
        };
        assert_eq!(anywhere.allows(&node("n9", "c")), Ok(()));
    }

    #[test]
    fn a_pods_own_claims_are_named_after_each_pod_of_its_template() {
        let mut rules = VolumeRules {
            topology: vec![VolumeTopology::to_provision("ns/train-scratch", None)],
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

    fn local(name: &str, node: &str) -> StaticVolume {
        StaticVolume {
            name: name.into(),
            terms: Some(vec![term("kubernetes.io/hostname", node)]),
        }
    }

    fn waiting(claim: &str, volumes: Vec<StaticVolume>, provisioner: bool) -> VolumeTopology {
        VolumeTopology {
            claim: claim.into(),
            unbound: true,
            terms: None,
            provisioner,
            volumes,
        }
    }

    #[test]
    fn unbound_claims_take_the_smallest_free_volume_the_node_may_use_else_a_provisioned_one() {
        // Two claims of one pod, local volumes on n1 (two) and n2 (one), smallest first.
        let both = vec![
            local("pv-small-n1", "n1"),
            local("pv-small-n2", "n2"),
            local("pv-big-n1", "n1"),
        ];
        let rules = VolumeRules {
            topology: vec![
                waiting("ns/a", both.clone(), false),
                waiting("ns/b", both, false),
            ],
            ..VolumeRules::default()
        };
        let none_taken = |_: &str| false;
        let nothing_settled = |_: &str| None;
        let on_n1 = rules
            .bind_on(&node("n1", "z"), none_taken, nothing_settled)
            .unwrap();
        let targets: Vec<_> = on_n1
            .iter()
            .map(|b| (b.claim.as_str(), &b.target))
            .collect();
        assert_eq!(
            targets,
            [
                ("ns/a", &ClaimTarget::Volume("pv-small-n1".into())),
                ("ns/b", &ClaimTarget::Volume("pv-big-n1".into())),
            ],
            "one volume per claim, the smallest first"
        );
        assert_eq!(
            rules.bind_on(&node("n2", "z"), none_taken, nothing_settled),
            Err(VolumeConflict::Provisioning),
            "n2 has one volume for two claims"
        );
        assert_eq!(
            rules.bind_on(
                &node("n1", "z"),
                |v: &str| v == "pv-big-n1",
                nothing_settled
            ),
            Err(VolumeConflict::Provisioning),
            "another claim took the second volume of n1"
        );
        assert_eq!(
            rules.allows(&node("n2", "z")),
            Ok(()),
            "the rules alone cannot tell"
        );
        assert_eq!(
            rules.allows(&node("n3", "z")),
            Err(VolumeConflict::Provisioning)
        );

        // With a provisioner, a claim without a free volume is provisioned on the node.
        let rules = VolumeRules {
            topology: vec![waiting("ns/a", vec![local("pv-n1", "n1")], true)],
            ..VolumeRules::default()
        };
        let on_n3 = rules
            .bind_on(&node("n3", "z"), none_taken, nothing_settled)
            .unwrap();
        assert_eq!(on_n3[0].target, ClaimTarget::Provisioned);
        assert_eq!(
            on_n3[0].terms,
            Some(vec![NodeSelectorTerm::node_named("n3")])
        );
        assert!(on_n3[0].terms.as_ref().unwrap()[0].matches(&node("n3", "z")));

        // A claim bound by a pod placed earlier keeps its volume's nodes.
        let settled = Some(vec![term("kubernetes.io/hostname", "n1")]);
        assert_eq!(
            rules.bind_on(&node("n3", "z"), none_taken, |_| Some(&settled)),
            Err(VolumeConflict::NodeAffinity)
        );
        assert_eq!(
            rules.bind_on(&node("n1", "z"), none_taken, |_| Some(&settled)),
            Ok(vec![])
        );
    }
}
