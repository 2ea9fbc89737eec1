//! `kestrel`: the one binary. `sim` runs the embedded simulator; `bench` measures.

mod agent;
mod bench;
mod bench_explain;
mod bench_live;
mod bench_mig;
mod bench_queues;
mod dashboard;
mod doctor;
mod drain;
mod explain;
mod live_view;
mod runtime;
mod seeds;
mod serve;
mod upgrade;
mod upgrade_run;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use kestrel_core::Policy;
use kestrel_objects::duration::parse_duration;
use kestrel_sim::generator::{generate, GeneratorConfig};
use kestrel_sim::inputs::{load_cluster_file, load_workload_files_with, resolve_paths};
use kestrel_sim::manifests::LoadOptions;
use kestrel_sim::{report, simulate, simulate_with_topology_blind, summary, SimConfig};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "kestrel",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("KESTREL_GIT_COMMIT"), ")"),
    about = "Kestrel: a GPU scheduler for Kubernetes, with an embedded simulator"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate a cluster and a workload with Kestrel's scheduling engine.
    Sim(SimCommand),
    /// Benchmarks: the openb packing experiment, placement throughput.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Run the live scheduler against a Kubernetes cluster (see docs/tasks/run-on-a-cluster.md).
    Serve(serve::ServeArgs),
    /// Print the install manifests (deploy/kestrel.yaml), or the Helm chart's template.
    Manifests(serve::ManifestsArgs),
    /// Print Kestrel's CustomResourceDefinitions (PodGroup, Topology, queues) as YAML.
    Crds,
    /// Diagnose a cluster's Nodes, Pods and Events (a snapshot, or --live): GPUs, taints,
    /// node conditions, stuck pods, image pulls, crash loops, CNI and volume failures.
    /// Exit code 2 when something needs attention.
    Doctor(doctor::DoctorArgs),
    /// Why a pod, gang, ClusterQueue or node looks as it does at a moment of a simulated
    /// run (same inputs as `sim`, plus --at), and when pending pods should start.
    Explain(explain::ExplainArgs),
    /// The pending queue at a moment of a simulated run: position, priority, wait, reason
    /// and predicted start of each pending pod.
    Queue(explain::QueueArgs),
    /// The node agent (a DaemonSet on GPU nodes): GPU discovery and health, a kubelet
    /// device plugin that honours the scheduler's GPU choice, GPU labels and topology on
    /// the Node, DCGM-style GPU metrics.
    Agent(agent::AgentArgs),
    /// Drain a node for maintenance: cordon, ask its workloads to checkpoint, evict them
    /// (PodDisruptionBudgets apply) through a NodeMaintenance that `kestrel serve` carries
    /// out; `--end` uncordons it.
    Drain(drain::DrainArgs),
    /// Rolling upgrades of a simulated cluster's nodes: `plan` prints the batches,
    /// `simulate` compares plain and checkpoint-aware drains on a workload.
    #[command(subcommand)]
    Upgrade(upgrade::UpgradeCommand),
}

#[derive(Args)]
struct SimCommand {
    #[command(flatten)]
    sim: SimArgs,
    /// After the run, serve the dashboard over it (a time slider over 60 moments) at this
    /// address until Ctrl-C: a port (on loopback) or HOST:PORT. See
    /// docs/tasks/dashboard.md.
    #[arg(long, value_name = "ADDR", value_parser = dashboard::parse_addr)]
    serve: Option<std::net::SocketAddr>,
}

