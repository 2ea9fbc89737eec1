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
        self.topology.is_empty() && self.exclusive.is_empty()
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
            exclusive: vec![],
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
            exclusive: vec![],
        };
        assert_eq!(anywhere.allows(&node("n9", "c")), Ok(()));
    }
}
