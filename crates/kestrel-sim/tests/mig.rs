//! Property test of MIG through DRA in the engine: nodes publish their GPUs with every MIG
//! placement as NVIDIA's driver does (read through the DRA reader), pods claim whole GPUs
//! or MIG profiles, and whatever the order of submissions, cycles and ends: no GPU is held
//! whole and in partitions at once, no counter is over-committed (the invariant checker's
//! rules on the engine's state), and everything given back leaves every GPU whole again.

use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimSpec, ResourceSlice};
use kestrel_core::{
    Demand, DeviceClaim, GpuRequest, NodeSpec, PodId, PodPhase, PodSpec, Resources, Scheduler,
    SchedulerConfig,
};
use kestrel_objects::dra::{DeviceClasses, SliceBook};
use kestrel_objects::fields::Ctx;
use kestrel_objects::mig::{mig_device_class, nvidia_mig_slices, MIG_DEVICE_CLASS};
use proptest::prelude::*;
use serde_json::json;
use std::path::Path;

/// What a pod claims: a whole GPU, or one MIG instance of a profile.
const ASKS: [&str; 5] = ["whole", "1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"];

#[derive(Debug, Clone)]
enum Op {
    Submit(usize),
    Schedule,
    /// End the n-th live pod (bound or pending) and release its claim.
    Finish(usize),
}

fn ctx() -> Ctx<'static> {
    Ctx {
        path: Path::new("mig.yaml"),
        object: "mig".to_string(),
    }
}

fn mig_node(i: usize, gpus: u32) -> NodeSpec {
    let name = format!("mig-{i}");
    let mut book = SliceBook::default();
    for slice in nvidia_mig_slices(&name, gpus, "NVIDIA H100 80GB HBM3") {
        let slice: ResourceSlice = serde_json::from_value(slice).unwrap();
        book.insert(&ctx(), &slice).unwrap();
    }
    let mut node = NodeSpec::new(&name, Resources::new(64_000, 256 << 30));
    assert_eq!(
        kestrel_objects::dra::attach_gpus(&mut node, &book.gpus_of(&name)),
        None
    );
    node
}

fn classes() -> DeviceClasses {
    let mut classes = DeviceClasses::default();
    let mig: DeviceClass = serde_json::from_value(mig_device_class()).unwrap();
    classes.insert(&ctx(), &mig).unwrap();
    let gpu: DeviceClass = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression":
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}}))
    .unwrap();
    classes.insert(&ctx(), &gpu).unwrap();
    classes
}

