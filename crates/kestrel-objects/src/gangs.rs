//! Gangs and topology from what users already write, mapped into one gang model:
//!
//! | source | gang object | pod marker |
//! |---|---|---|
//! | Kestrel | `scheduling.kestrel.dev/v1alpha1` `PodGroup` | label `scheduling.kestrel.dev/pod-group` |
//! | scheduler-plugins | `scheduling.x-k8s.io/v1alpha1` `PodGroup` | label `scheduling.x-k8s.io/pod-group` |
//! | Volcano | `scheduling.volcano.sh/v1beta1` `PodGroup` | annotation `scheduling.k8s.io/group-name` |
//! | Kubernetes (Workload API) | `scheduling.k8s.io/v1beta1` (or `v1alpha3`) `PodGroup` | `spec.schedulingGroup.podGroupName` |
//! | Kueue plain pods | none | label `kueue.x-k8s.io/pod-group-name` + annotation `kueue.x-k8s.io/pod-group-total-count` |
//!
//! Topology levels come from a `Topology` object (`spec.levels[].nodeLabel`, Kestrel's or
//! Kueue's); a gang's topology request from its Kestrel PodGroup or from its pods'
//! annotations (Kueue's `kueue.x-k8s.io/podset-*` or Kestrel's `kestrel.dev/topology-*`).

use crate::crds::{PodGroupSpec, TopologyLevel};
use crate::error::LoadError;
use crate::fields::Ctx;
use kestrel_core::{GangMembership, GangSpec, GangTopology};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

pub const KESTREL_GROUP: &str = "scheduling.kestrel.dev";
/// Kubernetes' own scheduling group: the Workload API's PodGroup (behind the
/// `GenericWorkload` feature gate), which pods name in `spec.schedulingGroup`.
pub const KUBE_SCHEDULING_GROUP: &str = "scheduling.k8s.io";
/// The version of it the live scheduler watches (beta from Kubernetes 1.37; files may
/// also hold 1.35's and 1.36's `v1alpha3`, whose PodGroup has the same fields).
pub const KUBE_POD_GROUP_VERSION: &str = "v1beta1";
pub const KESTREL_POD_GROUP_LABEL: &str = "scheduling.kestrel.dev/pod-group";
pub const KESTREL_ROLE_LABEL: &str = "scheduling.kestrel.dev/role";
pub const PLUGINS_POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";
pub const VOLCANO_GROUP_ANNOTATION: &str = "scheduling.k8s.io/group-name";
pub const VOLCANO_TASK_ANNOTATION: &str = "volcano.sh/task-spec";
pub const KUEUE_GROUP_LABEL: &str = "kueue.x-k8s.io/pod-group-name";
/// The label LeaderWorkerSet's controller puts on its pods: the LeaderWorkerSet's name.
pub const LWS_NAME_LABEL: &str = "leaderworkerset.sigs.k8s.io/name";
/// Its label with the pod's group (a leader and its workers).
pub const LWS_GROUP_INDEX_LABEL: &str = "leaderworkerset.sigs.k8s.io/group-index";
/// Its label with the pod's place in its group (0: the leader).
pub const LWS_WORKER_INDEX_LABEL: &str = "leaderworkerset.sigs.k8s.io/worker-index";
/// Its annotation with the pods in a group, the leader included.
pub const LWS_SIZE_ANNOTATION: &str = "leaderworkerset.sigs.k8s.io/size";
/// Its label unique to a group.
pub const LWS_GROUP_KEY_LABEL: &str = "leaderworkerset.sigs.k8s.io/group-key";
/// The LeaderWorkerSet annotation that gives each group a topology domain of its own.
pub const LWS_EXCLUSIVE_ANNOTATION: &str = "leaderworkerset.sigs.k8s.io/exclusive-topology";
pub const KUEUE_TOTAL_ANNOTATION: &str = "kueue.x-k8s.io/pod-group-total-count";
/// A pod's rank; Indexed Jobs' pods carry their completion index in the label below.
pub const RANK_ANNOTATION: &str = "kestrel.dev/rank";
pub const JOB_INDEX_LABEL: &str = "batch.kubernetes.io/job-completion-index";

