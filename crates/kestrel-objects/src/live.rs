//! Kubernetes objects as the engine's nodes and pods, and the GPU-indices annotation.
//!
//! The conversion rules are the ones files are read with ([`crate::nodes::node_from_kube`],
//! [`crate::pods::Catalog::pod_from_kube`]), so the simulator and the live scheduler read a
//! Node or a Pod the same way; here errors name the cluster instead of a file.

use crate::gangs::{self, PodGang, KESTREL_POD_GROUP_LABEL, KUEUE_GROUP_LABEL};
use crate::pods::Catalog;
use crate::LoadError;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use kestrel_core::{GpuAssignment, NodeSpec, PodSpec};
use std::collections::BTreeMap;
use std::path::Path;

/// Pod annotation with the GPUs Kestrel chose, written before the bind so the node agent
/// can hand exactly those devices to the pod: `"0,1,2,3"` for whole GPUs, `"2:500"` for
/// 500 thousandths of GPU 2 (`"2:1000"`: a share by memory of all of GPU 2's memory).
pub const GPU_INDICES_ANNOTATION: &str = "kestrel.dev/gpu-indices";
/// Written by a workload: the RFC 3339 time of its last completed checkpoint.
pub const LAST_CHECKPOINT_ANNOTATION: &str = "kestrel.dev/last-checkpoint";
/// Written by Kestrel on a preemption victim that checkpoints on request: the RFC 3339
/// time it was asked to checkpoint.
pub const CHECKPOINT_REQUEST_ANNOTATION: &str = "kestrel.dev/checkpoint-request";

/// What errors name as the source of an object read from the cluster.
pub const API_SOURCE: &str = "cluster";

/// The annotation value for an assignment; `None` for pods without GPUs.
pub fn format_gpu_indices(gpus: &GpuAssignment) -> Option<String> {
    match gpus {
        GpuAssignment::None => None,
        GpuAssignment::Whole(v) if v.is_empty() => None,
        GpuAssignment::Whole(v) => Some(v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")),
        GpuAssignment::Shared { index, milli } => Some(format!("{index}:{milli}")),
        // Partitions are DRA devices: the claim's allocation records them.
        GpuAssignment::Partitions(_) => None,
    }
}

/// Reads the annotation back. Anything malformed (hand edits, other tools) is `None`: the
/// engine then picks free devices itself, as for a pod another scheduler bound.
pub fn parse_gpu_indices(value: &str) -> Option<GpuAssignment> {
    let value = value.trim();
    if value.is_empty() || value.len() > 4096 {
        return None;
    }
    if let Some((index, milli)) = value.split_once(':') {
        let index = index.trim().parse::<u32>().ok()?;
        let milli = milli.trim().parse::<u32>().ok()?;
        return (1..=1000)
            .contains(&milli)
            .then_some(GpuAssignment::Shared { index, milli });
    }
    let mut indices = value
        .split(',')
        .map(|s| s.trim().parse::<u32>().ok())
        .collect::<Option<Vec<u32>>>()?;
    indices.sort_unstable();
    indices.dedup();
    Some(GpuAssignment::Whole(indices))
}

/// An object Kestrel could not read, without the file part of a loader error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConvertError {
    /// `Pod ns/name`, `Node gpu-0`.
    pub object: Option<String>,
    pub field: Option<String>,
    pub message: String,
}

impl From<LoadError> for ConvertError {
    fn from(e: LoadError) -> Self {
        let message = match &e.field {
            Some(field) => format!("field {field}: {}", e.message),
            None => e.message.clone(),
        };
        ConvertError {
            object: e.object,
            field: e.field,
            message,
        }
    }
}

pub fn node_spec(node: &Node) -> Result<NodeSpec, ConvertError> {
    crate::nodes::node_from_kube(Path::new(API_SOURCE), node).map_err(Into::into)
}

