//! Team queues: ClusterQueues hold quotas per resource flavor, cohorts lend idle quota
//! between them, LocalQueues are where a namespace submits.
//!
//! A workload (a pod, or a gang as a whole) is admitted when its ClusterQueue's quota
//! allows it and the nodes can hold it, in one step: quota is charged when the pods are
//! bound and returned when they end, so "admitted" and "placed" never disagree.
//!
//! Quota amounts are in the engine's units: CPU in millicores, `nvidia.com/gpu` in
//! thousandths of a GPU (so shared GPUs count their share), memory and storage in bytes,
//! `pods` as a count, other extended resources in their own units.

use crate::model::{Labels, Requirement, Taint, TaintEffect, Toleration};
use crate::resources::GPU_RESOURCE;
use crate::types::Millis;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// The resource name that counts pods.
pub const PODS_RESOURCE: &str = "pods";

/// Node labels, taints and tolerations that stand for one kind of node (`a100`, `spot`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ResourceFlavor {
    pub name: String,
    /// Pods admitted under this flavor only go to nodes with these labels.
    pub node_labels: Labels,
    /// Taints the flavor's nodes carry: the flavor admits only pods that tolerate them
    /// (with its own `tolerations`); the next flavor is tried for the others.
    pub node_taints: Vec<Taint>,
    /// Tolerations added to pods admitted under this flavor.
    pub tolerations: Vec<Toleration>,
}

/// Quota of one resource in one flavor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceQuota {
    pub name: String,
    pub nominal: i64,
    /// How much more than `nominal` the queue may borrow from its cohort (`None`: no limit).
    pub borrowing_limit: Option<i64>,
    /// How much of `nominal` the cohort may borrow (`None`: all of it).
    pub lending_limit: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlavorQuotas {
    pub flavor: String,
    pub resources: Vec<ResourceQuota>,
}

