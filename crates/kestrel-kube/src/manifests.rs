//! The objects that install Kestrel: its CRDs, namespace-scoped ServiceAccount,
//! least-privilege RBAC, the scheduler Deployment (2 replicas, leader election) and a
//! metrics Service.
//!
//! One function builds them from [`InstallValues`]; `kestrel manifests` prints them with
//! the defaults, CRDs first (committed as `deploy/kestrel.yaml`), `kestrel manifests --helm`
//! with Helm expressions in place of the values (committed as
//! `charts/kestrel/templates/kestrel.yaml`), and `kestrel crds` the CRDs alone (committed as
//! `charts/kestrel/crds/kestrel-crds.yaml`, which Helm installs before the templates), so
//! the chart and the plain manifests cannot drift apart: tests compare the files with this
//! output.

use crate::crds;
use serde_json::{json, Value};

/// What an install can vary (the chart's `values.yaml`).
#[derive(Debug, Clone)]
pub struct InstallValues {
    pub namespace: String,
    pub scheduler_name: String,
    pub image: String,
    pub replicas: String,
    pub log_format: String,
    pub qps: String,
    pub burst: String,
    pub gpu_indices_via: String,
    pub policy: String,
    pub metrics_port: String,
}

impl Default for InstallValues {
    fn default() -> Self {
        InstallValues {
            namespace: "kube-system".into(),
            scheduler_name: "kestrel".into(),
            image: format!(
                "ghcr.io/kestrel-sched/kestrel:{}",
                env!("CARGO_PKG_VERSION")
            ),
            replicas: "2".into(),
            log_format: "json".into(),
            qps: "200".into(),
            burst: "400".into(),
            gpu_indices_via: "patch".into(),
            policy: "kestrel".into(),
            metrics_port: "10251".into(),
        }
    }
}

/// Placeholders substituted after rendering, for the Helm templates.
const HELM: [(&str, &str, bool); 10] = [
    ("namespace", "{{ .Release.Namespace }}", false),
    ("schedulerName", "{{ .Values.schedulerName }}", false),
    ("image", "{{ .Values.image }}", false),
    ("replicas", "{{ .Values.replicas }}", true),
    ("logFormat", "{{ .Values.logFormat }}", false),
    ("qps", "{{ .Values.qps }}", false),
    ("burst", "{{ .Values.burst }}", false),
    ("gpuIndicesVia", "{{ .Values.gpuIndicesVia }}", false),
    ("policy", "{{ .Values.policy }}", false),
    ("metricsPort", "{{ .Values.metricsPort }}", true),
];

impl InstallValues {
    fn helm_markers() -> Self {
        let m = |k: &str| format!("@@{k}@@");
        InstallValues {
            namespace: m("namespace"),
            scheduler_name: m("schedulerName"),
            image: m("image"),
            replicas: m("replicas"),
            log_format: m("logFormat"),
            qps: m("qps"),
            burst: m("burst"),
            gpu_indices_via: m("gpuIndicesVia"),
            policy: m("policy"),
            metrics_port: m("metricsPort"),
        }
    }
}

/// A number where the value is one, the marker string otherwise.
fn num(v: &str) -> Value {
    v.parse::<i64>()
        .map(Value::from)
        .unwrap_or_else(|_| json!(v))
}

/// The install objects, in apply order.
pub fn objects(v: &InstallValues) -> Vec<Value> {
    let ns = &v.namespace;
    let name = "kestrel";
    let labels =
        json!({"app.kubernetes.io/name": "kestrel", "app.kubernetes.io/component": "scheduler"});
    let rule = |groups: &[&str], resources: &[&str], verbs: &[&str]| json!({"apiGroups": groups, "resources": resources, "verbs": verbs});
    vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": name, "namespace": ns, "labels": labels}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "kestrel-scheduler", "labels": labels},
        "rules": [
            rule(&[""], &["pods"], &["get", "list", "watch", "patch", "delete"]),
            rule(&[""], &["pods/binding"], &["create"]),
            rule(&[""], &["pods/status"], &["patch"]),
            rule(&[""], &["nodes"], &["get", "list", "watch"]),
            rule(&[""], &["namespaces", "resourcequotas", "limitranges"], &["list", "watch"]),
            rule(&["policy"], &["poddisruptionbudgets"], &["list", "watch"]),
            rule(&["events.k8s.io"], &["events"], &["create", "patch"]),
            rule(&["scheduling.k8s.io"], &["priorityclasses"], &["list", "watch"]),
            rule(&["node.k8s.io"], &["runtimeclasses"], &["list", "watch"]),
            rule(&[crds::GROUP], &KESTREL_KINDS, &["get", "list", "watch"]),
            rule(
                &["scheduling.x-k8s.io", "scheduling.volcano.sh"],
                &["podgroups"],
                &["get", "list", "watch"],
            ),
            rule(&[crds::GROUP], &KESTREL_STATUS, &["patch"]),
        ]}),
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
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "replicas": num(&v.replicas),
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": name,
                    "priorityClassName": "system-cluster-critical",
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "scheduler",
                        "image": v.image,
                        "args": [
                            "serve",
                            format!("--scheduler-name={}", v.scheduler_name),
                            "--leader-elect=true",
                            format!("--lease-namespace={ns}"),
                            format!("--metrics-addr=0.0.0.0:{}", v.metrics_port),
                            format!("--log-format={}", v.log_format),
                            format!("--qps={}", v.qps),
                            format!("--burst={}", v.burst),
                            format!("--gpu-indices-via={}", v.gpu_indices_via),
                            format!("--policy={}", v.policy),
                        ],
                        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "ports": [{"name": "metrics", "containerPort": num(&v.metrics_port)}],
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10},
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 5},
                        "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
                        "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}}
                    }]
                }
            }
        }}),
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "kestrel-metrics", "namespace": ns, "labels": labels},
               "spec": {"selector": labels,
                        "ports": [{"name": "metrics", "port": num(&v.metrics_port), "targetPort": "metrics"}]}}),
    ]
}

