//! Team queues: quota, borrowing, reclaim, fair share, preemption with whole gangs and
//! checkpoint-aware victim choice.

use kestrel_core::*;
use kestrel_invariants::{self as invariants, Snapshot};
use proptest::prelude::*;

use kestrel_test_support::engine::{self, add_queue, cluster_queue, gpu_node as node};

mod cohort_trees;
mod preemption;
mod quota;
mod reclaim;
mod workloads;

fn pod(ns: &str, name: &str, queue: &str, gpus: u32, priority: i32) -> PodSpec {
    engine::pod(ns, name)
        .gpu(GpuRequest::Whole(gpus))
        .queue(queue)
        .priority(priority)
        .build()
}

fn quota(gpus: i64, borrowing_limit: Option<i64>) -> ResourceGroup {
    engine::gpu_quota(gpus * 1000, borrowing_limit.map(|b| b * 1000))
}

fn cq(
    name: &str,
    cohort: Option<&str>,
    gpus: i64,
    borrowing_limit: Option<i64>,
) -> ClusterQueueSpec {
    let mut q = cluster_queue(name).gpus(gpus);
    if let Some(cohort) = cohort {
        q = q.cohort(cohort);
    }
    if let Some(limit) = borrowing_limit {
        q = q.borrowing_limit(limit);
    }
    q.build()
}

fn scheduler(nodes: u32, gpus_per_node: u32) -> Scheduler {
    let mut s = Scheduler::new(SchedulerConfig::default());
    for i in 0..nodes {
        s.add_node(node(&format!("n{i}"), gpus_per_node)).unwrap();
    }
    s
}

fn with_queues(s: &mut Scheduler, queues: Vec<ClusterQueueSpec>) {
    for q in queues {
        add_queue(s, q);
    }
}

fn bound(s: &Scheduler, ids: &[PodId]) -> usize {
    ids.iter()
        .filter(|&&id| matches!(s.pod(id).phase, PodPhase::Bound { .. }))
        .count()
}

fn reason(s: &Scheduler, id: PodId) -> String {
    s.pod(id)
        .pending_reason
        .as_ref()
        .map(|r| r.to_string())
        .unwrap_or_default()
}

fn gpu_used(s: &Scheduler, name: &str) -> i64 {
    let (id, _) = s.cluster_queues().find(|(_, q)| q.name == name).unwrap();
    s.queue_usage(id)
        .iter()
        .filter(|u| u.resource == GPU_RESOURCE)
        .map(|u| u.used)
        .sum::<i64>()
        / 1000
}

/// Carries out preemptions at once, as a driver would after the grace period.
fn evict_all(s: &mut Scheduler, d: &Decisions) -> Vec<PodId> {
    let victims: Vec<PodId> = d
        .preemptions
        .iter()
        .flat_map(|p| p.victims.iter().map(|v| v.pod))
        .collect();
    for &v in &victims {
        s.evict(v).unwrap();
    }
    victims
}

fn gang_member(ns: &str, gang: &str, name: &str, queue: &str, priority: i32) -> PodSpec {
    let mut p = pod(ns, name, queue, 1, priority);
    p.gang = Some(GangMembership {
        gang: gang.into(),
        role: None,
        rank: None,
    });
    p
}

/// A cohort holding only limits on GPUs (`borrowing_limit`, `lending_limit`) under `parent`.
fn cohort(
    name: &str,
    parent: Option<&str>,
    gpus: i64,
    bl: Option<i64>,
    ll: Option<i64>,
) -> CohortSpec {
    CohortSpec {
        name: name.into(),
        parent: parent.map(String::from),
        resource_groups: vec![ResourceGroup {
            covered: vec![GPU_RESOURCE.into()],
            flavors: vec![FlavorQuotas {
                flavor: "default".into(),
                resources: vec![ResourceQuota {
                    name: GPU_RESOURCE.into(),
                    nominal: gpus * 1000,
                    borrowing_limit: bl.map(|b| b * 1000),
                    lending_limit: ll.map(|l| l * 1000),
                }],
            }],
        }],
    }
}
