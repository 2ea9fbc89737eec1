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
use serde_json::{json, Value};
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

/// What one placement measurement found: the best of its repeats.
struct Throughput {
    index_build_seconds: f64,
    placed: usize,
    batch_seconds: f64,
    one_pod_per_cycle_seconds: f64,
}

/// Places pods made afresh by `pods` for each run (so that each run judges each device
/// anew) on `nodes` twice per repeat: all queued for one cycle, and one pod per cycle as
/// pods trickle in; the best of `repeat`. Making the pods is not the scheduler's work; with
/// `submit_timed`, queueing the batch is (DRA pods' claims are interned then).
fn measure_placement(
    nodes: &[NodeSpec],
    pods: &dyn Fn() -> Result<Vec<PodSpec>>,
    submit_timed: bool,
    policy: Policy,
    repeat: u32,
) -> Result<Throughput> {
    let mut best = Throughput {
        index_build_seconds: 0.0,
        placed: 0,
        batch_seconds: f64::MAX,
        one_pod_per_cycle_seconds: f64::MAX,
    };
    for _ in 0..repeat.max(1) {
        let t = Instant::now();
        let mut scheduler = scheduler_with_nodes(nodes, policy)?;
        best.index_build_seconds = t.elapsed().as_secs_f64();
        let queued = pods()?;
        let submitted = Instant::now();
        for pod in queued {
            scheduler.submit(pod, 0);
        }
        let t = if submit_timed {
            submitted
        } else {
            Instant::now()
        };
        best.placed = scheduler.schedule(0).bindings.len();
        best.batch_seconds = best.batch_seconds.min(t.elapsed().as_secs_f64());

        let mut scheduler = scheduler_with_nodes(nodes, policy)?;
        let arriving = pods()?;
        let t = Instant::now();
        for (i, pod) in arriving.into_iter().enumerate() {
            scheduler.submit(pod, i as u64);
            scheduler.schedule(i as u64);
        }
        best.one_pod_per_cycle_seconds = best
            .one_pod_per_cycle_seconds
            .min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}

fn run_placement(args: PlacementArgs) -> Result<()> {
    if args.dra {
        return run_dra_placement(args);
    }
    let pods = bench_pods(args.pods, 42);
    let nodes: Vec<NodeSpec> = (0..args.nodes).map(bench_node).collect();
    let bare = measure_placement(
        &nodes,
        &|| Ok(pods.clone()),
        false,
        args.policy,
        args.repeat,
    )?;
    let realistic = if args.realistic {
        let nodes = (0..args.nodes)
            .map(realistic_node)
            .collect::<Result<Vec<_>>>()?;
        let pods = realistic_pods(&pods)?;
        let throughput = measure_placement(
            &nodes,
            &|| Ok(pods.clone()),
            false,
            args.policy,
            args.repeat,
        )?;
        let after_end = cycle_after_one_end(&nodes, args.pods, args.policy, args.repeat)?;
        Some((throughput, after_end))
    } else {
        None
    };
    let rate = |secs: f64| pods.len() as f64 / secs;
    let figures = |t: &Throughput| {
        json!({
            "placed": t.placed,
            "index_build_seconds": t.index_build_seconds,
            "batch_cycle_pods_per_second": rate(t.batch_seconds),
            "one_pod_per_cycle_pods_per_second": rate(t.one_pod_per_cycle_seconds),
        })
    };
    if args.json {
        let mut out = json!({
            "nodes": args.nodes, "pods": pods.len(), "placed": bare.placed,
            "policy": args.policy.name(),
            "index_build_seconds": bare.index_build_seconds,
            "batch_cycle_pods_per_second": rate(bare.batch_seconds),
            "one_pod_per_cycle_pods_per_second": rate(bare.one_pod_per_cycle_seconds),
        });
        if let Some((throughput, after_end)) = &realistic {
            out["realistic"] = figures(throughput);
            out["cycle_after_one_end"] = json!({
                "running": after_end.running,
                "pending": after_end.pending,
                "seconds": after_end.seconds,
                "bindings": after_end.bindings,
            });
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "placement: {} nodes x 8 GPUs, {} pods ({} placed), policy {}",
            args.nodes,
            pods.len(),
            bare.placed,
            args.policy
        );
        match &realistic {
            None => {
                println!("  index build:          {:.3} s", bare.index_build_seconds);
                println!(
                    "  one batch cycle:      {:>10.0} pods/s",
                    rate(bare.batch_seconds)
                );
                println!(
                    "  one pod per cycle:    {:>10.0} pods/s",
                    rate(bare.one_pod_per_cycle_seconds)
                );
            }
            Some((real, after_end)) => {
                println!("{:<22} {:>12} {:>12}", "", "bare", "realistic");
                println!(
                    "  index build:         {:>10.3} s {:>10.3} s",
                    bare.index_build_seconds, real.index_build_seconds
                );
                println!(
                    "  one batch cycle:     {:>10.0}/s {:>10.0}/s  pods",
                    rate(bare.batch_seconds),
                    rate(real.batch_seconds)
                );
                println!(
                    "  one pod per cycle:   {:>10.0}/s {:>10.0}/s  pods",
                    rate(bare.one_pod_per_cycle_seconds),
                    rate(real.one_pod_per_cycle_seconds)
                );
                println!("  realistic pods placed: {}", real.placed);
                println!(
                    "  cycle after one of {} running pods ends, {} pending: {:.2} ms ({} bound)",
                    after_end.running,
                    after_end.pending,
                    after_end.seconds * 1000.0,
                    after_end.bindings
                );
            }
        }
    }
    Ok(())
}

/// The DeviceClass of NVIDIA's driver, with its CEL selector as the driver's chart
/// installs it.
pub(crate) const DRA_CLASS: &str =
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'";

/// The template's request selector: GPUs with at least 40 GiB.
pub(crate) const DRA_REQUEST: &str =
    "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0";

/// [`bench_node`] with its GPUs published through DRA as NVIDIA's driver publishes them.
fn dra_node(i: u32) -> NodeSpec {
    let mut node = bench_node(i);
    for gpu in &mut node.gpus {
        gpu.dra = Some(std::sync::Arc::new(
            kestrel_objects::dra::nvidia_gpu_device(&node.name, gpu),
        ));
    }
    node
}

/// `count` pods each with one claim from the template `one-gpu` (one GPU of class
/// `gpu.nvidia.com`), read as the simulator and the live scheduler read them; with
/// `selectors`, the class and the request carry [`DRA_CLASS`] and [`DRA_REQUEST`]. Each
/// call compiles its own class, so no verdict of an earlier call is reused.
fn dra_pods(count: u32, selectors: bool) -> Result<Vec<PodSpec>> {
    use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimSpec};
    let mut classes = kestrel_objects::dra::DeviceClasses::default();
    let path = std::path::Path::new("bench");
    let ctx = kestrel_objects::fields::Ctx {
        path,
        object: "bench".to_string(),
    };
    let cel = |e: &str| json!([{"cel": {"expression": e}}]);
    let class: DeviceClass = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": if selectors { cel(DRA_CLASS) } else { json!([]) }},
    }))?;
    classes.insert(&ctx, &class)?;
    let mut exactly = json!({"deviceClassName": "gpu.nvidia.com"});
    if selectors {
        exactly["selectors"] = cel(DRA_REQUEST);
    }
    let template: ResourceClaimSpec = serde_json::from_value(json!({
        "devices": {"requests": [{"name": "gpu", "exactly": exactly}]},
    }))?;
    (0..count)
        .map(|i| {
            let name = format!("pod-{i}");
            let mut claim = kestrel_objects::dra::read_claim_spec(
                &ctx,
                "spec.spec",
                format!("bench/{name}-gpu"),
                &template,
                &classes,
            )?;
            claim.per_pod = Some("gpu".to_string());
            let mut pod = PodSpec::new(
                "bench",
                name,
                Demand {
                    resources: Resources::new(4_000, 8 << 30),
                    gpu: GpuRequest::None,
                },
            );
            kestrel_objects::dra::set_pod_claims(&ctx, "spec", &mut pod, vec![claim])?;
            Ok(pod)
        })
        .collect()
}

