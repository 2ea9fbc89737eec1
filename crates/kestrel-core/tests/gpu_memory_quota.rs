//! Shares of one GPU by device memory (KAI's `gpu-memory`) against queue quota: a pending
//! pod is admitted at the most it could take on the cluster's devices, a bound pod is
//! charged the share its device holds, and its release returns exactly that.

use kestrel_core::*;
use proptest::prelude::*;

use kestrel_test_support::engine::{self, add_queue, cluster_queue};

fn node(name: &str, gpus: u32, memory_mib: u64) -> NodeSpec {
    engine::node(name)
        .devices(GpuTopology::Flat, "GPU", memory_mib, gpus)
        .build()
}

fn pod(ns: &str, name: &str, gpu: GpuRequest, priority: i32) -> PodSpec {
    engine::pod(ns, name)
        .cpu_milli(100)
        .gpu(gpu)
        .queue("main")
        .priority(priority)
        .build()
}

fn on_node(mut p: PodSpec, node: &str) -> PodSpec {
    p.constraints
        .node_selector
        .insert(HOSTNAME_LABEL.into(), node.into());
    p
}

/// A ClusterQueue `name` (with a LocalQueue `main` in namespace `name`) with `milli`
/// thousandths of GPU nominal quota.
fn queue(s: &mut Scheduler, name: &str, cohort: Option<&str>, milli: i64, borrow: Option<i64>) {
    let mut q = cluster_queue(name).gpu_milli(milli);
    if let Some(cohort) = cohort {
        q = q.cohort(cohort);
    }
    if let Some(borrow) = borrow {
        q = q.borrowing_limit_milli(borrow);
    }
    add_queue(s, q.build());
}

fn gpu_used(s: &Scheduler, name: &str) -> i64 {
    let (id, _) = s.cluster_queues().find(|(_, q)| q.name == name).unwrap();
    s.queue_usage(id)
        .iter()
        .filter(|u| u.resource == GPU_RESOURCE)
        .map(|u| u.used)
        .sum()
}

fn bound(s: &Scheduler, id: PodId) -> bool {
    matches!(s.pod(id).phase, PodPhase::Bound { .. })
}

#[test]
fn a_memory_share_is_charged_its_devices_share_and_released_exactly() {
    let mut s = Scheduler::new(SchedulerConfig::default());
    s.add_node(node("h100", 1, 81_920)).unwrap();
    s.add_node(node("a100", 1, 40_960)).unwrap();
    queue(&mut s, "team", None, 1000, None);
    let on_h100 = s.submit(
        on_node(
            pod("team", "p", GpuRequest::Memory { mib: 20_480 }, 0),
            "h100",
        ),
        0,
    );
    assert_eq!(
        s.gpu_milli(on_h100),
        500,
        "pending: the most it could take (40 GiB device)"
    );
    s.schedule(0);
    assert!(bound(&s, on_h100));
    assert_eq!(s.gpu_milli(on_h100), 250);
    assert_eq!(
        gpu_used(&s, "team"),
        250,
        "charged what the 80 GiB device holds"
    );
    let on_a100 = s.submit(
        on_node(
            pod("team", "q", GpuRequest::Memory { mib: 20_480 }, 0),
            "a100",
        ),
        1,
    );
    s.schedule(1);
    assert!(bound(&s, on_a100));
    assert_eq!(gpu_used(&s, "team"), 750);
    s.finish(on_h100).unwrap();
    assert_eq!(gpu_used(&s, "team"), 500);
    // Evicted and placed again, it is charged again, once.
    s.evict(on_a100).unwrap();
    assert_eq!(gpu_used(&s, "team"), 0);
    s.schedule(2);
    assert!(bound(&s, on_a100));
    assert_eq!(gpu_used(&s, "team"), 500);
    s.finish(on_a100).unwrap();
    assert_eq!(gpu_used(&s, "team"), 0);
}

#[test]
fn pending_memory_shares_are_admitted_at_the_most_they_could_take() {
    let mut s = Scheduler::new(SchedulerConfig::default());
    s.add_node(node("h100", 4, 81_920)).unwrap();
    s.add_node(node("a100", 1, 40_960)).unwrap();
    queue(&mut s, "team", None, 1000, None);
    let pods: Vec<PodId> = (0..4)
        .map(|i| {
            let p = pod(
                "team",
                &format!("p{i}"),
                GpuRequest::Memory { mib: 20_480 },
                0,
            );
            s.submit(on_node(p, "h100"), 0)
        })
        .collect();
    s.schedule(0);
    // Each counts 500 (its share of the 40 GiB device) until bound at 250: three fit the
    // quota of one GPU, the fourth would need 750 + 500.
    assert_eq!(pods.iter().filter(|&&p| bound(&s, p)).count(), 3);
    assert_eq!(gpu_used(&s, "team"), 750);
    let reason = s.pod(pods[3]).pending_reason.clone().unwrap().to_string();
    assert!(reason.contains(GPU_RESOURCE), "{reason}");
    // Without the 40 GiB device, the most it could take is 250: it is admitted.
    s.remove_node("a100").unwrap();
    s.schedule(1);
    assert!(bound(&s, pods[3]));
    assert_eq!(gpu_used(&s, "team"), 1000);
}

