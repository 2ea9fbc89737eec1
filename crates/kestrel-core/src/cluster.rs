//! The cluster index: node state, node classes and free-capacity buckets.
//!
//! Nodes with the same static attributes (shape, devices, taints, cordon, labels other
//! than per-node ones) form a *class*; a pod's static predicates are evaluated once per
//! class. Inside a class, nodes sit in buckets by free whole GPUs (full nodes apart, so
//! that a GPU pod never looks at them), each bucket ordered by the policy's node key, so a placement visits the few nodes that can win instead of the
//! whole cluster. Classes with the same *shape* (capacity and devices) differ only in
//! labels, taints or cordon; each shape keeps buckets of its own, so that a pod to which
//! many such classes are alike (labels that vary from rack to rack, say) visits them as
//! one group instead of class by class.

use crate::model::{
    Demand, GpuRequest, Labels, NodeSpec, PlacementConstraints, Taint, BLOCK_LABEL,
    GPU_CLIQUE_LABEL, HOSTNAME_LABEL, RACK_LABEL,
};
use crate::resources::Resources;
use crate::rng::Rng;
use crate::types::PodId;
pub use crate::types::{GpuAssignment, NodeId};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::iter::Peekable;

/// Labels that differ from node to node (identity and topology position). They are kept
/// out of class keys so that a class groups many nodes; pods that select on them are
/// checked node by node.
pub const PER_NODE_LABELS: [&str; 4] = [HOSTNAME_LABEL, RACK_LABEL, BLOCK_LABEL, GPU_CLIQUE_LABEL];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClassId(pub u32);

/// Free capacity of one GPU device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GpuUse {
    /// Thousandths of the device still free.
    pub free_milli: u32,
    /// Held whole by one pod (no shares may join).
    pub held_whole: bool,
    /// Pods holding it whole, and thousandths held by shares: counted, not overwritten,
    /// so that a device the API shows held twice (a race the scheduler lost, another
    /// scheduler) stays held until both have let go.
    #[serde(skip)]
    whole_holders: u16,
    #[serde(skip)]
    shared_milli: u32,
    /// The partitions of it held (a bit per [`crate::devices::Partitions::devices`]
    /// entry), and their holders (a claim and the pods that use it): a partition's
    /// thousandths count among the shares once while any holds it.
    #[serde(skip)]
    partitions: u64,
    #[serde(skip)]
    partition_holders: [u8; crate::devices::Partitions::MAX],
}

impl GpuUse {
    /// A device with `free_milli` thousandths free, the rest held by shares (held whole
    /// when none is free).
    pub(crate) fn with_free(free_milli: u32) -> GpuUse {
        let free_milli = free_milli.min(1000);
        GpuUse {
            free_milli,
            held_whole: free_milli == 0,
            whole_holders: u16::from(free_milli == 0),
            shared_milli: if free_milli == 0 {
                0
            } else {
                1000 - free_milli
            },
            partitions: 0,
            partition_holders: [0; crate::devices::Partitions::MAX],
        }
    }

    /// The partitions of the device held (a bit each).
    pub fn partitions_taken(&self) -> u64 {
        self.partitions
    }

    fn take_partition(&mut self, partition: u8, milli: u32, take: bool) {
        let bit = 1u64 << partition;
        let holders = &mut self.partition_holders[partition as usize];
        match take {
            true => *holders = holders.saturating_add(1),
            // Not held: nothing to give back.
            false if *holders == 0 => return,
            false => *holders -= 1,
        }
        let held = *holders > 0;
        if held == (self.partitions & bit != 0) {
            return;
        }
        match held {
            true => self.partitions |= bit,
            false => self.partitions &= !bit,
        }
        self.take_shared(milli, held);
    }

    fn take_whole(&mut self, take: bool) {
        if take {
            self.whole_holders += 1;
        } else {
            self.whole_holders = self.whole_holders.saturating_sub(1);
        }
        self.settle();
    }

    fn take_shared(&mut self, milli: u32, take: bool) {
        if take {
            self.shared_milli += milli;
        } else {
            self.shared_milli = self.shared_milli.saturating_sub(milli);
        }
        self.settle();
    }

