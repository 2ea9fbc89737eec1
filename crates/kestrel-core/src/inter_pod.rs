//! Rules that place a pod by the pods already placed, as kube-scheduler's InterPodAffinity,
//! PodTopologySpread and NodePorts plugins read them: required and preferred pod affinity
//! and anti-affinity, topology spread constraints, and host ports. Pure types and
//! matching; the engine's index of placed pods and the per-node verdict live in
//! `scheduler::inter_pod`.
//!
//! The rules of kube-scheduler kept here:
//! - A pod counts toward an affinity term when its namespace is one the term names (the
//!   term's pod's own namespace when it names none and has no namespace selector) or one
//!   its namespace selector selects (`{}`: every namespace), and its labels match the
//!   term's label selector (none: no pod matches).
//! - Required affinity: a node qualifies when every term's topology key is among its
//!   labels and a pod matching all the terms runs in each term's domain of it; the first
//!   pod of a series that matches its own terms may go anywhere no matching pod exists.
//! - Required anti-affinity: no pod matching a term in the node's domain of its key, and
//!   no placed pod whose own anti-affinity term matches the new pod in its domain.
//! - Spread: pods of the pod's namespace matching the selector, counted per domain of the
//!   nodes that carry every key of the pod's constraints of the same kind and pass its
//!   node-inclusion policies. Placing the pod in a domain may not take that domain more
//!   than `max_skew` above the least-loaded domain (0 while fewer than `min_domains`
//!   domains exist).

use crate::model::{Labels, Requirement};
use serde::Serialize;

/// A label selector as requirements that must all hold (`matchLabels` as `In` of one value).
pub type LabelSelector = Vec<Requirement>;

/// Whether labels satisfy every requirement of a selector.
pub fn selector_matches(selector: &[Requirement], labels: &Labels) -> bool {
    selector.iter().all(|r| r.matches(labels))
}

/// Label pairs one of which a pod must carry to match the selector (its first `In`
/// requirement), so that candidates can be looked up by label; `None`: no such pairs.
pub fn selector_anchor(selector: &[Requirement]) -> Option<(&str, &[String])> {
    selector
        .iter()
        .find(|r| r.operator == crate::model::SelectorOperator::In)
        .map(|r| (r.key.as_str(), r.values.as_slice()))
}

/// One pod affinity or anti-affinity term.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct PodAffinityTerm {
    /// Which pods; `None` (no `labelSelector`) matches none.
    pub selector: Option<LabelSelector>,
    /// The namespaces named, sorted: the term's pod's own when neither names nor a selector
    /// were given.
    pub namespaces: Vec<String>,
    /// Namespaces by their labels as well (`Some(vec![])`: every namespace).
    pub namespace_selector: Option<LabelSelector>,
    pub topology_key: String,
}

impl PodAffinityTerm {
    /// Whether a pod in `namespace` with `labels` matches the term; `namespace_labels`
    /// gives a namespace's labels, asked only when the term selects namespaces by them.
    pub fn matches(
        &self,
        namespace: &str,
        labels: &Labels,
        namespace_labels: &dyn Fn(&str) -> Labels,
    ) -> bool {
        self.selector
            .as_ref()
            .is_some_and(|s| selector_matches(s, labels))
            && self.covers_namespace(namespace, namespace_labels)
    }

    pub fn covers_namespace(
        &self,
        namespace: &str,
        namespace_labels: &dyn Fn(&str) -> Labels,
    ) -> bool {
        self.namespaces
            .binary_search_by(|n| n.as_str().cmp(namespace))
            .is_ok()
            || self
                .namespace_selector
                .as_ref()
                .is_some_and(|s| s.is_empty() || selector_matches(s, &namespace_labels(namespace)))
    }

    /// The term names its namespaces only (no namespace selector).
    pub fn named_namespaces(&self) -> Option<&[String]> {
        self.namespace_selector
            .is_none()
            .then_some(self.namespaces.as_slice())
    }
}

