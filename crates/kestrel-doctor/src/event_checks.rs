//! The checks on what the cluster reports: Events and container states (image pulls,
//! crash loops, OOM kills, sandboxes, volume mounts, other schedulers, anything else of
//! type Warning), network attachments of RDMA/SR-IOV pods, and the GPU and Network
//! Operators' pods. Every finding carries its signature and, for events, its incidents.

use super::checks::{Finding, Incident, Subject};
use super::events::{EventLog, Occurrence, NONE};
use super::objects::PodView;
use super::signatures::{operator_component, pull_error_class, registry_of};
use super::{count, plural};
use k8s_openapi::api::core::v1::ContainerStatus;
use k8s_openapi::jiff::Timestamp;
use std::collections::{BTreeMap, BTreeSet};

/// Events of one signature further apart than this are two incidents.
pub const INCIDENT_GAP_SECONDS: i64 = 30 * 60;
/// Multus: the networks a pod asks for, and what it got.
const NETWORKS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks";
const NETWORK_STATUS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/network-status";

/// An occurrence with its names resolved (borrowed from the log or the pods).
#[derive(Clone, Copy)]
struct Seen<'a> {
    first: i64,
    last: i64,
    count: u32,
    node: &'a str,
    object: &'a str,
}

#[derive(Default)]
struct Group<'a> {
    example: String,
    seen: Vec<Seen<'a>>,
}

