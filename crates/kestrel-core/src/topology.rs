//! GPU topology templates: how the GPUs and GPU NICs of common servers are wired.

use crate::model::{GpuDevice, Nic};
use std::fmt;

/// How a node's GPUs and GPU NICs are wired: the templates a cluster spec's `topology` and a
/// Node's `kestrel.dev/gpu-topology` annotation name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuTopology {
    /// `dgx-h100`: 8 GPUs on one NVLink island (id 0); GPUs 0-3 on NUMA node 0, 4-7 on 1;
    /// one 400 Gb NIC per GPU (`mlx5_0`..`mlx5_7`); PCIe switch `s` holds GPUs and NICs
    /// `2s` and `2s+1`.
    DgxH100,
    /// `pcie-4gpu`: 4 GPUs without NVLink; GPUs 0-1 on NUMA node 0, 2-3 on 1; one PCIe switch
    /// per pair. No GPU NICs: RDMA NIC placement on PCIe servers varies by vendor, and an
    /// invented NIC would make NIC-aware placement favour hardware that may not exist.
    Pcie4Gpu,
    /// `none`: any number of GPUs, all on NUMA node 0, no NVLink, no PCIe switch known.
    Flat,
}

impl GpuTopology {
    /// Template names, as written in files.
    pub const NAMES: [&'static str; 3] = ["dgx-h100", "pcie-4gpu", "none"];

    pub fn parse(name: &str) -> Option<GpuTopology> {
        match name {
            "dgx-h100" => Some(GpuTopology::DgxH100),
            "pcie-4gpu" => Some(GpuTopology::Pcie4Gpu),
            "none" => Some(GpuTopology::Flat),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            GpuTopology::DgxH100 => "dgx-h100",
            GpuTopology::Pcie4Gpu => "pcie-4gpu",
            GpuTopology::Flat => "none",
        }
    }

    /// The number of GPUs the template describes; `None`: any number.
    pub fn gpu_count(self) -> Option<u32> {
        match self {
            GpuTopology::DgxH100 => Some(8),
            GpuTopology::Pcie4Gpu => Some(4),
            GpuTopology::Flat => None,
        }
    }

    /// Why `count` GPUs do not fit the template, if they do not.
    pub fn check_count(self, count: u32) -> Result<(), String> {
        match self.gpu_count() {
            Some(n) if n != count => Err(format!(
                "GPU topology {} describes {n} GPUs but the node has {count}; \
                 use topology \"none\" or make the GPU count {n}",
                self.name()
            )),
            _ => Ok(()),
        }
    }

    /// Builds the GPU devices and GPU NICs of a node. `count` must pass
    /// [`GpuTopology::check_count`] (templates with a fixed count ignore it).
    pub fn devices(self, model: &str, memory_mib: u64, count: u32) -> (Vec<GpuDevice>, Vec<Nic>) {
        let count = self.gpu_count().unwrap_or(count);
        let gpu = |index: u32, numa_node: u32, nvlink_island, pcie_switch| GpuDevice {
            index,
            model: model.to_string(),
            memory_mib,
            numa_node,
            nvlink_island,
            pcie_switch,
            dra: None,
        };
        match self {
            GpuTopology::DgxH100 => {
                let gpus = (0..count)
                    .map(|i| gpu(i, i / 4, Some(0), Some(i / 2)))
                    .collect();
                let nics = (0..count)
                    .map(|i| Nic {
                        name: format!("mlx5_{i}"),
                        gbps: 400,
                        numa_node: i / 4,
                        pcie_switch: Some(i / 2),
                    })
                    .collect();
                (gpus, nics)
            }
            GpuTopology::Pcie4Gpu => {
                let gpus = (0..count)
                    .map(|i| gpu(i, i / 2, None, Some(i / 2)))
                    .collect();
                (gpus, Vec::new())
            }
            GpuTopology::Flat => (
                (0..count).map(|i| gpu(i, 0, None, None)).collect(),
                Vec::new(),
            ),
        }
    }
}

impl fmt::Display for GpuTopology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
