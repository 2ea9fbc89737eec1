//! Volumes on a real kube-apiserver: the test plays the volume controller and a CSI
//! provisioner (it binds claims and creates PersistentVolumes), Kestrel schedules the pods
//! that mount them as kube-scheduler's volume binding does. A claim bound to a zonal
//! volume keeps its pod in the zone; a WaitForFirstConsumer claim gets the node Kestrel
//! chose (`volume.kubernetes.io/selected-node`) and the pod is bound only once the claim
//! is; a missing claim, an unbound `Immediate` claim and a ReadWriteOncePod claim in use
//! keep their pods pending with kube-scheduler's reasons, until that changes; a node's
//! CSINode limits the volumes of its driver it attaches. Local volumes (no provisioner)
//! are bound as kube-scheduler binds them beside it, with kube-controller-manager's volume
//! controller completing both schedulers' bindings.

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
async fn pending_because(client: &kube::Client, ns: &str, name: &str, part: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
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

async fn node_when_bound(client: &kube::Client, ns: &str, name: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
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
    assert_eq!(node_when_bound(&client, NS, "reader").await, zone_b);

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
    assert_eq!(node_when_bound(&client, NS, "writer").await, selected);

    // A claim that does not exist yet: pending with kube-scheduler's reason; once created
    // (bound to a volume of zone a), the pod goes there.
    create_pods(&client, vec![pod("orphan", "nope")]).await;
    pending_because(
        &client,
        NS,
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
    let orphan_node = node_when_bound(&client, NS, "orphan").await;
    assert_ne!(orphan_node, zone_b, "zone a only");

    // An unbound Immediate claim: pending.
    create_pods(&client, vec![pod("waiting", "later")]).await;
    pending_because(
        &client,
        NS,
        "waiting",
        "pod has unbound immediate PersistentVolumeClaims",
    )
    .await;

    // ReadWriteOncePod: one pod at a time.
    create_pods(&client, vec![pod("solo-1", "solo")]).await;
    node_when_bound(&client, NS, "solo-1").await;
    create_pods(&client, vec![pod("solo-2", "solo")]).await;
    pending_because(&client, NS, "solo-2", "ReadWriteOncePod access mode").await;
    pods.delete("solo-1", &DeleteParams::default().grace_period(0))
        .await
        .expect("deleting solo-1");
    node_when_bound(&client, NS, "solo-2").await;

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
    pending_because(&client, NS, "second-b", "1 node(s) exceed max volume count").await;
    apply(&client, &[csi_node(8)]).await;
    assert_eq!(node_when_bound(&client, NS, "second-b").await, zone_b);

    // A claim being deleted (held by its protection finalizer): pending.
    claims
        .delete("dataset", &DeleteParams::default())
        .await
        .expect("deleting dataset");
    create_pods(&client, vec![pod("late-reader", "dataset")]).await;
    pending_because(
        &client,
        NS,
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
    delete_storage(
        &client,
        NS,
        &["dataset", "dataset-2", "scratch", "later", "solo", "nope"],
        &[
            "volumes-zonal-b",
            "volumes-zonal-b2",
            "volumes-zonal-a",
            "volumes-solo",
            "volumes-scratch",
        ],
    )
    .await;
    let _ = Api::<k8s_openapi::api::storage::v1::CSINode>::all(client.clone())
        .delete(&zone_b, &DeleteParams::default())
        .await;
    cleanup(&client, &format!("{NS}-"), &[NS]).await;
}

/// Deletes claims of `ns` and volumes, their protection finalizers taken off first (no
/// protection controller runs here).
async fn delete_storage(client: &kube::Client, ns: &str, claims: &[&str], volumes: &[&str]) {
    let unprotect = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    let claim_api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    for name in claims {
        let _ = claim_api
            .patch(name, &PatchParams::default(), &unprotect)
            .await;
        let _ = claim_api.delete(name, &DeleteParams::default()).await;
    }
    let volume_api: Api<PersistentVolume> = Api::all(client.clone());
    for name in volumes {
        let _ = volume_api
            .patch(name, &PatchParams::default(), &unprotect)
            .await;
        let _ = volume_api.delete(name, &DeleteParams::default()).await;
    }
}

/// What a scheduler wrote on a volume it bound a claim to: the claim reference's kind,
/// apiVersion and namespace, and the `pv.kubernetes.io/bound-by-controller` annotation.
type Written = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// kube-controller-manager's volume controller and kube-scheduler, run for one test and
/// stopped when it ends (a test that panics included).
struct VolumeControllerAndKubeScheduler<'a>(&'a kestrel_testenv::ControlPlane);

impl<'a> VolumeControllerAndKubeScheduler<'a> {
    fn start(cp: &'a kestrel_testenv::ControlPlane) -> Self {
        cp.start_controller_manager(&["persistentvolume-binder-controller"], &[]);
        cp.start_kube_scheduler(&[]);
        VolumeControllerAndKubeScheduler(cp)
    }
}

impl Drop for VolumeControllerAndKubeScheduler<'_> {
    fn drop(&mut self) {
        let cp = self.0;
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cp.stop_kube_scheduler()));
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cp.stop_controller_manager()
        }));
    }
}

