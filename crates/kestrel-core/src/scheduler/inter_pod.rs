//! The engine's side of the inter-pod rules of [`crate::inter_pod`]: an index of the bound
//! pods by label, and for each placement the domains every rule allows, judged node by node.
//!
//! The index is off (and costs nothing) until a pod with inter-pod rules or host ports is
//! submitted; from then on bindings, tentative ones of a gang attempt included, keep it in
//! step, so a gang's members count against each other.

use super::Scheduler;
use crate::explain::NodeReason;
use crate::inter_pod::{selector_anchor, selector_matches, LabelSelector};
use crate::model::{Labels, PlacementConstraints, PodSpec};
use crate::predicates::{selects_node, tolerates_node};
use crate::types::{NodeId, PodId, PodPhase};
use crate::volumes::{ClaimBinding, ClaimTarget, VolumeConflict};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// A label's key and value.
type LabelPair = (String, String);

/// Bound pods by what inter-pod rules look them up by.
#[derive(Debug, Clone, Default)]
pub(crate) struct InterPodIndex {
    on: bool,
    placed: BTreeSet<PodId>,
    by_label: HashMap<(String, String), BTreeSet<PodId>>,
    by_namespace: HashMap<String, BTreeSet<PodId>>,
    /// Bound pods' required anti-affinity terms (pod, term index), by a label pair a pod
    /// must carry to match the term (`None`: the term's selector names no such pair).
    anti_terms: HashMap<Option<LabelPair>, BTreeSet<(PodId, usize)>>,
    /// Bound pods that take host ports.
    port_holders: BTreeSet<PodId>,
    /// `ReadWriteOncePod` claims in use: claim -> the bound pods using it.
    exclusive_claims: HashMap<String, BTreeSet<PodId>>,
    /// CSI volumes attached per node: driver -> volume -> bound pods using it there.
    attached: HashMap<NodeId, BTreeMap<String, BTreeMap<String, u32>>>,
    /// Where each bound pod with CSI volumes attached them.
    attached_by: HashMap<PodId, NodeId>,
    /// Claims not bound yet that placing a pod bound: claim -> its binding, and the pod
    /// whose placement made it. The claim keeps its volume (as the volume controller keeps
    /// a claim bound) for the pods that share it and those that come after, unless the gang
    /// attempt that made it fails; the live scheduler forgets it once the API shows it.
    claim_bindings: HashMap<String, (ClaimBinding, PodId)>,
    /// PersistentVolumes so bound: volume -> the claim.
    volumes_taken: HashMap<String, String>,
    /// Pending pods a binding elsewhere may let in (required affinity, DoNotSchedule
    /// spread): while there are any, every binding counts as a change that may help.
    pub(crate) waiting: BTreeSet<PodId>,
    /// Per (constraint set, spread constraint): which nodes count toward it, until the
    /// next node change.
    spread_nodes: HashMap<(u32, usize), Arc<SpreadNodes>>,
    /// Per topology key, each node's domain as a number, until the next node change:
    /// verdicts look domains up by node, not by label.
    key_domains: HashMap<String, Arc<KeyDomains>>,
}

/// The domains of one topology key, numbered.
#[derive(Debug)]
struct KeyDomains {
    /// By node id: the node's domain (`None`: the node lacks the key).
    of_node: Vec<Option<u32>>,
    count: usize,
}

impl KeyDomains {
    fn of(&self, node: NodeId) -> Option<usize> {
        self.of_node
            .get(node.0 as usize)
            .copied()
            .flatten()
            .map(|d| d as usize)
    }
}

/// Some domains of one topology key.
#[derive(Debug)]
struct DomainSet {
    key: Arc<KeyDomains>,
    /// By domain number.
    members: Vec<bool>,
}

impl DomainSet {
    fn new(key: Arc<KeyDomains>) -> DomainSet {
        DomainSet {
            members: vec![false; key.count],
            key,
        }
    }

    /// Adds the node's domain; `false` when the node lacks the key.
    fn insert_node(&mut self, node: NodeId) -> bool {
        match self.key.of(node) {
            Some(d) => {
                self.members[d] = true;
                true
            }
            None => false,
        }
    }

    fn holds(&self, node: NodeId) -> bool {
        self.key.of(node).is_some_and(|d| self.members[d])
    }
}

