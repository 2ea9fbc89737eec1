//! The node agent's install: its values, ServiceAccount, RBAC and DaemonSet, as plain
//! manifests and as the chart's template.

use super::alerts::agent_prometheus_rule;
use super::yaml::documents;
use super::{helm_substitute, num, InstallValues, HELM};
use serde_json::{json, Value};

/// The node agent's install values (the chart's `agent:`; the agent is off by default).
#[derive(Debug, Clone)]
pub struct AgentValues {
    /// The agent's image without its tag: `kestrel-agent` (what `build/agent-image.sh`
    /// builds: the dynamically linked kestrel, which can load NVML), or your registry's copy.
    pub image_repository: String,
    /// Its tag; the chart's default is its `appVersion`, which is this version.
    pub image_tag: String,
    pub resource_name: String,
    pub metrics_port: String,
    /// `none`, `index` or `uuid`: CDI names in Allocate responses.
    pub cdi: String,
    /// `exit` or `serve`: what the agent does on a node without the NVIDIA library.
    pub without_nvml: String,
    /// The RuntimeClass that gives the agent the NVIDIA library and devices (the GPU
    /// Operator's `nvidia`).
    pub runtime_class_name: String,
    pub node_selector: Value,
    pub tolerations: Value,
    pub resources: Value,
}

impl Default for AgentValues {
    fn default() -> Self {
        AgentValues {
            image_repository: "kestrel-agent".into(),
            image_tag: env!("CARGO_PKG_VERSION").into(),
            resource_name: "nvidia.com/gpu".into(),
            // The DCGM exporter's port, so scrape configs written for it find the agent.
            metrics_port: "9400".into(),
            cdi: "none".into(),
            without_nvml: "exit".into(),
            runtime_class_name: "nvidia".into(),
            // The GPU Operator's label on nodes with NVIDIA GPUs.
            node_selector: json!({"nvidia.com/gpu.present": "true"}),
            tolerations: json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
            resources: json!({"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}),
        }
    }
}

/// The agent's Helm placeholders (see [`HELM`]).
const AGENT_HELM: [(&str, &str, bool); 10] = [
    (
        "agentImageRepository",
        "{{ .Values.agent.image.repository }}",
        false,
    ),
    (
        "agentImageTag",
        "{{ .Values.agent.image.tag | default .Chart.AppVersion }}",
        false,
    ),
    (
        "agentResourceName",
        "{{ .Values.agent.resourceName }}",
        false,
    ),
    ("agentMetricsPort", "{{ .Values.agent.metricsPort }}", true),
    ("agentCdi", "{{ .Values.agent.cdi }}", false),
    ("agentWithoutNvml", "{{ .Values.agent.withoutNvml }}", false),
    (
        "agentRuntimeClassName",
        "{{ .Values.agent.runtimeClassName }}",
        false,
    ),
    (
        "agentNodeSelector",
        "{{ toJson .Values.agent.nodeSelector }}",
        true,
    ),
    (
        "agentTolerations",
        "{{ toJson .Values.agent.tolerations }}",
        true,
    ),
    (
        "agentResources",
        "{{ toJson .Values.agent.resources }}",
        true,
    ),
];

impl AgentValues {
    fn helm_markers() -> Self {
        let m = |k: &str| format!("@@{k}@@");
        AgentValues {
            image_repository: m("agentImageRepository"),
            image_tag: m("agentImageTag"),
            resource_name: m("agentResourceName"),
            metrics_port: m("agentMetricsPort"),
            cdi: m("agentCdi"),
            without_nvml: m("agentWithoutNvml"),
            runtime_class_name: m("agentRuntimeClassName"),
            node_selector: json!(m("agentNodeSelector")),
            tolerations: json!(m("agentTolerations")),
            resources: json!(m("agentResources")),
        }
    }
}

/// The node agent's objects: its ServiceAccount, RBAC and DaemonSet.
pub fn agent_objects(v: &InstallValues, a: &AgentValues) -> Vec<Value> {
    let ns = &v.namespace;
    let name = "kestrel-agent";
    let labels =
        json!({"app.kubernetes.io/name": "kestrel", "app.kubernetes.io/component": "agent"});
    let rule = |groups: &[&str], resources: &[&str], verbs: &[&str]| json!({"apiGroups": groups, "resources": resources, "verbs": verbs});
    let host_dir = |name: &str, path: &str| json!({"name": name, "hostPath": {"path": path, "type": "Directory"}});
    vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": name, "namespace": ns, "labels": labels}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels},
        "rules": [
            // The pods bound to its node (the scheduler's GPU choice), and the allocation
            // record on them.
            rule(&[""], &["pods"], &["get", "list", "patch"]),
            // GPU labels and topology on its node, and the GPUUnhealthy condition.
            rule(&[""], &["nodes"], &["get", "patch"]),
            rule(&[""], &["nodes/status"], &["patch"]),
            rule(&["events.k8s.io"], &["events"], &["create"]),
            // Whether NVIDIA's DRA driver publishes its node's GPUs (then it serves no
            // device plugin), and a DeviceTaintRule on each unhealthy GPU's DRA device there.
            rule(&["resource.k8s.io"], &["resourceslices"], &["list"]),
            rule(
                &["resource.k8s.io"],
                &["devicetaintrules"],
                &["list", "create", "patch", "delete"],
            ),
        ]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": name, "labels": labels},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]}),
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": name,
                    "priorityClassName": "system-node-critical",
                    "runtimeClassName": a.runtime_class_name,
                    "nodeSelector": a.node_selector,
                    "tolerations": a.tolerations,
                    "containers": [{
                        "name": "agent",
                        // Not the scheduler's static image: the agent loads NVML.
                        "image": format!("{}:{}", a.image_repository, a.image_tag),
                        "imagePullPolicy": v.image_pull_policy,
                        "args": [
                            "agent",
                            format!("--resource-name={}", a.resource_name),
                            format!("--metrics-addr=0.0.0.0:{}", a.metrics_port),
                            format!("--log-format={}", v.log_format),
                            format!("--cdi={}", a.cdi),
                            format!("--without-nvml={}", a.without_nvml),
                            "--sysfs-root=/host/sys",
                        ],
                        "env": [
                            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                            // The NVIDIA runtime mounts the management library and every
                            // GPU's device node, nothing for compute.
                            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"}
                        ],
                        "ports": [{"name": "metrics", "containerPort": num(&a.metrics_port)}],
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10},
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 5},
                        "resources": a.resources,
                        // Root for the kubelet's sockets (root-owned host directories);
                        // nothing else.
                        "securityContext": {"runAsUser": 0, "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "privileged": false, "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
                        "volumeMounts": [
                            {"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"},
                            {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": true},
                            {"name": "sys", "mountPath": "/host/sys", "readOnly": true}
                        ]
                    }],
                    "volumes": [
                        host_dir("device-plugins", "/var/lib/kubelet/device-plugins"),
                        host_dir("pod-resources", "/var/lib/kubelet/pod-resources"),
                        host_dir("sys", "/sys")
                    ]
                }
            }
        }}),
    ]
}

