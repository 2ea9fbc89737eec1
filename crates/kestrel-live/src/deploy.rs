//! The objects that install Kestrel: its CRDs, namespace-scoped ServiceAccount,
//! least-privilege RBAC, the scheduler Deployment (2 replicas on different nodes, leader
//! election, locked-down security context), its PodDisruptionBudget and a metrics Service.
//!
//! One function builds them from [`InstallValues`]; `kestrel manifests` prints them with
//! the defaults, CRDs first (committed as `deploy/kestrel.yaml`), `kestrel manifests --helm`
//! with Helm expressions in place of the values (committed as
//! `charts/kestrel/templates/kestrel.yaml`), and `kestrel crds` the CRDs alone (committed as
//! `charts/kestrel/crds/kestrel-crds.yaml`, which Helm installs before the templates), so
//! the chart and the plain manifests cannot drift apart: tests compare the files with this
//! output. The chart's `values.schema.json` ([`render_values_schema`]), which makes `helm
//! lint` and `helm install` refuse a value of the wrong type naming it, is generated here too
//! (`KESTREL_BLESS=1 cargo test -p kestrel-live --test install_manifests` rewrites every
//! generated file).

use kestrel_objects::crds;
use kestrel_objects::kinds;
use serde_json::{json, Value};

/// What an install can vary (the chart's `values.yaml`).
#[derive(Debug, Clone)]
pub struct InstallValues {
    pub namespace: String,
    pub scheduler_name: String,
    /// The image without its tag: `kestrel` (what `build/static.sh` and the Dockerfile
    /// build), or your registry's copy of it.
    pub image_repository: String,
    /// The image tag; the chart's default is its `appVersion`, which is this version.
    pub image_tag: String,
    pub image_pull_policy: String,
    pub replicas: String,
    pub log_format: String,
    pub qps: String,
    pub burst: String,
    pub gpu_indices_via: String,
    pub policy: String,
    pub metrics_port: String,
    /// MLflow tracking server recording every TrainingJob; empty: none.
    pub mlflow_tracking_uri: String,
    /// The scheduler container's requests and limits.
    pub resources: Value,
    /// `--dashboard-addr` is given (the chart's `dashboard.enabled`; off by default).
    pub dashboard: bool,
    /// The dashboard's address in the pod: 127.0.0.1 (only `kubectl port-forward` reaches
    /// it) or 0.0.0.0 (the pod network too), and its port.
    pub dashboard_address: String,
    pub dashboard_port: String,
    /// Who may reach the dashboard port through the NetworkPolicy (NetworkPolicy peers).
    pub dashboard_from: Value,
}

