//! Differential test against kube-scheduler (1.37, the one `testenv/` builds) on the real
//! control plane: seeded random clusters and seeded sequences of pods with the placement
//! rules both schedulers honour, and kube-scheduler's filters as the reference for each of
//! Kestrel's verdicts.
//!
//! What is drawn, per seed: 6 to 10 nodes (no GPUs) with `kubernetes.io/hostname`, a zone
//! (2 or 3 zones; now and then none), a rack (sometimes none), a disk kind, different CPU
//! and memory, and some taints (NoSchedule, NoExecute, PreferNoSchedule); then 40 pods
//! (most of them replicas of 8 workloads drawn alike, so that their rules meet pods of
//! their own kind) in three namespaces (two labelled `team: red`, one `team: blue`) with CPU and memory
//! requests that sometimes do not fit, node selectors, required node affinity, tolerations,
//! host ports, required and preferred pod affinity and anti-affinity (topologyKey hostname,
//! zone, rack or a key no node has; `namespaces`, `namespaceSelector` (`{}` too),
//! `matchLabelKeys`, `mismatchLabelKeys`), and topology spread constraints (`maxSkew`, both
//! `whenUnsatisfiable`, `minDomains`, `nodeAffinityPolicy`, `nodeTaintsPolicy`,
//! `matchLabelKeys`).
//!
//! How, per seed, on one set of nodes, in two phases:
//! 1. Kestrel (`--scheduler-name kestrel-diff`) is given the pods one at a time, in order:
//!    pod i is created, and the test waits until Kestrel has bound it or set its
//!    `PodScheduled=False` condition. A pod left unschedulable is deleted at once, so the
//!    state the next pod meets is exactly the pods bound so far (neither scheduler then
//!    retries it later, which would make the order of later events matter). The invariant
//!    checker then runs on what the API server holds, and every pod is deleted.
//! 2. kube-scheduler replays Kestrel's run on the same nodes, pod by pod in the same
//!    order, so that it judges each pod on exactly the state Kestrel judged it on:
//!    - a pod Kestrel bound to node X is created for kube-scheduler pinned to X, and
//!      kube-scheduler must bind it there: its filters accept X. The pin is an extended
//!      resource only X offers (`pin.diff.kestrel.dev/nN`), not a node affinity or a
//!      taint, which would change which nodes topology spread counts (nodeAffinityPolicy,
//!      nodeTaintsPolicy) and so the verdict being checked. Where kube-scheduler refuses,
//!      the test binds the pod to X itself, so the replay stays on Kestrel's state;
//!    - a pod Kestrel left unschedulable is created for kube-scheduler unpinned, and
//!      kube-scheduler must leave it unschedulable too (a pod it binds is deleted again,
//!      for the same reason).
//!
//!    So for every pod both agree whether it can be placed, and Kestrel's node is one
//!    kube-scheduler's filters accept, on the same state. Where both refuse a pod, their
//!    "0/N nodes are available: ..." messages must also count the same nodes under each
//!    reason (see [`node_reasons`] for what is not compared): that compares the filters
//!    node by node, so a rule Kestrel applies too strictly on some nodes shows whenever
//!    such a pod is left unplaced (where it is placed, only the node chosen is checked).
//!
//! Before each phase, a probe pod per scheduler checks that the scheduler sees exactly this
//! seed's nodes (its "0/N nodes are available" message) and, before the replay, that
//! kube-scheduler no longer counts the pods of phase 1.
//!
//! Where the two disagree on purpose, nothing is compared: which node among the feasible
//! ones is chosen (preferred affinity and anti-affinity, ScheduleAnyway spread and every
//! other score are Kestrel's own), GPU packing and gangs (Kestrel's reason to exist; no pod
//! here asks for GPUs or belongs to a gang), and kube-scheduler's default spread
//! constraints, which apply only to pods owned by a Service or workload controller and only
//! score (these pods have no owners).
//!
//! A failure names the seed, the pod (its spec), both verdicts with the schedulers'
//! messages, the seed's nodes and the pods bound at that moment. Every disagreement of
//! every seed is collected before the test fails.