/// The CEL on its own: every device of `nodes` judged by a fresh request filter (the
/// class's selector and the request's), as a placement judges it the first time it sees
/// the device: (devices judged, seconds through the filter, seconds evaluating both
/// expressions on every device). The filter evaluates them once per kind of device.
fn cel_cost(nodes: &[NodeSpec]) -> Result<(usize, f64, f64)> {
    use kestrel_objects::dra_cel::{CelSelector, DeviceValue, DeviceView};
    let pods = dra_pods(1, true)?;
    let claims = pods[0].constraints.devices.as_ref().expect("a claim");
    let filter = &claims.claims[0].requests[0].alternatives[0].filter;
    let devices: Vec<_> = nodes
        .iter()
        .flat_map(|n| n.gpus.iter().filter_map(|g| g.dra.clone()))
        .collect();
    let t = Instant::now();
    let mut accepted = 0;
    for device in &devices {
        if filter.0.accepts(device) == Ok(true) {
            accepted += 1;
        }
    }
    let seconds = t.elapsed().as_secs_f64();
    if accepted != devices.len() {
        bail!(
            "the selectors accepted {accepted} of {} GPUs",
            devices.len()
        );
    }
    let selectors = [
        CelSelector::compile(DRA_CLASS).map_err(anyhow::Error::msg)?,
        CelSelector::compile(DRA_REQUEST).map_err(anyhow::Error::msg)?,
    ];
    let t = Instant::now();
    for device in &devices {
        let value = DeviceValue::new(&DeviceView {
            driver: &device.driver,
            attributes: &device.attributes,
            capacity: &device.capacity,
        })
        .map_err(anyhow::Error::msg)?;
        for selector in &selectors {
            if selector.matches_value(&value) != Ok(true) {
                bail!("{selector:?} did not select {}", device.name);
            }
        }
    }
    Ok((devices.len(), seconds, t.elapsed().as_secs_f64()))
}

