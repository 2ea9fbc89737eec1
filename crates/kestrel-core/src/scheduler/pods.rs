//! A pod's life in the engine: submitted, bound (charged to its queue), evicted or
//! unbound back to pending, finished.

use super::{PodRecord, QueueKey, QueueLink, QuotaRequest, Scheduler};
use crate::devices::ClaimAllocation;
use crate::hints::WakeOn;
use crate::model::{Demand, GpuRequest, PodSpec};
use crate::outcome::ClusterError;
use crate::policy::Policy;
use crate::queue::PODS_RESOURCE;
use crate::resources::GPU_RESOURCE;
use crate::types::{GpuAssignment, Millis, NodeId, PodId, PodPhase};
use std::collections::BTreeMap;

impl Scheduler {
    /// What the pod counts against queue quota now: an `All` device request the most
    /// DRA devices one node publishes (exactly what it got once bound).
    pub(super) fn quota_request_of(&self, spec: &PodSpec) -> QuotaRequest {
        let most = match &spec.constraints.devices {
            Some(d) if d.takes_all() => self
                .cluster
                .iter()
                .filter(|(_, n)| n.spec.gpus_are_dra())
                .map(|(_, n)| n.spec.gpus.len() as u32)
                .max()
                .unwrap_or(0),
            _ => 0,
        };
        let devices = spec
            .constraints
            .devices
            .as_ref()
            .map_or_else(Vec::new, |d| d.quota(most, crate::queue::quota_scale));
        quota_request(spec, &devices)
    }

    /// A binding's exact queue charge for a pod with claims: what the claims allocated
    /// (`fresh`, or held before) hold.
    fn bound_quota_request(&self, id: PodId, fresh: &[(String, ClaimAllocation)]) -> QuotaRequest {
        let spec = &self.pods[id.0 as usize].spec;
        let Some(devices) = &spec.constraints.devices else {
            return self.pods[id.0 as usize].quota_request.clone();
        };
        let mut exact = devices.clone();
        for claim in exact.claims.iter_mut().filter(|c| c.allocation.is_none()) {
            claim.allocation = fresh
                .iter()
                .find(|(key, _)| *key == claim.key)
                .map(|(_, a)| a.clone())
                .or_else(|| self.claims.get(&claim.key).map(|h| h.allocation.clone()));
        }
        if exact.claims.iter().any(|c| c.allocation.is_none()) {
            return self.pods[id.0 as usize].quota_request.clone();
        }
        quota_request(spec, &exact.quota(0, crate::queue::quota_scale))
    }

    /// Accounts a pod that is already bound (by an earlier leader, another scheduler, or
    /// before a restart). Reality wins over capacity: the pod is counted even if the node
    /// looks full. `gpus`: the devices recorded on the pod; `None` picks free ones.
    pub fn restore_bound(
        &mut self,
        spec: PodSpec,
        node_name: &str,
        gpus: Option<GpuAssignment>,
        now: Millis,
    ) -> Result<PodId, ClusterError> {
        let node = self
            .cluster
            .id_of(node_name)
            .ok_or_else(|| ClusterError::UnknownNode(node_name.to_string()))?;
        let state = self.cluster.node(node);
        let gpus = match gpus {
            Some(gpus) => state.known_devices(&gpus),
            None if state.gpu_fits(spec.demand.gpu) => state.choose_gpus(spec.demand.gpu, None),
            None => GpuAssignment::None,
        };
        let id = self.submit(spec, now);
        let key = self.pods[id.0 as usize].queue_key(id);
        self.active.remove(&key);
        // A queued pod counts against its ClusterQueue's quota as it did when admitted.
        if let QueueLink::Cq(cq) = self.pods[id.0 as usize].link {
            let labels = &self.cluster.node(node).spec.labels;
            self.pods[id.0 as usize].admission = Some(self.queues.restored_admission(cq, labels));
        }
        self.bind(id, node, gpus, now);
        Ok(id)
    }

