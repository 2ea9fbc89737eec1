//! `kestrel serve` on a real kube-apiserver (testenv/): installed from its own manifests,
//! running with its ServiceAccount's RBAC. Each test checks the invariants on what the API
//! server holds. Skips loudly when the control plane is not built; fails under CI=true.

// The serial lock is held for a whole test on purpose: tests share one control plane
// and run one at a time, each on its own runtime, so no task waits on another's guard.
#![allow(clippy::await_holding_lock)]

mod browser;
mod dashboard;
mod live;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{Api, ListParams};
use live::*;
use serde_json::json;
use std::time::Duration;

const GPU_INDICES: &str = "kestrel.dev/gpu-indices";

fn indices(pod: &Pod) -> Vec<u32> {
    annotation(pod, GPU_INDICES)
        .map(|v| v.split(',').filter_map(|s| s.parse().ok()).collect())
        .unwrap_or_default()
}

async fn scheduled_events(client: &kube::Client, namespace: &str) -> Vec<K8sEvent> {
    Api::<K8sEvent>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .expect("listing events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Scheduled"))
        .collect()
}

/// Single GPU pods are bound with their GPU indices, both ways of writing them; pods that
/// cannot fit wait with `PodScheduled=False`; every bind leaves a `Scheduled` event; the
/// shipped RBAC lets every watch list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binds_single_pods_with_gpu_indices_both_ways() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    for via in ["patch", "binding"] {
        let ns = format!("single-{via}");
        let scheduler = format!("kestrel-{via}");
        let prefix = format!("{ns}-");
        create_namespace(&client, &ns).await;
        create_pool_nodes(&client, &ns, 0, 4).await;
        let mut kestrel = env.kestrel(
            &scheduler,
            &["--scheduler-name", &scheduler, "--gpu-indices-via", via],
        );
        // 24 one-GPU and 4 two-GPU pods fill the 32 GPUs exactly.
        let mut pods: Vec<Pod> = (0..24)
            .map(|i| gpu_pod(&ns, &format!("one-{i}"), &scheduler, 1, &[], &[]))
            .collect();
        pods.extend((0..4).map(|i| gpu_pod(&ns, &format!("two-{i}"), &scheduler, 2, &[], &[])));
        create_pods(&client, pods).await;
        let bound = wait_bound(&client, &ns, 28, Duration::from_secs(60)).await;
        for pod in &bound {
            let want = if pod.metadata.name.as_deref().unwrap().starts_with("two") {
                2
            } else {
                1
            };
            assert_eq!(
                indices(pod).len(),
                want,
                "{:?} ({via}): {:?}",
                pod.metadata.name,
                annotation(pod, GPU_INDICES)
            );
        }
        assert!(
            kestrel.ready(),
            "/readyz not ready while scheduling ({via})"
        );
        // Nothing left: a further pod waits, told why.
        create_pods(&client, vec![gpu_pod(&ns, "late", &scheduler, 1, &[], &[])]).await;
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let late = eventually(
            Duration::from_secs(30),
            "late pod marked unschedulable",
            || async {
                let pod = api.get("late").await.ok()?;
                let condition = pod
                    .status
                    .as_ref()?
                    .conditions
                    .as_ref()?
                    .iter()
                    .find(|c| c.type_ == "PodScheduled")?
                    .clone();
                (condition.status == "False").then_some(condition)
            },
        )
        .await;
        assert_eq!(late.reason.as_deref(), Some("Unschedulable"));
        assert!(late
            .message
            .unwrap_or_default()
            .contains("Insufficient nvidia.com/gpu"));
        let events = eventually(Duration::from_secs(30), "Scheduled events", || async {
            let e = scheduled_events(&client, &ns).await;
            (e.len() >= 28).then_some(e)
        })
        .await;
        let note = events[0].note.clone().unwrap_or_default();
        assert!(
            note.contains("Successfully assigned") && note.contains(&prefix),
            "{note}"
        );
        assert_invariants(&client).await;
        let log = kestrel.log_text();
        for bad in ["forbidden", "lease lost", "ERROR"] {
            assert!(!log.contains(bad), "kestrel logged {bad:?} ({via}):\n{log}");
        }
        assert!(
            kestrel.terminate(Duration::from_secs(20)),
            "kestrel did not exit 0 on SIGTERM"
        );
        cleanup(&client, &prefix, &[&ns]).await;
    }
}

/// Without leader election the scheduler binds at once, logs leadership once, and a
/// SIGTERM ends it cleanly with one line, no "lease lost".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_leader_election_it_binds_and_never_spins() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler, prefix) = ("noelect", "kestrel-noelect", "noelect-");
    create_namespace(&client, ns).await;
    create_pool_nodes(&client, ns, 0, 1).await;
    let mut kestrel = env.kestrel(
        scheduler,
        &["--scheduler-name", scheduler, "--leader-elect=false"],
    );
    create_pods(
        &client,
        (0..8)
            .map(|i| gpu_pod(ns, &format!("p{i}"), scheduler, 1, &[], &[]))
            .collect(),
    )
    .await;
    wait_bound(&client, ns, 8, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        kestrel.terminate(Duration::from_secs(20)),
        "kestrel did not exit 0 on SIGTERM"
    );
    let log = kestrel.log_text();
    assert_eq!(kestrel.log_count("lease lost"), 0, "{log}");
    assert_eq!(kestrel.log_count("rebuilding state"), 1, "{log}");
    assert_eq!(kestrel.log_count("shutting down"), 1, "{log}");
    assert!(
        log.lines().count() < 50,
        "a quiet run logs little, got:\n{log}"
    );
    assert_invariants(&client).await;
    cleanup(&client, prefix, &[ns]).await;
}

