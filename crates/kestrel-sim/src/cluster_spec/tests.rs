use super::*;

fn load(text: &str) -> Result<SimCluster, LoadError> {
    load_cluster_spec(Path::new("cluster.yaml"), text)
}

fn err(text: &str) -> String {
    load(text).unwrap_err().to_string()
}

const HEAD: &str = "apiVersion: sim.kestrel.dev/v1alpha1\nkind: SimCluster\nmetadata: {name: t}\n";

fn spec(body: &str) -> String {
    format!("{HEAD}spec:\n{body}")
}

const GPU_POOL: &str = r#"
  pools:
  - name: gpu
    count: 10
    cpu: "224"
    memory: 2Ti
    ephemeralStorage: 28Ti
    pods: 250
    gpu: {model: H100-80GB, count: 8, memoryMiB: 81559}
    topology: dgx-h100
    racks: 4
    block: b1
    labels: {team: ml, tier: 1}
    taints: [{key: nvidia.com/gpu, value: "true", effect: NoSchedule}]
    extendedResources: {"rdma/rdma_shared_device_a": "8"}
  - name: cpu
    count: 2
    namePrefix: c
    cpu: 64
    memory: 256Gi
"#;

#[test]
fn mig_pools_publish_every_gpu_with_its_partitions_and_bad_ones_name_the_field() {
    let pool = |gpu: &str| {
        spec(&format!(
                "  pools:\n  - name: mig\n    count: 2\n    cpu: 64\n    memory: 256Gi\n    gpu: {gpu}\n"
            ))
    };
    let c = load(&pool(
        "{model: NVIDIA H100 80GB HBM3, count: 4, memoryMiB: 81559, publish: dra, partitions: mig}",
    ))
    .unwrap();
    assert_eq!(c.nodes.len(), 2);
    for node in &c.nodes {
        assert_eq!(node.gpus.len(), 4);
        assert!(node.gpus.iter().all(|g| g
            .dra
            .as_ref()
            .and_then(|d| d.partitions.as_ref())
            .is_some_and(|p| p.devices.len() == 18)));
    }
    let e = err(&pool(
        "{model: NVIDIA H100 80GB HBM3, count: 4, memoryMiB: 81559, partitions: mig}",
    ));
    assert!(
        e.contains("gpu.partitions") && e.contains("add publish: dra"),
        "{e}"
    );
    let e = err(&pool(
        "{model: NVIDIA H100 80GB HBM3, count: 4, memoryMiB: 81559, publish: dra, partitions: mps}",
    ));
    assert!(
        e.contains("gpu.partitions") && e.contains("\"mps\" is not a way"),
        "{e}"
    );
}

#[test]
fn stamps_pools_with_names_resources_labels_and_taints() {
    let c = load(&spec(GPU_POOL)).unwrap();
    assert_eq!(c.nodes.len(), 12);
    let names: Vec<&str> = c.nodes.iter().map(|n| n.name.as_str()).collect();
    // Zero-padded to the width of count-1: 10 nodes are gpu-0 .. gpu-9.
    assert_eq!(&names[..3], ["gpu-0", "gpu-1", "gpu-2"]);
    assert_eq!(&names[9..], ["gpu-9", "c0", "c1"]);
    let n = &c.nodes[0];
    assert_eq!(n.allocatable.cpu_milli, 224_000);
    assert_eq!(n.allocatable.memory_bytes, 2 << 40);
    assert_eq!(n.allocatable.ephemeral_storage_bytes, 28 << 40);
    assert_eq!(n.allocatable.extended("rdma/rdma_shared_device_a"), 8);
    assert_eq!(n.max_pods, 250);
    assert_eq!(n.taints.len(), 1);
    assert_eq!(n.taints[0].to_string(), "nvidia.com/gpu=true:NoSchedule");
    let l = |k: &str| n.labels.get(k).map(String::as_str);
    assert_eq!(l(HOSTNAME_LABEL), Some("gpu-0"));
    assert_eq!(l(GPU_PRODUCT_LABEL), Some("H100-80GB"));
    assert_eq!(l(GPU_COUNT_LABEL), Some("8"));
    assert_eq!(l(GPU_MEMORY_LABEL), Some("81559"));
    assert_eq!(l(GPU_PRESENT_LABEL), Some("true"));
    assert_eq!(l(BLOCK_LABEL), Some("b1"));
    assert_eq!(l("team"), Some("ml"));
    assert_eq!(l("tier"), Some("1"));
    // The labels every kubelet sets.
    assert_eq!(l("kubernetes.io/os"), Some("linux"));
    assert_eq!(l("kubernetes.io/arch"), Some("amd64"));
    let cpu = &c.nodes[10];
    assert_eq!(cpu.allocatable.cpu_milli, 64_000);
    assert_eq!(cpu.max_pods, DEFAULT_MAX_PODS);
    assert!(cpu.gpus.is_empty() && cpu.taints.is_empty());
    assert_eq!(cpu.labels.get(GPU_PRODUCT_LABEL), None);
    assert_eq!(cpu.labels.get(RACK_LABEL), None);
    assert!(c.events.is_empty());
}

