//! Snapshots of the engine, from per-pod bindings and node capacity only.

use crate::{
    Amount, CohortView, GangView, GpuClaim, NodeView, PartitionsView, PodView, QueueView, QuotaView,
};
use crate::{NodeTerm, Operator, PodTerm, Requirement, SpreadRule, TaintView, TolerationView};
use crate::{ShareRequest, Snapshot, VolumeAffinity, GPU, PODS};
use kestrel_core::{
    CohortSpec, GpuAssignment, GpuRequest, PodId, PodPhase, PodSpec, ResourceGroup, Resources,
    Scheduler, GPU_RESOURCE,
};
use std::collections::BTreeMap;

fn requirements(rs: &[kestrel_core::Requirement]) -> Vec<Requirement> {
    use kestrel_core::SelectorOperator as S;
    rs.iter()
        .map(|r| Requirement {
            key: r.key.clone(),
            operator: match r.operator {
                S::In => Operator::In,
                S::NotIn => Operator::NotIn,
                S::Exists => Operator::Exists,
                S::DoesNotExist => Operator::DoesNotExist,
                S::Gt => Operator::Gt,
                S::Lt => Operator::Lt,
            },
            values: r.values.clone(),
        })
        .collect()
}

fn node_terms(terms: &[kestrel_core::NodeSelectorTerm]) -> Vec<NodeTerm> {
    terms
        .iter()
        .map(|t| NodeTerm {
            match_expressions: requirements(&t.match_expressions),
            match_fields: requirements(&t.match_fields),
        })
        .collect()
}

fn pod_terms(terms: &[kestrel_core::PodAffinityTerm]) -> Vec<PodTerm> {
    terms
        .iter()
        .map(|t| PodTerm {
            selector: t.selector.as_deref().map(requirements),
            namespaces: t.namespaces.clone(),
            namespace_selector: t.namespace_selector.as_deref().map(requirements),
            topology_key: t.topology_key.clone(),
        })
        .collect()
}

fn effect(e: kestrel_core::TaintEffect) -> String {
    format!("{e:?}")
}

/// The pod's rules about other pods and volumes, its labels, node selection and
/// tolerations (its RuntimeClass's merged in, as the API server's admission does), in
/// the checker's own types.
fn placement(view: &mut PodView, spec: &PodSpec) {
    let c = &spec.constraints;
    view.labels = spec.labels.clone();
    view.node_selector = c.node_selector.clone();
    view.node_affinity = c.affinity.required.as_deref().map(node_terms);
    let runtime = c.runtime_class.as_ref();
    for (k, v) in runtime.iter().flat_map(|r| &r.node_selector) {
        view.node_selector.insert(k.clone(), v.clone());
    }
    view.tolerations = c
        .tolerations
        .iter()
        .chain(runtime.iter().flat_map(|r| &r.tolerations))
        .map(|t| TolerationView {
            key: t.key.clone(),
            exists: t.operator == kestrel_core::TolerationOperator::Exists,
            value: t.value.clone(),
            effect: t.effect.map(effect),
        })
        .collect();
    if let Some(rules) = &c.inter_pod {
        view.affinity = pod_terms(&rules.affinity);
        view.anti_affinity = pod_terms(&rules.anti_affinity);
        view.spread = rules
            .spread
            .iter()
            .filter(|s| s.hard)
            .map(|s| SpreadRule {
                max_skew: s.max_skew,
                topology_key: s.topology_key.clone(),
                selector: s.selector.as_deref().map(requirements),
                min_domains: s.min_domains,
                honor_node_affinity: s.honor_node_affinity,
                honor_taints: s.honor_taints,
            })
            .collect();
    }
    if let Some(volumes) = &c.volumes {
        view.volume_affinity = volumes
            .topology
            .iter()
            .filter(|t| !t.unbound)
            .filter_map(|t| {
                Some(VolumeAffinity {
                    claim: t.claim.clone(),
                    terms: node_terms(t.terms.as_deref()?),
                })
            })
            .collect();
        view.exclusive_claims = volumes.exclusive.clone();
        view.claims_to_bind = volumes.unbound_claims().map(str::to_string).collect();
        view.attached_volumes = volumes
            .attach
            .iter()
            .map(|a| (a.driver.clone(), a.volume.clone()))
            .collect();
    }
}

/// The volumes (or nodes) the engine bound a bound pod's unbound claims to: the pod must be
/// where they allow, as if the claims were bound.
fn claim_bindings(view: &mut PodView, s: &Scheduler, spec: &PodSpec) {
    for claim in spec
        .constraints
        .volumes
        .iter()
        .flat_map(|v| v.unbound_claims())
    {
        if let Some(terms) = s.claim_binding(claim).and_then(|b| b.terms.as_deref()) {
            view.volume_affinity.push(VolumeAffinity {
                claim: claim.to_string(),
                terms: node_terms(terms),
            });
        }
    }
}

