//! DRA GPUs on nodes and in pods: a node's published GPUs, `nvidia.com/gpu` served through
//! a DeviceClass (KEP-5004), and the device NVIDIA's driver publishes for a GPU.

use super::*;
use crate::error::LoadError;
use crate::fields::Ctx;
use k8s_openapi::api::core::v1 as core;
use kestrel_core::{
    DeviceAttribute, DeviceClaim, DraDevice, Filter, GpuDevice, NodeSpec, GPU_CLIQUE_LABEL,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub(super) fn gpu_index(device: &DraDevice) -> Option<u32> {
    match device.attributes.get(&format!("{NVIDIA_GPU_DRIVER}/index")) {
        Some(DeviceAttribute::Int(i)) => u32::try_from(*i).ok(),
        _ => None,
    }
}

/// Gives a node the GPUs DRA publishes for it, laid out by the topology template its count
/// and product imply ([`crate::nodes::infer_topology`]). A node whose device plugin already
/// advertises `nvidia.com/gpu` keeps those: the same GPUs published twice would be counted
/// twice. Returns a warning in that case.
pub fn attach_gpus(node: &mut NodeSpec, devices: &[Arc<DraDevice>]) -> Option<String> {
    if devices.is_empty() {
        return None;
    }
    if !node.gpus.is_empty() && !node.gpus_are_dra() {
        return Some(format!(
            "node {} advertises nvidia.com/gpu and its GPUs are published through DRA too; \
             Kestrel counts the device plugin's and leaves the {} DRA devices out (run one of \
             the two)",
            node.name,
            devices.len()
        ));
    }
    let product = |d: &DraDevice| match d
        .attributes
        .get(&format!("{NVIDIA_GPU_DRIVER}/productName"))
    {
        Some(DeviceAttribute::String(s)) => s.clone(),
        _ => "unknown".to_string(),
    };
    let model = product(&devices[0]);
    let count = devices.len() as u32;
    let topology =
        crate::nodes::infer_topology(count, &model, node.labels.contains_key(GPU_CLIQUE_LABEL));
    let (layout, nics) = topology.devices(&model, 0, count);
    let mut used = BTreeSet::new();
    node.gpus = devices
        .iter()
        .zip(layout)
        .enumerate()
        .map(|(position, (d, slot))| {
            let memory = d
                .capacity
                .get(&format!("{NVIDIA_GPU_DRIVER}/memory"))
                .copied()
                .unwrap_or(0);
            // Indices are unique on a node: a device without one, or repeating one, takes
            // the next free number past the published ones.
            let index = gpu_index(d).filter(|i| used.insert(*i)).unwrap_or_else(|| {
                let i = (count + position as u32..)
                    .find(|i| !used.contains(i))
                    .expect("a free index");
                used.insert(i);
                i
            });
            GpuDevice {
                index,
                model: product(d),
                memory_mib: (memory.max(0) as u64) / (1024 * 1024),
                dra: Some(d.clone()),
                ..slot
            }
        })
        .collect();
    if node.nics.is_empty() {
        node.nics = nics;
    }
    None
}

/// The DeviceClass that serves `nvidia.com/gpu` through DRA (KEP-5004): on a node whose
/// GPUs DRA publishes and the class's selectors accept, `nvidia.com/gpu` pods take them, and
/// the binder writes the claim kube-scheduler would ([`extended_gpu_requests`]).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuBacking {
    pub class: String,
    pub(super) filter: Filter,
}

impl GpuBacking {
    /// Marks `node` as serving `nvidia.com/gpu` from its published GPUs when the class
    /// accepts every one of them (the engine hands out a node's GPUs alike), and unmarks
    /// it otherwise.
    pub fn apply(backing: Option<&GpuBacking>, node: &mut NodeSpec) {
        node.gpu_extended_class = backing
            .filter(|b| {
                node.gpus_are_dra()
                    && node.gpus.iter().all(|g| {
                        g.dra
                            .as_ref()
                            .is_some_and(|d| b.filter.0.accepts(d) == Ok(true))
                    })
            })
            .map(|b| b.class.clone());
    }
}