#[test]
fn racks_fill_in_order() {
    let c = load(&spec(GPU_POOL)).unwrap();
    // 10 nodes over 4 racks: 3 per rack, the last rack holds one.
    let racks: Vec<&str> = c.nodes[..10].iter().map(|n| n.rack().unwrap()).collect();
    assert_eq!(
        racks,
        [
            "gpu-rack-0",
            "gpu-rack-0",
            "gpu-rack-0",
            "gpu-rack-1",
            "gpu-rack-1",
            "gpu-rack-1",
            "gpu-rack-2",
            "gpu-rack-2",
            "gpu-rack-2",
            "gpu-rack-3"
        ]
    );
    let c = load(&spec(
        "  pools: [{name: g, count: 5, nodesPerRack: 2, cpu: 1, memory: 1Gi}]\n",
    ))
    .unwrap();
    let racks: Vec<&str> = c.nodes.iter().map(|n| n.rack().unwrap()).collect();
    assert_eq!(
        racks,
        ["g-rack-0", "g-rack-0", "g-rack-1", "g-rack-1", "g-rack-2"]
    );
}

#[test]
fn dgx_h100_template_lays_out_gpus_nics_numa_and_switches() {
    let c = load(&spec(GPU_POOL)).unwrap();
    let n = &c.nodes[0];
    assert_eq!(n.gpus.len(), 8);
    assert_eq!(n.nics.len(), 8);
    for (i, g) in n.gpus.iter().enumerate() {
        let i = i as u32;
        assert_eq!(g.index, i);
        assert_eq!(g.model, "H100-80GB");
        assert_eq!(g.memory_mib, 81559);
        assert_eq!(g.numa_node, if i < 4 { 0 } else { 1 });
        assert_eq!(g.nvlink_island, Some(0));
        assert_eq!(g.pcie_switch, Some(i / 2));
    }
    for (i, nic) in n.nics.iter().enumerate() {
        let i = i as u32;
        assert_eq!(nic.name, format!("mlx5_{i}"));
        assert_eq!(nic.gbps, 400);
        assert_eq!(nic.numa_node, i / 4);
        assert_eq!(nic.pcie_switch, Some(i / 2));
    }
    let near: Vec<&str> = n.nics_of_gpu(5).map(|x| x.name.as_str()).collect();
    assert_eq!(near, ["mlx5_4", "mlx5_5"]);
}

#[test]
fn pcie_and_flat_templates() {
    let (gpus, nics) = GpuTopology::Pcie4Gpu.devices("L40S", 46068, 4);
    let numa: Vec<u32> = gpus.iter().map(|g| g.numa_node).collect();
    let sw: Vec<Option<u32>> = gpus.iter().map(|g| g.pcie_switch).collect();
    assert_eq!(numa, [0, 0, 1, 1]);
    assert_eq!(sw, [Some(0), Some(0), Some(1), Some(1)]);
    assert!(gpus.iter().all(|g| g.nvlink_island.is_none()));
    assert!(nics.is_empty());
    let (gpus, nics) = GpuTopology::Flat.devices("T4", 15360, 2);
    assert_eq!(gpus.len(), 2);
    assert!(gpus
        .iter()
        .all(|g| g.numa_node == 0 && g.nvlink_island.is_none() && g.pcie_switch.is_none()));
    assert!(nics.is_empty());
    for name in GpuTopology::NAMES {
        assert_eq!(GpuTopology::parse(name).unwrap().name(), name);
    }
    // A pool without topology gets the flat layout.
    let c = load(&spec(
            "  pools: [{name: g, count: 1, cpu: 1, memory: 1Gi, gpu: {model: T4, count: 2, memoryMiB: 15360}}]\n",
        ))
        .unwrap();
    assert_eq!(c.nodes[0].gpus.len(), 2);
    assert_eq!(c.nodes[0].name, "g-0");
}

