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

mod dashboard;

use dashboard::{get, start_dashboard, Killed, STEP};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

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

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target"))
}

/// `$KESTREL_CHROMIUM`, else the first of Debian's and others' names found on PATH.
fn find_chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("KESTREL_CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .collect();
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| dirs.iter().map(move |d| d.join(name)))
        .find(|p| p.is_file())
}

/// Standard base64 (the screenshot's encoding).
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {:?}", c as char),
    };
    let digits: Vec<u8> = text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
        .map(value)
        .collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, d)| n | (*d as u32) << (18 - 6 * i));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

/// A browser driven through the DevTools protocol over a pipe: commands to its fd 3,
/// answers and events from its fd 4.
struct Browser {
    child: Killed,
    commands: std::io::PipeWriter,
    messages: mpsc::Receiver<Value>,
    next_id: u64,
    session: Option<String>,
    /// Exceptions thrown in the page, for the failure message.
    errors: Vec<String>,
    log: PathBuf,
}

impl Browser {
    fn launch(program: &Path, profile: &Path, log: &Path) -> Browser {
        let (cmd_read, cmd_write) = std::io::pipe().expect("a pipe for commands");
        let (msg_read, msg_write) = std::io::pipe().expect("a pipe for answers");
        let (r, w) = (cmd_read.as_raw_fd(), msg_write.as_raw_fd());
        let log_file = std::fs::File::create(log).expect("creating the browser's log");
        let mut command = Command::new(program);
        command
            .args([
                "--headless",
                // Root in a container has no user namespace for the sandbox; the page is
                // our own, on loopback.
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--remote-debugging-pipe",
                "--window-size=1280,900",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file);
        // SAFETY: between fork and exec only async-signal-safe calls (fcntl, dup2). The
        // ends are first copied above 10, so placing one at 3 cannot overwrite the other.
        unsafe {
            command.pre_exec(move || {
                let high_r = libc::fcntl(r, libc::F_DUPFD, 10);
                let high_w = libc::fcntl(w, libc::F_DUPFD, 10);
                if high_r < 0
                    || high_w < 0
                    || libc::dup2(high_r, 3) < 0
                    || libc::dup2(high_w, 4) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = Killed(command.spawn().expect("starting chromium"));
        // The browser's ends live in the browser only: its exit then ends our reads.
        drop((cmd_read, msg_write));
        let (tx, messages) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(msg_read);
            let mut buf = Vec::new();
            while reader.read_until(0, &mut buf).is_ok_and(|n| n > 0) {
                if buf.last() == Some(&0) {
                    buf.pop();
                }
                if let Ok(v) = serde_json::from_slice::<Value>(&buf) {
                    if tx.send(v).is_err() {
                        return;
                    }
                }
                buf.clear();
            }
        });
        Browser {
            child,
            commands: cmd_write,
            messages,
            next_id: 0,
            session: None,
            errors: Vec::new(),
            log: log.to_path_buf(),
        }
    }

    /// Sends one command (to the attached page, once there is one) and waits for its answer.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = &self.session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.commands.write_all(&bytes).unwrap_or_else(|e| {
            panic!(
                "{method}: the browser's pipe: {e}; see {}",
                self.log.display()
            )
        });
        let deadline = Instant::now() + STEP;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(m) = self.messages.recv_timeout(left) else {
                panic!(
                    "{method}: no answer from the browser within {STEP:?} (exited: {:?}); page errors: {:?}; see {}",
                    self.child.0.try_wait().ok().flatten(),
                    self.errors,
                    self.log.display()
                );
            };
            if m["method"] == "Runtime.exceptionThrown" {
                self.errors
                    .push(m["params"]["exceptionDetails"].to_string());
            }
            if m["id"] == id {
                if let Some(e) = m.get("error") {
                    panic!("{method} {params}: {e}");
                }
                return m["result"].clone();
            }
        }
    }

    /// Evaluates `expression` in the page (awaiting a promise) and returns its value.
    fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "awaitPromise": true, "returnByValue": true }),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!(
                "in the page: {}\n{expression}\npage errors: {:?}",
                e["exception"]["description"], self.errors
            );
        }
        r["result"]["value"].clone()
    }

    /// Waits until `condition` (a JavaScript expression) holds in the page, then returns
    /// `value`'s; the deadline is kept in the page, so a page that never gets there fails
    /// naming `what`.
    fn wait_for(&mut self, what: &str, condition: &str, value: &str) -> Value {
        let ms = STEP.as_millis() - 5_000;
        self.eval(&format!(
            "new Promise((ok, fail) => {{ const t0 = Date.now(); (function poll() {{ \
               let c = false; try {{ c = ({condition}); }} catch (_) {{}} \
               if (c) ok({value}); \
               else if (Date.now() - t0 > {ms}) fail(new Error({what:?} + ': not seen within {ms} ms; the page shows: ' + document.body.innerText.slice(0, 2000))); \
               else setTimeout(poll, 50); }})(); }})"
        ))
    }

    /// The page's render count (`window.kestrel.loads`), to wait for the next one.
    fn loads(&mut self) -> u64 {
        self.eval("window.kestrel.loads").as_u64().unwrap_or(0)
    }

    /// A left click at the centre of `selector`'s element (scrolled into view), or at
    /// `fraction` of its width, as the mouse would.
    fn click(&mut self, selector: &str, fraction: f64) {
        let rect = self.eval(&format!(
            "(() => {{ const e = document.querySelector({selector:?}); if (!e) throw new Error('no element ' + {selector:?}); \
               e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect(); \
               return {{x: r.left, y: r.top, w: r.width, h: r.height}}; }})()"
        ));
        let x = rect["x"].as_f64().unwrap() + rect["w"].as_f64().unwrap() * fraction;
        let y = rect["y"].as_f64().unwrap() + rect["h"].as_f64().unwrap() / 2.0;
        for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({ "type": kind, "x": x, "y": y, "button": "left", "buttons": if kind == "mousePressed" { 1 } else { 0 }, "clickCount": 1 }),
            );
        }
    }

    fn screenshot(&mut self, path: &Path) {
        let shot = self.call("Page.captureScreenshot", json!({ "format": "png" }));
        let png = base64_decode(shot["data"].as_str().expect("screenshot data"));
        assert!(png.starts_with(b"\x89PNG"), "the screenshot is not a PNG");
        std::fs::write(path, png).unwrap();
        println!("screenshot: {}", path.display());
    }
}

/// The cell counts the page drew (the canvas's data attributes).
const DRAWN: &str = "(() => { const d = document.querySelector('#map').dataset; \
    return {busy: +d.busy, shared: +d.shared, free: +d.free, fragmented: +d.fragmented}; })()";

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
    let target = browser.call("Target.createTarget", json!({ "url": "about:blank" }));
    let attached = browser.call(
        "Target.attachToTarget",
        json!({ "targetId": target["targetId"], "flatten": true }),
    );
    browser.session = attached["sessionId"].as_str().map(str::to_string);
    browser.call("Runtime.enable", json!({}));
    browser.call("Page.enable", json!({}));
    browser.call(
        "Emulation.setDeviceMetricsOverride",
        json!({ "width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false }),
    );
    browser.call("Page.navigate", json!({ "url": format!("http://{addr}/") }));

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