#[derive(Debug)]
struct SpreadNodes {
    /// By node id.
    eligible: Vec<bool>,
    /// Distinct values of the topology key among eligible nodes.
    domains: usize,
}

/// What one placement's inter-pod rules allow, computed once for the placement.
#[derive(Debug, Default)]
pub(crate) struct InterPodCheck {
    /// A `ReadWriteOncePod` claim of the pod is in use by another pod: no node will do.
    volume_in_use: bool,
    /// Nodes its CSI volumes would take past their driver's limit.
    volume_limited: HashSet<NodeId>,
    /// Nodes where its unbound claims cannot be bound, and why.
    volume_unbindable: HashMap<NodeId, NodeReason>,
    /// Nodes where a host port the pod asks for is taken.
    ports_taken: HashSet<NodeId>,
    spread: Vec<SpreadView>,
    /// Required affinity: every term's key the node must have.
    affinity_keys: Vec<Arc<KeyDomains>>,
    /// Per term, the domains where a pod matching all the terms runs; `None` when no
    /// such pod runs anywhere and the pod matches its own terms (the first of a series:
    /// any node with the keys will do).
    affinity: Option<Vec<DomainSet>>,
    /// Required anti-affinity: per term, the domains holding a matching pod.
    anti: Vec<DomainSet>,
    /// Domains where a placed pod's required anti-affinity term matches this pod, by key.
    existing_anti: Vec<(String, DomainSet)>,
    /// Preferred terms: weight (negative for anti-affinity), domains matched.
    preferred: Vec<(i64, DomainSet)>,
    /// Node scores vary with the pods placed: every node is compared.
    pub(crate) scores: bool,
}

#[derive(Debug)]
struct SpreadView {
    key: Arc<KeyDomains>,
    hard: bool,
    max_skew: u32,
    /// 1 when the pod counts toward its own constraint.
    self_match: u32,
    /// Matching pods per domain number, on eligible nodes.
    counts: Vec<u32>,
    /// The least-loaded domain's count (0 when some domain holds none, or there are
    /// fewer domains than `minDomains`).
    min: u32,
    max: u32,
}

impl InterPodCheck {
    /// Whether the node's host ports leave room for the pod's.
    pub(crate) fn ports_free(&self, node: NodeId) -> bool {
        !self.ports_taken.contains(&node)
    }

    /// The rules' verdict on a node (host ports aside): the score they add, or why the
    /// node is refused, in kube-scheduler's filter order (PodTopologySpread, then
    /// InterPodAffinity).
    pub(crate) fn judge(&self, node: NodeId) -> Result<i64, NodeReason> {
        if self.volume_in_use {
            return Err(NodeReason::VolumeInUse);
        }
        if let Some(reason) = self.volume_unbindable.get(&node) {
            return Err(reason.clone());
        }
        if self.volume_limited.contains(&node) {
            return Err(NodeReason::VolumeLimit);
        }
        for s in self.spread.iter().filter(|s| s.hard) {
            let Some(domain) = s.key.of(node) else {
                return Err(NodeReason::SpreadMissingLabel);
            };
            if s.counts[domain] + s.self_match > s.min + s.max_skew {
                return Err(NodeReason::SpreadSkew);
            }
        }
        if self.affinity_keys.iter().any(|k| k.of(node).is_none()) {
            return Err(NodeReason::PodAffinityMismatch);
        }
        if let Some(terms) = &self.affinity {
            if !terms.iter().all(|domains| domains.holds(node)) {
                return Err(NodeReason::PodAffinityMismatch);
            }
        }
        if self.anti.iter().any(|domains| domains.holds(node)) {
            return Err(NodeReason::PodAntiAffinityMismatch);
        }
        if self
            .existing_anti
            .iter()
            .any(|(_, domains)| domains.holds(node))
        {
            return Err(NodeReason::ExistingAntiAffinity);
        }
        let mut score = 0;
        for (weight, domains) in &self.preferred {
            if domains.holds(node) {
                score += weight;
            }
        }
        // ScheduleAnyway: the emptiest domains score best, 0 to -100 by count between
        // the least and the most loaded; nodes without the key last.
        for s in self.spread.iter().filter(|s| !s.hard) {
            score -= match s.key.of(node) {
                None => 100,
                Some(_) if s.max == s.min => 0,
                Some(domain) => {
                    let count = s.counts[domain].max(s.min);
                    (100 * (count - s.min) / (s.max - s.min)) as i64
                }
            };
        }
        Ok(score)
    }
}

