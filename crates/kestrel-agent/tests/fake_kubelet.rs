//! The device plugin's whole life against a fake kubelet: a Registration service and a
//! PodResources service on temporary Unix sockets, speaking the vendored v1beta1 and v1
//! protos with tonic. The fake GPU backend drives discovery, health and metrics; an
//! in-memory cluster holds the pods the scheduler stamped.

use k8s_openapi::api::core::v1::Pod;
use kestrel_agent::agent::{self, AgentConfig, Handles, WithoutNvml};
use kestrel_agent::backend::{GpuBackend, HealthEvent};
use kestrel_agent::cluster::{Cluster, MemoryCluster};
use kestrel_agent::device_taints::{self, DraGpu};
use kestrel_agent::fake::FakeBackend;
use kestrel_agent::health::HealthPolicy;
use kestrel_agent::kubelet::channel;
use kestrel_agent::plugin::{CdiNames, PluginConfig};
use kestrel_agent::proto::deviceplugin::device_plugin_client::DevicePluginClient;
use kestrel_agent::proto::deviceplugin::registration_server::{Registration, RegistrationServer};
use kestrel_agent::proto::deviceplugin::{
    AllocateRequest, ContainerAllocateRequest, ContainerPreferredAllocationRequest, Empty,
    ListAndWatchResponse, PreferredAllocationRequest, RegisterRequest,
};
use kestrel_agent::proto::podresources::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use kestrel_agent::proto::podresources::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, ContainerDevices,
    ContainerResources, GetPodResourcesRequest, GetPodResourcesResponse, ListPodResourcesRequest,
    ListPodResourcesResponse, PodResources,
};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

const NODE: &str = "gpu-0";
const WAIT: Duration = Duration::from_secs(20);

struct FakeRegistration {
    registered: mpsc::UnboundedSender<RegisterRequest>,
}

#[tonic::async_trait]
impl Registration for FakeRegistration {
    async fn register(&self, request: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let _ = self.registered.send(request.into_inner());
        Ok(Response::new(Empty {}))
    }
}

/// The kubelet's side: Registration on `dir/kubelet.sock`, until `stop` fires.
struct FakeKubelet {
    registered: mpsc::UnboundedReceiver<RegisterRequest>,
    stop: Option<oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<()>,
}

impl FakeKubelet {
    fn start(dir: &Path) -> FakeKubelet {
        let socket = dir.join("kubelet.sock");
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket).unwrap();
        let (tx, registered) = mpsc::unbounded_channel();
        let (stop, stop_rx) = oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(RegistrationServer::new(FakeRegistration { registered: tx }))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = stop_rx.await;
                })
                .await
                .unwrap();
        });
        FakeKubelet {
            registered,
            stop: Some(stop),
            server,
        }
    }

    async fn next_registration(&mut self) -> RegisterRequest {
        tokio::time::timeout(WAIT, self.registered.recv())
            .await
            .expect("the agent registers")
            .unwrap()
    }

    /// A kubelet restart: the server goes, and (as the kubelet does on start) every
    /// socket in the directory is removed.
    async fn stop(mut self, dir: &Path) {
        let _ = self.stop.take().unwrap().send(());
        let _ = self.server.await;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "sock") {
                std::fs::remove_file(path).unwrap();
            }
        }
    }
}

/// PodResources: GPU-fake-0004 and -0005 belong to ml/train, -0006 and -0007 to ml/bad
/// (the kubelet's account, which the allocation records are reconciled with).
struct FakePodResources;

#[tonic::async_trait]
impl PodResourcesLister for FakePodResources {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        Ok(Response::new(ListPodResourcesResponse {
            pod_resources: [
                ("train", ["GPU-fake-0004", "GPU-fake-0005"]),
                ("bad", ["GPU-fake-0007", "GPU-fake-0006"]),
            ]
            .into_iter()
            .map(|(pod, ids)| PodResources {
                name: pod.into(),
                namespace: "ml".into(),
                containers: vec![ContainerResources {
                    name: "main".into(),
                    devices: vec![ContainerDevices {
                        resource_name: "nvidia.com/gpu".into(),
                        device_ids: ids.iter().map(|i| i.to_string()).collect(),
                        topology: None,
                    }],
                    ..Default::default()
                }],
            })
            .collect(),
        }))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<AllocatableResourcesRequest>,
    ) -> Result<Response<AllocatableResourcesResponse>, Status> {
        Err(Status::unimplemented("the agent does not call it"))
    }

    async fn get(
        &self,
        _: Request<GetPodResourcesRequest>,
    ) -> Result<Response<GetPodResourcesResponse>, Status> {
        Err(Status::unimplemented("the agent does not call it"))
    }
}

