//! `kestrel explain` and `kestrel queue`: why pods are pending at a moment of a simulated
//! run, and when they should start; `kestrel bench predict` and `kestrel bench explain`.
//!
//! Both take the inputs of `kestrel sim` (the same argument struct) plus `--at`, run the
//! simulation to that moment and read the engine's state. Start times come from
//! `kestrel_sim::predict` (the simulator run forward with estimated runtimes).

use crate::SimArgs;
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use kestrel_core::{
    Demand, GpuRequest, GpuTopology, Millis, NodeSpec, PodId, PodSpec, Resources, Rng, Toleration,
    TolerationOperator, GPU_RESOURCE, RACK_LABEL,
};
use kestrel_sim::duration::parse_duration;
use kestrel_sim::explain_view::{self as view, clock};
use kestrel_sim::generator::{generate, GeneratorConfig};
use kestrel_sim::inputs::{load_cluster_file, load_workload_files, resolve_paths};
use kestrel_sim::predict::{self, estimated_durations, prediction_seeds, Predictions};
use kestrel_sim::{JobKind, SimCluster, SimConfig, SimJob, Simulation, Workload};
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

/// The simulator's inputs (those of `kestrel sim`) and the moment to look at.
#[derive(Args)]
pub struct StateArgs {
    #[command(flatten)]
    sim: SimArgs,
    /// The moment to look at: a clock time from the start (`10:00` is 10 h in) or a
    /// duration (`90m`); default: the last arrival of the input.
    #[arg(long, value_parser = parse_duration)]
    at: Option<u64>,
    /// Leave out the predicted start times (three forward runs of the simulator).
    #[arg(long)]
    no_predict: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    Pod,
    Gang,
    Queue,
    Node,
}

/// Flags of `kestrel sim` that do not apply here are hidden (and refused if given).
#[derive(Args)]
#[command(
    mut_arg("json", |a| a.help("Print the answer as JSON (stable field names)")),
    mut_arg("report", |a| a.hide(true)),
    mut_arg("until", |a| a.hide(true)),
    mut_arg("sample_every", |a| a.hide(true))
)]
pub struct ExplainArgs {
    /// What to explain: pod, gang, queue (a ClusterQueue) or node.
    kind: Kind,
    /// Its name: `namespace/name` (or `name` when only one namespace has it) for pods and
    /// gangs; the ClusterQueue's or node's name.
    name: String,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(Args)]
#[command(
    mut_arg("json", |a| a.help("Print the list as JSON (stable field names)")),
    mut_arg("report", |a| a.hide(true)),
    mut_arg("until", |a| a.hide(true)),
    mut_arg("sample_every", |a| a.hide(true))
)]
pub struct QueueArgs {
    /// Only pods of this ClusterQueue.
    #[arg(long = "queue", value_name = "CLUSTER_QUEUE")]
    cluster_queue: Option<String>,
    /// Only pods of this namespace.
    #[arg(long)]
    namespace: Option<String>,
    #[command(flatten)]
    state: StateArgs,
}

/// `kestrel bench`: the benchmarks of `bench.rs`, and those of start-time prediction and
/// explanations.
#[derive(Subcommand)]
pub enum BenchCommand {
    #[command(flatten)]
    Other(crate::bench::BenchCommand),
    /// Start-time prediction against the naive "work ahead / capacity" estimate: median
    /// errors over the pods pending at several moments (default: examples/falcon-ai).
    Predict(PredictBenchArgs),
    /// Time to explain a pod and list the queue on a large cluster (default 5,000 nodes x 8
    /// GPUs, 50,000 pending pods).
    Explain(ExplainBenchArgs),
}

#[derive(Args)]
#[command(
    mut_arg("json", |a| a.help("Print the figures as JSON")),
    mut_arg("report", |a| a.hide(true)),
    mut_arg("until", |a| a.hide(true)),
    mut_arg("sample_every", |a| a.hide(true))
)]
pub struct PredictBenchArgs {
    #[command(flatten)]
    sim: SimArgs,
    /// Moments to predict from (repeatable or comma-separated); default: every --every
    /// from --every up to the last arrival.
    #[arg(long, value_parser = parse_duration, value_delimiter = ',')]
    at: Vec<u64>,
    /// Spacing of the default moments.
    #[arg(long, default_value = "2h", value_parser = parse_duration)]
    every: u64,
}

