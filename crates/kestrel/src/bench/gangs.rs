//! `kestrel bench gangs`: gangs placed on a topology of racks and blocks.

use super::placement::bench_node;
use super::GangArgs;
use anyhow::{bail, Result};
use kestrel_core::{
    Demand, GangMembership, GangSpec, GangTopology, GpuRequest, PodSpec, Resources, Scheduler,
    SchedulerConfig, BLOCK_LABEL, HOSTNAME_LABEL, RACK_LABEL,
};
use serde_json::json;
use std::time::Instant;

pub(super) fn gang_pods(gang: &str, pods: u32, gpus: u32) -> impl Iterator<Item = PodSpec> + '_ {
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

pub(super) fn gang_scheduler(nodes: u32) -> Result<Scheduler> {
    let mut scheduler = Scheduler::new(SchedulerConfig::default());
    for i in 0..nodes {
        scheduler.add_node(bench_node(i))?;
    }
    scheduler.set_topology_levels(vec![BLOCK_LABEL.into(), RACK_LABEL.into()]);
    Ok(scheduler)
}

pub(super) fn big_gang() -> GangSpec {
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

pub(super) fn run_gangs(args: GangArgs) -> Result<()> {
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
