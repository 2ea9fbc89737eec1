//! Shared by the end-to-end tests on a real control plane (`kestrel-testenv`): one control
//! plane per test binary with Kestrel installed from its own manifests, tests run one at a
//! time (each with its own namespace, nodes and scheduler name), and the invariant checker
//! run on what the API server holds.

#![allow(dead_code)]

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kestrel_testenv::{ControlPlane, Kestrel};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

pub use kestrel_testenv::eventually;

pub struct Env {
    pub cp: ControlPlane,
    /// A kubeconfig with the `kestrel` ServiceAccount's token (RBAC as shipped).
    pub sa_kubeconfig: PathBuf,
}

pub fn kestrel_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kestrel"))
}

/// The control plane of this test binary, with Kestrel installed, and the lock that runs
/// its tests one at a time. `None`: not built (outside CI the test then returns).
pub fn env() -> Option<(&'static Env, MutexGuard<'static, ()>)> {
    static ENV: OnceLock<Option<Env>> = OnceLock::new();
    static SERIAL: Mutex<()> = Mutex::new(());
    let (guard, failed_before) = match SERIAL.lock() {
        Ok(guard) => (guard, false),
        Err(poisoned) => {
            SERIAL.clear_poison();
            (poisoned.into_inner(), true)
        }
    };
    let first = ENV.get().is_none();
    let env = ENV.get_or_init(|| {
        // A runtime of its own: the test's runtime cannot block on this. The thread takes
        // the test's name, which a skip it reports carries.
        let test = std::thread::current().name().map(str::to_string);
        let mut builder = std::thread::Builder::new();
        if let Some(test) = test {
            builder = builder.name(test);
        }
        builder
            .spawn(|| {
                let cp = ControlPlane::start()?;
                let runtime = tokio::runtime::Runtime::new().expect("runtime");
                let installed = runtime.block_on(async {
                    let client = cp.client().await;
                    kestrel_testenv::install_kestrel(&client, &cp.server, kestrel_bin(), &cp.dir)
                        .await
                });
                Some(Env {
                    sa_kubeconfig: installed.kubeconfig,
                    cp,
                })
            })
            .expect("a thread")
            .join()
            .expect("starting the control plane")
    });
    let Some(env) = env.as_ref() else {
        // The first test said why; each later one is a skip of its own.
        if !first {
            kestrel_testenv::skip_or_fail("the test control plane is not built (see above)");
        }
        return None;
    };
    if failed_before {
        clear_what_a_failed_test_left(env);
    }
    Some((env, guard))
}

/// A test that panicked skipped its cleanup: its pods and nodes would break the next
/// test's invariant check. Every pod outside the `kube-*` namespaces (where Kestrel is
/// installed) and every node goes.
fn clear_what_a_failed_test_left(env: &'static Env) {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.block_on(async {
            let client = env.client().await;
            let namespaces: Api<Namespace> = Api::all(client.clone());
            let list = namespaces.list(&ListParams::default()).await;
            for ns in list.map(|l| l.items).unwrap_or_default() {
                let name = ns.metadata.name.unwrap_or_default();
                if name.starts_with("kube-") {
                    continue;
                }
                let _ = Api::<Pod>::namespaced(client.clone(), &name)
                    .delete_collection(
                        &DeleteParams::default().grace_period(0),
                        &ListParams::default(),
                    )
                    .await;
            }
            let _ = Api::<Node>::all(client.clone())
                .delete_collection(&DeleteParams::default(), &ListParams::default())
                .await;
        });
    })
    .join()
    .expect("clearing after a failed test");
}

impl Env {
    pub async fn client(&self) -> kube::Client {
        self.cp.client().await
    }

    /// `kestrel serve` with the ServiceAccount's kubeconfig, talking to the API server
    /// through `server` (a [`kestrel_testenv::CuttableLink`]) instead.
    pub fn kestrel_through(&self, server: &str, identity: &str, args: &[&str]) -> Kestrel {
        let text = std::fs::read_to_string(&self.sa_kubeconfig).expect("the kubeconfig");
        let kubeconfig = self.cp.dir.join(format!("{identity}.kubeconfig"));
        std::fs::write(&kubeconfig, text.replace(&self.cp.server, server))
            .expect("writing a kubeconfig");
        Kestrel::start(kestrel_bin(), &kubeconfig, &self.cp.dir, identity, args)
    }

