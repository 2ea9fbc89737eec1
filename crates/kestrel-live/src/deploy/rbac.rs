//! The scheduler's ServiceAccount and least-privilege RBAC: what it reads cluster-wide,
//! what it writes, and its Lease for leader election.

use super::scheduler::scheduler_labels;
use super::InstallValues;
use kestrel_objects::crds;
use kestrel_objects::kinds;
use serde_json::{json, Value};

/// The scheduler's ServiceAccount, ClusterRole, ClusterRoleBinding, and the Role and
/// RoleBinding of its leader election, in apply order.
pub(super) fn scheduler_rbac(v: &InstallValues) -> Vec<Value> {
    let ns = &v.namespace;
    let name = "kestrel";
    let labels = scheduler_labels();
    let rule = |groups: &[&str], resources: &[&str], verbs: &[&str]| json!({"apiGroups": groups, "resources": resources, "verbs": verbs});
    vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": name, "namespace": ns, "labels": labels}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "kestrel-scheduler", "labels": labels},
        "rules": ([
            // create: the TrainingJob controller's pods.
            rule(&[""], &["pods"], &["get", "list", "watch", "create", "patch", "delete"]),
            rule(&[""], &["services"], &["create"]),
            rule(&[""], &["pods/binding"], &["create"]),
            rule(&[""], &["pods/status"], &["patch"]),
            // Drains (NodeMaintenance): cordon and uncordon, evict through the Eviction API.
            rule(&[""], &["nodes"], &["get", "list", "watch", "patch"]),
            rule(&[""], &["pods/eviction"], &["create"]),
            rule(&[""], &["namespaces", "resourcequotas", "limitranges"], &["list", "watch"]),
            rule(&["policy"], &["poddisruptionbudgets"], &["list", "watch"]),
        ]
        .into_iter()
        // The owners of workloads' pods (queued Jobs, StatefulSets and ReplicaSets;
        // multi-role kinds), from the registry of kinds.
        .chain(kinds::rbac_rules().into_iter().map(|(group, plurals, verbs)| rule(&[group], &plurals, verbs)))
        .chain([
            rule(&["events.k8s.io"], &["events"], &["create", "patch"]),
            // The doctor's checks (--doctor-interval) read every Event.
            rule(&[""], &["events"], &["list"]),
            // ... and the nodes' real use, where metrics-server serves it.
            rule(&["metrics.k8s.io"], &["nodes"], &["list"]),
            // ... and the GPU and Network Operators' DaemonSets.
            rule(&["apps"], &["daemonsets"], &["list"]),
            // DRA: the devices published, the claims pods make, and their allocation and
            // reservation, written before a bind as kube-scheduler does.
            rule(
                &["resource.k8s.io"],
                &["deviceclasses", "resourceslices", "devicetaintrules"],
                &["list", "watch"],
            ),
            // update: the delete-protection finalizer on a claim Kestrel allocates; create,
            // patch, delete: the claim for a pod's nvidia.com/gpu on a node where a DRA
            // device class serves it (removed again when its bind fails).
            rule(
                &["resource.k8s.io"],
                &["resourceclaims"],
                &["get", "list", "watch", "create", "update", "patch", "delete"],
            ),
            rule(&["resource.k8s.io"], &["resourceclaims/status"], &["update", "patch"]),
            // Kubernetes 1.36+: writing a claim's allocation or reservation also needs
            // this (what kube-scheduler is granted).
            rule(&["resource.k8s.io"], &["resourceclaims/binding"], &["update"]),
            // Volumes: claims, their volumes and classes narrow a pod's nodes; a claim that
            // waits for its first consumer is written on the volume chosen (its claimRef)
            // or gets the node chosen (the selected-node annotation), as kube-scheduler
            // writes them.
            rule(&[""], &["persistentvolumes"], &["get", "list", "watch", "patch"]),
            rule(&[""], &["persistentvolumeclaims"], &["get", "list", "watch", "patch"]),
            rule(&["storage.k8s.io"], &["storageclasses", "csinodes"], &["list", "watch"]),
            rule(&["scheduling.k8s.io"], &["priorityclasses"], &["list", "watch"]),
            rule(&["node.k8s.io"], &["runtimeclasses"], &["list", "watch"]),
            rule(&[crds::GROUP], &KESTREL_KINDS, &["get", "list", "watch"]),
            // Other projects' PodGroups, and Kubernetes' own (the Workload API).
            rule(
                &["scheduling.x-k8s.io", "scheduling.volcano.sh", "scheduling.k8s.io"],
                &["podgroups"],
                &["get", "list", "watch"],
            ),
            // Volcano's and KAI's queues, read as cluster-wide queues.
            rule(
                &["scheduling.volcano.sh", "scheduling.run.ai"],
                &["queues"],
                &["list", "watch"],
            ),
            // Kueue's WorkloadPriorityClasses, which the pod label
            // kueue.x-k8s.io/priority-class names.
            rule(&["kueue.x-k8s.io"], &["workloadpriorityclasses"], &["list", "watch"]),
            rule(&[crds::GROUP], &KESTREL_STATUS, &["patch"]),
            // The finalizer that uncordons a node when its NodeMaintenance is deleted; the
            // maintenances the GPU Operator hook starts and ends.
            rule(&[crds::GROUP], &["nodemaintenances"], &["patch", "create", "delete"]),
            // A TrainingJob's gang, and the job itself once its TTL passed.
            rule(&[crds::GROUP], &["podgroups"], &["create"]),
            rule(&[crds::GROUP], &["trainingjobs"], &["delete"]),
        ])
        .collect::<Vec<_>>())}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "kestrel-scheduler", "labels": labels},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kestrel-scheduler"},
               "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "kestrel-leader-election", "namespace": ns, "labels": labels},
               "rules": [rule(&["coordination.k8s.io"], &["leases"], &["get", "create", "update"])]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "kestrel-leader-election", "namespace": ns, "labels": labels},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kestrel-leader-election"},
               "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]}),
    ]
}

/// Kestrel's kinds the scheduler reads (`scheduling.kestrel.dev`).
const KESTREL_KINDS: [&str; 8] = [
    "podgroups",
    "trainingjobs",
    "topologies",
    "clusterqueues",
    "localqueues",
    "cohorts",
    "resourceflavors",
    "nodemaintenances",
];
/// The status subresources it writes (server-side apply: the `patch` verb).
const KESTREL_STATUS: [&str; 5] = [
    "podgroups/status",
    "trainingjobs/status",
    "clusterqueues/status",
    "localqueues/status",
    "nodemaintenances/status",
];
