//! ResourceClaims and a pod's `spec.resourceClaims` as the engine's claims, and the
//! allocation a claim's status already holds.

use super::*;
use crate::error::LoadError;
use crate::fields::Ctx;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::resource::v1::{
    DeviceSelector, DeviceToleration, ResourceClaim, ResourceClaimSpec,
};
use kestrel_core::{
    ClaimAllocation, DeviceChoice, DeviceClaim, DeviceCount, DeviceRequest, DeviceResult,
};
use std::collections::{BTreeMap, BTreeSet};

/// A claim's spec as the engine's claim `key` (`namespace/name`), its requests resolved
/// against the classes. `field` is where the spec sits (`spec`, `spec.spec` in a template).
pub fn read_claim_spec(
    ctx: &Ctx,
    field: &str,
    key: String,
    spec: Option<&ResourceClaimSpec>,
    classes: &DeviceClasses,
) -> Result<DeviceClaim, LoadError> {
    let devices = spec.and_then(|s| s.devices.as_ref());
    let mut requests = Vec::new();
    for (i, r) in devices
        .and_then(|d| d.requests.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        let rf = format!("{field}.devices.requests[{i}]");
        let mut alternatives = Vec::new();
        match (&r.exactly, &r.first_available) {
            (Some(exact), None) => {
                if exact.admin_access == Some(true) {
                    return Err(ctx.err(
                        format!("{rf}.exactly.adminAccess"),
                        "adminAccess is not supported by Kestrel; remove it",
                    ));
                }
                if exact.capacity.is_some() {
                    return Err(ctx.err(
                        format!("{rf}.exactly.capacity"),
                        "capacity requests (consumable capacity) are not supported by \
                         Kestrel; request whole devices",
                    ));
                }
                alternatives.push(read_choice(
                    ctx,
                    &format!("{rf}.exactly"),
                    Choice {
                        name: r.name.clone(),
                        class: &exact.device_class_name,
                        selectors: exact.selectors.as_ref(),
                        mode: exact.allocation_mode.as_deref(),
                        count: exact.count,
                        tolerations: exact.tolerations.as_ref(),
                    },
                    classes,
                )?);
            }
            (None, Some(subs)) if !subs.is_empty() => {
                for (j, sub) in subs.iter().enumerate() {
                    let sf = format!("{rf}.firstAvailable[{j}]");
                    if sub.capacity.is_some() {
                        return Err(ctx.err(
                            format!("{sf}.capacity"),
                            "capacity requests are not supported by Kestrel; request whole devices",
                        ));
                    }
                    alternatives.push(read_choice(
                        ctx,
                        &sf,
                        Choice {
                            name: format!("{}/{}", r.name, sub.name),
                            class: &sub.device_class_name,
                            selectors: sub.selectors.as_ref(),
                            mode: sub.allocation_mode.as_deref(),
                            count: sub.count,
                            tolerations: sub.tolerations.as_ref(),
                        },
                        classes,
                    )?);
                }
            }
            _ => {
                return Err(ctx.err(
                    rf,
                    "a request sets exactly one of exactly and firstAvailable (with at least \
                     one subrequest)",
                ))
            }
        }
        requests.push(DeviceRequest {
            name: r.name.clone(),
            alternatives,
        });
    }
    let names: BTreeSet<&str> = requests.iter().map(|r| r.name.as_str()).collect();
    let mut match_attributes = Vec::new();
    for (i, c) in devices
        .and_then(|d| d.constraints.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        let cf = format!("{field}.devices.constraints[{i}]");
        if c.distinct_attribute.is_some() {
            return Err(ctx.err(
                format!("{cf}.distinctAttribute"),
                "distinctAttribute is not supported by Kestrel; remove it",
            ));
        }
        let Some(attribute) = &c.match_attribute else {
            return Err(ctx.err(cf, "a constraint needs matchAttribute"));
        };
        if !attribute.contains('/') {
            return Err(ctx.err(
                format!("{cf}.matchAttribute"),
                format!("{attribute:?} is not fully qualified; write domain/name, e.g. gpu.nvidia.com/{attribute}"),
            ));
        }
        let bound = c.requests.clone().unwrap_or_default();
        if let Some(unknown) = bound.iter().find(|r| !names.contains(r.as_str())) {
            return Err(ctx.err(
                format!("{cf}.requests"),
                format!("no request {unknown:?} in this claim; name one of {names:?}"),
            ));
        }
        match_attributes.push((attribute.clone(), bound));
    }
    if requests.is_empty() {
        return Err(ctx.err(
            format!("{field}.devices.requests"),
            "the claim requests no device; add a request",
        ));
    }
    Ok(DeviceClaim {
        key,
        requests,
        match_attributes,
        per_pod: None,
        allocation: None,
    })
}

