//! A directory run as the root of `/kestrel` (`unshare --map-root-user --root`, else
//! `chroot`): what the release images hold and nothing else. For the tests of the static
//! binary (static_binary.rs) and of the agent's image (agent_image.rs).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// The workspace, and `target/` (or `$CARGO_TARGET_DIR`) where the build scripts write
/// `image/`.
pub use kestrel_testenv::{target_dir, workspace_root as repo};

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Skips (returns None) with a message, or fails under CI=true, where `what` must be tested.
pub fn skip<T>(what: &str, why: &str) -> Option<T> {
    kestrel_invariants::shared::skip_or_fail(&format!("{what} cannot be tested: {why}"));
    None
}

/// A root directory holding `/kestrel` and what a test puts there; removed on drop.
pub struct Sandbox {
    pub root: PathBuf,
    /// The command that runs a program with `root` as its root directory.
    runner: Vec<String>,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// An empty directory for a sandbox, unique to the test process and `name`.
pub fn fresh_root(name: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("kestrel-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    root
}

/// `name`'s full path in this process's PATH (`name` itself when it is not there).
fn find_program(name: &str) -> String {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .map_or_else(|| name.to_string(), |path| path.display().to_string())
}

impl Sandbox {
    /// Finds a runner that may enter `root` (which holds `/kestrel`); Err says why none
    /// may. The probe runs `/kestrel --version` itself: a runner that is refused says so
    /// on stderr with its own name; anything else is the binary's failure, which the tests
    /// report.
    pub fn enter(root: PathBuf) -> Result<Sandbox, String> {
        if !cfg!(target_os = "linux") {
            let _ = std::fs::remove_dir_all(&root);
            return Err("the sandbox needs Linux (unshare or chroot)".into());
        }
        let mut refused = Vec::new();
        for runner in [vec!["unshare", "--map-root-user", "--root"], vec!["chroot"]] {
            let out = Command::new(runner[0])
                .args(&runner[1..])
                .arg(&root)
                .args(["/kestrel", "--version"])
                .output();
            let out = match out {
                Ok(out) => out,
                Err(e) => {
                    refused.push(format!("{}: {e}", runner[0]));
                    continue;
                }
            };
            let stderr = text(&out.stderr);
            let own_failure = stderr.starts_with(&format!("{}:", runner[0]))
                && (stderr.contains("not permitted")
                    || stderr.contains("cannot change root")
                    || stderr.contains("unrecognized option")
                    || stderr.contains("failed"))
                && !stderr.contains("failed to run command");
            if out.status.success() || !own_failure {
                // By its full path: the commands run with the image's environment, whose
                // PATH is not this machine's.
                let mut runner: Vec<String> = runner.iter().map(|s| s.to_string()).collect();
                runner[0] = find_program(&runner[0]);
                return Ok(Sandbox { root, runner });
            }
            refused.push(stderr.trim().to_string());
        }
        let _ = std::fs::remove_dir_all(&root);
        Err(format!(
            "neither unshare nor chroot is permitted here: {refused:?}"
        ))
    }

    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut command = Command::new(&self.runner[0]);
        command
            .args(&self.runner[1..])
            .arg(&self.root)
            .arg("/kestrel")
            .args(args)
            .env_clear()
            .envs(env.iter().copied());
        command
    }

    /// Runs `/kestrel ARGS` with only `env` in its environment.
    pub fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        self.command(args, env).output().unwrap()
    }

    /// Starts `/kestrel ARGS`, stderr piped, for a test that talks to it while it runs.
    pub fn spawn(&self, args: &[&str], env: &[(&str, &str)]) -> Child {
        self.command(args, env)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Writes `contents` at `path` inside the root.
    pub fn put(&self, path: &str, contents: &[u8]) {
        let path = self.root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }

    /// Copies the files of `from` into `to` inside the root.
    pub fn copy_dir(&self, from: &Path, to: &str) {
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            if entry.file_type().unwrap().is_file() {
                self.put(
                    &format!("{to}/{name}"),
                    &std::fs::read(entry.path()).unwrap(),
                );
            }
        }
    }
}

/// A self-signed CA (P-256), standing in for the cluster's: the client parses it into its
/// root store. Any certificate serves; this one is never used to verify anything.
pub const TEST_CA: &str = "-----BEGIN CERTIFICATE-----
MIIBizCCATGgAwIBAgIUWQlQ3nGywqp/Z+yDqB+O1ebVduUwCgYIKoZIzj0EAwIw
GjEYMBYGA1UEAwwPa2VzdHJlbC10ZXN0LWNhMCAXDTI2MTIwMTE1MDc1MloYDzIx
MjYxMTA3MTUwNzUyWjAaMRgwFgYDVQQDDA9rZXN0cmVsLXRlc3QtY2EwWTATBgcq
hkjOPQIBBggqhkjOPQMBBwNCAATtFwvGkAzla0+J5B6BQsIYnudMTYppUn7r4m6X
GQ1YRDkiKbVJ76LRIKAYVx9L5hGaWcKn+KGP+1690dlImvyIo1MwUTAdBgNVHQ4E
FgQUmcFSQpLjYyNKbWlWBzk/Zsna+dAwHwYDVR0jBBgwFoAUmcFSQpLjYyNKbWlW
Bzk/Zsna+dAwDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNIADBFAiEAlf0A
cWvmZJvNqcEEJxtUfJhZ/s6FmbV/sdwwXtGn7rcCIFT8EfQBgVa5yeinqS4ntt8H
qV0CM/qYATjqJcbM1yp9
-----END CERTIFICATE-----
";

/// The service account mount of a pod (token, namespace, the CA above) in the sandbox,
/// and the environment that points the in-cluster client at `127.0.0.1:1`, where nothing
/// answers.
pub const IN_CLUSTER_ENV: [(&str, &str); 2] = [
    ("KUBERNETES_SERVICE_HOST", "127.0.0.1"),
    ("KUBERNETES_SERVICE_PORT", "1"),
];
pub const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

impl Sandbox {
    pub fn put_service_account(&self) {
        self.put(&format!("{SERVICE_ACCOUNT}/token"), b"test-token");
        self.put(&format!("{SERVICE_ACCOUNT}/namespace"), b"kube-system");
        self.put(&format!("{SERVICE_ACCOUNT}/ca.crt"), TEST_CA.as_bytes());
    }
}

pub fn assert_ran(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed in the sandbox: {}\n{}",
        out.status,
        text(&out.stderr)
    );
}
