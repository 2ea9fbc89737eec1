//! Snapshots of a real cluster: the API server's Nodes and Pods, read as the API server
//! and the kubelet read them, with a parser of this crate's own.

use crate::quantity;
use crate::{Amount, GangView, GpuClaim, NodeView, PodView, ShareRequest, Snapshot, GPU};
use crate::{NodeTerm, Operator, PodTerm, Requirement, Selector, SpreadRule, TaintView};
use crate::{TolerationView, VolumeAffinity};
use k8s_openapi::api::core::v1::{
    Container, Namespace, Node, NodeSelectorRequirement, PersistentVolume, PersistentVolumeClaim,
    Pod,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::BTreeMap;
use std::fmt;

/// The annotation with the GPUs Kestrel chose: `"0,1,2,3"` for whole devices, `"2:500"`
/// for 500 thousandths of device 2.
pub const GPU_INDICES_ANNOTATION: &str = "kestrel.dev/gpu-indices";

/// Kestrel's share of one GPU in thousandths, KAI Scheduler's as a fraction and by device
/// memory (MiB), and the per-pod Topology Manager policy.
const GPU_MILLI_ANNOTATION: &str = "kestrel.dev/gpu-milli";
const GPU_FRACTION_ANNOTATION: &str = "gpu-fraction";
const GPU_MEMORY_ANNOTATION: &str = "gpu-memory";
const NUMA_POLICY_ANNOTATION: &str = "kestrel.dev/numa-policy";

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

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(|v| v.trim())
}

/// The share of one GPU a pod's annotations ask for (a malformed one: none).
fn gpu_share(pod: &Pod) -> Option<ShareRequest> {
    if let Some(mib) = annotation(pod, GPU_MEMORY_ANNOTATION) {
        return mib.parse().ok().map(ShareRequest::MemoryMib);
    }
    let milli = annotation(pod, GPU_MILLI_ANNOTATION)
        .and_then(|m| m.parse().ok())
        .or_else(|| {
            let f: f64 = annotation(pod, GPU_FRACTION_ANNOTATION)?.parse().ok()?;
            Some((f * 1000.0).round() as u32)
        })?;
    (milli > 0 && milli < 1000).then_some(ShareRequest::Milli(milli))
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

/// Objects beside Nodes and Pods that placement rules read: Namespaces (their labels, for
/// namespace selectors), PersistentVolumeClaims and PersistentVolumes (bound volumes'
/// node affinity, `ReadWriteOncePod` claims). Missing ones are taken as absent.
#[derive(Debug, Clone, Copy, Default)]
pub struct K8sExtras<'a> {
    pub namespaces: &'a [Namespace],
    pub claims: &'a [PersistentVolumeClaim],
    pub volumes: &'a [PersistentVolume],
}

fn operator(object: &str, field: &str, op: &str) -> Result<Operator, FromK8sError> {
    Ok(match op {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        "Gt" => Operator::Gt,
        "Lt" => Operator::Lt,
        _ => {
            return Err(FromK8sError {
                object: object.to_string(),
                field: field.to_string(),
                message: format!("unknown operator {op:?}"),
            })
        }
    })
}

/// A label selector; `None` stays `None` (no pod).
fn selector(
    object: &str,
    field: &str,
    s: Option<&LabelSelector>,
) -> Result<Option<Selector>, FromK8sError> {
    let Some(s) = s else { return Ok(None) };
    let mut out: Selector = s
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| Requirement {
            key: k.clone(),
            operator: Operator::In,
            values: vec![v.clone()],
        })
        .collect();
    for (i, e) in s.match_expressions.iter().flatten().enumerate() {
        out.push(Requirement {
            key: e.key.clone(),
            operator: operator(
                object,
                &format!("{field}.matchExpressions[{i}].operator"),
                &e.operator,
            )?,
            values: e.values.clone().unwrap_or_default(),
        });
    }
    Ok(Some(out))
}

/// `matchLabelKeys` (`In` the pod's value) and `mismatchLabelKeys` (`NotIn` it) merged into
/// a selector, as kube-scheduler does (the API server may have merged them already; twice
/// is the same). Keys the pod lacks are skipped; a `None` selector stays `None`.
fn merge_label_keys(
    selector: &mut Option<Selector>,
    labels: &crate::Labels,
    matching: Option<&Vec<String>>,
    mismatching: Option<&Vec<String>>,
) {
    let Some(selector) = selector else { return };
    for (keys, operator) in [(matching, Operator::In), (mismatching, Operator::NotIn)] {
        for k in keys.into_iter().flatten() {
            if let Some(v) = labels.get(k) {
                selector.push(Requirement {
                    key: k.clone(),
                    operator,
                    values: vec![v.clone()],
                });
            }
        }
    }
}

