//! The checks on Pods: where they run, why they wait, what they ask for.

use super::checks::Finding;
use super::node_checks::by_value;
use super::objects::{untolerated_taints, NodeView, PodView};
use super::{count, plural, short_list, PENDING_GROUPS};
use k8s_openapi::jiff::Timestamp;
use kestrel_core::static_check;
use std::collections::{BTreeMap, BTreeSet};

pub(super) fn cpu_pod_on_gpu_node(nodes: &[NodeView], pods: &[PodView]) -> Vec<Finding> {
    let gpu_nodes: BTreeSet<&str> = nodes
        .iter()
        .filter(|n| n.is_gpu_node())
        .map(|n| n.name())
        .collect();
    let mut on = BTreeSet::new();
    let mut items = Vec::new();
    for p in pods {
        let Some(node) = p.node.filter(|n| gpu_nodes.contains(n)) else {
            continue;
        };
        if p.is_placed() && !p.uses_gpu() && !p.is_node_agent() {
            on.insert(node);
            items.push(format!("{} on {node}", p.key()));
        }
    }
    if items.is_empty() {
        return Vec::new();
    }
    vec![Finding::new(
        "cpu-pod-on-gpu-node",
        format!(
            "{} that request{} no GPU run{} on {}",
            count(items.len(), "pod"),
            if items.len() == 1 { "s" } else { "" },
            if items.len() == 1 { "s" } else { "" },
            count(on.len(), "GPU node")
        ),
        items,
        "GPU nodes are the cluster's most expensive capacity: CPU-only pods there hold CPU, \
         memory and pod slots that GPU jobs then lack, and keep the nodes from draining.",
        "Taint the GPU nodes (e.g. nvidia.com/gpu=present:NoSchedule) so only pods that \
         tolerate it land there, or move these pods with a nodeSelector/affinity for CPU \
         nodes. DaemonSet and static pods are not counted."
            .to_string(),
    )]
}

pub(super) fn pod_stranded_by_taints(nodes: &[NodeView], pods: &[PodView]) -> Vec<Finding> {
    // (blocking taints) -> (pods, fitting nodes)
    let mut groups: BTreeMap<Vec<String>, (Vec<String>, BTreeSet<String>)> = BTreeMap::new();
    for p in pods.iter().filter(|p| p.is_pending()) {
        let requests = p.extended_requests();
        let candidates: Vec<&NodeView> = nodes
            .iter()
            .filter(|n| {
                static_check(&p.spec.constraints, &n.untainted).is_ok()
                    && requests.iter().all(|(r, a)| n.offers(r) >= *a)
            })
            .collect();
        if candidates.is_empty() {
            continue;
        }
        let mut blocking = BTreeSet::new();
        let mut stranded = true;
        for n in &candidates {
            let untolerated = untolerated_taints(&p.spec.constraints, &n.spec);
            if untolerated.is_empty() {
                stranded = false;
                break;
            }
            blocking.extend(untolerated.iter().map(|t| t.to_string()));
        }
        if !stranded {
            continue;
        }
        let wants = if requests.is_empty() {
            String::new()
        } else {
            let r: Vec<String> = requests.iter().map(|(r, a)| format!("{a} {r}")).collect();
            format!(", wants {}", r.join(" + "))
        };
        let entry = groups.entry(blocking.into_iter().collect()).or_default();
        entry.0.push(format!("{}{wants}", p.key()));
        entry
            .1
            .extend(candidates.iter().map(|n| n.name().to_string()));
    }
    groups
        .into_iter()
        .map(|(taints, (pods, fitting))| {
            let fitting: Vec<String> = fitting.into_iter().collect();
            let first = &taints[0];
            let (key_value, effect) = first.rsplit_once(':').unwrap_or((first, "NoSchedule"));
            let (key, value) = key_value.split_once('=').unwrap_or((key_value, ""));
            let system = if taints.iter().any(|t| t.starts_with("node.kubernetes.io/")) {
                "; node.kubernetes.io/ taints go away when the node is uncordoned or healthy \
                 again"
            } else {
                ""
            };
            let toleration = if value.is_empty() {
                format!("{{key: {key}, operator: Exists, effect: {effect}}}")
            } else {
                format!("{{key: {key}, operator: Equal, value: {value}, effect: {effect}}}")
            };
            Finding::new(
                "pod-stranded-by-taints",
                format!(
                    "{} {} {} ({}) but {} not tolerate the taint{} {}",
                    count(pods.len(), "pending pod"),
                    if pods.len() == 1 { "fits" } else { "fit" },
                    count(fitting.len(), "node"),
                    short_list(&fitting, 5),
                    if pods.len() == 1 { "does" } else { "do" },
                    plural(taints.len()),
                    taints.join(", ")
                ),
                pods,
                "Every node with the resources, nodeSelector and affinity these pods need is \
                 closed to them by a taint, so they wait forever; more capacity elsewhere does \
                 not help.",
                format!(
                    "Add the toleration to the pods' template, e.g. tolerations: [{toleration}], \
                     or remove the taint from nodes meant for them (kubectl taint nodes NODE \
                     {first}-){system}."
                ),
            )
        })
        .collect()
}

