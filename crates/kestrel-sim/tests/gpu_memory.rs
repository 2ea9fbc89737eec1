//! Shares of one GPU by device memory (KAI's `gpu-memory`) in the simulator and its
//! explanations: converted per device, named when no device has the memory.

use kestrel_core::*;
use kestrel_sim::predict::Estimates;
use kestrel_sim::*;
use kestrel_view::explain_view::{find_pod, pod_view};

const MIN: Millis = 60_000;

fn node(name: &str, memory_mib: u64) -> NodeSpec {
    let mut node = NodeSpec::new(name, Resources::new(64_000, 512 << 30));
    node.gpus = GpuTopology::Flat.devices("GPU", memory_mib, 1).0;
    node
}

fn memory_pod(name: &str, mib: u64, duration: Millis) -> PodSet {
    let template = PodSpec::new(
        "",
        "",
        Demand {
            resources: Resources::new(1000, 1 << 30),
            gpu: GpuRequest::Memory { mib },
        },
    );
    PodSet::pod("team", name, 0, duration, template)
}

#[test]
fn memory_shares_are_placed_and_explained_by_device_memory() {
    let cluster = SimCluster {
        nodes: vec![node("t4", 16_384), node("a100", 40_960)],
        events: vec![],
    };
    let workload = Workload {
        jobs: vec![
            memory_pod("first", 20_480, 60 * MIN),
            memory_pod("second", 30_000, 30 * MIN),
            memory_pod("huge", 50_000, 30 * MIN),
        ],
        ..Default::default()
    };
    let durations = Estimates::exact(workload.jobs.iter().map(|j| j.duration).collect());
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    sim.run_to(10 * MIN).unwrap();
    let first = find_pod(&sim, "first").unwrap();
    assert!(matches!(
        sim.scheduler().pod(first).phase,
        PodPhase::Bound {
            gpus: GpuAssignment::Shared { milli: 500, .. },
            ..
        }
    ));

    // 30000 MiB: too big for the T4, and only 20480 MiB of the A100 is free.
    let second = pod_view(&sim, find_pod(&sim, "second").unwrap(), &durations);
    assert_eq!(
        second.requests.summary,
        "30000 MiB of one GPU (shared), 1 cpu, 1Gi memory"
    );
    assert_eq!(
        second.requests.gpus, 0.733,
        "the most it could take: its A100 share"
    );
    let e = second.explanation.as_ref().unwrap();
    assert!(
        e.message
            .contains("1 Insufficient GPU memory on one device (needs 30000 MiB)"),
        "{}",
        e.message
    );
    assert!(
        e.message.contains("1 Insufficient nvidia.com/gpu"),
        "{}",
        e.message
    );
    let help = second.help.as_ref().unwrap();
    let closest = help.closest.as_ref().unwrap();
    assert_eq!(closest.node, "a100");
    assert_eq!(closest.lacks[0].resource, GPU_RESOURCE);
    assert_eq!(closest.lacks[0].missing, 0.233);
    let room = help.room.as_ref().unwrap();
    assert_eq!((room.node.as_str(), room.at_s), ("a100", 3600.0));
    assert_eq!(room.ending[0].gpus, 0.5, "first holds half the A100");

    // 50000 MiB fits no device: the closest node lacks device memory, and no end helps.
    let huge = pod_view(&sim, find_pod(&sim, "huge").unwrap(), &durations);
    let e = huge.explanation.as_ref().unwrap();
    assert_eq!(
        e.message,
        "0/2 nodes are available: 2 Insufficient GPU memory on one device (needs 50000 MiB)."
    );
    let help = huge.help.as_ref().unwrap();
    let closest = help.closest.as_ref().unwrap();
    assert_eq!(closest.node, "a100");
    assert_eq!(closest.lacks[0].text, "9040 MiB more memory on one GPU");
    assert!(help.room.is_none());

    // At 1 h first ends and second takes 733 of the A100.
    sim.run_to(70 * MIN).unwrap();
    assert!(matches!(
        sim.scheduler().pod(find_pod(&sim, "second").unwrap()).phase,
        PodPhase::Bound {
            gpus: GpuAssignment::Shared { milli: 733, .. },
            ..
        }
    ));
}