#[derive(Args)]
pub struct ExplainBenchArgs {
    #[arg(long, default_value_t = 5000)]
    nodes: u32,
    /// Pending pods (on top of enough running pods to fill every GPU).
    #[arg(long, default_value_t = 50_000)]
    pending: u32,
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    /// Also time one forward run until the pod starts (the prediction's cost; slow at
    /// this size, as the simulator retries every pending pod after each completion).
    #[arg(long)]
    forward: bool,
    #[arg(long)]
    json: bool,
}

/// The inputs of a run, read as `kestrel sim` reads them.
pub(crate) struct Inputs {
    cluster: SimCluster,
    workload: Workload,
    config: SimConfig,
}

/// Reads the cluster and workload that `kestrel sim` would, and its run configuration.
pub(crate) fn load_inputs(args: &SimArgs) -> Result<Inputs> {
    let files = resolve_paths(&args.paths, args.cluster.clone())?;
    let Some(cluster_path) = files.cluster.clone() else {
        bail!(
            "no cluster given: pass a directory holding cluster.yaml, or --cluster FILE \
             (a SimCluster spec, `kubectl get nodes -o yaml` output, or an openb node CSV)"
        );
    };
    let cluster = load_cluster_file(&cluster_path)?;
    let mut workload = load_workload_files(&files.workload)?;
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
    };
    Ok(Inputs {
        cluster,
        workload,
        config,
    })
}

/// Flags of `kestrel sim` that mean nothing when looking at one moment.
fn refuse_run_only_flags(args: &SimArgs, command: &str) -> Result<()> {
    for (given, flag) in [
        (args.until.is_some(), "--until"),
        (args.report.is_some(), "--report"),
        (args.sample_every.is_some(), "--sample-every"),
    ] {
        if given {
            bail!(
                "{flag} applies to `kestrel sim`; `{command}` looks at one moment: use --at TIME"
            );
        }
    }
    Ok(())
}

/// A simulation standing at the moment asked for.
struct State<'a> {
    sim: Simulation<'a>,
    simulated_in: f64,
}

fn last_arrival(workload: &Workload) -> Millis {
    workload.jobs.iter().map(|j| j.arrival).max().unwrap_or(0)
}

fn state_at<'a>(inputs: &'a Inputs, at: Option<Millis>) -> Result<State<'a>> {
    let at = at.unwrap_or_else(|| last_arrival(&inputs.workload));
    let started = Instant::now();
    let mut sim = Simulation::new(&inputs.cluster, &inputs.workload, inputs.config.clone())?;
    if !sim.run_to(at)? {
        bail!(
            "--at {}: the run ends at {} (nothing happens after that); pick a time up to {}",
            clock(at),
            clock(sim.last_event_at()),
            clock(sim.last_event_at())
        );
    }
    Ok(State {
        sim,
        simulated_in: started.elapsed().as_secs_f64(),
    })
}

fn predict_for(
    sim: Simulation<'_>,
    targets: &[PodId],
    skip: bool,
) -> Result<(Option<Predictions>, f64)> {
    if skip || targets.is_empty() {
        return Ok((None, 0.0));
    }
    let seeds = prediction_seeds(sim.config().seed);
    let started = Instant::now();
    let predictions = predict::predict(sim, targets, &seeds)?;
    Ok((Some(predictions), started.elapsed().as_secs_f64()))
}

fn timing(simulated: f64, explained: f64, predicted: Option<f64>) -> String {
    let mut line = format!(
        "simulated to the moment in {simulated:.3} s; explained in {:.1} ms",
        explained * 1000.0
    );
    if let Some(p) = predicted {
        line += &format!("; predicted in {p:.3} s (3 forward runs with estimated runtimes)");
    }
    line
}

