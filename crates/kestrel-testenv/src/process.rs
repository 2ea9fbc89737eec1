//! `kestrel serve` as a process of its own, with its log in a file, killed with the test.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Kestrel {
    child: Option<Child>,
    pub log: PathBuf,
    pub metrics_port: u16,
    pub identity: String,
}

impl Kestrel {
    /// Starts `kestrel serve --kubeconfig KUBECONFIG --metrics-addr 127.0.0.1:PORT ARGS`,
    /// its log in `dir/<identity>.log`. The process dies with the thread that started it.
    pub fn start(
        kestrel: &Path,
        kubeconfig: &Path,
        dir: &Path,
        identity: &str,
        args: &[&str],
    ) -> Kestrel {
        let metrics_port = crate::free_port();
        let log = dir.join(format!("{identity}.log"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("opening the log");
        let mut command = Command::new(kestrel);
        command
            .arg("serve")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
            .args(args)
            .env("POD_NAME", identity)
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log"))
            .stderr(file);
        // SAFETY: prctl is async-signal-safe; it only asks the kernel to kill the child
        // when its parent thread exits, so no scheduler outlives a test.
        unsafe {
            use std::os::unix::process::CommandExt;
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command.spawn().expect("starting kestrel serve");
        Kestrel {
            child: Some(child),
            log,
            metrics_port,
            identity: identity.to_string(),
        }
    }

    /// The process's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// How many log lines contain `needle`.
    pub fn log_count(&self, needle: &str) -> usize {
        self.log_text()
            .lines()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// GET a path of the metrics server: (status code, body), `None` when nothing answers.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.metrics_port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).ok()?;
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Some((code, body))
    }

    /// Whether `/readyz` answers 200.
    pub fn ready(&self) -> bool {
        self.get("/readyz").is_some_and(|(c, _)| c == 200)
    }

    /// The process's peak resident memory (VmHWM), while it runs.
    pub fn peak_rss_mib(&self) -> Option<f64> {
        let pid = self.child.as_ref()?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let kib: f64 = status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        Some(kib / 1024.0)
    }

    /// Whether the process still runs.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGSTOP: the process stands still, its sockets open, its clock running on (a
    /// frozen VM, a stalled node).
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT after [`Kestrel::pause`].
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, signal: i32) {
        if let Some(child) = &self.child {
            // SAFETY: kill(2) on our own child's pid; it cannot have been reaped and
            // reused, as only `kill`/`terminate` wait for it and both take the child.
            unsafe {
                libc::kill(child.id() as i32, signal);
            }
        }
    }

    /// SIGKILL, at once.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits up to `timeout` for the exit; returns whether it exited 0.
    pub fn terminate(&mut self, timeout: Duration) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }
}

impl Drop for Kestrel {
    fn drop(&mut self) {
        self.kill();
    }
}
