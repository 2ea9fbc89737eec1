//! A pod's rules about other pods, read from its spec: `affinity.podAffinity` and
//! `affinity.podAntiAffinity` (required and preferred terms), `topologySpreadConstraints`,
//! and the host ports of its containers. Input the API server would reject is refused
//! with the field and the fix; `matchLabelKeys` and `mismatchLabelKeys` are merged into
//! the selectors with the pod's own label values, as the API server does.

use crate::error::LoadError;
use crate::fields::Ctx;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use kestrel_core::{
    HostPort, InterPodRules, LabelSelector, PodAffinityTerm, Requirement, SelectorOperator,
    SpreadConstraint,
};
use std::collections::BTreeMap;

/// A label selector as requirements (`matchLabels` as `In` of one value). The operators
/// are those of label selectors: In, NotIn, Exists, DoesNotExist.
pub fn label_selector(
    ctx: &Ctx,
    field: &str,
    selector: &meta::LabelSelector,
) -> Result<LabelSelector, LoadError> {
    let mut out: LabelSelector = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| Requirement {
            key: k.clone(),
            operator: SelectorOperator::In,
            values: vec![v.clone()],
        })
        .collect();
    for (i, r) in selector.match_expressions.iter().flatten().enumerate() {
        let f = format!("{field}.matchExpressions[{i}]");
        if r.key.is_empty() {
            return Err(ctx.err(format!("{f}.key"), "a label selector needs a key"));
        }
        let operator = match r.operator.as_str() {
            "In" => SelectorOperator::In,
            "NotIn" => SelectorOperator::NotIn,
            "Exists" => SelectorOperator::Exists,
            "DoesNotExist" => SelectorOperator::DoesNotExist,
            other => {
                return Err(ctx.err(
                    format!("{f}.operator"),
                    format!(
                        "unknown label selector operator {other:?}; use In, NotIn, Exists or \
                         DoesNotExist"
                    ),
                ))
            }
        };
        let values = r.values.clone().unwrap_or_default();
        match operator {
            SelectorOperator::In | SelectorOperator::NotIn if values.is_empty() => {
                return Err(ctx.err(
                    format!("{f}.values"),
                    format!("operator {} needs one or more values", r.operator),
                ))
            }
            SelectorOperator::Exists | SelectorOperator::DoesNotExist if !values.is_empty() => {
                return Err(ctx.err(
                    format!("{f}.values"),
                    format!("operator {} takes no values; remove them", r.operator),
                ))
            }
            _ => {}
        }
        out.push(Requirement {
            key: r.key.clone(),
            operator,
            values,
        });
    }
    Ok(out)
}

