//! The node agent's image (`build/agent-image.sh`), run as a container runtime runs it:
//! its layer unpacked into a directory that becomes the root, with the image's
//! environment, nothing from this machine. Without NVIDIA's library the agent says so
//! (and with `--without-nvml serve` keeps serving `/healthz` and `/metrics` with zero
//! GPUs); with a fake `libnvidia-ml.so.1` (tests/fake-nvml/, compiled with `cc`) where the
//! NVIDIA container runtime mounts the real one, discovery names the fake's GPUs, which
//! proves the image loads NVML, on a machine without a GPU.
//!
//! The image is `target/image/kestrel-agent-oci/` (under `$CARGO_TARGET_DIR` when set), or
//! the OCI layout at `$KESTREL_AGENT_IMAGE`. Where it is absent, the sandbox is not
//! permitted or there is no C compiler, the tests are skipped with a message, except under
//! `CI=true`, where they fail.

mod sandbox;

use sandbox::{assert_ran, fresh_root, skip, target_dir, text, Sandbox, IN_CLUSTER_ENV};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;

const WHAT: &str = "the agent image";

/// Where the NVIDIA container runtime mounts libnvidia-ml.so.1: the multiarch directory
/// in a Debian-like container or with CDI on a Debian-like host, /usr/lib64 otherwise.
const NVIDIA_DIRS: [&str; 2] = ["/usr/lib/x86_64-linux-gnu", "/usr/lib64"];

/// The fake's two GPUs (tests/fake-nvml/libnvidia-ml.c).
const FAKE_UUIDS: [&str; 2] = [
    "GPU-fa4e0000-0000-4000-8000-000000000000",
    "GPU-fa4e0000-0000-4000-8000-000000000001",
];

fn image_dir() -> PathBuf {
    std::env::var_os("KESTREL_AGENT_IMAGE")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("image/kestrel-agent-oci"))
}

fn read_json(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The image unpacked and entered, with its environment.
struct Container {
    sandbox: Sandbox,
    env: Vec<(String, String)>,
}

impl Container {
    fn start(name: &str) -> Option<Container> {
        let dir = image_dir();
        if !dir.join("index.json").exists() {
            return skip(
                WHAT,
                &format!(
                    "{} is not built: run build/agent-image.sh (or set KESTREL_AGENT_IMAGE)",
                    dir.display()
                ),
            );
        }
        let blob = |digest: &Value| {
            let digest = digest.as_str().expect("a digest");
            dir.join("blobs/sha256")
                .join(digest.strip_prefix("sha256:").expect("a sha256 digest"))
        };
        let index = read_json(&dir.join("index.json"));
        let manifest = read_json(&blob(&index["manifests"][0]["digest"]));
        let config = read_json(&blob(&manifest["config"]["digest"]));
        let layers = manifest["layers"].as_array().expect("layers");
        assert_eq!(layers.len(), 1, "one layer: {layers:?}");
        let root = fresh_root(&format!("agent-image-{name}"));
        let out = Command::new("tar")
            .arg("-xzf")
            .arg(blob(&layers[0]["digest"]))
            .arg("-C")
            .arg(&root)
            .output()
            .expect("tar");
        assert_ran(&out, "tar -xzf (the image's layer)");
        let env = config["config"]["Env"]
            .as_array()
            .expect("the image's Env")
            .iter()
            .map(|e| {
                let (k, v) = e.as_str().unwrap().split_once('=').unwrap();
                (k.to_string(), v.to_string())
            })
            .collect();
        let sandbox = match Sandbox::enter(root) {
            Ok(sandbox) => sandbox,
            Err(why) => return skip(WHAT, &why),
        };
        Some(Container { sandbox, env })
    }

    /// The image's environment and `extra`.
    fn env<'a>(&'a self, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        self.env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain(extra.iter().copied())
            .collect()
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        self.sandbox.run(args, &self.env(&[]))
    }
}

#[test]
fn agent_image_runs_kestrel_and_holds_no_shell() {
    let Some(c) = Container::start("version") else {
        return;
    };
    let out = c.run(&["--version"]);
    assert_ran(&out, "kestrel --version");
    assert!(
        text(&out.stdout).starts_with(&format!("kestrel {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{}",
        text(&out.stdout)
    );
    // Only kestrel, its shared libraries and the loader's configuration.
    let mut files = Vec::new();
    let mut dirs = vec![c.sandbox.root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                dirs.push(entry.path());
            } else if kind.is_file() {
                let path = entry.path();
                files.push(format!(
                    "/{}",
                    path.strip_prefix(&c.sandbox.root).unwrap().display()
                ));
            }
        }
    }
    files.sort();
    let config = ["/etc/group", "/etc/passwd", "/etc/ld.so.conf"];
    for file in &files {
        let name = file.rsplit('/').next().unwrap();
        assert!(
            file == "/kestrel"
                || config.contains(&file.as_str())
                || file.starts_with("/etc/ld.so.conf.d/")
                || name.contains(".so."),
            "{file} is neither kestrel, a shared library nor the loader's configuration: {files:?}"
        );
    }
    let libraries: Vec<&str> = files
        .iter()
        .filter(|f| f.contains(".so."))
        .map(|f| f.rsplit('/').next().unwrap())
        .collect();
    // The loader, what kestrel links against, and what NVML links against.
    for lib in [
        "ld-linux-x86-64.so.2",
        "libc.so.6",
        "libm.so.6",
        "libgcc_s.so.1",
        "libdl.so.2",
        "libpthread.so.0",
        "librt.so.1",
    ] {
        assert!(libraries.contains(&lib), "no {lib}: {files:?}");
    }
}

