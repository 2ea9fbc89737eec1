//! Volumes on a real kube-apiserver: the test plays the volume controller and a CSI
//! provisioner (it binds claims and creates PersistentVolumes), Kestrel schedules the pods
//! that mount them as kube-scheduler's volume binding does. A claim bound to a zonal
//! volume keeps its pod in the zone; a WaitForFirstConsumer claim gets the node Kestrel
//! chose (`volume.kubernetes.io/selected-node`) and the pod is bound only once the claim
//! is; a missing claim, an unbound `Immediate` claim and a ReadWriteOncePod claim in use
//! keep their pods pending with kube-scheduler's reasons, until that changes; a node's
//! CSINode limits the volumes of its driver it attaches.

#![allow(clippy::await_holding_lock)]

mod live;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use live::*;
use serde_json::json;
use std::time::Duration;

const NS: &str = "volumes";
const SCHEDULER: &str = "kestrel-volumes";
const PROVISIONER: &str = "csi.testenv.kestrel.dev";

fn pod(name: &str, claim: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "schedulerName": SCHEDULER,
            "nodeSelector": {POOL_LABEL: NS},
            "terminationGracePeriodSeconds": 0,
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
            "containers": [{"name": "main", "image": "trainer:1",
                            "resources": {"requests": {"cpu": "1"}}}],
        },
    }))
    .expect("a Pod")
}

/// A PersistentVolume (with a required node affinity on `key` = `value`, when given),
/// bound to claim `claim`.
fn volume(name: &str, claim: &str, affinity: Option<(&str, &str)>) -> serde_json::Value {
    let mut pv = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": PROVISIONER, "volumeHandle": name},
            "claimRef": {"namespace": NS, "name": claim},
        },
    });
    if let Some((key, value)) = affinity {
        pv["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}]}});
    }
    pv
}

/// A claim; `bound_to`: bound to that volume already, as the volume controller leaves it.
fn claim(name: &str, class: &str, modes: &[&str], bound_to: Option<&str>) -> serde_json::Value {
    let mut pvc = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "storageClassName": class,
            "accessModes": modes,
            "resources": {"requests": {"storage": "10Gi"}},
        },
    });
    if let Some(pv) = bound_to {
        pvc["spec"]["volumeName"] = json!(pv);
        pvc["metadata"]["annotations"] = json!({"pv.kubernetes.io/bind-completed": "yes"});
    }
    pvc
}

async fn apply(client: &kube::Client, objects: &[serde_json::Value]) {
    let text = objects
        .iter()
        .map(|o| serde_json::to_string(o).unwrap())
        .collect::<Vec<_>>()
        .join("\n---\n");
    kestrel_testenv::apply_yaml(client, &text, false)
        .await
        .expect("applying storage objects");
}

/// The pod's `PodScheduled=False` message, once it has one that contains `part`.
async fn pending_because(client: &kube::Client, name: &str, part: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    kestrel_testenv::eventually(
        Duration::from_secs(30),
        &format!("{name} pending because {part}"),
        || async {
            let pod = pods.get(name).await.ok()?;
            if node_of(&pod).is_some() {
                panic!("{name} was bound to {:?}", node_of(&pod));
            }
            let message = pod
                .status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")?
                .message?;
            message.contains(part).then_some(message)
        },
    )
    .await
}