/// Resources that are assigned one flavor together (e.g. cpu, memory and GPUs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceGroup {
    pub covered: Vec<String>,
    pub flavors: Vec<FlavorQuotas>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum QueueingStrategy {
    /// A head that does not fit quota blocks the workloads behind it.
    StrictFifo,
    /// Workloads behind a head that does not fit may go first.
    #[default]
    BestEffortFifo,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum WithinQueuePreemption {
    #[default]
    Never,
    LowerPriority,
    LowerOrNewerEqualPriority,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum ReclaimPolicy {
    #[default]
    Never,
    LowerPriority,
    Any,
}

/// May a workload that needs to borrow preempt others' borrowed workloads?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BorrowWithinCohort {
    /// Only victims of priority at or below this may be preempted.
    pub max_priority_threshold: Option<i32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct QueuePreemption {
    pub within_cluster_queue: WithinQueuePreemption,
    pub reclaim_within_cohort: ReclaimPolicy,
    pub borrow_within_cohort: Option<BorrowWithinCohort>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum StopPolicy {
    #[default]
    None,
    /// Admit nothing new; admitted workloads keep running.
    Hold,
    /// Admit nothing new and evict what runs.
    HoldAndDrain,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct ClusterQueueSpec {
    pub name: String,
    pub cohort: Option<String>,
    /// Namespaces whose LocalQueues may point here (`None`: all).
    pub namespace_selector: Option<Vec<Requirement>>,
    pub queueing_strategy: QueueingStrategy,
    pub resource_groups: Vec<ResourceGroup>,
    pub preemption: QueuePreemption,
    /// Weight for fair sharing of borrowed quota (default 1).
    pub fair_weight: f64,
    pub stop_policy: StopPolicy,
    /// Admitted workloads are not preempted before they ran this long (anti-thrash).
    pub min_runtime: Option<Millis>,
    /// A workload waits this long before it may preempt others.
    pub preemption_delay: Option<Millis>,
    /// Why the queue admits nothing, as Kueue deactivates a ClusterQueue (it names a
    /// ResourceFlavor that does not exist); `None`: active.
    pub inactive: Option<Inactive>,
    /// Pods in any namespace name this queue itself rather than a LocalQueue, as with
    /// Volcano's and KAI's cluster-wide queues; a LocalQueue of the same name in the
    /// pod's namespace still wins.
    pub cluster_scoped: bool,
    /// Kueue's `flavorFungibility.whenCanBorrow: Borrow`: a workload that fits a flavor by
    /// borrowing takes it; `false` (Kestrel's default, Kueue's `TryNextFlavor`): the later
    /// flavors are tried for room without borrowing first.
    pub borrow_in_first_fitting_flavor: bool,
    /// Volcano's `reclaimable: false`: other queues of its cohort never preempt its
    /// workloads, neither to reclaim the quota it borrows from them nor to borrow in
    /// turn; they wait until its workloads end. `false`: what it borrows is taken back as
    /// the other queues' `reclaimWithinCohort` and `borrowWithinCohort` allow.
    pub keeps_borrowed_quota: bool,
}

/// Why a ClusterQueue is inactive: Kueue's reason (`FlavorNotFound`) and what to fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Inactive {
    pub reason: &'static str,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LocalQueueSpec {
    pub namespace: String,
    pub name: String,
    pub cluster_queue: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct CohortSpec {
    pub name: String,
    pub parent: Option<String>,
    /// Quota the cohort itself holds, shared by all its queues.
    pub resource_groups: Vec<ResourceGroup>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {object}: field {field}: {why}")]
pub struct QueueError {
    pub kind: &'static str,
    pub object: String,
    pub field: &'static str,
    pub why: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct CqId(pub u32);

/// The flavor chosen per resource group of a ClusterQueue.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Admission {
    pub cq: CqId,
    pub flavors: Vec<u16>,
}

/// Why quota does not admit a workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum QueueProblem {
    /// The pod names a LocalQueue that does not exist in its namespace.
    NoLocalQueue { namespace: String, name: String },
    /// The LocalQueue points at a ClusterQueue that does not exist.
    NoClusterQueue {
        local_queue: String,
        cluster_queue: String,
    },
    /// The ClusterQueue's namespaceSelector does not select the pod's namespace.
    NamespaceNotSelected {
        cluster_queue: String,
        namespace: String,
    },
    /// The ClusterQueue's stopPolicy holds it.
    Stopped { cluster_queue: String },
    /// The ClusterQueue is inactive (see [`ClusterQueueSpec::inactive`]).
    Inactive {
        cluster_queue: String,
        why: Inactive,
    },
    /// The workload asks for a resource no resource group of the queue covers.
    NotCovered {
        cluster_queue: String,
        resource: String,
    },
    /// Not enough quota: the first resource that does not fit in any flavor.
    Quota(Box<QuotaShortfall>),
    /// The only flavors with room taint their nodes (`spec.nodeTaints`) with what the pod
    /// does not tolerate: the first such flavor and taint.
    FlavorTaint {
        cluster_queue: String,
        flavor: String,
        taint: String,
    },
    /// A StrictFIFO queue whose head does not fit holds everything behind it.
    BehindHead { cluster_queue: String },
    /// A workload of the queue at this priority or higher is making room by preemption;
    /// the quota it frees is its own.
    BehindPreemptor { cluster_queue: String },
    /// It would borrow, while a ClusterQueue of its cohort takes quota back by preemption:
    /// the quota the victims free is that queue's, not for borrowers.
    BehindReclaim { cluster_queue: String },
    /// Victims were asked to leave for this workload; it starts when they are gone.
    WaitingForVictims { victims: u32 },
    /// The queue's preemption delay has not passed yet.
    PreemptionDelay { until: Millis },
}

/// A resource a workload needs more of than its queue can give.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuotaShortfall {
    pub cluster_queue: String,
    pub flavor: String,
    pub resource: String,
    pub need: i64,
    pub used: i64,
    pub nominal: i64,
    /// Nominal plus borrowing limit, when the queue may borrow.
    pub limit: Option<i64>,
    /// What the cohort could still lend.
    pub cohort_free: Option<i64>,
    /// The cohort whose own `borrowingLimit` bounds what its tree may lend the queue,
    /// when one does (its subtree uses all it may take from above).
    pub cohort_limit: Option<String>,
}

/// Prints an amount in the units users write quotas in.
pub fn format_amount(resource: &str, amount: i64) -> String {
    match resource {
        "cpu" | GPU_RESOURCE => {
            if amount % 1000 == 0 {
                format!("{}", amount / 1000)
            } else {
                format!("{}m", amount)
            }
        }
        "memory" | "ephemeral-storage" => format!("{}", crate::resources::Bytes(amount)),
        _ => amount.to_string(),
    }
}

/// The scale from a quantity as written to the engine's units (see the module docs).
pub fn quota_scale(resource: &str) -> i64 {
    match resource {
        "cpu" | GPU_RESOURCE => 1000,
        _ => 1,
    }
}

impl fmt::Display for QueueProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueProblem::NoLocalQueue { namespace, name } => write!(
                f,
                "LocalQueue {namespace}/{name} does not exist: create it, or fix the pod's queue label"
            ),
            QueueProblem::NoClusterQueue { local_queue, cluster_queue } => write!(
                f,
                "LocalQueue {local_queue} points at ClusterQueue {cluster_queue:?}, which does not exist: create it, or fix spec.clusterQueue"
            ),
            QueueProblem::NamespaceNotSelected { cluster_queue, namespace } => write!(
                f,
                "ClusterQueue {cluster_queue} does not admit namespace {namespace} (spec.namespaceSelector): label the namespace or change the selector"
            ),
            QueueProblem::Inactive { cluster_queue, why } => {
                write!(
                    f,
                    "ClusterQueue {cluster_queue} is inactive: {}: {}",
                    why.reason, why.message
                )
            }
            QueueProblem::Stopped { cluster_queue } => write!(
                f,
                "ClusterQueue {cluster_queue} is stopped (spec.stopPolicy): set it to None to admit work"
            ),
            QueueProblem::FlavorTaint { cluster_queue, flavor, taint } => write!(
                f,
                "ClusterQueue {cluster_queue}: the nodes of flavor {flavor} carry the taint {taint} (its spec.nodeTaints), which the pod does not tolerate: add a toleration, or quota in a flavor it may use"
            ),
            QueueProblem::NotCovered { cluster_queue, resource } => write!(
                f,
                "ClusterQueue {cluster_queue} has no quota for {resource}: add it to a resourceGroup's coveredResources"
            ),
            QueueProblem::Quota(q) => {
                let a = |v: i64| format_amount(&q.resource, v);
                write!(
                    f,
                    "quota: ClusterQueue {} flavor {} needs {} more {}: {} in use of nominal {}",
                    q.cluster_queue,
                    q.flavor,
                    a(q.need),
                    q.resource,
                    a(q.used),
                    a(q.nominal)
                )?;
                if let Some(limit) = q.limit {
                    write!(f, ", borrowing up to {}", a(limit))?;
                }
                if let Some(free) = q.cohort_free {
                    write!(f, ", cohort can lend {}", a(free))?;
                }
                if let Some(cohort) = &q.cohort_limit {
                    write!(
                        f,
                        " (Cohort {cohort} is at its borrowingLimit: its queues use all it may take from its parent)"
                    )?;
                }
                Ok(())
            }
            QueueProblem::BehindHead { cluster_queue } => write!(
                f,
                "waiting behind the head of StrictFIFO ClusterQueue {cluster_queue}"
            ),
            QueueProblem::BehindPreemptor { cluster_queue } => write!(
                f,
                "waiting: a workload of ClusterQueue {cluster_queue} with the same or higher priority is making room by preemption"
            ),
            QueueProblem::BehindReclaim { cluster_queue } => write!(
                f,
                "waiting to borrow: ClusterQueue {cluster_queue} of its cohort is taking back its quota by preemption"
            ),
            QueueProblem::WaitingForVictims { victims } => write!(
                f,
                "waiting for {victims} preempted pod(s) to leave"
            ),
            QueueProblem::PreemptionDelay { until } => write!(
                f,
                "may preempt from t={} s on (preemption delay)",
                until / 1000
            ),
        }
    }
}

