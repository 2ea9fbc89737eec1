//! The checks, the snapshot reading and the rendering, on small YAML snapshots.

use super::*;
use kestrel_objects::LoadError;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;

fn snap(text: &str) -> Result<Snapshot, LoadError> {
    read_snapshot(&[(PathBuf::from("snap.yaml"), text.to_string())])
}

fn run(text: &str) -> Diagnosis {
    diagnose(&snap(text).unwrap(), &DoctorOptions::default())
}

fn ids(d: &Diagnosis) -> Vec<&str> {
    d.findings.iter().map(|f| f.id.as_str()).collect()
}

fn finding<'a>(d: &'a Diagnosis, id: &str) -> &'a Finding {
    d.findings
        .iter()
        .find(|f| f.id == id)
        .unwrap_or_else(|| panic!("no {id} in {:#?}", d.findings))
}

/// A Node document. `labels`, `taints` and `status_extra` are YAML flow text.
fn node(name: &str, labels: &str, taints: &str, alloc: &str, status_extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{{labels}}}}}\n\
             spec: {{taints: [{taints}]}}\n\
             status:\n  allocatable: {{cpu: \"64\", memory: 512Gi, pods: \"110\"{alloc}}}\n\
             {status_extra}---\n"
    )
}

const GPU_LABELS: &str =
        "nvidia.com/gpu.present: \"true\", nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, nvidia.com/gpu.count: \"8\"";
const GPU_TAINT: &str = "{key: nvidia.com/gpu, value: present, effect: NoSchedule}";

fn gpu_node(name: &str) -> String {
    node(name, GPU_LABELS, GPU_TAINT, ", nvidia.com/gpu: \"8\"", "")
}

