//! Gang cycles: a gang planned whole (in a topology domain if asked) and committed whole,
//! or rolled back; gang declarations and timeouts. The gang types live in [`crate::gang`].

use super::{Attempt, Cycle, QueueLink, Scheduler};
use crate::explain::{GangProblem, Unschedulable};
use crate::gang::{Domain, GangError, GangId, GangPhase, GangSpec, GangState, GangTopology};
use crate::outcome::Decisions;
use crate::preempt::WorkloadKey;
use crate::queue::Admission;
use crate::types::{Binding, GpuAssignment, Millis, NodeId, PodId, PodPhase};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A pod placed tentatively during a gang attempt.
type Placed = (PodId, NodeId, GpuAssignment);
/// Where an attempt ran (a domain's nodes, or anywhere) and its first pod that did not fit.
type AttemptStop = (Option<Vec<NodeId>>, PodId);

impl Scheduler {
    /// Sets the topology levels (node labels, from the widest domain to the narrowest),
    /// as a `Topology` object's `levels[].nodeLabel` lists them.
    pub fn set_topology_levels(&mut self, levels: Vec<String>) {
        self.gangs.levels = levels;
        // Domains are paths through the levels.
        self.domain_cache.clear();
    }

    /// Declares or updates a gang. Its pods may come before or after.
    pub fn add_gang(&mut self, spec: GangSpec) -> Result<GangId, GangError> {
        let invalid = |field, why: String| GangError {
            gang: spec.key(),
            field,
            why,
        };
        if spec.min_member == 0 {
            return Err(invalid("minMember", "must be at least 1".into()));
        }
        if let Some(total) = spec.total {
            if total < spec.min_member {
                return Err(invalid(
                    "minMember",
                    format!(
                        "{} exceeds the gang's {total} pods; lower minMember or add pods",
                        spec.min_member
                    ),
                ));
            }
        }
        if spec.fast_admission && spec.total.is_none() {
            return Err(invalid(
                "total",
                "fast admission counts the pods not created yet: say how many there will be".into(),
            ));
        }
        let role_sum: u32 = spec.role_minimums.iter().map(|(_, n)| n).sum();
        if role_sum > spec.min_member {
            return Err(invalid(
                "minTaskMember",
                format!(
                    "role minimums add up to {role_sum}, more than minMember {}",
                    spec.min_member
                ),
            ));
        }
        if let Some((_, size)) = &spec.topology.slice {
            // A fast-admission gang's pods come one at a time: its slices are of all of them.
            let (pods, field) = match spec.total.filter(|_| spec.fast_admission) {
                Some(total) => (total, "its pod count"),
                None => (spec.min_member, "minMember"),
            };
            if *size == 0 || !pods.is_multiple_of(*size) {
                return Err(invalid(
                    "slice size",
                    format!(
                        "{size} does not divide the gang's {pods} pods; use a divisor of {field}"
                    ),
                ));
            }
        }
        let t = &spec.topology;
        for level in t
            .required
            .iter()
            .chain(&t.preferred)
            .chain(t.slice.as_ref().map(|(l, _)| l))
        {
            if !self.gangs.levels.is_empty() && !self.gangs.levels.contains(level) {
                return Err(invalid(
                    "topology",
                    format!(
                        "{level:?} is not a level of the cluster's Topology ({}); use one of them",
                        self.gangs.levels.join(", ")
                    ),
                ));
            }
        }
        let id = self.gangs.id(&spec.namespace, &spec.name);
        if spec.fast_admission {
            self.gangs.fast_admission.insert(id);
        }
        self.gangs.gangs[id.0 as usize].spec = Some(spec);
        // Its waiting pods may now be able to start.
        self.capacity_may_have_grown();
        Ok(id)
    }

    pub fn gang(&self, id: GangId) -> &GangState {
        &self.gangs.gangs[id.0 as usize]
    }

    /// Every gang the engine knows (declared, or named by pods): (namespace, name).
    pub fn gang_keys(&self) -> impl Iterator<Item = (&str, &str)> {
        self.gangs
            .ids
            .iter()
            .flat_map(|(ns, names)| names.keys().map(move |n| (ns.as_str(), n.as_str())))
    }

    pub fn gang_id(&self, namespace: &str, name: &str) -> Option<GangId> {
        self.gangs.lookup(namespace, name)
    }

