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
//!
//! One file per part: [`scheduler`] (the Deployment, its PodDisruptionBudget, Service and
//! NetworkPolicy), [`rbac`] (its ServiceAccount and roles), [`crds`], [`agent`] (the node
//! agent's DaemonSet), [`alerts`] (the agent's PrometheusRule), [`values`] (the chart's
//! `values.yaml` and its schema) and [`yaml`] (the YAML writer).

mod agent;
mod alerts;
mod crds;
mod rbac;
mod scheduler;
mod values;
mod yaml;

pub use agent::{agent_objects, render_agent_helm, render_agent_plain, AgentValues};
pub use alerts::{agent_prometheus_rule, render_agent_rules, AgentRule, AGENT_RULES};
pub use crds::{crd_objects, render_crds};
pub use scheduler::{dashboard_network_policy, objects};
pub use values::{render_values, render_values_schema, values_schema};

use serde_json::{json, Value};
use yaml::documents;

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

/// Multi-document YAML of the install objects (without the CRDs).
pub fn render(values: &InstallValues) -> String {
    documents(&objects(values))
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

/// The Helm template's values substituted for their markers (`@@key@@`).
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