/// A pod `name` with its own claim (from a template) for `ask`.
fn pod(classes: &DeviceClasses, name: &str, ask: &str) -> PodSpec {
    let exactly = match ask {
        "whole" => json!({"deviceClassName": "gpu.nvidia.com"}),
        profile => json!({"deviceClassName": MIG_DEVICE_CLASS, "selectors": [{"cel": {
            "expression": format!("device.attributes['gpu.nvidia.com'].profile == '{profile}'")}}]}),
    };
    let spec: ResourceClaimSpec = serde_json::from_value(json!({
        "devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}))
    .unwrap();
    let mut claim: DeviceClaim = kestrel_objects::dra::read_claim_spec(
        &ctx(),
        "spec.spec",
        format!("mig/{name}-gpu"),
        Some(&spec),
        classes,
    )
    .unwrap();
    claim.per_pod = Some("gpu".to_string());
    let mut pod = PodSpec::new(
        "mig",
        name,
        Demand {
            resources: Resources::new(1_000, 1 << 30),
            gpu: GpuRequest::None,
        },
    );
    kestrel_objects::dra::set_pod_claims(&ctx(), "spec", &mut pod, vec![claim]).unwrap();
    pod
}

fn check(s: &Scheduler) -> Result<(), TestCaseError> {
    let snapshot = kestrel_invariants::Snapshot::from_engine(s, &[]);
    if let Err(v) = kestrel_invariants::check(&snapshot) {
        return Err(TestCaseError::fail(kestrel_invariants::describe(&v)));
    }
    for (_, node) in s.cluster().iter() {
        for p in 0..node.gpus.len() {
            let taken = node.gpus[p].partitions_taken();
            let parts = node.spec.partitions_of(p).expect("MIG GPUs");
            prop_assert_eq!(parts.over_committed(taken), None);
            prop_assert!(
                taken == 0 || !node.gpus[p].held_whole,
                "{} GPU {} held whole and in partitions",
                node.spec.name,
                p
            );
        }
    }
    Ok(())
}

fn ops() -> impl Strategy<Value = (Vec<u32>, Vec<Op>)> {
    (
        prop::collection::vec(1u32..=3, 1..=3),
        prop::collection::vec(
            prop_oneof![
                4 => (0..ASKS.len()).prop_map(Op::Submit),
                2 => Just(Op::Schedule),
                2 => any::<prop::sample::Index>().prop_map(|i| Op::Finish(i.index(1 << 16))),
            ],
            1..60,
        ),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn partitions_never_over_commit_a_gpu((gpus, ops) in ops()) {
        let classes = classes();
        let mut s = Scheduler::new(SchedulerConfig::default());
        for (i, &n) in gpus.iter().enumerate() {
            s.add_node(mig_node(i, n)).unwrap();
        }
        let mut live: Vec<PodId> = Vec::new();
        for (step, op) in ops.iter().enumerate() {
            let t = step as u64 * 1000;
            match op {
                Op::Submit(ask) => {
                    live.push(s.submit(pod(&classes, &format!("p{step}"), ASKS[*ask]), t));
                }
                Op::Schedule => {
                    s.schedule(t);
                }
                Op::Finish(n) => {
                    if !live.is_empty() {
                        let id = live.remove(n % live.len());
                        s.finish(id).unwrap();
                        s.release_unused_claims_of(id);
                    }
                }
            }
            check(&s)?;
        }
        // Some partitions were bound when the mix allowed it.
        let bound = live
            .iter()
            .filter(|&&id| matches!(s.pod(id).phase, PodPhase::Bound { .. }))
            .count();
        for id in live.drain(..) {
            s.finish(id).unwrap();
            s.release_unused_claims_of(id);
        }
        check(&s)?;
        for (_, node) in s.cluster().iter() {
            for (p, gpu) in node.gpus.iter().enumerate() {
                prop_assert!(
                    gpu.free_milli == 1000 && gpu.partitions_taken() == 0,
                    "{} GPU {} not given back ({} bound before): {:?}",
                    node.spec.name,
                    p,
                    bound,
                    gpu
                );
            }
        }
    }
}

#[test]
fn a_full_gpu_of_small_instances_still_takes_the_next_one_on_another_gpu() {
    let classes = classes();
    let mut s = Scheduler::new(SchedulerConfig::default());
    s.add_node(mig_node(0, 2)).unwrap();
    // Seven 1g.10gb fill one GPU's compute slices; the eighth goes to the other GPU,
    // and a whole-GPU claim then finds none.
    let ids: Vec<PodId> = (0..8)
        .map(|i| s.submit(pod(&classes, &format!("small-{i}"), "1g.10gb"), 0))
        .collect();
    s.schedule(0);
    for &id in &ids {
        assert!(matches!(s.pod(id).phase, PodPhase::Bound { .. }), "{id:?}");
    }
    let whole = s.submit(pod(&classes, "whole", "whole"), 1);
    s.schedule(1);
    assert_eq!(s.pod(whole).phase, PodPhase::Pending);
    let (_, node) = s.cluster().iter().next().unwrap();
    let held: Vec<u32> = node
        .gpus
        .iter()
        .map(|g| g.partitions_taken().count_ones())
        .collect();
    assert_eq!(held.iter().sum::<u32>(), 8);
    assert!(held.contains(&7), "one GPU holds seven: {held:?}");
    check(&s).unwrap();
}

/// The dashboard's GPU map shows a GPU held in MIG partitions as its partitions: each
/// with its pod, its profile and the share of the GPU it stands for.
#[test]
fn the_gpu_map_shows_each_mig_partition_with_its_pod_and_profile() {
    let classes = classes();
    let mut s = Scheduler::new(SchedulerConfig::default());
    s.add_node(mig_node(0, 1)).unwrap();
    s.submit(pod(&classes, "big", "3g.40gb"), 0);
    s.submit(pod(&classes, "small", "1g.10gb"), 0);
    s.schedule(0);
    let map = kestrel_view::dashboard::gpu_map(&kestrel_view::explain_view::EngineAt {
        scheduler: s.clone(),
        now: 0,
    });
    let cell = &map.groups[0].nodes[0].gpus[0];
    let named: Vec<(String, String, u32)> = cell
        .pods
        .iter()
        .zip(&cell.mig)
        .map(|((p, milli), (q, profile))| {
            assert_eq!(p, q, "mig entries pair with pod entries");
            (map.pods[*p as usize].pod.clone(), profile.clone(), *milli)
        })
        .collect();
    let milli_of = |name: &str| named.iter().find(|n| n.0 == name).map(|n| n.2).unwrap();
    assert_eq!(named.len(), 2, "{named:?}");
    assert!(named.contains(&("mig/big".into(), "3g.40gb".into(), milli_of("mig/big"))));
    assert!(named.contains(&("mig/small".into(), "1g.10gb".into(), milli_of("mig/small"))));
    assert!(milli_of("mig/big") > milli_of("mig/small"), "{named:?}");
    assert_eq!(cell.used, milli_of("mig/big") + milli_of("mig/small"));
    assert_eq!((map.counts.shared, map.counts.busy), (1, 0));
    // A GPU not in partitions carries no `mig` in its JSON.
    let json = serde_json::to_value(&map).unwrap();
    assert!(json["groups"][0]["nodes"][0]["gpus"][0]["mig"].is_array());
}
