//! `kestrel explain` and `kestrel queue` as a user runs them: real explanations on the
//! examples, and clear errors for names and times that do not resolve.

mod dashboard;

use kestrel_test_support::cli::{text, Cli};

use kestrel_testenv::workspace_root as repo;

const KESTREL: Cli = kestrel_test_support::kestrel_cli!();

fn have(example: &str) -> bool {
    let present = repo()
        .join("examples")
        .join(example)
        .join("workload.yaml")
        .is_file();
    if !present {
        eprintln!("skipping: examples/{example} is absent");
    }
    present
}

/// Runs and expects success with JSON on stdout.
fn json(args: &[&str]) -> serde_json::Value {
    let out = KESTREL.run(args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{args:?}: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// Runs and expects exit code 1 with an error on stderr and nothing on stdout.
fn fails(args: &[&str]) -> String {
    let out = KESTREL.run(args);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stdout}{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}

#[test]
fn a_pending_pod_is_explained_with_its_position_start_and_what_would_help() {
    if !have("falcon-ai") {
        return;
    }
    // At 10:00 on the falcon-ai day, jupyter-chen waits for a GPU behind nothing.
    let args = [
        "explain",
        "pod",
        "llm-research/jupyter-chen",
        "examples/falcon-ai",
        "--at",
        "10:00",
    ];
    let out = KESTREL.run(&args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    for part in [
        "pod llm-research/jupyter-chen at 10:00",
        "Pending for 55m00s",
        "0/9 nodes are available",
        "2 Insufficient nvidia.com/gpu",
        "position 1 of 3",
        "fits on node gpu-",
        "if 1 more GPU were free",
        "when these end (estimated runtimes)",
        "with runtimes 20% off either way",
    ] {
        assert!(stdout.contains(part), "{part:?} missing in:\n{stdout}");
    }

    let mut with_json = args.to_vec();
    with_json.push("--json");
    let v = json(&with_json);
    assert_eq!(v["phase"], "Pending");
    assert_eq!(v["at_s"], 36_000.0);
    let e = &v["explanation"];
    assert_eq!(e["total_nodes"], 9);
    assert_eq!(e["capacity"], true);
    assert!(e["queue_problem"].is_null() && e["gang_problem"].is_null());
    let reasons = e["node_reasons"].as_array().unwrap();
    assert!(
        reasons.iter().any(|r| r["kind"] == "insufficient"
            && r["subject"] == "nvidia.com/gpu"
            && r["nodes"] == 2),
        "{reasons:?}"
    );
    assert_eq!(v["position"]["position"], 1);
    assert_eq!(v["position"]["ahead"], 0);
    assert!(v["position"]["cluster_queue"].is_null());
    let p = &v["predicted_start"];
    let (from, point, to) = (
        p["from_s"].as_f64().unwrap(),
        p["point_s"].as_f64().unwrap(),
        p["to_s"].as_f64().unwrap(),
    );
    assert!(36_000.0 <= from && from <= point && point <= to, "{p}");
    assert_eq!(p["runs_s"].as_array().unwrap().len(), 3);
    let help = &v["help"];
    assert!(help["closest"]["node"]
        .as_str()
        .unwrap()
        .starts_with("gpu-"));
    assert_eq!(help["closest"]["lacks"][0]["resource"], "nvidia.com/gpu");
    let room = &help["room"];
    assert!(room["at_s"].as_f64().unwrap() >= 36_000.0, "{room}");
    assert!(!room["ending"].as_array().unwrap().is_empty(), "{room}");

    // The same pod by its bare name, and without the prediction.
    let v = json(&[
        "explain",
        "pod",
        "jupyter-chen",
        "examples/falcon-ai",
        "--at",
        "10:00",
        "--no-predict",
        "--json",
    ]);
    assert_eq!(v["pod"], "llm-research/jupyter-chen");
    assert!(v["predicted_start"].is_null());
}

#[test]
fn a_running_pod_shows_its_node_and_gpus() {
    if !have("falcon-ai") {
        return;
    }
    let v = json(&[
        "explain",
        "pod",
        "vision/jupyter-bastien",
        "examples/falcon-ai",
        "--at",
        "10:00",
        "--json",
    ]);
    assert_eq!(v["phase"], "Running");
    assert!(v["node"].as_str().unwrap().starts_with("gpu-"));
    assert_eq!(v["gpus"].as_array().unwrap().len(), 1);
    assert!(v["explanation"].is_null() && v["predicted_start"].is_null());
}

#[test]
fn a_waiting_gang_shows_its_members_and_its_problem() {
    if !have("falcon-ai") {
        return;
    }
    let v = json(&[
        "explain",
        "gang",
        "sft-13b-chat",
        "examples/falcon-ai",
        "--at",
        "08:00",
        "--json",
    ]);
    assert_eq!(v["gang"], "llm-research/sft-13b-chat");
    assert_eq!(v["phase"], "Waiting");
    assert_eq!(
        (v["exist"].clone(), v["pending"].clone()),
        (2.into(), 2.into())
    );
    assert_eq!(v["bound"], 0);
    assert_eq!(v["problem"]["kind"], "Unplaceable");
    let first = &v["first_pending_explanation"];
    assert!(
        first["message"]
            .as_str()
            .unwrap()
            .contains("Insufficient nvidia.com/gpu"),
        "{first}"
    );
    assert!(v["predicted_start"]["point_s"].as_f64().unwrap() > 8.0 * 3600.0);
}

#[test]
fn a_node_shows_its_devices_and_pods() {
    if !have("falcon-ai") {
        return;
    }
    let out = KESTREL.run(&[
        "explain",
        "node",
        "gpu-0",
        "examples/falcon-ai",
        "--at",
        "10:00",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("node gpu-0 at 10:00") && stdout.contains("nvidia.com/gpu=true:NoSchedule"),
        "{stdout}"
    );
    let v = json(&[
        "explain",
        "node",
        "gpu-0",
        "examples/falcon-ai",
        "--at",
        "10:00",
        "--json",
    ]);
    assert_eq!(v["capacity"]["gpus"], 8.0);
    assert_eq!(v["gpus"].as_array().unwrap().len(), 8);
    assert_eq!(v["cordoned"], false);
    let on_devices: usize = v["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["pods"].as_array().unwrap().len())
        .sum();
    assert!(on_devices >= 8, "{v}");
}

#[test]
fn the_queue_lists_pending_pods_in_order_with_predicted_starts() {
    if !have("falcon-ai") {
        return;
    }
    let v = json(&["queue", "examples/falcon-ai", "--at", "16:00", "--json"]);
    let pending = v["pending"].as_array().unwrap();
    assert!(pending.len() >= 5, "{v}");
    assert_eq!(v["pending_total"], pending.len());
    let positions: Vec<u64> = pending
        .iter()
        .map(|e| e["position"].as_u64().unwrap())
        .collect();
    assert!(positions.windows(2).all(|w| w[0] <= w[1]), "{positions:?}");
    assert_eq!(positions[0], 1);
    for e in pending {
        assert!(
            e["reason"].as_str().unwrap().contains("Insufficient"),
            "{e}"
        );
        let p = &e["predicted_start"];
        assert!(p["from_s"].as_f64().unwrap() >= 16.0 * 3600.0, "{e}");
    }
    let v = json(&[
        "queue",
        "examples/falcon-ai",
        "--at",
        "16:00",
        "--namespace",
        "vision",
        "--no-predict",
        "--json",
    ]);
    let pending = v["pending"].as_array().unwrap();
    assert!(!pending.is_empty());
    assert!(pending
        .iter()
        .all(|e| e["pod"].as_str().unwrap().starts_with("vision/")));
    assert!(pending.iter().all(|e| e["predicted_start"].is_null()));
}

#[test]
fn a_cluster_queue_shows_quota_usage_and_its_pending_workloads() {
    if !have("teams") {
        return;
    }
    let v = json(&[
        "explain",
        "queue",
        "research",
        "examples/teams",
        "--at",
        "02:00",
        "--json",
    ]);
    assert_eq!(v["cluster_queue"], "research");
    let gpu = v["quota"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["resource"] == "nvidia.com/gpu")
        .expect("a GPU quota line")
        .clone();
    assert_eq!(gpu["nominal"], 16.0);
    assert!(gpu["used"].as_f64().unwrap() > 0.0, "{gpu}");
    let list = v["pending_list"].as_array().unwrap();
    assert_eq!(v["pending"], list.len());
    assert!(!list.is_empty());
    assert!(list.iter().all(|e| e["cluster_queue"] == "research"));
    assert!(
        list[0]["reason"].as_str().unwrap().starts_with("quota"),
        "{list:?}"
    );

    let v = json(&[
        "queue",
        "examples/teams",
        "--at",
        "02:00",
        "--queue",
        "research",
        "--no-predict",
        "--json",
    ]);
    assert!(v["pending"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["cluster_queue"] == "research"));
}

#[test]
fn unknown_names_fail_with_the_name_and_a_suggestion() {
    if !have("falcon-ai") {
        return;
    }
    let e = fails(&[
        "explain",
        "pod",
        "jupyter-chn",
        "examples/falcon-ai",
        "--at",
        "10:00",
    ]);
    assert!(
        e.contains("pod \"jupyter-chn\" does not exist at 10:00") && e.contains("\"jupyter-chen\""),
        "{e}"
    );
    let e = fails(&["explain", "pod", "nobody/nothing", "examples/falcon-ai"]);
    assert!(e.contains("\"nobody/nothing\" does not exist"), "{e}");
    // A pod whose Job has not arrived yet is named as such.
    let e = fails(&[
        "explain",
        "pod",
        "llm-research/jupyter-emeka",
        "examples/falcon-ai",
        "--at",
        "10:00",
    ]);
    assert!(e.contains("created later") && e.contains("11:45"), "{e}");
    let e = fails(&["explain", "node", "gpu-9", "examples/falcon-ai"]);
    assert!(
        e.contains("node \"gpu-9\"") && e.contains("did you mean"),
        "{e}"
    );
    let e = fails(&["explain", "gang", "no-such-gang", "examples/falcon-ai"]);
    assert!(e.contains("gang \"no-such-gang\" does not exist"), "{e}");
    let e = fails(&["explain", "queue", "research", "examples/falcon-ai"]);
    assert!(e.contains("declares no ClusterQueues"), "{e}");
    let e = fails(&["queue", "examples/falcon-ai", "--namespace", "nope"]);
    assert!(e.contains("\"nope\""), "{e}");
}

#[test]
fn an_ambiguous_name_lists_the_candidates() {
    if !have("falcon-ai") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("kestrel-explain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pod = |ns: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: trainer\n  namespace: {ns}\n  annotations: {{kestrel.dev/sim-duration: \"1h\"}}\nspec:\n  containers:\n  - name: main\n    resources: {{requests: {{cpu: \"1\"}}}}\n"
        )
    };
    std::fs::write(
        dir.join("pods.yaml"),
        format!("{}---\n{}", pod("team-a"), pod("team-b")),
    )
    .unwrap();
    let cluster = repo().join("examples/falcon-ai/cluster.yaml");
    let pods = dir.join("pods.yaml");
    let args = [
        "explain",
        "pod",
        "trainer",
        "--cluster",
        cluster.to_str().unwrap(),
        pods.to_str().unwrap(),
    ];
    let e = fails(&args);
    assert!(
        e.contains("ambiguous") && e.contains("team-a/trainer") && e.contains("team-b/trainer"),
        "{e}"
    );
    let mut one = args.to_vec();
    one[2] = "team-b/trainer";
    one.push("--json");
    let v = json(&one);
    assert_eq!(v["pod"], "team-b/trainer");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_time_beyond_the_run_shows_the_final_state_and_run_only_flags_are_refused() {
    if !have("falcon-ai") {
        return;
    }
    let out = KESTREL.run(&[
        "explain",
        "pod",
        "jupyter-chen",
        "examples/falcon-ai",
        "--at",
        "30:00",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("nothing happens after 26:00")
            && stderr.contains("the state at 30:00 is the state from then on"),
        "{stderr}"
    );
    assert!(stdout.contains("jupyter-chen"), "{stdout}");
    let out = KESTREL.run(&["queue", "examples/falcon-ai", "--at", "3d"]);
    let (_, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let e = fails(&["queue", "examples/falcon-ai", "--until", "10h"]);
    assert!(e.contains("--until") && e.contains("--at"), "{e}");
    let out = KESTREL.run(&["queue", "examples/falcon-ai", "--at", "soon"]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("\"soon\""), "{stderr}");
}

#[test]
fn live_mode_refuses_simulator_inputs_and_names_a_missing_kubeconfig() {
    let e = fails(&["explain", "pod", "x", "examples/falcon-ai", "--live"]);
    assert!(e.contains("--live") && e.contains("input files"), "{e}");
    let e = fails(&["queue", "--live", "--at", "10:00"]);
    assert!(e.contains("leave out --at"), "{e}");
    let e = fails(&["queue", "examples/falcon-ai", "--kubeconfig", "k.yaml"]);
    assert!(e.contains("--kubeconfig is for --live"), "{e}");
    let e = fails(&[
        "explain",
        "pod",
        "x",
        "--live",
        "--kubeconfig",
        "/nonexistent/kubeconfig",
    ]);
    assert!(
        e.contains("reading the kubeconfig /nonexistent/kubeconfig"),
        "{e}"
    );
}

#[test]
fn the_explain_benchmark_answers_for_every_kind_on_a_small_cluster() {
    let v = json(&[
        "bench",
        "explain",
        "--nodes",
        "20",
        "--pending",
        "200",
        "--repeat",
        "1",
        "--json",
    ]);
    assert_eq!(v["pending"], 200);
    let kinds: Vec<&str> = v["explain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["pod", "gang", "queue", "node"]);
    assert!(v["explain"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["json_bytes"].as_u64().unwrap() > 100));
    let e = fails(&["bench", "explain", "--pending", "3"]);
    assert!(e.contains("--pending"), "{e}");
}

#[test]
fn the_prediction_budget_is_a_duration() {
    if !have("falcon-ai") {
        return;
    }
    let v = json(&[
        "queue",
        "examples/falcon-ai",
        "--at",
        "10:00",
        "--predict-budget",
        "5m",
        "--json",
    ]);
    let pending = v["pending"].as_array().unwrap();
    assert!(pending.iter().any(|e| !e["predicted_start"].is_null()));
    let err = KESTREL.run(&["queue", "examples/falcon-ai", "--predict-budget", "soon"]);
    let (stdout, stderr) = text(&err);
    assert_eq!(err.status.code(), Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains("--predict-budget") && stderr.contains("duration"),
        "{stderr}"
    );
}

/// The dashboard's JSON is `kestrel explain --json` and `kestrel queue --json` of the same
/// moment: the pending list, a waiting gang, one of its pods, its ClusterQueue and a node,
/// predicted starts included.
#[test]
fn the_dashboard_answers_what_explain_and_queue_answer_at_the_same_moment() {
    if !have("falcon-ai") {
        return;
    }
    let (_server, addr) = dashboard::start_dashboard(&repo().join("examples/falcon-ai"));
    let times: Vec<f64> =
        serde_json::from_value(dashboard::get(&addr, "/api/times")["times_s"].clone()).unwrap();
    // The last moment before 08:00: sft-13b-chat (07:00) waits for GPUs.
    let at = *times.iter().rfind(|t| **t <= 8.0 * 3600.0).unwrap();
    assert!(at > 7.0 * 3600.0, "{times:?}");
    let at_flag = format!("{}s", at as u64);
    let api = |path: &str| dashboard::get(&addr, &format!("{path}?at={at}"));
    let cli = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["examples/falcon-ai", "--at", &at_flag, "--json"]);
        json(&all)
    };

    let queue = cli(&["queue"]);
    assert_eq!(api("/api/pending"), queue, "queue --json at {at_flag}");
    let gang = cli(&["explain", "gang", "llm-research/sft-13b-chat"]);
    assert_eq!(gang["phase"], "Waiting", "{gang}");
    assert!(gang["predicted_start"]["point_s"].is_f64(), "{gang}");
    assert_eq!(api("/api/gang/llm-research/sft-13b-chat"), gang);
    let pod = gang["first_pending"].as_str().unwrap();
    assert_eq!(
        api(&format!("/api/pod/{pod}")),
        cli(&["explain", "pod", pod])
    );
    let map = api("/api/map");
    let node = map["groups"][0]["nodes"][0]["name"].as_str().unwrap();
    assert_eq!(
        api(&format!("/api/node/{node}")),
        cli(&["explain", "node", node])
    );

    // ClusterQueues: examples/teams, near 02:00, where research has pods waiting.
    let (_server, addr) = dashboard::start_dashboard(&repo().join("examples/teams"));
    let times: Vec<f64> =
        serde_json::from_value(dashboard::get(&addr, "/api/times")["times_s"].clone()).unwrap();
    let at = *times.iter().rfind(|t| **t <= 2.0 * 3600.0).unwrap();
    let at_flag = format!("{}s", at as u64);
    let api = |path: &str, query: &str| dashboard::get(&addr, &format!("{path}?at={at}{query}"));
    let cli = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["examples/teams", "--at", &at_flag, "--json"]);
        json(&all)
    };
    let research = cli(&["explain", "queue", "research"]);
    assert!(research["pending"].as_u64().unwrap() > 0, "{research}");
    assert_eq!(api("/api/queue/research", ""), research);
    assert_eq!(
        api("/api/pending", "&queue=research"),
        cli(&["queue", "--queue", "research"])
    );
}
