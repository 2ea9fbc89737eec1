//! Reading snapshots, the text report and the PrometheusRule.

use super::*;

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
