//! Snapshots from the API server's Nodes and Pods (`Snapshot::from_k8s`): requests as the
//! kubelet sums them, GPU indices, gangs and queues from their markers.

use super::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;

fn node(name: &str, gpus: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"allocatable": {
            "cpu": "15900m", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": gpus,
            "rdma/hca": "1k",
        }}
    }))
    .unwrap()
}

fn pod(extra: serde_json::Value) -> Pod {
    let mut base = json!({
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
    });
    merge(&mut base, extra);
    serde_json::from_value(base).unwrap()
}

fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    match (into, from) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

#[test]
fn nodes_read_allocatable_in_milli_units() {
    let s = Snapshot::from_k8s(&[node("g", "8")], &[], &BTreeMap::new()).unwrap();
    let n = &s.nodes[0];
    assert_eq!(n.gpu_devices, 8);
    assert_eq!(n.allocatable["cpu"], 15_900);
    assert_eq!(n.allocatable["memory"], (1i128 << 40) * 1000);
    assert_eq!(n.allocatable[PODS], 110_000);
    assert_eq!(n.allocatable[GPU], 8000);
    assert_eq!(n.allocatable["rdma/hca"], 1_000_000);
    let bad = Snapshot::from_k8s(&[node("g", "eight")], &[], &BTreeMap::new()).unwrap_err();
    assert!(
        bad.to_string().contains("Node g") && bad.to_string().contains("nvidia.com/gpu"),
        "{bad}"
    );
}

#[test]
fn requests_sum_containers_max_init_containers_add_sidecars_and_overhead() {
    let p = pod(json!({"spec": {
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "500m"}, "limits": {"memory": "2Gi", "nvidia.com/gpu": "2"}}},
        ],
        "initContainers": [
            {"name": "big-init", "resources": {"requests": {"cpu": "4"}}},
            {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}},
            {"name": "late-init", "resources": {"requests": {"cpu": "1", "memory": "8Gi"}}},
        ],
        "overhead": {"cpu": "100m", "memory": "10Mi"},
    }}));
    let r = pod_requests(&p).unwrap();
    // cpu: containers 1.5 + sidecar 0.25 = 1.75; init max(4, 0.25 + 1) = 4; + 0.1.
    assert_eq!(r["cpu"], 4100);
    // memory: containers 1Gi + 2Gi (limit) + sidecar 1Gi = 4Gi; late init 1Gi + 8Gi.
    assert_eq!(r["memory"], ((9i128 << 30) + (10 << 20)) * 1000);
    assert_eq!(r[GPU], 2000);
    // Pod-level requests replace what they name.
    let p = pod(json!({"spec": {"resources": {"requests": {"cpu": "3"}}}}));
    assert_eq!(pod_requests(&p).unwrap()["cpu"], 3000);
    let bad = pod(json!({"spec": {"overhead": {"cpu": "lots"}}}));
    let e = pod_requests(&bad).unwrap_err().to_string();
    assert!(
        e.contains("Pod ml/p") && e.contains("spec.overhead[\"cpu\"]"),
        "{e}"
    );
}

