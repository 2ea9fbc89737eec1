//! Finds and reads simulator inputs: a scenario directory, cluster files and workload
//! files in any of the supported formats, told apart by content.

use crate::cluster_spec::load_cluster_spec;
use crate::manifests::{load_manifests_with, LoadOptions};
use crate::openb;
use crate::workload::{SimCluster, Workload};
use kestrel_objects::nodes::load_kube_nodes;
use kestrel_objects::LoadError;
use std::path::{Path, PathBuf};

/// The file in a scenario directory that describes the cluster.
pub const CLUSTER_FILE: &str = "cluster.yaml";

fn read(path: &Path) -> Result<String, LoadError> {
    std::fs::read_to_string(path)
        .map_err(|e| LoadError::new(path, format!("cannot read the file: {e}")))
}

fn is_csv(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
}

fn is_yaml(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"))
}

/// The `kind` of the first YAML document, if it has one.
fn first_kind(path: &Path, text: &str) -> Result<Option<String>, LoadError> {
    let docs = kestrel_objects::yaml::from_multiple(text).map_err(|e| LoadError::new(path, e))?;
    Ok(docs
        .iter()
        .find(|d| !d.is_null())
        .and_then(|d| d.get("kind"))
        .and_then(|k| k.as_str())
        .map(str::to_string))
}

/// Reads a cluster: a `SimCluster` spec, Kubernetes Node manifests (a `kubectl get nodes
/// -o yaml` List), or an openb node CSV.
pub fn load_cluster_file(path: &Path) -> Result<SimCluster, LoadError> {
    let text = read(path)?;
    if is_csv(path) {
        let nodes = openb::load_nodes(path, &text)?;
        return Ok(SimCluster {
            nodes: nodes.iter().map(openb::OpenbNode::to_node_spec).collect(),
            events: Vec::new(),
        });
    }
    match first_kind(path, &text)?.as_deref() {
        Some("SimCluster") => load_cluster_spec(path, &text),
        Some("Node") | Some("List") | Some("NodeList") => Ok(SimCluster {
            nodes: load_kube_nodes(path, &text)?,
            events: Vec::new(),
        }),
        Some(other) => Err(LoadError::new(
            path,
            format!(
                "a cluster file holds kind {other:?}; expected a SimCluster spec, Kubernetes Node manifests (kubectl get nodes -o yaml) or an openb node CSV"
            ),
        )
        .field("kind")),
        None => Err(LoadError::new(
            path,
            "a cluster file needs a `kind` (SimCluster, Node or List)",
        )
        .field("kind")),
    }
}

/// Reads workload files: Kubernetes manifests (YAML, read together so PriorityClasses and
/// RuntimeClasses may sit in any file) and openb pod CSVs, in the order given.
pub fn load_workload_files(paths: &[PathBuf]) -> Result<Workload, LoadError> {
    load_workload_files_with(paths, &LoadOptions::default())
}

/// [`load_workload_files`] with manifest [`LoadOptions`].
pub fn load_workload_files_with(
    paths: &[PathBuf],
    options: &LoadOptions,
) -> Result<Workload, LoadError> {
    let mut yaml = Vec::new();
    let mut jobs_from_csv = Vec::new();
    for path in paths {
        if is_csv(path) {
            let pods = openb::load_pods(path, &read(path)?)?;
            jobs_from_csv.extend(openb::workload_from_pods(&pods).jobs);
        } else {
            yaml.push((path.clone(), read(path)?));
        }
    }
    let mut workload = if yaml.is_empty() {
        Workload::default()
    } else {
        load_manifests_with(&yaml, options)?
    };
    workload.jobs.extend(jobs_from_csv);
    Ok(workload)
}

/// A scenario directory: `cluster.yaml` and the workload files beside it (`*.yaml`,
/// `*.yml`, `*.csv`, sorted by name).
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioFiles {
    pub cluster: Option<PathBuf>,
    pub workload: Vec<PathBuf>,
}

/// Sorts the paths a user gave into a cluster file and workload files: a directory
/// contributes its `cluster.yaml` (unless a cluster was named) and its other input files.
pub fn resolve_paths(
    paths: &[PathBuf],
    cluster: Option<PathBuf>,
) -> Result<ScenarioFiles, LoadError> {
    let mut files = ScenarioFiles {
        cluster,
        workload: Vec::new(),
    };
    for path in paths {
        if path.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| LoadError::new(path, format!("cannot read the directory: {e}")))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && (is_yaml(p) || is_csv(p)))
                .collect();
            entries.sort();
            for entry in entries {
                if entry.file_name().is_some_and(|n| n == CLUSTER_FILE) {
                    if files.cluster.is_none() {
                        files.cluster = Some(entry);
                    }
                } else {
                    files.workload.push(entry);
                }
            }
        } else if path.exists() {
            files.workload.push(path.clone());
        } else {
            return Err(LoadError::new(path, "no such file or directory"));
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_gives_its_cluster_and_sorted_workload_files() {
        let dir = std::env::temp_dir().join(format!("kestrel-inputs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["cluster.yaml", "b.yaml", "a.yml", "c.csv", "notes.md"] {
            std::fs::write(dir.join(f), "").unwrap();
        }
        let files = resolve_paths(std::slice::from_ref(&dir), None).unwrap();
        assert_eq!(files.cluster, Some(dir.join("cluster.yaml")));
        assert_eq!(
            files.workload,
            vec![dir.join("a.yml"), dir.join("b.yaml"), dir.join("c.csv")]
        );
        let named =
            resolve_paths(std::slice::from_ref(&dir), Some(PathBuf::from("x.yaml"))).unwrap();
        assert_eq!(named.cluster, Some(PathBuf::from("x.yaml")));
        let missing = resolve_paths(&[dir.join("nope")], None).unwrap_err();
        assert!(missing.to_string().contains("nope"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn cluster_files_of_the_wrong_kind_are_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("kestrel-inputs-kind-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cluster.yaml");
        std::fs::write(&path, "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n").unwrap();
        let e = load_cluster_file(&path).unwrap_err().to_string();
        assert!(
            e.contains("cluster.yaml") && e.contains("\"Pod\"") && e.contains("kind"),
            "{e}"
        );
        std::fs::write(&path, "a: [1,\n").unwrap();
        let e = load_cluster_file(&path).unwrap_err().to_string();
        assert!(e.contains("not valid YAML"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
