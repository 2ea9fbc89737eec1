//! The kubelet device plugin (v1beta1): GPUs as `nvidia.com/gpu` devices (ID: the GPU
//! UUID), streamed with their health and NUMA node; the scheduler's GPU choice honoured at
//! `GetPreferredAllocation`; `NVIDIA_VISIBLE_DEVICES` (and optionally CDI names) at
//! `Allocate`; registration renewed whenever the kubelet restarts.
//!
//! The kubelet's calls do not name the pod. The agent takes the pods bound to its node,
//! not yet running, whose next GPU container asks for the requested count and that carry
//! the scheduler's `kestrel.dev/gpu-indices`, oldest stamp first (see
//! [`crate::choose::candidates`]). `GetPreferredAllocation` picks the first of them whose
//! choice the kubelet can give and remembers the pairing; `Allocate` attributes the
//! devices through that pairing, else to the pod whose choice equals them, else to the
//! oldest candidate, and records them on the pod (`kestrel.dev/gpu-allocated`).

use crate::choose::{aligned, candidates, format_indices, Candidate};
use crate::cluster::Cluster;
use crate::health::HealthMap;
use crate::inventory::Inventory;
use crate::kubelet::{self, KUBELET_SOCKET};
use crate::metrics::Counters;
use crate::proto::deviceplugin::device_plugin_server::{DevicePlugin, DevicePluginServer};
use crate::proto::deviceplugin::{
    AllocateRequest, AllocateResponse, CdiDevice, ContainerAllocateResponse,
    ContainerPreferredAllocationResponse, Device, DevicePluginOptions, Empty, ListAndWatchResponse,
    NumaNode, PreStartContainerRequest, PreStartContainerResponse, PreferredAllocationRequest,
    PreferredAllocationResponse, TopologyInfo,
};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::UnixListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tonic::{Request, Response, Status};

/// The environment variable the NVIDIA container runtime reads.
pub const VISIBLE_DEVICES_ENV: &str = "NVIDIA_VISIBLE_DEVICES";
/// How long a `GetPreferredAllocation` pairing waits for its `Allocate`.
const PAIRING_TTL: Duration = Duration::from_secs(120);
/// How often the agent checks that the kubelet (and its own socket) are still the same.
const SOCKET_POLL: Duration = Duration::from_millis(500);

/// CDI device names in `Allocate` responses, for runtimes with CDI enabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CdiNames {
    None,
    /// `nvidia.com/gpu=0` (nvidia-ctk's default naming).
    Index,
    /// `nvidia.com/gpu=GPU-...`.
    Uuid,
}

impl CdiNames {
    pub fn parse(s: &str) -> Option<CdiNames> {
        match s {
            "none" => Some(CdiNames::None),
            "index" => Some(CdiNames::Index),
            "uuid" => Some(CdiNames::Uuid),
            _ => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error(
        "the device plugin directory {0} does not exist; mount the kubelet's \
         /var/lib/kubelet/device-plugins there or pass --device-plugin-dir"
    )]
    NoDir(PathBuf),
    #[error("cannot listen on {path}: {error}")]
    Listen {
        path: PathBuf,
        error: std::io::Error,
    },
}

pub struct PluginConfig {
    pub node: String,
    pub resource_name: String,
    /// The kubelet's device plugin directory.
    pub dir: PathBuf,
    /// The agent's socket file name in `dir`.
    pub socket_name: String,
    pub cdi: CdiNames,
}

impl PluginConfig {
    /// `kestrel-nvidia.com-gpu.sock` for `nvidia.com/gpu`.
    pub fn socket_name_for(resource_name: &str) -> String {
        format!("kestrel-{}.sock", resource_name.replace('/', "-"))
    }
}

/// What the device plugin reads: the inventory and health (kept current by the agent),
/// the cluster (pods), the counters it bumps.
#[derive(Clone)]
pub struct PluginState {
    pub inventory: watch::Receiver<Inventory>,
    pub health: watch::Receiver<HealthMap>,
    pub cluster: Arc<Cluster>,
    pub counters: Arc<Counters>,
}

struct Pairing {
    devices: BTreeSet<u32>,
    pod: Candidate,
    at: Instant,
}

struct Service {
    cfg: Arc<PluginConfig>,
    state: PluginState,
    pairings: Mutex<Vec<Pairing>>,
    /// Bumped when the server restarts, to end the old ListAndWatch streams (a graceful
    /// shutdown waits for open streams).
    epoch: watch::Sender<u64>,
}

fn device_list(inv: &Inventory, health: &HealthMap) -> ListAndWatchResponse {
    ListAndWatchResponse {
        devices: inv
            .gpus
            .iter()
            .map(|g| Device {
                id: g.uuid.clone(),
                health: if health.get(&g.uuid).is_none_or(|h| h.healthy()) {
                    "Healthy"
                } else {
                    "Unhealthy"
                }
                .into(),
                topology: Some(TopologyInfo {
                    nodes: vec![NumaNode {
                        id: g.numa_node as i64,
                    }],
                }),
            })
            .collect(),
    }
}

impl Service {
    fn inventory(&self) -> Inventory {
        self.state.inventory.borrow().clone()
    }

