//! `kestrel bench kueue|preemption|fairness`: team queues in the simulator.

use anyhow::Result;
use clap::Args;
use kestrel_core::{Millis, VictimOrder};
use kestrel_sim::metrics::SimReport;
use kestrel_sim::scenarios::{contended_day, kueue_baseline, preemption_heavy, KUEUE_CLASSES};
use kestrel_sim::{SimCluster, SimConfig, Simulation, Workload};
use serde_json::json;
use std::time::Duration;

#[derive(Args)]
pub struct KueueArgs {
    /// Control-loop latency: from a decision to the workload running (API round trips,
    /// controllers), e.g. 0ms, 100ms, 1s.
    #[arg(long, default_value = "0ms", value_parser = kestrel_objects::duration::parse_duration)]
    latency: Millis,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct PreemptionArgs {
    /// Seeds: the scenario is drawn once per seed.
    #[arg(long, default_value_t = 5)]
    seeds: u64,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct FairnessArgs {
    #[arg(long, default_value_t = 42)]
    seed: u64,
    #[arg(long)]
    json: bool,
}

fn run_scenario(
    cluster: &SimCluster,
    workload: &Workload,
    config: SimConfig,
) -> Result<(SimReport, Duration)> {
    let mut sim = Simulation::new(cluster, workload, config)?;
    while sim.step()? {}
    let decided = sim.decide_time();
    Ok((sim.finish(), decided))
}

/// Mean time to admission of one class (its PriorityClass name), in seconds.
fn class_wait(report: &SimReport, priority: i32) -> f64 {
    report
        .by_priority
        .iter()
        .find(|g| g.group == priority.to_string())
        .map_or(0.0, |g| g.queue_wait.mean)
}

pub fn run_kueue(args: KueueArgs) -> Result<()> {
    let (cluster, workload) = kueue_baseline();
    let config = SimConfig {
        scenario: "kueue-baseline".into(),
        control_latency: args.latency,
        ..Default::default()
    };
    let (report, decided) = run_scenario(&cluster, &workload, config)?;
    let nominal: f64 = report.queues.iter().map(|q| q.nominal).sum();
    let used: f64 = report.queues.iter().map(|q| q.used_mean).sum();
    let usage = if nominal > 0.0 { used / nominal } else { 0.0 };
    let waits: Vec<(&str, f64)> = KUEUE_CLASSES
        .iter()
        .rev()
        .map(|c| (c.name, class_wait(&report, c.priority)))
        .collect();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "workloads": workload.jobs.len(),
                "latency_ms": args.latency,
                "run_seconds": report.span as f64 / 1000.0,
                "usage": usage,
                "mean_time_to_admission_seconds": waits.iter().map(|(c, w)| (c.to_string(), *w)).collect::<std::collections::BTreeMap<_, _>>(),
                "preemptions": report.preemption.preemptions,
                "decide_cpu_seconds": decided.as_secs_f64(),
                "cycles": report.cycles,
                "pending_at_end": report.pods.pending_at_end,
            }))?
        );
        return Ok(());
    }
    println!(
        "Kueue baseline: 5 cohorts x 6 ClusterQueues, {} workloads, control latency {} ms",
        workload.jobs.len(),
        args.latency
    );
    println!("                         Kestrel   Kueue (calibration / gate)");
    println!(
        "run time              {:>8.1} s   351 s / 425 s",
        report.span as f64 / 1000.0
    );
    println!(
        "usage                 {:>8.1} %   58.7 % / 55 %",
        usage * 100.0
    );
    let kueue = [
        ("large", "6.7 s / 11 s"),
        ("medium", "77 s / 90 s"),
        ("small", "215 s / 260 s"),
    ];
    for ((class, wait), (_, theirs)) in waits.iter().zip(kueue) {
        println!("time to admission {class:>6} {wait:>7.2} s   {theirs}");
    }
    println!(
        "preemptions {}, cycles {}, engine CPU time {:.3} s, pending at end {}",
        report.preemption.preemptions,
        report.cycles,
        decided.as_secs_f64(),
        report.pods.pending_at_end
    );
    Ok(())
}

