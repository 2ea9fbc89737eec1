//! The simulator end to end on small in-code scenarios.

use kestrel_core::*;
use kestrel_sim::generator::{generate, GeneratorConfig};
use kestrel_sim::workload::ClusterEvent;
use kestrel_sim::*;

use kestrel_test_support::engine::gpu_node;

fn job(
    name: &str,
    kind: JobKind,
    gpus: u32,
    arrival: Millis,
    duration: Option<Millis>,
    parallelism: u32,
    completions: u32,
) -> PodSet {
    PodSet {
        kind,
        source_kind: format!("{kind:?}"),
        namespace: "team".into(),
        name: name.into(),
        arrival,
        duration,
        parallelism,
        completions,
        template: PodSpec::new(
            "",
            "",
            Demand {
                resources: Resources::new(1000, 1 << 30),
                gpu: GpuRequest::Whole(gpus),
            },
        ),
        gpu_utilization: 0.5,
    }
}

fn run(cluster: &SimCluster, workload: &Workload) -> SimReport {
    simulate(cluster, workload, SimConfig::default(), &mut |_, _| {}).unwrap()
}

#[test]
fn a_job_runs_parallelism_pods_at_a_time_until_completions() {
    let cluster = SimCluster {
        nodes: vec![gpu_node("a", 8)],
        events: vec![],
    };
    // 5 completions, 2 at a time, 10 s each: 3 waves -> done at 30 s.
    let workload = Workload {
        jobs: vec![job("batch", JobKind::Job, 1, 0, Some(10_000), 2, 5)],
        ..Default::default()
    };
    let r = run(&cluster, &workload);
    assert_eq!(r.pods.created, 5);
    assert_eq!(r.pods.completed, 5);
    assert_eq!(r.jobs.completed, 1);
    assert_eq!(r.completion_time.max, 30.0);
    assert_eq!(r.span, 30_000);
    // Time-weighted: 2 of 8 GPUs for 20 s, 1 for 10 s, over 30 s.
    let expect = (2.0 * 20.0 + 10.0) / (8.0 * 30.0);
    assert!(
        (r.gpu_allocation_mean - expect).abs() < 1e-9,
        "{}",
        r.gpu_allocation_mean
    );
    assert!((r.gpu_utilization_mean - expect / 2.0).abs() < 1e-9);
}

#[test]
fn waiting_work_is_measured_and_unplaceable_pods_stay_pending_with_reasons() {
    let cluster = SimCluster {
        nodes: vec![gpu_node("a", 8)],
        events: vec![],
    };
    let workload = Workload {
        jobs: vec![
            job("first", JobKind::Pod, 8, 0, Some(60_000), 1, 1),
            job("second", JobKind::Pod, 8, 1_000, Some(60_000), 1, 1),
            job("huge", JobKind::Pod, 16, 0, Some(1_000), 1, 1),
        ],
        ..Default::default()
    };
    let r = run(&cluster, &workload);
    assert_eq!(r.jobs.completed, 2);
    assert_eq!(r.queue_wait.max, 59.0, "second waits for first");
    assert_eq!(r.pods.pending_at_end, 1);
    assert_eq!(r.pending_at_end.len(), 1);
    assert_eq!(r.pending_at_end[0].pod, "team/huge");
    assert!(
        r.pending_at_end[0]
            .reason
            .contains("Insufficient nvidia.com/gpu"),
        "{:?}",
        r.pending_at_end
    );
    assert!(r
        .pending_reasons
        .iter()
        .any(|(reason, _)| reason.contains("Insufficient")));
}

