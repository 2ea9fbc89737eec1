//! LimitRanges, read to explain gangs whose pods cannot be created.
//!
//! The API server's LimitRanger admission refuses a pod whose containers (items of
//! `type: Container`) or whose containers together (`type: Pod`) ask for less than an
//! item's `min`, more than its `max`, or a limit more than `maxLimitRequestRatio` times the
//! request. A LimitRange tightened after a Job created part of its gang leaves the gang
//! waiting incomplete. The live scheduler reads the LimitRanges ([`read_limit_range`]) and,
//! for an incomplete gang, names the one that refuses pods like its members ([`refusal`]).
//! The live scheduler does not read `default` and `defaultRequest`: the pods it reads
//! already carry them; the simulator does ([`container_defaults`]).
//! Amounts are in the engine's units: millicores for cpu, whole units for everything else.

use crate::error::LoadError;
use crate::fields::Ctx;
use crate::quota::{amount_text, read_amount};
use crate::warning::{FieldWarning, WarnedObject};
use k8s_openapi::api::core::v1::{Container, LimitRange, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kestrel_core::{parse_quantity, request_scale};
use std::collections::BTreeMap;
use std::fmt;

/// What one container (or a whole pod) requests and is limited to, by resource.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Amounts {
    pub requests: BTreeMap<String, i64>,
    pub limits: BTreeMap<String, i64>,
}

impl Amounts {
    fn of(container: &Container) -> Self {
        let read = |list: Option<&BTreeMap<String, Quantity>>| {
            list.into_iter()
                .flatten()
                .filter_map(|(r, q)| {
                    Some((r.clone(), parse_quantity(&q.0, request_scale(r)).ok()?))
                })
                .collect()
        };
        let resources = container.resources.as_ref();
        Amounts {
            requests: read(resources.and_then(|r| r.requests.as_ref())),
            limits: read(resources.and_then(|r| r.limits.as_ref())),
        }
    }
}

/// A pod's containers' requests and limits, as LimitRanger checks them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PodResources {
    /// `spec.containers` then `spec.initContainers`.
    containers: Vec<Amounts>,
    /// The pod's totals: the containers' sum, raised to any init container's amount.
    pod: Amounts,
}

impl PodResources {
    pub fn of(pod: &Pod) -> Self {
        let spec = pod.spec.as_ref();
        let main: Vec<Amounts> = spec
            .map(|s| s.containers.iter().map(Amounts::of).collect())
            .unwrap_or_default();
        let init: Vec<Amounts> = spec
            .and_then(|s| s.init_containers.as_ref())
            .map(|c| c.iter().map(Amounts::of).collect())
            .unwrap_or_default();
        let mut total = Amounts::default();
        for c in &main {
            for (r, v) in &c.requests {
                let t = total.requests.entry(r.clone()).or_default();
                *t = t.saturating_add(*v);
            }
            for (r, v) in &c.limits {
                let t = total.limits.entry(r.clone()).or_default();
                *t = t.saturating_add(*v);
            }
        }
        for c in &init {
            for (r, v) in &c.requests {
                let t = total.requests.entry(r.clone()).or_default();
                *t = (*t).max(*v);
            }
            for (r, v) in &c.limits {
                let t = total.limits.entry(r.clone()).or_default();
                *t = (*t).max(*v);
            }
        }
        PodResources {
            containers: main.into_iter().chain(init).collect(),
            pod: total,
        }
    }
}

/// What an item constrains: each container, or each pod's totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Container,
    Pod,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::Container => "Container",
            Level::Pod => "Pod",
        }
    }

    /// Who in the gang breaks the bound, as said in the refusal.
    fn subject(self) -> &'static str {
        match self {
            Level::Container => "a container of the gang's pods",
            Level::Pod => "a pod of the gang",
        }
    }
}

/// One bound of an item: a resource and its amount (for a ratio, in thousandths).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Bound {
    resource: String,
    amount: i64,
    text: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Item {
    level: Level,
    min: Vec<Bound>,
    max: Vec<Bound>,
    max_ratio: Vec<Bound>,
}