/// Quota and usage of one flavor in one resource group, per covered resource.
#[derive(Debug, Clone)]
pub(crate) struct FlavorBook {
    pub(crate) flavor: String,
    nominal: Vec<i64>,
    borrowing_limit: Vec<Option<i64>>,
    lending_limit: Vec<Option<i64>>,
    pub(crate) usage: Vec<i64>,
}

impl FlavorBook {
    /// What the queue keeps for itself (not lent).
    fn guaranteed(&self, i: usize) -> i64 {
        self.lending_limit[i].map_or(0, |l| (self.nominal[i] - l).max(0))
    }
}

#[derive(Debug, Clone)]
pub(crate) struct GroupBook {
    pub(crate) covered: Vec<String>,
    pub(crate) flavors: Vec<FlavorBook>,
}

#[derive(Debug, Clone)]
pub(crate) struct CqBook {
    pub(crate) spec: ClusterQueueSpec,
    /// The root of its cohort tree: queues under one root share idle quota.
    pub(crate) root: Option<String>,
    pub(crate) groups: Vec<GroupBook>,
}

/// How a workload fits its queue's quota.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum QuotaFit {
    /// Inside nominal quota.
    Nominal(Admission),
    /// Only by borrowing from the cohort.
    Borrowing(Admission),
    No(QueueProblem),
}

/// All queues and their usage.
#[derive(Debug, Default, Clone)]
pub(crate) struct QueueBook {
    pub(crate) cqs: Vec<CqBook>,
    pub(crate) cq_ids: HashMap<String, CqId>,
    pub(crate) local: HashMap<(String, String), String>,
    pub(crate) cohorts: HashMap<String, CohortSpec>,
    pub(crate) flavors: HashMap<String, ResourceFlavor>,
    pub(crate) namespace_labels: HashMap<String, Labels>,
    /// Per ClusterQueue: its borrowed share averaged over time (decaying with a
    /// half-life), when fair share counts history; and when it was last updated.
    pub(crate) recent_share: Vec<f64>,
    pub(crate) recent_at: Millis,
    /// Every cohort of every tree (those only named by a queue or as a parent too).
    cohort_books: HashMap<String, CohortBook>,
}

/// A cohort compiled for quota checks: where it hangs, what hangs below it, and the quota
/// it holds itself.
#[derive(Debug, Clone, Default)]
struct CohortBook {
    parent: Option<String>,
    cohorts: Vec<String>,
    queues: Vec<CqId>,
    /// (flavor, resource) -> the cohort's own quota.
    quota: HashMap<(String, String), ResourceQuota>,
}