pub fn explain(args: ExplainArgs) -> Result<()> {
    refuse_run_only_flags(&args.state.sim, "kestrel explain")?;
    let inputs = load_inputs(&args.state.sim)?;
    let State { sim, simulated_in } = state_at(&inputs, args.state.at)?;
    let durations = estimated_durations(&inputs.workload, inputs.config.seed);
    let json = args.state.sim.json;
    let no_predict = args.state.no_predict;
    let started = Instant::now();
    let (text, value) = match args.kind {
        Kind::Pod => {
            let id = view::find_pod(&sim, &args.name)?;
            let mut v = view::pod_view(&sim, id, &durations);
            let explained = started.elapsed().as_secs_f64();
            let pending = v.phase == "Pending";
            let (predictions, predicted) = predict_for(sim, &[id], no_predict || !pending)?;
            if let Some(p) = &predictions {
                v.apply_predictions(p);
            }
            let footer = timing(simulated_in, explained, predictions.map(|_| predicted));
            (
                format!("{}{footer}\n", view::render_pod(&v)),
                serde_json::to_value(&v)?,
            )
        }
        Kind::Gang => {
            let (ns, name) = view::find_gang(&sim, &args.name)?;
            let mut v = view::gang_view(&sim, &ns, &name);
            let explained = started.elapsed().as_secs_f64();
            let targets = v.pending_ids.clone();
            let (predictions, predicted) = predict_for(sim, &targets, no_predict)?;
            if let Some(p) = &predictions {
                v.apply_predictions(p);
            }
            let footer = timing(simulated_in, explained, predictions.map(|_| predicted));
            (
                format!("{}{footer}\n", view::render_gang(&v)),
                serde_json::to_value(&v)?,
            )
        }
        Kind::Queue => {
            let cq = view::find_queue(&sim, &args.name)?;
            let mut v = view::queue_view(&sim, cq);
            let explained = started.elapsed().as_secs_f64();
            let targets: Vec<PodId> = v.pending_list.iter().map(|e| e.id).collect();
            let (predictions, predicted) = predict_for(sim, &targets, no_predict)?;
            if let Some(p) = &predictions {
                view::apply_list_predictions(&mut v.pending_list, p);
            }
            let footer = timing(simulated_in, explained, predictions.map(|_| predicted));
            (
                format!("{}{footer}\n", view::render_queue(&v)),
                serde_json::to_value(&v)?,
            )
        }
        Kind::Node => {
            let id = view::find_node(&sim, &args.name)?;
            let v = view::node_view(&sim, id, &durations);
            let explained = started.elapsed().as_secs_f64();
            let footer = timing(simulated_in, explained, None);
            (
                format!("{}{footer}\n", view::render_node(&v)),
                serde_json::to_value(&v)?,
            )
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print!("{text}");
    }
    Ok(())
}

pub fn queue(args: QueueArgs) -> Result<()> {
    refuse_run_only_flags(&args.state.sim, "kestrel queue")?;
    let inputs = load_inputs(&args.state.sim)?;
    let State { sim, simulated_in } = state_at(&inputs, args.state.at)?;
    let started = Instant::now();
    let cq = match &args.cluster_queue {
        Some(name) => Some(view::find_queue(&sim, name)?),
        None => None,
    };
    if let Some(ns) = &args.namespace {
        let known = sim.scheduler().pods().any(|(_, r)| r.spec.namespace == *ns)
            || inputs.workload.jobs.iter().any(|j| j.namespace == *ns);
        if !known {
            bail!("namespace {ns:?} has no pods in this input");
        }
    }
    let mut list = view::pending_list(&sim, cq, args.namespace.as_deref());
    let pending_total = sim.scheduler().pending_count();
    let now = sim.now();
    let explained = started.elapsed().as_secs_f64();
    let targets: Vec<PodId> = list.iter().map(|e| e.id).collect();
    let (predictions, predicted) = predict_for(sim, &targets, args.state.no_predict)?;
    if let Some(p) = &predictions {
        view::apply_list_predictions(&mut list, p);
    }
    let v = view::QueueListView {
        at_s: now as f64 / 1000.0,
        at: clock(now),
        cluster_queue: args.cluster_queue.clone(),
        namespace: args.namespace.clone(),
        pending_total,
        pending: list,
    };
    if args.state.sim.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", view::render_queue_list(&v));
        println!(
            "{}",
            timing(simulated_in, explained, predictions.map(|_| predicted))
        );
    }
    Ok(())
}

pub fn run_bench(command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::Other(command) => crate::bench::run(command),
        BenchCommand::Predict(args) => bench_predict(args),
        BenchCommand::Explain(args) => bench_explain(args),
    }
}