/// A Pod document: `requests` and `spec_extra` are YAML flow text / spec lines.
fn pod(name: &str, node: Option<&str>, requests: &str, spec_extra: &str) -> String {
    let (phase, node_line) = match node {
        Some(n) => ("Running", format!("  nodeName: {n}\n")),
        None => ("Pending", String::new()),
    };
    format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ml}}\nspec:\n{node_line}{spec_extra}  containers:\n  - name: c\n    image: img\n    resources: {{requests: {{cpu: \"1\"{requests}}}}}\nstatus: {{phase: {phase}}}\n---\n"
        )
}

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

fn conditions(list: &[(&str, &str)]) -> String {
    let mut s = "  conditions:\n".to_string();
    for (t, st) in list {
        s.push_str(&format!(
                "  - {{type: {t}, status: \"{st}\", reason: R{t}, message: m, lastHeartbeatTime: \"2025-06-02T10:00:00Z\", lastTransitionTime: \"2025-06-02T09:00:00Z\"}}\n"
            ));
    }
    s
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

#[test]
fn snapshot_reading_notes_and_errors() {
    let list = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: n1}, status: {allocatable: {cpu: \"1\"}}}\n- {apiVersion: v1, kind: Service, metadata: {name: s}}\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}\n- {apiVersion: v1, kind: Service, metadata: {name: s2}}\n";
    let s = snap(list).unwrap();
    assert_eq!(s.nodes.len(), 1);
    assert_eq!(
        s.notes,
        vec!["snap.yaml: ignored 3 objects of kinds kestrel doctor does not read: ConfigMap (1), Service (2)"]
    );
    let e = snap("kind: List\napiVersion: v1\nitems: []\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("snap.yaml: no Node objects in the file")
            && e.contains("kubectl get events,nodes,pods -A -o yaml"),
        "{e}"
    );
    let e = snap("a: [b\n").unwrap_err().to_string();
    assert!(e.starts_with("snap.yaml: not valid YAML"), "{e}");
    let e = snap(&pod("p", None, ", nvidia.com/gpu: lots", ""))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Pod ml/p") && e.contains("nvidia.com/gpu"),
        "{e}"
    );
    let e = snap(&node("n1", "", "", "", "").replace("cpu: \"64\"", "cpu: many"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Node n1") && e.contains("status.allocatable.cpu"),
        "{e}"
    );
    // Duplicates across files: the first is kept, with a note.
    let files = vec![
        (PathBuf::from("a.yaml"), node("n1", "", "", "", "")),
        (PathBuf::from("b.yaml"), node("n1", "", "", "", "")),
    ];
    let s = read_snapshot(&files).unwrap();
    assert_eq!((s.nodes.len(), s.source.as_str()), (1, "a.yaml, b.yaml"));
    assert!(s.notes[0].contains("b.yaml: Node n1: a second Node") && s.notes[0].contains("a.yaml"));
    // A pod naming an unknown PriorityClass or RuntimeClass is read (the API server resolved them).
    let p = pod(
        "p",
        None,
        "",
        "  priorityClassName: training\n  runtimeClassName: nvidia\n",
    );
    assert_eq!(
        snap(&(node("n1", "", "", "", "") + &p)).unwrap().pods.len(),
        1
    );
}

#[test]
fn live_objects_that_cannot_be_read_are_left_out_with_a_note() {
    let mut s = snap(&gpu_node("g0")).unwrap();
    let mut broken = s.nodes[0].clone();
    broken.metadata.name = Some("g1".into());
    broken.status = None;
    s.nodes.push(broken);
    let d = diagnose(&s, &DoctorOptions::default());
    assert_eq!(d.nodes, 1);
    assert!(
        d.notes[0].starts_with("left out: snap.yaml: Node g1"),
        "{:?}",
        d.notes
    );
}

#[test]
fn text_report_groups_by_severity_and_caps_lists() {
    let mut text = String::new();
    for i in 0..12 {
        text += &node(&format!("g{i:02}"), GPU_LABELS, GPU_TAINT, "", "");
    }
    text += &node("c0", "", "", "", &conditions(&[("Ready", "False")]));
    let d = run(&text);
    let out = render_text(&d);
    assert!(out.starts_with("kestrel doctor: snap.yaml\n13 nodes (12 with GPUs, 0 GPUs allocatable), 0 pods (0 pending)"), "{out}");
    let crit = out.find("CRITICAL (2)").expect(&out);
    assert!(
        out[crit..].contains("[gpu-node-without-gpus] 12 nodes labelled"),
        "{out}"
    );
    assert!(
        out.contains("      ... and 4 more (--json lists all)"),
        "{out}"
    );
    assert!(out.contains("passed: gpu-count-dropped"), "{out}");
    assert!(out.ends_with("2 critical, 0 warning, 0 info\n"), "{out}");
    let json: Value = serde_json::from_str(&render_json(&d)).unwrap();
    let first = &json[0];
    assert_eq!(first["id"], "gpu-node-without-gpus");
    assert_eq!(first["severity"], "critical");
    assert_eq!(first["where"].as_array().unwrap().len(), 12);
    let mut keys: Vec<&String> = first.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["fix", "id", "severity", "what", "where", "why"]);
    let clean = run(&node("c0", "", "", "", ""));
    assert!(render_text(&clean).contains("no problems found"));
    assert_eq!(clean.exit_code(), 0);
}

#[test]
fn prometheus_rule_has_one_alert_per_check() {
    let text = render_prometheus_rule();
    let docs = parse_yaml(&text).unwrap();
    assert_eq!(
        docs,
        vec![prometheus_rule()],
        "the YAML reads back as the object"
    );
    let rule = &docs[0];
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["kind"], "PrometheusRule");
    let rules = rule["spec"]["groups"][0]["rules"].as_array().unwrap();
    let ids: Vec<&str> = rules
        .iter()
        .map(|r| r["labels"]["kestrel_check"].as_str().unwrap())
        .collect();
    assert_eq!(ids, CHECKS.iter().map(|c| c.id).collect::<Vec<_>>());
    let alerts: BTreeSet<&str> = rules.iter().map(|r| r["alert"].as_str().unwrap()).collect();
    assert_eq!(alerts.len(), CHECKS.len(), "alert names are unique");
    for r in rules {
        assert!(
            ["critical", "warning", "info"].contains(&r["labels"]["severity"].as_str().unwrap())
        );
        assert!(!r["annotations"]["summary"].as_str().unwrap().is_empty());
        assert!(!r["annotations"]["description"].as_str().unwrap().is_empty());
        let expr = r["expr"].as_str().unwrap();
        assert_eq!(
            expr.matches('(').count(),
            expr.matches(')').count(),
            "{expr}"
        );
        assert_eq!(
            expr.matches('{').count(),
            expr.matches('}').count(),
            "{expr}"
        );
    }
}

#[test]
fn ages() {
    assert_eq!(format_age(30_000), "30s");
    assert_eq!(format_age(45 * 60_000), "45m");
    assert_eq!(format_age(3 * 3_600_000), "3h");
    assert_eq!(format_age(135 * 60_000), "2h15m");
    assert_eq!(format_age(76 * 3_600_000), "3d4h");
    assert_eq!(format_age(48 * 3_600_000), "2d");
}

/// examples/doctor/events.yaml: a kubectl List of Nodes, Pods and Events, one signature
/// each, every message the one its component emits (the file cites the sources).
const EVENTS: &str = include_str!("../../../examples/doctor/events.yaml");

fn signature<'a>(d: &'a Diagnosis, sig: &str) -> &'a Finding {
    d.findings
        .iter()
        .find(|f| f.signature.as_deref() == Some(sig))
        .unwrap_or_else(|| {
            let sigs: Vec<_> = d.findings.iter().map(|f| &f.signature).collect();
            panic!("no {sig} in {sigs:?}")
        })
}