fn run_dra_placement(args: PlacementArgs) -> Result<()> {
    let count = args.pods.min(args.nodes * 4);
    let nodes: Vec<NodeSpec> = (0..args.nodes).map(dra_node).collect();
    let cel = measure_placement(
        &nodes,
        &|| dra_pods(count, true),
        true,
        args.policy,
        args.repeat,
    )?;
    let plain = measure_placement(
        &nodes,
        &|| dra_pods(count, false),
        true,
        args.policy,
        args.repeat,
    )?;
    let plugin_nodes: Vec<NodeSpec> = (0..args.nodes).map(bench_node).collect();
    let plugin_pods = || -> Result<Vec<PodSpec>> {
        Ok((0..count)
            .map(|i| {
                PodSpec::new(
                    "bench",
                    format!("pod-{i}"),
                    Demand {
                        resources: Resources::new(4_000, 8 << 30),
                        gpu: GpuRequest::Whole(1),
                    },
                )
            })
            .collect())
    };
    let plugin = measure_placement(&plugin_nodes, &plugin_pods, true, args.policy, args.repeat)?;
    let (devices, filter_seconds, cel_seconds) = cel_cost(&nodes)?;
    let rate = |secs: f64| count as f64 / secs;
    let figures = |t: &Throughput| {
        json!({
            "placed": t.placed,
            "index_build_seconds": t.index_build_seconds,
            "batch_cycle_pods_per_second": rate(t.batch_seconds),
            "one_pod_per_cycle_pods_per_second": rate(t.one_pod_per_cycle_seconds),
        })
    };
    if args.json {
        let out = json!({
            "nodes": args.nodes, "pods": count, "policy": args.policy.name(),
            "dra_cel": figures(&cel),
            "dra_without_selectors": figures(&plain),
            "device_plugin": figures(&plugin),
            "cel": {"devices_judged": devices, "filter_seconds": filter_seconds,
                    "every_device_evaluated_seconds": cel_seconds},
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "DRA placement: {} nodes x 8 GPUs published as gpu.nvidia.com, {} pods with one claim \
         each from a template, policy {}",
        args.nodes, count, args.policy
    );
    println!(
        "{:<22} {:>12} {:>14} {:>14}",
        "", "CEL", "no selectors", "nvidia.com/gpu"
    );
    println!(
        "  placed:              {:>10}   {:>12}   {:>12}",
        cel.placed, plain.placed, plugin.placed
    );
    println!(
        "  one batch cycle:     {:>10.0}/s {:>12.0}/s {:>12.0}/s  pods",
        rate(cel.batch_seconds),
        rate(plain.batch_seconds),
        rate(plugin.batch_seconds)
    );
    println!(
        "  one pod per cycle:   {:>10.0}/s {:>12.0}/s {:>12.0}/s  pods",
        rate(cel.one_pod_per_cycle_seconds),
        rate(plain.one_pod_per_cycle_seconds),
        rate(plugin.one_pod_per_cycle_seconds)
    );
    let per_device = |seconds: f64| seconds * 1e6 / devices.max(1) as f64;
    println!(
        "  CEL on its own: both expressions on each of {devices} devices: {:.1} ms, {:.2} us \
         per device; through a fresh filter (once per kind of device): {:.1} ms, {:.3} us per \
         device",
        cel_seconds * 1000.0,
        per_device(cel_seconds),
        filter_seconds * 1000.0,
        per_device(filter_seconds)
    );
    Ok(())
}

/// The zones realistic nodes are spread over.
const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];

/// A node as a live GPU cluster has it (as in kestrel-live's `bind_throughput` example):
/// the shape of [`bench_node`], the labels of the cloud, the kubelet, GPU Feature
/// Discovery and Node Feature Discovery, a zone of three, a rack label Kestrel does not
/// know as per-node, the GPU taint, images; read by the live scheduler's conversion.
fn realistic_node(i: u32) -> Result<NodeSpec> {
    let name = format!("node-{i:05}");
    let rack = i / 32;
    let zone = ZONES[i as usize % 3];
    let images: Vec<_> = (0..20)
        .map(|k| {
            json!({"names": [format!("nvcr.io/nvidia/pytorch:24.{:02}-py3-{k}", k % 12)],
                   "sizeBytes": 1_000_000_000u64 + k * 7_654_321})
        })
        .collect();
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name,
                "node.kubernetes.io/instance-type": "p5.48xlarge",
                "topology.kubernetes.io/region": "us-east-1",
                "topology.kubernetes.io/zone": zone,
                "kestrel.dev/rack": format!("rack-{rack:04}"),
                "kestrel.dev/block": format!("block-{:03}", rack / 16),
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8",
                "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.family": "hopper",
                "nvidia.com/gpu.present": "true", "nvidia.com/mig.capable": "true",
                "nvidia.com/cuda.driver.major": "550", "nvidia.com/cuda.runtime.major": "12",
                "feature.node.kubernetes.io/pci-10de.present": "true",
                "feature.node.kubernetes.io/rdma.available": "true"
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"}
        },
        "spec": {
            "providerID": format!("aws:///{zone}/i-{i:017x}"),
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
        },
        "status": {
            "capacity": {"cpu": "224", "memory": "2Ti", "nvidia.com/gpu": "8", "pods": "110"},
            "allocatable": {"cpu": "224", "memory": "2Ti", "nvidia.com/gpu": "8", "pods": "110"},
            "images": images
        }
    });
    let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(node)?;
    Ok(kestrel_objects::live::node_spec(&node)?)
}

