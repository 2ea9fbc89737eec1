//! A node and what is in use on it: `NodeState`, its class and per-node labels.

use super::*;
use crate::model::{
    Demand, GpuRequest, NodeSpec, PlacementConstraints, BLOCK_LABEL, GPU_CLIQUE_LABEL,
    HOSTNAME_LABEL, RACK_LABEL,
};
use crate::resources::Resources;
use crate::rng::Rng;
use crate::types::PodId;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Labels that differ from node to node (identity and topology position). They are kept
/// out of class keys so that a class groups many nodes; pods that select on them are
/// checked node by node.
pub const PER_NODE_LABELS: [&str; 4] = [HOSTNAME_LABEL, RACK_LABEL, BLOCK_LABEL, GPU_CLIQUE_LABEL];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClassId(pub u32);

/// A node and what is in use on it.
#[derive(Debug, Clone, Serialize)]
pub struct NodeState {
    pub spec: NodeSpec,
    /// Allocatable minus the requests of bound pods.
    pub free: Resources,
    pub free_pods: u32,
    /// Per device, in the order of `spec.gpus`.
    pub gpus: Vec<GpuUse>,
    pub pods: BTreeSet<PodId>,
    #[serde(skip)]
    pub(crate) class: ClassId,
    #[serde(skip)]
    pub(crate) slot: (usize, u64),
    /// The bucket cell the node sits in (see [`Bucket`]).
    #[serde(skip)]
    pub(crate) cell: Cell,
    /// Its GPUs are published through DRA and no DeviceClass serves `nvidia.com/gpu` from
    /// them: claims take them, `nvidia.com/gpu` does not.
    #[serde(skip)]
    pub(crate) dra: bool,
}

impl NodeState {
    pub(super) fn new(spec: NodeSpec, class: ClassId) -> Self {
        let dra = spec.gpus_are_dra() && spec.gpu_extended_class.is_none();
        // Where DRA devices serve `nvidia.com/gpu`, a device tainted NoSchedule or
        // NoExecute (unhealthy) starts held: the claim written for such a pod tolerates
        // nothing, as kube-scheduler writes it. (Claims that tolerate the taint do not get
        // it on such a node either.)
        let served = spec.gpu_extended_class.is_some();
        let gpus = spec
            .gpus
            .iter()
            .map(|g| {
                let tainted = served && !crate::devices::tolerates_all(g, &[]);
                GpuUse::with_free(if tainted { 0 } else { 1000 })
            })
            .collect();
        NodeState {
            free: spec.allocatable.clone(),
            free_pods: spec.max_pods,
            gpus,
            pods: BTreeSet::new(),
            spec,
            class,
            slot: (0, 0),
            cell: (0, 0),
            dra,
        }
    }

    pub fn free_whole_gpus(&self) -> u32 {
        self.gpus.iter().filter(|g| g.free_milli == 1000).count() as u32
    }

    pub fn free_gpu_milli(&self) -> u64 {
        self.gpus.iter().map(|g| g.free_milli as u64).sum()
    }

    pub fn gpu_count(&self) -> u32 {
        self.gpus.len() as u32
    }

    /// Whether the pod's amounts fit now (static predicates aside).
    pub fn fits(&self, resources: &Resources, gpu: GpuRequest) -> bool {
        self.free_pods >= 1 && self.free.fits(resources) && self.gpu_fits(gpu)
    }

    pub fn gpu_fits(&self, gpu: GpuRequest) -> bool {
        if self.dra && gpu != GpuRequest::None {
            // No `nvidia.com/gpu` here: the kubelet would refuse the pod.
            return false;
        }
        match gpu {
            GpuRequest::None => true,
            GpuRequest::Whole(n) => self.free_whole_gpus() >= n,
            GpuRequest::Shared { .. } | GpuRequest::Memory { .. } => {
                (0..self.gpus.len()).any(|i| self.share_fits(i, gpu).is_some())
            }
        }
    }