/// The agent's plain manifests (`kestrel manifests --agent`, committed as
/// `deploy/kestrel-agent.yaml`); the alerts come separately (`kestrel agent
/// --prometheus-rules`), as they need the Prometheus operator's CRD.
pub fn render_agent_plain() -> String {
    format!(
        "# Generated by `kestrel manifests --agent`; do not edit (a test compares it with the code).\n{}",
        documents(&agent_objects(&InstallValues::default(), &AgentValues::default()))
    )
}
/// The agent's Helm template (`charts/kestrel/templates/agent.yaml`): nothing unless
/// `agent.enabled`, the PrometheusRule only with `agent.prometheusRule.enabled`.
pub fn render_agent_helm() -> String {
    let objects = documents(&agent_objects(
        &InstallValues::helm_markers(),
        &AgentValues::helm_markers(),
    ));
    let rule = documents(&[agent_prometheus_rule("@@namespace@@")]);
    let markers: Vec<(&str, &str, bool)> = HELM.iter().chain(AGENT_HELM.iter()).copied().collect();
    format!(
        "# Generated by `kestrel manifests --agent-helm`; do not edit (a test compares it with the code).\n\
         {{{{- if .Values.agent.enabled }}}}\n{}\
         {{{{- if .Values.agent.prometheusRule.enabled }}}}\n{}\
         {{{{- end }}}}\n{{{{- end }}}}\n",
        helm_substitute(objects, &markers),
        helm_substitute(rule, &markers)
    )
}
