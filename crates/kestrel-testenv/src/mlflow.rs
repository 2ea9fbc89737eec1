//! A real MLflow tracking server for the TrainingJob tests: `mlflow server` from the
//! virtual environment `build/mlflow.sh` makes, on loopback with a SQLite backend, in a
//! process group of its own (it starts workers) that is killed whole when dropped.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `$MLFLOW_VENV`, else `target/tools/mlflow-venv` in the workspace (where
/// `build/mlflow.sh` installs it).
pub fn venv() -> PathBuf {
    std::env::var_os("MLFLOW_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join("target/tools/mlflow-venv"))
}

pub struct MlflowServer {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub uri: String,
    pub port: u16,
    pub log: PathBuf,
}

impl MlflowServer {
    /// Starts a server and waits for `/health`. `None` (after a loud message) when MLflow
    /// is not installed outside CI; panics under `CI=true` or when it does not answer.
    pub fn start(dir: &std::path::Path) -> Option<MlflowServer> {
        let mlflow = venv().join("bin/mlflow");
        if !mlflow.exists() {
            crate::skip_or_fail(&format!(
                "MLflow is not installed at {} (run build/mlflow.sh)",
                mlflow.display()
            ));
            return None;
        }
        let port = crate::free_port();
        let db = dir.join(format!("mlflow-{port}.db"));
        let artifacts = dir.join(format!("mlflow-{port}-artifacts"));
        let log = dir.join(format!("mlflow-{port}.log"));
        let file = std::fs::File::create(&log).expect("mlflow log");
        let mut command = Command::new(&mlflow);
        command
            .args(["server", "--host", "127.0.0.1", "--port", &port.to_string()])
            .arg("--backend-store-uri")
            .arg(format!("sqlite:///{}", db.display()))
            .arg("--default-artifact-root")
            .arg(&artifacts)
            .args(["--workers", "1"])
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log"))
            .stderr(file);
        // SAFETY: setpgid and prctl are async-signal-safe: a group of its own, so that
        // dropping kills its workers too, and killed if the test process dies.
        unsafe {
            use std::os::unix::process::CommandExt;
            command.pre_exec(|| {
                libc::setpgid(0, 0);
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command.spawn().expect("starting mlflow server");
        let server = MlflowServer {
            child,
            uri: format!("http://127.0.0.1:{port}"),
            port,
            log,
        };
        let started = Instant::now();
        while server.get("/health").map(|(c, _)| c) != Some(200) {
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "mlflow server did not answer /health within 90 s; log:\n{}",
                std::fs::read_to_string(&server.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        Some(server)
    }

    /// GET a path: (status code, body).
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .ok()?;
        write!(
            stream,
            "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{}\r\n\r\n",
            self.port
        )
        .ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).ok()?;
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
        Some((code, body))
    }

    /// A REST call's JSON answer (`runs/get?run_id=...`).
    pub fn api(&self, call: &str) -> serde_json::Value {
        let (code, body) = self
            .get(&format!("/api/2.0/mlflow/{call}"))
            .unwrap_or_else(|| panic!("MLflow did not answer {call}"));
        assert_eq!(code, 200, "MLflow answered {code} to {call}: {body}");
        serde_json::from_str(&body).expect("MLflow's JSON")
    }
}

impl Drop for MlflowServer {
    fn drop(&mut self) {
        // The whole group: the server and its workers.
        let pid = self.child.id() as i32;
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}