    fn settle(&mut self) {
        self.held_whole = self.whole_holders > 0;
        self.free_milli = if self.held_whole {
            0
        } else {
            1000u32.saturating_sub(self.shared_milli)
        };
    }
}

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
    fn new(spec: NodeSpec, class: ClassId) -> Self {
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

/// What nodes of one shape share: capacity and devices.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ShapeKey {
    allocatable: Resources,
    max_pods: u32,
    /// Model, memory, and whether DRA publishes it.
    gpu_models: Vec<(String, u64, bool)>,
    gpu_extended_class: Option<String>,
}

/// What nodes of one class share. Two nodes with equal keys are interchangeable for
/// every static predicate that does not name a per-node label.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ClassKey {
    shape: ShapeKey,
    taints: Vec<Taint>,
    unschedulable: bool,
    labels: Labels,
}

impl ClassKey {
    fn of(spec: &NodeSpec) -> Self {
        let mut taints = spec.taints.clone();
        taints.sort();
        ClassKey {
            shape: ShapeKey {
                allocatable: spec.allocatable.clone(),
                max_pods: spec.max_pods,
                gpu_models: spec
                    .gpus
                    .iter()
                    .map(|g| (g.model.clone(), g.memory_mib, g.dra.is_some()))
                    .collect(),
                gpu_extended_class: spec.gpu_extended_class.clone(),
            },
            taints,
            unschedulable: spec.unschedulable,
            labels: spec
                .labels
                .iter()
                .filter(|(k, _)| !PER_NODE_LABELS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }
}

/// Where a node sits inside its bucket: the bit lengths of its free CPU (millicores) and
/// free memory (bytes).
pub(crate) type Cell = (u8, u8);

/// The bit length of a free amount (0 for none): a node with `free` can hold `need` only
/// if `magnitude(free) >= magnitude(need)`.
fn magnitude(amount: i64) -> u8 {
    if amount <= 0 {
        0
    } else {
        (64 - amount.leading_zeros()) as u8
    }
}

fn cell_of(free: &Resources) -> Cell {
    (magnitude(free.cpu_milli), magnitude(free.memory_bytes))
}

/// The bucket of a node: 0 when no device has room left (or it has none), else one more
/// than its free whole GPUs.
fn bucket_of(node: &NodeState) -> usize {
    if node.gpus.iter().any(|g| !g.held_whole && g.free_milli > 0) {
        node.free_whole_gpus() as usize + 1
    } else {
        0
    }
}

/// The first bucket whose nodes may hold a GPU request (see [`bucket_of`]).
pub(crate) fn first_bucket_for(gpu: GpuRequest) -> usize {
    match gpu {
        GpuRequest::None | GpuRequest::Whole(0) => 0,
        GpuRequest::Whole(n) => n as usize + 1,
        GpuRequest::Shared { .. } | GpuRequest::Memory { .. } => 1,
    }
}

/// Nodes with the same room for GPUs (see [`bucket_of`]), in cells by the magnitude of
/// their free CPU and memory, each cell ordered by (key, node). A placement visits only the
/// cells whose nodes may have room for the pod, so nodes whose GPUs are free but whose CPU
/// or memory is spent are passed over without being looked at.
#[derive(Debug, Clone, Default)]
pub(crate) struct Bucket {
    cells: BTreeMap<Cell, BTreeSet<(u64, NodeId)>>,
}

impl Bucket {
    fn insert(&mut self, cell: Cell, entry: (u64, NodeId)) {
        self.cells.entry(cell).or_default().insert(entry);
    }

    fn remove(&mut self, cell: Cell, entry: (u64, NodeId)) {
        if let Some(set) = self.cells.get_mut(&cell) {
            set.remove(&entry);
            if set.is_empty() {
                self.cells.remove(&cell);
            }
        }
    }

    /// Every node of the bucket, cell by cell.
    pub fn iter(&self) -> impl Iterator<Item = &(u64, NodeId)> {
        self.cells.values().flatten()
    }

    /// The nodes whose free CPU and memory may hold `need`, in (key, node) order.
    pub fn may_hold(&self, need: &Resources) -> MayHold<'_> {
        let (cpu, memory) = cell_of(need);
        let open = self
            .cells
            .range((cpu, 0)..)
            .filter(|((_, m), _)| *m >= memory)
            .map(|(_, set)| set.iter().peekable());
        let mut merged = MayHold {
            heads: [const { None }; FEW],
            len: 0,
            spilled: Vec::new(),
        };
        for head in open {
            if merged.len < FEW {
                merged.heads[merged.len] = Some(head);
                merged.len += 1;
            } else {
                merged.spilled.push(head);
            }
        }
        merged
    }
}

type CellIter<'a> = Peekable<std::collections::btree_set::Iter<'a, (u64, NodeId)>>;

/// Cells merged without allocating.
const FEW: usize = 8;

/// [`Bucket::may_hold`]: the open cells merged in key order, the first [`FEW`] of them
/// without allocating.
pub(crate) struct MayHold<'a> {
    heads: [Option<CellIter<'a>>; FEW],
    len: usize,
    spilled: Vec<CellIter<'a>>,
}

impl<'a> Iterator for MayHold<'a> {
    type Item = &'a (u64, NodeId);