    /// One attempt to start a gang, whose pod `first` came up in the queue.
    pub(crate) fn schedule_gang(
        &mut self,
        gang: GangId,
        now: Millis,
        cycle: &mut Cycle,
        decisions: &mut Decisions,
    ) {
        let state = &self.gangs.gangs[gang.0 as usize];
        let pending: Vec<PodId> = state
            .members
            .iter()
            .copied()
            .filter(|&p| self.pods[p.0 as usize].phase == PodPhase::Pending)
            .collect();
        for &p in &pending {
            let key = self.pods[p.0 as usize].queue_key(p);
            self.active.remove(&key);
            for keys in cycle.borrowers.values_mut() {
                keys.remove(&key);
            }
        }
        // A stale queue key of a member that is bound by now (found by the
        // everything-at-once property test): nothing of the gang waits.
        if pending.is_empty() {
            return;
        }
        let key_name = |s: &Scheduler| {
            let p = &s.pods[pending[0].0 as usize].spec;
            format!(
                "{}/{}",
                p.namespace,
                p.gang.as_ref().map(|g| g.gang.as_str()).unwrap_or("")
            )
        };
        let total_nodes = self.cluster.len() as u32;
        let Some(spec) = state.spec.clone() else {
            let problem = GangProblem::NotFound {
                gang: key_name(self),
            };
            self.park_gang(
                &pending,
                Unschedulable::gang_only(problem, total_nodes),
                decisions,
            );
            return;
        };
        let gang_name = spec.key();
        // The deadline of the current timeout window, while the gang has not started.
        let mut deadline = None;
        if let Some(timeout) = spec
            .schedule_timeout
            .filter(|_| state.phase != GangPhase::Running)
        {
            let timed_out = || {
                Unschedulable::gang_only(
                    GangProblem::TimedOut {
                        gang: gang_name.clone(),
                        after_seconds: timeout / 1000,
                    },
                    total_nodes,
                )
            };
            // Backing off: only a change during the back-off brings it here, and that
            // change is worth a look once the back-off ends.
            if let Some(until) = state.first_seen.filter(|&u| now < u) {
                self.wake_at_least(until);
                let reason = timed_out();
                self.park_gang(&pending, reason, decisions);
                return;
            }
            let start = state.first_seen.unwrap_or(now);
            if now >= start + timeout {
                // No wake-up at the back-off's end: with nothing changed, the attempt
                // would fail the same way, and a quiet cluster would never go idle.
                let backoff = self.config.gang_backoff;
                let state = &mut self.gangs.gangs[gang.0 as usize];
                state.phase = GangPhase::TimedOut;
                state.timeouts += 1;
                state.first_seen = Some(now + backoff);
                decisions.timed_out.push(gang);
                let reason = timed_out();
                self.park_gang(&pending, reason, decisions);
                return;
            }
            deadline = Some(start + timeout);
        }
        self.attempt_gang(gang, &spec, pending, now, cycle, decisions);
        if spec.fast_admission {
            self.hold_for_missing_pods(gang, true);
        }
        // Not started: the timeout fires at its deadline, not at the next unrelated event.
        if let Some(deadline) = deadline {
            if self.gangs.gangs[gang.0 as usize].phase != GangPhase::Running {
                self.wake_at_least(deadline);
            }
        }
    }

    /// Kueue's fast admission reserves a started gang's quota for all its pods; Kestrel
    /// charges its pods as they run, so the pods not bound yet (a StatefulSet's next
    /// pods, not created yet) are held, as copies of a bound member charged to its
    /// admission, and no other workload takes that quota meanwhile. Recomputed from the
    /// gang's bound members (`hold`), or released. Whether the hold changed.
    pub(super) fn hold_for_missing_pods(&mut self, gang: GangId, hold: bool) -> bool {
        let old = self.gangs.gangs[gang.0 as usize].held.take();
        if let Some((admission, request)) = &old {
            self.queues.charge(admission, request, -1);
        }
        let new = if hold {
            self.missing_pods_hold(gang)
        } else {
            None
        };
        if let Some((admission, request)) = &new {
            self.queues.charge(admission, request, 1);
        }
        let changed = old != new;
        self.gangs.gangs[gang.0 as usize].held = new;
        changed
    }

