//! Checkpoint-coordinated drains on a real control plane (testenv/): `kestrel drain`
//! creates a NodeMaintenance that `kestrel serve` carries out: cordon, checkpoint requests
//! (one answered, one ignored until the deadline), evictions through the Eviction API
//! with a PodDisruptionBudget refusing then allowing one, a Kestrel restart mid-drain, and
//! the bad input the command refuses.
//!
//! testenv runs no kube-controller-manager, so no disruption controller computes a
//! PodDisruptionBudget's status; the tests write it as that controller would
//! (`observedGeneration`, `disruptionsAllowed`): the API server's eviction check reads
//! only the status, and writing it lets a test choose when the budget allows a disruption.

// The serial lock is held for a whole test on purpose (see live_faults.rs).
#![allow(clippy::await_holding_lock)]

mod live;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kestrel_objects::crds::{NodeMaintenance, NodeMaintenanceSpec};
use kestrel_testenv::FakeKubelet;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use live::*;
use serde_json::json;
use std::process::Output;
use std::time::Duration;

const GRACE: &str = "kestrel.dev/checkpoint-grace";
const REQUEST: &str = "kestrel.dev/checkpoint-request";
const DONE: &str = "kestrel.dev/last-checkpoint";

fn drain_cli(env: &Env, args: &[&str]) -> Output {
    std::process::Command::new(kestrel_bin())
        .arg("drain")
        .args(args)
        .arg("--kubeconfig")
        .arg(&env.cp.kubeconfig)
        .output()
        .expect("running kestrel drain")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

async fn maintenance(client: &kube::Client, name: &str) -> Option<NodeMaintenance> {
    Api::<NodeMaintenance>::all(client.clone())
        .get_opt(name)
        .await
        .expect("reading the NodeMaintenance")
}

/// Waits until the maintenance's phase is `phase`; returns it.
async fn phase_is(client: &kube::Client, name: &str, phase: &str) -> NodeMaintenance {
    eventually(
        Duration::from_secs(30),
        &format!("NodeMaintenance {name} {phase}"),
        || async {
            let nm = maintenance(client, name).await?;
            let now = nm.status.as_ref()?.phase?.as_str();
            (now == phase).then_some(nm)
        },
    )
    .await
}

/// The NodeMaintenances of nodes named with `prefix`.
async fn maintenances_of(client: &kube::Client, prefix: &str) -> Vec<String> {
    Api::<NodeMaintenance>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|nm| nm.spec.node_name.starts_with(prefix))
        .filter_map(|nm| nm.metadata.name)
        .collect()
}

async fn pod(client: &kube::Client, ns: &str, name: &str) -> Option<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .expect("reading a pod")
}

async fn annotate(client: &kube::Client, ns: &str, name: &str, key: &str, value: &str) {
    let patch = json!({"metadata": {"annotations": {key: value}}});
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotating a pod");
}

async fn unschedulable(client: &kube::Client, node: &str) -> bool {
    let node = Api::<Node>::all(client.clone()).get(node).await.unwrap();
    node.spec.and_then(|s| s.unschedulable).unwrap_or(false)
}

