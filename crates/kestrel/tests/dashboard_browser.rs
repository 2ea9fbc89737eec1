//! The dashboard in a real browser: `kestrel sim --serve` over a small cluster whose numbers
//! are known, opened in headless Chromium (Debian's `chromium`, installed by .ci/run) and
//! driven through the DevTools protocol over `--remote-debugging-pipe` (file descriptors 3
//! and 4, messages ended by NUL: no port, no websocket). Mouse and keys go in as input
//! events, as a person's would; what the page shows is read from its DOM and canvas.
//!
//! The cluster: 3 nodes of 8 GPUs. `llm/holder` takes a whole node for 2 h, `llm/small` 3
//! GPUs of another for 4 h; at 00:10 the gang `llm/train` (2 pods of 8 GPUs) arrives and
//! waits for a second whole node until `holder` ends at 02:00, then runs for 1 h.
//! Screenshots are kept under target/dashboard-e2e/.

mod browser;
mod dashboard;

use browser::{find_chromium, Browser, DRAWN};
use dashboard::{get, start_dashboard};
use kestrel_testenv::target_dir;
use serde_json::{json, Value};

const CLUSTER: &str = r#"apiVersion: sim.kestrel.dev/v1alpha1
kind: SimCluster
metadata: {name: dashboard-e2e}
spec:
  pools:
  - name: gpu
    count: 3
    namePrefix: gpu-
    cpu: "128"
    memory: 1Ti
    gpu: {model: NVIDIA-H100-80GB-HBM3, count: 8, memoryMiB: 81559}
"#;

const WORKLOAD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: holder
  namespace: llm
  annotations: {kestrel.dev/sim-duration: 2h}
spec:
  containers: [{name: w, resources: {limits: {nvidia.com/gpu: 8}}}]
---
apiVersion: v1
kind: Pod
metadata:
  name: small
  namespace: llm
  annotations: {kestrel.dev/sim-duration: 4h}
spec:
  containers: [{name: w, resources: {limits: {nvidia.com/gpu: 3}}}]
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: train, namespace: llm}
spec: {minMember: 2}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: llm
  annotations: {kestrel.dev/sim-arrival: "00:10", kestrel.dev/sim-duration: 1h}
spec:
  parallelism: 2
  completions: 2
  template:
    metadata:
      labels: {scheduling.x-k8s.io/pod-group: train}
    spec:
      containers: [{name: w, resources: {limits: {nvidia.com/gpu: 8}}}]
"#;

fn counts(api_counts: &Value) -> Value {
    json!({
        "busy": api_counts["busy"], "shared": api_counts["shared"],
        "free": api_counts["free"], "fragmented": api_counts["fragmented"],
    })
}

/// Seconds as the page writes a wait: 1h05m, 12m30s, 45s.
fn duration(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    let (h, m, sec) = (s / 3600, s % 3600 / 60, s % 60);
    if h > 0 {
        format!("{h}h{m:02}m")
    } else if m > 0 && sec > 0 {
        format!("{m}m{sec:02}s")
    } else if m > 0 {
        format!("{m}m")
    } else {
        format!("{sec}s")
    }
}

/// Moves the time slider with the mouse to (about) the stop at `seconds`; returns the stop
/// the page then shows, once it has drawn it.
fn move_slider(browser: &mut Browser, times: &[f64], seconds: f64) -> f64 {
    let index = times.iter().rposition(|t| *t <= seconds).unwrap();
    let before = browser.loads();
    // The thumb's centre runs from half a thumb in from each end; the default thumb is
    // about 16 px wide.
    let width = browser
        .eval("document.querySelector('#time').getBoundingClientRect().width")
        .as_f64()
        .unwrap();
    let fraction = (8.0 + (width - 16.0) * index as f64 / (times.len() - 1) as f64) / width;
    browser.click("#time", fraction);
    let shown = browser.wait_for(
        "the page redrawn after the slider moved",
        &format!("window.kestrel.loads > {before} && !!document.querySelector('#time-label').textContent"),
        "+document.querySelector('#time').value",
    );
    times[shown.as_u64().unwrap() as usize]
}