#[derive(Args)]
struct SimArgs {
    /// Scenario directories (cluster.yaml + workload files) and/or workload files
    /// (Kubernetes manifests .yaml, openb pod lists .csv).
    paths: Vec<PathBuf>,
    /// Cluster file: a SimCluster spec, `kubectl get nodes -o yaml` output, or an openb
    /// node CSV. Overrides a directory's cluster.yaml.
    #[arg(long)]
    cluster: Option<PathBuf>,
    /// Add this many generated jobs (training gangs, batch, notebooks, inference, services).
    #[arg(long, value_name = "JOBS")]
    synthetic: Option<usize>,
    /// Span over which generated jobs arrive.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    span: u64,
    /// Scoring policy: kestrel, binpack, spread, bestfit, random, fgd.
    #[arg(long, default_value = "kestrel")]
    policy: Policy,
    /// Seed for the generator and the random policy; the same seed gives the same run.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Stop at this simulated time (e.g. 12h); default: when nothing is left to happen.
    #[arg(long, value_parser = parse_duration)]
    until: Option<u64>,
    /// Time between samples of the time series (default: about 500 samples per run).
    #[arg(long, value_parser = parse_duration)]
    sample_every: Option<u64>,
    /// Print the full report as JSON on stdout instead of the summary table.
    #[arg(long)]
    json: bool,
    /// Write a self-contained HTML report (charts, tables) to this file.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// How preemption victims are ranked: checkpoint-aware (least work lost since the
    /// last checkpoint) or lowest-priority (newest first, checkpoint-blind).
    #[arg(long, default_value = "checkpoint-aware")]
    victim_order: kestrel_core::VictimOrder,
    /// Do not ask victims that offer it (kestrel.dev/checkpoint-grace) to checkpoint
    /// before eviction.
    #[arg(long)]
    no_checkpoint_requests: bool,
    /// Delay from a decision to its effect (API and controller latency), e.g. 100ms.
    #[arg(long, default_value = "0ms", value_parser = parse_duration)]
    control_latency: u64,
    /// Time a victim needs to write a checkpoint when asked (capped by its grace).
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    checkpoint_duration: u64,
    /// Hold nodes for the highest-priority workload that does not fit, at most this long
    /// (so small work cannot starve a big gang); work whose runtime estimate ends before
    /// the reserved start may backfill. Default: no reservations.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    head_reservation: u64,
    /// Fair share counts borrowing history: each queue's borrowed share decays with this
    /// half-life (e.g. 1h) and adds to what it borrows now. Default: only borrowing now.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    fair_share_half_life: u64,
    /// How long a gang that waited past its scheduleTimeoutSeconds waits before it is
    /// tried again (its pods stay pending meanwhile).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    gang_backoff: u64,
    /// How long pods of Pods and Jobs without the kestrel.dev/sim-duration annotation run
    /// (default: a Pod runs to the end, a Job is refused). Deployments' and
    /// StatefulSets' pods always run to the end.
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    default_duration: Option<u64>,
    /// Run the workload a second time with every gang's topology request dropped and
    /// report how many gangs landed in one rack / one NVLink domain both ways.
    #[arg(long)]
    compare_topology_blind: bool,
}