/// The findings from events and container states. `now`: the snapshot's time (events
/// without a time count as seen then); `since_ms`: only events last seen this recently.
pub(super) fn event_findings(
    log: &EventLog,
    pods: &[PodView],
    now: Option<Timestamp>,
    since_ms: Option<u64>,
) -> Vec<Finding> {
    let now_s = now.map_or(0, |t| t.as_second());
    let cutoff = since_ms.map(|ms| now_s - (ms / 1000) as i64);
    let keys: Vec<String> = pods.iter().map(PodView::key).collect();
    let by_key: BTreeMap<&str, &PodView> = keys.iter().map(String::as_str).zip(pods).collect();
    let gpu_pod = |object: &str| by_key.get(object).is_some_and(|p| p.uses_gpu());

    let mut groups: BTreeMap<(&'static str, String, String), Group> = BTreeMap::new();
    for ((check, signature, detail), g) in &log.groups {
        for o in &g.occurrences {
            let o: &Occurrence = o;
            if cutoff.is_some_and(|c| o.last != i64::MIN && o.last < c) {
                continue;
            }
            let object = log.name(o.object);
            let node = if o.node == NONE {
                by_key.get(object).and_then(|p| p.node).unwrap_or("")
            } else {
                log.name(o.node)
            };
            // Crash loops and OOM kills are split by whether the pod uses GPUs.
            let signature = if matches!(*check, "container-crashloop" | "container-oom-killed")
                && signature.ends_with("/pod")
                && gpu_pod(object)
            {
                signature.replace("/pod", "/gpu-pod")
            } else {
                signature.clone()
            };
            let group = groups
                .entry((check, signature, detail.clone()))
                .or_default();
            if group.example.is_empty() {
                group.example = g.example.clone();
            }
            group.seen.push(Seen {
                first: o.first,
                last: o.last,
                count: o.count,
                node,
                object,
            });
        }
    }
    add_container_states(&mut groups, pods, &keys);
    absorb_pull_back_offs(&mut groups);

    groups
        .into_iter()
        .filter(|(_, g)| !g.seen.is_empty())
        .map(|((check, signature, detail), g)| finding(check, &signature, &detail, &g, now_s))
        .collect()
}

/// Container states that say the same as the events: a pod whose events are gone (or
/// were never exported) is still found. A pod already seen through its events under the
/// same signature is not counted twice.
fn add_container_states<'a>(
    groups: &mut BTreeMap<(&'static str, String, String), Group<'a>>,
    pods: &'a [PodView],
    keys: &'a [String],
) {
    let seen_objects: BTreeSet<(&'static str, &str)> = groups
        .iter()
        .flat_map(|((check, _, _), g)| g.seen.iter().map(move |s| (*check, s.object)))
        .collect();
    for (p, key) in pods.iter().zip(keys) {
        let Some(status) = p.raw.status.as_ref() else {
            continue;
        };
        let node = p.node.unwrap_or("");
        let gpu = if p.uses_gpu() { "gpu-pod" } else { "pod" };
        let containers = status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten());
        for c in containers {
            let mut add = |check: &'static str,
                           signature: String,
                           detail: String,
                           example: String,
                           time: i64| {
                if seen_objects.contains(&(check, key.as_str())) {
                    return;
                }
                let group = groups.entry((check, signature, detail)).or_default();
                if group.example.is_empty() {
                    group.example = example;
                }
                group.seen.push(Seen {
                    first: time,
                    last: time,
                    count: 1,
                    node,
                    object: key,
                });
            };
            let waiting = c.state.as_ref().and_then(|s| s.waiting.as_ref());
            let reason = waiting.and_then(|w| w.reason.as_deref()).unwrap_or("");
            let message = waiting.and_then(|w| w.message.as_deref()).unwrap_or("");
            if matches!(reason, "ErrImagePull" | "ImagePullBackOff") {
                let class = pull_error_class(message);
                add(
                    "image-pull-failed",
                    format!("image-pull-failed/ErrImagePull/{class}"),
                    registry_of(&c.image),
                    format!(
                        "{reason}: {message} (container {}, image {})",
                        c.name, c.image
                    ),
                    i64::MIN,
                );
            }
            if reason == "CrashLoopBackOff" {
                add(
                    "container-crashloop",
                    format!("container-crashloop/CrashLoopBackOff/{gpu}"),
                    String::new(),
                    format!(
                        "container {} waiting in CrashLoopBackOff after {} restarts: {message}",
                        c.name, c.restart_count
                    ),
                    terminated_at(c).unwrap_or(i64::MIN),
                );
            }
            if let Some(at) = oom_killed(c) {
                add(
                    "container-oom-killed",
                    format!("container-oom-killed/OOMKilled/{gpu}"),
                    String::new(),
                    format!(
                        "container {} terminated with reason OOMKilled (exit code 137), {} restarts",
                        c.name, c.restart_count
                    ),
                    at,
                );
            }
        }
    }
}

/// When the container's last run ended.
fn terminated_at(c: &ContainerStatus) -> Option<i64> {
    let t = c.last_state.as_ref()?.terminated.as_ref()?;
    t.finished_at.as_ref().map(|t| t.0.as_second())
}

/// The time a container was OOM-killed (now or last run); `i64::MIN` when untimed.
fn oom_killed(c: &ContainerStatus) -> Option<i64> {
    [c.state.as_ref(), c.last_state.as_ref()]
        .into_iter()
        .flatten()
        .filter_map(|s| s.terminated.as_ref())
        .find(|t| t.reason.as_deref() == Some("OOMKilled"))
        .map(|t| t.finished_at.as_ref().map_or(i64::MIN, |f| f.0.as_second()))
}

/// kubelet's "Back-off pulling image" events repeat an earlier failure without its error:
/// for a pod whose failure is classified they are part of it, not a second finding.
fn absorb_pull_back_offs(groups: &mut BTreeMap<(&'static str, String, String), Group>) {
    let classified: BTreeSet<String> = groups
        .iter()
        .filter(|((check, sig, _), _)| *check == "image-pull-failed" && !sig.ends_with("/back-off"))
        .flat_map(|(_, g)| g.seen.iter().map(|s| s.object.to_string()))
        .collect();
    for ((check, sig, _), g) in groups.iter_mut() {
        if *check == "image-pull-failed" && sig.ends_with("/back-off") {
            g.seen.retain(|s| !classified.contains(s.object));
        }
    }
}

/// The incidents of a group: its events sorted by time, cut where they pause for more
/// than [`INCIDENT_GAP_SECONDS`]. Untimed ones (container states) count as seen `now`.
fn incidents(seen: &[Seen], now: i64) -> Vec<Incident> {
    let time = |t: i64| if t == i64::MIN { now } else { t };
    let mut sorted: Vec<&Seen> = seen.iter().collect();
    sorted.sort_by_key(|s| (time(s.first), time(s.last)));
    // (first, last, events, nodes, objects)
    type Run<'a> = (i64, i64, u64, BTreeSet<&'a str>, BTreeSet<&'a str>);
    let mut out: Vec<Run> = Vec::new();
    for s in sorted {
        let (first, last) = (time(s.first), time(s.last).max(time(s.first)));
        match out.last_mut() {
            Some(cur) if first <= cur.1 + INCIDENT_GAP_SECONDS => {
                cur.1 = cur.1.max(last);
                cur.2 += s.count as u64;
                if !s.node.is_empty() {
                    cur.3.insert(s.node);
                }
                cur.4.insert(s.object);
            }
            _ => out.push((
                first,
                last,
                s.count as u64,
                BTreeSet::from_iter((!s.node.is_empty()).then_some(s.node)),
                BTreeSet::from([s.object]),
            )),
        }
    }
    let stamp = |t: i64| Timestamp::from_second(t).map(|t| t.to_string()).ok();
    out.into_iter()
        .map(|(first, last, count, nodes, objects)| Incident {
            first_seen: stamp(first),
            last_seen: stamp(last),
            count,
            nodes: nodes.into_iter().map(str::to_string).collect(),
            pods: objects.into_iter().map(str::to_string).collect(),
        })
        .collect()
}

/// The pattern part of a signature.
fn pattern(signature: &str) -> &str {
    signature.rsplit('/').next().unwrap_or("")
}

fn finding(check: &'static str, signature: &str, detail: &str, g: &Group, now: i64) -> Finding {
    // Per object: events, node.
    let mut per: BTreeMap<&str, (u64, BTreeSet<&str>)> = BTreeMap::new();
    for s in &g.seen {
        let e = per.entry(s.object).or_default();
        e.0 += s.count as u64;
        if !s.node.is_empty() {
            e.1.insert(s.node);
        }
    }
    let mut rows: Vec<(&str, u64, String)> = per
        .iter()
        .map(|(object, (n, nodes))| {
            // A Node's own events need no "on".
            let on = if nodes.is_empty() || nodes.iter().all(|n| object == &format!("Node {n}")) {
                String::new()
            } else {
                format!(
                    " on {}",
                    nodes.iter().copied().collect::<Vec<_>>().join(", ")
                )
            };
            (*object, *n, on)
        })
        .collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let r#where: Vec<String> = rows
        .iter()
        .map(|(object, n, on)| {
            if *n > 1 {
                format!("{object}{on} (x{n})")
            } else {
                format!("{object}{on}")
            }
        })
        .collect();
    let pods = rows.iter().filter(|(o, _, _)| !o.contains(' ')).count();
    let objects = rows.len();
    let events: u64 = g.seen.iter().map(|s| s.count as u64).sum();
    let pat = pattern(signature);
    let example = g.example.trim();
    let (what, why) = match check {
        "image-pull-failed" => (
            format!(
                "{} cannot pull images from {detail}: {}",
                count(objects, "pod"),
                pull_class_words(pat)
            ),
            format!(
                "Their containers never start (ErrImagePull, then ImagePullBackOff) and keep \
                 their node's GPUs idle while they wait. The registry said: {example}"
            ),
        ),
        "container-crashloop" => (
            format!(
                "{} {} restart{} in a loop (CrashLoopBackOff)",
                count(objects, if pat == "gpu-pod" { "GPU pod" } else { "pod" }),
                if objects == 1 {
                    "has a container that"
                } else {
                    "have containers that"
                },
                if objects == 1 { "s" } else { "" },
            ),
            format!(
                "The container exits soon after it starts and kubelet waits longer before each \
                 restart (up to 5 minutes){}. Last: {example}",
                if pat == "gpu-pod" {
                    "; a GPU pod holds its GPUs all the while, doing no work"
                } else {
                    ""
                }
            ),
        ),
        "container-oom-killed" if pat == "node" => (
            format!(
                "the kernel's OOM killer ran on {} ({})",
                count(
                    g.seen.iter().map(|s| s.node).collect::<BTreeSet<_>>().len(),
                    "node"
                ),
                count(events as usize, "event")
            ),
            format!(
                "The node ran out of memory and the kernel killed a process, not necessarily \
                 the one that used the most; pods there fail or get evicted, which can look \
                 like a scheduling failure. Last: {example}"
            ),
        ),
        "container-oom-killed" => (
            format!(
                "{} had a container killed for using more memory than its limit (OOMKilled)",
                count(objects, if pat == "gpu-pod" { "GPU pod" } else { "pod" })
            ),
            if pat == "gpu-pod" {
                "The limit is host memory, not GPU memory: data-loader workers, pinned \
                 buffers, NCCL and checkpoint writes all count against it; the job restarts \
                 from its last checkpoint, or fails."
                    .to_string()
            } else {
                "The container was killed at its memory limit and restarted, losing its work."
                    .to_string()
            },
        ),
        "pod-sandbox-failed" => (
            format!(
                "{} cannot get a network from {detail}: {}",
                count(objects, "pod"),
                sandbox_words(pat)
            ),
            format!(
                "kubelet cannot create the pod sandbox, so no container starts; it retries \
                 and the pods stay in ContainerCreating. The CNI said: {example}"
            ),
        ),
        "volume-mount-failed" => {
            let data = is_data_volume(detail);
            (
                format!(
                    "{} cannot mount {}: {}",
                    count(objects, "pod"),
                    if detail.is_empty() {
                        "a volume".to_string()
                    } else {
                        format!("volume {detail}")
                    },
                    mount_words(pat)
                ),
                format!(
                    "kubelet does not start a container before all its volumes are mounted{}. \
                     Last: {example}",
                    if data {
                        "; this is a dataset or checkpoint volume, so the job can neither start \
                         nor resume from its checkpoint"
                    } else {
                        ""
                    }
                ),
            )
        }
        "gpu-unhealthy" => {
            let nodes = g.seen.iter().map(|s| s.node).collect::<BTreeSet<_>>().len();
            (
                match pat.strip_prefix("xid-") {
                    Some(xid) => format!(
                        "the node agent reported XID {xid} on {} ({})",
                        count(nodes, "node"),
                        count(events as usize, "event")
                    ),
                    None => format!(
                        "the node agent lost GPUs on {} ({})",
                        count(nodes, "node"),
                        count(events as usize, "event")
                    ),
                },
                format!(
                    "The agent marks the GPU unhealthy and the kubelet stops handing it out: \
                     whole-node jobs no longer fit, and a job on it may have crashed. Last: \
                     {example}"
                ),
            )
        }
        "pod-failed-scheduling" => (
            format!(
                "{detail} failed to schedule {} ({} events): {pat}",
                count(pods.max(1), "pod"),
                events
            ),
            format!(
                "The pods wait: {detail} finds no node for them{}. Last message: {example}",
                if detail.starts_with("kestrel") {
                    ""
                } else {
                    " (a scheduler other than Kestrel: its pods are not in Kestrel's queues)"
                }
            ),
        ),
        _ => {
            let reason = signature.split('/').nth(1).unwrap_or("");
            (
                format!(
                    "{events} Warning event{} {reason} from {} about {}",
                    plural(events as usize),
                    if detail.is_empty() {
                        "an unnamed component"
                    } else {
                        detail
                    },
                    count(objects, "object")
                ),
                format!(
                    "No check reads this reason, so it is grouped here rather than dropped. \
                     Last: {example}"
                ),
            )
        }
    };
    let subjects: BTreeSet<Subject> = g
        .seen
        .iter()
        .map(|s| Subject {
            node: s.node.to_string(),
            namespace: namespace_of(s.object).to_string(),
        })
        .collect();
    let mut f = Finding::new(check, what, r#where, &why, fix_for(signature));
    f.signature = Some(signature.to_string());
    f.incidents = incidents(&g.seen, now);
    f.subjects = subjects.into_iter().collect();
    f
}

/// The namespace of `ns/name` or `Kind ns/name` ("" when cluster-scoped).
fn namespace_of(object: &str) -> &str {
    let name = object.rsplit(' ').next().unwrap_or(object);
    name.split_once('/').map_or("", |(ns, _)| ns)
}

/// A volume whose name says it holds data or checkpoints.
fn is_data_volume(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    ["data", "checkpoint", "ckpt", "model", "weights", "dataset"]
        .iter()
        .any(|w| n.contains(w))
}

fn pull_class_words(p: &str) -> &'static str {
    match p {
        "auth" => "the registry refuses the credentials (authentication)",
        "not-found" => "the image or tag does not exist",
        "rate-limit" => "the registry's pull rate limit",
        "tls" => "the registry's TLS certificate is not trusted",
        "network" => "the registry cannot be reached",
        "back-off" => "pulls keep failing (back-off, the error itself not reported)",
        _ => "an error of another kind",
    }
}

fn sandbox_words(p: &str) -> &'static str {
    match p {
        "nad-missing" => "a NetworkAttachmentDefinition they name does not exist",
        "sriov-no-vf" => "the SR-IOV CNI got no VF (virtual function) for them",
        "ipam-exhausted" => "the network's IP address range is used up",
        "cni-not-ready" => "the node's CNI is not configured",
        "multus" => "Multus failed to attach a network",
        _ => "the CNI failed",
    }
}

fn mount_words(p: &str) -> &'static str {
    match p {
        "not-found" => "its source does not exist",
        "multi-attach" => "it is attached to another node (Multi-Attach)",
        "timeout" => "attach or mount timed out",
        "permission" => "permission denied",
        "mount-error" => "the mount command failed",
        _ => "mount failed",
    }
}