#[test]
fn events_and_container_states_give_one_finding_per_signature() {
    let d = run(EVENTS);
    assert_eq!(d.events, 17, "every Event read once");
    assert_eq!(
        d.events_normal, 1,
        "the Started event is counted, not reported"
    );
    let sigs: BTreeSet<&str> = d
        .findings
        .iter()
        .filter_map(|f| f.signature.as_deref())
        .collect();
    assert_eq!(
        sigs,
        BTreeSet::from([
            "image-pull-failed/ErrImagePull/auth",
            "image-pull-failed/ErrImagePull/rate-limit",
            "image-pull-failed/ErrImagePull/not-found",
            "image-pull-failed/ErrImagePull/tls",
            "container-crashloop/CrashLoopBackOff/gpu-pod",
            "container-crashloop/CrashLoopBackOff/pod",
            "container-oom-killed/OOMKilled/gpu-pod",
            "container-oom-killed/OOMKilled/node",
            "pod-sandbox-failed/FailedCreatePodSandBox/sriov-no-vf",
            "pod-sandbox-failed/FailedCreatePodSandBox/nad-missing",
            "pod-sandbox-failed/FailedCreatePodSandBox/ipam-exhausted",
            "volume-mount-failed/FailedMount/timeout",
            "volume-mount-failed/FailedMount/permission",
            "pod-network-attachment-failed/NetworkStatus/partial",
            "operator-pod-not-ready/NotReady/gpu-driver",
            "operator-pod-not-ready/NotReady/ofed-driver",
            "pod-failed-scheduling/FailedScheduling/insufficient-nvidia.com-gpu",
            "event-other/FreeDiskSpaceFailed/kubelet",
            "gpu-unhealthy/XidError/xid-48",
            "node-usage-high/NodeMetrics/memory",
            "operator-pod-not-ready/Missing/device-plugin",
        ])
    );
    // Every finding says what, where, why and what to do.
    for f in &d.findings {
        assert!(
            !f.r#where.is_empty() && !f.why.is_empty() && !f.fix.is_empty(),
            "{f:?}"
        );
    }

    // Image pulls: by registry and class; the pull back-off is part of the 401, and the
    // container state adds nothing new for the same pod.
    let auth = signature(&d, "image-pull-failed/ErrImagePull/auth");
    assert_eq!(auth.severity, Severity::Warning);
    assert_eq!(auth.what, "1 pod cannot pull images from nvcr.io: the registry refuses the credentials (authentication)");
    assert_eq!(auth.r#where, ["ml/loader-7 on gpu-1 (x5)"]);
    assert!(auth.why.contains("401 Unauthorized"), "{}", auth.why);
    assert!(auth.fix.contains("imagePullSecrets"), "{}", auth.fix);
    assert!(!d
        .findings
        .iter()
        .any(|f| f.signature.as_deref() == Some("image-pull-failed/ErrImagePull/back-off")));
    let rate = signature(&d, "image-pull-failed/ErrImagePull/rate-limit");
    assert!(rate.what.contains("from docker.io"), "{}", rate.what);
    assert_eq!(
        rate.incidents.len(),
        2,
        "two hours apart: {:?}",
        rate.incidents
    );
    assert_eq!(rate.incidents[0].count, 3);
    assert_eq!(rate.incidents[0].pods, ["ml/prep-1"]);
    assert_eq!(
        rate.incidents[0].first_seen.as_deref(),
        Some("2025-06-02T07:10:00Z")
    );
    assert_eq!(
        rate.incidents[1].last_seen.as_deref(),
        Some("2025-06-02T09:35:00Z")
    );
    assert_eq!(rate.incidents[1].nodes, ["gpu-1"]);
    assert!(signature(&d, "image-pull-failed/ErrImagePull/tls")
        .what
        .contains("registry.internal:5000"));

    // Crash loops and OOM kills: the GPU pod is called out.
    let crash = signature(&d, "container-crashloop/CrashLoopBackOff/gpu-pod");
    assert_eq!(
        crash.what,
        "1 GPU pod has a container that restarts in a loop (CrashLoopBackOff)"
    );
    assert_eq!(crash.r#where, ["ml/train-0 on gpu-0 (x42)"]);
    let oom = signature(&d, "container-oom-killed/OOMKilled/gpu-pod");
    assert!(
        oom.what.starts_with("1 GPU pod had a container killed"),
        "{}",
        oom.what
    );
    assert!(oom.why.contains("host memory, not GPU memory"));
    assert_eq!(
        oom.incidents[0].last_seen.as_deref(),
        Some("2025-06-02T09:58:40Z")
    );
    assert!(
        signature(&d, "container-oom-killed/OOMKilled/node").r#where[0].starts_with("Node gpu-0")
    );

    // Sandboxes by CNI and message; the events.k8s.io/v1 one included.
    let vf = signature(&d, "pod-sandbox-failed/FailedCreatePodSandBox/sriov-no-vf");
    assert_eq!(vf.severity, Severity::Critical);
    assert_eq!(vf.what, "1 pod cannot get a network from sriov: the SR-IOV CNI got no VF (virtual function) for them");
    assert_eq!(vf.r#where, ["llm/allreduce-1 on gpu-0 (x12)"]);
    assert_eq!(
        vf.incidents[0].first_seen.as_deref(),
        Some("2025-06-02T09:45:00Z")
    );
    assert!(
        signature(&d, "pod-sandbox-failed/FailedCreatePodSandBox/nad-missing")
            .what
            .contains("from multus")
    );
    assert!(signature(
        &d,
        "pod-sandbox-failed/FailedCreatePodSandBox/ipam-exhausted"
    )
    .fix
    .contains("/var/lib/cni/networks"));

    // Volumes: the dataset and checkpoint volumes are named as such.
    let ds = signature(&d, "volume-mount-failed/FailedMount/timeout");
    assert!(ds.what.contains("volume dataset"), "{}", ds.what);
    assert!(
        ds.why.contains("dataset or checkpoint volume"),
        "{}",
        ds.why
    );
    assert!(signature(&d, "volume-mount-failed/FailedMount/permission")
        .what
        .contains("volume checkpoints"));

    // The RDMA pod that runs without its network, and the operator pods per node.
    let net = signature(&d, "pod-network-attachment-failed/NetworkStatus/partial");
    assert_eq!(
        net.r#where,
        ["llm/allreduce-0 on gpu-1: asked rdma-net, attached none"]
    );
    let driver = signature(&d, "operator-pod-not-ready/NotReady/gpu-driver");
    assert_eq!(driver.what, "the NVIDIA driver pod is not ready on 1 node");
    assert_eq!(driver.r#where, ["gpu-1: gpu-operator/nvidia-driver-daemonset-7xk2p (nvidia-driver-ctr CrashLoopBackOff, 6 restarts)"]);
    assert!(
        signature(&d, "operator-pod-not-ready/NotReady/ofed-driver").r#where[0]
            .starts_with("gpu-0: nvidia-network-operator/mofed")
    );

    // Another scheduler's FailedScheduling, and the reason no check reads.
    let sched = signature(
        &d,
        "pod-failed-scheduling/FailedScheduling/insufficient-nvidia.com-gpu",
    );
    assert!(
        sched
            .what
            .starts_with("default-scheduler failed to schedule 1 pod (20 events)"),
        "{}",
        sched.what
    );
    assert!(sched.why.contains("other than Kestrel"));
    let other = signature(&d, "event-other/FreeDiskSpaceFailed/kubelet");
    assert_eq!(other.severity, Severity::Info);
    assert_eq!(other.r#where, ["Node gpu-1 (x2)"]);

    // The node agent's XID.
    let xid = signature(&d, "gpu-unhealthy/XidError/xid-48");
    assert_eq!(xid.severity, Severity::Critical);
    assert_eq!(
        xid.what,
        "the node agent reported XID 48 on 1 node (1 event)"
    );
    assert_eq!(xid.r#where, ["Node gpu-1"]);
    assert!(xid.fix.contains("memory (ECC) errors"), "{}", xid.fix);

    // A DaemonSet whose pod is missing on a node: no pod to be not ready.
    let missing = signature(&d, "operator-pod-not-ready/Missing/device-plugin");
    assert_eq!(
        missing.r#where,
        ["DaemonSet gpu-operator/nvidia-device-plugin-daemonset: its pod runs on 1 of the 2 nodes it should (1 ready)"]
    );
    let rule = signature_rule("operator-pod-not-ready/Missing/device-plugin").unwrap();
    assert!(
        rule.expr.contains(
            "kube_daemonset_status_desired_number_scheduled{daemonset=~\"nvidia-device-plugin.*\"}"
        ),
        "{}",
        rule.expr
    );
    assert!(rule.runbook.contains("kubectl describe daemonset"));

    // Memory pressure that looks like crashing pods: gpu-0 is near full in real use.
    let usage = signature(&d, "node-usage-high/NodeMetrics/memory");
    assert_eq!(
        usage.what,
        "1 node near full in real memory use (metrics API) while pods there fail"
    );
    assert_eq!(
        usage.r#where,
        [
            "gpu-0: memory 1953.0 GiB of 2000.0 GiB allocatable in use (97%); failing there: \
          container-crashloop/CrashLoopBackOff/gpu-pod, container-oom-killed/OOMKilled/gpu-pod, \
          container-oom-killed/OOMKilled/node"
        ]
    );
    assert_eq!(snap(EVENTS).unwrap().node_usage.len(), 2);

    // The metric's labels: one subject per node and namespace.
    assert_eq!(
        vf.subjects,
        [Subject {
            node: "gpu-0".into(),
            namespace: "llm".into()
        }]
    );
    assert_eq!(d.exit_code(), 2);
}

#[test]
fn since_keeps_only_recent_events_and_container_states() {
    let snap = snap(EVENTS).unwrap();
    let hour = DoctorOptions {
        since_ms: Some(3600 * 1000),
        ..DoctorOptions::default()
    };
    let d = diagnose(&snap, &hour);
    assert_eq!(d.as_of.as_deref(), Some("2025-06-02T10:00:00Z"));
    let sigs: Vec<&str> = d
        .findings
        .iter()
        .filter_map(|f| f.signature.as_deref())
        .collect();
    assert!(
        !sigs.contains(&"image-pull-failed/ErrImagePull/not-found"),
        "a day old: {sigs:?}"
    );
    let rate = signature(&d, "image-pull-failed/ErrImagePull/rate-limit");
    assert_eq!(
        rate.incidents.len(),
        1,
        "the 07:20 burst is older than an hour"
    );
    assert_eq!(rate.r#where, ["ml/prep-2 on gpu-1 (x2)"]);
    // Container states are now: kept.
    assert!(sigs.contains(&"container-oom-killed/OOMKilled/gpu-pod"));
}

#[test]
fn json_of_event_findings_adds_signature_and_incidents_only() {
    let d = run(EVENTS);
    let json: Value = serde_json::from_str(&render_json(&d)).unwrap();
    for f in json.as_array().unwrap() {
        let keys: BTreeSet<&str> = f.as_object().unwrap().keys().map(String::as_str).collect();
        let base = BTreeSet::from(["id", "severity", "what", "where", "why", "fix"]);
        assert!(keys.is_superset(&base), "{f}");
        assert!(
            keys.difference(&base)
                .all(|k| ["signature", "incidents"].contains(k)),
            "{f}"
        );
        if ["image-pull-failed", "pod-sandbox-failed", "event-other"]
            .contains(&f["id"].as_str().unwrap())
        {
            assert!(
                keys.contains("signature") && keys.contains("incidents"),
                "{f}"
            );
        }
        if let Some(incidents) = f.get("incidents") {
            for i in incidents.as_array().unwrap() {
                let keys: BTreeSet<&str> =
                    i.as_object().unwrap().keys().map(String::as_str).collect();
                assert_eq!(
                    keys,
                    BTreeSet::from(["first_seen", "last_seen", "count", "nodes", "pods"])
                );
            }
        }
    }
    // The text report says when and how often.
    let text = render_text(&d);
    assert!(
        text.contains("    seen:  5 events, 2025-06-02T09:41:00Z to 2025-06-02T09:57:00Z\n"),
        "{text}"
    );
    assert!(
        text.contains("17 events (1 Normal of reasons no check reads)"),
        "{text}"
    );
}

#[test]
fn events_of_both_apis_in_documents_and_duplicates() {
    let core = "apiVersion: v1\nkind: Event\nmetadata: {name: e1, namespace: ml}\n\
        involvedObject: {kind: Pod, name: p, namespace: ml}\nreason: BackOff\n\
        message: Back-off restarting failed container c in pod p_ml(u)\n\
        source: {component: kubelet, host: g0}\ntype: Warning\ncount: 3\n\
        firstTimestamp: \"2025-06-02T09:00:00Z\"\nlastTimestamp: \"2025-06-02T09:10:00Z\"\n---\n";
    // The same object through events.k8s.io/v1: counted once.
    let new = "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata: {name: e1, namespace: ml}\n\
        regarding: {kind: Pod, name: p, namespace: ml}\nreason: BackOff\n\
        note: Back-off restarting failed container c in pod p_ml(u)\nreportingController: kubelet\n\
        reportingInstance: g0\ntype: Warning\neventTime: \"2025-06-02T09:00:00.000000Z\"\n\
        series: {count: 3, lastObservedTime: \"2025-06-02T09:10:00.000000Z\"}\n---\n";
    let s = snap(&(gpu_node("g0") + core + new)).unwrap();
    assert_eq!(s.events.read, 1);
    assert_eq!(s.events.duplicates, 1);
    assert!(
        s.notes
            .iter()
            .any(|n| n.contains("1 Events were listed twice")),
        "{:?}",
        s.notes
    );
    let d = diagnose(&s, &DoctorOptions::default());
    let f = signature(&d, "container-crashloop/CrashLoopBackOff/pod");
    assert_eq!(f.r#where, ["ml/p on g0 (x3)"]);
    // The new API alone reads the same.
    let d2 = run(&(gpu_node("g0") + new));
    assert_eq!(
        signature(&d2, "container-crashloop/CrashLoopBackOff/pod").r#where,
        f.r#where
    );
    assert_eq!(
        signature(&d2, "container-crashloop/CrashLoopBackOff/pod").incidents,
        f.incidents
    );
}

#[test]
fn bad_events_are_named_with_their_field() {
    let bad = gpu_node("g0")
        + "apiVersion: v1\nkind: Event\nmetadata: {name: e1, namespace: ml}\nreason: Failed\ntype: Warning\n";
    let e = snap(&bad).unwrap_err().to_string();
    assert!(
        e.contains("Event ml/e1") && e.contains("involvedObject.kind"),
        "{e}"
    );
    let bad_time = gpu_node("g0")
        + "apiVersion: v1\nkind: Event\nmetadata: {name: e2, namespace: ml}\n\
           involvedObject: {kind: Pod, name: p, namespace: ml}\nlastTimestamp: yesterday\n";
    let e = snap(&bad_time).unwrap_err().to_string();
    assert!(
        e.contains("lastTimestamp") && e.contains("\"yesterday\" is not an RFC 3339 time"),
        "{e}"
    );
    let bad_api =
        gpu_node("g0") + "apiVersion: events.k8s.io/v2\nkind: Event\nmetadata: {name: e3}\n";
    let e = snap(&bad_api).unwrap_err().to_string();
    assert!(
        e.contains("apiVersion") && e.contains("events.k8s.io/v1"),
        "{e}"
    );
    // In a streamed List too, with the item's place.
    let list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata: {name: g0}\n  status: {allocatable: {cpu: \"1\"}}\n\
        - apiVersion: v1\n  kind: Event\n  metadata: {name: e4, namespace: ml}\n  reason: X\n";
    let e = snap(list).unwrap_err().to_string();
    assert!(
        e.contains("Event ml/e4") && e.contains("involvedObject"),
        "{e}"
    );
    let bad_usage = gpu_node("g0")
        + "apiVersion: metrics.k8s.io/v1beta1\nkind: NodeMetrics\nmetadata: {name: g0}\nusage: {cpu: lots, memory: 1Gi}\n";
    let e = snap(&bad_usage).unwrap_err().to_string();
    assert!(
        e.contains("NodeMetrics g0") && e.contains("usage.cpu"),
        "{e}"
    );
    let e = snap("apiVersion: v1\nkind: List\nitems:\n- 3\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("items[0]") && e.contains("not a Kubernetes object"),
        "{e}"
    );
}

#[test]
fn unknown_warning_reasons_are_grouped_as_other() {
    let ev = |name: &str, reason: &str, component: &str| {
        format!(
            "apiVersion: v1\nkind: Event\nmetadata: {{name: {name}, namespace: ml}}\n\
             involvedObject: {{kind: Pod, name: {name}, namespace: ml}}\nreason: {reason}\n\
             message: something\nsource: {{component: {component}}}\ntype: Warning\n---\n"
        )
    };
    let text = gpu_node("g0")
        + &ev("a", "WeirdThing", "my-operator")
        + &ev("b", "WeirdThing", "my-operator")
        + &ev("c", "", "");
    let d = run(&text);
    let f = signature(&d, "event-other/WeirdThing/my-operator");
    assert_eq!(
        f.what,
        "2 Warning events WeirdThing from my-operator about 2 objects"
    );
    assert!(signature(&d, "event-other/NoReason/unknown")
        .what
        .contains("an unnamed component"));
}

/// 100,000 Events in one List, streamed: every one read and aggregated, nothing lost.
/// (Time and memory are measured in docs/tasks/doctor.md, not asserted here.)
#[test]
fn a_list_of_100000_events_is_read_whole() {
    let mut text = String::from("apiVersion: v1\nkind: List\nitems:\n");
    text.push_str("- apiVersion: v1\n  kind: Node\n  metadata: {name: g0}\n  status: {allocatable: {cpu: \"1\"}}\n");
    for i in 0..100_000 {
        let (reason, message) = match i % 4 {
            0 => ("BackOff", "Back-off restarting failed container c in pod p"),
            1 => (
                "Failed",
                "Failed to pull image \\\"nvcr.io/x/y:1\\\": 401 Unauthorized",
            ),
            2 => ("Scheduled", "Successfully assigned ml/p to g0"),
            _ => ("SomethingOdd", "odd"),
        };
        let kind = if i % 4 == 2 { "Normal" } else { "Warning" };
        text.push_str(&format!(
            "- apiVersion: v1\n  kind: Event\n  metadata: {{name: e{i}, namespace: ml}}\n  \
             involvedObject: {{kind: Pod, name: p{}, namespace: ml}}\n  reason: {reason}\n  \
             message: \"{message}\"\n  source: {{component: kubelet, host: g0}}\n  type: {kind}\n  \
             count: 2\n  lastTimestamp: \"2025-06-02T{:02}:{:02}:00Z\"\n",
            i % 500,
            (i / 60) % 24,
            i % 60
        ));
    }
    let s = snap(&text).unwrap();
    assert_eq!(s.events.read, 100_000);
    assert_eq!(s.events.kept(), 75_000);
    assert_eq!(s.events.normal.get("Scheduled"), Some(&50_000));
    let d = diagnose(&s, &DoctorOptions::default());
    let total = |sig: &str| {
        signature(&d, sig)
            .incidents
            .iter()
            .map(|i| i.count)
            .sum::<u64>()
    };
    assert_eq!(total("container-crashloop/CrashLoopBackOff/pod"), 50_000);
    assert_eq!(total("image-pull-failed/ErrImagePull/auth"), 50_000);
    assert_eq!(total("event-other/SomethingOdd/kubelet"), 50_000);
    assert_eq!(
        signature(&d, "image-pull-failed/ErrImagePull/auth")
            .r#where
            .len(),
        125
    );
}

#[test]
fn a_rule_for_every_signature_found_and_known() {
    // Every signature the example finds has a rule, its runbook the finding's fix.
    let d = run(EVENTS);
    for f in &d.findings {
        let sig = f.signature.clone().unwrap_or_else(|| f.id.clone());
        let rule = signature_rule(&sig).unwrap_or_else(|e| panic!("{sig}: {e}"));
        assert_eq!(rule.check.id, f.id);
        if f.signature.is_some() {
            assert_eq!(rule.runbook, f.fix, "{sig}");
        }
        if !rule.kube_state_metrics {
            assert!(
                rule.expr
                    .contains(&format!("kestrel_doctor_finding{{signature=\"{sig}\"}}")),
                "{}",
                rule.expr
            );
        }
    }
    // Where kube-state-metrics carries the signature, the rule reads it.
    let crash = signature_rule("container-crashloop/CrashLoopBackOff/gpu-pod").unwrap();
    assert!(crash.kube_state_metrics);
    assert!(crash
        .expr
        .contains("kube_pod_container_status_waiting_reason{reason=\"CrashLoopBackOff\"}"));
    assert!(crash.expr.contains(" and on (namespace, pod) "));
    let cpu = signature_rule("container-crashloop/CrashLoopBackOff/pod").unwrap();
    assert!(cpu.expr.contains(" unless on (namespace, pod) "));
    let xid = signature_rule("gpu-unhealthy/XidError/xid-79").unwrap();
    assert_eq!(xid.expr, "DCGM_FI_DEV_XID_ERRORS == 79");
    assert!(xid.runbook.contains("fallen off the bus"));
    assert!(
        !signature_rule("gpu-unhealthy/GpuLost/lost")
            .unwrap()
            .kube_state_metrics
    );
    assert!(signature_rule("gpu-unhealthy/XidError/xid-").is_err());
    let driver = signature_rule("operator-pod-not-ready/NotReady/gpu-driver").unwrap();
    assert!(
        driver
            .expr
            .contains("owner_name=~\"nvidia-(gpu-)?driver.*\""),
        "{}",
        driver.expr
    );
    // Every closed signature gives a rule; open ones take any label-safe parts.
    for sig in known_signatures().iter().filter(|s| !s.contains('<')) {
        let r = signature_rule(sig).unwrap_or_else(|e| panic!("{sig}: {e}"));
        assert!(
            !r.runbook.is_empty() && r.alert.starts_with("Kestrel"),
            "{sig}"
        );
    }
    assert!(signature_rule("event-other/SomethingNew/my-operator").is_ok());
    // Unknown ones: named, with what is wrong and how to find valid ones.
    for (bad, says) in [
        (
            "image-pull-failed/ErrImagePull/bogus",
            "image-pull-failed has no pattern \"bogus\"",
        ),
        (
            "image-pull-failed/Failed/auth",
            "has the reason ErrImagePull, not \"Failed\"",
        ),
        ("no-such-check", "no check is called \"no-such-check\""),
        (
            "node-not-ready/X/y",
            "node-not-ready is a check without signatures",
        ),
        ("image-pull-failed/auth", "neither one part"),
        (
            "event-other/Bad Reason/x",
            "letters, digits, dots and dashes",
        ),
    ] {
        let e = signature_rule(bad).unwrap_err();
        assert!(
            e.starts_with(&format!("unknown signature {bad:?}: ")),
            "{e}"
        );
        assert!(e.contains(says), "{e}");
        assert!(
            e.contains("kestrel doctor --json")
                && e.contains("\n  pod-sandbox-failed/FailedCreatePodSandBox/sriov-no-vf"),
            "{e}"
        );
    }
    // The YAML is a PrometheusRule whose runbook annotation is the fix.
    let yaml =
        render_signature_rule("pod-sandbox-failed/FailedCreatePodSandBox/sriov-no-vf").unwrap();
    let doc = &parse_yaml(&yaml).unwrap()[0];
    assert_eq!(doc["kind"], "PrometheusRule");
    let rule = &doc["spec"]["groups"][0]["rules"][0];
    assert_eq!(
        rule["labels"]["kestrel_signature"],
        "pod-sandbox-failed/FailedCreatePodSandBox/sriov-no-vf"
    );
    assert_eq!(
        rule["annotations"]["runbook"],
        fix_for("pod-sandbox-failed/FailedCreatePodSandBox/sriov-no-vf")
    );
    assert_eq!(rule["for"], "5m");
}

/// A ResourceSlice of NVIDIA's DRA driver for `node` with `gpus` devices, of pool
/// generation `generation` (one of `count` slices).
fn gpu_slice(name: &str, node: &str, gpus: usize, generation: i64, count: i64) -> String {
    let devices: Vec<String> = (0..gpus).map(|i| format!("{{name: gpu-{i}}}")).collect();
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: {name}}}\n\
         spec: {{driver: gpu.nvidia.com, nodeName: {node}, pool: {{name: {node}, generation: \
         {generation}, resourceSliceCount: {count}}}, devices: [{}]}}\n---\n",
        devices.join(", ")
    )
}

#[test]
fn gpus_published_through_dra_count_as_the_nodes_gpus() {
    // A DRA-only GPU node: GFD's labels, no nvidia.com/gpu, its GPUs in a ResourceSlice.
    let dra_node = node("d0", GPU_LABELS, GPU_TAINT, "", "");
    let d = run(&(dra_node.clone() + &gpu_slice("d0-gpus", "d0", 8, 1, 1)));
    assert!(!ids(&d).contains(&"gpu-node-without-gpus"), "{:?}", ids(&d));
    // A slice of an empty pool, or of another node, does not.
    let d = run(&(dra_node + &gpu_slice("d9-gpus", "d9", 8, 1, 1)));
    assert_eq!(finding(&d, "gpu-node-without-gpus").r#where.len(), 1);
}

#[test]
fn claims_pending_pods_wait_on_and_never_allocated_are_reported() {
    let claim = |name: &str, created: &str, allocated: bool| {
        let status = if allocated {
            "status: {allocation: {devices: {results: [{request: gpu, driver: gpu.nvidia.com, \
             pool: d0, device: gpu-0}]}}}\n"
        } else {
            ""
        };
        format!(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: {name}, \
             namespace: ml, creationTimestamp: \"{created}\"}}\nspec: {{devices: {{requests: \
             [{{name: gpu, exactly: {{deviceClassName: gpu.nvidia.com}}}}]}}}}\n{status}---\n"
        )
    };
    let user = |pod_name: &str, claim: &str| {
        pod(
            pod_name,
            None,
            "",
            &format!("  resourceClaims: [{{name: gpu, resourceClaimName: {claim}}}]\n"),
        )
    };
    let event_now = "apiVersion: v1\nkind: Event\nmetadata: {name: e, namespace: ml}\n\
                     involvedObject: {kind: Pod, name: w0, namespace: ml}\nreason: Scheduled\n\
                     type: Normal\nmessage: m\nlastTimestamp: \"2026-12-06T12:00:00Z\"\n---\n";
    let text = node("g0", "", "", "", "")
        + event_now
        + &claim("old", "2026-12-06T10:00:00Z", false)
        + &claim("young", "2026-12-06T11:59:00Z", false)
        + &claim("done", "2026-12-06T10:00:00Z", true)
        + &claim("unused", "2026-12-06T10:00:00Z", false)
        + &user("w0", "old")
        + &user("w1", "young")
        + &user("w2", "done");
    let d = run(&text);
    let f = finding(&d, "dra-claim-unallocated");
    assert_eq!(f.severity, Severity::Warning);
    // Only the claim older than --pending-for (15m) that a pending pod waits on.
    assert_eq!(f.r#where.len(), 1, "{:?}", f.r#where);
    assert!(
        f.r#where[0].starts_with("ml/old (2h")
            && f.r#where[0].contains("class gpu.nvidia.com")
            && f.r#where[0].contains("pods ml/w0"),
        "{:?}",
        f.r#where
    );
    assert!(f.what.contains("1 ResourceClaim"), "{}", f.what);
}

#[test]
fn pools_with_missing_or_stale_slices_are_reported() {
    let text = node("g0", "", "", "", "")
        // Complete.
        + &gpu_slice("a", "n1", 8, 2, 1)
        // Generation 3 says two slices; one is there, and one of generation 2 lingers.
        + &gpu_slice("b-old", "n2", 4, 2, 2)
        + &gpu_slice("b-new", "n2", 4, 3, 2);
    let d = run(&text);
    let f = finding(&d, "dra-pool-incomplete");
    assert_eq!(
        f.r#where,
        vec!["gpu.nvidia.com pool n2 (generation 3: 1 of 2 slices, 1 slice of older generations)"]
    );
    let complete = node("g0", "", "", "", "") + &gpu_slice("a", "n1", 8, 2, 1);
    assert!(!ids(&run(&complete)).contains(&"dra-pool-incomplete"));
}
