//! DRA on a real kube-apiserver with kube-controller-manager's resourceclaim-controller:
//! the test plays NVIDIA's DRA driver (it publishes ResourceSlices as the driver writes
//! them), Kestrel allocates the claims. Checked on what the API server holds by the shared
//! checker (every bound pod's claims allocated on its node and reserved for it, no device in
//! two claims), and a claim no device matches keeps its pod pending with its reason.

#![allow(clippy::await_holding_lock)]

mod live;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, DeleteParams, ListParams};
use live::*;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const NS: &str = "dra";
const SCHEDULER: &str = "kestrel-dra";

fn slice(node: &str, gpus: u32) -> serde_json::Value {
    let devices: Vec<serde_json::Value> = (0..gpus)
        .map(|i| {
            json!({
                "name": format!("gpu-{i}"),
                "attributes": {
                    "type": {"string": "gpu"},
                    "index": {"int": i},
                    "uuid": {"string": format!("GPU-{node}-{i}")},
                    "productName": {"string": "NVIDIA H100 80GB HBM3"},
                    "driverVersion": {"version": "580.65.6"},
                    "resource.kubernetes.io/pcieRoot": {"string": format!("pci0000:{:02x}", i / 2)},
                },
                "capacity": {"memory": {"value": "81559Mi"}},
            })
        })
        .collect();
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": format!("{node}-gpu.nvidia.com")},
        "spec": {
            "driver": "gpu.nvidia.com", "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    })
}

fn claim_pod(name: &str, claim: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "schedulerName": SCHEDULER,
            "nodeSelector": {POOL_LABEL: NS},
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [claim],
            "containers": [{"name": "main", "image": "trainer:1",
                            "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}}],
        },
    }))
    .expect("a Pod")
}

async fn apply(client: &kube::Client, objects: &[serde_json::Value]) {
    let text = objects
        .iter()
        .map(|o| serde_json::to_string(o).unwrap())
        .collect::<Vec<_>>()
        .join("\n---\n");
    kestrel_testenv::apply_yaml(client, &text, false)
        .await
        .expect("applying DRA objects");
}

/// The namespace's claims by name, as the invariant checker reads them.
async fn claims(client: &kube::Client) -> BTreeMap<String, kestrel_invariants::ClaimView> {
    let items = Api::<ResourceClaim>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .expect("listing claims")
        .items;
    kestrel_invariants::claims_from_k8s(&items, &[])
        .0
        .into_iter()
        .map(|c| (c.key.trim_start_matches("dra/").to_string(), c))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_are_allocated_on_the_pods_node_before_the_bind() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    create_namespace(&client, NS).await;
    env.cp
        .start_controller_manager(&["resourceclaim-controller"], &[]);
    // Two nodes with no nvidia.com/gpu: their 4 GPUs each are published through DRA.
    let nodes = (0..2)
        .map(|i| kestrel_testenv::gpu_node(&format!("{NS}-{i}"), 0, &[(POOL_LABEL, NS)]))
        .collect();
    kestrel_testenv::create_gpu_nodes(&client, nodes).await;
    apply(
        &client,
        &[
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                   "metadata": {"name": "gpu.nvidia.com"},
                   "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}}),
            slice(&format!("{NS}-0"), 4),
            slice(&format!("{NS}-1"), 4),
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                   "metadata": {"name": "one-gpu", "namespace": NS},
                   "spec": {"spec": {"devices": {"requests": [
                       {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}}),
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                   "metadata": {"name": "shared", "namespace": NS},
                   "spec": {"devices": {"requests": [
                       {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]}}}),
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                   "metadata": {"name": "b200", "namespace": NS},
                   "spec": {"devices": {"requests": [
                       {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
                        "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'"}}]}}]}}}),
        ],
    )
    .await;
    let _kestrel = env.kestrel(SCHEDULER, &["--scheduler-name", SCHEDULER]);

    // Six pods with a claim each from the template, two sharing one 2-GPU claim: 8 GPUs.
    let mut pods: Vec<Pod> = (0..6)
        .map(|i| {
            claim_pod(
                &format!("one-{i}"),
                json!({"name": "gpu", "resourceClaimTemplateName": "one-gpu"}),
            )
        })
        .collect();
    for name in ["shared-a", "shared-b"] {
        pods.push(claim_pod(
            name,
            json!({"name": "gpu", "resourceClaimName": "shared"}),
        ));
    }
    create_pods(&client, pods).await;
    let bound = wait_bound(&client, NS, 8, Duration::from_secs(60)).await;
    let node_of_pod = |name: &str| {
        bound
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .and_then(|p| node_of(p).map(str::to_string))
    };
    assert_eq!(
        node_of_pod("shared-a"),
        node_of_pod("shared-b"),
        "a shared claim's pods go where it is"
    );
    assert_invariants(&client).await;
    let all = claims(&client).await;
    let shared = &all["shared"];
    assert!(shared.node.is_some());
    assert_eq!(shared.devices.len(), 2);
    assert_eq!(
        shared.reserved_for.iter().cloned().collect::<BTreeSet<_>>(),
        BTreeSet::from(["shared-a".to_string(), "shared-b".to_string()])
    );
    let allocated: usize = all
        .values()
        .filter(|c| c.node.is_some())
        .map(|c| c.devices.len())
        .sum();
    assert_eq!(allocated, 8, "6 one-GPU claims and the shared 2-GPU claim");

    // No device matches: pending, told why in kube-scheduler's words and which request.
    create_pods(
        &client,
        vec![claim_pod(
            "b200",
            json!({"name": "gpu", "resourceClaimName": "b200"}),
        )],
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let message =
        kestrel_testenv::eventually(Duration::from_secs(30), "b200 explained", || async {
            let pod = pods.get("b200").await.ok()?;
            let condition = pod
                .status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
            condition.message
        })
        .await;
    assert!(
        message.contains(
            "cannot allocate all claims (ResourceClaim dra/b200 request gpu: no device matches)"
        ),
        "{message}"
    );
    // A ninth GPU pod waits too: every device is taken.
    create_pods(
        &client,
        vec![claim_pod(
            "late",
            json!({"name": "gpu", "resourceClaimTemplateName": "one-gpu"}),
        )],
    )
    .await;
    let message =
        kestrel_testenv::eventually(Duration::from_secs(30), "late explained", || async {
            let pod = pods.get("late").await.ok()?;
            pod.status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")?
                .message
        })
        .await;
    assert!(
        message.contains("2 cannot allocate all claims"),
        "{message}"
    );

    // One pod is deleted: its claim goes with it, and the late pod takes the device.
    pods.delete("one-0", &DeleteParams::default().grace_period(0))
        .await
        .expect("deleting one-0");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while node_of(&pods.get("late").await.expect("late")).is_none() {
        if tokio::time::Instant::now() > deadline {
            let state: Vec<String> = claims(&client)
                .await
                .iter()
                .map(|(n, c)| {
                    format!(
                        "{n}: {:?} {:?} reserved {:?}",
                        c.node, c.devices, c.reserved_for
                    )
                })
                .collect();
            let late = pods.get("late").await.expect("late");
            panic!(
                "late not bound after one-0 ended: {:?}\nclaims:\n{}",
                late.status.and_then(|s| s.conditions),
                state.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_invariants(&client).await;

    env.cp.stop_controller_manager();
    let _ = pods
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await;
    let _ = Api::<ResourceClaim>::namespaced(client.clone(), NS)
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    let _ = Api::<k8s_openapi::api::resource::v1::ResourceSlice>::all(client.clone())
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    cleanup(&client, &format!("{NS}-"), &[NS]).await;
}
