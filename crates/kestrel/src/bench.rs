//! `kestrel bench`: the openb packing experiment and placement throughput.

use crate::seeds::{parse_seeds, Seeds};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use kestrel_core::{
    Demand, GangMembership, GangSpec, GangTopology, GpuRequest, GpuTopology, NodeSpec, PodSpec,
    Policy, Resources, Rng, Scheduler, SchedulerConfig, BLOCK_LABEL, HOSTNAME_LABEL, RACK_LABEL,
};
use kestrel_sim::openb::derive::{derive_mix, mix_shares, Derivation};
use kestrel_sim::openb::{self, packing_summary};
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// The FGD packing experiment on an openb trace: mean GPU allocation rate at 100% and
    /// 130% arrivals, per policy, over seeds.
    Openb(OpenbArgs),
    /// Placement throughput on a synthetic cluster (default 5,000 nodes x 8 GPUs).
    Placement(PlacementArgs),
    /// Gang placement on 5,000 nodes x 8 GPUs (racks of 32, blocks of 16 racks): 1,000
    /// gangs of 4 pods preferring one rack, and one 512-pod gang required in one block.
    Gangs(GangArgs),
    /// Kueue's scheduler-performance baseline (5 cohorts x 6 ClusterQueues, 15,000
    /// workloads) in the simulator: run time, usage, time to admission per class.
    Kueue(crate::bench_queues::KueueArgs),
    /// Lost GPU-hours on a preemption-heavy day: lowest-priority-first against
    /// checkpoint-aware victim choice (with and without checkpoint requests).
    Preemption(crate::bench_queues::PreemptionArgs),
    /// A contended day of four teams in one cohort: shares against entitlements (Jain's
    /// index), borrowed GPU-hours, reclaim latency.
    Fairness(crate::bench_queues::FairnessArgs),
    /// Start-time prediction against the naive "work ahead / capacity" estimate: median
    /// errors over the pods pending at several moments (default: examples/falcon-ai).
    Predict(crate::bench_explain::PredictArgs),
    /// Time to explain a pod, a gang, a ClusterQueue and a node, and to list the queue, on
    /// a large cluster (default 5,000 nodes x 8 GPUs, 50,000 pending pods).
    Explain(crate::bench_explain::ExplainArgs),
    /// Bind throughput on a real API server (the test control plane, testenv/):
    /// kube-scheduler and `kestrel serve` one after the other, same pods, same client
    /// limits; binds/s, the ratio, Kestrel's peak RSS.
    Live(crate::bench_live::LiveArgs),
}

#[derive(Args)]
pub struct GangArgs {
    #[arg(long, default_value_t = 5000)]
    nodes: u32,
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct OpenbArgs {
    /// Node list, e.g. ../shared/traces/openb/openb_node_list_gpu_node.csv
    #[arg(long)]
    nodes: PathBuf,
    /// Pod list, e.g. ../shared/traces/openb/openb_pod_list_default.csv
    #[arg(long)]
    pods: PathBuf,
    /// Policies to run (repeatable); default: random, bestfit, kestrel.
    #[arg(long = "policy")]
    policies: Vec<Policy>,
    /// Seeds: a range `42-51`, a list `42,43` or one seed.
    #[arg(long, default_value = "42-51", value_parser = parse_seeds)]
    seeds: Seeds,
    /// Derive a mix from the pod list as the FGD paper's mixes vary (repeatable, one per
    /// kind): `cpu=2.5` (CPU-only pods are 25% of the pods, the paper's cpu250),
    /// `gpushare=0.8` (fractional pods make 80% of the GPU requests), `gpuspec=0.2` (20% of
    /// GPU pods limited to some GPU models), `multigpu=0.5` (multi-GPU pods make 50% of the
    /// GPU requests).
    #[arg(long = "derive", value_name = "KIND=LEVEL")]
    derive: Vec<Derivation>,
    /// Seed of the derivation (the mix is derived once, then run with every seed).
    #[arg(long, default_value_t = 0)]
    derive_seed: u64,
    /// Also compute the offline sorted best-fit: the same pods seen all at once, placed
    /// largest GPU request first by BestFit.
    #[arg(long)]
    bound: bool,
    /// Write the pod list that was run (the derived mix) to this CSV.
    #[arg(long, value_name = "FILE")]
    save_mix: Option<PathBuf>,
    /// Print means and per-seed figures as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct PlacementArgs {
    #[arg(long, default_value_t = 5000)]
    nodes: u32,
    #[arg(long, default_value_t = 50_000)]
    pods: u32,
    #[arg(long, default_value = "kestrel")]
    policy: Policy,
    /// Repeat the measurement this many times and report the best.
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    #[arg(long)]
    json: bool,
}

pub fn run(command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::Openb(args) => run_openb(args),
        BenchCommand::Placement(args) => run_placement(args),
        BenchCommand::Gangs(args) => run_gangs(args),
        BenchCommand::Kueue(args) => crate::bench_queues::run_kueue(args),
        BenchCommand::Preemption(args) => crate::bench_queues::run_preemption(args),
        BenchCommand::Fairness(args) => crate::bench_queues::run_fairness(args),
        BenchCommand::Predict(args) => crate::bench_explain::run_predict(args),
        BenchCommand::Explain(args) => crate::bench_explain::run_explain(args),
        BenchCommand::Live(args) => crate::bench_live::run_live(args),
    }
}

