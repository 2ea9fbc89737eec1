//! The whole loop against a scripted API server: listings, binds, preemption writes, queue
//! status, nominations and snapshots.

use super::*;
use kestrel_test_support::k8s::{gpu_node_json as gpu_node, gpu_pod_json as gpu_pod, Stamps};

/// Serves the listings (Kestrel's kinds empty); watches hang (no changes); writes are recorded and answered
/// by `on_write`.
async fn scripted_server(
    mut handle: MockHandle,
    nodes: Vec<Value>,
    pods: Vec<Value>,
    writes: Arc<Mutex<Vec<Seen>>>,
    on_write: impl Fn(&Seen) + Send + 'static,
) {
    let mut hanging = Vec::new();
    while let Some((req, send)) = handle.next_request().await {
        let method = req.method().to_string();
        let uri = req.uri().to_string();
        let content_type = req
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string());
        let bytes = req.into_body().collect_bytes().await.unwrap();
        let path = uri.split('?').next().unwrap().to_string();
        if method == "GET" && uri.contains("watch=true") {
            hanging.push(send);
            continue;
        }
        // Other projects' kinds: not served, as on a cluster without them.
        if method == "GET" && driver::other_projects_listings().contains(&path) {
            reply(send, 404, status(404, "NotFound"));
            continue;
        }
        let body = match (method.as_str(), path.as_str()) {
            ("GET", "/api/v1/nodes") => list("Node", nodes.clone()),
            ("GET", "/api/v1/pods") => list("Pod", pods.clone()),
            ("GET", "/api/v1/namespaces") => list("Namespace", vec![]),
            ("GET", "/apis/scheduling.k8s.io/v1/priorityclasses") => {
                json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClassList", "metadata": {"resourceVersion": "1"}, "items": []})
            }
            ("GET", "/apis/node.k8s.io/v1/runtimeclasses") => {
                json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClassList", "metadata": {"resourceVersion": "1"}, "items": []})
            }
            ("GET", "/apis/policy/v1/poddisruptionbudgets") => {
                json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudgetList", "metadata": {"resourceVersion": "1"}, "items": []})
            }
            ("GET", "/api/v1/resourcequotas") => {
                json!({"apiVersion": "v1", "kind": "ResourceQuotaList", "metadata": {"resourceVersion": "1"}, "items": []})
            }
            ("GET", "/api/v1/limitranges") => {
                json!({"apiVersion": "v1", "kind": "LimitRangeList", "metadata": {"resourceVersion": "1"}, "items": []})
            }
            ("GET", "/apis/batch/v1/jobs") => {
                json!({"apiVersion": "batch/v1", "kind": "JobList", "metadata": {"resourceVersion": "1"}, "items": []})
            }
            ("GET", "/apis/apps/v1/statefulsets") => {
                json!({"apiVersion": "apps/v1", "kind": "StatefulSetList", "metadata": {"resourceVersion": "1"}, "items": []})
            }
            ("GET", "/apis/apps/v1/replicasets") => {
                json!({"apiVersion": "apps/v1", "kind": "ReplicaSetList", "metadata": {"resourceVersion": "1"}, "items": []})
            }
            ("GET", "/api/v1/persistentvolumeclaims") => {
                json!({"apiVersion": "v1", "kind": "PersistentVolumeClaimList", "metadata": {"resourceVersion": "1"}, "items": []})
            }
            ("GET", "/api/v1/persistentvolumes") => {
                json!({"apiVersion": "v1", "kind": "PersistentVolumeList", "metadata": {"resourceVersion": "1"}, "items": []})
            }
            ("GET", "/apis/storage.k8s.io/v1/storageclasses") => {
                json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClassList", "metadata": {"resourceVersion": "1"}, "items": []})
            }
            ("GET", "/apis/storage.k8s.io/v1/csinodes") => {
                json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINodeList", "metadata": {"resourceVersion": "1"}, "items": []})
            }
            (
                "GET",
                "/apis/scheduling.kestrel.dev/v1alpha1/podgroups"
                | "/apis/scheduling.kestrel.dev/v1alpha1/topologies"
                | "/apis/scheduling.kestrel.dev/v1alpha1/clusterqueues"
                | "/apis/scheduling.kestrel.dev/v1alpha1/localqueues"
                | "/apis/scheduling.kestrel.dev/v1alpha1/cohorts"
                | "/apis/scheduling.kestrel.dev/v1alpha1/resourceflavors",
            ) => {
                json!({"apiVersion": "scheduling.kestrel.dev/v1alpha1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": []})
            }
            _ => {
                let seen = Seen {
                    method,
                    uri,
                    content_type,
                    body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                };
                on_write(&seen);
                writes.lock().unwrap().push(seen.clone());
                let answer = if seen.uri.contains("/binding") {
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
                } else if seen.uri.contains("/events") {
                    seen.body.clone()
                } else {
                    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": "ml"}})
                };
                reply(send, 200, answer);
                continue;
            }
        };
        reply(send, 200, body);
    }
}