/// Test-only CRDs of another project's `kind` in each (group, version), any fields
/// (Kestrel never installs CRDs into another project's group; a cluster running those
/// projects has them).
fn foreign_crds(kind: &str, plural: &str, scope: &str, versions: &[(&str, &str)]) -> String {
    versions
        .iter()
        .map(|(group, version)| {
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": format!("{plural}.{group}")},
                "spec": {"group": group, "scope": scope,
                    "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
                    "versions": [{"name": version, "served": true, "storage": true,
                        "subresources": {"status": {}},
                        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}})
            .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}

fn foreign_pod_group_crds() -> String {
    foreign_crds(
        "PodGroup",
        "podgroups",
        "Namespaced",
        &[
            ("scheduling.x-k8s.io", "v1alpha1"),
            ("scheduling.volcano.sh", "v1beta1"),
        ],
    )
}

/// Gangs of each PodGroup flavour start whole or not at all: three gangs of two 8-GPU pods
/// on three 8-GPU nodes: one starts, two wait with none of their pods bound; three more
/// nodes start them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gangs_of_every_flavour_bind_whole_or_not_at_all() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler, prefix) = ("gangs", "kestrel-gangs", "gangs-");
    kestrel_testenv::apply_yaml(&client, &foreign_pod_group_crds(), false)
        .await
        .unwrap();
    create_namespace(&client, ns).await;
    let groups = format!(
        "apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: PodGroup\nmetadata: {{name: own, namespace: {ns}}}\nspec: {{minMember: 2}}\n---\n\
         apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\nmetadata: {{name: plugins, namespace: {ns}}}\nspec: {{minMember: 2}}\n---\n\
         apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata: {{name: volcano, namespace: {ns}}}\nspec: {{minMember: 2}}\n"
    );
    kestrel_testenv::apply_yaml(&client, &groups, false)
        .await
        .unwrap();
    create_pool_nodes(&client, ns, 0, 3).await;
    let _kestrel = env.kestrel(scheduler, &["--scheduler-name", scheduler]);
    let mut pods = Vec::new();
    for i in 0..2 {
        pods.push(gpu_pod(
            ns,
            &format!("own-{i}"),
            scheduler,
            8,
            &[("scheduling.kestrel.dev/pod-group", "own")],
            &[],
        ));
        pods.push(gpu_pod(
            ns,
            &format!("plugins-{i}"),
            scheduler,
            8,
            &[("scheduling.x-k8s.io/pod-group", "plugins")],
            &[],
        ));
        pods.push(gpu_pod(
            ns,
            &format!("volcano-{i}"),
            scheduler,
            8,
            &[],
            &[("scheduling.k8s.io/group-name", "volcano")],
        ));
    }
    create_pods(&client, pods).await;
    wait_bound(&client, ns, 2, Duration::from_secs(60)).await;
    // Long enough for a partial bind to show, were there one.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pods = pods_in(&client, ns).await;
    assert_eq!(
        pods.iter().filter(|p| node_of(p).is_some()).count(),
        2,
        "only one gang fits"
    );
    assert_invariants(&client).await;
    create_pool_nodes(&client, ns, 3, 3).await;
    wait_bound(&client, ns, 6, Duration::from_secs(60)).await;
    assert_invariants(&client).await;
    cleanup(&client, prefix, &[ns]).await;
}

/// A gang that cannot start times out at its deadline on a quiet cluster: its PodGroup
/// says TimedOut, its pods stay (pending, none bound); room that appears later starts it
/// once the back-off has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_times_out_on_a_quiet_cluster_and_starts_after_its_back_off() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler, prefix) = ("timeouts", "kestrel-timeouts", "timeouts-");
    create_namespace(&client, ns).await;
    let group = format!(
        "apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: PodGroup\nmetadata: {{name: slow, namespace: {ns}}}\nspec: {{minMember: 2, scheduleTimeoutSeconds: 3}}\n"
    );
    kestrel_testenv::apply_yaml(&client, &group, false)
        .await
        .unwrap();
    create_pool_nodes(&client, ns, 0, 1).await;
    let _kestrel = env.kestrel(
        scheduler,
        &["--scheduler-name", scheduler, "--gang-backoff", "2s"],
    );
    let pods = (0..2)
        .map(|i| {
            gpu_pod(
                ns,
                &format!("slow-{i}"),
                scheduler,
                8,
                &[("scheduling.kestrel.dev/pod-group", "slow")],
                &[],
            )
        })
        .collect();
    create_pods(&client, pods).await;
    let gvk = kube::api::GroupVersionKind::gvk("scheduling.kestrel.dev", "v1alpha1", "PodGroup");
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, "podgroups");
    let groups: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    let message = eventually(Duration::from_secs(20), "the PodGroup to time out", || {
        let groups = groups.clone();
        async move {
            let pg = groups.get("slow").await.ok()?;
            (pg.data["status"]["phase"] == "TimedOut").then(|| pg.data["status"].to_string())
        }
    })
    .await;
    assert!(message.contains("timed out after 3 s"), "{message}");
    let pods = pods_in(&client, ns).await;
    assert_eq!(pods.len(), 2, "no pod of the gang is deleted");
    assert!(pods.iter().all(|p| node_of(p).is_none()), "none bound");
    assert_invariants(&client).await;
    create_pool_nodes(&client, ns, 1, 1).await;
    wait_bound(&client, ns, 2, Duration::from_secs(30)).await;
    assert_invariants(&client).await;
    cleanup(&client, prefix, &[ns]).await;
}