// The serial lock is held across awaits on purpose: one test at a time on the control plane.
#![allow(clippy::await_holding_lock)]

mod live;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use live::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

const SEEDS: std::ops::RangeInclusive<u64> = 1..=12;
const PODS_PER_SEED: usize = 40;
/// Workloads per seed: 70% of the pods are replicas of one of them.
const WORKLOADS: usize = 8;
const SCHEDULER: &str = "kestrel-diff";
const KUBE_SCHEDULER: &str = "default-scheduler";
const NODE_PREFIX: &str = "diff-";

const SEED_LABEL: &str = "diff.kestrel.dev/seed";
const HOST: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";
const RACK: &str = "diff.kestrel.dev/rack";
const DISK: &str = "diff.kestrel.dev/disk";
/// A topology key no node has.
const NOWHERE: &str = "diff.kestrel.dev/nowhere";
/// The extended resource that pins a replayed pod to one node: `PIN/nN` on node N only.
const PIN: &str = "pin.diff.kestrel.dev";
/// (namespace, its `team` label).
const NAMESPACES: [(&str, &str); 3] = [
    ("diff-red-1", "red"),
    ("diff-red-2", "red"),
    ("diff-blue", "blue"),
];
/// The probe pods' namespace (they are never bound while a drawn pod is judged).
const SYNC_NS: &str = "diff-sync";

/// kube-scheduler's words for the filters compared, in its "0/N nodes are available"
/// messages.
const REASONS: [&str; 9] = [
    "didn't match pod topology spread constraints",
    "didn't match pod anti-affinity rules",
    "didn't match pod affinity rules",
    "didn't satisfy existing pods anti-affinity rules",
    "didn't have free ports for the requested pod ports",
    "Insufficient cpu",
    "Insufficient memory",
    "untolerated taint",
    "didn't match Pod's node affinity/selector",
];

/// SplitMix64: a tiny seeded generator, so the test needs no dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x9E37_79B9_7F4A_7C15)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True `percent` times in 100.
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

struct DrawnNode {
    name: String,
    labels: BTreeMap<String, String>,
    taints: Vec<Value>,
    cpu: u32,
    memory_gi: u32,
}

fn draw_nodes(seed: u64, rng: &mut Rng) -> Vec<DrawnNode> {
    let count = 6 + rng.below(5) as usize;
    let zones = 2 + rng.below(2);
    let racks = 2 + rng.below(3);
    (0..count)
        .map(|i| {
            let name = format!("{NODE_PREFIX}{seed}-n{i}");
            let mut labels = BTreeMap::new();
            labels.insert(SEED_LABEL.to_string(), seed.to_string());
            labels.insert(HOST.to_string(), name.clone());
            if !rng.chance(12) {
                labels.insert(ZONE.to_string(), format!("z{}", rng.below(zones)));
            }
            if !rng.chance(15) {
                labels.insert(RACK.to_string(), format!("r{}", rng.below(racks)));
            }
            let disk = if rng.chance(50) { "ssd" } else { "hdd" };
            labels.insert(DISK.to_string(), disk.to_string());
            let mut taints = Vec::new();
            if rng.chance(25) {
                taints.push(json!({"key": "dedicated", "value": "infra", "effect": "NoSchedule"}));
            }
            if rng.chance(10) {
                taints.push(json!({"key": "maintenance", "effect": "NoExecute"}));
            }
            if rng.chance(15) {
                taints.push(json!({"key": "soft", "value": "yes", "effect": "PreferNoSchedule"}));
            }
            DrawnNode {
                name,
                labels,
                taints,
                cpu: 4 + rng.below(5) as u32,
                memory_gi: *rng.pick(&[16, 32]),
            }
        })
        .collect()
}

