//! Snapshots of a real cluster: the API server's Nodes and Pods, read as the API server
//! and the kubelet read them, with a parser of this crate's own.

use crate::quantity;
use crate::{Amount, GangView, GpuClaim, NodeView, PodView, Snapshot, GPU};
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;
use std::fmt;

/// The annotation with the GPUs Kestrel chose: `"0,1,2,3"` for whole devices, `"2:500"`
/// for 500 thousandths of device 2.
pub const GPU_INDICES_ANNOTATION: &str = "kestrel.dev/gpu-indices";

/// Pod labels and annotations that name a pod's gang, in the order Kestrel reads them:
/// (is a label, key).
const GANG_MARKERS: [(bool, &str); 4] = [
    (true, "scheduling.kestrel.dev/pod-group"),
    (true, "scheduling.x-k8s.io/pod-group"),
    (false, "scheduling.k8s.io/group-name"),
    (true, "kueue.x-k8s.io/pod-group-name"),
];
/// Kueue plain-pod groups have no PodGroup: the group's size is its minimum.
const KUEUE_GROUP_LABEL: &str = "kueue.x-k8s.io/pod-group-name";
const KUEUE_TOTAL_ANNOTATION: &str = "kueue.x-k8s.io/pod-group-total-count";

/// An object the adapter could not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FromK8sError {
    /// `Pod ns/name`, `Node n1`.
    pub object: String,
    pub field: String,
    pub message: String,
}

impl fmt::Display for FromK8sError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: field {}: {}", self.object, self.field, self.message)
    }
}

impl std::error::Error for FromK8sError {}

fn amounts(
    object: &str,
    field: &str,
    list: Option<&BTreeMap<String, Quantity>>,
) -> Result<BTreeMap<String, Amount>, FromK8sError> {
    let mut out = BTreeMap::new();
    for (name, q) in list.into_iter().flatten() {
        let v = quantity::milli(&q.0).map_err(|e| FromK8sError {
            object: object.to_string(),
            field: format!("{field}[{name:?}]"),
            message: e.to_string(),
        })?;
        out.insert(name.clone(), v);
    }
    Ok(out)
}

fn add(into: &mut BTreeMap<String, Amount>, from: &BTreeMap<String, Amount>) {
    for (r, a) in from {
        *into.entry(r.clone()).or_default() += a;
    }
}

fn max(into: &mut BTreeMap<String, Amount>, from: &BTreeMap<String, Amount>) {
    for (r, a) in from {
        let e = into.entry(r.clone()).or_default();
        *e = (*e).max(*a);
    }
}

/// A container's requests, with a limit standing in for a missing request (as the API
/// server defaults them).
fn container_requests(
    object: &str,
    field: &str,
    c: &Container,
) -> Result<BTreeMap<String, Amount>, FromK8sError> {
    let r = c.resources.as_ref();
    let mut out = amounts(
        object,
        &format!("{field}.resources.limits"),
        r.and_then(|r| r.limits.as_ref()),
    )?;
    out.extend(amounts(
        object,
        &format!("{field}.resources.requests"),
        r.and_then(|r| r.requests.as_ref()),
    )?);
    Ok(out)
}

/// A pod's effective requests, as the scheduler and the kubelet compute them
/// (`k8s.io/component-helpers/resource.PodRequests`): the sum of its containers; each init
/// container's requests (plus the sidecars started before it) raise that to their max;
/// sidecars (init containers with `restartPolicy: Always`) add to it; pod-level
/// `spec.resources.requests` replace what they name; `spec.overhead` is added.
pub fn pod_requests(pod: &Pod) -> Result<BTreeMap<String, Amount>, FromK8sError> {
    let object = object_name(pod);
    let Some(spec) = &pod.spec else {
        return Ok(BTreeMap::new());
    };
    let mut reqs = BTreeMap::new();
    for (i, c) in spec.containers.iter().enumerate() {
        add(
            &mut reqs,
            &container_requests(&object, &format!("spec.containers[{i}]"), c)?,
        );
    }
    let mut sidecars = BTreeMap::new();
    let mut init = BTreeMap::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let own = container_requests(&object, &format!("spec.initContainers[{i}]"), c)?;
        let at_start = if c.restart_policy.as_deref() == Some("Always") {
            add(&mut reqs, &own);
            add(&mut sidecars, &own);
            sidecars.clone()
        } else {
            let mut t = own;
            add(&mut t, &sidecars);
            t
        };
        max(&mut init, &at_start);
    }
    max(&mut reqs, &init);
    if let Some(pod_level) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        reqs.extend(amounts(
            &object,
            "spec.resources.requests",
            Some(pod_level),
        )?);
    }
    add(
        &mut reqs,
        &amounts(&object, "spec.overhead", spec.overhead.as_ref())?,
    );
    reqs.retain(|_, a| *a != 0);
    Ok(reqs)
}

