//! ClusterQueue and LocalQueue objects: declared to the engine, and the statuses
//! (workload counts, usage, the `Active` condition) Kestrel writes for them.

use super::LiveIndex;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kestrel_core::{ClusterError, ClusterQueueSpec, Labels, PodPhase, StopPolicy};
use kestrel_objects::live;
use kestrel_objects::queues::cluster_wide::{cluster_capacity, with_cluster_wide_structure};
use kestrel_objects::queues::{
    mark_missing_flavors, parse_queue_document, queue_document_key, QueueDocument,
};
use kestrel_objects::warning::{FieldWarning, WarningBook};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// ClusterQueues and LocalQueues (and the Cohorts, ResourceFlavors and Namespaces they
/// refer to) as the engine has them, and the queue statuses Kestrel has written.
#[derive(Default)]
pub(super) struct QueueStatusBook {
    /// Queue objects (ClusterQueue, LocalQueue, Cohort, ResourceFlavor, Namespace) as the
    /// engine has them, by (kind, name).
    docs: BTreeMap<(&'static str, String), QueueDocument>,
    /// Queue statuses last written (at first sight: the one the object carries), by
    /// (kind, name).
    status: HashMap<(&'static str, String), Value>,
    /// The ClusterQueues and LocalQueues listed at the last [`LiveIndex::set_queues`],
    /// readable or not, by (kind, name).
    objects: BTreeMap<(&'static str, String), QueueObject>,
    /// The `Active` condition last written per queue (at first sight: the one the object
    /// carries), whose `lastTransitionTime` stays while its `status` does.
    active: HashMap<(&'static str, String), Value>,
    /// Warnings about fields of other projects' queue objects, each said once while it
    /// lasts.
    warned: WarningBook,
    /// The cluster's capacity the root cohorts of Volcano and KAI queues were last sized
    /// to; `None` while there are no such queues.
    sized_to: Option<BTreeMap<String, i64>>,
    /// The last readable version of each Volcano and KAI Queue by name, as read (before
    /// the hierarchy makes parents cohorts): the one in force while a newer one cannot be
    /// read, parent or leaf.
    cluster_wide_read: BTreeMap<String, QueueDocument>,
}

impl QueueStatusBook {
    /// At first sight of a queue, the status it carries counts as written: an unchanged
    /// status is not written again (after a restart, or when another replica led), and its
    /// `Active` condition keeps its `lastTransitionTime`.
    fn observe(&mut self, key: &(&'static str, String), object: &Value) {
        let Some(status) = object.get("status").filter(|s| s.is_object()) else {
            return;
        };
        if !self.status.contains_key(key) {
            self.status.insert(key.clone(), status.clone());
        }
        if !self.active.contains_key(key) {
            let active = status
                .get("conditions")
                .and_then(Value::as_array)
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Active"));
            if let Some(c) = active {
                self.active.insert(key.clone(), c.clone());
            }
        }
    }
}

/// A ClusterQueue's or LocalQueue's status to write (server-side apply of the status
/// subresource): workload counts and, for ClusterQueues, usage per flavor.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueStatusWrite {
    /// `ClusterQueue` or `LocalQueue`.
    pub kind: &'static str,
    /// For LocalQueues.
    pub namespace: Option<String>,
    pub name: String,
    /// The `status` object.
    pub status: Value,
}

/// A ClusterQueue or LocalQueue as listed, whether or not Kestrel could use it.
#[derive(Debug, Clone, Default)]
pub(super) struct QueueObject {
    /// `metadata.generation`.
    generation: Option<i64>,
    /// Why its current spec cannot be used (unreadable, or refused by the engine); the
    /// previous version, if any, stays in force.
    refused: Option<String>,
}

/// Whether a queue can admit workloads: its `Active` condition.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Activity {
    active: bool,
    /// `Ready` when nothing is wrong, else the first problem's reason (one that stops
    /// admission first).
    reason: &'static str,
    message: String,
    /// What stops admission (inactive queues): the problems, for the LocalQueues that
    /// point here.
    cause: String,
}

impl Activity {
    /// `problems` are (stops admission, reason, what is wrong and how to fix it).
    /// `can` and `cannot` open the message of an active and an inactive queue.
    pub(super) fn new(
        mut problems: Vec<(bool, &'static str, String)>,
        can: String,
        cannot: &str,
    ) -> Self {
        problems.sort_by_key(|(stops, _, _)| !*stops);
        let active = !problems.iter().any(|(stops, _, _)| *stops);
        let reason = problems.first().map_or("Ready", |(_, r, _)| *r);
        let details: Vec<&str> = problems.iter().map(|(_, _, d)| d.as_str()).collect();
        let cause = problems
            .iter()
            .filter(|(stops, _, _)| *stops)
            .map(|(_, _, d)| d.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        let message = match (active, details.is_empty()) {
            (true, true) => can,
            (true, false) => format!("{can}; {}", details.join("; ")),
            (false, _) => format!("{cannot}: {}", details.join("; ")),
        };
        Activity {
            active,
            reason,
            message,
            cause,
        }
    }
}

impl LiveIndex {
    /// The statuses of the ClusterQueues and LocalQueues that changed since they were last
    /// written: pending and admitted workloads (a gang counts once), the ClusterQueue's
    /// usage per flavor and resource, and the `Active` condition
    /// ([`LiveIndex::queue_activity`]), whose `lastTransitionTime` changes only with
    /// its `status`. One pass over all pods: the driver calls it on a period, not every
    /// cycle.
    pub fn queue_statuses(&mut self) -> Vec<QueueStatusWrite> {
        let declared: BTreeSet<(&'static str, String)> = self
            .queues
            .docs
            .keys()
            .filter(|(kind, _)| matches!(*kind, "ClusterQueue" | "LocalQueue"))
            .chain(self.queues.objects.keys())
            .cloned()
            .collect();
        if declared.is_empty() {
            return Vec::new();
        }
        let activity = self.queue_activity();
        let now = condition_time(self.wall_origin + self.now as i64);
        let cq_names: HashMap<kestrel_core::CqId, String> = self
            .scheduler
            .cluster_queues()
            .map(|(id, spec)| (id, spec.name.clone()))
            .collect();
        // (kind, name) -> (pending workloads, admitted workloads)
        type Workloads = (BTreeSet<String>, BTreeSet<String>);
        let mut counts: HashMap<(&'static str, String), Workloads> = HashMap::new();
        for (id, record) in self.scheduler.pods() {
            let spec = &record.spec;
            let workload = match &spec.gang {
                Some(m) => format!("{}/{}", spec.namespace, m.gang),
                None => format!("{}", id.0),
            };
            let (pending, cq) = match &record.phase {
                PodPhase::Pending => (true, self.scheduler.queue_of(id)),
                PodPhase::Bound { .. } => (false, record.admission.as_ref().map(|a| a.cq)),
                _ => continue,
            };
            let mut add = |key: (&'static str, String)| {
                let entry = counts.entry(key).or_default();
                let set = if pending { &mut entry.0 } else { &mut entry.1 };
                set.insert(workload.clone());
            };
            if let Some(name) = cq.and_then(|cq| cq_names.get(&cq)) {
                add(("ClusterQueue", name.clone()));
            }
            if let Some(local) = &spec.queue {
                add(("LocalQueue", format!("{}/{local}", spec.namespace)));
            }
        }
        let mut writes = Vec::new();
        for key in &declared {
            let (pending, admitted) = counts
                .get(key)
                .map(|(p, a)| (p.len(), a.len()))
                .unwrap_or_default();
            let mut status = json!({
                "pendingWorkloads": pending,
                "admittedWorkloads": admitted,
            });
            if key.0 == "ClusterQueue" {
                status["reservingWorkloads"] = json!(admitted);
                let id = cq_names
                    .iter()
                    .find(|(_, n)| **n == key.1)
                    .map(|(id, _)| *id);
                let mut flavors: BTreeMap<String, Vec<Value>> = BTreeMap::new();
                for u in id
                    .map(|id| self.scheduler.queue_usage(id))
                    .unwrap_or_default()
                {
                    flavors.entry(u.flavor.clone()).or_default().push(json!({
                        "name": u.resource,
                        "total": quantity(&u.resource, u.used),
                        "borrowed": quantity(&u.resource, u.borrowed),
                    }));
                }
                status["flavorsUsage"] = flavors
                    .into_iter()
                    .map(|(name, resources)| json!({"name": name, "resources": resources}))
                    .collect();
            }
            let condition = {
                let a = &activity[key];
                let state = if a.active { "True" } else { "False" };
                let since = self
                    .queues
                    .active
                    .get(key)
                    .filter(|last| last["status"] == state)
                    .and_then(|last| last.get("lastTransitionTime"))
                    .unwrap_or(&now);
                let mut c = json!({
                    "type": "Active",
                    "status": state,
                    "reason": a.reason,
                    "message": a.message,
                    "lastTransitionTime": since,
                });
                if let Some(g) = self.queues.objects.get(key).and_then(|o| o.generation) {
                    c["observedGeneration"] = json!(g);
                }
                c
            };
            status["conditions"] = json!([condition]);
            if self.queues.status.get(key) == Some(&status) {
                continue;
            }
            self.queues.status.insert(key.clone(), status.clone());
            self.queues.active.insert(key.clone(), condition);
            let (namespace, name) = match key.1.split_once('/') {
                Some((ns, n)) => (Some(ns.to_string()), n.to_string()),
                None => (None, key.1.clone()),
            };
            writes.push(QueueStatusWrite {
                kind: key.0,
                namespace,
                name,
                status,
            });
        }
        writes
    }

    /// Whether each ClusterQueue and LocalQueue can admit workloads, as the engine has
    /// them, by (kind, name): their `Active` condition.
    ///
    /// A ClusterQueue is inactive when its `stopPolicy` holds it (`Stopped`) or when no
    /// version of its spec could be used (`InvalidSpec`). It stays active, saying what is
    /// wrong, when its current spec cannot be used but a previous one is in force
    /// (`InvalidSpec`). It is inactive when it names a ResourceFlavor that does not exist
    /// (`FlavorNotFound`, as in Kueue: it admits nothing until the flavor exists). A
    /// `cohortName` without a Cohort object is no problem: the queues that name it share
    /// their quota all the same.
    ///
    /// A LocalQueue is inactive when its ClusterQueue does not exist
    /// (`ClusterQueueDoesNotExist`), is inactive (`ClusterQueueIsInactive`) or does not
    /// select its namespace (`NamespaceNotSelected`), or when no version of its spec could
    /// be used (`InvalidSpec`); a previous version in force keeps it active, saying so.
    pub(super) fn queue_activity(&self) -> HashMap<(&'static str, String), Activity> {
        let in_force: HashMap<&str, &ClusterQueueSpec> = self
            .scheduler
            .cluster_queues()
            .map(|(_, spec)| (spec.name.as_str(), spec))
            .collect();
        let refused = |key: &(&'static str, String)| {
            self.queues.objects.get(key).and_then(|o| o.refused.clone())
        };
        let known = || self.queues.objects.keys().chain(self.queues.docs.keys());
        let mut out = HashMap::new();
        let cluster_queues: BTreeSet<&String> = known()
            .filter(|(kind, _)| *kind == "ClusterQueue")
            .map(|(_, name)| name)
            .collect();
        for name in cluster_queues {
            let key = ("ClusterQueue", name.clone());
            let mut problems = Vec::new();
            let Some(spec) = in_force.get(name.as_str()) else {
                let why = refused(&key).unwrap_or_else(|| "it was not accepted".into());
                problems.push((
                    true,
                    "InvalidSpec",
                    format!("its spec cannot be used: {why}"),
                ));
                out.insert(
                    key,
                    Activity::new(problems, String::new(), "Can't admit new workloads"),
                );
                continue;
            };
            match spec.stop_policy {
                StopPolicy::None => {}
                StopPolicy::Hold => problems.push((
                    true,
                    "Stopped",
                    "spec.stopPolicy is Hold; set it to None to admit workloads".to_string(),
                )),
                StopPolicy::HoldAndDrain => problems.push((
                    true,
                    "Stopped",
                    "spec.stopPolicy is HoldAndDrain, so its admitted workloads are evicted too; set it to None to admit workloads".to_string(),
                )),
            }
            if let Some(why) = refused(&key) {
                problems.push((
                    false,
                    "InvalidSpec",
                    format!("its current spec cannot be used, so the previous one stays in force: {why}"),
                ));
            }
            if let Some(why) = &spec.inactive {
                problems.push((true, why.reason, why.message.clone()));
            }
            out.insert(
                key,
                Activity::new(
                    problems,
                    "Can admit new workloads".to_string(),
                    "Can't admit new workloads",
                ),
            );
        }
        let local_queues: BTreeSet<&(&'static str, String)> =
            known().filter(|(kind, _)| *kind == "LocalQueue").collect();
        for key in local_queues {
            let mut problems = Vec::new();
            let Some(QueueDocument::LocalQueue(spec)) = self.queues.docs.get(key) else {
                let why = refused(key).unwrap_or_else(|| "it was not accepted".into());
                problems.push((
                    true,
                    "InvalidSpec",
                    format!("its spec cannot be used: {why}"),
                ));
                out.insert(
                    key.clone(),
                    Activity::new(problems, String::new(), "Can't submit new workloads"),
                );
                continue;
            };
            let (namespace, cq) = (&spec.namespace, &spec.cluster_queue);
            match (
                out.get(&("ClusterQueue", cq.clone())),
                in_force.get(cq.as_str()),
            ) {
                (Some(a), _) if !a.active => problems.push((
                    true,
                    "ClusterQueueIsInactive",
                    format!("ClusterQueue {cq} is inactive ({}): {}", a.reason, a.cause),
                )),
                (_, Some(cq_spec)) => {
                    // As the engine resolves a LocalQueue: every namespace carries its name
                    // as the label kubernetes.io/metadata.name.
                    if let Some(selector) = &cq_spec.namespace_selector {
                        let mut labels = match self.queues.docs.get(&("Namespace", namespace.clone())) {
                            Some(QueueDocument::Namespace(_, labels)) => labels.clone(),
                            _ => Labels::default(),
                        };
                        labels
                            .entry("kubernetes.io/metadata.name".to_string())
                            .or_insert_with(|| namespace.clone());
                        if !selector.iter().all(|r| r.matches(&labels)) {
                            problems.push((
                                true,
                                "NamespaceNotSelected",
                                format!("ClusterQueue {cq} does not admit namespace {namespace} (its spec.namespaceSelector); label the namespace, or change the selector"),
                            ));
                        }
                    }
                }
                _ => problems.push((
                    true,
                    "ClusterQueueDoesNotExist",
                    format!("ClusterQueue {cq:?} (spec.clusterQueue) does not exist; create it, or fix spec.clusterQueue"),
                )),
            }
            if let Some(why) = refused(key) {
                problems.push((
                    false,
                    "InvalidSpec",
                    format!("its current spec cannot be used, so the previous one stays in force: {why}"),
                ));
            }
            out.insert(
                key.clone(),
                Activity::new(
                    problems,
                    format!("Can submit new workloads to ClusterQueue {cq}"),
                    "Can't submit new workloads",
                ),
            );
        }
        out
    }

    /// What the API said to a queue status write: a failed one is written again at the
    /// next period.
    pub fn queue_status_result(&mut self, write: &QueueStatusWrite, ok: bool) {
        if !ok {
            let name = match &write.namespace {
                Some(ns) => format!("{ns}/{}", write.name),
                None => write.name.clone(),
            };
            self.queues.status.remove(&(write.kind, name));
        }
    }

    /// Replaces the queue objects: every ClusterQueue, LocalQueue, Cohort and
    /// ResourceFlavor, and every Namespace (for namespaceSelectors), as JSON with `kind`
    /// and `apiVersion` set. What changed is declared to the engine; what is gone is
    /// removed. An object that cannot be read or that the engine refuses (a cohort cycle,
    /// an invalid quota) is returned with the reason and not applied: its previous version,
    /// if any, stays in force. ClusterQueues and LocalQueues are remembered either way, for
    /// their statuses ([`LiveIndex::queue_statuses`]).
    fn cluster_capacity(&self) -> BTreeMap<String, i64> {
        cluster_capacity(self.scheduler.cluster().iter().map(|(_, n)| &n.spec))
    }

    /// Whether the root cohorts of Volcano and KAI queues must be sized again: there are
    /// such queues and the cluster's capacity changed since (a node came, went or grew).
    pub fn queue_pools_outdated(&self) -> bool {
        self.queues
            .sized_to
            .as_ref()
            .is_some_and(|sized| *sized != self.cluster_capacity())
    }

    pub fn set_queues<'a>(&mut self, objects: impl IntoIterator<Item = &'a Value>) -> Vec<String> {
        let mut errors = Vec::new();
        let mut field_warnings: Vec<FieldWarning> = Vec::new();
        // Volcano's and KAI's queues by name: (apiVersion, uid).
        let mut parents: BTreeMap<String, (String, Option<String>)> = BTreeMap::new();
        let mut wanted: BTreeMap<(&'static str, String), QueueDocument> = BTreeMap::new();
        let mut listed: BTreeMap<(&'static str, String), QueueObject> = BTreeMap::new();
        for object in objects {
            let name = object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("?");
            if object.get("kind").and_then(Value::as_str) == Some("Queue") {
                let api_version = object.get("apiVersion").and_then(Value::as_str);
                let uid = object.pointer("/metadata/uid").and_then(Value::as_str);
                parents.insert(
                    name.to_string(),
                    (api_version.unwrap_or("").to_string(), uid.map(String::from)),
                );
            }
            let queue = queue_document_key(object)
                .filter(|(kind, _)| matches!(*kind, "ClusterQueue" | "LocalQueue"));
            if let Some(key) = &queue {
                let generation = object
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64);
                listed.insert(
                    key.clone(),
                    QueueObject {
                        generation,
                        refused: None,
                    },
                );
                self.queues.observe(key, object);
            }
            match parse_queue_document(Path::new(live::API_SOURCE), name, object) {
                Ok((doc, warnings)) => {
                    field_warnings.extend(warnings);
                    wanted.insert(doc.key(), doc);
                }
                Err(e) => {
                    if let Some(o) = queue.as_ref().and_then(|k| listed.get_mut(k)) {
                        o.refused = Some(match &e.field {
                            Some(field) => format!("field {field}: {}", e.message),
                            None => e.message.clone(),
                        });
                    }
                    errors.push(e.to_string());
                    // The version in force stays until a readable one replaces it, and so
                    // do the warnings about it.
                    if let Some(name) = object.pointer("/metadata/name").and_then(Value::as_str) {
                        let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
                        let namespace = object
                            .pointer("/metadata/namespace")
                            .and_then(Value::as_str)
                            .map(String::from);
                        field_warnings.extend(self.queues.warned.said(&(
                            kind.to_string(),
                            namespace,
                            name.to_string(),
                        )));
                    }
                    // A Volcano or KAI Queue's last read goes through the hierarchy again.
                    let previous = queue_document_key(object).and_then(|(kind, name)| {
                        let doc = match kind {
                            "Queue" => self.queues.cluster_wide_read.get(&name),
                            _ => self.queues.docs.get(&(kind, name)),
                        };
                        doc.cloned()
                    });
                    if let Some(doc) = previous {
                        wanted.insert(doc.key(), doc);
                    }
                }
            }
        }
        self.queues.cluster_wide_read = wanted
            .values()
            .filter_map(|d| match d {
                QueueDocument::ClusterQueue(q) if q.cluster_scoped => {
                    Some((q.name.clone(), d.clone()))
                }
                _ => None,
            })
            .collect();
        // Volcano's and KAI's queues share the cluster: their root cohorts hold it.
        let capacity = self.cluster_capacity();
        let (docs, warnings) = with_cluster_wide_structure(
            std::mem::take(&mut wanted).into_values().collect(),
            &capacity,
        );
        self.queues.sized_to = docs
            .iter()
            .any(|d| matches!(d, QueueDocument::ClusterQueue(q) if q.cluster_scoped))
            .then_some(capacity);
        // A parent queue's warnings name it alone: its apiVersion and uid are the listed
        // object's (a parent no object defines has neither).
        for mut w in warnings {
            let listed = parents
                .get(&w.object.name)
                .filter(|_| w.object.kind == "Queue");
            if let Some((api_version, uid)) = listed.filter(|_| w.object.api_version.is_none()) {
                w.object.api_version = Some(api_version.clone());
                w.object.uid = uid.clone();
            }
            field_warnings.push(w);
        }
        let new = self.queues.warned.read_all(field_warnings);
        self.field_warnings.extend(new);
        let mut wanted: BTreeMap<(&'static str, String), QueueDocument> =
            docs.into_iter().map(|d| (d.key(), d)).collect();
        // A ClusterQueue naming a flavor that does not exist admits nothing (Kueue's
        // FlavorNotFound); it is applied again when the flavor comes or goes.
        let flavors: BTreeSet<String> = wanted
            .keys()
            .filter(|(kind, _)| *kind == "ResourceFlavor")
            .map(|(_, name)| name.clone())
            .collect();
        for doc in wanted.values_mut() {
            if let QueueDocument::ClusterQueue(q) = doc {
                mark_missing_flavors(q, |f| flavors.contains(f));
            }
        }
        // Removals first, then additions from the leaves of references up: flavors and
        // cohorts before the ClusterQueues that name them, ClusterQueues before LocalQueues.
        let gone: Vec<(&'static str, String)> = self
            .queues
            .docs
            .keys()
            .filter(|k| !wanted.contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            match self.queues.docs.remove(&key) {
                Some(QueueDocument::LocalQueue(q)) => {
                    self.scheduler.remove_local_queue(&q.namespace, &q.name)
                }
                Some(QueueDocument::ClusterQueue(q)) => {
                    self.scheduler.remove_cluster_queue(&q.name)
                }
                Some(QueueDocument::Cohort(c)) => self.scheduler.remove_cohort(&c.name),
                Some(QueueDocument::Flavor(f)) => self.scheduler.remove_flavor(&f.name),
                Some(QueueDocument::Namespace(n, _)) => {
                    self.scheduler.set_namespace_labels(&n, Default::default())
                }
                Some(QueueDocument::DisruptionBudget(b)) => self
                    .scheduler
                    .remove_disruption_budget(&b.namespace, &b.name),
                _ => {}
            }
        }
        let rank = |kind: &str| {
            [
                "ResourceFlavor",
                "Cohort",
                "ClusterQueue",
                "LocalQueue",
                "Namespace",
            ]
            .iter()
            .position(|k| *k == kind)
            .unwrap_or(usize::MAX)
        };
        let mut changed: Vec<((&'static str, String), QueueDocument)> = wanted
            .into_iter()
            .filter(|(k, doc)| self.queues.docs.get(k) != Some(doc))
            .collect();
        changed.sort_by_key(|((kind, _), _)| rank(kind));
        for (key, doc) in changed {
            let applied = match &doc {
                QueueDocument::Flavor(f) => {
                    self.scheduler.add_flavor(f.clone());
                    Ok(())
                }
                QueueDocument::Cohort(c) => self.scheduler.add_cohort(c.clone()).map(|_| ()),
                QueueDocument::ClusterQueue(q) => {
                    self.scheduler.add_cluster_queue(q.clone()).map(|_| ())
                }
                QueueDocument::LocalQueue(q) => {
                    self.scheduler.add_local_queue(q.clone());
                    Ok(())
                }
                QueueDocument::Namespace(n, labels) => {
                    self.scheduler.set_namespace_labels(n, labels.clone());
                    Ok(())
                }
                QueueDocument::DisruptionBudget(b) => {
                    self.scheduler.set_disruption_budget(b.clone());
                    Ok(())
                }
                // Not watched live: the API server enforces ResourceQuota and LimitRange.
                QueueDocument::Quota(_) | QueueDocument::LimitRange(_) => continue,
            };
            match applied {
                Ok(()) => {
                    self.queues.docs.insert(key, doc);
                }
                Err(e) => {
                    if let Some(o) = listed.get_mut(&key) {
                        o.refused = Some(match &e {
                            ClusterError::Queue(q) => format!("field {}: {}", q.field, q.why),
                            other => other.to_string(),
                        });
                    }
                    errors.push(format!("{} {}: {e}", key.0, key.1))
                }
            }
        }
        // A queue deleted (and perhaps created again) starts afresh.
        self.queues.status.retain(|k, _| listed.contains_key(k));
        self.queues.active.retain(|k, _| listed.contains_key(k));
        self.queues.objects = listed;
        errors
    }
}

/// An amount in the engine's units as a Kubernetes quantity.
pub(super) fn quantity(resource: &str, amount: i64) -> String {
    match kestrel_core::quota_scale(resource) {
        1 => amount.to_string(),
        scale if amount % scale == 0 => (amount / scale).to_string(),
        _ => format!("{amount}m"),
    }
}

/// A wall time (Unix ms) as a condition's `lastTransitionTime` (RFC 3339, whole seconds,
/// as the API server keeps it).
pub(super) fn condition_time(unix_ms: i64) -> Value {
    let at = Timestamp::from_millisecond(unix_ms).unwrap_or_default();
    serde_json::to_value(Time(at)).unwrap_or_default()
}