/// What to do about a signature: the finding's fix, and the alert's runbook.
pub fn fix_for(signature: &str) -> String {
    let mut parts = signature.splitn(3, '/');
    let (check, reason, pat) = (
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
    );
    let text = match (check, pat) {
        ("image-pull-failed", "auth") => "Check the pod's imagePullSecrets (kubectl get pod POD -o jsonpath='{.spec.imagePullSecrets}'): the secret must exist in the pod's namespace, hold credentials for this registry (kubectl get secret NAME -o jsonpath='{.data.\\.dockerconfigjson}' | base64 -d) and not be expired; for nvcr.io the user is $oauthtoken and the password an NGC API key.",
        ("image-pull-failed", "not-found") => "Check the image reference for typos and that the tag was pushed (crane ls REPO, skopeo list-tags docker://REPO); a private repository can also answer not found to an anonymous pull, so check the pull secret too.",
        ("image-pull-failed", "rate-limit") => "Authenticate pulls (a pull secret raises Docker Hub's limit), mirror the images into a registry of your own or a pull-through cache, and use imagePullPolicy: IfNotPresent with pinned tags so each node pulls once.",
        ("image-pull-failed", "tls") => "Make the nodes trust the registry's certificate: add its CA to the container runtime (containerd: /etc/containerd/certs.d/HOST/hosts.toml with ca = ...) or fix the registry's certificate chain and name.",
        ("image-pull-failed", "network") => "From the node, try crictl pull IMAGE: check DNS, the runtime's proxy settings (HTTPS_PROXY, NO_PROXY of containerd) and the firewall towards the registry.",
        ("image-pull-failed", _) => "kubectl describe pod POD shows the pull error in full; crictl pull IMAGE on the node reproduces it.",
        ("container-crashloop", "gpu-pod") => "kubectl logs POD -c CONTAINER --previous shows why the last run ended; for GPU pods look for CUDA errors (driver too old for the image's CUDA, no device visible: check NVIDIA_VISIBLE_DEVICES and nvidia-smi in the container) and NCCL errors; fix the cause, the back-off resets after 10 minutes of running.",
        ("container-crashloop", _) => "kubectl logs POD -c CONTAINER --previous shows why the last run ended, and kubectl describe pod the exit code (137: killed, often OOM; 1: the program's own error); fix the cause, the back-off resets after 10 minutes of running.",
        ("container-oom-killed", "node") => "Find what uses the memory (kubectl top pods on the node, pods without memory limits), give every pod a memory limit, and reserve memory for the system (kubelet --system-reserved, --eviction-hard) so the kubelet evicts before the kernel kills.",
        ("container-oom-killed", "gpu-pod") => "Raise the container's resources.limits.memory (GPU jobs need host memory for data-loader workers, pinned buffers and checkpoint writes: often 1.5-2x the model's size per process), or lower the data-loader workers per GPU; kubectl describe pod shows Last State: OOMKilled.",
        ("container-oom-killed", _) => "Raise the container's resources.limits.memory, or find the leak; kubectl describe pod shows Last State: OOMKilled and kubectl top pod the use before it.",
        ("pod-sandbox-failed", "nad-missing") => "Create the NetworkAttachmentDefinition that the pod's k8s.v1.cni.cncf.io/networks annotation names in the pod's namespace, or write NAMESPACE/NAME in the annotation (kubectl get network-attachment-definitions -A).",
        ("pod-sandbox-failed", "sriov-no-vf") => "The SR-IOV CNI got no VF from the device plugin: the pod must request the resource the NetworkAttachmentDefinition's k8s.v1.cni.cncf.io/resourceName annotation names; check that the node's SR-IOV policy created VFs (kubectl get sriovnetworknodestates -A) and that the device plugin advertises free ones (kubectl describe node).",
        ("pod-sandbox-failed", "ipam-exhausted") => "Widen the IPAM range in the NetworkAttachmentDefinition (or the node's pod CIDR), or free leaked addresses: host-local keeps them in /var/lib/cni/networks/NETWORK on the node, whereabouts in its IPPool objects.",
        ("pod-sandbox-failed", "cni-not-ready") => "Check the CNI's DaemonSet pods on the node and /etc/cni/net.d there: the network plugin has not written its configuration yet.",
        ("pod-sandbox-failed", "multus") => "Read the Multus pod's log on the node (kubectl logs -n kube-system -l app=multus --field-selector ...), then the delegate network's configuration in its NetworkAttachmentDefinition.",
        ("pod-sandbox-failed", _) => "kubectl describe pod shows the CNI's full error; check the CNI pods and their logs on the node.",
        ("volume-mount-failed", "not-found") => "Create what the volume names (ConfigMap, Secret, PersistentVolumeClaim, host path) in the pod's namespace, or fix the name in the pod spec.",
        ("volume-mount-failed", "multi-attach") => "A ReadWriteOnce volume is still attached to another node: wait for the old pod to be gone (or its VolumeAttachment), or use a ReadWriteMany volume (a shared filesystem) for data that many pods read.",
        ("volume-mount-failed", "timeout") => "Check the CSI driver's pods and logs on the node, the storage backend, and kubectl describe pvc; an attach that never finishes often needs the old VolumeAttachment removed.",
        ("volume-mount-failed", "permission") => "Check the storage's export or access rules, the CSI driver's credentials secret, and the pod's fsGroup and securityContext.",
        ("volume-mount-failed", "mount-error") => "The node's mount failed: its filesystem client (nfs-common, the Lustre or GPFS client, a FUSE driver) may be missing, or the server refused the export; the kubelet log has the full output.",
        ("volume-mount-failed", _) => "kubectl describe pod shows the full error; check the CSI driver and the kubelet log on the node.",
        ("gpu-unhealthy", "lost") | ("gpu-unhealthy", "xid-79") => "The GPU stopped answering (fallen off the bus): drain the node (kestrel drain NODE), power-cycle it, and check the PCIe slot, risers and power; nvidia-smi and the kernel log (dmesg | grep -i xid) on the node say more. Replace the GPU if it happens again.",
        ("gpu-unhealthy", _) => "Look the XID up in NVIDIA's XID catalog: 13, 31, 43 are usually the application's (a bad memory access: read the pod's log), 48, 63, 64, 94, 95 memory (ECC) errors (drain the node and reset the GPU with nvidia-smi -r; replace it if they repeat), 74 NVLink, 79 fallen off the bus. kubectl describe node shows the GPUUnhealthy condition; drain before a reset.",
        ("node-usage-high", "cpu") => "Find the pods that use more CPU than they request (kubectl top pods -A --sort-by=cpu on the node) and give them limits or higher requests, so the scheduler stops placing work on a node that is busy in fact; reserve CPU for the system (kubelet --system-reserved).",
        ("node-usage-high", _) => "Find the pods that use more memory than they request (kubectl top pods -A --sort-by=memory on the node), raise their requests to what they use or set limits, and reserve memory for the system (kubelet --system-reserved, --eviction-hard): requests below real use let the scheduler overfill the node, and the kernel or the kubelet then kills or evicts pods.",
        ("pod-failed-scheduling", _) => "kubectl describe pod shows the scheduler's reasons; for pods meant for Kestrel set spec.schedulerName: kestrel, and kestrel explain POD says what would let them start.",
        ("pod-network-attachment-failed", _) => "The pod runs without the RDMA/SR-IOV interface it asked for, so its collective traffic falls back to TCP or fails: compare the pod's k8s.v1.cni.cncf.io/networks and network-status annotations, read the Multus log on the node, and restart the pod once the network is fixed.",
        ("operator-pod-not-ready", _) if reason == "Missing" => "kubectl describe daemonset NAME -n NAMESPACE shows why pods are not created (its events); compare the nodes it should cover (its nodeSelector and tolerations against the nodes' labels and taints, e.g. nvidia.com/gpu.deploy.* labels the GPU Operator sets) with the nodes that run its pod.",
        ("operator-pod-not-ready", _) => "kubectl describe pod and kubectl logs for the component on that node (kubectl get pods -A -o wide --field-selector spec.nodeName=NODE); a driver pod that does not come up keeps every other GPU or RDMA component on the node waiting.",
        _ => {
            return format!(
                "kubectl get events -A --field-selector reason={reason} shows these events whole; \
                 if they matter, ask for a check of their own."
            )
        }
    };
    text.to_string()
}

