//! A sample report for the summary's and the HTML report's tests.

use crate::metrics::{
    GangCounts, GroupStats, JobCounts, NodeUsage, PendingPod, Percentiles, PodCounts, Sample,
    SimReport,
};

fn pc(count: u64, p50: f64, p95: f64, p99: f64) -> Percentiles {
    Percentiles {
        count,
        mean: (p50 + p95) / 2.0,
        p50,
        p95,
        p99,
        max: p99 * 1.5,
    }
}

/// A four-hour run on 24 nodes of 8 GPUs plus a CPU node, sampled every minute.
pub(crate) fn sample_report() -> SimReport {
    let gpu_reason = "Insufficient nvidia.com/gpu (need 8 > free 4)";
    let taint = "node(s) had untolerated taint {nvidia.com/gpu: reserved}";
    let gang = "gang incomplete: 3/8 pods placeable";
    let samples = (0..240u32)
        .map(|i| {
            let t = f64::from(i) / 240.0;
            let allocated = 192.0 * (0.45 + 0.35 * (t * 9.0).sin().abs());
            let free = 192.0 - allocated;
            let pending = (20.0 * (t * 5.0).sin().max(0.0)).round() as u32;
            let mut reasons = vec![];
            if pending > 0 {
                reasons.push((gpu_reason.to_string(), pending.div_ceil(2)));
                reasons.push((taint.to_string(), pending / 3));
                if i % 3 == 0 {
                    reasons.push((gang.to_string(), pending / 4));
                }
                if i % 7 == 0 {
                    reasons.push((format!("rare reason {}", i % 11), 1));
                }
            }
            Sample {
                at: u64::from(i) * 60_000,
                gpus_allocated: allocated,
                gpus_utilized: allocated * (0.6 + 0.2 * (t * 17.0).cos()),
                cpu_allocated: 0.3 + 0.2 * t,
                pods_pending: pending,
                pods_running: (allocated / 2.0) as u32,
                gpus_fragmented: free * 0.08 * (t * 3.0).sin().abs(),
                gpus_free: free,
                top_pending_reasons: reasons,
            }
        })
        .collect();
    let node_usage = (0..24u32)
        .map(|i| NodeUsage {
            node: format!("gpu-node-{i:02}"),
            gpus: 8,
            gpu_used_milli: (0..8u32)
                .map(|g| [0, 250, 500, 1000][((i + g) % 4) as usize])
                .collect(),
            cpu_allocated: f64::from(i) / 24.0,
            cordoned: i == 5,
        })
        .chain(std::iter::once(NodeUsage {
            node: "cpu-0".to_string(),
            gpus: 0,
            gpu_used_milli: vec![],
            cpu_allocated: 0.5,
            cordoned: false,
        }))
        .collect();
    let mut pending_at_end: Vec<PendingPod> = (0..11)
        .map(|i| PendingPod {
            pod: format!("team-research/train-{i}-0"),
            priority: 100,
            waiting_seconds: 600.0 + f64::from(i) * 30.0,
            reason: gpu_reason.to_string(),
        })
        .collect();
    pending_at_end.insert(
        0,
        PendingPod {
            pod: "<script>alert(1)</script>".to_string(),
            priority: 1000,
            waiting_seconds: 1800.0,
            reason: "Quota & <limits>".to_string(),
        },
    );
    SimReport {
        scenario: "bursty-mix".to_string(),
        policy: "binpack".to_string(),
        seed: 42,
        nodes: 25,
        gpus: 192,
        span: 14_400_000,
        pods: PodCounts {
            created: 420,
            scheduled: 400,
            completed: 350,
            evicted: 3,
            running_at_end: 38,
            pending_at_end: 12,
            rejected_by_quota: 0,
        },
        jobs: JobCounts {
            submitted: 120,
            completed: 101,
        },
        gangs: GangCounts {
            declared: 10,
            started: 8,
            timed_out: 1,
            timeouts: 2,
            started_in_one_rack: 6,
            started_in_one_nvlink_domain: 3,
        },
        gpu_allocation_mean: 0.713,
        gpu_utilization_mean: 0.55,
        gpu_fragmentation_mean: 0.042,
        queue_wait: pc(400, 12.5, 330.0, 900.0),
        completion_time: pc(101, 2400.0, 7200.0, 9000.0),
        by_priority: vec![
            GroupStats {
                group: "1000".to_string(),
                queue_wait: pc(50, 1.0, 5.0, 9.0),
                completion_time: pc(20, 600.0, 1200.0, 1500.0),
            },
            GroupStats {
                group: "100".to_string(),
                queue_wait: pc(300, 20.0, 400.0, 950.0),
                completion_time: pc(70, 2400.0, 7200.0, 9000.0),
            },
            GroupStats {
                group: "0".to_string(),
                queue_wait: pc(50, 60.0, 600.0, 1200.0),
                completion_time: Percentiles::default(),
            },
        ],
        by_namespace: vec![
            GroupStats {
                group: "team-research".to_string(),
                queue_wait: pc(250, 30.0, 420.0, 1000.0),
                completion_time: pc(60, 3000.0, 8000.0, 9500.0),
            },
            GroupStats {
                group: "team-prod".to_string(),
                queue_wait: pc(150, 2.0, 20.0, 60.0),
                completion_time: pc(41, 900.0, 1800.0, 2000.0),
            },
        ],
        samples,
        pending_reasons: vec![
            (gpu_reason.to_string(), 1200),
            (taint.to_string(), 700),
            (gang.to_string(), 150),
            ("Insufficient cpu".to_string(), 40),
            ("Insufficient memory".to_string(), 12),
            (
                "node(s) didn't match Pod's node affinity/selector".to_string(),
                3,
            ),
        ],
        pending_at_end,
        node_usage,
        cycles: 1440,
        bindings: 400,
        ..Default::default()
    }
}
