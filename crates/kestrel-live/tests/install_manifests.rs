//! The committed install manifests and Helm chart are what the code generates, and the
//! chart, the binary and the image agree on one version.
//!
//! Regenerate after a change (or `KESTREL_BLESS=1 cargo test -p kestrel-live --test
//! install_manifests`, which rewrites them all):
//! `kestrel manifests > deploy/kestrel.yaml`,
//! `kestrel manifests --helm > charts/kestrel/templates/kestrel.yaml`,
//! `kestrel manifests --values > charts/kestrel/values.yaml`,
//! `kestrel crds > charts/kestrel/crds/kestrel-crds.yaml`,
//! `kestrel manifests --agent > deploy/kestrel-agent.yaml`,
//! `kestrel manifests --agent-helm > charts/kestrel/templates/agent.yaml`;
//! `charts/kestrel/values.schema.json` by the bless run only.

use kestrel_live::deploy::{
    agent_prometheus_rule, render_agent_helm, render_agent_plain, render_crds, render_helm,
    render_plain, render_values, render_values_schema, values_schema,
};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn committed(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Compares a committed generated file with the code's output; with `KESTREL_BLESS=1`
/// writes the output instead.
fn check_generated(path: &str, generated: String, how: &str) {
    if std::env::var_os("KESTREL_BLESS").is_some() {
        std::fs::write(root().join(path), &generated).unwrap_or_else(|e| panic!("{path}: {e}"));
        return;
    }
    assert!(
        committed(path) == generated,
        "{path} drifted from the code: {how} (or KESTREL_BLESS=1 cargo test -p kestrel-live --test install_manifests)"
    );
}

#[test]
fn deploy_manifests_match_the_code() {
    check_generated(
        "deploy/kestrel.yaml",
        render_plain(),
        "run `kestrel manifests > deploy/kestrel.yaml`",
    );
}

#[test]
fn agent_manifests_match_the_code() {
    check_generated(
        "deploy/kestrel-agent.yaml",
        render_agent_plain(),
        "run `kestrel manifests --agent > deploy/kestrel-agent.yaml`",
    );
    check_generated(
        "charts/kestrel/templates/agent.yaml",
        render_agent_helm(),
        "run `kestrel manifests --agent-helm > charts/kestrel/templates/agent.yaml`",
    );
}

/// Renders a chart template as Helm would, for the few constructs the generated chart
/// uses: `{{- if .Values.x }}` (or `and .Values.x .Values.y`) ... `{{- end }}` blocks, and
/// the expressions of [`render_expression`].
fn render_template(template: &str, values: &Value, app_version: &str) -> String {
    let mut kept = String::new();
    let mut open: Vec<bool> = Vec::new();
    for line in template.lines() {
        let t = line.trim();
        if let Some(cond) = t
            .strip_prefix("{{- if ")
            .and_then(|c| c.strip_suffix(" }}"))
        {
            let paths = cond.strip_prefix("and ").unwrap_or(cond);
            open.push(paths.split(' ').all(|path| {
                let path = path.strip_prefix(".Values.").expect("a value condition");
                lookup(values, path).as_bool() == Some(true)
            }));
            continue;
        }
        if t == "{{- end }}" {
            open.pop().expect("an open block");
            continue;
        }
        if open.iter().all(|o| *o) {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    let mut text = String::new();
    let mut rest = kept.as_str();
    while let Some(start) = rest.find("{{") {
        let end = rest[start..].find("}}").expect("a closed expression") + start;
        text.push_str(&rest[..start]);
        text.push_str(&render_expression(
            rest[start + 2..end].trim(),
            values,
            app_version,
        ));
        rest = &rest[end + 2..];
    }
    text.push_str(rest);
    text
}

/// The agent's template renders nothing by default (so the chart's default install is
/// deploy/kestrel.yaml alone), the agent's plain manifests when enabled, and its
/// PrometheusRule when that is enabled too.
#[test]
fn agent_template_is_off_by_default_and_renders_the_agent_manifests() {
    let mut values: Value =
        serde_saphyr::from_str(&committed("charts/kestrel/values.yaml")).unwrap();
    let app_version = chart_field(&committed("charts/kestrel/Chart.yaml"), "appVersion");
    let template = committed("charts/kestrel/templates/agent.yaml");
    let off: Vec<Value> =
        serde_saphyr::from_multiple(&render_template(&template, &values, &app_version)).unwrap();
    assert!(off.is_empty(), "{off:?}");
    values["agent"]["enabled"] = Value::Bool(true);
    let on: Vec<Value> =
        serde_saphyr::from_multiple(&render_template(&template, &values, &app_version)).unwrap();
    let plain: Vec<Value> =
        serde_saphyr::from_multiple(&committed("deploy/kestrel-agent.yaml")).unwrap();
    assert_eq!(on, plain);
    values["agent"]["prometheusRule"]["enabled"] = Value::Bool(true);
    let with_rule: Vec<Value> =
        serde_saphyr::from_multiple(&render_template(&template, &values, &app_version)).unwrap();
    assert_eq!(with_rule.len(), plain.len() + 1);
    assert_eq!(
        with_rule.last().unwrap(),
        &agent_prometheus_rule("kube-system")
    );
}

/// The container image of the one DaemonSet or Deployment among `objects`.
fn workload_image(objects: &[Value], kind: &str) -> String {
    let workload = objects
        .iter()
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"));
    workload["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The agent runs its own image (the dynamically linked kestrel that loads NVML), not the
/// scheduler's static one: `kestrel-agent:VERSION` by default, `agent.image.*` when set.
#[test]
fn agent_runs_the_agent_image() {
    let version = env!("CARGO_PKG_VERSION");
    let plain: Vec<Value> =
        serde_saphyr::from_multiple(&committed("deploy/kestrel-agent.yaml")).unwrap();
    assert_eq!(
        workload_image(&plain, "DaemonSet"),
        format!("kestrel-agent:{version}")
    );
    let scheduler: Vec<Value> =
        serde_saphyr::from_multiple(&committed("deploy/kestrel.yaml")).unwrap();
    assert_eq!(
        workload_image(&scheduler, "Deployment"),
        format!("kestrel:{version}")
    );

    let mut values: Value =
        serde_saphyr::from_str(&committed("charts/kestrel/values.yaml")).unwrap();
    let app_version = chart_field(&committed("charts/kestrel/Chart.yaml"), "appVersion");
    let template = committed("charts/kestrel/templates/agent.yaml");
    values["agent"]["enabled"] = Value::Bool(true);
    values["agent"]["image"]["repository"] = Value::from("registry.example.com/gpu/kestrel-agent");
    let rendered: Vec<Value> =
        serde_saphyr::from_multiple(&render_template(&template, &values, &app_version)).unwrap();
    assert_eq!(
        workload_image(&rendered, "DaemonSet"),
        format!("registry.example.com/gpu/kestrel-agent:{app_version}")
    );
    values["agent"]["image"]["tag"] = Value::from("0.1.0-gpu.1");
    // The scheduler's image values do not move the agent.
    values["image"]["repository"] = Value::from("registry.example.com/platform/kestrel");
    let rendered: Vec<Value> =
        serde_saphyr::from_multiple(&render_template(&template, &values, &app_version)).unwrap();
    assert_eq!(
        workload_image(&rendered, "DaemonSet"),
        "registry.example.com/gpu/kestrel-agent:0.1.0-gpu.1"
    );
}

#[test]
fn helm_chart_matches_the_code() {
    check_generated(
        "charts/kestrel/templates/kestrel.yaml",
        render_helm(),
        "run `kestrel manifests --helm > charts/kestrel/templates/kestrel.yaml`",
    );
    check_generated(
        "charts/kestrel/values.yaml",
        render_values(),
        "run `kestrel manifests --values > charts/kestrel/values.yaml`",
    );
    check_generated(
        "charts/kestrel/values.schema.json",
        render_values_schema(),
        "regenerate it",
    );
}

#[test]
fn chart_crds_match_the_code() {
    check_generated(
        "charts/kestrel/crds/kestrel-crds.yaml",
        render_crds(),
        "run `kestrel crds > charts/kestrel/crds/kestrel-crds.yaml`",
    );
}

/// A field of Chart.yaml (flat `key: value` lines, quotes removed).
fn chart_field(chart: &str, key: &str) -> String {
    chart
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_else(|| panic!("Chart.yaml has no {key}"))
        .trim()
        .trim_matches('"')
        .to_string()
}

/// The one version: Cargo's (what `kestrel --version` prints and the static build tags
/// the image with) is the chart's `version` and `appVersion` (the image tag the chart
/// runs), has a CHANGELOG entry, and values.yaml does not pin another tag.
#[test]
fn cargo_chart_image_and_changelog_agree_on_the_version() {
    let version = env!("CARGO_PKG_VERSION");
    let chart = committed("charts/kestrel/Chart.yaml");
    assert_eq!(
        chart_field(&chart, "version"),
        version,
        "charts/kestrel/Chart.yaml: version is not the Cargo version {version}"
    );
    assert_eq!(
        chart_field(&chart, "appVersion"),
        version,
        "charts/kestrel/Chart.yaml: appVersion (the default image tag) is not the Cargo version {version}"
    );
    let values: Value = serde_saphyr::from_str(&committed("charts/kestrel/values.yaml")).unwrap();
    for path in ["image.tag", "agent.image.tag"] {
        let tag = lookup(&values, path).as_str().unwrap_or_default();
        assert!(
            tag.is_empty() || tag == version,
            "charts/kestrel/values.yaml: {path} {tag:?} disagrees with the chart's appVersion {version}; leave it empty"
        );
    }
    let changelog = committed("CHANGELOG.md");
    assert!(
        changelog
            .lines()
            .any(|l| l.starts_with(&format!("## {version}"))),
        "CHANGELOG.md has no `## {version}` section"
    );
}

/// The values the chart's template reads by path (`image.repository`).
fn lookup<'a>(values: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(values, |v, key| &v[key])
}

/// The few template expressions the generated chart uses, evaluated as Helm does.
fn render_expression(expr: &str, values: &Value, app_version: &str) -> String {
    let mut stages = expr.split('|').map(str::trim);
    let head = stages.next().unwrap();
    let (json, path) = match head.strip_prefix("toJson ") {
        Some(path) => (true, path),
        None => (false, head),
    };
    let value = match path {
        ".Release.Namespace" => Value::from("kube-system"),
        ".Chart.AppVersion" => Value::from(app_version),
        p => lookup(
            values,
            p.strip_prefix(".Values.")
                .unwrap_or_else(|| panic!("{{{{ {expr} }}}}: not a value")),
        )
        .clone(),
    };
    let mut text = match (&value, json) {
        (v, true) => serde_json::to_string(v).unwrap(),
        (Value::String(s), false) => s.clone(),
        (Value::Null, false) => String::new(),
        (other, false) => other.to_string(),
    };
    for stage in stages {
        match stage {
            "default .Chart.AppVersion" if text.is_empty() => text = app_version.to_string(),
            "default .Chart.AppVersion" => {}
            other => panic!("{{{{ {expr} }}}}: unknown function {other}"),
        }
    }
    text
}

/// Rendering the chart with its default values, after its CRDs (which Helm installs
/// first), gives the plain manifests: the chart installs the same objects as
/// `kubectl apply -f deploy/`. (CI renders the chart with helm itself as well.)
#[test]
fn chart_with_default_values_renders_the_deploy_manifests() {
    let values: Value = serde_saphyr::from_str(&committed("charts/kestrel/values.yaml")).unwrap();
    let app_version = chart_field(&committed("charts/kestrel/Chart.yaml"), "appVersion");
    let template = committed("charts/kestrel/templates/kestrel.yaml");
    let text = render_template(&template, &values, &app_version);
    let mut rendered: Vec<Value> =
        serde_saphyr::from_multiple(&committed("charts/kestrel/crds/kestrel-crds.yaml")).unwrap();
    rendered.extend(serde_saphyr::from_multiple::<Value>(&text).unwrap());
    let plain: Vec<Value> = serde_saphyr::from_multiple(&committed("deploy/kestrel.yaml")).unwrap();
    assert_eq!(rendered, plain);
}

/// `dashboard.enabled` adds `--dashboard-addr` (loopback by default) and nothing else;
/// `dashboard.networkPolicy.enabled` too adds the NetworkPolicy: the metrics port open, the
/// dashboard port only to `from`.
#[test]
fn dashboard_values_add_the_flag_and_the_network_policy() {
    let mut values: Value =
        serde_saphyr::from_str(&committed("charts/kestrel/values.yaml")).unwrap();
    let app_version = chart_field(&committed("charts/kestrel/Chart.yaml"), "appVersion");
    let template = committed("charts/kestrel/templates/kestrel.yaml");
    let render = |values: &Value| -> Vec<Value> {
        serde_saphyr::from_multiple(&render_template(&template, values, &app_version)).unwrap()
    };
    let args = |objects: &[Value]| -> Vec<String> {
        let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
        serde_json::from_value(
            deployment["spec"]["template"]["spec"]["containers"][0]["args"].clone(),
        )
        .unwrap()
    };
    let off = render(&values);
    assert!(!args(&off).iter().any(|a| a.starts_with("--dashboard-addr")));
    values["dashboard"]["networkPolicy"]["enabled"] = Value::Bool(true);
    assert_eq!(render(&values), off, "the policy needs the dashboard on");
    values["dashboard"]["networkPolicy"]["enabled"] = Value::Bool(false);
    values["dashboard"]["enabled"] = Value::Bool(true);
    let on = render(&values);
    assert_eq!(on.len(), off.len());
    assert!(
        args(&on).contains(&"--dashboard-addr=127.0.0.1:8080".to_string()),
        "{:?}",
        args(&on)
    );
    values["dashboard"]["address"] = Value::from("0.0.0.0");
    values["dashboard"]["networkPolicy"]["enabled"] = Value::Bool(true);
    let open = render(&values);
    assert!(args(&open).contains(&"--dashboard-addr=0.0.0.0:8080".to_string()));
    let policy = open.last().unwrap();
    assert_eq!(policy["kind"], "NetworkPolicy", "{policy}");
    assert_eq!(policy["metadata"]["namespace"], "kube-system");
    let ingress = policy["spec"]["ingress"].as_array().unwrap();
    assert_eq!(ingress[0]["ports"][0]["port"], 10251);
    assert!(
        ingress[0].get("from").is_none(),
        "metrics stay open: {policy}"
    );
    assert_eq!(ingress[1]["ports"][0]["port"], 8080);
    assert_eq!(ingress[1]["from"], serde_json::json!([{"podSelector": {}}]));
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "kestrel"
    );
}

/// The schema admits the default values and names a value of the wrong type. (A
/// structural check of the few keywords the schema uses; `helm lint` in CI applies it
/// fully.)
#[test]
fn values_schema_admits_the_defaults_and_refuses_wrong_types() {
    let schema = values_schema();
    let values: Value = serde_saphyr::from_str(&committed("charts/kestrel/values.yaml")).unwrap();
    assert_eq!(check(&schema, &values, ""), Vec::<String>::new());

    let mut wrong = values.clone();
    wrong["replicas"] = Value::from("two");
    wrong["image"]["tag"] = Value::from(1.5);
    wrong["policy"] = Value::from("fastest");
    wrong["imageTag"] = Value::from("0.1.0");
    wrong["agent"]["image"]["tag"] = Value::from(2);
    wrong["agent"]["image"]["registry"] = Value::from("registry.example.com");
    let errors = check(&schema, &wrong, "");
    for named in [
        "replicas",
        "image.tag",
        "policy",
        "imageTag",
        "agent.image.tag",
        "agent.image.registry",
    ] {
        assert!(
            errors.iter().any(|e| e.starts_with(named)),
            "{named} not named: {errors:?}"
        );
    }
}

/// What of `value` breaks `schema` (type, enum, required, additionalProperties), by path.
fn check(schema: &Value, value: &Value, path: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let type_name = |v: &Value| match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    if let Some(t) = schema.get("type") {
        let allowed: Vec<&str> = match t {
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            other => vec![other.as_str().unwrap()],
        };
        let actual = type_name(value);
        if !allowed
            .iter()
            .any(|a| *a == actual || (*a == "number" && actual == "integer"))
        {
            errors.push(format!("{path}: {actual}, want {allowed:?}"));
        }
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        if !options.contains(value) {
            errors.push(format!("{path}: {value} not one of {options:?}"));
        }
    }
    if let Value::Object(map) = value {
        let join = |k: &str| {
            if path.is_empty() {
                k.to_string()
            } else {
                format!("{path}.{k}")
            }
        };
        for req in schema["required"].as_array().into_iter().flatten() {
            if !map.contains_key(req.as_str().unwrap()) {
                errors.push(format!("{}: required", join(req.as_str().unwrap())));
            }
        }
        for (k, v) in map {
            match schema["properties"].get(k) {
                Some(s) => errors.extend(check(s, v, &join(k))),
                None => match &schema["additionalProperties"] {
                    Value::Bool(false) => errors.push(format!("{}: not a value", join(k))),
                    s @ Value::Object(_) => errors.extend(check(s, v, &join(k))),
                    _ => {}
                },
            }
        }
    }
    errors
}

/// What `helm template --include-crds` made of the chart (`build/helm.sh render`, which
/// CI runs and points `KESTREL_HELM_RENDERED` at) is the plain manifests, in Helm's order.
#[test]
fn helm_renders_the_deploy_manifests() {
    let Some(path) = std::env::var_os("KESTREL_HELM_RENDERED") else {
        eprintln!("skipped: KESTREL_HELM_RENDERED is not set (build/helm.sh render; CI sets it)");
        return;
    };
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", Path::new(&path).display()));
    let key = |o: &Value| format!("{}/{}", o["kind"], o["metadata"]["name"]);
    let sorted = |mut objects: Vec<Value>| {
        objects.retain(|o| !o.is_null());
        objects.sort_by_key(key);
        objects
    };
    let rendered = sorted(serde_saphyr::from_multiple(&text).unwrap());
    let plain = sorted(serde_saphyr::from_multiple(&committed("deploy/kestrel.yaml")).unwrap());
    assert_eq!(
        rendered.iter().map(key).collect::<Vec<_>>(),
        plain.iter().map(key).collect::<Vec<_>>()
    );
    for (r, p) in rendered.iter().zip(&plain) {
        assert_eq!(
            r,
            p,
            "{} differs between helm template and deploy/kestrel.yaml",
            key(p)
        );
    }
}
