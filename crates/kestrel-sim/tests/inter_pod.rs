//! Pod affinity and anti-affinity, topology spread and host ports read from manifests as
//! users write them, simulated; and the pod specs the API server would refuse, refused
//! with the object, the field and the fix.

mod zoned;

use std::collections::BTreeMap;
use zoned::{read, run};

/// A Deployment of `replicas` pods labelled app=web, with `extra` under the pod spec.
fn deployment(replicas: u32, extra: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: prod}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata:
      labels: {{app: web}}
      annotations: {{kestrel.dev/sim-duration: 1h}}
    spec:
      containers:
      - name: web
        image: web
        resources: {{requests: {{cpu: 500m}}}}
{extra}"
    )
}

fn zone_counts(placed: &BTreeMap<String, String>, zones: &[&str]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for node in placed.values() {
        let i: usize = node[1..].parse().unwrap();
        *out.entry(zones[i].to_string()).or_default() += 1;
    }
    out
}

const ANTI_AFFINITY: &str = "      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchLabels: {app: web}}
            topologyKey: kubernetes.io/hostname
";

#[test]
fn a_deployment_with_required_anti_affinity_runs_one_replica_per_node() {
    let (placed, reasons) = run(&["z1", "z1"], &deployment(3, ANTI_AFFINITY));
    assert_eq!(placed.len(), 2, "{placed:?}");
    let nodes: std::collections::BTreeSet<&String> = placed.values().collect();
    assert_eq!(nodes.len(), 2, "one per node: {placed:?}");
    assert_eq!(
        reasons,
        ["0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."]
    );
}

#[test]
fn a_hard_zone_spread_puts_two_replicas_in_each_of_three_zones() {
    let zones = ["z1", "z1", "z2", "z3"];
    let spread = "      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: topology.kubernetes.io/zone
        whenUnsatisfiable: DoNotSchedule
        labelSelector: {matchLabels: {app: web}}
";
    let (placed, reasons) = run(&zones, &deployment(6, spread));
    assert!(reasons.is_empty(), "{reasons:?}");
    let counts = zone_counts(&placed, &zones);
    assert_eq!(counts.values().copied().collect::<Vec<_>>(), [2, 2, 2]);
}