    fn next(&mut self) -> Option<Self::Item> {
        if let [Some(only)] = &mut self.heads[..self.len] {
            return only.next();
        }
        let heads = self.heads[..self.len].iter_mut().flatten();
        let mut least: Option<(&mut CellIter<'a>, &'a (u64, NodeId))> = None;
        for head in heads.chain(self.spilled.iter_mut()) {
            if let Some(&entry) = head.peek() {
                if least.as_ref().is_none_or(|(_, e)| entry < *e) {
                    least = Some((head, entry));
                }
            }
        }
        least?.0.next()
    }
}

/// Nodes of one class, in buckets by room for GPUs ([`bucket_of`]), each ordered by (key,
/// node).
#[derive(Debug, Clone)]
pub(crate) struct NodeClass {
    /// A member's spec, for class-level predicates (per-node labels are not to be trusted).
    pub representative: NodeSpec,
    pub buckets: Vec<Bucket>,
    pub len: usize,
    /// Index into [`ClusterIndex::shapes`].
    pub shape: usize,
}

/// Nodes of one shape (all its classes), in buckets as in a class.
#[derive(Debug, Clone)]
pub(crate) struct NodeShape {
    pub buckets: Vec<Bucket>,
    pub len: usize,
}

/// All nodes, their classes and the buckets.
#[derive(Debug, Default, Clone)]
pub struct ClusterIndex {
    nodes: Vec<Option<NodeState>>,
    by_name: HashMap<String, NodeId>,
    pub(crate) classes: Vec<NodeClass>,
    class_of_key: HashMap<ClassKey, ClassId>,
    pub(crate) shapes: Vec<NodeShape>,
    shape_of_key: HashMap<ShapeKey, usize>,
    /// Counts changes to which nodes belong to which class (and shape), so that plans
    /// made from the classes' sizes know when to be made again.
    pub(crate) layout: u64,
    /// Counts changes to nodes' free room (every reindex), so that what was judged of
    /// the room knows when to be judged again.
    pub(crate) room_changes: u64,
    /// Largest allocatable cpu of any node (normalises BestFit keys).
    pub(crate) max_node_cpu: i64,
    live: usize,
    /// Devices of the live nodes, counted by memory (MiB).
    device_memory: BTreeMap<u64, u32>,
    /// Allocatable cpu and memory, and GPUs, of the live nodes together.
    capacity: Capacity,
    /// Live nodes with a GPU published in partitions.
    partitioned: usize,
}

/// What the live nodes offer together.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    pub cpu_milli: i64,
    pub memory_bytes: i64,
    pub gpus: u64,
}

impl ClusterIndex {
    pub fn node(&self, id: NodeId) -> &NodeState {
        self.nodes[id.0 as usize]
            .as_ref()
            .expect("node id refers to a removed node")
    }

