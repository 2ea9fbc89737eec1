//! Headless Chromium driven through the DevTools protocol over `--remote-debugging-pipe`
//! (file descriptors 3 and 4, messages ended by NUL: no port, no websocket), for the tests
//! that open the dashboard in a browser. Mouse and keys go in as input events.

#![allow(dead_code)]

use super::dashboard::{Killed, STEP};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

/// `$KESTREL_CHROMIUM`, else the first of Debian's and others' names found on PATH.
pub fn find_chromium() -> Option<PathBuf> {
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
pub struct Browser {
    child: Killed,
    commands: std::io::PipeWriter,
    messages: mpsc::Receiver<Value>,
    next_id: u64,
    pub session: Option<String>,
    /// Exceptions thrown in the page, for the failure message.
    pub errors: Vec<String>,
    log: PathBuf,
}

impl Browser {
    pub fn launch(program: &Path, profile: &Path, log: &Path) -> Browser {
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
    pub fn call(&mut self, method: &str, params: Value) -> Value {
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
    pub fn eval(&mut self, expression: &str) -> Value {
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
    pub fn wait_for(&mut self, what: &str, condition: &str, value: &str) -> Value {
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
    pub fn loads(&mut self) -> u64 {
        self.eval("window.kestrel.loads").as_u64().unwrap_or(0)
    }

    /// A left click at the centre of `selector`'s element (scrolled into view), or at
    /// `fraction` of its width, as the mouse would.
    pub fn click(&mut self, selector: &str, fraction: f64) {
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

    pub fn screenshot(&mut self, path: &Path) {
        let shot = self.call("Page.captureScreenshot", json!({ "format": "png" }));
        let png = base64_decode(shot["data"].as_str().expect("screenshot data"));
        assert!(png.starts_with(b"\x89PNG"), "the screenshot is not a PNG");
        std::fs::write(path, png).unwrap();
        println!("screenshot: {}", path.display());
    }
}

impl Browser {
    /// A new page at `url` (1280x900), attached: later calls go to it.
    pub fn open(&mut self, url: &str) {
        let target = self.call("Target.createTarget", json!({ "url": "about:blank" }));
        let attached = self.call(
            "Target.attachToTarget",
            json!({ "targetId": target["targetId"], "flatten": true }),
        );
        self.session = attached["sessionId"].as_str().map(str::to_string);
        self.call("Runtime.enable", json!({}));
        self.call("Page.enable", json!({}));
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false }),
        );
        self.call("Page.navigate", json!({ "url": url }));
    }
}

/// The cell counts the page drew (the canvas's data attributes).
pub const DRAWN: &str = "(() => { const d = document.querySelector('#map').dataset; \
    return {busy: +d.busy, shared: +d.shared, free: +d.free, fragmented: +d.fragmented}; })()";
