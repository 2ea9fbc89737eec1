use super::*;
use kestrel_core::{TaintEffect, Toleration, GPU_RESOURCE};

/// Loads an example directory as `kestrel sim <dir>` does: `cluster.yaml` is the
/// cluster, every other `*.yaml` a workload file, in file-name order.
fn load_example_dir(dir: &Path) -> (crate::SimCluster, Workload) {
    let cluster_path = dir.join("cluster.yaml");
    let text = std::fs::read_to_string(&cluster_path).unwrap();
    let cluster = crate::cluster_spec::load_cluster_spec(&cluster_path, &text)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml") && !p.ends_with("cluster.yaml"))
        .collect();
    files.sort();
    let files: Vec<(PathBuf, String)> = files
        .into_iter()
        .map(|p| {
            let t = std::fs::read_to_string(&p).unwrap();
            (p, t)
        })
        .collect();
    let workload = load_manifests(&files).unwrap_or_else(|e| panic!("{e}"));
    (cluster, workload)
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// Whether a pod of `job` passes the static filters and fits an empty `node`.
fn fits(job: &PodSet, node: &kestrel_core::NodeSpec) -> bool {
    let t = &job.template;
    let c = &t.constraints;
    let rc = c.runtime_class.as_ref();
    let tolerations: Vec<&Toleration> = c
        .tolerations
        .iter()
        .chain(rc.into_iter().flat_map(|r| r.tolerations.iter()))
        .collect();
    let labels_match =
        |sel: &BTreeMap<String, String>| sel.iter().all(|(k, v)| node.labels.get(k) == Some(v));
    let gpus = match t.demand.gpu {
        GpuRequest::None => true,
        GpuRequest::Whole(n) => node.gpus.len() as u32 >= n,
        GpuRequest::Shared { .. } => !node.gpus.is_empty(),
        GpuRequest::Memory { mib } => node.gpus.iter().any(|g| g.memory_mib >= mib),
    };
    node.taints
        .iter()
        .filter(|x| x.effect != TaintEffect::PreferNoSchedule)
        .all(|x| tolerations.iter().any(|t| t.tolerates(x)))
        && labels_match(&c.node_selector)
        && rc.is_none_or(|r| labels_match(&r.node_selector))
        && c.affinity
            .required
            .as_ref()
            .is_none_or(|terms| terms.iter().any(|term| term.matches(node)))
        && node.allocatable.fits(&t.demand.resources)
        && gpus
}

#[test]
fn falcon_ai_example_loads_and_every_pod_fits_somewhere() {
    let (cluster, workload) = load_example_dir(&examples().join("falcon-ai"));
    let names: Vec<&str> = cluster.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(
        names,
        ["cp-0", "cp-1", "cp-2", "gpu-0", "gpu-1", "cpu-0", "cpu-1", "cpu-2", "cpu-3"]
    );
    for n in &cluster.nodes[..3] {
        assert_eq!(
            n.taints[0].to_string(),
            "node-role.kubernetes.io/control-plane:NoSchedule"
        );
        assert_eq!(
            n.labels
                .get("node-role.kubernetes.io/control-plane")
                .unwrap(),
            ""
        );
    }
    for n in &cluster.nodes[3..5] {
        assert_eq!(n.gpus.len(), 8);
        assert_eq!(n.nics.len(), 8);
        assert_eq!(n.allocatable.cpu_milli, 224_000);
        assert_eq!(n.allocatable.memory_bytes, 2 << 40);
        assert_eq!(n.taints[0].to_string(), "nvidia.com/gpu=true:NoSchedule");
    }
    let w = &workload.jobs;
    assert!((30..=80).contains(&w.len()), "{} jobs", w.len());
    let kinds: std::collections::BTreeSet<&str> =
        w.iter().map(|j| j.source_kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["Deployment", "Job", "Pod", "StatefulSet"]
            .into_iter()
            .collect()
    );
    assert!(w
        .iter()
        .any(|j| matches!(j.template.demand.gpu, GpuRequest::Shared { .. })));
    let day = 24 * 3_600_000;
    for j in w {
        assert!(j.arrival < day, "{} arrives after the day", j.name);
        let gpu = j.template.demand.gpu != GpuRequest::None;
        let tolerates_gpu = j
            .template
            .constraints
            .tolerations
            .iter()
            .any(|t| t.key == GPU_RESOURCE);
        assert_eq!(
            gpu, tolerates_gpu,
            "{}: GPU pods and only they tolerate the GPU taint",
            j.name
        );
        assert!(
            j.template.priority_class.is_some(),
            "{} has a PriorityClass",
            j.name
        );
        assert!(
            cluster.nodes.iter().any(|n| fits(j, n)),
            "{} fits no node of falcon-ai",
            j.name
        );
        let gpus_at_once = j.parallelism * j.template.demand.gpu.whole();
        assert!(
            gpus_at_once <= 16,
            "{} needs {gpus_at_once} GPUs at once",
            j.name
        );
    }
}

#[test]
fn falcon_ai_32_cluster_loads_with_racks_and_block() {
    let path = examples().join("falcon-ai-32/cluster.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let cluster =
        crate::cluster_spec::load_cluster_spec(&path, &text).unwrap_or_else(|e| panic!("{e}"));
    let gpu: Vec<_> = cluster
        .nodes
        .iter()
        .filter(|n| !n.gpus.is_empty())
        .collect();
    assert_eq!(gpu.len(), 32);
    assert_eq!(
        (gpu[0].name.as_str(), gpu[31].name.as_str()),
        ("gpu-00", "gpu-31")
    );
    for (i, n) in gpu.iter().enumerate() {
        assert_eq!(n.rack(), Some(format!("gpu-rack-{}", i / 8)).as_deref());
        assert_eq!(n.block(), Some("block-a"));
    }
    assert_eq!(cluster.nodes.len(), 39);
    // The falcon-ai workload runs unchanged on it.
    let (_, workload) = load_example_dir(&examples().join("falcon-ai"));
    for j in &workload.jobs {
        assert!(
            cluster.nodes.iter().any(|n| fits(j, n)),
            "{} fits no node",
            j.name
        );
    }
}

#[test]
fn teams_example_loads_with_queues_that_cover_its_pods() {
    let (cluster, w) = load_example_dir(&examples().join("teams"));
    let q = &w.queues;
    let cqs: Vec<&str> = q.cluster_queues.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(cqs, ["research", "prod", "interns"]);
    assert_eq!(
        (q.cohorts.len(), q.flavors.len(), q.local_queues.len()),
        (1, 1, 3)
    );
    assert_eq!(q.resource_quotas.len(), 1);
    let gpus: i64 = cluster
        .nodes
        .iter()
        .map(|n| n.gpus.len() as i64 * 1000)
        .sum();
    let nominal: i64 = q
        .cluster_queues
        .iter()
        .flat_map(|c| &c.resource_groups)
        .flat_map(|g| &g.flavors)
        .flat_map(|f| &f.resources)
        .filter(|r| r.name == GPU_RESOURCE)
        .map(|r| r.nominal)
        .sum();
    assert_eq!(nominal, gpus, "the quotas share out the cluster's GPUs");
    let mut checkpointing = 0;
    for j in &w.jobs {
        let t = &j.template;
        let queue = t
            .queue
            .as_deref()
            .unwrap_or_else(|| panic!("{} has no queue", j.name));
        let lq = q
            .local_queues
            .iter()
            .find(|l| l.namespace == j.namespace && l.name == queue)
            .unwrap_or_else(|| panic!("{}: no LocalQueue {queue}", j.name));
        let cq = q
            .cluster_queues
            .iter()
            .find(|c| c.name == lq.cluster_queue)
            .unwrap();
        let labels = &q
            .namespaces
            .iter()
            .find(|(n, _)| *n == j.namespace)
            .unwrap()
            .1;
        assert!(
            cq.namespace_selector
                .iter()
                .flatten()
                .all(|r| r.matches(labels)),
            "{}: {} does not admit {}",
            j.name,
            cq.name,
            j.namespace
        );
        let covered = |r: &str| {
            cq.resource_groups
                .iter()
                .any(|g| g.covered.iter().any(|c| c == r))
        };
        let d = &t.demand;
        assert!(
            d.resources.cpu_milli > 0 && d.resources.memory_bytes > 0,
            "{}",
            j.name
        );
        assert!(covered("cpu") && covered("memory") && covered(GPU_RESOURCE));
        assert!(d.resources.extended.is_empty() && d.resources.ephemeral_storage_bytes == 0);
        assert!(
            cluster.nodes.iter().any(|n| fits(j, n)),
            "{} fits no node",
            j.name
        );
        if t.preemption.checkpoint_interval.is_some() {
            checkpointing += 1;
        }
    }
    assert!(checkpointing >= 3, "training jobs declare checkpoints");
    let notebook = w.jobs.iter().find(|j| j.name == "notebook-ana").unwrap();
    assert_eq!(
        notebook.template.demand.resources.cpu_milli, 2000,
        "from the LimitRange"
    );
    let sweep = w.jobs.iter().find(|j| j.name == "hparam-sweep").unwrap();
    assert!(sweep.template.preemption.never_preempt);

    // The engine accepts the queues as they are.
    let mut s = kestrel_core::Scheduler::new(kestrel_core::SchedulerConfig::default());
    for f in &q.flavors {
        s.add_flavor(f.clone());
    }
    for c in &q.cohorts {
        s.add_cohort(c.clone()).unwrap();
    }
    for c in &q.cluster_queues {
        s.add_cluster_queue(c.clone()).unwrap();
    }
    for l in &q.local_queues {
        s.add_local_queue(l.clone());
    }
    for (n, l) in &q.namespaces {
        s.set_namespace_labels(n, l.clone());
    }
}