/// A LimitRange as Kestrel uses it: its `Container` and `Pod` items' bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub namespace: String,
    pub name: String,
    items: Vec<Item>,
}

/// Reads a LimitRange. A bound that cannot be read is skipped, with a warning naming the
/// object and the field; `None` when no item of type Container or Pod bounds anything.
pub fn read_limit_range(object: &LimitRange) -> (Option<Limits>, Vec<FieldWarning>) {
    let namespace = object.metadata.namespace.clone().unwrap_or_default();
    let name = object.metadata.name.clone().unwrap_or_default();
    let warned = WarnedObject::of(object);
    let mut warnings = Vec::new();
    let mut items = Vec::new();
    let listed = object.spec.as_ref().map(|s| s.limits.as_slice());
    for (i, item) in listed.unwrap_or_default().iter().enumerate() {
        let level = match item.type_.as_str() {
            "Container" => Level::Container,
            "Pod" => Level::Pod,
            // PersistentVolumeClaim items bound claims, not pods.
            _ => continue,
        };
        let mut bounds = |field: &str, list: Option<&BTreeMap<String, Quantity>>, ratio: bool| {
            let mut out = Vec::new();
            for (resource, q) in list.into_iter().flatten() {
                let scale = if ratio { 1000 } else { request_scale(resource) };
                match read_amount(&q.0, scale) {
                    Ok(amount) => out.push(Bound {
                        resource: resource.clone(),
                        amount,
                        text: q.0.clone(),
                    }),
                    Err(why) => warnings.push(warned.warning(
                        format!("spec.limits[{i}].{field}[{resource}]"),
                        format!("{why}; that bound is not used to explain waiting gangs until it is fixed"),
                    )),
                }
            }
            out
        };
        let item = Item {
            level,
            min: bounds("min", item.min.as_ref(), false),
            max: bounds("max", item.max.as_ref(), false),
            max_ratio: bounds(
                "maxLimitRequestRatio",
                item.max_limit_request_ratio.as_ref(),
                true,
            ),
        };
        if !(item.min.is_empty() && item.max.is_empty() && item.max_ratio.is_empty()) {
            items.push(item);
        }
    }
    if items.is_empty() {
        return (None, warnings);
    }
    (
        Some(Limits {
            namespace,
            name,
            items,
        }),
        warnings,
    )
}

/// The requests a LimitRange's `Container` items give containers that set none (the
/// simulator applies them as the API server's LimitRanger does): per resource, in
/// pod-request units, the first of `defaultRequest`, `default`, `max`, `min`. Errors name
/// the object and the field; items of unknown type and a default request above its default
/// limit are refused.
pub fn container_defaults(ctx: &Ctx, lr: &LimitRange) -> Result<BTreeMap<String, i64>, LoadError> {
    let mut container_requests = BTreeMap::new();
    for (i, item) in lr.spec.iter().flat_map(|s| &s.limits).enumerate() {
        let f = format!("spec.limits[{i}]");
        match item.type_.as_str() {
            "Container" => {}
            "Pod" | "PersistentVolumeClaim" => continue,
            other => {
                return Err(ctx.err(
                    format!("{f}.type"),
                    format!("unknown type {other:?}; use Container, Pod or PersistentVolumeClaim"),
                ))
            }
        }
        let amounts = |key: &str, map: Option<&BTreeMap<String, Quantity>>| {
            ctx.amounts(&format!("{f}.{key}"), map)
        };
        let default_request = amounts("defaultRequest", item.default_request.as_ref())?;
        let default = amounts("default", item.default.as_ref())?;
        let max = amounts("max", item.max.as_ref())?;
        let min = amounts("min", item.min.as_ref())?;
        for (resource, request) in &default_request {
            if let Some(limit) = default.get(resource).filter(|l| request > *l) {
                return Err(ctx.err(
                    format!("{f}.defaultRequest.{resource}"),
                    format!(
                        "is more than the default limit of {resource} ({limit} in request units, \
                        cpu in millicores); a request cannot exceed its limit"
                    ),
                ));
            }
        }
        // The API server's defaults: default limit from max, default request from the
        // default limit, else from min.
        for source in [&default_request, &default, &max, &min] {
            for (resource, amount) in source {
                container_requests
                    .entry(resource.clone())
                    .or_insert(*amount);
            }
        }
    }
    Ok(container_requests)
}