/// One resource in one flavor at a node of a cohort tree (a ClusterQueue or a cohort), as
/// Kueue's hierarchical cohorts count it.
#[derive(Debug, Clone, Copy, Default)]
struct TreeAmounts {
    /// Its own nominal quota plus what its children lend it.
    quota: i64,
    /// What it keeps from its parent: quota minus its lending limit (0 without one).
    guaranteed: i64,
    /// A queue's usage; a cohort's: what its children take beyond what they keep.
    usage: i64,
    borrowing_limit: Option<i64>,
}

impl TreeAmounts {
    /// What it puts in its parent's pool.
    fn lent(&self) -> i64 {
        self.quota - self.guaranteed
    }
    /// What it takes from its parent's pool.
    fn taken(&self) -> i64 {
        (self.usage - self.guaranteed).max(0)
    }
    /// The most it may still take from its parent: its borrowing limit, if any.
    fn borrow_room(&self) -> Option<i64> {
        self.borrowing_limit.map(|b| self.lent() - self.taken() + b)
    }
}

fn compile_groups(groups: &[ResourceGroup]) -> Vec<GroupBook> {
    groups
        .iter()
        .map(|g| GroupBook {
            covered: g.covered.clone(),
            flavors: g
                .flavors
                .iter()
                .map(|f| {
                    let quota = |name: &str| f.resources.iter().find(|r| r.name == name);
                    FlavorBook {
                        flavor: f.flavor.clone(),
                        nominal: g
                            .covered
                            .iter()
                            .map(|r| quota(r).map_or(0, |q| q.nominal))
                            .collect(),
                        borrowing_limit: g
                            .covered
                            .iter()
                            .map(|r| quota(r).and_then(|q| q.borrowing_limit))
                            .collect(),
                        lending_limit: g
                            .covered
                            .iter()
                            .map(|r| quota(r).and_then(|q| q.lending_limit))
                            .collect(),
                        usage: vec![0; g.covered.len()],
                    }
                })
                .collect(),
        })
        .collect()
}

fn validate_groups(
    kind: &'static str,
    object: &str,
    groups: &[ResourceGroup],
) -> Result<(), QueueError> {
    let err = |field, why: String| QueueError {
        kind,
        object: object.to_string(),
        field,
        why,
    };
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (gi, g) in groups.iter().enumerate() {
        if g.covered.is_empty() {
            return Err(err(
                "resourceGroups[].coveredResources",
                "is empty; list the resources this group's flavors give quota for".into(),
            ));
        }
        for r in &g.covered {
            if let Some(other) = seen.insert(r, gi) {
                return Err(err(
                    "resourceGroups[].coveredResources",
                    format!("{r} is covered by groups {other} and {gi}; cover each resource in one group"),
                ));
            }
        }
        for f in &g.flavors {
            for q in &f.resources {
                if !g.covered.contains(&q.name) {
                    return Err(err(
                        "resourceGroups[].flavors[].resources[].name",
                        format!(
                            "flavor {} gives quota for {}, which the group does not cover; add it to coveredResources",
                            f.flavor, q.name
                        ),
                    ));
                }
                if q.nominal < 0 || q.borrowing_limit.is_some_and(|l| l < 0) {
                    return Err(err(
                        "resourceGroups[].flavors[].resources[]",
                        format!("{} quota must not be negative", q.name),
                    ));
                }
                if q.lending_limit.is_some_and(|l| l < 0 || l > q.nominal) {
                    return Err(err(
                        "resourceGroups[].flavors[].resources[].lendingLimit",
                        format!("{}: must be between 0 and nominalQuota", q.name),
                    ));
                }
            }
        }
    }
    Ok(())
}

impl QueueBook {
    /// Takes a deleted ClusterQueue's quota out of its cohort: it lends nothing, and what
    /// it still runs counts as borrowed (others may reclaim it) until it ends.
    pub(crate) fn retire_cluster_queue(&mut self, name: &str) -> bool {
        let Some(id) = self.cq_ids.remove(name) else {
            return false;
        };
        for g in &mut self.cqs[id.0 as usize].groups {
            for f in &mut g.flavors {
                f.nominal.iter_mut().for_each(|n| *n = 0);
                f.lending_limit.iter_mut().for_each(|l| *l = None);
            }
        }
        true
    }

    pub(crate) fn add_cluster_queue(&mut self, spec: ClusterQueueSpec) -> Result<CqId, QueueError> {
        validate_groups("ClusterQueue", &spec.name, &spec.resource_groups)?;
        if spec.fair_weight < 0.0 || !spec.fair_weight.is_finite() {
            return Err(QueueError {
                kind: "ClusterQueue",
                object: spec.name.clone(),
                field: "fairSharing.weight",
                why: "must be a non-negative number".into(),
            });
        }
        let groups = compile_groups(&spec.resource_groups);
        match self.cq_ids.get(&spec.name) {
            Some(&id) => {
                let book = &mut self.cqs[id.0 as usize];
                // Keep usage of flavors and resources that stay.
                let old = std::mem::replace(&mut book.groups, groups);
                for g in &mut book.groups {
                    for f in &mut g.flavors {
                        for (i, r) in g.covered.iter().enumerate() {
                            f.usage[i] = old
                                .iter()
                                .filter_map(|og| {
                                    let ri = og.covered.iter().position(|c| c == r)?;
                                    let of = og.flavors.iter().find(|x| x.flavor == f.flavor)?;
                                    Some(of.usage[ri])
                                })
                                .sum();
                        }
                    }
                }
                book.spec = spec;
                self.refresh_roots();
                Ok(id)
            }
            None => {
                let id = CqId(self.cqs.len() as u32);
                self.cq_ids.insert(spec.name.clone(), id);
                self.cqs.push(CqBook {
                    spec,
                    root: None,
                    groups,
                });
                self.refresh_roots();
                Ok(id)
            }
        }
    }