async fn wait_for(writes: &Arc<Mutex<Vec<Seen>>>, n: usize) {
    for _ in 0..500 {
        if writes.lock().unwrap().len() >= n {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("only {:?}", writes.lock().unwrap());
}

#[tokio::test]
async fn a_new_leader_counts_bound_pods_from_the_listing_before_it_binds() {
    let (client, handle) = mock_client();
    let writes = Arc::new(Mutex::new(Vec::new()));
    // gpu-0 holds a 6-GPU pod bound by an earlier leader on GPUs 0-5, and one CPU pod that
    // kube-scheduler bound. Pending: a 4-GPU pod (cannot fit) and a 2-GPU pod (fits on 6,7).
    let nodes = vec![gpu_node("gpu-0")];
    let pods = vec![
        gpu_pod("big", 6, Some("gpu-0"), Some("0,1,2,3,4,5"), "kestrel"),
        gpu_pod("web", 0, Some("gpu-0"), None, "default-scheduler"),
        gpu_pod("four", 4, None, None, "kestrel"),
        gpu_pod("two", 2, None, None, "kestrel"),
        gpu_pod("other", 1, None, None, "default-scheduler"),
    ];
    tokio::spawn(scripted_server(handle, nodes, pods, writes.clone(), |_| {}));
    let (_leader_tx, leader_rx) = watch::channel(true);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let metrics = Metrics::new();
    let config = DriverConfig::new("kestrel");
    let w = writer(client.clone());
    let lead = tokio::spawn(async move {
        driver::lead(client, w, &config, &metrics, leader_rx, shutdown_rx).await
    });
    // two: annotate + bind + Scheduled event; four: status + event.
    wait_for(&writes, 5).await;
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    shutdown_tx.send_replace(true);
    assert_eq!(lead.await.unwrap(), Ended::Shutdown);
    let writes = writes.lock().unwrap().clone();
    let summary: Vec<(String, String)> = writes
        .iter()
        .map(|s| {
            (
                s.method.clone(),
                s.uri.split('?').next().unwrap().to_string(),
            )
        })
        .collect();
    let idx = |m: &str, p: &str| {
        summary
            .iter()
            .position(|(a, b)| a == m && b == p)
            .unwrap_or_else(|| panic!("no {m} {p} in {summary:?}"))
    };
    let annotate = idx("PATCH", "/api/v1/namespaces/ml/pods/two");
    let bind = idx("POST", "/api/v1/namespaces/ml/pods/two/binding");
    assert!(annotate < bind, "annotation before bind: {summary:?}");
    assert_eq!(
        writes[annotate].body["metadata"]["annotations"]["kestrel.dev/gpu-indices"], "6,7",
        "GPUs 0-5 are held by the pod bound before"
    );
    assert_eq!(writes[bind].body["target"]["name"], "gpu-0");
    let status = idx("PATCH", "/api/v1/namespaces/ml/pods/four/status");
    assert!(writes[status].body["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap()
        .contains("Insufficient nvidia.com/gpu"));
    idx("POST", "/apis/events.k8s.io/v1/namespaces/ml/events");
    // Two events: FailedScheduling for `four`, Scheduled for `two`.
    let events = summary
        .iter()
        .filter(|(_, p)| p.ends_with("/events"))
        .count();
    assert_eq!(events, 2, "{summary:?}");
    // Every listing the driver makes is one this server answers: a kind newly watched
    // is served here, or (another project's) in driver::other_projects_listings.
    let unknown: Vec<&(String, String)> = summary.iter().filter(|(m, _)| m == "GET").collect();
    assert!(
        unknown.is_empty(),
        "listings this mock does not answer: {unknown:?}"
    );
    assert_eq!(
        writes.len(),
        5,
        "nothing for other schedulers' pods: {summary:?}"
    );
}

#[tokio::test]
async fn losing_the_lease_stops_binding_at_once() {
    let (client, handle) = mock_client();
    let writes = Arc::new(Mutex::new(Vec::new()));
    let (leader_tx, leader_rx) = watch::channel(true);
    let leader_tx = Arc::new(leader_tx);
    let flip = leader_tx.clone();
    // The lease is lost while the first annotation patch is in flight.
    let on_write = move |_: &Seen| {
        flip.send_replace(false);
    };
    let pods = (0..20)
        .map(|i| gpu_pod(&format!("p{i}"), 1, None, None, "kestrel"))
        .collect();
    tokio::spawn(scripted_server(
        handle,
        vec![gpu_node("gpu-0"), gpu_node("gpu-1"), gpu_node("gpu-2")],
        pods,
        writes.clone(),
        on_write,
    ));
    let (_shutdown_tx, shutdown_rx) = watch::channel(false);
    let metrics = Metrics::new();
    // Fewer in flight than pods: the writes started before the loss stay within the bound.
    let mut config = DriverConfig::new("kestrel");
    config.max_in_flight = 16;
    let w = writer(client.clone());
    let ended = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        driver::lead(client, w, &config, &metrics, leader_rx, shutdown_rx),
    )
    .await
    .expect("lead returns when the lease is lost");
    assert_eq!(ended, Ended::LostLease);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let writes = writes.lock().unwrap();
    assert!(
        writes.iter().all(|s| !s.uri.contains("/binding")),
        "a binding was posted after the lease was lost: {writes:?}"
    );
    assert!(
        !writes.is_empty() && writes.len() <= config.max_in_flight,
        "{}",
        writes.len()
    );
    let _: Option<Pod> = None;
}

#[tokio::test]
async fn a_victim_gets_disruption_target_then_a_uid_guarded_delete_then_an_event() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let (patch, send) = expect(
            &mut handle,
            "PATCH",
            "/api/v1/namespaces/ml/pods/sweep-3/status?&fieldManager=kestrel",
            Some("application/strategic-merge-patch+json"),
        )
        .await;
        let condition = &patch.body["status"]["conditions"][0];
        assert_eq!(condition["type"], "DisruptionTarget");
        assert_eq!(condition["status"], "True");
        assert_eq!(condition["reason"], "PreemptionByScheduler");
        assert!(condition["message"]
            .as_str()
            .unwrap()
            .contains("for ml/train-0"));
        reply(
            send,
            200,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sweep-3"}}),
        );

        let (delete, send) = next(&mut handle).await;
        assert_eq!(delete.method, "DELETE");
        assert_eq!(delete.uri, "/api/v1/namespaces/ml/pods/sweep-3?");
        assert_eq!(delete.body["preconditions"]["uid"], "uid-9");
        assert!(
            delete.body.get("gracePeriodSeconds").is_none(),
            "the pod's own grace period applies: {}",
            delete.body
        );
        reply(
            send,
            200,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sweep-3"}}),
        );

        let (event, send) = next(&mut handle).await;
        assert_eq!(event.method, "POST");
        assert_eq!(event.body["reason"], "Preempted");
        assert_eq!(event.body["type"], "Normal");
        assert_eq!(event.body["regarding"]["uid"], "uid-9");
        reply(send, 201, event.body.clone());
    });
    let job = EvictWrite {
        namespace: "ml".into(),
        name: "sweep-3".into(),
        uid: "uid-9".into(),
        message: "preempted to place a workload of priority 1000 (for ml/train-0)".into(),
    };
    writer(client).evict(&job).await.unwrap();
    server.await.unwrap();
}

