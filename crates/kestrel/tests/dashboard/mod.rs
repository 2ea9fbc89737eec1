//! `kestrel sim --serve` for the tests that read the dashboard: started on a free loopback
//! port, killed when the test ends, read over plain HTTP.

#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long one step may take before the test fails saying which.
pub const STEP: Duration = Duration::from_secs(60);

/// A child process killed when the test ends, however it ends.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `kestrel sim DIR --serve 127.0.0.1:0`; returns the process and the address it printed.
pub fn start_dashboard(inputs: &Path) -> (Killed, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .arg("sim")
        .arg(inputs)
        .args(["--serve", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting kestrel sim --serve");
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let child = Killed(child);
    let deadline = Instant::now() + STEP;
    let mut said = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Some(rest) = line.strip_prefix("dashboard: http://") {
                    let addr = rest.split('/').next().unwrap_or_default().to_string();
                    return (child, addr);
                }
                said.push(line);
            }
            Err(_) => panic!(
                "kestrel sim --serve did not print its address within {STEP:?}; it said:\n{}",
                said.join("\n")
            ),
        }
    }
}

/// GET `path` from the dashboard: the JSON body of a 200 answer.
pub fn get(addr: &str, path: &str) -> Value {
    let mut stream = std::net::TcpStream::connect(addr).expect("connecting to the dashboard");
    stream.set_read_timeout(Some(STEP)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    assert!(head.starts_with("HTTP/1.1 200"), "GET {path}: {answer}");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}