fn node_object(index: usize, n: &DrawnNode) -> Node {
    let labels: Vec<(&str, &str)> = n
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut node = kestrel_testenv::gpu_node(&n.name, 0, &labels);
    let resources = json!({"cpu": n.cpu.to_string(), "memory": format!("{}Gi", n.memory_gi),
                           "pods": "110", format!("{PIN}/n{index}"): "1000"});
    let status = node.status.get_or_insert_with(Default::default);
    status.capacity = Some(serde_json::from_value(resources.clone()).unwrap());
    status.allocatable = Some(serde_json::from_value(resources).unwrap());
    if !n.taints.is_empty() {
        node.spec.get_or_insert_with(Default::default).taints =
            Some(serde_json::from_value(json!(n.taints)).unwrap());
    }
    node
}

const APPS: [&str; 4] = ["web", "db", "cache", "batch"];

/// A label selector over `app` and `tier`: often the pod's own app (as a workload's
/// replicas select each other), now and then `{}` (every pod).
fn draw_selector(rng: &mut Rng, own_app: &str) -> Value {
    if rng.chance(5) {
        return json!({});
    }
    if rng.chance(40) {
        return json!({"matchLabels": {"app": own_app}});
    }
    let app = *rng.pick(&APPS);
    let other = *rng.pick(&APPS);
    match rng.below(5) {
        0 | 1 => json!({"matchLabels": {"app": app}}),
        2 => {
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": [app, other]}]})
        }
        3 => json!({"matchLabels": {"app": app, "tier": *rng.pick(&["front", "back"])}}),
        _ => json!({"matchExpressions": [
            {"key": "app", "operator": "NotIn", "values": [app]},
            {"key": "tier", "operator": "Exists"}]}),
    }
}

fn draw_term(rng: &mut Rng, own_app: &str) -> Value {
    let key = *rng.pick(&[HOST, HOST, ZONE, ZONE, RACK, NOWHERE]);
    let mut t = json!({"labelSelector": draw_selector(rng, own_app), "topologyKey": key});
    match rng.below(6) {
        0 | 1 => {}
        2 => {
            let a = rng.pick(&NAMESPACES).0;
            let b = rng.pick(&NAMESPACES).0;
            t["namespaces"] = json!(if a == b { vec![a] } else { vec![a, b] });
        }
        3 => t["namespaceSelector"] = json!({}),
        4 => t["namespaceSelector"] = json!({"matchLabels": {"team": "red"}}),
        _ => {
            t["namespaces"] = json!([rng.pick(&NAMESPACES).0]);
            t["namespaceSelector"] = json!({"matchLabels": {"team": "blue"}});
        }
    }
    match rng.below(8) {
        0 | 1 => t["matchLabelKeys"] = json!(["version"]),
        2 => t["mismatchLabelKeys"] = json!(["version"]),
        _ => {}
    }
    t
}

fn draw_terms(rng: &mut Rng, own_app: &str, preferred: bool) -> Value {
    let count = 1 + (rng.chance(20) as usize);
    let terms: Vec<Value> = (0..count)
        .map(|_| {
            let t = draw_term(rng, own_app);
            if preferred {
                json!({"weight": 1 + rng.below(100), "podAffinityTerm": t})
            } else {
                t
            }
        })
        .collect();
    json!(terms)
}

fn draw_spread(rng: &mut Rng, own_app: &str) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for _ in 0..1 + (rng.chance(30) as usize) {
        let key = *rng.pick(&[HOST, HOST, ZONE, ZONE, RACK, RACK, NOWHERE]);
        let hard = rng.chance(75);
        let when = if hard {
            "DoNotSchedule"
        } else {
            "ScheduleAnyway"
        };
        if out
            .iter()
            .any(|c| c["topologyKey"] == key && c["whenUnsatisfiable"] == when)
        {
            continue;
        }
        let mut c = json!({"maxSkew": 1 + rng.below(2), "topologyKey": key,
                           "whenUnsatisfiable": when, "labelSelector": draw_selector(rng, own_app)});
        if hard && rng.chance(40) {
            c["minDomains"] = json!(1 + rng.below(4));
        }
        if rng.chance(35) {
            c["nodeAffinityPolicy"] = json!(rng.pick(&["Honor", "Ignore"]));
        }
        if rng.chance(35) {
            c["nodeTaintsPolicy"] = json!(rng.pick(&["Honor", "Ignore"]));
        }
        if rng.chance(25) {
            c["matchLabelKeys"] = json!(["version"]);
        }
        out.push(c);
    }
    out
}