#[tokio::test]
async fn a_victim_that_is_already_gone_is_not_an_error() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let (patch, send) = next(&mut handle).await;
        assert_eq!(patch.method, "PATCH");
        reply(send, 404, status(404, "NotFound"));
    });
    let job = EvictWrite {
        namespace: "ml".into(),
        name: "sweep-3".into(),
        uid: "uid-9".into(),
        message: "preempted".into(),
    };
    writer(client).evict(&job).await.unwrap();
    server.await.unwrap();
    // A server error is reported, so the eviction is tried again.
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let (_, send) = next(&mut handle).await;
        reply(send, 500, status(500, "InternalError"));
    });
    assert!(writer(client).evict(&job).await.is_err());
    server.await.unwrap();
}

#[tokio::test]
async fn a_checkpointing_victim_is_asked_by_annotation_and_event() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let (patch, send) = expect(
            &mut handle,
            "PATCH",
            "/api/v1/namespaces/ml/pods/train-7?&fieldManager=kestrel",
            Some("application/merge-patch+json"),
        )
        .await;
        assert_eq!(
            patch.body,
            json!({"metadata": {"uid": "uid-7",
                "annotations": {"kestrel.dev/checkpoint-request": "2026-11-30T12:00:00Z"}}})
        );
        reply(
            send,
            200,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-7"}}),
        );
        let (event, send) = next(&mut handle).await;
        assert_eq!(event.body["reason"], "CheckpointRequested");
        assert_eq!(event.body["type"], "Normal");
        assert!(event.body["note"].as_str().unwrap().contains("within 60s"));
        reply(send, 201, event.body.clone());
    });
    let job = CheckpointWrite {
        namespace: "ml".into(),
        name: "train-7".into(),
        uid: "uid-7".into(),
        requested_at: "2026-11-30T12:00:00Z".into(),
        grace_seconds: 60,
        message: "preempted".into(),
    };
    writer(client).request_checkpoint(&job).await.unwrap();
    server.await.unwrap();
}