fn object_name(pod: &Pod) -> String {
    format!("Pod {}", pod_key(pod))
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// The annotation's value as a claim.
pub fn parse_gpu_indices(value: &str) -> Option<GpuClaim> {
    let value = value.trim();
    if value.is_empty() {
        return Some(GpuClaim::None);
    }
    if let Some((index, milli)) = value.split_once(':') {
        return Some(GpuClaim::Share {
            index: index.trim().parse().ok()?,
            milli: milli.trim().parse().ok()?,
        });
    }
    value
        .split(',')
        .map(|s| s.trim().parse().ok())
        .collect::<Option<Vec<u32>>>()
        .map(GpuClaim::Whole)
}

fn gang_of(pod: &Pod) -> Option<String> {
    let meta = &pod.metadata;
    GANG_MARKERS.iter().find_map(|(label, key)| {
        let map = if *label {
            &meta.labels
        } else {
            &meta.annotations
        };
        let name = map.as_ref()?.get(*key)?;
        Some(format!(
            "{}/{name}",
            meta.namespace.as_deref().unwrap_or("default")
        ))
    })
}

impl Snapshot {
    /// A cluster as the API server has it. Nodes: `status.allocatable` (its
    /// `nvidia.com/gpu` is the device count). Pods: `spec.nodeName`, effective requests
    /// ([`pod_requests`]), GPUs from [`GPU_INDICES_ANNOTATION`], gang from Kestrel's,
    /// scheduler-plugins', Volcano's or Kueue's marker, priority from `spec.priority`.
    /// Pods that `Succeeded` or `Failed` are left out and count as their gang's
    /// `departed`. `gang_min_members` gives each gang's minMember by `namespace/name`
    /// (from its PodGroup); a Kueue plain-pod group not in it needs its pods' total count.
    /// ClusterQueues are not read: fill in `queues`, `cohorts` and pods' `queue` if needed.
    pub fn from_k8s(
        nodes: &[Node],
        pods: &[Pod],
        gang_min_members: &BTreeMap<String, u32>,
    ) -> Result<Snapshot, FromK8sError> {
        let mut out = Snapshot::default();
        for n in nodes {
            let name = n.metadata.name.clone().unwrap_or_default();
            let allocatable = amounts(
                &format!("Node {name}"),
                "status.allocatable",
                n.status.as_ref().and_then(|s| s.allocatable.as_ref()),
            )?;
            let gpu_devices = allocatable.get(GPU).map_or(0, |g| (g / 1000).max(0) as u32);
            out.nodes.push(NodeView {
                name,
                allocatable,
                gpu_devices,
            });
        }
        let mut gangs: BTreeMap<String, GangView> = BTreeMap::new();
        for pod in pods {
            let gang = gang_of(pod);
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            let ended = matches!(phase, Some("Succeeded" | "Failed"));
            if let Some(gang) = &gang {
                let g = gangs.entry(gang.clone()).or_insert_with(|| GangView {
                    key: gang.clone(),
                    min_member: 0,
                    total: Some(0),
                    departed: 0,
                });
                g.total = g.total.map(|t| t + 1);
                g.departed += u32::from(ended);
                let annotations = pod.metadata.annotations.as_ref();
                let kueue = pod
                    .metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key(KUEUE_GROUP_LABEL));
                if let Some(count) = annotations
                    .and_then(|a| a.get(KUEUE_TOTAL_ANNOTATION))
                    .filter(|_| kueue)
                {
                    g.min_member = count.trim().parse().map_err(|_| FromK8sError {
                        object: object_name(pod),
                        field: format!("metadata.annotations[{KUEUE_TOTAL_ANNOTATION:?}]"),
                        message: format!("{count:?} is not a whole number"),
                    })?;
                }
            }
            if ended {
                continue;
            }
            let key = pod_key(pod);
            let node = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty());
            let gpu = match pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(GPU_INDICES_ANNOTATION))
            {
                Some(v) => parse_gpu_indices(v).ok_or_else(|| FromK8sError {
                    object: object_name(pod),
                    field: format!("metadata.annotations[{GPU_INDICES_ANNOTATION:?}]"),
                    message: format!("{v:?} is neither \"0,1\" nor \"2:500\""),
                })?,
                None => GpuClaim::None,
            };
            out.pods.push(PodView {
                key,
                // An annotation on a pod that is not bound yet claims nothing.
                gpu: if node.is_some() { gpu } else { GpuClaim::None },
                node,
                requests: pod_requests(pod)?,
                gang,
                queue: None,
                flavors: BTreeMap::new(),
                priority: pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0),
            });
        }
        for (key, mut g) in gangs {
            if let Some(&min) = gang_min_members.get(&key) {
                g.min_member = min;
            }
            // A gang with no known minimum is left out: its bound pods are reported.
            if g.min_member > 0 {
                out.gangs.push(g);
            }
        }
        Ok(out)
    }
}