/// One drawn pod: its namespace, labels and spec (without `schedulerName`).
#[derive(Clone)]
struct DrawnPod {
    namespace: &'static str,
    labels: BTreeMap<String, String>,
    spec: Value,
}

fn draw_pod(seed: u64, rng: &mut Rng, nodes: &[DrawnNode]) -> DrawnPod {
    let namespace = rng.pick(&NAMESPACES).0;
    let mut labels = BTreeMap::new();
    let app = *rng.pick(&APPS);
    labels.insert("app".to_string(), app.to_string());
    if rng.chance(60) {
        labels.insert("tier".to_string(), rng.pick(&["front", "back"]).to_string());
    }
    if rng.chance(80) {
        labels.insert("version".to_string(), rng.pick(&["v1", "v2"]).to_string());
    }
    let mut node_selector = json!({SEED_LABEL: seed.to_string()});
    if rng.chance(10) {
        node_selector[DISK] = json!("ssd");
    }
    let cpu = if rng.chance(4) {
        "12"
    } else {
        *rng.pick(&["100m", "250m", "500m", "500m", "1", "2"])
    };
    let memory = if rng.chance(4) {
        "40Gi"
    } else {
        *rng.pick(&["256Mi", "512Mi", "1Gi", "2Gi", "4Gi"])
    };
    let mut container = json!({"name": "main", "image": "app:1",
        "resources": {"requests": {"cpu": cpu, "memory": memory}}});
    if rng.chance(20) {
        let mut port = json!({"containerPort": 8000 + rng.below(1000),
                              "hostPort": *rng.pick(&[8080, 8080, 9090]),
                              "protocol": *rng.pick(&["TCP", "TCP", "UDP"])});
        if rng.chance(30) {
            port["hostIP"] = json!(*rng.pick(&["127.0.0.1", "10.0.0.1"]));
        }
        container["ports"] = json!([port]);
    }
    let mut spec = json!({
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": node_selector,
        "containers": [container],
    });
    let mut affinity = json!({});
    if rng.chance(20) {
        let zones: Vec<String> = nodes
            .iter()
            .filter_map(|n| n.labels.get(ZONE).cloned())
            .collect();
        let zone = match zones.is_empty() {
            true => "z0".to_string(),
            false => rng.pick(&zones).clone(),
        };
        let expression = match rng.below(3) {
            0 => json!({"key": ZONE, "operator": "In", "values": [zone]}),
            1 => json!({"key": RACK, "operator": "NotIn", "values": ["r0"]}),
            _ => json!({"key": RACK, "operator": "Exists"}),
        };
        let mut terms = vec![json!({"matchExpressions": [expression]})];
        if rng.chance(30) {
            terms.push(
                json!({"matchExpressions": [{"key": DISK, "operator": "In", "values": ["hdd"]}]}),
            );
        }
        affinity["nodeAffinity"] =
            json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}});
    }
    for (field, percent) in [("podAffinity", 25), ("podAntiAffinity", 35)] {
        let mut a = json!({});
        if rng.chance(percent) {
            a["requiredDuringSchedulingIgnoredDuringExecution"] = draw_terms(rng, app, false);
        }
        if rng.chance(15) {
            a["preferredDuringSchedulingIgnoredDuringExecution"] = draw_terms(rng, app, true);
        }
        if a != json!({}) {
            affinity[field] = a;
        }
    }
    if affinity != json!({}) {
        spec["affinity"] = affinity;
    }
    if rng.chance(45) {
        spec["topologySpreadConstraints"] = json!(draw_spread(rng, app));
    }
    let mut tolerations = Vec::new();
    if rng.chance(30) {
        tolerations.push(
            json!({"key": "dedicated", "operator": "Equal", "value": "infra",
                                "effect": "NoSchedule"}),
        );
    }
    if rng.chance(15) {
        tolerations.push(json!({"key": "maintenance", "operator": "Exists"}));
    }
    if rng.chance(3) {
        tolerations.push(json!({"operator": "Exists"}));
    }
    if !tolerations.is_empty() {
        spec["tolerations"] = json!(tolerations);
    }
    DrawnPod {
        namespace,
        labels,
        spec,
    }
}