    pub(crate) fn add_cohort(&mut self, spec: CohortSpec) -> Result<(), QueueError> {
        validate_groups("Cohort", &spec.name, &spec.resource_groups)?;
        // A parent chain that comes back to this cohort would make the tree a loop.
        let mut at = spec.parent.clone();
        let mut steps = 0;
        while let Some(p) = at {
            if p == spec.name || steps > self.cohorts.len() {
                return Err(QueueError {
                    kind: "Cohort",
                    object: spec.name.clone(),
                    field: "spec.parentName",
                    why: format!("{p} leads back to {}: cohorts form a tree", spec.name),
                });
            }
            at = self.cohorts.get(&p).and_then(|c| c.parent.clone());
            steps += 1;
        }
        self.cohorts.insert(spec.name.clone(), spec);
        self.refresh_roots();
        Ok(())
    }

    /// Drops a cohort (its children then root where it stood); whether it existed.
    pub(crate) fn remove_cohort(&mut self, name: &str) -> bool {
        let existed = self.cohorts.remove(name).is_some();
        if existed {
            self.refresh_roots();
        }
        existed
    }

    fn root_of(&self, cohort: &str) -> String {
        let mut at = cohort.to_string();
        for _ in 0..=self.cohorts.len() {
            match self.cohorts.get(&at).and_then(|c| c.parent.clone()) {
                Some(p) => at = p,
                None => break,
            }
        }
        at
    }

    fn refresh_roots(&mut self) {
        let roots: Vec<Option<String>> = self
            .cqs
            .iter()
            .map(|cq| cq.spec.cohort.as_deref().map(|c| self.root_of(c)))
            .collect();
        for (cq, root) in self.cqs.iter_mut().zip(roots) {
            cq.root = root;
        }
        let mut books: HashMap<String, CohortBook> = HashMap::new();
        for cohort in self.cohorts.values() {
            let book = books.entry(cohort.name.clone()).or_default();
            book.parent = cohort.parent.clone();
            for g in &cohort.resource_groups {
                for f in &g.flavors {
                    for q in &f.resources {
                        book.quota
                            .insert((f.flavor.clone(), q.name.clone()), q.clone());
                    }
                }
            }
            if let Some(parent) = &cohort.parent {
                books
                    .entry(parent.clone())
                    .or_default()
                    .cohorts
                    .push(cohort.name.clone());
            }
        }
        for (i, cq) in self.cqs.iter().enumerate() {
            if let Some(cohort) = &cq.spec.cohort {
                books
                    .entry(cohort.clone())
                    .or_default()
                    .queues
                    .push(CqId(i as u32));
            }
        }
        self.cohort_books = books;
    }

    /// The ClusterQueue a pod's LocalQueue leads to, or why none.
    pub(crate) fn resolve(&self, namespace: &str, local: &str) -> Result<CqId, QueueProblem> {
        let direct = || {
            self.cq_ids
                .get_key_value(local)
                .filter(|(_, id)| self.cqs[id.0 as usize].spec.cluster_scoped)
                .map(|(name, _)| name)
        };
        let Some(cq_name) = self
            .local
            .get(&(namespace.to_string(), local.to_string()))
            .or_else(direct)
        else {
            // A pod may name a ClusterQueue's LocalQueue that is missing; say so.
            return Err(QueueProblem::NoLocalQueue {
                namespace: namespace.to_string(),
                name: local.to_string(),
            });
        };
        let Some(&id) = self.cq_ids.get(cq_name) else {
            return Err(QueueProblem::NoClusterQueue {
                local_queue: format!("{namespace}/{local}"),
                cluster_queue: cq_name.clone(),
            });
        };
        if let Some(selector) = &self.cqs[id.0 as usize].spec.namespace_selector {
            let mut labels = self
                .namespace_labels
                .get(namespace)
                .cloned()
                .unwrap_or_default();
            labels
                .entry("kubernetes.io/metadata.name".to_string())
                .or_insert_with(|| namespace.to_string());
            if !selector.iter().all(|r| r.matches(&labels)) {
                return Err(QueueProblem::NamespaceNotSelected {
                    cluster_queue: cq_name.clone(),
                    namespace: namespace.to_string(),
                });
            }
        }
        Ok(id)
    }