pub fn run_preemption(args: PreemptionArgs) -> Result<()> {
    let modes = [
        (
            "lowest-priority (newest first)",
            VictimOrder::LowestPriority,
            false,
        ),
        (
            "checkpoint-aware choice",
            VictimOrder::CheckpointAware,
            false,
        ),
        (
            "checkpoint-aware + checkpoint requests",
            VictimOrder::CheckpointAware,
            true,
        ),
    ];
    let mut rows = Vec::new();
    for (name, order, requests) in modes {
        let (mut lost, mut victims, mut preemptions) = (0.0, 0, 0);
        for seed in 0..args.seeds {
            let (cluster, workload) = preemption_heavy(seed);
            let config = SimConfig {
                scenario: "preemption-heavy".into(),
                victim_order: order,
                checkpoint_requests: requests,
                ..Default::default()
            };
            let (report, _) = run_scenario(&cluster, &workload, config)?;
            lost += report.preemption.lost_gpu_hours;
            victims += report.preemption.victim_pods;
            preemptions += report.preemption.preemptions;
        }
        rows.push((name, lost / args.seeds as f64, victims, preemptions));
    }
    let baseline = rows[0].1;
    if args.json {
        let out: Vec<_> = rows
            .iter()
            .map(|(name, lost, victims, preemptions)| {
                json!({"mode": name, "lost_gpu_hours_per_day": lost, "victim_pods": victims, "preemptions": preemptions,
                       "vs_lowest_priority": if baseline > 0.0 { 1.0 - lost / baseline } else { 0.0 }})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "Preemption-heavy day (64 GPUs, 24 high-priority arrivals), mean of {} seeds",
        args.seeds
    );
    for (name, lost, victims, _) in &rows {
        let saved = if baseline > 0.0 {
            (1.0 - lost / baseline) * 100.0
        } else {
            0.0
        };
        println!("{name:<40} lost {lost:>6.2} GPU-h/day  ({saved:>5.1}% less)  victims {victims}");
    }
    Ok(())
}

pub fn run_fairness(args: FairnessArgs) -> Result<()> {
    let (cluster, workload) = contended_day(args.seed);
    let config = SimConfig {
        scenario: "contended-day".into(),
        ..Default::default()
    };
    let (report, _) = run_scenario(&cluster, &workload, config)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "queues": report.queues,
                "jain_index": report.queue_fairness,
                "borrowed_gpu_hours": report.queues.iter().map(|q| q.borrowed_hours).sum::<f64>(),
                "reclaim_latency_p99_seconds": report.preemption.reclaim_latency.p99,
                "preemptor_start_latency_p99_seconds": report.preemption.start_latency.p99,
                "preemptions": report.preemption.preemptions,
                "gpu_allocation": report.gpu_allocation_mean,
            }))?
        );
        return Ok(());
    }
    println!("Contended day: 4 teams, 64 GPUs, one cohort, each asks ~2x its quota");
    println!("queue       nominal  GPU-h used  borrowed  entitled  got     wait p95");
    for q in &report.queues {
        println!(
            "{:<10} {:>7.0} {:>11.1} {:>9.1} {:>8.1}% {:>5.1}% {:>9.0} s",
            q.name,
            q.nominal,
            q.used_hours,
            q.borrowed_hours,
            q.entitled_share * 100.0,
            q.used_share * 100.0,
            q.queue_wait.p95
        );
    }
    println!(
        "Jain's index {:.3}, borrowed {:.1} GPU-h, {} preemptions, GPU allocation {:.1}%",
        report.queue_fairness.unwrap_or(0.0),
        report.queues.iter().map(|q| q.borrowed_hours).sum::<f64>(),
        report.preemption.preemptions,
        report.gpu_allocation_mean * 100.0
    );
    let p = &report.preemption;
    println!(
        "reclaim decision -> preemptor start: p50 {:.0} s, p95 {:.0} s, p99 {:.0} s ({} reclaims)",
        p.reclaim_latency.p50,
        p.reclaim_latency.p95,
        p.reclaim_latency.p99,
        p.reclaim_latency.count
    );
    println!(
        "any preemption -> preemptor start:  p50 {:.0} s, p95 {:.0} s, p99 {:.0} s ({} preemptors)",
        p.start_latency.p50, p.start_latency.p95, p.start_latency.p99, p.start_latency.count
    );
    Ok(())
}
