//! Kestrel and kube-scheduler on the same DRA nodes and slices; claims kube-scheduler
//! writes; device taints.

use super::*;

/// The namespace's pods: bound ones by name with their nodes, and the names of the others.
async fn bound_and_pending(
    client: &kube::Client,
    ns: &str,
) -> (BTreeMap<String, String>, BTreeSet<String>) {
    let mut bound = BTreeMap::new();
    let mut pending = BTreeSet::new();
    for pod in pods_in(client, ns).await {
        match node_of(&pod) {
            Some(node) => {
                bound.insert(name_of(&pod), node.to_string());
            }
            None => {
                pending.insert(name_of(&pod));
            }
        }
    }
    (bound, pending)
}

/// kube-scheduler and Kestrel at the same time on the same DRA nodes: two nodes of four
/// GPUs, one ResourceSlice per node, both schedulers (and the resourceclaim-controller)
/// running before any pod comes.
///
/// 1. Twelve one-GPU pods at once, every other one for kube-scheduler
///    (`default-scheduler`, whose DRA plugin allocates its claims), the rest for Kestrel;
///    kube-scheduler's claims ask devices 0-1 of a node, Kestrel's devices 2-3 (a CEL
///    selector on `index`). Eight fit, four wait.
/// 2. Two pods for Kestrel that may take any GPU wait while everything is taken; two of
///    kube-scheduler's pods go: Kestrel takes their devices once the controller has
///    released their claims (not before: sampled meanwhile).
/// 3. The same the other way: two of Kestrel's pods go and two pods for kube-scheduler
///    that may take any GPU get their devices.
///
/// Sampled all along: no device in two claims, every bound pod's claims allocated on its
/// node and reserved for it; once settled, the pods that fit are bound and no claim of a
/// waiting pod is allocated. Each free device has one scheduler that may want it at a
/// time: two schedulers choosing the same free device at the same moment both allocate it
/// (neither sees the other's choice in time; DRA has one allocator per device,
/// kubernetes/kubernetes#128980), which this test does not stage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_scheduler_and_kestrel_share_dra_nodes() {
    const NS: &str = "mixed-dra";
    const SCHEDULER: &str = "kestrel-mixed-dra";
    const DEFAULT: &str = "default-scheduler";
    let Some((env, _serial)) = env() else { return };
    let started_at = Instant::now();
    let client = env.client().await;
    let _started = Started::claim_controller(env).with_kube_scheduler();
    dra_cluster(&client, NS, 2, 4).await;
    let index_where = |name: &str, expression: &str| {
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
               "metadata": {"name": name, "namespace": NS},
               "spec": {"spec": {"devices": {"requests": [
                   {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
                    "selectors": [{"cel": {"expression": format!(
                        "device.attributes['gpu.nvidia.com'].index {expression}")}}]}}]}}}})
    };
    apply(
        &client,
        &[
            index_where("low-gpu", "< 2"),
            index_where("high-gpu", ">= 2"),
        ],
    )
    .await;
    let kestrel = env.kestrel(SCHEDULER, &["--scheduler-name", SCHEDULER]);
    eventually(Duration::from_secs(30), "Kestrel ready", || async {
        kestrel.ready().then_some(())
    })
    .await;
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);

    // Until `want` pods are bound and only their claims are allocated; sampled meanwhile.
    let settle = |what: &'static str, want: usize| {
        let client = client.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                assert_invariants(&client).await;
                let (bound, pending) = bound_and_pending(&client, NS).await;
                let claims = claims_in(&client, NS).await;
                let allocated = claims.values().filter(|c| c.node.is_some()).count();
                if bound.len() == want && allocated == want {
                    return (bound, pending, claims);
                }
                assert!(
                    bound.len() <= want,
                    "{what}: {} pods bound on {want} devices",
                    bound.len()
                );
                assert!(
                    Instant::now() < deadline,
                    "{what}: {} bound, {allocated} claims allocated\nbound: {bound:?}\nclaims:\n{}",
                    bound.len(),
                    describe(&claims)
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    // Every pod's claim: where its pod is, reserved for it, on the devices it may take;
    // a waiting pod's claim holds nothing.
    let check_claims = |claims: &BTreeMap<String, kestrel_invariants::ClaimView>, pods: &[Pod]| {
        for pod in pods {
            let name = name_of(pod);
            let claim = generated_claim(pod).expect("a generated claim");
            let view = &claims[&claim];
            match node_of(pod) {
                Some(node) => {
                    assert_eq!(view.node.as_deref(), Some(node), "{name}");
                    assert_eq!(view.reserved_for, vec![name.clone()]);
                    let index: u32 = view.devices[0]
                        .rsplit("gpu-")
                        .next()
                        .unwrap()
                        .parse()
                        .unwrap();
                    if name.contains("any") {
                        continue;
                    }
                    if name.starts_with("d-") {
                        assert!(index < 2, "{name} has {:?}", view.devices);
                    }
                    if name.starts_with("k-") {
                        assert!(index >= 2, "{name} has {:?}", view.devices);
                    }
                }
                None => assert!(
                    view.node.is_none() && view.reserved_for.is_empty(),
                    "waiting {name}'s claim: {view:?}"
                ),
            }
        }
    };

    // 1. Both at once.
    let pods: Vec<Pod> = (0..12)
        .map(|i| match i % 2 {
            0 => to_pod(pod_in(
                NS,
                SCHEDULER,
                &format!("k-{i}"),
                from_template("high-gpu"),
            )),
            _ => to_pod(pod_in(
                NS,
                DEFAULT,
                &format!("d-{i}"),
                from_template("low-gpu"),
            )),
        })
        .collect();
    create_pods(&client, pods).await;
    let (bound, pending, claims) = settle("both at once", 8).await;
    let by = |prefix: &str| bound.keys().filter(|n| n.starts_with(prefix)).count();
    assert_eq!((by("d-"), by("k-")), (4, 4), "{bound:?}");
    assert_eq!(pending.len(), 4);
    check_claims(&claims, &pods_in(&client, NS).await);
    for name in &pending {
        api.delete(name, &DeleteParams::default().grace_period(0))
            .await
            .expect("deleting a waiting pod");
    }
    eventually(Duration::from_secs(30), "the waiting pods gone", || async {
        (pods_in(&client, NS).await.len() == 8).then_some(())
    })
    .await;

    // 2. kube-scheduler's devices to Kestrel, 3. Kestrel's to kube-scheduler.
    for (phase, leaving, scheduler, prefix) in [
        (
            "kube-scheduler's devices to Kestrel",
            "d-",
            SCHEDULER,
            "k-any-",
        ),
        (
            "Kestrel's devices to kube-scheduler",
            "k-",
            DEFAULT,
            "d-any-",
        ),
    ] {
        let (bound, _, claims) = settle("before a hand-over", 8).await;
        let going: Vec<String> = bound
            .keys()
            .filter(|n| n.starts_with(leaving) && !n.contains("any"))
            .take(2)
            .cloned()
            .collect();
        let device_of = |claims: &BTreeMap<String, kestrel_invariants::ClaimView>, pod: &str| {
            claims
                .values()
                .find(|c| c.reserved_for == [pod.to_string()])
                .map(|c| {
                    format!(
                        "{}/{}",
                        c.node.clone().unwrap_or_default(),
                        c.devices.join(",")
                    )
                })
                .unwrap_or_else(|| panic!("no claim reserved for {pod}:\n{}", describe(claims)))
        };
        let freed: BTreeSet<String> = going.iter().map(|p| device_of(&claims, p)).collect();
        let newcomers: Vec<Pod> = (0..2)
            .map(|i| {
                to_pod(pod_in(
                    NS,
                    scheduler,
                    &format!("{prefix}{i}"),
                    from_template("one-gpu"),
                ))
            })
            .collect();
        create_pods(&client, newcomers).await;
        // They wait: every device is taken (the scheduler has seen them once it says so).
        for i in 0..2 {
            let name = format!("{prefix}{i}");
            reported_unschedulable(&api, &name, "the newcomers waiting").await;
        }
        for name in &going {
            api.delete(name, &DeleteParams::default().grace_period(0))
                .await
                .expect("deleting a bound pod");
        }
        let (bound, pending, claims) = settle(phase, 8).await;
        assert!(pending.is_empty(), "{pending:?}");
        let taken: BTreeSet<String> = (0..2)
            .map(|i| {
                let name = format!("{prefix}{i}");
                assert!(bound.contains_key(&name), "{name} is not bound");
                device_of(&claims, &name)
            })
            .collect();
        assert_eq!(
            taken, freed,
            "the newcomers have the devices that were freed"
        );
    }
    assert_invariants(&client).await;
    eprintln!(
        "kube-scheduler and Kestrel: {:.1} s",
        started_at.elapsed().as_secs_f64()
    );
    cleanup(&client, &format!("{NS}-"), &[NS]).await;
}

