//! The checks, the snapshot reading and the rendering, on small YAML snapshots.

use super::*;
use kestrel_objects::LoadError;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;

mod cluster;
mod dra;
mod events;
mod reports;

fn snap(text: &str) -> Result<Snapshot, LoadError> {
    read_snapshot(&[(PathBuf::from("snap.yaml"), text.to_string())])
}

fn run(text: &str) -> Diagnosis {
    diagnose(&snap(text).unwrap(), &DoctorOptions::default())
}

fn ids(d: &Diagnosis) -> Vec<&str> {
    d.findings.iter().map(|f| f.id.as_str()).collect()
}

fn finding<'a>(d: &'a Diagnosis, id: &str) -> &'a Finding {
    d.findings
        .iter()
        .find(|f| f.id == id)
        .unwrap_or_else(|| panic!("no {id} in {:#?}", d.findings))
}

/// A Node document. `labels`, `taints` and `status_extra` are YAML flow text.
fn node(name: &str, labels: &str, taints: &str, alloc: &str, status_extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{{labels}}}}}\n\
             spec: {{taints: [{taints}]}}\n\
             status:\n  allocatable: {{cpu: \"64\", memory: 512Gi, pods: \"110\"{alloc}}}\n\
             {status_extra}---\n"
    )
}

const GPU_LABELS: &str =
        "nvidia.com/gpu.present: \"true\", nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, nvidia.com/gpu.count: \"8\"";
const GPU_TAINT: &str = "{key: nvidia.com/gpu, value: present, effect: NoSchedule}";

fn gpu_node(name: &str) -> String {
    node(name, GPU_LABELS, GPU_TAINT, ", nvidia.com/gpu: \"8\"", "")
}

/// A Pod document: `requests` and `spec_extra` are YAML flow text / spec lines.
fn pod(name: &str, node: Option<&str>, requests: &str, spec_extra: &str) -> String {
    let (phase, node_line) = match node {
        Some(n) => ("Running", format!("  nodeName: {n}\n")),
        None => ("Pending", String::new()),
    };
    format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ml}}\nspec:\n{node_line}{spec_extra}  containers:\n  - name: c\n    image: img\n    resources: {{requests: {{cpu: \"1\"{requests}}}}}\nstatus: {{phase: {phase}}}\n---\n"
        )
}

fn conditions(list: &[(&str, &str)]) -> String {
    let mut s = "  conditions:\n".to_string();
    for (t, st) in list {
        s.push_str(&format!(
                "  - {{type: {t}, status: \"{st}\", reason: R{t}, message: m, lastHeartbeatTime: \"2025-06-02T10:00:00Z\", lastTransitionTime: \"2025-06-02T09:00:00Z\"}}\n"
            ));
    }
    s
}