fn node_requirements(
    object: &str,
    field: &str,
    rs: Option<&Vec<NodeSelectorRequirement>>,
) -> Result<Vec<Requirement>, FromK8sError> {
    rs.into_iter()
        .flatten()
        .enumerate()
        .map(|(i, r)| {
            Ok(Requirement {
                key: r.key.clone(),
                operator: operator(object, &format!("{field}[{i}].operator"), &r.operator)?,
                values: r.values.clone().unwrap_or_default(),
            })
        })
        .collect()
}

fn node_terms(
    object: &str,
    field: &str,
    selector: &k8s_openapi::api::core::v1::NodeSelector,
) -> Result<Vec<NodeTerm>, FromK8sError> {
    selector
        .node_selector_terms
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let field = format!("{field}.nodeSelectorTerms[{i}]");
            Ok(NodeTerm {
                match_expressions: node_requirements(
                    object,
                    &format!("{field}.matchExpressions"),
                    t.match_expressions.as_ref(),
                )?,
                match_fields: node_requirements(
                    object,
                    &format!("{field}.matchFields"),
                    t.match_fields.as_ref(),
                )?,
            })
        })
        .collect()
}

fn pod_terms(
    object: &str,
    field: &str,
    labels: &crate::Labels,
    terms: Option<&Vec<k8s_openapi::api::core::v1::PodAffinityTerm>>,
) -> Result<Vec<PodTerm>, FromK8sError> {
    terms
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, t)| {
            let field = format!("{field}[{i}]");
            let mut sel = selector(
                object,
                &format!("{field}.labelSelector"),
                t.label_selector.as_ref(),
            )?;
            merge_label_keys(
                &mut sel,
                labels,
                t.match_label_keys.as_ref(),
                t.mismatch_label_keys.as_ref(),
            );
            Ok(PodTerm {
                selector: sel,
                namespaces: t.namespaces.clone().unwrap_or_default(),
                namespace_selector: selector(
                    object,
                    &format!("{field}.namespaceSelector"),
                    t.namespace_selector.as_ref(),
                )?,
                topology_key: t.topology_key.clone(),
            })
        })
        .collect()
}