/// The LimitRange that refuses a pod: the API server would not create it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitRefusal {
    pub namespace: String,
    pub limit_range: String,
    /// What the item allows and what the pod has, as a clause.
    pub breach: String,
}

impl fmt::Display for LimitRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let LimitRefusal {
            namespace,
            limit_range,
            breach,
        } = self;
        write!(
            f,
            "LimitRange {namespace}/{limit_range} {breach}, so the API server refuses the missing pods: widen the LimitRange or change the pods' resources in {namespace}"
        )
    }
}

/// How `amounts` break `item`'s bounds, first min, then max, then ratio (each in its
/// resources' order), as LimitRanger checks them.
fn breach(item: &Item, amounts: &Amounts) -> Option<String> {
    let level = item.level.name();
    let who = item.level.subject();
    for b in &item.min {
        let r = &b.resource;
        let at_least = format!("requires at least {} {r} per {level}", b.text);
        match amounts.requests.get(r) {
            None => return Some(format!("{at_least} and {who} requests no {r}")),
            Some(&v) if v < b.amount => {
                return Some(format!(
                    "{at_least} and {who} requests {}",
                    amount_text(r, v)
                ))
            }
            _ => {}
        }
        if let Some(&v) = amounts.limits.get(r).filter(|v| **v < b.amount) {
            return Some(format!(
                "{at_least} and {who} is limited to {}",
                amount_text(r, v)
            ));
        }
    }
    for b in &item.max {
        let r = &b.resource;
        let at_most = format!("allows at most {} {r} per {level}", b.text);
        match amounts.limits.get(r) {
            None => return Some(format!("{at_most} and {who} sets no {r} limit")),
            Some(&v) if v > b.amount => {
                return Some(format!(
                    "{at_most} and {who} has a limit of {}",
                    amount_text(r, v)
                ))
            }
            _ => {}
        }
        if let Some(&v) = amounts.requests.get(r).filter(|v| **v > b.amount) {
            return Some(format!(
                "{at_most} and {who} requests {}",
                amount_text(r, v)
            ));
        }
    }
    for b in &item.max_ratio {
        let r = &b.resource;
        let ratio = format!(
            "allows a {r} limit of at most {} times the request per {level}",
            b.text
        );
        let request = amounts.requests.get(r).copied().unwrap_or(0);
        let limit = amounts.limits.get(r).copied().unwrap_or(0);
        if request == 0 {
            return Some(format!("{ratio} and {who} requests no {r}"));
        }
        if limit == 0 {
            return Some(format!("{ratio} and {who} sets no {r} limit"));
        }
        // limit / request > ratio, with the ratio in thousandths.
        if i128::from(limit) * 1000 > i128::from(b.amount) * i128::from(request) {
            return Some(format!(
                "{ratio} and {who} has a limit of {} over a request of {}",
                amount_text(r, limit),
                amount_text(r, request)
            ));
        }
    }
    None
}