#[test]
fn a_memory_share_no_device_holds_waits_for_capacity_not_quota() {
    let mut s = Scheduler::new(SchedulerConfig::default());
    s.add_node(node("t4", 2, 16_384)).unwrap();
    queue(&mut s, "team", None, 1000, None);
    let p = s.submit(pod("team", "p", GpuRequest::Memory { mib: 20_480 }, 0), 0);
    s.schedule(0);
    let reason = s.pod(p).pending_reason.clone().unwrap();
    assert!(reason.queue.is_none(), "{reason}");
    assert_eq!(
        reason.to_string(),
        "0/1 nodes are available: 1 Insufficient GPU memory on one device (needs 20480 MiB)."
    );
    assert_eq!(gpu_used(&s, "team"), 0);
}

fn request(kind: u8, size: u32) -> GpuRequest {
    match kind {
        0 => GpuRequest::Whole(1 + size % 2),
        1 => GpuRequest::Shared {
            milli: 100 + size % 900,
        },
        _ => GpuRequest::Memory {
            mib: 1_024 + (size as u64 * 997) % 90_000,
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Whatever arrives, ends, is preempted and whatever nodes come and go, no queue uses
    /// more than nominal + borrowing limit, the cohort never lends more than its nominal
    /// quota, and every queue is charged exactly what its bound pods' devices hold.
    #[test]
    fn quota_limits_hold_with_memory_shares(
        ops in proptest::collection::vec((0u8..6, 0u8..3, 0u8..3, 0u32..10_000, 0i32..3), 1..100),
        limits in proptest::collection::vec((1i64..4000, proptest::option::of(0i64..3000)), 3),
    ) {
        let mut s = Scheduler::new(SchedulerConfig::default());
        let memory = [16_384, 40_960, 81_920];
        for (i, m) in memory.iter().enumerate() {
            s.add_node(node(&format!("n{i}"), 4, *m)).unwrap();
        }
        for (i, (nominal, limit)) in limits.iter().enumerate() {
            queue(&mut s, &format!("q{i}"), Some("org"), *nominal, *limit);
        }
        let mut live: Vec<PodId> = Vec::new();
        let mut extra = 0;
        for (t, (op, q, kind, size, prio)) in ops.into_iter().enumerate() {
            let now = t as u64 * 1000;
            match op {
                0..=2 => {
                    let p = pod(&format!("q{q}"), &format!("p{t}"), request(kind, size), prio);
                    live.push(s.submit(p, now));
                }
                3 if !live.is_empty() => {
                    let id = live.remove(size as usize % live.len());
                    s.finish(id).unwrap();
                }
                4 => {
                    // A node with other device memory comes (the most a pending share
                    // could take grows) or one goes (its pods wait again).
                    if size % 2 == 0 {
                        extra += 1;
                        let m = 12_288 + (size as u64 % 4) * 12_288;
                        s.add_node(node(&format!("x{extra}"), 2, m)).unwrap();
                    } else if s.cluster().len() > 1 {
                        let names: Vec<String> = s.cluster().iter().map(|(_, n)| n.spec.name.clone()).collect();
                        s.remove_node(&names[size as usize % names.len()]).unwrap();
                    }
                }
                _ => {}
            }
            let d = s.schedule(now);
            for v in d.preemptions.iter().flat_map(|p| p.victims.iter()) {
                s.evict(v.pod).unwrap();
            }
            let total_nominal: i64 = limits.iter().map(|(n, _)| n).sum();
            let mut total_used = 0;
            for (i, (nominal, limit)) in limits.iter().enumerate() {
                let name = format!("q{i}");
                let used = gpu_used(&s, &name);
                total_used += used;
                if let Some(limit) = limit {
                    prop_assert!(used <= nominal + limit, "{name} uses {used} > {nominal}+{limit}");
                }
                let (cq, _) = s.cluster_queues().find(|(_, q)| q.name == name).unwrap();
                let held: u64 = s
                    .pods()
                    .filter(|(id, p)| matches!(p.phase, PodPhase::Bound { .. }) && s.queue_of(*id) == Some(cq))
                    .map(|(id, _)| s.gpu_milli(id))
                    .sum();
                prop_assert_eq!(used, held as i64, "{} charged what its pods hold", name);
            }
            prop_assert!(total_used <= total_nominal, "cohort lends {total_used} > {total_nominal}");
        }
    }
}
