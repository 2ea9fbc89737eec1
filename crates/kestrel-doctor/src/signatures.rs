//! Failure signatures: what an Event or a container state says, reduced to a stable id
//! `check/Reason/pattern` (the check, the normalized reason, the message's pattern), and
//! what each means and how to fix it.
//!
//! The reasons and messages matched are the ones kubelet, the CNI plugins and the
//! operators emit (the fixtures in `tests.rs` cite the source of each). A Warning event
//! of a reason no check reads becomes `event-other/<Reason>/<reporter>`: grouped, never
//! dropped.

use super::events::EventRecord;

/// An event's place: the check that reports it, its signature and what it is grouped by
/// within the signature (a registry, a CNI plugin, a volume, a scheduler).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Classified {
    pub(super) check: &'static str,
    pub(super) signature: String,
    pub(super) detail: String,
}

fn classified(check: &'static str, reason: &str, pattern: &str, detail: String) -> Classified {
    Classified {
        check,
        signature: format!("{check}/{reason}/{pattern}"),
        detail,
    }
}

/// The signature of an event; `None` for a Normal event no check reads (counted only).
pub(super) fn classify_event(ev: &EventRecord) -> Option<Classified> {
    let msg = ev.message;
    match ev.reason {
        // kubelet: images.FailedToPullImage is "Failed" with "Failed to pull image %q: %v";
        // "Error: ErrImagePull" / "Error: ImagePullBackOff" follow it; BackOff "Back-off
        // pulling image %q" repeats it.
        "Failed" | "ErrImagePull" | "ImagePullBackOff" | "BackOff"
            if is_image_pull_message(msg) =>
        {
            let image = quoted(msg).unwrap_or("");
            Some(classified(
                "image-pull-failed",
                "ErrImagePull",
                pull_error_class(msg),
                registry_of(image),
            ))
        }
        // kubelet: "Back-off restarting failed container %s in pod %s".
        "BackOff" if msg.starts_with("Back-off restarting failed container") => Some(classified(
            "container-crashloop",
            "CrashLoopBackOff",
            "pod",
            String::new(),
        )),
        // kubelet "SystemOOM" and node-problem-detector "OOMKilling": the kernel killed a
        // process on the node; the pod is not named.
        "SystemOOM" | "OOMKilling" => Some(classified(
            "container-oom-killed",
            "OOMKilled",
            "node",
            String::new(),
        )),
        "FailedCreatePodSandBox" | "NoNetworkFound" => {
            let (pattern, cni) = sandbox_class(msg);
            Some(classified(
                "pod-sandbox-failed",
                "FailedCreatePodSandBox",
                pattern,
                cni,
            ))
        }
        "FailedMount" | "FailedAttachVolume" | "FailedMapVolume" => Some(classified(
            "volume-mount-failed",
            ev.reason,
            mount_class(msg),
            volume_of(msg),
        )),
        // Kestrel's node agent: "GPU 3 (GPU-uuid) is unhealthy: XID 48; ..." (reason
        // XidError, or GpuLost for XID 79 and a GPU that stopped answering).
        "XidError" | "GpuLost" if ev.type_ == "Warning" => {
            let pattern = xid_of(msg).map_or("lost".to_string(), |x| format!("xid-{x}"));
            Some(classified(
                "gpu-unhealthy",
                ev.reason,
                &pattern,
                String::new(),
            ))
        }
        "FailedScheduling" => Some(classified(
            "pod-failed-scheduling",
            "FailedScheduling",
            &scheduling_pattern(msg),
            if ev.reporter.is_empty() {
                "an unnamed scheduler".to_string()
            } else {
                ev.reporter.to_string()
            },
        )),
        _ if ev.type_ == "Warning" => {
            let reason = if ev.reason.is_empty() {
                "NoReason".to_string()
            } else {
                slug_keep_case(ev.reason)
            };
            let reporter = if ev.reporter.is_empty() {
                "unknown".to_string()
            } else {
                slug(ev.reporter)
            };
            Some(classified(
                "event-other",
                &reason,
                &reporter,
                ev.reporter.to_string(),
            ))
        }
        _ => None,
    }
}

