//! `kestrel agent`: the node agent (discovery, device plugin, health, publication, metrics).

use crate::runtime::Flavour;
use crate::serve::{client, init_logging, shutdown_signal, LogFormat};
use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use kestrel_agent::agent::{self, AgentConfig, WithoutNvml};
use kestrel_agent::cluster::Cluster;
use kestrel_agent::health::HealthPolicy;
use kestrel_agent::kubelet::{
    check_resource_name, DEFAULT_DEVICE_PLUGIN_DIR, DEFAULT_POD_RESOURCES_SOCKET,
};
use kestrel_agent::metrics::DEFAULT_METRICS_ADDR;
use kestrel_agent::plugin::{CdiNames, PluginConfig};
use kestrel_agent::publish;
use kestrel_agent::sysfs::DEFAULT_ROOT;
use kestrel_objects::duration::parse_duration;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum WithoutNvmlArg {
    /// Exit with an error naming the cause.
    Exit,
    /// Keep serving /healthz and /metrics, reporting zero GPUs.
    Serve,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum CdiArg {
    /// Only NVIDIA_VISIBLE_DEVICES.
    None,
    /// Also CDI names nvidia.com/gpu=<index>.
    Index,
    /// Also CDI names nvidia.com/gpu=<UUID>.
    Uuid,
}

#[derive(Args)]
pub struct AgentArgs {
    /// This node's name; default: $NODE_NAME (the DaemonSet sets it from spec.nodeName).
    #[arg(long)]
    node_name: Option<String>,
    /// Kubeconfig file; default: in-cluster config, else $KUBECONFIG or ~/.kube/config.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Describe the node's GPUs in a YAML file instead of asking NVML (tests, demos,
    /// machines without GPUs); format in docs/concepts/node-agent.md.
    #[arg(long, value_name = "FILE")]
    fake_gpus: Option<PathBuf>,
    /// Where sysfs is mounted (NUMA nodes, PCIe switches, RDMA NICs).
    #[arg(long, default_value = DEFAULT_ROOT)]
    sysfs_root: PathBuf,
    /// When the NVIDIA library cannot be loaded: exit, or serve with zero GPUs.
    #[arg(long, value_enum, default_value = "exit")]
    without_nvml: WithoutNvmlArg,
    /// The extended resource the device plugin registers.
    #[arg(long, default_value = kestrel_core::GPU_RESOURCE)]
    resource_name: String,
    /// The kubelet's device plugin directory (its kubelet.sock and the plugins' sockets).
    #[arg(long, default_value = DEFAULT_DEVICE_PLUGIN_DIR)]
    device_plugin_dir: PathBuf,
    /// The kubelet's PodResources socket (pod labels on GPU metrics).
    #[arg(long, default_value = DEFAULT_POD_RESOURCES_SOCKET)]
    pod_resources_socket: PathBuf,
    /// Run without the device plugin (beside NVIDIA's): discovery, publication, health
    /// and metrics only.
    #[arg(long)]
    no_device_plugin: bool,
    /// Do not write the Node's labels, annotations, GPU condition or events.
    #[arg(long)]
    no_publish: bool,
    /// CDI device names in Allocate responses, for runtimes with CDI enabled.
    #[arg(long, value_enum, default_value = "none")]
    cdi: CdiArg,
    /// XIDs counted but not marking a GPU unhealthy (the workload's own faults).
    #[arg(long, default_value = "13,31,43,45,68,109", value_name = "LIST")]
    ignore_xids: String,
    /// How long a GPU unhealthy from an XID must answer and stay quiet before it is
    /// healthy again; `never` keeps it out until the agent restarts.
    #[arg(long, default_value = "10m")]
    xid_recovery: String,
    /// How often to rediscover the GPUs and republish when they change.
    #[arg(long, default_value = "60s")]
    rediscover_every: String,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = DEFAULT_METRICS_ADDR)]
    metrics_addr: SocketAddr,
    #[arg(long, value_enum, default_value = "plain")]
    log_format: LogFormat,
    /// Print a PrometheusRule with alerts on the agent's metrics and exit.
    #[arg(long)]
    prometheus_rules: bool,
    /// Print what discovery finds (GPUs, NICs, the topology template, the labels and
    /// annotations the agent would publish) as JSON and exit; needs no cluster.
    #[arg(long)]
    discover: bool,
}

