//! Fake GPU nodes: Node objects with capacity, allocatable and a Ready condition, as a
//! kubelet with NVIDIA's device plugin registers them, and the ResourceSlices NVIDIA's DRA
//! driver publishes for a node's GPUs.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// A Ready node with `gpus` `nvidia.com/gpu`, 64 CPUs, 512 GiB and 110 pods, labelled
/// with `labels` and GPU Feature Discovery's product and count.
pub fn gpu_node(name: &str, gpus: u32, labels: &[(&str, &str)]) -> Node {
    let mut l = serde_json::Map::new();
    l.insert("kubernetes.io/hostname".into(), json!(name));
    if gpus > 0 {
        l.insert(
            "nvidia.com/gpu.product".into(),
            json!("NVIDIA-H100-80GB-HBM3"),
        );
        l.insert("nvidia.com/gpu.count".into(), json!(gpus.to_string()));
        l.insert("nvidia.com/gpu.memory".into(), json!("81559"));
    }
    for (k, v) in labels {
        l.insert((*k).into(), json!(v));
    }
    let resources = json!({"cpu": "64", "memory": "512Gi", "pods": "110",
                           "nvidia.com/gpu": gpus.to_string()});
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": l},
        "spec": {},
        "status": {
            "capacity": resources, "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status"}],
        },
    }))
    .expect("a Node")
}

/// The ResourceSlice NVIDIA's DRA driver (`gpu.nvidia.com`) writes for `node`'s `gpus`
/// H100s: one pool named after the node, generation 1, devices `gpu-N` with the driver's
/// attributes and two GPUs per PCIe root.
pub fn nvidia_gpu_slice(node: &str, gpus: u32) -> serde_json::Value {
    let devices: Vec<serde_json::Value> = (0..gpus)
        .map(|i| {
            json!({"name": format!("gpu-{i}"), "attributes": {
                "type": {"string": "gpu"}, "index": {"int": i},
                "uuid": {"string": format!("GPU-{node}-{i}")},
                "productName": {"string": "NVIDIA H100 80GB HBM3"},
                "architecture": {"string": "Hopper"},
                "driverVersion": {"version": "580.65.6"},
                "resource.kubernetes.io/pcieRoot": {"string": format!("pci0000:{:02x}", i / 2)}},
             "capacity": {"memory": {"value": "81559Mi"}}})
        })
        .collect();
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": format!("{node}-gpu.nvidia.com")},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices}})
}

/// Creates the nodes (their status as a kubelet registers it) and sets their taints back
/// to the requested ones, without the `node.kubernetes.io/not-ready` taint the TaintNodesByCondition admission plugin puts on
/// new nodes (the node lifecycle controller would, and there is none here).
pub async fn create_gpu_nodes(client: &kube::Client, nodes: Vec<Node>) {
    let api: Api<Node> = Api::all(client.clone());
    let mut tasks = tokio::task::JoinSet::new();
    for node in nodes {
        let api = api.clone();
        tasks.spawn(async move {
            let name = node.metadata.name.clone().unwrap_or_default();
            let status = json!({"status": node.status});
            let taints =
                json!({"spec": {"taints": node.spec.as_ref().and_then(|s| s.taints.clone())}});
            api.create(&PostParams::default(), &node)
                .await
                .unwrap_or_else(|e| panic!("creating node {name}: {e}"));
            let params = PatchParams::default();
            api.patch_status(&name, &params, &Patch::Merge(&status))
                .await
                .unwrap_or_else(|e| panic!("setting node {name}'s status: {e}"));
            api.patch(&name, &params, &Patch::Merge(&taints))
                .await
                .unwrap_or_else(|e| panic!("clearing node {name}'s taints: {e}"));
        });
        while tasks.len() >= 32 {
            if let Some(r) = tasks.join_next().await {
                r.expect("node task");
            }
        }
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("node task");
    }
}
