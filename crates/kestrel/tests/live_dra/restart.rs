//! Kestrel SIGKILLed between writing an allocation and its bind.

use super::*;

/// What the ValidatingAdmissionPolicy of [`kestrel_restarts_between_an_allocation_and_its_bind`]
/// answers a binding.
const BINDING_DENIED: &str = "bindings of namespace restart-dra are held by the test";

/// Whether the API server denies bindings in namespace `ns` now: a dry-run binding of a
/// pod that does not exist is refused by admission (`true`), or gets as far as the
/// registry, which does not find the pod (`false`).
async fn bindings_denied(client: &kube::Client, ns: &str, node: &str) -> bool {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some("no-such-pod".into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.into()),
            ..Default::default()
        },
    };
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    match pods
        .create_subresource::<_, serde_json::Value>("binding", "no-such-pod", &params, &binding)
        .await
    {
        Err(kube::Error::Api(e)) if e.message.contains(BINDING_DENIED) => true,
        Err(kube::Error::Api(e)) if e.code == 404 => false,
        other => panic!("a dry-run binding of a missing pod: {other:?}"),
    }
}

/// Kestrel killed between writing a claim's allocation and binding its pod. The bind is
/// made to fail on the real API server: a ValidatingAdmissionPolicy (CEL in the API
/// server, no webhook) denies CREATE of `pods/binding` in the test's namespace, so Kestrel
/// writes the allocation and the reservation, then its binding is refused. Kestrel is
/// killed (SIGKILL) with the claim allocated and reserved and the pod unbound; the policy
/// goes; the claim's node is then filled by a claim of someone else's, so that only the
/// existing allocation can place the pod there (a fresh choice would have to go to the
/// other node). A new Kestrel binds the pod on the allocation's node with the same devices,
/// and no claim is left allocated or reserved for a pod bound elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kestrel_restarts_between_an_allocation_and_its_bind() {
    const NS: &str = "restart-dra";
    const SCHEDULER: &str = "kestrel-restart-dra";
    let Some((env, _serial)) = env() else { return };
    let started_at = Instant::now();
    let client = env.client().await;
    let _started = Started::claim_controller(env);
    dra_cluster(&client, NS, 2, 2).await;
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "restart-dra-no-binding"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods/binding"],
            }]},
            "validations": [{"expression": "false", "message": BINDING_DENIED}],
        },
    });
    let policy_binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "restart-dra-no-binding"},
        "spec": {
            "policyName": "restart-dra-no-binding",
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": NS}}},
        },
    });
    apply(&client, &[policy, policy_binding]).await;
    let node = format!("{NS}-0");
    eventually(
        Duration::from_secs(30),
        "the policy denying bindings",
        || async { bindings_denied(&client, NS, &node).await.then_some(()) },
    )
    .await;

    let mut first = env.kestrel(
        &format!("{SCHEDULER}-1"),
        &["--scheduler-name", SCHEDULER, "--leader-elect=false"],
    );
    create_pods(
        &client,
        vec![to_pod(pod_in(
            NS,
            SCHEDULER,
            "held",
            from_template("one-gpu"),
        ))],
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), NS);
    // The allocation and the reservation written, the binding refused.
    let (claim_name, uid) = eventually(
        Duration::from_secs(30),
        "the claim allocated and reserved for the unbound pod",
        || async {
            let pod = pods.get("held").await.ok()?;
            let name = generated_claim(&pod)?;
            let view = claims_in(&client, NS).await.remove(&name)?;
            (view.node.is_some() && view.reserved_for == ["held"] && node_of(&pod).is_none())
                .then(|| (name, pod.metadata.uid.clone().unwrap_or_default()))
        },
    )
    .await;
    eventually(
        Duration::from_secs(30),
        "Kestrel's binding refused",
        || async { first.log_text().contains(BINDING_DENIED).then_some(()) },
    )
    .await;
    first.kill();
    assert_invariants(&client).await;
    let written = claims.get(&claim_name).await.expect("the claim");
    let allocation = written
        .status
        .as_ref()
        .and_then(|s| s.allocation.clone())
        .expect("an allocation");
    let reserved = written.status.as_ref().and_then(|s| s.reserved_for.clone());
    assert_eq!(
        reserved
            .as_ref()
            .map(|r| r.iter().map(|r| r.uid.clone()).collect::<Vec<_>>()),
        Some(vec![uid.clone()]),
        "reserved for the pod, by uid"
    );
    let view = claims_in(&client, NS).await.remove(&claim_name).unwrap();
    let alloc_node = view.node.clone().unwrap();
    let pod_held = pods.get("held").await.expect("held");
    assert!(node_of(&pod_held).is_none(), "the pod is not bound");

    // Someone else's claim takes the allocation node's other device: only the existing
    // allocation places the pod there now.
    let taken: BTreeSet<String> = view.devices.iter().cloned().collect();
    let other_device = ["gpu-0", "gpu-1"]
        .into_iter()
        .find(|d| !taken.contains(&format!("{alloc_node}/{d}")))
        .expect("a device left on the node");
    apply(
        &client,
        &[
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": "filler", "namespace": NS},
                 "spec": {"devices": {"requests": [
                     {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}),
        ],
    )
    .await;
    claims
        .patch_status(
            "filler",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"allocation": {
                "devices": {"results": [{"request": "gpu", "driver": "gpu.nvidia.com",
                                         "pool": alloc_node, "device": other_device}]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [alloc_node]}]}]},
            }}})),
        )
        .await
        .expect("allocating the filler claim");

    // The policy goes; a new Kestrel binds the pod where its claim is.
    Api::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding>::all(
        client.clone(),
    )
    .delete("restart-dra-no-binding", &DeleteParams::default())
    .await
    .expect("deleting the policy binding");
    Api::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy>::all(
        client.clone(),
    )
    .delete("restart-dra-no-binding", &DeleteParams::default())
    .await
    .expect("deleting the policy");
    eventually(
        Duration::from_secs(30),
        "bindings allowed again",
        || async { (!bindings_denied(&client, NS, &node).await).then_some(()) },
    )
    .await;
    let _second = env.kestrel(
        &format!("{SCHEDULER}-2"),
        &["--scheduler-name", SCHEDULER, "--leader-elect=false"],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let bound = loop {
        assert_invariants(&client).await;
        let pod = pods.get("held").await.expect("held");
        if node_of(&pod).is_some() {
            break pod;
        }
        assert!(
            Instant::now() < deadline,
            "the pod is not bound after the restart: {:?}\nclaims:\n{}",
            pod.status.and_then(|s| s.conditions),
            describe(&claims_in(&client, NS).await)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        node_of(&bound),
        Some(alloc_node.as_str()),
        "bound where its claim is"
    );
    assert_eq!(bound.metadata.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(
        generated_claim(&bound).as_deref(),
        Some(claim_name.as_str()),
        "the same claim"
    );
    let after = claims.get(&claim_name).await.expect("the claim");
    assert_eq!(
        after.status.as_ref().and_then(|s| s.allocation.clone()),
        Some(allocation),
        "the allocation is reused as written"
    );
    assert_eq!(
        after
            .status
            .as_ref()
            .and_then(|s| s.reserved_for.clone())
            .map(|r| r.iter().map(|r| r.uid.clone()).collect::<Vec<_>>()),
        Some(vec![uid.clone()]),
        "reserved once, for the pod"
    );
    // Nothing half-applied: the namespace's claims are the pod's (on its node, for it) and
    // the filler (reserved for nobody).
    let all = claims_in(&client, NS).await;
    assert_eq!(
        all.keys().cloned().collect::<BTreeSet<_>>(),
        BTreeSet::from([claim_name.clone(), "filler".to_string()]),
        "{}",
        describe(&all)
    );
    assert!(all["filler"].reserved_for.is_empty());
    assert_invariants(&client).await;
    eprintln!(
        "restart between allocation and bind: {:.1} s",
        started_at.elapsed().as_secs_f64()
    );
    cleanup(&client, &format!("{NS}-"), &[NS]).await;
}
