//! A seeded synthetic workload: the mix a shared GPU platform sees in a day.
//!
//! | share | kind | shape | runs | priority |
//! |---|---|---|---|---|
//! | 15% | distributed training (Job, a gang preferring one rack) | 2-8 pods x 4 or 8 GPUs | 1-8 h | 1000 |
//! | 15% | batch GPU Job | 1-10 completions, 1-4 at a time, 1 GPU | 10-60 min | 500 |
//! | 25% | notebook (Pod) | 1 GPU or half a GPU | 30 min-4 h | 800 |
//! | 20% | inference (Deployment) | 1-4 replicas x 1 GPU | to the end | 100000 |
//! | 25% | CPU service (Deployment) | 1-3 replicas x 2-8 cpu | to the end | 10000 |
//!
//! GPU pods tolerate `nvidia.com/gpu=true:NoSchedule`; CPU pods do not.

use crate::workload::{JobKind, PodSet, Workload};
use kestrel_core::{
    Demand, GangMembership, GangSpec, GangTopology, GpuRequest, Millis, PodSpec, Resources, Rng,
    Toleration, TolerationOperator, GPU_RESOURCE, RACK_LABEL,
};

#[derive(Debug, Clone, PartialEq)]
pub struct GeneratorConfig {
    pub jobs: usize,
    /// Arrivals spread uniformly over this span.
    pub span: Millis,
    pub seed: u64,
}

const NAMESPACES: [&str; 4] = ["research", "vision", "speech", "platform"];

fn gpu_toleration() -> Toleration {
    Toleration {
        key: GPU_RESOURCE.to_string(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: None,
    }
}

pub fn generate(config: &GeneratorConfig) -> Workload {
    let mut rng = Rng::new(config.seed);
    let mut arrivals: Vec<Millis> = (0..config.jobs)
        .map(|_| rng.below(config.span.max(1)))
        .collect();
    arrivals.sort_unstable();
    let minutes = |rng: &mut Rng, lo: u64, hi: u64| (lo + rng.below(hi - lo + 1)) * 60_000;
    let mut jobs = Vec::with_capacity(config.jobs);
    let mut gangs = Vec::new();
    for (i, arrival) in arrivals.into_iter().enumerate() {
        let namespace = NAMESPACES[rng.below(NAMESPACES.len() as u64) as usize].to_string();
        let roll = rng.below(100);
        let gpu_pod = |cpu: i64, mem_gi: i64, gpu: GpuRequest, priority: i32, class: &str| {
            let mut spec = PodSpec::new(
                "",
                "",
                Demand {
                    resources: Resources::new(cpu * 1000, mem_gi << 30),
                    gpu,
                },
            );
            spec.priority = priority;
            spec.priority_class = Some(class.to_string());
            if gpu != GpuRequest::None {
                spec.constraints.tolerations.push(gpu_toleration());
            }
            spec
        };
        let (kind, source, name, mut template, duration, parallelism, completions, util) =
            match roll {
                0..15 => {
                    let gpus = if rng.below(3) == 0 { 4 } else { 8 };
                    let pods = 2 + rng.below(7) as u32;
                    (
                        JobKind::Job,
                        "synthetic/training",
                        format!("train-{i}"),
                        gpu_pod(
                            12 * gpus as i64,
                            120 * gpus as i64,
                            GpuRequest::Whole(gpus),
                            1000,
                            "training",
                        ),
                        Some(minutes(&mut rng, 60, 480)),
                        pods,
                        pods,
                        0.9,
                    )
                }
                15..30 => {
                    let completions = 1 + rng.below(10) as u32;
                    (
                        JobKind::Job,
                        "synthetic/batch",
                        format!("batch-{i}"),
                        gpu_pod(8, 64, GpuRequest::Whole(1), 500, "batch"),
                        Some(minutes(&mut rng, 10, 60)),
                        completions.min(1 + rng.below(4) as u32),
                        completions,
                        0.85,
                    )
                }
                30..55 => {
                    let gpu = if rng.below(2) == 0 {
                        GpuRequest::Whole(1)
                    } else {
                        GpuRequest::Shared { milli: 500 }
                    };
                    (
                        JobKind::Pod,
                        "synthetic/notebook",
                        format!("notebook-{i}"),
                        gpu_pod(4, 32, gpu, 800, "notebook"),
                        Some(minutes(&mut rng, 30, 240)),
                        1,
                        1,
                        0.2,
                    )
                }
                55..75 => {
                    let replicas = 1 + rng.below(4) as u32;
                    (
                        JobKind::Service,
                        "synthetic/inference",
                        format!("inference-{i}"),
                        gpu_pod(8, 48, GpuRequest::Whole(1), 100_000, "inference"),
                        None,
                        replicas,
                        replicas,
                        0.5,
                    )
                }
                _ => {
                    let replicas = 1 + rng.below(3) as u32;
                    let cpu = 2 + rng.below(7) as i64;
                    (
                        JobKind::Service,
                        "synthetic/service",
                        format!("service-{i}"),
                        gpu_pod(cpu, cpu * 4, GpuRequest::None, 10_000, "service"),
                        None,
                        replicas,
                        replicas,
                        0.0,
                    )
                }
            };
        if source == "synthetic/training" {
            // Distributed training starts whole, packed into one rack when it can be.
            gangs.push(GangSpec {
                namespace: namespace.clone(),
                name: name.clone(),
                min_member: parallelism,
                total: Some(parallelism),
                topology: GangTopology {
                    preferred: Some(RACK_LABEL.to_string()),
                    ..Default::default()
                },
                ..Default::default()
            });
            template.gang = Some(GangMembership {
                gang: name.clone(),
                role: None,
                rank: None,
            });
        }
        jobs.push(PodSet {
            kind,
            source_kind: source.to_string(),
            namespace,
            name,
            arrival,
            duration,
            parallelism,
            completions,
            template,
            gpu_utilization: util,
        });
    }
    Workload {
        jobs,
        gangs,
        topology_levels: Vec::new(),
        queues: Default::default(),
        training: Vec::new(),
        gpu_backing: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_workload_with_every_kind() {
        let config = GeneratorConfig {
            jobs: 400,
            span: 86_400_000,
            seed: 7,
        };
        let a = generate(&config);
        assert_eq!(a, generate(&config));
        assert_ne!(
            a,
            generate(&GeneratorConfig {
                seed: 8,
                ..config.clone()
            })
        );
        for kind in ["training", "batch", "notebook", "inference", "service"] {
            let n = a
                .jobs
                .iter()
                .filter(|j| j.source_kind == format!("synthetic/{kind}"))
                .count();
            assert!(n > 20, "{kind}: {n}");
        }
        assert!(a.jobs.windows(2).all(|w| w[0].arrival <= w[1].arrival));
        assert!(a.jobs.iter().all(|j| j.arrival < 86_400_000));
        // CPU services never tolerate the GPU taint; GPU pods always do.
        for job in &a.jobs {
            let gpu = job.template.demand.gpu != GpuRequest::None;
            assert_eq!(
                gpu,
                !job.template.constraints.tolerations.is_empty(),
                "{}",
                job.name
            );
        }
    }
}