    /// `kestrel serve` with the ServiceAccount's kubeconfig.
    pub fn kestrel(&self, identity: &str, args: &[&str]) -> Kestrel {
        Kestrel::start(
            kestrel_bin(),
            &self.sa_kubeconfig,
            &self.cp.dir,
            identity,
            args,
        )
    }
}

pub async fn create_namespace(client: &kube::Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    api.create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
}

/// The label that keeps a test's pods on its own nodes: the test's namespace.
pub const POOL_LABEL: &str = "testenv.kestrel.dev/pool";

/// Creates `count` 8-GPU nodes `{namespace}-N` (from `first`) in the namespace's pool.
pub async fn create_pool_nodes(client: &kube::Client, namespace: &str, first: usize, count: usize) {
    let nodes = (first..first + count)
        .map(|i| {
            kestrel_testenv::gpu_node(&format!("{namespace}-{i}"), 8, &[(POOL_LABEL, namespace)])
        })
        .collect();
    kestrel_testenv::create_gpu_nodes(client, nodes).await;
}

/// A pod for `scheduler` asking `gpus` whole GPUs, with extra labels and annotations.
pub fn gpu_pod(
    namespace: &str,
    name: &str,
    scheduler: &str,
    gpus: u32,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
) -> Pod {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
    let mut resources = json!({"cpu": "1", "memory": "1Gi"});
    if gpus > 0 {
        resources["nvidia.com/gpu"] = json!(gpus.to_string());
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": {
            "schedulerName": scheduler,
            // Each test's pods stay on its own nodes, whatever another test left behind.
            "nodeSelector": {POOL_LABEL: namespace},
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "trainer:1",
                            "resources": {"requests": resources.clone(), "limits": {"nvidia.com/gpu": resources.get("nvidia.com/gpu").cloned().unwrap_or(json!("0"))}}}],
        },
    }))
    .expect("a Pod")
}

/// Creates pods, 32 at a time.
pub async fn create_pods(client: &kube::Client, pods: Vec<Pod>) {
    let mut tasks = tokio::task::JoinSet::new();
    for pod in pods {
        let client = client.clone();
        tasks.spawn(async move {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(client, &ns);
            api.create(&PostParams::default(), &pod)
                .await
                .unwrap_or_else(|e| panic!("creating pod {ns}/{:?}: {e}", pod.metadata.name));
        });
        while tasks.len() >= 32 {
            if let Some(r) = tasks.join_next().await {
                r.expect("pod task");
            }
        }
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("pod task");
    }
}

pub async fn pods_in(client: &kube::Client, namespace: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    api.list(&ListParams::default())
        .await
        .expect("listing pods")
        .items
}

pub fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

// Not every test binary that includes this module reads annotations.
#[allow(unused_imports)]
pub use kestrel_objects::live::annotation;

/// Waits until `count` pods of the namespace are bound; returns the pods.
pub async fn wait_bound(
    client: &kube::Client,
    namespace: &str,
    count: usize,
    timeout: Duration,
) -> Vec<Pod> {
    eventually(
        timeout,
        &format!("{count} bound pods in {namespace}"),
        || async {
            let pods = pods_in(client, namespace).await;
            (pods.iter().filter(|p| node_of(p).is_some()).count() >= count).then_some(pods)
        },
    )
    .await
}

/// `namespace/name` -> `minMember` of every PodGroup (Kestrel's, scheduler-plugins',
/// Volcano's) the API server holds; kinds it does not serve have none.
pub async fn pod_group_min_members(client: &kube::Client) -> BTreeMap<String, u32> {
    pod_group_min_members_at(client, &ListParams::default()).await
}

async fn pod_group_min_members_at(
    client: &kube::Client,
    params: &ListParams,
) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for (group, version) in [
        ("scheduling.kestrel.dev", "v1alpha1"),
        ("scheduling.x-k8s.io", "v1alpha1"),
        ("scheduling.volcano.sh", "v1beta1"),
    ] {
        let gvk = kube::api::GroupVersionKind::gvk(group, version, "PodGroup");
        let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, "podgroups");
        let api: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &resource);
        let Ok(list) = api.list(params).await else {
            continue;
        };
        for pg in list.items {
            let min = pg.data["spec"]["minMember"].as_u64().unwrap_or(1) as u32;
            let key = format!(
                "{}/{}",
                pg.metadata.namespace.unwrap_or_default(),
                pg.metadata.name.unwrap_or_default()
            );
            out.insert(key, min);
        }
    }
    out
}

