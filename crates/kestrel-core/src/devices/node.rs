//! A node's published devices and whether their taints are tolerated.

use super::*;
use crate::model::{GpuDevice, NodeSpec};
use crate::types::{GpuAssignment, PartitionRef};
use std::sync::Arc;

impl NodeSpec {
    /// Whether the node's GPUs are published through DRA (then it has no `nvidia.com/gpu`).
    pub fn gpus_are_dra(&self) -> bool {
        self.gpus.iter().any(|g| g.dra.is_some())
    }

    /// The published device `(driver, pool, name)`: a GPU or a partition of one.
    pub fn dra_device(&self, driver: &str, pool: &str, name: &str) -> Option<DeviceRef> {
        let is = |d: &DraDevice| d.driver == driver && d.pool == pool && d.name == name;
        self.gpus.iter().enumerate().find_map(|(p, g)| {
            let dra = g.dra.as_ref()?;
            if is(dra) {
                return Some(DeviceRef::whole(p));
            }
            let k = dra
                .partitions
                .as_ref()?
                .devices
                .iter()
                .position(|x| is(&x.device))?;
            Some(DeviceRef {
                position: p,
                partition: Some(k as u8),
            })
        })
    }

    /// The published device behind `device`.
    pub fn dra_of(&self, device: DeviceRef) -> Option<&Arc<DraDevice>> {
        let dra = self.gpus.get(device.position)?.dra.as_ref()?;
        match device.partition {
            None => Some(dra),
            Some(k) => Some(&dra.partitions.as_ref()?.devices.get(k as usize)?.device),
        }
    }

    /// The partitions of the GPU at `position`, if its driver publishes any.
    pub fn partitions_of(&self, position: usize) -> Option<&Partitions> {
        self.gpus.get(position)?.dra.as_ref()?.partitions.as_deref()
    }

    /// Whether some GPU of the node is published with partitions.
    pub fn has_partitions(&self) -> bool {
        (0..self.gpus.len()).any(|p| self.partitions_of(p).is_some())
    }

    /// The assignment that holds `devices`: GPUs whole, or partitions; `None` for a mix,
    /// which Kestrel does not give one pod.
    pub fn assignment_of(&self, devices: &[DeviceRef]) -> Option<GpuAssignment> {
        let (whole, parts): (Vec<&DeviceRef>, Vec<&DeviceRef>) =
            devices.iter().partition(|d| d.partition.is_none());
        match (whole.is_empty(), parts.is_empty()) {
            (true, true) => Some(GpuAssignment::None),
            (false, true) => {
                let mut indices: Vec<u32> =
                    whole.iter().map(|d| self.gpus[d.position].index).collect();
                indices.sort_unstable();
                indices.dedup();
                Some(GpuAssignment::Whole(indices))
            }
            (true, false) => {
                let mut refs: Vec<PartitionRef> = parts
                    .iter()
                    .map(|d| {
                        let k = d.partition.expect("a partition");
                        let milli = self
                            .partitions_of(d.position)
                            .map_or(1, |ps| ps.devices[k as usize].milli);
                        PartitionRef {
                            index: self.gpus[d.position].index,
                            partition: k,
                            milli,
                        }
                    })
                    .collect();
                refs.sort_unstable();
                refs.dedup();
                Some(GpuAssignment::Partitions(refs))
            }
            (false, false) => None,
        }
    }

    /// The assignment that holds the devices an allocation names (`None` when the node
    /// does not publish one of them). A mix of whole GPUs and partitions, which another
    /// scheduler may write, holds the partitions' GPUs whole: never less than is taken.
    pub fn allocation_assignment(&self, results: &[DeviceResult]) -> Option<GpuAssignment> {
        let devices = results
            .iter()
            .map(|r| self.dra_device(&r.driver, &r.pool, &r.device))
            .collect::<Option<Vec<DeviceRef>>>()?;
        self.assignment_of(&devices).or_else(|| {
            let whole: Vec<DeviceRef> = devices
                .iter()
                .map(|d| DeviceRef::whole(d.position))
                .collect();
            self.assignment_of(&whole)
        })
    }
}

pub(crate) fn tolerates_all(device: &GpuDevice, tolerations: &[crate::model::Toleration]) -> bool {
    device
        .dra
        .as_ref()
        .is_none_or(|d| tolerates(d, tolerations))
}

pub(super) fn tolerates(device: &DraDevice, tolerations: &[crate::model::Toleration]) -> bool {
    device.taints.iter().all(|taint| {
        taint.effect == crate::model::TaintEffect::PreferNoSchedule
            || tolerations.iter().any(|t| t.tolerates(taint))
    })
}
