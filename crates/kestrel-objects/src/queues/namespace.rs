//! Namespace policies read as queue objects: ResourceQuota, LimitRange and
//! PodDisruptionBudget.

use super::reader::{typed, Reader};
use crate::error::LoadError;
use crate::limit_range::container_defaults;
use crate::quota::{counted, Counted};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kestrel_core::{
    parse_quantity, quota_scale, DisruptionBudget, DisruptionLimit, IntOrPercent, PODS_RESOURCE,
};
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// A namespace's ResourceQuota: the API server refuses pod creations beyond `hard`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NamespaceQuota {
    pub namespace: String,
    pub name: String,
    /// (resource, amount) in the engine's units: `cpu` in millicores, `memory` in bytes,
    /// `nvidia.com/gpu` in thousandths, `pods` a count (from `requests.cpu`, `cpu`,
    /// `requests.nvidia.com/gpu`, `pods`, `count/pods` ...).
    pub hard: Vec<(String, i64)>,
}

/// What a LimitRange fills in for containers without requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitRangeDefaults {
    pub namespace: String,
    pub name: String,
    /// Per resource, in the units of pod requests (cpu in millicores, memory in bytes,
    /// extended resources, GPUs included, in whole units).
    pub container_requests: BTreeMap<String, i64>,
}

/// The engine's resource for a ResourceQuota `spec.hard` key by the rule the live
/// scheduler reads quotas with ([`counted`]), or `None` for keys that are not tracked
/// (limits, object counts, storage).
pub fn quota_resource(key: &str) -> Option<&str> {
    match counted(key)? {
        Counted::Pods => Some(PODS_RESOURCE),
        Counted::Request(_) => Some(key.strip_prefix("requests.").unwrap_or(key)),
    }
}

pub(super) fn resource_quota(
    r: &Reader,
    doc: &Value,
    namespace: String,
    name: String,
) -> Result<NamespaceQuota, LoadError> {
    let q: core::ResourceQuota = typed(r, doc)?;
    let spec = q.spec.unwrap_or_default();
    if spec.scopes.as_ref().is_some_and(|s| !s.is_empty()) || spec.scope_selector.is_some() {
        let field = if spec.scope_selector.is_some() {
            "spec.scopeSelector"
        } else {
            "spec.scopes"
        };
        return Err(r.err(
            field,
            "scoped quotas are not simulated (Kestrel cannot tell which pods they count); remove the scope, or the quota",
        ));
    }
    let mut hard: BTreeMap<String, i64> = BTreeMap::new();
    for (key, Quantity(text)) in spec.hard.iter().flatten() {
        let Some(resource) = quota_resource(key) else {
            continue;
        };
        let field = format!("spec.hard[{key:?}]");
        let amount = parse_quantity(text, quota_scale(resource))
            .map_err(|e| r.err(&field, e.to_string()))?;
        if amount < 0 {
            return Err(r.err(field, format!("{text:?} is negative; write 0 or more")));
        }
        hard.entry(resource.to_string())
            .and_modify(|a| *a = (*a).min(amount))
            .or_insert(amount);
    }
    Ok(NamespaceQuota {
        namespace,
        name,
        hard: hard.into_iter().collect(),
    })
}

/// A PodDisruptionBudget: `spec.selector` and one of `spec.minAvailable` and
/// `spec.maxUnavailable` (a count or a percentage such as `"50%"`).
pub(super) fn disruption_budget(
    r: &Reader,
    s: &Map<String, Value>,
    namespace: String,
    name: String,
) -> Result<DisruptionBudget, LoadError> {
    let amount = |field: &str| -> Result<Option<IntOrPercent>, LoadError> {
        let f = format!("spec.{field}");
        let parsed = match s.get(field) {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Number(n)) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(IntOrPercent::Int),
            Some(Value::String(text)) => match text.strip_suffix('%') {
                Some(p) => p
                    .parse::<u32>()
                    .ok()
                    .filter(|p| *p <= 100)
                    .map(IntOrPercent::Percent),
                None => text.parse::<u32>().ok().map(IntOrPercent::Int),
            },
            Some(_) => None,
        };
        match parsed {
            Some(a) => Ok(Some(a)),
            None => Err(r.err(
                f,
                format!(
                    "{} is not a pod count or a percentage; write e.g. 1 or \"50%\"",
                    s[field]
                ),
            )),
        }
    };
    let limit = match (amount("minAvailable")?, amount("maxUnavailable")?) {
        (Some(_), Some(_)) => {
            return Err(r.err(
                "spec.maxUnavailable",
                "is set with spec.minAvailable; a PodDisruptionBudget takes one of the two",
            ))
        }
        (Some(n), None) => DisruptionLimit::MinAvailable(n),
        (None, Some(n)) => DisruptionLimit::MaxUnavailable(n),
        (None, None) => {
            return Err(r.err(
                "spec",
                "sets neither minAvailable nor maxUnavailable; set one, e.g. minAvailable: 1",
            ))
        }
    };
    Ok(DisruptionBudget {
        namespace,
        name,
        selector: r.selector(s.get("selector"), "spec.selector")?,
        limit,
    })
}

pub(super) fn limit_range(
    r: &Reader,
    doc: &Value,
    namespace: String,
    name: String,
) -> Result<LimitRangeDefaults, LoadError> {
    let lr: core::LimitRange = typed(r, doc)?;
    let container_requests = container_defaults(&r.ctx, &lr)?;
    Ok(LimitRangeDefaults {
        namespace,
        name,
        container_requests,
    })
}
