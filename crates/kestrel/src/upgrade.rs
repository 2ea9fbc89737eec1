//! `kestrel upgrade plan|simulate|run`: rolling upgrades of nodes in batches: planned and
//! simulated on a cluster file (the training work plain and checkpoint-aware drains
//! lose), and run on a live cluster, each batch drained through NodeMaintenances and
//! handed to what upgrades it.

use crate::{load_inputs, SimArgs};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use kestrel_core::Millis;
use kestrel_objects::duration::{format_duration, parse_duration};
use kestrel_sim::inputs::{load_cluster_file, resolve_paths};
use kestrel_sim::upgrade::{
    drain::simulate_upgrade, nodes_at, parse_targets, plan, preflight, CompatibilityList,
    PlanOptions, Strategy, StrategyReport, UpgradePlan,
};
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum UpgradeCommand {
    /// Print the batches a rolling upgrade of the cluster's nodes takes.
    Plan(PlanCommandArgs),
    /// Simulate the upgrade on a workload with each drain strategy (same seed) and
    /// compare the training work lost and the time taken.
    Simulate(SimulateArgs),
    /// Upgrade a live cluster's nodes: the same plan from its Nodes, each batch drained
    /// (NodeMaintenance, carried out by `kestrel serve`), handed to what upgrades it (a
    /// command, or a label to set), uncordoned once a label or condition says it is done.
    Run(RunArgs),
}

#[derive(Args)]
pub struct RunArgs {
    /// Kubeconfig file; default: in-cluster config, else $KUBECONFIG or ~/.kube/config.
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) plan: PlanArgs,
    /// Run this shell command for each drained node (its name in $KESTREL_NODE); it must
    /// exit 0.
    #[arg(
        long,
        conflicts_with = "set_label",
        required_unless_present = "set_label"
    )]
    pub(crate) command: Option<String>,
    /// Set this label (KEY=VALUE) on each drained node, for what upgrades it to act on.
    #[arg(long, value_name = "KEY=VALUE")]
    pub(crate) set_label: Option<String>,
    /// A node is done when it carries this label (KEY=VALUE); nodes that already carry it
    /// are not upgraded again (a rerun resumes).
    #[arg(
        long,
        value_name = "KEY=VALUE",
        required_unless_present = "done_condition"
    )]
    pub(crate) done_label: Option<String>,
    /// A node is done when its condition of this type is True.
    #[arg(long, value_name = "TYPE", conflicts_with = "done_label")]
    pub(crate) done_condition: Option<String>,
    /// Longest wait of each drain for the checkpoints it asks for.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    pub(crate) checkpoint_deadline: Millis,
    /// Longest wait for a node's drain, and then for its upgrade, before giving up (the
    /// nodes stay cordoned under their NodeMaintenances).
    #[arg(long, default_value = "2h", value_parser = parse_duration)]
    pub(crate) node_timeout: Millis,
}

/// What the plan is made of (shared by `plan` and `simulate`).
#[derive(Args)]
pub struct PlanArgs {
    /// Most nodes offline at once.
    #[arg(long)]
    max_nodes: u32,
    /// Most GPUs offline at once (on the nodes offline).
    #[arg(long)]
    max_gpus: u32,
    /// Pools to upgrade, in order (comma-separated); default: all. Control-plane pools
    /// always go first.
    #[arg(long, value_delimiter = ',')]
    pools: Vec<String>,
    /// Group nodes into pools by this label's value; default: by node name less its
    /// trailing index (gpu-07 is in pool gpu).
    #[arg(long)]
    pool_label: Option<String>,
    /// How long one node's upgrade takes once it is empty.
    #[arg(long, default_value = "45m", value_parser = parse_duration)]
    node_duration: Millis,
    /// When the upgrade starts (a clock time from the start of the run, e.g. 12:00, or
    /// a duration); the plan covers the nodes there are then.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub(crate) start: Millis,
    /// The versions you have validated: a YAML mapping of lists under kubernetes,
    /// containerd, gpuOperator, driver.
    #[arg(long, value_name = "FILE")]
    compatibility: Option<PathBuf>,
    /// A target version, COMPONENT=VERSION (kubernetes, containerd, gpuOperator,
    /// driver); refused unless the compatibility list has it. Repeat for each.
    #[arg(long = "target", value_name = "COMPONENT=VERSION")]
    targets: Vec<String>,
}

#[derive(Args)]
pub struct PlanCommandArgs {
    /// A scenario directory or cluster file (workload files are not needed).
    paths: Vec<PathBuf>,
    /// Cluster file: a SimCluster spec or `kubectl get nodes -o yaml` output.
    #[arg(long)]
    cluster: Option<PathBuf>,
    #[command(flatten)]
    plan: PlanArgs,
}

#[derive(Args)]
#[command(
    mut_arg("json", |a| a.help("Print the plan and each strategy's figures as JSON")),
    mut_arg("report", |a| a.hide(true)),
    mut_arg("until", |a| a.hide(true)),
    mut_arg("sample_every", |a| a.hide(true)),
    mut_arg("compare_topology_blind", |a| a.hide(true))
)]
pub struct SimulateArgs {
    #[command(flatten)]
    sim: SimArgs,
    #[command(flatten)]
    plan: PlanArgs,
    /// Run only this drain strategy: plain or checkpoint-aware; default: both.
    #[arg(long)]
    strategy: Option<Strategy>,
    /// Longest wait of a checkpoint-aware drain for a workload's next periodic checkpoint.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    checkpoint_deadline: Millis,
}