    /// What a started fast-admission gang holds for its pods not bound yet.
    fn missing_pods_hold(&self, gang: GangId) -> Option<(Admission, Vec<(String, i64)>)> {
        let state = &self.gangs.gangs[gang.0 as usize];
        let spec = state.spec.as_ref().filter(|s| s.fast_admission)?;
        if state.phase != GangPhase::Running {
            return None;
        }
        let bound: Vec<PodId> = state
            .members
            .iter()
            .copied()
            .filter(|&p| matches!(self.pods[p.0 as usize].phase, PodPhase::Bound { .. }))
            .collect();
        let first = *bound.first()?;
        let admission = self.pods[first.0 as usize].admission.clone()?;
        let missing = spec.total?.saturating_sub(bound.len() as u32);
        if missing == 0 {
            return None;
        }
        Some((admission, self.copies_request(first, missing)))
    }

    /// Brings every fast-admission gang's hold up to date (its members come, bind and
    /// leave between cycles); a hold that changed wakes the parked workloads.
    pub(super) fn refresh_fast_admission_holds(&mut self) {
        let gangs: Vec<GangId> = self.gangs.fast_admission.iter().copied().collect();
        for gang in gangs {
            let fast = self.gangs.gangs[gang.0 as usize]
                .spec
                .as_ref()
                .is_some_and(|s| s.fast_admission);
            if self.hold_for_missing_pods(gang, fast) {
                self.generation += 1;
            }
            if !fast {
                self.gangs.fast_admission.remove(&gang);
            }
        }
    }

    /// Places the gang's pending members, or parks them with the reason.
    fn attempt_gang(
        &mut self,
        gang: GangId,
        spec: &GangSpec,
        mut pending: Vec<PodId>,
        now: Millis,
        cycle: &mut Cycle,
        decisions: &mut Decisions,
    ) {
        let state = &self.gangs.gangs[gang.0 as usize];
        let gang_name = spec.key();
        let total_nodes = self.cluster.len() as u32;
        // Members chosen as preemption victims are leaving: a pending member does not
        // join them (it would be left running alone once they are evicted).
        let running: Vec<PodId> = state
            .members
            .iter()
            .copied()
            .filter(|&p| {
                let record = &self.pods[p.0 as usize];
                matches!(record.phase, PodPhase::Bound { .. }) && !record.evicting
            })
            .collect();
        let exist = (pending.len() + running.len()) as u32;
        let role_of = |s: &Scheduler, p: PodId| {
            s.pods[p.0 as usize]
                .spec
                .gang
                .as_ref()
                .and_then(|g| g.role.clone())
                .unwrap_or_default()
        };
        let role_short = |s: &Scheduler, pods: &[PodId]| {
            spec.role_minimums.iter().find_map(|(role, min)| {
                let have = pods.iter().filter(|&&p| role_of(s, p) == *role).count() as u32;
                (have < *min).then(|| (role.clone(), have, *min))
            })
        };
        let all: Vec<PodId> = pending.iter().chain(&running).copied().collect();
        // An admitted workload's later pods need no minimum: it was met when it started.
        // Not while members are being evicted: the workload may be leaving whole.
        let admitted = spec.keeps_admission
            && state.phase == GangPhase::Running
            && !state
                .members
                .iter()
                .any(|&p| self.pods[p.0 as usize].evicting);
        let short_role = role_short(self, &all).filter(|_| !admitted);
        if !admitted && exist < spec.min_member || short_role.is_some() {
            let problem = GangProblem::Incomplete {
                gang: gang_name,
                exist,
                min_member: spec.min_member,
                total: spec.total,
                role: short_role,
            };
            self.park_gang(
                &pending,
                Unschedulable::gang_only(problem, total_nodes),
                decisions,
            );
            return;
        }
        // Neighbouring ranks next to each other.
        pending.sort_by_key(|&p| {
            (
                self.pods[p.0 as usize]
                    .spec
                    .gang
                    .as_ref()
                    .and_then(|g| g.rank),
                self.pods[p.0 as usize].queue_key(p),
            )
        });
        let needed = match admitted {
            true => 1,
            false => spec.min_member.saturating_sub(running.len() as u32) as usize,
        };
        // Its own hold is room for these pods.
        if spec.fast_admission {
            self.hold_for_missing_pods(gang, false);
        }
        let outcome = match self.admit_and_place(
            WorkloadKey::Gang(gang),
            &pending,
            Some((spec, &running, needed)),
            now,
            cycle,
            decisions,
        ) {
            Attempt::Placed(placed) => Ok(placed),
            Attempt::Failed(reason) => Err(Arc::unwrap_or_clone(reason)),
            Attempt::Deferred => {
                if let QueueLink::Cq(cq) = self.pods[pending[0].0 as usize].link {
                    let keys = cycle.borrowers.entry(cq).or_default();
                    for &p in &pending {
                        keys.insert(self.pods[p.0 as usize].queue_key(p));
                    }
                }
                return;
            }
        };
        match outcome {
            Ok(placed) => {
                let complete_roles = {
                    let mut members: Vec<PodId> = running.clone();
                    members.extend(placed.iter().map(|(p, _, _)| *p));
                    admitted || role_short(self, &members).is_none()
                };
                if complete_roles {
                    for (pod, node, gpus) in placed {
                        self.pods[pod.0 as usize].pending_reason = None;
                        decisions.bindings.push(Binding { pod, node, gpus });
                    }
                    self.gangs.gangs[gang.0 as usize].phase = GangPhase::Running;
                    // Members that did not fit (beyond the minimum) wait as ordinary pods.
                    let left: Vec<PodId> = pending
                        .iter()
                        .copied()
                        .filter(|&p| self.pods[p.0 as usize].phase == PodPhase::Pending)
                        .collect();
                    if !left.is_empty() {
                        let problem = GangProblem::Unplaceable {
                            gang: spec.key(),
                            placed: (running.len() + pending.len() - left.len()) as u32,
                            needed: spec.total.unwrap_or(exist),
                        };
                        self.park_gang(
                            &left,
                            Unschedulable::gang_only(problem, total_nodes),
                            decisions,
                        );
                    }
                    return;
                }
                let placed_count = placed.len() as u32;
                self.rollback(&placed);
                let problem = GangProblem::Unplaceable {
                    gang: spec.key(),
                    placed: placed_count + running.len() as u32,
                    needed: spec.min_member,
                };
                self.park_gang(
                    &pending,
                    Unschedulable::gang_only(problem, total_nodes),
                    decisions,
                );
            }
            Err(reason) => self.park_gang(&pending, reason, decisions),
        }
    }