/// A ClusterQueue's quota holds on the real API server while the fake kubelet runs and
/// completes pods; `kestrel queue --live` sees the pods that wait for quota as waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_queue_quota_holds_and_queue_live_agrees() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler, prefix) = ("team-a", "kestrel-queues", "team-a-");
    create_namespace(&client, ns).await;
    let queues = format!(
        "apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: ResourceFlavor\nmetadata: {{name: default-flavor}}\n---\n\
         apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: ClusterQueue\nmetadata: {{name: team-a}}\nspec:\n  namespaceSelector: {{}}\n  resourceGroups:\n  - coveredResources: [cpu, memory, nvidia.com/gpu]\n    flavors:\n    - name: default-flavor\n      resources:\n      - {{name: cpu, nominalQuota: 100}}\n      - {{name: memory, nominalQuota: 1Ti}}\n      - {{name: nvidia.com/gpu, nominalQuota: 4}}\n---\n\
         apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: LocalQueue\nmetadata: {{name: main, namespace: {ns}}}\nspec: {{clusterQueue: team-a}}\n"
    );
    kestrel_testenv::apply_yaml(&client, &queues, false)
        .await
        .unwrap();
    create_pool_nodes(&client, ns, 0, 2).await;
    let _kubelet = kestrel_testenv::FakeKubelet::start(client.clone(), prefix);
    let _kestrel = env.kestrel(scheduler, &["--scheduler-name", scheduler]);
    let queue_label = [("kueue.x-k8s.io/queue-name", "main")];
    // Eight one-GPU pods of 6 s each through a 4-GPU quota on 16 GPUs.
    create_pods(
        &client,
        (0..8)
            .map(|i| {
                gpu_pod(
                    ns,
                    &format!("job-{i}"),
                    scheduler,
                    1,
                    &queue_label,
                    &[("kestrel.dev/sim-duration", "6s")],
                )
            })
            .collect(),
    )
    .await;
    wait_bound(&client, ns, 4, Duration::from_secs(60)).await;
    // While four wait for quota, the live queue view lists them as waiting, not running.
    let out = std::process::Command::new(kestrel_bin())
        .args(["queue", "--live", "--kubeconfig"])
        .arg(&env.cp.kubeconfig)
        .args(["--scheduler-name", scheduler])
        .output()
        .expect("kestrel queue --live");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(
        !text.contains("nothing pending"),
        "queue --live missed the pods waiting for quota:\n{text}"
    );
    let mut max_running = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let pods = pods_in(&client, ns).await;
        let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
        let live = pods
            .iter()
            .filter(|p| node_of(p).is_some() && phase(p).as_deref() != Some("Succeeded"))
            .count();
        max_running = max_running.max(live);
        let done = pods
            .iter()
            .filter(|p| phase(p).as_deref() == Some("Succeeded"))
            .count();
        if done == 8 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "only {done} of 8 jobs done after 120 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        max_running <= 4,
        "the 4-GPU quota was exceeded: {max_running} pods at once"
    );
    assert_invariants(&client).await;
    cleanup(&client, prefix, &[ns]).await;
}

/// Volcano's and KAI's `Queue` CRDs (cluster-scoped, as in those projects).
fn foreign_queue_crds() -> String {
    foreign_crds(
        "Queue",
        "queues",
        "Cluster",
        &[
            ("scheduling.volcano.sh", "v1beta1"),
            ("scheduling.run.ai", "v2"),
        ],
    )
}

/// Installs Volcano's and KAI's Queue CRDs and applies `queues` once the API server
/// serves their kinds (a moment after it accepts a new CRD).
async fn apply_foreign_queues(client: &kube::Client, queues: &str) {
    kestrel_testenv::apply_yaml(client, &foreign_queue_crds(), false)
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "the queue CRDs served", || async {
        kestrel_testenv::apply_yaml(client, queues, false)
            .await
            .ok()
    })
    .await;
}

/// How many pods of `ns` whose name starts with `prefix` are bound.
async fn bound_with_prefix(client: &kube::Client, ns: &str, prefix: &str) -> usize {
    pods_in(client, ns)
        .await
        .iter()
        .filter(|p| node_of(p).is_some())
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(prefix))
        })
        .count()
}

/// Volcano's and KAI's queues on the real API server: a Volcano queue's `capability` and a
/// KAI queue's `limit` hold; a Volcano queue without a capability borrows the rest of the
/// cluster, and more of it when a node joins (the root cohort follows the cluster).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volcano_and_kai_queues_hold_and_follow_the_cluster() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler, prefix) = ("vqueues", "kestrel-vqueues", "vqueues-");
    let queues = "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: capped}\nspec: {weight: 1, capability: {nvidia.com/gpu: 4}}\n---\n\
         apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: open}\nspec: {weight: 1, deserved: {nvidia.com/gpu: 2}}\n---\n\
         apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: kai-team}\nspec:\n  resources:\n    gpu: {quota: 1, limit: 2, overQuotaWeight: 1}\n";
    apply_foreign_queues(&client, queues).await;
    create_namespace(&client, ns).await;
    create_pool_nodes(&client, ns, 0, 2).await;
    let kestrel = env.kestrel(scheduler, &["--scheduler-name", scheduler]);
    let volcano = |queue: &'static str| [("scheduling.volcano.sh/queue-name", queue)];
    let mut pods: Vec<Pod> = (0..6)
        .map(|i| {
            gpu_pod(
                ns,
                &format!("capped-{i}"),
                scheduler,
                1,
                &[],
                &volcano("capped"),
            )
        })
        .collect();
    pods.extend((0..4).map(|i| {
        gpu_pod(
            ns,
            &format!("kai-{i}"),
            scheduler,
            1,
            &[("kai.scheduler/queue", "kai-team")],
            &[],
        )
    }));
    create_pods(&client, pods).await;
    wait_bound(&client, ns, 6, Duration::from_secs(60)).await;
    // Long enough for a bind past a limit to show, were there one.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        bound_with_prefix(&client, ns, "capped-").await,
        4,
        "capability 4"
    );
    assert_eq!(bound_with_prefix(&client, ns, "kai-").await, 2, "limit 2");
    // 16 GPUs, 6 held: the open queue takes the other 10 and waits for room with 4.
    create_pods(
        &client,
        (0..14)
            .map(|i| {
                gpu_pod(
                    ns,
                    &format!("open-{i}"),
                    scheduler,
                    1,
                    &[],
                    &volcano("open"),
                )
            })
            .collect(),
    )
    .await;
    wait_bound(&client, ns, 16, Duration::from_secs(60)).await;
    assert_eq!(bound_with_prefix(&client, ns, "open-").await, 10);
    assert_invariants(&client).await;
    // A third node: the Volcano queues' share grows with it, and the rest of open binds.
    create_pool_nodes(&client, ns, 2, 1).await;
    eventually(Duration::from_secs(60), "open's last 4 bound", || async {
        (bound_with_prefix(&client, ns, "open-").await == 14).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        bound_with_prefix(&client, ns, "capped-").await,
        4,
        "capability 4"
    );
    assert_eq!(bound_with_prefix(&client, ns, "kai-").await, 2, "limit 2");
    assert_invariants(&client).await;
    assert_eq!(
        kestrel.log_count("cannot be used"),
        0,
        "{}",
        kestrel.log_text()
    );
    cleanup(&client, prefix, &[ns]).await;
}

