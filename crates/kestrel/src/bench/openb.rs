//! `kestrel bench openb`: the openb packing experiment.

use super::OpenbArgs;
use anyhow::{bail, Context, Result};
use kestrel_core::Policy;
use kestrel_sim::openb::derive::{derive_mix, mix_shares};
use kestrel_sim::openb::{self, packing_summary};
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

pub(super) fn run_openb(args: OpenbArgs) -> Result<()> {
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