    /// Places at least `needed` of `pods` (in order) with the gang's topology, tentatively
    /// bound in the index; on failure everything tried is rolled back.
    pub(crate) fn place_gang_pods(
        &mut self,
        spec: &GangSpec,
        pods: &[PodId],
        running: &[PodId],
        needed: usize,
        now: Millis,
    ) -> Result<Vec<Placed>, Unschedulable> {
        let topology = &spec.topology;
        // The most pods any attempt placed, where, and its first pod that did not fit.
        let mut best: (usize, Option<AttemptStop>) = (0, None);
        // The least they take (domains with less free are skipped).
        let gpus_needed: u64 = pods
            .iter()
            .take(needed)
            .map(|&p| self.least_gpu_milli(p))
            .sum();
        let mut attempt = |s: &mut Scheduler, nodes: Option<&[NodeId]>| -> Option<Vec<Placed>> {
            let (placed, failed) = s.try_place(topology, pods, nodes, needed, now);
            if placed.len() >= needed {
                return Some(placed);
            }
            if placed.len() >= best.0 || best.1.is_none() {
                if let Some(pod) = failed {
                    best = (
                        placed.len().max(best.0),
                        Some((nodes.map(<[NodeId]>::to_vec), pod)),
                    );
                }
            }
            s.rollback(&placed);
            None
        };
        let peer_nodes: BTreeSet<NodeId> = running
            .iter()
            .filter_map(|&p| match &self.pods[p.0 as usize].phase {
                PodPhase::Bound { node, .. } => Some(*node),
                _ => None,
            })
            .collect();
        if let Some(level) = &topology.required {
            let mut domains = self.domains(level, None);
            let count = domains.len() as u32;
            if !peer_nodes.is_empty() {
                // A running gang grows only inside the domain it started in.
                domains.retain(|(_, nodes)| nodes.iter().any(|n| peer_nodes.contains(n)));
            }
            for (_, nodes) in self.by_tightness(domains, gpus_needed) {
                if let Some(placed) = attempt(self, Some(&nodes)) {
                    return Ok(placed);
                }
            }
            let problem = GangProblem::NoDomain {
                gang: spec.key(),
                level: level.clone(),
                domains: count,
            };
            let why = match self.probing {
                true => None,
                false => self.explain_attempt(topology, pods, needed, now, best.1),
            };
            return Err(self.gang_failure(problem, why));
        }
        // Preferred level, then wider levels; peers of a running gang pull towards their rack.
        let mut levels: Vec<String> = Vec::new();
        if let Some(level) = &topology.preferred {
            levels.push(level.clone());
            if let Some(i) = self.gangs.levels.iter().position(|l| l == level) {
                levels.extend(self.gangs.levels[..i].iter().rev().cloned());
            }
        }
        if !running.is_empty() && levels.is_empty() {
            levels.push(crate::model::RACK_LABEL.to_string());
        }
        for level in levels {
            let mut domains = self.domains(&level, None);
            if !peer_nodes.is_empty() {
                domains.retain(|(_, nodes)| nodes.iter().any(|n| peer_nodes.contains(n)));
            }
            for (_, nodes) in self.by_tightness(domains, gpus_needed) {
                if let Some(placed) = attempt(self, Some(&nodes)) {
                    return Ok(placed);
                }
            }
        }
        if let Some(placed) = attempt(self, None) {
            return Ok(placed);
        }
        let problem = GangProblem::Unplaceable {
            gang: spec.key(),
            placed: (best.0 + running.len()) as u32,
            needed: spec.min_member,
        };
        let why = match self.probing {
            true => None,
            false => self.explain_attempt(topology, pods, needed, now, best.1),
        };
        Err(self.gang_failure(problem, why))
    }

