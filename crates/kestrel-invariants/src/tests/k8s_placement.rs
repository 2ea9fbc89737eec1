//! Placement rules checked on the API server's objects: Namespaces, PersistentVolumeClaims
//! and PersistentVolumes read beside Nodes and Pods.

use super::*;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use serde_json::json;

fn node(name: &str, zone: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"zone": zone}},
        "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"}}
    }))
    .unwrap()
}

fn pod(name: &str, node: &str, spec: serde_json::Value) -> Pod {
    let mut base = json!({
        "metadata": {"name": name, "namespace": "ml", "labels": {"app": "web", "rev": "2"}},
        "spec": {"nodeName": node, "containers": [{"name": "c"}]},
    });
    for (k, v) in spec.as_object().unwrap() {
        base["spec"][k] = v.clone();
    }
    serde_json::from_value(base).unwrap()
}

#[test]
fn pods_read_affinity_spread_tolerations_and_volumes() {
    let term = json!({
        "labelSelector": {"matchLabels": {"app": "web"}},
        "matchLabelKeys": ["rev"],
        "namespaceSelector": {"matchExpressions": [
            {"key": "team", "operator": "Exists"}]},
        "topologyKey": "zone",
    });
    let p = pod(
        "w0",
        "n1",
        json!({
            "affinity": {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]},
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {}, "topologyKey": "zone"}]},
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "zone", "operator": "In", "values": ["a"]}]}]}},
            },
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {"matchLabels": {"app": "web"}}, "minDomains": 2,
                 "nodeTaintsPolicy": "Honor"},
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
                 "labelSelector": {}},
            ],
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            ],
        }),
    );
    let q = pod(
        "w1",
        "n2",
        json!({"volumes": [{"name": "x", "persistentVolumeClaim": {"claimName": "w0-scratch"}}]}),
    );
    let claims: Vec<PersistentVolumeClaim> = serde_json::from_value(json!([
        {"metadata": {"name": "data", "namespace": "ml"},
         "spec": {"volumeName": "pv-a", "accessModes": ["ReadWriteOnce"]}},
        {"metadata": {"name": "w0-scratch", "namespace": "ml"},
         "spec": {"accessModes": ["ReadWriteOncePod"]}},
    ]))
    .unwrap();
    let volumes: Vec<PersistentVolume> = serde_json::from_value(json!([
        {"metadata": {"name": "pv-a"}, "spec": {"nodeAffinity": {"required": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["b"]}]}]}}}},
    ]))
    .unwrap();
    let namespaces: Vec<Namespace> = serde_json::from_value(json!([
        {"metadata": {"name": "ml", "labels": {"team": "x"}}},
    ]))
    .unwrap();
    let extras = K8sExtras {
        namespaces: &namespaces,
        claims: &claims,
        volumes: &volumes,
    };
    let s = Snapshot::from_k8s_with(
        &[node("n1", "a"), node("n2", "a")],
        &[p, q],
        &BTreeMap::new(),
        &extras,
    )
    .unwrap();
    assert_eq!(s.nodes[0].labels["zone"], "a");
    assert_eq!(s.nodes[0].taints[0].effect, "NoSchedule");
    assert_eq!(s.namespaces["ml"]["team"], "x");
    let w0 = s.pod("ml/w0").unwrap();
    assert_eq!(w0.labels["rev"], "2");
    assert_eq!(
        w0.anti_affinity[0].selector,
        Some(vec![
            Requirement::new("app", Operator::In, &["web"]),
            Requirement::new("rev", Operator::In, &["2"]),
        ])
    );
    assert_eq!(w0.affinity[0].selector, Some(vec![]));
    assert_eq!(w0.spread.len(), 1, "ScheduleAnyway is not checked");
    assert!(w0.spread[0].honor_taints && w0.spread[0].honor_node_affinity);
    assert_eq!(w0.spread[0].min_domains, Some(2));
    assert!(w0.tolerates_node(&s.nodes[0]));
    assert!(w0.node_affinity.is_some());
    assert_eq!(w0.volume_affinity[0].claim, "ml/data");
    assert_eq!(w0.exclusive_claims, ["ml/w0-scratch"]);
    assert_eq!(
        w0.claims_to_bind,
        ["ml/w0-scratch"],
        "a claim without a volume yet"
    );
    // w0 on n1 breaks its PV's affinity (zone b), its anti-affinity (w1 in zone a),
    // and the RWOP claim is used by both.
    let v = check(&s).err().unwrap_or_default();
    let kinds: Vec<&str> = v
        .iter()
        .map(|v| match v {
            Violation::AntiAffinityBroken { .. } => "anti",
            Violation::VolumeNodeConflict { .. } => "volume",
            Violation::ClaimUsedTwice { .. } => "rwop",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["anti", "volume", "rwop"], "{}", describe(&v));
    // Without the extras, namespaces have no labels and claims are unknown.
    let plain =
        Snapshot::from_k8s(&[node("n1", "a"), node("n2", "a")], &[], &BTreeMap::new()).unwrap();
    assert!(plain.namespaces.is_empty());
}