/// Priority classes of realistic pods, by job: (name, value).
const PRIORITY_CLASSES: [(&str, i32); 3] = [
    ("research", 1000),
    ("production", 10_000),
    ("batch-low", 100),
];

/// A pod as a Job of a live GPU cluster has it (as in kestrel-live's `bind_throughput`
/// example), asking for `demand`: labels, an owner reference, an image, a priority class,
/// the GPU taint and the node lifecycle taints tolerated, a required GPU product, and by
/// job a required zone (if `zone_required`), a preferred zone and a preferred instance
/// type; with `inter_pod`, two jobs in five place their pods by each other
/// ([`inter_pod_rules`]). Read by the live scheduler's conversion.
fn realistic_pod(i: u32, demand: &Demand, zone_required: bool, inter_pod: bool) -> Result<PodSpec> {
    let job_index = i / 8;
    let job = format!("train-{job_index:05}");
    let team = format!("team-{}", job_index % 20);
    let zone = ZONES[job_index as usize % 3];
    let (class, priority) = PRIORITY_CLASSES[job_index as usize % 3];
    let mut requests = json!({
        "cpu": format!("{}m", demand.resources.cpu_milli),
        "memory": demand.resources.memory_bytes.to_string(),
    });
    let mut annotations =
        json!({"kestrel.dev/runtime-estimate": "6h", "prometheus.io/scrape": "true"});
    let mut required = vec![];
    match demand.gpu {
        GpuRequest::None => {}
        GpuRequest::Whole(n) => requests["nvidia.com/gpu"] = json!(n.to_string()),
        GpuRequest::Shared { milli } => {
            annotations[kestrel_objects::annotations::GPU_MILLI_ANNOTATION] =
                json!(milli.to_string())
        }
        GpuRequest::Memory { mib } => {
            annotations[kestrel_objects::annotations::GPU_MEMORY_ANNOTATION] =
                json!(mib.to_string())
        }
    }
    if demand.gpu != GpuRequest::None {
        required.push(json!({"key": "nvidia.com/gpu.product", "operator": "In",
                             "values": ["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"]}));
    }
    if zone_required {
        required.push(
            json!({"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}),
        );
    }
    let mut affinity =
        json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}});
    let preferred =
        &mut affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"];
    if !zone_required && job_index % 4 != 3 {
        preferred.as_array_mut().expect("an array").push(json!({"weight": 50, "preference":
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}}));
    }
    if job_index.is_multiple_of(2) {
        preferred.as_array_mut().expect("an array").push(json!({"weight": 10, "preference":
            {"matchExpressions": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge"]}]}}));
    }
    if !required.is_empty() {
        affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
            json!({"nodeSelectorTerms": [{"matchExpressions": required}]});
    }
    let (anti_affinity, spread) = if inter_pod {
        inter_pod_rules(job_index, &job)
    } else {
        (None, None)
    };
    if let Some(anti) = anti_affinity {
        affinity["podAntiAffinity"] = anti;
    }
    let job_uid = format!("00000000-0000-4000-8000-{job_index:012x}");
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{job}-worker-{}-{i:05x}", i % 8), "namespace": team,
            "labels": {"app.kubernetes.io/name": "llm-train", "app.kubernetes.io/part-of": "research",
                       "batch.kubernetes.io/job-name": job, "controller-uid": job_uid, "team": team,
                       "batch.kubernetes.io/job-completion-index": (i % 8).to_string()},
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": job_uid,
                                 "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": {
            "schedulerName": "kestrel", "priority": priority, "priorityClassName": class,
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "affinity": affinity,
            "topologySpreadConstraints": spread.unwrap_or(json!([])),
            "containers": [{"name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                            "command": ["torchrun"], "args": ["train.py"],
                            "resources": {"requests": requests.clone(), "limits": requests}}],
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ]
        }
    });
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(pod)?;
    let catalog = kestrel_objects::pods::Catalog::live(
        std::path::Path::new("bench"),
        [],
        [],
        kestrel_objects::pods::WorkloadPriorityListing::NotServed,
    )
    .0;
    Ok(kestrel_objects::live::pod_spec(&catalog, &pod)?)
}

