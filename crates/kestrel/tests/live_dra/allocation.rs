//! Claims allocated on the pod's node before the bind; preemption of pods holding devices.

use super::*;

fn claim_pod(name: &str, claim: serde_json::Value) -> Pod {
    to_pod(pod_in(NS, SCHEDULER, name, claim))
}

/// A kubelet for the nodes of namespace `ns` that honours termination grace periods: a
/// bound pod becomes Running; a pod marked for deletion keeps running (and holding its
/// devices) until its `deletionTimestamp` (its grace period ended), then it is removed.
struct GracefulKubelet(tokio::task::JoinHandle<()>);

impl Drop for GracefulKubelet {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl GracefulKubelet {
    fn start(client: kube::Client, ns: &str) -> Self {
        let pods: Api<Pod> = Api::namespaced(client, ns);
        GracefulKubelet(tokio::spawn(async move {
            loop {
                for pod in pods
                    .list(&ListParams::default())
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default()
                {
                    if node_of(&pod).is_none() {
                        continue;
                    }
                    let name = name_of(&pod);
                    let uid = pod.metadata.uid.clone();
                    if let Some(at) = &pod.metadata.deletion_timestamp {
                        if Timestamp::now() >= at.0 {
                            let params = DeleteParams {
                                preconditions: Some(kube::api::Preconditions {
                                    uid,
                                    resource_version: None,
                                }),
                                ..DeleteParams::default().grace_period(0)
                            };
                            let _ = pods.delete(&name, &params).await;
                        }
                        continue;
                    }
                    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
                    if phase.is_none_or(|p| p == "Pending") {
                        let now = Timestamp::now().to_string();
                        let running = json!({"metadata": {"uid": uid}, "status": {
                            "phase": "Running", "startTime": now,
                            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
                        }});
                        let _ = pods
                            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&running))
                            .await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_are_allocated_on_the_pods_node_before_the_bind() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let _started = Started::claim_controller(env);
    // Two nodes with no nvidia.com/gpu: their 4 GPUs each are published through DRA.
    dra_cluster(&client, NS, 2, 4).await;
    apply(
        &client,
        &[
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                   "metadata": {"name": "shared", "namespace": NS},
                   "spec": {"devices": {"requests": [
                       {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]}}}),
            json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                   "metadata": {"name": "b200", "namespace": NS},
                   "spec": {"devices": {"requests": [
                       {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
                        "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'"}}]}}]}}}),
        ],
    )
    .await;
    let _kestrel = env.kestrel(SCHEDULER, &["--scheduler-name", SCHEDULER]);

    // Six pods with a claim each from the template, two sharing one 2-GPU claim: 8 GPUs.
    let mut pods: Vec<Pod> = (0..6)
        .map(|i| {
            claim_pod(
                &format!("one-{i}"),
                json!({"name": "gpu", "resourceClaimTemplateName": "one-gpu"}),
            )
        })
        .collect();
    for name in ["shared-a", "shared-b"] {
        pods.push(claim_pod(
            name,
            json!({"name": "gpu", "resourceClaimName": "shared"}),
        ));
    }
    create_pods(&client, pods).await;
    let bound = wait_bound(&client, NS, 8, Duration::from_secs(60)).await;
    let node_of_pod = |name: &str| {
        bound
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .and_then(|p| node_of(p).map(str::to_string))
    };
    assert_eq!(
        node_of_pod("shared-a"),
        node_of_pod("shared-b"),
        "a shared claim's pods go where it is"
    );
    assert_invariants(&client).await;
    let all = claims(&client).await;
    let shared = &all["shared"];
    assert!(shared.node.is_some());
    assert_eq!(shared.devices.len(), 2);
    assert_eq!(
        shared.reserved_for.iter().cloned().collect::<BTreeSet<_>>(),
        BTreeSet::from(["shared-a".to_string(), "shared-b".to_string()])
    );
    let allocated: usize = all
        .values()
        .filter(|c| c.node.is_some())
        .map(|c| c.devices.len())
        .sum();
    assert_eq!(allocated, 8, "6 one-GPU claims and the shared 2-GPU claim");

    // No device matches: pending, told why in kube-scheduler's words and which request.
    create_pods(
        &client,
        vec![claim_pod(
            "b200",
            json!({"name": "gpu", "resourceClaimName": "b200"}),
        )],
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let message =
        kestrel_testenv::eventually(Duration::from_secs(30), "b200 explained", || async {
            let pod = pods.get("b200").await.ok()?;
            let condition = pod
                .status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
            condition.message
        })
        .await;
    assert!(
        message.contains(
            "cannot allocate all claims (ResourceClaim dra/b200 request gpu: no device matches)"
        ),
        "{message}"
    );
    // A ninth GPU pod waits too: every device is taken.
    create_pods(
        &client,
        vec![claim_pod(
            "late",
            json!({"name": "gpu", "resourceClaimTemplateName": "one-gpu"}),
        )],
    )
    .await;
    let message =
        kestrel_testenv::eventually(Duration::from_secs(30), "late explained", || async {
            let pod = pods.get("late").await.ok()?;
            pod.status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")?
                .message
        })
        .await;
    assert!(
        message.contains("2 cannot allocate all claims"),
        "{message}"
    );

    // One pod is deleted: its claim goes with it, and the late pod takes the device.
    pods.delete("one-0", &DeleteParams::default().grace_period(0))
        .await
        .expect("deleting one-0");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while node_of(&pods.get("late").await.expect("late")).is_none() {
        if tokio::time::Instant::now() > deadline {
            let state: Vec<String> = claims(&client)
                .await
                .iter()
                .map(|(n, c)| {
                    format!(
                        "{n}: {:?} {:?} reserved {:?}",
                        c.node, c.devices, c.reserved_for
                    )
                })
                .collect();
            let late = pods.get("late").await.expect("late");
            panic!(
                "late not bound after one-0 ended: {:?}\nclaims:\n{}",
                late.status.and_then(|s| s.conditions),
                state.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_invariants(&client).await;

    cleanup(&client, &format!("{NS}-"), &[NS]).await;
}

/// Preemption of pods that hold devices through claims from a template: four low-priority
/// pods hold the four GPUs of two nodes, then a high-priority pod asks two on one node.
/// Two victims on one node are evicted; their grace period keeps them running, and their
/// claims allocated, for a few seconds while the preemptor waits. kube-controller-manager
/// is down when they go (as in its restart), so their claims outlive them: the preemptor
/// waits for those devices too, and preempts nobody else. Once the resourceclaim-controller
/// is back and releases the claims, the preemptor gets the victims' devices. The checker
/// runs on every sample, so no device is ever in two claims.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preemptor_gets_the_devices_of_its_victims_once_they_are_gone() {
    const NS: &str = "preempt-dra";
    const SCHEDULER: &str = "kestrel-preempt-dra";
    const GRACE_S: i64 = 3;
    let Some((env, _serial)) = env() else { return };
    let started_at = Instant::now();
    let client = env.client().await;
    let _started = Started::claim_controller(env);
    dra_cluster(&client, NS, 2, 2).await;
    apply(
        &client,
        &[
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                   "metadata": {"name": "preempt-dra-low"}, "value": 10}),
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                   "metadata": {"name": "preempt-dra-high"}, "value": 1000}),
        ],
    )
    .await;
    let _kubelet = GracefulKubelet::start(client.clone(), NS);
    let _kestrel = env.kestrel(SCHEDULER, &["--scheduler-name", SCHEDULER]);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);

    let low: Vec<Pod> = (0..4)
        .map(|i| {
            let mut pod = pod_in(NS, SCHEDULER, &format!("low-{i}"), from_template("one-gpu"));
            pod["spec"]["priorityClassName"] = json!("preempt-dra-low");
            pod["spec"]["terminationGracePeriodSeconds"] = json!(GRACE_S);
            to_pod(pod)
        })
        .collect();
    create_pods(&client, low).await;
    let bound = wait_bound(&client, NS, 4, Duration::from_secs(30)).await;
    assert_invariants(&client).await;
    // Each low pod's claim, and where it is.
    let claim_of: BTreeMap<String, String> = bound
        .iter()
        .map(|p| (name_of(p), generated_claim(p).expect("a generated claim")))
        .collect();
    let node_of_low: BTreeMap<String, String> = bound
        .iter()
        .map(|p| (name_of(p), node_of(p).unwrap().to_string()))
        .collect();
    let before = claims_in(&client, NS).await;
    assert_eq!(
        before.values().filter(|c| c.node.is_some()).count(),
        4,
        "every GPU is held:\n{}",
        describe(&before)
    );

    let mut high = pod_in(NS, SCHEDULER, "high", from_template("two-gpu"));
    high["spec"]["priorityClassName"] = json!("preempt-dra-high");
    create_pods(&client, vec![to_pod(high)]).await;

    // Sampled until the preemptor is bound, the checker each time. Once the window is seen
    // where the victims, marked for deletion, still run and hold their claims while the
    // preemptor waits, kube-controller-manager stops (as in a restart): the victims go,
    // their claims stay allocated. A marker pod Kestrel cannot place is created then; once
    // Kestrel reports it, it has seen the victims go and tried the preemptor again, which
    // must keep waiting for their devices rather than preempt the other node's pods. Then
    // kube-controller-manager starts again and releases the victims' claims.
    #[derive(Debug, PartialEq)]
    enum Phase {
        Grace,
        ControllerDown,
        Marker,
        Released,
    }
    let mut phase = Phase::Grace;
    let deadline = Instant::now() + Duration::from_secs(45);
    let mut victims: BTreeSet<String> = BTreeSet::new();
    let mut window_samples = 0;
    let high_pod = loop {
        assert_invariants(&client).await;
        let now_pods = pods_in(&client, NS).await;
        let now_claims = claims_in(&client, NS).await;
        let pod = |name: &str| now_pods.iter().find(|p| name_of(p) == name);
        let high = pod("high").expect("the preemptor").clone();
        let terminating: Vec<&Pod> = now_pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .collect();
        for p in &terminating {
            victims.insert(name_of(p));
        }
        if node_of(&high).is_some() {
            assert_eq!(
                phase,
                Phase::Released,
                "the preemptor was bound while its victims' claims held their devices:\n{}",
                describe(&now_claims)
            );
            break high;
        }
        let victim_claims_held = victims.iter().all(|v| {
            now_claims
                .get(&claim_of[v])
                .is_some_and(|c| c.node.is_some())
        });
        match phase {
            Phase::Grace if !terminating.is_empty() && victim_claims_held => {
                window_samples += 1;
                env.cp.stop_controller_manager();
                phase = Phase::ControllerDown;
            }
            Phase::ControllerDown if victims.iter().all(|v| pod(v).is_none()) => {
                assert!(
                    victim_claims_held,
                    "the victims' claims were released with kube-controller-manager down:\n{}",
                    describe(&now_claims)
                );
                let marker = json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "marker", "namespace": NS},
                    "spec": {
                        "schedulerName": SCHEDULER,
                        "priorityClassName": "preempt-dra-low",
                        "nodeSelector": {POOL_LABEL: "nowhere"},
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "main", "image": "trainer:1"}],
                    },
                });
                create_pods(&client, vec![to_pod(marker)]).await;
                phase = Phase::Marker;
            }
            Phase::ControllerDown => window_samples += 1,
            Phase::Marker => {
                window_samples += 1;
                let reported = pod("marker")
                    .and_then(|p| p.status.as_ref()?.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.type_ == "PodScheduled" && c.status == "False")
                    });
                if reported {
                    env.cp
                        .start_controller_manager(&["resourceclaim-controller"], &[]);
                    phase = Phase::Released;
                }
            }
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "the preemptor is not bound ({phase:?}); victims so far {victims:?}; claims:\n{}",
            describe(&now_claims)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let high_node = node_of(&high_pod).unwrap().to_string();
    assert!(
        window_samples > 0,
        "never saw a victim holding its devices while the preemptor waited"
    );
    // The victims: the two pods of the preemptor's node, no more.
    let expected: BTreeSet<String> = node_of_low
        .iter()
        .filter(|(_, n)| **n == high_node)
        .map(|(p, _)| p.clone())
        .collect();
    assert_eq!(
        victims, expected,
        "the victims are the pods of node {high_node}"
    );
    assert_eq!(victims.len(), 2);
    // The victims are gone and their claims released (deallocated by the controller, or
    // deleted; without the garbage collector a claim whose pod is gone stays, empty); the
    // other low pods still run with theirs.
    let after = eventually(
        Duration::from_secs(30),
        "the victims' claims released",
        || async {
            let now = claims_in(&client, NS).await;
            victims
                .iter()
                .all(|v| {
                    now.get(&claim_of[v])
                        .is_none_or(|c| c.node.is_none() && c.reserved_for.is_empty())
                })
                .then_some(now)
        },
    )
    .await;
    for v in &victims {
        assert!(pods.get_opt(v).await.expect("reading a victim").is_none());
    }
    for (p, claim) in claim_of.iter().filter(|(p, _)| !victims.contains(*p)) {
        let pod = pods.get(p).await.expect("a survivor");
        assert!(pod.metadata.deletion_timestamp.is_none(), "{p} was evicted");
        assert_eq!(node_of(&pod), Some(node_of_low[p].as_str()));
        assert_eq!(
            after[claim], before[claim],
            "a survivor's claim is untouched"
        );
    }
    // The preemptor's claim: allocated on its node, on the victims' devices, for it.
    let high_claim = generated_claim(&high_pod).expect("the preemptor's claim");
    let c = &after[&high_claim];
    assert_eq!(c.node.as_deref(), Some(high_node.as_str()));
    assert_eq!(c.reserved_for, vec!["high".to_string()]);
    let freed: BTreeSet<String> = victims
        .iter()
        .flat_map(|v| before[&claim_of[v]].devices.clone())
        .collect();
    assert_eq!(
        c.devices.iter().cloned().collect::<BTreeSet<_>>(),
        freed,
        "the preemptor has the victims' devices"
    );
    assert_invariants(&client).await;
    eprintln!(
        "preemption with claims: {window_samples} samples with the victims' devices held, {:.1} s",
        started_at.elapsed().as_secs_f64()
    );
    cleanup(&client, &format!("{NS}-"), &[NS]).await;
}