#[test]
fn the_dashboard_in_headless_chromium_shows_the_map_a_pending_gang_and_follows_the_slider() {
    let Some(chromium) = find_chromium() else {
        kestrel_invariants::shared::skip_or_fail(
            "the dashboard cannot be tested in a browser: no chromium on PATH \
             (apt-get install chromium, or set KESTREL_CHROMIUM to a Chromium binary)",
        );
        return;
    };
    let out = target_dir().join("dashboard-e2e");
    let work = std::env::temp_dir().join(format!("kestrel-dashboard-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(work.join("inputs")).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    let out = std::fs::canonicalize(&out).unwrap();
    std::fs::write(work.join("inputs/cluster.yaml"), CLUSTER).unwrap();
    std::fs::write(work.join("inputs/workload.yaml"), WORKLOAD).unwrap();

    let (_server, addr) = start_dashboard(&work.join("inputs"));
    let times: Vec<f64> = serde_json::from_value(get(&addr, "/api/times")["times_s"].clone())
        .expect("/api/times lists seconds");
    assert!(times.len() >= 40, "the slider's stops: {times:?}");

    let mut browser = Browser::launch(&chromium, &work.join("profile"), &out.join("chromium.log"));
    browser.open(&format!("http://{addr}/"));

    // 1. The page opens at the run's end: every pod has finished, every GPU is free.
    let drawn = browser.wait_for(
        "the GPU map drawn",
        "window.kestrel && window.kestrel.ready && document.querySelector('#map')?.dataset.busy !== undefined",
        DRAWN,
    );
    let end = get(&addr, "/api/map");
    assert_eq!(drawn, counts(&end["counts"]), "the map at the end");
    assert_eq!(
        drawn,
        json!({ "busy": 0, "shared": 0, "free": 24, "fragmented": 0 })
    );
    let summary = browser.eval("document.querySelector('#summary').innerText");
    assert!(
        summary.as_str().unwrap().contains("GPUs 24"),
        "the summary: {summary}"
    );

    // 2. The slider back to 00:40: holder's node busy, small's 3 busy and 5 fragmented,
    //    the third node free (the gang waits for a second one).
    let at = move_slider(&mut browser, &times, 2400.0);
    assert!((600.0..7200.0).contains(&at), "the slider landed at {at} s");
    let drawn = browser.wait_for(
        "the GPU map redrawn at the new moment",
        "document.querySelector('#map')?.dataset.busy !== undefined",
        DRAWN,
    );
    let api = get(&addr, &format!("/api/map?at={at}"));
    assert_eq!(drawn, counts(&api["counts"]), "the map at {at} s");
    assert_eq!(
        drawn,
        json!({ "busy": 11, "shared": 0, "free": 8, "fragmented": 5 }),
        "at {at} s"
    );
    browser.screenshot(&out.join("map.png"));

    // 3. The pending page, by its link; a click on the gang's row opens the gang.
    let before = browser.loads();
    browser.click("nav a[data-page=pending]", 0.5);
    browser.wait_for(
        "the pending page",
        &format!("window.kestrel.loads > {before} && document.querySelector('#pending tr[data-gang=\"llm/train\"]')"),
        "true",
    );
    browser.click("#pending tr[data-gang=\"llm/train\"] td.reason", 0.5);
    let detail = browser.wait_for(
        "the gang's panel",
        "document.querySelector('#detail')?.dataset.kind === 'gang' && document.querySelector('#detail .predicted')",
        "({ reason: document.querySelector('#detail .reason').textContent, \
            predicted: document.querySelector('#detail .predicted').textContent, \
            text: document.querySelector('#detail').innerText })",
    );
    let gang = get(&addr, &format!("/api/gang/llm/train?at={at}"));
    let headline = gang["first_pending_explanation"]["headline"]
        .as_str()
        .unwrap();
    assert!(
        headline.contains("Insufficient nvidia.com/gpu"),
        "the gang's reason: {gang}"
    );
    let problem = gang["problem"]["message"].as_str().unwrap();
    let text = detail["text"].as_str().unwrap();
    assert!(
        text.contains(problem),
        "the panel: {text}\nthe gang: {gang}"
    );
    assert!(
        text.contains(headline),
        "the panel: {text}\nthe gang: {gang}"
    );
    // Predicted: when holder ends, 02:00, read within the estimates' +/-20%.
    let p = &gang["predicted_start"];
    let point = p["point_s"].as_f64().expect("a predicted start");
    assert!((5760.0..=8640.0).contains(&point), "predicted {p}");
    let want = format!(
        "in {} ({} to {})",
        duration(point - at),
        duration(p["from_s"].as_f64().unwrap() - at),
        duration(p["to_s"].as_f64().unwrap() - at)
    );
    assert_eq!(detail["predicted"], json!(want), "the panel: {text}");
    browser.screenshot(&out.join("gang.png"));

    // 4. The slider past 02:00: the gang runs on two whole nodes and its panel says so.
    let at = move_slider(&mut browser, &times, 8600.0);
    assert!(
        (7200.0..10800.0).contains(&at),
        "the slider landed at {at} s"
    );
    let text = browser.wait_for(
        "the gang's panel at the new moment",
        "document.querySelector('#detail')?.innerText.includes('2 bound')",
        "document.querySelector('#detail').innerText",
    );
    assert!(
        !text.as_str().unwrap().contains("Predicted start"),
        "{text}"
    );
    let pending = browser.eval("document.querySelectorAll('#pending tr[data-pod]').length");
    assert_eq!(pending, json!(0), "nothing pends at {at} s");
    let api = get(&addr, &format!("/api/map?at={at}"));
    assert_eq!(
        counts(&api["counts"]),
        json!({ "busy": 19, "shared": 0, "free": 0, "fragmented": 5 }),
        "at {at} s"
    );
    browser.screenshot(&out.join("running.png"));
    assert!(
        browser.errors.is_empty(),
        "page errors: {:?}",
        browser.errors
    );
    drop(browser);
    let _ = std::fs::remove_dir_all(&work);
}
