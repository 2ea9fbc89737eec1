//! Checks on Nodes and Pods: GPUs, taints, resources, conditions, versions, images, long-
//! pending pods.

use super::*;

#[test]
fn gpu_node_without_gpus() {
    let bad = node("g0", GPU_LABELS, GPU_TAINT, "", "") + &gpu_node("g1");
    let d = run(&bad);
    let f = finding(&d, "gpu-node-without-gpus");
    assert_eq!(f.severity, Severity::Critical);
    assert_eq!(f.r#where.len(), 1);
    assert!(f.r#where[0].starts_with("g0 (NVIDIA-H100"), "{f:?}");
    assert!(f.what.contains("1 node labelled"), "{}", f.what);
    // Capacity without allocatable also counts; a node with GPUs does not.
    let cap = node(
        "g2",
        "nvidia.com/gpu.present: \"true\"",
        "",
        ", nvidia.com/gpu: \"0\"",
        "  capacity: {nvidia.com/gpu: \"8\"}\n",
    );
    let d = run(&cap);
    assert!(finding(&d, "gpu-node-without-gpus").r#where[0].contains("capacity 8"));
    assert!(!ids(&run(&gpu_node("g1"))).contains(&"gpu-node-without-gpus"));
    // A MIG node offers slices instead of whole GPUs.
    let mig = node(
        "m0",
        "nvidia.com/gpu.present: \"true\", nvidia.com/mig.strategy: mixed",
        "",
        ", nvidia.com/mig-1g.10gb: \"7\"",
        "",
    );
    assert!(!ids(&run(&mig)).contains(&"gpu-node-without-gpus"));
    // A CPU node is not a GPU node.
    assert!(ids(&run(&node("c0", "", "", "", ""))).is_empty());
}

#[test]
fn gpu_count_dropped_by_label_or_capacity() {
    let by_label = node("g0", GPU_LABELS, GPU_TAINT, ", nvidia.com/gpu: \"7\"", "");
    let d = run(&by_label);
    let f = finding(&d, "gpu-count-dropped");
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(
        f.r#where,
        vec!["g0 (7 allocatable, label nvidia.com/gpu.count=8)"]
    );
    let by_capacity = node(
        "g0",
        "",
        "",
        ", nvidia.com/gpu: \"6\"",
        "  capacity: {nvidia.com/gpu: \"8\"}\n",
    );
    assert_eq!(
        finding(&run(&by_capacity), "gpu-count-dropped").r#where,
        vec!["g0 (6 of 8 nvidia.com/gpu allocatable)"]
    );
    // Time-slicing: 8 GPUs x 4 replicas = 32 allocatable is whole.
    let sliced = node(
        "g0",
        &format!("{GPU_LABELS}, nvidia.com/gpu.replicas: \"4\""),
        GPU_TAINT,
        ", nvidia.com/gpu: \"32\"",
        "",
    );
    assert!(!ids(&run(&sliced)).contains(&"gpu-count-dropped"));
    assert!(!ids(&run(&gpu_node("g1"))).contains(&"gpu-count-dropped"));
    // A node with no GPUs left is gpu-node-without-gpus only.
    let none = node("g0", GPU_LABELS, GPU_TAINT, "", "");
    assert_eq!(ids(&run(&none)), vec!["gpu-node-without-gpus"]);
}

#[test]
fn gpu_node_untainted_only_when_others_are() {
    let plain = node("g2", GPU_LABELS, "", ", nvidia.com/gpu: \"8\"", "");
    let d = run(&(gpu_node("g0") + &gpu_node("g1") + &plain));
    let f = finding(&d, "gpu-node-untainted");
    assert_eq!(f.r#where, vec!["g2"]);
    assert!(
        f.what.contains("1 of 3 GPU nodes") && f.what.contains("nvidia.com/gpu=present:NoSchedule"),
        "{}",
        f.what
    );
    assert!(f
        .fix
        .contains("kubectl taint nodes g2 nvidia.com/gpu=present:NoSchedule"));
    // All untainted, or all tainted: consistent, nothing to say.
    let plain2 = node("g3", GPU_LABELS, "", ", nvidia.com/gpu: \"8\"", "");
    assert!(!ids(&run(&(plain.clone() + &plain2))).contains(&"gpu-node-untainted"));
    assert!(!ids(&run(&(gpu_node("g0") + &gpu_node("g1")))).contains(&"gpu-node-untainted"));
}

#[test]
fn cpu_pods_on_gpu_nodes_but_not_agents_or_gpu_pods() {
    let nodes = gpu_node("g0") + &node("c0", "", "", "", "");
    let web = pod("web", Some("g0"), "", "");
    let d = run(&(nodes.clone() + &web));
    let f = finding(&d, "cpu-pod-on-gpu-node");
    assert_eq!(f.severity, Severity::Info);
    assert_eq!(f.r#where, vec!["ml/web on g0"]);
    assert_eq!(d.exit_code(), 0, "info alone exits 0");
    let ok = pod("train", Some("g0"), ", nvidia.com/gpu: \"8\"", "")
            + &pod("web", Some("c0"), "", "")
            + &pod("done", Some("g0"), "", "").replace("phase: Running", "phase: Succeeded")
            + &pod("agent", Some("g0"), "", "").replace(
                "namespace: ml}",
                "namespace: ml, ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: ds, uid: u1, controller: true}]}",
            );
    let d = run(&(nodes + &ok));
    assert!(d.findings.is_empty(), "{:?}", d.findings);
}

#[test]
fn pods_stranded_by_taints() {
    let l40s = node(
        "l0",
        "nvidia.com/gpu.product: NVIDIA-L40S",
        &format!("{GPU_TAINT}, {{key: dedicated, value: inference, effect: NoSchedule}}"),
        ", nvidia.com/gpu: \"4\"",
        "",
    );
    let tolerates_gpu = "  tolerations: [{key: nvidia.com/gpu, operator: Exists}]\n";
    let selector = "  nodeSelector: {nvidia.com/gpu.product: NVIDIA-L40S}\n";
    let stuck = pod(
        "infer",
        None,
        ", nvidia.com/gpu: \"2\"",
        &format!("{tolerates_gpu}{selector}"),
    );
    let d = run(&(gpu_node("g0") + &l40s + &stuck));
    let f = finding(&d, "pod-stranded-by-taints");
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(f.r#where, vec!["ml/infer, wants 2 nvidia.com/gpu"]);
    assert!(
            f.what
                == "1 pending pod fits 1 node (l0) but does not tolerate the taint dedicated=inference:NoSchedule",
            "{}",
            f.what
        );
    assert!(f
        .fix
        .contains("{key: dedicated, operator: Equal, value: inference, effect: NoSchedule}"));
    // Without the selector the pod also fits g0, whose taint it tolerates.
    let free = pod("infer", None, ", nvidia.com/gpu: \"2\"", tolerates_gpu);
    assert!(!ids(&run(&(gpu_node("g0") + &l40s + &free))).contains(&"pod-stranded-by-taints"));
    // No toleration at all: both GPU nodes are closed to it.
    let bare = pod("bare", None, ", nvidia.com/gpu: \"1\"", "");
    let d = run(&(gpu_node("g0") + &l40s + &bare));
    let f = finding(&d, "pod-stranded-by-taints");
    assert_eq!(
        f.what,
        "1 pending pod fits 2 nodes (g0, l0) but does not tolerate the taints \
             dedicated=inference:NoSchedule, nvidia.com/gpu=present:NoSchedule"
    );
    // An untainted node with the GPUs: not stranded (just busy, maybe).
    let plain = node("g9", GPU_LABELS, "", ", nvidia.com/gpu: \"8\"", "");
    assert!(!ids(&run(&(plain + &bare))).contains(&"pod-stranded-by-taints"));
    // A cordoned node counts as tainted.
    let cordoned =
        node("c0", "", "", "", "").replace("spec: {taints: []}", "spec: {unschedulable: true}");
    let d = run(&(cordoned + &pod("web", None, "", "")));
    assert!(finding(&d, "pod-stranded-by-taints")
        .what
        .contains("node.kubernetes.io/unschedulable:NoSchedule"));
}

#[test]
fn pods_asking_for_resources_no_node_offers() {
    let rdma = pod("ib", None, ", rdma/rdma_shared_device_a: \"1\"", "");
    let huge = pod("big", None, ", nvidia.com/gpu: \"16\"", "");
    let d = run(&(gpu_node("g0") + &rdma + &huge));
    let found: Vec<&Finding> = d
        .findings
        .iter()
        .filter(|f| f.id == "pod-resource-unavailable")
        .collect();
    assert_eq!(found.len(), 2, "{found:#?}");
    assert_eq!(found[0].severity, Severity::Critical);
    assert!(found[0]
        .what
        .contains("more nvidia.com/gpu than any node offers (8 at most)"));
    assert_eq!(found[0].r#where, vec!["ml/big (wants 16)"]);
    assert!(found[1]
        .what
        .contains("1 pending pod requests rdma/rdma_shared_device_a, which no node offers"));
    assert_eq!(d.exit_code(), 2);
    let offered = node(
        "g1",
        GPU_LABELS,
        GPU_TAINT,
        ", nvidia.com/gpu: \"8\", rdma/rdma_shared_device_a: \"63\"",
        "",
    );
    assert!(!ids(&run(&(offered + &rdma))).contains(&"pod-resource-unavailable"));
    // A bound pod is not pending.
    let bound = pod("ib", Some("g0"), ", rdma/rdma_shared_device_a: \"1\"", "");
    assert!(!ids(&run(&(gpu_node("g0") + &bound))).contains(&"pod-resource-unavailable"));
}

#[test]
fn node_conditions() {
    let healthy = conditions(&[("Ready", "True"), ("DiskPressure", "False")]);
    let down = conditions(&[("Ready", "Unknown")]);
    let full = conditions(&[
        ("Ready", "True"),
        ("DiskPressure", "True"),
        ("PIDPressure", "True"),
    ]);
    let d = run(&(node("a", "", "", "", &healthy)
        + &node("b", "", "", "", &down)
        + &node("c", "", "", "", &full)));
    let f = finding(&d, "node-not-ready");
    assert_eq!(
        f.r#where,
        vec!["b (Ready=Unknown since 2025-06-02T09:00:00Z: RReady: m)"]
    );
    let pressure: Vec<&str> = d
        .findings
        .iter()
        .filter(|f| f.id == "node-pressure")
        .map(|f| f.what.as_str())
        .collect();
    assert_eq!(
        pressure,
        vec![
            "1 node is under DiskPressure",
            "1 node is under PIDPressure"
        ]
    );
    assert_eq!(d.as_of.as_deref(), Some("2025-06-02T10:00:00Z"));
    assert!(ids(&run(&node("a", "", "", "", &healthy))).is_empty());
}

#[test]
fn mixed_driver_and_kubelet_versions() {
    let with = |name: &str, driver: &str, kubelet: &str| {
        node(
            name,
            &format!("{GPU_LABELS}, nvidia.com/cuda.driver-version.full: \"{driver}\""),
            GPU_TAINT,
            ", nvidia.com/gpu: \"8\"",
            &format!("  nodeInfo: {{kubeletVersion: {kubelet}}}\n"),
        )
    };
    let old_labels = node(
            "g3",
            &format!("{GPU_LABELS}, nvidia.com/cuda.driver.major: \"550\", nvidia.com/cuda.driver.minor: \"127\", nvidia.com/cuda.driver.rev: \"05\""),
            GPU_TAINT,
            ", nvidia.com/gpu: \"8\"",
            "  nodeInfo: {kubeletVersion: v1.33.2}\n",
        );
    let d = run(&(with("g0", "570.124.06", "v1.33.2")
        + &with("g1", "570.124.06", "v1.33.2")
        + &with("g2", "550.127.05", "v1.32.5")
        + &old_labels));
    let f = finding(&d, "gpu-driver-version-mixed");
    assert_eq!(
        f.r#where,
        vec![
            "550.127.05: g2, g3 (2 nodes)",
            "570.124.06: g0, g1 (2 nodes)"
        ]
    );
    assert!(f.what.contains("4 GPU nodes run 2 NVIDIA driver versions"));
    let k = finding(&d, "kubelet-version-mixed");
    assert_eq!(k.severity, Severity::Info);
    assert_eq!(
        k.r#where,
        vec!["v1.33.2: g0, g1, g3 (3 nodes)", "v1.32.5: g2 (1 node)"]
    );
    let same = run(&(with("g0", "570.124.06", "v1.33.2") + &with("g1", "570.124.06", "v1.33.2")));
    assert!(ids(&same).is_empty(), "{:?}", same.findings);
}

#[test]
fn mixed_gpu_daemonset_images() {
    let agent = |name: &str, node: &str, image: &str| {
        pod(name, Some(node), "", "")
                .replace("image: img", &format!("image: {image}"))
                .replace(
                    "namespace: ml}",
                    "namespace: gpu-operator, ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: nvidia-device-plugin, uid: u1, controller: true}]}",
                )
    };
    let nodes = gpu_node("g0") + &gpu_node("g1");
    let mixed = agent("dp-a", "g0", "nvcr.io/nvidia/k8s-device-plugin:v0.17.0")
        + &agent("dp-b", "g1", "nvcr.io/nvidia/k8s-device-plugin:v0.16.2");
    let d = run(&(nodes.clone() + &mixed));
    let f = finding(&d, "gpu-operand-version-mixed");
    assert!(f
        .what
        .contains("gpu-operator/nvidia-device-plugin runs 2 different images"));
    assert_eq!(f.r#where.len(), 2);
    let same = agent("dp-a", "g0", "nvcr.io/nvidia/k8s-device-plugin:v0.17.0")
        + &agent("dp-b", "g1", "nvcr.io/nvidia/k8s-device-plugin:v0.17.0");
    assert!(ids(&run(&(nodes + &same))).is_empty());
}

fn pending_pod(name: &str, created: &str, message: &str) -> String {
    pod(name, None, "", "").replace(
            "status: {phase: Pending}",
            &format!("status: {{phase: Pending, conditions: [{{type: PodScheduled, status: \"False\", reason: Unschedulable, message: \"{message}\", lastTransitionTime: \"{created}\"}}]}}"),
        )
}

#[test]
fn long_pending_pods_grouped_by_message() {
    let nodes = node("c0", "", "", "", &conditions(&[("Ready", "True")]));
    let msg_a = "0/1 nodes are available: 1 Insufficient cpu.";
    let msg_b = "0/1 nodes are available: 1 Insufficient memory.";
    let pods = pending_pod("a1", "2025-06-02T07:40:00Z", msg_a)
        + &pending_pod("a2", "2025-06-02T08:00:00Z", msg_a)
        + &pending_pod("b1", "2025-06-02T09:00:00Z", msg_b)
        + &pending_pod("new", "2025-06-02T09:55:00Z", msg_b)
        + &pending_pod("gated", "2025-06-02T07:00:00Z", "waiting for a queue")
            .replace("reason: Unschedulable", "reason: SchedulingGated");
    let d = run(&(nodes.clone() + &pods));
    let found: Vec<&Finding> = d
        .findings
        .iter()
        .filter(|f| f.id == "pod-pending-long")
        .collect();
    assert_eq!(found.len(), 2);
    assert_eq!(
        found[0].what,
        format!("2 pods unschedulable for over 15m: {msg_a}")
    );
    assert_eq!(found[0].r#where, vec!["ml/a1 (2h20m)", "ml/a2 (2h)"]);
    assert_eq!(
        found[1].r#where,
        vec!["ml/b1 (1h)"],
        "the 5-minute-old pod is not long"
    );
    // A longer threshold, or a later clock.
    let opts = DoctorOptions {
        now: None,
        pending_for_ms: 3 * 3600 * 1000,
        since_ms: None,
    };
    assert!(diagnose(&snap(&(nodes.clone() + &pods)).unwrap(), &opts)
        .findings
        .is_empty());
    let later = DoctorOptions {
        now: Some("2025-06-02T12:00:00Z".parse().unwrap()),
        ..DoctorOptions::default()
    };
    let d = diagnose(&snap(&(nodes.clone() + &pods)).unwrap(), &later);
    assert_eq!(d.findings.iter().map(|f| f.r#where.len()).sum::<usize>(), 4);
    // More messages than shown: the rest are merged.
    let many: String = (0..7)
        .map(|i| {
            pending_pod(
                &format!("p{i}"),
                "2025-06-02T07:00:00Z",
                &format!("message {i}"),
            )
        })
        .collect();
    let d = run(&(nodes + &many));
    let found: Vec<&Finding> = d
        .findings
        .iter()
        .filter(|f| f.id == "pod-pending-long")
        .collect();
    assert_eq!(found.len(), PENDING_GROUPS);
    assert!(
        found[4]
            .what
            .contains("3 pods unschedulable for over 15m, with 3 other messages"),
        "{}",
        found[4].what
    );
}
