//! A real Kubernetes control plane for Kestrel's end-to-end tests and `kestrel bench live`.
//!
//! [`ControlPlane::start`] runs `kestrel-testenv up` (built from `testenv/` by `.ci/run`:
//! an embedded etcd, kube-apiserver and, on request, kube-scheduler and
//! kube-controller-manager from released Kubernetes modules), which writes an admin
//! kubeconfig and takes fault commands on its standard input. Around it: fake GPU
//! [`nodes`], a [`kubelet::FakeKubelet`] that runs and completes bound pods, [`install`] of
//! Kestrel's own manifests with a ServiceAccount kubeconfig, [`Kestrel`] processes
//! (`kestrel serve`), and a real [`MlflowServer`].
//!
//! When the control plane has not been built, [`ControlPlane::start`] returns `None` after
//! a loud message, except under `CI=true`, where it panics: CI must never pass by skipping.

pub mod install;
pub mod kubelet;
pub mod link;
pub mod mlflow;
pub mod nodes;
pub mod process;

pub use install::{apply_yaml, install_kestrel, Installed};
pub use kubelet::FakeKubelet;
pub use link::CuttableLink;
pub use mlflow::MlflowServer;
pub use nodes::{create_gpu_nodes, gpu_node};
pub use process::Kestrel;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

/// Where `.ci/run` puts the control plane's binaries, relative to the workspace root.
pub const BIN_DIR: &str = "target/testenv";

/// The workspace root (this crate is `crates/kestrel-testenv`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `$CARGO_TARGET_DIR`, else `target/` in the workspace: where builds and `.ci/run` write.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// The directory holding `kestrel-testenv`, `kube-apiserver`, `kube-scheduler` and
/// `kube-controller-manager`:
/// `$KESTREL_TESTENV_BIN`, else `target/testenv` in the workspace.
pub fn bin_dir() -> PathBuf {
    std::env::var_os("KESTREL_TESTENV_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(BIN_DIR))
}

pub use kestrel_invariants::shared::{in_ci, skip_or_fail};

/// One control plane: etcd, kube-apiserver (and kube-scheduler or kube-controller-manager
/// when started), supervised by a `kestrel-testenv` process that stops them all when this
/// value is dropped or this process exits (its standard input closes).
pub struct ControlPlane {
    io: Mutex<(ChildStdin, BufReader<ChildStdout>)>,
    child: Mutex<Child>,
    /// The admin kubeconfig (`system:masters`).
    pub kubeconfig: PathBuf,
    /// `https://127.0.0.1:PORT`.
    pub server: String,
    /// The admin's bearer token.
    pub token: String,
    /// The control plane's log (etcd, kube-apiserver, kube-scheduler, kube-controller-manager).
    pub log: PathBuf,
    pub dir: PathBuf,
}

impl ControlPlane {
    /// Starts a control plane in a fresh directory. `None` (after a loud message) when its
    /// binaries are missing outside CI; panics when they are missing under `CI=true` or
    /// when it does not start.
    pub fn start() -> Option<ControlPlane> {
        let bin = bin_dir();
        let supervisor = bin.join("kestrel-testenv");
        for b in [
            "kestrel-testenv",
            "kube-apiserver",
            "kube-scheduler",
            "kube-controller-manager",
        ] {
            if !bin.join(b).exists() {
                skip_or_fail(&format!(
                    "the test control plane is not built ({} is missing); build it with `testenv/build.sh` (what .ci/run does)",
                    bin.join(b).display()
                ));
                return None;
            }
        }
        let dir = unique_dir("kestrel-testenv");
        let mut child = Command::new(&supervisor)
            .args(["up", "--dir"])
            .arg(&dir)
            .arg("--bin-dir")
            .arg(&bin)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", supervisor.display()));
        let stdin = child.stdin.take().expect("piped stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        stdout
            .read_line(&mut line)
            .expect("reading the control plane's description");
        let info: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|_| {
            let _ = child.kill();
            panic!(
                "the control plane did not start (it printed {line:?}); see {}",
                dir.join("control-plane.log").display()
            )
        });
        let text = |k: &str| info[k].as_str().unwrap_or_default().to_string();
        Some(ControlPlane {
            io: Mutex::new((stdin, stdout)),
            child: Mutex::new(child),
            kubeconfig: PathBuf::from(text("kubeconfig")),
            server: text("server"),
            token: text("token"),
            log: PathBuf::from(text("logs")),
            dir,
        })
    }

    /// Sends one command to the supervisor and returns its answer; panics on an error.
    pub fn command(&self, command: &str) -> String {
        let mut io = self.io.lock().unwrap_or_else(|e| e.into_inner());
        writeln!(io.0, "{command}").expect("writing to kestrel-testenv");
        io.0.flush().ok();
        let mut line = String::new();
        io.1.read_line(&mut line)
            .expect("reading kestrel-testenv's answer");
        let line = line.trim().to_string();
        assert!(
            line.starts_with("ok"),
            "kestrel-testenv {command}: {line} (log: {})",
            self.log.display()
        );
        line
    }

    /// SIGKILLs kube-apiserver and starts it again on the same port (etcd keeps the
    /// data); returns once it answers `/readyz`.
    pub fn restart_apiserver(&self) {
        self.command("restart-apiserver");
    }

    pub fn kill_apiserver(&self) {
        self.command("kill-apiserver");
    }

    pub fn start_apiserver(&self) {
        self.command("start-apiserver");
    }

    /// Freezes kube-apiserver (SIGSTOP): connections open, nothing answers.
    pub fn pause_apiserver(&self) {
        self.command("pause-apiserver");
    }

    pub fn resume_apiserver(&self) {
        self.command("resume-apiserver");
    }

    /// Compacts etcd at its current revision: every older resourceVersion is gone.
    pub fn compact(&self) {
        self.command("compact");
    }

    /// Starts kube-scheduler (no leader election) with extra flags.
    pub fn start_kube_scheduler(&self, flags: &[&str]) {
        self.command(&format!("start-scheduler {}", flags.join(" ")));
    }

    pub fn stop_kube_scheduler(&self) {
        self.command("stop-scheduler");
    }

    /// Starts kube-controller-manager (admin credentials, no leader election) running only
    /// `controllers` (`--controllers` names, e.g. `resourceclaim-controller`), with extra
    /// flags; returns once it serves `/healthz`, so an unknown name fails here.
    pub fn start_controller_manager(&self, controllers: &[&str], flags: &[&str]) {
        self.command(&format!(
            "start-controller-manager {} {}",
            controllers.join(","),
            flags.join(" ")
        ));
    }

    pub fn stop_controller_manager(&self) {
        self.command("stop-controller-manager");
    }

    /// An admin client.
    pub async fn client(&self) -> kube::Client {
        client_for(&self.kubeconfig).await
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Ok(mut io) = self.io.lock() {
            let _ = writeln!(io.0, "quit");
        }
        if let Ok(mut child) = self.child.lock() {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A client from a kubeconfig file.
pub async fn client_for(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("reading {}: {e}", kubeconfig.display()));
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kubeconfig");
    kube::Client::try_from(config).expect("client")
}

/// A new, empty directory under the system's temporary directory.
pub fn unique_dir(prefix: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creating a temporary directory");
    dir
}

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Polls `check` every 100 ms until it returns `Some` or `timeout` passes.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
