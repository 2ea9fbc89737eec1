use super::*;
use crate::model::GpuDevice;
use crate::model::{Demand, GpuRequest, NodeSpec, PlacementConstraints};
use crate::resources::Resources;
use crate::resources::GPU_RESOURCE;
use crate::types::PodId;

/// A node with 8 cpu, 64 GiB and `gpus` devices of 80 GiB, four per NUMA node.
fn node(gpus: u32) -> NodeState {
    let mut spec = NodeSpec::new("n", Resources::new(8000, 64 << 30));
    spec.gpus = (0..gpus)
        .map(|index| GpuDevice {
            index,
            model: "H100".into(),
            memory_mib: 81_920,
            numa_node: index / 4,
            nvlink_island: None,
            pcie_switch: None,
            dra: None,
        })
        .collect();
    NodeState::new(spec, ClassId(0))
}

fn demand(cpu_milli: i64, gpu: GpuRequest) -> Demand {
    Demand {
        resources: Resources::new(cpu_milli, 1 << 30),
        gpu,
    }
}

#[test]
fn a_device_held_twice_stays_held_until_both_let_go() {
    // The API can show two pods on one device (a bind race the scheduler lost, a
    // second scheduler): the device is free only when both have ended.
    let mut n = node(2);
    let none = Resources::default();
    let first = GpuAssignment::Whole(vec![0]);
    n.allocate(PodId(1), &none, &first);
    n.allocate(PodId(2), &none, &first);
    n.release(PodId(1), &none, &first);
    assert!(n.gpus[0].held_whole);
    assert_eq!(n.free_whole_gpus(), 1);
    n.release(PodId(2), &none, &first);
    assert_eq!(n.free_whole_gpus(), 2);
    // Shares beyond the device are counted the same way.
    let share = GpuAssignment::Shared {
        index: 1,
        milli: 700,
    };
    n.allocate(PodId(3), &none, &share);
    n.allocate(PodId(4), &none, &share);
    assert_eq!(n.gpus[1].free_milli, 0);
    n.release(PodId(3), &none, &share);
    assert_eq!(n.gpus[1].free_milli, 300);
    n.release(PodId(4), &none, &share);
    assert_eq!(n.gpus[1].free_milli, 1000);
}

#[test]
fn shortfall_names_what_a_pod_lacks_and_nothing_when_it_fits() {
    let mut n = node(8);
    let anywhere = PlacementConstraints::default();
    let fits = demand(1000, GpuRequest::Whole(2));
    assert!(n.fits_pod(&fits, &anywhere));
    assert!(n.shortfall(&fits, &anywhere).is_empty());
    // Two GPUs and two cores short, in thousandths and millicores.
    let big = demand(10_000, GpuRequest::Whole(10));
    assert!(!n.fits_pod(&big, &anywhere));
    assert_eq!(
        n.shortfall(&big, &anywhere),
        vec![(GPU_RESOURCE, 2000), ("cpu", 2000)]
    );
    // single-numa-node: only the four GPUs of one NUMA node count.
    let one_numa = PlacementConstraints {
        single_numa_node: true,
        ..Default::default()
    };
    let six = demand(1000, GpuRequest::Whole(6));
    assert_eq!(n.shortfall(&six, &anywhere), vec![]);
    assert_eq!(n.shortfall(&six, &one_numa), vec![(GPU_RESOURCE, 2000)]);
    // A share by memory no device has: the MiB missing.
    let huge = demand(0, GpuRequest::Memory { mib: 100_000 });
    assert_eq!(
        n.shortfall(&huge, &anywhere),
        vec![(NodeState::GPU_MEMORY_SHORTFALL, 100_000 - 81_920)]
    );
    // A share where the freest device has 300 thousandths: 200 more.
    for g in &mut n.gpus {
        g.free_milli = 300;
    }
    let half = demand(0, GpuRequest::Shared { milli: 500 });
    assert_eq!(n.shortfall(&half, &anywhere), vec![(GPU_RESOURCE, 200)]);
    // A node at its pod limit lacks room for one more pod.
    n.free_pods = 0;
    let cpu_only = demand(1000, GpuRequest::None);
    assert!(!n.fits_pod(&cpu_only, &anywhere));
    assert_eq!(n.shortfall(&cpu_only, &anywhere), vec![("pods", 1)]);
}