pub(super) fn pod_resource_unavailable(nodes: &[NodeView], pods: &[PodView]) -> Vec<Finding> {
    // (resource, most any node offers) -> pods
    let mut groups: BTreeMap<(String, i64), Vec<String>> = BTreeMap::new();
    let mut most_of: BTreeMap<String, i64> = BTreeMap::new();
    for p in pods.iter().filter(|p| p.is_pending()) {
        for (r, a) in p.extended_requests() {
            let most = *most_of
                .entry(r.clone())
                .or_insert_with(|| nodes.iter().map(|n| n.offers(&r)).max().unwrap_or(0));
            if most < a {
                groups
                    .entry((r.clone(), most))
                    .or_default()
                    .push(format!("{} (wants {a})", p.key()));
            }
        }
    }
    groups
        .into_iter()
        .map(|((resource, most), pods)| {
            let n = pods.len();
            let (what, fix) = if most == 0 {
                (
                    format!(
                        "{} request{} {resource}, which no node offers",
                        count(n, "pending pod"),
                        if n == 1 { "s" } else { "" }
                    ),
                    format!(
                        "Check the device plugin that should advertise {resource} (its \
                         DaemonSet, the operator that deploys it, and its config: resource \
                         names are set there) and that it runs on the nodes with the \
                         hardware; kubectl get nodes -o json | grep {resource} should show \
                         it. If the name in the pods is wrong, fix their template."
                    ),
                )
            } else {
                (
                    format!(
                        "{} request{} more {resource} than any node offers ({most} at most)",
                        count(n, "pending pod"),
                        if n == 1 { "s" } else { "" }
                    ),
                    format!(
                        "Lower the request to {most} or less per pod (split the job into more \
                         pods), or add nodes that offer more {resource}."
                    ),
                )
            };
            Finding::new(
                "pod-resource-unavailable",
                what,
                pods,
                "No node can ever take these pods, however much is freed: they stay Pending \
                 until the resource appears.",
                fix,
            )
        })
        .collect()
}

pub(super) fn gpu_operand_version_mixed(pods: &[PodView]) -> Vec<Finding> {
    // (namespace, DaemonSet) -> images -> nodes
    let mut sets: BTreeMap<(String, String), BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for p in pods.iter().filter(|p| p.is_placed()) {
        let (Some(ds), Some(node)) = (p.owner_name(), p.node) else {
            continue;
        };
        let mut images: Vec<&str> = p
            .raw
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .filter_map(|c| c.image.as_deref())
            .collect();
        images.sort();
        let images = images.join(" + ");
        let looks_gpu = [ds, &images, &p.spec.namespace]
            .iter()
            .any(|s| ["nvidia", "gpu", "dcgm"].iter().any(|w| s.contains(w)));
        if !looks_gpu || images.is_empty() {
            continue;
        }
        sets.entry((p.spec.namespace.clone(), ds.to_string()))
            .or_default()
            .entry(images)
            .or_default()
            .push(node.to_string());
    }
    sets.into_iter()
        .filter(|(_, by_image)| by_image.len() > 1)
        .map(|((ns, ds), by_image)| {
            let n = by_image.len();
            Finding::new(
                "gpu-operand-version-mixed",
                format!("DaemonSet {ns}/{ds} runs {n} different images across its nodes"),
                by_value(by_image),
                "A GPU component is half rolled out or stuck: nodes with the old image behave \
                 differently (driver, device plugin, toolkit or exporter), which shows up as \
                 failures on some nodes only.",
                format!(
                    "kubectl -n {ns} rollout status daemonset/{ds}; delete the pods still on \
                     the old image if the update strategy is OnDelete, or find why the new \
                     ones do not become ready."
                ),
            )
        })
        .collect()
}