/// A pod's labels, required pod (anti-)affinity, DoNotSchedule spread constraints, node
/// selector, required node affinity and tolerations.
fn placement(pod: &Pod, view: &mut PodView) -> Result<(), FromK8sError> {
    let object = object_name(pod);
    let object = object.as_str();
    view.labels = pod.metadata.labels.clone().unwrap_or_default();
    let Some(spec) = &pod.spec else { return Ok(()) };
    view.node_selector = spec.node_selector.clone().unwrap_or_default();
    let affinity = spec.affinity.as_ref();
    if let Some(required) = affinity
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    {
        view.node_affinity = Some(node_terms(
            object,
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
            required,
        )?);
    }
    view.affinity = pod_terms(
        object,
        "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        &view.labels,
        affinity
            .and_then(|a| a.pod_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
    )?;
    view.anti_affinity = pod_terms(
        object,
        "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        &view.labels,
        affinity
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
    )?;
    for (i, c) in spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
    {
        if c.when_unsatisfiable != "DoNotSchedule" {
            continue;
        }
        let field = format!("spec.topologySpreadConstraints[{i}]");
        let mut sel = selector(
            object,
            &format!("{field}.labelSelector"),
            c.label_selector.as_ref(),
        )?;
        merge_label_keys(&mut sel, &view.labels, c.match_label_keys.as_ref(), None);
        view.spread.push(SpreadRule {
            max_skew: c.max_skew.max(0) as u32,
            topology_key: c.topology_key.clone(),
            selector: sel,
            min_domains: c.min_domains.map(|m| m.max(0) as u32),
            honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
            honor_taints: c.node_taints_policy.as_deref() == Some("Honor"),
        });
    }
    view.tolerations = spec
        .tolerations
        .iter()
        .flatten()
        .map(|t| TolerationView {
            key: t.key.clone().unwrap_or_default(),
            exists: t.operator.as_deref() == Some("Exists"),
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.clone().filter(|e| !e.is_empty()),
        })
        .collect();
    Ok(())
}

/// A pod's PersistentVolumeClaims (`persistentVolumeClaim` volumes, and the claims of
/// generic ephemeral volumes, named `<pod>-<volume>`): the node affinity of those bound to
/// a PersistentVolume that has one, and those that are `ReadWriteOncePod`.
fn volumes(
    pod: &Pod,
    view: &mut PodView,
    claims: &BTreeMap<(&str, &str), &PersistentVolumeClaim>,
    pvs: &BTreeMap<&str, &PersistentVolume>,
) -> Result<(), FromK8sError> {
    let Some(spec) = &pod.spec else { return Ok(()) };
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let pod_name = pod.metadata.name.as_deref().unwrap_or("");
    for v in spec.volumes.iter().flatten() {
        let name = match (&v.persistent_volume_claim, &v.ephemeral) {
            (Some(c), _) => c.claim_name.clone(),
            (None, Some(_)) => format!("{pod_name}-{}", v.name),
            _ => continue,
        };
        let key = format!("{namespace}/{name}");
        let Some(claim) = claims.get(&(namespace, name.as_str())) else {
            view.claims_to_bind.push(key);
            continue;
        };
        let spec = claim.spec.as_ref();
        if spec
            .and_then(|s| s.volume_name.as_deref())
            .is_none_or(str::is_empty)
        {
            view.claims_to_bind.push(key.clone());
        }
        if spec
            .and_then(|s| s.access_modes.as_ref())
            .is_some_and(|m| m.iter().any(|m| m == "ReadWriteOncePod"))
            && !view.exclusive_claims.contains(&key)
        {
            view.exclusive_claims.push(key.clone());
        }
        let Some(pv) = spec
            .and_then(|s| s.volume_name.as_deref())
            .and_then(|n| pvs.get(n))
        else {
            continue;
        };
        if let Some(required) = pv
            .spec
            .as_ref()
            .and_then(|s| s.node_affinity.as_ref())
            .and_then(|a| a.required.as_ref())
        {
            let pv_name = pv.metadata.name.as_deref().unwrap_or("");
            view.volume_affinity.push(VolumeAffinity {
                claim: key,
                terms: node_terms(
                    &format!("PersistentVolume {pv_name}"),
                    "spec.nodeAffinity.required",
                    required,
                )?,
            });
        }
    }
    Ok(())
}

impl Snapshot {
    /// [`Snapshot::from_k8s`] with the objects of [`K8sExtras`] too: namespaces' labels,
    /// and per pod the node affinity of its bound PersistentVolumes and its
    /// `ReadWriteOncePod` claims.
    pub fn from_k8s_with(
        nodes: &[Node],
        pods: &[Pod],
        gang_min_members: &BTreeMap<String, u32>,
        extras: &K8sExtras,
    ) -> Result<Snapshot, FromK8sError> {
        let mut out = Snapshot::from_k8s(nodes, pods, gang_min_members)?;
        for ns in extras.namespaces {
            out.namespaces.insert(
                ns.metadata.name.clone().unwrap_or_default(),
                ns.metadata.labels.clone().unwrap_or_default(),
            );
        }
        let claims: BTreeMap<(&str, &str), &PersistentVolumeClaim> = extras
            .claims
            .iter()
            .map(|c| {
                (
                    (
                        c.metadata.namespace.as_deref().unwrap_or("default"),
                        c.metadata.name.as_deref().unwrap_or(""),
                    ),
                    c,
                )
            })
            .collect();
        let pvs: BTreeMap<&str, &PersistentVolume> = extras
            .volumes
            .iter()
            .map(|v| (v.metadata.name.as_deref().unwrap_or(""), v))
            .collect();
        let by_key: BTreeMap<String, &Pod> = pods.iter().map(|p| (pod_key(p), p)).collect();
        for view in &mut out.pods {
            if let Some(pod) = by_key.get(&view.key) {
                volumes(pod, view, &claims, &pvs)?;
            }
        }
        Ok(out)
    }

    /// A cluster as the API server has it. Nodes: `status.allocatable` (its
    /// `nvidia.com/gpu` is the device count). Pods: `spec.nodeName`, effective requests
    /// ([`pod_requests`]), GPUs from [`GPU_INDICES_ANNOTATION`], gang from Kestrel's,
    /// scheduler-plugins', Volcano's or Kueue's marker, priority from `spec.priority`.
    /// Pods that `Succeeded` or `Failed` are left out and count as their gang's
    /// `departed`. `gang_min_members` gives each gang's minMember by `namespace/name`
    /// (from its PodGroup); a Kueue plain-pod group not in it needs its pods' total count.
    /// ClusterQueues are not read: fill in `queues`, `cohorts` and pods' `queue` if needed.
    /// Nodes' labels and taints and pods' labels, required pod (anti-)affinity,
    /// DoNotSchedule spread constraints, node selectors and tolerations are read;
    /// namespaces and volumes only by [`Snapshot::from_k8s_with`]. For the stranded rule:
    /// cordons, pending pods' `nominatedNodeName`, scheduling gates, Kestrel's and KAI's
    /// GPU-share annotations and Kestrel's NUMA policy are read; gangs' required topology,
    /// roles and timeouts are not (PodGroups are not read).
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
                volume_limits: Default::default(),
                partitions: Default::default(),
                unschedulable: n
                    .spec
                    .as_ref()
                    .and_then(|s| s.unschedulable)
                    .unwrap_or(false),
                reserved: false,
                name,
                allocatable,
                gpu_devices,
                labels: n.metadata.labels.clone().unwrap_or_default(),
                taints: n
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .into_iter()
                    .flatten()
                    .map(|t| TaintView {
                        key: t.key.clone(),
                        value: t.value.clone().unwrap_or_default(),
                        effect: t.effect.clone(),
                    })
                    .collect(),
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
                    ..GangView::default()
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
            let mut view = PodView {
                key,
                // An annotation on a pod that is not bound yet claims nothing.
                gpu: if node.is_some() { gpu } else { GpuClaim::None },
                node,
                requests: pod_requests(pod)?,
                gang,
                queue: None,
                flavors: BTreeMap::new(),
                priority: pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0),
                scheduler: Some(
                    pod.spec
                        .as_ref()
                        .and_then(|s| s.scheduler_name.clone())
                        .unwrap_or_else(|| crate::KUBE_SCHEDULER.to_string()),
                ),
                resource_claims: pod_claims(pod),
                gpu_share: gpu_share(pod),
                gated: pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.scheduling_gates.as_ref())
                    .is_some_and(|g| !g.is_empty()),
                single_numa_node: annotation(pod, NUMA_POLICY_ANNOTATION)
                    == Some("single-numa-node"),
                ..PodView::default()
            };
            if view.node.is_some() && extended_claim(pod).is_some() {
                // Its nvidia.com/gpu comes from DRA devices through the claim its status
                // names ([`claims_from_k8s`] checks those), not from the node's allocatable.
                view.requests.remove(GPU);
                view.gpu = GpuClaim::None;
            }
            placement(pod, &mut view)?;
            out.pods.push(view);
        }
        // Nodes nominated for pending pods (room promised to a preemptor).
        for pod in pods.iter().filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_none_or(str::is_empty)
        }) {
            let nominated = pod
                .status
                .as_ref()
                .and_then(|s| s.nominated_node_name.as_deref());
            for n in out
                .nodes
                .iter_mut()
                .filter(|n| Some(n.name.as_str()) == nominated)
            {
                n.reserved = true;
            }
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

/// The claim made for a pod's extended resources backed by DRA, as its
/// `status.extendedResourceClaimStatus` names it.
fn extended_claim(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .extended_resource_claim_status
        .as_ref()
        .map(|s| s.resource_claim_name.clone())
        .filter(|n| !n.is_empty())
}

/// The ResourceClaims a pod uses (`namespace/name`): those its spec names, those made
/// from its templates as its status names them, and the claim of its extended resources.
fn pod_claims(pod: &Pod) -> Vec<String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref());
    pod.spec
        .iter()
        .flat_map(|s| s.resource_claims.iter().flatten())
        .filter_map(|c| {
            c.resource_claim_name.clone().or_else(|| {
                statuses?
                    .iter()
                    .find(|s| s.name == c.name)
                    .and_then(|s| s.resource_claim_name.clone())
            })
        })
        .chain(extended_claim(pod))
        .map(|n| format!("{namespace}/{n}"))
        .collect()
}

/// The API server's ResourceClaims, and the bound pods that use claims, for
/// [`crate::check_claims`]. A pod's claim from a template is the one its status names, as
/// is the claim of its extended resources backed by DRA.
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
            let claims = pod_claims(p);
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
