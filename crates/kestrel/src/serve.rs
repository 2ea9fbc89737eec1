//! `kestrel serve`: the live scheduler. `kestrel manifests`: the install manifests.
//! `kestrel crds`: Kestrel's CustomResourceDefinitions.

use crate::runtime::Flavour;
use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use kestrel_core::{Policy, SchedulerConfig};
use kestrel_live::api::{ApiWriter, GpuIndicesWrite};
use kestrel_live::driver::{self, DriverConfig};
use kestrel_live::leader::{LeaderElector, LeaseClock, LeaseConfig};
use kestrel_live::limiter::Limiter;
use kestrel_live::metrics::{self, Metrics};
use kestrel_live::training::TrainingConfig;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::watch;

/// Default client-side limit of API writes per second, and the burst above it.
pub const DEFAULT_QPS: f64 = 200.0;
pub const DEFAULT_BURST: u32 = 400;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormat {
    Plain,
    Json,
}

#[derive(Args)]
pub struct ServeArgs {
    /// Kubeconfig file; default: in-cluster config, else $KUBECONFIG or ~/.kube/config.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Schedule pods whose spec.schedulerName is this.
    #[arg(long, default_value = "kestrel")]
    scheduler_name: String,
    /// Client-side limit of API writes per second (binds, status, events); 0: none.
    #[arg(long, default_value_t = DEFAULT_QPS)]
    qps: f64,
    /// Writes allowed in a burst above --qps.
    #[arg(long, default_value_t = DEFAULT_BURST)]
    burst: u32,
    /// Elect one leader among replicas with a Lease (disable only for a single replica).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// Namespace of the leader-election Lease (named after --scheduler-name).
    #[arg(long, default_value = "kube-system")]
    lease_namespace: String,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:10251")]
    metrics_addr: SocketAddr,
    #[arg(long, value_enum, default_value = "plain")]
    log_format: LogFormat,
    /// Scoring policy: kestrel, binpack, spread, bestfit, random, fgd.
    #[arg(long, default_value = "kestrel")]
    policy: Policy,
    /// How long a gang that waited past its scheduleTimeoutSeconds waits before it is
    /// tried again (its pods stay pending meanwhile).
    #[arg(long, default_value = "60s", value_parser = kestrel_objects::duration::parse_duration)]
    gang_backoff: u64,
    /// Binds and status updates in flight at once.
    #[arg(long, default_value_t = kestrel_live::driver::DEFAULT_MAX_IN_FLIGHT)]
    max_in_flight: usize,
    /// How the chosen GPU indices reach the pod: `binding` puts them in the Binding, which
    /// the API server copies onto the pod as it sets the node (one write); `patch`
    /// annotates the pod, then binds it (two writes).
    #[arg(long, value_enum, default_value = "binding")]
    gpu_indices_via: GpuIndicesVia,
    /// How often the leader takes the next step of each NodeMaintenance (drains).
    #[arg(long, default_value = "1s", value_parser = kestrel_objects::duration::parse_duration)]
    maintenance_interval: u64,
    /// Drain, checkpoints first, the nodes the NVIDIA GPU Operator's driver upgrade waits
    /// on (label nvidia.com/gpu-driver-upgrade-state=wait-for-jobs-required).
    #[arg(long)]
    gpu_operator_hook: bool,
    /// The checkpoint deadline of the drains --gpu-operator-hook starts.
    #[arg(long, default_value = "30m", value_parser = kestrel_objects::duration::parse_duration)]
    gpu_operator_checkpoint_deadline: u64,
    /// Run the TrainingJob controller for jobs whose spec.schedulerName is
    /// --scheduler-name (while this replica leads).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    training_jobs: bool,
    /// MLflow tracking server (http://HOST:PORT) that records every TrainingJob as a run;
    /// a job's spec.mlflow.trackingUri overrides it. Empty: none (the chart's default).
    #[arg(long, env = "MLFLOW_TRACKING_URI", value_parser = tracking_uri)]
    mlflow_tracking_uri: Option<String>,
    /// How often to run `kestrel doctor`'s checks on the cluster and export the findings
    /// as kestrel_doctor_finding; 0 turns it off.
    #[arg(long, default_value = "60s", value_parser = kestrel_objects::duration::parse_duration)]
    doctor_interval: u64,
    /// Serve the read-only dashboard at this address: a port (on loopback, 127.0.0.1) or
    /// HOST:PORT. Off by default. Only the leader has state to show; a standby says so.
    /// See docs/tasks/dashboard.md.
    #[arg(long, value_name = "ADDR", value_parser = crate::dashboard::parse_addr)]
    dashboard_addr: Option<SocketAddr>,
}

fn tracking_uri(text: &str) -> Result<String, String> {
    if !text.is_empty() {
        kestrel_objects::training::check_tracking_uri(text)?;
    }
    Ok(text.to_string())
}