fn run_openb(args: OpenbArgs) -> Result<()> {
    let read = |p: &PathBuf| {
        std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
    };
    let nodes = openb::load_nodes(&args.nodes, &read(&args.nodes)?)?;
    let mut pods = openb::load_pods(&args.pods, &read(&args.pods)?)?;
    if nodes.iter().all(|n| n.gpus == 0) {
        bail!(
            "{}: no node has GPUs; use openb_node_list_gpu_node.csv",
            args.nodes.display()
        );
    }
    if !args.derive.is_empty() {
        pods = derive_mix(&pods, &nodes, &args.derive, args.derive_seed)
            .map_err(|e| anyhow::anyhow!("--derive: {}: {e}", args.pods.display()))?;
    }
    if let Some(path) = &args.save_mix {
        std::fs::write(path, openb::pods_csv(&pods))
            .with_context(|| format!("writing --save-mix {}", path.display()))?;
    }
    let derived: Vec<String> = args.derive.iter().map(|d| d.to_string()).collect();
    let policies = if args.policies.is_empty() {
        vec![Policy::Random, Policy::BestFit, Policy::Kestrel]
    } else {
        args.policies
    };
    let mut results = Vec::new();
    if !args.json {
        println!(
            "openb packing: {} nodes, {} GPUs, {} pods in the mix, seeds {}..{}",
            nodes.len(),
            nodes.iter().map(|n| n.gpus).sum::<u32>(),
            pods.len(),
            args.seeds.0[0],
            args.seeds.0[args.seeds.0.len() - 1]
        );
        if !derived.is_empty() {
            let s = mix_shares(&pods);
            println!(
                "derived ({}, seed {}): CPU-only pods {:.1}% of pods; of GPU requests: shares {:.1}%, multi-GPU {:.1}%; model-limited {:.1}% of GPU pods",
                derived.join(" "),
                args.derive_seed,
                100.0 * s.cpu_pods,
                100.0 * s.share_requests,
                100.0 * s.multi_requests,
                100.0 * s.model_limited
            );
        }
        println!(
            "{:<10} {:>12} {:>12} {:>12}",
            "policy", "alloc@100%", "alloc@130%", "s/run"
        );
    }
    for policy in policies {
        let started = Instant::now();
        let summary = packing_summary(&nodes, &pods, policy, &args.seeds.0);
        let per_run = started.elapsed().as_secs_f64() / args.seeds.0.len() as f64;
        if !args.json {
            println!(
                "{:<10} {:>11.2}% {:>11.2}% {:>12.3}",
                summary.policy,
                100.0 * summary.mean_allocation_at_100,
                100.0 * summary.mean_allocation_at_130,
                per_run
            );
        }
        results.push(json!({
            "summary": summary,
            "seconds_per_run": per_run,
            "derived": derived,
            "derive_seed": args.derive_seed,
            "mix": mix_shares(&pods),
        }));
    }
    if args.bound {
        let bound = openb::mean_offline_bound(&nodes, &pods, &args.seeds.0);
        if args.json {
            results.push(json!({"offline_bound_at_130": bound}));
        } else {
            println!("{:<10} {:>12} {:>11.2}%", "offline", "", 100.0 * bound);
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    }
    Ok(())
}

/// A DGX-like node: 224 cpu, 2 TiB, 8 GPUs on two NUMA nodes, racks of 32, blocks of 16
/// racks.
fn bench_node(i: u32) -> NodeSpec {
    let mut node = NodeSpec::new(format!("node-{i:05}"), Resources::new(224_000, 2 << 40));
    node.labels
        .insert(RACK_LABEL.to_string(), format!("rack-{}", i / 32));
    node.labels
        .insert(BLOCK_LABEL.to_string(), format!("block-{}", i / 512));
    (node.gpus, node.nics) = GpuTopology::DgxH100.devices("H100", 81_559, 8);
    node
}

/// The placement mix: 70% one-GPU pods, 10% shares of half a GPU, 20% CPU pods; sized to
/// fit, so every placement is a success.
fn bench_pods(count: u32, seed: u64) -> Vec<PodSpec> {
    let mut rng = Rng::new(seed);
    (0..count)
        .map(|i| {
            let (cpu, gpu) = match rng.below(10) {
                0..7 => (4_000, GpuRequest::Whole(1)),
                7 => (2_000, GpuRequest::Shared { milli: 500 }),
                _ => (2_000, GpuRequest::None),
            };
            PodSpec::new(
                "bench",
                format!("pod-{i}"),
                Demand {
                    resources: Resources::new(cpu, 8 << 30),
                    gpu,
                },
            )
        })
        .collect()
}

fn run_placement(args: PlacementArgs) -> Result<()> {
    let pods = bench_pods(args.pods, 42);
    let (mut best_batch, mut best_single) = (f64::MAX, f64::MAX);
    let (mut placed, mut setup) = (0, 0.0f64);
    for _ in 0..args.repeat.max(1) {
        // Batch: all pods queued, one cycle places them.
        let t = Instant::now();
        let mut scheduler = Scheduler::new(SchedulerConfig {
            policy: args.policy,
            seed: 42,
            ..Default::default()
        });
        for i in 0..args.nodes {
            scheduler.add_node(bench_node(i))?;
        }
        setup = t.elapsed().as_secs_f64();
        for pod in &pods {
            scheduler.submit(pod.clone(), 0);
        }
        let t = Instant::now();
        placed = scheduler.schedule(0).bindings.len();
        best_batch = best_batch.min(t.elapsed().as_secs_f64());

        // One pod per cycle, as pods trickle in.
        let mut scheduler = Scheduler::new(SchedulerConfig {
            policy: args.policy,
            seed: 42,
            ..Default::default()
        });
        for i in 0..args.nodes {
            scheduler.add_node(bench_node(i))?;
        }
        let t = Instant::now();
        for (i, pod) in pods.iter().enumerate() {
            scheduler.submit(pod.clone(), i as u64);
            scheduler.schedule(i as u64);
        }
        best_single = best_single.min(t.elapsed().as_secs_f64());
    }
    let rate = |secs: f64| pods.len() as f64 / secs;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "nodes": args.nodes, "pods": pods.len(), "placed": placed,
                "policy": args.policy.name(),
                "index_build_seconds": setup,
                "batch_cycle_pods_per_second": rate(best_batch),
                "one_pod_per_cycle_pods_per_second": rate(best_single),
            }))?
        );
    } else {
        println!(
            "placement: {} nodes x 8 GPUs, {} pods ({} placed), policy {}",
            args.nodes,
            pods.len(),
            placed,
            args.policy
        );
        println!("  index build:          {:.3} s", setup);
        println!("  one batch cycle:      {:>10.0} pods/s", rate(best_batch));
        println!("  one pod per cycle:    {:>10.0} pods/s", rate(best_single));
    }
    Ok(())
}

