//! `kestrel agent` on a real kube-apiserver (testenv/), with the RBAC it ships with: it
//! publishes its node's GPU labels and topology, `kestrel serve` schedules by them, and
//! the scheduler's GPU choice for a pod reaches the device plugin's answers, read from the
//! bound pod. The test plays the kubelet's side of the device plugin API on the agent's
//! socket. Skips loudly when the control plane is not built; fails under CI=true.

#![allow(clippy::await_holding_lock)]

mod live;

use k8s_openapi::api::core::v1::{Node, Pod};
use kestrel_agent::kubelet::channel;
use kestrel_agent::proto::deviceplugin::device_plugin_client::DevicePluginClient;
use kestrel_agent::proto::deviceplugin::{
    AllocateRequest, ContainerAllocateRequest, ContainerPreferredAllocationRequest, Empty,
    PreferredAllocationRequest,
};
use kube::api::Api;
use live::*;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const GPUS: &str = "gpu: {model: NVIDIA H100 80GB HBM3, count: 8, memoryMiB: 81559}\n\
                    topology: dgx-h100\n";

/// The agent process, killed with the test.
struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn indices(pod: &Pod) -> Vec<u32> {
    annotation(pod, "kestrel.dev/gpu-indices")
        .map(|v| v.split(',').filter_map(|s| s.parse().ok()).collect())
        .unwrap_or_default()
}

fn uuid(i: u32) -> String {
    format!("GPU-fake-{i:04}")
}