/// The status the disruption controller would write: `allowed` disruptions now.
async fn pdb_allows(client: &kube::Client, ns: &str, name: &str, allowed: i32) {
    let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    let pdb = api.get(name).await.unwrap();
    let status = json!({"status": {
        "observedGeneration": pdb.metadata.generation,
        "disruptionsAllowed": allowed,
        "currentHealthy": 1, "desiredHealthy": 1 - allowed, "expectedPods": 1,
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("writing the PodDisruptionBudget's status");
}

/// Bad input first (nothing created), then a drain: the answered checkpoint lets its pod
/// go before the deadline, the ignored one is evicted at the deadline, a
/// PodDisruptionBudget refuses an eviction (counted, tried again) until it allows one;
/// then `--end` uncordons the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_waits_for_checkpoints_and_respects_disruption_budgets() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler) = ("drain", "kestrel-drain");
    let node = "drain-0";
    create_namespace(&client, ns).await;
    create_pool_nodes(&client, ns, 0, 1).await;
    let _kubelet = FakeKubelet::start(client.clone(), "drain-");
    let kestrel = env.kestrel(scheduler, &["--scheduler-name", scheduler]);
    let nms: Api<NodeMaintenance> = Api::all(client.clone());

    // A node that does not exist: refused by the command, nothing created.
    let out = drain_cli(env, &["no-such-node"]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("node no-such-node does not exist")
            && text(&out).contains("spec.nodeName"),
        "{}",
        text(&out)
    );
    assert!(maintenances_of(&client, "drain-").await.is_empty());

    let pods = vec![
        gpu_pod(ns, "answers", scheduler, 4, &[], &[(GRACE, "10m")]),
        gpu_pod(ns, "ignores", scheduler, 2, &[], &[(GRACE, "10m")]),
        gpu_pod(ns, "guarded", scheduler, 1, &[("app", "guarded")], &[]),
    ];
    create_pods(&client, pods).await;
    wait_bound(&client, ns, 3, Duration::from_secs(30)).await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "guarded"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    pdb_allows(&client, ns, "guarded", 0).await;

    let out = drain_cli(env, &[node, "--checkpoint-deadline", "8s", "--no-wait"]);
    assert!(out.status.success(), "{}", text(&out));
    let name = "maintenance-drain-0";
    let nm = phase_is(&client, name, "Checkpointing").await;
    let requested = nm.status.unwrap().checkpoint_requested_at.unwrap();
    let requested_ms = requested.parse::<Timestamp>().unwrap().as_millisecond();
    assert!(unschedulable(&client, node).await);

    // A second maintenance of the node: refused by the command and, created directly, on
    // its status, naming both objects.
    let out = drain_cli(env, &[node, "--name", "second"]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("already under maintenance by NodeMaintenance maintenance-drain-0")
            && text(&out).contains("NodeMaintenance second was not created"),
        "{}",
        text(&out)
    );
    assert!(maintenance(&client, "second").await.is_none());
    let direct = NodeMaintenance::new(
        "direct",
        NodeMaintenanceSpec {
            node_name: node.into(),
            ..Default::default()
        },
    );
    nms.create(&PostParams::default(), &direct).await.unwrap();
    let refused = phase_is(&client, "direct", "Refused").await;
    let message = &refused.status.unwrap().conditions[0].message;
    assert!(
        message.contains("NodeMaintenance direct: spec.nodeName")
            && message.contains("NodeMaintenance maintenance-drain-0"),
        "{message}"
    );
    nms.delete("direct", &DeleteParams::default())
        .await
        .unwrap();
    // One for a node that does not exist, created directly: refused on its status.
    let ghost = NodeMaintenance::new(
        "ghost",
        NodeMaintenanceSpec {
            node_name: "no-such-node".into(),
            ..Default::default()
        },
    );
    nms.create(&PostParams::default(), &ghost).await.unwrap();
    let refused = phase_is(&client, "ghost", "Refused").await;
    let condition = &refused.status.unwrap().conditions[0];
    assert_eq!(condition.reason, "NodeNotFound");
    assert!(
        condition
            .message
            .contains("NodeMaintenance ghost: spec.nodeName: node no-such-node does not exist"),
        "{}",
        condition.message
    );
    assert!(refused.metadata.finalizers.is_none_or(|f| f.is_empty()));
    nms.delete("ghost", &DeleteParams::default()).await.unwrap();

    // Both checkpointing pods were asked, with the time in the status.
    for p in ["answers", "ignores"] {
        let pod = pod(&client, ns, p).await.expect("still there");
        assert_eq!(annotation(&pod, REQUEST), Some(requested.as_str()), "{p}");
    }
    // The guarded pod's eviction is refused by its budget, counted and reported.
    eventually(Duration::from_secs(20), "an eviction refused", || async {
        let status = maintenance(&client, name).await?.status?;
        let m = &status.conditions.first()?.message;
        (status.evictions_refused == 1 && m.contains("drain/guarded")).then_some(())
    })
    .await;

    // One answers: it goes before the deadline; the other is still waited for.
    annotate(&client, ns, "answers", DONE, &Timestamp::now().to_string()).await;
    eventually(
        Duration::from_secs(20),
        "the answered pod evicted",
        || async { pod(&client, ns, "answers").await.is_none().then_some(()) },
    )
    .await;
    let at = Timestamp::now().as_millisecond();
    assert!(at < requested_ms + 8_000, "evicted only at the deadline");
    assert!(pod(&client, ns, "ignores").await.is_some());

    // The other never answers: evicted once the deadline passed.
    eventually(
        Duration::from_secs(20),
        "the ignoring pod evicted",
        || async { pod(&client, ns, "ignores").await.is_none().then_some(()) },
    )
    .await;
    assert!(Timestamp::now().as_millisecond() >= requested_ms + 8_000);
    eventually(
        Duration::from_secs(20),
        "only the guarded pod left",
        || async {
            let status = maintenance(&client, name).await?.status?;
            let evicting = status.phase?.as_str() == "Evicting";
            let reason = &status.conditions.first()?.reason;
            (evicting && status.pods_left == 1 && reason == "EvictionsRefused").then_some(())
        },
    )
    .await;
    assert!(pod(&client, ns, "guarded").await.is_some());
    assert_invariants(&client).await;

    // The budget allows one disruption: the last pod goes, the node is drained.
    pdb_allows(&client, ns, "guarded", 1).await;
    let nm = phase_is(&client, name, "Drained").await;
    let status = nm.status.unwrap();
    assert_eq!((status.pods_left, status.evicted), (0, 3));
    assert!(unschedulable(&client, node).await);

    // Each phase it entered is an event on it (`kubectl describe nm`).
    let events: Vec<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
    let reasons: Vec<&str> = events
        .iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter_map(|e| e.reason.as_deref())
        .collect();
    for r in ["AwaitingCheckpoints", "EvictionsRefused", "Drained"] {
        assert!(reasons.contains(&r), "{r} not in {reasons:?}");
    }
    let out = drain_cli(env, &[node, "--end"]);
    assert!(out.status.success(), "{}", text(&out));
    phase_is(&client, name, "Completed").await;
    assert!(!unschedulable(&client, node).await);
    assert_invariants(&client).await;
    assert_eq!(kestrel.log_count("node maintenance: pass failed"), 0);

    nms.delete(name, &DeleteParams::default()).await.unwrap();
    pdbs.delete("guarded", &DeleteParams::default())
        .await
        .unwrap();
    cleanup(&client, "drain-", &[ns]).await;
}

/// Kestrel killed while a drain waits for a checkpoint: the next Kestrel resumes from the
/// NodeMaintenance's status (same request time, not asked again), evicts the pod once it
/// answers, and deleting the maintenance uncordons the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_resumes_after_a_kestrel_restart() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler) = ("resume", "kestrel-resume");
    let node = "resume-0";
    create_namespace(&client, ns).await;
    create_pool_nodes(&client, ns, 0, 2).await;
    let _kubelet = FakeKubelet::start(client.clone(), "resume-");
    let mut kestrel = env.kestrel(scheduler, &["--scheduler-name", scheduler]);
    // A gang of two 8-GPU pods: one on each node.
    let group = format!(
        "apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: PodGroup\nmetadata: {{name: trainer, namespace: {ns}}}\nspec: {{minMember: 2}}\n"
    );
    kestrel_testenv::apply_yaml(&client, &group, false)
        .await
        .unwrap();
    let member = |i: usize| {
        gpu_pod(
            ns,
            &format!("trainer-{i}"),
            scheduler,
            8,
            &[("scheduling.kestrel.dev/pod-group", "trainer")],
            &[(GRACE, "10m")],
        )
    };
    let pods = vec![member(0), member(1)];
    create_pods(&client, pods).await;
    wait_bound(&client, ns, 2, Duration::from_secs(30)).await;

    let out = drain_cli(env, &[node, "--checkpoint-deadline", "10m", "--no-wait"]);
    assert!(out.status.success(), "{}", text(&out));
    let name = "maintenance-resume-0";
    let nm = phase_is(&client, name, "Checkpointing").await;
    let requested = nm.status.unwrap().checkpoint_requested_at.unwrap();
    eventually(Duration::from_secs(20), "both asked", || async {
        let pods = pods_in(&client, ns).await;
        pods.iter()
            .all(|p| annotation(p, REQUEST) == Some(requested.as_str()))
            .then_some(())
    })
    .await;

    kestrel.kill();
    // One member answers while no Kestrel runs; the gang (one member on the other node)
    // waits for the other.
    let pods = pods_in(&client, ns).await;
    let here = pods
        .iter()
        .find(|p| node_of(p) == Some(node))
        .and_then(|p| p.metadata.name.clone())
        .unwrap();
    let there = if here == "trainer-0" {
        "trainer-1"
    } else {
        "trainer-0"
    };
    annotate(&client, ns, there, DONE, &Timestamp::now().to_string()).await;
    let restarted = env.kestrel(&format!("{scheduler}-2"), &["--scheduler-name", scheduler]);
    // The new leader takes the drain up where it was: the same request, one answer left.
    let status = eventually(
        Duration::from_secs(40),
        "one checkpoint awaited",
        || async {
            let status = maintenance(&client, name).await?.status?;
            (status.checkpoints_awaited == 1).then_some(status)
        },
    )
    .await;
    assert_eq!(
        status.checkpoint_requested_at.as_deref(),
        Some(requested.as_str())
    );
    assert_eq!(
        pods_in(&client, ns).await.len(),
        2,
        "a gang member went alone"
    );
    for p in pods_in(&client, ns).await {
        assert_eq!(
            annotation(&p, REQUEST),
            Some(requested.as_str()),
            "asked again"
        );
    }
    annotate(&client, ns, &here, DONE, &Timestamp::now().to_string()).await;
    phase_is(&client, name, "Drained").await;
    assert!(pods_in(&client, ns).await.is_empty(), "the whole gang goes");
    assert!(unschedulable(&client, node).await);
    assert!(!unschedulable(&client, "resume-1").await);
    assert_invariants(&client).await;

    // Deleting the maintenance ends it: the finalizer holds it until the node is uncordoned.
    Api::<NodeMaintenance>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "the maintenance gone", || async {
        maintenance(&client, name).await.is_none().then_some(())
    })
    .await;
    assert!(!unschedulable(&client, node).await);
    assert_eq!(restarted.log_count("node maintenance: pass failed"), 0);
    drop(restarted);
    cleanup(&client, "resume-", &[ns]).await;
}

