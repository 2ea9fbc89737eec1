//! Built-in queueing scenarios for `kestrel bench`: the Kueue scheduler-performance
//! baseline, a preemption-heavy GPU day with varied checkpoint ages, and a contended day
//! of teams sharing a cohort.

use crate::workload::{PodSet, QueueSetup, SimCluster, Workload};
use kestrel_core::{
    ClusterQueueSpec, Demand, FlavorQuotas, GpuRequest, GpuTopology, LocalQueueSpec, Millis,
    NodeSpec, PodSpec, QueuePreemption, ReclaimPolicy, ResourceGroup, ResourceQuota, Resources,
    Rng, WithinQueuePreemption, GPU_RESOURCE,
};

/// One workload class of the Kueue baseline, per ClusterQueue.
pub struct KueueClass {
    pub name: &'static str,
    pub count: u32,
    pub units: i64,
    pub runs: Millis,
    pub every: Millis,
    pub priority: i32,
}

/// Kueue's scheduler performance baseline: per ClusterQueue 350 small, 100 medium and 50
/// large workloads.
pub const KUEUE_CLASSES: [KueueClass; 3] = [
    KueueClass {
        name: "small",
        count: 350,
        units: 1,
        runs: 200,
        every: 100,
        priority: 50,
    },
    KueueClass {
        name: "medium",
        count: 100,
        units: 5,
        runs: 500,
        every: 500,
        priority: 100,
    },
    KueueClass {
        name: "large",
        count: 50,
        units: 20,
        runs: 1_000,
        every: 1_200,
        priority: 200,
    },
];

fn queue(
    name: &str,
    cohort: &str,
    resource: &str,
    nominal: i64,
    borrow: Option<i64>,
) -> ClusterQueueSpec {
    let scale = kestrel_core::quota_scale(resource);
    let mut covered = vec![resource.to_string()];
    let mut resources = vec![ResourceQuota {
        name: resource.to_string(),
        nominal: nominal * scale,
        borrowing_limit: borrow.map(|b| b * scale),
        lending_limit: None,
    }];
    if resource == GPU_RESOURCE {
        // GPU pods ask for CPU too: 8 cores per GPU of quota.
        covered.push("cpu".to_string());
        resources.push(ResourceQuota {
            name: "cpu".to_string(),
            nominal: nominal * 8_000,
            borrowing_limit: borrow.map(|b| b * 8_000),
            lending_limit: None,
        });
    }
    ClusterQueueSpec {
        name: name.to_string(),
        cohort: Some(cohort.to_string()),
        resource_groups: vec![ResourceGroup {
            covered,
            flavors: vec![FlavorQuotas {
                flavor: "default".to_string(),
                resources,
            }],
        }],
        preemption: QueuePreemption {
            within_cluster_queue: WithinQueuePreemption::LowerPriority,
            reclaim_within_cohort: ReclaimPolicy::Any,
            borrow_within_cohort: None,
        },
        fair_weight: 1.0,
        ..Default::default()
    }
}

fn local(setup: &mut QueueSetup, cq: &str) {
    setup.local_queues.push(LocalQueueSpec {
        namespace: cq.to_string(),
        name: "main".to_string(),
        cluster_queue: cq.to_string(),
    });
}

fn pod(queue: &str, cpu_milli: i64, gpus: u32, priority: i32) -> PodSpec {
    let mut spec = PodSpec::new(
        "",
        "",
        Demand {
            resources: Resources::new(cpu_milli, 0),
            gpu: if gpus > 0 {
                GpuRequest::Whole(gpus)
            } else {
                GpuRequest::None
            },
        },
    );
    spec.queue = Some(queue.to_string());
    spec.priority = priority;
    spec
}

/// 5 cohorts x 6 ClusterQueues (nominal 20 cpu "units", borrowing limit 100,
/// reclaimWithinCohort Any, withinClusterQueue LowerPriority) and 15,000 workloads, on
/// nodes large enough that quota is the only limit.
pub fn kueue_baseline() -> (SimCluster, Workload) {
    let mut cluster = SimCluster::default();
    for i in 0..6 {
        cluster.nodes.push(NodeSpec::new(
            format!("node-{i}"),
            Resources::new(1_000_000, 1 << 40),
        ));
    }
    let mut workload = Workload::default();
    for cohort in 0..5 {
        for q in 0..6 {
            let name = format!("cq-{cohort}-{q}");
            workload.queues.cluster_queues.push(queue(
                &name,
                &format!("cohort-{cohort}"),
                "cpu",
                20,
                Some(100),
            ));
            local(&mut workload.queues, &name);
            for class in &KUEUE_CLASSES {
                for i in 0..class.count {
                    let mut template = pod("main", class.units * 1000, 0, class.priority);
                    template.priority_class = Some(class.name.to_string());
                    template.preemption.termination_grace = 0;
                    workload.jobs.push(PodSet::pod(
                        &name,
                        format!("{}-{i}", class.name),
                        i as Millis * class.every,
                        class.runs,
                        template,
                    ));
                }
            }
        }
    }
    workload.jobs.sort_by_key(|j| j.arrival);
    (cluster, workload)
}

