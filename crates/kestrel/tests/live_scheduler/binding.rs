//! Single pods and their GPU indices, leader election off, gangs of every flavour and their
//! time-outs.

use super::*;

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