/// RDMA/SR-IOV pods that run but lack a network they asked Multus for.
pub(super) fn pod_network_attachment_failed(pods: &[PodView]) -> Vec<Finding> {
    let mut groups: BTreeMap<&str, (Vec<String>, BTreeSet<Subject>)> = BTreeMap::new();
    for p in pods.iter().filter(|p| p.phase == "Running") {
        let wants_fabric = p
            .extended_requests()
            .iter()
            .any(|(r, _)| r.starts_with("rdma/") || r.to_ascii_lowercase().contains("sriov"));
        let annotations = p.raw.metadata.annotations.as_ref();
        let asked = annotations
            .and_then(|a| a.get(NETWORKS_ANNOTATION))
            .map(|v| requested_networks(v))
            .unwrap_or_default();
        if !wants_fabric || asked.is_empty() {
            continue;
        }
        let status = annotations.and_then(|a| a.get(NETWORK_STATUS_ANNOTATION));
        let attached: Vec<String> = status
            .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter(|n| n.get("default").and_then(|d| d.as_bool()) != Some(true))
            .filter_map(|n| n.get("name").and_then(|n| n.as_str()).map(str::to_string))
            .collect();
        let missing: Vec<&String> = asked
            .iter()
            .filter(|a| {
                !attached
                    .iter()
                    .any(|n| n == *a || n.ends_with(&format!("/{a}")))
            })
            .collect();
        if missing.is_empty() {
            continue;
        }
        let pattern = if status.is_none() {
            "missing"
        } else {
            "partial"
        };
        let node = p.node.unwrap_or("");
        let entry = groups.entry(pattern).or_default();
        entry.0.push(format!(
            "{} on {node}: asked {}, attached {}",
            p.key(),
            asked.join(", "),
            if attached.is_empty() {
                "none".to_string()
            } else {
                attached.join(", ")
            }
        ));
        entry.1.insert(Subject {
            node: node.to_string(),
            namespace: p.spec.namespace.clone(),
        });
    }
    groups
        .into_iter()
        .map(|(pattern, (rows, subjects))| {
            let signature = format!("pod-network-attachment-failed/NetworkStatus/{pattern}");
            let mut f =
                Finding::new(
                    "pod-network-attachment-failed",
                    format!(
                    "{} asking for RDMA or SR-IOV devices run{} without {} network attachment{}",
                    count(rows.len(), "pod"),
                    if rows.len() == 1 { "s" } else { "" },
                    if pattern == "missing" { "any" } else { "every" },
                    if pattern == "missing" { " (no network-status)" } else { "" },
                ),
                    rows,
                    "The pods started, but Multus did not attach the secondary networks their \
                 k8s.v1.cni.cncf.io/networks annotation asks for: the RDMA or SR-IOV device \
                 is allocated yet unused, and NCCL falls back to TCP (slow) or fails.",
                    fix_for(&signature),
                );
            f.signature = Some(signature);
            f.subjects = subjects.into_iter().collect();
            f
        })
        .collect()
}