fn gpu_nodes(count: u32) -> SimCluster {
    let mut cluster = SimCluster::default();
    for i in 0..count {
        let mut n = NodeSpec::new(format!("gpu-{i:02}"), Resources::new(224_000, 2 << 40));
        (n.gpus, n.nics) = GpuTopology::DgxH100.devices("H100", 81_559, 8);
        cluster.nodes.push(n);
    }
    cluster
}

/// A GPU day where preemption is frequent: 8 nodes x 8 GPUs full of low-priority 4-GPU
/// training pods (8 h each, checkpointing every 10, 30 or 60 minutes, or never, started
/// at staggered times) and a high-priority 4-GPU job every 20 minutes for 15 minutes.
/// Training pods that checkpoint also accept checkpoint requests (60 s grace).
pub fn preemption_heavy(seed: u64) -> (SimCluster, Workload) {
    let cluster = gpu_nodes(8);
    let mut rng = Rng::new(seed);
    let mut workload = Workload::default();
    let intervals = [Some(10), Some(30), Some(60), None];
    for i in 0..16u64 {
        let mut template = pod("", 16_000, 4, 0);
        template.queue = None;
        template.preemption.termination_grace = 30_000;
        let interval = intervals[rng.below(4) as usize];
        template.preemption.checkpoint_interval = interval.map(|m| m * 60_000);
        template.preemption.checkpoint_grace = interval.map(|_| 60_000);
        let arrival = i * 4 * 60_000 + rng.below(60_000);
        workload.jobs.push(PodSet::pod(
            "training",
            format!("train-{i:02}"),
            arrival,
            8 * 3_600_000,
            template,
        ));
    }
    for i in 0..24u64 {
        let mut template = pod("", 16_000, 4, 1_000);
        template.queue = None;
        let arrival = 90 * 60_000 + i * 20 * 60_000 + rng.below(120_000);
        workload.jobs.push(PodSet::pod(
            "serving",
            format!("eval-{i:02}"),
            arrival,
            15 * 60_000,
            template,
        ));
    }
    workload.jobs.sort_by_key(|j| j.arrival);
    (cluster, workload)
}

/// A contended day: four teams share 64 GPUs in one cohort with nominal quotas 32, 16,
/// 8 and 8 (each may borrow, reclaims what it lent, preempts its own lower priorities;
/// admitted work runs at least 30 minutes), and each submits about twice its entitlement
/// of 1-8 GPU jobs lasting 30 minutes to 3 hours (those over an hour checkpoint every
/// 30 minutes and on request).
pub fn contended_day(seed: u64) -> (SimCluster, Workload) {
    let cluster = gpu_nodes(8);
    let mut rng = Rng::new(seed);
    let mut workload = Workload::default();
    let teams = [
        ("research", 32),
        ("vision", 16),
        ("speech", 8),
        ("platform", 8),
    ];
    for (team, nominal) in teams {
        let mut cq = queue(team, "org", GPU_RESOURCE, nominal, None);
        // Anti-thrash: what was admitted runs at least 30 minutes.
        cq.min_runtime = Some(30 * 60_000);
        workload.queues.cluster_queues.push(cq);
        local(&mut workload.queues, team);
        // About twice the entitlement over 24 h: GPU-hours = 2 x nominal x 24.
        let mut gpu_hours = 0.0;
        let mut i = 0;
        while gpu_hours < 2.0 * nominal as f64 * 24.0 {
            let gpus = [1, 2, 4, 8][rng.below(4) as usize];
            let runs = (30 + rng.below(150)) * 60_000;
            let mut template = pod("main", 8_000 * gpus as i64, gpus, rng.below(3) as i32 * 100);
            template.preemption.termination_grace = 30_000;
            if runs >= 60 * 60_000 {
                // Long jobs checkpoint every 30 minutes and on request.
                template.preemption.checkpoint_interval = Some(30 * 60_000);
                template.preemption.checkpoint_grace = Some(60_000);
            }
            let arrival = rng.below(22 * 3_600_000);
            gpu_hours += gpus as f64 * runs as f64 / 3_600_000.0;
            workload.jobs.push(PodSet::pod(
                team,
                format!("{team}-{i:04}"),
                arrival,
                runs,
                template,
            ));
            i += 1;
        }
    }
    workload.jobs.sort_by_key(|j| j.arrival);
    (cluster, workload)
}
