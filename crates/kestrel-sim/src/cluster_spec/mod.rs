//! Kestrel's cluster spec for the simulator (`kind: SimCluster`): node pools stamped out
//! from a shape, and timed cluster events (cordon, uncordon, remove, add).
//!
//! ```yaml
//! apiVersion: sim.kestrel.dev/v1alpha1
//! kind: SimCluster
//! metadata: {name: falcon-ai}
//! spec:
//!   pools:
//!   - name: gpu
//!     count: 32                # node names gpu-00 .. gpu-31
//!     cpu: "224"
//!     memory: 2Ti
//!     gpu: {model: H100-80GB, count: 8, memoryMiB: 81559}
//!     topology: dgx-h100
//!     # gpu.publish: dra publishes the GPUs as NVIDIA's DRA driver does (ResourceSlices):
//!     # pods then claim them through ResourceClaims. With gpu.partitions: mig, each GPU is
//!     # published with its MIG partitions (class mig.nvidia.com) over shared counters.
//!     racks: 4
//!     volumeLimits: {ebs.csi.aws.com: 25}   # CSI volumes each driver attaches per node
//!     taints: [{key: nvidia.com/gpu, value: "true", effect: NoSchedule}]
//!   events:
//!   - {at: "2h", cordon: gpu-03}
//!   - {at: "6h", add: {pool: gpu, count: 4}}
//! ```
//!
//! The GPU topology templates ([`GpuTopology`]) are shared with the Kubernetes Node loader
//! ([`kestrel_objects::nodes`]).

use crate::workload::{ClusterChange, ClusterEvent, SimCluster};
use kestrel_core::{
    parse_quantity, GpuTopology, Labels, NodeSpec, Resources, Taint, TaintEffect, BLOCK_LABEL,
    GPU_PRODUCT_LABEL, GPU_RESOURCE, HOSTNAME_LABEL, RACK_LABEL,
};
use kestrel_objects::duration::parse_duration;
use kestrel_objects::nodes::{DEFAULT_MAX_PODS, GPU_MEMORY_LABEL};
use kestrel_objects::LoadError;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The operating system label every kubelet sets.
const OS_LABEL: &str = "kubernetes.io/os";
/// The CPU architecture label every kubelet sets.
const ARCH_LABEL: &str = "kubernetes.io/arch";
use std::path::Path;

/// The `apiVersion` of a cluster spec.
pub const API_VERSION: &str = "sim.kestrel.dev/v1alpha1";
/// The `kind` of a cluster spec.
pub const KIND: &str = "SimCluster";
/// GPU Feature Discovery's label with the number of GPUs on the node.
pub const GPU_COUNT_LABEL: &str = "nvidia.com/gpu.count";
/// The GPU Operator's label on nodes that have NVIDIA GPUs.
pub const GPU_PRESENT_LABEL: &str = "nvidia.com/gpu.present";