impl Default for InstallValues {
    fn default() -> Self {
        InstallValues {
            namespace: "kube-system".into(),
            scheduler_name: "kestrel".into(),
            image_repository: "kestrel".into(),
            image_tag: env!("CARGO_PKG_VERSION").into(),
            image_pull_policy: "IfNotPresent".into(),
            replicas: "2".into(),
            log_format: "json".into(),
            qps: "200".into(),
            burst: "400".into(),
            gpu_indices_via: "binding".into(),
            policy: "kestrel".into(),
            metrics_port: "10251".into(),
            mlflow_tracking_uri: String::new(),
            // Memory limited (a leak ends in a restart, not a starved node); cpu not, so
            // a cycle after a burst of arrivals is not throttled.
            resources: json!({"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}),
            dashboard: false,
            dashboard_address: "127.0.0.1".into(),
            dashboard_port: "8080".into(),
            // Pods of the release's namespace.
            dashboard_from: json!([{"podSelector": {}}]),
        }
    }
}

/// Placeholders substituted after rendering, for the Helm templates: marker, expression,
/// and whether the expression replaces the quoted marker (a number or an object).
const HELM: [(&str, &str, bool); 17] = [
    ("namespace", "{{ .Release.Namespace }}", false),
    ("schedulerName", "{{ .Values.schedulerName }}", false),
    ("imageRepository", "{{ .Values.image.repository }}", false),
    (
        "imageTag",
        "{{ .Values.image.tag | default .Chart.AppVersion }}",
        false,
    ),
    ("imagePullPolicy", "{{ .Values.image.pullPolicy }}", false),
    ("resources", "{{ toJson .Values.resources }}", true),
    ("replicas", "{{ .Values.replicas }}", true),
    ("logFormat", "{{ .Values.logFormat }}", false),
    ("qps", "{{ .Values.qps }}", false),
    ("burst", "{{ .Values.burst }}", false),
    ("gpuIndicesVia", "{{ .Values.gpuIndicesVia }}", false),
    ("policy", "{{ .Values.policy }}", false),
    ("metricsPort", "{{ .Values.metricsPort }}", true),
    (
        "mlflowTrackingUri",
        "{{ .Values.mlflowTrackingUri }}",
        false,
    ),
    ("dashboardAddress", "{{ .Values.dashboard.address }}", false),
    ("dashboardPort", "{{ .Values.dashboard.port }}", true),
    (
        "dashboardFrom",
        "{{ toJson .Values.dashboard.networkPolicy.from }}",
        true,
    ),
];

impl InstallValues {
    fn helm_markers() -> Self {
        let m = |k: &str| format!("@@{k}@@");
        InstallValues {
            namespace: m("namespace"),
            scheduler_name: m("schedulerName"),
            image_repository: m("imageRepository"),
            image_tag: m("imageTag"),
            image_pull_policy: m("imagePullPolicy"),
            replicas: m("replicas"),
            log_format: m("logFormat"),
            qps: m("qps"),
            burst: m("burst"),
            gpu_indices_via: m("gpuIndicesVia"),
            policy: m("policy"),
            metrics_port: m("metricsPort"),
            mlflow_tracking_uri: m("mlflowTrackingUri"),
            resources: json!(m("resources")),
            // The argument is rendered; `render_helm` puts it under `dashboard.enabled`.
            dashboard: true,
            dashboard_address: m("dashboardAddress"),
            dashboard_port: m("dashboardPort"),
            dashboard_from: json!(m("dashboardFrom")),
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
            rule(
                &["scheduling.x-k8s.io", "scheduling.volcano.sh"],
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
    ]
}

fn scheduler_labels() -> Value {
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

/// One alerting rule over the agent's metrics.
pub struct AgentRule {
    pub alert: &'static str,
    pub expr: &'static str,
    pub for_: &'static str,
    pub severity: &'static str,
    pub summary: &'static str,
    pub description: &'static str,
}

/// The alerts on the agent's signals. Summaries carry no `{{ }}` templates, so the same
/// text is valid in the Helm chart; the alert's labels (`gpu`, `UUID`, `Hostname`) say
/// which GPU.
pub const AGENT_RULES: [AgentRule; 5] = [
    AgentRule {
        alert: "KestrelGpuUnhealthy",
        expr: "kestrel_agent_gpu_healthy == 0",
        for_: "1m",
        severity: "critical",
        summary: "A GPU is unhealthy and no longer offered to pods",
        description: "The Kestrel agent marked the GPU unhealthy after an XID error or because it stopped answering; the node's GPUUnhealthy condition and its events name the XID.",
    },
    AgentRule {
        alert: "KestrelGpuXidErrors",
        expr: "increase(kestrel_agent_xid_errors_total[10m]) > 0",
        for_: "0m",
        severity: "warning",
        summary: "A GPU reported XID errors in the last 10 minutes",
        description: "DCGM_FI_DEV_XID_ERRORS holds the last XID. Application XIDs (13, 31, 43, 45, 68, 109) point at the workload; others at the GPU, its driver or its bus.",
    },
    AgentRule {
        alert: "KestrelGpuUncorrectableEcc",
        expr: "increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m]) > 0",
        for_: "0m",
        severity: "critical",
        summary: "A GPU counted uncorrectable memory errors",
        description: "Uncorrectable (double-bit) ECC errors: the job on the GPU may have read bad data. Drain the node and reset the GPU.",
    },
    AgentRule {
        alert: "KestrelDevicePluginNotRegistered",
        expr: "kestrel_agent_device_plugin_registered == 0",
        for_: "5m",
        severity: "warning",
        summary: "The Kestrel device plugin is not registered with the kubelet",
        description: "The node offers no GPUs through Kestrel until the agent registers; check the agent's log and that the kubelet's device plugin directory is mounted.",
    },
    AgentRule {
        alert: "KestrelGpuHot",
        expr: "DCGM_FI_DEV_GPU_TEMP > 85",
        for_: "10m",
        severity: "warning",
        summary: "A GPU has run above 85 C for 10 minutes",
        description: "Hot enough to throttle its clocks; check the node's cooling.",
    },
];

/// A PrometheusRule (`monitoring.coreos.com/v1`) with [`AGENT_RULES`].
pub fn agent_prometheus_rule(namespace: &str) -> Value {
    let rules: Vec<Value> = AGENT_RULES
        .iter()
        .map(|r| {
            json!({
                "alert": r.alert,
                "expr": r.expr,
                "for": r.for_,
                "labels": {"severity": r.severity},
                "annotations": {"summary": r.summary, "description": r.description},
            })
        })
        .collect();
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "kestrel-agent",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "kestrel", "app.kubernetes.io/component": "agent"},
        },
        "spec": {"groups": [{"name": "kestrel-agent", "rules": rules}]},
    })
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

/// The alerts as YAML (`kestrel agent --prometheus-rules`).
pub fn render_agent_rules() -> String {
    format!(
        "# Generated by `kestrel agent --prometheus-rules`: alerts on the Kestrel agent's GPU\n\
         # metrics. Add the labels your Prometheus selects rules by before applying it.\n{}",
        documents(&[agent_prometheus_rule("kube-system")])
    )
}

fn helm_substitute(mut text: String, markers: &[(&str, &str, bool)]) -> String {
    for (key, expr, number) in markers {
        let marker = format!("@@{key}@@");
        if *number {
            text = text.replace(&format!("\"{marker}\""), expr);
        }
        text = text.replace(&marker, expr);
    }
    text
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

/// The Helm template (`charts/kestrel/templates/kestrel.yaml`): the dashboard's argument
/// only with `dashboard.enabled`, its NetworkPolicy only with `networkPolicy.enabled` too.
pub fn render_helm() -> String {
    let values = InstallValues::helm_markers();
    let text = render(&values);
    // The line of the dashboard's argument goes under the condition, as it is indented.
    let text: String = text
        .lines()
        .map(|line| {
            if line.contains("--dashboard-addr=") {
                format!("{{{{- if .Values.dashboard.enabled }}}}\n{line}\n{{{{- end }}}}\n")
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    let policy = documents(&[dashboard_network_policy(&values)]);
    format!(
        "# Generated by `kestrel manifests --helm`; do not edit (a test compares it with the code).\n{}\
         {{{{- if and .Values.dashboard.enabled .Values.dashboard.networkPolicy.enabled }}}}\n{}\
         {{{{- end }}}}\n",
        helm_substitute(text, &HELM),
        helm_substitute(policy, &HELM)
    )
}

/// The chart's `values.yaml`.
pub fn render_values() -> String {
    let v = InstallValues::default();
    let resources = v.resources.as_object().expect("resources are an object");
    let mut res = String::new();
    for (kind, amounts) in resources {
        res.push_str(&format!("  {kind}:\n"));
        for (name, amount) in amounts.as_object().expect("amounts are an object") {
            res.push_str(&format!("    {name}: {}\n", scalar(amount)));
        }
    }
    format!(
        "# Generated by `kestrel manifests --values`; the defaults of deploy/kestrel.yaml.\n\
         # values.schema.json checks every value's type: `helm lint` and `helm install` name\n\
         # the one that is wrong.\n\
         schedulerName: {:?}\n\
         # Build the image with build/static.sh or the Dockerfile, push it to your registry and\n\
         # set image.repository (e.g. registry.example.com/platform/kestrel).\n\
         image:\n  repository: {:?}\n  \
         # Default: the chart's appVersion, the version of the kestrel binary.\n  \
         tag: \"\"\n  pullPolicy: {:?}\n\
         replicas: {}\nlogFormat: {:?}\n\
         # Client-side limit of API writes per second (0: none), and the burst above it.\n\
         qps: {}\nburst: {}\n\
         # How the chosen GPU indices reach a pod: \"patch\" (annotate, then bind: two writes)\n\
         # or \"binding\" (in the Binding, copied onto the pod by the API server: one write).\n\
         gpuIndicesVia: {:?}\npolicy: {:?}\nmetricsPort: {}\n\
         # MLflow tracking server (http://HOST:PORT) that records every TrainingJob as a run;\n\
         # empty: none (a job's spec.mlflow.trackingUri still applies).\n\
         mlflowTrackingUri: {:?}\n\
         # The scheduler container's requests and limits (memory limited, cpu not).\n\
         resources:\n{res}{dashboard}{agent}",
        v.scheduler_name,
        v.image_repository,
        v.image_pull_policy,
        v.replicas,
        v.log_format,
        v.qps,
        v.burst,
        v.gpu_indices_via,
        v.policy,
        v.metrics_port,
        v.mlflow_tracking_uri,
        dashboard = dashboard_values_yaml(&v),
        agent = agent_values_yaml()
    )
}

/// The `dashboard:` section of `values.yaml`.
fn dashboard_values_yaml(v: &InstallValues) -> String {
    let mut from = String::new();
    yaml(&json!({"from": v.dashboard_from}), 4, &mut from);
    format!(
        "# The read-only dashboard (docs/tasks/dashboard.md): `kestrel serve --dashboard-addr`.\n\
         # Only the leader shows the cluster; a standby answers that it is not the leader.\n\
         dashboard:\n  enabled: false\n  \
         # 127.0.0.1: only `kubectl port-forward` reaches it; 0.0.0.0: the pod network too\n  \
         # (then enable the NetworkPolicy).\n  \
         address: {:?}\n  port: {}\n  \
         # A NetworkPolicy on the scheduler pods: the metrics port stays open, the dashboard\n  \
         # port only to `from` (NetworkPolicy peers; default: pods of the release's namespace).\n  \
         networkPolicy:\n    enabled: false\n{from}",
        v.dashboard_address, v.dashboard_port
    )
}

/// The `agent:` section of `values.yaml`.
fn agent_values_yaml() -> String {
    let a = AgentValues::default();
    let mut block = String::new();
    yaml(
        &json!({"nodeSelector": a.node_selector, "tolerations": a.tolerations, "resources": a.resources}),
        2,
        &mut block,
    );
    format!(
        "# The node agent (`kestrel agent`), a DaemonSet on the GPU nodes: GPU discovery and\n\
         # health, the device plugin for agent.resourceName (run it instead of NVIDIA's device\n\
         # plugin for that resource), GPU labels and topology on each Node, GPU metrics.\n\
         agent:\n  enabled: false\n  \
         # The agent's own image (build/agent-image.sh): the dynamically linked kestrel,\n  \
         # which loads NVIDIA's management library. Pull policy: image.pullPolicy.\n  \
         image:\n    repository: {:?}\n    \
         # Default: the chart's appVersion.\n    tag: \"\"\n  \
         resourceName: {:?}\n  \
         # Prometheus scrapes /metrics here (the DCGM exporter's port).\n  metricsPort: {}\n  \
         # CDI device names in Allocate responses: none, index or uuid.\n  cdi: {:?}\n  \
         # On a node without the NVIDIA library: exit (the pod restarts) or serve zero GPUs.\n  \
         withoutNvml: {:?}\n  \
         # Gives the agent the NVIDIA library and devices (the GPU Operator creates it).\n  \
         runtimeClassName: {:?}\n  \
         # A PrometheusRule with the agent's alerts (needs the Prometheus operator).\n  \
         prometheusRule:\n    enabled: false\n{block}",
        a.image_repository,
        a.resource_name,
        a.metrics_port,
        a.cdi,
        a.without_nvml,
        a.runtime_class_name
    )
}

/// The schema of an image value, the scheduler's or the agent's: `repository` (`image`
/// without its tag), `tag` (empty: the chart's appVersion) and, where the chart sets it,
/// `pullPolicy`.
fn image_schema(image: &str, tag: &str, pull_policy: bool) -> Value {
    let mut properties = json!({
        "repository": {"type": "string", "minLength": 1,
                       "description": format!("{image} without its tag.")},
        "tag": {"type": "string",
                "description": format!("{tag}; empty: the chart's appVersion. Use --set-string for a tag that looks like a number.")}
    });
    if pull_policy {
        properties["pullPolicy"] = json!({"enum": ["Always", "IfNotPresent", "Never"]});
    }
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["repository"],
        "properties": properties
    })
}

/// The chart's `values.schema.json`: Helm checks the values against it before it renders
/// (`helm lint`, `helm template`, `helm install`), so a value of the wrong type, an unknown
/// value or a policy that does not exist is refused with its name.
pub fn values_schema() -> Value {
    let policies: Vec<&str> = kestrel_core::Policy::ALL.iter().map(|p| p.name()).collect();
    let quantity = json!({"type": ["string", "number"], "pattern": crds::QUANTITY_PATTERN});
    let amounts = json!({"type": "object", "additionalProperties": quantity});
    json!({
        "$schema": "https://json-schema.org/draft-07/schema#",
        "title": "Kestrel chart values",
        "type": "object",
        "additionalProperties": false,
        "required": ["schedulerName", "image", "replicas", "logFormat", "qps", "burst",
                     "gpuIndicesVia", "policy", "metricsPort", "resources"],
        "properties": {
            "global": {"type": "object"},
            "schedulerName": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
                              "description": "Schedule pods whose spec.schedulerName is this; also the Lease name."},
            "image": image_schema("The image", "The image tag", true),
            "replicas": {"type": "integer", "minimum": 1,
                         "description": "Scheduler replicas, one leader at a time, each on its own node."},
            "logFormat": {"enum": ["plain", "json"]},
            "qps": {"type": "number", "minimum": 0},
            "burst": {"type": "integer", "minimum": 0},
            "gpuIndicesVia": {"enum": ["patch", "binding"]},
            "policy": {"enum": policies},
            "metricsPort": {"type": "integer", "minimum": 1, "maximum": 65535},
            "mlflowTrackingUri": {"type": "string", "pattern": "^(http://[^/:]+(:[0-9]+)?(/.*)?)?$",
                                  "description": "MLflow tracking server (http://HOST:PORT) recording every TrainingJob as a run; empty: none."},
            "resources": {
                "type": "object",
                "additionalProperties": false,
                "properties": {"requests": amounts, "limits": amounts}
            },
            "dashboard": {
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "enabled": {"type": "boolean", "description": "Serve the read-only dashboard (kestrel serve --dashboard-addr)."},
                    "address": {"enum": ["127.0.0.1", "0.0.0.0"],
                                "description": "Loopback (only kubectl port-forward reaches it) or every address of the pod."},
                    "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                    "networkPolicy": {
                        "type": "object",
                        "additionalProperties": false,
                        // `from: null` would render a rule open to everyone.
                        "required": ["from"],
                        "properties": {
                            "enabled": {"type": "boolean", "description": "A NetworkPolicy: the metrics port open, the dashboard port only to `from`."},
                            "from": {"type": "array", "minItems": 1, "items": {"type": "object"},
                                     "description": "NetworkPolicy peers allowed to the dashboard port; an empty list would allow everyone, so at least one."}
                        }
                    }
                }
            },
            "agent": {
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "enabled": {"type": "boolean", "description": "Install the node agent DaemonSet."},
                    "image": image_schema(
                        "The agent's image (build/agent-image.sh)",
                        "The agent's image tag",
                        false,
                    ),
                    "resourceName": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
                                     "description": "The extended resource the agent's device plugin registers."},
                    "metricsPort": {"type": "integer", "minimum": 1, "maximum": 65535},
                    "cdi": {"enum": ["none", "index", "uuid"]},
                    "withoutNvml": {"enum": ["exit", "serve"]},
                    "runtimeClassName": {"type": "string", "minLength": 1},
                    "prometheusRule": {
                        "type": "object",
                        "additionalProperties": false,
                        "properties": {"enabled": {"type": "boolean"}}
                    },
                    "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"}},
                    "tolerations": {"type": "array", "items": {"type": "object"}},
                    "resources": {
                        "type": "object",
                        "additionalProperties": false,
                        "properties": {"requests": amounts, "limits": amounts}
                    }
                }
            }
        }
    })
}