fn bench_predict(mut args: PredictBenchArgs) -> Result<()> {
    refuse_run_only_flags(&args.sim, "kestrel bench predict")?;
    if args.sim.paths.is_empty() && args.sim.cluster.is_none() && args.sim.synthetic.is_none() {
        args.sim.paths.push(PathBuf::from("examples/falcon-ai"));
    }
    let inputs = load_inputs(&args.sim)?;
    let times: Vec<Millis> = if args.at.is_empty() {
        let every = args.every.max(60_000);
        (1..)
            .map(|k| k * every)
            .take_while(|t| *t <= last_arrival(&inputs.workload))
            .collect()
    } else {
        args.at.clone()
    };
    if times.is_empty() {
        bail!("no moments to predict from: give --at TIME (the last arrival is at 0)");
    }
    let started = Instant::now();
    let eval = predict::evaluate(
        &inputs.cluster,
        &inputs.workload,
        &inputs.config,
        &times,
        inputs.config.seed,
    )
    .context("evaluating the predictor")?;
    let took = started.elapsed().as_secs_f64();
    // The same with exact runtimes: what arrivals unknown at each moment cost alone.
    let exact = predict::evaluate_within(
        &inputs.cluster,
        &inputs.workload,
        &inputs.config,
        &times,
        inputs.config.seed,
        0.0,
    )?;
    if args.sim.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"estimated": eval, "exact_runtimes": exact}))?
        );
        return Ok(());
    }
    let minutes = |s: f64| s / 60.0;
    println!(
        "start-time prediction on {} (seeds {}..{}, runtimes estimated to +/-{:.0}%)",
        inputs.config.scenario,
        eval.seed,
        eval.seed + predict::PREDICTION_RUNS - 1,
        predict::ESTIMATE_ERROR * 100.0
    );
    println!(
        "  {:>6}  {:>7}  {:>22}  {:>18}",
        "at", "pending", "predictor median error", "naive median error"
    );
    for (t, pending, p, n) in &eval.per_time {
        println!(
            "  {:>6}  {:>7}  {:>18.1} min  {:>14.1} min",
            clock(*t),
            pending,
            minutes(*p),
            minutes(*n)
        );
    }
    println!(
        "  pods pending at these moments that started later: {} ({} predicted to start)",
        eval.pods, eval.predicted
    );
    println!(
        "  median remaining wait (actual start - moment): {:.1} min",
        minutes(eval.median_wait_s)
    );
    println!(
        "  predictor: median |error| {:.1} min, median relative error {:.1}% of the wait, actual start inside the range for {:.0}%",
        minutes(eval.predictor_median_error_s),
        eval.predictor_median_relative_error * 100.0,
        eval.within_range * 100.0
    );
    println!(
        "  naive (work ahead / capacity): median |error| {:.1} min, median relative error {:.1}% of the wait",
        minutes(eval.naive_median_error_s),
        eval.naive_median_relative_error * 100.0
    );
    println!(
        "  one forward run alone (one estimate per job): median |error| {:.1} min, median relative error {:.1}%",
        minutes(eval.single_run_median_error_s),
        eval.single_run_median_relative_error * 100.0
    );
    println!(
        "  with exact runtimes (only later arrivals unknown): median |error| {:.1} min, median relative error {:.1}%",
        minutes(exact.predictor_median_error_s),
        exact.predictor_median_relative_error * 100.0
    );
    println!("  evaluated in {took:.3} s");
    Ok(())
}

/// A DGX-like node for the explain benchmark: 224 cpu, 2 TiB, 8 GPUs, tainted for GPUs.
fn explain_bench_node(i: u32) -> NodeSpec {
    let mut node = NodeSpec::new(format!("node-{i:05}"), Resources::new(224_000, 2 << 40));
    node.labels
        .insert(RACK_LABEL.to_string(), format!("rack-{}", i / 32));
    (node.gpus, node.nics) = GpuTopology::DgxH100.devices("H100", 81_559, 8);
    node.taints.push(kestrel_core::Taint {
        key: GPU_RESOURCE.to_string(),
        value: "true".to_string(),
        effect: kestrel_core::TaintEffect::NoSchedule,
    });
    node
}

