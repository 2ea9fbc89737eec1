//! What the agent writes on its Node, in the forms the scheduler's Node reader
//! ([`kestrel_objects::nodes`]) already reads:
//!
//! - GPU Feature Discovery's labels: `nvidia.com/gpu.product` (the model, spaces as
//!   dashes), `nvidia.com/gpu.count`, `nvidia.com/gpu.memory` (MiB per GPU), and
//!   `nvidia.com/gpu.clique` on multi-node NVLink systems;
//! - `kestrel.dev/gpu-topology`: the topology template that matches the discovered
//!   NVLink islands and NUMA nodes (`dgx-h100`, `pcie-4gpu`, else `none`), which the
//!   scheduler expands into GPUs, islands, NUMA nodes, PCIe switches and NICs;
//! - `kestrel.dev/gpu-inventory`: everything discovery found (per GPU its UUID, PCI bus
//!   id, NUMA node, NVLink peers, PCIe switch, MIG mode; per NIC its speed and placement),
//!   as JSON for people and tools. The scheduler does not read it.
//!
//! Only keys whose value changed are patched; keys the agent owns are removed when they no
//! longer apply (no clique, no GPUs).

use crate::cluster::{Cluster, MetaChanges};
use crate::inventory::{label_value, Inventory};
use kestrel_core::{GPU_CLIQUE_LABEL, GPU_PRODUCT_LABEL};
use kestrel_objects::nodes::{GPU_MEMORY_LABEL, GPU_TOPOLOGY_ANNOTATION};
use std::collections::BTreeMap;

/// GPU Feature Discovery's label with the number of GPUs on the node.
pub const GPU_COUNT_LABEL: &str = "nvidia.com/gpu.count";
/// Node annotation with the discovered inventory (JSON).
pub const GPU_INVENTORY_ANNOTATION: &str = "kestrel.dev/gpu-inventory";

/// The labels and annotations the node should carry (`None`: should not carry).
pub fn desired(inv: &Inventory) -> (MetaChanges, MetaChanges) {
    let mut labels = MetaChanges::new();
    let mut annotations = MetaChanges::new();
    let has_gpus = !inv.gpus.is_empty();
    labels.insert(GPU_PRODUCT_LABEL.into(), inv.product_label());
    labels.insert(
        GPU_COUNT_LABEL.into(),
        has_gpus.then(|| inv.gpus.len().to_string()),
    );
    labels.insert(
        GPU_MEMORY_LABEL.into(),
        inv.memory_mib().map(|m| m.to_string()),
    );
    let clique = inv.gpus.iter().find_map(|g| g.clique.as_deref());
    labels.insert(GPU_CLIQUE_LABEL.into(), clique.map(label_value));
    annotations.insert(
        GPU_TOPOLOGY_ANNOTATION.into(),
        has_gpus.then(|| inv.template().name().to_string()),
    );
    annotations.insert(
        GPU_INVENTORY_ANNOTATION.into(),
        has_gpus.then(|| serde_json::to_string(inv).expect("inventory serialises")),
    );
    (labels, annotations)
}

/// The entries of `want` that differ from `have`.
pub fn changes(want: &MetaChanges, have: &BTreeMap<String, String>) -> MetaChanges {
    want.iter()
        .filter(|(k, v)| have.get(*k) != v.as_ref())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Brings the node's labels and annotations in line with the inventory. Returns whether
/// anything was written.
pub async fn publish(cluster: &Cluster, node: &str, inv: &Inventory) -> Result<bool, kube::Error> {
    let (want_labels, want_annotations) = desired(inv);
    let (labels, annotations) = cluster.node_meta(node).await?;
    let labels = changes(&want_labels, &labels);
    let annotations = changes(&want_annotations, &annotations);
    if labels.is_empty() && annotations.is_empty() {
        return Ok(false);
    }
    cluster.patch_node_meta(node, &labels, &annotations).await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::GpuBackend;
    use crate::fake::FakeBackend;
    use kestrel_objects::nodes::node_from_kube;
    use std::path::Path;

    #[tokio::test]
    async fn published_labels_read_back_as_the_same_node() {
        let fake = FakeBackend::parse(
            Path::new("gpus.yaml"),
            "gpu: {model: NVIDIA H100 80GB HBM3, count: 8, memoryMiB: 81559}\n\
             topology: dgx-h100\nclique: \"abc.1\"\n",
        )
        .unwrap();
        let inv = fake.discover().unwrap();
        let cluster = Cluster::Memory(Box::default());
        cluster
            .patch_node_meta(
                "gpu-0",
                &[("team".to_string(), Some("a".to_string()))].into(),
                &MetaChanges::new(),
            )
            .await
            .unwrap();
        assert!(publish(&cluster, "gpu-0", &inv).await.unwrap());
        assert!(
            !publish(&cluster, "gpu-0", &inv).await.unwrap(),
            "nothing changed"
        );
        let Cluster::Memory(m) = &cluster else {
            unreachable!()
        };
        let labels = m.labels.lock().unwrap().clone();
        let annotations = m.annotations.lock().unwrap().clone();
        assert_eq!(labels["nvidia.com/gpu.product"], "NVIDIA-H100-80GB-HBM3");
        assert_eq!(labels["nvidia.com/gpu.count"], "8");
        assert_eq!(labels["nvidia.com/gpu.memory"], "81559");
        assert_eq!(labels["nvidia.com/gpu.clique"], "abc.1");
        assert_eq!(labels["team"], "a", "other labels are left alone");
        assert_eq!(annotations[GPU_TOPOLOGY_ANNOTATION], "dgx-h100");
        let detail: serde_json::Value =
            serde_json::from_str(&annotations[GPU_INVENTORY_ANNOTATION]).unwrap();
        assert_eq!(detail["gpus"][5]["numaNode"], 1);
        assert_eq!(detail["nics"].as_array().unwrap().len(), 8);

        // The scheduler's Node reader sees the node the agent described.
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gpu-0", "labels": labels, "annotations": annotations},
            "status": {"allocatable": {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"}}
        }))
        .unwrap();
        let spec = node_from_kube(Path::new("api"), &node).unwrap();
        assert_eq!(spec.gpus.len(), 8);
        assert_eq!(spec.gpus[0].model, "NVIDIA-H100-80GB-HBM3");
        assert_eq!(spec.gpus[0].memory_mib, 81559);
        for (got, want) in spec.gpus.iter().zip(&inv.gpus) {
            assert_eq!(got.numa_node, want.numa_node);
            assert_eq!(got.nvlink_island, Some(0));
        }
        assert_eq!(spec.nics.len(), 8);

        // No clique any more: the label goes.
        let mut inv2 = inv.clone();
        for g in &mut inv2.gpus {
            g.clique = None;
        }
        assert!(publish(&cluster, "gpu-0", &inv2).await.unwrap());
        assert!(!m
            .labels
            .lock()
            .unwrap()
            .contains_key("nvidia.com/gpu.clique"));
        // No GPUs: every key the agent owns goes.
        publish(&cluster, "gpu-0", &Inventory::default())
            .await
            .unwrap();
        assert_eq!(
            m.labels.lock().unwrap().keys().collect::<Vec<_>>(),
            ["team"]
        );
        assert!(m.annotations.lock().unwrap().is_empty());
    }
}