fn serve_pod_resources(socket: &Path) {
    let listener = UnixListener::bind(socket).unwrap();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(PodResourcesListerServer::new(FakePodResources))
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await
            .unwrap();
    });
}

fn temp_dir(name: &str) -> PathBuf {
    // Unix socket paths are short (108 bytes): keep the directory near the root.
    let dir = std::env::temp_dir().join(format!("ka-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn pod(name: &str, indices: &str, gpus: u32, scheduled: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"),
                     "annotations": {"kestrel.dev/gpu-indices": indices},
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": NODE, "containers": [
            {"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}]}
    }))
    .unwrap()
}

const GPUS: &str = r#"
gpu: {model: NVIDIA H100 80GB HBM3, count: 8, memoryMiB: 81559}
topology: dgx-h100
gpus:
- {index: 4, utilization: 87, memoryUsedMiB: 40000, temperatureC: 61, powerWatts: 512}
"#;

async fn next_list(stream: &mut Streaming<ListAndWatchResponse>) -> ListAndWatchResponse {
    tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("a device list arrives")
        .expect("the stream stays open")
        .unwrap()
}

fn health_of(list: &ListAndWatchResponse, id: &str) -> String {
    list.devices
        .iter()
        .find(|d| d.id == id)
        .map(|d| d.health.clone())
        .unwrap()
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

fn uuids(ids: &[u32]) -> Vec<String> {
    ids.iter().map(|i| format!("GPU-fake-{i:04}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_plugin_lifecycle_with_a_kubelet_restart() {
    let dir = temp_dir("dp");
    let pod_resources = dir.join("pod-resources.sock");
    serve_pod_resources(&pod_resources);
    let mut kubelet = FakeKubelet::start(&dir);

    let fake = Arc::new(FakeBackend::parse(Path::new("gpus.yaml"), GPUS).unwrap());
    let memory = MemoryCluster::default();
    *memory.pods.lock().unwrap() = vec![
        pod("train", "4,5", 2, "2026-01-01T00:00:05Z"),
        pod("bad", "0,9", 2, "2026-01-01T00:00:09Z"),
    ];
    let cluster = Arc::new(Cluster::Memory(Box::new(memory)));
    let cfg = AgentConfig {
        node: NODE.into(),
        fake_gpus: None,
        sysfs_root: dir.clone(),
        without_nvml: WithoutNvml::Exit,
        metrics_addr: "127.0.0.1:0".parse().unwrap(),
        pod_resources_socket: pod_resources.clone(),
        plugin: Some(PluginConfig {
            node: NODE.into(),
            resource_name: "nvidia.com/gpu".into(),
            dir: dir.clone(),
            socket_name: PluginConfig::socket_name_for("nvidia.com/gpu"),
            cdi: CdiNames::Index,
        }),
        publish: true,
        health: HealthPolicy::default(),
        rediscover_every: Duration::from_secs(3600),
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let (ready_tx, ready_rx) = oneshot::channel();
    let backend: Arc<dyn GpuBackend> = fake.clone();
    let agent = tokio::spawn(agent::run(
        cfg,
        backend,
        cluster.clone(),
        stop_rx,
        Some(ready_tx),
    ));
    let handles: Handles = ready_rx.await.unwrap();

    // Registration: the kubelet's API version, the resource, the socket, the options.
    let reg = kubelet.next_registration().await;
    assert_eq!(reg.version, "v1beta1");
    assert_eq!(reg.resource_name, "nvidia.com/gpu");
    assert_eq!(reg.endpoint, "kestrel-nvidia.com-gpu.sock");
    assert!(reg.options.unwrap().get_preferred_allocation_available);

    // The kubelet dials the plugin's socket and watches the devices.
    let mut plugin = DevicePluginClient::new(channel(&dir.join(&reg.endpoint)).await.unwrap());
    let mut stream = plugin.list_and_watch(Empty {}).await.unwrap().into_inner();
    let list = next_list(&mut stream).await;
    assert_eq!(list.devices.len(), 8);
    assert!(list.devices.iter().all(|d| d.health == "Healthy"));
    let numa: Vec<i64> = list
        .devices
        .iter()
        .map(|d| d.topology.as_ref().unwrap().nodes[0].id)
        .collect();
    assert_eq!(numa, [0, 0, 0, 0, 1, 1, 1, 1]);

    // The oldest stamped pod asking for 2 GPUs is `train`: the scheduler chose 4,5.
    let all = uuids(&[0, 1, 2, 3, 4, 5, 6, 7]);
    let preferred = plugin
        .get_preferred_allocation(PreferredAllocationRequest {
            container_requests: vec![ContainerPreferredAllocationRequest {
                available_device_i_ds: all.clone(),
                must_include_device_i_ds: vec![],
                allocation_size: 2,
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(preferred.container_responses[0].device_i_ds, uuids(&[4, 5]));
    let allocated = plugin
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: uuids(&[4, 5]),
            }],
        })
        .await
        .unwrap()
        .into_inner();
    let c = &allocated.container_responses[0];
    assert_eq!(
        c.envs["NVIDIA_VISIBLE_DEVICES"],
        "GPU-fake-0004,GPU-fake-0005"
    );
    let cdi: Vec<&str> = c.cdi_devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(cdi, ["nvidia.com/gpu=4", "nvidia.com/gpu=5"]);
    let Cluster::Memory(m) = &*cluster else {
        unreachable!()
    };
    let annotation = |name: &str| {
        m.pods
            .lock()
            .unwrap()
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .unwrap()
            .metadata
            .annotations
            .as_ref()
            .unwrap()
            .get("kestrel.dev/gpu-allocated")
            .cloned()
    };
    assert_eq!(annotation("train").as_deref(), Some("4,5"));

    // Next is `bad`, whose annotation names a GPU the node lacks: an aligned pair instead
    // (4,5 are taken), and a Warning event on the pod.
    let rest = uuids(&[0, 1, 2, 3, 6, 7]);
    let preferred = plugin
        .get_preferred_allocation(PreferredAllocationRequest {
            container_requests: vec![ContainerPreferredAllocationRequest {
                available_device_i_ds: rest,
                must_include_device_i_ds: vec![],
                allocation_size: 2,
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(preferred.container_responses[0].device_i_ds, uuids(&[0, 1]));
    {
        let events = m.events.lock().unwrap();
        let (object, reason, note) = events.last().unwrap();
        assert_eq!(
            (object.as_str(), reason.as_str()),
            ("bad", "GpuChoiceNotHonoured")
        );
        assert!(note.contains("GPU 9 does not exist"), "{note}");
    }
    plugin
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: uuids(&[0, 1]),
            }],
        })
        .await
        .unwrap();
    assert_eq!(annotation("bad").as_deref(), Some("0,1"));
    // The kubelet's PodResources says `bad` holds 6,7: the record follows it; `train`'s
    // record already agrees.
    let inv = handles.inventory.borrow().clone();
    let changed =
        agent::reconcile_allocations(&cluster, NODE, &inv, &pod_resources, "nvidia.com/gpu")
            .await
            .unwrap();
    assert_eq!(changed, 1);
    assert_eq!(annotation("bad").as_deref(), Some("6,7"));
    assert_eq!(annotation("train").as_deref(), Some("4,5"));
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(handles.counters.allocations_scheduler.load(Relaxed), 1);
    assert_eq!(handles.counters.allocations_other.load(Relaxed), 1);
    // An ID the node does not have is refused.
    let err = plugin
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: vec!["GPU-nope".into()],
            }],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);

    // Health: XID 79 on GPU 3 -> Unhealthy in the stream, the node condition, an event.
    fake.inject(HealthEvent::Xid {
        uuid: "GPU-fake-0003".into(),
        xid: 79,
    });
    let list = next_list(&mut stream).await;
    assert_eq!(health_of(&list, "GPU-fake-0003"), "Unhealthy");
    assert_eq!(health_of(&list, "GPU-fake-0002"), "Healthy");
    wait_for(|| m.condition.lock().unwrap().as_ref().map(|c| c.0.clone()) == Some("True".into()))
        .await;
    assert!(m
        .events
        .lock()
        .unwrap()
        .iter()
        .any(|(o, r, _)| o == NODE && r == "GpuLost"));
    // Metrics while it is down: DCGM names, the pod from PodResources, the XID.
    let text = http_get(handles.metrics_addr, "/metrics").await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.contains(r#"DCGM_FI_DEV_GPU_UTIL{gpu="4",UUID="GPU-fake-0004",device="nvidia4",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-0",container="main",namespace="ml",pod="train"} 87"#),
        "{text}"
    );
    assert!(text.contains(r#"DCGM_FI_DEV_FB_USED{gpu="4""#), "{text}");
    assert!(text.contains(r#"DCGM_FI_DEV_XID_ERRORS{gpu="3",UUID="GPU-fake-0003",device="nvidia3",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-0"} 79"#), "{text}");
    assert!(text.contains(r#"kestrel_agent_gpu_healthy{gpu="3",UUID="GPU-fake-0003",device="nvidia3",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-0"} 0"#), "{text}");
    assert!(http_get(handles.metrics_addr, "/readyz")
        .await
        .starts_with("HTTP/1.1 200"));
    // A pod the scheduler gave the now unhealthy GPU 3: an aligned pair instead, and why.
    m.pods
        .lock()
        .unwrap()
        .push(pod("sick", "2,3", 2, "2026-01-01T00:00:20Z"));
    let preferred = plugin
        .get_preferred_allocation(PreferredAllocationRequest {
            container_requests: vec![ContainerPreferredAllocationRequest {
                available_device_i_ds: uuids(&[2, 6, 7]),
                must_include_device_i_ds: vec![],
                allocation_size: 2,
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(preferred.container_responses[0].device_i_ds, uuids(&[6, 7]));
    {
        let events = m.events.lock().unwrap();
        let (object, _, note) = events.last().unwrap();
        assert_eq!(object, "sick");
        assert!(
            note.contains("GPU 3 (GPU-fake-0003) is unhealthy"),
            "{note}"
        );
    }
    // Recovery.
    fake.inject(HealthEvent::Recovered {
        uuid: "GPU-fake-0003".into(),
    });
    let list = next_list(&mut stream).await;
    assert_eq!(health_of(&list, "GPU-fake-0003"), "Healthy");
    wait_for(|| m.condition.lock().unwrap().as_ref().map(|c| c.0.clone()) == Some("False".into()))
        .await;

    // Kubelet restart: its socket and the plugin's are removed, a new kubelet starts; the
    // agent serves a new socket and registers again; the old stream ends.
    kubelet.stop(&dir).await;
    let mut kubelet = FakeKubelet::start(&dir);
    let reg = kubelet.next_registration().await;
    assert_eq!(reg.endpoint, "kestrel-nvidia.com-gpu.sock");
    let ended = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("the old stream ends");
    assert!(!matches!(ended, Some(Ok(_))), "{ended:?}");
    let mut plugin = DevicePluginClient::new(channel(&dir.join(&reg.endpoint)).await.unwrap());
    let mut stream = plugin.list_and_watch(Empty {}).await.unwrap().into_inner();
    assert_eq!(next_list(&mut stream).await.devices.len(), 8);
    // Counted once the kubelet's answer is back, which may follow its receipt here.
    wait_for(|| handles.counters.registrations.load(Relaxed) == 2).await;

    // Shutdown: the agent returns and removes its socket.
    stop_tx.send(true).unwrap();
    tokio::time::timeout(WAIT, agent)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(!dir.join(&reg.endpoint).exists());
    kubelet.stop(&dir).await;
    std::fs::remove_dir_all(&dir).unwrap();
}

async fn wait_for(mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !f() {
        assert!(tokio::time::Instant::now() < deadline, "timed out");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The agent with its device plugin in `missing`, a directory that does not exist (so
/// that serving the plugin fails, naming it).
fn plugin_in_missing_dir(missing: &Path, publish: bool) -> AgentConfig {
    AgentConfig {
        node: NODE.into(),
        fake_gpus: None,
        sysfs_root: missing.to_path_buf(),
        without_nvml: WithoutNvml::Exit,
        metrics_addr: "127.0.0.1:0".parse().unwrap(),
        pod_resources_socket: missing.join("pr.sock"),
        plugin: Some(PluginConfig {
            node: NODE.into(),
            resource_name: "nvidia.com/gpu".into(),
            dir: missing.to_path_buf(),
            socket_name: "k.sock".into(),
            cdi: CdiNames::None,
        }),
        publish,
        health: HealthPolicy::default(),
        rediscover_every: Duration::from_secs(3600),
    }
}

#[tokio::test]
async fn a_missing_device_plugin_directory_is_an_error_naming_it() {
    let fake: Arc<dyn GpuBackend> =
        Arc::new(FakeBackend::parse(Path::new("gpus.yaml"), GPUS).unwrap());
    let missing = std::env::temp_dir().join(format!("ka-missing-{}", std::process::id()));
    let cfg = plugin_in_missing_dir(&missing, false);
    let (_stop, stop_rx) = watch::channel(false);
    let cluster = Arc::new(Cluster::Memory(Box::default()));
    let err = tokio::time::timeout(WAIT, agent::run(cfg, fake, cluster, stop_rx, None))
        .await
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(err.contains(&missing.display().to_string()), "{err}");
    assert!(err.contains("--device-plugin-dir"), "{err}");
}

/// Where NVIDIA's DRA driver publishes the node's GPUs, the agent serves no device plugin
/// (the same GPUs would be handed out twice) and goes on with discovery, metrics and
/// publication: the plugin directory it would fail on is never touched. Another driver's
/// slices, or another node's, change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_device_plugin_where_dra_publishes_the_gpus() {
    let missing = std::env::temp_dir().join(format!("ka-dra-{}", std::process::id()));
    let cfg = || plugin_in_missing_dir(&missing, true);
    let fake = || -> Arc<dyn GpuBackend> {
        Arc::new(FakeBackend::parse(Path::new("gpus.yaml"), GPUS).unwrap())
    };
    let memory = MemoryCluster::default();
    *memory.slices.lock().unwrap() = vec![
        (
            "other-node".into(),
            "gpu.nvidia.com".into(),
            "node-9".into(),
        ),
        ("nics".into(), "dra.net".into(), NODE.into()),
    ];
    // Not this node's GPUs: the plugin is served (and fails on its missing directory).
    let (_stop, stop_rx) = watch::channel(false);
    let cluster = Arc::new(Cluster::Memory(Box::new(memory)));
    let err = tokio::time::timeout(
        WAIT,
        agent::run(cfg(), fake(), cluster.clone(), stop_rx, None),
    )
    .await
    .unwrap()
    .unwrap_err();
    assert!(err.to_string().contains("--device-plugin-dir"), "{err}");
    // This node's GPUs in a slice of NVIDIA's driver: no plugin, the rest runs.
    let Cluster::Memory(m) = &*cluster else {
        unreachable!()
    };
    m.slices
        .lock()
        .unwrap()
        .push(("gpus".into(), "gpu.nvidia.com".into(), NODE.into()));
    // The driver's devices gpu-0..7, by the UUIDs the agent discovers; and a rule left from
    // an earlier run on a GPU that is healthy now.
    m.dra_gpus.lock().unwrap().insert(
        NODE.into(),
        (0..8)
            .map(|i| DraGpu {
                pool: NODE.into(),
                device: format!("gpu-{i}"),
                uuid: Some(format!("GPU-fake-000{i}")),
                index: Some(i),
            })
            .collect(),
    );
    let stale = device_taints::rule_name(NODE, "gpu-5");
    m.taint_rules
        .lock()
        .unwrap()
        .insert(stale.clone(), (NODE.into(), json!({"left": "over"})));
    let backend = Arc::new(FakeBackend::parse(Path::new("gpus.yaml"), GPUS).unwrap());
    let (stop_tx, stop_rx) = watch::channel(false);
    let (ready_tx, ready_rx) = oneshot::channel();
    let agent = tokio::spawn(agent::run(
        cfg(),
        backend.clone(),
        cluster.clone(),
        stop_rx,
        Some(ready_tx),
    ));
    let handles: Handles = tokio::time::timeout(WAIT, ready_rx).await.unwrap().unwrap();
    assert_eq!(handles.inventory.borrow().gpus.len(), 8);
    let healthz = http_get(handles.metrics_addr, "/healthz").await;
    assert!(healthz.starts_with("HTTP/1.1 200"), "{healthz}");
    wait_for(|| !m.labels.lock().unwrap().is_empty()).await;
    wait_for(|| m.taint_rules.lock().unwrap().is_empty()).await;

    // XID 79 on GPU 3: its DRA device gets a DeviceTaintRule; recovered, the rule goes.
    backend.inject(HealthEvent::Xid {
        uuid: "GPU-fake-0003".into(),
        xid: 79,
    });
    let rule = device_taints::rule_name(NODE, "gpu-3");
    wait_for(|| m.taint_rules.lock().unwrap().contains_key(&rule)).await;
    let spec = m.taint_rules.lock().unwrap()[&rule].1.clone();
    assert_eq!(
        spec,
        json!({
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-3"},
            "taint": {"key": device_taints::UNHEALTHY_TAINT, "value": "GpuLost",
                      "effect": "NoSchedule"},
        })
    );
    assert_eq!(m.taint_rules.lock().unwrap().len(), 1);
    backend.inject(HealthEvent::Recovered {
        uuid: "GPU-fake-0003".into(),
    });
    wait_for(|| m.taint_rules.lock().unwrap().is_empty()).await;
    stop_tx.send(true).unwrap();
    tokio::time::timeout(WAIT, agent)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