    fn indices(&self, inv: &Inventory, ids: &[String]) -> Result<Vec<u32>, Status> {
        ids.iter()
            .map(|id| {
                inv.gpu_by_uuid(id).map(|g| g.index).ok_or_else(|| {
                    Status::invalid_argument(format!("no GPU {id} on node {}", self.cfg.node))
                })
            })
            .collect()
    }

    async fn candidates(&self) -> Vec<Candidate> {
        match self.state.cluster.pods_on_node(&self.cfg.node).await {
            Ok(pods) => candidates(&pods, &self.cfg.node, &self.cfg.resource_name),
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the node's pods; the choice is topology-aligned only");
                Vec::new()
            }
        }
    }

    /// Why the scheduler's choice for a container cannot be given, if it cannot.
    fn unusable(
        &self,
        inv: &Inventory,
        chosen: &[u32],
        available: &BTreeSet<u32>,
        must: &[u32],
    ) -> Option<String> {
        let health = self.state.health.borrow();
        for i in chosen {
            let Some(gpu) = inv.gpu_by_index(*i) else {
                return Some(format!(
                    "GPU {i} does not exist on node {} (it has {})",
                    self.cfg.node,
                    inv.gpus.len()
                ));
            };
            if health.get(&gpu.uuid).is_some_and(|h| !h.healthy()) {
                return Some(format!("GPU {i} ({}) is unhealthy", gpu.uuid));
            }
            if !available.contains(i) {
                return Some(format!("GPU {i} ({}) is already in use", gpu.uuid));
            }
        }
        if let Some(m) = must.iter().find(|m| !chosen.contains(m)) {
            return Some(format!(
                "the kubelet requires GPU {m}, which the choice leaves out"
            ));
        }
        None
    }

    async fn prefer(&self, available: &[u32], must: &[u32], size: usize) -> Vec<u32> {
        let inv = self.inventory();
        let avail: BTreeSet<u32> = available.iter().copied().collect();
        let fallback = || aligned(&inv, available, must, size).unwrap_or_default();
        let cands: Vec<Candidate> = self
            .candidates()
            .await
            .into_iter()
            .filter(|c| c.next_request() == Some(size as u32))
            .collect();
        let mut first_problem: Option<(Candidate, String)> = None;
        for c in cands {
            let problem = match c.next_chosen() {
                Some(Ok(chosen)) => match self.unusable(&inv, &chosen, &avail, must) {
                    None => {
                        self.pair(chosen.clone(), c);
                        return chosen;
                    }
                    Some(why) => why,
                },
                Some(Err(why)) => why,
                None => continue,
            };
            first_problem.get_or_insert((c, problem));
        }
        let choice = fallback();
        if let Some((c, why)) = first_problem {
            // No stamped choice fits: the oldest candidate is the likeliest pod; say why on it.
            let note = format!(
                "cannot use kestrel.dev/gpu-indices: {why}; giving GPUs {} (topology-aligned) instead",
                format_indices(&choice)
            );
            tracing::warn!(pod = %format!("{}/{}", c.namespace, c.name), "{note}");
            self.state
                .cluster
                .pod_event(&c, "Warning", "GpuChoiceNotHonoured", &note)
                .await;
            self.pair(choice.clone(), c);
        }
        choice
    }