/// A pod of namespace `ns` for `scheduler` (staying on the namespace's nodes, on node
/// `node` when given) asking `gpus` `nvidia.com/gpu` the device-plugin way.
fn plugin_pod(ns: &str, scheduler: &str, name: &str, gpus: u32, node: Option<&str>) -> Pod {
    let mut selector = json!({POOL_LABEL: ns});
    if let Some(node) = node {
        selector["kubernetes.io/hostname"] = json!(node);
    }
    to_pod(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": selector,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "trainer:1",
                            "resources": {"requests": {"cpu": "1"},
                                          "limits": {"nvidia.com/gpu": gpus.to_string()}}}],
        },
    }))
}

/// What a pod's extended-resource claim says, less what differs from pod to pod: its
/// annotation, owner kind and controller flag, requests and the pod's request mappings.
fn extended_claim_shape(claim: &ResourceClaim, pod: &Pod) -> serde_json::Value {
    let owner = claim.metadata.owner_references.clone().unwrap_or_default();
    let status = pod
        .status
        .as_ref()
        .and_then(|s| s.extended_resource_claim_status.clone())
        .expect("the pod's extendedResourceClaimStatus");
    json!({
        "annotations": claim.metadata.annotations,
        "owner": owner.iter().map(|o| (o.kind.clone(), o.name == name_of(pod), o.controller,
                                      o.block_owner_deletion)).collect::<Vec<_>>(),
        "finalizers": claim.metadata.finalizers,
        "requests": claim.spec.as_ref().and_then(|s| s.devices.as_ref()).and_then(|d| d.requests.clone()),
        "generateName": claim.metadata.generate_name.as_deref()
            .map(|g| g == format!("{}-extended-resources-", name_of(pod))),
        "mappings": status.request_mappings,
        "results": claim.status.as_ref().and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.devices.as_ref()).and_then(|d| d.results.as_ref())
            .map(|r| r.iter().map(|r| (r.request.clone(), r.driver.clone())).collect::<Vec<_>>()),
    })
}

