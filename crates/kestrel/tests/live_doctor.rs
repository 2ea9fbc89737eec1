//! `kestrel doctor --live` and `kestrel serve`'s doctor metric on a real kube-apiserver
//! (testenv/), with the RBAC Kestrel ships with: the test posts Events as kubelet and the
//! SR-IOV CNI would (through `v1` and `events.k8s.io/v1`), sets container states through
//! the pods' status subresource, and checks that the doctor finds each signature, that
//! `kestrel serve` exports it as `kestrel_doctor_finding`, and that the PrometheusRule
//! `--alert-for` prints selects the exported series (its PromQL selector parsed here).
//! Skips loudly when the control plane is not built; fails under CI=true.

#![allow(clippy::await_holding_lock)]

mod live;

use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::jiff::{Timestamp, ToSpan};
use kube::api::{Api, Patch, PatchParams, PostParams};
use live::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

const NS: &str = "doctor-live";
const SRIOV: &str = "pod-sandbox-failed/FailedCreatePodSandBox/sriov-no-vf";
const AUTH: &str = "image-pull-failed/ErrImagePull/auth";
const CRASH: &str = "container-crashloop/CrashLoopBackOff/gpu-pod";

/// A pod already on `node` (no scheduler involved), asking `gpus` GPUs.
fn pod_on(name: &str, node: &str, gpus: u32, image: &str) -> Pod {
    let mut pod = gpu_pod(NS, name, "none", gpus, &[], &[]);
    let spec = pod.spec.as_mut().unwrap();
    spec.node_name = Some(node.to_string());
    spec.containers[0].image = Some(image.to_string());
    spec.tolerations = Some(vec![serde_json::from_value(
        json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}),
    )
    .unwrap()]);
    pod
}