/// The networks of a `k8s.v1.cni.cncf.io/networks` annotation: `a, ns/b@if1` or JSON.
fn requested_networks(value: &str) -> Vec<String> {
    let v = value.trim();
    if v.starts_with('[') {
        return serde_json::from_str::<serde_json::Value>(v)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|n| {
                let name = n.get("name")?.as_str()?;
                Some(match n.get("namespace").and_then(|s| s.as_str()) {
                    Some(ns) => format!("{ns}/{name}"),
                    None => name.to_string(),
                })
            })
            .collect();
    }
    v.split(',')
        .map(|n| n.trim().split('@').next().unwrap_or("").to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

/// GPU and Network Operator pods that are not ready, per node and component.
pub(super) fn operator_pod_not_ready(pods: &[PodView]) -> Vec<Finding> {
    // component -> rows, subjects
    let mut groups: BTreeMap<&str, (Vec<String>, BTreeSet<Subject>)> = BTreeMap::new();
    for p in pods {
        let Some(node) = p.node else { continue };
        if !matches!(p.phase, "Running" | "Pending" | "Unknown" | "") {
            continue;
        }
        let owner = p.owner_name().unwrap_or(&p.spec.name);
        let in_operator_ns = p.spec.namespace.contains("gpu-operator")
            || p.spec.namespace.contains("network-operator");
        let component = match operator_component(owner) {
            Some(c) => c,
            None if in_operator_ns && p.is_node_agent() => "other",
            None => continue,
        };
        let status = p.raw.status.as_ref();
        // Not ready: not running, Ready=False, or a container not ready. A running pod
        // that reports neither (a hand-written snapshot) counts as ready.
        let ready_false = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status != "True");
        let container_down = status
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| !c.ready));
        if p.phase == "Running" && !ready_false && !container_down {
            continue;
        }
        let why = status
            .into_iter()
            .flat_map(|s| {
                s.init_container_statuses
                    .iter()
                    .flatten()
                    .chain(s.container_statuses.iter().flatten())
            })
            .find_map(|c| {
                let w = c.state.as_ref()?.waiting.as_ref()?;
                Some(format!(
                    "{} {}, {} restarts",
                    c.name,
                    w.reason.as_deref().unwrap_or("waiting"),
                    c.restart_count
                ))
            })
            .unwrap_or_else(|| {
                format!(
                    "phase {}",
                    if p.phase.is_empty() {
                        "unknown"
                    } else {
                        p.phase
                    }
                )
            });
        let entry = groups.entry(component).or_default();
        entry.0.push(format!("{node}: {} ({why})", p.key()));
        entry.1.insert(Subject {
            node: node.to_string(),
            namespace: p.spec.namespace.clone(),
        });
    }
    groups
        .into_iter()
        .map(|(component, (mut rows, subjects))| {
            rows.sort();
            let nodes = subjects
                .iter()
                .map(|s| s.node.as_str())
                .collect::<BTreeSet<_>>()
                .len();
            let signature = format!("operator-pod-not-ready/NotReady/{component}");
            let mut f = Finding::new(
                "operator-pod-not-ready",
                format!(
                    "the {} pod is not ready on {}",
                    component_words(component),
                    count(nodes, "node")
                ),
                rows,
                "The GPU and Network Operators bring a node's GPUs and RDMA NICs up in order \
                 (driver, toolkit, device plugin; OFED driver, RDMA/SR-IOV device plugin): \
                 while one is not ready, the node's GPUs or RDMA devices are missing or \
                 unhealthy and pods that need them cannot start there.",
                fix_for(&signature),
            );
            f.signature = Some(signature);
            f.subjects = subjects.into_iter().collect();
            f
        })
        .collect()
}