/// One `topologySpreadConstraints` entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct SpreadConstraint {
    pub max_skew: u32,
    pub topology_key: String,
    /// `whenUnsatisfiable: DoNotSchedule` (a filter); otherwise ScheduleAnyway (a
    /// preference).
    pub hard: bool,
    /// Which pods of the pod's namespace count (`matchLabelKeys` merged in); `None`
    /// counts none, and so does an empty selector (`{}`), which the pod itself still
    /// matches, as in kube-scheduler.
    pub selector: Option<LabelSelector>,
    /// Fewer domains than this count as a least-loaded domain of 0 pods.
    pub min_domains: Option<u32>,
    /// `nodeAffinityPolicy: Honor` (the default): only nodes the pod's node selector and
    /// required node affinity allow count.
    pub honor_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor`: only nodes whose taints the pod tolerates count (the
    /// default, Ignore, counts all).
    pub honor_taints: bool,
}

impl SpreadConstraint {
    pub fn counts(&self, labels: &Labels) -> bool {
        self.selector
            .as_ref()
            .is_some_and(|s| selector_matches(s, labels))
    }
}

/// A pod's rules about other pods.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize)]
pub struct InterPodRules {
    /// `podAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    pub affinity: Vec<PodAffinityTerm>,
    /// `podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    pub anti_affinity: Vec<PodAffinityTerm>,
    /// `podAffinity.preferredDuringSchedulingIgnoredDuringExecution`: (weight, term).
    pub preferred_affinity: Vec<(i32, PodAffinityTerm)>,
    /// `podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution`.
    pub preferred_anti_affinity: Vec<(i32, PodAffinityTerm)>,
    pub spread: Vec<SpreadConstraint>,
}

impl InterPodRules {
    pub fn is_empty(&self) -> bool {
        self.affinity.is_empty()
            && self.anti_affinity.is_empty()
            && self.preferred_affinity.is_empty()
            && self.preferred_anti_affinity.is_empty()
            && self.spread.is_empty()
    }

    /// A binding elsewhere may make room for the pod: it needs a pod beside it, or a
    /// spread's least-loaded domain to grow.
    pub fn waits_on_bindings(&self) -> bool {
        !self.affinity.is_empty() || self.spread.iter().any(|s| s.hard)
    }

    /// Node scores vary with the pods placed, not only with the node.
    pub fn scores(&self) -> bool {
        !self.preferred_affinity.is_empty()
            || !self.preferred_anti_affinity.is_empty()
            || self.spread.iter().any(|s| !s.hard)
    }
}

/// A host port a container asks for (`containers[].ports[].hostPort`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct HostPort {
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// `hostIP`; empty or `0.0.0.0`: every address.
    pub ip: String,
    pub port: u16,
}

impl HostPort {
    /// Two pods cannot both take these on one node: same protocol and port, and the same
    /// address or either on every address.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        let any = |ip: &str| ip.is_empty() || ip == "0.0.0.0";
        self.port == other.port
            && self.protocol == other.protocol
            && (any(&self.ip) || any(&other.ip) || self.ip == other.ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SelectorOperator;

    fn app(v: &str) -> LabelSelector {
        vec![Requirement {
            key: "app".into(),
            operator: SelectorOperator::In,
            values: vec![v.into()],
        }]
    }

    #[test]
    fn a_term_matches_by_namespace_and_labels_and_none_without_a_selector() {
        let labels: Labels = [("app".to_string(), "web".to_string())].into();
        let ns_labels: Labels = [("team".to_string(), "a".to_string())].into();
        let mut term = PodAffinityTerm {
            selector: Some(app("web")),
            namespaces: vec!["prod".into()],
            namespace_selector: None,
            topology_key: "zone".into(),
        };
        let none = |_: &str| Labels::new();
        let team_a = |_: &str| ns_labels.clone();
        assert!(term.matches("prod", &labels, &none));
        assert!(!term.matches("dev", &labels, &team_a));
        term.namespace_selector = Some(vec![Requirement {
            key: "team".into(),
            operator: SelectorOperator::In,
            values: vec!["a".into()],
        }]);
        assert!(term.matches("dev", &labels, &team_a));
        assert!(!term.matches("dev", &labels, &none));
        term.namespace_selector = Some(Vec::new());
        assert!(
            term.matches("dev", &labels, &none),
            "{{}} selects every namespace"
        );
        term.selector = None;
        assert!(!term.matches("prod", &labels, &none));
    }

    #[test]
    fn host_ports_conflict_on_one_address_or_on_every_address() {
        let port = |ip: &str, p: u16, proto: &str| HostPort {
            protocol: proto.into(),
            ip: ip.into(),
            port: p,
        };
        assert!(port("", 80, "TCP").conflicts(&port("10.0.0.1", 80, "TCP")));
        assert!(port("0.0.0.0", 80, "TCP").conflicts(&port("", 80, "TCP")));
        assert!(!port("10.0.0.1", 80, "TCP").conflicts(&port("10.0.0.2", 80, "TCP")));
        assert!(!port("", 80, "TCP").conflicts(&port("", 80, "UDP")));
        assert!(!port("", 80, "TCP").conflicts(&port("", 81, "TCP")));
    }
}
