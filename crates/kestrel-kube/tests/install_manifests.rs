//! The committed install manifests and Helm chart are what the code generates.
//! Regenerate after a change:
//! `kestrel manifests > deploy/kestrel.yaml`,
//! `kestrel manifests --helm > charts/kestrel/templates/kestrel.yaml`,
//! `kestrel manifests --values > charts/kestrel/values.yaml`,
//! `kestrel crds > charts/kestrel/crds/kestrel-crds.yaml`.

use kestrel_kube::manifests::{render_crds, render_helm, render_plain, render_values};
use std::path::Path;

fn committed(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn deploy_manifests_match_the_code() {
    assert_eq!(
        committed("deploy/kestrel.yaml"),
        render_plain(),
        "deploy/kestrel.yaml drifted: run `kestrel manifests > deploy/kestrel.yaml`"
    );
}

#[test]
fn helm_chart_matches_the_code() {
    assert_eq!(
        committed("charts/kestrel/templates/kestrel.yaml"),
        render_helm(),
        "the chart template drifted: run `kestrel manifests --helm > charts/kestrel/templates/kestrel.yaml`"
    );
    assert_eq!(
        committed("charts/kestrel/values.yaml"),
        render_values(),
        "values.yaml drifted: run `kestrel manifests --values > charts/kestrel/values.yaml`"
    );
}

#[test]
fn chart_crds_match_the_code() {
    assert_eq!(
        committed("charts/kestrel/crds/kestrel-crds.yaml"),
        render_crds(),
        "the chart's CRDs drifted: run `kestrel crds > charts/kestrel/crds/kestrel-crds.yaml`"
    );
}

/// Substituting the chart's defaults into its template, after its CRDs (which Helm
/// installs first), gives the plain manifests: the chart renders the same objects as
/// `kubectl apply -f deploy/`.
#[test]
fn chart_with_default_values_renders_the_deploy_manifests() {
    let values: serde_json::Value =
        serde_saphyr::from_str(&committed("charts/kestrel/values.yaml")).unwrap();
    let mut text = committed("charts/kestrel/templates/kestrel.yaml");
    text = text.replace("{{ .Release.Namespace }}", "kube-system");
    for (key, value) in values.as_object().unwrap() {
        let v = match value {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        text = text.replace(&format!("{{{{ .Values.{key} }}}}"), &v);
    }
    assert!(!text.contains("{{"), "unrendered expression left:\n{text}");
    let mut rendered: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&committed("charts/kestrel/crds/kestrel-crds.yaml")).unwrap();
    rendered.extend(serde_saphyr::from_multiple::<serde_json::Value>(&text).unwrap());
    let plain: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&committed("deploy/kestrel.yaml")).unwrap();
    assert_eq!(rendered, plain);
}
