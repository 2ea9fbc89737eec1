//! Kueue-shaped kinds: ClusterQueue and ResourceFlavor.

use super::reader::{at, Reader};
use crate::error::LoadError;
use k8s_openapi::api::core::v1 as core;
use kestrel_core::{
    ClusterQueueSpec, QueueingStrategy, ResourceFlavor, ResourceGroup, StopPolicy, Taint,
    TaintEffect,
};
use serde_json::{Map, Value};

pub const CLUSTER_QUEUE_FIELDS: &[&str] = &[
    "cohort",
    "cohortName",
    "namespaceSelector",
    "queueingStrategy",
    "resourceGroups",
    "preemption",
    "fairSharing",
    "stopPolicy",
    "minRuntimeSeconds",
    "preemptionDelaySeconds",
    "defaultRuntimeSeconds",
    "flavorFungibility",
];
pub const LOCAL_QUEUE_FIELDS: &[&str] = &["clusterQueue"];
pub const COHORT_FIELDS: &[&str] = &["parentName", "parent", "resourceGroups", "fairSharing"];
pub const FLAVOR_FIELDS: &[&str] = &["nodeLabels", "nodeTaints", "tolerations", "topologyName"];

pub(super) fn cluster_queue(
    r: &Reader,
    name: String,
    s: &Map<String, Value>,
) -> Result<ClusterQueueSpec, LoadError> {
    r.known_fields(s, "spec", CLUSTER_QUEUE_FIELDS)?;
    let cohort = r.string(s.get("cohort"), "spec.cohort")?;
    let cohort_name = r.string(s.get("cohortName"), "spec.cohortName")?;
    if let (Some(a), Some(b)) = (cohort, cohort_name) {
        if a != b {
            return Err(r.err(
                "spec.cohortName",
                format!("names {b:?} but spec.cohort names {a:?}; keep one"),
            ));
        }
    }
    let cohort = cohort
        .or(cohort_name)
        .filter(|c| !c.is_empty())
        .map(String::from);
    let resource_groups = r.resource_groups(s.get("resourceGroups"), "spec.resourceGroups")?;
    if cohort.is_none() {
        limits_need_a_parent(
            r,
            &resource_groups,
            "needs a cohort to borrow from or lend to; set spec.cohort or remove it",
        )?;
    }
    let stop_policy = r
        .choice(
            s.get("stopPolicy"),
            "spec.stopPolicy",
            &[
                ("None", StopPolicy::None),
                ("Hold", StopPolicy::Hold),
                ("HoldAndDrain", StopPolicy::HoldAndDrain),
            ],
        )?
        .unwrap_or_default();
    r.seconds(s.get("defaultRuntimeSeconds"), "spec.defaultRuntimeSeconds")?;
    let mut borrow_in_first_fitting_flavor = false;
    if let Some(f) = r.map(s.get("flavorFungibility"), "spec.flavorFungibility")? {
        r.known_fields(
            f,
            "spec.flavorFungibility",
            &["whenCanBorrow", "whenCanPreempt"],
        )?;
        // v1beta2 spells Borrow and Preempt MayStopSearch.
        borrow_in_first_fitting_flavor = r
            .choice(
                f.get("whenCanBorrow"),
                "spec.flavorFungibility.whenCanBorrow",
                &[
                    ("Borrow", true),
                    ("MayStopSearch", true),
                    ("TryNextFlavor", false),
                ],
            )?
            .unwrap_or(false);
        let preempt = r.choice(
            f.get("whenCanPreempt"),
            "spec.flavorFungibility.whenCanPreempt",
            &[
                ("Preempt", true),
                ("MayStopSearch", true),
                ("TryNextFlavor", false),
            ],
        )?;
        if preempt == Some(true) {
            r.warn(
                "spec.flavorFungibility.whenCanPreempt",
                "Kestrel picks the flavor before it preempts: a workload that needs to \
                 preempt in the first flavor tries the next flavors first (TryNextFlavor)",
            );
        }
    }
    Ok(ClusterQueueSpec {
        name,
        cohort,
        namespace_selector: r.selector(s.get("namespaceSelector"), "spec.namespaceSelector")?,
        queueing_strategy: r
            .choice(
                s.get("queueingStrategy"),
                "spec.queueingStrategy",
                &[
                    ("StrictFIFO", QueueingStrategy::StrictFifo),
                    ("BestEffortFIFO", QueueingStrategy::BestEffortFifo),
                ],
            )?
            .unwrap_or_default(),
        resource_groups,
        preemption: r.preemption(s.get("preemption"), "spec.preemption")?,
        fair_weight: r.fair_weight(s.get("fairSharing"), "spec.fairSharing")?,
        stop_policy,
        min_runtime: r.seconds(s.get("minRuntimeSeconds"), "spec.minRuntimeSeconds")?,
        preemption_delay: r.seconds(
            s.get("preemptionDelaySeconds"),
            "spec.preemptionDelaySeconds",
        )?,
        // Set once the flavors are known (`mark_missing_flavors`).
        inactive: None,
        cluster_scoped: false,
        borrow_in_first_fitting_flavor,
        // Kueue has no field for it: a queue's borrowed work may always be reclaimed.
        keeps_borrowed_quota: false,
    })
}

