//! The API side: PodGroup status by server-side apply, and the whole loop against a
//! scripted API server.

use crate::common::*;

// ---- The API: PodGroup status by server-side apply --------------------------------------

type MockHandle = Handle<Request<Body>, Response<Body>>;
/// Writes the scripted server saw: (method, path, body).
type Writes = Arc<Mutex<Vec<(String, String, Value)>>>;

fn mock_client() -> (Client, MockHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), handle)
}

/// A writer in `patch` mode (the annotation, then the binding), whose requests the
/// tests check.
fn writer(client: Client) -> ApiWriter {
    ApiWriter::new(
        client,
        "kestrel",
        "replica-a",
        Arc::new(Limiter::unlimited()),
    )
    .with_gpu_indices_write(GpuIndicesWrite::Patch)
}

fn query(uri: &str) -> BTreeSet<String> {
    uri.split_once('?')
        .map(|(_, q)| q)
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn pod_group_status_is_written_by_server_side_apply_of_the_status_subresource() {
    let (client, mut handle) = mock_client();
    let since = Time(Timestamp::from_second(1_700_000_000).unwrap());
    let write = GroupStatusWrite {
        namespace: "ml".into(),
        name: "pt".into(),
        phase: PodGroupPhase::Pending,
        scheduled: 2,
        running: 1,
        condition: "False",
        reason: "Incomplete".into(),
        message: "gang ml/pt is incomplete: 2 of 3 pods exist (minMember 3); waiting for the rest to be created".into(),
        observed_generation: Some(4),
        since: Some(since.clone()),
    };
    let expected = json!({
        "apiVersion": "scheduling.kestrel.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "pt", "namespace": "ml"},
        "status": {
            "phase": "Pending",
            "scheduled": 2,
            "running": 1,
            "conditions": [{
                "type": "Scheduled",
                "status": "False",
                "reason": "Incomplete",
                "message": "gang ml/pt is incomplete: 2 of 3 pods exist (minMember 3); waiting for the rest to be created",
                "lastTransitionTime": "2023-11-14T22:13:20Z",
                "observedGeneration": 4
            }]
        }
    });
    assert_eq!(pod_group_status_patch(&write, &since), expected);
    let server = tokio::spawn(async move {
        let (req, send) = handle.next_request().await.expect("a request");
        assert_eq!(req.method(), "PATCH");
        let uri = req.uri().to_string();
        assert_eq!(
            uri.split('?').next().unwrap(),
            "/apis/scheduling.kestrel.dev/v1alpha1/namespaces/ml/podgroups/pt/status"
        );
        assert_eq!(
            query(&uri),
            BTreeSet::from(["fieldManager=kestrel".to_string(), "force=true".to_string()])
        );
        assert_eq!(
            req.headers().get("content-type").unwrap(),
            "application/apply-patch+yaml"
        );
        let body: Value =
            serde_json::from_slice(&req.into_body().collect_bytes().await.unwrap()).unwrap();
        assert_eq!(body, expected);
        let mut answer = expected.clone();
        answer["spec"] = json!({"minMember": 3});
        send.send_response(
            Response::builder()
                .status(200)
                .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                .unwrap(),
        );
    });
    let written = writer(client).apply_pod_group_status(&write).await.unwrap();
    assert_eq!(written, since);
    server.await.unwrap();
}

// ---- The whole loop against a scripted API server ---------------------------------------

fn list(api_version: &str, kind: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": api_version, "kind": format!("{kind}List"), "metadata": {"resourceVersion": "100"}, "items": items})
}

/// Serves listings (`None`: 404, the CRD is not installed); watches hang. Writes are
/// recorded; annotation patches are answered only once `hold` of them are in flight
/// together.
async fn scripted_server(
    mut handle: MockHandle,
    nodes: Vec<Value>,
    pods: Vec<Value>,
    pod_groups: Option<Vec<Value>>,
    hold: usize,
    writes: Writes,
) {
    let mut hanging = Vec::new();
    let mut held = Vec::new();
    let ok = |v: &Value| {
        Response::builder()
            .status(200)
            .body(Body::from(serde_json::to_vec(v).unwrap()))
            .unwrap()
    };
    while let Some((req, send)) = handle.next_request().await {
        let method = req.method().to_string();
        let uri = req.uri().to_string();
        let path = uri.split('?').next().unwrap().to_string();
        let bytes = req.into_body().collect_bytes().await.unwrap();
        if method == "GET" && uri.contains("watch=true") {
            hanging.push(send);
            continue;
        }
        let kestrel = "scheduling.kestrel.dev/v1alpha1";
        let listing = match (method.as_str(), path.as_str()) {
            ("GET", "/api/v1/nodes") => Some(list("v1", "Node", nodes.clone())),
            ("GET", "/api/v1/pods") => Some(list("v1", "Pod", pods.clone())),
            ("GET", "/apis/scheduling.k8s.io/v1/priorityclasses") => {
                Some(list("scheduling.k8s.io/v1", "PriorityClass", vec![]))
            }
            ("GET", "/apis/node.k8s.io/v1/runtimeclasses") => {
                Some(list("node.k8s.io/v1", "RuntimeClass", vec![]))
            }
            ("GET", "/api/v1/namespaces") => Some(list("v1", "Namespace", vec![])),
            ("GET", "/apis/policy/v1/poddisruptionbudgets") => {
                Some(list("policy/v1", "PodDisruptionBudget", vec![]))
            }
            ("GET", "/api/v1/resourcequotas") => Some(list("v1", "ResourceQuota", vec![])),
            ("GET", "/api/v1/limitranges") => Some(list("v1", "LimitRange", vec![])),
            ("GET", "/apis/batch/v1/jobs") => Some(list("batch/v1", "Job", vec![])),
            ("GET", "/apis/apps/v1/statefulsets") => Some(list("apps/v1", "StatefulSet", vec![])),
            ("GET", "/apis/apps/v1/replicasets") => Some(list("apps/v1", "ReplicaSet", vec![])),
            ("GET", "/api/v1/persistentvolumeclaims") => {
                Some(list("v1", "PersistentVolumeClaim", vec![]))
            }
            ("GET", "/api/v1/persistentvolumes") => Some(list("v1", "PersistentVolume", vec![])),
            ("GET", "/apis/storage.k8s.io/v1/storageclasses") => {
                Some(list("storage.k8s.io/v1", "StorageClass", vec![]))
            }
            ("GET", "/apis/storage.k8s.io/v1/csinodes") => {
                Some(list("storage.k8s.io/v1", "CSINode", vec![]))
            }
            // Other projects' kinds: not served, as on a cluster without them.
            ("GET", p)
                if kestrel_live::driver::other_projects_listings().contains(&p.to_string()) =>
            {
                send.send_response(not_found());
                continue;
            }
            (
                "GET",
                "/apis/scheduling.kestrel.dev/v1alpha1/clusterqueues"
                | "/apis/scheduling.kestrel.dev/v1alpha1/localqueues"
                | "/apis/scheduling.kestrel.dev/v1alpha1/cohorts"
                | "/apis/scheduling.kestrel.dev/v1alpha1/resourceflavors",
            ) if pod_groups.is_some() => Some(list(kestrel, "List", vec![])),
            (
                "GET",
                "/apis/scheduling.kestrel.dev/v1alpha1/podgroups"
                | "/apis/scheduling.kestrel.dev/v1alpha1/clusterqueues"
                | "/apis/scheduling.kestrel.dev/v1alpha1/localqueues"
                | "/apis/scheduling.kestrel.dev/v1alpha1/cohorts"
                | "/apis/scheduling.kestrel.dev/v1alpha1/resourceflavors",
            ) => match &pod_groups {
                Some(items) => Some(list(kestrel, "PodGroup", items.clone())),
                None => {
                    send.send_response(not_found());
                    continue;
                }
            },
            ("GET", "/apis/scheduling.kestrel.dev/v1alpha1/topologies") => {
                Some(list(kestrel, "Topology", vec![]))
            }
            _ => None,
        };
        if let Some(listing) = listing {
            send.send_response(ok(&listing));
            continue;
        }
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        writes
            .lock()
            .unwrap()
            .push((method.clone(), path.clone(), body.clone()));
        let answer = if path.ends_with("/binding") {
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
        } else if path.contains("/events") || path.contains("/podgroups/") {
            body
        } else {
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": "ml"}})
        };
        let annotate = method == "PATCH"
            && path.starts_with("/api/v1/namespaces/ml/pods/")
            && !path.ends_with("/status");
        if annotate && hold > 1 {
            held.push((send, answer));
            if held.len() == hold {
                for (send, answer) in held.drain(..) {
                    send.send_response(ok(&answer));
                }
            }
            continue;
        }
        send.send_response(ok(&answer));
    }
}

/// The API server's answer for a kind it does not serve (its CRD is not installed).
fn not_found() -> Response<Body> {
    Response::builder()
        .status(404)
        .body(Body::from(serde_json::to_vec(&json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "reason": "NotFound", "message": "the server could not find the requested resource", "code": 404})).unwrap()))
        .unwrap()
}