/// LocalQueue `main` in `ns`, of a ClusterQueue named after `ns` (with its flavor) that
/// holds 2 GPUs (and ample cpu and memory) for that namespace only.
async fn two_gpu_queue(client: &kube::Client, ns: &str) {
    let queues = format!(
        "apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: ResourceFlavor\nmetadata: {{name: {ns}-flavor}}\n---\n\
         apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: ClusterQueue\nmetadata: {{name: {ns}}}\nspec:\n  namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {ns}}}}}\n  resourceGroups:\n  - coveredResources: [cpu, memory, nvidia.com/gpu]\n    flavors:\n    - name: {ns}-flavor\n      resources:\n      - {{name: cpu, nominalQuota: 100}}\n      - {{name: memory, nominalQuota: 1Ti}}\n      - {{name: nvidia.com/gpu, nominalQuota: 2}}\n---\n\
         apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: LocalQueue\nmetadata: {{name: main, namespace: {ns}}}\nspec: {{clusterQueue: {ns}}}\n"
    );
    kestrel_testenv::apply_yaml(client, &queues, false)
        .await
        .unwrap();
}

/// The `PodScheduled` condition's reason and message of pod `name` in `ns`.
async fn scheduled_condition(client: &kube::Client, ns: &str, name: &str) -> (String, String) {
    let pod = Api::<Pod>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .expect("the pod");
    pod.status
        .and_then(|s| s.conditions)
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled")
        .map(|c| (c.reason.unwrap_or_default(), c.message.unwrap_or_default()))
        .unwrap_or_default()
}