/// The API server's ResourceClaims, and the bound pods that use claims, for
/// [`crate::check_claims`]. A pod's claim from a template is the one its status names.
pub fn claims_from_k8s(
    claims: &[k8s_openapi::api::resource::v1::ResourceClaim],
    pods: &[Pod],
) -> (Vec<crate::ClaimView>, Vec<crate::ClaimUser>) {
    let views = claims
        .iter()
        .map(|c| {
            let namespace = c.metadata.namespace.clone().unwrap_or_default();
            let name = c.metadata.name.clone().unwrap_or_default();
            let status = c.status.as_ref();
            let allocation = status.and_then(|s| s.allocation.as_ref());
            let node = allocation
                .and_then(|a| a.node_selector.as_ref())
                .and_then(|s| s.node_selector_terms.first())
                .and_then(|t| t.match_fields.as_ref())
                .and_then(|f| f.iter().find(|r| r.key == "metadata.name"))
                .and_then(|r| r.values.as_ref()?.first().cloned());
            let devices = allocation
                .and_then(|a| a.devices.as_ref())
                .and_then(|d| d.results.as_ref())
                .into_iter()
                .flatten()
                .map(|r| format!("{}/{}", r.pool, r.device))
                .collect();
            let reserved_for = status
                .and_then(|s| s.reserved_for.as_ref())
                .into_iter()
                .flatten()
                .map(|r| r.name.clone())
                .collect();
            crate::ClaimView {
                key: format!("{namespace}/{name}"),
                node,
                devices,
                reserved_for,
            }
        })
        .collect();
    let users = pods
        .iter()
        .filter_map(|p| {
            let spec = p.spec.as_ref()?;
            let node = spec.node_name.clone()?;
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            if matches!(phase, Some("Succeeded" | "Failed")) {
                return None;
            }
            let namespace = p.metadata.namespace.clone().unwrap_or_default();
            let statuses = p
                .status
                .as_ref()
                .and_then(|s| s.resource_claim_statuses.clone())
                .unwrap_or_default();
            let claims: Vec<String> = spec
                .resource_claims
                .iter()
                .flatten()
                .filter_map(|c| {
                    c.resource_claim_name
                        .clone()
                        .or_else(|| {
                            statuses
                                .iter()
                                .find(|s| s.name == c.name)
                                .and_then(|s| s.resource_claim_name.clone())
                        })
                        .map(|n| format!("{namespace}/{n}"))
                })
                .collect();
            (!claims.is_empty()).then(|| crate::ClaimUser {
                pod: format!(
                    "{namespace}/{}",
                    p.metadata.name.clone().unwrap_or_default()
                ),
                node,
                claims,
            })
        })
        .collect();
    (views, users)
}
