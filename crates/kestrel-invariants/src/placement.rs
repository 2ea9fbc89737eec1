//! Placement rules that depend on other pods and on volumes, recomputed from the bound pods
//! with this crate's own matching (a second opinion on the engine's, written from
//! kube-scheduler's InterPodAffinity, PodTopologySpread, VolumeBinding and
//! VolumeRestrictions plugins, not from the engine):
//!
//! - [`check`](crate::check): no required pod anti-affinity broken, from either side (a
//!   bound pod's term matches another bound pod in the same domain of the term's key;
//!   nodes without the key are in no domain); no pod on a node its bound PersistentVolume's
//!   node affinity excludes; no `ReadWriteOncePod` claim used by two bound pods.
//! - [`check_transition`](crate::check_transition), for pods newly bound in the step, in the
//!   later snapshot: required pod affinity (kube-scheduler's "first of a series" rule
//!   included) and DoNotSchedule topology spread at the moment of binding, with the
//!   tolerances given at [`check_bindings`].

use crate::{NodeView, PodView, Snapshot, Violation};
use std::collections::{BTreeMap, BTreeSet};

/// Labels of a pod, a node or a namespace.
pub type Labels = BTreeMap<String, String>;

/// A label selector requirement's operator (`Gt`/`Lt` in node selectors only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

/// One requirement of a label selector or a node selector term.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    pub values: Vec<String>,
}