/// The XID number of an agent's message (`... unhealthy: XID 48; ...`).
pub(super) fn xid_of(msg: &str) -> Option<u64> {
    let rest = msg.split_once("XID ")?.1;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// kubelet's image pull messages, and the runtime's errors behind them.
pub(super) fn is_image_pull_message(msg: &str) -> bool {
    msg.starts_with("Failed to pull image")
        || msg.starts_with("Back-off pulling image")
        || msg.starts_with("Error: ErrImagePull")
        || msg.starts_with("Error: ImagePullBackOff")
        || msg.contains("failed to pull and unpack image")
}

/// The first double-quoted text of a message (the image of a pull message).
fn quoted(msg: &str) -> Option<&str> {
    let start = msg.find('"')? + 1;
    let len = msg[start..].find('"')?;
    Some(&msg[start..start + len])
}

/// The error class of an image pull message: what the registry or the network said.
/// `back-off`: kubelet's repeat of an earlier failure, without the error.
pub(super) fn pull_error_class(msg: &str) -> &'static str {
    let m = msg.to_ascii_lowercase();
    let any = |needles: &[&str]| needles.iter().any(|n| m.contains(n));
    if any(&["toomanyrequests", "429 too many requests", "rate limit"]) {
        "rate-limit"
    } else if any(&[
        "401 unauthorized",
        "unauthorized",
        "403 forbidden",
        "authorization failed",
        "authentication required",
        "no basic auth credentials",
        "pull access denied",
        "insufficient_scope",
        "denied: ",
    ]) {
        "auth"
    } else if any(&["x509:", "tls:", "certificate"]) {
        "tls"
    } else if any(&[
        "not found",
        "manifest unknown",
        "name unknown",
        "repository does not exist",
        "no such image",
    ]) {
        "not-found"
    } else if any(&[
        "i/o timeout",
        "no such host",
        "connection refused",
        "dial tcp",
        "context deadline exceeded",
        "connection reset",
    ]) {
        "network"
    } else if m.starts_with("back-off pulling image") || m.starts_with("error: ") {
        "back-off"
    } else {
        "other"
    }
}

/// The registry of an image reference: its first component when that is a host
/// (has a dot or a port, or is `localhost`), else Docker Hub.
pub(super) fn registry_of(image: &str) -> String {
    match image.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            first.to_string()
        }
        _ if image.is_empty() => "an unnamed registry".to_string(),
        _ => "docker.io".to_string(),
    }
}

/// The pattern and CNI plugin of a sandbox failure.
pub(super) fn sandbox_class(msg: &str) -> (&'static str, String) {
    let m = msg.to_ascii_lowercase();
    let cni = if m.contains("sriov") {
        "sriov"
    } else if m.contains("whereabouts") {
        "whereabouts"
    } else if m.contains("host-local") {
        "host-local"
    } else if m.contains("multus") || m.contains("network-attachment-definition") {
        "multus"
    } else if let Some(t) = m
        .split("plugin type=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
    {
        return (sandbox_pattern(&m), t.to_string());
    } else {
        [
            "calico", "cilium", "flannel", "weave", "ovn", "antrea", "aws-cni", "azure",
        ]
        .into_iter()
        .find(|c| m.contains(c))
        .unwrap_or("the CNI plugin")
    };
    (sandbox_pattern(&m), cni.to_string())
}

fn sandbox_pattern(m: &str) -> &'static str {
    let any = |needles: &[&str]| needles.iter().any(|n| m.contains(n));
    if any(&[
        "cannot find a network-attachment-definition",
        "network-attachment-definitions.k8s.cni.cncf.io",
    ]) {
        "nad-missing"
    } else if any(&[
        "vf pci addr is required",
        "no vf available",
        "no available vf",
        "failed to find a vf",
    ]) {
        "sriov-no-vf"
    } else if any(&[
        "no ip addresses available",
        "could not allocate ip",
        "no free ip",
        "ip pool exhausted",
        "ipam exhausted",
    ]) {
        "ipam-exhausted"
    } else if any(&[
        "cni config uninitialized",
        "network plugin is not ready",
        "no networks found in /etc/cni/net.d",
    ]) {
        "cni-not-ready"
    } else if m.contains("multus") {
        "multus"
    } else {
        "other"
    }
}

/// The pattern of a volume mount or attach failure.
pub(super) fn mount_class(msg: &str) -> &'static str {
    let m = msg.to_ascii_lowercase();
    let any = |needles: &[&str]| needles.iter().any(|n| m.contains(n));
    if m.contains("multi-attach error") {
        "multi-attach"
    } else if any(&["not found", "does not exist", "no such file or directory"]) {
        "not-found"
    } else if any(&["permission denied", "access denied", "forbidden"]) {
        "permission"
    } else if any(&["timed out", "deadline exceeded", "timeout"]) {
        "timeout"
    } else if any(&["mount failed", "exit status", "mounting arguments"]) {
        "mount-error"
    } else {
        "other"
    }
}