    /// One placement attempt of the gang's pods, slice by slice when asked.
    fn try_place(
        &mut self,
        topology: &GangTopology,
        pods: &[PodId],
        nodes: Option<&[NodeId]>,
        needed: usize,
        now: Millis,
    ) -> (Vec<Placed>, Option<PodId>) {
        match &topology.slice {
            Some((level, size)) => self.place_in_slices(pods, nodes, level, *size as usize, now),
            None => self.place_all(pods, nodes, needed, now),
        }
    }

    /// Why the best attempt stopped: it is replayed, its first pod that did not fit is
    /// explained while its peers hold their places, and it is rolled back again. Only a
    /// gang that failed pays for this, once.
    fn explain_attempt(
        &mut self,
        topology: &GangTopology,
        pods: &[PodId],
        needed: usize,
        now: Millis,
        best: Option<AttemptStop>,
    ) -> Option<Unschedulable> {
        let (nodes, pod) = best?;
        let (placed, failed) = self.try_place(topology, pods, nodes.as_deref(), needed, now);
        let why = self.explain_pod(failed.unwrap_or(pod));
        self.rollback(&placed);
        Some(why)
    }

    /// The gang's problem, with the node-by-node reasons of its first pod that did not fit.
    fn gang_failure(&self, problem: GangProblem, first: Option<Unschedulable>) -> Unschedulable {
        match first {
            Some(reason) => reason.for_gang(problem),
            None => Unschedulable::gang_only(problem, self.cluster.len() as u32),
        }
    }

    /// Places `pods` in order (within `nodes` if given) until all are placed or `needed`
    /// is out of reach; returns those placed and the first that did not fit. A pod goes on
    /// the node of the pod before it when that node still has room, so consecutive ranks
    /// share a node (and its NVLink) before the policy picks the next one.
    fn place_all(
        &mut self,
        pods: &[PodId],
        nodes: Option<&[NodeId]>,
        needed: usize,
        now: Millis,
    ) -> (Vec<Placed>, Option<PodId>) {
        let mut placed: Vec<Placed> = Vec::new();
        let mut failed = None;
        for (i, &pod) in pods.iter().enumerate() {
            if placed.len() + (pods.len() - i) < needed {
                break;
            }
            let previous = placed.last().map(|(_, node, _)| *node);
            let result = match previous.and_then(|prev| self.place_among(pod, &[prev])) {
                Some(found) => Some(found),
                None => match nodes {
                    Some(nodes) => self.place_among(pod, nodes),
                    None => self.place(pod).ok(),
                },
            };
            match result {
                Some((node, gpus)) => {
                    self.bind(pod, node, gpus.clone(), now);
                    placed.push((pod, node, gpus));
                }
                None => {
                    failed.get_or_insert(pod);
                }
            }
        }
        (placed, failed)
    }