#[test]
fn node_events_cordon_remove_and_add() {
    let mut added = gpu_node("c", 8);
    added.labels.insert("late".into(), "yes".into());
    let cluster = SimCluster {
        nodes: vec![gpu_node("a", 8), gpu_node("b", 8)],
        events: vec![
            ClusterEvent {
                at: 5_000,
                change: ClusterChange::Cordon("b".into()),
            },
            ClusterEvent {
                at: 10_000,
                change: ClusterChange::RemoveNode("a".into()),
            },
            ClusterEvent {
                at: 20_000,
                change: ClusterChange::AddNode(added),
            },
        ],
    };
    let workload = Workload {
        jobs: vec![
            // Lands on a, is evicted at 10 s, has nowhere to go (b cordoned) until c joins.
            job("victim", JobKind::Pod, 8, 0, Some(100_000), 1, 1),
            job("later", JobKind::Pod, 1, 6_000, Some(1_000), 1, 1),
        ],
        ..Default::default()
    };
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    while sim.now() < 10_000 {
        assert!(sim.step().unwrap());
    }
    assert!(
        sim.placements()
            .iter()
            .all(|(pod, _, _)| pod != "team/victim"),
        "evicted pod is not bound"
    );
    assert_eq!(
        sim.scheduler().pending_count(),
        2,
        "victim and later both wait"
    );
    while sim.step().unwrap() {}
    let placements = sim.placements();
    assert!(placements.is_empty(), "{placements:?}");
    let r = sim.finish();
    assert_eq!(r.pods.evicted, 1);
    assert_eq!(r.jobs.completed, 2);
    assert_eq!(r.nodes, 2);
    // victim reran from 20 s for 100 s; later (one GPU) waited for it to end.
    assert_eq!(r.span, 121_000, "later ran after victim on c");
}

#[test]
fn same_seed_same_report_and_until_stops_early() {
    let cluster = SimCluster {
        nodes: (0..4).map(|i| gpu_node(&format!("n{i}"), 8)).collect(),
        events: vec![],
    };
    let workload = generate(&GeneratorConfig {
        jobs: 300,
        span: 3_600_000,
        seed: 3,
    });
    let config = SimConfig {
        policy: Policy::Random,
        seed: 9,
        ..Default::default()
    };
    let a = simulate(&cluster, &workload, config.clone(), &mut |_, _| {}).unwrap();
    let b = simulate(&cluster, &workload, config.clone(), &mut |_, _| {}).unwrap();
    assert_eq!(a, b);
    assert!(a.pods.scheduled > 0 && a.samples.len() > 10);
    let short = simulate(
        &cluster,
        &workload,
        SimConfig {
            until: Some(600_000),
            ..config
        },
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(short.span, 600_000);
    assert!(short.pods.created < a.pods.created);
}

#[test]
fn an_empty_cluster_is_refused() {
    let e = Simulation::new(
        &SimCluster::default(),
        &Workload::default(),
        SimConfig::default(),
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("no nodes"), "{e}");
}

const GANG_WORKLOAD: &str = r#"
apiVersion: kueue.x-k8s.io/v1alpha1
kind: Topology
metadata: {name: default}
spec:
  levels:
  - nodeLabel: topology.kestrel.dev/block
  - nodeLabel: topology.kestrel.dev/rack
  - nodeLabel: kubernetes.io/hostname
---
apiVersion: scheduling.kestrel.dev/v1alpha1
kind: PodGroup
metadata: {name: llama, namespace: ml}
spec:
  minMember: 4
  topology: {required: topology.kestrel.dev/rack}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: llama
  namespace: ml
  annotations: {kestrel.dev/sim-duration: "1h"}
spec:
  parallelism: 4
  completions: 4
  completionMode: Indexed
  template:
    metadata:
      labels: {scheduling.kestrel.dev/pod-group: llama}
    spec:
      containers:
      - name: trainer
        image: trainer
        resources:
          limits: {nvidia.com/gpu: 8}
---
apiVersion: v1
kind: Pod
metadata:
  name: grp-0
  namespace: ml
  labels: {kueue.x-k8s.io/pod-group-name: grp}
  annotations:
    kueue.x-k8s.io/pod-group-total-count: "2"
    kestrel.dev/sim-duration: "30m"
spec:
  containers:
  - name: c
    image: x
    resources:
      limits: {nvidia.com/gpu: 4}
"#;

fn racked_cluster() -> SimCluster {
    SimCluster {
        nodes: (0..6)
            .map(|i| {
                let mut n = gpu_node(&format!("n{i}"), 8);
                n.labels.insert(RACK_LABEL.into(), format!("r{}", i / 3));
                n.labels.insert(BLOCK_LABEL.into(), "b0".into());
                n
            })
            .collect(),
        events: vec![],
    }
}

#[test]
fn gangs_from_manifests_start_whole_in_one_rack_or_wait() {
    let workload =
        kestrel_sim::manifests::load_manifests(&[("w.yaml".into(), GANG_WORKLOAD.to_string())])
            .unwrap();
    assert_eq!(workload.gangs.len(), 2, "{:?}", workload.gangs);
    assert_eq!(workload.topology_levels.len(), 3);
    // Racks hold 3 nodes: the 4-pod rack-bound gang never starts; the Kueue group of two
    // has only one pod, so it waits too.
    let r = run(&racked_cluster(), &workload);
    assert_eq!(r.gangs.declared, 2);
    assert_eq!(r.gangs.started, 0);
    assert_eq!(r.pods.scheduled, 0);
    assert_eq!(r.pods.pending_at_end, 5);
    let reasons: Vec<&str> = r.pending_at_end.iter().map(|p| p.reason.as_str()).collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("needs all its pods in one topology.kestrel.dev/rack domain")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("gang ml/grp is incomplete: 1 of 2 pods exist")),
        "{reasons:?}"
    );
    // With four nodes per rack it starts, whole, in one rack.
    let mut cluster = racked_cluster();
    for n in &mut cluster.nodes[3..] {
        n.labels.insert(RACK_LABEL.into(), "r0".into());
    }
    cluster.nodes.truncate(4);
    let r = run(&cluster, &workload);
    assert_eq!((r.gangs.started, r.gangs.started_in_one_rack), (1, 1));
    assert_eq!(r.pods.scheduled, 4);
}