/// Local volumes (a StorageClass without a provisioner, `WaitForFirstConsumer`): Kestrel
/// binds each claim to a volume of the node it chooses, as kube-scheduler does beside it
/// on nodes of their own, and kube-controller-manager's volume controller completes the
/// bindings both wrote. Each scheduler: two pods with a claim each on the two nodes with a
/// disk, the volumes written exactly alike; a third pending with kube-scheduler's reason
/// until a disk is added.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_volumes_are_bound_where_their_pods_go_as_kube_scheduler_binds_them() {
    const NS: &str = "static-volumes";
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    create_namespace(&client, NS).await;
    let _controllers = VolumeControllerAndKubeScheduler::start(&env.cp);
    // Pool "k" for Kestrel, pool "d" for kube-scheduler: two nodes each.
    let nodes = ["k", "d"]
        .iter()
        .flat_map(|pool| {
            (0..2).map(move |i| {
                kestrel_testenv::gpu_node(
                    &format!("{NS}-{pool}-{i}"),
                    0,
                    &[(POOL_LABEL, &format!("{NS}-{pool}"))],
                )
            })
        })
        .collect();
    kestrel_testenv::create_gpu_nodes(&client, nodes).await;
    let local_volume = |name: &str, node: &str| {
        json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name},
            "spec": {
                "storageClassName": "static-local",
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "local": {"path": "/mnt/disks/1"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
            },
        })
    };
    let local_claim = |name: &str| {
        json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"storageClassName": "static-local", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "5Gi"}}},
        })
    };
    let mut objects = vec![json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "static-local"},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
    })];
    for pool in ["k", "d"] {
        for i in 0..2 {
            objects.push(local_volume(
                &format!("{NS}-{pool}-{i}"),
                &format!("{NS}-{pool}-{i}"),
            ));
        }
        for i in 0..3 {
            objects.push(local_claim(&format!("{pool}-c{i}")));
        }
    }
    apply(&client, &objects).await;
    let _kestrel = env.kestrel(SCHEDULER, &["--scheduler-name", SCHEDULER]);
    let pod = |pool: &str, i: usize| -> Pod {
        let scheduler = if pool == "k" {
            SCHEDULER
        } else {
            "default-scheduler"
        };
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{pool}-p{i}"), "namespace": NS},
            "spec": {
                "schedulerName": scheduler,
                "nodeSelector": {POOL_LABEL: format!("{NS}-{pool}")},
                "terminationGracePeriodSeconds": 0,
                "volumes": [{"name": "data",
                             "persistentVolumeClaim": {"claimName": format!("{pool}-c{i}")}}],
                "containers": [{"name": "main", "image": "trainer:1",
                                "resources": {"requests": {"cpu": "1"}}}],
            },
        }))
        .expect("a Pod")
    };
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    // What each scheduler wrote on the volume its claim was bound to, with the names of
    // its pool taken out.
    let mut written: Vec<(&str, Written)> = Vec::new();
    for pool in ["k", "d"] {
        create_pods(&client, vec![pod(pool, 0), pod(pool, 1)]).await;
        let mut nodes = Vec::new();
        for i in 0..2 {
            let node = node_when_bound(&client, NS, &format!("{pool}-p{i}")).await;
            let claim = claims.get(&format!("{pool}-c{i}")).await.expect("claim");
            let volume = claim
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.clone())
                .expect("a pod is bound only once its claim is");
            assert_eq!(
                volume, node,
                "{pool}-p{i}: the claim's volume is its node's disk"
            );
            let pv = volumes.get(&volume).await.expect("volume");
            let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.clone()).unwrap();
            assert_eq!(
                claim_ref.uid, claim.metadata.uid,
                "the claim's uid on the volume"
            );
            let annotations = pv.metadata.annotations.clone().unwrap_or_default();
            written.push((
                pool,
                (
                    claim_ref.kind,
                    claim_ref.api_version,
                    claim_ref.namespace,
                    annotations
                        .get("pv.kubernetes.io/bound-by-controller")
                        .cloned(),
                ),
            ));
            nodes.push(node);
        }
        nodes.sort();
        nodes.dedup();
        assert_eq!(nodes.len(), 2, "{pool}: one disk per claim, one per node");
    }
    let by = |pool: &str| -> Vec<&Written> {
        written
            .iter()
            .filter(|w| w.0 == pool)
            .map(|w| &w.1)
            .collect()
    };
    let (kestrel, kube_scheduler) = (by("k"), by("d"));
    assert_eq!(kestrel.len(), 2);
    assert_eq!(kestrel, kube_scheduler, "the volumes written alike");

    // A third claim: no disk left in either pool, both pending with the same reason; a
    // disk added on node 0 of each pool lets them go there.
    create_pods(&client, vec![pod("k", 2), pod("d", 2)]).await;
    for pool in ["k", "d"] {
        pending_because(
            &client,
            NS,
            &format!("{pool}-p2"),
            "didn't find available persistent volumes to bind",
        )
        .await;
    }
    apply(
        &client,
        &[
            local_volume(&format!("{NS}-k-extra"), &format!("{NS}-k-0")),
            local_volume(&format!("{NS}-d-extra"), &format!("{NS}-d-0")),
        ],
    )
    .await;
    for pool in ["k", "d"] {
        assert_eq!(
            node_when_bound(&client, NS, &format!("{pool}-p2")).await,
            format!("{NS}-{pool}-0")
        );
    }
    assert_invariants(&client).await;

    let _ = pods
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await;
    let claim_names: Vec<String> = claims
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    let volume_names: Vec<String> = volumes
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|v| v.metadata.name)
        .filter(|n| n.starts_with(NS))
        .collect();
    let claim_names: Vec<&str> = claim_names.iter().map(String::as_str).collect();
    let volume_names: Vec<&str> = volume_names.iter().map(String::as_str).collect();
    delete_storage(&client, NS, &claim_names, &volume_names).await;
    cleanup(&client, &format!("{NS}-"), &[NS]).await;
}