pub(super) struct Choice<'a> {
    name: String,
    class: &'a str,
    selectors: Option<&'a Vec<DeviceSelector>>,
    mode: Option<&'a str>,
    count: Option<i64>,
    tolerations: Option<&'a Vec<DeviceToleration>>,
}

pub(super) fn read_choice(
    ctx: &Ctx,
    field: &str,
    choice: Choice<'_>,
    classes: &DeviceClasses,
) -> Result<DeviceChoice, LoadError> {
    let class = classes
        .get(choice.class)
        .map_err(|e| ctx.err(format!("{field}.deviceClassName"), e))?
        .clone();
    let own = read_selectors(
        ctx,
        &format!("{field}.selectors"),
        choice.selectors,
        classes,
    )?;
    let count = match (choice.mode.unwrap_or("ExactCount"), choice.count) {
        ("ExactCount", None) => DeviceCount::Exact(1),
        ("ExactCount", Some(n)) if (1..=128).contains(&n) => DeviceCount::Exact(n as u32),
        ("ExactCount", Some(n)) => {
            return Err(ctx.err(
                format!("{field}.count"),
                format!("{n} is not a device count; write 1 to 128"),
            ))
        }
        ("All", _) => DeviceCount::All,
        (other, _) => {
            return Err(ctx.err(
                format!("{field}.allocationMode"),
                format!("{other:?} is not an allocation mode; write ExactCount or All"),
            ))
        }
    };
    let mut tolerations = Vec::new();
    for (i, t) in choice.tolerations.into_iter().flatten().enumerate() {
        let as_pod = core::Toleration {
            key: t.key.clone(),
            operator: t.operator.clone(),
            value: t.value.clone(),
            effect: t.effect.clone(),
            toleration_seconds: t.toleration_seconds,
        };
        tolerations.push(ctx.toleration(&format!("{field}.tolerations[{i}]"), &as_pod)?);
    }
    let filter = classes.shared_filter(&class, own);
    Ok(DeviceChoice {
        name: choice.name,
        class: choice.class.to_string(),
        quota_resource: class.quota_resource.clone(),
        filter,
        count,
        tolerations,
    })
}

/// Most devices one request's results may hold (`AllocationResultsMaxSize`): what the API
/// server's quota counts for an `All` request.
pub(super) const ALLOCATION_RESULTS_MAX: i64 = 32;

/// What the claims a pod's creation makes (those from its ResourceClaimTemplates) count
/// against namespace ResourceQuotas, as the API server counts a new claim: one
/// `count/resourceclaims.resource.k8s.io` each, and per request the devices of its class
/// under `<class>.deviceclass.resource.k8s.io/devices` (`All`: the most a request may
/// hold; `firstAvailable`: per class, its largest alternative).
pub fn claim_quota(devices: &kestrel_core::DeviceClaims) -> Vec<(String, i64)> {
    let mut out: BTreeMap<String, i64> = BTreeMap::new();
    for claim in devices.claims.iter().filter(|c| c.per_pod.is_some()) {
        *out.entry(crate::quota::CLAIM_COUNT.to_string())
            .or_default() += 1;
        for request in &claim.requests {
            let mut most: BTreeMap<&str, i64> = BTreeMap::new();
            for a in &request.alternatives {
                let n = match a.count {
                    DeviceCount::Exact(n) => i64::from(n),
                    DeviceCount::All => ALLOCATION_RESULTS_MAX,
                };
                let e = most.entry(a.class.as_str()).or_default();
                *e = (*e).max(n);
            }
            for (class, n) in most {
                *out.entry(format!("{class}{}", crate::quota::DEVICE_CLASS_SUFFIX))
                    .or_default() += n;
            }
        }
    }
    out.into_iter().collect()
}