/// Commands that print and end die quietly when their reader goes away (`kestrel queue |
/// head`), as other command-line tools do, instead of panicking on the failed write. The
/// long-running server keeps ignoring SIGPIPE: a peer closing a socket must not end it.
fn quiet_on_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: sets a signal's disposition to its default before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve(_) | Command::Agent(_)) {
        quiet_on_closed_pipe();
    }
    let result = match cli.command {
        Command::Sim(args) => run_sim(args.sim).and_then(|inputs| match args.serve {
            Some(addr) => dashboard::serve_sim(inputs, addr),
            None => Ok(()),
        }),
        Command::Bench(command) => bench::run(command),
        Command::Serve(args) => serve::serve(args),
        Command::Manifests(args) => serve::manifests(args),
        Command::Crds => serve::crds(),
        Command::Doctor(args) => doctor::run(args),
        Command::Explain(args) => explain::explain(args),
        Command::Queue(args) => explain::queue(args),
        Command::Agent(args) => agent::run(args),
        Command::Upgrade(command) => upgrade::run(command),
        Command::Drain(args) => drain::run(args),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// The inputs of a run, read as `kestrel sim` reads them.
pub(crate) struct Inputs {
    cluster: kestrel_sim::SimCluster,
    workload: kestrel_sim::Workload,
    config: SimConfig,
}

impl Inputs {
    fn last_arrival(&self) -> kestrel_core::Millis {
        self.workload
            .jobs
            .iter()
            .map(|j| j.arrival)
            .max()
            .unwrap_or(0)
    }
}

/// Reads the cluster and workload of `kestrel sim`'s arguments, and its run configuration.
pub(crate) fn load_inputs(args: &SimArgs) -> Result<Inputs> {
    let files = resolve_paths(&args.paths, args.cluster.clone())?;
    let Some(cluster_path) = files.cluster.clone() else {
        bail!(
            "no cluster given: pass a directory holding cluster.yaml, or --cluster FILE \
             (a SimCluster spec, `kubectl get nodes -o yaml` output, or an openb node CSV)"
        );
    };
    let cluster = load_cluster_file(&cluster_path)?;
    let options = LoadOptions {
        default_duration: args.default_duration,
    };
    let mut workload = load_workload_files_with(&files.workload, &options)?;
    for warning in &workload.queues.warnings {
        eprintln!("warning: {warning}");
    }
    if let Some(jobs) = args.synthetic {
        let generated = generate(&GeneratorConfig {
            jobs,
            span: args.span,
            seed: args.seed,
        });
        workload.jobs.extend(generated.jobs);
        workload.gangs.extend(generated.gangs);
    }
    if workload.jobs.is_empty() {
        bail!(
            "no workload: add workload files (Kubernetes manifests or an openb pod CSV) \
             or --synthetic JOBS"
        );
    }
    let scenario = args
        .paths
        .first()
        .unwrap_or(&cluster_path)
        .display()
        .to_string();
    let config = SimConfig {
        policy: args.policy,
        seed: args.seed,
        until: args.until,
        sample_every: args.sample_every,
        scenario,
        victim_order: args.victim_order,
        checkpoint_requests: !args.no_checkpoint_requests,
        control_latency: args.control_latency,
        checkpoint_duration: args.checkpoint_duration,
        head_reservation: args.head_reservation,
        fair_share_half_life: args.fair_share_half_life,
        gang_backoff: args.gang_backoff,
    };
    Ok(Inputs {
        cluster,
        workload,
        config,
    })
}

/// Runs and reports; returns the inputs for the dashboard.
fn run_sim(args: SimArgs) -> Result<Inputs> {
    let inputs = load_inputs(&args)?;
    let Inputs {
        cluster,
        workload,
        config,
    } = &inputs;
    let config = config.clone();
    let started = Instant::now();
    let show_progress = std::io::stderr().is_terminal();
    let mut progress = |done: usize, total: usize| {
        if show_progress && started.elapsed().as_millis() > 500 {
            let pct = done * 100 / total.max(1);
            let bar = "#".repeat(pct / 4) + &".".repeat(25 - pct / 4);
            eprint!("\r[{bar}] {pct:3}%  {done}/{total} events");
            let _ = std::io::stderr().flush();
        }
    };
    let report = if args.compare_topology_blind {
        simulate_with_topology_blind(cluster, workload, config, &mut progress)?
    } else {
        simulate(cluster, workload, config, &mut progress)?
    };
    let elapsed = started.elapsed();
    if show_progress && elapsed.as_millis() > 500 {
        eprintln!();
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", summary::render_summary(&report));
        println!(
            "simulated in {:.3} s ({} cycles, {} bindings)",
            elapsed.as_secs_f64(),
            report.cycles,
            report.bindings
        );
    }
    if let Some(path) = &args.report {
        std::fs::write(path, report::render_html(&report))
            .with_context(|| format!("writing the report to {}", path.display()))?;
        eprintln!("report written to {}", path.display());
    }
    Ok(inputs)
}
