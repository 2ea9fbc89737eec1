//! Kubernetes Node manifests (`kubectl get nodes -o yaml`, or `kind: Node` documents) as
//! the simulator's nodes.
//!
//! - Resources come from `status.allocatable`, resource by resource falling back to
//!   `status.capacity`: `cpu`, `memory`, `ephemeral-storage`, `pods` (default 110),
//!   `nvidia.com/gpu` (the number of GPU devices); every other resource is an extended one.
//! - GPUs: model from the label `nvidia.com/gpu.product` (else `unknown`), memory from
//!   `nvidia.com/gpu.memory` (MiB, else 0).
//! - GPU topology: the annotation `kestrel.dev/gpu-topology` names a template
//!   ([`GpuTopology`]: `dgx-h100`, `pcie-4gpu`, `none`). Without it, a node with 8 GPUs is
//!   taken for `dgx-h100` when it carries the `nvidia.com/gpu.clique` label (NVLink
//!   fabric), or when its product names an SXM-class part (`A100`, `H100`, `H200`) and not
//!   a PCIe card (`PCIE` in the product); every other node gets `none`. (An A100 DGX has
//!   200 Gb NICs where the template says 400 Gb; annotate such nodes if that matters.)
//! - GPUs published through DRA: the file may hold the nodes' ResourceSlices too
//!   (`kubectl get nodes,resourceslices -o yaml`); NVIDIA's GPU devices become the nodes'
//!   GPUs ([`crate::dra`]).
//! - CSI volume limits: the file may hold the nodes' CSINodes too (`kubectl get
//!   nodes,csinodes -o yaml`); each driver's `allocatable.count` limits the volumes it
//!   attaches to the node of the same name.
//! - Taints from `spec.taints`, cordon from `spec.unschedulable`; the hostname label is
//!   added when missing.