    pub fn get(&self, id: NodeId) -> Option<&NodeState> {
        self.nodes.get(id.0 as usize).and_then(Option::as_ref)
    }

    pub fn id_of(&self, name: &str) -> Option<NodeId> {
        self.by_name.get(name).copied()
    }

    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The most thousandths a share of `mib` MiB of device memory takes on any device of
    /// the cluster that can hold it (the one with the least memory that is enough);
    /// `None` when no device has that much memory.
    pub fn memory_share_milli(&self, mib: u64) -> Option<u32> {
        let (&smallest, _) = self.device_memory.range(mib.max(1)..).next()?;
        crate::model::memory_share_milli(mib, smallest)
    }

    /// How many different device memory sizes the cluster has.
    pub(crate) fn device_memory_sizes(&self) -> usize {
        self.device_memory.len()
    }

    /// The memory of the cluster's largest device (MiB).
    pub fn largest_device_memory(&self) -> Option<u64> {
        self.device_memory.keys().next_back().copied()
    }

    /// What the live nodes offer together.
    pub fn capacity(&self) -> Capacity {
        self.capacity
    }

    fn count_capacity(&mut self, spec: &NodeSpec, add: bool) {
        let sign = if add { 1 } else { -1 };
        self.capacity.cpu_milli += sign * spec.allocatable.cpu_milli;
        self.capacity.memory_bytes += sign * spec.allocatable.memory_bytes;
        self.capacity.gpus = (self.capacity.gpus as i64 + sign * spec.gpus.len() as i64) as u64;
        if spec.has_partitions() {
            self.partitioned = (self.partitioned as i64 + sign) as usize;
        }
    }

    /// Whether some live node publishes a GPU in partitions: a claim may then fit on a
    /// GPU that is partly taken.
    pub fn has_partitions(&self) -> bool {
        self.partitioned > 0
    }

    fn count_devices(&mut self, memory: impl IntoIterator<Item = u64>, add: bool) {
        for mib in memory {
            let count = self.device_memory.entry(mib).or_default();
            if add {
                *count += 1;
            } else {
                *count -= 1;
                if *count == 0 {
                    self.device_memory.remove(&mib);
                }
            }
        }
    }