/// The pod rules of job `job_index` (named `job`) in realistic mixes: one job in five
/// keeps its workers on distinct nodes (required pod anti-affinity on the hostname, as
/// inference replicas do), one in five spreads them over zones (DoNotSchedule, maxSkew 1)
/// and prefers distinct nodes; the other three have none. (podAntiAffinity,
/// topologySpreadConstraints).
fn inter_pod_rules(job_index: u32, job: &str) -> (Option<Value>, Option<Value>) {
    let own = json!({"matchLabels": {"batch.kubernetes.io/job-name": job}});
    match job_index % 5 {
        1 => (
            Some(json!({"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": own, "topologyKey": "kubernetes.io/hostname"}]})),
            None,
        ),
        2 => (
            Some(json!({"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 20, "podAffinityTerm":
                    {"labelSelector": own, "topologyKey": "kubernetes.io/hostname"}}]})),
            Some(
                json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                         "whenUnsatisfiable": "DoNotSchedule", "labelSelector": own}]),
            ),
        ),
        _ => (None, None),
    }
}

/// The bare mix's demands as realistic pods; a quarter of the jobs require their zone, two
/// in five place their pods by each other.
fn realistic_pods(bare: &[PodSpec]) -> Result<Vec<PodSpec>> {
    bare.iter()
        .zip(0..)
        .map(|(pod, i)| realistic_pod(i, &pod.demand, (i / 8) % 4 == 0, true))
        .collect()
}