impl Scheduler {
    /// A namespace's labels as namespace selectors see them (with
    /// `kubernetes.io/metadata.name`).
    pub(crate) fn namespace_labels(&self, namespace: &str) -> Labels {
        let mut labels = self
            .queues
            .namespace_labels
            .get(namespace)
            .cloned()
            .unwrap_or_default();
        labels.insert(
            "kubernetes.io/metadata.name".to_string(),
            namespace.to_string(),
        );
        labels
    }

    /// A pod was submitted or returned to pending: the index turns on for the first pod
    /// that has rules, and the pod waits on bindings if its rules may.
    pub(crate) fn inter_pod_pending(&mut self, id: PodId) {
        let c = self.constraint_of(self.pods[id.0 as usize].base_constraint);
        let (rules, ports) = (
            c.inter_pod.is_some(),
            !c.host_ports.is_empty() || volumes_depend_on_pods(c),
        );
        let waits = c.inter_pod.as_ref().is_some_and(|r| r.waits_on_bindings());
        if (rules || ports) && !self.inter_pod.on {
            self.inter_pod.on = true;
            let bound: Vec<PodId> = self
                .pods()
                .filter(|(_, r)| matches!(r.phase, PodPhase::Bound { .. }))
                .map(|(id, _)| id)
                .collect();
            for pod in bound {
                self.inter_pod_bound(pod);
            }
        }
        if waits {
            self.inter_pod.waiting.insert(id);
        }
    }

    /// Moves the parked pods that wait on bindings, and that a rule refused (not only the
    /// room, which bindings do not grow), back to the active queue; `false` when there
    /// were none.
    pub(crate) fn retry_waiting_on_bindings(&mut self) -> bool {
        if self.inter_pod.waiting.is_empty() {
            return false;
        }
        let waiting = &self.inter_pod.waiting;
        let pods = &self.pods;
        let (retry, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|key| {
                waiting.contains(&key.2)
                    && pods[key.2 .0 as usize].wake_on == crate::hints::WakeOn::Any
            });
        self.parked = keep;
        let any = !retry.is_empty();
        self.active.extend(retry);
        any
    }

    /// A pod left pending (bound or gone).
    pub(crate) fn inter_pod_not_pending(&mut self, id: PodId) {
        if !self.inter_pod.waiting.is_empty() {
            self.inter_pod.waiting.remove(&id);
        }
    }

    /// A pod was bound: it is indexed.
    pub(crate) fn inter_pod_bound(&mut self, id: PodId) {
        if !self.inter_pod.on {
            return;
        }
        let record = &self.pods[id.0 as usize];
        let c = &self.constraints.entries[record.constraint as usize].constraints;
        let index = &mut self.inter_pod;
        index.placed.insert(id);
        for (k, v) in &record.spec.labels {
            index
                .by_label
                .entry((k.clone(), v.clone()))
                .or_default()
                .insert(id);
        }
        index
            .by_namespace
            .entry(record.spec.namespace.clone())
            .or_default()
            .insert(id);
        if !c.host_ports.is_empty() {
            index.port_holders.insert(id);
        }
        for claim in c.volumes.iter().flat_map(|v| &v.exclusive) {
            index
                .exclusive_claims
                .entry(claim.clone())
                .or_default()
                .insert(id);
        }
        if let (Some(v), PodPhase::Bound { node, .. }) = (&c.volumes, &record.phase) {
            if v.binds_claims() {
                let spec = &self.cluster.node(*node).spec;
                bind_claims(index, id, v, spec);
            }
            if !v.attach.is_empty() {
                index.attached_by.insert(id, *node);
                let on_node = index.attached.entry(*node).or_default();
                for a in &v.attach {
                    *on_node
                        .entry(a.driver.clone())
                        .or_default()
                        .entry(a.volume.clone())
                        .or_default() += 1;
                }
            }
        }
        for (i, term) in c
            .inter_pod
            .iter()
            .flat_map(|r| &r.anti_affinity)
            .enumerate()
        {
            for anchor in anchors(term.selector.as_deref()) {
                index.anti_terms.entry(anchor).or_default().insert((id, i));
            }
        }
    }