    /// Live nodes in id order.
    pub fn iter(&self) -> impl Iterator<Item = (NodeId, &NodeState)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.as_ref().map(|n| (NodeId(i as u32), n)))
    }

    pub(crate) fn node_mut_unindexed(&mut self, id: NodeId) -> &mut NodeState {
        self.nodes[id.0 as usize].as_mut().expect("live node")
    }

    pub(crate) fn class_of(&self, id: NodeId) -> ClassId {
        self.node(id).class
    }

    fn class_for(&mut self, spec: &NodeSpec) -> ClassId {
        let key = ClassKey::of(spec);
        if let Some(&c) = self.class_of_key.get(&key) {
            return c;
        }
        let shape = match self.shape_of_key.get(&key.shape) {
            Some(&shape) => shape,
            None => {
                self.shapes.push(NodeShape {
                    buckets: vec![Bucket::default(); spec.gpus.len() + 2],
                    len: 0,
                });
                self.shape_of_key
                    .insert(key.shape.clone(), self.shapes.len() - 1);
                self.shapes.len() - 1
            }
        };
        let c = ClassId(self.classes.len() as u32);
        self.classes.push(NodeClass {
            representative: spec.clone(),
            buckets: vec![Bucket::default(); spec.gpus.len() + 2],
            len: 0,
            shape,
        });
        self.class_of_key.insert(key, c);
        c
    }

    /// Counts a node in (`add`) or out of its class and shape.
    fn count_member(&mut self, class: ClassId, add: bool) {
        let class = &mut self.classes[class.0 as usize];
        let shape = &mut self.shapes[class.shape];
        if add {
            class.len += 1;
            shape.len += 1;
        } else {
            class.len -= 1;
            shape.len -= 1;
        }
        self.layout += 1;
    }

    /// Adds a node; `key` gives its ordering key once it is in place.
    pub(crate) fn insert(
        &mut self,
        spec: NodeSpec,
        key: impl Fn(&ClusterIndex, &NodeState) -> u64,
    ) -> NodeId {
        let class = self.class_for(&spec);
        let id = NodeId(self.nodes.len() as u32);
        self.by_name.insert(spec.name.clone(), id);
        self.max_node_cpu = self.max_node_cpu.max(spec.allocatable.cpu_milli);
        self.count_devices(spec.gpus.iter().map(|g| g.memory_mib), true);
        self.count_capacity(&spec, true);
        self.nodes.push(Some(NodeState::new(spec, class)));
        self.live += 1;
        self.count_member(class, true);
        self.reindex(id, &key);
        id
    }

    /// Takes a node out; returns its state (with the pods still on it).
    pub(crate) fn remove(&mut self, id: NodeId) -> NodeState {
        self.unindex(id);
        let state = self.nodes[id.0 as usize].take().expect("live node");
        self.count_devices(state.spec.gpus.iter().map(|g| g.memory_mib), false);
        self.count_capacity(&state.spec, false);
        self.by_name.remove(&state.spec.name);
        self.count_member(state.class, false);
        self.live -= 1;
        state
    }

    /// Replaces a node's spec (labels, taints, cordon, capacity, devices), keeping what
    /// runs on it: free amounts are recomputed from `bound`, the node's pods with their
    /// requests and devices. Devices that no longer exist are dropped from the accounting.
    pub(crate) fn respec(
        &mut self,
        id: NodeId,
        spec: NodeSpec,
        bound: &[(PodId, Resources, GpuAssignment)],
        key: impl Fn(&ClusterIndex, &NodeState) -> u64,
    ) {
        self.unindex(id);
        let class = self.class_for(&spec);
        let old_class = self.node(id).class;
        if old_class != class {
            self.count_member(old_class, false);
            self.count_member(class, true);
        }
        self.max_node_cpu = self.max_node_cpu.max(spec.allocatable.cpu_milli);
        let old: Vec<u64> = self
            .node(id)
            .spec
            .gpus
            .iter()
            .map(|g| g.memory_mib)
            .collect();
        self.count_devices(old, false);
        self.count_devices(spec.gpus.iter().map(|g| g.memory_mib), true);
        let old_spec = self.node(id).spec.clone();
        self.count_capacity(&old_spec, false);
        self.count_capacity(&spec, true);
        let mut fresh = NodeState::new(spec, class);
        for (pod, resources, gpus) in bound {
            let gpus = fresh.known_devices(gpus);
            fresh.allocate(*pod, resources, &gpus);
        }
        *self.node_mut_unindexed(id) = fresh;
        self.reindex(id, &key);
    }

    pub(crate) fn unindex(&mut self, id: NodeId) {
        let node = self.node(id);
        let ((bucket, key), cell, class) = (node.slot, node.cell, node.class);
        let class = &mut self.classes[class.0 as usize];
        class.buckets[bucket].remove(cell, (key, id));
        self.shapes[class.shape].buckets[bucket].remove(cell, (key, id));
    }

    /// Puts a node (whose slot is not in any bucket) into its bucket with a fresh key.
    pub(crate) fn reindex(&mut self, id: NodeId, key: &impl Fn(&ClusterIndex, &NodeState) -> u64) {
        self.room_changes += 1;
        let node = self.node(id);
        let slot = (bucket_of(node), key(self, node));
        let cell = cell_of(&node.free);
        let class = node.class;
        let state = self.node_mut_unindexed(id);
        (state.slot, state.cell) = (slot, cell);
        let class = &mut self.classes[class.0 as usize];
        class.buckets[slot.0].insert(cell, (slot.1, id));
        self.shapes[class.shape].buckets[slot.0].insert(cell, (slot.1, id));
    }

    /// Re-keys every node (after a change of the policy's normalisation).
    pub(crate) fn rekey_all(&mut self, key: &impl Fn(&ClusterIndex, &NodeState) -> u64) {
        let ids: Vec<NodeId> = self.iter().map(|(id, _)| id).collect();
        for id in ids {
            self.unindex(id);
            self.reindex(id, key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GpuDevice;
    use crate::resources::GPU_RESOURCE;

    /// A node with 8 cpu, 64 GiB and `gpus` devices of 80 GiB, four per NUMA node.
    fn node(gpus: u32) -> NodeState {
        let mut spec = NodeSpec::new("n", Resources::new(8000, 64 << 30));
        spec.gpus = (0..gpus)
            .map(|index| GpuDevice {
                index,
                model: "H100".into(),
                memory_mib: 81_920,
                numa_node: index / 4,
                nvlink_island: None,
                pcie_switch: None,
                dra: None,
            })
            .collect();
        NodeState::new(spec, ClassId(0))
    }

    fn demand(cpu_milli: i64, gpu: GpuRequest) -> Demand {
        Demand {
            resources: Resources::new(cpu_milli, 1 << 30),
            gpu,
        }
    }

    #[test]
    fn a_device_held_twice_stays_held_until_both_let_go() {
        // The API can show two pods on one device (a bind race the scheduler lost, a
        // second scheduler): the device is free only when both have ended.
        let mut n = node(2);
        let none = Resources::default();
        let first = GpuAssignment::Whole(vec![0]);
        n.allocate(PodId(1), &none, &first);
        n.allocate(PodId(2), &none, &first);
        n.release(PodId(1), &none, &first);
        assert!(n.gpus[0].held_whole);
        assert_eq!(n.free_whole_gpus(), 1);
        n.release(PodId(2), &none, &first);
        assert_eq!(n.free_whole_gpus(), 2);
        // Shares beyond the device are counted the same way.
        let share = GpuAssignment::Shared {
            index: 1,
            milli: 700,
        };
        n.allocate(PodId(3), &none, &share);
        n.allocate(PodId(4), &none, &share);
        assert_eq!(n.gpus[1].free_milli, 0);
        n.release(PodId(3), &none, &share);
        assert_eq!(n.gpus[1].free_milli, 300);
        n.release(PodId(4), &none, &share);
        assert_eq!(n.gpus[1].free_milli, 1000);
    }

    #[test]
    fn shortfall_names_what_a_pod_lacks_and_nothing_when_it_fits() {
        let mut n = node(8);
        let anywhere = PlacementConstraints::default();
        let fits = demand(1000, GpuRequest::Whole(2));
        assert!(n.fits_pod(&fits, &anywhere));
        assert!(n.shortfall(&fits, &anywhere).is_empty());
        // Two GPUs and two cores short, in thousandths and millicores.
        let big = demand(10_000, GpuRequest::Whole(10));
        assert!(!n.fits_pod(&big, &anywhere));
        assert_eq!(
            n.shortfall(&big, &anywhere),
            vec![(GPU_RESOURCE, 2000), ("cpu", 2000)]
        );
        // single-numa-node: only the four GPUs of one NUMA node count.
        let one_numa = PlacementConstraints {
            single_numa_node: true,
            ..Default::default()
        };
        let six = demand(1000, GpuRequest::Whole(6));
        assert_eq!(n.shortfall(&six, &anywhere), vec![]);
        assert_eq!(n.shortfall(&six, &one_numa), vec![(GPU_RESOURCE, 2000)]);
        // A share by memory no device has: the MiB missing.
        let huge = demand(0, GpuRequest::Memory { mib: 100_000 });
        assert_eq!(
            n.shortfall(&huge, &anywhere),
            vec![(NodeState::GPU_MEMORY_SHORTFALL, 100_000 - 81_920)]
        );
        // A share where the freest device has 300 thousandths: 200 more.
        for g in &mut n.gpus {
            g.free_milli = 300;
        }
        let half = demand(0, GpuRequest::Shared { milli: 500 });
        assert_eq!(n.shortfall(&half, &anywhere), vec![(GPU_RESOURCE, 200)]);
        // A node at its pod limit lacks room for one more pod.
        n.free_pods = 0;
        let cpu_only = demand(1000, GpuRequest::None);
        assert!(!n.fits_pod(&cpu_only, &anywhere));
        assert_eq!(n.shortfall(&cpu_only, &anywhere), vec![("pods", 1)]);
    }
}