/// The pod's inter-pod rules; `None` when it has none.
pub fn inter_pod_rules(
    ctx: &Ctx,
    sf: &str,
    spec: &core::PodSpec,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Result<Option<Box<InterPodRules>>, LoadError> {
    let mut rules = InterPodRules::default();
    let affinity = spec.affinity.as_ref();
    if let Some(a) = affinity.and_then(|a| a.pod_affinity.as_ref()) {
        let f = format!("{sf}.affinity.podAffinity");
        (rules.affinity, rules.preferred_affinity) = terms(
            ctx,
            &f,
            a.required_during_scheduling_ignored_during_execution
                .as_ref(),
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref(),
            namespace,
            labels,
        )?;
    }
    if let Some(a) = affinity.and_then(|a| a.pod_anti_affinity.as_ref()) {
        let f = format!("{sf}.affinity.podAntiAffinity");
        (rules.anti_affinity, rules.preferred_anti_affinity) = terms(
            ctx,
            &f,
            a.required_during_scheduling_ignored_during_execution
                .as_ref(),
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref(),
            namespace,
            labels,
        )?;
    }
    for (i, c) in spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
    {
        let f = format!("{sf}.topologySpreadConstraints[{i}]");
        let constraint = spread(ctx, &f, c, labels)?;
        if rules
            .spread
            .iter()
            .any(|o| o.topology_key == constraint.topology_key && o.hard == constraint.hard)
        {
            return Err(ctx.err(
                f,
                format!(
                    "a second constraint on topologyKey {:?} with whenUnsatisfiable {}; \
                     keep one per key and kind",
                    c.topology_key, c.when_unsatisfiable
                ),
            ));
        }
        rules.spread.push(constraint);
    }
    Ok((!rules.is_empty()).then(|| Box::new(rules)))
}

type Weighted = Vec<(i32, PodAffinityTerm)>;

fn terms(
    ctx: &Ctx,
    field: &str,
    required: Option<&Vec<core::PodAffinityTerm>>,
    preferred: Option<&Vec<core::WeightedPodAffinityTerm>>,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Result<(Vec<PodAffinityTerm>, Weighted), LoadError> {
    let required = required
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, t)| {
            let f = format!("{field}.requiredDuringSchedulingIgnoredDuringExecution[{i}]");
            term(ctx, &f, t, namespace, labels)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut weighted = Vec::new();
    for (i, w) in preferred.into_iter().flatten().enumerate() {
        let f = format!("{field}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
        if !(1..=100).contains(&w.weight) {
            return Err(ctx.err(
                format!("{f}.weight"),
                format!("weight {} is out of range; use 1 to 100", w.weight),
            ));
        }
        let t = term(
            ctx,
            &format!("{f}.podAffinityTerm"),
            &w.pod_affinity_term,
            namespace,
            labels,
        )?;
        weighted.push((w.weight, t));
    }
    Ok((required, weighted))
}

fn term(
    ctx: &Ctx,
    field: &str,
    t: &core::PodAffinityTerm,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Result<PodAffinityTerm, LoadError> {
    if t.topology_key.is_empty() {
        return Err(ctx.err(
            format!("{field}.topologyKey"),
            "a pod affinity term needs a topologyKey (a node label such as \
             kubernetes.io/hostname or topology.kubernetes.io/zone)",
        ));
    }
    let selector = match &t.label_selector {
        Some(s) => Some(label_selector(ctx, &format!("{field}.labelSelector"), s)?),
        None => None,
    };
    let selector = merge_label_keys(
        ctx,
        field,
        selector,
        t.match_label_keys.as_deref().unwrap_or_default(),
        t.mismatch_label_keys.as_deref().unwrap_or_default(),
        labels,
    )?;
    let namespace_selector = match &t.namespace_selector {
        Some(s) => Some(label_selector(
            ctx,
            &format!("{field}.namespaceSelector"),
            s,
        )?),
        None => None,
    };
    let mut namespaces = t.namespaces.clone().unwrap_or_default();
    if namespaces.is_empty() && namespace_selector.is_none() {
        namespaces.push(namespace.to_string());
    }
    namespaces.sort();
    namespaces.dedup();
    Ok(PodAffinityTerm {
        selector,
        namespaces,
        namespace_selector,
        topology_key: t.topology_key.clone(),
    })
}

/// Adds `key In (the pod's value)` for each of `match_keys` and `key NotIn (its value)`
/// for each of `mismatch_keys` the pod carries.
fn merge_label_keys(
    ctx: &Ctx,
    field: &str,
    selector: Option<LabelSelector>,
    match_keys: &[String],
    mismatch_keys: &[String],
    labels: &BTreeMap<String, String>,
) -> Result<Option<LabelSelector>, LoadError> {
    if match_keys.is_empty() && mismatch_keys.is_empty() {
        return Ok(selector);
    }
    let Some(mut selector) = selector else {
        let which = match match_keys.is_empty() {
            true => "mismatchLabelKeys",
            false => "matchLabelKeys",
        };
        return Err(ctx.err(
            format!("{field}.{which}"),
            format!("{which} needs a labelSelector; add one (e.g. matchLabels of the app)"),
        ));
    };
    if let Some(k) = match_keys.iter().find(|k| mismatch_keys.contains(k)) {
        return Err(ctx.err(
            format!("{field}.mismatchLabelKeys"),
            format!("key {k:?} is in both matchLabelKeys and mismatchLabelKeys; keep it in one"),
        ));
    }
    for (keys, operator) in [
        (match_keys, SelectorOperator::In),
        (mismatch_keys, SelectorOperator::NotIn),
    ] {
        for key in keys {
            if let Some(value) = labels.get(key) {
                let requirement = Requirement {
                    key: key.clone(),
                    operator,
                    values: vec![value.clone()],
                };
                // The API server has merged them already into a live pod's selector.
                if !selector.contains(&requirement) {
                    selector.push(requirement);
                }
            }
        }
    }
    Ok(Some(selector))
}

fn spread(
    ctx: &Ctx,
    field: &str,
    c: &core::TopologySpreadConstraint,
    labels: &BTreeMap<String, String>,
) -> Result<SpreadConstraint, LoadError> {
    if c.max_skew < 1 {
        return Err(ctx.err(
            format!("{field}.maxSkew"),
            format!(
                "maxSkew {} is out of range; it must be 1 or more (the most the domains' pod \
                 counts may differ)",
                c.max_skew
            ),
        ));
    }
    if c.topology_key.is_empty() {
        return Err(ctx.err(
            format!("{field}.topologyKey"),
            "a topology spread constraint needs a topologyKey (a node label such as \
             kubernetes.io/hostname or topology.kubernetes.io/zone)",
        ));
    }
    let hard = match c.when_unsatisfiable.as_str() {
        "DoNotSchedule" => true,
        "ScheduleAnyway" => false,
        other => {
            return Err(ctx.err(
                format!("{field}.whenUnsatisfiable"),
                format!("unknown value {other:?}; use DoNotSchedule or ScheduleAnyway"),
            ))
        }
    };
    let min_domains = match c.min_domains {
        None => None,
        Some(_) if !hard => {
            return Err(ctx.err(
                format!("{field}.minDomains"),
                "minDomains applies only with whenUnsatisfiable: DoNotSchedule; remove it or \
                 change whenUnsatisfiable",
            ))
        }
        Some(m) if m < 1 => {
            return Err(ctx.err(
                format!("{field}.minDomains"),
                format!("minDomains {m} is out of range; it must be 1 or more"),
            ))
        }
        Some(m) => Some(m as u32),
    };
    let policy = |name: &str, value: Option<&str>, default: bool| match value {
        None => Ok(default),
        Some("Honor") => Ok(true),
        Some("Ignore") => Ok(false),
        Some(other) => Err(ctx.err(
            format!("{field}.{name}"),
            format!("unknown policy {other:?}; use Honor or Ignore"),
        )),
    };
    let honor_node_affinity = policy(
        "nodeAffinityPolicy",
        c.node_affinity_policy.as_deref(),
        true,
    )?;
    let honor_taints = policy("nodeTaintsPolicy", c.node_taints_policy.as_deref(), false)?;
    let selector = match &c.label_selector {
        Some(s) => Some(label_selector(ctx, &format!("{field}.labelSelector"), s)?),
        None => None,
    };
    let match_keys = c.match_label_keys.as_deref().unwrap_or_default();
    let selector = merge_label_keys(ctx, field, selector, match_keys, &[], labels)?;
    Ok(SpreadConstraint {
        max_skew: c.max_skew as u32,
        topology_key: c.topology_key.clone(),
        hard,
        selector,
        min_domains,
        honor_node_affinity,
        honor_taints,
    })
}

/// The host ports the pod's containers take (a `hostNetwork` pod takes its container
/// ports), sorted.
pub fn host_ports(ctx: &Ctx, sf: &str, spec: &core::PodSpec) -> Result<Vec<HostPort>, LoadError> {
    let host_network = spec.host_network == Some(true);
    let mut out = Vec::new();
    for (ci, c) in spec.containers.iter().enumerate() {
        for (pi, p) in c.ports.iter().flatten().enumerate() {
            let f = format!("{sf}.containers[{ci}].ports[{pi}]");
            let port = match (p.host_port, host_network) {
                (Some(port), _) if port != 0 => port,
                (_, true) => p.container_port,
                _ => continue,
            };
            let Ok(port) = u16::try_from(port).map_err(|_| ()).and_then(|p| match p {
                0 => Err(()),
                p => Ok(p),
            }) else {
                return Err(ctx.err(
                    format!("{f}.hostPort"),
                    format!("port {port} is out of range; use 1 to 65535"),
                ));
            };
            let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".to_string());
            if !matches!(protocol.as_str(), "TCP" | "UDP" | "SCTP") {
                return Err(ctx.err(
                    format!("{f}.protocol"),
                    format!("unknown protocol {protocol:?}; use TCP, UDP or SCTP"),
                ));
            }
            out.push(HostPort {
                protocol,
                ip: p.host_ip.clone().unwrap_or_default(),
                port,
            });
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}