/// (kind of request, Kestrel annotation, Kueue annotation)
const TOPOLOGY_ANNOTATIONS: [(&str, &str, &str); 4] = [
    (
        "required",
        "kestrel.dev/topology-required",
        "kueue.x-k8s.io/podset-required-topology",
    ),
    (
        "preferred",
        "kestrel.dev/topology-preferred",
        "kueue.x-k8s.io/podset-preferred-topology",
    ),
    (
        "slice",
        "kestrel.dev/topology-slice",
        "kueue.x-k8s.io/podset-slice-required-topology",
    ),
    (
        "slice-size",
        "kestrel.dev/topology-slice-size",
        "kueue.x-k8s.io/podset-slice-size",
    ),
];

/// A gang-related document.
#[derive(Debug, Clone, PartialEq)]
pub enum GangDocument {
    PodGroup(GangSpec),
    /// Topology levels, widest first.
    Topology(Vec<String>),
}

fn group_of(api_version: &str) -> &str {
    api_version.split('/').next().unwrap_or("")
}

/// Whether a document of this kind and apiVersion is a gang or topology object.
pub fn is_gang_document(kind: &str, api_version: &str) -> bool {
    matches!(kind, "PodGroup" | "Topology")
        && matches!(
            group_of(api_version),
            KESTREL_GROUP
                | "scheduling.x-k8s.io"
                | "scheduling.volcano.sh"
                | "kueue.x-k8s.io"
                | KUBE_SCHEDULING_GROUP
        )
}

/// The fields of Kestrel's PodGroup spec ([`PodGroupSpec`]) and its topology request;
/// Kestrel's own objects may hold no others.
const POD_GROUP_FIELDS: [&str; 5] = [
    "minMember",
    "minResources",
    "scheduleTimeoutSeconds",
    "minTaskMember",
    "topology",
];
const TOPOLOGY_REQUEST_FIELDS: [&str; 4] = ["required", "preferred", "sliceLevel", "sliceSize"];

/// The fields other projects' PodGroups share (unknown fields are theirs, and ignored).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ForeignPodGroupSpec {
    min_member: Option<u32>,
    schedule_timeout_seconds: Option<u64>,
    #[serde(default)]
    min_task_member: BTreeMap<String, u32>,
}

fn err(path: &Path, object: &str, field: &str, message: String) -> LoadError {
    LoadError::new(path, message).object(object).field(field)
}