/// The engine's amounts (cpu in millicores, bytes, plain counts) as milli-units.
fn resources(r: &Resources) -> BTreeMap<String, Amount> {
    let mut out = BTreeMap::new();
    for (name, v) in [
        ("cpu", Amount::from(r.cpu_milli)),
        ("memory", Amount::from(r.memory_bytes) * 1000),
        (
            "ephemeral-storage",
            Amount::from(r.ephemeral_storage_bytes) * 1000,
        ),
    ] {
        if v != 0 {
            out.insert(name.to_string(), v);
        }
    }
    for (name, v) in &r.extended {
        if *v != 0 {
            *out.entry(name.clone()).or_default() += Amount::from(*v) * 1000;
        }
    }
    out
}

/// What a bound pod's claims hold, per quota resource: one device per allocation result,
/// under the quota resource of the class its request (or alternative) names.
fn device_quota(s: &Scheduler, id: PodId, spec: &PodSpec) -> BTreeMap<String, Amount> {
    let mut out = BTreeMap::new();
    let Some(devices) = &spec.constraints.devices else {
        return out;
    };
    for (key, allocation) in s.pod_claim_allocations(id) {
        let Some(claim) = devices.claims.iter().find(|c| c.key == key) else {
            continue;
        };
        for result in &allocation.results {
            let choice = claim
                .requests
                .iter()
                .flat_map(|r| &r.alternatives)
                .find(|a| a.name == result.request);
            if let Some(choice) = choice {
                // One device, in milli-units.
                *out.entry(choice.quota_resource.clone()).or_default() += 1000;
            }
        }
    }
    out
}

/// A quota amount in the engine's units (cpu and GPUs in thousandths, the rest plain)
/// as milli-units.
fn quota(resource: &str, v: i64) -> Amount {
    match resource {
        "cpu" | GPU_RESOURCE => Amount::from(v),
        _ => Amount::from(v) * 1000,
    }
}

/// Quotas of a ClusterQueue's or a cohort's resource groups in milli-units.
fn quota_views(groups: &[ResourceGroup]) -> Vec<QuotaView> {
    groups
        .iter()
        .flat_map(|g| &g.flavors)
        .flat_map(|f| {
            f.resources.iter().map(|r| QuotaView {
                flavor: f.flavor.clone(),
                resource: r.name.clone(),
                nominal: quota(&r.name, r.nominal),
                borrowing_limit: r.borrowing_limit.map(|v| quota(&r.name, v)),
                lending_limit: r.lending_limit.map(|v| quota(&r.name, v)),
            })
        })
        .collect()
}