/// Kueue's WorkloadPriorityClasses on the real API server (its CRD served as v1beta1
/// only): in a queue with room for one, the pod labelled with the higher class goes
/// first although its PriorityClass is the lower; a pod naming a class that does not
/// exist waits, saying so, until the class is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_priority_class_decides_the_order_in_a_queue() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler, prefix) = ("wpc", "kestrel-wpc", "wpc-");
    kestrel_testenv::apply_yaml(
        &client,
        &foreign_crds(
            "WorkloadPriorityClass",
            "workloadpriorityclasses",
            "Cluster",
            &[("kueue.x-k8s.io", "v1beta1")],
        ),
        false,
    )
    .await
    .unwrap();
    let classes = "apiVersion: kueue.x-k8s.io/v1beta1\nkind: WorkloadPriorityClass\nmetadata: {name: wpc-urgent}\nvalue: 1000\n---\n\
         apiVersion: kueue.x-k8s.io/v1beta1\nkind: WorkloadPriorityClass\nmetadata: {name: wpc-routine}\nvalue: 10\n---\n\
         apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: wpc-pod-high}\nvalue: 100000\n";
    kestrel_testenv::apply_yaml(&client, classes, false)
        .await
        .unwrap();
    create_namespace(&client, ns).await;
    two_gpu_queue(&client, ns).await;
    create_pool_nodes(&client, ns, 0, 1).await;
    let class = |c: &'static str| {
        [
            ("kueue.x-k8s.io/queue-name", "main"),
            ("kueue.x-k8s.io/priority-class", c),
        ]
    };
    // The routine pod is older and its PriorityClass higher; both fill the queue.
    let mut routine = gpu_pod(ns, "routine", scheduler, 2, &class("wpc-routine"), &[]);
    routine.spec.as_mut().unwrap().priority_class_name = Some("wpc-pod-high".into());
    create_pods(&client, vec![routine]).await;
    create_pods(
        &client,
        vec![
            gpu_pod(ns, "urgent", scheduler, 2, &class("wpc-urgent"), &[]),
            gpu_pod(ns, "later", scheduler, 1, &class("wpc-later"), &[]),
        ],
    )
    .await;
    let kestrel = env.kestrel(scheduler, &["--scheduler-name", scheduler]);
    wait_bound(&client, ns, 1, Duration::from_secs(60)).await;
    // Long enough for a wrong bind to show, were there one.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let bound: Vec<String> = pods_in(&client, ns)
        .await
        .iter()
        .filter(|p| node_of(p).is_some())
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(bound, ["urgent"], "{}", kestrel.log_text());
    let (reason, message) = eventually(
        Duration::from_secs(30),
        "the pod naming a missing class reported",
        || async {
            let (reason, message) = scheduled_condition(&client, ns, "later").await;
            (reason == "SchedulerError").then_some((reason, message))
        },
    )
    .await;
    assert!(
        message.contains(r#"metadata.labels["kueue.x-k8s.io/priority-class"]"#)
            && message.contains(r#"no WorkloadPriorityClass "wpc-later" on the API server"#),
        "{reason}: {message}"
    );
    // The class is created: the pod is read again and waits for its queue instead.
    kestrel_testenv::apply_yaml(
        &client,
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: WorkloadPriorityClass\nmetadata: {name: wpc-later}\nvalue: 1\n",
        false,
    )
    .await
    .unwrap();
    eventually(
        Duration::from_secs(30),
        "the pod read again once its class exists",
        || async {
            let (reason, _) = scheduled_condition(&client, ns, "later").await;
            (reason == "WaitingForQueue").then_some(())
        },
    )
    .await;
    assert_invariants(&client).await;
    cleanup(&client, prefix, &[ns]).await;
}

/// A Job in a queue is one workload on the real API server: its pods (created here, as
/// the Job controller would, owned by the Job) are admitted whole or down to Kueue's
/// `job-min-parallelism`, never one by one past the quota; pods seen before their Job
/// wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_job_is_admitted_whole_or_down_to_its_minimum() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler, prefix) = ("jobs", "kestrel-jobs", "jobs-");
    create_namespace(&client, ns).await;
    two_gpu_queue(&client, ns).await;
    create_pool_nodes(&client, ns, 0, 1).await;
    let _kestrel = env.kestrel(scheduler, &["--scheduler-name", scheduler]);
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), ns);
    let job = |name: &str, parallelism: u32, annotations: serde_json::Value| {
        serde_json::from_value::<k8s_openapi::api::batch::v1::Job>(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns,
                "labels": {"kueue.x-k8s.io/queue-name": "main"}, "annotations": annotations},
            "spec": {"parallelism": parallelism, "completions": parallelism,
                "template": {"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "trainer:1"}]}}},
        }))
        .unwrap()
    };
    // The pods the Job controller would create: owned by the Job, no queue label.
    let owned = |job: &str, uid: &str, count: u32| -> Vec<Pod> {
        (0..count)
            .map(|i| {
                let mut pod = gpu_pod(ns, &format!("{job}-{i}"), scheduler, 1, &[], &[]);
                pod.metadata.owner_references = Some(vec![serde_json::from_value(json!({
                    "apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": uid,
                    "controller": true, "blockOwnerDeletion": true,
                }))
                .unwrap()]);
                pod
            })
            .collect()
    };
    let post = kube::api::PostParams::default();
    let whole = jobs
        .create(&post, &job("whole", 3, json!({})))
        .await
        .unwrap();
    let uid = whole.metadata.uid.clone().unwrap();
    create_pods(&client, owned("whole", &uid, 3)).await;
    // Pods ahead of their Job: they wait to see it.
    create_pods(
        &client,
        owned("partial", "00000000-0000-0000-0000-000000000001", 4),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pods = pods_in(&client, ns).await;
    assert!(
        pods.iter().all(|p| node_of(p).is_none()),
        "3 GPUs under a quota of 2, and pods whose Job is not there: none may bind"
    );
    // Each waits for its own reason, said on the pod.
    let message = |name: &str| {
        pods.iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .and_then(|p| p.status.as_ref()?.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
            .and_then(|c| c.message.clone())
            .unwrap_or_default()
    };
    assert!(
        message("whole-0").contains("quota"),
        "{}",
        message("whole-0")
    );
    assert!(
        message("partial-0").contains("waiting to see its Job jobs/partial"),
        "{}",
        message("partial-0")
    );
    let partial = job(
        "partial",
        4,
        json!({"kueue.x-k8s.io/job-min-parallelism": "1"}),
    );
    jobs.create(&post, &partial).await.unwrap();
    let pods = wait_bound(&client, ns, 2, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pods_later = pods_in(&client, ns).await;
    let bound: Vec<&str> = pods_later
        .iter()
        .filter(|p| node_of(p).is_some())
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    assert_eq!(
        bound.len(),
        2,
        "the quota holds: {bound:?} ({} pods)",
        pods.len()
    );
    assert!(
        bound.iter().all(|n| n.starts_with("partial-")),
        "the whole Job stays out: {bound:?}"
    );
    assert_invariants(&client).await;
    cleanup(&client, prefix, &[ns]).await;
}

/// A queued StatefulSet (and a ReplicaSet no Deployment owns) is one workload on the real
/// API server, like a Job; a Deployment's ReplicaSet's pods stay one workload each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_stateful_set_is_one_workload_and_a_deployments_pods_are_not() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler, prefix) = ("sets", "kestrel-sets", "sets-");
    create_namespace(&client, ns).await;
    two_gpu_queue(&client, ns).await;
    create_pool_nodes(&client, ns, 0, 1).await;
    let _kestrel = env.kestrel(scheduler, &["--scheduler-name", scheduler]);
    let post = kube::api::PostParams::default();
    let template = json!({"metadata": {"labels": {"app": "x", "kueue.x-k8s.io/queue-name": "main"}},
        "spec": {"containers": [{"name": "main", "image": "server:1"}]}});
    let sets: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::namespaced(client.clone(), ns);
    let db = sets
        .create(
            &post,
            &serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": "db", "namespace": ns},
                "spec": {"replicas": 3, "serviceName": "db",
                    "selector": {"matchLabels": {"app": "x"}}, "template": template}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let replica_sets: Api<k8s_openapi::api::apps::v1::ReplicaSet> =
        Api::namespaced(client.clone(), ns);
    let web = replica_sets
        .create(
            &post,
            &serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": "web-5d8", "namespace": ns, "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                    "uid": "00000000-0000-0000-0000-00000000beef", "controller": true}]},
                "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "x"}},
                    "template": template}}))
            .unwrap(),
        )
        .await
        .unwrap();
    // The pods their controllers would create: owned by them, with the template's labels.
    let owned = |kind: &str, owner: &str, uid: &str, name: &str| {
        let mut pod = gpu_pod(ns, name, scheduler, 1, &[], &[]);
        pod.metadata.labels =
            Some([("kueue.x-k8s.io/queue-name".to_string(), "main".to_string())].into());
        pod.metadata.owner_references = Some(vec![serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": kind, "name": owner, "uid": uid,
            "controller": true}))
        .unwrap()]);
        pod
    };
    let db_uid = db.metadata.uid.clone().unwrap();
    create_pods(
        &client,
        (0..3)
            .map(|i| owned("StatefulSet", "db", &db_uid, &format!("db-{i}")))
            .collect(),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        pods_in(&client, ns)
            .await
            .iter()
            .all(|p| node_of(p).is_none()),
        "a StatefulSet of 3 under a quota of 2 runs none"
    );
    let web_uid = web.metadata.uid.clone().unwrap();
    create_pods(
        &client,
        (0..3)
            .map(|i| owned("ReplicaSet", "web-5d8", &web_uid, &format!("web-{i}")))
            .collect(),
    )
    .await;
    wait_bound(&client, ns, 2, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let bound: Vec<String> = pods_in(&client, ns)
        .await
        .iter()
        .filter(|p| node_of(p).is_some())
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(bound.len(), 2, "the quota holds: {bound:?}");
    assert!(
        bound.iter().all(|n| n.starts_with("web-")),
        "a Deployment's pods go one by one; the StatefulSet stays out: {bound:?}"
    );
    assert_invariants(&client).await;
    cleanup(&client, prefix, &[ns]).await;
}