/// `kestrel agent` without NVIDIA's library: `--discover` (like the default,
/// `--without-nvml exit`) fails naming the library; `--without-nvml serve` keeps serving
/// /healthz and reports zero GPUs on /metrics.
#[test]
fn agent_image_without_nvml_says_so_and_serves_zero_gpus() {
    let Some(c) = Container::start("no-nvml") else {
        return;
    };
    let out = c.run(&["agent", "--discover"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("libnvidia-ml.so.1) could not be loaded")
            && stderr.contains("--fake-gpus FILE")
            && !stderr.contains("statically linked"),
        "{stderr}"
    );

    // In-cluster, with an API server nobody answers at: the agent publishes nothing and
    // registers no plugin.
    c.sandbox.put_service_account();
    let mut agent = c.sandbox.spawn(
        &[
            "agent",
            "--without-nvml=serve",
            "--node-name=gpu-0",
            "--no-device-plugin",
            "--no-publish",
            "--metrics-addr=127.0.0.1:0",
            "--log-format=json",
        ],
        &c.env(&IN_CLUSTER_ENV),
    );
    // Its log, up to the line naming the metrics address.
    let mut log = String::new();
    let mut lines = BufReader::new(agent.stderr.take().unwrap()).lines();
    let addr = loop {
        let Some(line) = lines.next() else {
            let status = agent.wait().unwrap();
            panic!("the agent ended ({status}) before serving metrics:\n{log}");
        };
        let line = line.unwrap();
        log.push_str(&line);
        log.push('\n');
        let entry: Value = serde_json::from_str(&line).unwrap_or_default();
        if entry["fields"]["message"] == "serving metrics" {
            break entry["fields"]["addr"]
                .as_str()
                .expect("the address")
                .to_string();
        }
    };
    let get = |path: &str| {
        let mut stream = TcpStream::connect(&addr).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    };
    let health = get("/healthz");
    let metrics = get("/metrics");
    let _ = agent.kill();
    let _ = agent.wait();
    assert!(
        log.contains("libnvidia-ml.so.1) could not be loaded") && log.contains("zero GPUs"),
        "{log}"
    );
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("kestrel_agent_gpus{") && l.ends_with(" 0")),
        "{metrics}"
    );
}

/// The fake library, built with the compiler of this machine (whose glibc the image
/// carries), linked like the real one against libdl, libpthread, librt, libm and libc.
fn fake_nvml(into: &Path) -> Option<PathBuf> {
    let source = sandbox::repo().join("crates/kestrel/tests/fake-nvml/libnvidia-ml.c");
    let lib = into.join("libnvidia-ml.so.1");
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror"])
        .arg("-o")
        .arg(&lib)
        .arg(&source)
        .args([
            "-Wl,-soname,libnvidia-ml.so.1",
            "-Wl,--no-as-needed",
            "-l:libdl.so.2",
            "-l:libpthread.so.0",
            "-l:librt.so.1",
            "-lm",
        ])
        .output();
    match out {
        Ok(out) => {
            assert_ran(&out, "cc (the fake libnvidia-ml.so.1)");
            Some(lib)
        }
        Err(e) => skip(WHAT, &format!("no C compiler (cc: {e}) for the fake NVML")),
    }
}

/// In each directory the NVIDIA runtime may mount it into, the image's agent loads the
/// library and discovers its GPUs, their NVLink and PCI addresses and fabric clique
/// included.
#[test]
fn agent_image_loads_nvml_where_the_nvidia_runtime_mounts_it() {
    let Some(c) = Container::start("nvml") else {
        return;
    };
    let build = fresh_root("fake-nvml-build");
    let Some(lib) = fake_nvml(&build) else {
        return;
    };
    let lib = std::fs::read(lib).unwrap();
    let _ = std::fs::remove_dir_all(&build);
    for dir in NVIDIA_DIRS {
        for other in NVIDIA_DIRS {
            let _ = std::fs::remove_file(
                c.sandbox
                    .root
                    .join(other.trim_start_matches('/'))
                    .join("libnvidia-ml.so.1"),
            );
        }
        c.sandbox.put(&format!("{dir}/libnvidia-ml.so.1"), &lib);
        let out = c.run(&["agent", "--discover"]);
        assert_ran(&out, &format!("kestrel agent --discover, NVML in {dir}"));
        let found: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(found["backend"], "nvml", "{found}");
        let gpus = found["gpus"].as_array().unwrap();
        let uuids: Vec<&str> = gpus.iter().map(|g| g["uuid"].as_str().unwrap()).collect();
        assert_eq!(uuids, FAKE_UUIDS, "NVML in {dir}");
        for (i, gpu) in gpus.iter().enumerate() {
            assert_eq!(gpu["index"], i, "{gpu}");
            assert_eq!(gpu["model"], "Kestrel Fake H100 80GB", "{gpu}");
            assert_eq!(gpu["memoryMiB"], 81559, "{gpu}");
            assert_eq!(gpu["nvlinkPeers"], serde_json::json!([1 - i]), "{gpu}");
            assert_eq!(gpu["migEnabled"], false, "{gpu}");
        }
        assert_eq!(gpus[0]["pciBusId"], "0000:17:00.0");
        assert_eq!(gpus[1]["pciBusId"], "0000:2a:00.0");
        assert_eq!(found["labels"]["nvidia.com/gpu.count"], "2", "{found}");
        // NVML's fabric query, which nvml-wrapper does not wrap, read through its raw
        // bindings.
        assert_eq!(
            found["labels"]["nvidia.com/gpu.clique"], "4c2f8d1e-0011-4233-8455-66778899aabb.7",
            "{found}"
        );
    }
}