/// The first of a namespace's LimitRanges (each item in order) that refuses `pod`: one of
/// its containers, or its totals, outside an item's bounds. `None` when all admit it.
pub fn refusal<'a>(
    ranges: impl IntoIterator<Item = &'a Limits>,
    pod: &PodResources,
) -> Option<LimitRefusal> {
    for range in ranges {
        for item in &range.items {
            let found = match item.level {
                Level::Container => pod.containers.iter().find_map(|c| breach(item, c)),
                Level::Pod => breach(item, &pod.pod),
            };
            if let Some(breach) = found {
                return Some(LimitRefusal {
                    namespace: range.namespace.clone(),
                    limit_range: range.name.clone(),
                    breach,
                });
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn limits(items: Value) -> Limits {
        let object: LimitRange = serde_json::from_value(json!({
            "metadata": {"name": "gpu-limits", "namespace": "ml"},
            "spec": {"limits": items},
        }))
        .unwrap();
        let (read, warnings) = read_limit_range(&object);
        assert!(warnings.is_empty(), "{warnings:?}");
        read.expect("the LimitRange bounds pods")
    }

    /// A pod with one container per (requests, limits), and one init container.
    fn pod(containers: &[(Value, Value)], init: Option<(Value, Value)>) -> PodResources {
        let c = |(requests, limits): &(Value, Value)| json!({"name": "c", "resources": {"requests": requests, "limits": limits}});
        let mut spec = json!({"containers": containers.iter().map(c).collect::<Vec<_>>()});
        if let Some(i) = init {
            spec["initContainers"] = json!([c(&i)]);
        }
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "train-0", "namespace": "ml"},
            "spec": spec,
        }))
        .unwrap();
        PodResources::of(&pod)
    }

    fn gpu_pod(gpus: &str) -> PodResources {
        pod(
            &[(
                json!({"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": gpus}),
                json!({"memory": "8Gi", "nvidia.com/gpu": gpus}),
            )],
            None,
        )
    }

    #[test]
    fn a_container_above_the_max_is_refused() {
        let l = limits(json!([{"type": "Container", "max": {"nvidia.com/gpu": "4"}}]));
        assert_eq!(refusal([&l], &gpu_pod("4")), None);
        let r = refusal([&l], &gpu_pod("8")).expect("8 > 4");
        assert_eq!(
            r.to_string(),
            "LimitRange ml/gpu-limits allows at most 4 nvidia.com/gpu per Container and a \
             container of the gang's pods has a limit of 8, so the API server refuses the \
             missing pods: widen the LimitRange or change the pods' resources in ml"
        );
        // A max on a resource the container sets no limit for refuses it too.
        let l = limits(json!([{"type": "Container", "max": {"cpu": "4"}}]));
        assert!(refusal([&l], &gpu_pod("1"))
            .unwrap()
            .breach
            .ends_with("sets no cpu limit"));
    }

    #[test]
    fn pod_items_bound_the_containers_together() {
        let two = pod(
            &[
                (
                    json!({"nvidia.com/gpu": "4"}),
                    json!({"nvidia.com/gpu": "4"}),
                ),
                (
                    json!({"nvidia.com/gpu": "4"}),
                    json!({"nvidia.com/gpu": "4"}),
                ),
            ],
            // Each container, init containers too, needs a limit under a Container max.
            Some((json!({"cpu": "500m"}), json!({"nvidia.com/gpu": "1"}))),
        );
        let per_container = limits(json!([{"type": "Container", "max": {"nvidia.com/gpu": "4"}}]));
        assert_eq!(refusal([&per_container], &two), None);
        let per_pod = limits(json!([{"type": "Pod", "max": {"nvidia.com/gpu": "6"}}]));
        let r = refusal([&per_container, &per_pod], &two).expect("4 + 4 > 6");
        assert_eq!(
            r.breach,
            "allows at most 6 nvidia.com/gpu per Pod and a pod of the gang has a limit of 8"
        );
        // The init container's cpu counts as the pod's (its only cpu request).
        let min = limits(json!([{"type": "Pod", "min": {"cpu": "1"}}]));
        assert_eq!(
            refusal([&min], &two).unwrap().breach,
            "requires at least 1 cpu per Pod and a pod of the gang requests 500m"
        );
    }

    #[test]
    fn min_and_ratio_bounds() {
        let min = limits(json!([{"type": "Container", "min": {"memory": "16Gi"}}]));
        assert_eq!(
            refusal([&min], &gpu_pod("1")).unwrap().breach,
            "requires at least 16Gi memory per Container and a container of the gang's pods requests 8Gi"
        );
        let ratio =
            limits(json!([{"type": "Container", "maxLimitRequestRatio": {"memory": "1.5"}}]));
        assert_eq!(refusal([&ratio], &gpu_pod("1")), None, "8Gi over 8Gi");
        let bursty = pod(
            &[(json!({"memory": "4Gi"}), json!({"memory": "8Gi"}))],
            None,
        );
        assert_eq!(
            refusal([&ratio], &bursty).unwrap().breach,
            "allows a memory limit of at most 1.5 times the request per Container and a container of the gang's pods has a limit of 8Gi over a request of 4Gi"
        );
        let cpu_ratio =
            limits(json!([{"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}}]));
        assert!(refusal([&cpu_ratio], &gpu_pod("1"))
            .unwrap()
            .breach
            .ends_with("sets no cpu limit"));
    }

    #[test]
    fn claims_items_and_defaults_bound_no_pod() {
        let object: LimitRange = serde_json::from_value(json!({
            "metadata": {"name": "storage", "namespace": "ml"},
            "spec": {"limits": [
                {"type": "PersistentVolumeClaim", "max": {"storage": "1Gi"}},
                {"type": "Container", "default": {"cpu": "1"}, "defaultRequest": {"cpu": "1"}},
            ]},
        }))
        .unwrap();
        assert_eq!(read_limit_range(&object), (None, vec![]));
    }

    #[test]
    fn a_bound_that_cannot_be_read_is_skipped_with_a_warning_naming_the_field() {
        let object: LimitRange = serde_json::from_value(json!({
            "metadata": {"name": "broken", "namespace": "ml"},
            "spec": {"limits": [
                {"type": "Container", "max": {"nvidia.com/gpu": "four", "memory": "-1", "cpu": "2"}},
            ]},
        }))
        .unwrap();
        let (read, warnings) = read_limit_range(&object);
        let warnings: Vec<String> = warnings.iter().map(ToString::to_string).collect();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].starts_with(
                "LimitRange ml/broken: field spec.limits[0].max[memory]: \"-1\" is negative"
            ),
            "{warnings:?}"
        );
        assert!(
            warnings[1].starts_with(
                "LimitRange ml/broken: field spec.limits[0].max[nvidia.com/gpu]: quantity \"four\""
            ),
            "{warnings:?}"
        );
        // What could be read is used.
        let read = read.expect("the cpu bound reads");
        let over = pod(&[(json!({"cpu": "4"}), json!({"cpu": "4"}))], None);
        assert!(refusal([&read], &over).is_some());
        assert_eq!(
            refusal(
                [&read],
                &pod(
                    &[(
                        json!({"cpu": "1"}),
                        json!({"cpu": "2", "nvidia.com/gpu": "8"})
                    )],
                    None
                )
            ),
            None
        );
    }

    #[test]
    fn no_quantity_makes_the_check_panic() {
        // Extreme and malformed amounts in every place the check reads one.
        let amounts = [
            "",
            "-1",
            "0",
            "1m",
            "0.5",
            "9223372036854775807",
            "9E18",
            "8Ei",
            "1e3",
            "x",
        ];
        for a in amounts {
            for b in amounts {
                let object: Result<LimitRange, _> = serde_json::from_value(json!({
                    "metadata": {"name": "edge", "namespace": "ml"},
                    "spec": {"limits": [
                        {"type": "Container", "min": {"cpu": a}, "max": {"memory": b},
                         "maxLimitRequestRatio": {"cpu": b, "memory": a}},
                        {"type": "Pod", "min": {"memory": b}, "max": {"cpu": a}},
                    ]},
                }));
                let Ok(object) = object else { continue };
                let (read, _) = read_limit_range(&object);
                let p = pod(
                    &[
                        (
                            json!({"cpu": a, "memory": b}),
                            json!({"cpu": b, "memory": a}),
                        ),
                        (
                            json!({"cpu": b, "memory": b}),
                            json!({"cpu": a, "memory": b}),
                        ),
                    ],
                    Some((json!({"cpu": a}), json!({"memory": b}))),
                );
                let _ = refusal(read.iter(), &p).map(|r| r.to_string());
            }
        }
    }
}