    /// Queues sharing `cq`'s cohort root (including `cq`), with their ids.
    pub(crate) fn cohort_members(&self, cq: CqId) -> impl Iterator<Item = (CqId, &CqBook)> + '_ {
        let root = self.cqs[cq.0 as usize].root.clone();
        self.cqs
            .iter()
            .enumerate()
            .filter(move |(i, c)| *i == cq.0 as usize || (root.is_some() && c.root == root))
            .map(|(i, c)| (CqId(i as u32), c))
    }

    /// A ClusterQueue's quota and usage of `resource` in `flavor`.
    fn queue_amounts(&self, cq: CqId, flavor: &str, resource: &str) -> TreeAmounts {
        let mut out = TreeAmounts::default();
        for g in &self.cqs[cq.0 as usize].groups {
            let Some(i) = g.covered.iter().position(|r| r == resource) else {
                continue;
            };
            for f in g.flavors.iter().filter(|f| f.flavor == flavor) {
                out.quota += f.nominal[i];
                out.guaranteed += f.guaranteed(i);
                out.usage += f.usage[i];
                out.borrowing_limit = f.borrowing_limit[i];
            }
        }
        out
    }

    /// A cohort's quota and usage of `resource` in `flavor`: its own quota plus what its
    /// children lend it, and what they take from it.
    fn cohort_amounts(&self, cohort: &str, flavor: &str, resource: &str) -> TreeAmounts {
        let Some(book) = self.cohort_books.get(cohort) else {
            return TreeAmounts::default();
        };
        let own = book.quota.get(&(flavor.to_string(), resource.to_string()));
        let mut out = TreeAmounts {
            quota: own.map_or(0, |q| q.nominal),
            borrowing_limit: own.and_then(|q| q.borrowing_limit),
            ..Default::default()
        };
        let children = book
            .cohorts
            .iter()
            .map(|c| self.cohort_amounts(c, flavor, resource))
            .chain(
                book.queues
                    .iter()
                    .map(|&q| self.queue_amounts(q, flavor, resource)),
            );
        for child in children {
            out.quota += child.lent();
            out.usage += child.taken();
        }
        out.guaranteed = own
            .and_then(|q| q.lending_limit)
            .map_or(0, |l| (out.quota - l).max(0));
        out
    }

    /// What the cohort `cohort` can still give a child: what is free at its root, less
    /// at each cohort on the way down whose borrowing limit binds (Kueue's hierarchical
    /// cohorts), and the lowest such cohort.
    fn cohort_available(
        &self,
        cohort: &str,
        flavor: &str,
        resource: &str,
    ) -> (i64, Option<String>) {
        let node = self.cohort_amounts(cohort, flavor, resource);
        let parent = self
            .cohort_books
            .get(cohort)
            .and_then(|b| b.parent.as_deref());
        let Some(parent) = parent else {
            return (node.quota - node.usage, None);
        };
        let kept = (node.guaranteed - node.usage).max(0);
        let (from_parent, mut bound) = self.cohort_available(parent, flavor, resource);
        let room = node.borrow_room().unwrap_or(i64::MAX);
        if room < from_parent {
            bound = Some(cohort.to_string());
        }
        (kept + from_parent.min(room), bound)
    }

    /// The size of the pool `cq`'s cohort tree shares of `resource` in `flavor`.
    fn tree_quota(&self, cq: CqId, flavor: &str, resource: &str) -> i64 {
        let root = self.cqs[cq.0 as usize].root.as_deref().unwrap_or_default();
        self.cohort_amounts(root, flavor, resource).quota
    }

    /// Whether `request` (per resource name) fits `cq`'s quota, and with which flavors.
    /// Whether the workload fits its queue's quota, and in which flavors: per resource
    /// group the first flavor (in the queue's order) whose `nodeTaints` its pods tolerate
    /// (`tolerations`, with the flavor's own) and that has room without borrowing, else the
    /// first that has room by borrowing.
    pub(crate) fn fit(
        &self,
        cq: CqId,
        request: &[(String, i64)],
        tolerations: &[Toleration],
    ) -> QuotaFit {
        let book = &self.cqs[cq.0 as usize];
        let name = &book.spec.name;
        if book.spec.stop_policy != StopPolicy::None {
            return QuotaFit::No(QueueProblem::Stopped {
                cluster_queue: name.clone(),
            });
        }
        if let Some(why) = &book.spec.inactive {
            return QuotaFit::No(QueueProblem::Inactive {
                cluster_queue: name.clone(),
                why: why.clone(),
            });
        }
        for (resource, amount) in request {
            let covered = book.groups.iter().any(|g| g.covered.contains(resource));
            if *amount > 0 && resource != PODS_RESOURCE && !covered {
                return QuotaFit::No(QueueProblem::NotCovered {
                    cluster_queue: name.clone(),
                    resource: resource.clone(),
                });
            }
        }
        let mut flavors = Vec::with_capacity(book.groups.len());
        let mut borrowing = false;
        for g in &book.groups {
            let mut first_problem = None;
            let mut chosen: Option<(usize, bool)> = None;
            for (fi, f) in g.flavors.iter().enumerate() {
                if let Some(taint) = self.untolerated_taint(&f.flavor, tolerations) {
                    first_problem.get_or_insert(QueueProblem::FlavorTaint {
                        cluster_queue: name.clone(),
                        flavor: f.flavor.clone(),
                        taint,
                    });
                    continue;
                }
                match self.flavor_fit(cq, g, f, request) {
                    Ok(false) => {
                        chosen = Some((fi, false));
                        break;
                    }
                    Ok(true) => {
                        chosen.get_or_insert((fi, true));
                        if book.spec.borrow_in_first_fitting_flavor {
                            break;
                        }
                    }
                    Err(p) => {
                        first_problem.get_or_insert(p);
                    }
                }
            }
            match chosen {
                Some((fi, borrows)) => {
                    flavors.push(fi as u16);
                    borrowing |= borrows;
                }
                None => {
                    return QuotaFit::No(first_problem.unwrap_or(QueueProblem::NotCovered {
                        cluster_queue: name.clone(),
                        resource: g.covered.first().cloned().unwrap_or_default(),
                    }))
                }
            }
        }
        let admission = Admission { cq, flavors };
        if borrowing {
            QuotaFit::Borrowing(admission)
        } else {
            QuotaFit::Nominal(admission)
        }
    }

    /// A NoSchedule or NoExecute taint of the flavor's nodes that neither `tolerations`
    /// nor the flavor's own tolerations (added to the pods it admits) tolerate.
    fn untolerated_taint(&self, flavor: &str, tolerations: &[Toleration]) -> Option<String> {
        let flavor = self.flavors.get(flavor)?;
        flavor
            .node_taints
            .iter()
            .filter(|t| t.effect != TaintEffect::PreferNoSchedule)
            .find(|t| {
                !tolerations
                    .iter()
                    .chain(&flavor.tolerations)
                    .any(|tol| tol.tolerates(t))
            })
            .map(|t| t.to_string())
    }

    /// `Ok(borrows)` when the group's request fits flavor `f`.
    fn flavor_fit(
        &self,
        cq: CqId,
        g: &GroupBook,
        f: &FlavorBook,
        request: &[(String, i64)],
    ) -> Result<bool, QueueProblem> {
        let book = &self.cqs[cq.0 as usize];
        let mut borrows = false;
        for (i, resource) in g.covered.iter().enumerate() {
            let need = request
                .iter()
                .find(|(r, _)| r == resource)
                .map_or(0, |(_, a)| *a);
            if need == 0 {
                continue;
            }
            let after = f.usage[i] + need;
            let within_nominal = after <= f.nominal[i];
            if within_nominal && book.root.is_none() {
                continue;
            }
            let problem = |limit: Option<i64>, cohort_free: Option<i64>| {
                QueueProblem::Quota(Box::new(QuotaShortfall {
                    cluster_queue: book.spec.name.clone(),
                    flavor: f.flavor.clone(),
                    resource: resource.clone(),
                    need,
                    used: f.usage[i],
                    nominal: f.nominal[i],
                    limit,
                    cohort_free,
                    cohort_limit: None,
                }))
            };
            if book.root.is_none() {
                return Err(problem(None, None));
            }
            // Lent quota is in use elsewhere until reclaimed: the cohort tree decides even
            // inside nominal quota.
            let own = self.queue_amounts(cq, &f.flavor, resource);
            let cohort = book.spec.cohort.as_deref().unwrap_or_default();
            let (cohort_free, cohort_limit) = self.cohort_available(cohort, &f.flavor, resource);
            let cohort_free = cohort_free.max(0);
            let kept = (own.guaranteed - own.usage).max(0);
            let limit = f.borrowing_limit[i].map(|b| f.nominal[i] + b);
            let over_limit = !within_nominal && limit.is_some_and(|l| after > l);
            if over_limit || need > kept + cohort_free {
                let mut shortfall = problem(limit, Some(cohort_free));
                if let QueueProblem::Quota(q) = &mut shortfall {
                    q.cohort_limit = cohort_limit.filter(|_| !over_limit);
                }
                return Err(shortfall);
            }
            if !within_nominal {
                borrows = true;
            }
        }
        Ok(borrows)
    }

    /// Adds (`sign` 1) or returns (-1) a pod's request to the flavors of its admission.
    pub(crate) fn charge(&mut self, admission: &Admission, request: &[(String, i64)], sign: i64) {
        let book = &mut self.cqs[admission.cq.0 as usize];
        for (g, &fi) in book.groups.iter_mut().zip(&admission.flavors) {
            let Some(f) = g.flavors.get_mut(fi as usize) else {
                continue;
            };
            for (i, resource) in g.covered.iter().enumerate() {
                if let Some((_, a)) = request.iter().find(|(r, _)| r == resource) {
                    f.usage[i] += sign * a;
                }
            }
        }
    }

    /// Whether `cq` uses more than its nominal quota of any resource in `request`.
    pub(crate) fn is_borrowing(&self, cq: CqId, request: &[(String, i64)]) -> bool {
        self.cqs[cq.0 as usize].groups.iter().any(|g| {
            g.flavors.iter().any(|f| {
                g.covered.iter().enumerate().any(|(i, r)| {
                    f.usage[i] > f.nominal[i]
                        && (request.is_empty() || request.iter().any(|(q, a)| q == r && *a > 0))
                })
            })
        })
    }

    /// Weighted dominant share of what the queue borrows: the largest fraction of a
    /// cohort pool it uses beyond its nominal quota, divided by its weight.
    /// Moves each queue's recent share towards its share now: by half over each
    /// `half_life` that passed since the last update.
    pub(crate) fn decay_shares(&mut self, now: Millis, half_life: Millis) {
        let kept = 0.5f64.powf(now.saturating_sub(self.recent_at) as f64 / half_life as f64);
        self.recent_at = now;
        let current: Vec<f64> = (0..self.cqs.len())
            .map(|i| self.borrowed_share(CqId(i as u32)))
            .collect();
        self.recent_share.resize(current.len(), 0.0);
        for (recent, now) in self.recent_share.iter_mut().zip(current) {
            *recent = *recent * kept + now * (1.0 - kept);
        }
    }

    /// Weighted dominant share of what a queue borrows (now, plus its recent share when
    /// history counts): the borrowing phase serves the lowest first.
    pub(crate) fn fair_share(&self, cq: CqId) -> f64 {
        let share =
            self.borrowed_share(cq) + self.recent_share.get(cq.0 as usize).copied().unwrap_or(0.0);
        let weight = self.cqs[cq.0 as usize].spec.fair_weight;
        if weight <= 0.0 {
            return if share > 0.0 { f64::INFINITY } else { 0.0 };
        }
        share / weight
    }

    /// Dominant share of the cohort pool a queue borrows now (unweighted).
    fn borrowed_share(&self, cq: CqId) -> f64 {
        let book = &self.cqs[cq.0 as usize];
        if book.root.is_none() {
            return 0.0;
        }
        let mut share: f64 = 0.0;
        for g in &book.groups {
            for f in &g.flavors {
                for (i, r) in g.covered.iter().enumerate() {
                    let borrowed = f.usage[i] - f.nominal[i];
                    if borrowed <= 0 {
                        continue;
                    }
                    let pool = self.tree_quota(cq, &f.flavor, r);
                    share = share.max(borrowed as f64 / pool.max(1) as f64);
                }
            }
        }
        share
    }

    /// The admission of a pod found already bound (by an earlier leader, before a restart):
    /// per resource group, the first flavor whose node labels the pod's node carries (the
    /// first flavor when none does). Reality wins: it is charged even past the quota.
    pub(crate) fn restored_admission(&self, cq: CqId, node_labels: &Labels) -> Admission {
        let book = &self.cqs[cq.0 as usize];
        let flavors = book
            .groups
            .iter()
            .map(|g| {
                g.flavors
                    .iter()
                    .position(|f| {
                        self.flavors.get(&f.flavor).is_some_and(|rf| {
                            rf.node_labels
                                .iter()
                                .all(|(k, v)| node_labels.get(k) == Some(v))
                        })
                    })
                    .unwrap_or(0) as u16
            })
            .collect();
        Admission { cq, flavors }
    }

    /// The flavors' node labels and tolerations for an admission (empty when none).
    pub(crate) fn flavor_constraints(&self, admission: &Admission) -> (Labels, Vec<Toleration>) {
        let mut labels = Labels::new();
        let mut tolerations = Vec::new();
        let book = &self.cqs[admission.cq.0 as usize];
        for (g, &fi) in book.groups.iter().zip(&admission.flavors) {
            let Some(f) = g.flavors.get(fi as usize) else {
                continue;
            };
            if let Some(flavor) = self.flavors.get(&f.flavor) {
                labels.extend(flavor.node_labels.clone());
                tolerations.extend(flavor.tolerations.iter().cloned());
            }
        }
        (labels, tolerations)
    }
}

/// Usage of one resource in one flavor of a queue, for reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuotaUsage {
    pub flavor: String,
    pub resource: String,
    pub nominal: i64,
    pub used: i64,
    /// Used beyond nominal (borrowed from the cohort).
    pub borrowed: i64,
}

impl CqBook {
    pub(crate) fn usage(&self) -> Vec<QuotaUsage> {
        let mut out = Vec::new();
        for g in &self.groups {
            for f in &g.flavors {
                for (i, r) in g.covered.iter().enumerate() {
                    out.push(QuotaUsage {
                        flavor: f.flavor.clone(),
                        resource: r.clone(),
                        nominal: f.nominal[i],
                        used: f.usage[i],
                        borrowed: (f.usage[i] - f.nominal[i]).max(0),
                    });
                }
            }
        }
        out
    }
}