fn duration(flag: &str, value: &str) -> Result<Duration> {
    let ms = parse_duration(value).map_err(|e| anyhow::anyhow!("--{flag}: {e}"))?;
    Ok(Duration::from_millis(ms))
}

fn health_policy(args: &AgentArgs) -> Result<HealthPolicy> {
    let mut ignored_xids = std::collections::BTreeSet::new();
    for part in args
        .ignore_xids
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let xid = part.parse::<u64>().map_err(|_| {
            anyhow::anyhow!("--ignore-xids: {part:?} is not an XID number; write e.g. 13,31,43")
        })?;
        ignored_xids.insert(xid);
    }
    let xid_recovery = match args.xid_recovery.as_str() {
        "never" => None,
        v => Some(duration("xid-recovery", v)?),
    };
    Ok(HealthPolicy {
        ignored_xids,
        xid_recovery,
    })
}

pub fn run(args: AgentArgs) -> Result<()> {
    if args.prometheus_rules {
        print!("{}", kestrel_live::deploy::render_agent_rules());
        return Ok(());
    }
    if !args.discover {
        init_logging(args.log_format);
    }
    check_resource_name(&args.resource_name)
        .map_err(|e| anyhow::anyhow!("--resource-name: {e}"))?;
    let health = health_policy(&args)?;
    let rediscover_every = duration("rediscover-every", &args.rediscover_every)?;
    if rediscover_every.is_zero() {
        bail!("--rediscover-every must be more than 0; write e.g. 60s");
    }
    crate::runtime::block_on(
        Flavour::MultiThread(2),
        run_async(args, health, rediscover_every),
    )?
}

async fn run_async(
    args: AgentArgs,
    health: HealthPolicy,
    rediscover_every: Duration,
) -> Result<()> {
    let without_nvml = match args.without_nvml {
        WithoutNvmlArg::Exit => WithoutNvml::Exit,
        WithoutNvmlArg::Serve => WithoutNvml::Serve,
    };
    let backend = agent::open_backend(
        args.fake_gpus.as_deref(),
        args.sysfs_root.clone(),
        without_nvml,
    )?;
    if args.discover {
        let inv = agent::discover(&backend).await?;
        let (labels, annotations) = publish::desired(&inv);
        let out = serde_json::json!({
            "backend": backend.kind(),
            "topology": inv.template().name(),
            "gpus": inv.gpus,
            "nics": inv.nics,
            "warnings": inv.warnings,
            "labels": labels,
            "annotations": annotations,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let node = match args.node_name.clone().or_else(|| std::env::var("NODE_NAME").ok()) {
        Some(n) if !n.is_empty() => n,
        _ => bail!(
            "no node name: pass --node-name NAME or set NODE_NAME (the DaemonSet sets it from spec.nodeName)"
        ),
    };
    let plugin = if args.no_device_plugin {
        None
    } else {
        if !args.device_plugin_dir.is_dir() {
            bail!(
                "--device-plugin-dir: {} does not exist; mount the kubelet's device plugin \
                 directory (/var/lib/kubelet/device-plugins) there, or run with --no-device-plugin",
                args.device_plugin_dir.display()
            );
        }
        Some(PluginConfig {
            node: node.clone(),
            socket_name: PluginConfig::socket_name_for(&args.resource_name),
            resource_name: args.resource_name.clone(),
            dir: args.device_plugin_dir.clone(),
            cdi: match args.cdi {
                CdiArg::None => CdiNames::None,
                CdiArg::Index => CdiNames::Index,
                CdiArg::Uuid => CdiNames::Uuid,
            },
        })
    };
    let cluster = Arc::new(Cluster::Kube(client(args.kubeconfig.clone()).await?));
    let cfg = AgentConfig {
        node,
        fake_gpus: args.fake_gpus.clone(),
        sysfs_root: args.sysfs_root.clone(),
        without_nvml,
        metrics_addr: args.metrics_addr,
        pod_resources_socket: args.pod_resources_socket.clone(),
        plugin,
        publish: !args.no_publish,
        health,
        rediscover_every,
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    agent::run(cfg, backend, cluster, stop_rx, None).await?;
    Ok(())
}