/// Refuses a borrowing or lending limit with nothing above to borrow from or lend to, as
/// Kueue does.
pub(super) fn limits_need_a_parent(
    r: &Reader,
    groups: &[ResourceGroup],
    why: &str,
) -> Result<(), LoadError> {
    for (gi, g) in groups.iter().enumerate() {
        for (fi, f) in g.flavors.iter().enumerate() {
            for (ri, q) in f.resources.iter().enumerate() {
                let limit = if q.borrowing_limit.is_some() {
                    "borrowingLimit"
                } else if q.lending_limit.is_some() {
                    "lendingLimit"
                } else {
                    continue;
                };
                return Err(r.err(
                    format!("spec.resourceGroups[{gi}].flavors[{fi}].resources[{ri}].{limit}"),
                    why,
                ));
            }
        }
    }
    Ok(())
}

pub(super) fn flavor(
    r: &Reader,
    name: String,
    s: &Map<String, Value>,
) -> Result<ResourceFlavor, LoadError> {
    r.known_fields(s, "spec", FLAVOR_FIELDS)?;
    let node_labels = r.labels(s.get("nodeLabels"), "spec.nodeLabels")?;
    let mut node_taints = Vec::new();
    for (i, t) in r
        .list(s.get("nodeTaints"), "spec.nodeTaints")?
        .iter()
        .enumerate()
    {
        let f = format!("spec.nodeTaints[{i}]");
        let t: core::Taint = serde_json::from_value(t.clone()).map_err(|e| {
            r.err(
                &f,
                format!("{e}; write {{key: ..., value: ..., effect: NoSchedule}}"),
            )
        })?;
        if t.key.is_empty() {
            return Err(r.err(at(&f, "key"), "empty taint key; set a key"));
        }
        let effect = TaintEffect::parse(&t.effect).ok_or_else(|| {
            r.err(
                at(&f, "effect"),
                format!(
                    "unknown taint effect {:?}; use NoSchedule, PreferNoSchedule or NoExecute",
                    t.effect
                ),
            )
        })?;
        node_taints.push(Taint {
            key: t.key,
            value: t.value.unwrap_or_default(),
            effect,
        });
    }
    let tolerations: Vec<core::Toleration> = match s.get("tolerations") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| {
            r.err(
                "spec.tolerations",
                format!("{e}; write [{{key: ..., operator: Exists, effect: NoSchedule}}]"),
            )
        })?,
    };
    Ok(ResourceFlavor {
        name,
        node_labels,
        node_taints,
        tolerations: r.ctx.tolerations("spec.tolerations", Some(&tolerations))?,
    })
}