#[tokio::test]
async fn queue_statuses_are_written_by_server_side_apply() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let (patch, send) =
            expect(&mut handle, "PATCH", "/apis/scheduling.kestrel.dev/v1alpha1/namespaces/ml/localqueues/team/status?&force=true&fieldManager=kestrel", Some("application/apply-patch+yaml")).await;
        assert_eq!(
            patch.body,
            json!({"apiVersion": "scheduling.kestrel.dev/v1alpha1", "kind": "LocalQueue",
                "metadata": {"name": "team", "namespace": "ml"},
                "status": {"pendingWorkloads": 2, "admittedWorkloads": 1}})
        );
        reply(send, 200, patch.body.clone());
    });
    let job = QueueStatusWrite {
        kind: "LocalQueue",
        namespace: Some("ml".into()),
        name: "team".into(),
        status: json!({"pendingWorkloads": 2, "admittedWorkloads": 1}),
    };
    writer(client).apply_queue_status(&job).await.unwrap();
    server.await.unwrap();
}

#[tokio::test]
async fn a_preemptor_gets_its_nominated_node_on_its_status() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let (patch, send) = expect(
            &mut handle,
            "PATCH",
            "/api/v1/namespaces/ml/pods/train-0/status?&fieldManager=kestrel",
            Some("application/strategic-merge-patch+json"),
        )
        .await;
        assert_eq!(
            patch.body,
            json!({"status": {"nominatedNodeName": "gpu-3"}})
        );
        reply(
            send,
            200,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-0"}}),
        );
    });
    let job = NominationWrite {
        namespace: "ml".into(),
        name: "train-0".into(),
        node: "gpu-3".into(),
    };
    writer(client).nominate(&job).await.unwrap();
    server.await.unwrap();
}

