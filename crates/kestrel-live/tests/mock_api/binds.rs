//! Binds (annotation, binding, conflicts, a replica without the lease) and unschedulable
//! pods' condition and event.

use super::*;

#[tokio::test]
async fn bind_writes_the_gpu_annotation_then_posts_the_binding() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let (patch, send) = expect(
            &mut handle,
            "PATCH",
            "/api/v1/namespaces/ml/pods/train-0?&fieldManager=kestrel",
            Some("application/merge-patch+json"),
        )
        .await;
        assert_eq!(
            patch.body,
            json!({"metadata": {"annotations": {"kestrel.dev/gpu-indices": "0,1,2,3"}}})
        );
        reply(
            send,
            200,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-0"}}),
        );

        let (bind, send) = next(&mut handle).await;
        assert_eq!(bind.method, "POST");
        assert_eq!(
            bind.uri,
            "/api/v1/namespaces/ml/pods/train-0/binding?&fieldManager=kestrel"
        );
        assert_eq!(bind.content_type.as_deref(), Some("application/json"));
        assert_eq!(
            bind.body,
            json!({
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": "train-0", "namespace": "ml", "uid": "uid-1"},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-0"}
            })
        );
        reply(
            send,
            201,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        );
    });
    let outcome = writer(client).bind(&job(Some("0,1,2,3")), || true).await;
    server.await.unwrap();
    assert_eq!(outcome, BindOutcome::Bound);
}

#[tokio::test]
async fn with_gpu_indices_in_the_binding_a_bind_is_one_write() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let (bind, send) = next(&mut handle).await;
        assert_eq!(
            (bind.method.as_str(), bind.uri.as_str()),
            (
                "POST",
                "/api/v1/namespaces/ml/pods/train-0/binding?&fieldManager=kestrel"
            ),
            "no annotation patch first"
        );
        assert_eq!(
            bind.body,
            json!({
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": "train-0", "namespace": "ml", "uid": "uid-1",
                             "annotations": {"kestrel.dev/gpu-indices": "0,1,2,3"}},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-0"}
            })
        );
        reply(
            send,
            201,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        );
        let pod = |node: Option<&str>| {
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "train-0", "namespace": "ml", "uid": "uid-1"},
                   "spec": {"nodeName": node, "containers": [{"name": "c"}]}})
        };
        // A server error may come after the binding was written: the pod is read back
        // (again after a failed read), and reads back unbound: requeued.
        let (bind, send) = next(&mut handle).await;
        assert_eq!(bind.method, "POST");
        reply(send, 500, status(500, "InternalError"));
        let (get, send) = next(&mut handle).await;
        assert_eq!(
            (get.method.as_str(), get.uri.as_str()),
            ("GET", "/api/v1/namespaces/ml/pods/train-0")
        );
        reply(send, 503, status(503, "ServiceUnavailable"));
        let (get, send) = next(&mut handle).await;
        assert_eq!(get.method, "GET");
        reply(send, 200, pod(None));
        // The same, but the binding was written: bound.
        let (_, send) = next(&mut handle).await;
        reply(send, 504, status(504, "Timeout"));
        let (get, send) = next(&mut handle).await;
        assert_eq!(get.method, "GET");
        reply(send, 200, pod(Some("gpu-0")));
        // A refused bind (4xx) has written nothing to the pod, and is retried unread.
        let (bind, send) = next(&mut handle).await;
        assert_eq!(bind.method, "POST");
        reply(send, 422, status(422, "Invalid"));
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), handle.next_request())
                .await
                .is_err(),
            "nothing after the refused bind"
        );
    });
    let writer = writer(client).with_gpu_indices_write(GpuIndicesWrite::Binding);
    let job = job(Some("0,1,2,3"));
    assert_eq!(writer.bind(&job, || true).await, BindOutcome::Bound);
    let outcome = writer.bind(&job, || true).await;
    assert!(
        matches!(&outcome, BindOutcome::Retry(why) if why.contains("reads back unbound")),
        "{outcome:?}"
    );
    assert_eq!(writer.bind(&job, || true).await, BindOutcome::Bound);
    assert!(matches!(
        writer.bind(&job, || true).await,
        BindOutcome::Retry(_)
    ));
    server.await.unwrap();
}

