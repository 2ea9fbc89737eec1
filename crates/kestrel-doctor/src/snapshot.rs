//! Reading a snapshot: Nodes, Pods and Events from YAML files or the API server.

use super::events::{event_error, EventLog};
use super::plural;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kestrel_core::{parse_quantity, PodSpec};
use kestrel_objects::documents::{read_documents, Document};
use kestrel_objects::nodes::node_from_kube;
use kestrel_objects::pods::Catalog;
use kestrel_objects::LoadError;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The Nodes, Pods and Events of a cluster, from files or the API server.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Where the objects came from: file names, or "the API server".
    pub source: String,
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    /// The Events, aggregated by signature as they were read.
    pub events: EventLog,
    /// Nodes' real use from the metrics API (`metrics.k8s.io` NodeMetrics, what `kubectl
    /// top nodes` reads), by node name; empty when not given or not served.
    pub node_usage: BTreeMap<String, NodeUsage>,
    /// DaemonSets (`apps/v1`): their names and rollout counts, for the operators' ones.
    pub daemonsets: Vec<DaemonSetCounts>,
    /// DRA (`resource.k8s.io/v1`): the devices drivers publish, and the claims pods wait
    /// on; empty where DRA is not served.
    pub slices: Vec<k8s_openapi::api::resource::v1::ResourceSlice>,
    pub claims: Vec<k8s_openapi::api::resource::v1::ResourceClaim>,
    /// Things worth knowing about the input (objects ignored, duplicates).
    pub notes: Vec<String>,
}

/// A DaemonSet's name and how many nodes should run, run and have ready its pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonSetCounts {
    pub namespace: String,
    pub name: String,
    pub desired: i64,
    pub scheduled: i64,
    pub ready: i64,
}

impl DaemonSetCounts {
    /// From a DaemonSet object (its `status`); `None` when it names no DaemonSet.
    pub fn from_value(v: &Value) -> Option<DaemonSetCounts> {
        let meta = |k: &str| v.get("metadata")?.get(k)?.as_str().map(str::to_string);
        let n = |k: &str| {
            v.get("status")
                .and_then(|s| s.get(k))
                .and_then(Value::as_i64)
                .unwrap_or(0)
        };
        Some(DaemonSetCounts {
            namespace: meta("namespace").unwrap_or_default(),
            name: meta("name")?,
            desired: n("desiredNumberScheduled"),
            scheduled: n("currentNumberScheduled"),
            ready: n("numberReady"),
        })
    }
}

/// A node's CPU and memory in use (NodeMetrics `usage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeUsage {
    pub cpu_milli: i64,
    pub memory_bytes: i64,
}

impl Snapshot {
    /// Reads one NodeMetrics object (`metrics.k8s.io/v1beta1`). Errors name the field and
    /// the fix; the caller adds where the object came from.
    pub fn add_node_metrics(&mut self, v: &Value) -> Result<(), (String, String)> {
        let name = v
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                (
                    "metadata.name".to_string(),
                    "a NodeMetrics without the node's name".to_string(),
                )
            })?;
        let quantity = |key: &str, scale: i64| -> Result<i64, (String, String)> {
            let field = format!("usage.{key}");
            let text = match v.get("usage").and_then(|u| u.get(key)) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => {
                    return Err((
                        field,
                        "missing; NodeMetrics carry usage: {cpu, memory} (kubectl get --raw /apis/metrics.k8s.io/v1beta1/nodes)".to_string(),
                    ))
                }
            };
            parse_quantity(&text, scale).map_err(|e| (field, e.to_string()))
        };
        let usage = NodeUsage {
            cpu_milli: quantity("cpu", 1000)?,
            memory_bytes: quantity("memory", 1)?,
        };
        self.node_usage.insert(name.to_string(), usage);
        Ok(())
    }
}

/// What reading one file keeps: the snapshot, seen names, ignored kinds.
struct Reader<'a> {
    snap: &'a mut Snapshot,
    node_names: &'a mut BTreeMap<String, PathBuf>,
    pod_keys: &'a mut BTreeSet<String>,
    ignored: BTreeMap<String, usize>,
    path: &'a Path,
}