/// `charts/kestrel/values.schema.json`.
pub fn render_values_schema() -> String {
    let mut text = serde_json::to_string_pretty(&values_schema()).expect("a schema serializes");
    text.push('\n');
    text
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
        assert!(t.contains(
            "image: \"{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}\"\n"
        ));
        assert!(t.contains("resources: {{ toJson .Values.resources }}\n"));
        assert!(!t.contains("@@"));
    }

    #[test]
    fn replicas_spread_over_nodes_under_a_disruption_budget() {
        let objects = objects(&InstallValues::default());
        let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
        let pod = &deployment["spec"]["template"]["spec"];
        let anti = &pod["affinity"]["podAntiAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"][0];
        assert_eq!(anti["topologyKey"], "kubernetes.io/hostname");
        assert_eq!(
            anti["labelSelector"]["matchLabels"],
            deployment["spec"]["selector"]["matchLabels"]
        );
        let pdb = objects
            .iter()
            .find(|o| o["kind"] == "PodDisruptionBudget")
            .unwrap();
        assert_eq!(pdb["spec"]["selector"], deployment["spec"]["selector"]);
        assert_eq!(pdb["spec"]["maxUnavailable"], 1);
        let container = &pod["containers"][0]["securityContext"];
        assert_eq!(container["capabilities"]["drop"], json!(["ALL"]));
        assert_eq!(container["readOnlyRootFilesystem"], true);
        assert_eq!(container["allowPrivilegeEscalation"], false);
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    }
}
