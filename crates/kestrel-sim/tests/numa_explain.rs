//! A pod that asks for its GPUs on one NUMA node (`single-numa-node`) is explained by the
//! GPUs one NUMA node offers, not by the node's free total.

mod fixtures;

use fixtures::whole_gpu_job;
use kestrel_core::*;
use kestrel_sim::predict::Estimates;
use kestrel_sim::*;
use kestrel_view::explain_view::{find_pod, pod_view};

const MIN: Millis = 60_000;

fn job(name: &str, gpus: u32, arrival: Millis, duration: Millis, single_numa: bool) -> PodSet {
    let mut job = whole_gpu_job(name, gpus, arrival, duration);
    job.template.constraints.single_numa_node = single_numa;
    job
}

#[test]
fn a_single_numa_pod_is_explained_by_one_numa_nodes_gpus() {
    let mut node = NodeSpec::new("dgx", Resources::new(128_000, 1 << 40));
    (node.gpus, node.nics) = GpuTopology::DgxH100.devices("H100", 81_559, 8);
    let cluster = SimCluster {
        nodes: vec![node],
        events: vec![],
    };
    // Three GPUs on each NUMA node are taken: two are free, one per socket.
    let workload = Workload {
        jobs: vec![
            job("a", 3, 0, 60 * MIN, false),
            job("b", 3, 0, 120 * MIN, false),
            job("aligned", 2, MIN, 30 * MIN, true),
        ],
        ..Default::default()
    };
    let durations = Estimates::exact(workload.jobs.iter().map(|j| j.duration).collect());
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    sim.run_to(10 * MIN).unwrap();
    let id = find_pod(&sim, "aligned").unwrap();
    assert_eq!(sim.scheduler().pod(id).phase, PodPhase::Pending);
    assert_eq!(
        sim.scheduler().cluster().node(NodeId(0)).free_whole_gpus(),
        2
    );

    let view = pod_view(&sim, id, &durations);
    let e = view.explanation.as_ref().unwrap();
    assert!(e.message.contains("one NUMA node"), "{}", e.message);
    let help = view.help.as_ref().unwrap();
    assert_eq!(help.held, 0, "two free GPUs on two sockets do not hold it");
    let closest = help.closest.as_ref().unwrap();
    assert_eq!(closest.lacks[0].resource, GPU_RESOURCE);
    assert_eq!(closest.lacks[0].missing, 1.0, "{:?}", closest.lacks);
    // When a's three GPUs free up, its socket holds the pod.
    let room = help.room.as_ref().unwrap();
    assert_eq!(room.at_s, 3600.0);
    assert_eq!(room.ending.len(), 1);
}