fn component_words(c: &str) -> &'static str {
    match c {
        "gpu-driver" => "NVIDIA driver",
        "container-toolkit" => "NVIDIA container toolkit",
        "device-plugin" => "NVIDIA device plugin",
        "dcgm-exporter" => "DCGM exporter",
        "dcgm" => "DCGM",
        "feature-discovery" => "GPU feature discovery",
        "validator" => "GPU operator validator",
        "mig-manager" => "MIG manager",
        "dra-driver" => "NVIDIA DRA driver (kubelet plugin)",
        "ofed-driver" => "OFED (MOFED/DOCA) driver",
        "rdma-device-plugin" => "RDMA shared device plugin",
        "sriov-device-plugin" => "SR-IOV device plugin",
        "multus" => "Multus",
        "ipam" => "IPAM (whereabouts, nv-ipam)",
        _ => "operator's",
    }
}

/// Memory or CPU in real use at or above this share of allocatable is near full.
const NEAR_FULL_PERCENT: i64 = 90;

/// Nodes near full in real use (the metrics API) while pods there fail or are evicted:
/// memory pressure masquerading as a scheduling or application failure.
pub(super) fn node_usage_high(
    nodes: &[super::objects::NodeView],
    usage: &BTreeMap<String, super::snapshot::NodeUsage>,
    findings: &[Finding],
) -> Vec<Finding> {
    // node -> the signatures of failures there
    let mut failing: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for f in findings {
        let failure = matches!(
            f.id.as_str(),
            "container-oom-killed" | "container-crashloop"
        ) || f
            .signature
            .as_deref()
            .is_some_and(|s| s.starts_with("event-other/Evicted/"));
        if !failure {
            continue;
        }
        for s in &f.subjects {
            failing
                .entry(s.node.as_str())
                .or_default()
                .insert(f.signature.clone().unwrap_or_else(|| f.id.clone()));
        }
    }
    let mut groups: BTreeMap<&str, (Vec<String>, BTreeSet<Subject>)> = BTreeMap::new();
    for n in nodes {
        let (Some(u), Some(failures)) = (usage.get(n.name()), failing.get(n.name())) else {
            continue;
        };
        let a = &n.spec.allocatable;
        let percent = |used: i64, of: i64| if of > 0 { used * 100 / of } else { 0 };
        let gib = |b: i64| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64);
        let mem = percent(u.memory_bytes, a.memory_bytes);
        let cpu = percent(u.cpu_milli, a.cpu_milli);
        let there = failures.iter().cloned().collect::<Vec<_>>().join(", ");
        if mem >= NEAR_FULL_PERCENT {
            let e = groups.entry("memory").or_default();
            e.0.push(format!(
                "{}: memory {} of {} allocatable in use ({mem}%); failing there: {there}",
                n.name(),
                gib(u.memory_bytes),
                gib(a.memory_bytes)
            ));
            e.1.insert(Subject {
                node: n.name().to_string(),
                namespace: String::new(),
            });
        }
        if cpu >= NEAR_FULL_PERCENT {
            let e = groups.entry("cpu").or_default();
            e.0.push(format!(
                "{}: CPU {}m of {}m allocatable in use ({cpu}%); failing there: {there}",
                n.name(),
                u.cpu_milli,
                a.cpu_milli
            ));
            e.1.insert(Subject {
                node: n.name().to_string(),
                namespace: String::new(),
            });
        }
    }
    groups
        .into_iter()
        .map(|(what, (rows, subjects))| {
            let signature = format!("node-usage-high/NodeMetrics/{what}");
            let mut f = Finding::new(
                "node-usage-high",
                format!(
                    "{} near full in real {} use (metrics API) while pods there fail",
                    count(rows.len(), "node"),
                    if what == "cpu" { "CPU" } else { "memory" }
                ),
                rows,
                "The scheduler places pods by their requests, not by what they use: a node \
                 whose pods use more than they request fills up in fact, and its pods are \
                 OOM-killed, crash or are evicted. It looks like an application or a \
                 scheduling failure; it is memory (or CPU) pressure.",
                fix_for(&signature),
            );
            f.signature = Some(signature);
            f.subjects = subjects.into_iter().collect();
            f
        })
        .collect()
}