/// The volume a mount message names (`for volume "x"`), or "".
pub(super) fn volume_of(msg: &str) -> String {
    ["for volume \"", "volume \""]
        .iter()
        .find_map(|p| msg.split_once(p))
        .and_then(|(_, rest)| rest.split('"').next())
        .map(str::to_string)
        .or_else(|| {
            // "Unable to attach or mount volumes: unmounted volumes=[data ckpt], ..."
            msg.split_once("unmounted volumes=[")
                .and_then(|(_, r)| r.split(']').next())
                .map(str::to_string)
        })
        .unwrap_or_default()
}

/// A scheduler's message as a pattern: its largest reason without the counts
/// (`0/8 nodes are available: 8 Insufficient nvidia.com/gpu.` ->
/// `insufficient-nvidia.com-gpu`).
pub(super) fn scheduling_pattern(msg: &str) -> String {
    let body = msg.split_once(": ").map_or(msg, |(head, rest)| {
        if head.contains("nodes are available") {
            rest
        } else {
            msg
        }
    });
    let first = body
        .split(", ")
        .next()
        .unwrap_or(body)
        .split(". ")
        .next()
        .unwrap_or(body);
    let words: Vec<&str> = first
        .split_whitespace()
        .filter(|w| !w.chars().all(|c| c.is_ascii_digit() || c == '/'))
        .collect();
    let s = slug(&words.join(" "));
    if s.is_empty() {
        "unknown".to_string()
    } else {
        s
    }
}

/// Lower-case letters, digits, dots and dashes: a label-safe pattern, at most 48 chars.
pub(super) fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() || c == '.' {
            out.push(c);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let mut out: String = out.trim_end_matches(['-', '.']).chars().take(48).collect();
    while out.ends_with('-') {
        out.pop();
    }
    out
}

/// A reason as it is, its characters made label-safe.
fn slug_keep_case(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect()
}

/// A GPU or Network Operator component, from its DaemonSet's (or pod's) name: the
/// component's pattern and the regex of its DaemonSet names for kube-state-metrics.
/// The names are those the operators' manifests give their DaemonSets (NVIDIA
/// gpu-operator `assets/state-*`, Mellanox network-operator `manifests/state-*`).
pub(super) const OPERATOR_COMPONENTS: [(&str, &[&str], &str); 14] = [
    (
        "gpu-driver",
        &["nvidia-driver", "nvidia-gpu-driver"],
        "nvidia-(gpu-)?driver.*",
    ),
    (
        "container-toolkit",
        &["nvidia-container-toolkit"],
        "nvidia-container-toolkit.*",
    ),
    (
        "device-plugin",
        &["nvidia-device-plugin"],
        "nvidia-device-plugin.*",
    ),
    (
        "dcgm-exporter",
        &["nvidia-dcgm-exporter", "dcgm-exporter"],
        "(nvidia-)?dcgm-exporter.*",
    ),
    ("dcgm", &["nvidia-dcgm"], "nvidia-dcgm"),
    (
        "feature-discovery",
        &["gpu-feature-discovery"],
        "gpu-feature-discovery.*",
    ),
    (
        "validator",
        &["nvidia-operator-validator"],
        "nvidia-operator-validator.*",
    ),
    (
        "mig-manager",
        &["nvidia-mig-manager"],
        "nvidia-mig-manager.*",
    ),
    (
        "dra-driver",
        &["nvidia-dra-driver-gpu-kubelet-plugin", "nvidia-dra-driver"],
        "nvidia-dra-driver.*",
    ),
    (
        "ofed-driver",
        &["mofed", "doca-driver", "ofed-driver"],
        "(mofed|doca-driver|ofed-driver).*",
    ),
    (
        "rdma-device-plugin",
        &["rdma-shared-dp", "rdma-shared-device-plugin"],
        "rdma-shared-d.*",
    ),
    (
        "sriov-device-plugin",
        &["sriov-device-plugin", "sriov-network-device-plugin"],
        "sriov(-network)?-device-plugin.*",
    ),
    ("multus", &["multus"], ".*multus.*"),
    (
        "ipam",
        &["whereabouts", "nv-ipam"],
        "(whereabouts|nv-ipam).*",
    ),
];

/// The operator component a DaemonSet name is, by the names above (longest match first:
/// `nvidia-dcgm-exporter` before `nvidia-dcgm`).
pub(super) fn operator_component(name: &str) -> Option<&'static str> {
    OPERATOR_COMPONENTS
        .iter()
        .flat_map(|(c, names, _)| names.iter().map(move |n| (*c, *n)))
        .filter(|(_, n)| name.starts_with(n) || (n.len() > 5 && name.contains(n)))
        .max_by_key(|(_, n)| n.len())
        .map(|(c, _)| c)
}
