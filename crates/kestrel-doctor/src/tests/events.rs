//! Events and container states: signatures, ages, both Event APIs, bad and unknown events,
//! one alert rule per signature.

use super::*;

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
const EVENTS: &str = include_str!("../../../../examples/doctor/events.yaml");

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
