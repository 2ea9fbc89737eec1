use super::*;
use crate::sim::Simulation;
use crate::workload::{JobKind, PodSet, SimCluster, Workload};
use crate::SimConfig;
use kestrel_core::{Demand, GangMembership, GangSpec, GpuRequest, PodPhase, PodSpec, Resources};
use proptest::prelude::{
    any, prop_assert, prop_assert_eq, prop_oneof, proptest, Just, ProptestConfig,
};
use proptest::strategy::Strategy as Gen;
use std::collections::BTreeMap;

const MIN: Millis = 60_000;
const HOUR: Millis = 3_600_000;

fn node(name: &str, gpus: u32) -> NodeSpec {
    kestrel_test_support::engine::node(name)
        .cpu_milli(224_000)
        .memory(2 << 40)
        .gpus(gpus)
        .build()
}

fn options(max_nodes: u32, max_gpus: u32) -> PlanOptions {
    PlanOptions {
        max_nodes,
        max_gpus,
        ..Default::default()
    }
}

#[test]
fn batches_stay_within_the_limits_and_the_control_plane_goes_first() {
    let mut nodes: Vec<NodeSpec> = (0..5).map(|i| node(&format!("gpu-{i:02}"), 8)).collect();
    nodes.push(node("cpu-0", 0));
    nodes.push(node("cpu-1", 0));
    let mut cp = node("cp-0", 0);
    cp.labels
        .insert(CONTROL_PLANE_LABEL.to_string(), String::new());
    nodes.push(cp);
    let plan = plan(&nodes, &options(3, 16)).unwrap();
    let shape: Vec<(&str, Vec<&str>, u32)> = plan
        .batches
        .iter()
        .map(|b| {
            (
                b.pool.as_str(),
                b.nodes.iter().map(String::as_str).collect(),
                b.gpus,
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            ("cp", vec!["cp-0"], 0),
            ("cpu", vec!["cpu-0", "cpu-1"], 0),
            ("gpu", vec!["gpu-00", "gpu-01"], 16),
            ("gpu", vec!["gpu-02", "gpu-03"], 16),
            ("gpu", vec!["gpu-04"], 8),
        ]
    );
    let text = plan.render();
    assert!(text.contains("5 batches, 8 nodes"), "{text}");
    assert!(text.contains("gpu-02 gpu-03"), "{text}");
}

#[test]
fn pools_are_upgraded_in_the_order_asked_and_by_label() {
    let mut nodes = Vec::new();
    for (name, pool) in [("a-1", "x"), ("b-1", "y"), ("a-2", "y")] {
        let mut n = node(name, 8);
        n.labels.insert("pool".to_string(), pool.to_string());
        nodes.push(n);
    }
    let mut o = options(2, 16);
    o.pool_label = Some("pool".to_string());
    o.pools = vec!["y".to_string(), "x".to_string()];
    let plan = plan(&nodes, &o).unwrap();
    let pools: Vec<_> = plan.batches.iter().map(|b| b.pool.as_str()).collect();
    assert_eq!(pools, ["y", "x"]);
    assert_eq!(plan.batches[0].nodes, ["a-2", "b-1"]);
}

#[test]
fn bad_plans_are_refused_by_field_with_the_fix() {
    let nodes: Vec<NodeSpec> = vec![node("gpu-0", 4), node("gpu-1", 4), node("gpu-2", 8)];
    let e = plan(&nodes, &options(0, 8)).unwrap_err().to_string();
    assert!(e.contains("--max-nodes") && e.contains("at least 1"), "{e}");
    // The too-large node comes last: earlier batches would fit, the plan is still refused.
    let e = plan(&nodes, &options(2, 4)).unwrap_err();
    assert_eq!(
        e,
        PlanError::NodeOverGpuLimit {
            node: "gpu-2".to_string(),
            pool: "gpu".to_string(),
            gpus: 8,
            max_gpus: 4
        }
    );
    let e = e.to_string();
    assert!(
        e.contains("--max-gpus") && e.contains("raise --max-gpus to at least 8"),
        "{e}"
    );
    let mut o = options(2, 8);
    o.pools = vec!["gpus".to_string()];
    let e = plan(&nodes, &o).unwrap_err().to_string();
    assert!(
        e.contains("--pools") && e.contains("\"gpus\"") && e.contains("known pools: gpu"),
        "{e}"
    );
    let mut o = options(2, 8);
    o.pool_label = Some("pool".to_string());
    let e = plan(&nodes, &o).unwrap_err().to_string();
    assert!(e.contains("--pool-label") && e.contains("\"pool\""), "{e}");
}

#[test]
fn the_preflight_refuses_targets_off_the_list() {
    let file = Path::new("compat.yaml");
    let list = CompatibilityList::parse(
        file,
        "kubernetes: [v1.32.5, v1.33.2]\ncontainerd: [\"2.0.5\"]\ngpuOperator: [v25.3.1]\ndriver: [\"570.148.08\"]\n",
    )
    .unwrap();
    let ok = parse_targets(&[
        "kubernetes=v1.33.2".to_string(),
        "driver=570.148.08".to_string(),
    ])
    .unwrap();
    preflight(&ok, Some(("compat.yaml", &list))).unwrap();
    let bad = parse_targets(&["driver=575.51.03".to_string()]).unwrap();
    let e = preflight(&bad, Some(("compat.yaml", &list)))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("compat.yaml")
            && e.contains("field driver")
            && e.contains("575.51.03")
            && e.contains("allowed: 570.148.08"),
        "{e}"
    );
    let e = preflight(&bad, None).unwrap_err().to_string();
    assert!(e.contains("--compatibility"), "{e}");
    for given in ["driver", "kernel=6.8", "driver="] {
        let e = parse_target(given).unwrap_err().to_string();
        assert!(e.contains(given) && e.contains("COMPONENT=VERSION"), "{e}");
    }
    let e = parse_targets(&["driver=1".to_string(), "driver=2".to_string()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("given twice"), "{e}");
}

#[test]
fn a_compatibility_list_that_does_not_parse_is_refused_with_the_file() {
    let file = Path::new("compat.yaml");
    let e = CompatibilityList::parse(file, "kubernetes: [v1.33\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("compat.yaml") && e.contains("not a compatibility list"),
        "{e}"
    );
    let e = CompatibilityList::parse(file, "drivers: [\"570\"]\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("drivers") && e.contains("gpuOperator"), "{e}");
}

/// A training pod template: `gpus` whole GPUs, checkpointing every `interval` minutes
/// (none: never), answering checkpoint requests within a minute when `requests`.
fn trainer(gpus: u32, interval: Option<u64>, requests: bool) -> PodSpec {
    let mut spec = PodSpec::new(
        "",
        "",
        Demand {
            resources: Resources::new(16_000, 0),
            gpu: GpuRequest::Whole(gpus),
        },
    );
    spec.preemption.termination_grace = 30_000;
    spec.preemption.checkpoint_interval = interval.map(|m| m * MIN);
    spec.preemption.checkpoint_grace = (requests && interval.is_some()).then_some(MIN);
    spec
}

fn gang_job(workload: &mut Workload, name: &str, pods: u32, arrival: Millis, template: PodSpec) {
    let mut template = template;
    template.gang = Some(GangMembership {
        gang: name.to_string(),
        role: None,
        rank: None,
    });
    workload.gangs.push(GangSpec {
        namespace: "ml".to_string(),
        name: name.to_string(),
        min_member: pods,
        total: Some(pods),
        ..Default::default()
    });
    workload.jobs.push(PodSet {
        kind: JobKind::Job,
        source_kind: "Job".to_string(),
        namespace: "ml".to_string(),
        name: name.to_string(),
        arrival,
        duration: Some(20 * HOUR),
        parallelism: pods,
        completions: pods,
        template,
        gpu_utilization: 1.0,
    });
}

/// Four 8-GPU nodes: two 2x4-GPU gangs and four 4-GPU pods, started over the first hour.
fn small_day(requests: bool) -> (SimCluster, Workload) {
    let cluster = SimCluster {
        nodes: (0..4).map(|i| node(&format!("gpu-{i}"), 8)).collect(),
        events: Vec::new(),
    };
    let mut workload = Workload::default();
    gang_job(
        &mut workload,
        "gang-a",
        2,
        0,
        trainer(4, Some(30), requests),
    );
    gang_job(
        &mut workload,
        "gang-b",
        2,
        7 * MIN,
        trainer(4, Some(20), requests),
    );
    for (i, interval) in [Some(30), Some(60), Some(15), Some(30)]
        .into_iter()
        .enumerate()
    {
        workload.jobs.push(PodSet::pod(
            "ml",
            format!("solo-{i}"),
            (11 + 13 * i as u64) * MIN,
            20 * HOUR,
            trainer(4, interval, requests),
        ));
    }
    (cluster, workload)
}

#[test]
fn checkpoint_aware_drains_lose_far_less_work_than_plain_ones() {
    let o = PlanOptions {
        max_nodes: 1,
        max_gpus: 8,
        node_duration: 45 * MIN,
        ..Default::default()
    };
    // Jobs that answer checkpoint requests: asked, they save and leave within 20 s.
    let (cluster, workload) = small_day(true);
    let (plan, reports) = drain::simulate_upgrade(
        &cluster,
        &workload,
        &SimConfig::default(),
        &o,
        5 * HOUR + 17 * MIN,
        &drain::Strategy::ALL,
    )
    .unwrap();
    assert_eq!(plan.batches.len(), 4);
    let (plain, aware) = (&reports[0], &reports[1]);
    assert_eq!(plain.nodes_upgraded, 4);
    assert_eq!(aware.nodes_upgraded, 4);
    assert!(plain.lost_gpu_hours > 0.0, "{plain:?}");
    assert!(
        aware.lost_gpu_hours <= 0.1 * plain.lost_gpu_hours,
        "plain {plain:?}\naware {aware:?}"
    );
    assert!(aware.duration() <= plain.duration(), "{plain:?}\n{aware:?}");
    assert!(aware.checkpoint_requests > 0 && plain.checkpoint_requests == 0);
    assert!(plain.evicted_gangs >= 2 && aware.evicted_gangs >= 2);

    // Jobs that only checkpoint periodically: evicted at their next checkpoint.
    let (cluster, workload) = small_day(false);
    let (_, reports) = drain::simulate_upgrade(
        &cluster,
        &workload,
        &SimConfig::default(),
        &o,
        5 * HOUR + 17 * MIN,
        &drain::Strategy::ALL,
    )
    .unwrap();
    let (plain, aware) = (&reports[0], &reports[1]);
    assert!(aware.evicted_at_checkpoint > 0, "{aware:?}");
    assert!(
        aware.lost_gpu_hours < plain.lost_gpu_hours,
        "plain {plain:?}\naware {aware:?}"
    );
}

#[test]
fn a_node_cordoned_before_its_batch_stays_cordoned_and_gone_nodes_are_skipped() {
    let mut cordoned = node("gpu-1", 8);
    cordoned.unschedulable = true;
    let cluster = SimCluster {
        nodes: vec![node("gpu-0", 8), cordoned, node("gpu-2", 8)],
        events: Vec::new(),
    };
    let (_, workload) = small_day(true);
    let plan = plan(&cluster.nodes, &options(1, 8)).unwrap();
    let mut smaller = cluster.clone();
    smaller.nodes.pop();
    let mut sim = Simulation::new(&smaller, &workload, SimConfig::default()).unwrap();
    let report = run_upgrade(&mut sim, &plan, drain::Strategy::Plain, HOUR, &mut |_| {}).unwrap();
    assert_eq!(report.nodes_upgraded, 2);
    assert_eq!(report.nodes_gone, ["gpu-2"]);
    let cordons: Vec<(String, bool)> = sim
        .scheduler()
        .cluster()
        .iter()
        .map(|(_, n)| (n.spec.name.clone(), n.spec.unschedulable))
        .collect();
    assert_eq!(
        cordons,
        [("gpu-0".to_string(), false), ("gpu-1".to_string(), true)]
    );
}

/// What the observer saw: the most upgraded nodes and GPUs cordoned at once, and gangs
/// seen with members both running and waiting.
#[derive(Default, Debug)]
struct Seen {
    nodes: u32,
    gpus: u32,
    partial_gangs: Vec<String>,
}

fn observe(sim: &Simulation<'_>, seen: &mut Seen) {
    let scheduler = sim.scheduler();
    let (mut nodes, mut gpus) = (0, 0);
    for (_, n) in scheduler.cluster().iter() {
        if n.spec.unschedulable {
            nodes += 1;
            gpus += n.gpu_count();
        }
    }
    seen.nodes = seen.nodes.max(nodes);
    seen.gpus = seen.gpus.max(gpus);
    let mut gangs: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for (_, p) in scheduler.pods() {
        if let Some(m) = &p.spec.gang {
            let entry = gangs.entry(m.gang.clone()).or_default();
            match p.phase {
                PodPhase::Bound { .. } => entry.0 += 1,
                PodPhase::Pending => entry.1 += 1,
                PodPhase::Gone => {}
            }
        }
    }
    for (gang, (bound, pending)) in gangs {
        if bound > 0 && pending > 0 {
            seen.partial_gangs.push(gang);
        }
    }
}

/// A job: (pods, GPUs each, checkpoint interval in minutes, answers requests, arrival in
/// minutes).
type JobShape = (u32, u32, Option<u64>, bool, u64);

fn arb_day() -> impl Gen<Value = (Vec<u32>, Vec<JobShape>)> {
    (
        proptest::collection::vec(prop_oneof![Just(0u32), Just(4), Just(8)], 2..7),
        proptest::collection::vec(
            (
                1u32..4,
                prop_oneof![Just(1u32), Just(2), Just(4)],
                proptest::option::of(5u64..90),
                any::<bool>(),
                0u64..120,
            ),
            1..10,
        ),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn plans_cover_every_node_once_within_the_limits(
        gpus in proptest::collection::vec(prop_oneof![Just(0u32), Just(4), Just(8)], 1..20),
        max_nodes in 1u32..5,
        max_gpus in 8u32..40,
    ) {
        let nodes: Vec<NodeSpec> =
            gpus.iter().enumerate().map(|(i, &g)| node(&format!("n-{i:02}"), g)).collect();
        let plan = plan(&nodes, &options(max_nodes, max_gpus)).unwrap();
        let mut covered: Vec<&String> = plan.batches.iter().flat_map(|b| &b.nodes).collect();
        covered.sort();
        prop_assert_eq!(covered.len(), nodes.len());
        covered.dedup();
        prop_assert_eq!(covered.len(), nodes.len());
        for b in &plan.batches {
            prop_assert!(!b.nodes.is_empty() && b.nodes.len() as u32 <= max_nodes);
            let sum: u32 = b.nodes.iter().map(|n| gpus[n[2..].parse::<usize>().unwrap()]).sum();
            prop_assert_eq!(sum, b.gpus);
            prop_assert!(b.gpus <= max_gpus);
        }
    }

    #[test]
    fn drains_stay_within_the_limits_and_never_split_a_gang(
        (node_gpus, jobs) in arb_day(),
        max_nodes in 1u32..4,
        extra_gpus in 0u32..16,
        start in 30u64..240,
    ) {
        let cluster = SimCluster {
            nodes: node_gpus.iter().enumerate().map(|(i, &g)| node(&format!("n-{i}"), g)).collect(),
            events: Vec::new(),
        };
        let mut workload = Workload::default();
        for (i, &(pods, gpus, interval, requests, arrival)) in jobs.iter().enumerate() {
            let template = trainer(gpus, interval, requests);
            if pods > 1 {
                gang_job(&mut workload, &format!("g-{i}"), pods, arrival * MIN, template);
            } else {
                workload.jobs.push(PodSet::pod("ml", format!("p-{i}"), arrival * MIN, 20 * HOUR, template));
            }
        }
        workload.jobs.sort_by_key(|j| j.arrival);
        let max_gpus = 8 + extra_gpus;
        let o = PlanOptions { max_nodes, max_gpus, node_duration: 30 * MIN, ..Default::default() };
        let plan = plan(&cluster.nodes, &o).unwrap();
        for strategy in drain::Strategy::ALL {
            let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
            let mut seen = Seen::default();
            let report = run_upgrade(&mut sim, &plan, strategy, start * MIN, &mut |s| observe(s, &mut seen)).unwrap();
            prop_assert!(seen.nodes <= max_nodes, "{strategy}: {seen:?}");
            prop_assert!(seen.gpus <= max_gpus, "{strategy}: {seen:?}");
            prop_assert!(seen.partial_gangs.is_empty(), "{strategy}: {seen:?}");
            prop_assert_eq!(report.nodes_upgraded as usize, cluster.nodes.len());
            // Every node is back in service at the end.
            prop_assert!(sim.scheduler().cluster().iter().all(|(_, n)| !n.spec.unschedulable));
        }
    }
}