/// Kestrel's kinds the scheduler reads (`scheduling.kestrel.dev`).
const KESTREL_KINDS: [&str; 6] = [
    "podgroups",
    "topologies",
    "clusterqueues",
    "localqueues",
    "cohorts",
    "resourceflavors",
];
/// The status subresources it writes (server-side apply: the `patch` verb).
const KESTREL_STATUS: [&str; 3] = [
    "podgroups/status",
    "clusterqueues/status",
    "localqueues/status",
];

/// Kestrel's CustomResourceDefinitions, as JSON.
pub fn crd_objects() -> Vec<Value> {
    crds::all()
        .iter()
        .map(|crd| serde_json::to_value(crd).expect("a CRD serializes"))
        .collect()
}

/// Multi-document YAML of objects (block style, every string double-quoted).
fn documents(objects: &[Value]) -> String {
    let mut out = String::new();
    for o in objects {
        out.push_str("---\n");
        yaml(o, 0, &mut out);
    }
    out
}

/// Multi-document YAML of the install objects (without the CRDs).
pub fn render(values: &InstallValues) -> String {
    documents(&objects(values))
}

/// The CRDs (`kestrel crds`, committed as `charts/kestrel/crds/kestrel-crds.yaml`).
pub fn render_crds() -> String {
    format!(
        "# Generated by `kestrel crds`; do not edit (a test compares it with the code).\n{}",
        documents(&crd_objects())
    )
}

/// The plain manifests (`deploy/kestrel.yaml`): the CRDs, then the install objects.
pub fn render_plain() -> String {
    format!(
        "# Generated by `kestrel manifests`; do not edit (a test compares it with the code).\n{}{}",
        documents(&crd_objects()),
        render(&InstallValues::default())
    )
}

/// The Helm template (`charts/kestrel/templates/kestrel.yaml`).
pub fn render_helm() -> String {
    let mut text = render(&InstallValues::helm_markers());
    for (key, expr, number) in HELM {
        let marker = format!("@@{key}@@");
        if number {
            text = text.replace(&format!("\"{marker}\""), expr);
        }
        text = text.replace(&marker, expr);
    }
    format!(
        "# Generated by `kestrel manifests --helm`; do not edit (a test compares it with the code).\n{text}"
    )
}

/// The chart's `values.yaml`.
pub fn render_values() -> String {
    let v = InstallValues::default();
    format!(
        "# Generated by `kestrel manifests --values`; the defaults of deploy/kestrel.yaml.\n\
         schedulerName: {:?}\nimage: {:?}\nreplicas: {}\nlogFormat: {:?}\nqps: {:?}\nburst: {:?}\n\
         # How the chosen GPU indices reach a pod: \"patch\" (annotate, then bind: two writes)\n\
         # or \"binding\" (in the Binding, copied onto the pod by the API server: one write).\n\
         gpuIndicesVia: {:?}\npolicy: {:?}\nmetricsPort: {}\n",
        v.scheduler_name,
        v.image,
        v.replicas,
        v.log_format,
        v.qps,
        v.burst,
        v.gpu_indices_via,
        v.policy,
        v.metrics_port
    )
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => serde_json::to_string(s).expect("a string"),
        other => other.to_string(),
    }
}

fn yaml(v: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(map) => {
            for (k, val) in map {
                match val {
                    Value::Object(m) if !m.is_empty() => {
                        out.push_str(&format!("{pad}{k}:\n"));
                        yaml(val, indent + 2, out);
                    }
                    Value::Array(a) if !a.is_empty() => {
                        out.push_str(&format!("{pad}{k}:\n"));
                        yaml(val, indent, out);
                    }
                    Value::Object(_) => out.push_str(&format!("{pad}{k}: {{}}\n")),
                    Value::Array(_) => out.push_str(&format!("{pad}{k}: []\n")),
                    _ => out.push_str(&format!("{pad}{k}: {}\n", scalar(val))),
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                match item {
                    Value::Object(m) if !m.is_empty() => {
                        let mut inner = String::new();
                        yaml(item, indent + 2, &mut inner);
                        let inner = inner.replacen(&" ".repeat(indent + 2), "", 1);
                        out.push_str(&format!("{pad}- {inner}"));
                    }
                    _ => out.push_str(&format!("{pad}- {}\n", scalar(item))),
                }
            }
        }
        other => out.push_str(&format!("{pad}{}\n", scalar(other))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_reads_back_as_the_objects() {
        let text = render(&InstallValues::default());
        let docs: Vec<Value> = kestrel_yaml_read(&text);
        assert_eq!(docs, objects(&InstallValues::default()));
    }

    #[test]
    fn crd_yaml_reads_back_as_the_crds() {
        let docs = kestrel_yaml_read(&render_crds());
        assert_eq!(docs, crd_objects());
        let plain = kestrel_yaml_read(&render_plain());
        assert_eq!(plain[..docs.len()], docs[..], "CRDs come first");
    }

    fn kestrel_yaml_read(text: &str) -> Vec<Value> {
        serde_saphyr::from_multiple(text).unwrap()
    }

    #[test]
    fn helm_template_uses_values_and_numbers_stay_numbers() {
        let t = render_helm();
        assert!(t.contains("replicas: {{ .Values.replicas }}\n"), "{t}");
        assert!(t.contains("\"--scheduler-name={{ .Values.schedulerName }}\""));
        assert!(t.contains("namespace: \"{{ .Release.Namespace }}\""));
        assert!(!t.contains("@@"));
    }
}
