//! `kestrel doctor` as a user runs it, on the snapshots in examples/doctor/.

use kestrel_test_support::cli::{text, Cli};
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use kestrel_testenv::workspace_root as repo;

/// A file in a fresh temporary directory, removed by the caller's `cleanup`.
fn temp_file(name: &str, contents: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kestrel-doctor-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

const KESTREL: Cli = kestrel_test_support::kestrel_cli!();

fn cleanup(path: &Path) {
    std::fs::remove_dir_all(path.parent().unwrap()).ok();
}

const ALL_CHECKS: [&str; 12] = [
    "gpu-node-without-gpus",
    "gpu-count-dropped",
    "gpu-node-untainted",
    "cpu-pod-on-gpu-node",
    "pod-stranded-by-taints",
    "pod-resource-unavailable",
    "node-not-ready",
    "node-pressure",
    "gpu-driver-version-mixed",
    "gpu-operand-version-mixed",
    "kubelet-version-mixed",
    "pod-pending-long",
];

/// The checks of DRA objects (examples/doctor/dra.yaml shows them).
const DRA_CHECKS: [&str; 2] = ["dra-claim-unallocated", "dra-pool-incomplete"];

/// The checks on events, container states, networks and operator pods.
const EVENT_CHECKS: [&str; 11] = [
    "image-pull-failed",
    "container-crashloop",
    "container-oom-killed",
    "pod-sandbox-failed",
    "volume-mount-failed",
    "pod-network-attachment-failed",
    "operator-pod-not-ready",
    "gpu-unhealthy",
    "node-usage-high",
    "pod-failed-scheduling",
    "event-other",
];

#[test]
fn the_example_cluster_shows_every_check_and_exits_2() {
    let out = KESTREL.run(&["doctor", "examples/doctor/cluster.yaml"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    assert!(
        stdout.starts_with(
            "kestrel doctor: examples/doctor/cluster.yaml\n\
             8 nodes (6 with GPUs, 35 GPUs allocatable), 14 pods (5 pending), as of 2025-06-02T10:00:00Z\n"
        ),
        "{stdout}"
    );
    for id in ALL_CHECKS {
        assert!(
            stdout.contains(&format!("[{id}]")),
            "{id} missing:\n{stdout}"
        );
    }
    // Grouped by severity, in this order.
    let (c, w, i) = (
        stdout.find("\nCRITICAL (3)\n").expect(&stdout),
        stdout.find("\nWARNING (9)\n").expect(&stdout),
        stdout.find("\nINFO (2)\n").expect(&stdout),
    );
    assert!(c < w && w < i, "{stdout}");
    for expected in [
        "[gpu-node-without-gpus] 1 node labelled as having NVIDIA GPUs advertises no allocatable nvidia.com/gpu",
        "where: gpu-2 (NVIDIA-H100-80GB-HBM3, nvidia.com/gpu.count=8, allocatable 0)",
        "where: gpu-1 (7 of 8 nvidia.com/gpu allocatable)",
        "[gpu-node-untainted] 1 of 6 GPU nodes has no GPU taint, while 5 have nvidia.com/gpu=present:NoSchedule",
        "where: web/docs-site-7c9d8b6f5-q2w8z on gpu-3",
        "[pod-stranded-by-taints] 2 pending pods fit 1 node (l40s-0) but do not tolerate the taint dedicated=inference:NoSchedule",
        "[pod-resource-unavailable] 1 pending pod requests rdma/rdma_shared_device_a, which no node offers",
        "where: gpu-4 (Ready=Unknown since 2025-06-02T08:41:00Z: NodeStatusUnknown: Kubelet stopped posting node status.)",
        "[node-pressure] 1 node is under DiskPressure",
        "[gpu-driver-version-mixed] 6 GPU nodes run 2 NVIDIA driver versions",
        "570.124.06: gpu-0, gpu-1, gpu-2, gpu-4, l40s-0 (5 nodes)",
        "[gpu-operand-version-mixed] DaemonSet gpu-operator/nvidia-device-plugin-daemonset runs 2 different images",
        "v1.32.5: gpu-3 (1 node)",
        "where: llm-research/pretrain-7b-ablation-a-0 (2h20m)",
        "      - inference/embed-server-5d7f9c8b4-hx2lp (1h45m)\n      - inference/embed-server-5d7f9c8b4-k9v3n (1h45m)\n",
        "[pod-pending-long] 1 pod unschedulable for over 15m: 0/8 nodes are available: 8 Insufficient rdma/rdma_shared_device_a.",
        "[gpu-count-dropped] 1 GPU node has fewer allocatable GPUs than installed",
        "[cpu-pod-on-gpu-node] 1 pod that requests no GPU runs on 1 GPU node",
        "3 critical, 9 warning, 2 info",
    ] {
        assert!(stdout.contains(expected), "{expected:?} missing:\n{stdout}");
    }
    // The pod pending for 4 minutes is not reported as long; the finished one is ignored.
    assert!(
        !stdout.contains("notebook-ana-0") && !stdout.contains("smoke-test"),
        "{stdout}"
    );
    // Every finding says why and what to do.
    assert_eq!(stdout.matches("\n    why:   ").count(), 14, "{stdout}");
    assert_eq!(stdout.matches("\n    fix:   ").count(), 14, "{stdout}");
}

#[test]
fn json_is_a_stable_array_of_findings() {
    let out = KESTREL.run(&["doctor", "examples/doctor/cluster.yaml", "--json"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let json: Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    let findings = json.as_array().expect("an array");
    assert_eq!(findings.len(), 14);
    let mut ids = BTreeSet::new();
    for f in findings {
        let keys: BTreeSet<&str> = f.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            BTreeSet::from(["id", "severity", "what", "where", "why", "fix"]),
            "{f}"
        );
        assert!(["critical", "warning", "info"].contains(&f["severity"].as_str().unwrap()));
        for k in ["what", "why", "fix"] {
            assert!(!f[k].as_str().unwrap().is_empty(), "{f}");
        }
        assert!(!f["where"].as_array().unwrap().is_empty(), "{f}");
        ids.insert(f["id"].as_str().unwrap().to_string());
    }
    assert_eq!(ids, ALL_CHECKS.iter().map(|s| s.to_string()).collect());
    // Sorted by severity: critical first, info last.
    assert_eq!(findings[0]["severity"], "critical");
    assert_eq!(findings[13]["severity"], "info");
    let stranded = findings
        .iter()
        .find(|f| f["id"] == "pod-stranded-by-taints")
        .unwrap();
    assert_eq!(
        stranded["where"],
        serde_json::json!([
            "inference/embed-server-5d7f9c8b4-hx2lp, wants 1 nvidia.com/gpu",
            "inference/embed-server-5d7f9c8b4-k9v3n, wants 1 nvidia.com/gpu"
        ])
    );
    // The same input gives the same output.
    let (again, _) = text(&KESTREL.run(&["doctor", "examples/doctor/cluster.yaml", "--json"]));
    assert_eq!(stdout, again);
}

#[test]
fn a_healthy_cluster_exits_0() {
    let out = KESTREL.run(&["doctor", "examples/doctor/healthy.yaml"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("no problems found"), "{stdout}");
    assert!(stdout.contains("0 critical, 0 warning, 0 info"), "{stdout}");
    let out = KESTREL.run(&["doctor", "examples/doctor/healthy.yaml", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out).0.trim(), "[]");
    // A shorter threshold makes the 2-minute-old pending pod a finding.
    let out = KESTREL.run(&[
        "doctor",
        "examples/doctor/healthy.yaml",
        "--pending-for",
        "1m",
    ]);
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(
        stdout.contains("[pod-pending-long] 1 pod unschedulable for over 1m"),
        "{stdout}"
    );
}

#[test]
fn several_files_and_stdin_make_one_snapshot() {
    let extra = temp_file(
        "extra.yaml",
        "apiVersion: v1\nkind: Node\nmetadata: {name: gpu-9, labels: {nvidia.com/gpu.present: \"true\"}}\n\
         status: {allocatable: {cpu: \"8\"}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
    );
    let out = KESTREL.run(&[
        "doctor",
        "examples/doctor/healthy.yaml",
        extra.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stdout.contains("[gpu-node-without-gpus]") && stdout.contains("gpu-9"));
    assert!(
        stdout.contains("4 nodes (3 with GPUs, 16 GPUs allocatable)"),
        "{stdout}"
    );
    assert!(
        stderr.contains("note: ")
            && stderr
                .contains("ignored 1 object of a kind kestrel doctor does not read: ConfigMap (1)"),
        "{stderr}"
    );
    cleanup(&extra);

    let mut child = KESTREL
        .command()
        .args(["doctor", "-", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let snapshot = std::fs::read_to_string(repo().join("examples/doctor/healthy.yaml")).unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(snapshot.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    assert_eq!(text(&out).0.trim(), "[]");
}

#[test]
fn prometheus_rules_are_one_alert_per_check() {
    let out = KESTREL.run(&["doctor", "--prometheus-rules"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let docs = kestrel_doctor::parse_yaml(&stdout).expect("valid YAML");
    assert_eq!(docs.len(), 1);
    let rule = &docs[0];
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["kind"], "PrometheusRule");
    assert!(rule["metadata"]["name"].as_str().is_some());
    let rules: Vec<&Value> = rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .collect();
    let checks: Vec<&str> = rules
        .iter()
        .map(|r| r["labels"]["kestrel_check"].as_str().unwrap())
        .collect();
    let all: Vec<&str> = ALL_CHECKS
        .iter()
        .chain(&DRA_CHECKS)
        .chain(&EVENT_CHECKS)
        .copied()
        .collect();
    assert_eq!(checks, all, "one rule per check, in check order");
    for r in &rules {
        assert!(r["alert"].as_str().unwrap().starts_with("Kestrel"), "{r}");
        assert!(!r["expr"].as_str().unwrap().is_empty(), "{r}");
        assert!(r["for"].as_str().is_some(), "{r}");
        assert!(
            ["critical", "warning", "info"].contains(&r["labels"]["severity"].as_str().unwrap())
        );
        assert!(
            !r["annotations"]["summary"].as_str().unwrap().is_empty(),
            "{r}"
        );
        assert!(
            !r["annotations"]["description"].as_str().unwrap().is_empty(),
            "{r}"
        );
    }
    let exprs: String = rules.iter().map(|r| r["expr"].as_str().unwrap()).collect();
    for metric in [
        "kube_node_status_allocatable{resource=\"nvidia_com_gpu\"}",
        "kube_node_status_condition",
        "kube_pod_status_phase",
        "kube_node_spec_taint",
        "DCGM_FI_DEV_",
    ] {
        assert!(exprs.contains(metric), "no rule uses {metric}");
    }
    // The severities match the findings'.
    let json: Value = serde_json::from_str(
        &text(&KESTREL.run(&["doctor", "examples/doctor/cluster.yaml", "--json"])).0,
    )
    .unwrap();
    for f in json.as_array().unwrap() {
        let r = rules
            .iter()
            .find(|r| r["labels"]["kestrel_check"] == f["id"])
            .unwrap();
        assert_eq!(r["labels"]["severity"], f["severity"], "{}", f["id"]);
    }
}

#[test]
fn bad_input_fails_with_a_clear_message_and_exit_1() {
    let expect_error = |args: &[&str], parts: &[&str]| {
        let out = KESTREL.run(args);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stdout}\n{stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert!(stderr.starts_with("error: "), "{stderr}");
        for p in parts {
            assert!(stderr.contains(p), "{args:?}: {p:?} missing in {stderr}");
        }
    };
    expect_error(
        &["doctor", "no/such/snapshot.yaml"],
        &["no/such/snapshot.yaml", "cannot read", "No such file"],
    );
    expect_error(&["doctor"], &["nothing to diagnose", "--live"]);
    expect_error(
        &["doctor", "examples/doctor/cluster.yaml", "--live"],
        &["not both"],
    );
    expect_error(
        &[
            "doctor",
            "examples/doctor/cluster.yaml",
            "--kubeconfig",
            "k",
        ],
        &["--kubeconfig is for --live"],
    );
    expect_error(
        &["doctor", "--prometheus-rules", "--json"],
        &["--prometheus-rules prints the alerting rules only"],
    );
    expect_error(
        &[
            "doctor",
            "--alert-for",
            "image-pull-failed/ErrImagePull/bogus",
        ],
        &[
            "unknown signature \"image-pull-failed/ErrImagePull/bogus\"",
            "no pattern \"bogus\"",
            "kestrel doctor --json",
            "image-pull-failed/ErrImagePull/auth",
        ],
    );
    expect_error(
        &["doctor", "--alert-for", "node-not-ready", "--live"],
        &["--alert-for prints one alerting rule only"],
    );

    let not_yaml = temp_file("not-yaml.yaml", "items: [unclosed\n");
    expect_error(
        &["doctor", not_yaml.to_str().unwrap()],
        &["not-yaml.yaml", "not valid YAML"],
    );
    cleanup(&not_yaml);

    let scalar = temp_file("scalar.yaml", "just some text\n");
    expect_error(
        &["doctor", scalar.to_str().unwrap()],
        &["scalar.yaml", "not a Kubernetes object"],
    );
    cleanup(&scalar);

    let no_nodes = temp_file(
        "pods-only.yaml",
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p, namespace: a}\n  spec: {containers: [{name: c, image: i}]}\n- apiVersion: v1\n  kind: Service\n  metadata: {name: s}\n",
    );
    expect_error(
        &["doctor", no_nodes.to_str().unwrap()],
        &[
            "pods-only.yaml",
            "no Node objects in the file",
            "kubectl get events,nodes,pods -A -o yaml",
        ],
    );
    cleanup(&no_nodes);

    let bad_node = temp_file(
        "bad-node.yaml",
        "apiVersion: v1\nkind: Node\nmetadata: {name: gpu-0}\nstatus: {allocatable: {nvidia.com/gpu: eight}}\n",
    );
    expect_error(
        &["doctor", bad_node.to_str().unwrap()],
        &[
            "bad-node.yaml",
            "Node gpu-0",
            "status.allocatable.nvidia.com/gpu",
            "\"eight\"",
        ],
    );
    cleanup(&bad_node);

    // --live against an API server that is not there.
    let kubeconfig = temp_file(
        "kubeconfig",
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:1\"}\n\
         users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
    );
    expect_error(
        &[
            "doctor",
            "--live",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
        ],
        &["listing Nodes from the API server at https://127.0.0.1:1"],
    );
    cleanup(&kubeconfig);
}

#[test]
fn events_and_container_states_give_signatures_and_incidents() {
    let out = KESTREL.run(&["doctor", "examples/doctor/events.yaml"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(
        stdout
            .contains("17 events (1 Normal of reasons no check reads), as of 2025-06-02T10:00:00Z"),
        "{stdout}"
    );
    for line in [
        "[image-pull-failed] 1 pod cannot pull images from nvcr.io: the registry refuses the credentials (authentication)",
        "[container-crashloop] 1 GPU pod has a container that restarts in a loop (CrashLoopBackOff)",
        "[pod-sandbox-failed] 1 pod cannot get a network from sriov: the SR-IOV CNI got no VF (virtual function) for them",
        "[operator-pod-not-ready] the NVIDIA driver pod is not ready on 1 node",
        "[event-other] 2 Warning events FreeDiskSpaceFailed from kubelet about 1 object",
        "    seen:  5 events, 2025-06-02T07:10:00Z to 2025-06-02T09:35:00Z, in 2 incidents",
    ] {
        assert!(stdout.contains(line), "{line:?} not in\n{stdout}");
    }
    // JSON: the same findings with a stable signature and their incidents.
    let json = |args: &[&str]| -> Vec<Value> {
        let out = KESTREL.run(args);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out).1);
        let v: Value = serde_json::from_str(&text(&out).0).expect("JSON");
        v.as_array().unwrap().clone()
    };
    let all = json(&["doctor", "examples/doctor/events.yaml", "--json"]);
    let by_sig = |findings: &[Value], sig: &str| -> Option<Value> {
        findings.iter().find(|f| f["signature"] == sig).cloned()
    };
    let rate = by_sig(&all, "image-pull-failed/ErrImagePull/rate-limit").unwrap();
    assert_eq!(
        rate["incidents"],
        serde_json::json!([
            {"first_seen": "2025-06-02T07:10:00Z", "last_seen": "2025-06-02T07:20:00Z", "count": 3,
             "nodes": ["gpu-0"], "pods": ["ml/prep-1"]},
            {"first_seen": "2025-06-02T09:30:00Z", "last_seen": "2025-06-02T09:35:00Z", "count": 2,
             "nodes": ["gpu-1"], "pods": ["ml/prep-2"]}
        ])
    );
    // --since: the day-old pull failure and the early burst are out.
    let recent = json(&[
        "doctor",
        "examples/doctor/events.yaml",
        "--json",
        "--since",
        "1h",
    ]);
    assert!(by_sig(&recent, "image-pull-failed/ErrImagePull/not-found").is_none());
    assert!(by_sig(&all, "image-pull-failed/ErrImagePull/not-found").is_some());
    let rate = by_sig(&recent, "image-pull-failed/ErrImagePull/rate-limit").unwrap();
    assert_eq!(rate["incidents"].as_array().unwrap().len(), 1);
    // The same input gives the same output.
    let again = json(&["doctor", "examples/doctor/events.yaml", "--json"]);
    assert_eq!(all, again);
    // Each signature found has its alert rule.
    for f in &all {
        let Some(sig) = f["signature"].as_str() else {
            continue;
        };
        let out = KESTREL.run(&["doctor", "--alert-for", sig]);
        let (rule, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "{sig}: {stderr}");
        let docs = kestrel_doctor::parse_yaml(&rule).expect("valid YAML");
        let r = &docs[0]["spec"]["groups"][0]["rules"][0];
        assert_eq!(r["labels"]["kestrel_signature"], sig);
        assert_eq!(r["annotations"]["runbook"], f["fix"], "{sig}");
    }
}

#[test]
fn the_dra_example_shows_the_dra_checks_and_no_false_gpu_alarm() {
    let out = KESTREL.run(&["doctor", "examples/doctor/dra.yaml"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    for id in DRA_CHECKS {
        assert!(
            stdout.contains(&format!("[{id}]")),
            "{id} missing:\n{stdout}"
        );
    }
    for expected in [
        "[dra-claim-unallocated] 1 ResourceClaim that pending pods wait on is unallocated",
        "where: ml/train-0-gpu-x7k2p (45m, class gpu.nvidia.com; pods ml/train-0)",
        "where: gpu.nvidia.com pool dra-1 (generation 4: 1 of 2 slices, 1 slice of older generations)",
        // The newest generation's devices count: four of the eight GPUs dra-1 has.
        "where: dra-1 (4 allocatable, label nvidia.com/gpu.count=8)",
        "the NVIDIA DRA driver (kubelet plugin) pod is missing on some nodes",
        "DaemonSet nvidia-dra-driver-gpu/nvidia-dra-driver-gpu-kubelet-plugin: its pod runs on 1 of the 2 nodes it should (1 ready)",
    ] {
        assert!(stdout.contains(expected), "{expected:?} missing:\n{stdout}");
    }
    // Its GPU nodes publish their GPUs through DRA only: not "without GPUs", and dra-0's
    // eight are all there.
    assert!(!stdout.contains("[gpu-node-without-gpus]"), "{stdout}");
    assert!(!stdout.contains("dra-0 ("), "{stdout}");
}