/// The requests of the claim kube-scheduler makes for a pod's DRA-backed extended
/// resource `resource` served by `class`, and which container each serves: one request
/// `container-<i>-request-<j>` per container asking for it (`i` counts init containers
/// first, `j` is the resource's place among the container's sorted request names). An init
/// container that is not a sidecar reuses the requests of the long-lived containers after
/// it where they are enough, and asks for the rest; only the largest such request is kept,
/// and the others' mappings name it. Requests sorted by name.
pub fn extended_gpu_requests(
    spec: &core::PodSpec,
    resource: &str,
) -> (Vec<(String, u32)>, Vec<ExtendedMapping>) {
    let init = spec.init_containers.iter().flatten();
    let containers: Vec<&core::Container> = init.chain(spec.containers.iter()).collect();
    let init_count = spec.init_containers.as_ref().map_or(0, Vec::len);
    let short_lived =
        |i: usize| i < init_count && containers[i].restart_policy.as_deref() != Some("Always");
    let asks = |c: &core::Container| -> Option<(usize, u32)> {
        let requests = c.resources.as_ref()?.requests.as_ref()?;
        let count = requests
            .get(resource)?
            .0
            .parse::<u32>()
            .ok()
            .filter(|n| *n > 0)?;
        let position = requests.keys().position(|k| k == resource)?;
        Some((position, count))
    };
    let mut long: Vec<Option<(String, u32)>> = vec![None; containers.len()];
    let mut mappings = Vec::new();
    for (i, c) in containers
        .iter()
        .enumerate()
        .filter(|(i, _)| !short_lived(*i))
    {
        if let Some((j, count)) = asks(c) {
            let name = format!("container-{i}-request-{j}");
            mappings.push(ExtendedMapping {
                container: c.name.clone(),
                request: name.clone(),
            });
            long[i] = Some((name, count));
        }
    }
    let mut short: Option<(String, u32)> = None;
    let mut short_mappings: Vec<ExtendedMapping> = Vec::new();
    let mut short_names: Vec<String> = Vec::new();
    for (i, c) in containers
        .iter()
        .enumerate()
        .filter(|(i, _)| short_lived(*i))
    {
        let Some((j, count)) = asks(c) else { continue };
        let mut sum = 0;
        for (name, n) in long[i..].iter().flatten() {
            sum += n;
            short_mappings.push(ExtendedMapping {
                container: c.name.clone(),
                request: name.clone(),
            });
            if sum >= count {
                break;
            }
        }
        if sum >= count {
            continue;
        }
        let name = format!("container-{i}-request-{j}");
        short_mappings.push(ExtendedMapping {
            container: c.name.clone(),
            request: name.clone(),
        });
        short_names.push(name.clone());
        if short.as_ref().is_none_or(|(_, most)| *most < count - sum) {
            short = Some((name, count - sum));
        }
    }
    if let Some((kept, _)) = &short {
        for m in &mut short_mappings {
            if short_names.contains(&m.request) {
                m.request = kept.clone();
            }
        }
    }
    let mut requests: Vec<(String, u32)> = short
        .into_iter()
        .chain(long.into_iter().flatten())
        .collect();
    requests.sort();
    mappings.extend(short_mappings);
    (requests, mappings)
}

/// Which request of the extended-resource claim serves which container
/// (`status.extendedResourceClaimStatus.requestMappings`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtendedMapping {
    pub container: String,
    pub request: String,
}

/// Gives a pod its claims: it takes DRA devices, and its GPU demand (for packing and
/// quota) is the devices its unallocated claims take. A pod that also asks for
/// `nvidia.com/gpu` is refused: a node serves GPUs through one or the other.
pub fn set_pod_claims(
    ctx: &Ctx,
    field: &str,
    pod: &mut kestrel_core::PodSpec,
    claims: Vec<DeviceClaim>,
) -> Result<(), LoadError> {
    if claims.is_empty() {
        return Ok(());
    }
    if pod.demand.gpu != kestrel_core::GpuRequest::None {
        return Err(ctx.err(
            format!("{field}.resourceClaims"),
            "the pod asks for nvidia.com/gpu (or a GPU share) and for ResourceClaims; a node \
             serves its GPUs through the device plugin or through DRA, not both: ask for \
             GPUs in one way",
        ));
    }
    let devices = kestrel_core::DeviceClaims { claims };
    pod.demand.gpu = devices.gpu_request();
    pod.constraints.devices = Some(devices);
    Ok(())
}

/// A GPU as NVIDIA's driver publishes it: device `gpu-<index>` of the pool named after its
/// node, with `type`, `index`, `uuid`, `productName` and `memory` under the driver's
/// domain, and the standard `pcieRoot`. The simulator's DRA pools publish their GPUs so.
pub fn nvidia_gpu_device(node: &str, gpu: &GpuDevice) -> DraDevice {
    let domain = |id: &str| format!("{NVIDIA_GPU_DRIVER}/{id}");
    let mut attributes = BTreeMap::new();
    attributes.insert(domain("type"), DeviceAttribute::String("gpu".to_string()));
    attributes.insert(domain("index"), DeviceAttribute::Int(i64::from(gpu.index)));
    attributes.insert(
        domain("uuid"),
        DeviceAttribute::String(format!("GPU-{node}-{}", gpu.index)),
    );
    attributes.insert(
        domain("productName"),
        DeviceAttribute::String(gpu.model.clone()),
    );
    attributes.insert(
        "resource.kubernetes.io/pcieRoot".to_string(),
        DeviceAttribute::String(format!(
            "pci0000:{:02x}",
            gpu.pcie_switch.unwrap_or(gpu.numa_node)
        )),
    );
    let mut capacity = BTreeMap::new();
    capacity.insert(domain("memory"), (gpu.memory_mib * 1024 * 1024) as i64);
    DraDevice {
        driver: NVIDIA_GPU_DRIVER.to_string(),
        pool: node.to_string(),
        name: format!("gpu-{}", gpu.index),
        attributes,
        capacity,
        taints: Vec::new(),
        partitions: None,
    }
}