#[test]
fn a_gang_level_no_node_carries_is_refused() {
    let workload = kestrel_sim::manifests::load_manifests(&[(
        "w.yaml".into(),
        GANG_WORKLOAD
            .replace(
                "{required: topology.kestrel.dev/rack}",
                "{required: example.com/pod}",
            )
            .replace(
                "  - nodeLabel: kubernetes.io/hostname\n",
                "  - nodeLabel: kubernetes.io/hostname\n  - nodeLabel: example.com/pod\n",
            ),
    )])
    .unwrap();
    let e = Simulation::new(&racked_cluster(), &workload, SimConfig::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("ml/llama") && e.contains("example.com/pod") && e.contains("no node carries"),
        "{e}"
    );
}

#[test]
fn single_numa_node_pods_from_manifests_wait_for_one_socket() {
    let cluster = kestrel_sim::cluster_spec::load_cluster_spec(
        std::path::Path::new("cluster.yaml"),
        r#"
apiVersion: sim.kestrel.dev/v1alpha1
kind: SimCluster
metadata: {name: one-dgx}
spec:
  pools:
  - {name: gpu, count: 1, cpu: "224", memory: 2Ti, topology: dgx-h100,
     gpu: {model: H100, count: 8, memoryMiB: 81559}}
"#,
    )
    .unwrap();
    // Two 3-GPU pods leave one free GPU on each socket until the first ends at 1 h.
    let pod = |name: &str, gpus: u32, arrival: &str, extra: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  annotations:\n    kestrel.dev/sim-arrival: \"{arrival}\"\n    kestrel.dev/sim-duration: \"1h\"\n{extra}spec:\n  containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}}}]\n"
        )
    };
    let aligned = "    kestrel.dev/numa-policy: single-numa-node\n";
    let text = [
        pod("a", 3, "0", ""),
        pod("b", 3, "0", ""),
        pod("aligned", 2, "1m", aligned),
        pod("plain", 2, "2m", ""),
    ]
    .join("---\n");
    let workload = kestrel_sim::manifests::load_manifests(&[("w.yaml".into(), text)]).unwrap();
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    sim.run_to(5 * 60_000).unwrap();
    let placed = |sim: &Simulation, name: &str| {
        sim.placements()
            .into_iter()
            .find(|(key, _, _)| key == &format!("default/{name}"))
            .map(|(_, _, gpus)| gpus.indices())
    };
    // The plain pod takes the two stray GPUs across sockets; the aligned one waits.
    assert_eq!(placed(&sim, "plain").unwrap().len(), 2);
    assert_eq!(placed(&sim, "aligned"), None);
    let reason = sim
        .scheduler()
        .pods()
        .find(|(_, p)| p.spec.name == "aligned")
        .and_then(|(_, p)| p.pending_reason.clone())
        .unwrap();
    assert!(reason.to_string().contains("on one NUMA node"), "{reason}");
    sim.run_to(3_600_000).unwrap();
    let gpus = placed(&sim, "aligned").expect("starts when a socket frees up");
    assert!(gpus.iter().all(|g| g / 4 == gpus[0] / 4), "{gpus:?}");
}