fn bench_job(name: String, namespace: &str, gpus: u32, minutes: u64, priority: i32) -> SimJob {
    let mut template = PodSpec::new(
        namespace,
        name.clone(),
        Demand {
            resources: Resources::new(gpus as i64 * 8_000, (gpus as i64 * 64) << 30),
            gpu: GpuRequest::Whole(gpus),
        },
    );
    template.priority = priority;
    template.constraints.tolerations.push(Toleration {
        key: GPU_RESOURCE.to_string(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: None,
    });
    SimJob {
        kind: JobKind::Pod,
        source_kind: "Pod".to_string(),
        namespace: namespace.to_string(),
        name,
        arrival: 0,
        duration: Some(minutes * 60_000),
        parallelism: 1,
        completions: 1,
        template,
        gpu_utilization: 1.0,
    }
}

fn bench_explain(args: ExplainBenchArgs) -> Result<()> {
    let cluster = SimCluster {
        nodes: (0..args.nodes).map(explain_bench_node).collect(),
        events: Vec::new(),
    };
    let mut rng = Rng::new(42);
    let mut jobs = Vec::new();
    // Every GPU taken by a running 1-GPU pod (1-8 h), then the pending ones: 1, 2, 4 or 8
    // GPUs, four namespaces, three priorities, none preempting.
    for i in 0..args.nodes * 8 {
        let minutes = 60 + rng.below(420);
        jobs.push(bench_job(
            format!("run-{i}"),
            "serving",
            1,
            minutes,
            100_000,
        ));
    }
    const NAMESPACES: [&str; 4] = ["research", "vision", "speech", "platform"];
    for i in 0..args.pending {
        let gpus = [1, 2, 4, 8][rng.below(4) as usize];
        let namespace = NAMESPACES[rng.below(4) as usize];
        let priority = [0, 100, 1000][rng.below(3) as usize];
        let minutes = 10 + rng.below(240);
        let mut job = bench_job(format!("wait-{i}"), namespace, gpus, minutes, priority);
        // preemptionPolicy: Never, so the queue stays a queue (no evictions).
        job.template.preemption.never_preempt = true;
        jobs.push(job);
    }
    let workload = Workload {
        jobs,
        ..Default::default()
    };
    let started = Instant::now();
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default())?;
    sim.run_to(0)?;
    let setup = started.elapsed().as_secs_f64();
    let pending = sim.scheduler().pending_count();
    let durations = estimated_durations(&workload, 42);
    // A pod in the middle of the queue.
    let name = format!("wait-{}", args.pending / 2);
    let (mut best_pod, mut best_list) = (f64::MAX, f64::MAX);
    let mut sample = None;
    let mut parts = (0.0, 0.0);
    for _ in 0..args.repeat.max(1) {
        let t = Instant::now();
        let id = view::find_pod(&sim, &name)?;
        let lookup = t.elapsed().as_secs_f64();
        let v = view::pod_view(&sim, id, &durations);
        let viewed = t.elapsed().as_secs_f64();
        let text = view::render_pod(&v);
        let json = serde_json::to_string(&v)?;
        best_pod = best_pod.min(t.elapsed().as_secs_f64());
        parts = (lookup, viewed - lookup);
        sample = Some((text, json.len()));
        let t = Instant::now();
        let list = view::pending_list(&sim, None, None);
        let _ = serde_json::to_string(&list)?;
        best_list = best_list.min(t.elapsed().as_secs_f64());
    }
    let id = view::find_pod(&sim, &name)?;
    let (mut replay, mut forward_run, mut bound) = (None, None, None);
    if args.forward {
        let t = Instant::now();
        let mut forward = Simulation::new(&cluster, &workload, SimConfig::default())?;
        forward.run_to(0)?;
        replay = Some(t.elapsed().as_secs_f64());
        let t = Instant::now();
        bound = predict::run_forward(&mut forward, durations, &[id])?
            .get(&id)
            .copied();
        forward_run = Some(t.elapsed().as_secs_f64());
    }
    let (text, json_len) = sample.unwrap_or_default();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "nodes": args.nodes,
                "pending": pending,
                "setup_seconds": setup,
                "explain_pod_seconds": best_pod,
                "lookup_seconds": parts.0,
                "view_seconds": parts.1,
                "explain_pod_json_bytes": json_len,
                "pending_list_seconds": best_list,
                "replay_seconds": replay,
                "one_forward_run_seconds": forward_run,
                "predicted_start_ms": bound,
            }))?
        );
    } else {
        println!(
            "explain: {} nodes x 8 GPUs, {} pods pending (every GPU taken)",
            args.nodes, pending
        );
        println!("  simulated to the moment:          {setup:.3} s");
        println!(
            "  explain one pod (lookup, view, text and JSON): {:.1} ms (lookup {:.1} ms, view {:.1} ms)",
            best_pod * 1000.0,
            parts.0 * 1000.0,
            parts.1 * 1000.0
        );
        println!(
            "  the whole pending list (kestrel queue, without predictions): {:.1} ms",
            best_list * 1000.0
        );
        if let (Some(replay), Some(forward_run)) = (replay, forward_run) {
            println!(
                "  prediction: replay to the moment {replay:.3} s, one forward run until the pod starts {forward_run:.3} s"
            );
        }
        println!("{text}");
    }
    Ok(())
}