/// The chart as helm itself renders it (`build/helm.sh render`, which .ci/run exports as
/// `KESTREL_HELM_RENDERED`) is accepted by the real API server: server-side dry run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rendered_helm_chart_applies_to_the_api_server() {
    let Some((env, _serial)) = env() else { return };
    let Some(path) = std::env::var_os("KESTREL_HELM_RENDERED") else {
        kestrel_testenv::skip_or_fail(
            "KESTREL_HELM_RENDERED is not set: run `build/helm.sh render` and export it as target/helm-rendered.yaml (.ci/run does)",
        );
        return;
    };
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", std::path::Path::new(&path).display()));
    let client = env.client().await;
    kestrel_testenv::apply_yaml(&client, &text, true)
        .await
        .unwrap_or_else(|e| panic!("the rendered chart does not apply: {e}"));
}

/// The `FieldNotHonoured` Warning events about an object (kind and name) in `namespace`.
async fn field_warning_events(
    client: &kube::Client,
    namespace: &str,
    kind: &str,
    name: &str,
) -> Vec<K8sEvent> {
    Api::<K8sEvent>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .expect("listing events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FieldNotHonoured"))
        .filter(|e| {
            e.regarding
                .as_ref()
                .is_some_and(|r| r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name))
        })
        .collect()
}

/// Fields of other projects' objects that Kestrel does not honour are Warning events on
/// those objects, once while the warning lasts: a Volcano Queue's field Kestrel does not
/// read (cluster-scoped: its event is in `default`), a LimitRange's bound out of Kestrel's
/// range (in the LimitRange's namespace). A changed queue with the same warning posts
/// nothing again; a new warning on it posts only itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_kestrel_does_not_honour_are_warning_events_on_their_objects() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler, queue) = ("fieldwarn", "kestrel-fieldwarn", "fieldwarn-team");
    let queue_yaml = |spec: &str| {
        format!("apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {{name: {queue}}}\nspec: {spec}\n")
    };
    let first = queue_yaml("{weight: 1, extendClusters: [{name: other}]}");
    apply_foreign_queues(&client, &first).await;
    create_namespace(&client, ns).await;
    // 100 exa-cores: beyond what Kestrel counts in, so it cannot use that bound.
    let limits = format!("apiVersion: v1\nkind: LimitRange\nmetadata: {{name: huge, namespace: {ns}}}\nspec:\n  limits:\n  - type: Container\n    max: {{cpu: 100E}}\n");
    kestrel_testenv::apply_yaml(&client, &limits, false)
        .await
        .unwrap();
    let resource = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("scheduling.volcano.sh", "v1beta1", "Queue"),
        "queues",
    );
    let queues: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &resource);
    let queue_uid = queues.get(queue).await.unwrap().metadata.uid;
    let kestrel = env.kestrel(scheduler, &["--scheduler-name", scheduler]);

    let on_queue = eventually(Duration::from_secs(60), "the queue's event", || async {
        let events = field_warning_events(&client, "default", "Queue", queue).await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    assert_eq!(on_queue.len(), 1, "{on_queue:?}");
    let event = &on_queue[0];
    let regarding = event.regarding.as_ref().unwrap();
    assert_eq!(
        regarding.api_version.as_deref(),
        Some("scheduling.volcano.sh/v1beta1")
    );
    assert_eq!(regarding.uid, queue_uid);
    assert_eq!(regarding.namespace, None);
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let note = event.note.as_deref().unwrap_or_default();
    assert!(
        note.contains(&format!("Queue {queue}")) && note.contains("field spec.extendClusters"),
        "{note}"
    );

    let on_limits = eventually(
        Duration::from_secs(60),
        "the LimitRange's event",
        || async {
            let events = field_warning_events(&client, ns, "LimitRange", "huge").await;
            (!events.is_empty()).then_some(events)
        },
    )
    .await;
    assert_eq!(on_limits.len(), 1, "{on_limits:?}");
    let regarding = on_limits[0].regarding.as_ref().unwrap();
    assert_eq!(regarding.api_version.as_deref(), Some("v1"));
    assert_eq!(regarding.namespace.as_deref(), Some(ns));
    assert!(regarding.uid.is_some());
    let note = on_limits[0].note.as_deref().unwrap_or_default();
    assert!(
        note.contains(&format!("LimitRange {ns}/huge"))
            && note.contains("field spec.limits[0].max[cpu]"),
        "{note}"
    );

    // Changed, the same warning: no second event. A new warning: its own event only.
    let changed = queue_yaml("{weight: 2, extendClusters: [{name: other}]}");
    kestrel_testenv::apply_yaml(&client, &changed, false)
        .await
        .unwrap();
    let more = queue_yaml("{weight: 2, extendClusters: [{name: other}], dequeueStrategy: fifo}");
    kestrel_testenv::apply_yaml(&client, &more, false)
        .await
        .unwrap();
    eventually(
        Duration::from_secs(60),
        "the new warning's event",
        || async {
            let events = field_warning_events(&client, "default", "Queue", queue).await;
            (events.len() >= 2).then_some(())
        },
    )
    .await;
    // Long enough for a second event of the first warning to show, were there one.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let notes: Vec<String> = field_warning_events(&client, "default", "Queue", queue)
        .await
        .into_iter()
        .filter_map(|e| e.note)
        .collect();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert_eq!(
        notes
            .iter()
            .filter(|n| n.contains("spec.dequeueStrategy"))
            .count(),
        1,
        "{notes:?}"
    );
    assert_eq!(
        kestrel.log_count("field spec.extendClusters"),
        1,
        "{}",
        kestrel.log_text()
    );
    drop(kestrel);
    let _ = queues
        .delete(queue, &kube::api::DeleteParams::default())
        .await;
    cleanup(&client, "fieldwarn-", &[ns]).await;
}

/// GET `path` from a dashboard at `addr`: the status and the JSON body; `None` while it
/// does not answer.
fn dashboard_get(addr: &str, path: &str) -> Option<(u16, serde_json::Value)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, serde_json::from_str(body).ok()?))
}