use crate::documents::{read_documents, Document};
use crate::error::LoadError;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use k8s_openapi::api::storage::v1::CSINode;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kestrel_core::{
    parse_quantity, GpuTopology, NodeSpec, Resources, Taint, TaintEffect, GPU_CLIQUE_LABEL,
    GPU_PRODUCT_LABEL, GPU_RESOURCE, HOSTNAME_LABEL,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// GPU Feature Discovery's label with each GPU's memory in MiB.
pub const GPU_MEMORY_LABEL: &str = "nvidia.com/gpu.memory";
/// The kubelet's default `--max-pods`.
pub const DEFAULT_MAX_PODS: u32 = 110;

/// Node annotation naming the node's GPU topology template.
pub const GPU_TOPOLOGY_ANNOTATION: &str = "kestrel.dev/gpu-topology";

/// Reads Kubernetes Node objects (any number of documents, `kind: List` or `NodeList`
/// included) into node specs, in file order. Documents of other kinds are errors.
pub fn load_kube_nodes(path: &Path, text: &str) -> Result<Vec<NodeSpec>, LoadError> {
    let mut names = BTreeSet::new();
    let mut nodes = Vec::new();
    let mut slices = crate::dra::SliceBook::default();
    let mut limits: BTreeMap<String, BTreeMap<String, u32>> = BTreeMap::new();
    for doc in read_documents(path, text, Some("Node"))? {
        let object = doc.object();
        if doc.kind() == "CSINode" {
            let csi: CSINode = doc.typed(path)?;
            let name = csi.metadata.name.clone().unwrap_or_default();
            limits.insert(name, crate::volumes::csi_limits(&csi));
            continue;
        }
        if doc.kind() == "ResourceSlice" {
            let slice: ResourceSlice = doc.typed(path)?;
            let ctx = crate::fields::Ctx { path, object };
            slices.insert(&ctx, &slice)?;
            continue;
        }
        if doc.kind() == "DeviceTaintRule" {
            let rule: crate::device_taint_rule::DeviceTaintRule = doc.typed(path)?;
            let ctx = crate::fields::Ctx { path, object };
            slices.insert_taint_rule(&ctx, &rule)?;
            continue;
        }
        if doc.kind() != "Node" {
            return Err(LoadError::new(
                path,
                format!(
                    "a node file holds only Node, ResourceSlice, DeviceTaintRule and CSINode objects, this is a {}; move it to a workload file",
                    doc.kind()
                ),
            )
            .object(object)
            .field("kind"));
        }
        let node = node_spec(path, &doc)?;
        if !names.insert(node.name.clone()) {
            return Err(LoadError::new(
                path,
                "a second Node has this name; node names must be unique, remove or rename one",
            )
            .object(object)
            .field("metadata.name"));
        }
        nodes.push(node);
    }
    if nodes.is_empty() {
        return Err(LoadError::new(
            path,
            "no Node objects in the file; export them with kubectl get nodes -o yaml",
        ));
    }
    if let Some(unknown) = slices.nodes().into_iter().find(|n| !names.contains(*n)) {
        return Err(LoadError::new(
            path,
            format!("a ResourceSlice publishes devices of node {unknown:?}, which the file does not hold; add the Node or remove its slices"),
        ));
    }
    if let Some(unknown) = limits.keys().find(|n| !names.contains(*n)) {
        return Err(LoadError::new(
            path,
            format!("a CSINode names node {unknown:?}, which the file does not hold; add the Node or remove its CSINode"),
        )
        .object(format!("CSINode {unknown}")));
    }
    for node in &mut nodes {
        node.volume_limits = limits.remove(&node.name).unwrap_or_default();
        let gpus = slices.gpus_of(&node.name);
        if let Some(warning) = crate::dra::attach_gpus(node, &gpus) {
            return Err(LoadError::new(path, warning).object(format!("Node {}", node.name)));
        }
    }
    Ok(nodes)
}

fn node_spec(path: &Path, doc: &Document) -> Result<NodeSpec, LoadError> {
    let node: Node = doc.typed(path)?;
    node_spec_of(path, &doc.object(), &node)
}

/// One Kubernetes Node as the scheduler's node (the rules in the module docs). `source`
/// names where the object came from in errors (a file, or the API server for the live
/// scheduler). Shared with `kestrel-live`, which reads Nodes from a watch.
pub fn node_from_kube(source: &Path, node: &Node) -> Result<NodeSpec, LoadError> {
    let object = match node.metadata.name.as_deref() {
        Some(name) if !name.is_empty() => format!("Node {name}"),
        _ => "Node".to_string(),
    };
    node_spec_of(source, &object, node)
}

fn node_spec_of(path: &Path, object: &str, node: &Node) -> Result<NodeSpec, LoadError> {
    let err =
        |field: &str, message: String| LoadError::new(path, message).object(object).field(field);
    let name = node
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            err(
                "metadata.name",
                "a Node needs a name; set metadata.name".into(),
            )
        })?;
    let mut labels = node.metadata.labels.clone().unwrap_or_default();
    labels
        .entry(HOSTNAME_LABEL.to_string())
        .or_insert_with(|| name.clone());
    let annotations = node.metadata.annotations.clone().unwrap_or_default();
    let spec = node.spec.clone().unwrap_or_default();

    let mut taints = Vec::new();
    for (i, t) in spec.taints.iter().flatten().enumerate() {
        let effect = TaintEffect::parse(&t.effect).ok_or_else(|| {
            err(
                &format!("spec.taints[{i}].effect"),
                format!(
                    "unknown taint effect {:?}; use NoSchedule, PreferNoSchedule or NoExecute",
                    t.effect
                ),
            )
        })?;
        taints.push(Taint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect,
        });
    }

    let status = node.status.clone().unwrap_or_default();
    let empty = BTreeMap::new();
    let allocatable = status.allocatable.as_ref().unwrap_or(&empty);
    let capacity = status.capacity.as_ref().unwrap_or(&empty);
    if allocatable.is_empty() && capacity.is_empty() {
        return Err(err(
            "status.allocatable",
            "the Node has neither status.allocatable nor \
                status.capacity; add status.allocatable with cpu, memory \
                and pods (kubectl get nodes -o yaml includes them)"
                .into(),
        ));
    }
    let resource_names: BTreeSet<&String> = allocatable.keys().chain(capacity.keys()).collect();
    let mut resources = Resources::default();
    let mut max_pods = DEFAULT_MAX_PODS;
    let mut gpu_count = 0u32;
    for resource in resource_names {
        let (field, Quantity(value)) = match allocatable.get(resource) {
            Some(q) => (format!("status.allocatable.{resource}"), q),
            None => (format!("status.capacity.{resource}"), &capacity[resource]),
        };
        let amount = |scale| {
            let v = parse_quantity(value, scale).map_err(|e| err(&field, e.to_string()))?;
            if v < 0 {
                return Err(err(
                    &field,
                    format!("{value:?} is negative; write 0 or more"),
                ));
            }
            Ok(v)
        };
        let count = |what: &str| {
            let v = amount(1)?;
            u32::try_from(v).map_err(|_| err(&field, format!("{value:?} is too many {what}")))
        };
        match resource.as_str() {
            "cpu" => resources.cpu_milli = amount(1000)?,
            "memory" => resources.memory_bytes = amount(1)?,
            "ephemeral-storage" => resources.ephemeral_storage_bytes = amount(1)?,
            "pods" => max_pods = count("pods")?,
            GPU_RESOURCE => gpu_count = count("GPUs")?,
            other => resources.set_extended(other, amount(1)?),
        }
    }

    let model = labels
        .get(GPU_PRODUCT_LABEL)
        .cloned()
        .unwrap_or_else(|| "unknown".to_string());
    let memory_mib = match labels.get(GPU_MEMORY_LABEL) {
        Some(v) => v.trim().parse::<u64>().map_err(|_| {
            err(
                &format!("metadata.labels[\"{GPU_MEMORY_LABEL}\"]"),
                format!("{v:?} is not a whole number of MiB; write e.g. \"81559\""),
            )
        })?,
        None => 0,
    };
    let topology = match annotations.get(GPU_TOPOLOGY_ANNOTATION) {
        Some(name) => {
            let field = format!("metadata.annotations[\"{GPU_TOPOLOGY_ANNOTATION}\"]");
            let topology = GpuTopology::parse(name).ok_or_else(|| {
                err(
                    &field,
                    format!(
                        "unknown GPU topology {name:?}; use one of {:?}",
                        GpuTopology::NAMES
                    ),
                )
            })?;
            topology.check_count(gpu_count).map_err(|m| {
                err(
                    &field,
                    format!("{m} (the GPU count is status.allocatable.{GPU_RESOURCE})"),
                )
            })?;
            topology
        }
        None => infer_topology(gpu_count, &model, labels.contains_key(GPU_CLIQUE_LABEL)),
    };
    let (gpus, nics) = if gpu_count == 0 {
        (Vec::new(), Vec::new())
    } else {
        topology.devices(&model, memory_mib, gpu_count)
    };

    Ok(NodeSpec {
        name,
        labels,
        taints,
        unschedulable: spec.unschedulable.unwrap_or(false),
        allocatable: resources,
        max_pods,
        gpus,
        nics,
        // From the node's CSINode, a separate object, where one is known.
        volume_limits: Default::default(),
        gpu_extended_class: None,
    })
}