#[derive(Clone, Copy, ValueEnum)]
enum GpuIndicesVia {
    Patch,
    Binding,
}

#[derive(Args)]
pub struct ManifestsArgs {
    /// Print the Helm template (charts/kestrel/templates/kestrel.yaml) instead.
    #[arg(long, conflicts_with = "values")]
    helm: bool,
    /// Print the chart's values.yaml instead.
    #[arg(long)]
    values: bool,
    /// Print the node agent's manifests (deploy/kestrel-agent.yaml) instead.
    #[arg(long, conflicts_with_all = ["helm", "values"])]
    agent: bool,
    /// Print the node agent's Helm template (charts/kestrel/templates/agent.yaml) instead.
    #[arg(long, conflicts_with_all = ["helm", "values", "agent"])]
    agent_helm: bool,
}

pub fn manifests(args: ManifestsArgs) -> Result<()> {
    let text = if args.agent {
        kestrel_live::deploy::render_agent_plain()
    } else if args.agent_helm {
        kestrel_live::deploy::render_agent_helm()
    } else if args.helm {
        kestrel_live::deploy::render_helm()
    } else if args.values {
        kestrel_live::deploy::render_values()
    } else {
        kestrel_live::deploy::render_plain()
    };
    print!("{text}");
    Ok(())
}

/// `kestrel crds`: Kestrel's CustomResourceDefinitions (charts/kestrel/crds/).
pub fn crds() -> Result<()> {
    print!("{}", kestrel_live::deploy::render_crds());
    Ok(())
}

pub(crate) fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // The client logs every failed request itself; Kestrel reports failed writes with
        // their object, once per interval, so the client's own line is left out.
        .unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(
                "info,kube_client::client::builder=off,kube_client::client=error",
            )
        });
    // Colour codes only for a person at a terminal; a pod's log, a file or a pipe gets
    // plain text that grep and log shippers read as written.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Plain => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn identity() -> String {
    std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("kestrel-{}", std::process::id()))
}

pub fn serve(args: ServeArgs) -> Result<()> {
    init_logging(args.log_format);
    crate::runtime::block_on(Flavour::MultiThread(2), serve_async(args))?
}

/// The cluster to talk to: `kubeconfig`, else the in-cluster config, else $KUBECONFIG or
/// ~/.kube/config.
pub(crate) async fn cluster_config(kubeconfig: Option<PathBuf>) -> Result<kube::Config> {
    Ok(match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(&path)
                .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .with_context(|| format!("using the kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer().await.context(
            "no cluster configuration: not running in a pod and no kubeconfig found; pass --kubeconfig FILE",
        )?,
    })
}

pub(crate) async fn client(kubeconfig: Option<PathBuf>) -> Result<kube::Client> {
    let config = cluster_config(kubeconfig).await?;
    kube::Client::try_from(config).context("building the Kubernetes client")
}