/// `kestrel doctor ARGS`: (exit code, stdout, stderr).
fn doctor(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(kestrel_bin())
        .arg("doctor")
        .args(args)
        .output()
        .expect("run kestrel doctor");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One series of an OpenMetrics text: its name and labels.
fn series(text: &str, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    text.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
        .filter_map(|rest| {
            let (labels, value) = rest.rsplit_once("} ")?;
            Some((
                parse_matchers(labels)
                    .ok()?
                    .into_iter()
                    .map(|(k, _, v)| (k, v))
                    .collect(),
                value.trim().parse().ok()?,
            ))
        })
        .collect()
}

/// A label matcher: name, operator (`=`, `!=`, `=~`, `!~`), value.
type Matcher = (String, String, String);

/// `a="x",b!="y"` -> [(a, "=", x), (b, "!=", y)]: label matchers (and OpenMetrics labels).
fn parse_matchers(text: &str) -> Result<Vec<Matcher>, String> {
    let mut out = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let name_end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .ok_or_else(|| format!("no operator after {rest:?}"))?;
        let name = rest[..name_end].to_string();
        rest = rest[name_end..].trim_start();
        let op = ["=~", "!~", "!=", "="]
            .into_iter()
            .find(|op| rest.starts_with(op))
            .ok_or_else(|| format!("no operator in {rest:?}"))?;
        rest = rest[op.len()..].trim_start();
        let body = rest
            .strip_prefix('"')
            .ok_or_else(|| format!("unquoted value {rest:?}"))?;
        let end = body
            .find('"')
            .ok_or_else(|| format!("unterminated {body:?}"))?;
        out.push((name, op.to_string(), body[..end].to_string()));
        rest = body[end + 1..].trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
    Ok(out)
}

/// The selectors `metric{matchers}` of a PromQL expression (bare `by (...)` lists and
/// function calls are not selectors: a selector's name is followed directly by `{`).
fn selectors(expr: &str) -> Vec<(String, Vec<Matcher>)> {
    let mut out = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(open) = expr[i..].find('{').map(|o| o + i) {
        let start = expr[..open]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .map_or(0, |s| s + 1);
        let close = open + expr[open..].find('}').expect("a closing brace");
        let name = &expr[start..open];
        assert!(
            !name.is_empty() && bytes[start].is_ascii_alphabetic(),
            "a selector without a metric name in {expr}"
        );
        let matchers =
            parse_matchers(&expr[open + 1..close]).unwrap_or_else(|e| panic!("{e} in {expr}"));
        out.push((name.to_string(), matchers));
        i = close + 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reads_events_and_container_states_and_serve_exports_them() {
    let Some((env, _guard)) = env() else { return };
    let client = env.client().await;
    create_namespace(&client, NS).await;
    create_pool_nodes(&client, NS, 0, 1).await;
    let node = format!("{NS}-0");
    create_pods(
        &client,
        vec![
            pod_on("train-0", &node, 8, "nvcr.io/nvidia/pytorch:25.01-py3"),
            pod_on("loader-7", &node, 0, "nvcr.io/acme/loader:1.4"),
            pod_on("allreduce-1", &node, 1, "nvcr.io/nvidia/pytorch:25.01-py3"),
        ],
    )
    .await;

    // Container states as kubelet writes them, through the status subresource.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let status = json!({"status": {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
        "containerStatuses": [{
            "name": "main", "image": "nvcr.io/nvidia/pytorch:25.01-py3", "imageID": "",
            "ready": false, "restartCount": 4,
            "state": {"waiting": {"reason": "CrashLoopBackOff",
                "message": "back-off 2m40s restarting failed container=main pod=train-0_doctor-live(u)"}},
            "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                "finishedAt": Timestamp::now().to_string()}}
        }]
    }});
    pods.patch_status("train-0", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("train-0's status");

    // Events as kubelet posts them: a pull refused (v1) and a sandbox without a VF
    // (events.k8s.io/v1, kubelet as reportingController, its node as reportingInstance).
    let now = Timestamp::now();
    let earlier = now - 3.minutes();
    let v1: Api<Event> = Api::namespaced(client.clone(), NS);
    let pull: Event = serde_json::from_value(json!({
        "metadata": {"name": "loader-7.pull", "namespace": NS},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "loader-7", "namespace": NS},
        "reason": "Failed",
        "message": "Failed to pull image \"nvcr.io/acme/loader:1.4\": failed to pull and unpack image \"nvcr.io/acme/loader:1.4\": failed to resolve reference \"nvcr.io/acme/loader:1.4\": pulling from host nvcr.io failed with status code [manifests 1.4]: 401 Unauthorized",
        "source": {"component": "kubelet", "host": node},
        "type": "Warning", "count": 4,
        "firstTimestamp": earlier.to_string(), "lastTimestamp": now.to_string(),
    }))
    .unwrap();
    v1.create(&PostParams::default(), &pull)
        .await
        .expect("the pull event");
    let new_api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), NS);
    let sandbox: k8s_openapi::api::events::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": "allreduce-1.sandbox", "namespace": NS},
        "regarding": {"apiVersion": "v1", "kind": "Pod", "name": "allreduce-1", "namespace": NS},
        "reason": "FailedCreatePodSandBox", "action": "FailedCreatePodSandBox",
        "note": "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox \"3f1c9a\": plugin type=\"multus\" name=\"multus-cni-network\" failed (add): [doctor-live/allreduce-1/u:sriov-net]: error adding container to network \"sriov-net\": SRIOV-CNI failed to load netconf: LoadConf(): VF pci addr is required",
        "reportingController": "kubelet", "reportingInstance": node,
        "type": "Warning", "eventTime": earlier.to_string(),
        "series": {"count": 6, "lastObservedTime": now.to_string()},
    }))
    .unwrap();
    new_api
        .create(&PostParams::default(), &sandbox)
        .await
        .expect("the sandbox event");

    // 600 Warning events of a reason no check reads: more than one page of the list (500),
    // every one counted, none dropped.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..600 {
        let v1 = v1.clone();
        let event: Event = serde_json::from_value(json!({
            "metadata": {"name": format!("loader-7.odd-{i}"), "namespace": NS},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "loader-7", "namespace": NS},
            "reason": "SomethingOdd", "message": format!("odd thing {i}"),
            "source": {"component": "my-operator"}, "type": "Warning", "count": 1,
            "firstTimestamp": now.to_string(), "lastTimestamp": now.to_string(),
        }))
        .unwrap();
        tasks.spawn(async move { v1.create(&PostParams::default(), &event).await.map(|_| ()) });
        while tasks.len() >= 32 {
            tasks.join_next().await.unwrap().unwrap().expect("an event");
        }
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap().expect("an event");
    }

    // The GPU Operator's device plugin DaemonSet, its pod missing on the node (no
    // controller runs here: the test writes the status the DaemonSet controller would).
    let daemonsets: Api<k8s_openapi::api::apps::v1::DaemonSet> =
        Api::namespaced(client.clone(), NS);
    let ds = serde_json::from_value(json!({
        "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": "dp"}},
            "template": {"metadata": {"labels": {"app": "dp"}},
                         "spec": {"containers": [{"name": "dp", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}]}},
        },
    }))
    .unwrap();
    daemonsets
        .create(&PostParams::default(), &ds)
        .await
        .expect("the DaemonSet");
    let ds_status = json!({"status": {"desiredNumberScheduled": 1, "currentNumberScheduled": 0,
        "numberReady": 0, "numberMisscheduled": 0}});
    daemonsets
        .patch_status(
            "nvidia-device-plugin-daemonset",
            &PatchParams::default(),
            &Patch::Merge(&ds_status),
        )
        .await
        .expect("the DaemonSet's status");

    // kestrel doctor --live, with the ServiceAccount's RBAC.
    let kubeconfig = env.sa_kubeconfig.to_str().unwrap();
    let (code, stdout, stderr) = doctor(&[
        "--live",
        "--kubeconfig",
        kubeconfig,
        "--json",
        "--since",
        "30m",
    ]);
    assert_eq!(code, Some(2), "{stdout}\n{stderr}");
    // No metrics-server here: said once.
    let not_served = "the metrics API (metrics.k8s.io, what kubectl top reads) is not served";
    assert_eq!(stderr.matches(not_served).count(), 1, "{stderr}");
    let findings: Vec<Value> = serde_json::from_str(&stdout).expect("JSON");
    let by_sig = |sig: &str| {
        findings
            .iter()
            .find(|f| f["signature"] == sig)
            .unwrap_or_else(|| panic!("no {sig} in {stdout}"))
            .clone()
    };
    let sriov = by_sig(SRIOV);
    assert_eq!(
        sriov["where"],
        json!([format!("{NS}/allreduce-1 on {node} (x6)")])
    );
    assert_eq!(sriov["incidents"][0]["count"], 6);
    assert_eq!(sriov["incidents"][0]["nodes"], json!([node]));
    let auth = by_sig(AUTH);
    assert!(
        auth["what"].as_str().unwrap().contains("from nvcr.io"),
        "{auth}"
    );
    assert_eq!(
        auth["where"],
        json!([format!("{NS}/loader-7 on {node} (x4)")])
    );
    assert_eq!(
        by_sig(CRASH)["where"],
        json!([format!("{NS}/train-0 on {node}")])
    );
    by_sig("container-oom-killed/OOMKilled/gpu-pod");
    let odd = by_sig("event-other/SomethingOdd/my-operator");
    assert_eq!(odd["incidents"][0]["count"], 600, "{odd}");
    assert_eq!(
        by_sig("operator-pod-not-ready/Missing/device-plugin")["where"],
        json!([format!("DaemonSet {NS}/nvidia-device-plugin-daemonset: its pod runs on 0 of the 1 nodes it should (0 ready)")])
    );

    // kestrel serve exports the findings.
    let serve = env.kestrel(
        "doctor-a",
        &["--scheduler-name", "doctor-live", "--doctor-interval", "1s"],
    );
    let metrics = eventually(
        Duration::from_secs(60),
        "the doctor's findings exported",
        || async {
            let (_, text) = serve.get("/metrics")?;
            series(&text, "kestrel_doctor_finding")
                .iter()
                .any(|(l, _)| l.get("signature").map(String::as_str) == Some(SRIOV))
                .then_some(text)
        },
    )
    .await;
    let exported = series(&metrics, "kestrel_doctor_finding");
    let (labels, value) = exported
        .iter()
        .find(|(l, _)| l["signature"] == SRIOV)
        .unwrap();
    assert_eq!(*value, 1.0);
    assert_eq!(labels["check"], "pod-sandbox-failed");
    assert_eq!(labels["severity"], "critical");
    assert_eq!(labels["node"], node);
    assert_eq!(labels["namespace"], NS);
    assert!(
        metrics.contains("kestrel_doctor_runs_total{result=\"ok\"}"),
        "{metrics}"
    );
    // serve says the metrics API is missing once, not on every run.
    eventually(Duration::from_secs(10), "a second doctor run", || async {
        let (_, text) = serve.get("/metrics")?;
        (!text.contains("kestrel_doctor_runs_total{result=\"ok\"} 1\n")).then_some(())
    })
    .await;
    assert_eq!(serve.log_count(not_served), 1, "{}", serve.log_text());

    // The rule for the signature: a PrometheusRule whose expression selects exactly the
    // exported series of that signature, and whose runbook is the finding's fix.
    for (sig, finding) in [(SRIOV, &sriov), (AUTH, &auth)] {
        let (code, rule, stderr) = doctor(&["--alert-for", sig]);
        assert_eq!(code, Some(0), "{stderr}");
        let docs = kestrel_doctor::parse_yaml(&rule).expect("valid YAML");
        assert_eq!(docs[0]["kind"], "PrometheusRule");
        let r = &docs[0]["spec"]["groups"][0]["rules"][0];
        assert_eq!(r["annotations"]["runbook"], finding["fix"]);
        let expr = r["expr"].as_str().unwrap();
        let sel = selectors(expr);
        assert_eq!(sel.len(), 1, "{expr}");
        let (metric, matchers) = &sel[0];
        assert_eq!(metric, "kestrel_doctor_finding", "{expr}");
        let selected: Vec<_> = exported
            .iter()
            .filter(|(l, _)| {
                matchers.iter().all(|(k, op, v)| {
                    let have = l.get(k).map(String::as_str).unwrap_or("");
                    match op.as_str() {
                        "=" => have == v,
                        "!=" => have != v,
                        other => panic!("{other} in {expr}: not expected in a signature rule"),
                    }
                })
            })
            .collect();
        assert!(!selected.is_empty(), "{expr} selects nothing of\n{metrics}");
        assert!(
            selected.iter().all(|(l, _)| l["signature"] == sig),
            "{expr}"
        );
    }
    // Where kube-state-metrics carries the signature, the rule reads it instead.
    let (_, rule, _) = doctor(&["--alert-for", CRASH]);
    let docs = kestrel_doctor::parse_yaml(&rule).unwrap();
    let expr = docs[0]["spec"]["groups"][0]["rules"][0]["expr"]
        .as_str()
        .unwrap()
        .to_string();
    let names: Vec<String> = selectors(&expr).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "kube_pod_container_status_waiting_reason",
            "kube_pod_container_resource_requests"
        ]
    );

    drop(serve);
    let _ = daemonsets
        .delete("nvidia-device-plugin-daemonset", &Default::default())
        .await;
    cleanup(&client, &format!("{NS}-"), &[NS]).await;
}