impl Reader<'_> {
    fn object(&mut self, doc: Document) -> Result<(), LoadError> {
        let path = self.path;
        match doc.kind() {
            "Node" => {
                let node: Node = doc.typed(path)?;
                let spec = node_from_kube(path, &node)?;
                if let Some(first) = self.node_names.get(&spec.name) {
                    self.snap.notes.push(format!(
                        "{}: {}: a second Node with this name (the first is in {}); kept the first",
                        path.display(),
                        doc.object(),
                        first.display()
                    ));
                    return Ok(());
                }
                self.node_names.insert(spec.name, path.to_path_buf());
                self.snap.nodes.push(node);
            }
            "Pod" => {
                let pod: Pod = doc.typed(path)?;
                let spec = pod_spec(path, &pod)?;
                if !self.pod_keys.insert(spec.key()) {
                    self.snap.notes.push(format!(
                        "{}: {}: a second Pod with this name; kept the first",
                        path.display(),
                        doc.object()
                    ));
                    return Ok(());
                }
                self.snap.pods.push(pod);
            }
            "Event" => {
                let api = doc
                    .value
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("v1");
                if !matches!(api, "v1" | "events.k8s.io/v1" | "events.k8s.io/v1beta1") {
                    return Err(LoadError::new(
                        path,
                        format!(
                            "apiVersion {api:?} is not one Kestrel reads for Event; set apiVersion: \
                             v1 or events.k8s.io/v1"
                        ),
                    )
                    .object(doc.object())
                    .field("apiVersion"));
                }
                self.snap
                    .events
                    .add(&doc.value)
                    .map_err(|e| event_error(path, doc.object(), e))?;
            }
            "ResourceSlice" => self.snap.slices.push(doc.typed(path)?),
            "ResourceClaim" => self.snap.claims.push(doc.typed(path)?),
            "DaemonSet" => {
                let counts = DaemonSetCounts::from_value(&doc.value).ok_or_else(|| {
                    LoadError::new(path, "a DaemonSet without a name; add metadata.name")
                        .object(doc.object())
                        .field("metadata.name")
                })?;
                self.snap.daemonsets.push(counts);
            }
            "NodeMetrics" => {
                let api = doc
                    .value
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("metrics.k8s.io/v1beta1");
                if !api.starts_with("metrics.k8s.io/") {
                    return Err(LoadError::new(
                        path,
                        format!("apiVersion {api:?} is not the metrics API's; set apiVersion: metrics.k8s.io/v1beta1"),
                    )
                    .object(doc.object())
                    .field("apiVersion"));
                }
                self.snap
                    .add_node_metrics(&doc.value)
                    .map_err(|e| event_error(path, doc.object(), e))?;
            }
            other => *self.ignored.entry(other.to_string()).or_default() += 1,
        }
        Ok(())
    }
}

/// Reads a snapshot from YAML texts: `kubectl get events,nodes,pods -A -o yaml` output (a
/// `v1 List`), or any number of files and documents holding Node, Pod and Event objects
/// (`v1` or `events.k8s.io/v1`). Objects of other kinds are ignored with a note. A file of
/// one document (kubectl's List) is read as the parser streams it, so its Events are
/// aggregated one by one and never held whole. Errors name the file, the object and the
/// field: text that is not YAML, an object Kestrel cannot read, or no Node at all.
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
        let mut reader = Reader {
            snap: &mut snap,
            node_names: &mut node_names,
            pod_keys: &mut pod_keys,
            ignored: BTreeMap::new(),
            path,
        };
        if single_document(text) {
            stream_document(path, text, &mut reader)?;
        } else {
            for doc in read_documents(path, text, None)? {
                reader.object(doc)?;
            }
        }
        let ignored = std::mem::take(&mut reader.ignored);
        if !ignored.is_empty() {
            let n: usize = ignored.values().sum();
            let kinds: Vec<String> = ignored.iter().map(|(k, n)| format!("{k} ({n})")).collect();
            snap.notes.push(format!(
                "{}: ignored {n} object{} of {} kestrel doctor does not read: {}",
                path.display(),
                plural(n),
                if kinds.len() == 1 && n == 1 {
                    "a kind"
                } else {
                    "kinds"
                },
                kinds.join(", ")
            ));
        }
    }
    if snap.events.duplicates > 0 {
        snap.notes.push(format!(
            "{} Events were listed twice (both APIs, or two files); each counted once",
            snap.events.duplicates
        ));
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
                "{what}; kestrel doctor needs the cluster's Nodes (and its Pods and Events): \
                 export them with kubectl get events,nodes,pods -A -o yaml"
            ),
        ));
    }
    Ok(snap)
}

/// A text of at most one YAML document (no `---` after content).
fn single_document(text: &str) -> bool {
    let mut content = false;
    for line in text.lines() {
        let t = line.trim_end();
        if t == "---" || t.starts_with("--- ") {
            if content {
                return false;
            }
        } else if !t.is_empty() && !t.starts_with('#') {
            content = true;
        }
    }
    true
}

