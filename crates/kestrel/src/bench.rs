//! `kestrel bench`: the openb packing experiment and placement throughput.
//!
//! One file per experiment: [`openb`] (packing), [`placement`] (placement throughput on
//! synthetic and realistic clusters), [`dra`] (the same through DRA devices), [`gangs`]
//! (gangs on a topology).

pub(crate) mod dra;
mod gangs;
mod openb;
mod placement;

use gangs::run_gangs;
use openb::run_openb;
use placement::run_placement;

use crate::seeds::{parse_seeds, Seeds};
use anyhow::Result;
use clap::{Args, Subcommand};
use kestrel_core::{NodeSpec, Policy, Scheduler, SchedulerConfig};
use kestrel_sim::openb::derive::Derivation;

use std::path::PathBuf;

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
    /// A MIG-heavy day: 1g/2g/3g/7g requests at 130% of capacity on GPUs published with
    /// their MIG partitions; Kestrel's partition choice against first-fit.
    Mig(crate::bench_mig::MigArgs),
    /// Bind throughput on a real API server (the test control plane, testenv/):
    /// kube-scheduler and `kestrel serve` one after the other, same pods, same client
    /// limits; binds/s, the ratio, Kestrel's peak RSS. Only in a build with the
    /// `bench-live` feature (`cargo run --release --features bench-live -- bench live`).
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
    /// Also measure pods and nodes as a live GPU cluster has them (labels, zones, a GPU
    /// taint, affinities, priority classes; read through the live scheduler's
    /// conversion), and the cycle after one running pod ends on a full cluster with
    /// `--pods` pending.
    #[arg(long)]
    realistic: bool,
    /// Instead: GPUs published through DRA as NVIDIA's driver publishes them, pods with one
    /// claim each from a ResourceClaimTemplate (a CEL class selector and a CEL `quantity`
    /// request selector), one GPU each, `--pods` up to half the GPUs; beside the same pods
    /// without selectors and asking `nvidia.com/gpu`, and the CEL cost on its own.
    #[arg(long, conflicts_with = "realistic")]
    dra: bool,
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
        BenchCommand::Mig(args) => crate::bench_mig::run_mig(args),
    }
}

/// A scheduler under `policy` (seed 42) with `nodes`.
fn scheduler_with_nodes(nodes: &[NodeSpec], policy: Policy) -> Result<Scheduler> {
    let mut scheduler = Scheduler::new(SchedulerConfig {
        policy,
        seed: 42,
        ..Default::default()
    });
    for node in nodes {
        scheduler.add_node(node.clone())?;
    }
    Ok(scheduler)
}

#[cfg(test)]
mod tests {
    use super::placement::{bench_node, bench_pods};
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