/// `nvidia.com/gpu` on nodes whose GPUs only DRA publishes (no device plugin: the nodes'
/// allocatable has none), served through a DeviceClass that names it in
/// `spec.extendedResourceName`: two nodes of four GPUs (the second node's gpu-3 tainted
/// NoSchedule in its slice), kube-scheduler and Kestrel both running.
///
/// 1. kube-scheduler binds a two-GPU pod on the first node; Kestrel binds two of four
///    two-GPU pods around it (none on the tainted GPU) and two wait: each bound pod has
///    the claim kube-scheduler writes (compared with kube-scheduler's own: annotation,
///    owner, finalizer, requests, the pod's `status.extendedResourceClaimStatus`),
///    allocated on its node and reserved for it, no device twice (sampled while they
///    bind).
/// 2. One of Kestrel's pods goes: a waiting pod takes its devices once its claim is
///    released (either of the two).
/// 3. Without the class, nvidia.com/gpu is not served there: a new pod waits with GPUs
///    free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nvidia_gpu_pods_take_dra_gpus_through_the_claim_kube_scheduler_writes() {
    const NS: &str = "extended-dra";
    const SCHEDULER: &str = "kestrel-extended-dra";
    const CLASS: &str = "gpu-extended.nvidia.com";
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let _started = Started::claim_controller(env).with_kube_scheduler();
    dra_cluster(&client, NS, 2, 4).await;
    // The second node's gpu-3 is unhealthy: tainted NoSchedule in its slice.
    let second = format!("{NS}-1");
    let mut slice = kestrel_testenv::nodes::nvidia_gpu_slice(&second, 4);
    slice["spec"]["devices"][3]["taints"] =
        json!([{"key": "gpu.nvidia.com/unhealthy", "effect": "NoSchedule"}]);
    apply(&client, &[slice]).await;
    let mut class = gpu_class();
    class["metadata"]["name"] = json!(CLASS);
    class["spec"]["extendedResourceName"] = json!("nvidia.com/gpu");
    apply(&client, &[class]).await;
    let classes: Api<k8s_openapi::api::resource::v1::DeviceClass> = Api::all(client.clone());
    /// Deletes the class however the test ends: other tests' nodes must not serve
    /// nvidia.com/gpu from DRA.
    struct DeleteClass(Api<k8s_openapi::api::resource::v1::DeviceClass>);
    impl Drop for DeleteClass {
        fn drop(&mut self) {
            let api = self.0.clone();
            let _ = std::thread::spawn(move || {
                tokio::runtime::Runtime::new()
                    .unwrap()
                    .block_on(api.delete(CLASS, &DeleteParams::default()))
            })
            .join();
        }
    }
    let class_guard = DeleteClass(classes.clone());
    let kestrel = env.kestrel(SCHEDULER, &["--scheduler-name", SCHEDULER]);
    eventually(Duration::from_secs(30), "Kestrel ready", || async {
        kestrel.ready().then_some(())
    })
    .await;
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let claims_api: Api<ResourceClaim> = Api::namespaced(client.clone(), NS);
    let first = format!("{NS}-0");

    // Until `want` pods are bound, each with its claim allocated; sampled meanwhile.
    let settle = |what: &'static str, want: usize| {
        let client = client.clone();
        let claims_api = claims_api.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                assert_invariants(&client).await;
                let (bound, pending) = bound_and_pending(&client, NS).await;
                let claims = claims_api.list(&ListParams::default()).await.unwrap().items;
                let allocated = claims
                    .iter()
                    .filter(|c| c.status.as_ref().is_some_and(|s| s.allocation.is_some()))
                    .count();
                if bound.len() == want && allocated == want {
                    return (bound, pending);
                }
                assert!(bound.len() <= want, "{what}: {bound:?}");
                assert!(
                    Instant::now() < deadline,
                    "{what}: {} bound ({bound:?}), {allocated} claims allocated, pending \
                     {pending:?}",
                    bound.len()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };

    // 1. kube-scheduler's pod first (on the first node), then Kestrel's four.
    create_pods(
        &client,
        vec![plugin_pod(NS, "default-scheduler", "d-0", 2, Some(&first))],
    )
    .await;
    settle("kube-scheduler's pod", 1).await;
    let pods: Vec<Pod> = (0..4)
        .map(|i| plugin_pod(NS, SCHEDULER, &format!("k-{i}"), 2, None))
        .collect();
    create_pods(&client, pods).await;
    // Two fit: one beside kube-scheduler's pod, one on the three healthy GPUs of the
    // second node.
    let (bound, pending) = settle("Kestrel's pods", 3).await;
    assert_eq!(pending.len(), 2, "{bound:?}");
    let claim_of = |pod: &Pod| -> String {
        pod.status
            .as_ref()
            .and_then(|s| s.extended_resource_claim_status.as_ref())
            .map(|s| s.resource_claim_name.clone())
            .unwrap_or_else(|| panic!("{} names no extended-resource claim", name_of(pod)))
    };
    let reference = api.get("d-0").await.unwrap();
    let reference_claim = claims_api.get(&claim_of(&reference)).await.unwrap();
    let expected = extended_claim_shape(&reference_claim, &reference);
    for name in bound.keys().filter(|n| n.starts_with("k-")) {
        let pod = api.get(name).await.unwrap();
        let claim = claims_api.get(&claim_of(&pod)).await.unwrap();
        assert_eq!(
            extended_claim_shape(&claim, &pod),
            expected,
            "{name}'s claim differs from the one kube-scheduler wrote"
        );
    }
    // No claim holds the tainted device.
    for claim in claims_api.list(&ListParams::default()).await.unwrap().items {
        let results = claim
            .status
            .and_then(|s| s.allocation)
            .and_then(|a| a.devices)
            .and_then(|d| d.results)
            .unwrap_or_default();
        assert!(
            !results
                .iter()
                .any(|r| r.pool == second && r.device == "gpu-3"),
            "the tainted GPU was given: {results:?}"
        );
    }
    // The ones that wait say why, in kube-scheduler's words.
    for name in &pending {
        reported_unschedulable(&api, name, "the pods waiting").await;
    }

    // 2. One of Kestrel's pods goes: one of the waiting ones takes its devices.
    let going = bound.keys().find(|n| n.starts_with("k-")).unwrap().clone();
    api.delete(&going, &DeleteParams::default().grace_period(0))
        .await
        .expect("deleting a bound pod");
    let waiting = pending;
    let (bound, pending) = settle("the freed devices", 3).await;
    assert!(
        pending.len() == 1 && waiting.iter().any(|w| bound.contains_key(w)),
        "{bound:?}"
    );

    // 3. Without the class, nvidia.com/gpu is not served from DRA devices: with two GPUs
    // free again, a one-GPU pod is refused once Kestrel has seen the class go.
    drop(class_guard);
    let going = bound.keys().find(|n| n.starts_with("k-")).unwrap().clone();
    api.delete(&going, &DeleteParams::default().grace_period(0))
        .await
        .expect("deleting a bound pod");
    settle("two GPUs free", 2).await;
    create_pods(&client, vec![plugin_pod(NS, SCHEDULER, "k-after", 1, None)]).await;
    reported_unschedulable(&api, "k-after", "no class, no nvidia.com/gpu").await;
    assert!(node_of(&api.get("k-after").await.unwrap()).is_none());
    assert_invariants(&client).await;
    cleanup(&client, &format!("{NS}-"), &[NS]).await;
}