/// Starts `kestrel agent` for `node` with the RBAC of its own manifests (applied first),
/// fake GPUs and a device plugin directory of its own; returns it, its log file and that
/// directory.
async fn start_agent(
    env: &Env,
    client: &kube::Client,
    node: &str,
    gpus_file: &str,
) -> (Agent, PathBuf, PathBuf) {
    let out = Command::new(kestrel_bin())
        .args(["manifests", "--agent"])
        .output()
        .expect("running kestrel");
    assert!(out.status.success());
    kestrel_testenv::apply_yaml(client, &String::from_utf8(out.stdout).unwrap(), false)
        .await
        .expect("applying the agent's manifests");
    let token =
        kestrel_testenv::install::service_account_token(client, "kube-system", "kestrel-agent")
            .await;
    let dir = kestrel_testenv::unique_dir("agent");
    let kubeconfig = dir.join("agent.kubeconfig");
    std::fs::write(
        &kubeconfig,
        kestrel_testenv::install::token_kubeconfig(&env.cp.server, &token),
    )
    .unwrap();
    let gpus = dir.join("gpus.yaml");
    std::fs::write(&gpus, gpus_file).unwrap();
    let plugin_dir = dir.join("dp");
    std::fs::create_dir_all(&plugin_dir).unwrap();
    let log = dir.join("agent.log");
    let agent = Agent(
        Command::new(kestrel_bin())
            .arg("agent")
            .args(["--node-name", node])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--fake-gpus")
            .arg(&gpus)
            .arg("--device-plugin-dir")
            .arg(&plugin_dir)
            .arg("--pod-resources-socket")
            .arg(dir.join("pod-resources.sock"))
            .arg(format!(
                "--metrics-addr=127.0.0.1:{}",
                kestrel_testenv::free_port()
            ))
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting kestrel agent"),
    );
    (agent, log, plugin_dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_publishes_its_node_and_the_schedulers_choice_reaches_allocate() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let ns = "agent";
    let node_name = "agent-0";
    create_namespace(&client, ns).await;
    // The node as a kubelet registers it: 8 GPUs, none of the GPU labels the agent adds.
    let mut node = kestrel_testenv::gpu_node(node_name, 8, &[(POOL_LABEL, ns)]);
    let labels = node.metadata.labels.as_mut().unwrap();
    for k in [
        "nvidia.com/gpu.product",
        "nvidia.com/gpu.count",
        "nvidia.com/gpu.memory",
    ] {
        labels.remove(k);
    }
    kestrel_testenv::create_gpu_nodes(&client, vec![node]).await;

    let (_agent, log, plugin_dir) = start_agent(env, &client, node_name, GPUS).await;

    // Published: GPU Feature Discovery's labels, the topology template, the condition.
    let nodes: Api<Node> = Api::all(client.clone());
    let published = eventually(
        Duration::from_secs(30),
        "the agent's labels on the node",
        || {
            let nodes = nodes.clone();
            async move {
                let n = nodes.get(node_name).await.ok()?;
                let ok = n
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key("kestrel.dev/gpu-topology"))
                    && n.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "GPUUnhealthy"));
                ok.then_some(n)
            }
        },
    )
    .await;
    let l = published.metadata.labels.as_ref().unwrap();
    assert_eq!(l["nvidia.com/gpu.product"], "NVIDIA-H100-80GB-HBM3");
    assert_eq!(l["nvidia.com/gpu.count"], "8");
    assert_eq!(l["nvidia.com/gpu.memory"], "81559");
    let a = published.metadata.annotations.as_ref().unwrap();
    assert_eq!(a["kestrel.dev/gpu-topology"], "dgx-h100");
    let inventory: serde_json::Value =
        serde_json::from_str(&a["kestrel.dev/gpu-inventory"]).unwrap();
    assert_eq!(inventory["gpus"].as_array().unwrap().len(), 8);
    let condition = published
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "GPUUnhealthy"))
        .unwrap();
    assert_eq!(condition.status, "False");
    // The kubelet's own Ready condition is still there.
    assert!(published
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .unwrap()
        .iter()
        .any(|c| c.type_ == "Ready"));

    // The scheduler places two pods on the node the agent described; they stay pending
    // (no kubelet runs them), as they are when the kubelet calls the device plugin.
    let scheduler = "kestrel-agent-test";
    let _kestrel = env.kestrel(scheduler, &["--scheduler-name", scheduler]);
    create_pods(&client, vec![gpu_pod(ns, "four", scheduler, 4, &[], &[])]).await;
    wait_bound(&client, ns, 1, Duration::from_secs(60)).await;
    create_pods(&client, vec![gpu_pod(ns, "two", scheduler, 2, &[], &[])]).await;
    let pods = wait_bound(&client, ns, 2, Duration::from_secs(60)).await;
    let by_name = |name: &str| {
        pods.iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .unwrap()
            .clone()
    };
    let (four, two) = (indices(&by_name("four")), indices(&by_name("two")));
    assert_eq!((four.len(), two.len()), (4, 2), "{four:?} {two:?}");
    assert!(two.iter().all(|i| !four.contains(i)), "{four:?} {two:?}");

    // The kubelet starts `two`: it asks the agent which 2 GPUs, offering all 8 (as if
    // `four` had not started yet); the answer is the scheduler's choice for `two`, not
    // the lowest aligned pair.
    let socket = plugin_dir.join("kestrel-nvidia.com-gpu.sock");
    let mut plugin = DevicePluginClient::new(channel(&socket).await.expect("the plugin socket"));
    let list = plugin
        .list_and_watch(Empty {})
        .await
        .unwrap()
        .into_inner()
        .message()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(list.devices.len(), 8);
    let preferred = plugin
        .get_preferred_allocation(PreferredAllocationRequest {
            container_requests: vec![ContainerPreferredAllocationRequest {
                available_device_i_ds: (0..8).map(uuid).collect(),
                must_include_device_i_ds: vec![],
                allocation_size: 2,
            }],
        })
        .await
        .unwrap()
        .into_inner();
    let want: Vec<String> = two.iter().map(|i| uuid(*i)).collect();
    assert_eq!(preferred.container_responses[0].device_i_ds, want);
    let allocated = plugin
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: want.clone(),
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        allocated.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"],
        want.join(",")
    );
    // Recorded on the pod through the API server, with the agent's RBAC.
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let expected = two
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    eventually(Duration::from_secs(10), "the allocation on the pod", || {
        let pods_api = pods_api.clone();
        let expected = expected.clone();
        async move {
            let p = pods_api.get("two").await.ok()?;
            (annotation(&p, "kestrel.dev/gpu-allocated") == Some(expected.as_str())).then_some(())
        }
    })
    .await;
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!log_text.contains("cannot"), "{log_text}");
}