    /// A bound pod left its node: it is taken out of the index.
    pub(crate) fn inter_pod_unbound(&mut self, id: PodId) {
        if !self.inter_pod.on {
            return;
        }
        let record = &self.pods[id.0 as usize];
        let c = &self.constraints.entries[record.constraint as usize].constraints;
        let index = &mut self.inter_pod;
        index.placed.remove(&id);
        for (k, v) in &record.spec.labels {
            let key = (k.clone(), v.clone());
            if let Some(set) = index.by_label.get_mut(&key) {
                set.remove(&id);
                if set.is_empty() {
                    index.by_label.remove(&key);
                }
            }
        }
        if let Some(set) = index.by_namespace.get_mut(&record.spec.namespace) {
            set.remove(&id);
        }
        index.port_holders.remove(&id);
        for claim in c.volumes.iter().flat_map(|v| &v.exclusive) {
            if let Some(set) = index.exclusive_claims.get_mut(claim) {
                set.remove(&id);
                if set.is_empty() {
                    index.exclusive_claims.remove(claim);
                }
            }
        }
        if let Some(node) = index.attached_by.remove(&id) {
            let on_node = index.attached.entry(node).or_default();
            for a in c.volumes.iter().flat_map(|v| &v.attach) {
                if let Some(volumes) = on_node.get_mut(&a.driver) {
                    if let Some(users) = volumes.get_mut(&a.volume) {
                        *users -= 1;
                        if *users == 0 {
                            volumes.remove(&a.volume);
                        }
                    }
                    if volumes.is_empty() {
                        on_node.remove(&a.driver);
                    }
                }
            }
            if on_node.is_empty() {
                index.attached.remove(&node);
            }
        }
        for (i, term) in c
            .inter_pod
            .iter()
            .flat_map(|r| &r.anti_affinity)
            .enumerate()
        {
            for anchor in anchors(term.selector.as_deref()) {
                if let Some(set) = index.anti_terms.get_mut(&anchor) {
                    set.remove(&(id, i));
                }
            }
        }
    }

    /// The nodes where attaching the pod's CSI volumes would pass a driver's limit: the
    /// volumes already attached there, and the pod's others, over
    /// [`crate::NodeSpec::volume_limits`].
    fn volume_limited(&self, volumes: Option<&crate::VolumeRules>) -> HashSet<NodeId> {
        let mut out = HashSet::new();
        let Some(attach) = volumes.map(|v| &v.attach).filter(|a| !a.is_empty()) else {
            return out;
        };
        for (id, node) in self.cluster.iter() {
            let limits = &node.spec.volume_limits;
            if limits.is_empty() {
                continue;
            }
            let on_node = self.inter_pod.attached.get(&id);
            let over = limits.iter().any(|(driver, &limit)| {
                let attached = on_node.and_then(|n| n.get(driver));
                let new = attach
                    .iter()
                    .filter(|a| a.driver == *driver)
                    .filter(|a| attached.is_none_or(|v| !v.contains_key(&a.volume)))
                    .count();
                new > 0 && attached.map_or(0, |v| v.len()) + new > limit as usize
            });
            if over {
                out.insert(id);
            }
        }
        out
    }

    /// The nodes where the pod's unbound claims cannot be bound now (volumes that other
    /// claims took, claims other pods bound elsewhere), and why.
    fn volume_unbindable(
        &self,
        volumes: Option<&crate::VolumeRules>,
    ) -> HashMap<NodeId, NodeReason> {
        let mut out = HashMap::new();
        let Some(rules) = volumes.filter(|v| v.binds_claims()) else {
            return out;
        };
        let index = &self.inter_pod;
        for (id, node) in self.cluster.iter() {
            let verdict = rules.bind_on(
                &node.spec,
                |volume| index.volumes_taken.contains_key(volume),
                |claim| index.claim_bindings.get(claim).map(|(b, _)| &b.terms),
            );
            if let Err(conflict) = verdict {
                out.insert(id, volume_reason(conflict));
            }
        }
        out
    }

    /// How a claim not bound yet (`namespace/name`) was bound when a pod using it was
    /// placed; `None`: no placed pod bound it.
    pub fn claim_binding(&self, claim: &str) -> Option<&ClaimBinding> {
        self.inter_pod.claim_bindings.get(claim).map(|(b, _)| b)
    }