/// GPU and Network Operator DaemonSets whose pod is missing on some of the nodes they
/// should run on (not created, or not scheduled): no pod to be not ready, so the pod
/// check cannot see it.
pub(super) fn operator_pods_missing(
    daemonsets: &[super::snapshot::DaemonSetCounts],
) -> Vec<Finding> {
    let mut groups: BTreeMap<&str, (Vec<String>, BTreeSet<Subject>)> = BTreeMap::new();
    for ds in daemonsets {
        let Some(component) = operator_component(&ds.name) else {
            continue;
        };
        if ds.scheduled >= ds.desired {
            continue;
        }
        let e = groups.entry(component).or_default();
        e.0.push(format!(
            "DaemonSet {}/{}: its pod runs on {} of the {} nodes it should ({} ready)",
            ds.namespace, ds.name, ds.scheduled, ds.desired, ds.ready
        ));
        e.1.insert(Subject {
            node: String::new(),
            namespace: ds.namespace.clone(),
        });
    }
    groups
        .into_iter()
        .map(|(component, (rows, subjects))| {
            let signature = format!("operator-pod-not-ready/Missing/{component}");
            let mut f = Finding::new(
                "operator-pod-not-ready",
                format!(
                    "the {} pod is missing on some nodes",
                    component_words(component)
                ),
                rows,
                "The DaemonSet should run its pod on more nodes than it does: on the others the \
                 pod was never created or never scheduled (a taint it does not tolerate, a \
                 node selector, no room), so their GPUs or RDMA devices never come up.",
                fix_for(&signature),
            );
            f.signature = Some(signature);
            f.subjects = subjects.into_iter().collect();
            f
        })
        .collect()
}