/// On a node whose GPUs NVIDIA's DRA driver publishes (a ResourceSlice of `gpu.nvidia.com`
/// for it, no `nvidia.com/gpu`), the agent registers no device plugin and still publishes
/// the node's labels and topology; a GPU that falls off the bus gets a DeviceTaintRule on
/// its DRA device until it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_dra_node_the_agent_serves_no_device_plugin() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let node_name = "agent-dra-0";
    let node = kestrel_testenv::gpu_node(node_name, 0, &[]);
    kestrel_testenv::create_gpu_nodes(&client, vec![node]).await;
    let mut slice = kestrel_testenv::nodes::nvidia_gpu_slice(node_name, 8);
    // The driver's UUIDs are NVML's, which the fake GPUs are.
    for (i, device) in slice["spec"]["devices"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .enumerate()
    {
        device["attributes"]["uuid"]["string"] = serde_json::json!(uuid(i as u32));
    }
    kestrel_testenv::apply_yaml(&client, &serde_json::to_string(&slice).unwrap(), false)
        .await
        .expect("applying the slice");
    // GPU 3 falls off the bus 2 s after the agent starts and is back 4 s later.
    let gpus = format!(
        "{GPUS}events:\n- {{at: 2s, gpu: 3, xid: 79}}\n- {{at: 6s, gpu: 3, recover: true}}\n"
    );
    let (_agent, log, plugin_dir) = start_agent(env, &client, node_name, &gpus).await;
    let nodes: Api<Node> = Api::all(client.clone());
    eventually(
        Duration::from_secs(30),
        "the agent's topology on the node",
        || {
            let nodes = nodes.clone();
            async move {
                let n = nodes.get(node_name).await.ok()?;
                n.metadata
                    .annotations?
                    .contains_key("kestrel.dev/gpu-topology")
                    .then_some(())
            }
        },
    )
    .await;
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        log_text.contains("NVIDIA's DRA driver publishes this node's GPUs: no device plugin"),
        "{log_text}"
    );
    assert!(!log_text.contains("cannot"), "{log_text}");
    let sockets: Vec<_> = std::fs::read_dir(&plugin_dir).unwrap().collect();
    assert!(sockets.is_empty(), "{sockets:?}");

    // The XID: a DeviceTaintRule on GPU 3's DRA device, written with the agent's RBAC and
    // accepted by the API server; the recovery deletes it.
    let rules: Api<kestrel_objects::device_taint_rule::DeviceTaintRule> = Api::all(client.clone());
    let name = format!("kestrel-gpu-health-{node_name}-gpu-3");
    let rule = eventually(
        Duration::from_secs(30),
        "GPU 3's DeviceTaintRule",
        || async { rules.get(&name).await.ok() },
    )
    .await;
    let selector = rule.spec.device_selector.clone().unwrap();
    assert_eq!(
        (
            selector.driver.as_deref(),
            selector.pool.as_deref(),
            selector.device.as_deref()
        ),
        (Some("gpu.nvidia.com"), Some(node_name), Some("gpu-3"))
    );
    assert_eq!(rule.spec.taint.key, "kestrel.dev/gpu-unhealthy");
    assert_eq!(rule.spec.taint.effect, "NoSchedule");
    eventually(
        Duration::from_secs(30),
        "GPU 3's DeviceTaintRule deleted once it recovered",
        || async { rules.get(&name).await.is_err().then_some(()) },
    )
    .await;
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!log_text.contains("cannot"), "{log_text}");
    cleanup(&client, "agent-dra-", &[]).await;
}
