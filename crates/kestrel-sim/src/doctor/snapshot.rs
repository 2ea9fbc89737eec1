//! Reading a snapshot: Nodes and Pods from YAML files or the API server.

use super::plural;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kestrel_core::PodSpec;
use kestrel_k8s::documents::read_documents;
use kestrel_k8s::nodes::node_from_kube;
use kestrel_k8s::pods::Catalog;
use kestrel_k8s::LoadError;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The Nodes and Pods of a cluster, from files or the API server.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Where the objects came from: file names, or "the API server".
    pub source: String,
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    /// Things worth knowing about the input (objects ignored, duplicates).
    pub notes: Vec<String>,
}

/// Reads a snapshot from YAML texts: `kubectl get nodes,pods -A -o yaml` output (a `v1
/// List`), or any number of files and documents holding Node and Pod objects. Objects of
/// other kinds are ignored with a note. Errors name the file, the object and the field:
/// text that is not YAML, a Node or Pod Kestrel cannot read, or no Node at all.
pub fn read_snapshot(files: &[(PathBuf, String)]) -> Result<Snapshot, LoadError> {
    let mut snap = Snapshot {
        source: files
            .iter()
            .map(|(p, _)| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        ..Snapshot::default()
    };
    let mut node_names: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut pod_keys = BTreeSet::new();
    for (path, text) in files {
        let mut ignored: BTreeMap<String, usize> = BTreeMap::new();
        for doc in read_documents(path, text, None)? {
            match doc.kind() {
                "Node" => {
                    let node: Node = doc.typed(path)?;
                    let spec = node_from_kube(path, &node)?;
                    if let Some(first) = node_names.get(&spec.name) {
                        snap.notes.push(format!(
                            "{}: {}: a second Node with this name (the first is in {}); kept the first",
                            path.display(),
                            doc.object(),
                            first.display()
                        ));
                        continue;
                    }
                    node_names.insert(spec.name, path.clone());
                    snap.nodes.push(node);
                }
                "Pod" => {
                    let pod: Pod = doc.typed(path)?;
                    let spec = pod_spec(path, &pod)?;
                    if !pod_keys.insert(spec.key()) {
                        snap.notes.push(format!(
                            "{}: {}: a second Pod with this name; kept the first",
                            path.display(),
                            doc.object()
                        ));
                        continue;
                    }
                    snap.pods.push(pod);
                }
                other => *ignored.entry(other.to_string()).or_default() += 1,
            }
        }
        if !ignored.is_empty() {
            let n: usize = ignored.values().sum();
            let kinds: Vec<String> = ignored.iter().map(|(k, n)| format!("{k} ({n})")).collect();
            snap.notes.push(format!(
                "{}: ignored {n} object{} that {} not Nodes or Pods: {}",
                path.display(),
                plural(n),
                if n == 1 { "is" } else { "are" },
                kinds.join(", ")
            ));
        }
    }
    if snap.nodes.is_empty() {
        let what = if files.len() == 1 {
            "no Node objects in the file"
        } else {
            "no Node objects in these files"
        };
        return Err(LoadError::new(
            Path::new(&snap.source),
            format!(
                "{what}; kestrel doctor needs the cluster's Nodes (and its Pods): export them \
                 with kubectl get nodes,pods -A -o yaml"
            ),
        ));
    }
    Ok(snap)
}

/// A Pod as the scheduler's pod, for its requests, tolerations and node selection. The
/// API server has resolved priorities and RuntimeClasses already (`spec.priority`,
/// `spec.overhead`, the class's tolerations merged into the pod), so neither is looked up.
pub(super) fn pod_spec(source: &Path, pod: &Pod) -> Result<PodSpec, LoadError> {
    let mut resolved = pod.clone();
    if let Some(spec) = resolved.spec.as_mut() {
        spec.priority.get_or_insert(0);
        spec.runtime_class_name = None;
    }
    Catalog::new().pod_from_kube(source, &resolved)
}

/// The newest time stamped on any object: close to when the snapshot was taken.
pub(super) fn newest_timestamp(snapshot: &Snapshot) -> Option<Timestamp> {
    let mut times = Vec::new();
    for node in &snapshot.nodes {
        times.extend(node.metadata.creation_timestamp.as_ref().map(|t| t.0));
        for c in node
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
        {
            times.extend(c.last_heartbeat_time.as_ref().map(|t| t.0));
            times.extend(c.last_transition_time.as_ref().map(|t| t.0));
        }
    }
    for pod in &snapshot.pods {
        times.extend(pod.metadata.creation_timestamp.as_ref().map(|t| t.0));
        for c in pod
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
        {
            times.extend(c.last_transition_time.as_ref().map(|t| t.0));
        }
    }
    times.into_iter().max()
}

/// Parses YAML documents the way `kestrel doctor` reads snapshots (also for checking what
/// it prints).
pub fn parse_yaml(text: &str) -> Result<Vec<Value>, String> {
    kestrel_k8s::yaml::from_multiple(text)
}
