//! The agent's run loop: discover, publish, track health, serve the device plugin and the
//! metrics endpoint, until told to stop.

use crate::backend::{BackendError, GpuBackend, HealthEvent, NoGpus};
use crate::cluster::Cluster;
use crate::device_taints;
use crate::fake::FakeBackend;
use crate::health::{HealthMap, HealthPolicy, HealthTracker, Transition};
use crate::inventory::Inventory;
use crate::kubelet::device_holders;
use crate::metrics::{self, Counters, GpuRow, Scrape};
use crate::nvml::NvmlBackend;
use crate::plugin::{self, PluginConfig, PluginError, PluginState};
use crate::publish;
use crate::sysfs::Sysfs;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// How often unhealthy GPUs are probed for recovery.
const HEALTH_TICK: Duration = Duration::from_secs(5);
/// How long a scrape waits for the kubelet's PodResources answer.
const POD_RESOURCES_TIMEOUT: Duration = Duration::from_secs(3);

/// What to do when NVML cannot be loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WithoutNvml {
    /// Exit with the reason (the default: a GPU node without its driver is a fault).
    Exit,
    /// Keep serving health and metrics endpoints with zero GPUs.
    Serve,
}

pub struct AgentConfig {
    pub node: String,
    pub fake_gpus: Option<PathBuf>,
    pub sysfs_root: PathBuf,
    pub without_nvml: WithoutNvml,
    pub metrics_addr: SocketAddr,
    pub pod_resources_socket: PathBuf,
    /// `None`: no device plugin (the agent runs beside NVIDIA's).
    pub plugin: Option<PluginConfig>,
    pub publish: bool,
    pub health: HealthPolicy,
    pub rediscover_every: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Fake(#[from] kestrel_objects::LoadError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Plugin(#[from] PluginError),
    #[error("cannot serve metrics on {addr}: {error}")]
    Metrics {
        addr: SocketAddr,
        error: std::io::Error,
    },
}

/// The backend the flags ask for: the fake file, else NVML (or no GPUs, if NVML is
/// missing and `without_nvml` is `Serve`).
pub fn open_backend(
    fake: Option<&std::path::Path>,
    sysfs_root: PathBuf,
    without_nvml: WithoutNvml,
) -> Result<Arc<dyn GpuBackend>, AgentError> {
    if let Some(path) = fake {
        return Ok(Arc::new(FakeBackend::load(path)?));
    }
    match NvmlBackend::new(Sysfs::new(sysfs_root)) {
        Ok(b) => Ok(Arc::new(b)),
        Err(e @ BackendError::NvmlUnavailable(_)) if without_nvml == WithoutNvml::Serve => {
            tracing::error!("{e}; serving with zero GPUs");
            Ok(Arc::new(NoGpus))
        }
        Err(e) => Err(e.into()),
    }
}

/// Whether NVIDIA's DRA driver publishes the node's GPUs (ResourceSlices of
/// `gpu.nvidia.com` for the node). Then the agent serves no device plugin, which would hand
/// the same GPUs out twice, and marks unhealthy GPUs with DeviceTaintRules instead
/// ([`crate::device_taints`]); discovery, health, metrics and publication go on. When the
/// slices cannot be read, the device plugin is served and a warning says why.
async fn dra_publishes_gpus(cluster: &Cluster, node: &str) -> bool {
    let driver = kestrel_objects::dra::NVIDIA_GPU_DRIVER;
    match cluster.slices_of(node, driver).await {
        Ok(slices) if slices.is_empty() => false,
        Ok(slices) => {
            tracing::info!(
                node,
                ?slices,
                "NVIDIA's DRA driver publishes this node's GPUs: no device plugin (DRA hands \
                 them out), unhealthy GPUs get DeviceTaintRules; discovery, health, metrics \
                 and publication go on"
            );
            true
        }
        Err(e) => {
            tracing::warn!(
                node,
                error = %e,
                "cannot list this node's ResourceSlices (grant list on resourceslices, \
                 resource.k8s.io): its GPUs are taken as the device plugin's"
            );
            false
        }
    }
}

/// Discovery on a blocking thread (NVML calls block).
pub async fn discover(backend: &Arc<dyn GpuBackend>) -> Result<Inventory, BackendError> {
    let b = backend.clone();
    tokio::task::spawn_blocking(move || b.discover())
        .await
        .expect("discovery does not panic")
}

/// The agent's shared state, for the metrics scrape and the tests.
#[derive(Clone)]
pub struct Handles {
    pub inventory: watch::Receiver<Inventory>,
    pub health: watch::Receiver<HealthMap>,
    pub counters: Arc<Counters>,
    /// Where `/metrics` listens (the port, when asked for port 0).
    pub metrics_addr: SocketAddr,
}

/// Runs the agent until `shutdown` turns true. `ready` receives the agent's state once
/// discovery has run (tests watch it).
pub async fn run(
    cfg: AgentConfig,
    backend: Arc<dyn GpuBackend>,
    cluster: Arc<Cluster>,
    shutdown: watch::Receiver<bool>,
    ready: Option<tokio::sync::oneshot::Sender<Handles>>,
) -> Result<(), AgentError> {
    let mut cfg = cfg;
    let dra_node = dra_publishes_gpus(&cluster, &cfg.node).await;
    if dra_node {
        cfg.plugin = None;
    }
    let inv = discover(&backend).await?;
    for w in &inv.warnings {
        tracing::warn!("discovery: {w}");
    }
    tracing::info!(
        backend = backend.kind(),
        gpus = inv.gpus.len(),
        nics = inv.nics.len(),
        topology = %inv.template(),
        "discovered"
    );
    let counters = Arc::new(Counters::default());
    counters.discovered.store(true, Ordering::Relaxed);
    let mut tracker =
        HealthTracker::new(inv.gpus.iter().map(|g| g.uuid.clone()), cfg.health.clone());
    let (inventory_tx, inventory_rx) = watch::channel(inv.clone());
    let (health_tx, health_rx) = watch::channel(tracker.map().clone());
    let node = cfg.node.clone();

    if cfg.publish {
        // In the background: a slow API server must not hold up /healthz or the plugin.
        let (cluster, node, inv) = (cluster.clone(), node.clone(), inv.clone());
        tokio::spawn(async move { publish_and_log(&cluster, &node, &inv).await });
    }

    // Metrics.
    let listener = tokio::net::TcpListener::bind(cfg.metrics_addr)
        .await
        .map_err(|error| AgentError::Metrics {
            addr: cfg.metrics_addr,
            error,
        })?;
    let metrics_addr = listener.local_addr().unwrap_or(cfg.metrics_addr);
    tracing::info!(addr = %metrics_addr, "serving metrics");
    let resource = cfg
        .plugin
        .as_ref()
        .map(|p| p.resource_name.clone())
        .unwrap_or_else(|| kestrel_core::GPU_RESOURCE.into());
    let scrape = scraper(
        node.clone(),
        backend.clone(),
        inventory_rx.clone(),
        health_rx.clone(),
        counters.clone(),
        cfg.pod_resources_socket.clone(),
        resource.clone(),
    );
    let plugin_on = cfg.plugin.is_some();
    let c = counters.clone();
    let readiness = Arc::new(move || {
        c.discovered.load(Ordering::Relaxed) && (!plugin_on || c.registered.load(Ordering::Relaxed))
    });
    let metrics_task = tokio::spawn(metrics::serve(
        listener,
        scrape,
        readiness,
        shutdown.clone(),
    ));

    // Device plugin.
    let mut plugin_task = cfg.plugin.map(|p| {
        let state = PluginState {
            inventory: inventory_rx.clone(),
            health: health_rx.clone(),
            cluster: cluster.clone(),
            counters: counters.clone(),
        };
        tokio::spawn(plugin::run(p, state, shutdown.clone()))
    });

    if let Some(ready) = ready {
        let _ = ready.send(Handles {
            inventory: inventory_rx.clone(),
            health: health_rx.clone(),
            counters: counters.clone(),
            metrics_addr,
        });
    }

    // Health events and rediscovery, until shutdown.
    let (events_tx, mut events) = mpsc::unbounded_channel::<HealthEvent>();
    backend.watch_health(events_tx)?;
    let mut shutdown_rx = shutdown.clone();
    let mut tick = tokio::time::interval(HEALTH_TICK);
    let mut rediscover = tokio::time::interval(cfg.rediscover_every);
    rediscover.tick().await;
    // The condition is written from this loop only, so writes keep the order of the
    // health changes.
    if cfg.publish && !inventory_rx.borrow().gpus.is_empty() {
        condition(&cluster, &node, &tracker).await;
        if dra_node {
            let inv = inventory_rx.borrow().clone();
            device_taints::reconcile(&cluster, &node, &inv, tracker.map()).await;
        }
    }
    let mut events_open = true;
    loop {
        let transitions: Vec<Transition> = tokio::select! {
            _ = plugin::stopped(&mut shutdown_rx) => break,
            // The device plugin stops only on shutdown or an error (its directory vanished).
            r = wait_plugin(&mut plugin_task) => {
                plugin_task = None;
                match r {
                    Ok(Err(e)) => return Err(e.into()),
                    Ok(Ok(())) => break,
                    Err(e) => {
                        tracing::error!(error = %e, "device plugin task failed");
                        break;
                    }
                }
            }
            event = events.recv(), if events_open => match event {
                Some(e) => tracker.apply(&e, Instant::now()).into_iter().collect(),
                None => {
                    events_open = false;
                    Vec::new()
                }
            },
            _ = tick.tick() => {
                let sick: Vec<String> = tracker.map().iter().filter(|(_, h)| !h.healthy()).map(|(u, _)| u.clone()).collect();
                if sick.is_empty() {
                    Vec::new()
                } else {
                    let b = backend.clone();
                    let answering: Vec<String> = tokio::task::spawn_blocking(move || {
                        sick.into_iter().filter(|u| b.probe(u)).collect()
                    }).await.unwrap_or_default();
                    tracker.tick(Instant::now(), |u| answering.iter().any(|a| a == u))
                }
            }
            _ = rediscover.tick() => {
                match discover(&backend).await {
                    Ok(new) => {
                        let changed = new != *inventory_rx.borrow();
                        // Published every time: it patches only what differs, so a failed
                        // earlier write or a removed label is put right.
                        if cfg.publish {
                            publish_and_log(&cluster, &node, &new).await;
                        }
                        if changed {
                            tracing::info!(gpus = new.gpus.len(), "the node's GPUs changed");
                            let uuids: Vec<String> = new.gpus.iter().map(|g| g.uuid.clone()).collect();
                            tracker.retain(&uuids);
                            inventory_tx.send_replace(new);
                            health_tx.send_replace(tracker.map().clone());
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "rediscovery failed; keeping the last inventory"),
                }
                if cfg.publish && plugin_on {
                    let inv = inventory_rx.borrow().clone();
                    if let Err(e) = reconcile_allocations(&cluster, &node, &inv, &cfg.pod_resources_socket, &resource).await {
                        tracing::debug!(error = %e, "allocation records not reconciled");
                    }
                }
                Vec::new()
            }
        };
        if transitions.is_empty() {
            // An ignored XID still counts for metrics.
            health_tx.send_if_modified(|h| {
                let changed = h != tracker.map();
                if changed {
                    *h = tracker.map().clone();
                }
                changed
            });
            continue;
        }
        health_tx.send_replace(tracker.map().clone());
        for t in &transitions {
            let inv = inventory_rx.borrow().clone();
            let (kind, reason, note) = match t {
                Transition::Unhealthy { uuid, fault } => (
                    "Warning",
                    fault.reason(),
                    format!(
                        "GPU {} ({uuid}) is unhealthy: {}; {}",
                        index_of(&inv, uuid),
                        fault.describe(),
                        if dra_node {
                            "its DRA device is tainted (DeviceTaintRule)"
                        } else {
                            "the kubelet no longer hands it out"
                        }
                    ),
                ),
                Transition::Recovered { uuid } => (
                    "Normal",
                    "GpuRecovered",
                    format!("GPU {} ({uuid}) is healthy again", index_of(&inv, uuid)),
                ),
            };
            tracing::warn!(reason, "{note}");
            if cfg.publish {
                cluster.node_event(&node, kind, reason, &note).await;
            }
        }
        if cfg.publish {
            condition(&cluster, &node, &tracker).await;
            if dra_node {
                let inv = inventory_rx.borrow().clone();
                device_taints::reconcile(&cluster, &node, &inv, tracker.map()).await;
            }
        }
    }
    if let Some(task) = plugin_task {
        match task.await {
            Ok(r) => r?,
            Err(e) => tracing::error!(error = %e, "device plugin task failed"),
        }
    }
    let _ = metrics_task.await;
    Ok(())
}

/// Puts the allocation records right from the kubelet's own account (PodResources): when
/// two pods asking for the same number of GPUs started at once, the agent may have
/// recorded each with the other's GPUs (see docs/concepts/node-agent.md). Only pods the scheduler stamped
/// are touched. Returns how many records changed.
pub async fn reconcile_allocations(
    cluster: &Cluster,
    node: &str,
    inv: &Inventory,
    pod_resources: &std::path::Path,
    resource: &str,
) -> Result<usize, String> {
    let holders = device_holders(pod_resources, resource)
        .await
        .map_err(|e| e.to_string())?;
    let mut held: std::collections::BTreeMap<(String, String), Vec<u32>> = Default::default();
    for (uuid, h) in holders {
        if let Some(g) = inv.gpu_by_uuid(&uuid) {
            held.entry((h.namespace, h.pod)).or_default().push(g.index);
        }
    }
    let pods = cluster
        .pods_on_node(node)
        .await
        .map_err(|e| e.to_string())?;
    let mut changed = 0;
    for pod in pods {
        let meta = &pod.metadata;
        let annotations = meta.annotations.clone().unwrap_or_default();
        if !annotations.contains_key(crate::choose::GPU_INDICES_ANNOTATION) {
            continue;
        }
        let key = (
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        );
        let Some(indices) = held.get_mut(&key) else {
            continue;
        };
        indices.sort();
        let mut recorded = annotations
            .get(crate::choose::GPU_ALLOCATED_ANNOTATION)
            .and_then(|v| crate::choose::parse_indices(v).ok())
            .unwrap_or_default();
        recorded.sort();
        if recorded == *indices {
            continue;
        }
        let uid = meta.uid.clone().unwrap_or_default();
        cluster
            .record_allocation(&key.0, &key.1, &uid, indices)
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!(pod = %format!("{}/{}", key.0, key.1), gpus = %crate::choose::format_indices(indices), "allocation record corrected from the kubelet's PodResources");
        changed += 1;
    }
    Ok(changed)
}

async fn wait_plugin(
    task: &mut Option<tokio::task::JoinHandle<Result<(), PluginError>>>,
) -> Result<Result<(), PluginError>, tokio::task::JoinError> {
    match task {
        Some(t) => t.await,
        None => std::future::pending().await,
    }
}

fn index_of(inv: &Inventory, uuid: &str) -> String {
    inv.gpu_by_uuid(uuid)
        .map(|g| g.index.to_string())
        .unwrap_or_else(|| "?".into())
}

async fn publish_and_log(cluster: &Cluster, node: &str, inv: &Inventory) {
    match publish::publish(cluster, node, inv).await {
        Ok(true) => {
            tracing::info!(node, topology = %inv.template(), "published the node's GPU labels and topology")
        }
        Ok(false) => {}
        Err(e) => tracing::warn!(node, error = %e, "cannot publish the node's GPU labels"),
    }
}

async fn condition(cluster: &Cluster, node: &str, tracker: &HealthTracker) {
    let sick: Vec<String> = tracker
        .map()
        .iter()
        .filter_map(|(u, h)| h.fault.as_ref().map(|f| format!("{u}: {}", f.describe())))
        .collect();
    let (reason, message) = if sick.is_empty() {
        ("AllGpusHealthy", "every GPU is healthy".to_string())
    } else {
        let reason = tracker
            .map()
            .values()
            .find_map(|h| h.fault.as_ref())
            .map(|f| f.reason())
            .unwrap_or("XidError");
        (reason, sick.join("; "))
    };
    if let Err(e) = cluster
        .set_gpu_condition(node, !sick.is_empty(), reason, &message)
        .await
    {
        tracing::warn!(node, error = %e, "cannot set the node's GPU condition");
    }
}

fn scraper(
    node: String,
    backend: Arc<dyn GpuBackend>,
    inventory: watch::Receiver<Inventory>,
    health: watch::Receiver<HealthMap>,
    counters: Arc<Counters>,
    pod_resources: PathBuf,
    resource: String,
) -> Scrape {
    Arc::new(move || {
        let node = node.clone();
        let backend = backend.clone();
        let inv = inventory.borrow().clone();
        let health = health.borrow().clone();
        let counters = counters.clone();
        let pod_resources = pod_resources.clone();
        let resource = resource.clone();
        Box::pin(async move {
            let gpus = inv.gpus.clone();
            let samples = tokio::task::spawn_blocking(move || {
                gpus.iter()
                    .map(|g| backend.sample(g).ok())
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap_or_default();
            let holders = match tokio::time::timeout(
                POD_RESOURCES_TIMEOUT,
                device_holders(&pod_resources, &resource),
            )
            .await
            {
                Ok(Ok(h)) => h,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "no pod labels on GPU metrics");
                    Default::default()
                }
                Err(_) => Default::default(),
            };
            let rows: Vec<GpuRow<'_>> = inv
                .gpus
                .iter()
                .zip(samples.into_iter().chain(std::iter::repeat(None)))
                .map(|(gpu, sample)| GpuRow {
                    gpu,
                    sample,
                    health: health.get(&gpu.uuid).cloned().unwrap_or_default(),
                    holder: holders.get(&gpu.uuid).cloned(),
                })
                .collect();
            metrics::render(&node, &rows, &counters)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without the NVIDIA library: an error that says so and points at --fake-gpus, or
    /// (serve) zero GPUs. On a machine with the library, NVML loads and there is nothing
    /// to check.
    #[tokio::test]
    async fn without_nvml_the_agent_explains_or_serves_zero_gpus() {
        let root = PathBuf::from("/nonexistent-sysfs");
        match open_backend(None, root.clone(), WithoutNvml::Exit) {
            Err(AgentError::Backend(e @ BackendError::NvmlUnavailable(_))) => {
                let text = e.to_string();
                assert!(text.contains("libnvidia-ml.so.1"), "{text}");
                assert!(text.contains("--fake-gpus FILE"), "{text}");
            }
            Ok(b) => {
                assert_eq!(b.kind(), "nvml");
                return;
            }
            Err(other) => panic!("{other}"),
        }
        let b = open_backend(None, root, WithoutNvml::Serve).unwrap();
        assert_eq!(b.kind(), "none");
        let inv = discover(&b).await.unwrap();
        assert!(inv.gpus.is_empty());
        // A bad fake file is an error naming it.
        let Err(e) = open_backend(
            Some(std::path::Path::new("/nonexistent/gpus.yaml")),
            PathBuf::from("/sys"),
            WithoutNvml::Exit,
        ) else {
            panic!("a missing fake file opened")
        };
        assert!(e.to_string().contains("/nonexistent/gpus.yaml"), "{e}");
    }
}