/// `2h15m`, `45m`, `3d4h`, `30s`.
pub fn format_age(ms: u64) -> String {
    let s = ms / 1000;
    let (d, h, m) = (s / 86_400, s / 3600 % 24, s / 60 % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, m) => format!("{m}m"),
        (0, h, 0) => format!("{h}h"),
        (0, h, m) => format!("{h}h{m}m"),
        (d, 0, _) => format!("{d}d"),
        (d, h, _) => format!("{d}d{h}h"),
    }
}

/// A pending pod and how long it has waited, when known.
pub(super) type Waiting = (String, Option<u64>);

pub(super) fn pod_pending_long(
    pods: &[PodView],
    now: Option<Timestamp>,
    threshold_ms: u64,
) -> Vec<Finding> {
    // message -> (pods, oldest age)
    let mut groups: BTreeMap<String, Vec<Waiting>> = BTreeMap::new();
    for p in pods.iter().filter(|p| p.is_pending()) {
        // Gated pods wait for a queue or controller to release them, on purpose.
        let Some(c) = p
            .unschedulable()
            .filter(|c| c.reason.as_deref() != Some("SchedulingGated"))
        else {
            continue;
        };
        let since = c
            .last_transition_time
            .as_ref()
            .or(p.raw.metadata.creation_timestamp.as_ref())
            .map(|t| t.0);
        let age = match (now, since) {
            (Some(now), Some(since)) => {
                Some(u64::try_from(now.as_millisecond() - since.as_millisecond()).unwrap_or(0))
            }
            _ => None,
        };
        if age.is_some_and(|a| a < threshold_ms) {
            continue;
        }
        // "Unschedulable" is the usual reason; others (SchedulingGated ...) say more.
        let reason = c.reason.as_deref().filter(|r| *r != "Unschedulable");
        let message = [reason, c.message.as_deref()]
            .into_iter()
            .flatten()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(": ");
        let message = if message.is_empty() {
            "(no message)".to_string()
        } else {
            message
        };
        groups.entry(message).or_default().push((p.key(), age));
    }
    let mut groups: Vec<(String, Vec<Waiting>)> = groups.into_iter().collect();
    groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    let threshold = format_age(threshold_ms);
    let why = "Work is waiting and the scheduler keeps saying why: the message names what \
               no node has (resources, a matching label, a tolerated taint).";
    let item = |(key, age): &Waiting| match age {
        Some(a) => format!("{key} ({})", format_age(*a)),
        None => key.clone(),
    };
    let mut out = Vec::new();
    let rest = if groups.len() > PENDING_GROUPS {
        groups.split_off(PENDING_GROUPS - 1)
    } else {
        Vec::new()
    };
    for (message, mut pods) in groups {
        pods.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        out.push(Finding::new(
            "pod-pending-long",
            format!(
                "{} unschedulable for over {threshold}: {message}",
                count(pods.len(), "pod")
            ),
            pods.iter().map(item).collect(),
            why,
            "Act on the message: free or add the resource it names, fix the pods' \
             nodeSelector/affinity or tolerations, or lower their requests; the other \
             findings of this report often name the cause."
                .to_string(),
        ));
    }
    if !rest.is_empty() {
        let messages = rest.len();
        let mut pods: Vec<Waiting> = rest.into_iter().flat_map(|g| g.1).collect();
        pods.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        out.push(Finding::new(
            "pod-pending-long",
            format!(
                "{} unschedulable for over {threshold}, with {messages} other messages",
                count(pods.len(), "pod")
            ),
            pods.iter().map(item).collect(),
            why,
            "kubectl describe pod POD shows each one's message; act on it as above.".to_string(),
        ));
    }
    out
}