#[test]
fn bindings_devices_gangs_and_ended_pods() {
    let gpu = |name: &str, indices: &str| {
        pod(json!({
            "metadata": {"name": name, "labels": {"scheduling.x-k8s.io/pod-group": "train"},
                         "annotations": {GPU_INDICES_ANNOTATION: indices}},
            "spec": {"nodeName": "g", "priority": 7,
                     "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
        }))
    };
    let done = pod(json!({
        "metadata": {"name": "done", "labels": {"scheduling.x-k8s.io/pod-group": "train"}},
        "spec": {"nodeName": "g"},
        "status": {"phase": "Succeeded"},
    }));
    let shared = pod(json!({
        "metadata": {"name": "s", "annotations": {GPU_INDICES_ANNOTATION: "5:250", "scheduling.k8s.io/group-name": "v"}},
        "spec": {"nodeName": "g"},
    }));
    let kueue = pod(json!({
        "metadata": {"name": "k", "labels": {"kueue.x-k8s.io/pod-group-name": "kg"},
                     "annotations": {"kueue.x-k8s.io/pod-group-total-count": "2"}},
    }));
    let pods = [gpu("w0", "0,1"), gpu("w1", "2, 3"), done, shared, kueue];
    let mins = BTreeMap::from([("ml/train".to_string(), 3), ("ml/v".to_string(), 1)]);
    let s = Snapshot::from_k8s(&[node("g", "8")], &pods, &mins).unwrap();
    assert_eq!(s.pods.len(), 4, "the pod that succeeded is left out");
    let w1 = s.pod("ml/w1").unwrap();
    assert_eq!(w1.node.as_deref(), Some("g"));
    assert_eq!(w1.gpu, GpuClaim::Whole(vec![2, 3]));
    assert_eq!(w1.gang.as_deref(), Some("ml/train"));
    assert_eq!(w1.priority, 7);
    assert_eq!(
        s.pod("ml/s").unwrap().gpu,
        GpuClaim::Share {
            index: 5,
            milli: 250
        }
    );
    assert_eq!(s.pod("ml/s").unwrap().gang.as_deref(), Some("ml/v"));
    let train = s.gangs.iter().find(|g| g.key == "ml/train").unwrap();
    assert_eq!(
        (train.min_member, train.total, train.departed),
        (3, Some(3), 1)
    );
    let kg = s.gangs.iter().find(|g| g.key == "ml/kg").unwrap();
    assert_eq!(kg.min_member, 2);
    assert_eq!(check(&s), Ok(()), "{}", describe(&violations(&s)));

    // The same pods with a device handed out twice and the gang one member short.
    let pods = [gpu("w0", "0,1"), gpu("w1", "1,2")];
    let s = Snapshot::from_k8s(&[node("g", "8")], &pods, &mins).unwrap();
    let v = violations(&s);
    assert!(
        v.iter()
            .any(|v| matches!(v, Violation::DeviceTwice { index: 1, .. })),
        "{}",
        describe(&v)
    );
    assert!(
        v.iter().any(|v| matches!(
            v,
            Violation::GangPartial {
                bound: 2,
                min_member: 3,
                ..
            }
        )),
        "{}",
        describe(&v)
    );
    let bad = Snapshot::from_k8s(&[], &[gpu("w0", "zero")], &mins).unwrap_err();
    assert!(
        bad.to_string().contains("Pod ml/w0") && bad.to_string().contains(GPU_INDICES_ANNOTATION),
        "{bad}"
    );
}

#[test]
fn a_gpu_pod_kestrel_bound_without_indices_is_reported_and_kube_schedulers_is_not() {
    let bound = |name: &str, scheduler: Option<&str>, annotations: serde_json::Value| {
        let mut p = pod(json!({
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"nodeName": "g",
                     "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        }));
        p.spec.as_mut().unwrap().scheduler_name = scheduler.map(String::from);
        p
    };
    let claimed = pod(json!({
        "metadata": {"name": "claimed"},
        "spec": {"nodeName": "g", "resourceClaims": [{"name": "gpu", "resourceClaimName": "shared-gpu"}],
                 "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }));
    let pods = [
        bound("k", Some("kestrel"), json!({GPU_INDICES_ANNOTATION: "0"})),
        bound("d", Some("default-scheduler"), json!({})),
        bound("unset", None, json!({})),
        bound("cpu", Some("kestrel"), json!({})),
        claimed,
    ];
    let mut pods = pods.to_vec();
    // A CPU pod of Kestrel's needs no indices.
    let containers = &mut pods[3].spec.as_mut().unwrap().containers;
    containers[0].resources = None;
    let s = Snapshot::from_k8s(&[node("g", "8")], &pods, &BTreeMap::new()).unwrap();
    assert_eq!(
        s.pod("ml/unset").unwrap().scheduler.as_deref(),
        Some(KUBE_SCHEDULER)
    );
    assert_eq!(
        s.pod("ml/claimed").unwrap().resource_claims,
        vec!["ml/shared-gpu"]
    );
    assert_eq!(check(&s), Ok(()), "{}", describe(&violations(&s)));
    pods.push(bound("bare", Some("kestrel"), json!({})));
    let s = Snapshot::from_k8s(&[node("g", "8")], &pods, &BTreeMap::new()).unwrap();
    let v = violations(&s);
    assert!(
        matches!(&v[..], [Violation::GpuWithoutIndices { pod, .. }] if pod == "ml/bare"),
        "{}",
        describe(&v)
    );
}

#[test]
fn what_the_stranded_rule_reads_from_api_objects() {
    let mut cordoned = node("c", "4");
    cordoned.spec = Some(serde_json::from_value(json!({"unschedulable": true})).unwrap());
    let pods = [
        pod(json!({"metadata": {"name": "preemptor"}, "status": {"nominatedNodeName": "g"}})),
        pod(json!({"metadata": {"name": "gated"},
                   "spec": {"schedulingGates": [{"name": "example.com/wait"}]}})),
        pod(json!({"metadata": {"name": "half", "annotations": {"gpu-fraction": "0.5"}}})),
        pod(json!({"metadata": {"name": "mem", "annotations": {"gpu-memory": "20480"}}})),
        pod(json!({"metadata": {"name": "numa",
                   "annotations": {"kestrel.dev/numa-policy": "single-numa-node"}}})),
    ];
    let s = Snapshot::from_k8s(&[node("g", "8"), cordoned], &pods, &BTreeMap::new()).unwrap();
    assert!(s.nodes[0].reserved && !s.nodes[0].unschedulable);
    assert!(s.nodes[1].unschedulable && !s.nodes[1].reserved);
    assert!(s.pod("ml/gated").unwrap().gated);
    assert_eq!(
        s.pod("ml/half").unwrap().gpu_share,
        Some(ShareRequest::Milli(500))
    );
    assert_eq!(
        s.pod("ml/mem").unwrap().gpu_share,
        Some(ShareRequest::MemoryMib(20_480))
    );
    assert!(s.pod("ml/numa").unwrap().single_numa_node);
    // Every node is reserved or cordoned: none is empty for the others.
    assert!(stranded(&s).is_empty(), "{:?}", stranded(&s));
}

#[test]
fn nvidia_gpu_served_by_dra_is_checked_through_the_claim_the_pod_status_names() {
    use k8s_openapi::api::resource::v1::ResourceClaim;
    let served = |name: &str, claim: &str| {
        pod(json!({
            "metadata": {"name": name, "annotations": {GPU_INDICES_ANNOTATION: "0,1"}},
            "spec": {"nodeName": "d",
                     "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
            "status": {"extendedResourceClaimStatus": {"resourceClaimName": claim,
                "requestMappings": [{"containerName": "c", "resourceName": "nvidia.com/gpu",
                                     "requestName": "container-0-request-0"}]}},
        }))
    };
    let claim = |name: &str, devices: &[&str], pod: &str| -> ResourceClaim {
        let results: Vec<serde_json::Value> = devices
            .iter()
            .map(|d| {
                json!({"request": "container-0-request-0", "driver": "gpu.nvidia.com",
                            "pool": "d", "device": d})
            })
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": results},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": ["d"]}]}]}},
                "reservedFor": [{"resource": "pods", "name": pod, "uid": "u"}]},
        }))
        .unwrap()
    };
    // A DRA-only node: no nvidia.com/gpu in its allocatable.
    let pods = [served("a", "a-x"), served("b", "b-x")];
    let s = Snapshot::from_k8s(&[node("d", "0")], &pods, &BTreeMap::new()).unwrap();
    assert_eq!(check(&s), Ok(()), "{}", describe(&violations(&s)));
    let ok = [
        claim("a-x", &["gpu-0", "gpu-1"], "a"),
        claim("b-x", &["gpu-2", "gpu-3"], "b"),
    ];
    let (claims, users) = claims_from_k8s(&ok, &pods);
    assert_eq!(users.len(), 2);
    assert_eq!(users[0].claims, vec!["ml/a-x".to_string()]);
    assert_eq!(check_claims(&claims, &users), Ok(()));
    // A device in both claims, and a claim that is not reserved for its pod.
    let bad = [
        claim("a-x", &["gpu-0", "gpu-1"], "a"),
        claim("b-x", &["gpu-1", "gpu-2"], "someone-else"),
    ];
    let (claims, users) = claims_from_k8s(&bad, &pods);
    let v = check_claims(&claims, &users).unwrap_err();
    assert_eq!(v.len(), 2, "{}", describe(&v));
}