/// A pod object from a drawn pod: `name`, for `scheduler`, pinned to node `pin` if given.
fn pod_object(p: &DrawnPod, name: &str, scheduler: &str, pin: Option<usize>) -> Pod {
    let mut spec = p.spec.clone();
    spec["schedulerName"] = json!(scheduler);
    if let Some(i) = pin {
        let resource = format!("{PIN}/n{i}");
        let resources = &mut spec["containers"][0]["resources"];
        resources["requests"][&resource] = json!("1");
        resources["limits"] = json!({resource: "1"});
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": p.namespace, "labels": p.labels},
        "spec": spec,
    }))
    .unwrap_or_else(|e| panic!("pod {name}: {e}"))
}

/// What a scheduler did with a pod.
#[derive(Debug, Clone, PartialEq)]
enum Verdict {
    Bound(String),
    /// `PodScheduled=False`: its reason and message.
    Refused(String, String),
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Verdict::Bound(node) => write!(f, "bound to {node}"),
            Verdict::Refused(reason, message) => write!(f, "not placed ({reason}: {message})"),
        }
    }
}

fn verdict_of(pod: &Pod) -> Option<Verdict> {
    if let Some(node) = node_of(pod) {
        return Some(Verdict::Bound(node.to_string()));
    }
    let condition = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
    Some(Verdict::Refused(
        condition.reason.clone().unwrap_or_default(),
        condition.message.clone().unwrap_or_default(),
    ))
}