fn gang_pods(gang: &str, pods: u32, gpus: u32) -> impl Iterator<Item = PodSpec> + '_ {
    (0..pods).map(move |rank| {
        let mut pod = PodSpec::new(
            "bench",
            format!("{gang}-{rank}"),
            Demand {
                resources: Resources::new(16_000, 64 << 30),
                gpu: GpuRequest::Whole(gpus),
            },
        );
        pod.gang = Some(GangMembership {
            gang: gang.to_string(),
            role: None,
            rank: Some(rank),
        });
        pod
    })
}

fn gang_scheduler(nodes: u32) -> Result<Scheduler> {
    let mut scheduler = Scheduler::new(SchedulerConfig::default());
    for i in 0..nodes {
        scheduler.add_node(bench_node(i))?;
    }
    scheduler.set_topology_levels(vec![BLOCK_LABEL.into(), RACK_LABEL.into()]);
    Ok(scheduler)
}

fn big_gang() -> GangSpec {
    GangSpec {
        namespace: "bench".into(),
        name: "big".into(),
        min_member: 512,
        topology: GangTopology {
            required: Some(BLOCK_LABEL.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn run_gangs(args: GangArgs) -> Result<()> {
    let (mut best_many, mut best_big, mut best_refused) = (f64::MAX, f64::MAX, f64::MAX);
    let (mut placed_many, mut placed_big, mut refused_reason) = (0, 0, String::new());
    for _ in 0..args.repeat.max(1) {
        // 1,000 gangs of 4 pods x 8 GPUs, each preferring one rack.
        let mut s = gang_scheduler(args.nodes)?;
        for g in 0..1000 {
            let name = format!("g{g}");
            s.add_gang(GangSpec {
                namespace: "bench".into(),
                name: name.clone(),
                min_member: 4,
                topology: GangTopology {
                    preferred: Some(RACK_LABEL.into()),
                    ..Default::default()
                },
                ..Default::default()
            })?;
            for pod in gang_pods(&name, 4, 8) {
                s.submit(pod, 0);
            }
        }
        let t = Instant::now();
        placed_many = s.schedule(0).bindings.len();
        best_many = best_many.min(t.elapsed().as_secs_f64());

        // One 512-pod gang (8 GPUs per pod) required in one block: placed.
        let mut s = gang_scheduler(args.nodes)?;
        s.add_gang(big_gang())?;
        for pod in gang_pods("big", 512, 8) {
            s.submit(pod, 0);
        }
        let t = Instant::now();
        placed_big = s.schedule(0).bindings.len();
        best_big = best_big.min(t.elapsed().as_secs_f64());

        // The same gang when one GPU is taken in every block: refused, with its reason.
        let mut s = gang_scheduler(args.nodes)?;
        for block in 0..args.nodes.div_ceil(512) {
            let mut pod = PodSpec::new(
                "bench",
                format!("squatter-{block}"),
                Demand {
                    resources: Resources::new(1000, 1 << 30),
                    gpu: GpuRequest::Whole(1),
                },
            );
            pod.constraints
                .node_selector
                .insert(HOSTNAME_LABEL.into(), format!("node-{:05}", block * 512));
            s.submit(pod, 0);
        }
        s.schedule(0);
        s.add_gang(big_gang())?;
        let ids: Vec<_> = gang_pods("big", 512, 8).map(|p| s.submit(p, 1)).collect();
        let t = Instant::now();
        let d = s.schedule(1);
        best_refused = best_refused.min(t.elapsed().as_secs_f64());
        if !d.bindings.is_empty() {
            bail!("the 512-pod gang should not fit with a GPU taken in every block");
        }
        refused_reason = s
            .pod(ids[0])
            .pending_reason
            .as_ref()
            .map(|r| r.to_string())
            .unwrap_or_default();
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "nodes": args.nodes,
                "gangs_of_4_pods_per_second": placed_many as f64 / best_many,
                "gangs_of_4_pods_placed": placed_many,
                "gang_512_block_seconds": best_big,
                "gang_512_block_placed": placed_big,
                "gang_512_refused_seconds": best_refused,
                "gang_512_refused_reason": refused_reason,
            }))?
        );
    } else {
        println!(
            "gangs: {} nodes x 8 GPUs, racks of 32, blocks of 512 nodes",
            args.nodes
        );
        println!(
            "  1,000 gangs x 4 pods (preferred rack): {placed_many} pods placed, {:.0} pods/s",
            placed_many as f64 / best_many
        );
        println!(
            "  512-pod gang, one block required:     {placed_big} pods placed in {:.1} ms",
            best_big * 1000.0
        );
        println!(
            "  ... refused when no block has room:   {:.1} ms",
            best_refused * 1000.0
        );
        println!("      {refused_reason}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_mix_fits_a_small_cluster_whole() {
        let mut scheduler = Scheduler::new(SchedulerConfig::default());
        for i in 0..50 {
            scheduler.add_node(bench_node(i)).unwrap();
        }
        for pod in bench_pods(500, 1) {
            scheduler.submit(pod, 0);
        }
        assert_eq!(scheduler.schedule(0).bindings.len(), 500);
        assert_eq!(scheduler.pending_count(), 0);
    }
}