/// The topology of a node without the annotation (see the module docs).
pub fn infer_topology(gpu_count: u32, product: &str, has_clique: bool) -> GpuTopology {
    let product = product.to_ascii_uppercase();
    let sxm_class =
        ["A100", "H100", "H200"].iter().any(|p| product.contains(p)) && !product.contains("PCIE");
    if gpu_count == 8 && (has_clique || sxm_class) {
        GpuTopology::DgxH100
    } else {
        GpuTopology::Flat
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Vec<NodeSpec>, LoadError> {
        load_kube_nodes(Path::new("nodes.yaml"), text)
    }

    const LIST: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: gpu-0
    labels:
      kubernetes.io/hostname: gpu-0
      nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
      nvidia.com/gpu.memory: "81559"
      topology.kestrel.dev/rack: r1
  spec:
    taints:
    - {key: nvidia.com/gpu, value: "true", effect: NoSchedule}
  status:
    capacity:
      cpu: "224"
      memory: 2113412Mi
      hugepages-1Gi: "0"
    allocatable:
      cpu: 223500m
      memory: 2060000Mi
      ephemeral-storage: "28000000000000"
      pods: "250"
      nvidia.com/gpu: "8"
      rdma/rdma_shared_device_a: "1k"
- apiVersion: v1
  kind: Node
  metadata:
    name: cpu-0
  spec:
    unschedulable: true
  status:
    capacity: {cpu: 64, memory: 256Gi}
"#;

    #[test]
    fn node_list_maps_allocatable_gpus_taints_and_labels() {
        let nodes = load(LIST).unwrap();
        assert_eq!(nodes.len(), 2);
        let g = &nodes[0];
        assert_eq!(g.name, "gpu-0");
        assert_eq!(
            g.allocatable.cpu_milli, 223_500,
            "allocatable wins over capacity"
        );
        assert_eq!(g.allocatable.memory_bytes, 2_060_000 << 20);
        assert_eq!(g.allocatable.ephemeral_storage_bytes, 28_000_000_000_000);
        assert_eq!(g.allocatable.extended("rdma/rdma_shared_device_a"), 1000);
        assert_eq!(g.allocatable.extended(GPU_RESOURCE), 0, "GPUs are devices");
        assert_eq!(g.allocatable.extended("hugepages-1Gi"), 0);
        assert_eq!(g.max_pods, 250);
        assert_eq!(g.taints[0].to_string(), "nvidia.com/gpu=true:NoSchedule");
        assert!(!g.unschedulable);
        assert_eq!(g.rack(), Some("r1"));
        assert_eq!(g.gpus.len(), 8);
        assert_eq!(g.gpus[7].model, "NVIDIA-H100-80GB-HBM3");
        assert_eq!(g.gpus[7].memory_mib, 81559);
        // Inferred dgx-h100: NVLink island, NUMA halves, a NIC per GPU.
        assert_eq!(g.gpus[7].nvlink_island, Some(0));
        assert_eq!(g.gpus[7].numa_node, 1);
        assert_eq!(g.nics.len(), 8);

        let c = &nodes[1];
        assert_eq!(
            c.allocatable.cpu_milli, 64_000,
            "capacity when no allocatable"
        );
        assert_eq!(c.allocatable.memory_bytes, 256 << 30);
        assert_eq!(c.max_pods, DEFAULT_MAX_PODS);
        assert!(c.unschedulable);
        assert!(c.gpus.is_empty() && c.nics.is_empty());
        assert_eq!(c.labels.get(HOSTNAME_LABEL).unwrap(), "cpu-0");
    }

    #[test]
    fn single_documents_and_the_topology_annotation() {
        let text = r#"
apiVersion: v1
kind: Node
metadata:
  name: l40s-0
  labels: {nvidia.com/gpu.product: NVIDIA-L40S}
  annotations: {kestrel.dev/gpu-topology: pcie-4gpu}
status:
  allocatable: {cpu: "64", memory: 512Gi, nvidia.com/gpu: "4"}
---
apiVersion: v1
kind: Node
metadata: {name: pcie-0, labels: {nvidia.com/gpu.product: NVIDIA-H100-PCIe}}
status:
  allocatable: {cpu: "64", memory: 512Gi, nvidia.com/gpu: "8"}
"#;
        let nodes = load(text).unwrap();
        let l = &nodes[0];
        assert_eq!(l.gpus.len(), 4);
        assert_eq!(l.gpus[2].numa_node, 1);
        assert_eq!(l.gpus[2].pcie_switch, Some(1));
        assert!(l.gpus.iter().all(|g| g.nvlink_island.is_none()));
        assert_eq!(l.gpus[0].memory_mib, 0);
        let p = &nodes[1];
        assert_eq!(p.gpus.len(), 8);
        assert!(
            p.gpus.iter().all(|g| g.nvlink_island.is_none()),
            "PCIe H100"
        );
    }

    #[test]
    fn topology_inference_rule() {
        use GpuTopology::*;
        assert_eq!(infer_topology(8, "NVIDIA-H100-80GB-HBM3", false), DgxH100);
        assert_eq!(infer_topology(8, "NVIDIA-A100-SXM4-80GB", false), DgxH100);
        assert_eq!(infer_topology(8, "NVIDIA-H200", false), DgxH100);
        assert_eq!(infer_topology(8, "NVIDIA-H100-PCIe", false), Flat);
        assert_eq!(infer_topology(4, "NVIDIA-H100-80GB-HBM3", false), Flat);
        assert_eq!(infer_topology(8, "NVIDIA-L40S", false), Flat);
        assert_eq!(infer_topology(8, "NVIDIA-GB200", true), DgxH100);
        assert_eq!(infer_topology(8, "unknown", false), Flat);
    }

    fn assert_names(e: &str, parts: &[&str]) {
        assert!(e.starts_with("nodes.yaml: "), "{e}");
        for p in parts {
            assert!(e.contains(p), "{e:?} lacks {p:?}");
        }
    }

    fn node(meta: &str, status: &str) -> String {
        format!("apiVersion: v1\nkind: Node\nmetadata: {meta}\nstatus: {status}\n")
    }

    #[test]
    fn errors_name_file_node_and_field() {
        let e = load(&node("{name: n1}", "{allocatable: {cpu: 8, memory: 12Gx}}")).unwrap_err();
        assert_names(
            &e.to_string(),
            &["Node n1", "field status.allocatable.memory", "\"12Gx\""],
        );
        let e = load(&node("{name: n1}", "{capacity: {cpu: lots}}")).unwrap_err();
        assert_names(&e.to_string(), &["Node n1", "field status.capacity.cpu"]);
        let e = load(&node("{name: n1}", "{}")).unwrap_err();
        assert_names(
            &e.to_string(),
            &[
                "Node n1",
                "field status.allocatable",
                "add status.allocatable",
            ],
        );
        let e = load(&node(
            "{name: n1, annotations: {kestrel.dev/gpu-topology: nvl72}}",
            "{allocatable: {cpu: 8, nvidia.com/gpu: 8}}",
        ))
        .unwrap_err();
        assert_names(
            &e.to_string(),
            &["Node n1", "kestrel.dev/gpu-topology", "nvl72", "dgx-h100"],
        );
        let e = load(&node(
            "{name: n1, annotations: {kestrel.dev/gpu-topology: dgx-h100}}",
            "{allocatable: {cpu: 8, nvidia.com/gpu: 4}}",
        ))
        .unwrap_err();
        assert_names(
            &e.to_string(),
            &[
                "Node n1",
                "kestrel.dev/gpu-topology",
                "describes 8 GPUs",
                "has 4",
            ],
        );
        let e = load(&node(
            "{name: n1, labels: {nvidia.com/gpu.memory: 80GB}}",
            "{allocatable: {cpu: 8, nvidia.com/gpu: 1}}",
        ))
        .unwrap_err();
        assert_names(
            &e.to_string(),
            &["Node n1", "nvidia.com/gpu.memory", "\"80GB\""],
        );
        let two = format!(
            "{}---\n{}",
            node("{name: n1}", "{allocatable: {cpu: 8}}"),
            node("{name: n1}", "{allocatable: {cpu: 8}}")
        );
        assert_names(
            &load(&two).unwrap_err().to_string(),
            &["Node n1", "metadata.name", "unique"],
        );
        let e = load("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n").unwrap_err();
        assert_names(
            &e.to_string(),
            &[
                "Pod default/p",
                "field kind",
                "only Node, ResourceSlice, DeviceTaintRule and CSINode objects",
            ],
        );
        let e = load("apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nspec: {taints: [{key: a, effect: Never}]}\nstatus: {allocatable: {cpu: 1}}\n").unwrap_err();
        assert_names(
            &e.to_string(),
            &["Node n1", "spec.taints[0].effect", "Never"],
        );
        let e = load("apiVersion: v2\nkind: Node\nmetadata: {name: n1}\n").unwrap_err();
        assert_names(
            &e.to_string(),
            &["Node n1", "field apiVersion", "apiVersion: v1"],
        );
        // Items of a NodeList may omit their kind.
        let list = "apiVersion: v1\nkind: NodeList\nitems:\n- metadata: {name: a}\n  status: {allocatable: {cpu: 1}}\n";
        assert_eq!(load(list).unwrap()[0].name, "a");
        let e = load("apiVersion: v1\nkind: List\nitems: []\n").unwrap_err();
        assert_names(&e.to_string(), &["no Node objects"]);
    }
}
