//! `kestrel bench explain`: time to explain a pod, a gang, a ClusterQueue and a node on a
//! large synthetic cluster; `kestrel bench predict`: start-time prediction against the
//! naive estimate on a simulated day.

use crate::explain::{refuse_run_only_flags, Explained, Kind};
use crate::{load_inputs, SimArgs};
use anyhow::{bail, Context, Result};
use clap::Args;
use kestrel_core::{
    ClusterQueueSpec, Demand, FlavorQuotas, GangMembership, GangSpec, GpuRequest, GpuTopology,
    LocalQueueSpec, Millis, NodeSpec, PodSpec, ResourceGroup, ResourceQuota, Resources, Rng, Taint,
    TaintEffect, Toleration, TolerationOperator, GPU_RESOURCE, RACK_LABEL,
};
use kestrel_objects::duration::parse_duration;
use kestrel_sim::predict;
use kestrel_sim::{JobKind, PodSet, SimCluster, SimConfig, Simulation, Workload};
use kestrel_view::explain_view as view;
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Args)]
#[command(
    mut_arg("json", |a| a.help("Print the figures as JSON")),
    mut_arg("report", |a| a.hide(true)),
    mut_arg("until", |a| a.hide(true)),
    mut_arg("sample_every", |a| a.hide(true))
)]
pub struct PredictArgs {
    #[command(flatten)]
    sim: SimArgs,
    /// Moments to predict from (repeatable or comma-separated); default: at each pod's
    /// submission, and every --every from --every up to the last arrival.
    #[arg(long, value_parser = parse_duration, value_delimiter = ',')]
    at: Vec<u64>,
    /// Spacing of the default moments.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    every: u64,
    /// Seeds of the runtime estimates (one set of estimates each): a range `42-61`, a
    /// list `42,43` or one seed.
    #[arg(long, default_value = "42-61", value_parser = crate::seeds::parse_seeds)]
    estimate_seeds: crate::seeds::Seeds,
}

#[derive(Args)]
pub struct ExplainArgs {
    #[arg(long, default_value_t = 5000)]
    nodes: u32,
    /// Pending pods, on top of running pods that take every GPU.
    #[arg(long, default_value_t = 50_000)]
    pending: u32,
    /// Each answer is timed this many times; the best time is reported.
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    /// Also time one forward run of the simulator until the explained pod starts (the
    /// cost of one predicted start).
    #[arg(long)]
    forward: bool,
    #[arg(long)]
    json: bool,
}