/// The allocation in a claim's status: its node (kube-scheduler writes a node selector on
/// `metadata.name`, or the hostname label) and results. `None`: not allocated.
pub fn claim_allocation(
    ctx: &Ctx,
    claim: &ResourceClaim,
) -> Result<Option<ClaimAllocation>, LoadError> {
    let Some(allocation) = claim.status.as_ref().and_then(|s| s.allocation.as_ref()) else {
        return Ok(None);
    };
    let node = allocation
        .node_selector
        .as_ref()
        .and_then(|s| s.node_selector_terms.first())
        .and_then(|t| {
            let fields = t.match_fields.iter().flatten();
            let labels = t.match_expressions.iter().flatten();
            fields
                .filter(|r| r.key == "metadata.name")
                .chain(labels.filter(|r| r.key == kestrel_core::HOSTNAME_LABEL))
                .find(|r| r.operator == "In")
                .and_then(|r| r.values.as_ref()?.first().cloned())
        })
        .ok_or_else(|| {
            ctx.err(
                "status.allocation.nodeSelector",
                "the allocation names no node (devices of a network or cluster pool); \
                 Kestrel holds only node-local devices",
            )
        })?;
    let results = allocation
        .devices
        .as_ref()
        .map(|d| {
            d.results
                .iter()
                .flatten()
                .map(|r| DeviceResult {
                    request: r.request.clone(),
                    driver: r.driver.clone(),
                    pool: r.pool.clone(),
                    device: r.device.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Some(ClaimAllocation { node, results }))
}

/// A pod's claim entry: its name in the pod and where the claim comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimSource {
    /// `resourceClaimName`: a claim of the namespace, maybe shared.
    Claim(String),
    /// `resourceClaimTemplateName`: a claim made for the pod from the template.
    Template(String),
}

/// `spec.resourceClaims` of a pod spec at `field`, checked against its containers'
/// `resources.claims`.
pub fn pod_claims(
    ctx: &Ctx,
    field: &str,
    spec: &core::PodSpec,
) -> Result<Vec<(String, ClaimSource)>, LoadError> {
    let mut out: Vec<(String, ClaimSource)> = Vec::new();
    for (i, c) in spec.resource_claims.iter().flatten().enumerate() {
        let cf = format!("{field}.resourceClaims[{i}]");
        let source = match (&c.resource_claim_name, &c.resource_claim_template_name) {
            (Some(n), None) => ClaimSource::Claim(n.clone()),
            (None, Some(t)) => ClaimSource::Template(t.clone()),
            _ => {
                return Err(ctx.err(
                    cf,
                    "set exactly one of resourceClaimName and resourceClaimTemplateName",
                ))
            }
        };
        if out.iter().any(|(n, _)| *n == c.name) {
            return Err(ctx.err(
                format!("{cf}.name"),
                format!("a second claim is named {:?}; names must be unique", c.name),
            ));
        }
        out.push((c.name.clone(), source));
    }
    let containers = spec.containers.iter().map(|c| ("containers", c));
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| ("initContainers", c));
    for (list, c) in containers.chain(init) {
        for used in c.resources.iter().flat_map(|r| r.claims.iter().flatten()) {
            if !out.iter().any(|(n, _)| *n == used.name) {
                return Err(ctx.err(
                    format!("{field}.{list}[name={}].resources.claims", c.name),
                    format!(
                        "claim {:?} is not in spec.resourceClaims; add it there",
                        used.name
                    ),
                ));
            }
        }
    }
    Ok(out)
}
