use super::timeline::Timeline;
use crate::scenarios::{contended_day, preemption_heavy};
use crate::{SimConfig, Simulation};
use kestrel_view::explain_view as view;
use serde_json::Value;

fn get(timeline: &Timeline<'_>, path: &str, query: Option<&str>) -> Value {
    let body = timeline
        .answer(path, query)
        .unwrap_or_else(|e| panic!("{path}: {e:?}"));
    serde_json::from_str(&body).unwrap()
}

#[test]
fn the_map_counts_every_gpu_once_and_events_follow_the_slider() {
    let (cluster, workload) = preemption_heavy(7);
    let timeline = Timeline::record(&cluster, &workload, SimConfig::default(), 12, None).unwrap();
    let times = timeline.times();
    assert_eq!(times.len(), 12);
    assert_eq!(times[0], 0.0);
    let mid = times[4].to_string();
    let map = get(&timeline, "/api/map", Some(&format!("at={mid}")));
    let counts = &map["counts"];
    let cells: u64 = ["busy", "shared", "free", "fragmented"]
        .iter()
        .map(|k| counts[k].as_u64().unwrap())
        .sum();
    assert_eq!(counts["gpus"], 64);
    assert_eq!(cells, 64);
    let drawn: usize = map["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["nodes"].as_array().unwrap())
        .map(|n| n["gpus"].as_array().unwrap().len())
        .sum();
    assert_eq!(drawn, 64);
    // 4-GPU pods on 8-GPU nodes: a busy cell names the pod that holds it.
    let busy_with_pod = map["groups"][0]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|n| n["gpus"].as_array().unwrap())
        .filter(|c| c["used"] == 1000)
        .all(|c| c["pods"].as_array().unwrap().len() == 1);
    assert!(busy_with_pod);

    let early = get(&timeline, "/api/events", Some("at=0"));
    let late = get(&timeline, "/api/events", None);
    let kinds: Vec<&str> = late["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    for kind in ["bind", "preemption", "checkpoint", "eviction"] {
        assert!(kinds.contains(&kind), "no {kind} event in {kinds:?}");
    }
    assert!(early["events"].as_array().unwrap().len() < kinds.len());
    let lost: f64 = late["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "preemption")
        .map(|e| e["gpu_hours"].as_f64().unwrap())
        .sum();
    assert!(lost > 0.0, "preemptions cost GPU-hours in this scenario");
}

#[test]
fn queues_show_the_cohort_and_lending_adds_up_to_borrowing() {
    let (cluster, workload) = contended_day(3);
    let timeline = Timeline::record(&cluster, &workload, SimConfig::default(), 6, None).unwrap();
    let at = timeline.times()[2].to_string();
    let answer = get(&timeline, "/api/queues", Some(&format!("at={at}")));
    let page = &answer["page"];
    let queues = page["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 4);
    let org = page["cohorts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "org")
        .expect("the teams' cohort");
    assert_eq!(org["queues"].as_array().unwrap().len(), 4);
    let sum = |k: &str| -> f64 {
        queues
            .iter()
            .flat_map(|q| q["quota"].as_array().unwrap())
            .filter(|r| r["resource"] == "nvidia.com/gpu")
            .map(|r| r[k].as_f64().unwrap())
            .sum()
    };
    assert!(sum("borrowed") > 0.0, "someone borrows at {at} s");
    assert!((sum("lent") - sum("borrowed")).abs() < 1e-6);
    let ranks: std::collections::BTreeSet<u64> = queues
        .iter()
        .map(|q| q["fair_share_rank"].as_u64().unwrap())
        .collect();
    assert_eq!(ranks, (1..=4).collect());
    assert_eq!(answer["history"].as_array().unwrap().len(), 3);
}

#[test]
fn a_pod_page_is_the_explain_view_at_that_moment() {
    let (cluster, workload) = contended_day(3);
    let timeline = Timeline::record(&cluster, &workload, SimConfig::default(), 6, None).unwrap();
    let at = timeline.times()[2];
    let pending = get(&timeline, "/api/pending", Some(&format!("at={at}")));
    let first = pending["pending"][0]["pod"].as_str().expect("pods pending");
    let page = get(
        &timeline,
        &format!("/api/pod/{first}"),
        Some(&format!("at={at}")),
    );
    assert_eq!(page["phase"], "Pending");
    assert!(page["predicted_start"].is_object());
    // The same moment reached in one go, as `kestrel explain --at` does.
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    sim.run_to((at * 1000.0) as u64).unwrap();
    let estimates = crate::estimates::known(&workload, 42);
    let id = view::find_pod(&sim, first).unwrap();
    let mut direct = view::pod_view(&sim, id, &estimates);
    let p = crate::predict::predict(sim.clone(), &[id], &estimates, None).unwrap();
    direct.apply_predictions(&p);
    assert_eq!(page, serde_json::to_value(&direct).unwrap());
}

#[test]
fn unknown_names_and_bad_moments_are_refused_by_name() {
    let (cluster, workload) = preemption_heavy(7);
    let timeline = Timeline::record(&cluster, &workload, SimConfig::default(), 3, None).unwrap();
    for (path, name) in [
        ("/api/pod/training/no-such-pod", "training/no-such-pod"),
        ("/api/gang/training/no-such-gang", "training/no-such-gang"),
        ("/api/queue/no-such-queue", "no-such-queue"),
        ("/api/node/no-such-node", "no-such-node"),
        ("/api/nothing-here", "/api/nothing-here"),
    ] {
        let e = timeline.answer(path, None).unwrap_err();
        assert_eq!(e.status, 404, "{path}");
        assert!(e.message.starts_with("not found"), "{}", e.message);
        assert!(e.message.contains(name), "{}", e.message);
    }
    let e = timeline.answer("/api/map", Some("at=soon")).unwrap_err();
    assert_eq!(e.status, 400);
    assert!(e.message.contains("soon"), "{}", e.message);
    let e = timeline
        .answer("/api/pending", Some("queue=nope"))
        .unwrap_err();
    assert_eq!(e.status, 404);
    assert!(e.message.contains("nope"), "{}", e.message);
}