    /// A bound pod holds other devices of its node than it was counted on (another
    /// scheduler bound it, and its claim, seen after the pod, names them): it holds those
    /// from now on. Only whole GPUs, as many as before; `false` when nothing changed.
    pub fn move_bound_gpus(&mut self, id: PodId, gpus: &GpuAssignment) -> bool {
        let Some(PodPhase::Bound {
            node, gpus: old, ..
        }) = self.pods.get(id.0 as usize).map(|r| &r.phase)
        else {
            return false;
        };
        let node = *node;
        let new = self.cluster.node(node).known_devices(gpus);
        let same_count = matches!((old, &new), (GpuAssignment::Whole(a), GpuAssignment::Whole(b))
            if a.len() == b.len());
        if !same_count || *old == new {
            return false;
        }
        let old = old.clone();
        let key = self.node_key();
        self.cluster.unindex(node);
        let state = self.cluster.node_mut_unindexed(node);
        state.reserve_devices(&old, false);
        state.reserve_devices(&new, true);
        self.cluster.reindex(node, &key);
        if let PodPhase::Bound { gpus, .. } = &mut self.pods[id.0 as usize].phase {
            *gpus = new;
        }
        self.capacity_may_have_grown();
        true
    }

    /// Undoes a binding the driver could not carry out (the API refused it): frees what the
    /// pod held and puts it back in the queue.
    pub fn unbind(&mut self, id: PodId) -> Result<(), ClusterError> {
        let bound = self
            .pods
            .get(id.0 as usize)
            .ok_or(ClusterError::UnknownPod(id))?;
        if !matches!(bound.phase, PodPhase::Bound { .. }) {
            return Err(ClusterError::UnknownPod(id));
        }
        self.release_to_pending(id);
        let key = self.pods[id.0 as usize].queue_key(id);
        self.active.insert(key);
        self.capacity_may_have_grown();
        Ok(())
    }

    /// Frees what a bound pod holds and makes it pending again (not queued).
    pub(crate) fn release_to_pending(&mut self, id: PodId) {
        let record = &mut self.pods[id.0 as usize];
        let PodPhase::Bound { node, gpus, .. } =
            std::mem::replace(&mut record.phase, PodPhase::Pending)
        else {
            unreachable!("release_to_pending on a pod that is not bound")
        };
        let resources = record.spec.demand.resources.clone();
        self.cluster.unindex(node);
        self.cluster
            .node_mut_unindexed(node)
            .release(id, &resources, &gpus);
        let node_key = self.node_key();
        self.cluster.reindex(node, &node_key);
        self.unaccount(id);
        self.inter_pod_unbound(id);
        self.inter_pod_pending(id);
        self.pending += 1;
        self.release_unconfirmed_claims_of(id);
    }

    /// Returns a pod's queue charge and takes it out of the preemption indexes.
    pub(super) fn unaccount(&mut self, id: PodId) {
        let record = &mut self.pods[id.0 as usize];
        if let Some(admission) = record.admission.take() {
            self.queues.charge(&admission, &record.quota_request, -1);
            if let Some(set) = self.preemption.bound_by_cq.get_mut(&admission.cq) {
                set.remove(&id);
            }
        }
        if let GpuRequest::Memory { .. } = record.spec.demand.gpu {
            set_quota_gpu(&mut record.quota_request, 0);
        }
        if record.spec.constraints.devices.is_some() {
            let pending = self.quota_request_of(&self.pods[id.0 as usize].spec);
            self.pods[id.0 as usize].quota_request = pending;
        }
        let record = &mut self.pods[id.0 as usize];
        self.preemption
            .bound_by_priority
            .remove(&(record.spec.priority, id));
        record.evicting = false;
        if let Some(preemptor) = self.preemption.preemptor_of.remove(&id) {
            if let Some(left) = self.preemption.awaiting.get_mut(&preemptor) {
                *left = left.saturating_sub(1);
                if *left == 0 {
                    self.preemption.awaiting.remove(&preemptor);
                    self.preemption.ready_preemptors.push(preemptor);
                }
            }
        }
    }

