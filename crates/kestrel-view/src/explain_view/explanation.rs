//! The engine's explanation of a pending pod, and what a pod asks for, as views show them.

use kestrel_core::{
    format_amount, Bytes, Demand, GpuRequest, NodeReason, Unschedulable, GPU_RESOURCE,
};
use serde::Serialize;
use std::collections::BTreeMap;

/// A queue or gang problem: its kind (the engine's variant name), its message, and the
/// engine's fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Problem {
    pub kind: String,
    pub message: String,
    pub detail: serde_json::Value,
}

impl Problem {
    pub(super) fn of<P: Serialize + std::fmt::Display>(problem: &P) -> Self {
        let value = serde_json::to_value(problem).unwrap_or(serde_json::Value::Null);
        let (kind, detail) = match value {
            serde_json::Value::Object(map) if map.len() == 1 => {
                let (k, v) = map.into_iter().next().expect("one entry");
                (k, v)
            }
            serde_json::Value::String(s) => (s, serde_json::Value::Null),
            other => (String::new(), other),
        };
        Problem {
            kind,
            message: problem.to_string(),
            detail,
        }
    }
}

/// Nodes refused for one reason, as in "0/N nodes are available: 2 Insufficient ...".
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeReasonCount {
    /// The reason in kube-scheduler's words.
    pub reason: String,
    /// `cordoned`, `taint`, `affinity`, `runtime-class`, `insufficient`, `too-many-pods`,
    /// `gpu-fragmented`, `reserved` (held for the workload at the head of the queue).
    pub kind: &'static str,
    /// The resource, taint, RuntimeClass or reserving workload it names.
    pub subject: Option<String>,
    pub nodes: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fragmentation {
    pub free_whole_gpus: u32,
    pub most_on_one_node: u32,
}

/// The engine's typed explanation of why a pod is pending.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// The full message (kube-scheduler's form).
    pub message: String,
    /// The reason that matters most, in a few words.
    pub headline: String,
    /// Capacity (not configuration, quota or the gang) keeps it waiting.
    pub capacity: bool,
    pub queue_problem: Option<Problem>,
    pub gang_problem: Option<Problem>,
    pub total_nodes: u32,
    pub node_reasons: Vec<NodeReasonCount>,
    pub gpu_fragmentation: Option<Fragmentation>,
}

impl Explanation {
    pub fn of(u: &Unschedulable) -> Self {
        let node_reasons = u
            .reasons
            .iter()
            .map(|(reason, nodes)| {
                let (kind, subject) = match reason {
                    NodeReason::Cordoned => ("cordoned", None),
                    NodeReason::UntoleratedTaint(t) => ("taint", Some(t.to_string())),
                    NodeReason::AffinityMismatch => ("affinity", None),
                    NodeReason::RuntimeClassMismatch(rc) => ("runtime-class", Some(rc.clone())),
                    NodeReason::Insufficient(r) => ("insufficient", Some(r.clone())),
                    NodeReason::TooManyPods => ("too-many-pods", None),
                    NodeReason::GpuFragmented => ("gpu-fragmented", None),
                    NodeReason::Reserved(holder) => ("reserved", Some(holder.clone())),
                    NodeReason::Nominated(preemptor) => ("nominated", Some(preemptor.clone())),
                    NodeReason::ClaimsUnallocatable => ("claims", None),
                    NodeReason::PartitionsFragmented => ("mig-fragmented", None),
                    NodeReason::NoMatchingDevice(what) => {
                        ("no-matching-device", Some(what.clone()))
                    }
                    NodeReason::HostPortsTaken => ("host-ports", None),
                    NodeReason::PodAffinityMismatch => ("pod-affinity", None),
                    NodeReason::PodAntiAffinityMismatch => ("pod-anti-affinity", None),
                    NodeReason::ExistingAntiAffinity => ("existing-anti-affinity", None),
                    NodeReason::SpreadSkew => ("topology-spread", None),
                    NodeReason::SpreadMissingLabel => ("topology-spread-label", None),
                    NodeReason::VolumeNodeAffinityConflict => ("volume-node-affinity", None),
                    NodeReason::VolumeBindConflict => ("volume-binding", None),
                    NodeReason::VolumeInUse => ("volume-in-use", None),
                    NodeReason::VolumeLimit => ("volume-limit", None),
                };
                NodeReasonCount {
                    reason: reason.to_string(),
                    kind,
                    subject,
                    nodes: *nodes,
                }
            })
            .collect();
        Explanation {
            message: u.to_string(),
            headline: u.headline(),
            capacity: u.is_capacity(),
            queue_problem: u.queue.as_ref().map(Problem::of),
            gang_problem: u.gang.as_ref().map(Problem::of),
            total_nodes: u.total_nodes,
            node_reasons,
            gpu_fragmentation: u.gpu_fragmentation.map(|(free, best)| Fragmentation {
                free_whole_gpus: free,
                most_on_one_node: best,
            }),
        }
    }
}

/// What a pod asks for, in the units users write.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Requests {
    pub cpu: f64,
    pub memory_bytes: i64,
    pub ephemeral_storage_bytes: i64,
    pub gpus: f64,
    pub extended: BTreeMap<String, i64>,
    /// One line: `4 nvidia.com/gpu, 32 cpu, 256Gi memory`.
    pub summary: String,
}

fn gpu_text(gpu: GpuRequest) -> Option<String> {
    match gpu {
        GpuRequest::None => None,
        GpuRequest::Whole(n) => Some(format!("{n} {GPU_RESOURCE}")),
        GpuRequest::Shared { milli } => Some(format!("{} GPU (shared)", milli as f64 / 1000.0)),
        GpuRequest::Memory { mib } => Some(format!("{mib} MiB of one GPU (shared)")),
    }
}

impl Requests {
    /// `gpu_milli`: the GPU thousandths the pod counts ([`Scheduler::gpu_milli`]: a share
    /// by memory differs by device).
    pub(super) fn of(demand: &Demand, gpu_milli: u64) -> Self {
        let r = &demand.resources;
        let mut parts: Vec<String> = gpu_text(demand.gpu).into_iter().collect();
        if r.cpu_milli > 0 {
            parts.push(format!("{} cpu", format_amount("cpu", r.cpu_milli)));
        }
        if r.memory_bytes > 0 {
            parts.push(format!("{} memory", Bytes(r.memory_bytes)));
        }
        if r.ephemeral_storage_bytes > 0 {
            parts.push(format!(
                "{} ephemeral-storage",
                Bytes(r.ephemeral_storage_bytes)
            ));
        }
        for (name, amount) in &r.extended {
            parts.push(format!("{amount} {name}"));
        }
        Requests {
            cpu: r.cpu_milli as f64 / 1000.0,
            memory_bytes: r.memory_bytes,
            ephemeral_storage_bytes: r.ephemeral_storage_bytes,
            gpus: gpu_milli as f64 / 1000.0,
            extended: r.extended.iter().cloned().collect(),
            summary: if parts.is_empty() {
                "nothing".to_string()
            } else {
                parts.join(", ")
            },
        }
    }
}
