//! The GPU map: every node a row of GPU cells, grouped by rack and NVLink domain, each cell
//! with the thousandths in use and the pods holding it.
//!
//! A GPU a DRA driver publishes in MIG partitions shows each partition held, with its pod,
//! its profile (`3g.40gb`) and the share of the GPU it stands for.
//!
//! A free GPU is *fragmented* when its node has other GPUs in use: it cannot serve a job
//! that wants the whole node (an 8-GPU worker of a gang), the shape GPU clusters run out
//! of first. The JSON is compact on purpose (pods as indices into one table): 5,000 nodes
//! of 8 GPUs are 40,000 cells.

use super::super::explain_view::{clock, ExplainState};
use kestrel_core::{
    GpuAssignment, PodId, PodPhase, GPU_CLIQUE_LABEL, GPU_PRODUCT_LABEL, RACK_LABEL,
};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Cells by state, as the map colours them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CellCounts {
    pub gpus: u32,
    /// Held whole, or every thousandth in use.
    pub busy: u32,
    /// Partly in use by shares (fractional pods).
    pub shared: u32,
    /// Unused, on a node none of whose GPUs is in use.
    pub free: u32,
    /// Unused, on a node some of whose GPUs are in use.
    pub fragmented: u32,
}

/// One GPU: thousandths in use and the pods on it (indices into [`GpuMap::pods`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cell {
    pub used: u32,
    /// Per pod on it: (pod index, thousandths it holds here).
    pub pods: Vec<(u32, u32)>,
    /// For a GPU held in MIG partitions, the profile of each entry of `pods`, in the same
    /// order (`3g.40gb`); left out of the JSON for any other GPU.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mig: Vec<(u32, String)>,
}

/// A partition's profile as NVIDIA's driver publishes it (`gpu.nvidia.com/profile`), else
/// its device name.
fn profile(partition: &kestrel_core::Partition) -> String {
    match partition.device.attributes.get("gpu.nvidia.com/profile") {
        Some(kestrel_core::DeviceAttribute::String(p)) => p.clone(),
        _ => partition.device.name.clone(),
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MapNode {
    pub name: String,
    pub model: String,
    pub cordoned: bool,
    pub gpus: Vec<Cell>,
}

/// The nodes of one rack and NVLink domain.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MapGroup {
    pub rack: Option<String>,
    pub nvlink_domain: Option<String>,
    pub nodes: Vec<MapNode>,
}

/// A pod that holds a GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MapPod {
    pub pod: String,
    pub namespace: String,
    pub queue: Option<String>,
    pub gang: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuMap {
    pub at_s: f64,
    pub at: String,
    pub counts: CellCounts,
    pub groups: Vec<MapGroup>,
    pub pods: Vec<MapPod>,
    /// For the filters: every GPU model, queue and namespace on the map.
    pub models: Vec<String>,
    pub queues: Vec<String>,
    pub namespaces: Vec<String>,
}

/// The map of GPU nodes (nodes without GPUs are left out) at the state's moment.
pub fn gpu_map(state: &dyn ExplainState) -> GpuMap {
    let scheduler = state.scheduler();
    let now = state.now();
    let queue_names: HashMap<_, _> = scheduler
        .cluster_queues()
        .map(|(id, spec)| (id, spec.name.clone()))
        .collect();
    let mut pods: Vec<MapPod> = Vec::new();
    let mut pod_index: HashMap<PodId, u32> = HashMap::new();
    let mut counts = CellCounts::default();
    let mut groups: BTreeMap<(Option<String>, Option<String>), Vec<MapNode>> = BTreeMap::new();
    let (mut models, mut queues, mut namespaces) =
        (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for (_, node) in scheduler.cluster().iter() {
        if node.spec.gpus.is_empty() {
            continue;
        }
        let mut cells: Vec<Cell> = node
            .gpus
            .iter()
            .map(|g| Cell {
                used: if g.held_whole {
                    1000
                } else {
                    1000 - g.free_milli.min(1000)
                },
                pods: Vec::new(),
                mig: Vec::new(),
            })
            .collect();
        for &p in &node.pods {
            let record = scheduler.pod(p);
            let PodPhase::Bound { gpus, .. } = &record.phase else {
                continue;
            };
            let devices = gpus.indices();
            if devices.is_empty() {
                continue;
            }
            let share = (gpus.milli() / devices.len() as u64) as u32;
            let index = *pod_index.entry(p).or_insert_with(|| {
                let spec = &record.spec;
                let queue = record
                    .admission
                    .as_ref()
                    .and_then(|a| queue_names.get(&a.cq).cloned());
                if let Some(q) = &queue {
                    queues.insert(q.clone());
                }
                namespaces.insert(spec.namespace.clone());
                pods.push(MapPod {
                    pod: spec.key(),
                    namespace: spec.namespace.clone(),
                    queue,
                    gang: spec
                        .gang
                        .as_ref()
                        .map(|m| format!("{}/{}", spec.namespace, m.gang)),
                });
                pods.len() as u32 - 1
            });
            let position_of = |d: u32| node.spec.gpus.iter().position(|g| g.index == d);
            if let GpuAssignment::Partitions(parts) = gpus {
                // Each partition on its GPU, with what it stands for of it.
                for part in parts {
                    let Some(position) = position_of(part.index) else {
                        continue;
                    };
                    let cell = &mut cells[position];
                    cell.pods.push((index, part.milli));
                    // One entry per pod entry: the page pairs them by position.
                    let name = node
                        .spec
                        .partitions_of(position)
                        .and_then(|ps| ps.devices.get(usize::from(part.partition)))
                        .map_or_else(|| format!("partition {}", part.partition), profile);
                    cell.mig.push((index, name));
                }
                continue;
            }
            for d in devices {
                if let Some(position) = position_of(d) {
                    cells[position].pods.push((index, share));
                }
            }
        }
        let in_use = cells.iter().any(|c| c.used > 0);
        for c in &cells {
            counts.gpus += 1;
            match c.used {
                1000.. => counts.busy += 1,
                1..=999 => counts.shared += 1,
                0 if in_use => counts.fragmented += 1,
                0 => counts.free += 1,
            }
        }
        let model = node
            .spec
            .labels
            .get(GPU_PRODUCT_LABEL)
            .cloned()
            .unwrap_or_else(|| node.spec.gpus[0].model.clone());
        models.insert(model.clone());
        let key = (
            node.spec.labels.get(RACK_LABEL).cloned(),
            node.spec.labels.get(GPU_CLIQUE_LABEL).cloned(),
        );
        groups.entry(key).or_default().push(MapNode {
            name: node.spec.name.clone(),
            model,
            cordoned: node.spec.unschedulable,
            gpus: cells,
        });
    }
    GpuMap {
        at_s: now as f64 / 1000.0,
        at: clock(now),
        counts,
        groups: groups
            .into_iter()
            .map(|((rack, nvlink_domain), mut nodes)| {
                nodes.sort_by(|a, b| a.name.cmp(&b.name));
                MapGroup {
                    rack,
                    nvlink_domain,
                    nodes,
                }
            })
            .collect(),
        pods,
        models: models.into_iter().collect(),
        queues: queues.into_iter().collect(),
        namespaces: namespaces.into_iter().collect(),
    }
}