    /// Every claim binding the engine made, by claim.
    pub fn claim_bindings(&self) -> impl Iterator<Item = (&str, &ClaimBinding)> {
        self.inter_pod
            .claim_bindings
            .iter()
            .map(|(claim, (b, _))| (claim.as_str(), b))
    }

    /// Forgets the engine's binding of a claim: the API shows the claim bound (or gone, or
    /// its volume taken by another claim), and the claim's rules now say where it may be.
    pub fn forget_claim_binding(&mut self, claim: &str) {
        if let Some((binding, _)) = self.inter_pod.claim_bindings.remove(claim) {
            if let ClaimTarget::Volume(volume) = &binding.target {
                self.inter_pod.volumes_taken.remove(volume);
            }
        }
    }

    /// Undoes the claim bindings that placing pod `id` made (its gang attempt failed).
    pub(crate) fn undo_claim_bindings_of(&mut self, id: PodId) {
        let made: Vec<String> = self
            .inter_pod
            .claim_bindings
            .iter()
            .filter(|(_, (_, by))| *by == id)
            .map(|(claim, _)| claim.clone())
            .collect();
        for claim in made {
            self.forget_claim_binding(&claim);
        }
    }

    /// Nodes came, went or changed: which nodes count toward spreads is judged again.
    pub(crate) fn inter_pod_nodes_changed(&mut self) {
        self.inter_pod.spread_nodes.clear();
        self.inter_pod.key_domains.clear();
    }

    /// The domains of topology key `key`, numbered (cached until nodes change).
    fn key_domains(&mut self, key: &str) -> Arc<KeyDomains> {
        if let Some(domains) = self.inter_pod.key_domains.get(key) {
            return domains.clone();
        }
        let mut numbers: HashMap<&str, u32> = HashMap::new();
        let mut of_node = Vec::new();
        for (id, node) in self.cluster.iter() {
            if of_node.len() <= id.0 as usize {
                of_node.resize(id.0 as usize + 1, None);
            }
            of_node[id.0 as usize] = node.spec.labels.get(key).map(|v| {
                let next = numbers.len() as u32;
                *numbers.entry(v.as_str()).or_insert(next)
            });
        }
        let domains = Arc::new(KeyDomains {
            count: numbers.len(),
            of_node,
        });
        self.inter_pod
            .key_domains
            .insert(key.to_string(), domains.clone());
        domains
    }