    /// Adds a pod to the queue.
    pub fn submit(&mut self, spec: PodSpec, now: Millis) -> PodId {
        let mut spec = spec;
        self.pin_to_held_claims(&mut spec);
        let constraint = self.constraints.intern(&spec.constraints);
        let signature = self
            .constraints
            .intern_signature(constraint, spec.demand.clone());
        match spec.demand.gpu {
            // The mix learns a share by memory as the share it takes on the cluster's
            // smallest device that holds it.
            GpuRequest::Memory { mib } => {
                if let Some(milli) = self.cluster.memory_share_milli(mib) {
                    let gpu = match milli {
                        1000 => GpuRequest::Whole(1),
                        milli => GpuRequest::Shared { milli },
                    };
                    self.packing.observe(&Demand {
                        resources: spec.demand.resources.clone(),
                        gpu,
                    });
                }
            }
            _ => self.packing.observe(&spec.demand),
        }
        if self.config.policy == Policy::Fgd {
            self.fgd.observe(&spec.demand, &spec.constraints);
        }
        let id = PodId(self.pods.len() as u32);
        let link = self.link_of(&spec);
        let quota_request = self.quota_request_of(&spec);
        let seq = self.queue_seq(&spec);
        let record = PodRecord {
            spec,
            phase: PodPhase::Pending,
            submitted_at: now,
            pending_reason: None,
            admission: None,
            evicting: false,
            last_checkpoint: None,
            link,
            quota_request,
            seq,
            constraint,
            base_constraint: constraint,
            signature,
            parked_at: 0,
            wake_on: WakeOn::Any,
            quota_settled: false,
        };
        self.active.insert(record.queue_key(id));
        if let Some(membership) = &record.spec.gang {
            let gang = self.gangs.id(&record.spec.namespace, &membership.gang);
            let state = &mut self.gangs.gangs[gang.0 as usize];
            state.first_seen.get_or_insert(now);
            let had_peers = !state.members.is_empty();
            state.members.insert(id);
            // A new member may complete the gang: its waiting peers get another look. (No
            // copy of the members: one per new member made a big gang quadratic.)
            if had_peers && !self.parked.is_empty() {
                let members = &self.gangs.gangs[gang.0 as usize].members;
                let parked_peers: Vec<QueueKey> = self
                    .parked
                    .iter()
                    .copied()
                    .filter(|k| k.2 != id && members.contains(&k.2))
                    .collect();
                self.parked
                    .retain(|k| !(k.2 != id && members.contains(&k.2)));
                self.active.extend(parked_peers);
            }
        }
        if let Some(devices) = &record.spec.constraints.devices {
            for claim in &devices.claims {
                self.claim_users
                    .entry(claim.key.clone())
                    .or_default()
                    .push(id);
            }
        }
        self.pods.push(record);
        self.inter_pod_pending(id);
        self.pending += 1;
        id
    }

    /// A new pod's place in the queue: the next one, or its gang's original place if the
    /// gang was evicted.
    fn queue_seq(&mut self, spec: &PodSpec) -> u64 {
        let fresh = self.next_seq;
        self.next_seq += 1;
        let Some(membership) = &spec.gang else {
            return fresh;
        };
        let gang = self.gangs.id(&spec.namespace, &membership.gang);
        let state = &mut self.gangs.gangs[gang.0 as usize];
        let place = *state.queue_place.get_or_insert(fresh);
        if state.keeps_place {
            place
        } else {
            fresh
        }
    }

    /// A running pod was evicted (not finished): if it is a gang's, the pods that replace
    /// the gang's members queue at the gang's original place.
    pub fn keep_queue_place(&mut self, id: PodId) {
        let Some(record) = self.pods.get(id.0 as usize) else {
            return;
        };
        let running = matches!(record.phase, PodPhase::Bound { .. });
        if let (true, Some(membership)) = (running, &record.spec.gang) {
            if let Some(gang) = self.gangs.lookup(&record.spec.namespace, &membership.gang) {
                self.gangs.gangs[gang.0 as usize].keeps_place = true;
            }
        }
    }