/// The cycle after one running pod ends on a full cluster.
struct AfterOneEnd {
    running: usize,
    pending: usize,
    seconds: f64,
    bindings: usize,
}

/// Fills every GPU of `nodes` with realistic one-GPU pods, queues `pending` more realistic
/// pods (a fifth asking for one GPU, the rest for 2, 4 or 8, none above the running ones; a quarter of the jobs
/// requiring their zone), which all wait, then ends one running pod and times the cycle
/// that follows (the best of `repeat`).
fn cycle_after_one_end(
    nodes: &[NodeSpec],
    pending: u32,
    policy: Policy,
    repeat: u32,
) -> Result<AfterOneEnd> {
    let demand = |gpus: u32| Demand {
        resources: Resources::new(4_000 * gpus as i64, (32 << 30) * gpus as i64),
        gpu: GpuRequest::Whole(gpus),
    };
    let gpus: u32 = nodes.iter().map(|n| n.gpus.len() as u32).sum();
    // The running pods have the highest priority, so the waiting ones preempt none.
    let (class, priority) = PRIORITY_CLASSES[1];
    let running: Vec<PodSpec> = (0..gpus)
        .map(|i| {
            let mut pod = realistic_pod(i, &demand(1), false, false)?;
            pod.priority = priority;
            pod.priority_class = Some(class.to_string());
            Ok(pod)
        })
        .collect::<Result<_>>()?;
    let waiting: Vec<PodSpec> = (0..pending)
        .map(|i| {
            let gpus = [1, 1, 2, 2, 4, 4, 4, 8, 8, 8][i as usize % 10];

            // Named after the running pods, so no name repeats.
            realistic_pod(
                running.len() as u32 + i,
                &demand(gpus),
                (i / 8) % 4 == 0,
                true,
            )
        })
        .collect::<Result<_>>()?;
    let mut best: Option<AfterOneEnd> = None;
    for _ in 0..repeat.max(1) {
        let mut scheduler = scheduler_with_nodes(nodes, policy)?;
        let ids: Vec<_> = running
            .iter()
            .map(|p| scheduler.submit(p.clone(), 0))
            .collect();
        let placed = scheduler.schedule(0).bindings.len();
        if placed != ids.len() {
            bail!("{placed} of {} one-GPU pods fit the cluster", ids.len());
        }
        for pod in &waiting {
            scheduler.submit(pod.clone(), 1);
        }
        if !scheduler.schedule(1).bindings.is_empty() {
            bail!("a pending pod fit the full cluster");
        }
        scheduler.finish(ids[ids.len() / 2])?;
        let t = Instant::now();
        let bindings = scheduler.schedule(2).bindings.len();
        let seconds = t.elapsed().as_secs_f64();
        if best.as_ref().is_none_or(|b| seconds < b.seconds) {
            best = Some(AfterOneEnd {
                running: ids.len(),
                pending: waiting.len(),
                seconds,
                bindings,
            });
        }
    }
    Ok(best.expect("at least one repeat"))
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
