//! Namespace policies read as queue objects: ResourceQuota, LimitRange and
//! PodDisruptionBudget.

use super::reader::{typed, Reader};
use crate::error::LoadError;
use crate::limit_range::container_defaults;
use crate::quota::{read_quota_from, Quota, QuotaSource};
use k8s_openapi::api::core::v1 as core;
use kestrel_core::{DisruptionBudget, DisruptionLimit, IntOrPercent};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// What a LimitRange fills in for containers without requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitRangeDefaults {
    pub namespace: String,
    pub name: String,
    /// Per resource, in the units of pod requests (cpu in millicores, memory in bytes,
    /// extended resources, GPUs included, in whole units).
    pub container_requests: BTreeMap<String, i64>,
}

/// A ResourceQuota of the files: the model the live scheduler reads quotas into
/// ([`crate::quota`]), its amounts from `spec.hard`, refused whole where it cannot be
/// read (the live scheduler skips that part with a warning instead).
pub(super) fn resource_quota(r: &Reader, doc: &Value) -> Result<Quota, LoadError> {
    let q: core::ResourceQuota = typed(r, doc)?;
    let reading = read_quota_from(&q, QuotaSource::File);
    if let Some((field, scope)) = reading.untold_scope {
        return Err(r.err(
            field,
            format!(
                "scope {scope:?} counts pods by what the simulator does not model; remove the \
                 scope (BestEffort, NotBestEffort and PriorityClass are simulated), or the quota"
            ),
        ));
    }
    if let Some((field, why)) = reading.problems.into_iter().next() {
        return Err(r.err(field, format!("{why}; write a quantity of 0 or more")));
    }
    reading
        .quota
        .ok_or_else(|| r.err("spec", "cannot be read; check its scopes"))
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