impl Snapshot {
    /// The engine's state: its nodes' specs (allocatable, pod count, devices, cordon) and
    /// whether they are reserved or nominated for pending pods, every pod that is not gone
    /// with its binding, its declared gangs, its ClusterQueues, and the
    /// `cohorts` the caller added (the engine does not list them). The engine's usage and
    /// free counters are never read. Pod keys are `namespace/name`: give pods unique
    /// names. Gangs' `departed` counts are 0 (see [`Snapshot::set_departed`]). Pods carry
    /// their labels, required pod (anti-)affinity, DoNotSchedule spread constraints, node
    /// selection, tolerations and volume rules from their specs (not the flavor labels and
    /// tolerations a ResourceFlavor adds on admission). The engine does not list
    /// namespaces' labels: fill in [`Snapshot::namespaces`] when namespace selectors read
    /// them.
    pub fn from_engine(s: &Scheduler, cohorts: &[CohortSpec]) -> Snapshot {
        let cluster = s.cluster();
        let mut reserved = s
            .reservation()
            .map(|(_, nodes, _)| nodes)
            .unwrap_or_default();
        reserved.extend(
            s.pods()
                .filter(|(_, r)| r.phase == PodPhase::Pending)
                .filter_map(|(id, _)| s.nominated_node(id)),
        );
        let nodes = cluster
            .iter()
            .map(|(id, n)| {
                let spec = &n.spec;
                let mut allocatable = resources(&spec.allocatable);
                allocatable.insert(PODS.to_string(), Amount::from(spec.max_pods) * 1000);
                if !spec.gpus.is_empty() {
                    allocatable.insert(GPU.to_string(), spec.gpus.len() as Amount * 1000);
                }
                NodeView {
                    name: spec.name.clone(),
                    allocatable,
                    gpu_devices: spec.gpus.len() as u32,
                    labels: spec.labels.clone(),
                    volume_limits: spec.volume_limits.clone(),
                    unschedulable: spec.unschedulable,
                    reserved: reserved.contains(&id),
                    partitions: (0..spec.gpus.len())
                        .filter_map(|p| {
                            let ps = spec.partitions_of(p)?;
                            let amounts = |m: &BTreeMap<String, i64>| {
                                m.iter()
                                    .map(|(k, v)| (k.clone(), Amount::from(*v)))
                                    .collect::<BTreeMap<String, Amount>>()
                            };
                            Some((
                                spec.gpus[p].index,
                                PartitionsView {
                                    capacity: amounts(&ps.capacity),
                                    consumes: ps
                                        .devices
                                        .iter()
                                        .map(|d| amounts(&d.consumes))
                                        .collect(),
                                },
                            ))
                        })
                        .collect(),
                    taints: spec
                        .taints
                        .iter()
                        .map(|t| TaintView {
                            key: t.key.clone(),
                            value: t.value.clone(),
                            effect: effect(t.effect),
                        })
                        .collect(),
                }
            })
            .collect();
        let queue_specs: BTreeMap<_, _> = s.cluster_queues().collect();
        let pods = s
            .pods()
            .filter(|(_, r)| r.phase != PodPhase::Gone)
            .map(|(id, r)| {
                let mut requests = resources(&r.spec.demand.resources);
                if let (GpuRequest::Whole(n), None) =
                    (r.spec.demand.gpu, &r.spec.constraints.devices)
                {
                    if n > 0 {
                        requests.insert(GPU.to_string(), Amount::from(n) * 1000);
                    }
                }
                let (node, gpu) = match &r.phase {
                    PodPhase::Bound { node, gpus, .. } => (
                        Some(
                            cluster
                                .get(*node)
                                .map(|n| n.spec.name.clone())
                                .unwrap_or_else(|| format!("<removed node #{}>", node.0)),
                        ),
                        match gpus {
                            GpuAssignment::None => GpuClaim::None,
                            GpuAssignment::Whole(v) if v.is_empty() => GpuClaim::None,
                            GpuAssignment::Whole(v) => GpuClaim::Whole(v.clone()),
                            GpuAssignment::Shared { index, milli } => GpuClaim::Share {
                                index: *index,
                                milli: *milli,
                            },
                            GpuAssignment::Partitions(parts) => GpuClaim::Partitions(
                                parts.iter().map(|r| (r.index, r.partition)).collect(),
                            ),
                        },
                    ),
                    _ => (None, GpuClaim::None),
                };
                let cq = s.queue_of(id).and_then(|cq| queue_specs.get(&cq));
                let mut flavors = BTreeMap::new();
                if let (Some(cq), Some(admission)) = (cq, &r.admission) {
                    for (group, &fi) in cq.resource_groups.iter().zip(&admission.flavors) {
                        if let Some(f) = group.flavors.get(fi as usize) {
                            for resource in &group.covered {
                                flavors.insert(resource.clone(), f.flavor.clone());
                            }
                        }
                    }
                }
                let mut view = PodView {
                    key: r.spec.key(),
                    node,
                    requests,
                    gpu,
                    gang: r
                        .spec
                        .gang
                        .as_ref()
                        .map(|g| format!("{}/{}", r.spec.namespace, g.gang)),
                    queue: cq.map(|q| q.name.clone()),
                    flavors,
                    priority: r.spec.priority,
                    resource_claims: r
                        .spec
                        .constraints
                        .devices
                        .iter()
                        .flat_map(|d| &d.claims)
                        .map(|c| c.key.clone())
                        .collect(),
                    gpu_share: match r.spec.demand.gpu {
                        GpuRequest::Shared { milli } => Some(ShareRequest::Milli(milli)),
                        GpuRequest::Memory { mib } => Some(ShareRequest::MemoryMib(mib)),
                        GpuRequest::None | GpuRequest::Whole(_) => None,
                    },
                    single_numa_node: r.spec.constraints.single_numa_node,
                    ..PodView::default()
                };
                placement(&mut view, &r.spec);
                if matches!(r.phase, PodPhase::Bound { .. }) {
                    claim_bindings(&mut view, s, &r.spec);
                    view.device_quota = device_quota(s, id, &r.spec);
                }
                view
            })
            .collect();
        let gangs = s
            .gang_keys()
            .filter_map(|(ns, name)| {
                let state = s.gang(s.gang_id(ns, name)?);
                let spec = state.spec.as_ref()?;
                Some(GangView {
                    key: format!("{ns}/{name}"),
                    min_member: spec.min_member,
                    total: spec.total,
                    departed: 0,
                    required_domain: spec.topology.required.clone(),
                    roles_or_slices: !spec.role_minimums.is_empty()
                        || spec.topology.slice.is_some(),
                    timed_out: state.phase == kestrel_core::GangPhase::TimedOut,
                })
            })
            .collect();
        let queues = queue_specs
            .values()
            .map(|q| QueueView {
                name: q.name.clone(),
                cohort: q.cohort.clone(),
                quotas: quota_views(&q.resource_groups),
            })
            .collect();
        let cohorts = cohorts
            .iter()
            .map(|c| CohortView {
                name: c.name.clone(),
                parent: c.parent.clone(),
                quotas: quota_views(&c.resource_groups),
            })
            .collect();
        Snapshot {
            nodes,
            pods,
            gangs,
            queues,
            cohorts,
            namespaces: BTreeMap::new(),
        }
    }
}
