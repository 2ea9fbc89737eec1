//! YAML files as Kubernetes objects: documents, `List` items, and where each sits in its
//! file (for errors that name the object).

use crate::error::LoadError;
use crate::gangs::is_gang_document;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::path::Path;

/// The kinds a workload file may hold besides the workload kinds of the registry
/// ([`crate::kinds::KINDS`]), which come after `Pod` in [`supported_kinds`].
const OTHER_SUPPORTED_KINDS: [&str; 17] = [
    "PodGroup (Kestrel, scheduler-plugins, Volcano, Kubernetes)",
    "Topology (Kestrel, Kueue)",
    "PriorityClass",
    "WorkloadPriorityClass (kueue.x-k8s.io)",
    "RuntimeClass",
    "Namespace",
    "ClusterQueue",
    "LocalQueue",
    "Cohort",
    "ResourceFlavor",
    "Queue (Volcano, KAI)",
    "ResourceQuota",
    "LimitRange",
    "PodDisruptionBudget",
    "DeviceClass",
    "ResourceClaim",
    "ResourceClaimTemplate",
];

/// The kinds a workload file may hold (plus `List`s of them): `Pod`, the workload kinds
/// of the registry and the objects they refer to, then the rest.
pub fn supported_kinds() -> Vec<String> {
    let workloads = crate::kinds::KINDS.iter().map(|k| k.display());
    let referenced =
        crate::kinds::referenced_kinds().map(|(kind, _, by)| format!("{kind} ({})", by.group()));
    std::iter::once("Pod".to_string())
        .chain(workloads)
        .chain(referenced)
        .chain(OTHER_SUPPORTED_KINDS.iter().map(|k| k.to_string()))
        .collect()
}

/// The apiVersions Kestrel reads of the kinds that are not workload kinds of the
/// registry but that several projects (or several versions with different fields)
/// define; another apiVersion is refused by name, never half read.
const OTHER_KIND_VERSIONS: [(&str, &[&str]); 2] = [
    (
        "PodGroup",
        &[
            "scheduling.kestrel.dev/v1alpha1",
            "scheduling.x-k8s.io/v1alpha1",
            "scheduling.volcano.sh/v1beta1",
            "scheduling.k8s.io/v1beta1",
            "scheduling.k8s.io/v1alpha3",
        ],
    ),
    (
        "Topology",
        &[
            "scheduling.kestrel.dev/v1alpha1",
            "kueue.x-k8s.io/v1alpha1",
            "kueue.x-k8s.io/v1beta1",
            "kueue.x-k8s.io/v1beta2",
        ],
    ),
];

/// The apiVersions Kestrel reads of `kind` (a workload kind of the registry, or one of
/// the other kinds several projects define); empty for other kinds.
pub fn kind_versions(kind: &str) -> Vec<String> {
    let mut versions = crate::kinds::versions_of(kind);
    if let Some((_, other)) = OTHER_KIND_VERSIONS.iter().find(|(k, _)| *k == kind) {
        versions.extend(other.iter().map(|v| v.to_string()));
    }
    versions
}

/// Why Kestrel does not read `kind` at `api_version`, for a kind of [`kind_versions`] at
/// a version it does not read; `None` otherwise.
pub fn unread_version(kind: &str, api_version: &str) -> Option<String> {
    let versions = kind_versions(kind);
    (!versions.is_empty() && !versions.iter().any(|v| v == api_version)).then(|| {
        format!(
            "apiVersion {api_version:?} is not one Kestrel reads for {kind}; Kestrel reads \
             {kind} at {}: set one of them (their fields are the ones Kestrel reads)",
            versions.join(", ")
        )
    })
}

