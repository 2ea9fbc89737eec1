//! Nodes come, change and go: the index is kept in step, and the pods of a lost node
//! return to the queue.

use super::Scheduler;
use crate::cluster::{ClassId, ClusterIndex, NodeState};
use crate::model::{NodeSpec, PodSpec};
use crate::outcome::ClusterError;
use crate::predicates::static_check;
use crate::resources::Resources;
use crate::types::{GpuAssignment, NodeId, PodId, PodPhase};
use std::collections::BTreeSet;

impl Scheduler {
    pub(super) fn node_key(&self) -> impl Fn(&ClusterIndex, &NodeState) -> u64 {
        let policy = self.config.policy;
        move |cluster, node| policy.node_key(cluster, node)
    }

    /// Nodes came, went or changed labels: topology domains are recomputed.
    fn nodes_changed(&mut self) {
        self.domain_cache.clear();
        self.inter_pod_nodes_changed();
    }

    pub fn add_node(&mut self, spec: NodeSpec) -> Result<NodeId, ClusterError> {
        if self.cluster.id_of(&spec.name).is_some() {
            return Err(ClusterError::DuplicateNode(spec.name));
        }
        validate_node(&spec)?;
        let max_cpu_before = self.cluster.max_node_cpu;
        let key = self.node_key();
        let name = spec.name.clone();
        let id = self.cluster.insert(spec, &key);
        self.rehold_claims_on(&name);
        self.nodes_changed();
        if self.config.policy.uses_max_node_cpu() && self.cluster.max_node_cpu != max_cpu_before {
            self.cluster.rekey_all(&key);
        }
        self.capacity_may_have_grown();
        Ok(id)
    }

    /// Cordons (`true`) or uncordons a node. Pods on it keep running.
    pub fn set_unschedulable(
        &mut self,
        name: &str,
        unschedulable: bool,
    ) -> Result<(), ClusterError> {
        let id = self
            .cluster
            .id_of(name)
            .ok_or_else(|| ClusterError::UnknownNode(name.to_string()))?;
        let mut spec = self.cluster.node(id).spec.clone();
        if spec.unschedulable != unschedulable {
            spec.unschedulable = unschedulable;
            self.update_node(spec)?;
        }
        Ok(())
    }

    /// Adds a node, or replaces the spec of a known one (labels, taints, cordon, capacity,
    /// devices) keeping the pods on it, as a Node watch delivers changes.
    pub fn update_node(&mut self, spec: NodeSpec) -> Result<NodeId, ClusterError> {
        let Some(id) = self.cluster.id_of(&spec.name) else {
            return self.add_node(spec);
        };
        validate_node(&spec)?;
        let bound: Vec<(PodId, Resources, GpuAssignment)> = self
            .cluster
            .node(id)
            .pods
            .iter()
            .map(|&pod| {
                let record = &self.pods[pod.0 as usize];
                let PodPhase::Bound { gpus, .. } = &record.phase else {
                    unreachable!("pods on a node are bound")
                };
                (pod, record.spec.demand.resources.clone(), gpus.clone())
            })
            .collect();
        let max_cpu_before = self.cluster.max_node_cpu;
        let key = self.node_key();
        let name = spec.name.clone();
        self.cluster.respec(id, spec, &bound, &key);
        // A new spec starts from its bound pods: the claims' devices are taken again.
        self.forget_claim_holds_on(id);
        self.rehold_claims_on(&name);
        self.nodes_changed();
        if self.config.policy.uses_max_node_cpu() && self.cluster.max_node_cpu != max_cpu_before {
            self.cluster.rekey_all(&key);
        }
        self.capacity_may_have_grown();
        Ok(id)
    }

    /// Removes a node. The pods that ran on it return to the queue (in their original
    /// order), as controllers recreate the pods of a lost node; their ids are returned.
    pub fn remove_node(&mut self, name: &str) -> Result<Vec<PodId>, ClusterError> {
        let id = self
            .cluster
            .id_of(name)
            .ok_or_else(|| ClusterError::UnknownNode(name.to_string()))?;
        let sizes = self.cluster.device_memory_sizes();
        let state = self.cluster.remove(id);
        self.holds.remove(&id);
        self.forget_claim_holds_on(id);
        self.nodes_changed();
        if self.cluster.device_memory_sizes() < sizes {
            // The most a pending share by memory could take may have shrunk: it may now
            // fit its queue's quota.
            self.capacity_may_have_grown();
        }
        let evicted: Vec<PodId> = state.pods.iter().copied().collect();
        for &pod in &evicted {
            self.unaccount(pod);
            self.inter_pod_unbound(pod);
            self.inter_pod_pending(pod);
            let record = &mut self.pods[pod.0 as usize];
            record.phase = PodPhase::Pending;
            self.active.insert(record.queue_key(pod));
            self.pending += 1;
        }
        Ok(evicted)
    }

    /// Whether a pod with this spec could go on this node now (static and amounts; not
    /// its inter-pod rules, see [`Scheduler::inter_pod_allows`]).
    pub fn could_place_on(&self, spec: &PodSpec, node: NodeId) -> bool {
        let node = self.cluster.node(node);
        static_check(&spec.constraints, &node.spec).is_ok()
            && node.fits_pod(&spec.demand, &spec.constraints)
    }

    /// The node's rank key under the configured policy (lower is better).
    pub fn node_rank(&self, node: NodeId) -> u64 {
        self.config
            .policy
            .node_key(&self.cluster, self.cluster.node(node))
    }

    /// The class a node belongs to (nodes of one class are interchangeable for static
    /// predicates); exposed for metrics that group nodes.
    pub fn node_class(&self, node: NodeId) -> u32 {
        let ClassId(c) = self.cluster.class_of(node);
        c
    }
}

fn validate_node(spec: &NodeSpec) -> Result<(), ClusterError> {
    let invalid = |field, why: String| ClusterError::InvalidNode {
        node: spec.name.clone(),
        field,
        why,
    };
    if spec.name.is_empty() {
        return Err(invalid("metadata.name", "must not be empty".into()));
    }
    let mut seen = BTreeSet::new();
    for gpu in &spec.gpus {
        if !seen.insert(gpu.index) {
            return Err(invalid(
                "gpus[].index",
                format!(
                    "GPU index {} appears twice; give each device its own index",
                    gpu.index
                ),
            ));
        }
    }
    if spec.allocatable.cpu_milli < 0 || spec.allocatable.memory_bytes < 0 {
        return Err(invalid(
            "allocatable",
            "cpu and memory must not be negative".into(),
        ));
    }
    Ok(())
}