/// Two loopback addresses free now (both held while the second is found).
fn two_free_addrs() -> [String; 2] {
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    [a, b].map(|l| l.local_addr().unwrap().to_string())
}

/// Versions `/api/stream` announces, as they come.
fn stream_versions(addr: String) -> std::sync::mpsc::Receiver<u64> {
    use std::io::{BufRead, BufReader, Write};
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok(mut s) = std::net::TcpStream::connect(&addr) else {
            return;
        };
        let _ = write!(s, "GET /api/stream HTTP/1.1\r\nhost: {addr}\r\n\r\n");
        for line in BufReader::new(s).lines().map_while(Result::ok) {
            if let Some(v) = line.strip_prefix("data: ").and_then(|v| v.parse().ok()) {
                if tx.send(v).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// Busy cells per node of the map whose name starts with `prefix`, and the pods on them.
fn busy_cells(map: &serde_json::Value, prefix: &str) -> (u64, Vec<(String, String)>) {
    let pods = map["pods"].as_array().unwrap();
    let mut busy = 0;
    let mut placed = Vec::new();
    for node in map["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["nodes"].as_array().unwrap())
        .filter(|n| n["name"].as_str().unwrap().starts_with(prefix))
    {
        for cell in node["gpus"].as_array().unwrap() {
            busy += u64::from(cell["used"].as_u64().unwrap() >= 1000);
            for p in cell["pods"].as_array().unwrap() {
                let pod = pods[p[0].as_u64().unwrap() as usize]["pod"]
                    .as_str()
                    .unwrap();
                let entry = (pod.to_string(), node["name"].as_str().unwrap().to_string());
                if !placed.contains(&entry) {
                    placed.push(entry);
                }
            }
        }
    }
    placed.sort();
    (busy, placed)
}

/// Waits until the dashboard at `addr` maps `want` (busy cells and pods on the nodes named
/// `prefix`...); the panic shows what it mapped last.
async fn wait_for_map(
    addr: &str,
    prefix: &str,
    want: &(u64, Vec<(String, String)>),
    what: &str,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut last = None;
    loop {
        if let Some((status, map)) = dashboard_get(addr, "/api/map") {
            if status == 200 && busy_cells(&map, prefix) == *want {
                return map;
            }
            last = Some((status, map));
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not seen within 30 s; wanted {want:?}, the dashboard answered {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `kestrel serve --dashboard-addr` on two replicas: the leader's dashboard follows its
/// binds (the map, the pending list with the waiting pod's reason, the events, the update
/// stream) and agrees with the API server; the standby answers 503 saying it is not the
/// leader, until the leader stops and it takes over with the same picture.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_follows_the_leaders_binds_and_a_standby_says_so() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler, prefix) = ("dash", "kestrel-dash", "dash-");
    create_namespace(&client, ns).await;
    create_pool_nodes(&client, ns, 0, 2).await;
    let addrs = two_free_addrs();
    let mut replicas: Vec<Option<kestrel_testenv::Kestrel>> = (0..2)
        .map(|i| {
            Some(env.kestrel(
                &format!("kestrel-dash-{i}"),
                &["--scheduler-name", scheduler, "--dashboard-addr", &addrs[i]],
            ))
        })
        .collect();
    // The leader's dashboard shows both nodes; the other's says it stands by.
    let leader = kestrel_testenv::eventually(
        Duration::from_secs(60),
        "one dashboard answering as the leader, with both nodes",
        || async {
            let answers: Vec<_> = addrs.iter().map(|a| dashboard_get(a, "/api/map")).collect();
            let leads = |a: &Option<(u16, serde_json::Value)>| {
                a.as_ref()
                    .is_some_and(|(s, map)| *s == 200 && busy_cells(map, prefix).0 == 0)
                    && a.as_ref()
                        .is_some_and(|(_, map)| map["counts"]["gpus"].as_u64().unwrap_or(0) >= 16)
            };
            match (leads(&answers[0]), leads(&answers[1])) {
                (true, false) => Some(0),
                (false, true) => Some(1),
                _ => None,
            }
        },
    )
    .await;
    let standby = 1 - leader;
    let (status, body) =
        dashboard_get(&addrs[standby], "/api/summary").expect("the standby answers");
    assert_eq!(status, 503, "{body}");
    let why = body["error"].as_str().unwrap();
    assert!(
        why.contains("not the leader") && why.contains(&format!("kestrel-dash-{standby}")),
        "{why}"
    );
    let (_, summary) = dashboard_get(&addrs[leader], "/api/summary").unwrap();
    assert_eq!(summary["source"], "leader", "{summary}");
    // The pages in a browser: the standby's says so, the leader's stays open while pods bind.
    let mut page = match browser::find_chromium() {
        Some(chromium) => {
            let profile = env.cp.dir.join("dashboard-browser");
            let log = env.cp.dir.join("dashboard-chromium.log");
            let mut b = browser::Browser::launch(&chromium, &profile, &log);
            b.open(&format!("http://{}/", addrs[standby]));
            let text = b.wait_for(
                "the standby's page saying it is not the leader",
                "document.querySelector('#view .error')",
                "document.querySelector('#view').innerText",
            );
            assert!(text.as_str().unwrap().contains("not the leader"), "{text}");
            b.call(
                "Page.navigate",
                json!({ "url": format!("http://{}/", addrs[leader]) }),
            );
            let drawn = b.wait_for(
                "the leader's GPU map drawn",
                "window.kestrel && window.kestrel.ready && document.querySelector('#map')?.dataset.busy !== undefined",
                browser::DRAWN,
            );
            let (_, before) = dashboard_get(&addrs[leader], "/api/map").unwrap();
            assert_eq!(drawn["busy"], before["counts"]["busy"], "{drawn}");
            Some((b, drawn["busy"].as_u64().unwrap()))
        }
        None => {
            kestrel_invariants::shared::skip_or_fail(
                "the live dashboard's pages cannot be opened: no chromium on PATH \
                 (apt-get install chromium, or set KESTREL_CHROMIUM)",
            );
            None
        }
    };

    // A page open on the leader: it hears of every change over the stream.
    let versions = stream_versions(addrs[leader].clone());
    let first = versions
        .recv_timeout(Duration::from_secs(30))
        .expect("the stream's first version");
    // Three 3-GPU pods bind; then an 8-GPU pod cannot (9 GPUs in use leave no node whole).
    let pods: Vec<Pod> = (0..3)
        .map(|i| gpu_pod(ns, &format!("small-{i}"), scheduler, 3, &[], &[]))
        .collect();
    create_pods(&client, pods).await;
    let bound = wait_bound(&client, ns, 3, Duration::from_secs(60)).await;
    let mut on_server: Vec<(String, String)> = bound
        .iter()
        .filter_map(|p| {
            let name = p.metadata.name.clone()?;
            Some((format!("{ns}/{name}"), node_of(p)?.to_string()))
        })
        .collect();
    on_server.sort();
    assert_eq!(on_server.len(), 3, "{on_server:?}");
    // The dashboard follows: the same pods on the same nodes, 9 busy cells.
    let want = (9, on_server.clone());
    let map = wait_for_map(
        &addrs[leader],
        prefix,
        &want,
        "the leader's map showing the three binds",
    )
    .await;
    assert!(
        map["counts"]["busy"].as_u64().unwrap() >= 9,
        "{}",
        map["counts"]
    );
    // The open page followed the binds (over /api/stream) and draws what the API says.
    if let Some((b, before)) = page.as_mut() {
        let drawn = b.wait_for(
            "the open page showing the three binds",
            &format!(
                "!document.querySelector('#live').hidden && +document.querySelector('#map')?.dataset.busy === {}",
                *before + 9
            ),
            browser::DRAWN,
        );
        let (_, now) = dashboard_get(&addrs[leader], "/api/map").unwrap();
        for k in ["busy", "shared", "free", "fragmented"] {
            assert_eq!(
                drawn[k], now["counts"][k],
                "{k}: drawn {drawn}, /api/map {}",
                now["counts"]
            );
        }
        assert!(b.errors.is_empty(), "page errors: {:?}", b.errors);
    }
    drop(page);
    create_pods(&client, vec![gpu_pod(ns, "big", scheduler, 8, &[], &[])]).await;
    let later = versions
        .recv_timeout(Duration::from_secs(30))
        .expect("an update on the stream after the binds");
    assert!(later > first, "stream versions {first} then {later}");
    let pending = kestrel_testenv::eventually(
        Duration::from_secs(30),
        "dash/big in the dashboard's pending list",
        || async {
            let (_, list) = dashboard_get(&addrs[leader], &format!("/api/pending?namespace={ns}"))?;
            let rows = list["pending"].as_array()?.clone();
            (rows.len() == 1).then_some(rows)
        },
    )
    .await;
    assert_eq!(pending[0]["pod"], "dash/big", "{pending:?}");
    let reason = pending[0]["reason"].as_str().unwrap();
    assert!(reason.contains("nvidia.com/gpu"), "{reason}");
    let (status, pod) = dashboard_get(&addrs[leader], "/api/pod/dash/big").unwrap();
    assert_eq!(
        (status, pod["phase"].as_str()),
        (200, Some("Pending")),
        "{pod}"
    );
    let (_, events) = dashboard_get(&addrs[leader], "/api/events").unwrap();
    let mut binds: Vec<(String, String)> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "bind")
        .map(|e| {
            (
                e["pod"].as_str().unwrap().to_string(),
                e["node"].as_str().unwrap().to_string(),
            )
        })
        .filter(|(p, _)| p.starts_with("dash/"))
        .collect();
    binds.sort();
    assert_eq!(binds, on_server, "bind events");
    let (status, missing) = dashboard_get(&addrs[leader], "/api/pod/dash/ghost").unwrap();
    assert_eq!(status, 404, "{missing}");
    assert!(
        missing["error"].as_str().unwrap().contains("not found"),
        "{missing}"
    );

    // The leader stops (releasing the lease): the standby leads and shows the same.
    let mut old = replicas[leader].take().unwrap();
    assert!(
        old.terminate(Duration::from_secs(20)),
        "the leader did not exit 0 on SIGTERM"
    );
    wait_for_map(
        &addrs[standby],
        prefix,
        &want,
        "the former standby's map showing the three binds",
    )
    .await;
    drop(replicas);
    assert_invariants(&client).await;
    cleanup(&client, prefix, &[ns]).await;
}