    /// The thousandths a share (by thousandths or by memory) takes on device `position`
    /// (in `spec.gpus` order) if it fits there now: not held whole, enough memory, enough
    /// free. `None` for other requests.
    pub fn share_fits(&self, position: usize, gpu: GpuRequest) -> Option<u32> {
        let g = &self.gpus[position];
        let milli = gpu.share_on(self.spec.gpus[position].memory_mib)?;
        (!g.held_whole && g.free_milli >= milli).then_some(milli)
    }

    /// Whether some device of the node has at least `mib` MiB of memory.
    pub fn has_device_memory(&self, mib: u64) -> bool {
        self.spec.gpus.iter().any(|g| g.memory_mib >= mib)
    }

    /// Where a share goes among the devices `usable` allows: the fitting device with the
    /// least room left (in thousandths for shares, in MiB for shares by memory, so a
    /// small request fills a small device first), or a random fitting one when `random` is
    /// given. `(position, thousandths)`.
    fn choose_share(
        &self,
        gpu: GpuRequest,
        usable: impl Fn(usize) -> bool,
        random: Option<&mut Rng>,
    ) -> Option<(usize, u32)> {
        let fitting = (0..self.gpus.len())
            .filter(|&i| usable(i))
            .filter_map(|i| self.share_fits(i, gpu).map(|milli| (i, milli)));
        match random {
            Some(rng) => {
                let all: Vec<(usize, u32)> = fitting.collect();
                (!all.is_empty()).then(|| all[rng.below(all.len() as u64) as usize])
            }
            None => fitting.min_by_key(|&(i, milli)| {
                let left = (self.gpus[i].free_milli - milli) as u64;
                let room = match gpu {
                    GpuRequest::Memory { .. } => left * self.spec.gpus[i].memory_mib,
                    _ => left,
                };
                (room, i)
            }),
        }
    }

    /// Picks devices for a GPU request that fits: whole GPUs from one NUMA node when one
    /// can hold them all (the fullest such node, keeping emptier ones whole for bigger
    /// pods), shares on the fitting device with the least room left, or on a random
    /// fitting device when `random` is given (the Random baseline).
    pub fn choose_gpus(&self, gpu: GpuRequest, random: Option<&mut Rng>) -> GpuAssignment {
        match gpu {
            GpuRequest::None => GpuAssignment::None,
            GpuRequest::Shared { .. } | GpuRequest::Memory { .. } => {
                let (i, milli) = self
                    .choose_share(gpu, |_| true, random)
                    .expect("choose_gpus called on a node that does not fit");
                GpuAssignment::Shared {
                    index: self.spec.gpus[i].index,
                    milli,
                }
            }
            GpuRequest::Whole(n) => {
                let free: Vec<usize> = (0..self.gpus.len())
                    .filter(|&i| self.gpus[i].free_milli == 1000)
                    .collect();
                let mut by_numa: HashMap<u32, Vec<usize>> = HashMap::new();
                for &i in &free {
                    by_numa
                        .entry(self.spec.gpus[i].numa_node)
                        .or_default()
                        .push(i);
                }
                let one_numa = by_numa
                    .iter()
                    .filter(|(_, v)| v.len() >= n as usize)
                    .min_by_key(|(numa, v)| (v.len(), **numa))
                    .map(|(_, v)| v.clone());
                let mut chosen = one_numa.unwrap_or(free);
                chosen.truncate(n as usize);
                let mut indices: Vec<u32> =
                    chosen.iter().map(|&i| self.spec.gpus[i].index).collect();
                indices.sort_unstable();
                GpuAssignment::Whole(indices)
            }
        }
    }

    /// Devices for a request with all its GPUs, and the NICs beside them, on one NUMA node
    /// (the `single-numa-node` policy); `None` when the node cannot do that now. Whole GPUs
    /// come from the fullest NUMA node that holds them, a share from the tightest device.
    /// Whether a pod fits now: its amounts, and its GPUs on one NUMA node when it asks for
    /// `single-numa-node` (static predicates aside).
    pub fn fits_pod(&self, demand: &Demand, constraints: &PlacementConstraints) -> bool {
        if let Some(claims) = &constraints.devices {
            return self.free_pods >= 1
                && self.free.fits(&demand.resources)
                && self.choose_devices(claims).is_ok();
        }
        self.fits(&demand.resources, demand.gpu)
            && (!constraints.single_numa_node || self.choose_gpus_single_numa(demand.gpu).is_some())
    }