async fn serve_async(args: ServeArgs) -> Result<()> {
    let client = client(args.kubeconfig.clone()).await?;
    let identity = identity();
    let metrics = Arc::new(Metrics::new());
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let listener = metrics::listen(args.metrics_addr)
        .await
        .with_context(|| format!("listening on --metrics-addr {}", args.metrics_addr))?;
    let server = tokio::spawn(metrics::serve(
        listener,
        metrics.clone(),
        shutdown_rx.clone(),
    ));

    // Without election this replica leads from the start: the sender lives (unused) until
    // the end, so leadership never reads as closed or lost.
    let (leader_tx, leader_rx) = watch::channel(!args.leader_elect);
    let mut sole_leader = None;
    let mut lease_clock = LeaseClock::unelected();
    let elector = if args.leader_elect {
        let lease = LeaseConfig::new(&args.lease_namespace, &args.scheduler_name, &identity);
        let elector = LeaderElector::new(client.clone(), lease);
        lease_clock = elector.clock();
        Some(tokio::spawn(elector.run(leader_tx, shutdown_rx.clone())))
    } else {
        sole_leader = Some(leader_tx);
        None
    };
    let writer = ApiWriter::new(
        client.clone(),
        &args.scheduler_name,
        &identity,
        Arc::new(Limiter::new(args.qps, args.burst)),
    )
    .with_gpu_indices_write(match args.gpu_indices_via {
        GpuIndicesVia::Patch => GpuIndicesWrite::Patch,
        GpuIndicesVia::Binding => GpuIndicesWrite::Binding,
    })
    .with_lease(lease_clock);
    let mut config = DriverConfig::new(&args.scheduler_name);
    let dashboard = match args.dashboard_addr {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
                format!("listening on --dashboard-addr {addr} for the dashboard; pick another port")
            })?;
            let local = listener.local_addr()?;
            // Predicted starts: the simulator resumed from the leader's engine.
            let predict: kestrel_live::live_dashboard::Predict =
                Arc::new(|scheduler, now, targets, deadline| {
                    crate::live_view::predict(scheduler, now, targets, deadline).ok()
                });
            let (feed, source, updates) = kestrel_live::live_dashboard::channel(&identity, predict);
            config.dashboard = Some(Arc::new(std::sync::Mutex::new(feed)));
            tracing::info!(addr = %local, "dashboard: http://{local}/ (the leader's state; a standby says it is one)");
            Some(tokio::spawn(kestrel_live::dashboard::serve(
                listener,
                Arc::new(source),
                updates,
                shutdown_rx.clone(),
            )))
        }
        None => None,
    };
    config.scheduler = SchedulerConfig {
        policy: args.policy,
        gang_backoff: args.gang_backoff,
        ..SchedulerConfig::default()
    };
    config.max_in_flight = args.max_in_flight.max(1);
    tracing::info!(
        scheduler_name = %args.scheduler_name,
        identity = %identity,
        leader_elect = args.leader_elect,
        metrics_addr = %args.metrics_addr,
        "kestrel serve starting"
    );
    // Drains go without the client's own retries: an eviction a PodDisruptionBudget
    // refuses (429) is reported and tried again next pass, not waited out in the client.
    let mut no_retry = cluster_config(args.kubeconfig.clone()).await?;
    no_retry.default_retry = false;
    let drain_client =
        kube::Client::try_from(no_retry).context("building the Kubernetes client")?;
    let maintenance = tokio::spawn(kestrel_live::maintenance::run(
        drain_client,
        writer.clone(),
        kestrel_live::maintenance::MaintenanceConfig {
            interval: std::time::Duration::from_millis(args.maintenance_interval.max(100)),
            gpu_operator_hook: args.gpu_operator_hook,
            hook_checkpoint_deadline_seconds: (args.gpu_operator_checkpoint_deadline / 1000) as i64,
        },
        leader_rx.clone(),
        shutdown_rx.clone(),
    ));
    let training = args.training_jobs.then(|| {
        tokio::spawn(kestrel_live::training::run(
            client.clone(),
            writer.clone(),
            TrainingConfig {
                scheduler_name: args.scheduler_name.clone(),
                mlflow_tracking_uri: args.mlflow_tracking_uri.clone().filter(|u| !u.is_empty()),
            },
            leader_rx.clone(),
            shutdown_rx.clone(),
        ))
    });
    let doctor = (args.doctor_interval > 0).then(|| {
        tokio::spawn(doctor_loop(
            client.clone(),
            std::time::Duration::from_millis(args.doctor_interval.max(1000)),
            metrics.clone(),
            shutdown_rx.clone(),
        ))
    });
    let driver = tokio::spawn(driver::run(
        client,
        writer,
        config,
        metrics,
        leader_rx,
        shutdown_rx,
    ));

    shutdown_signal().await;
    tracing::info!("shutting down: binding stops, the lease is released");
    shutdown_tx.send_replace(true);
    driver.await.ok();
    maintenance.await.ok();
    if let Some(doctor) = doctor {
        doctor.await.ok();
    }
    if let Some(training) = training {
        training.await.ok();
    }
    if let Some(elector) = elector {
        elector.await.ok();
    }
    server.await.ok();
    if let Some(dashboard) = dashboard {
        dashboard.await.ok();
    }
    drop(sole_leader);
    Ok(())
}

/// Runs the doctor's checks every `interval` on every replica (they only read) and
/// exports the findings. Events count when seen within the last two intervals (at least
/// 10 minutes), so a finding clears once its events stop.
async fn doctor_loop(
    client: kube::Client,
    interval: std::time::Duration,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let since_ms = (2 * interval.as_millis() as u64).max(10 * 60 * 1000);
    // Notes (the metrics API not served, an Event left out) are logged once each.
    let mut said = std::collections::BTreeSet::new();
    loop {
        let source = "the API server".to_string();
        match crate::doctor::live_snapshot(&client, source).await {
            Ok(snapshot) => {
                let options = kestrel_doctor::DoctorOptions {
                    now: Some(k8s_openapi::jiff::Timestamp::now()),
                    since_ms: Some(since_ms),
                    ..Default::default()
                };
                let diagnosis = kestrel_doctor::diagnose(&snapshot, &options);
                for note in &diagnosis.notes {
                    if said.insert(note.clone()) {
                        tracing::info!("doctor: {note}");
                    }
                }
                metrics.set_doctor_findings(&diagnosis.findings);
                metrics
                    .doctor_runs
                    .get_or_create(&vec![("result", "ok")])
                    .inc();
                tracing::debug!(findings = diagnosis.findings.len(), "doctor run");
            }
            Err(e) => {
                metrics
                    .doctor_runs
                    .get_or_create(&vec![("result", "error")])
                    .inc();
                tracing::warn!(error = %format!("{e:#}"), "doctor run failed; keeping the last findings");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

pub(crate) async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing the SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
