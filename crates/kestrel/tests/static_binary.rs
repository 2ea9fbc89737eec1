//! `kestrel --version`, and the static binary that the container image holds running with
//! nothing beside it.
//!
//! The static binary is `target/image/kestrel` (under `$CARGO_TARGET_DIR` when set), which
//! `build/static.sh` builds (CI runs it first), or `$KESTREL_STATIC_BIN`. The sandbox tests
//! copy it into an empty directory with a small scenario and run it there as its root
//! (`unshare --map-root-user --root`, else `chroot`): no libc, no /etc, /proc, /dev or /tmp,
//! no CA bundle. Where that binary is absent or the sandbox is not permitted they are
//! skipped with a message, except under `CI=true`, where they fail.

mod sandbox;

use sandbox::{
    assert_ran, fresh_root, repo, skip, target_dir, text, Sandbox, IN_CLUSTER_ENV, SERVICE_ACCOUNT,
    TEST_CA,
};
use std::path::PathBuf;
use std::process::Command;

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

const WHAT: &str = "the static binary";

fn static_binary() -> PathBuf {
    std::env::var_os("KESTREL_STATIC_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("image/kestrel"))
}

/// An empty root directory holding only the static binary.
fn sandbox(name: &str) -> Option<Sandbox> {
    let binary = static_binary();
    if !binary.exists() {
        return skip(
            WHAT,
            &format!(
                "{} is not built: run build/static.sh (or set KESTREL_STATIC_BIN)",
                binary.display()
            ),
        );
    }
    let root = fresh_root(&format!("static-{name}"));
    std::fs::copy(&binary, root.join("kestrel")).unwrap();
    Sandbox::enter(root).map_or_else(|why| skip(WHAT, &why), Some)
}

#[test]
fn static_binary_is_static() {
    let binary = static_binary();
    if !binary.exists() {
        skip::<()>(WHAT, &format!("{} is not built", binary.display()));
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
        kestrel_live::deploy::crd_objects().len(),
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

/// The release image cannot load NVML: its agent says so, and names the image that can.
#[test]
fn static_binary_agent_names_the_agent_image() {
    let Some(sb) = sandbox("agent") else { return };
    let out = sb.run(&["agent", "--discover"], &[]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    for said in [
        "libnvidia-ml.so.1",
        "statically linked",
        "the kestrel-agent image",
        "build/agent-image.sh",
    ] {
        assert!(stderr.contains(said), "{said:?} not in: {stderr}");
    }
}

/// In a pod the API server's CA is the service account mount's `ca.crt`, not a bundle in
/// the image: with the mount the in-cluster client is built and tries the (here closed)
/// API server port; without `ca.crt` it names the file it could not read.
#[test]
fn static_binary_takes_the_cluster_ca_from_the_service_account_mount() {
    let Some(sb) = sandbox("incluster") else {
        return;
    };
    let env = IN_CLUSTER_ENV;
    let sa = SERVICE_ACCOUNT;
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