fn node_label(node: &Node, key: &str) -> Option<String> {
    node.metadata.labels.as_ref()?.get(key).cloned()
}

async fn set_node_label(client: &kube::Client, node: &str, key: &str, value: &str) {
    let patch = json!({"metadata": {"labels": {key: value}}});
    Api::<Node>::all(client.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("labelling a node");
}

/// The GPU Operator hook: a node the operator puts in `wait-for-jobs-required` is drained
/// checkpoint first by a NodeMaintenance of its own, deleted once the operator moves on.
/// Then `kestrel upgrade run`: a plan over the GPU limit is refused with nothing cordoned;
/// a plan of 2-node batches drains each batch, labels it for the upgrader, waits for the
/// done label and uncordons it, never more than 2 nodes cordoned at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_operator_hook_and_upgrade_run() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler) = ("upgrade", "kestrel-upgrade");
    create_namespace(&client, ns).await;
    create_pool_nodes(&client, ns, 0, 3).await;
    let _kubelet = FakeKubelet::start(client.clone(), "upgrade-");
    let kestrel = env.kestrel(
        scheduler,
        &[
            "--scheduler-name",
            scheduler,
            "--gpu-operator-hook",
            "--gpu-operator-checkpoint-deadline",
            "10m",
        ],
    );
    create_pods(
        &client,
        vec![gpu_pod(ns, "job", scheduler, 8, &[], &[(GRACE, "10m")])],
    )
    .await;
    let pods = wait_bound(&client, ns, 1, Duration::from_secs(30)).await;
    let node = node_of(&pods[0]).unwrap().to_string();

    // The operator cordons the node and waits for its jobs.
    let patch = json!({"spec": {"unschedulable": true},
                       "metadata": {"labels": {"nvidia.com/gpu-driver-upgrade-state": "wait-for-jobs-required"}}});
    Api::<Node>::all(client.clone())
        .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let name = format!("gpu-operator-{node}");
    phase_is(&client, &name, "Checkpointing").await;
    eventually(
        Duration::from_secs(20),
        "the job asked to checkpoint",
        || async { annotation(&pod(&client, ns, "job").await?, REQUEST).map(|_| ()) },
    )
    .await;
    annotate(&client, ns, "job", DONE, &Timestamp::now().to_string()).await;
    phase_is(&client, &name, "Drained").await;
    assert!(pod(&client, ns, "job").await.is_none());
    // The operator goes on; once its drain states are over the maintenance goes, and the
    // node stays cordoned: the operator cordoned it and uncordons it itself.
    set_node_label(
        &client,
        &node,
        "nvidia.com/gpu-driver-upgrade-state",
        "pod-restart-required",
    )
    .await;
    eventually(
        Duration::from_secs(20),
        "the hook's maintenance deleted",
        || async { maintenance(&client, &name).await.is_none().then_some(()) },
    )
    .await;
    assert!(unschedulable(&client, &node).await);
    let patch = json!({"spec": {"unschedulable": null},
                       "metadata": {"labels": {"nvidia.com/gpu-driver-upgrade-state": null}}});
    Api::<Node>::all(client.clone())
        .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();

    let upgrade = |extra: &[&str]| {
        let mut command = std::process::Command::new(kestrel_bin());
        command
            .args(["upgrade", "run", "--pool-label", POOL_LABEL, "--pools", ns])
            .args([
                "--set-label",
                "upgrade.test/go=yes",
                "--done-label",
                "upgrade.test/driver=new",
            ])
            .arg("--kubeconfig")
            .arg(&env.cp.kubeconfig)
            .args(extra);
        command
    };
    // Over the GPU limit: refused, nothing cordoned, no maintenance created.
    let out = upgrade(&["--max-nodes", "2", "--max-gpus", "4"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out).contains("node upgrade-0 (pool upgrade) has 8 GPUs, more than --max-gpus 4"),
        "{}",
        text(&out)
    );
    for i in 0..3 {
        assert!(!unschedulable(&client, &format!("upgrade-{i}")).await);
    }
    assert!(maintenances_of(&client, "upgrade-").await.is_empty());

    let mut run = upgrade(&[
        "--max-nodes",
        "2",
        "--max-gpus",
        "16",
        "--checkpoint-deadline",
        "1m",
    ])
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let nodes_api: Api<Node> = Api::all(client.clone());
    let mut most_cordoned = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(status) = run.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "upgrade run not done in 90 s"
        );
        let nodes: Vec<Node> = nodes_api
            .list(&ListParams::default().labels(&format!("{POOL_LABEL}={ns}")))
            .await
            .unwrap()
            .items;
        let cordoned = nodes
            .iter()
            .filter(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.unschedulable)
                    .unwrap_or(false)
            })
            .count();
        most_cordoned = most_cordoned.max(cordoned);
        // The upgrader: a node labelled to go is upgraded (drained and cordoned first).
        for n in &nodes {
            let go = node_label(n, "upgrade.test/go").as_deref() == Some("yes");
            if go && node_label(n, "upgrade.test/driver").is_none() {
                assert!(n
                    .spec
                    .as_ref()
                    .and_then(|s| s.unschedulable)
                    .unwrap_or(false));
                set_node_label(
                    &client,
                    &n.metadata.name.clone().unwrap(),
                    "upgrade.test/driver",
                    "new",
                )
                .await;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let output = run.wait_with_output().unwrap();
    let log = text(&output);
    assert!(status.success(), "{log}");
    assert!(log.contains("2 batches, 3 nodes"), "{log}");
    assert!(most_cordoned <= 2, "{most_cordoned} nodes cordoned at once");
    assert!(most_cordoned >= 1);
    for i in 0..3 {
        let n = nodes_api.get(&format!("upgrade-{i}")).await.unwrap();
        assert_eq!(
            node_label(&n, "upgrade.test/driver").as_deref(),
            Some("new")
        );
        assert!(!unschedulable(&client, &format!("upgrade-{i}")).await);
    }
    assert!(maintenances_of(&client, "upgrade-").await.is_empty());
    // A rerun finds every node done and touches nothing.
    let again = upgrade(&["--max-nodes", "2", "--max-gpus", "16"])
        .output()
        .unwrap();
    assert!(
        text(&again).contains("nothing to upgrade"),
        "{}",
        text(&again)
    );
    assert_invariants(&client).await;
    assert_eq!(kestrel.log_count("node maintenance: pass failed"), 0);
    cleanup(&client, "upgrade-", &[ns]).await;
}

/// A gang evicted by a drain and created again (as its Job controller would) queues at
/// its original place: when the node comes back it starts before an 8-GPU pod that was
/// queued after the gang first was, but has waited longer than the new pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_gang_requeues_at_its_original_place() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler) = ("requeue", "kestrel-requeue");
    create_namespace(&client, ns).await;
    create_pool_nodes(&client, ns, 0, 2).await;
    let _kubelet = FakeKubelet::start(client.clone(), "requeue-");
    let _kestrel = env.kestrel(scheduler, &["--scheduler-name", scheduler]);
    let group = format!(
        "apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: PodGroup\nmetadata: {{name: g, namespace: {ns}}}\nspec: {{minMember: 2}}\n"
    );
    kestrel_testenv::apply_yaml(&client, &group, false)
        .await
        .unwrap();
    let member = |i: usize| {
        gpu_pod(
            ns,
            &format!("g-{i}"),
            scheduler,
            4,
            &[("scheduling.kestrel.dev/pod-group", "g")],
            &[],
        )
    };
    create_pods(&client, vec![gpu_pod(ns, "filler", scheduler, 8, &[], &[])]).await;
    wait_bound(&client, ns, 1, Duration::from_secs(30)).await;
    create_pods(&client, vec![member(0), member(1)]).await;
    let pods = wait_bound(&client, ns, 3, Duration::from_secs(30)).await;
    let node = pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("g-0"))
        .and_then(node_of)
        .unwrap()
        .to_string();
    create_pods(&client, vec![gpu_pod(ns, "later", scheduler, 8, &[], &[])]).await;

    let out = drain_cli(env, &[&node, "--checkpoint-deadline", "0s"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(pod(&client, ns, "g-0").await.is_none() && pod(&client, ns, "g-1").await.is_none());
    create_pods(&client, vec![member(0), member(1)]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let out = drain_cli(env, &[&node, "--end"]);
    assert!(out.status.success(), "{}", text(&out));
    let pods = wait_bound(&client, ns, 3, Duration::from_secs(30)).await;
    let bound: Vec<&str> = pods
        .iter()
        .filter(|p| node_of(p).is_some())
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    assert!(
        bound.contains(&"g-0") && bound.contains(&"g-1") && !bound.contains(&"later"),
        "bound: {bound:?}"
    );
    assert_invariants(&client).await;
    let nms: Api<NodeMaintenance> = Api::all(client.clone());
    nms.delete(&format!("maintenance-{node}"), &DeleteParams::default())
        .await
        .unwrap();
    cleanup(&client, "requeue-", &[ns]).await;
}
