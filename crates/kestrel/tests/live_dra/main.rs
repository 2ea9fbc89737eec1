//! DRA on a real kube-apiserver with kube-controller-manager's resourceclaim-controller:
//! the test plays NVIDIA's DRA driver (it publishes ResourceSlices as the driver writes
//! them), Kestrel allocates the claims. Checked on what the API server holds by the shared
//! checker (every bound pod's claims allocated on its node and reserved for it, no device in
//! two claims), sampled while the tests run: claims allocated before the bind, a claim no
//! device matches keeping its pod pending with its reason, preemption of pods that hold
//! devices (victims with a grace period keep them until they are gone), Kestrel killed
//! between an allocation and its bind (the next one reuses the allocation), and
//! kube-scheduler allocating on the same nodes at the same time.

#![allow(clippy::await_holding_lock)]

mod live;

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use live::*;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const NS: &str = "dra";
const SCHEDULER: &str = "kestrel-dra";

/// A pod of namespace `ns` for `scheduler` (staying on the namespace's nodes) whose one
/// container uses its one claim, named `gpu`; no termination grace period.
fn pod_in(ns: &str, scheduler: &str, name: &str, claim: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": {POOL_LABEL: ns},
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [claim],
            "containers": [{"name": "main", "image": "trainer:1",
                            "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}}],
        },
    })
}

fn to_pod(pod: serde_json::Value) -> Pod {
    serde_json::from_value(pod).expect("a Pod")
}

fn claim_pod(name: &str, claim: serde_json::Value) -> Pod {
    to_pod(pod_in(NS, SCHEDULER, name, claim))
}

/// A claim of the pod from template `template`.
fn from_template(template: &str) -> serde_json::Value {
    json!({"name": "gpu", "resourceClaimTemplateName": template})
}

async fn apply(client: &kube::Client, objects: &[serde_json::Value]) {
    let text = objects
        .iter()
        .map(|o| serde_json::to_string(o).unwrap())
        .collect::<Vec<_>>()
        .join("\n---\n");
    kestrel_testenv::apply_yaml(client, &text, false)
        .await
        .expect("applying DRA objects");
}

/// NVIDIA's DeviceClass.
fn gpu_class() -> serde_json::Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
           "metadata": {"name": "gpu.nvidia.com"},
           "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}})
}

/// A ResourceClaimTemplate of `ns` asking `count` GPUs of the class.
fn gpu_template(ns: &str, name: &str, count: u32) -> serde_json::Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"spec": {"devices": {"requests": [
               {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}]}}}})
}

/// The processes a test started on the control plane, stopped when it ends (a test that
/// panics included: the next one starts them again).
struct Started<'a> {
    cp: &'a kestrel_testenv::ControlPlane,
    controller_manager: bool,
    kube_scheduler: bool,
}

impl<'a> Started<'a> {
    /// kube-controller-manager's resourceclaim-controller (claims from templates created,
    /// the claims of ended pods released).
    fn claim_controller(env: &'a Env) -> Self {
        env.cp
            .start_controller_manager(&["resourceclaim-controller"], &[]);
        Started {
            cp: &env.cp,
            controller_manager: true,
            kube_scheduler: false,
        }
    }

    fn with_kube_scheduler(mut self) -> Self {
        self.cp.start_kube_scheduler(&[]);
        self.kube_scheduler = true;
        self
    }
}

impl Drop for Started<'_> {
    fn drop(&mut self) {
        let cp = self.cp;
        if self.kube_scheduler {
            let _ =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cp.stop_kube_scheduler()));
        }
        if self.controller_manager {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                cp.stop_controller_manager()
            }));
        }
    }
}

/// A test's DRA cluster: namespace `ns`, `nodes` nodes `{ns}-N` without `nvidia.com/gpu`
/// whose `gpus` GPUs each are published through DRA, NVIDIA's class and the templates
/// `one-gpu` and `two-gpu` in the namespace.
async fn dra_cluster(client: &kube::Client, ns: &str, nodes: usize, gpus: u32) {
    create_namespace(client, ns).await;
    let list = (0..nodes)
        .map(|i| kestrel_testenv::gpu_node(&format!("{ns}-{i}"), 0, &[(POOL_LABEL, ns)]))
        .collect();
    kestrel_testenv::create_gpu_nodes(client, list).await;
    let mut objects = vec![
        gpu_class(),
        gpu_template(ns, "one-gpu", 1),
        gpu_template(ns, "two-gpu", 2),
    ];
    objects.extend(
        (0..nodes).map(|i| kestrel_testenv::nodes::nvidia_gpu_slice(&format!("{ns}-{i}"), gpus)),
    );
    apply(client, &objects).await;
}

/// The namespace's claims by name, as the invariant checker reads them.
async fn claims_in(
    client: &kube::Client,
    ns: &str,
) -> BTreeMap<String, kestrel_invariants::ClaimView> {
    let items = Api::<ResourceClaim>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("listing claims")
        .items;
    let prefix = format!("{ns}/");
    kestrel_invariants::claims_from_k8s(&items, &[])
        .0
        .into_iter()
        .map(|c| (c.key.trim_start_matches(&prefix).to_string(), c))
        .collect()
}

async fn claims(client: &kube::Client) -> BTreeMap<String, kestrel_invariants::ClaimView> {
    claims_in(client, NS).await
}

/// The claims as one line each, for failure messages.
fn describe(claims: &BTreeMap<String, kestrel_invariants::ClaimView>) -> String {
    claims
        .iter()
        .map(|(n, c)| {
            format!(
                "  {n}: {:?} {:?} reserved for {:?}",
                c.node, c.devices, c.reserved_for
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The name of the claim the resourceclaim-controller made for the pod's claim `gpu`.
fn generated_claim(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .resource_claim_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == "gpu")?
        .resource_claim_name
        .clone()
}

/// Until the scheduler has reported pod `name` unschedulable (`PodScheduled=False`): the
/// positive sign that it saw the pod and found no room.
async fn reported_unschedulable(api: &Api<Pod>, name: &str, what: &str) {
    eventually(Duration::from_secs(30), what, || async {
        let pod = api.get(name).await.ok()?;
        pod.status?
            .conditions?
            .into_iter()
            .any(|c| c.type_ == "PodScheduled" && c.status == "False")
            .then_some(())
    })
    .await;
}

fn name_of(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
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
        "requests": claim.spec.devices.as_ref().and_then(|d| d.requests.clone()),
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
