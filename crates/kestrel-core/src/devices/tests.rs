use super::*;
use crate::cluster::NodeState;
use crate::model::NodeSpec;
use crate::model::{TaintEffect, Toleration, TolerationOperator};
use crate::resources::Resources;
use crate::topology::GpuTopology;
use crate::types::{GpuAssignment, PartitionRef};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Accepts devices whose `model` attribute is one of the given ones.
#[derive(Debug)]
struct Model(Vec<&'static str>, String);

impl DeviceFilter for Model {
    fn accepts(&self, device: &Arc<DraDevice>) -> Result<bool, String> {
        match device.attributes.get("x/model") {
            Some(DeviceAttribute::String(m)) => Ok(self.0.contains(&m.as_str())),
            _ => Err("no such key: model".to_string()),
        }
    }
    fn key(&self) -> &str {
        &self.1
    }
}

fn filter(models: &[&'static str]) -> Filter {
    Filter(Arc::new(Model(models.to_vec(), format!("{models:?}"))))
}

/// The GPUs a choice takes whole, by position, ascending.
fn positions(choice: &DeviceChoiceOnNode) -> Vec<usize> {
    let mut out: Vec<usize> = choice
        .devices()
        .iter()
        .filter(|d| d.partition.is_none())
        .map(|d| d.position)
        .collect();
    out.sort_unstable();
    out
}

/// A device of driver `x`, pool `n`, untainted and unpartitioned.
fn test_device(name: String, attributes: BTreeMap<String, DeviceAttribute>) -> DraDevice {
    DraDevice {
        driver: "x".into(),
        pool: "n".into(),
        name,
        attributes,
        capacity: BTreeMap::new(),
        taints: Vec::new(),
        partitions: None,
    }
}

/// A DGX-shaped node whose GPUs `0..8` are published, GPU i of model `models[i]` and
/// switch attribute `i / 4`.
fn node(models: [&str; 8]) -> NodeState {
    let mut spec = NodeSpec::new("n", Resources::new(64_000, 512 << 30));
    spec.gpus = GpuTopology::DgxH100.devices("H100", 81_559, 8).0;
    for (i, g) in spec.gpus.iter_mut().enumerate() {
        let mut attributes = BTreeMap::new();
        attributes.insert("x/model".into(), DeviceAttribute::String(models[i].into()));
        attributes.insert("x/switch".into(), DeviceAttribute::Int(i as i64 / 4));
        g.dra = Some(Arc::new(DraDevice {
            taints: if i == 7 {
                vec![crate::model::Taint {
                    key: "unhealthy".into(),
                    value: String::new(),
                    effect: TaintEffect::NoSchedule,
                }]
            } else {
                Vec::new()
            },
            ..test_device(format!("gpu-{i}"), attributes)
        }));
    }
    let mut index = crate::cluster::ClusterIndex::default();
    let id = index.insert(spec, |_: &crate::cluster::ClusterIndex, _: &NodeState| 0);
    index.node(id).clone()
}

fn request(name: &str, choices: Vec<(Filter, DeviceCount)>) -> DeviceRequest {
    DeviceRequest {
        name: name.into(),
        alternatives: choices
            .into_iter()
            .enumerate()
            .map(|(i, (filter, count))| DeviceChoice {
                name: format!("{name}/{i}"),
                class: "gpu.nvidia.com".into(),
                quota_resource: crate::resources::GPU_RESOURCE.into(),
                filter,
                count,
                tolerations: Vec::new(),
            })
            .collect(),
    }
}

fn claims(
    requests: Vec<DeviceRequest>,
    match_attributes: Vec<(String, Vec<String>)>,
) -> DeviceClaims {
    DeviceClaims {
        claims: vec![DeviceClaim {
            key: "ns/c".into(),
            requests,
            match_attributes,
            per_pod: None,
            allocation: None,
        }],
    }
}

const MODELS: [&str; 8] = ["a", "a", "a", "b", "b", "b", "b", "b"];

#[test]
fn nvidia_gpu_is_served_from_published_gpus_only_where_a_device_class_backs_it() {
    use crate::model::{Demand, GpuRequest, PlacementConstraints};
    let demand = Demand {
        resources: Resources::new(1_000, 1 << 30),
        gpu: GpuRequest::Whole(2),
    };
    let constraints = PlacementConstraints::default();
    let plain = node(MODELS);
    assert!(
        !plain.fits_pod(&demand, &constraints),
        "no nvidia.com/gpu without a class"
    );
    let mut spec = plain.spec.clone();
    spec.gpu_extended_class = Some("gpu.nvidia.com".into());
    let mut index = crate::cluster::ClusterIndex::default();
    let id = index.insert(spec, |_: &crate::cluster::ClusterIndex, _: &NodeState| 0);
    let mut served = index.node(id).clone();
    assert!(served.fits_pod(&demand, &constraints));
    // GPU 7 is tainted NoSchedule: seven whole GPUs for such pods, not eight.
    let whole = |n| Demand {
        resources: Resources::new(1_000, 1 << 30),
        gpu: GpuRequest::Whole(n),
    };
    assert!(served.fits_pod(&whole(7), &constraints));
    assert!(!served.fits_pod(&whole(8), &constraints));
    assert!(!served
        .choose_for_pod(&whole(7), &constraints)
        .indices()
        .contains(&7));
    let gpus = served.choose_for_pod(&demand, &constraints);
    assert_eq!(gpus.indices().len(), 2);
    // Devices taken by the pod are not there for a claim, nor the other way round
    // (GPU 7 is tainted: 5 are left for a claim).
    served.reserve_devices(&gpus, true);
    let all = claims(
        vec![request(
            "r",
            vec![(filter(&["a", "b"]), DeviceCount::Exact(5))],
        )],
        Vec::new(),
    );
    assert!(served.choose_devices(&all).is_ok());
    let one_more = claims(
        vec![request(
            "r",
            vec![(filter(&["a", "b"]), DeviceCount::Exact(6))],
        )],
        Vec::new(),
    );
    assert!(served.choose_devices(&one_more).is_err());
    // The five untainted GPUs the pod did not take, held by a claim: none is left.
    let taken = gpus.indices();
    let rest: Vec<u32> = (0..7).filter(|i| !taken.contains(i)).collect();
    assert_eq!(rest.len(), 5);
    served.reserve_devices(&crate::types::GpuAssignment::Whole(rest), true);
    assert!(!served.fits_pod(&whole(1), &constraints));
}

#[test]
fn quota_counts_the_most_a_pending_claim_may_take_and_exactly_what_it_holds() {
    let scale = |r: &str| if r == "nvidia.com/gpu" { 1000 } else { 1 };
    let mut x = request(
        "x",
        vec![
            (filter(&["a"]), DeviceCount::Exact(2)),
            (filter(&["b"]), DeviceCount::Exact(3)),
        ],
    );
    x.alternatives[1].quota_resource = "small-gpus".into();
    let y = request("y", vec![(filter(&["a"]), DeviceCount::All)]);
    let mut c = claims(vec![x, y], vec![]);
    // Pending: each resource its largest alternative; All the most one node has.
    assert_eq!(
        c.quota(8, scale),
        vec![("nvidia.com/gpu".into(), 10_000), ("small-gpus".into(), 3)]
    );
    // Allocated: the devices each alternative got.
    let result = |request: &str, device: &str| DeviceResult {
        request: request.into(),
        driver: "x".into(),
        pool: "n".into(),
        device: device.into(),
    };
    c.claims[0].allocation = Some(ClaimAllocation {
        node: "n".into(),
        results: vec![
            result("x/1", "3"),
            result("x/1", "4"),
            result("x/1", "5"),
            result("y/0", "0"),
        ],
    });
    assert_eq!(
        c.quota(8, scale),
        vec![("nvidia.com/gpu".into(), 1000), ("small-gpus".into(), 3)]
    );
}

#[test]
fn requests_take_matching_free_devices_aligned_and_never_twice() {
    let n = node(MODELS);
    let c = claims(
        vec![
            request("x", vec![(filter(&["a"]), DeviceCount::Exact(2))]),
            request("y", vec![(filter(&["a", "b"]), DeviceCount::Exact(3))]),
        ],
        vec![],
    );
    let choice = n.choose_devices(&c).unwrap();
    assert_eq!(positions(&choice).len(), 5);
    let x: Vec<usize> = choice.per_claim[0]
        .iter()
        .filter(|(r, _)| r == "x/0")
        .map(|(_, d)| d.position)
        .collect();
    assert!(x.iter().all(|&p| p < 3), "{x:?}");
    // Tainted gpu-7 is never taken untolerated: 7 usable devices, not 8.
    let c = claims(
        vec![request(
            "all",
            vec![(filter(&["a", "b"]), DeviceCount::Exact(8))],
        )],
        vec![],
    );
    assert!(matches!(
        n.choose_devices(&c),
        Err(ClaimShortfall::Request {
            matching: 7,
            free: 7,
            ..
        })
    ));
    let mut tolerant = c.clone();
    tolerant.claims[0].requests[0].alternatives[0].tolerations = vec![Toleration {
        key: "unhealthy".into(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: None,
    }];
    assert_eq!(positions(&n.choose_devices(&tolerant).unwrap()).len(), 8);
}

#[test]
fn first_available_falls_back_and_all_takes_every_match() {
    let n = node(MODELS);
    let c = claims(
        vec![request(
            "r",
            vec![
                (filter(&["a"]), DeviceCount::Exact(4)),
                (filter(&["b"]), DeviceCount::Exact(4)),
            ],
        )],
        vec![],
    );
    let choice = n.choose_devices(&c).unwrap();
    assert!(choice.per_claim[0]
        .iter()
        .all(|(r, p)| r == "r/1" && p.position >= 3));
    let all = claims(
        vec![request("r", vec![(filter(&["a"]), DeviceCount::All)])],
        vec![],
    );
    assert_eq!(positions(&n.choose_devices(&all).unwrap()), vec![0, 1, 2]);
    let none = claims(
        vec![request("r", vec![(filter(&["z"]), DeviceCount::All)])],
        vec![],
    );
    assert!(
        n.choose_devices(&none).is_err(),
        "All needs at least one device"
    );
}

#[test]
fn match_attribute_keeps_a_claims_devices_on_one_value() {
    let n = node(MODELS);
    // 3 devices sharing a switch: only switch 1 (gpu-4..6 usable) or switch 0 holds 3.
    let c = claims(
        vec![request(
            "r",
            vec![(filter(&["a", "b"]), DeviceCount::Exact(4))],
        )],
        vec![("x/switch".into(), vec![])],
    );
    let choice = n.choose_devices(&c).unwrap();
    assert_eq!(
        positions(&choice),
        vec![0, 1, 2, 3],
        "switch 1 has only 3 untainted"
    );
    let five = claims(
        vec![request(
            "r",
            vec![(filter(&["a", "b"]), DeviceCount::Exact(5))],
        )],
        vec![("x/switch".into(), vec![])],
    );
    assert!(n.choose_devices(&five).is_err());
}

#[test]
fn a_selector_error_is_reported_not_panicked() {
    let mut n = node(MODELS);
    let mut spec = n.spec.clone();
    for g in &mut spec.gpus {
        let mut d = (**g.dra.as_ref().unwrap()).clone();
        d.attributes.remove("x/model");
        g.dra = Some(Arc::new(d));
    }
    n.spec = spec;
    let c = claims(
        vec![request("r", vec![(filter(&["a"]), DeviceCount::Exact(1))])],
        vec![],
    );
    match n.choose_devices(&c) {
        Err(ClaimShortfall::Request {
            matching: 0,
            error: Some(e),
            ..
        }) => {
            assert!(e.contains("no such key"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}

/// A GPU's partitions as MIG lays them out on an 8-memory-slice GPU: `1g` at slices
/// 0..7, `2g` at 0, 2, 4, `3g` at 0 and 4, `7g` over all; each consumes the slices it
/// covers (`x/model` is its profile).
fn mig_partitions(gpu: usize) -> Partitions {
    let mut devices = Vec::new();
    for (profile, starts, width) in [
        ("1g", vec![0, 1, 2, 3, 4, 5, 6], 1),
        ("2g", vec![0, 2, 4], 2),
        ("3g", vec![0, 4], 4),
        ("7g", vec![0], 8),
    ] {
        for start in starts {
            let consumes: BTreeMap<String, i64> = (start..start + width)
                .map(|s| (format!("slice{s}"), 1))
                .collect();
            let mut attributes = BTreeMap::new();
            attributes.insert("x/model".into(), DeviceAttribute::String(profile.into()));
            devices.push(Partition {
                device: Arc::new(test_device(
                    format!("gpu-{gpu}-{profile}-{start}"),
                    attributes,
                )),
                milli: width as u32 * 125,
                consumes,
            });
        }
    }
    Partitions {
        counter_set: format!("gpu-{gpu}-counters"),
        capacity: (0..8).map(|s| (format!("slice{s}"), 1)).collect(),
        devices,
    }
}

/// Two published GPUs (`x/model` "a"), each with [`mig_partitions`].
fn mig_node() -> NodeState {
    let mut spec = NodeSpec::new("n", Resources::new(64_000, 512 << 30));
    spec.gpus = GpuTopology::DgxH100.devices("H100", 81_559, 8).0;
    spec.gpus.truncate(2);
    for (i, g) in spec.gpus.iter_mut().enumerate() {
        let mut attributes = BTreeMap::new();
        attributes.insert("x/model".into(), DeviceAttribute::String("a".into()));
        g.dra = Some(Arc::new(DraDevice {
            partitions: Some(Arc::new(mig_partitions(i))),
            ..test_device(format!("gpu-{i}"), attributes)
        }));
    }
    let mut index = crate::cluster::ClusterIndex::default();
    let id = index.insert(spec, |_: &crate::cluster::ClusterIndex, _: &NodeState| 0);
    index.node(id).clone()
}

fn one(model: &'static str) -> DeviceClaims {
    claims(
        vec![request(
            "r",
            vec![(filter(&[model]), DeviceCount::Exact(1))],
        )],
        vec![],
    )
}

fn assert_counters_hold(n: &NodeState) {
    for p in 0..n.spec.gpus.len() {
        let ps = n.spec.partitions_of(p).unwrap();
        let taken = n.gpus[p].partitions_taken();
        assert_eq!(ps.over_committed(taken), None, "GPU {p}");
        assert!(
            taken == 0 || !n.gpus[p].held_whole,
            "GPU {p} held whole and in partitions"
        );
    }
}

#[test]
fn partitions_and_the_whole_gpu_exclude_each_other() {
    let mut n = mig_node();
    let part = n.take_devices(&one("1g"), PartitionChoice::Packed).unwrap();
    let GpuAssignment::Partitions(refs) = &part else {
        panic!("{part:?}")
    };
    assert_eq!(refs.len(), 1);
    let used = refs[0].index;
    // The partitioned GPU is not free whole; the other one is.
    let whole = n.take_devices(&one("a"), PartitionChoice::Packed).unwrap();
    assert_eq!(whole.indices(), vec![1 - used]);
    assert!(n.take_devices(&one("a"), PartitionChoice::Packed).is_none());
    // A 7g covers every slice: neither GPU has room for it now.
    assert!(n
        .take_devices(&one("7g"), PartitionChoice::Packed)
        .is_none());
    n.give_back_devices(&part);
    assert_eq!(n.gpus[used as usize].free_milli, 1000);
    assert!(n
        .take_devices(&one("7g"), PartitionChoice::Packed)
        .is_some());
    assert_counters_hold(&n);
}

#[test]
fn packed_partitions_fill_a_partitioned_gpu_and_keep_large_profiles_possible() {
    let mut n = mig_node();
    // Seven 1g partitions all go to one GPU: the other stays whole.
    for _ in 0..7 {
        n.take_devices(&one("1g"), PartitionChoice::Packed).unwrap();
    }
    assert_eq!(n.free_whole_gpus(), 1);
    assert_counters_hold(&n);
    // One 1g then two 3g: packed, the 1g leaves a 3g possible beside it, so the two
    // 3g fit on the GPUs with one whole GPU's worth... first-fit's 1g at slice 0
    // leaves one 3g on that GPU too; both then fit. A 1g, a 3g, then a 7g: the 7g
    // needs a GPU no partition touches, which packing keeps.
    for how in [PartitionChoice::Packed, PartitionChoice::FirstFit] {
        let mut n = mig_node();
        n.take_devices(&one("1g"), how).unwrap();
        n.take_devices(&one("3g"), how).unwrap();
        assert!(n.take_devices(&one("7g"), how).is_some(), "{how:?}");
        assert_counters_hold(&n);
    }
    // A 2g after a 1g: packed keeps the 3g beside them possible on the same GPU.
    let mut n = mig_node();
    n.take_devices(&one("1g"), PartitionChoice::Packed).unwrap();
    n.take_devices(&one("2g"), PartitionChoice::Packed).unwrap();
    n.take_devices(&one("3g"), PartitionChoice::Packed).unwrap();
    assert_eq!(n.free_whole_gpus(), 1, "1g + 2g + 3g share one GPU");
    // First-fit puts the 1g at slice 0 and the 2g at slices 2-3: the 3g then needs
    // slices 4-7 and still fits; what differs is measured by `kestrel bench mig`.
    assert_counters_hold(&n);
}

#[test]
fn random_partition_requests_never_over_commit_counters() {
    let profiles = ["1g", "2g", "3g", "7g", "a"];
    for how in [PartitionChoice::Packed, PartitionChoice::FirstFit] {
        let mut rng = crate::Rng::new(7);
        for _ in 0..200 {
            let mut n = mig_node();
            let mut held = Vec::new();
            for _ in 0..24 {
                if !held.is_empty() && rng.below(3) == 0 {
                    let gpus: GpuAssignment =
                        held.swap_remove(rng.below(held.len() as u64) as usize);
                    n.give_back_devices(&gpus);
                } else {
                    let profile = profiles[rng.below(profiles.len() as u64) as usize];
                    if let Some(gpus) = n.take_devices(&one(profile), how) {
                        held.push(gpus);
                    }
                }
                assert_counters_hold(&n);
            }
            for gpus in held.drain(..) {
                n.give_back_devices(&gpus);
            }
            assert_eq!(n.free_whole_gpus(), 2, "everything given back");
        }
    }
}

#[test]
fn allocations_name_partitions_and_a_mix_holds_whole_gpus() {
    let n = mig_node();
    let result = |device: &str| DeviceResult {
        request: "r".into(),
        driver: "x".into(),
        pool: "n".into(),
        device: device.into(),
    };
    let parts = n
        .spec
        .allocation_assignment(&[result("gpu-1-3g-4"), result("gpu-1-1g-0")])
        .unwrap();
    match parts {
        GpuAssignment::Partitions(refs) => {
            assert_eq!(refs.len(), 2);
            assert!(refs.iter().all(|r| r.index == 1));
            assert_eq!(refs.iter().map(|r| r.milli).sum::<u32>(), 625);
        }
        other => panic!("{other:?}"),
    }
    let mixed = n
        .spec
        .allocation_assignment(&[result("gpu-0"), result("gpu-1-1g-0")])
        .unwrap();
    assert_eq!(mixed, GpuAssignment::Whole(vec![0, 1]));
    assert_eq!(n.spec.allocation_assignment(&[result("gpu-9")]), None);
}

#[test]
fn a_partition_blocked_by_split_room_is_named_mig_fragmentation() {
    let mut n = mig_node();
    // 1g instances at slices 1 and 5 of both GPUs: three quarters of each GPU free,
    // yet neither 3g placement (slices 0-3, 4-7) is whole.
    for gpu in 0..2 {
        let parts = n.spec.partitions_of(gpu).unwrap().clone();
        let at = |name: &str| {
            let k = parts
                .devices
                .iter()
                .position(|p| p.device.name == format!("gpu-{gpu}-{name}"))
                .unwrap() as u8;
            PartitionRef {
                index: gpu as u32,
                partition: k,
                milli: 125,
            }
        };
        n.reserve_devices(
            &GpuAssignment::Partitions(vec![at("1g-1"), at("1g-5")]),
            true,
        );
    }
    let short = n.choose_devices(&one("3g")).unwrap_err();
    assert!(
        matches!(
            short,
            ClaimShortfall::Request {
                fragmented: true,
                free: 0,
                ..
            }
        ),
        "{short:?}"
    );
    assert!(
        short.to_string().contains("split between MIG partitions"),
        "{short}"
    );
    // A 7g never fits beside a partition: no GPU has the room, nothing is split.
    let mut n = mig_node();
    n.take_devices(&one("a"), PartitionChoice::Packed).unwrap();
    n.take_devices(&one("1g"), PartitionChoice::Packed).unwrap();
    let short = n.choose_devices(&one("7g")).unwrap_err();
    assert!(
        matches!(
            short,
            ClaimShortfall::Request {
                fragmented: false,
                ..
            }
        ),
        "{short:?}"
    );
}