/// Reads a PodGroup or Topology document (already known to be one).
pub fn parse_gang_document(path: &Path, doc: &Value) -> Result<GangDocument, LoadError> {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let meta = doc.get("metadata");
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let namespace = meta
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let object = format!("{kind} {namespace}/{name}");
    if name.is_empty() {
        return Err(err(
            path,
            &object,
            "metadata.name",
            "no name; set metadata.name".into(),
        ));
    }
    if let Some(why) = crate::documents::unread_version(kind, api_version) {
        return Err(err(path, &object, "apiVersion", why));
    }
    let spec = doc.get("spec").cloned().unwrap_or(Value::Null);
    if kind == "Topology" {
        let levels: Vec<TopologyLevel> = serde_json::from_value(
            spec.get("levels").cloned().unwrap_or(Value::Null),
        )
        .map_err(|e| {
            err(
                path,
                &object,
                "spec.levels",
                format!("{e}; write levels: [{{nodeLabel: ...}}, ...]"),
            )
        })?;
        if levels.is_empty() {
            return Err(err(
                path,
                &object,
                "spec.levels",
                "no levels; list node labels from the widest domain down".into(),
            ));
        }
        return Ok(GangDocument::Topology(
            levels.into_iter().map(|l| l.node_label).collect(),
        ));
    }
    let mut gang = GangSpec {
        namespace: namespace.to_string(),
        name: name.to_string(),
        ..Default::default()
    };
    if group_of(api_version) == KESTREL_GROUP {
        let ctx = Ctx {
            path,
            object: object.clone(),
        };
        if let Some(spec) = spec.as_object() {
            ctx.known_fields(spec, "spec", &POD_GROUP_FIELDS)?;
            if let Some(topology) = spec.get("topology").and_then(Value::as_object) {
                ctx.known_fields(topology, "spec.topology", &TOPOLOGY_REQUEST_FIELDS)?;
            }
        }
        let s: PodGroupSpec = serde_json::from_value(spec).map_err(|e| {
            err(
                path,
                &object,
                "spec",
                format!("{e}; see the PodGroup format in docs/concepts/gangs-and-topology.md"),
            )
        })?;
        let count = |field: &str, n: i32| {
            u32::try_from(n).map_err(|_| {
                err(
                    path,
                    &object,
                    field,
                    format!("{n} is negative; write a count of 1 or more"),
                )
            })
        };
        gang.min_member = count("spec.minMember", s.min_member)?;
        gang.schedule_timeout = match s.schedule_timeout_seconds {
            Some(t) if t < 0 => {
                return Err(err(
                    path,
                    &object,
                    "spec.scheduleTimeoutSeconds",
                    format!("{t} is negative; write 0 or more seconds"),
                ))
            }
            t => t.map(|t| t as u64 * 1000),
        };
        gang.role_minimums = s
            .min_task_member
            .into_iter()
            .map(|(role, n)| {
                Ok((
                    role.clone(),
                    count(&format!("spec.minTaskMember.{role}"), n)?,
                ))
            })
            .collect::<Result<_, LoadError>>()?;
        if let Some(t) = s.topology {
            if t.slice_level.is_some() != t.slice_size.is_some() {
                return Err(err(
                    path,
                    &object,
                    "spec.topology",
                    "sliceLevel and sliceSize go together; set both or neither".into(),
                ));
            }
            let slice_size = t
                .slice_size
                .map(|n| count("spec.topology.sliceSize", n))
                .transpose()?;
            gang.topology = GangTopology {
                required: t.required,
                preferred: t.preferred,
                slice: t.slice_level.zip(slice_size),
            };
        }
    } else if group_of(api_version) == KUBE_SCHEDULING_GROUP {
        let ctx = Ctx {
            path,
            object: object.clone(),
        };
        kube_pod_group(&ctx, &spec, &mut gang)?;
    } else {
        let s: ForeignPodGroupSpec =
            serde_json::from_value(spec).map_err(|e| err(path, &object, "spec", format!("{e}")))?;
        gang.min_member = s.min_member.unwrap_or(1);
        gang.schedule_timeout = s.schedule_timeout_seconds.map(|t| t * 1000);
        gang.role_minimums = s.min_task_member.into_iter().collect();
        // Volcano counts a job's finished pods towards minMember: once started, its last
        // pods (a Job's tasks beyond minAvailable) start as they fit.
        gang.keeps_admission = group_of(api_version) == "scheduling.volcano.sh";
    }
    if gang.min_member == 0 {
        return Err(err(
            path,
            &object,
            "spec.minMember",
            "must be at least 1".into(),
        ));
    }
    Ok(GangDocument::PodGroup(gang))
}

/// Kubernetes' PodGroup (`scheduling.k8s.io`): `spec.schedulingPolicy` is `gang` (its
/// `minCount` pods start together) or `basic` (its pods start as they fit, a gang of at
/// least 1); the first `spec.schedulingConstraints.topology` key is the node label whose
/// one domain holds the whole group. Its other fields (claims, disruption mode,
/// priority, a parent composite group) are its controllers' and kube-scheduler's.
fn kube_pod_group(ctx: &Ctx, spec: &Value, gang: &mut GangSpec) -> Result<(), LoadError> {
    let at = "spec.schedulingPolicy";
    let policy = spec.get("schedulingPolicy").and_then(Value::as_object);
    let fix = "set gang: {minCount: N} (N pods start together) or basic: {}";
    let policy = policy.ok_or_else(|| ctx.err(at, format!("missing; {fix}")))?;
    gang.min_member = match (policy.get("gang"), policy.get("basic")) {
        (Some(g), None) => {
            let field = format!("{at}.gang.minCount");
            match g.get("minCount") {
                Some(Value::Number(n)) => n
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| ctx.err(&field, format!("{n} is not a count of 1 or more")))?,
                _ => return Err(ctx.err(field, "missing; the pods that must start together")),
            }
        }
        (None, Some(_)) => 1,
        _ => return Err(ctx.err(at, format!("needs exactly one policy; {fix}"))),
    };
    let topology = spec
        .pointer("/schedulingConstraints/topology")
        .and_then(Value::as_array);
    if let Some(first) = topology.and_then(|t| t.first()) {
        let key = first.get("key").and_then(Value::as_str).ok_or_else(|| {
            ctx.err(
                "spec.schedulingConstraints.topology[0].key",
                "missing; name the node label whose one domain holds the group",
            )
        })?;
        gang.topology.required = Some(key.to_string());
    }
    Ok(())
}

