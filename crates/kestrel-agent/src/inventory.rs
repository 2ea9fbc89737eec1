//! What discovery finds on a node: GPUs, GPU NICs and how they are wired, and how that maps
//! onto the scheduler's topology templates.

use kestrel_core::GpuTopology;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// One GPU as discovery sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Gpu {
    /// NVML's index (the order `nvidia-smi` lists GPUs in); the scheduler's
    /// `kestrel.dev/gpu-indices` names GPUs by it.
    pub index: u32,
    /// `GPU-...`: the device ID the device plugin advertises.
    pub uuid: String,
    /// The product name as the driver reports it (`NVIDIA H100 80GB HBM3`).
    pub model: String,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u64,
    /// Sysfs form, `0000:17:00.0`.
    pub pci_bus_id: String,
    pub numa_node: u32,
    /// Indices of the GPUs this one reaches over NVLink, directly or through NVSwitches.
    pub nvlink_peers: Vec<u32>,
    /// The PCIe switch the GPU hangs off (numbered per node), when sysfs shows one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pcie_switch: Option<u32>,
    pub mig_enabled: bool,
    /// The NVLink fabric clique (`<cluster uuid>.<clique id>`), on multi-node NVLink systems.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clique: Option<String>,
}

/// One RDMA NIC (InfiniBand or RoCE) usable for GPU traffic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Nic {
    /// The RDMA device name (`mlx5_0`).
    pub name: String,
    /// The Ethernet interface of a RoCE NIC (`ens1f0np0`); none for InfiniBand.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netdev: Option<String>,
    pub gbps: u32,
    pub numa_node: u32,
    pub pci_bus_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pcie_switch: Option<u32>,
}

/// Everything discovery found, plus what it could not read (never fatal: a node with an
/// unreadable NIC still serves its GPUs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Inventory {
    pub gpus: Vec<Gpu>,
    pub nics: Vec<Nic>,
    #[serde(skip)]
    pub warnings: Vec<String>,
}

impl Inventory {
    pub fn gpu_by_uuid(&self, uuid: &str) -> Option<&Gpu> {
        self.gpus.iter().find(|g| g.uuid == uuid)
    }

    pub fn gpu_by_index(&self, index: u32) -> Option<&Gpu> {
        self.gpus.iter().find(|g| g.index == index)
    }

    /// NVLink islands: each GPU's island id (islands numbered from 0 in order of their
    /// lowest GPU index); `None` for a GPU without NVLink peers.
    pub fn nvlink_islands(&self) -> BTreeMap<u32, Option<u32>> {
        let mut island_of: BTreeMap<u32, Option<u32>> = BTreeMap::new();
        let mut next = 0;
        let mut gpus: Vec<&Gpu> = self.gpus.iter().collect();
        gpus.sort_by_key(|g| g.index);
        for gpu in gpus {
            if island_of.contains_key(&gpu.index) {
                continue;
            }
            if gpu.nvlink_peers.is_empty() {
                island_of.insert(gpu.index, None);
                continue;
            }
            // Peers reached through peers are on the same island.
            let mut stack = vec![gpu.index];
            while let Some(i) = stack.pop() {
                if island_of.contains_key(&i) {
                    continue;
                }
                island_of.insert(i, Some(next));
                if let Some(g) = self.gpu_by_index(i) {
                    stack.extend(g.nvlink_peers.iter().copied());
                }
            }
            next += 1;
        }
        island_of
    }

    /// The scheduler's template that describes this node: the same GPU count, the same
    /// NUMA node per GPU and the same NVLink islands. PCIe switches and NICs are not
    /// compared (sysfs numbers switches differently from the templates). A node no template
    /// fits is `none`: the scheduler then treats its GPUs as interchangeable, which never
    /// promises a link that is not there.
    pub fn template(&self) -> GpuTopology {
        let n = self.gpus.len() as u32;
        if n == 0 {
            return GpuTopology::Flat;
        }
        let islands = self.nvlink_islands();
        for template in [GpuTopology::DgxH100, GpuTopology::Pcie4Gpu] {
            if template.gpu_count() != Some(n) {
                continue;
            }
            let (devices, _) = template.devices("", 0, n);
            let numa_matches = devices.iter().all(|d| {
                self.gpu_by_index(d.index)
                    .is_some_and(|g| g.numa_node == d.numa_node)
            });
            let theirs: BTreeMap<u32, Option<u32>> =
                devices.iter().map(|d| (d.index, d.nvlink_island)).collect();
            if numa_matches && same_partition(&islands, &theirs) {
                return template;
            }
        }
        GpuTopology::Flat
    }