/// Reads one document as the parser streams it: a List's items one at a time (items
/// without a kind wait for the List's kind, which kubectl writes after them), anything
/// else as one object.
fn stream_document(path: &Path, text: &str, reader: &mut Reader) -> Result<(), LoadError> {
    let mut failed: Option<LoadError> = None;
    let mut untyped: Vec<(usize, Value)> = Vec::new();
    let mut index = 0usize;
    let top = {
        let mut sink = |item: Value| -> Result<(), String> {
            let i = index;
            index += 1;
            if !item.is_object() {
                failed = Some(
                    LoadError::new(
                        path,
                        "not a Kubernetes object (a mapping with apiVersion, kind and metadata)",
                    )
                    .object(format!("document 1 items[{i}]")),
                );
                return Err("stopped".to_string());
            }
            if item.get("kind").and_then(Value::as_str).is_none() {
                untyped.push((i, item));
                return Ok(());
            }
            reader.object(Document::new(item, 1, Some(i))).map_err(|e| {
                failed = Some(e);
                "stopped".to_string()
            })
        };
        kestrel_objects::yaml::with_document(text, |de| {
            serde::de::DeserializeSeed::deserialize(TopSeed { sink: &mut sink }, de)
        })
    };
    if let Some(e) = failed {
        return Err(e);
    }
    let top = top.map_err(|e| LoadError::new(path, e))?;
    let Some(mut top) = top else {
        return Ok(());
    };
    let kind = top
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if kind.ends_with("List") {
        let item_kind = kind.strip_suffix("List").filter(|k| !k.is_empty());
        for (i, mut item) in untyped {
            if let (Value::Object(map), Some(k)) = (&mut item, item_kind) {
                map.insert("kind".to_string(), Value::String(k.to_string()));
            }
            reader.object(Document::new(item, 1, Some(i)))?;
        }
        return Ok(());
    }
    if index > 0 {
        return Err(LoadError::new(
            path,
            format!("a {kind} with items is not a List; write kind: List"),
        )
        .object("document 1")
        .field("kind"));
    }
    {
        let doc = Document::new(Value::Object(std::mem::take(&mut top)), 1, None);
        if doc.kind().is_empty() {
            return Err(LoadError::new(
                path,
                "not a Kubernetes object (a mapping with apiVersion, kind and metadata)",
            )
            .object(doc.position()));
        }
        reader.object(doc)?;
    }
    Ok(())
}

/// The top-level mapping of a document, its `items` handed to `sink` one at a time
/// instead of kept. `None`: an empty document.
struct TopSeed<'s, F> {
    sink: &'s mut F,
}

impl<'de, F: FnMut(Value) -> Result<(), String>> serde::de::DeserializeSeed<'de>
    for TopSeed<'_, F>
{
    type Value = Option<serde_json::Map<String, Value>>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, F: FnMut(Value) -> Result<(), String>> serde::de::Visitor<'de> for TopSeed<'_, F> {
    type Value = Option<serde_json::Map<String, Value>>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a Kubernetes object or List (a mapping)")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    // Anything but a mapping is not an object: an empty map says so to the caller.
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Some(serde_json::Map::new()))
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Some(serde_json::Map::new()))
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Some(serde_json::Map::new()))
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Some(serde_json::Map::new()))
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Some(serde_json::Map::new()))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Some(serde_json::Map::new()))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut top = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" {
                map.next_value_seed(ItemsSeed {
                    sink: &mut *self.sink,
                })?;
            } else {
                let value: Value = map.next_value()?;
                top.insert(key, value);
            }
        }
        Ok(Some(top))
    }
}

struct ItemsSeed<'s, F> {
    sink: &'s mut F,
}

impl<'de, F: FnMut(Value) -> Result<(), String>> serde::de::DeserializeSeed<'de>
    for ItemsSeed<'_, F>
{
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, F: FnMut(Value) -> Result<(), String>> serde::de::Visitor<'de> for ItemsSeed<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("items: a list of objects")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(item) = seq.next_element::<Value>()? {
            (self.sink)(item).map_err(serde::de::Error::custom)?;
        }
        Ok(())
    }
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
    times.extend(snapshot.events.newest);
    times.into_iter().max()
}

/// Parses YAML documents the way `kestrel doctor` reads snapshots (also for checking what
/// it prints).
pub fn parse_yaml(text: &str) -> Result<Vec<Value>, String> {
    kestrel_objects::yaml::from_multiple(text)
}