pub fn run_predict(mut args: PredictArgs) -> Result<()> {
    refuse_run_only_flags(&args.sim, "kestrel bench predict")?;
    if args.sim.paths.is_empty() && args.sim.cluster.is_none() && args.sim.synthetic.is_none() {
        args.sim.paths.push(PathBuf::from("examples/falcon-ai"));
    }
    let inputs = load_inputs(&args.sim)?;
    let last_arrival = inputs.last_arrival();
    let mut moments = Vec::new();
    if args.at.is_empty() {
        let every = args.every.max(60_000);
        let times: Vec<Millis> = (1..)
            .map(|k| k * every)
            .take_while(|t| *t <= last_arrival)
            .collect();
        moments.push(("at submission".to_string(), predict::Moments::Submissions));
        if !times.is_empty() {
            let label = format!(
                "every {}",
                kestrel_objects::duration::format_duration(every)
            );
            moments.push((label, predict::Moments::At(times)));
        }
    } else {
        moments.push((
            "at the given moments".to_string(),
            predict::Moments::At(args.at.clone()),
        ));
    }
    let seeds = &args.estimate_seeds.0;
    let (cluster, workload, config) = (&inputs.cluster, &inputs.workload, &inputs.config);
    let started = Instant::now();
    let mut rows = Vec::new();
    for (label, m) in &moments {
        let eval = predict::evaluate(cluster, workload, config, m, seeds)
            .with_context(|| format!("evaluating the predictor {label}"))?;
        // The same with exact runtimes: what arrivals unknown at each moment cost alone.
        let exact = predict::evaluate_within(cluster, workload, config, m, &seeds[..1], 0.0)?;
        rows.push((label.clone(), eval, exact));
    }
    let took = started.elapsed().as_secs_f64();
    if args.sim.json {
        let out: Vec<_> = rows
            .iter()
            .map(|(label, eval, exact)| json!({"moments": label, "estimated": eval, "exact_runtimes": exact}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "start-time prediction on {}: runtimes estimated to +/-{:.0}%, {} sets of estimates (seeds {})",
        config.scenario,
        predict::ESTIMATE_ERROR * 100.0,
        seeds.len(),
        seed_list(seeds)
    );
    let minutes = |s: f64| s / 60.0;
    for (label, eval, exact) in &rows {
        println!(
            "  {label}: {} pods pending then started later ({} within a minute, left out; {} compared), median remaining wait {:.1} min",
            eval.pods,
            eval.quick,
            eval.predicted,
            minutes(eval.median_wait_s)
        );
        println!(
            "    predictor: median |error| {:.1} min, {:.1}% of the remaining wait ({:.1}% of the whole wait, median {:.1} min); actual start inside the predicted range for {:.0}%",
            minutes(eval.predictor_median_error_s),
            eval.predictor_median_relative_error * 100.0,
            eval.predictor_median_error_of_whole_wait * 100.0,
            minutes(eval.median_whole_wait_s),
            eval.within_range * 100.0
        );
        println!(
            "    naive (work ahead / capacity): median |error| {:.1} min, {:.1}% of the remaining wait",
            minutes(eval.naive_median_error_s),
            eval.naive_median_relative_error * 100.0
        );
        println!(
            "    exact runtimes (only later arrivals unknown): median |error| {:.1} min, {:.1}% of the remaining wait",
            minutes(exact.predictor_median_error_s),
            exact.predictor_median_relative_error * 100.0
        );
    }
    println!("  evaluated in {took:.2} s");
    Ok(())
}

/// `42-61` for a run of consecutive seeds, else the list.
fn seed_list(seeds: &[u64]) -> String {
    match (seeds.first(), seeds.last()) {
        (Some(a), Some(b)) if seeds.windows(2).all(|w| w[1] == w[0] + 1) && a != b => {
            format!("{a}-{b}")
        }
        _ => seeds
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(","),
    }
}

const NAMESPACES: [&str; 4] = ["research", "vision", "speech", "platform"];

/// A DGX-like node: 224 cpu, 2 TiB, 8 GPUs, tainted for GPUs, 32 nodes a rack.
fn node(i: u32) -> NodeSpec {
    let mut node = NodeSpec::new(format!("node-{i:05}"), Resources::new(224_000, 2 << 40));
    node.labels
        .insert(RACK_LABEL.to_string(), format!("rack-{}", i / 32));
    (node.gpus, node.nics) = GpuTopology::DgxH100.devices("H100", 81_559, 8);
    node.taints.push(Taint {
        key: GPU_RESOURCE.to_string(),
        value: "true".to_string(),
        effect: TaintEffect::NoSchedule,
    });
    node
}

/// A ClusterQueue per namespace, with quota for every GPU of the cluster: nodes, not quota,
/// keep the pending pods waiting.
fn cluster_queue(name: &str, gpus: i64) -> ClusterQueueSpec {
    let quota = |resource: &str, nominal: i64| ResourceQuota {
        name: resource.to_string(),
        nominal,
        borrowing_limit: None,
        lending_limit: None,
    };
    ClusterQueueSpec {
        name: name.to_string(),
        resource_groups: vec![ResourceGroup {
            covered: vec![GPU_RESOURCE.into(), "cpu".into(), "memory".into()],
            flavors: vec![FlavorQuotas {
                flavor: "default".to_string(),
                resources: vec![
                    quota(GPU_RESOURCE, gpus * 1000),
                    quota("cpu", gpus * 8_000),
                    quota("memory", (gpus * 64) << 30),
                ],
            }],
        }],
        fair_weight: 1.0,
        ..Default::default()
    }
}

fn job(name: String, namespace: &str, gpus: u32, minutes: u64, priority: i32) -> PodSet {
    let mut template = PodSpec::new(
        namespace,
        name.clone(),
        Demand {
            resources: Resources::new(gpus as i64 * 8_000, (gpus as i64 * 64) << 30),
            gpu: GpuRequest::Whole(gpus),
        },
    );
    template.priority = priority;
    template.queue = Some("main".to_string());
    template.constraints.tolerations.push(Toleration {
        key: GPU_RESOURCE.to_string(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: None,
    });
    PodSet {
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

/// Every GPU taken by a running 1-GPU pod (1-8 h); then `pending` pods: four in five
/// alone (1, 2, 4 or 8 GPUs), one in five in gangs of 4 pods x 8 GPUs; four namespaces,
/// each with its ClusterQueue; three priorities; none preempts, so the queue stays a queue.
fn large_cluster(nodes: u32, pending: u32) -> (SimCluster, Workload) {
    let cluster = SimCluster {
        nodes: (0..nodes).map(node).collect(),
        events: Vec::new(),
    };
    let mut workload = Workload::default();
    for ns in NAMESPACES {
        let gpus = nodes as i64 * 8;
        workload.queues.cluster_queues.push(cluster_queue(ns, gpus));
        workload.queues.local_queues.push(LocalQueueSpec {
            namespace: ns.to_string(),
            name: "main".to_string(),
            cluster_queue: ns.to_string(),
        });
    }
    let mut rng = Rng::new(42);
    for i in 0..nodes * 8 {
        let ns = NAMESPACES[i as usize % 4];
        let minutes = 60 + rng.below(420);
        let running = job(format!("run-{i}"), ns, 1, minutes, 100_000);
        workload.jobs.push(running);
    }
    let gangs = pending / 5 / 4;
    for g in 0..gangs {
        let ns = NAMESPACES[rng.below(4) as usize];
        let name = format!("gang-{g}");
        let mut gang = job(name.clone(), ns, 8, 60 + rng.below(420), 1000);
        gang.kind = JobKind::Job;
        (gang.parallelism, gang.completions) = (4, 4);
        gang.template.preemption.never_preempt = true;
        gang.template.gang = Some(GangMembership {
            gang: name.clone(),
            role: None,
            rank: None,
        });
        workload.jobs.push(gang);
        workload.gangs.push(GangSpec {
            namespace: ns.to_string(),
            name,
            min_member: 4,
            total: Some(4),
            ..Default::default()
        });
    }
    for i in 0..pending - gangs * 4 {
        let gpus = [1, 2, 4, 8][rng.below(4) as usize];
        let ns = NAMESPACES[rng.below(4) as usize];
        let priority = [0, 100, 1000][rng.below(3) as usize];
        let mut single = job(format!("wait-{i}"), ns, gpus, 10 + rng.below(240), priority);
        single.template.preemption.never_preempt = true;
        workload.jobs.push(single);
    }
    (cluster, workload)
}

/// The best of `repeat` timings of `f`, and its last answer.
fn best_of<T>(repeat: u32, mut f: impl FnMut() -> Result<T>) -> Result<(f64, T)> {
    let mut best = f64::MAX;
    let mut answer = None;
    for _ in 0..repeat.max(1) {
        let started = Instant::now();
        let value = f()?;
        best = best.min(started.elapsed().as_secs_f64());
        answer = Some(value);
    }
    Ok((best, answer.expect("at least one run")))
}

pub fn run_explain(args: ExplainArgs) -> Result<()> {
    if args.nodes == 0 || args.pending < 20 {
        bail!("--nodes must be at least 1 and --pending at least 20");
    }
    let (cluster, workload) = large_cluster(args.nodes, args.pending);
    let started = Instant::now();
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default())?;
    sim.run_to(0)?;
    let setup = started.elapsed().as_secs_f64();
    let pending = sim.scheduler().pending_count();
    let estimates = predict::known(&workload, 42);
    // Objects in the middle of the queue and of the cluster.
    let asked = [
        (Kind::Pod, format!("wait-{}", args.pending / 2)),
        (Kind::Gang, format!("gang-{}", args.pending / 5 / 4 / 2)),
        (Kind::Queue, NAMESPACES[0].to_string()),
        (Kind::Node, format!("node-{:05}", args.nodes / 2)),
    ];
    let mut timings = Vec::new();
    let mut pod_text = String::new();
    for (kind, name) in &asked {
        // What `kestrel explain` does after the simulation: look up, view, render, JSON.
        let (seconds, (text, json_bytes)) = best_of(args.repeat, || {
            let explained = Explained::of(&sim, *kind, name, &estimates)?;
            Ok((explained.render(), explained.json(false)?.len()))
        })?;
        if *kind == Kind::Pod {
            pod_text = text;
        }
        timings.push((*kind, name.clone(), seconds, json_bytes));
    }
    let (list_seconds, list_bytes) = best_of(args.repeat, || {
        let list = view::queue_list(&sim, None, None);
        Ok(view::render_queue_list(&list).len() + serde_json::to_string(&list)?.len())
    })?;
    // The live scheduler's steady state: a pod ends on a full cluster, every pending
    // workload is parked, and a cycle follows (full explanations, as `kestrel serve`).
    let quiet_since = sim.last_event_at();
    let next_cycle = loop {
        let decided = sim.decide_time();
        if !sim.step()? {
            bail!("nothing ends in the benchmark's workload");
        }
        // Samples happen in between; the cycle wanted is the one after a completion.
        if sim.last_event_at() != quiet_since {
            break (sim.decide_time() - decided).as_secs_f64();
        }
    };
    let mut forward = None;
    if args.forward {
        let id = view::find_pod(&sim, &asked[0].1)?;
        let replay_started = Instant::now();
        let mut replay = Simulation::new(&cluster, &workload, SimConfig::default())?;
        replay.run_to(0)?;
        let replay_s = replay_started.elapsed().as_secs_f64();
        let run_started = Instant::now();
        let bound = predict::run_forward(&mut replay, estimates.clone(), &[id], None)?;
        forward = Some((
            replay_s,
            run_started.elapsed().as_secs_f64(),
            bound.get(&id).copied(),
        ));
    }
    if args.json {
        let answers: Vec<_> = timings
            .iter()
            .map(|(kind, name, s, bytes)| {
                json!({"kind": kind.name(), "name": name, "seconds": s, "json_bytes": bytes})
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "nodes": args.nodes,
                "pending": pending,
                "setup_seconds": setup,
                "explain": answers,
                "pending_list_seconds": list_seconds,
                "pending_list_bytes": list_bytes,
                "next_cycle_seconds": next_cycle,
                "replay_seconds": forward.map(|f| f.0),
                "one_forward_run_seconds": forward.map(|f| f.1),
                "predicted_start_ms": forward.and_then(|f| f.2),
            }))?
        );
        return Ok(());
    }
    println!(
        "explain: {} nodes x 8 GPUs, {} pods pending (every GPU taken), best of {}",
        args.nodes,
        pending,
        args.repeat.max(1)
    );
    println!("  simulated to the moment: {setup:.3} s");
    println!("  kestrel explain (look up, view, text and JSON):");
    for (kind, name, seconds, _) in &timings {
        println!(
            "    {:<5} {:<12} {:>7.2} ms",
            kind.name(),
            name,
            seconds * 1000.0
        );
    }
    println!(
        "  kestrel queue, all {pending} pending (without predictions): {:.1} ms",
        list_seconds * 1000.0
    );
    println!(
        "  the cycle after the first pod ends (all {pending} pending parked): {:.2} ms",
        next_cycle * 1000.0
    );
    if let Some((replay, run, _)) = forward {
        println!(
            "  one predicted start: replay to the moment {replay:.3} s, forward run until the pod starts {run:.3} s"
        );
    }
    println!();
    print!("{pod_text}");
    Ok(())
}