/// Creates the pod and waits for its scheduler's verdict.
async fn submit(client: &kube::Client, pod: Pod, what: &str) -> Verdict {
    let ns = pod.metadata.namespace.clone().unwrap();
    let name = pod.metadata.name.clone().unwrap();
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("{what}: creating pod {ns}/{name}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(pod) = api.get(&name).await {
            if let Some(v) = verdict_of(&pod) {
                return v;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{what}: no verdict on pod {ns}/{name} within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
}

/// Deletes a pod and waits until it is gone.
async fn delete_pod(client: &kube::Client, ns: &str, name: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let _ = api
        .delete(name, &DeleteParams::default().grace_period(0))
        .await;
    eventually(
        Duration::from_secs(30),
        &format!("pod {ns}/{name} deleted"),
        || async {
            api.get_opt(name)
                .await
                .ok()
                .flatten()
                .is_none()
                .then_some(())
        },
    )
    .await;
}

/// Deletes every pod of the test's namespaces and waits until none is left.
async fn delete_all_pods(client: &kube::Client) {
    let all: Vec<&str> = NAMESPACES
        .iter()
        .map(|(n, _)| *n)
        .chain([SYNC_NS])
        .collect();
    for ns in &all {
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let _ = api
            .delete_collection(
                &DeleteParams::default().grace_period(0),
                &ListParams::default(),
            )
            .await;
    }
    eventually(
        Duration::from_secs(60),
        "the test's pods deleted",
        || async {
            for ns in &all {
                if !pods_in(client, ns).await.is_empty() {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
}

/// Waits until `scheduler` sees exactly `nodes` nodes (a probe pod that fits nowhere, and
/// its "0/N nodes are available" message) and, with `gone_label`, no longer counts the
/// pods carrying that label (the probe needs one of them beside it, so it is refused only
/// once they are gone from the scheduler's view).
async fn sync(client: &kube::Client, scheduler: &str, nodes: usize, gone_label: Option<&str>) {
    let want = format!("0/{nodes} nodes are available");
    let mut last = None;
    for attempt in 0..100 {
        let name = format!("probe-{}-{attempt}", scheduler.replace('-', ""));
        let mut spec = json!({"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "probe:1"}]});
        match gone_label {
            None => spec["containers"][0]["resources"] = json!({"requests": {"cpu": "1000"}}),
            Some(label) => {
                spec["affinity"] = json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchExpressions": [{"key": label, "operator": "Exists"}]},
                     "namespaceSelector": {}, "topologyKey": HOST}]}})
            }
        }
        let pod: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": SYNC_NS}, "spec": spec}))
        .unwrap();
        let verdict = submit(client, pod, &format!("probing {scheduler}")).await;
        delete_pod(client, SYNC_NS, &name).await;
        match &verdict {
            Verdict::Refused(_, message) if message.contains(&want) => return,
            _ => last = Some(verdict),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{scheduler} does not see the {nodes} nodes of this seed alone (or still counts the pods just deleted): its last verdict on a probe: {last:?}");
}

/// How many nodes each reason of a "0/N nodes are available: ..." message refused (a
/// node may count under two resources), in kube-scheduler's words. Not compared: the
/// order of the reasons, kube-scheduler's preemption sentence, and the taint Kestrel names
/// where kube-scheduler says "untolerated taint(s)". Both try taints before node affinity,
/// so a node failing both counts under its taint in each.
fn node_reasons(message: &str) -> BTreeMap<String, u32> {
    let Some((_, list)) = message.split_once("nodes are available: ") else {
        return BTreeMap::from([(message.to_string(), 0)]);
    };
    let list = list.split(". ").next().unwrap_or_default();
    let list = list.strip_suffix('.').unwrap_or(list);
    let mut out = BTreeMap::new();
    for item in list.split(", ") {
        let (count, reason) = item.split_once(' ').unwrap_or(("0", item));
        let reason = match reason.starts_with("node(s) had untolerated taint") {
            true => "node(s) had untolerated taint(s)",
            false => reason,
        };
        *out.entry(reason.to_string()).or_default() += count.parse::<u32>().unwrap_or(0);
    }
    out
}

/// The pod as the failure messages show it.
fn describe(p: &DrawnPod) -> String {
    json!({"namespace": p.namespace, "labels": p.labels, "spec": p.spec}).to_string()
}

fn describe_nodes(nodes: &[DrawnNode]) -> String {
    let mut out = String::new();
    for n in nodes {
        let labels: Vec<String> = n
            .labels
            .iter()
            .filter(|(k, _)| *k != SEED_LABEL && *k != HOST)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let taints: Vec<String> = n.taints.iter().map(|t| t.to_string()).collect();
        let _ = writeln!(
            out,
            "    {}: cpu {} memory {}Gi; {}; taints [{}]",
            n.name,
            n.cpu,
            n.memory_gi,
            labels.join(" "),
            taints.join(", ")
        );
    }
    out
}

/// The pods bound so far, as the failure messages show them.
fn describe_state(pods: &[DrawnPod], verdicts: &[Verdict]) -> String {
    let mut out = String::new();
    for (i, v) in verdicts.iter().enumerate() {
        if let Verdict::Bound(node) = v {
            let labels: Vec<String> = pods[i]
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let _ = writeln!(
                out,
                "    p{i} ({}, {}) on {node}",
                pods[i].namespace,
                labels.join(",")
            );
        }
    }
    out
}

/// The seeded clusters and pods, each pod judged by Kestrel and then by kube-scheduler
/// on Kestrel's state (see the module's documentation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kestrel_and_kube_scheduler_agree_on_every_filter() {
    let Some((env, _serial)) = env() else { return };
    let started = Instant::now();
    let client = env.client().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for (name, team) in NAMESPACES.iter().chain(&[(SYNC_NS, "none")]) {
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": {"team": team}}}))
                .unwrap();
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
    }
    env.cp.start_kube_scheduler(&[]);
    let mut kestrel = env.kestrel(
        SCHEDULER,
        &["--scheduler-name", SCHEDULER, "--leader-elect=false"],
    );
    let mut disagreements: Vec<String> = Vec::new();
    let (mut placed, mut refused) = (0, 0);
    // How often each of kube-scheduler's reasons refused a node, over the pods both refused.
    let mut reasons: BTreeMap<&str, usize> = REASONS.iter().map(|r| (*r, 0)).collect();
    for seed in SEEDS {
        let seed_started = Instant::now();
        let mut rng = Rng::new(seed);
        let nodes = draw_nodes(seed, &mut rng);
        // Most pods are replicas of a few workloads (so that their rules meet their own
        // kind), the rest drawn one by one.
        let workloads: Vec<DrawnPod> = (0..WORKLOADS)
            .map(|_| draw_pod(seed, &mut rng, &nodes))
            .collect();
        let pods: Vec<DrawnPod> = (0..PODS_PER_SEED)
            .map(|_| match rng.chance(70) {
                true => rng.pick(&workloads).clone(),
                false => draw_pod(seed, &mut rng, &nodes),
            })
            .collect();
        // This seed's nodes only: the last seed's pods and nodes go first.
        delete_all_pods(&client).await;
        cleanup(&client, NODE_PREFIX, &[]).await;
        kestrel_testenv::create_gpu_nodes(
            &client,
            nodes
                .iter()
                .enumerate()
                .map(|(i, n)| node_object(i, n))
                .collect(),
        )
        .await;
        sync(&client, SCHEDULER, nodes.len(), None).await;

        // Phase 1: Kestrel, one pod at a time.
        let mut kestrel_verdicts: Vec<Verdict> = Vec::new();
        for (i, p) in pods.iter().enumerate() {
            let name = format!("k{i}");
            let mut pod = pod_object(p, &name, SCHEDULER, None);
            pod.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert("diff.kestrel.dev/phase".into(), "kestrel".into());
            let what = format!("seed {seed}, pod p{i} for Kestrel");
            let verdict = submit(&client, pod, &what).await;
            if let Verdict::Refused(..) = verdict {
                delete_pod(&client, p.namespace, &name).await;
            }
            kestrel_verdicts.push(verdict);
        }
        assert_invariants(&client).await;
        delete_all_pods(&client).await;
        sync(
            &client,
            KUBE_SCHEDULER,
            nodes.len(),
            Some("diff.kestrel.dev/phase"),
        )
        .await;

        // Phase 2: kube-scheduler replays Kestrel's run.
        for (i, (p, kestrel_verdict)) in pods.iter().zip(&kestrel_verdicts).enumerate() {
            let name = format!("m{i}");
            let pin = match kestrel_verdict {
                Verdict::Bound(node) => nodes.iter().position(|n| &n.name == node),
                Verdict::Refused(..) => None,
            };
            if let (Verdict::Bound(node), None) = (kestrel_verdict, pin) {
                panic!("seed {seed}, pod p{i}: Kestrel bound it to {node}, not one of the seed's nodes");
            }
            let what = format!("seed {seed}, pod p{i} for kube-scheduler");
            let verdict = submit(&client, pod_object(p, &name, KUBE_SCHEDULER, pin), &what).await;
            let agree = match (kestrel_verdict, &verdict) {
                (Verdict::Bound(a), Verdict::Bound(b)) => a == b,
                (Verdict::Refused(..), Verdict::Refused(..)) => true,
                _ => false,
            };
            if agree {
                match verdict {
                    Verdict::Bound(_) => placed += 1,
                    Verdict::Refused(_, message) => {
                        refused += 1;
                        for (reason, n) in reasons.iter_mut() {
                            *n += message.contains(reason) as usize;
                        }
                        delete_pod(&client, p.namespace, &name).await;
                        // Both refused it: each node for the same reason, too.
                        let Verdict::Refused(_, kestrel_message) = kestrel_verdict else {
                            unreachable!()
                        };
                        let (k, s) = (node_reasons(kestrel_message), node_reasons(&message));
                        if k != s {
                            disagreements.push(format!(
                                "seed {seed}, pod p{i}: both leave it unschedulable, but for different nodes or reasons:\n  Kestrel: {kestrel_message}\n  kube-scheduler: {message}\n  ({k:?} against {s:?})\n  pod: {}\n  nodes:\n{}  bound before it:\n{}",
                                describe(p),
                                describe_nodes(&nodes),
                                describe_state(&pods[..i], &kestrel_verdicts[..i]),
                            ));
                            eprintln!("DISAGREEMENT {}", disagreements.last().unwrap());
                        }
                    }
                }
                continue;
            }
            let (question, correction) = match kestrel_verdict {
                Verdict::Bound(node) => (
                    format!("the same pod pinned to {node}, on the same state"),
                    format!("the test binds it to {node} itself and goes on"),
                ),
                Verdict::Refused(..) => (
                    "the same pod, on the same state".to_string(),
                    "the test deletes it and goes on".to_string(),
                ),
            };
            disagreements.push(format!(
                "seed {seed}, pod p{i}:\n  Kestrel: {kestrel_verdict}\n  kube-scheduler ({question}): {verdict}\n  pod: {}\n  nodes:\n{}  bound before it:\n{}  ({correction})",
                describe(p),
                describe_nodes(&nodes),
                describe_state(&pods[..i], &kestrel_verdicts[..i]),
            ));
            eprintln!("DISAGREEMENT {}", disagreements.last().unwrap());
            match kestrel_verdict {
                Verdict::Bound(node) => {
                    let api: Api<Pod> = Api::namespaced(client.clone(), p.namespace);
                    let binding = json!({"apiVersion": "v1", "kind": "Binding",
                        "metadata": {"name": name, "namespace": p.namespace},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
                    let _: Value = api
                        .create_subresource("binding", &name, &PostParams::default(), &binding)
                        .await
                        .unwrap_or_else(|e| panic!("binding {name} to {node}: {e}"));
                }
                Verdict::Refused(..) => delete_pod(&client, p.namespace, &name).await,
            }
        }
        eprintln!(
            "seed {seed}: {} nodes, {} pods, Kestrel placed {}, {:.1} s",
            nodes.len(),
            pods.len(),
            kestrel_verdicts
                .iter()
                .filter(|v| matches!(v, Verdict::Bound(_)))
                .count(),
            seed_started.elapsed().as_secs_f64()
        );
    }
    assert_invariants(&client).await;
    env.cp.stop_kube_scheduler();
    let log = kestrel.log_text();
    assert!(
        kestrel.terminate(Duration::from_secs(20)),
        "kestrel did not exit 0 on SIGTERM"
    );
    delete_all_pods(&client).await;
    cleanup(&client, NODE_PREFIX, &[]).await;
    for (name, _) in NAMESPACES.iter().chain(&[(SYNC_NS, "")]) {
        let _ = namespaces.delete(name, &DeleteParams::default()).await;
    }
    eprintln!(
        "differential: {} seeds, {placed} pods placed and {refused} refused by both, {} disagreements, {:.1} s\nkube-scheduler's reasons among the pods both refused: {reasons:?}",
        SEEDS.count(),
        disagreements.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        disagreements.is_empty(),
        "Kestrel and kube-scheduler disagree on {} pods:\n\n{}",
        disagreements.len(),
        disagreements.join("\n\n")
    );
    // The draw must keep exercising every rule, as a refusal both agree on.
    let unexercised: Vec<&&str> = reasons
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(r, _)| r)
        .collect();
    assert!(
        unexercised.is_empty(),
        "no pod was refused for {unexercised:?}: the draw no longer exercises these rules"
    );
    assert!(!log.contains("ERROR"), "kestrel logged an error:\n{log}");
}