    /// A pod ended (completed, failed or deleted): releases what it held, or takes it out
    /// of the queue if it never ran.
    pub fn finish(&mut self, id: PodId) -> Result<(), ClusterError> {
        let record = self
            .pods
            .get_mut(id.0 as usize)
            .ok_or(ClusterError::UnknownPod(id))?;
        if let Some(membership) = &record.spec.gang {
            if let Some(gang) = self.gangs.lookup(&record.spec.namespace, &membership.gang) {
                self.gangs.gangs[gang.0 as usize].members.remove(&id);
            }
        }
        if matches!(record.phase, PodPhase::Pending) && !self.holds.is_empty() {
            let workload = self.workload_of(id);
            self.release_holds(workload);
        }
        let record = &mut self.pods[id.0 as usize];
        match std::mem::replace(&mut record.phase, PodPhase::Gone) {
            PodPhase::Gone => return Err(ClusterError::UnknownPod(id)),
            PodPhase::Pending => {
                let key = record.queue_key(id);
                if !self.active.remove(&key) {
                    self.parked.retain(|k| *k != key);
                }
                self.pending -= 1;
                self.inter_pod_not_pending(id);
            }
            PodPhase::Bound { node, gpus, .. } => {
                let resources = record.spec.demand.resources.clone();
                let cq = record.admission.as_ref().map(|a| a.cq);
                let gang = record.spec.gang.is_some();
                self.cluster.unindex(node);
                self.cluster
                    .node_mut_unindexed(node)
                    .release(id, &resources, &gpus);
                let key = self.node_key();
                self.cluster.reindex(node, &key);
                self.unaccount(id);
                self.inter_pod_unbound(id);
                self.log_release(node, cq, gang);
            }
        }
        let record = &self.pods[id.0 as usize];
        for claim in record
            .spec
            .constraints
            .devices
            .iter()
            .flat_map(|d| &d.claims)
        {
            if let Some(users) = self.claim_users.get_mut(&claim.key) {
                users.retain(|&u| u != id);
                if users.is_empty() {
                    self.claim_users.remove(&claim.key);
                }
            }
        }
        Ok(())
    }

    /// The workload reports a checkpoint (e.g. `kestrel.dev/last-checkpoint`).
    pub fn record_checkpoint(&mut self, id: PodId, at: Millis) -> Result<(), ClusterError> {
        let record = self
            .pods
            .get_mut(id.0 as usize)
            .ok_or(ClusterError::UnknownPod(id))?;
        record.last_checkpoint = Some(record.last_checkpoint.map_or(at, |t| t.max(at)));
        Ok(())
    }

    /// A preempted (or drained) pod left its node: what it held is free and it waits in
    /// the queue again, with its original place in line.
    pub fn evict(&mut self, id: PodId) -> Result<(), ClusterError> {
        let record = self
            .pods
            .get(id.0 as usize)
            .ok_or(ClusterError::UnknownPod(id))?;
        if !matches!(record.phase, PodPhase::Bound { .. }) {
            return Err(ClusterError::UnknownPod(id));
        }
        self.release_to_pending(id);
        let record = &self.pods[id.0 as usize];
        let key = record.queue_key(id);
        if let Some(membership) = &record.spec.gang {
            let gang = self
                .gangs
                .id(&record.spec.namespace.clone(), &membership.gang.clone());
            let still_running = self.gangs.gangs[gang.0 as usize]
                .members
                .iter()
                .any(|p| matches!(self.pods[p.0 as usize].phase, PodPhase::Bound { .. }));
            if !still_running {
                // Waiting again, with a fresh timeout window.
                let now = self.now;
                let state = &mut self.gangs.gangs[gang.0 as usize];
                state.phase = crate::gang::GangPhase::Waiting;
                state.first_seen = Some(now);
            }
        }
        self.active.insert(key);
        self.capacity_may_have_grown();
        Ok(())
    }