fn api_node(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"topology.kestrel.dev/rack": "r1"}},
        "status": {"allocatable": {"cpu": "200", "memory": "2000Gi", "pods": "110", "nvidia.com/gpu": "8"}}})
}

async fn wait_for(writes: &Writes, what: impl Fn(&[(String, String, Value)]) -> bool) {
    for _ in 0..500 {
        if what(&writes.lock().unwrap()) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("never happened: {:#?}", writes.lock().unwrap());
}

#[tokio::test]
async fn a_gangs_binds_go_out_together_and_its_status_follows() {
    let (client, handle) = mock_client();
    let writes = Arc::new(Mutex::new(Vec::new()));
    let pods: Vec<Value> = (0..3)
        .map(|i| serde_json::to_value(member(&format!("pt-{i}"), "pt", 2)).unwrap())
        .collect();
    let group = serde_json::to_value(pod_group("pt", json!({"minMember": 3}))).unwrap();
    // The three annotation patches are answered only when all three are in flight.
    tokio::spawn(scripted_server(
        handle,
        vec![api_node("gpu-0")],
        pods,
        Some(vec![group]),
        3,
        writes.clone(),
    ));
    let (_leader_tx, leader_rx) = watch::channel(true);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let metrics = Metrics::new();
    let config = DriverConfig::new("kestrel");
    let w = writer(client.clone());
    let lead = tokio::spawn(async move {
        driver::lead(client, w, &config, &metrics, leader_rx, shutdown_rx).await
    });
    wait_for(&writes, |w| {
        w.iter().any(|(_, p, b)| {
            p.ends_with("/podgroups/pt/status") && b["status"]["phase"] == "Scheduled"
        })
    })
    .await;
    shutdown_tx.send_replace(true);
    assert_eq!(lead.await.unwrap(), Ended::Shutdown);
    let writes = writes.lock().unwrap().clone();
    let summary: Vec<(String, String)> = writes
        .iter()
        .map(|(m, p, _)| (m.clone(), p.clone()))
        .collect();
    let binds = summary
        .iter()
        .filter(|(m, p)| m == "POST" && p.ends_with("/binding"))
        .count();
    assert_eq!(binds, 3, "{summary:#?}");
    let statuses: Vec<&Value> = writes
        .iter()
        .filter(|(_, p, _)| p.ends_with("/podgroups/pt/status"))
        .map(|(_, _, b)| b)
        .collect();
    assert_eq!(
        statuses.len(),
        1,
        "one write, once the gang is bound: {statuses:#?}"
    );
    let status = &statuses[0]["status"];
    assert_eq!(status["scheduled"], 3);
    assert_eq!(status["conditions"][0]["status"], "True");
    assert_eq!(status["conditions"][0]["reason"], "Scheduled");
    let last_bind = summary
        .iter()
        .rposition(|(m, p)| m == "POST" && p.ends_with("/binding"))
        .unwrap();
    let status_at = summary
        .iter()
        .position(|(_, p)| p.ends_with("/podgroups/pt/status"))
        .unwrap();
    assert!(last_bind < status_at, "{summary:#?}");
}

#[tokio::test]
async fn without_kestrels_crds_plain_pods_are_still_scheduled() {
    let (client, handle) = mock_client();
    let writes = Arc::new(Mutex::new(Vec::new()));
    let mut plain = serde_json::to_value(member("solo", "x", 1)).unwrap();
    plain["metadata"]["labels"] = json!({});
    let gang = serde_json::to_value(member("g-0", "g", 1)).unwrap();
    tokio::spawn(scripted_server(
        handle,
        vec![api_node("gpu-0")],
        vec![plain, gang],
        None,
        1,
        writes.clone(),
    ));
    let (_leader_tx, leader_rx) = watch::channel(true);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let metrics = Metrics::new();
    let config = DriverConfig::new("kestrel");
    let w = writer(client.clone());
    let lead = tokio::spawn(async move {
        driver::lead(client, w, &config, &metrics, leader_rx, shutdown_rx).await
    });
    wait_for(&writes, |w| {
        w.iter()
            .any(|(m, p, _)| m == "POST" && p == "/api/v1/namespaces/ml/pods/solo/binding")
            && w.iter()
                .any(|(m, p, _)| m == "PATCH" && p == "/api/v1/namespaces/ml/pods/g-0/status")
    })
    .await;
    shutdown_tx.send_replace(true);
    assert_eq!(lead.await.unwrap(), Ended::Shutdown);
    let writes = writes.lock().unwrap().clone();
    let waits = writes
        .iter()
        .find(|(_, p, _)| p == "/api/v1/namespaces/ml/pods/g-0/status")
        .unwrap();
    assert!(
        waits.2["status"]["conditions"][0]["message"]
            .as_str()
            .unwrap()
            .contains("gang ml/g does not exist"),
        "{waits:?}"
    );
}