#[tokio::test]
async fn a_pod_without_gpus_is_bound_without_an_annotation() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let (bind, send) = next(&mut handle).await;
        assert_eq!(bind.method, "POST", "no annotation patch first");
        assert!(bind
            .uri
            .starts_with("/api/v1/namespaces/ml/pods/train-0/binding"));
        reply(
            send,
            201,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        );
    });
    assert_eq!(
        writer(client).bind(&job(None), || true).await,
        BindOutcome::Bound
    );
    server.await.unwrap();
}

#[tokio::test]
async fn a_conflicting_bind_reads_the_pod_back_and_a_gone_pod_is_reported() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let (_, send) = next(&mut handle).await;
        reply(
            send,
            200,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-0"}}),
        );
        let (_, send) = next(&mut handle).await;
        reply(send, 409, status(409, "Conflict"));
        let (get, send) = next(&mut handle).await;
        assert_eq!(get.method, "GET");
        assert_eq!(get.uri, "/api/v1/namespaces/ml/pods/train-0");
        reply(
            send,
            200,
            json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "train-0", "namespace": "ml", "uid": "uid-1"},
            "spec": {"nodeName": "gpu-9", "containers": [{"name": "c"}]}}),
        );
        // Second bind: the annotation patch finds no pod.
        let (_, send) = next(&mut handle).await;
        reply(send, 404, status(404, "NotFound"));
    });
    let w = writer(client);
    let BindOutcome::Conflict(Some(pod)) = w.bind(&job(Some("0")), || true).await else {
        panic!("expected a conflict with the pod read back")
    };
    assert_eq!(pod.spec.unwrap().node_name.as_deref(), Some("gpu-9"));
    assert_eq!(w.bind(&job(Some("0")), || true).await, BindOutcome::PodGone);
    server.await.unwrap();
}

#[tokio::test]
async fn a_replica_that_lost_the_lease_posts_no_binding() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let (patch, send) = next(&mut handle).await;
        assert_eq!(patch.method, "PATCH");
        reply(
            send,
            200,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-0"}}),
        );
        // Nothing else may arrive.
        assert!(
            handle.next_request().await.is_none(),
            "a binding was posted"
        );
    });
    let outcome = writer(client).bind(&job(Some("1")), || false).await;
    assert!(matches!(outcome, BindOutcome::Retry(_)), "{outcome:?}");
    server.await.unwrap();
}

#[tokio::test]
async fn unschedulable_pods_get_the_condition_and_an_event() {
    let (client, mut handle) = mock_client();
    let message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.";
    let server = tokio::spawn(async move {
        let (patch, send) = expect(
            &mut handle,
            "PATCH",
            "/api/v1/namespaces/ml/pods/train-0/status?&fieldManager=kestrel",
            Some("application/strategic-merge-patch+json"),
        )
        .await;
        let condition = &patch.body["status"]["conditions"][0];
        assert_eq!(condition["type"], "PodScheduled");
        assert_eq!(condition["status"], "False");
        assert_eq!(condition["reason"], "Unschedulable");
        assert_eq!(condition["message"], message);
        assert!(condition["lastTransitionTime"].is_string());
        reply(
            send,
            200,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-0"}}),
        );

        let (event, send) = next(&mut handle).await;
        assert_eq!(event.method, "POST");
        assert_eq!(event.uri, "/apis/events.k8s.io/v1/namespaces/ml/events?");
        let e = &event.body;
        assert_eq!(e["apiVersion"], "events.k8s.io/v1");
        assert_eq!(e["kind"], "Event");
        assert_eq!(e["reason"], "FailedScheduling");
        assert_eq!(e["type"], "Warning");
        assert_eq!(e["action"], "Scheduling");
        assert_eq!(e["note"], message);
        assert_eq!(e["reportingController"], "kestrel");
        assert_eq!(e["reportingInstance"], "kestrel-replica-a");
        assert_eq!(
            e["regarding"],
            json!({"apiVersion": "v1", "kind": "Pod", "namespace": "ml", "name": "train-0", "uid": "uid-1"})
        );
        assert!(e["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("train-0."));
        assert!(e["eventTime"].is_string());
        reply(send, 201, e.clone());
    });
    let job = StatusWrite {
        namespace: "ml".into(),
        name: "train-0".into(),
        uid: "uid-1".into(),
        reason: "Unschedulable",
        message: message.into(),
    };
    writer(client).report_unschedulable(&job).await.unwrap();
    server.await.unwrap();
}