pub fn pod_spec(catalog: &Catalog, pod: &Pod) -> Result<PodSpec, ConvertError> {
    catalog
        .pod_from_kube(Path::new(API_SOURCE), pod)
        .map_err(Into::into)
}

/// What a pod's labels and annotations say about its gang (the simulator's reading).
pub fn pod_gang(pod: &Pod) -> Result<Option<PodGang>, ConvertError> {
    let empty = BTreeMap::new();
    let namespace = pod_namespace(pod);
    gangs::pod_gang(
        Path::new(API_SOURCE),
        &format!("Pod {}", pod_key(pod)),
        namespace,
        (
            pod.metadata.labels.as_ref().unwrap_or(&empty),
            pod.metadata.annotations.as_ref().unwrap_or(&empty),
        ),
        pod.spec
            .as_ref()
            .and_then(|s| s.scheduling_group.as_ref())
            .and_then(|g| g.pod_group_name.as_deref()),
    )
    .map_err(Into::into)
}

/// The gang a pod names by Kestrel's label or by Kueue's plain-pod group label, as
/// (namespace, name).
pub fn pod_group_key(pod: &Pod) -> Option<(String, String)> {
    let labels = pod.metadata.labels.as_ref()?;
    let name = labels
        .get(KESTREL_POD_GROUP_LABEL)
        .or_else(|| labels.get(KUEUE_GROUP_LABEL))?;
    Some((pod_namespace(pod).to_string(), name.clone()))
}

/// A pod's namespace (`default` when unset, as the API server defaults it).
pub fn pod_namespace(pod: &Pod) -> &str {
    pod.metadata
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or("default")
}

/// `status.phase` is Running.
pub fn is_running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// Drops what no reader of a watched Pod or Node uses before it is stored and indexed, so
/// the reflector stores hold a fraction of each object: `managedFields`; a pod's volumes
/// other than claims, its containers' commands, env, mounts, probes and lifecycle hooks, and its container
/// statuses; a node's image list. Scheduling reads labels, annotations, owners, resources,
/// selectors, affinity, tolerations, taints, conditions and phases, which stay.
pub fn trim_watched<K: std::any::Any>(object: &mut K) {
    let object = object as &mut dyn std::any::Any;
    if let Some(pod) = object.downcast_mut::<Pod>() {
        pod.metadata.managed_fields = None;
        if let Some(spec) = pod.spec.as_mut() {
            // Volumes matter only by the claims they mount.
            if let Some(volumes) = spec.volumes.as_mut() {
                volumes.retain(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some());
            }
            let containers = spec.init_containers.iter_mut().flatten();
            for c in containers.chain(spec.containers.iter_mut()) {
                c.command = None;
                c.args = None;
                c.env = None;
                c.env_from = None;
                c.volume_mounts = None;
                c.volume_devices = None;
                c.liveness_probe = None;
                c.readiness_probe = None;
                c.startup_probe = None;
                c.lifecycle = None;
            }
        }
        if let Some(status) = pod.status.as_mut() {
            status.container_statuses = None;
            status.init_container_statuses = None;
            status.ephemeral_container_statuses = None;
        }
    } else if let Some(node) = object.downcast_mut::<Node>() {
        node.metadata.managed_fields = None;
        if let Some(status) = node.status.as_mut() {
            status.images = None;
        }
    } else if let Some(set) = object.downcast_mut::<StatefulSet>() {
        // Only the metadata, replicas and template metadata say what its pods are.
        set.metadata.managed_fields = None;
        set.spec.template.spec = None;
        set.spec.volume_claim_templates = None;
    } else if let Some(set) = object.downcast_mut::<ReplicaSet>() {
        set.metadata.managed_fields = None;
        if let Some(template) = set.spec.template.as_mut() {
            template.spec = None;
        }
    }
}

/// `namespace/name` of a pod.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The node a pod is bound to (`spec.nodeName`).
pub fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Succeeded or Failed: the pod holds nothing any more.
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