#[tokio::test]
async fn a_live_snapshot_explains_pending_pods_from_the_listing_and_writes_nothing() {
    use kestrel_view::estimates::Estimates;
    use kestrel_view::explain_view::{
        find_node, find_pod, node_view, pod_view, queue_list, EngineAt,
    };
    const HOUR: i64 = 3_600_000;
    let unix_now: i64 = 1_800_000_000_000;
    let stamps = Stamps::at(unix_now);
    let stamp = |ago: i64| stamps.ago(ago);
    let (client, handle) = mock_client();
    let writes = Arc::new(Mutex::new(Vec::new()));
    // "big" has run 1 h of the 2 h it declares on GPUs 0-5; "four" (created 30 min ago)
    // cannot fit beside it, "two" (10 min ago) can.
    let mut big = gpu_pod("big", 6, Some("gpu-0"), Some("0,1,2,3,4,5"), "kestrel");
    big["metadata"]["annotations"]["kestrel.dev/runtime-estimate"] = json!("2h");
    big["metadata"]["creationTimestamp"] = json!(stamp(HOUR + 60_000));
    big["status"]["startTime"] = json!(stamp(HOUR));
    let mut four = gpu_pod("four", 4, None, None, "kestrel");
    four["metadata"]["creationTimestamp"] = json!(stamp(HOUR / 2));
    let mut two = gpu_pod("two", 2, None, None, "kestrel");
    two["metadata"]["creationTimestamp"] = json!(stamp(HOUR / 6));
    let server = tokio::spawn(scripted_server(
        handle,
        vec![gpu_node("gpu-0")],
        vec![big, four, two],
        writes.clone(),
        |_| {},
    ));
    let lookback = std::time::Duration::from_secs(86_400);
    let (state, now) = driver::snapshot(
        &client,
        &DriverConfig::new("kestrel"),
        unix_now,
        lookback,
        std::time::Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!(now, 86_400_000, "moments count from a day back");
    let live = EngineAt {
        scheduler: state.scheduler().clone(),
        now,
    };
    let estimates = Estimates::declared();

    let four = pod_view(&live, find_pod(&live, "ml/four").unwrap(), &estimates);
    assert_eq!(four.phase, "Pending");
    assert_eq!(
        four.waiting_s,
        Some(1800.0),
        "waiting since its creationTimestamp"
    );
    let why = four.explanation.as_ref().unwrap();
    assert!(
        why.message.contains("Insufficient nvidia.com/gpu"),
        "{}",
        why.message
    );
    let room = four.help.as_ref().unwrap().room.as_ref().unwrap();
    let in_an_hour = (now + HOUR as u64) as f64 / 1000.0;
    assert_eq!(
        (room.node.as_str(), room.at_s),
        ("gpu-0", in_an_hour),
        "big ends at its start plus its estimate"
    );
    assert_eq!(room.ending[0].pod, "ml/big");

    let list = queue_list(&live, None, None);
    let pending: Vec<&str> = list.pending.iter().map(|e| e.pod.as_str()).collect();
    assert_eq!(pending, ["ml/four"], "two is placed by the dry cycle");
    let node = node_view(&live, find_node(&live, "gpu-0").unwrap(), &estimates);
    let big = node.pods.iter().find(|p| p.pod == "ml/big").unwrap();
    assert_eq!(big.ends_at_s, Some(in_an_hour));

    // Predicted starts (the simulator resumed from the snapshot) are the CLI's, which
    // links the simulator: `live_view`'s tests.

    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(
        writes.lock().unwrap().is_empty(),
        "a snapshot writes nothing: {:?}",
        writes.lock().unwrap()
    );
    server.abort();
}

#[tokio::test]
async fn a_snapshot_whose_listings_do_not_come_names_them() {
    let (client, mut handle) = mock_client();
    // An API server that never answers.
    let server = tokio::spawn(async move {
        let mut hanging = Vec::new();
        while let Some((_, send)) = handle.next_request().await {
            hanging.push(send);
        }
    });
    let e = driver::snapshot(
        &client,
        &DriverConfig::new("kestrel"),
        1_800_000_000_000,
        std::time::Duration::from_secs(3600),
        std::time::Duration::from_millis(300),
    )
    .await
    .err()
    .expect("times out");
    let text = e.to_string();
    assert!(text.contains("Pod, Node"), "{text}");
    assert!(text.contains("may list them"), "{text}");
    server.abort();
}
