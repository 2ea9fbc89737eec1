//! Lease election: creation, renewal, takeover, release.

use super::*;

const LEASE_PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";

#[tokio::test]
async fn lease_is_created_when_absent_and_renewed_keeping_its_acquire_time() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let (get, send) = next(&mut handle).await;
        assert_eq!(
            (get.method.as_str(), get.uri.as_str()),
            ("GET", &*format!("{LEASE_PATH}/kestrel"))
        );
        reply(send, 404, status(404, "NotFound"));
        let (create, send) = next(&mut handle).await;
        assert_eq!(
            (create.method.as_str(), create.uri.as_str()),
            ("POST", &*format!("{LEASE_PATH}?"))
        );
        let spec = &create.body["spec"];
        assert_eq!(create.body["metadata"]["name"], "kestrel");
        assert_eq!(spec["holderIdentity"], "replica-a");
        assert_eq!(spec["leaseDurationSeconds"], 15);
        assert_eq!(spec["leaseTransitions"], 0);
        assert!(spec["acquireTime"].is_string() && spec["renewTime"].is_string());
        reply(send, 201, create.body.clone());

        // Renewal: GET, then PUT with the same acquire time and a new renew time.
        let (_, send) = next(&mut handle).await;
        reply(send, 200, lease("replica-a", 3));
        let (put, send) = next(&mut handle).await;
        assert_eq!(
            (put.method.as_str(), put.uri.as_str()),
            ("PUT", &*format!("{LEASE_PATH}/kestrel?"))
        );
        assert_eq!(
            put.body["metadata"]["resourceVersion"], "7",
            "optimistic concurrency"
        );
        assert_eq!(put.body["spec"]["holderIdentity"], "replica-a");
        assert_eq!(
            put.body["spec"]["acquireTime"],
            "2025-01-01T00:00:00.000000Z"
        );
        assert_ne!(put.body["spec"]["renewTime"], "2025-01-01T00:00:05.000000Z");
        assert_eq!(put.body["spec"]["leaseTransitions"], 3);
        reply(send, 200, put.body.clone());

        // A renewal the server refuses (someone else updated it): not leader.
        let (_, send) = next(&mut handle).await;
        reply(send, 200, lease("replica-a", 3));
        let (_, send) = next(&mut handle).await;
        reply(send, 409, status(409, "Conflict"));
    });
    let mut elector = LeaderElector::new(
        client,
        LeaseConfig::new("kube-system", "kestrel", "replica-a"),
    );
    assert!(elector.try_acquire_or_renew().await.unwrap(), "created");
    assert!(elector.try_acquire_or_renew().await.unwrap(), "renewed");
    assert!(!elector.try_acquire_or_renew().await.unwrap(), "conflict");
    server.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_expired_lease_is_taken_over_and_a_live_one_is_not() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        // Held by replica-b and just seen: no write.
        let (_, send) = next(&mut handle).await;
        reply(send, 200, lease("replica-b", 4));
        // 10 s later, unchanged but not yet 15 s: still no write.
        let (get, send) = next(&mut handle).await;
        assert_eq!(get.method, "GET");
        reply(send, 200, lease("replica-b", 4));
        // 16 s after first seen unchanged: take it over.
        let (_, send) = next(&mut handle).await;
        reply(send, 200, lease("replica-b", 4));
        let (put, send) = next(&mut handle).await;
        assert_eq!(put.method, "PUT");
        assert_eq!(put.body["spec"]["holderIdentity"], "replica-a");
        assert_eq!(put.body["spec"]["leaseTransitions"], 5);
        assert_ne!(
            put.body["spec"]["acquireTime"],
            "2025-01-01T00:00:00.000000Z"
        );
        reply(send, 200, put.body.clone());
    });
    let mut elector = LeaderElector::new(
        client,
        LeaseConfig::new("kube-system", "kestrel", "replica-a"),
    );
    assert!(!elector.try_acquire_or_renew().await.unwrap());
    tokio::time::advance(std::time::Duration::from_secs(10)).await;
    assert!(!elector.try_acquire_or_renew().await.unwrap());
    tokio::time::advance(std::time::Duration::from_secs(6)).await;
    assert!(elector.try_acquire_or_renew().await.unwrap());
    server.await.unwrap();
}

#[tokio::test]
async fn released_lease_clears_the_holder() {
    let (client, mut handle) = mock_client();
    let server = tokio::spawn(async move {
        let (_, send) = next(&mut handle).await;
        reply(send, 200, lease("replica-a", 2));
        let (put, send) = next(&mut handle).await;
        assert_eq!(put.method, "PUT");
        assert!(put.body["spec"].get("holderIdentity").is_none());
        assert_eq!(put.body["spec"]["leaseDurationSeconds"], 1);
        assert_eq!(put.body["spec"]["leaseTransitions"], 2);
        reply(send, 200, put.body.clone());
    });
    let mut elector = LeaderElector::new(
        client,
        LeaseConfig::new("kube-system", "kestrel", "replica-a"),
    );
    elector.release().await.unwrap();
    server.await.unwrap();
    let _: Option<Lease> = None;
}
