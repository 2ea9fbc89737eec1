//! `kestrel upgrade plan|simulate|run` as a user runs them (`run` against a cluster is in
//! live_drain.rs; here what it refuses before it reaches one).

use kestrel_test_support::cli::{text, Cli};

const KESTREL: Cli = kestrel_test_support::kestrel_cli!();

const COMPAT: &str = "examples/falcon-ai-upgrade/compatibility.yaml";

#[test]
fn upgrade_plan_prints_batches_control_plane_first() {
    let out = KESTREL.run(&[
        "upgrade",
        "plan",
        "examples/falcon-ai-32",
        "--max-nodes",
        "4",
        "--max-gpus",
        "24",
        "--compatibility",
        COMPAT,
        "--target",
        "driver=570.148.08",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("13 batches, 39 nodes"), "{stdout}");
    assert!(lines[1].contains("pool cp") && lines[1].contains("cp-0 cp-1 cp-2"));
    // 24 GPUs: three DGX nodes a batch, though 4 nodes are allowed.
    assert!(
        lines[3].contains("pool gpu") && lines[3].contains("24 GPUs"),
        "{stdout}"
    );
    assert!(lines[3].ends_with("gpu-00 gpu-01 gpu-02"), "{stdout}");
}

#[test]
fn upgrade_plan_refuses_bad_input_by_field() {
    let dir = std::env::temp_dir().join(format!("kestrel-upgrade-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let broken = dir.join("compat.yaml");
    std::fs::write(&broken, "driver: [570.148.08\n").unwrap();
    let broken = broken.to_str().unwrap();
    let cases: [(&[&str], &[&str]); 5] = [
        (
            &["--max-nodes", "2", "--max-gpus", "4"],
            &[
                "node gpu-0 (pool gpu)",
                "8 GPUs",
                "raise --max-gpus to at least 8",
            ],
        ),
        (
            &["--max-nodes", "0", "--max-gpus", "8"],
            &["--max-nodes is 0"],
        ),
        (
            &["--max-nodes", "1", "--max-gpus", "8", "--pools", "gpus"],
            &["--pools", "\"gpus\"", "known pools: cp, cpu, gpu"],
        ),
        (
            &[
                "--max-nodes",
                "1",
                "--max-gpus",
                "8",
                "--compatibility",
                COMPAT,
                "--target",
                "gpuOperator=v26.1.0",
            ],
            &[
                COMPAT,
                "field gpuOperator",
                "v26.1.0",
                "allowed: v25.3.0, v25.3.1",
            ],
        ),
        (
            &[
                "--max-nodes",
                "1",
                "--max-gpus",
                "8",
                "--compatibility",
                broken,
                "--target",
                "driver=570.148.08",
            ],
            &[broken, "not a compatibility list"],
        ),
    ];
    for (flags, wanted) in cases {
        let mut args = vec!["upgrade", "plan", "examples/falcon-ai"];
        args.extend_from_slice(flags);
        let out = KESTREL.run(&args);
        let (stdout, stderr) = text(&out);
        assert!(!out.status.success(), "{flags:?} was accepted: {stdout}");
        assert!(stdout.is_empty(), "{flags:?} printed a plan: {stdout}");
        for w in wanted {
            assert!(stderr.contains(w), "{flags:?}: {w:?} not in {stderr}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn upgrade_simulate_compares_the_strategies_on_falcon_ai_32() {
    let out = KESTREL.run(&[
        "upgrade",
        "simulate",
        "--cluster",
        "examples/falcon-ai-32/cluster.yaml",
        "examples/falcon-ai-upgrade/workload.yaml",
        "--pools",
        "gpu",
        "--max-nodes",
        "4",
        "--max-gpus",
        "32",
        "--start",
        "12:00",
        "--json",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    let runs = json["strategies"].as_array().unwrap();
    let (plain, aware) = (&runs[0], &runs[1]);
    assert_eq!(plain["strategy"], "plain");
    assert_eq!(aware["strategy"], "checkpoint-aware");
    let lost = |r: &serde_json::Value| r["lost_gpu_hours"].as_f64().unwrap();
    let took = |r: &serde_json::Value| {
        r["finished_at"].as_u64().unwrap() - r["started_at"].as_u64().unwrap()
    };
    // The target: at least 90% less work lost, in the same time or less.
    assert!(lost(plain) > 10.0, "{plain}");
    assert!(lost(aware) <= 0.1 * lost(plain), "{plain}\n{aware}");
    assert!(took(aware) <= took(plain), "{plain}\n{aware}");
    for r in runs {
        assert!(r["max_nodes_offline"].as_u64().unwrap() <= 4, "{r}");
        assert!(r["max_gpus_offline"].as_u64().unwrap() <= 32, "{r}");
        assert_eq!(r["nodes_upgraded"], 31, "{r}");
        assert_eq!(r["nodes_gone"], serde_json::json!([]), "{r}");
    }
    // gpu-13 was pulled for repair at 11:00: the plan made at 12:00 leaves it out.
    let planned: Vec<&str> = json["batches"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|b| b["nodes"].as_array().unwrap())
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(planned.len(), 31);
    assert!(!planned.contains(&"gpu-13"), "{planned:?}");
}

/// `upgrade run` checks what it is given before it talks to the cluster: a compatibility
/// list that does not parse, a target off the list, a handover or done label that is not
/// KEY=VALUE, `--start` (a simulator option). The kubeconfig it is given does not exist,
/// so reaching the cluster would fail differently.
#[test]
fn upgrade_run_refuses_bad_input_before_touching_the_cluster() {
    let dir = std::env::temp_dir().join(format!("kestrel-upgrade-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let broken = dir.join("compat.yaml");
    std::fs::write(&broken, "drivers: [\"570.148.08\"]\n").unwrap();
    let broken = broken.to_str().unwrap();
    let base = [
        "--max-nodes",
        "1",
        "--max-gpus",
        "8",
        "--kubeconfig",
        "/nonexistent/kubeconfig",
    ];
    let cases: [(&[&str], &[&str]); 5] = [
        (
            &[
                "--compatibility",
                broken,
                "--target",
                "driver=570.148.08",
                "--set-label",
                "a=b",
                "--done-label",
                "c=d",
            ],
            &[broken, "not a compatibility list", "drivers"],
        ),
        (
            &[
                "--compatibility",
                COMPAT,
                "--target",
                "driver=999",
                "--set-label",
                "a=b",
                "--done-label",
                "c=d",
            ],
            &[COMPAT, "field driver", "999"],
        ),
        (
            &["--set-label", "nolabel", "--done-label", "c=d"],
            &["--set-label \"nolabel\"", "KEY=VALUE"],
        ),
        (
            &["--set-label", "a=b", "--done-label", "=d"],
            &["--done-label \"=d\"", "KEY=VALUE"],
        ),
        (
            &["--start", "1h", "--set-label", "a=b", "--done-label", "c=d"],
            &["--start applies to `upgrade plan`"],
        ),
    ];
    for (flags, wanted) in cases {
        let mut args = vec!["upgrade", "run"];
        args.extend_from_slice(&base);
        args.extend_from_slice(flags);
        let out = KESTREL.run(&args);
        let (stdout, stderr) = text(&out);
        assert!(!out.status.success(), "{flags:?} was accepted: {stdout}");
        for w in wanted {
            assert!(stderr.contains(w), "{flags:?}: {w:?} not in {stderr}");
        }
        assert!(
            !stderr.contains("kubeconfig"),
            "{flags:?} reached the cluster: {stderr}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