pub fn run(command: UpgradeCommand) -> Result<()> {
    match command {
        UpgradeCommand::Plan(args) => run_plan(args),
        UpgradeCommand::Simulate(args) => run_simulate(args),
        UpgradeCommand::Run(args) => crate::upgrade_run::run(args),
    }
}

/// The plan's options after the version pre-flight, which runs before anything else.
pub(crate) fn checked_options(args: &PlanArgs) -> Result<PlanOptions> {
    let targets = parse_targets(&args.targets)?;
    let list = match &args.compatibility {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the compatibility list {}", path.display()))?;
            Some((
                path.display().to_string(),
                CompatibilityList::parse(path, &text)?,
            ))
        }
        None => None,
    };
    preflight(&targets, list.as_ref().map(|(f, l)| (f.as_str(), l)))?;
    Ok(PlanOptions {
        max_nodes: args.max_nodes,
        max_gpus: args.max_gpus,
        pools: args.pools.clone(),
        pool_label: args.pool_label.clone(),
        node_duration: args.node_duration,
        ..Default::default()
    })
}

fn run_plan(args: PlanCommandArgs) -> Result<()> {
    let options = checked_options(&args.plan)?;
    let files = resolve_paths(&args.paths, args.cluster.clone())?;
    let Some(cluster_path) = files.cluster else {
        bail!("no cluster given: pass a directory holding cluster.yaml, or --cluster FILE");
    };
    let cluster = load_cluster_file(&cluster_path)?;
    let plan = plan(&nodes_at(&cluster, args.plan.start), &options)?;
    print!("{}", plan.render());
    Ok(())
}

fn run_simulate(args: SimulateArgs) -> Result<()> {
    for (given, flag) in [
        (args.sim.until.is_some(), "--until"),
        (args.sim.report.is_some(), "--report"),
        (args.sim.sample_every.is_some(), "--sample-every"),
        (args.sim.compare_topology_blind, "--compare-topology-blind"),
    ] {
        if given {
            bail!("{flag} applies to `kestrel sim`, not to `kestrel upgrade simulate`");
        }
    }
    let mut options = checked_options(&args.plan)?;
    options.checkpoint_deadline = args.checkpoint_deadline;
    options.checkpoint_duration = args.sim.checkpoint_duration;
    options.ask_for_checkpoints = !args.sim.no_checkpoint_requests;
    let inputs = load_inputs(&args.sim)?;
    let strategies = match args.strategy {
        Some(s) => vec![s],
        None => Strategy::ALL.to_vec(),
    };
    let started = std::time::Instant::now();
    let (plan, reports) = simulate_upgrade(
        &inputs.cluster,
        &inputs.workload,
        &inputs.config,
        &options,
        args.plan.start,
        &strategies,
    )?;
    let elapsed = started.elapsed();
    if args.sim.json {
        let json = serde_json::json!({
            "batches": plan.batches,
            "max_nodes": options.max_nodes,
            "max_gpus": options.max_gpus,
            "strategies": reports,
        });
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print!("{}", render_comparison(&plan, &reports));
        println!("simulated in {:.3} s", elapsed.as_secs_f64());
    }
    Ok(())
}

/// The plan's shape, one row per strategy, and how checkpoint-aware compares.
fn render_comparison(plan: &UpgradePlan, reports: &[StrategyReport]) -> String {
    let nodes: usize = plan.batches.iter().map(|b| b.nodes.len()).sum();
    let mut out = format!(
        "{} batches, {} nodes, at most {} nodes / {} GPUs offline; {} per node\n\n",
        plan.batches.len(),
        nodes,
        plan.options.max_nodes,
        plan.options.max_gpus,
        format_duration(plan.options.node_duration)
    );
    out.push_str(&format!(
        "{:<17} {:>11} {:>9} {:>9} {:>8} {:>7} {:>6} {:>9} {:>8} {:>9} {:>9}\n",
        "strategy",
        "lost GPU-h",
        "duration",
        "nodes off",
        "GPUs off",
        "evicted",
        "gangs",
        "requests",
        "at ckpt",
        "deadline",
        "services"
    ));
    for r in reports {
        out.push_str(&format!(
            "{:<17} {:>11.2} {:>9} {:>9} {:>8} {:>7} {:>6} {:>9} {:>8} {:>9} {:>9}\n",
            r.strategy.map_or("", |s| s.name()),
            r.lost_gpu_hours,
            format_duration(r.duration()),
            r.max_nodes_offline,
            r.max_gpus_offline,
            r.evicted_pods,
            r.evicted_gangs,
            r.checkpoint_requests,
            r.evicted_at_checkpoint,
            r.past_deadline,
            r.service_restarts
        ));
    }
    if let Some(gone) = reports.first().filter(|r| !r.nodes_gone.is_empty()) {
        out.push_str(&format!(
            "nodes gone before their batch: {}\n",
            gone.nodes_gone.join(", ")
        ));
    }
    let find = |s| reports.iter().find(|r| r.strategy == Some(s));
    if let (Some(plain), Some(aware)) = (find(Strategy::Plain), find(Strategy::CheckpointAware)) {
        let less = if plain.lost_gpu_hours > 0.0 {
            format!(
                "{:.1}% less work lost",
                100.0 * (1.0 - aware.lost_gpu_hours / plain.lost_gpu_hours)
            )
        } else {
            "no work lost by plain either".to_string()
        };
        let (a, p) = (aware.duration(), plain.duration());
        let time = if a <= p {
            format!("{} shorter", format_duration(p - a))
        } else {
            format!("{} longer", format_duration(a - p))
        };
        out.push_str(&format!("\ncheckpoint-aware vs plain: {less}, {time}\n"));
    }
    out
}