/// What a pod's labels and annotations say about its gang.
#[derive(Debug, Clone, PartialEq)]
pub struct PodGang {
    pub membership: GangMembership,
    /// Kueue's plain-pod groups declare themselves on the pods.
    pub implied: Option<GangSpec>,
    /// The topology request from the pod's annotations.
    pub topology: GangTopology,
}

/// Reads a pod's gang membership, if any. `object` names the pod's owner for errors;
/// `scheduling_group` is the PodGroup its `spec.schedulingGroup` names.
pub fn pod_gang(
    path: &Path,
    object: &str,
    namespace: &str,
    (labels, annotations): (&BTreeMap<String, String>, &BTreeMap<String, String>),
    scheduling_group: Option<&str>,
) -> Result<Option<PodGang>, LoadError> {
    let scheduling_group = scheduling_group.map(str::to_string);
    let markers = [
        (
            scheduling_group.as_ref(),
            "spec.schedulingGroup",
            "spec.schedulingGroup.podGroupName",
        ),
        (
            labels.get(KESTREL_POD_GROUP_LABEL),
            "metadata.labels",
            KESTREL_POD_GROUP_LABEL,
        ),
        (
            labels.get(PLUGINS_POD_GROUP_LABEL),
            "metadata.labels",
            PLUGINS_POD_GROUP_LABEL,
        ),
        (
            annotations.get(VOLCANO_GROUP_ANNOTATION),
            "metadata.annotations",
            VOLCANO_GROUP_ANNOTATION,
        ),
        (
            labels.get(KUEUE_GROUP_LABEL),
            "metadata.labels",
            KUEUE_GROUP_LABEL,
        ),
    ];
    let found: Vec<_> = markers.iter().filter(|(v, _, _)| v.is_some()).collect();
    let Some((Some(gang), _, marker)) = found.first().copied() else {
        return lws_gang(path, object, namespace, labels, annotations);
    };
    if let Some((Some(other), _, other_marker)) = found.get(1).copied() {
        if other != gang {
            return Err(err(
                path,
                object,
                other_marker,
                format!(
                    "names gang {other:?} but {marker} names {gang:?}; a pod belongs to one gang"
                ),
            ));
        }
    }
    let parse_u32 = |field: &str, value: &String| annotation_count(path, object, field, value);
    let implied = match labels.get(KUEUE_GROUP_LABEL) {
        Some(name) if *marker == KUEUE_GROUP_LABEL => {
            let total = annotations.get(KUEUE_TOTAL_ANNOTATION).ok_or_else(|| {
                err(
                    path,
                    object,
                    &format!("metadata.annotations[{KUEUE_TOTAL_ANNOTATION:?}]"),
                    "a Kueue pod group needs its total pod count; add the annotation".into(),
                )
            })?;
            let total = parse_u32(KUEUE_TOTAL_ANNOTATION, total)?;
            Some(GangSpec {
                namespace: namespace.to_string(),
                name: name.clone(),
                min_member: total,
                total: Some(total),
                ..Default::default()
            })
        }
        _ => None,
    };
    let role = labels
        .get(KESTREL_ROLE_LABEL)
        .or_else(|| annotations.get(VOLCANO_TASK_ANNOTATION))
        .or_else(|| labels.get(VOLCANO_TASK_ANNOTATION))
        .cloned();
    let rank = match annotations
        .get(RANK_ANNOTATION)
        .or_else(|| labels.get(JOB_INDEX_LABEL))
    {
        Some(v) => Some(parse_u32(RANK_ANNOTATION, v)?),
        None => None,
    };
    Ok(Some(PodGang {
        membership: GangMembership {
            gang: (*gang).clone(),
            role,
            rank,
        },
        implied,
        topology: pod_topology(path, object, annotations)?,
    }))
}