/// The scheduler a pod asks for (`default-scheduler` when unset).
pub fn scheduler_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .filter(|n| !n.is_empty())
        .unwrap_or("default-scheduler")
}

/// `spec.schedulingGates` is not empty: no scheduler may place the pod yet.
pub fn is_gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}

/// A pod's annotation.
pub fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The pod is being disrupted: its `DisruptionTarget` condition is True (set by the
/// Eviction API, a preempting scheduler, the taint manager).
pub fn is_disrupted(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "DisruptionTarget" && c.status == "True")
        })
}

pub fn is_deleting(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_pods_ask_for_a_share_by_gpu_memory_as_manifests_do() {
        let pod = |annotations: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "namespace": "ml", "annotations": annotations},
                "spec": {"containers": [{"name": "a"}]},
            }))
            .unwrap()
        };
        let spec = pod_spec(
            &Catalog::new(),
            &pod(serde_json::json!({"gpu-memory": "20480"})),
        )
        .unwrap();
        assert_eq!(
            spec.demand.gpu,
            kestrel_core::GpuRequest::Memory { mib: 20480 }
        );
        let e = pod_spec(
            &Catalog::new(),
            &pod(serde_json::json!({"gpu-memory": "20480", "gpu-fraction": "0.5"})),
        )
        .unwrap_err();
        assert_eq!(e.object.as_deref(), Some("Pod ml/p"));
        assert_eq!(
            e.field.as_deref(),
            Some("metadata.annotations[\"gpu-memory\"]")
        );
        assert!(e.message.contains("not both"), "{}", e.message);
    }

    #[test]
    fn gpu_indices_round_trip() {
        for a in [
            GpuAssignment::Whole(vec![0, 1, 2, 3]),
            GpuAssignment::Whole(vec![7]),
            GpuAssignment::Shared {
                index: 2,
                milli: 500,
            },
            // A share by memory of a device's whole memory.
            GpuAssignment::Shared {
                index: 0,
                milli: 1000,
            },
        ] {
            let s = format_gpu_indices(&a).unwrap();
            assert_eq!(parse_gpu_indices(&s), Some(a));
        }
        assert_eq!(
            format_gpu_indices(&GpuAssignment::Whole(vec![0, 1, 2, 3])).unwrap(),
            "0,1,2,3"
        );
        assert_eq!(
            format_gpu_indices(&GpuAssignment::Shared {
                index: 2,
                milli: 500
            })
            .unwrap(),
            "2:500"
        );
        assert_eq!(format_gpu_indices(&GpuAssignment::None), None);
    }

    #[test]
    fn malformed_gpu_indices_are_none_never_a_panic() {
        for bad in [
            "",
            ",",
            "a",
            "1,,2",
            "-1",
            "1:0",
            "1:1001",
            "1:x",
            ":",
            "99999999999",
            "1:2:3",
        ] {
            assert_eq!(parse_gpu_indices(bad), None, "{bad:?}");
        }
        assert_eq!(
            parse_gpu_indices(" 3, 1 ,1"),
            Some(GpuAssignment::Whole(vec![1, 3]))
        );
    }

    #[test]
    fn gpu_indices_parser_survives_arbitrary_bytes() {
        // A small deterministic fuzz: every string over a tricky alphabet up to length 5.
        let alphabet = ['0', '9', ',', ':', ' ', '-', 'x', '\u{e9}'];
        let mut stack = vec![String::new()];
        let mut n = 0;
        while let Some(s) = stack.pop() {
            let parsed = parse_gpu_indices(&s);
            if let Some(a) = parsed {
                let again = format_gpu_indices(&a).map(|f| parse_gpu_indices(&f));
                if let Some(again) = again {
                    assert_eq!(again, Some(a), "{s:?}");
                }
            }
            n += 1;
            if s.chars().count() < 5 {
                for c in alphabet {
                    stack.push(format!("{s}{c}"));
                }
            }
        }
        assert!(n > 30_000);
    }
}
