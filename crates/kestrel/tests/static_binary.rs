//! `kestrel --version`, and the static binary that the container image holds running with
//! nothing beside it.
//!
//! The static binary is `target/image/kestrel` (under `$CARGO_TARGET_DIR` when set), which
//! `build/static.sh` builds (CI runs it first), or `$KESTREL_STATIC_BIN`. The sandbox tests
//! copy it into an empty directory with a small scenario and run it there as its root
//! (`unshare --map-root-user --root`, else `chroot`): no libc, no /etc, /proc, /dev or /tmp,
//! no CA bundle. Where that binary is absent or the sandbox is not permitted they are
//! skipped with a message, except under `CI=true`, where they fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `kestrel --version`: the Cargo version and the git commit it was built from.
#[test]
fn version_names_the_release_and_the_commit() {
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let line = text(&out.stdout);
    let want = format!("kestrel {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(line.starts_with(&want), "{line}");
    let commit = line
        .trim_end()
        .trim_start_matches(&want)
        .trim_end_matches(')');
    assert!(
        commit == "unknown" || commit.chars().all(|c| c.is_ascii_hexdigit()),
        "{line}"
    );
    if let Ok(head) = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(repo())
        .output()
    {
        let head = text(&head.stdout);
        if !head.trim().is_empty() && std::env::var_os("KESTREL_GIT_COMMIT").is_none() {
            assert_eq!(commit, head.trim(), "built from another commit");
        }
    }
}

/// Skips (returns None) with a message, or fails under CI=true.
fn skip(why: &str) -> Option<Sandbox> {
    if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        panic!("CI=true and the static binary cannot be tested: {why}");
    }
    eprintln!("skipped: {why}");
    None
}

/// An empty root directory holding only the static binary and what a test puts there.
struct Sandbox {
    root: PathBuf,
    /// The command that runs a program with `root` as its root directory.
    runner: Vec<String>,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn static_binary() -> PathBuf {
    std::env::var_os("KESTREL_STATIC_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| repo().join("target"))
                .join("image/kestrel")
        })
}

fn sandbox(name: &str) -> Option<Sandbox> {
    if !cfg!(target_os = "linux") {
        return skip("the sandbox needs Linux (unshare or chroot)");
    }
    let binary = static_binary();
    if !binary.exists() {
        return skip(&format!(
            "{} is not built: run build/static.sh (or set KESTREL_STATIC_BIN)",
            binary.display()
        ));
    }
    let root = std::env::temp_dir().join(format!("kestrel-static-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    std::fs::copy(&binary, root.join("kestrel")).unwrap();
    let mut refused = Vec::new();
    // The probe runs /kestrel itself: a runner that is refused says so on stderr with its
    // own name; anything else is the binary's failure, which the tests report.
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
            let runner: Vec<String> = runner.iter().map(|s| s.to_string()).collect();
            let sandbox = Sandbox { root, runner };
            return Some(sandbox);
        }
        refused.push(stderr.trim().to_string());
    }
    let why = format!("neither unshare nor chroot is permitted here: {refused:?}");
    let _ = std::fs::remove_dir_all(&root);
    skip(&why)
}

impl Sandbox {
    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new(&self.runner[0])
            .args(&self.runner[1..])
            .arg(&self.root)
            .arg("/kestrel")
            .args(args)
            .env_clear()
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }

    fn put(&self, path: &str, contents: &[u8]) {
        let path = self.root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }

    fn copy_dir(&self, from: &Path, to: &str) {
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

fn assert_ran(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed in the empty root: {}\n{}",
        out.status,
        text(&out.stderr)
    );
}

#[test]
fn static_binary_is_static() {
    let binary = static_binary();
    if !binary.exists() {
        skip(&format!("{} is not built", binary.display()));
        return;
    }
    let elf = std::fs::read(&binary).unwrap();
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF executable");
    // PT_INTERP names the dynamic loader: a static executable has none.
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap()) as usize;
    let phentsize = u16::from_le_bytes(elf[0x36..0x38].try_into().unwrap()) as usize;
    let phnum = u16::from_le_bytes(elf[0x38..0x3a].try_into().unwrap()) as usize;
    for i in 0..phnum {
        let at = phoff + i * phentsize;
        let p_type = u32::from_le_bytes(elf[at..at + 4].try_into().unwrap());
        assert_ne!(p_type, 3, "{} asks for a dynamic loader", binary.display());
    }
    assert!(
        !elf.windows(b"libssl".len()).any(|w| w == b"libssl"),
        "links OpenSSL"
    );
}

#[test]
fn static_binary_prints_its_version_and_crds_in_an_empty_root() {
    let Some(sb) = sandbox("crds") else { return };
    let out = sb.run(&["--version"], &[]);
    assert_ran(&out, "kestrel --version");
    let version = text(&out.stdout);
    assert!(
        version.starts_with(&format!("kestrel {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );

    let out = sb.run(&["crds"], &[]);
    assert_ran(&out, "kestrel crds");
    let crds = text(&out.stdout);
    assert!(crds.contains("name: \"podgroups.scheduling.kestrel.dev\""));
    assert_eq!(
        crds.matches("kind: \"CustomResourceDefinition\"").count(),
        kestrel_kube::deploy::crd_objects().len(),
        "every CRD the code declares"
    );

    let out = sb.run(&["manifests"], &[]);
    assert_ran(&out, "kestrel manifests");
    assert!(text(&out.stdout).contains("kind: \"PodDisruptionBudget\""));
}

#[test]
fn static_binary_simulates_a_scenario_in_an_empty_root() {
    let Some(sb) = sandbox("sim") else { return };
    sb.copy_dir(&repo().join("examples/falcon-ai"), "/scenario");
    let out = sb.run(&["sim", "/scenario", "--json"], &[]);
    assert_ran(&out, "kestrel sim");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["nodes"], 9);
    assert_eq!(summary["gpus"], 16);
    assert!(summary["pods"]["created"].as_u64().unwrap() > 100);
}

/// A self-signed CA (P-256), standing in for the cluster's: the client parses it into its
/// root store. Any certificate serves; this one is never used to verify anything.
const TEST_CA: &str = "-----BEGIN CERTIFICATE-----
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

/// In a pod the API server's CA is the service account mount's `ca.crt`, not a bundle in
/// the image: with the mount the in-cluster client is built and tries the (here closed)
/// API server port; without `ca.crt` it names the file it could not read.
#[test]
fn static_binary_takes_the_cluster_ca_from_the_service_account_mount() {
    let Some(sb) = sandbox("incluster") else {
        return;
    };
    let env = [
        ("KUBERNETES_SERVICE_HOST", "127.0.0.1"),
        ("KUBERNETES_SERVICE_PORT", "1"),
    ];
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    sb.put(&format!("{sa}/token"), b"test-token");
    sb.put(&format!("{sa}/namespace"), b"kube-system");

    let out = sb.run(&["doctor", "--live"], &env);
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("ca.crt") || stderr.contains("certificate"),
        "without ca.crt: {stderr}"
    );

    sb.put(&format!("{sa}/ca.crt"), TEST_CA.as_bytes());
    let out = sb.run(&["doctor", "--live"], &env);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "no API server listens on port 1");
    assert!(
        !stderr.contains("ca.crt")
            && !stderr.contains("certificate")
            && stderr.contains("127.0.0.1:1"),
        "with the mount's CA the client is built and tries the API server: {stderr}"
    );
}