#[test]
fn topology_blind_comparison_counts_gangs_both_ways() {
    // Two racks of two nodes, one NVLink clique per rack.
    let cluster = SimCluster {
        nodes: (0..4)
            .map(|i| {
                let mut n = gpu_node(&format!("n{i}"), 8);
                n.labels.insert(RACK_LABEL.into(), format!("r{}", i / 2));
                n.labels
                    .insert(GPU_CLIQUE_LABEL.into(), format!("c{}", i / 2));
                n
            })
            .collect(),
        events: vec![],
    };
    // A 4-GPU pod takes half of n0 first; then a 2 x 8-GPU gang that prefers one rack.
    let text = r#"
apiVersion: kueue.x-k8s.io/v1alpha1
kind: Topology
metadata: {name: default}
spec:
  levels:
  - nodeLabel: topology.kestrel.dev/rack
  - nodeLabel: kubernetes.io/hostname
---
apiVersion: v1
kind: Pod
metadata: {name: small, annotations: {kestrel.dev/sim-duration: "2h"}}
spec:
  containers: [{name: c, resources: {limits: {nvidia.com/gpu: 4}}}]
---
apiVersion: scheduling.kestrel.dev/v1alpha1
kind: PodGroup
metadata: {name: train}
spec:
  minMember: 2
  topology: {preferred: topology.kestrel.dev/rack}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  annotations: {kestrel.dev/sim-duration: "1h", kestrel.dev/sim-arrival: "1m"}
spec:
  parallelism: 2
  completions: 2
  completionMode: Indexed
  template:
    metadata:
      labels: {scheduling.kestrel.dev/pod-group: train}
    spec:
      containers: [{name: c, resources: {limits: {nvidia.com/gpu: 8}}}]
"#;
    let workload =
        kestrel_sim::manifests::load_manifests(&[("w.yaml".into(), text.to_string())]).unwrap();
    let compare = || {
        simulate_with_topology_blind(&cluster, &workload, SimConfig::default(), &mut |_, _| {})
            .unwrap()
    };
    let r = compare();
    assert_eq!(r, compare(), "deterministic");
    assert_eq!(
        r.gangs,
        run(&cluster, &workload).gangs,
        "the first run is the plain one"
    );
    let g = &r.gangs;
    assert_eq!(
        (
            g.started,
            g.started_in_one_rack,
            g.started_in_one_nvlink_domain
        ),
        (1, 1, 1)
    );
    // Blind to racks, the gang takes the first empty node (n1) and the next (n2).
    let b = r.topology_blind_gangs.as_ref().unwrap();
    assert_eq!(
        (
            b.started,
            b.started_in_one_rack,
            b.started_in_one_nvlink_domain
        ),
        (1, 0, 0)
    );
    let text = kestrel_sim::summary::render_summary(&r);
    assert!(
        text.contains(
            "Gangs             declared 1, started 1 (1 in one rack, 1 in one NVLink domain)"
        ),
        "{text}"
    );
    assert!(
        text.contains("  topology-blind  started 1 (0 in one rack, 0 in one NVLink domain)"),
        "{text}"
    );
    // Without the comparison, neither the field nor the line.
    let plain = run(&cluster, &workload);
    assert_eq!(plain.topology_blind_gangs, None);
    assert!(!kestrel_sim::summary::render_summary(&plain).contains("topology-blind"));
    assert!(!serde_json::to_string(&plain)
        .unwrap()
        .contains("topology_blind"));
}

#[test]
fn topology_blind_drops_every_gang_topology_request_only() {
    let workload =
        kestrel_sim::manifests::load_manifests(&[("w.yaml".into(), GANG_WORKLOAD.to_string())])
            .unwrap();
    let blind = workload.topology_blind();
    assert!(workload
        .gangs
        .iter()
        .any(|g| g.topology != GangTopology::default()));
    assert!(blind
        .gangs
        .iter()
        .all(|g| g.topology == GangTopology::default()));
    assert_eq!(blind.jobs, workload.jobs);
    assert_eq!(blind.gangs.len(), workload.gangs.len());
    assert_eq!(blind.topology_levels, workload.topology_levels);
}