/// A scalar written as a string or a number (`cpu: 224`, `cpu: "224"`, `at: 7200`).
#[derive(Debug, Clone, PartialEq)]
struct Scalar(String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a number")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// The whole document; `apiVersion`, `kind` and `metadata` are checked before it is read.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct ClusterDoc {
    api_version: String,
    kind: String,
    #[serde(default)]
    metadata: Metadata,
    spec: ClusterSpecBody,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Metadata {
    name: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, Scalar>,
    #[serde(default)]
    annotations: BTreeMap<String, Scalar>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterSpecBody {
    pools: Vec<Value>,
    #[serde(default)]
    events: Vec<Value>,
}

/// The whole document in typed form, read straight from the text only to locate a serde
/// error by line and column.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct ClusterDocTyped {
    api_version: String,
    kind: String,
    #[serde(default)]
    metadata: Metadata,
    spec: TypedBody,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct TypedBody {
    pools: Vec<PoolSpec>,
    #[serde(default)]
    events: Vec<EventSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PoolSpec {
    name: String,
    count: u32,
    name_prefix: Option<String>,
    cpu: Scalar,
    memory: Scalar,
    ephemeral_storage: Option<Scalar>,
    pods: Option<u32>,
    gpu: Option<GpuShape>,
    topology: Option<String>,
    racks: Option<u32>,
    nodes_per_rack: Option<u32>,
    block: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, Scalar>,
    #[serde(default)]
    taints: Vec<TaintSpec>,
    #[serde(default)]
    extended_resources: BTreeMap<String, Scalar>,
    /// Most volumes each CSI driver attaches to a node (its CSINode's
    /// `allocatable.count`).
    #[serde(default)]
    volume_limits: BTreeMap<String, u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuShape {
    model: String,
    count: u32,
    #[serde(rename = "memoryMiB")]
    memory_mib: u64,
    /// How the node publishes its GPUs: `devicePlugin` (`nvidia.com/gpu`, the default) or
    /// `dra` (ResourceSlices as NVIDIA's DRA driver writes them; pods claim them).
    publish: Option<String>,
    /// `mig`: with `publish: dra`, each GPU is published with its MIG partitions over
    /// shared counters (partitionable devices), as NVIDIA's driver does on 80 GB GPUs.
    partitions: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaintSpec {
    key: String,
    value: Option<Scalar>,
    effect: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventSpec {
    at: Scalar,
    cordon: Option<String>,
    uncordon: Option<String>,
    remove: Option<String>,
    add: Option<AddSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AddSpec {
    pool: String,
    count: u32,
}

/// The GPUs of node `name` published with their MIG partitions, read back through the
/// DRA reader from the slices NVIDIA's driver would write.
fn mig_gpus(name: &str, shape: &GpuShape) -> Vec<std::sync::Arc<kestrel_core::DraDevice>> {
    let path = std::path::PathBuf::from(name);
    let ctx = kestrel_objects::fields::Ctx {
        path: &path,
        object: format!("ResourceSlice of {name}"),
    };
    let mut book = kestrel_objects::dra::SliceBook::default();
    for slice in kestrel_objects::mig::nvidia_mig_slices(name, shape.count, &shape.model) {
        let slice = serde_json::from_value(slice).expect("a ResourceSlice");
        book.insert(&ctx, &slice).expect("MIG slices read back");
    }
    book.gpus_of(name)
}

/// A pool ready to stamp out nodes.
struct Pool {
    name: String,
    prefix: String,
    width: usize,
    /// Nodes per rack, when the pool is spread over racks.
    per_rack: Option<u32>,
    allocatable: Resources,
    max_pods: u32,
    labels: Labels,
    taints: Vec<Taint>,
    gpu: Option<(GpuShape, GpuTopology)>,
    volume_limits: BTreeMap<String, u32>,
    /// The index the next node gets (initial nodes, then nodes added by events).
    next_index: u32,
}

impl Pool {
    fn node(&mut self) -> NodeSpec {
        let index = self.next_index;
        self.next_index += 1;
        let name = format!("{}{:0width$}", self.prefix, index, width = self.width);
        let mut labels = Labels::new();
        labels.insert(HOSTNAME_LABEL.to_string(), name.clone());
        if let Some(per_rack) = self.per_rack {
            labels.insert(
                RACK_LABEL.to_string(),
                format!("{}-rack-{}", self.name, index / per_rack),
            );
        }
        let (mut gpus, nics) = match &self.gpu {
            Some((shape, topology)) => {
                topology.devices(&shape.model, shape.memory_mib, shape.count)
            }
            None => (Vec::new(), Vec::new()),
        };
        match &self.gpu {
            Some((shape, _)) if shape.partitions.as_deref() == Some("mig") => {
                let published = mig_gpus(&name, shape);
                for (gpu, device) in gpus.iter_mut().zip(published) {
                    gpu.dra = Some(device);
                }
            }
            Some((shape, _)) if shape.publish.as_deref() == Some("dra") => {
                for gpu in &mut gpus {
                    gpu.dra = Some(std::sync::Arc::new(
                        kestrel_objects::dra::nvidia_gpu_device(&name, gpu),
                    ));
                }
            }
            _ => {}
        }
        // The pool's labels (block, GPU Feature Discovery, user labels) come last: a user
        // label may override a generated one, except the hostname (rejected on load).
        labels.extend(self.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        NodeSpec {
            name,
            labels,
            taints: self.taints.clone(),
            unschedulable: false,
            allocatable: self.allocatable.clone(),
            max_pods: self.max_pods,
            gpus,
            nics,
            volume_limits: self.volume_limits.clone(),
            gpu_extended_class: None,
        }
    }
}

/// Parses one part of a document into its typed form, naming the object on error, and the
/// line and column when the typed reading of the whole text finds them.
fn typed<T: DeserializeOwned>(
    path: &Path,
    text: &str,
    object: &str,
    value: Value,
) -> Result<T, LoadError> {
    serde_json::from_value(value).map_err(|e| {
        let located = kestrel_objects::yaml::from_str::<ClusterDocTyped>(text).err();
        let message = match located {
            Some(located) => format!("{e}\n{located}"),
            None => e.to_string(),
        };
        LoadError::new(
            path,
            format!("{message}\nsee the SimCluster format in docs/reference/input-formats.md"),
        )
        .object(object)
    })
}

/// Parses the one YAML document of a file.
fn single_document(path: &Path, text: &str) -> Result<Value, LoadError> {
    let mut docs =
        kestrel_objects::yaml::from_multiple(text).map_err(|e| LoadError::new(path, e))?;
    match docs.len() {
        1 => Ok(docs.remove(0)),
        0 => Err(LoadError::new(
            path,
            format!(
                "the file is empty; write a document with apiVersion: \
                {API_VERSION} and kind: {KIND}"
            ),
        )),
        n => Err(LoadError::new(
            path,
            format!(
                "a cluster spec is one YAML document, this file has {n}; \
                keep one and move the others to their own files"
            ),
        )),
    }
}

fn str_at<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

/// Reads a Kestrel cluster spec (`apiVersion: sim.kestrel.dev/v1alpha1`, `kind: SimCluster`)
/// into the cluster's initial nodes and its timed events, sorted by time (events at the same
/// time keep their order in the file).
pub fn load_cluster_spec(path: &Path, text: &str) -> Result<SimCluster, LoadError> {
    let doc = single_document(path, text)?;
    let object = match doc.get("metadata").and_then(|m| str_at(m, "name")) {
        Some(name) => format!("{KIND} {name}"),
        None => KIND.to_string(),
    };
    let kind = str_at(&doc, "kind").unwrap_or("");
    if kind != KIND {
        let hint = if kind == "Node" || kind.ends_with("List") {
            " (Kubernetes Node manifests are read by the Node loader, not as a cluster spec)"
        } else {
            ""
        };
        return Err(LoadError::new(
            path,
            format!("kind is {kind:?}, expected {KIND:?}{hint}; set kind: {KIND}"),
        )
        .object(object)
        .field("kind"));
    }
    let api_version = str_at(&doc, "apiVersion").unwrap_or("");
    if api_version != API_VERSION {
        return Err(LoadError::new(
            path,
            format!("apiVersion is {api_version:?}; set apiVersion: {API_VERSION}"),
        )
        .object(object)
        .field("apiVersion"));
    }
    let doc: ClusterDoc = typed(path, text, &object, doc)?;

    let mut pools: Vec<Pool> = Vec::new();
    let mut names = BTreeSet::new();
    let mut nodes = Vec::new();
    for (i, value) in doc.spec.pools.into_iter().enumerate() {
        let object = match str_at(&value, "name") {
            Some(name) => format!("pool {name}"),
            None => format!("spec.pools[{i}]"),
        };
        let spec: PoolSpec = typed(path, text, &object, value)?;
        if pools.iter().any(|p| p.name == spec.name) {
            return Err(LoadError::new(
                path,
                "two pools have this name; give each pool its own name",
            )
            .object(object)
            .field("name"));
        }
        let count = spec.count;
        let mut pool = build_pool(path, &object, spec)?;
        for _ in 0..count {
            let node = pool.node();
            add_name(path, &object, "namePrefix", &mut names, &node.name)?;
            nodes.push(node);
        }
        pools.push(pool);
    }

    let mut events = Vec::new();
    for (i, value) in doc.spec.events.into_iter().enumerate() {
        let object = format!("spec.events[{i}]");
        let spec: EventSpec = typed(path, text, &object, value)?;
        let at = parse_duration(&spec.at.0)
            .map_err(|e| LoadError::new(path, e).object(&object).field("at"))?;
        events.push((at, i, object, spec));
    }
    events.sort_by_key(|(at, i, _, _)| (*at, *i));

    // Replay the events in time order, so that each one names a node that exists then.
    let mut live: BTreeSet<String> = nodes.iter().map(|n| n.name.clone()).collect();
    let mut out = Vec::new();
    for (at, _, object, spec) in events {
        let actions = [
            spec.cordon.is_some(),
            spec.uncordon.is_some(),
            spec.remove.is_some(),
            spec.add.is_some(),
        ];
        if actions.iter().filter(|a| **a).count() != 1 {
            return Err(LoadError::new(
                path,
                "an event needs exactly one of cordon, uncordon, remove or add",
            )
            .object(object));
        }
        let existing = |field: &str, name: &str| -> Result<String, LoadError> {
            if live.contains(name) {
                Ok(name.to_string())
            } else {
                Err(LoadError::new(
                    path,
                    format!(
                        "no node {name:?} exists at {}; name a node of the pools or \
                            one added by an earlier event",
                        kestrel_objects::duration::format_duration(at)
                    ),
                )
                .object(&object)
                .field(field))
            }
        };
        let change = if let Some(name) = &spec.cordon {
            ClusterChange::Cordon(existing("cordon", name)?)
        } else if let Some(name) = &spec.uncordon {
            ClusterChange::Uncordon(existing("uncordon", name)?)
        } else if let Some(name) = &spec.remove {
            let name = existing("remove", name)?;
            live.remove(&name);
            ClusterChange::RemoveNode(name)
        } else {
            let add = spec.add.expect("one action is set");
            let Some(pool) = pools.iter_mut().find(|p| p.name == add.pool) else {
                let known: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
                return Err(LoadError::new(
                    path,
                    format!("no pool {:?}; name one of {known:?}", add.pool),
                )
                .object(object)
                .field("add.pool"));
            };
            if add.count == 0 {
                return Err(LoadError::new(path, "adds no node; set count to 1 or more")
                    .object(object)
                    .field("add.count"));
            }
            for _ in 0..add.count {
                let node = pool.node();
                add_name(path, &object, "add.pool", &mut names, &node.name)?;
                live.insert(node.name.clone());
                out.push(ClusterEvent {
                    at,
                    change: ClusterChange::AddNode(node),
                });
            }
            continue;
        };
        out.push(ClusterEvent { at, change });
    }
    Ok(SimCluster { nodes, events: out })
}

fn add_name(
    path: &Path,
    object: &str,
    field: &str,
    names: &mut BTreeSet<String>,
    name: &str,
) -> Result<(), LoadError> {
    if names.insert(name.to_string()) {
        Ok(())
    } else {
        Err(LoadError::new(
            path,
            format!(
                "node name {name:?} is already taken by another pool's node; \
                give the pools different namePrefix values"
            ),
        )
        .object(object)
        .field(field))
    }
}

/// Digits needed to write `n`.
fn digits(n: u32) -> usize {
    n.to_string().len()
}

fn build_pool(path: &Path, object: &str, spec: PoolSpec) -> Result<Pool, LoadError> {
    let err =
        |field: &str, message: String| LoadError::new(path, message).object(object).field(field);
    let quantity = |field: &str, value: &str, scale: i64| {
        let v = parse_quantity(value, scale).map_err(|e| err(field, e.to_string()))?;
        if v < 0 {
            return Err(err(
                field,
                format!("{value:?} is negative; write an amount of 0 or more"),
            ));
        }
        Ok(v)
    };
    let mut allocatable = Resources::new(
        quantity("cpu", &spec.cpu.0, 1000)?,
        quantity("memory", &spec.memory.0, 1)?,
    );
    if let Some(storage) = &spec.ephemeral_storage {
        allocatable.ephemeral_storage_bytes = quantity("ephemeralStorage", &storage.0, 1)?;
    }
    for (name, amount) in &spec.extended_resources {
        let field = format!("extendedResources[{name:?}]");
        if name == GPU_RESOURCE {
            return Err(err(
                &field,
                format!(
                    "{GPU_RESOURCE} comes from the pool's gpu.count; remove it \
                    here and set gpu: {{model, count, memoryMiB}}"
                ),
            ));
        }
        if ["cpu", "memory", "ephemeral-storage", "pods"].contains(&name.as_str()) {
            return Err(err(
                &field,
                format!("{name} is not an extended resource; set it with the pool's own field"),
            ));
        }
        allocatable.set_extended(name, quantity(&field, &amount.0, 1)?);
    }

    let topology = match &spec.topology {
        Some(name) => Some(GpuTopology::parse(name).ok_or_else(|| {
            err(
                "topology",
                format!(
                    "unknown GPU topology {name:?}; use one of {:?}",
                    GpuTopology::NAMES
                ),
            )
        })?),
        None => None,
    };
    let mut labels = Labels::new();
    let gpu = match spec.gpu {
        Some(shape) => {
            let topology = topology.unwrap_or(GpuTopology::Flat);
            topology
                .check_count(shape.count)
                .map_err(|m| err("gpu.count", m))?;
            if shape.count == 0 {
                return Err(err(
                    "gpu.count",
                    "a GPU pool needs 1 or more GPUs per node; remove gpu for a CPU pool".into(),
                ));
            }
            if let Some(other) = shape
                .publish
                .as_deref()
                .filter(|p| !matches!(*p, "dra" | "devicePlugin"))
            {
                return Err(err(
                    "gpu.publish",
                    format!("{other:?} is not a way to publish GPUs; write devicePlugin or dra"),
                ));
            }
            match shape.partitions.as_deref() {
                None => {}
                Some("mig") if shape.publish.as_deref() == Some("dra") => {}
                Some("mig") => {
                    return Err(err(
                        "gpu.partitions",
                        "MIG partitions are published through DRA; add publish: dra".into(),
                    ))
                }
                Some(other) => {
                    return Err(err(
                        "gpu.partitions",
                        format!("{other:?} is not a way to partition GPUs; write mig or remove it"),
                    ))
                }
            }
            if shape.model.trim().is_empty() {
                return Err(err(
                    "gpu.model",
                    "empty GPU model; write e.g. H100-80GB".into(),
                ));
            }
            // As GPU Feature Discovery labels it: spaces become dashes.
            labels.insert(
                GPU_PRODUCT_LABEL.into(),
                shape.model.trim().replace(' ', "-"),
            );
            labels.insert(GPU_COUNT_LABEL.into(), shape.count.to_string());
            labels.insert(GPU_MEMORY_LABEL.into(), shape.memory_mib.to_string());
            labels.insert(GPU_PRESENT_LABEL.into(), "true".into());
            Some((shape, topology))
        }
        None => {
            if let Some(t) = topology {
                return Err(err(
                    "topology",
                    format!(
                        "topology {t} describes GPUs but the pool has no gpu; add \
                        gpu: {{model, count, memoryMiB}} or remove topology"
                    ),
                ));
            }
            None
        }
    };

    let per_rack = match (spec.racks, spec.nodes_per_rack) {
        (Some(_), Some(_)) => {
            return Err(err("racks", "set racks or nodesPerRack, not both".into()))
        }
        (Some(0), None) => return Err(err("racks", "0 racks; set 1 or more".into())),
        (Some(racks), None) if racks > spec.count => {
            return Err(err(
                "racks",
                format!(
                "{racks} racks for {} nodes leaves racks empty; use fewer racks, or nodesPerRack",
                spec.count
            ),
            ))
        }
        (Some(racks), None) => Some(spec.count.div_ceil(racks)),
        (None, Some(0)) => {
            return Err(err(
                "nodesPerRack",
                "0 nodes per rack; set 1 or more".into(),
            ))
        }
        (None, Some(n)) => Some(n),
        (None, None) => None,
    };
    // What every kubelet sets, so charts' `nodeSelector: {kubernetes.io/os: linux}`
    // matches; a pool's own labels may say otherwise (arm64 for Grace nodes).
    labels.insert(OS_LABEL.into(), "linux".into());
    labels.insert(ARCH_LABEL.into(), "amd64".into());
    if let Some(block) = &spec.block {
        labels.insert(BLOCK_LABEL.into(), block.clone());
    }
    for (key, value) in &spec.labels {
        if key == HOSTNAME_LABEL {
            return Err(err(
                &format!("labels[{key:?}]"),
                "the hostname label is set per node to the node's name; remove it".into(),
            ));
        }
        labels.insert(key.clone(), value.0.clone());
    }
    let mut taints = Vec::new();
    for (i, t) in spec.taints.iter().enumerate() {
        let effect = TaintEffect::parse(&t.effect).ok_or_else(|| {
            err(
                &format!("taints[{i}].effect"),
                format!(
                    "unknown taint effect {:?}; use NoSchedule, PreferNoSchedule or NoExecute",
                    t.effect
                ),
            )
        })?;
        if t.key.is_empty() {
            return Err(err(
                &format!("taints[{i}].key"),
                "empty taint key; set a key".into(),
            ));
        }
        taints.push(Taint {
            key: t.key.clone(),
            value: t.value.as_ref().map(|v| v.0.clone()).unwrap_or_default(),
            effect,
        });
    }
    Ok(Pool {
        prefix: spec
            .name_prefix
            .unwrap_or_else(|| format!("{}-", spec.name)),
        width: digits(spec.count.saturating_sub(1)),
        name: spec.name,
        per_rack,
        allocatable,
        max_pods: spec.pods.unwrap_or(DEFAULT_MAX_PODS),
        labels,
        taints,
        gpu,
        volume_limits: spec.volume_limits,
        next_index: 0,
    })
}

#[cfg(test)]
mod tests;
