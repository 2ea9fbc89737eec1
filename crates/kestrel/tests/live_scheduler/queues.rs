//! Queues: ClusterQueue quota, Volcano and KAI queues, workload priority, queued Jobs,
//! StatefulSets and Deployments.

use super::*;

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