#[test]
fn events_are_sorted_and_add_continues_the_pools_naming() {
    let text = spec(&format!(
        "{GPU_POOL}  events:\n\
             \x20 - {{at: 6h, add: {{pool: gpu, count: 2}}}}\n\
             \x20 - {{at: \"2h\", cordon: gpu-3}}\n\
             \x20 - {{at: 03:00, uncordon: gpu-3}}\n\
             \x20 - {{at: 18000, remove: gpu-7}}\n\
             \x20 - {{at: 7h, cordon: gpu-11}}\n"
    ));
    let c = load(&text).unwrap();
    let h = 3_600_000;
    let summary: Vec<(kestrel_core::Millis, String)> = c
        .events
        .iter()
        .map(|e| {
            let what = match &e.change {
                ClusterChange::AddNode(n) => format!("add {} {:?}", n.name, n.rack()),
                ClusterChange::RemoveNode(n) => format!("remove {n}"),
                ClusterChange::Cordon(n) => format!("cordon {n}"),
                ClusterChange::Uncordon(n) => format!("uncordon {n}"),
            };
            (e.at, what)
        })
        .collect();
    assert_eq!(
        summary,
        [
            (2 * h, "cordon gpu-3".to_string()),
            (3 * h, "uncordon gpu-3".to_string()),
            (5 * h, "remove gpu-7".to_string()),
            (6 * h, "add gpu-10 Some(\"gpu-rack-3\")".to_string()),
            (6 * h, "add gpu-11 Some(\"gpu-rack-3\")".to_string()),
            (7 * h, "cordon gpu-11".to_string()),
        ]
    );
    if let ClusterChange::AddNode(n) = &c.events[3].change {
        assert_eq!(n.gpus.len(), 8);
        assert_eq!(n.labels.get(HOSTNAME_LABEL).unwrap(), "gpu-10");
    }
}

fn assert_names(e: &str, parts: &[&str]) {
    assert!(e.starts_with("cluster.yaml: "), "{e}");
    for p in parts {
        assert!(e.contains(p), "{e:?} lacks {p:?}");
    }
}

#[test]
fn pool_errors_name_file_pool_and_field() {
    let pool = |extra: &str| {
        spec(&format!(
            "  pools:\n  - {{name: gpu, count: 2, cpu: 8, {extra}}}\n"
        ))
    };
    assert_names(
        &err(&pool("memory: 12Gx")),
        &["pool gpu", "field memory", "\"12Gx\""],
    );
    let pool = |extra: &str| pool(&format!("memory: 1Gi, {extra}"));
    assert_names(
        &err(&pool("ephemeralStorage: -1Gi")),
        &["pool gpu", "field ephemeralStorage", "negative"],
    );
    assert_names(
        &err(&pool("extendedResources: {a/b: x}")),
        &["pool gpu", "field extendedResources[\"a/b\"]", "\"x\""],
    );
    assert_names(
        &err(&pool(
            "gpu: {model: A, count: 4, memoryMiB: 1}, topology: dgx-h100",
        )),
        &["pool gpu", "field gpu.count", "dgx-h100", "8"],
    );
    assert_names(
        &err(&pool(
            "gpu: {model: A, count: 4, memoryMiB: 1}, topology: nvl72",
        )),
        &["pool gpu", "field topology", "nvl72", "dgx-h100"],
    );
    assert_names(
        &err(&pool("topology: dgx-h100")),
        &["pool gpu", "field topology"],
    );
    assert_names(
        &err(&pool("taints: [{key: a, effect: NoSchedul}]")),
        &[
            "pool gpu",
            "field taints[0].effect",
            "NoSchedul",
            "PreferNoSchedule",
        ],
    );
    assert_names(
        &err(&pool("racks: 3")),
        &["pool gpu", "field racks", "nodesPerRack"],
    );
    assert_names(
        &err(&pool("racks: 1, nodesPerRack: 1")),
        &["pool gpu", "field racks", "not both"],
    );
    assert_names(
        &err(&pool("extendedResources: {nvidia.com/gpu: 8}")),
        &["pool gpu", "extendedResources", "gpu.count"],
    );
    assert_names(
        &err(&pool("gpus: 8")),
        &["pool gpu", "unknown field `gpus`"],
    );
    assert_names(
        &err(&pool("labels: {kubernetes.io/hostname: x}")),
        &["pool gpu", "kubernetes.io/hostname", "remove it"],
    );
}