    fn pair(&self, devices: Vec<u32>, pod: Candidate) {
        let mut p = self.pairings.lock().expect("pairings lock");
        p.retain(|x| x.at.elapsed() < PAIRING_TTL && x.pod.uid != pod.uid);
        p.push(Pairing {
            devices: devices.into_iter().collect(),
            pod,
            at: Instant::now(),
        });
    }

    /// The pod the kubelet is allocating `devices` for (see the module docs).
    async fn pod_for(&self, devices: &[u32]) -> Option<Candidate> {
        let set: BTreeSet<u32> = devices.iter().copied().collect();
        let paired = {
            let mut p = self.pairings.lock().expect("pairings lock");
            p.retain(|x| x.at.elapsed() < PAIRING_TTL);
            p.iter()
                .position(|x| x.devices == set)
                .map(|i| p.remove(i).pod)
        };
        let cands = self.candidates().await;
        if let Some(pod) = paired {
            // Re-read it: an earlier container of the same pod may have been recorded since.
            if let Some(c) = cands.iter().find(|c| c.uid == pod.uid) {
                return Some(c.clone());
            }
        }
        let size = devices.len() as u32;
        let sized = cands.iter().filter(|c| c.next_request() == Some(size));
        let mut oldest = None;
        for c in sized {
            if let Some(Ok(chosen)) = c.next_chosen() {
                if chosen.iter().copied().collect::<BTreeSet<u32>>() == set {
                    return Some(c.clone());
                }
            }
            oldest.get_or_insert(c);
        }
        oldest.cloned()
    }

    async fn allocate_one(
        &self,
        inv: &Inventory,
        ids: &[String],
    ) -> Result<ContainerAllocateResponse, Status> {
        let indices = self.indices(inv, ids)?;
        let uuids: Vec<&str> = indices
            .iter()
            .filter_map(|i| inv.gpu_by_index(*i))
            .map(|g| g.uuid.as_str())
            .collect();
        let mut honoured = false;
        if let Some(pod) = self.pod_for(&indices).await {
            let chosen = pod.next_chosen().and_then(Result::ok);
            let set: BTreeSet<u32> = indices.iter().copied().collect();
            honoured = chosen
                .as_ref()
                .is_some_and(|c| c.iter().copied().collect::<BTreeSet<u32>>() == set);
            let mut allocated = pod.allocated.clone();
            allocated.extend(&indices);
            tracing::info!(
                pod = %format!("{}/{}", pod.namespace, pod.name),
                gpus = %format_indices(&indices),
                scheduler_choice = honoured,
                "allocated"
            );
            if let Err(e) = self
                .state
                .cluster
                .record_allocation(&pod.namespace, &pod.name, &pod.uid, &allocated)
                .await
            {
                tracing::warn!(pod = %pod.name, error = %e, "cannot record the allocation on the pod");
            }
        } else {
            tracing::info!(gpus = %format_indices(&indices), "allocated to a pod without a scheduler choice");
        }
        let counter = if honoured {
            &self.state.counters.allocations_scheduler
        } else {
            &self.state.counters.allocations_other
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let cdi_devices = match self.cfg.cdi {
            CdiNames::None => Vec::new(),
            CdiNames::Index => indices
                .iter()
                .map(|i| CdiDevice {
                    name: format!("nvidia.com/gpu={i}"),
                })
                .collect(),
            CdiNames::Uuid => uuids
                .iter()
                .map(|u| CdiDevice {
                    name: format!("nvidia.com/gpu={u}"),
                })
                .collect(),
        };
        Ok(ContainerAllocateResponse {
            envs: BTreeMap::from([(VISIBLE_DEVICES_ENV.to_string(), uuids.join(","))])
                .into_iter()
                .collect(),
            cdi_devices,
            ..Default::default()
        })
    }
}

#[tonic::async_trait]
impl DevicePlugin for Service {
    async fn get_device_plugin_options(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(DevicePluginOptions {
            pre_start_required: false,
            get_preferred_allocation_available: true,
        }))
    }

    type ListAndWatchStream = ReceiverStream<Result<ListAndWatchResponse, Status>>;