/// The invariant checker on what the API server holds: every node, pod, PodGroup,
/// namespace, PersistentVolumeClaim, PersistentVolume and ResourceClaim of the cluster,
/// all read at one resourceVersion (one etcd revision), so that a sample taken while
/// schedulers and controllers write is one moment, not lists taken in turn (a pod read
/// just before it went and its claim just after it was released). Panics with every
/// violation.
pub async fn assert_invariants(client: &kube::Client) {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("listing nodes");
    let revision = nodes.metadata.resource_version.clone().unwrap_or_default();
    let at = ListParams::default()
        .at(&revision)
        .matching(kube::api::VersionMatch::Exact);
    let nodes: Vec<Node> = nodes.items;
    let pods: Vec<Pod> = Api::<Pod>::all(client.clone())
        .list(&at)
        .await
        .expect("listing pods")
        .items;
    let gangs = pod_group_min_members_at(client, &at).await;
    // Namespaces (namespace selectors), claims and volumes (volume node affinity,
    // ReadWriteOncePod claims).
    let namespaces = Api::<Namespace>::all(client.clone())
        .list(&at)
        .await
        .expect("listing namespaces")
        .items;
    let claims = Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::all(client.clone())
        .list(&at)
        .await
        .expect("listing persistent volume claims")
        .items;
    let volumes = Api::<k8s_openapi::api::core::v1::PersistentVolume>::all(client.clone())
        .list(&at)
        .await
        .expect("listing persistent volumes")
        .items;
    let extras = kestrel_invariants::K8sExtras {
        namespaces: &namespaces,
        claims: &claims,
        volumes: &volumes,
    };
    let snapshot = kestrel_invariants::Snapshot::from_k8s_with(&nodes, &pods, &gangs, &extras)
        .unwrap_or_else(|e| panic!("the API server's objects cannot be checked: {e}"));
    let mut violations = kestrel_invariants::check(&snapshot)
        .err()
        .unwrap_or_default();
    // DRA: claims as the API holds them (none where resource.k8s.io is not served).
    let claims = Api::<k8s_openapi::api::resource::v1::ResourceClaim>::all(client.clone())
        .list(&at)
        .await
        .map(|l| l.items)
        .or_else(|e| match e {
            kube::Error::Api(s) if s.code == 404 => Ok(Vec::new()),
            e => Err(e),
        })
        .expect("listing resource claims");
    let (claims, users) = kestrel_invariants::claims_from_k8s(&claims, &pods);
    violations.extend(
        kestrel_invariants::check_claims(&claims, &users)
            .err()
            .unwrap_or_default(),
    );
    if !violations.is_empty() {
        let text: Vec<String> = violations.iter().map(|v| v.to_string()).collect();
        panic!(
            "invariants broken on the API server at resourceVersion {revision}:\n{}",
            text.join("\n")
        );
    }
}

/// Removes a test's nodes (by name prefix) with their ResourceSlices, and its namespaces'
/// pods and ResourceClaims, so the next test starts clean.
pub async fn cleanup(client: &kube::Client, node_prefix: &str, namespaces: &[&str]) {
    for ns in namespaces {
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let _ = api
            .delete_collection(
                &DeleteParams::default().grace_period(0),
                &ListParams::default(),
            )
            .await;
        // Claims allocated by a scheduler carry the delete-protection finalizer, which only
        // the claim controller takes off once their pods are gone: it goes here.
        let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), ns);
        for claim in claims
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let name = claim.metadata.name.clone().unwrap_or_default();
            let _ = claims
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await;
            let _ = claims.delete(&name, &DeleteParams::default()).await;
        }
    }
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    for slice in slices
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        if slice
            .spec
            .node_name
            .as_deref()
            .is_some_and(|n| n.starts_with(node_prefix))
        {
            let name = slice.metadata.name.unwrap_or_default();
            let _ = slices.delete(&name, &DeleteParams::default()).await;
        }
    }
    let nodes: Api<Node> = Api::all(client.clone());
    for node in nodes
        .list(&ListParams::default())
        .await
        .expect("nodes")
        .items
    {
        let name = node.metadata.name.unwrap_or_default();
        if name.starts_with(node_prefix) {
            let _ = nodes.delete(&name, &DeleteParams::default()).await;
        }
    }
}