    /// Free whole GPUs (positions) per NUMA node, of those whose NICs are local to it.
    fn free_whole_by_numa(&self) -> BTreeMap<u32, Vec<usize>> {
        let mut by_numa: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for i in 0..self.gpus.len() {
            let g = &self.gpus[i];
            if self.spec.gpu_numa_local(i) && !g.held_whole && g.free_milli == 1000 {
                by_numa
                    .entry(self.spec.gpus[i].numa_node)
                    .or_default()
                    .push(i);
            }
        }
        by_numa
    }

    /// Takes the room one more pod with `demand` needs, its GPUs chosen as
    /// [`NodeState::fits_pod`] judges them (on one NUMA node when asked), when it fits now;
    /// `false`, with nothing taken, when it does not. For counting how many pods of a kind
    /// a copy of a node holds.
    pub fn take_room(&mut self, demand: &Demand, constraints: &PlacementConstraints) -> bool {
        if !self.fits_pod(demand, constraints) {
            return false;
        }
        let gpus = self.choose_for_pod(demand, constraints);
        self.reserve_free(&demand.resources, &gpus);
        true
    }

    /// The devices a pod that fits here ([`NodeState::fits_pod`]) gets by the engine's
    /// own choice: its claims' devices, or GPUs on one NUMA node when asked, or
    /// [`NodeState::choose_gpus`]'s.
    pub fn choose_for_pod(
        &self,
        demand: &Demand,
        constraints: &PlacementConstraints,
    ) -> GpuAssignment {
        if let Some(claims) = &constraints.devices {
            return self.claim_assignment(claims);
        }
        if constraints.single_numa_node {
            self.choose_gpus_single_numa(demand.gpu)
                .expect("fits_pod found devices on one NUMA node")
        } else {
            self.choose_gpus(demand.gpu, None)
        }
    }

    /// Takes devices for `claims` with partitions chosen by `how`, holding them with no
    /// pod (as an allocated claim holds them), when they fit; for measuring one choice of
    /// partitions against another on a copy of a node. Give them back with
    /// [`NodeState::give_back_devices`].
    pub fn take_devices(
        &mut self,
        claims: &crate::devices::DeviceClaims,
        how: crate::devices::PartitionChoice,
    ) -> Option<GpuAssignment> {
        let choice = self.choose_devices_in(claims, None, how).ok()?;
        let gpus = self.spec.assignment_of(&choice.devices())?;
        self.apply_gpus(&gpus, true);
        Some(gpus)
    }

    /// Gives back devices [`NodeState::take_devices`] took.
    pub fn give_back_devices(&mut self, gpus: &GpuAssignment) {
        self.apply_gpus(gpus, false);
    }

    /// The devices a pod's claims get here, as the binding records them (every device of
    /// its claims, those already allocated too).
    pub fn claim_assignment(&self, claims: &crate::devices::DeviceClaims) -> GpuAssignment {
        let choice = self
            .choose_devices(claims)
            .expect("fits_pod found the claims' devices");
        self.spec
            .assignment_of(&choice.devices())
            .expect("choose_devices gives a pod whole GPUs or partitions")
    }

    /// What the node reports as missing, in MiB, when none of its devices has the memory
    /// a share by memory asks for (see [`NodeState::shortfall`]).
    pub const GPU_MEMORY_SHORTFALL: &'static str = "gpu-memory";