#[test]
fn duplicate_pools_and_node_names_are_errors() {
    let e = err(&spec(
            "  pools:\n  - {name: a, count: 1, cpu: 1, memory: 1Gi}\n  - {name: a, count: 1, cpu: 1, memory: 1Gi}\n",
        ));
    assert_names(&e, &["pool a", "field name", "own name"]);
    let e = err(&spec(
            "  pools:\n  - {name: a, count: 2, namePrefix: node-, cpu: 1, memory: 1Gi}\n  - {name: b, count: 1, namePrefix: node-, cpu: 1, memory: 1Gi}\n",
        ));
    assert_names(&e, &["pool b", "field namePrefix", "\"node-0\""]);
    // An added node that collides with another pool's node.
    let e = err(&spec(
            "  pools:\n  - {name: a, count: 1, namePrefix: node-, cpu: 1, memory: 1Gi}\n  - {name: b, count: 2, namePrefix: node-, nodesPerRack: 1, cpu: 1, memory: 1Gi}\n",
        ));
    assert_names(&e, &["pool b", "\"node-0\""]);
    let e = err(&spec(
            "  pools:\n  - {name: a, count: 1, namePrefix: node-, cpu: 1, memory: 1Gi}\n  - {name: b, count: 0, namePrefix: node-, cpu: 1, memory: 1Gi}\n  events:\n  - {at: 1h, add: {pool: a, count: 1}}\n  - {at: 2h, add: {pool: b, count: 2}}\n",
        ));
    assert_names(&e, &["spec.events[1]", "field add.pool", "\"node-0\""]);
}

#[test]
fn event_errors_name_the_event_and_field() {
    let with = |event: &str| {
        spec(&format!(
                "  pools: [{{name: g, count: 2, cpu: 1, memory: 1Gi}}]\n  events:\n  - {{at: 1h, cordon: g-0}}\n  - {event}\n"
            ))
    };
    assert_names(
        &err(&with("{at: 2h, cordon: g-9}")),
        &["spec.events[1]", "field cordon", "g-9"],
    );
    assert_names(
        &err(&with("{at: 2h, add: {pool: gpu, count: 1}}")),
        &["spec.events[1]", "field add.pool", "\"gpu\"", "[\"g\"]"],
    );
    assert_names(
        &err(&with("{at: 2h, cordon: g-0, remove: g-1}")),
        &["spec.events[1]", "exactly one"],
    );
    assert_names(&err(&with("{at: 2h}")), &["spec.events[1]", "exactly one"]);
    assert_names(
        &err(&with("{at: soon, cordon: g-0}")),
        &["spec.events[1]", "field at", "\"soon\""],
    );
    assert_names(
        &err(&with("{at: 2h, drain: g-0}")),
        &["spec.events[1]", "unknown field `drain`"],
    );
    // A removed node cannot be cordoned later; an event earlier in time cannot name it.
    let e = err(&with("{at: 30m, remove: g-0}"));
    assert_names(&e, &["spec.events[0]", "field cordon", "g-0", "1h"]);
}

#[test]
fn document_errors_name_the_file_and_field() {
    let e = err("apiVersion: v1\nkind: NodeList\nitems: []\n");
    assert_names(&e, &["field kind", "Node loader"]);
    let e = err("apiVersion: sim.kestrel.dev/v1\nkind: SimCluster\nspec: {pools: []}\n");
    assert_names(&e, &["SimCluster", "field apiVersion", "v1alpha1"]);
    let e = err(&format!("{HEAD}spec: {{pools: [], nodes: []}}\n"));
    assert_names(&e, &["SimCluster t", "unknown field `nodes`"]);
    assert_names(&err(""), &["empty"]);
    assert_names(
        &err(&format!(
            "{HEAD}spec: {{pools: []}}\n---\n{HEAD}spec: {{pools: []}}\n"
        )),
        &["2"],
    );
    assert_names(&err("a: [1, 2"), &["not valid YAML"]);
}