/// A DeviceTaintRule (`resource.k8s.io/v1`) on one of a node's two DRA GPUs keeps claims off
/// it, for Kestrel as for kube-scheduler beside it (each on a node of its own): of two pods
/// claiming a GPU each, one takes the other GPU and one waits. Once the rule is deleted,
/// Kestrel's waiting pod takes the GPU it named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_taint_rules_keep_claims_off_the_devices_they_name() {
    const KESTREL_NS: &str = "taint-k";
    const DEFAULT_NS: &str = "taint-d";
    const SCHEDULER: &str = "kestrel-taints";
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let _started = Started::claim_controller(env).with_kube_scheduler();
    let rules: Api<kube::api::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::api::ApiResource::erase::<kestrel_objects::device_taint_rule::DeviceTaintRule>(&()),
    );
    for ns in [KESTREL_NS, DEFAULT_NS] {
        dra_cluster(&client, ns, 1, 2).await;
        apply(
            &client,
            &[json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
                "metadata": {"name": format!("{ns}-gpu-1")},
                "spec": {
                    "deviceSelector": {"driver": "gpu.nvidia.com", "pool": format!("{ns}-0"),
                                       "device": "gpu-1"},
                    "taint": {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"},
                },
            })],
        )
        .await;
    }
    let _kestrel = env.kestrel(SCHEDULER, &["--scheduler-name", SCHEDULER]);
    for (ns, scheduler) in [(KESTREL_NS, SCHEDULER), (DEFAULT_NS, "default-scheduler")] {
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        create_pods(
            &client,
            ["a", "b"]
                .iter()
                .map(|name| to_pod(pod_in(ns, scheduler, name, from_template("one-gpu"))))
                .collect(),
        )
        .await;
        let (bound, waiting) = eventually(
            Duration::from_secs(30),
            &format!("{scheduler}: one pod bound"),
            || async {
                let (bound, pending) = bound_and_pending(&client, ns).await;
                let waiting = pending.iter().next()?.clone();
                (bound.len() == 1).then(|| (bound.keys().next().unwrap().clone(), waiting))
            },
        )
        .await;
        reported_unschedulable(
            &api,
            &waiting,
            &format!("{scheduler}: {waiting} unschedulable"),
        )
        .await;
        let claims = claims_in(&client, ns).await;
        let pod = api.get(&bound).await.unwrap();
        let claim = &claims[&generated_claim(&pod).unwrap()];
        assert_eq!(
            claim.devices,
            [format!("{ns}-0/gpu-0")],
            "{scheduler}: the untainted GPU\n{}",
            describe(&claims)
        );
        assert_invariants(&client).await;
    }

    // Kestrel: the rule deleted, the waiting pod takes the GPU it named.
    rules
        .delete(&format!("{KESTREL_NS}-gpu-1"), &DeleteParams::default())
        .await
        .expect("deleting the rule");
    eventually(
        Duration::from_secs(30),
        "both Kestrel pods bound",
        || async {
            let (bound, _) = bound_and_pending(&client, KESTREL_NS).await;
            (bound.len() == 2).then_some(())
        },
    )
    .await;
    assert_invariants(&client).await;
    let _ = rules
        .delete(&format!("{DEFAULT_NS}-gpu-1"), &DeleteParams::default())
        .await;
    cleanup(&client, "taint-", &[KESTREL_NS, DEFAULT_NS]).await;
}