    /// Bound pods that may match `selector` among those named (`namespaces`, `None`:
    /// all), looked up by the selector's anchor label when it has one.
    fn rule_candidates<'a>(
        &'a self,
        selector: &'a LabelSelector,
        namespaces: Option<&'a [String]>,
    ) -> Box<dyn Iterator<Item = PodId> + 'a> {
        let index = &self.inter_pod;
        let matching = move |p: &PodId| {
            let spec = &self.pods[p.0 as usize].spec;
            selector_matches(selector, &spec.labels)
                && namespaces.is_none_or(|ns| ns.contains(&spec.namespace))
        };
        if let Some((key, values)) = selector_anchor(selector) {
            let mut pods: BTreeSet<PodId> = BTreeSet::new();
            for v in values {
                if let Some(set) = index.by_label.get(&(key.to_string(), v.clone())) {
                    pods.extend(set.iter().copied());
                }
            }
            return Box::new(pods.into_iter().filter(move |p| matching(p)));
        }
        match namespaces {
            Some(ns) => {
                let pods: BTreeSet<PodId> = ns
                    .iter()
                    .filter_map(|n| index.by_namespace.get(n))
                    .flatten()
                    .copied()
                    .collect();
                Box::new(pods.into_iter().filter(move |p| matching(p)))
            }
            None => Box::new(index.placed.iter().copied().filter(move |p| matching(p))),
        }
    }

    /// The node a bound pod runs on.
    fn node_of_bound(&self, pod: PodId) -> NodeId {
        let PodPhase::Bound { node, .. } = self.pods[pod.0 as usize].phase else {
            unreachable!("indexed pods are bound")
        };
        node
    }

    /// Placed pods whose required anti-affinity terms match `spec`: (pod, term index).
    fn repelling_terms(&self, spec: &PodSpec) -> Vec<(PodId, usize)> {
        let index = &self.inter_pod;
        if index.anti_terms.is_empty() {
            return Vec::new();
        }
        let mut terms: BTreeSet<(PodId, usize)> = BTreeSet::new();
        let open = index.anti_terms.get(&None).into_iter().flatten();
        let anchored = spec
            .labels
            .iter()
            .filter_map(|(k, v)| index.anti_terms.get(&Some((k.clone(), v.clone()))))
            .flatten();
        let ns_labels = |ns: &str| self.namespace_labels(ns);
        for &(holder, i) in open.chain(anchored) {
            let record = &self.pods[holder.0 as usize];
            let term = &self
                .constraint_of(record.constraint)
                .inter_pod
                .as_ref()
                .unwrap()
                .anti_affinity[i];
            if term.matches(&spec.namespace, &spec.labels, &ns_labels) {
                terms.insert((holder, i));
            }
        }
        terms.into_iter().collect()
    }

    /// The required anti-affinity of preemptors that room is held for and that pod `id` may
    /// not overtake (no lower priority, another workload), where it matches the pod: (the
    /// held node, the term's topology key). Such a preemptor counts as if placed on its
    /// node, as kube-scheduler counts nominated pods, or the pod could take the domain the
    /// victims left and be preempted again, cycle after cycle.
    fn held_repelling(&self, id: PodId) -> Vec<(NodeId, String)> {
        if self.holds.is_empty() {
            return Vec::new();
        }
        let spec = &self.pods[id.0 as usize].spec;
        let ns_labels = |ns: &str| self.namespace_labels(ns);
        let mut out = Vec::new();
        for &node in self.holds.keys() {
            for hold in self.holds_against(id, node) {
                let holder = &self.pods[hold.pod.0 as usize];
                let terms = self
                    .constraint_of(holder.constraint)
                    .inter_pod
                    .iter()
                    .flat_map(|r| &r.anti_affinity);
                for term in terms {
                    if term.matches(&spec.namespace, &spec.labels, &ns_labels) {
                        out.push((node, term.topology_key.clone()));
                    }
                }
            }
        }
        out
    }

    /// What a pod's inter-pod rules and host ports allow now; `None` when nothing
    /// restricts it (no rules, no host ports, and no placed pod's anti-affinity matches
    /// it).
    pub(crate) fn inter_pod_check(&mut self, id: PodId) -> Option<InterPodCheck> {
        if !self.inter_pod.on {
            return None;
        }
        let record = &self.pods[id.0 as usize];
        let constraint = record.constraint;
        let c = self.constraint_of(constraint);
        let spec = &record.spec;
        let repelling = self.repelling_terms(spec);
        let held_repelling = self.held_repelling(id);
        if c.inter_pod.is_none()
            && c.host_ports.is_empty()
            && !volumes_depend_on_pods(c)
            && repelling.is_empty()
            && held_repelling.is_empty()
        {
            return None;
        }
        let mut check = InterPodCheck {
            volume_in_use: c.volumes.iter().flat_map(|v| &v.exclusive).any(|claim| {
                self.inter_pod
                    .exclusive_claims
                    .get(claim)
                    .is_some_and(|users| users.iter().any(|&u| u != id))
            }),
            volume_limited: self.volume_limited(c.volumes.as_deref()),
            volume_unbindable: self.volume_unbindable(c.volumes.as_deref()),
            ..InterPodCheck::default()
        };
        for &holder in &self.inter_pod.port_holders {
            let other = self.constraint_of(self.pods[holder.0 as usize].constraint);
            if c.host_ports
                .iter()
                .any(|p| other.host_ports.iter().any(|o| p.conflicts(o)))
            {
                if let PodPhase::Bound { node, .. } = self.pods[holder.0 as usize].phase {
                    check.ports_taken.insert(node);
                }
            }
        }
        let rules = c.inter_pod.clone();
        let placed = repelling.into_iter().map(|(holder, i)| {
            let record = &self.pods[holder.0 as usize];
            let key = self
                .constraint_of(record.constraint)
                .inter_pod
                .as_ref()
                .unwrap()
                .anti_affinity[i]
                .topology_key
                .clone();
            (self.node_of_bound(holder), key)
        });
        let placed: Vec<(NodeId, String)> = placed.collect();
        for (node, key) in placed.into_iter().chain(held_repelling) {
            let at = match check.existing_anti.iter().position(|(k, _)| *k == key) {
                Some(at) => at,
                None => {
                    let domains = DomainSet::new(self.key_domains(&key));
                    check.existing_anti.push((key, domains));
                    check.existing_anti.len() - 1
                }
            };
            check.existing_anti[at].1.insert_node(node);
        }
        let Some(rules) = rules else {
            return Some(check);
        };
        let own = &self.pods[id.0 as usize].spec;
        let (own_namespace, own_labels) = (own.namespace.clone(), own.labels.clone());
        // Required affinity: pods that match every term count, in each term's domain.
        if let Some(first) = rules.affinity.first() {
            check.affinity_keys = rules
                .affinity
                .iter()
                .map(|t| self.key_domains(&t.topology_key))
                .collect();
            let mut terms: Vec<DomainSet> = check
                .affinity_keys
                .iter()
                .map(|k| DomainSet::new(k.clone()))
                .collect();
            let mut any = false;
            let ns_labels = |ns: &str| self.namespace_labels(ns);
            if let Some(selector) = &first.selector {
                for pod in self.rule_candidates(selector, first.named_namespaces()) {
                    let other = &self.pods[pod.0 as usize].spec;
                    if !rules
                        .affinity
                        .iter()
                        .all(|t| t.matches(&other.namespace, &other.labels, &ns_labels))
                    {
                        continue;
                    }
                    let node = self.node_of_bound(pod);
                    for domains in &mut terms {
                        any |= domains.insert_node(node);
                    }
                }
            }
            let matches_itself = rules
                .affinity
                .iter()
                .all(|t| t.matches(&own_namespace, &own_labels, &ns_labels));
            check.affinity = (any || !matches_itself).then_some(terms);
        }
        let term_domains = |this: &mut Self, term: &crate::inter_pod::PodAffinityTerm| {
            let mut domains = DomainSet::new(this.key_domains(&term.topology_key));
            if let Some(selector) = &term.selector {
                let ns_labels = |ns: &str| this.namespace_labels(ns);
                for pod in this.rule_candidates(selector, term.named_namespaces()) {
                    let other = &this.pods[pod.0 as usize].spec;
                    if term.matches(&other.namespace, &other.labels, &ns_labels) {
                        domains.insert_node(this.node_of_bound(pod));
                    }
                }
            }
            domains
        };
        for term in &rules.anti_affinity {
            let domains = term_domains(self, term);
            check.anti.push(domains);
        }
        for (weight, term) in &rules.preferred_affinity {
            let domains = term_domains(self, term);
            check.preferred.push((*weight as i64, domains));
        }
        for (weight, term) in &rules.preferred_anti_affinity {
            let domains = term_domains(self, term);
            check.preferred.push((-(*weight as i64), domains));
        }
        let namespace = [own_namespace];
        for (i, s) in rules.spread.iter().enumerate() {
            let nodes = self.spread_nodes(constraint, i);
            let key = self.key_domains(&s.topology_key);
            let mut counts = vec![0u32; key.count];
            // kube-scheduler counts no placed pod for an empty selector (`{}`), though the
            // pod itself matches it (countPodsMatchSelector).
            if let Some(selector) = s.selector.as_ref().filter(|s| !s.is_empty()) {
                for pod in self.rule_candidates(selector, Some(&namespace)) {
                    let PodPhase::Bound { node, .. } = self.pods[pod.0 as usize].phase else {
                        continue;
                    };
                    if !nodes
                        .eligible
                        .get(node.0 as usize)
                        .copied()
                        .unwrap_or(false)
                    {
                        continue;
                    }
                    if let Some(d) = key.of(node) {
                        counts[d] += 1;
                    }
                }
            }
            let held: Vec<u32> = counts.iter().copied().filter(|&c| c > 0).collect();
            let too_few = s.hard && s.min_domains.is_some_and(|m| (nodes.domains as u32) < m);
            let min = match held.iter().min() {
                Some(&m) if held.len() >= nodes.domains && !too_few => m,
                _ => 0,
            };
            let max = held.iter().max().copied().unwrap_or(0);
            check.spread.push(SpreadView {
                key,
                hard: s.hard,
                max_skew: s.max_skew,
                self_match: s.counts(&own_labels) as u32,
                counts,
                min,
                max,
            });
        }
        check.scores = rules.scores();
        Some(check)
    }

    /// Which nodes count toward a pod's spread constraint: those with the topology keys
    /// of all its constraints of the same kind (DoNotSchedule or ScheduleAnyway) that
    /// its node-inclusion policies admit.
    fn spread_nodes(&mut self, constraint: u32, i: usize) -> Arc<SpreadNodes> {
        if let Some(nodes) = self.inter_pod.spread_nodes.get(&(constraint, i)) {
            return nodes.clone();
        }
        let c: &PlacementConstraints = self.constraint_of(constraint);
        let rules = c.inter_pod.as_ref().expect("a pod with spread constraints");
        let s = &rules.spread[i];
        let keys: Vec<&String> = rules
            .spread
            .iter()
            .filter(|o| o.hard == s.hard)
            .map(|o| &o.topology_key)
            .collect();
        let mut eligible = Vec::new();
        let mut domains: HashSet<&String> = HashSet::new();
        for (id, node) in self.cluster.iter() {
            let spec = &node.spec;
            let counts = keys.iter().all(|k| spec.labels.contains_key(*k))
                && (!s.honor_node_affinity || selects_node(c, spec))
                && (!s.honor_taints || tolerates_node(c, spec));
            if eligible.len() <= id.0 as usize {
                eligible.resize(id.0 as usize + 1, false);
            }
            eligible[id.0 as usize] = counts;
            if counts {
                domains.insert(&spec.labels[&s.topology_key]);
            }
        }
        let nodes = Arc::new(SpreadNodes {
            eligible,
            domains: domains.len(),
        });
        self.inter_pod
            .spread_nodes
            .insert((constraint, i), nodes.clone());
        nodes
    }

    /// Whether a pending pod's inter-pod rules and host ports (and the anti-affinity of
    /// the pods placed) let it go on `node` now; [`Scheduler::could_place_on`] judges the
    /// rest.
    pub fn inter_pod_allows(&mut self, id: PodId, node: NodeId) -> bool {
        match self.inter_pod_check(id) {
            None => true,
            Some(check) => check.ports_free(node) && check.judge(node).is_ok(),
        }
    }

    /// Whether a placed pod's required anti-affinity matches this pending pod: its
    /// verdicts change with pods ending, wherever they end.
    pub(crate) fn repelled(&self, id: PodId) -> bool {
        self.inter_pod.on
            && !self
                .repelling_terms(&self.pods[id.0 as usize].spec)
                .is_empty()
    }
}