impl Requirement {
    pub fn new(key: &str, operator: Operator, values: &[&str]) -> Requirement {
        Requirement {
            key: key.to_string(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    /// Whether the requirement holds where its key has `value` (`None`: absent).
    pub fn holds(&self, value: Option<&str>) -> bool {
        let listed = |v: &str| self.values.iter().any(|x| x == v);
        match self.operator {
            Operator::In => value.is_some_and(listed),
            Operator::NotIn => !value.is_some_and(listed),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::Gt | Operator::Lt => {
                let number = |s: Option<&str>| s.and_then(|s| s.trim().parse::<i64>().ok());
                match (
                    number(value),
                    number(self.values.first().map(|s| s.as_str())),
                ) {
                    (Some(v), Some(b)) if self.operator == Operator::Gt => v > b,
                    (Some(v), Some(b)) => v < b,
                    _ => false,
                }
            }
        }
    }
}

/// A label selector: every requirement holds (`matchLabels` are `In` of one value). Empty
/// (`{}`): everything.
pub type Selector = Vec<Requirement>;

/// Whether `labels` satisfy every requirement of `selector`.
pub fn selects(selector: &[Requirement], labels: &Labels) -> bool {
    selector
        .iter()
        .all(|r| r.holds(labels.get(&r.key).map(|s| s.as_str())))
}

/// A node selector term: every requirement holds; `match_fields` know `metadata.name`
/// only. A term with no requirements selects no node (as in Kubernetes).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct NodeTerm {
    pub match_expressions: Vec<Requirement>,
    pub match_fields: Vec<Requirement>,
}

impl NodeTerm {
    pub fn selects(&self, node: &NodeView) -> bool {
        (!self.match_expressions.is_empty() || !self.match_fields.is_empty())
            && selects(&self.match_expressions, &node.labels)
            && self
                .match_fields
                .iter()
                .all(|r| r.holds((r.key == "metadata.name").then_some(node.name.as_str())))
    }
}

/// One required pod affinity or anti-affinity term, as the pod spec gives it
/// (`matchLabelKeys`/`mismatchLabelKeys` merged into `selector`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PodTerm {
    /// `labelSelector`; `None` matches no pod.
    pub selector: Option<Selector>,
    /// `namespaces`. With these empty and no `namespace_selector`: the term's own pod's
    /// namespace.
    pub namespaces: Vec<String>,
    /// `namespaceSelector` (`Some(vec![])`: every namespace).
    pub namespace_selector: Option<Selector>,
    pub topology_key: String,
}

/// One `whenUnsatisfiable: DoNotSchedule` topology spread constraint
/// (`matchLabelKeys` merged into `selector`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct SpreadRule {
    pub max_skew: u32,
    pub topology_key: String,
    /// Which pods of the pod's namespace count; `None` counts none.
    pub selector: Option<Selector>,
    /// Fewer eligible domains than this: the least-loaded domain counts 0 pods.
    pub min_domains: Option<u32>,
    /// `nodeAffinityPolicy: Honor` (the default): only nodes the pod's node selector and
    /// required node affinity select are eligible.
    pub honor_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor`: only nodes whose `NoSchedule`/`NoExecute` taints the pod
    /// tolerates are eligible (the default, Ignore, takes all).
    pub honor_taints: bool,
}

/// A node's taint.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TaintView {
    pub key: String,
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// A pod's toleration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TolerationView {
    /// Empty with `exists`: every taint.
    pub key: String,
    /// `operator: Exists` (otherwise Equal).
    pub exists: bool,
    pub value: String,
    /// `None`: every effect.
    pub effect: Option<String>,
}

impl TolerationView {
    pub fn tolerates(&self, taint: &TaintView) -> bool {
        self.effect.as_ref().is_none_or(|e| *e == taint.effect)
            && if self.key.is_empty() {
                self.exists
            } else {
                self.key == taint.key && (self.exists || self.value == taint.value)
            }
    }
}

/// A bound PersistentVolume's required node affinity, by the claim that mounts it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct VolumeAffinity {
    /// `namespace/name` of the claim.
    pub claim: String,
    /// Node selector terms, ORed.
    pub terms: Vec<NodeTerm>,
}

impl PodView {
    /// The namespace, from the key.
    pub fn namespace(&self) -> &str {
        self.key.split_once('/').map_or("", |(ns, _)| ns)
    }

    /// Whether the node is one the pod's `nodeSelector` and required node affinity select.
    pub fn selects_node(&self, node: &NodeView) -> bool {
        self.node_selector
            .iter()
            .all(|(k, v)| node.labels.get(k) == Some(v))
            && self
                .node_affinity
                .as_ref()
                .is_none_or(|terms| terms.iter().any(|t| t.selects(node)))
    }

    /// Whether the pod tolerates the node's `NoSchedule` and `NoExecute` taints.
    pub fn tolerates_node(&self, node: &NodeView) -> bool {
        node.taints.iter().all(|t| {
            t.effect == "PreferNoSchedule" || self.tolerations.iter().any(|x| x.tolerates(t))
        })
    }
}

impl Snapshot {
    /// A namespace's labels as namespace selectors see them: those in
    /// [`Snapshot::namespaces`] and `kubernetes.io/metadata.name`.
    pub fn namespace_labels(&self, namespace: &str) -> Labels {
        let mut labels = self.namespaces.get(namespace).cloned().unwrap_or_default();
        labels.insert(
            "kubernetes.io/metadata.name".to_string(),
            namespace.to_string(),
        );
        labels
    }

    /// Whether `term`, of a pod in namespace `own`, matches `other`.
    pub(crate) fn term_matches(&self, term: &PodTerm, own: &str, other: &PodView) -> bool {
        let Some(selector) = &term.selector else {
            return false;
        };
        if !selects(selector, &other.labels) {
            return false;
        }
        let ns = other.namespace();
        if term.namespaces.is_empty() && term.namespace_selector.is_none() {
            return ns == own;
        }
        term.namespaces.iter().any(|n| n == ns)
            || term
                .namespace_selector
                .as_ref()
                .is_some_and(|s| selects(s, &self.namespace_labels(ns)))
    }
}

/// The value of `key` on the node a pod is bound to (`None`: unbound, unknown node, or no
/// such label).
fn domain<'a>(nodes: &BTreeMap<&str, &'a NodeView>, pod: &PodView, key: &str) -> Option<&'a str> {
    let node = nodes.get(pod.node.as_deref()?)?;
    node.labels.get(key).map(|s| s.as_str())
}

fn by_name(snapshot: &Snapshot) -> BTreeMap<&str, &NodeView> {
    snapshot
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n))
        .collect()
}

/// No bound pod's required anti-affinity term matches another bound pod in its domain.
/// Every pod with terms is looked at, so the rule holds from either side (a pod placed
/// beside one whose anti-affinity repels it is reported under the other pod's term).
pub(crate) fn check_anti_affinity(snapshot: &Snapshot, out: &mut Vec<Violation>) {
    let nodes = by_name(snapshot);
    let bound: Vec<&PodView> = snapshot.pods.iter().filter(|p| p.node.is_some()).collect();
    for p in bound.iter().filter(|p| !p.anti_affinity.is_empty()) {
        for (i, term) in p.anti_affinity.iter().enumerate() {
            let Some(value) = domain(&nodes, p, &term.topology_key) else {
                continue;
            };
            let others: Vec<String> = bound
                .iter()
                .filter(|q| q.key != p.key)
                .filter(|q| domain(&nodes, q, &term.topology_key) == Some(value))
                .filter(|q| snapshot.term_matches(term, p.namespace(), q))
                .map(|q| q.key.clone())
                .collect();
            if !others.is_empty() {
                out.push(Violation::AntiAffinityBroken {
                    pod: p.key.clone(),
                    term: i,
                    key: term.topology_key.clone(),
                    domain: value.to_string(),
                    others,
                });
            }
        }
    }
}

/// Bound pods' volumes: every bound PersistentVolume's node affinity selects the pod's
/// node; no `ReadWriteOncePod` claim used by two bound pods; no node attaching more
/// distinct volumes of a CSI driver than its limit.
pub(crate) fn check_volumes(snapshot: &Snapshot, out: &mut Vec<Violation>) {
    let nodes = by_name(snapshot);
    let mut users: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut attached: BTreeMap<(&str, &str), BTreeSet<&str>> = BTreeMap::new();
    for p in &snapshot.pods {
        let Some(name) = &p.node else { continue };
        for claim in &p.exclusive_claims {
            users.entry(claim).or_default().push(p.key.clone());
        }
        for (driver, volume) in &p.attached_volumes {
            attached
                .entry((name.as_str(), driver.as_str()))
                .or_default()
                .insert(volume);
        }
        let Some(node) = nodes.get(name.as_str()) else {
            continue;
        };
        for v in &p.volume_affinity {
            if !v.terms.iter().any(|t| t.selects(node)) {
                out.push(Violation::VolumeNodeConflict {
                    pod: p.key.clone(),
                    node: name.clone(),
                    claim: v.claim.clone(),
                });
            }
        }
    }
    for (claim, pods) in users {
        if pods.len() > 1 {
            out.push(Violation::ClaimUsedTwice {
                claim: claim.to_string(),
                pods,
            });
        }
    }
    for ((node, driver), volumes) in attached {
        let limit = nodes
            .get(node)
            .and_then(|n| n.volume_limits.get(driver).copied());
        if let Some(limit) = limit.filter(|l| volumes.len() > *l as usize) {
            out.push(Violation::VolumeLimitExceeded {
                node: node.to_string(),
                driver: driver.to_string(),
                volumes: volumes.len(),
                limit,
            });
        }
    }
}

/// Pods bound in `after` that were not bound to that node in `before`, and what may have
/// been bound while they were placed: required pod affinity and DoNotSchedule topology
/// spread, judged in `after`.
///
/// The checker sees two pictures, not the order of the bindings between them, so it only
/// reports what is broken whatever that order was:
/// - other pods newly bound in the same step may have been bound after the pod: they
///   count as possible affinity partners, and a spread's skew may exceed `maxSkew` by the
///   number of them that match the constraint (on eligible nodes);
/// - pods bound before the step and not after (ended, evicted, on a removed node) may have
///   left after the pod was bound: they count as possible affinity partners and, for
///   spread, in the least-loaded domain's count (not in the pod's own domain's);
/// - "first of a series" (a pod whose affinity matches itself may go where no pod matches
///   its terms when no pod in the cluster does): only pods bound throughout the step
///   are sure to have been there.
pub(crate) fn check_bindings(before: &Snapshot, after: &Snapshot, out: &mut Vec<Violation>) {
    let was_on: BTreeMap<&str, &str> = before
        .pods
        .iter()
        .filter_map(|p| Some((p.key.as_str(), p.node.as_deref()?)))
        .collect();
    let now_on: BTreeMap<&str, &str> = after
        .pods
        .iter()
        .filter_map(|p| Some((p.key.as_str(), p.node.as_deref()?)))
        .collect();
    let nodes = by_name(after);
    let before_nodes = by_name(before);
    let stayed = |p: &PodView| {
        p.node
            .as_deref()
            .is_some_and(|n| was_on.get(p.key.as_str()) == Some(&n))
    };
    let bound: Vec<&PodView> = after.pods.iter().filter(|p| p.node.is_some()).collect();
    // Bound before and not on that node after; judged on the node they were on (its
    // labels from `after` when it is still there).
    let departed: Vec<(&PodView, &NodeView)> = before
        .pods
        .iter()
        .filter(|p| {
            p.node
                .as_deref()
                .is_some_and(|n| now_on.get(p.key.as_str()) != Some(&n))
        })
        .filter_map(|p| {
            let n = p.node.as_deref()?;
            Some((p, *nodes.get(n).or_else(|| before_nodes.get(n))?))
        })
        .collect();
    for p in bound.iter().filter(|p| !stayed(p)) {
        let Some(node) = nodes.get(p.node.as_deref().unwrap()) else {
            continue; // UnknownNode, reported by check
        };
        if !p.affinity.is_empty() {
            check_affinity(after, &bound, &departed, &stayed, p, node, &nodes, out);
        }
        if !p.spread.is_empty() {
            check_spread(after, &bound, &departed, &stayed, p, node, &nodes, out);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn check_affinity(
    after: &Snapshot,
    bound: &[&PodView],
    departed: &[(&PodView, &NodeView)],
    stayed: &dyn Fn(&PodView) -> bool,
    p: &PodView,
    node: &NodeView,
    nodes: &BTreeMap<&str, &NodeView>,
    out: &mut Vec<Violation>,
) {
    let ns = p.namespace();
    for t in &p.affinity {
        if !node.labels.contains_key(&t.topology_key) {
            out.push(Violation::NoTopologyDomain {
                pod: p.key.clone(),
                node: node.name.clone(),
                key: t.topology_key.clone(),
                rule: "required pod affinity".into(),
            });
            return;
        }
    }
    let matches_all = |q: &PodView| p.affinity.iter().all(|t| after.term_matches(t, ns, q));
    // Pods that may have been there, with their nodes.
    let candidates: Vec<(&PodView, &NodeView, bool)> = bound
        .iter()
        .filter(|q| q.key != p.key)
        .filter_map(|q| Some((*q, *nodes.get(q.node.as_deref()?)?, stayed(q))))
        .chain(departed.iter().map(|(q, n)| (*q, *n, false)))
        .filter(|(q, _, _)| matches_all(q))
        .collect();
    let unmet: Vec<&PodTerm> = p
        .affinity
        .iter()
        .filter(|t| {
            let value = node.labels.get(&t.topology_key);
            !candidates
                .iter()
                .any(|(_, n, _)| n.labels.get(&t.topology_key) == value)
        })
        .collect();
    let Some(first_unmet) = unmet.first() else {
        return;
    };
    // First of a series: it matches its own terms and no pod sure to have been there
    // matched them anywhere (on a node with one of their keys).
    let sure_elsewhere = candidates.iter().any(|(_, n, sure)| {
        *sure
            && p.affinity
                .iter()
                .any(|t| n.labels.contains_key(&t.topology_key))
    });
    if matches_all(p) && !sure_elsewhere {
        return;
    }
    out.push(Violation::AffinityUnmet {
        pod: p.key.clone(),
        node: node.name.clone(),
        key: first_unmet.topology_key.clone(),
        domain: node.labels[&first_unmet.topology_key].clone(),
    });
}

#[allow(clippy::too_many_arguments)]
fn check_spread(
    after: &Snapshot,
    bound: &[&PodView],
    departed: &[(&PodView, &NodeView)],
    stayed: &dyn Fn(&PodView) -> bool,
    p: &PodView,
    node: &NodeView,
    nodes: &BTreeMap<&str, &NodeView>,
    out: &mut Vec<Violation>,
) {
    let keys: BTreeSet<&str> = p.spread.iter().map(|s| s.topology_key.as_str()).collect();
    for s in &p.spread {
        let Some(value) = node.labels.get(&s.topology_key) else {
            out.push(Violation::NoTopologyDomain {
                pod: p.key.clone(),
                node: node.name.clone(),
                key: s.topology_key.clone(),
                rule: "topology spread (DoNotSchedule)".into(),
            });
            continue;
        };
        let eligible = |n: &NodeView| {
            keys.iter().all(|k| n.labels.contains_key(*k))
                && (!s.honor_node_affinity || p.selects_node(n))
                && (!s.honor_taints || p.tolerates_node(n))
        };
        // An empty selector (`{}`) counts no placed pod, though the pod itself matches it
        // (kube-scheduler's countPodsMatchSelector).
        let counts_in = |q: &PodView| {
            q.key != p.key
                && q.namespace() == p.namespace()
                && s.selector
                    .as_ref()
                    .is_some_and(|sel| !sel.is_empty() && selects(sel, &q.labels))
        };
        // Every eligible domain, with 0 pods to start.
        let mut counts: BTreeMap<&str, u32> = after
            .nodes
            .iter()
            .filter(|n| eligible(n))
            .map(|n| (n.labels[&s.topology_key].as_str(), 0))
            .collect();
        let mut upper = counts.clone();
        let mut tolerance = 0;
        for q in bound.iter().filter(|q| counts_in(q)) {
            let Some(n) = nodes.get(q.node.as_deref().unwrap_or_default()) else {
                continue;
            };
            if !eligible(n) {
                continue;
            }
            let d = n.labels[&s.topology_key].as_str();
            *counts.entry(d).or_default() += 1;
            *upper.entry(d).or_default() += 1;
            if !stayed(q) {
                tolerance += 1;
            }
        }
        for (q, n) in departed {
            if counts_in(q) && eligible(n) {
                if let Some(c) = upper.get_mut(n.labels[&s.topology_key].as_str()) {
                    *c += 1;
                }
            }
        }
        let min = if s.min_domains.is_some_and(|m| (upper.len() as u32) < m) {
            0
        } else {
            upper.values().min().copied().unwrap_or(0)
        };
        let own = s
            .selector
            .as_ref()
            .is_some_and(|sel| selects(sel, &p.labels));
        let count = counts.get(value.as_str()).copied().unwrap_or(0) + u32::from(own);
        if count.saturating_sub(min) > s.max_skew + tolerance {
            out.push(Violation::SpreadOverSkew {
                pod: p.key.clone(),
                node: node.name.clone(),
                key: s.topology_key.clone(),
                domain: value.clone(),
                count,
                min,
                max_skew: s.max_skew,
                tolerance,
            });
        }
    }
}