    async fn list_and_watch(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let (tx, rx) = mpsc::channel(4);
        let mut inventory = self.state.inventory.clone();
        let mut health = self.state.health.clone();
        let mut epoch = self.epoch.subscribe();
        tokio::spawn(async move {
            loop {
                let list = device_list(&inventory.borrow_and_update(), &health.borrow_and_update());
                if tx.send(Ok(list)).await.is_err() {
                    return;
                }
                tokio::select! {
                    r = inventory.changed() => if r.is_err() { return },
                    r = health.changed() => if r.is_err() { return },
                    _ = epoch.changed() => return,
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let inv = self.inventory();
        let mut container_responses = Vec::new();
        for r in request.into_inner().container_requests {
            let available = self.indices(&inv, &r.available_device_i_ds)?;
            let must = self.indices(&inv, &r.must_include_device_i_ds)?;
            let size = usize::try_from(r.allocation_size).unwrap_or(0);
            let choice = self.prefer(&available, &must, size).await;
            container_responses.push(ContainerPreferredAllocationResponse {
                device_i_ds: choice
                    .iter()
                    .filter_map(|i| inv.gpu_by_index(*i))
                    .map(|g| g.uuid.clone())
                    .collect(),
            });
        }
        Ok(Response::new(PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        let inv = self.inventory();
        let mut container_responses = Vec::new();
        for r in request.into_inner().container_requests {
            container_responses.push(self.allocate_one(&inv, &r.devices_ids).await?);
        }
        Ok(Response::new(AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        Ok(Response::new(PreStartContainerResponse {}))
    }
}

/// Resolves once `shutdown` is true (or its sender is gone).
pub async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// A socket's identity: a new kubelet makes a new socket file.
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Serves the device plugin and keeps it registered until `shutdown` turns true: on a
/// kubelet restart (its socket replaced, or the agent's socket removed, as the kubelet does
/// to every plugin socket when it starts) the agent recreates its socket and registers
/// again.
pub async fn run(
    cfg: PluginConfig,
    state: PluginState,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), PluginError> {
    if !cfg.dir.is_dir() {
        return Err(PluginError::NoDir(cfg.dir.clone()));
    }
    let cfg = Arc::new(cfg);
    let counters = state.counters.clone();
    let service = Arc::new(Service {
        cfg: cfg.clone(),
        state,
        pairings: Mutex::new(Vec::new()),
        epoch: watch::Sender::new(0),
    });
    let socket = cfg.dir.join(&cfg.socket_name);
    let kubelet_socket = cfg.dir.join(KUBELET_SOCKET);
    loop {
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket).map_err(|error| PluginError::Listen {
            path: socket.clone(),
            error,
        })?;
        let mine = identity(&socket);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(DevicePluginServer::from_arc(service.clone()))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = stop_rx.await;
                }),
        );
        // Register, waiting for the kubelet as long as it takes.
        let mut delay = Duration::from_millis(200);
        let kubelet_id = loop {
            let id = identity(&kubelet_socket);
            if id.is_some() {
                match kubelet::register(&kubelet_socket, &cfg.socket_name, &cfg.resource_name).await
                {
                    Ok(()) => break id,
                    Err(e) => tracing::warn!(error = %e, "registering with the kubelet"),
                }
            }
            let stopping = tokio::select! {
                _ = tokio::time::sleep(delay) => false,
                _ = stopped(&mut shutdown) => true,
            };
            if stopping {
                service.epoch.send_modify(|e| *e += 1);
                let _ = stop_tx.send(());
                let _ = server.await;
                let _ = std::fs::remove_file(&socket);
                return Ok(());
            }
            delay = (delay * 2).min(Duration::from_secs(5));
        };
        counters.registrations.fetch_add(1, Ordering::Relaxed);
        counters.registered.store(true, Ordering::Relaxed);
        tracing::info!(resource = %cfg.resource_name, socket = %socket.display(), "registered with the kubelet");
        let stopping = loop {
            tokio::select! {
                _ = tokio::time::sleep(SOCKET_POLL) => {
                    if identity(&socket) != mine || identity(&kubelet_socket) != kubelet_id {
                        tracing::info!("the kubelet restarted; registering again");
                        break false;
                    }
                }
                _ = stopped(&mut shutdown) => break true,
            }
        };
        counters.registered.store(false, Ordering::Relaxed);
        service.epoch.send_modify(|e| *e += 1);
        let _ = stop_tx.send(());
        let _ = server.await;
        if stopping {
            let _ = std::fs::remove_file(&socket);
            return Ok(());
        }
    }
}