    pub(crate) fn bind(&mut self, id: PodId, node: NodeId, gpus: GpuAssignment, now: Millis) {
        let key = self.node_key();
        if let GpuRequest::Memory { .. } = self.pods[id.0 as usize].spec.demand.gpu {
            // Charged what its device holds; a restored pod whose device is unknown counts
            // the most it could take (one device if no device here holds it).
            let milli = match &gpus {
                GpuAssignment::Shared { milli, .. } => *milli as u64,
                _ => match self
                    .gpu_milli_bounds(self.pods[id.0 as usize].spec.demand.gpu)
                    .1
                {
                    0 => 1000,
                    most => most,
                },
            };
            set_quota_gpu(&mut self.pods[id.0 as usize].quota_request, milli);
        }
        // Which claim each device serves, seen before the devices are taken.
        let fresh_claims = self.fresh_claims(id, node, &gpus);
        let charge = self.bound_quota_request(id, &fresh_claims);
        self.pods[id.0 as usize].quota_request = charge;
        let record = &mut self.pods[id.0 as usize];
        self.cluster.unindex(node);
        self.cluster
            .node_mut_unindexed(node)
            .allocate(id, &record.spec.demand.resources, &gpus);
        self.cluster.reindex(node, &key);
        record.phase = PodPhase::Bound {
            node,
            gpus,
            at: now,
        };
        record.pending_reason = None;
        self.hold_fresh_claims(fresh_claims);
        self.charge_admission(id);
        let record = &self.pods[id.0 as usize];
        self.preemption
            .bound_by_priority
            .insert((record.spec.priority, id));
        let (cq, priority) = (
            record.admission.as_ref().map(|a| a.cq),
            record.spec.priority,
        );
        self.inter_pod_not_pending(id);
        self.inter_pod_bound(id);
        self.log_bind(node, cq, priority);
        self.pending -= 1;
    }

    /// Charges a bound pod's admission (if any) to its ClusterQueue's usage.
    pub(super) fn charge_admission(&mut self, id: PodId) {
        let record = &self.pods[id.0 as usize];
        if let Some(admission) = &record.admission {
            self.queues.charge(admission, &record.quota_request, 1);
            self.preemption
                .bound_by_cq
                .entry(admission.cq)
                .or_default()
                .insert(id);
        }
    }
}

/// What a pod counts against queue quota: each resource it requests, and one pod, by name.
/// A share by GPU memory gets its `nvidia.com/gpu` amount when bound (see
/// [`set_quota_gpu`]); DRA devices count under their classes' quota resources
/// ([`crate::DeviceClaims::quota`]), exactly once bound.
fn quota_request(spec: &PodSpec, devices: &[(String, i64)]) -> QuotaRequest {
    let r = &spec.demand.resources;
    let mut out: BTreeMap<String, i64> = BTreeMap::from([(PODS_RESOURCE.to_string(), 1)]);
    let gpu_milli = match (spec.demand.gpu, &spec.constraints.devices) {
        (_, Some(_)) | (GpuRequest::Memory { .. }, _) => 0,
        (gpu, None) => gpu.milli() as i64,
    };
    for (name, amount) in [
        ("cpu", r.cpu_milli),
        ("memory", r.memory_bytes),
        ("ephemeral-storage", r.ephemeral_storage_bytes),
        (GPU_RESOURCE, gpu_milli),
    ] {
        if amount > 0 {
            *out.entry(name.to_string()).or_default() += amount;
        }
    }
    for (name, amount) in r.extended.iter().filter(|(_, a)| *a > 0) {
        *out.entry(name.clone()).or_default() += amount;
    }
    for (name, amount) in devices {
        *out.entry(name.clone()).or_default() += amount;
    }
    out.into_iter().collect()
}

/// Sets the `nvidia.com/gpu` amount of a quota request (0: none).
fn set_quota_gpu(request: &mut QuotaRequest, milli: u64) {
    let mut out: BTreeMap<String, i64> = request
        .iter()
        .filter(|(r, _)| r != GPU_RESOURCE)
        .cloned()
        .collect();
    if milli > 0 {
        out.insert(GPU_RESOURCE.to_string(), milli as i64);
    }
    *request = out.into_iter().collect();
}