/// Whether the pods placed decide where the pod's volumes may go: a `ReadWriteOncePod`
/// claim, which no other pod may use at the same time; CSI volumes, which count against
/// their node's limit; claims not bound yet, which placed pods bind.
pub(crate) fn volumes_depend_on_pods(c: &PlacementConstraints) -> bool {
    c.volumes
        .as_ref()
        .is_some_and(|v| !v.exclusive.is_empty() || !v.attach.is_empty() || v.binds_claims())
}

/// A volume conflict in kube-scheduler's words.
pub(crate) fn volume_reason(conflict: VolumeConflict) -> NodeReason {
    match conflict {
        VolumeConflict::NodeAffinity => NodeReason::VolumeNodeAffinityConflict,
        VolumeConflict::Provisioning => NodeReason::VolumeBindConflict,
    }
}

/// Binds the unbound claims of pod `id`, placed on `node`, as the engine judged them there;
/// claims that pods placed earlier bound keep their binding. A pod placed where its claims
/// cannot be bound (one found bound already, live) binds none.
fn bind_claims(
    index: &mut InterPodIndex,
    id: PodId,
    rules: &crate::VolumeRules,
    node: &crate::NodeSpec,
) {
    let fresh = rules
        .bind_on(
            node,
            |volume| index.volumes_taken.contains_key(volume),
            |claim| index.claim_bindings.get(claim).map(|(b, _)| &b.terms),
        )
        .unwrap_or_default();
    for binding in fresh {
        if let ClaimTarget::Volume(volume) = &binding.target {
            index
                .volumes_taken
                .insert(volume.clone(), binding.claim.clone());
        }
        index
            .claim_bindings
            .insert(binding.claim.clone(), (binding, id));
    }
}

/// The index keys of a term by its selector's anchor (none for a term that matches no pod).
fn anchors(selector: Option<&[crate::model::Requirement]>) -> Vec<Option<LabelPair>> {
    let Some(selector) = selector else {
        return Vec::new();
    };
    match selector_anchor(selector) {
        Some((key, values)) => values
            .iter()
            .map(|v| Some((key.to_string(), v.clone())))
            .collect(),
        None => vec![None],
    }
}