/// The fields of `input` that `typed` (the same object read into its Kubernetes type) does
/// not hold: names no Kubernetes version defines there, as kubectl's strict validation
/// refuses them (`spec.containers[0].resoures`). Null values are skipped.
pub fn unknown_fields<T: serde::Serialize>(input: &Value, typed: &T) -> Vec<String> {
    fn walk(input: &Value, known: &Value, at: &str, out: &mut Vec<String>) {
        match (input, known) {
            (Value::Object(fields), Value::Object(kept)) => {
                for (key, value) in fields {
                    if value.is_null() {
                        continue;
                    }
                    let here = match at {
                        "" => key.clone(),
                        _ => format!("{at}.{key}"),
                    };
                    match kept.get(key) {
                        Some(k) => walk(value, k, &here, out),
                        None => out.push(here),
                    }
                }
            }
            (Value::Array(items), Value::Array(kept)) => {
                for (i, (item, k)) in items.iter().zip(kept).enumerate() {
                    walk(item, k, &format!("{at}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Ok(known) = serde_json::to_value(typed) {
        walk(input, &known, "", &mut out);
    }
    out
}

/// Kinds without a namespace, named `Kind name` rather than `Kind namespace/name`.
const CLUSTER_SCOPED: [&str; 12] = [
    "Node",
    "NodeMetrics",
    "DeviceClass",
    "ResourceSlice",
    "Queue",
    "WorkloadPriorityClass",
    "Namespace",
    "PriorityClass",
    "RuntimeClass",
    "ClusterQueue",
    "Cohort",
    "ResourceFlavor",
];

fn is_cluster_scoped(kind: &str) -> bool {
    CLUSTER_SCOPED.contains(&kind)
        || crate::kinds::referenced_kinds().any(|(k, cluster, _)| cluster && k == kind)
}

/// One Kubernetes object read from a file: a document, or an item of a List document.
pub struct Document {
    pub value: Value,
    /// 1-based document number in the file.
    number: usize,
    /// Index in the List's `items`, for objects inside a List.
    item: Option<usize>,
}

impl Document {
    /// Document `number` (1-based) of a file, or item `item` of the List it holds.
    pub fn new(value: Value, number: usize, item: Option<usize>) -> Document {
        Document {
            value,
            number,
            item,
        }
    }

    pub fn kind(&self) -> &str {
        self.value.get("kind").and_then(Value::as_str).unwrap_or("")
    }

    /// A PodGroup or Topology of a project whose gangs Kestrel reads.
    pub fn is_gang_document(&self) -> bool {
        let api_version = self
            .value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        is_gang_document(self.kind(), api_version)
    }

    pub fn meta_str(&self, key: &str) -> Option<&str> {
        self.value
            .get("metadata")
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    }

    /// Where the object is in its file: `document 3` or `document 3 items[2]`.
    pub fn position(&self) -> String {
        match self.item {
            None => format!("document {}", self.number),
            Some(i) => format!("document {} items[{i}]", self.number),
        }
    }

    /// `Pod llm/train-0`, `PriorityClass training`, or `Job at document 3` when unnamed.
    pub fn object(&self) -> String {
        let kind = self.kind();
        match self.meta_str("name") {
            Some(name) if is_cluster_scoped(kind) => format!("{kind} {name}"),
            Some(name) => {
                let ns = self.meta_str("namespace").unwrap_or("default");
                format!("{kind} {ns}/{name}")
            }
            None => format!("{kind} at {}", self.position()),
        }
    }

    /// The object as its k8s-openapi type; the API version must be the one Kestrel reads.
    pub fn typed<T: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        path: &Path,
    ) -> Result<T, LoadError> {
        if let Some(v) = self.value.get("apiVersion").and_then(Value::as_str) {
            if v != T::API_VERSION {
                return Err(LoadError::new(
                    path,
                    format!(
                        "apiVersion {v:?} is not one Kestrel reads for {}; set apiVersion: {}",
                        T::KIND,
                        T::API_VERSION
                    ),
                )
                .object(self.object())
                .field("apiVersion"));
            }
        }
        serde_json::from_value(self.value.clone()).map_err(|e| {
            LoadError::new(
                path,
                format!(
                    "does not match the Kubernetes {} {} schema: {e}",
                    T::API_VERSION,
                    T::KIND
                ),
            )
            .object(self.object())
        })
    }
}

/// Reads every object of a YAML file: each document, with `List` documents (`kind: List` or
/// `kind: <Kind>List`) replaced by their items. Items without a kind take it from a typed
/// list's name (`NodeList` -> `Node`), else `item_kind`.
pub fn read_documents(
    path: &Path,
    text: &str,
    item_kind: Option<&str>,
) -> Result<Vec<Document>, LoadError> {
    let docs = crate::yaml::from_multiple(text).map_err(|e| LoadError::new(path, e))?;
    let mut out = Vec::new();
    for (i, value) in docs.into_iter().enumerate() {
        let number = i + 1;
        let doc = Document {
            value,
            number,
            item: None,
        };
        check_object(path, &doc)?;
        let kind = doc.kind().to_string();
        if !kind.ends_with("List") {
            out.push(doc);
            continue;
        }
        let items = match doc.value.get("items") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items.clone(),
            Some(_) => {
                return Err(
                    LoadError::new(path, "items is not a list; write items: [...]")
                        .object(doc.object())
                        .field("items"),
                )
            }
        };
        let default_kind = kind
            .strip_suffix("List")
            .filter(|k| !k.is_empty())
            .or(item_kind);
        for (j, mut value) in items.into_iter().enumerate() {
            if let (Value::Object(map), Some(k)) = (&mut value, default_kind) {
                map.entry("kind").or_insert_with(|| Value::String(k.into()));
            }
            let item = Document {
                value,
                number,
                item: Some(j),
            };
            check_object(path, &item)?;
            out.push(item);
        }
    }
    Ok(out)
}

fn check_object(path: &Path, doc: &Document) -> Result<(), LoadError> {
    if !doc.value.is_object() {
        return Err(LoadError::new(
            path,
            "not a Kubernetes object (a mapping with apiVersion, kind and metadata)",
        )
        .object(doc.position()));
    }
    if doc.kind().is_empty() {
        return Err(LoadError::new(
            path,
            format!(
                "no kind; every object needs apiVersion and kind (one of {:?})",
                supported_kinds()
            ),
        )
        .object(doc.position())
        .field("kind"));
    }
    Ok(())
}