    /// Places pods `size` at a time, each slice whole inside one domain of `level`.
    fn place_in_slices(
        &mut self,
        pods: &[PodId],
        nodes: Option<&[NodeId]>,
        level: &str,
        size: usize,
        now: Millis,
    ) -> (Vec<Placed>, Option<PodId>) {
        let mut placed = Vec::new();
        let mut failed = None;
        for chunk in pods.chunks(size) {
            let gpus: u64 = chunk.iter().map(|&p| self.least_gpu_milli(p)).sum();
            let domains = self.domains(level, nodes);
            let mut done = false;
            for (_, domain) in self.by_tightness(domains, gpus) {
                let (slice, first) = self.place_all(chunk, Some(&domain), chunk.len(), now);
                if slice.len() == chunk.len() {
                    placed.extend(slice);
                    done = true;
                    break;
                }
                failed = failed.or(first);
                self.rollback(&slice);
            }
            if !done {
                failed = failed.or(chunk.first().copied());
                break;
            }
        }
        (placed, failed)
    }

    /// Nodes grouped by their domain of `level` (nodes without the label are in no domain),
    /// optionally only among `within`. A domain is a path: its value of `level` under its
    /// values of the levels above (a Topology's levels; without one, block above rack), so
    /// two racks labelled alike in two blocks are two racks. Its name is the path, `/`
    /// between levels.
    pub(crate) fn domains(&mut self, level: &str, within: Option<&[NodeId]>) -> Vec<Domain> {
        if within.is_none() {
            if let Some(domains) = self.domain_cache.get(level) {
                return domains.clone();
            }
        }
        let above: Vec<String> = match self.gangs.levels.iter().position(|l| l == level) {
            Some(i) => self.gangs.levels[..i].to_vec(),
            None if level == crate::model::RACK_LABEL => {
                vec![crate::model::BLOCK_LABEL.to_string()]
            }
            None => Vec::new(),
        };
        let mut out: BTreeMap<String, Vec<NodeId>> = BTreeMap::new();
        let mut add = |id: NodeId| {
            let labels = &self.cluster.node(id).spec.labels;
            if let Some(value) = labels.get(level) {
                let mut path = String::new();
                for upper in &above {
                    path.push_str(labels.get(upper).map_or("", String::as_str));
                    path.push('/');
                }
                path.push_str(value);
                out.entry(path).or_default().push(id);
            }
        };
        match within {
            Some(nodes) => nodes.iter().copied().for_each(&mut add),
            None => self.cluster.iter().for_each(|(id, _)| add(id)),
        }
        let domains: Vec<Domain> = out.into_iter().collect();
        if within.is_none() {
            self.domain_cache.insert(level.to_string(), domains.clone());
        }
        domains
    }

    /// Domains with enough free GPU thousandths for `gpu_milli`, the least free first
    /// (tightest fit keeps big domains whole), ties by name.
    fn by_tightness(&self, mut domains: Vec<Domain>, gpu_milli: u64) -> Vec<Domain> {
        let free = |nodes: &[NodeId]| -> (u64, i64) {
            nodes.iter().fold((0, 0), |(g, c), &n| {
                let node = self.cluster.node(n);
                (g + node.free_gpu_milli(), c + node.free.cpu_milli)
            })
        };
        let mut keyed: Vec<((u64, i64), Domain)> = domains
            .drain(..)
            .map(|d| (free(&d.1), d))
            .filter(|((gpu, _), _)| *gpu >= gpu_milli)
            .collect();
        keyed.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1 .0.cmp(&b.1 .0)));
        keyed.into_iter().map(|(_, d)| d).collect()
    }

    /// Undoes tentative bindings of a failed attempt. The pods stay under the attempt's
    /// admission: releasing returns their quota charge, and a later attempt (the next
    /// topology domain) charges them again as it binds them. (Dropping it let a queued gang
    /// with a required level bind uncharged after its first domain failed, found by the
    /// invariant checker in tests/everything.rs.)
    pub(crate) fn rollback(&mut self, placed: &[Placed]) {
        for (pod, _, _) in placed.iter().rev() {
            let admission = self.pods[pod.0 as usize].admission.clone();
            self.undo_claim_bindings_of(*pod);
            self.release_to_pending(*pod);
            self.pods[pod.0 as usize].admission = admission;
        }
    }

    fn park_gang(&mut self, pending: &[PodId], reason: Unschedulable, decisions: &mut Decisions) {
        let wake = self.wake_on(pending, &reason);
        let reason = Arc::new(reason);
        for &p in pending {
            let record = &mut self.pods[p.0 as usize];
            if record.pending_reason.as_deref() != Some(&*reason) {
                record.pending_reason = Some(reason.clone());
                decisions.unschedulable.push((p, reason.clone()));
            }
            self.park(p, wake);
        }
    }
}