    /// The GPU model as GPU Feature Discovery writes it in `nvidia.com/gpu.product`: the
    /// product name with spaces as dashes. Mixed models: the first GPU's.
    pub fn product_label(&self) -> Option<String> {
        self.gpus.first().map(|g| label_value(&g.model))
    }

    /// Per-GPU memory in MiB (`nvidia.com/gpu.memory`): the smallest, so a pod that fits
    /// the label fits every GPU.
    pub fn memory_mib(&self) -> Option<u64> {
        self.gpus.iter().map(|g| g.memory_mib).min()
    }
}

/// Whether two island assignments group the same GPUs together (ids may differ).
fn same_partition(a: &BTreeMap<u32, Option<u32>>, b: &BTreeMap<u32, Option<u32>>) -> bool {
    let groups = |m: &BTreeMap<u32, Option<u32>>| -> BTreeSet<BTreeSet<u32>> {
        let mut by: BTreeMap<Option<u32>, BTreeSet<u32>> = BTreeMap::new();
        let mut singles = BTreeSet::new();
        for (gpu, island) in m {
            match island {
                Some(_) => {
                    by.entry(*island).or_default().insert(*gpu);
                }
                None => {
                    singles.insert(BTreeSet::from([*gpu]));
                }
            }
        }
        by.into_values().chain(singles).collect()
    };
    a.keys().eq(b.keys()) && groups(a) == groups(b)
}

/// A Kubernetes label value: letters, digits, `-`, `_`, `.`; at most 63 characters,
/// starting and ending alphanumeric.
pub fn label_value(s: &str) -> String {
    let mapped: String = s
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let cut: String = mapped.chars().take(63).collect();
    cut.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, numa: u32, peers: &[u32]) -> Gpu {
        Gpu {
            index,
            uuid: format!("GPU-{index}"),
            model: "NVIDIA H100 80GB HBM3".into(),
            memory_mib: 81559,
            pci_bus_id: format!("0000:{:02x}:00.0", index + 1),
            numa_node: numa,
            nvlink_peers: peers.to_vec(),
            pcie_switch: None,
            mig_enabled: false,
            clique: None,
        }
    }

    fn inventory(gpus: Vec<Gpu>) -> Inventory {
        Inventory {
            gpus,
            ..Inventory::default()
        }
    }

    #[test]
    fn eight_nvswitch_gpus_on_two_numa_nodes_are_a_dgx() {
        let gpus = (0..8)
            .map(|i| {
                let peers: Vec<u32> = (0..8).filter(|p| *p != i).collect();
                gpu(i, i / 4, &peers)
            })
            .collect();
        let inv = inventory(gpus);
        assert_eq!(inv.template(), GpuTopology::DgxH100);
        assert!(inv.nvlink_islands().values().all(|i| *i == Some(0)));
        assert_eq!(inv.product_label().unwrap(), "NVIDIA-H100-80GB-HBM3");
    }

    #[test]
    fn layouts_without_a_template_are_flat() {
        // Two NVLink pairs: no template has that.
        let inv = inventory(vec![
            gpu(0, 0, &[1]),
            gpu(1, 0, &[0]),
            gpu(2, 1, &[3]),
            gpu(3, 1, &[2]),
        ]);
        assert_eq!(inv.template(), GpuTopology::Flat);
        let islands = inv.nvlink_islands();
        assert_eq!(islands[&0], islands[&1]);
        assert_ne!(islands[&0], islands[&2]);
        // Four PCIe GPUs, two per NUMA node: pcie-4gpu.
        let inv = inventory((0..4).map(|i| gpu(i, i / 2, &[])).collect());
        assert_eq!(inv.template(), GpuTopology::Pcie4Gpu);
        // The same four with the wrong NUMA placement are not.
        let inv = inventory((0..4).map(|i| gpu(i, 0, &[])).collect());
        assert_eq!(inv.template(), GpuTopology::Flat);
        assert_eq!(inventory(vec![]).template(), GpuTopology::Flat);
    }

    #[test]
    fn label_values_are_kubernetes_safe() {
        assert_eq!(
            label_value(" NVIDIA A100-SXM4-80GB "),
            "NVIDIA-A100-SXM4-80GB"
        );
        assert_eq!(label_value("(weird)"), "weird");
        assert_eq!(label_value(&"x".repeat(80)).len(), 63);
    }
}
