//! The cluster index: every node, its class and shape, and what the live nodes offer.

use super::*;
use crate::model::NodeSpec;
use crate::resources::Resources;
use crate::types::PodId;
use std::collections::{BTreeMap, HashMap};

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