#[test]
fn match_label_keys_spread_each_rollout_on_its_own() {
    // Two ReplicaSets of one app (as a rollout leaves them), told apart by
    // pod-template-hash. The old one's two pods sit on n0. The new one spreads with
    // matchLabelKeys [pod-template-hash]: it counts only its own pods, so one goes on
    // each node (counting the old pods too, both would have to go on n1).
    let rs = |hash: &str, extra: &str| {
        format!(
            "apiVersion: apps/v1
kind: ReplicaSet
metadata: {{name: web-{hash}, namespace: prod}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web, pod-template-hash: \"{hash}\"}}}}
  template:
    metadata:
      labels: {{app: web, pod-template-hash: \"{hash}\"}}
      annotations: {{kestrel.dev/sim-duration: 1h}}
    spec:
      containers:
      - name: web
        image: web
        resources: {{requests: {{cpu: 500m}}}}
{extra}"
        )
    };
    let old = rs("aaa", "      nodeSelector: {kubernetes.io/hostname: n0}\n");
    let new = rs(
        "bbb",
        "      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
        labelSelector: {matchLabels: {app: web}}
        matchLabelKeys: [pod-template-hash]
",
    );
    let (placed, reasons) = run(&["z1", "z1"], &format!("{old}---\n{new}"));
    assert!(reasons.is_empty(), "{reasons:?}");
    let nodes: std::collections::BTreeSet<&String> = placed
        .iter()
        .filter(|(pod, _)| pod.contains("bbb"))
        .map(|(_, node)| node)
        .collect();
    assert_eq!(nodes.len(), 2, "{placed:?}");
}

#[test]
fn host_ports_allow_one_taker_per_node() {
    let ports = "        ports: [{containerPort: 8080, hostPort: 8080}]
";
    let yaml = deployment(3, "").replace(
        "        resources: {requests: {cpu: 500m}}\n",
        &format!("        resources: {{requests: {{cpu: 500m}}}}\n{ports}"),
    );
    let (placed, reasons) = run(&["z1", "z1"], &yaml);
    assert_eq!(placed.len(), 2);
    assert_eq!(
        reasons,
        ["0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports."]
    );
}

#[test]
fn pod_specs_the_api_server_refuses_are_refused_with_the_field_and_the_fix() {
    let spread = |body: &str| {
        deployment(
            1,
            &format!("      topologySpreadConstraints:\n      - {body}\n"),
        )
    };
    let cases: Vec<(String, Vec<&str>)> = vec![
        (
            spread("{maxSkew: 0, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}"),
            vec!["Deployment prod/web", "topologySpreadConstraints[0].maxSkew", "1 or more"],
        ),
        (
            spread("{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: Sometimes}"),
            vec!["whenUnsatisfiable", "DoNotSchedule or ScheduleAnyway"],
        ),
        (
            spread("{maxSkew: 1, topologyKey: \"\", whenUnsatisfiable: DoNotSchedule}"),
            vec!["topologySpreadConstraints[0].topologyKey", "needs a topologyKey"],
        ),
        (
            spread("{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway, minDomains: 2}"),
            vec!["minDomains", "only with whenUnsatisfiable: DoNotSchedule"],
        ),
        (
            spread("{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, nodeTaintsPolicy: Always}"),
            vec!["nodeTaintsPolicy", "Honor or Ignore"],
        ),
        (
            spread("{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, matchLabelKeys: [app]}"),
            vec!["matchLabelKeys", "needs a labelSelector"],
        ),
        (
            spread("{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchExpressions: [{key: app, operator: Equals, values: [web]}]}}"),
            vec!["labelSelector.matchExpressions[0].operator", "In, NotIn, Exists or DoesNotExist"],
        ),
        (
            spread("{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchExpressions: [{key: app, operator: In}]}}"),
            vec!["matchExpressions[0].values", "one or more values"],
        ),
        (
            deployment(1, "      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchLabels: {app: web}}
"),
            vec!["podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey", "needs a topologyKey"],
        ),
        (
            deployment(1, "      affinity:
        podAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 0
            podAffinityTerm: {labelSelector: {matchLabels: {app: web}}, topologyKey: zone}
"),
            vec!["preferredDuringSchedulingIgnoredDuringExecution[0].weight", "1 to 100"],
        ),
        (
            deployment(1, "      affinity:
        podAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchLabels: {app: web}}
            topologyKey: zone
            matchLabelKeys: [tier]
            mismatchLabelKeys: [tier]
"),
            vec!["mismatchLabelKeys", "in both"],
        ),
        (
            deployment(1, "").replace(
                "        resources: {requests: {cpu: 500m}}\n",
                "        resources: {requests: {cpu: 500m}}\n        ports: [{containerPort: 80, hostPort: 70000}]\n",
            ),
            vec!["containers[0].ports[0].hostPort", "1 to 65535"],
        ),
    ];
    for (yaml, parts) in cases {
        let e = read(&yaml).expect_err(&yaml);
        for part in parts {
            assert!(e.contains(part), "{part:?} not in {e}");
        }
    }
}

#[test]
fn a_spread_on_a_key_no_node_has_leaves_the_pod_pending_and_says_so() {
    let spread = "      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: example.com/rack
        whenUnsatisfiable: DoNotSchedule
        labelSelector: {matchLabels: {app: web}}
";
    let (placed, reasons) = run(&["z1", "z2"], &deployment(1, spread));
    assert!(placed.is_empty());
    assert_eq!(
        reasons,
        ["0/2 nodes are available: 2 node(s) didn't match pod topology spread constraints (missing required label)."]
    );
}