    /// What one more pod with `demand` lacks on this node now, resource by resource, in
    /// the engine's units: `nvidia.com/gpu` in thousandths of a GPU (1000 per whole GPU
    /// missing; for a share, what the device with the most free lacks; for a share by
    /// memory, the least any device with the memory lacks), or
    /// [`NodeState::GPU_MEMORY_SHORTFALL`] in MiB when no device has the memory; then
    /// `cpu` (millicores), `memory` and `ephemeral-storage` (bytes), extended resources,
    /// and `pods` (1) when the node holds its maximum. A `single-numa-node` pod's whole
    /// GPUs count only those one NUMA node offers. Empty when the amounts fit (where
    /// the GPUs of a `single-numa-node` share would go aside: [`NodeState::fits_pod`]
    /// decides that). Static predicates aside.
    pub fn shortfall<'d>(
        &self,
        demand: &'d Demand,
        constraints: &PlacementConstraints,
    ) -> Vec<(&'d str, i64)> {
        let mut out = Vec::new();
        let mut add = |resource: &'d str, amount: i64| {
            if amount > 0 {
                out.push((resource, amount));
            }
        };
        match demand.gpu {
            GpuRequest::None => {}
            GpuRequest::Whole(n) => {
                let free = match constraints.single_numa_node {
                    true => self.free_whole_gpus_on_one_numa(),
                    false => self.free_whole_gpus(),
                };
                add(
                    crate::resources::GPU_RESOURCE,
                    n.saturating_sub(free) as i64 * 1000,
                );
            }
            GpuRequest::Shared { milli } => {
                let best = self
                    .gpus
                    .iter()
                    .filter(|g| !g.held_whole)
                    .map(|g| g.free_milli)
                    .max()
                    .unwrap_or(0);
                add(
                    crate::resources::GPU_RESOURCE,
                    milli.saturating_sub(best) as i64,
                );
            }
            GpuRequest::Memory { mib } => {
                let short = self
                    .spec
                    .gpus
                    .iter()
                    .zip(&self.gpus)
                    .filter_map(|(d, g)| {
                        crate::model::memory_share_milli(mib, d.memory_mib)
                            .map(|m| m.saturating_sub(g.free_milli))
                    })
                    .min();
                match short {
                    Some(short) => add(crate::resources::GPU_RESOURCE, short as i64),
                    None => {
                        let largest = self.spec.gpus.iter().map(|d| d.memory_mib).max();
                        add(
                            Self::GPU_MEMORY_SHORTFALL,
                            (mib - largest.unwrap_or(0)) as i64,
                        );
                    }
                }
            }
        }
        let r = &demand.resources;
        add("cpu", r.cpu_milli - self.free.cpu_milli);
        add("memory", r.memory_bytes - self.free.memory_bytes);
        add(
            "ephemeral-storage",
            r.ephemeral_storage_bytes - self.free.ephemeral_storage_bytes,
        );
        for (name, amount) in &r.extended {
            add(name, amount - self.free.extended(name));
        }
        if self.free_pods == 0 {
            add("pods", 1);
        }
        out
    }

    /// The most free whole GPUs one NUMA node offers (for `single-numa-node` pods).
    pub fn free_whole_gpus_on_one_numa(&self) -> u32 {
        let by_numa = self.free_whole_by_numa();
        by_numa.values().map(Vec::len).max().unwrap_or(0) as u32
    }

    pub fn choose_gpus_single_numa(&self, gpu: GpuRequest) -> Option<GpuAssignment> {
        let usable = |i: usize| self.spec.gpu_numa_local(i) && !self.gpus[i].held_whole;
        match gpu {
            GpuRequest::None | GpuRequest::Whole(0) => Some(self.choose_gpus(gpu, None)),
            GpuRequest::Shared { .. } | GpuRequest::Memory { .. } => self
                .choose_share(gpu, usable, None)
                .map(|(i, milli)| GpuAssignment::Shared {
                    index: self.spec.gpus[i].index,
                    milli,
                }),
            GpuRequest::Whole(n) => {
                let mut chosen = self
                    .free_whole_by_numa()
                    .into_values()
                    .filter(|v| v.len() >= n as usize)
                    .min_by_key(Vec::len)?;
                chosen.truncate(n as usize);
                let mut indices: Vec<u32> =
                    chosen.iter().map(|&i| self.spec.gpus[i].index).collect();
                indices.sort_unstable();
                Some(GpuAssignment::Whole(indices))
            }
        }
    }

    /// The part of an assignment whose devices exist on this node.
    pub(crate) fn known_devices(&self, gpus: &GpuAssignment) -> GpuAssignment {
        self.devices_where(gpus, |_, _| true, false)
    }

    /// The part of an assignment whose devices exist on this node and pass `keep`, given
    /// each device's use and the thousandths the assignment takes of it; partitions pass
    /// when they exist (and, with `free_partitions`, fit beside those held now).
    fn devices_where(
        &self,
        gpus: &GpuAssignment,
        keep: impl Fn(&GpuUse, u32) -> bool,
        free_partitions: bool,
    ) -> GpuAssignment {
        let kept = |index: u32, milli: u32| {
            let position = self.spec.gpus.iter().position(|g| g.index == index);
            position.is_some_and(|p| keep(&self.gpus[p], milli))
        };
        match gpus {
            GpuAssignment::Whole(v) => {
                GpuAssignment::Whole(v.iter().copied().filter(|&i| kept(i, 1000)).collect())
            }
            GpuAssignment::Shared { index, milli } if !kept(*index, *milli) => GpuAssignment::None,
            GpuAssignment::Partitions(parts) => GpuAssignment::Partitions(
                parts
                    .iter()
                    .copied()
                    .filter(|r| {
                        let position = self.spec.gpus.iter().position(|g| g.index == r.index);
                        position.is_some_and(|p| {
                            keep(&self.gpus[p], 0)
                                && self.spec.partitions_of(p).is_some_and(|ps| {
                                    (r.partition as usize) < ps.devices.len()
                                        && (!free_partitions
                                            || ps.fits(
                                                self.gpus[p].partitions_taken(),
                                                r.partition as usize,
                                            ))
                                })
                        })
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    fn device_position(&self, index: u32) -> usize {
        self.spec
            .gpus
            .iter()
            .position(|g| g.index == index)
            .expect("GPU index assigned by this node")
    }

    pub(crate) fn allocate(&mut self, pod: PodId, resources: &Resources, gpus: &GpuAssignment) {
        self.free.sub(resources);
        // Pods restored from a live cluster may exceed what the node declares.
        self.free_pods = self.free_pods.saturating_sub(1);
        self.pods.insert(pod);
        self.apply_gpus(gpus, true);
    }

    /// Frees what a bound pod holds (on the index's own nodes through the scheduler; on a
    /// copy, to play pods' ends forward).
    pub fn release(&mut self, pod: PodId, resources: &Resources, gpus: &GpuAssignment) {
        self.free.add(resources);
        self.free_pods += 1;
        self.pods.remove(&pod);
        self.apply_gpus(gpus, false);
    }

    /// Sets aside room promised to a pod not bound yet: its amounts, and the devices it
    /// was planned on that are free now (those others still hold stay theirs).
    pub(crate) fn reserve_free(&mut self, resources: &Resources, gpus: &GpuAssignment) {
        self.free.sub(resources);
        self.free_pods = self.free_pods.saturating_sub(1);
        let free = self.devices_where(
            gpus,
            |g, milli| !g.held_whole && g.free_milli >= milli,
            true,
        );
        self.apply_gpus(&free, true);
    }

    /// Takes (or gives back) devices an allocated ResourceClaim holds, with no pod.
    pub(crate) fn reserve_devices(&mut self, gpus: &GpuAssignment, take: bool) {
        self.apply_gpus(gpus, take);
    }

    fn apply_gpus(&mut self, gpus: &GpuAssignment, take: bool) {
        match gpus {
            GpuAssignment::None => {}
            GpuAssignment::Whole(indices) => {
                for &index in indices {
                    let p = self.device_position(index);
                    self.gpus[p].take_whole(take);
                }
            }
            GpuAssignment::Shared { index, milli } => {
                let p = self.device_position(*index);
                self.gpus[p].take_shared(*milli, take);
            }
            GpuAssignment::Partitions(parts) => {
                for r in parts {
                    let p = self.device_position(r.index);
                    self.gpus[p].take_partition(r.partition, r.milli, take);
                }
            }
        }
    }
}
