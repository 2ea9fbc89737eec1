//! The scheduler's Deployment (two replicas on different nodes, leader election, a
//! locked-down security context), its PodDisruptionBudget, metrics Service and the
//! chart's optional NetworkPolicy.

use super::rbac::scheduler_rbac;
use super::{num, InstallValues};
use serde_json::{json, Value};

/// The install objects, in apply order.
pub fn objects(v: &InstallValues) -> Vec<Value> {
    let ns = &v.namespace;
    let name = "kestrel";
    let labels = scheduler_labels();
    let mut args = vec![
        json!("serve"),
        json!(format!("--scheduler-name={}", v.scheduler_name)),
        json!("--leader-elect=true"),
        json!(format!("--lease-namespace={ns}")),
        json!(format!("--metrics-addr=0.0.0.0:{}", v.metrics_port)),
        json!(format!("--log-format={}", v.log_format)),
        json!(format!("--qps={}", v.qps)),
        json!(format!("--burst={}", v.burst)),
        json!(format!("--gpu-indices-via={}", v.gpu_indices_via)),
        json!(format!("--policy={}", v.policy)),
    ];
    if v.dashboard {
        args.push(json!(format!(
            "--dashboard-addr={}:{}",
            v.dashboard_address, v.dashboard_port
        )));
    }
    let mut out = scheduler_rbac(v);
    out.extend([
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "replicas": num(&v.replicas),
            "selector": {"matchLabels": labels},
            // One replica at a time: with one per node a surge pod would find no node
            // on a two-node control plane.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": name,
                    "priorityClassName": "system-cluster-critical",
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
                    // The standby replica never shares the leader's node.
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}
                    ]}},
                    "containers": [{
                        "name": "scheduler",
                        "image": format!("{}:{}", v.image_repository, v.image_tag),
                        "imagePullPolicy": v.image_pull_policy,
                        "args": args,
                        "env": [
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "MLFLOW_TRACKING_URI", "value": v.mlflow_tracking_uri},
                        ],
                        "ports": [{"name": "metrics", "containerPort": num(&v.metrics_port)}],
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10},
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 5},
                        "resources": v.resources,
                        "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "runAsNonRoot": true, "privileged": false, "capabilities": {"drop": ["ALL"]}}
                    }]
                }
            }
        }}),
        // A voluntary disruption (a drain) takes one replica at a time; a replica that is
        // not ready can always be evicted.
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": name, "namespace": ns, "labels": labels},
               "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels},
                        "unhealthyPodEvictionPolicy": "AlwaysAllow"}}),
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "kestrel-metrics", "namespace": ns, "labels": labels},
               "spec": {"selector": labels,
                        "ports": [{"name": "metrics", "port": num(&v.metrics_port), "targetPort": "metrics"}]}}),
    ]);
    out
}

/// The labels of the scheduler's objects, and its pods' selector.
pub(super) fn scheduler_labels() -> Value {
    json!({"app.kubernetes.io/name": "kestrel", "app.kubernetes.io/component": "scheduler"})
}

/// The chart's optional NetworkPolicy on the scheduler pods (`dashboard.networkPolicy`):
/// the metrics port stays open to all (Prometheus, the probes), the dashboard port only to
/// `dashboard_from`; nothing else reaches the pods. `kubectl port-forward` is not network
/// traffic to the pod and is not affected.
pub fn dashboard_network_policy(v: &InstallValues) -> Value {
    let labels = scheduler_labels();
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
    "metadata": {"name": "kestrel-scheduler", "namespace": v.namespace, "labels": labels},
    "spec": {
        "podSelector": {"matchLabels": labels},
        "policyTypes": ["Ingress"],
        "ingress": [
            {"ports": [{"protocol": "TCP", "port": num(&v.metrics_port)}]},
            {"from": v.dashboard_from, "ports": [{"protocol": "TCP", "port": num(&v.dashboard_port)}]}
        ]
    }})
}