/// A LeaderWorkerSet pod's gang, for a pod that names no other: its group (the leader and
/// its workers) starts whole, `lws-<name>-<group>` of the size its annotation says, the
/// leader in role `leader` and the workers in role `worker`, ranked by their index.
fn lws_gang(
    path: &Path,
    object: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Result<Option<PodGang>, LoadError> {
    let (Some(set), Some(group)) = (
        labels.get(LWS_NAME_LABEL),
        labels.get(LWS_GROUP_INDEX_LABEL),
    ) else {
        return Ok(None);
    };
    let size = annotations.get(LWS_SIZE_ANNOTATION).ok_or_else(|| {
        err(
            path,
            object,
            &format!("metadata.annotations[{LWS_SIZE_ANNOTATION:?}]"),
            "a LeaderWorkerSet pod needs its group's size, which LeaderWorkerSet's controller \
             writes; add the annotation"
                .into(),
        )
    })?;
    let size = annotation_count(path, object, LWS_SIZE_ANNOTATION, size)?;
    if size == 0 {
        return Err(err(
            path,
            object,
            &format!("metadata.annotations[{LWS_SIZE_ANNOTATION:?}]"),
            "0 pods; a group has its leader at least".into(),
        ));
    }
    let rank = match labels.get(LWS_WORKER_INDEX_LABEL) {
        Some(v) => Some(v.parse::<u32>().map_err(|_| {
            err(
                path,
                object,
                &format!("metadata.labels[{LWS_WORKER_INDEX_LABEL:?}]"),
                format!("{v:?} is not a whole number"),
            )
        })?),
        None => None,
    };
    let name = format!("lws-{set}-{group}");
    Ok(Some(PodGang {
        membership: GangMembership {
            gang: name.clone(),
            role: Some(
                if rank.unwrap_or(0) == 0 {
                    "leader"
                } else {
                    "worker"
                }
                .to_string(),
            ),
            rank,
        },
        implied: Some(GangSpec {
            namespace: namespace.to_string(),
            name,
            min_member: size,
            total: Some(size),
            ..Default::default()
        }),
        topology: pod_topology(path, object, annotations)?,
    }))
}

/// A whole-number annotation (`field`) of a pod, or an error naming it.
fn annotation_count(path: &Path, object: &str, field: &str, value: &str) -> Result<u32, LoadError> {
    value.parse::<u32>().map_err(|_| {
        err(
            path,
            object,
            &format!("metadata.annotations[{field:?}]"),
            format!("{value:?} is not a whole number"),
        )
    })
}

/// The topology request in a pod's annotations (Kestrel's, else Kueue's).
pub fn pod_topology(
    path: &Path,
    object: &str,
    annotations: &BTreeMap<String, String>,
) -> Result<GangTopology, LoadError> {
    let parse_u32 = |field: &str, value: &String| annotation_count(path, object, field, value);
    let mut topology = GangTopology::default();
    let mut slice_level = None;
    let mut slice_size = None;
    for (what, kestrel, kueue) in TOPOLOGY_ANNOTATIONS {
        let Some(value) = annotations.get(kestrel).or_else(|| annotations.get(kueue)) else {
            continue;
        };
        match what {
            "required" => topology.required = Some(value.clone()),
            "preferred" => topology.preferred = Some(value.clone()),
            "slice" => slice_level = Some(value.clone()),
            _ => slice_size = Some(parse_u32(kestrel, value)?),
        }
    }
    topology.slice = match (slice_level, slice_size) {
        (Some(level), Some(size)) => Some((level, size)),
        (None, None) => None,
        _ => {
            return Err(err(
                path,
                object,
                "metadata.annotations",
                "a slice needs both its level (kestrel.dev/topology-slice) and its size (kestrel.dev/topology-slice-size)".into(),
            ))
        }
    };
    Ok(topology)
}

/// Collects gangs from documents and pods: declared PodGroups win; a gang only its pods
/// name (Kueue) is implied by them; pod topology annotations fill a gang's empty request.
#[derive(Debug, Default)]
pub struct GangCollector {
    pub gangs: BTreeMap<(String, String), GangSpec>,
    pub levels: Vec<String>,
    origin: BTreeMap<(String, String), String>,
}

impl GangCollector {
    pub fn add_document(&mut self, path: &Path, doc: &Value) -> Result<(), LoadError> {
        match parse_gang_document(path, doc)? {
            GangDocument::Topology(levels) => self.levels = levels,
            GangDocument::PodGroup(spec) => {
                let key = (spec.namespace.clone(), spec.name.clone());
                if let Some(first) = self.origin.get(&key) {
                    return Err(LoadError::new(
                        path,
                        format!(
                            "PodGroup {}/{} is defined twice (first in {first}); keep one",
                            key.0, key.1
                        ),
                    ));
                }
                self.origin.insert(key.clone(), path.display().to_string());
                self.gangs.insert(key, spec);
            }
        }
        Ok(())
    }

    /// Records what a pod says about its gang (after all documents were added).
    pub fn add_pod(&mut self, namespace: &str, pod: &PodGang) {
        let key = (namespace.to_string(), pod.membership.gang.clone());
        let gang = match (&pod.implied, self.gangs.contains_key(&key)) {
            (_, true) => self.gangs.get_mut(&key).expect("present"),
            (Some(implied), false) => self.gangs.entry(key).or_insert_with(|| implied.clone()),
            (None, false) => return, // undeclared: the pod waits, saying so
        };
        if gang.topology == GangTopology::default() {
            gang.topology = pod.topology.clone();
        }
    }

    pub fn into_parts(self) -> (Vec<GangSpec>, Vec<String>) {
        (self.gangs.into_values().collect(), self.levels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gang_of(
        path: &Path,
        object: &str,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> Result<Option<PodGang>, LoadError> {
        pod_gang(path, object, namespace, (labels, annotations), None)
    }

    fn yaml(s: &str) -> Value {
        serde_saphyr::from_str(s).unwrap()
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_pod_group_flavour_maps_to_one_gang_model() {
        let p = Path::new("g.yaml");
        let kestrel = yaml("apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: pt, namespace: ml}\nspec:\n  minMember: 5\n  scheduleTimeoutSeconds: 600\n  minTaskMember: {master: 1, worker: 4}\n  topology: {required: topology.kestrel.dev/block, sliceLevel: nvidia.com/gpu.clique, sliceSize: 5}\n");
        let GangDocument::PodGroup(g) = parse_gang_document(p, &kestrel).unwrap() else {
            panic!()
        };
        assert_eq!((g.min_member, g.schedule_timeout), (5, Some(600_000)));
        assert_eq!(
            g.role_minimums,
            vec![("master".to_string(), 1), ("worker".to_string(), 4)]
        );
        assert_eq!(
            g.topology.slice,
            Some(("nvidia.com/gpu.clique".to_string(), 5))
        );
        let plugins = yaml("apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\nmetadata: {name: a}\nspec: {minMember: 3, minResources: {cpu: 3}}\n");
        let GangDocument::PodGroup(g) = parse_gang_document(p, &plugins).unwrap() else {
            panic!()
        };
        assert_eq!((g.namespace.as_str(), g.min_member), ("default", 3));
        let volcano = yaml("apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata: {name: v, namespace: x}\nspec: {minMember: 2, queue: default, minTaskMember: {ps: 1}}\n");
        let GangDocument::PodGroup(g) = parse_gang_document(p, &volcano).unwrap() else {
            panic!()
        };
        assert_eq!(g.role_minimums, vec![("ps".to_string(), 1)]);
        let topo = yaml("apiVersion: kueue.x-k8s.io/v1alpha1\nkind: Topology\nmetadata: {name: default}\nspec:\n  levels:\n  - nodeLabel: topology.kestrel.dev/block\n  - nodeLabel: topology.kestrel.dev/rack\n");
        assert_eq!(
            parse_gang_document(p, &topo).unwrap(),
            GangDocument::Topology(vec![
                "topology.kestrel.dev/block".into(),
                "topology.kestrel.dev/rack".into()
            ])
        );
        assert!(is_gang_document(
            "PodGroup",
            "scheduling.volcano.sh/v1beta1"
        ));
        assert!(!is_gang_document("PodGroup", "example.com/v1"));
    }

    /// Kubernetes' Workload API: a PodGroup's gang policy, its topology key, and pods that
    /// name it in `spec.schedulingGroup`.
    #[test]
    fn kubernetes_pod_groups_and_the_pods_that_name_them() {
        let p = Path::new("g.yaml");
        let group = |spec: &str| {
            parse_gang_document(p, &yaml(&format!("apiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\nmetadata: {{name: train, namespace: ml}}\nspec: {spec}\n")))
        };
        let GangDocument::PodGroup(g) = group("{workloadRef: {workloadName: job, templateName: workers}, schedulingPolicy: {gang: {minCount: 4}}, schedulingConstraints: {topology: [{key: topology.kubernetes.io/rack}]}}").unwrap() else {
            panic!()
        };
        assert_eq!(
            (g.namespace.as_str(), g.name.as_str(), g.min_member),
            ("ml", "train", 4)
        );
        assert_eq!(
            g.topology.required.as_deref(),
            Some("topology.kubernetes.io/rack")
        );
        let GangDocument::PodGroup(g) = group("{schedulingPolicy: {basic: {}}}").unwrap() else {
            panic!()
        };
        assert_eq!(g.min_member, 1, "basic: its pods start as they fit");
        for (spec, field, says) in [
            ("{}", "spec.schedulingPolicy", "missing"),
            (
                "{schedulingPolicy: {gang: {minCount: 2}, basic: {}}}",
                "spec.schedulingPolicy",
                "exactly one",
            ),
            (
                "{schedulingPolicy: {gang: {minCount: 0}}}",
                "spec.schedulingPolicy.gang.minCount",
                "1 or more",
            ),
            (
                "{schedulingPolicy: {gang: {}}}",
                "spec.schedulingPolicy.gang.minCount",
                "missing",
            ),
        ] {
            let e = group(spec).unwrap_err().to_string();
            assert!(
                e.contains("PodGroup ml/train") && e.contains(field) && e.contains(says),
                "{e}"
            );
        }
        let alpha = yaml("apiVersion: scheduling.k8s.io/v1alpha3\nkind: PodGroup\nmetadata: {name: a}\nspec: {schedulingPolicy: {gang: {minCount: 2}}}\n");
        assert!(
            parse_gang_document(p, &alpha).is_ok(),
            "1.35's version reads the same"
        );
        let v1 = yaml(
            "apiVersion: scheduling.k8s.io/v1\nkind: PodGroup\nmetadata: {name: a}\nspec: {}\n",
        );
        let e = parse_gang_document(p, &v1).unwrap_err().to_string();
        assert!(e.contains("scheduling.k8s.io/v1beta1"), "{e}");
        // A pod names its group in its spec; a label naming another is refused.
        let empty = map(&[]);
        let pod = pod_gang(p, "Pod ml/w-0", "ml", (&empty, &empty), Some("train"))
            .unwrap()
            .unwrap();
        assert_eq!(pod.membership.gang, "train");
        let labels = map(&[(PLUGINS_POD_GROUP_LABEL, "other")]);
        let e = pod_gang(p, "Pod ml/w-0", "ml", (&labels, &empty), Some("train"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(PLUGINS_POD_GROUP_LABEL) && e.contains("\"train\""),
            "{e}"
        );
    }

    #[test]
    fn bad_pod_groups_name_the_field() {
        let p = Path::new("g.yaml");
        let bad = yaml("apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: pt, namespace: ml}\nspec: {minMember: 2, minMembers: 3}\n");
        let e = parse_gang_document(p, &bad).unwrap_err().to_string();
        assert!(
            e.contains("g.yaml") && e.contains("PodGroup ml/pt") && e.contains("minMembers"),
            "{e}"
        );
        let zero = yaml("apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\nmetadata: {name: z}\nspec: {minMember: 0}\n");
        let e = parse_gang_document(p, &zero).unwrap_err().to_string();
        assert!(
            e.contains("spec.minMember") && e.contains("at least 1"),
            "{e}"
        );
        let half = yaml("apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: h}\nspec: {minMember: 2, topology: {sliceSize: 2}}\n");
        let e = parse_gang_document(p, &half).unwrap_err().to_string();
        assert!(e.contains("sliceLevel and sliceSize go together"), "{e}");
        let levels = yaml("apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: Topology\nmetadata: {name: t}\nspec: {levels: []}\n");
        assert!(parse_gang_document(p, &levels)
            .unwrap_err()
            .to_string()
            .contains("no levels"));
    }

    #[test]
    fn pods_name_their_gang_role_rank_and_topology() {
        let p = Path::new("w.yaml");
        let kueue = gang_of(
            p,
            "Pod ml/a",
            "ml",
            &map(&[(KUEUE_GROUP_LABEL, "grp"), (JOB_INDEX_LABEL, "3")]),
            &map(&[
                (KUEUE_TOTAL_ANNOTATION, "4"),
                (
                    "kueue.x-k8s.io/podset-required-topology",
                    "topology.kestrel.dev/rack",
                ),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(kueue.membership.gang, "grp");
        assert_eq!(kueue.membership.rank, Some(3));
        assert_eq!(kueue.implied.as_ref().unwrap().min_member, 4);
        assert_eq!(
            kueue.topology.required.as_deref(),
            Some("topology.kestrel.dev/rack")
        );
        let volcano = gang_of(
            p,
            "Pod x/b",
            "x",
            &map(&[]),
            &map(&[
                (VOLCANO_GROUP_ANNOTATION, "v"),
                (VOLCANO_TASK_ANNOTATION, "worker"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(volcano.membership.role.as_deref(), Some("worker"));
        assert!(volcano.implied.is_none());
        // Volcano's controller writes the task name as a label too.
        let labelled = gang_of(
            p,
            "Pod x/b2",
            "x",
            &map(&[(VOLCANO_TASK_ANNOTATION, "ps")]),
            &map(&[(VOLCANO_GROUP_ANNOTATION, "v")]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(labelled.membership.role.as_deref(), Some("ps"));
        assert_eq!(
            gang_of(p, "Pod x/c", "x", &map(&[]), &map(&[])).unwrap(),
            None
        );
        let e = gang_of(
            p,
            "Pod x/d",
            "x",
            &map(&[(KUEUE_GROUP_LABEL, "g")]),
            &map(&[]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("pod-group-total-count"), "{e}");
        let e = gang_of(
            p,
            "Pod x/e",
            "x",
            &map(&[
                (KESTREL_POD_GROUP_LABEL, "a"),
                (PLUGINS_POD_GROUP_LABEL, "b"),
            ]),
            &map(&[]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("one gang"), "{e}");
        let e = gang_of(
            p,
            "Pod x/f",
            "x",
            &map(&[(KESTREL_POD_GROUP_LABEL, "a")]),
            &map(&[("kestrel.dev/topology-slice-size", "4")]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("both its level"), "{e}");
    }

    #[test]
    fn collector_prefers_declared_gangs_and_fills_topology_from_pods() {
        let p = Path::new("g.yaml");
        let mut c = GangCollector::default();
        c.add_document(p, &yaml("apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\nmetadata: {name: a, namespace: ml}\nspec: {minMember: 2}\n")).unwrap();
        let e = c
            .add_document(p, &yaml("apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: PodGroup\nmetadata: {name: a, namespace: ml}\nspec: {minMember: 3}\n"))
            .unwrap_err();
        assert!(e.to_string().contains("defined twice"));
        let pod = gang_of(
            p,
            "Pod ml/x",
            "ml",
            &map(&[(PLUGINS_POD_GROUP_LABEL, "a")]),
            &map(&[(
                "kestrel.dev/topology-preferred",
                "topology.kestrel.dev/rack",
            )]),
        )
        .unwrap()
        .unwrap();
        c.add_pod("ml", &pod);
        let (gangs, _) = c.into_parts();
        assert_eq!(gangs.len(), 1);
        assert_eq!(
            gangs[0].topology.preferred.as_deref(),
            Some("topology.kestrel.dev/rack")
        );
    }

    #[test]
    fn leader_worker_set_pods_form_a_gang_per_group_of_its_size() {
        let p = Path::new("cluster");
        let labels = |index: &str| {
            map(&[
                (LWS_NAME_LABEL, "llm"),
                (LWS_GROUP_INDEX_LABEL, "1"),
                (LWS_WORKER_INDEX_LABEL, index),
            ])
        };
        let size = map(&[(LWS_SIZE_ANNOTATION, "4")]);
        let leader = gang_of(p, "Pod s/llm-1", "s", &labels("0"), &size)
            .unwrap()
            .unwrap();
        assert_eq!(leader.membership.gang, "lws-llm-1");
        assert_eq!(leader.membership.role.as_deref(), Some("leader"));
        let spec = leader.implied.unwrap();
        assert_eq!((spec.min_member, spec.total), (4, Some(4)));
        let worker = gang_of(p, "Pod s/llm-1-3", "s", &labels("3"), &size)
            .unwrap()
            .unwrap();
        assert_eq!(worker.membership.role.as_deref(), Some("worker"));
        assert_eq!(worker.membership.rank, Some(3));
        // A gang the pod names itself wins (Kueue's LeaderWorkerSet integration labels its
        // pods with its own group).
        let mut kueue = labels("0");
        kueue.insert(KUEUE_GROUP_LABEL.to_string(), "k".to_string());
        let mut counted = size.clone();
        counted.insert(KUEUE_TOTAL_ANNOTATION.to_string(), "4".to_string());
        let named = gang_of(p, "Pod s/llm-1", "s", &kueue, &counted)
            .unwrap()
            .unwrap();
        assert_eq!(named.membership.gang, "k");
        let e = gang_of(p, "Pod s/llm-1", "s", &labels("0"), &map(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Pod s/llm-1") && e.contains(LWS_SIZE_ANNOTATION),
            "{e}"
        );
    }
}