async fn node_when_bound(client: &kube::Client, name: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    kestrel_testenv::eventually(
        Duration::from_secs(60),
        &format!("{name} bound"),
        || async {
            let pod = pods.get(name).await.ok()?;
            node_of(&pod).map(str::to_string)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_go_where_their_volumes_are_and_wait_for_claims_to_be_provisioned() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    create_namespace(&client, NS).await;
    // Three nodes: 0 and 1 in zone a, 2 in zone b.
    let nodes = (0..3)
        .map(|i| {
            let zone = if i < 2 { "a" } else { "b" };
            kestrel_testenv::gpu_node(
                &format!("{NS}-{i}"),
                0,
                &[(POOL_LABEL, NS), ("topology.kubernetes.io/zone", zone)],
            )
        })
        .collect();
    kestrel_testenv::create_gpu_nodes(&client, nodes).await;
    let zone_b = format!("{NS}-2");
    apply(
        &client,
        &[
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                   "metadata": {"name": "volumes-wffc"}, "provisioner": PROVISIONER,
                   "volumeBindingMode": "WaitForFirstConsumer"}),
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                   "metadata": {"name": "volumes-immediate"}, "provisioner": PROVISIONER,
                   "volumeBindingMode": "Immediate"}),
            volume(
                "volumes-zonal-b",
                "dataset",
                Some(("topology.kubernetes.io/zone", "b")),
            ),
            claim(
                "dataset",
                "volumes-immediate",
                &["ReadWriteMany"],
                Some("volumes-zonal-b"),
            ),
            claim("scratch", "volumes-wffc", &["ReadWriteOnce"], None),
            claim("later", "volumes-immediate", &["ReadWriteOnce"], None),
            volume("volumes-solo", "solo", None),
            claim(
                "solo",
                "volumes-immediate",
                &["ReadWriteOncePod"],
                Some("volumes-solo"),
            ),
        ],
    )
    .await;
    let _kestrel = env.kestrel(SCHEDULER, &["--scheduler-name", SCHEDULER]);

    // A bound zonal volume: its pod goes to the one node of zone b.
    create_pods(&client, vec![pod("reader", "dataset")]).await;
    assert_eq!(node_when_bound(&client, "reader").await, zone_b);

    // WaitForFirstConsumer: Kestrel selects a node on the claim; the pod is not bound
    // until the claim is, which the test (as the provisioner) does a while later.
    create_pods(&client, vec![pod("writer", "scratch")]).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let selected = kestrel_testenv::eventually(
        Duration::from_secs(30),
        "scratch's node selected",
        || async {
            let pvc = claims.get("scratch").await.ok()?;
            pvc.metadata
                .annotations?
                .get("volume.kubernetes.io/selected-node")
                .cloned()
        },
    )
    .await;
    assert!(selected.starts_with(&format!("{NS}-")), "{selected}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let writer = pods.get("writer").await.expect("writer");
    assert_eq!(node_of(&writer), None, "bound before its claim was");
    let provisioned = volume(
        "volumes-scratch",
        "scratch",
        Some(("kubernetes.io/hostname", &selected)),
    );
    Api::<PersistentVolume>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(provisioned).unwrap(),
        )
        .await
        .expect("creating the provisioned volume");
    claims
        .patch(
            "scratch",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                "spec": {"volumeName": "volumes-scratch"},
            })),
        )
        .await
        .expect("binding the claim");
    assert_eq!(node_when_bound(&client, "writer").await, selected);

    // A claim that does not exist yet: pending with kube-scheduler's reason; once created
    // (bound to a volume of zone a), the pod goes there.
    create_pods(&client, vec![pod("orphan", "nope")]).await;
    pending_because(
        &client,
        "orphan",
        "persistentvolumeclaim \"nope\" not found",
    )
    .await;
    apply(
        &client,
        &[
            volume(
                "volumes-zonal-a",
                "nope",
                Some(("topology.kubernetes.io/zone", "a")),
            ),
            claim(
                "nope",
                "volumes-immediate",
                &["ReadWriteOnce"],
                Some("volumes-zonal-a"),
            ),
        ],
    )
    .await;
    let orphan_node = node_when_bound(&client, "orphan").await;
    assert_ne!(orphan_node, zone_b, "zone a only");

    // An unbound Immediate claim: pending.
    create_pods(&client, vec![pod("waiting", "later")]).await;
    pending_because(
        &client,
        "waiting",
        "pod has unbound immediate PersistentVolumeClaims",
    )
    .await;

    // ReadWriteOncePod: one pod at a time.
    create_pods(&client, vec![pod("solo-1", "solo")]).await;
    node_when_bound(&client, "solo-1").await;
    create_pods(&client, vec![pod("solo-2", "solo")]).await;
    pending_because(&client, "solo-2", "ReadWriteOncePod access mode").await;
    pods.delete("solo-1", &DeleteParams::default().grace_period(0))
        .await
        .expect("deleting solo-1");
    node_when_bound(&client, "solo-2").await;

    // CSI volume limits: zone b's node may attach one volume of the driver, and reader's
    // already is there (other pods' may be too); a second zonal-b pod waits until the
    // CSINode allows more.
    let csi_node = |count: u32| {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
               "metadata": {"name": zone_b},
               "spec": {"drivers": [{"name": PROVISIONER, "nodeID": zone_b,
                                     "allocatable": {"count": count}}]}})
    };
    apply(
        &client,
        &[
            csi_node(1),
            volume(
                "volumes-zonal-b2",
                "dataset-2",
                Some(("topology.kubernetes.io/zone", "b")),
            ),
            claim(
                "dataset-2",
                "volumes-immediate",
                &["ReadWriteOnce"],
                Some("volumes-zonal-b2"),
            ),
        ],
    )
    .await;
    create_pods(&client, vec![pod("second-b", "dataset-2")]).await;
    pending_because(&client, "second-b", "1 node(s) exceed max volume count").await;
    apply(&client, &[csi_node(8)]).await;
    assert_eq!(node_when_bound(&client, "second-b").await, zone_b);

    // A claim being deleted (held by its protection finalizer): pending.
    claims
        .delete("dataset", &DeleteParams::default())
        .await
        .expect("deleting dataset");
    create_pods(&client, vec![pod("late-reader", "dataset")]).await;
    pending_because(
        &client,
        "late-reader",
        "persistentvolumeclaim \"dataset\" is being deleted",
    )
    .await;
    assert_invariants(&client).await;

    let _ = pods
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await;
    // No volume controllers run here to take the protection finalizers off.
    let unprotect = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    for pvc in ["dataset", "dataset-2", "scratch", "later", "solo", "nope"] {
        let _ = claims.patch(pvc, &PatchParams::default(), &unprotect).await;
        let _ = claims.delete(pvc, &DeleteParams::default()).await;
    }
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    for pv in [
        "volumes-zonal-b",
        "volumes-zonal-b2",
        "volumes-zonal-a",
        "volumes-solo",
        "volumes-scratch",
    ] {
        let _ = volumes.patch(pv, &PatchParams::default(), &unprotect).await;
        let _ = volumes.delete(pv, &DeleteParams::default()).await;
    }
    let _ = Api::<k8s_openapi::api::storage::v1::CSINode>::all(client.clone())
        .delete(&zone_b, &DeleteParams::default())
        .await;
    cleanup(&client, &format!("{NS}-"), &[NS]).await;
}
