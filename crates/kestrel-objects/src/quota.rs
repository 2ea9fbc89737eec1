//! ResourceQuotas: one model of what the API server refuses pods by, for the simulator
//! (which counts its pods against it) and the live scheduler (which explains gangs whose
//! pods cannot be created).
//!
//! The API server enforces a namespace's ResourceQuotas when a pod is created: a Job whose
//! namespace has used up its quota cannot create the rest of its gang, and the gang waits
//! incomplete. The live scheduler reads the quotas ([`read_quota`]) and, for an incomplete
//! gang, names the quota that refuses pods like its members ([`refusal`]). Quantities are
//! read with the parser pod requests go through ([`kestrel_core::parse_quantity`]), in the
//! engine's units: millicores for cpu, whole units for everything else.

use crate::warning::{FieldWarning, WarnedObject};
use k8s_openapi::api::core::v1::ResourceQuota;
use kestrel_core::{parse_quantity, request_scale, Bytes, GpuRequest, PodSpec, GPU_RESOURCE};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// What a quota limit counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Counted {
    /// Pods (`pods`, `count/pods`): every pod counts 1.
    Pods,
    /// A requested resource (`cpu`, `memory`, `nvidia.com/gpu`, ...).
    Request(String),
}

/// One resource a quota limits, as the quota controller last counted it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct Limit {
    /// The quota's resource name as written (`requests.nvidia.com/gpu`).
    key: String,
    counts: Counted,
    hard: i64,
    used: i64,
    hard_text: String,
    used_text: String,
}

impl Limit {
    /// What `pod` asks of this limit, as (resource, amount): every pod counts 1 against
    /// `pods`; `None` when it requests none of the resource.
    fn asked_by(&self, pod: &PodUsage) -> Option<(&str, i64)> {
        match &self.counts {
            Counted::Pods => Some(("pods", 1)),
            Counted::Request(r) => pod.requests.get(r).map(|&v| (r.as_str(), v)),
        }
    }
}

/// A scope a quota restricts itself to, among those Kestrel can tell from a pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
enum Scope {
    /// `BestEffort` (true) or `NotBestEffort` (false).
    BestEffort(bool),
    /// `PriorityClass` with its operator (`In`, `NotIn`, `Exists`, `DoesNotExist`).
    PriorityClass {
        operator: String,
        values: Vec<String>,
    },
}

impl Scope {
    fn matches(&self, pod: &PodUsage) -> bool {
        match self {
            Scope::BestEffort(best_effort) => pod.best_effort == *best_effort,
            Scope::PriorityClass { operator, values } => {
                let class = pod.priority_class.as_deref();
                match operator.as_str() {
                    "In" => class.is_some_and(|c| values.iter().any(|v| v == c)),
                    "NotIn" => !class.is_some_and(|c| values.iter().any(|v| v == c)),
                    "Exists" => class.is_some(),
                    _ => class.is_none(), // DoesNotExist
                }
            }
        }
    }
}

/// A ResourceQuota as Kestrel uses it: the pod resources it limits and what is used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Quota {
    pub namespace: String,
    pub name: String,
    scopes: Vec<Scope>,
    limits: Vec<Limit>,
}

/// What one pod asks of its namespace's quotas.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodUsage {
    /// Requests by resource (`cpu` in millicores, `memory` in bytes, `nvidia.com/gpu` in
    /// devices, other extended resources in their units); only those above 0.
    pub requests: BTreeMap<String, i64>,
    pub priority_class: Option<String>,
    /// Requests no cpu and no memory (QoS class BestEffort).
    pub best_effort: bool,
}

impl PodUsage {
    /// A pod's requests as its engine spec has them (limits standing in for missing
    /// requests, overhead included, as the quota controller counts them).
    pub fn of(spec: &PodSpec) -> Self {
        let r = &spec.demand.resources;
        let mut requests: BTreeMap<String, i64> = [
            ("cpu", r.cpu_milli),
            ("memory", r.memory_bytes),
            ("ephemeral-storage", r.ephemeral_storage_bytes),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .chain(r.extended.iter().cloned())
        .collect();
        // Shares (`gpu-milli`, `gpu-fraction`, `gpu-memory`) ask for no `nvidia.com/gpu`,
        // and neither do claims: their devices count under their classes.
        match (&spec.constraints.devices, spec.demand.gpu) {
            (Some(devices), _) => {
                for (key, n) in crate::dra::claim_quota(devices) {
                    *requests.entry(key).or_default() += n;
                }
            }
            (None, GpuRequest::Whole(n)) => {
                *requests.entry(GPU_RESOURCE.to_string()).or_default() += i64::from(n);
            }
            (None, _) => {}
        }
        requests.retain(|_, v| *v > 0);
        PodUsage {
            best_effort: r.cpu_milli == 0 && r.memory_bytes == 0,
            requests,
            priority_class: spec.priority_class.clone(),
        }
    }
}

/// The quota that refuses a pod: the API server would not create it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub namespace: String,
    pub quota: String,
    /// The quota's resource name (`requests.nvidia.com/gpu`).
    pub resource: String,
    pub used: String,
    pub hard: String,
    /// What the pod asks for, when the quota is not used up but has less room left.
    pub asks: Option<String>,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Refusal {
            namespace,
            quota,
            resource,
            used,
            hard,
            asks,
        } = self;
        write!(
            f,
            "ResourceQuota {namespace}/{quota} has {resource} {used} of {hard} used"
        )?;
        if let Some(asks) = asks {
            write!(f, " and a pod of the gang asks for {asks}")?;
        }
        write!(
            f,
            ", so the API server refuses the missing pods: raise the quota or end pods in {namespace}"
        )
    }
}

/// A ResourceQuota key counting ResourceClaims.
pub const CLAIM_COUNT: &str = "count/resourceclaims.resource.k8s.io";
/// How a ResourceQuota key counting a DeviceClass's devices ends
/// (`gpu.nvidia.com.deviceclass.resource.k8s.io/devices`).
pub const DEVICE_CLASS_SUFFIX: &str = ".deviceclass.resource.k8s.io/devices";

/// What a quota's resource name counts, for the names that count pods (the one rule the
/// simulator's namespace quotas and the live explanations share): `pods`,
/// `count/pods`, `cpu`, `memory`, `ephemeral-storage`, `requests.<resource>`, and DRA's
/// [`CLAIM_COUNT`] and `<class>`[`DEVICE_CLASS_SUFFIX`] (counted for the claims made from
/// a pod's templates, [`crate::dra::claim_quota`]). Limits
/// (`limits.*`) and other objects (`services`, `count/jobs.batch`, ...) are not read.
pub fn counted(key: &str) -> Option<Counted> {
    match key {
        "pods" | "count/pods" => Some(Counted::Pods),
        "cpu" | "memory" | "ephemeral-storage" => Some(Counted::Request(key.to_string())),
        // DRA: the claims a pod's templates make, and their devices per class.
        CLAIM_COUNT => Some(Counted::Request(key.to_string())),
        _ if key.ends_with(DEVICE_CLASS_SUFFIX) && !key.starts_with("requests.") => {
            Some(Counted::Request(key.to_string()))
        }
        _ => key
            .strip_prefix("requests.")
            .filter(|r| !r.is_empty() && *r != "storage")
            .map(|r| Counted::Request(r.to_string())),
    }
}

/// A quantity that must not be negative, times `scale`; why not, when it cannot be read.
pub(crate) fn read_amount(text: &str, scale: i64) -> Result<i64, String> {
    match parse_quantity(text, scale) {
        Ok(v) if v >= 0 => Ok(v),
        Ok(_) => Err(format!("{text:?} is negative")),
        Err(e) => Err(e.to_string()),
    }
}

/// An amount as written for people: `4`, `500m` cpu, `16Gi` memory.
pub(crate) fn amount_text(resource: &str, amount: i64) -> String {
    match resource {
        "cpu" if amount % 1000 == 0 => (amount / 1000).to_string(),
        "cpu" => format!("{amount}m"),
        "memory" | "ephemeral-storage" => Bytes(amount).to_string(),
        r if r.starts_with("hugepages-") => Bytes(amount).to_string(),
        _ => amount.to_string(),
    }
}

/// Where a quota's amounts come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaSource {
    /// A live object: what the quota controller enforces (`status.hard`, or `spec.hard`
    /// before it has copied it there) and has counted (`status.used`); a resource it has
    /// not counted yet is left out.
    Live,
    /// The simulator's files: `spec.hard`, nothing used yet (the simulator counts its
    /// pods as it creates them, [`Quota::count`]).
    File,
}

/// What a ResourceQuota says about pods, read once for the simulator and the live
/// scheduler alike ([`read_quota_from`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaReading {
    /// `None`: its scope is one Kestrel cannot tell from a pod ([`Self::untold_scope`]),
    /// or a scope could not be read ([`Self::problems`]). A quota that counts no pod (of
    /// other objects only) has no limits.
    pub quota: Option<Quota>,
    /// A scope that counts pods Kestrel cannot tell apart (`Terminating`,
    /// `NotTerminating`, `CrossNamespacePodAffinity`): (field, scope).
    pub untold_scope: Option<(String, String)>,
    /// What could not be read: (field, why). A resource with a problem is left out; a
    /// scope with one leaves the quota out.
    pub problems: Vec<(String, String)>,
}

impl QuotaReading {
    /// The quota read as limiting no pod resource.
    fn counting_no_pods(mut self, quota: &ResourceQuota) -> Self {
        self.quota = Some(Quota {
            namespace: quota.metadata.namespace.clone().unwrap_or_default(),
            name: quota.metadata.name.clone().unwrap_or_default(),
            scopes: Vec::new(),
            limits: Vec::new(),
        });
        self
    }
}

/// Reads a ResourceQuota's scopes and the limits it sets on pods, from `source`.
pub fn read_quota_from(quota: &ResourceQuota, source: QuotaSource) -> QuotaReading {
    let mut reading = QuotaReading {
        quota: None,
        untold_scope: None,
        problems: Vec::new(),
    };
    let spec = quota.spec.as_ref();
    let mut scopes = Vec::new();
    for (i, scope) in spec
        .and_then(|s| s.scopes.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        match scope.as_str() {
            "BestEffort" => scopes.push(Scope::BestEffort(true)),
            "NotBestEffort" => scopes.push(Scope::BestEffort(false)),
            "PriorityClass" => scopes.push(Scope::PriorityClass {
                operator: "Exists".into(),
                values: Vec::new(),
            }),
            "Terminating" | "NotTerminating" | "CrossNamespacePodAffinity" => {
                reading.untold_scope = Some((format!("spec.scopes[{i}]"), scope.clone()));
                return reading;
            }
            // Scopes of other objects (VolumeAttributesClass): the quota counts no pods.
            "VolumeAttributesClass" => return reading.counting_no_pods(quota),
            other => {
                reading
                    .problems
                    .push(("spec.scopes".into(), format!("unknown scope {other:?}")));
                return reading;
            }
        }
    }
    let selector = spec
        .and_then(|s| s.scope_selector.as_ref())
        .and_then(|s| s.match_expressions.as_ref());
    for (i, term) in selector.into_iter().flatten().enumerate() {
        let field = format!("spec.scopeSelector.matchExpressions[{i}]");
        let values = term.values.clone().unwrap_or_default();
        match term.scope_name.as_str() {
            "PriorityClass" => {
                if !matches!(
                    term.operator.as_str(),
                    "In" | "NotIn" | "Exists" | "DoesNotExist"
                ) {
                    reading.problems.push((
                        format!("{field}.operator"),
                        format!(
                            "unknown operator {:?} (In, NotIn, Exists or DoesNotExist)",
                            term.operator
                        ),
                    ));
                    return reading;
                }
                scopes.push(Scope::PriorityClass {
                    operator: term.operator.clone(),
                    values,
                });
            }
            "BestEffort" | "NotBestEffort" => {
                scopes.push(Scope::BestEffort(term.scope_name == "BestEffort"))
            }
            "Terminating" | "NotTerminating" | "CrossNamespacePodAffinity" => {
                reading.untold_scope =
                    Some((format!("{field}.scopeName"), term.scope_name.clone()));
                return reading;
            }
            "VolumeAttributesClass" => return reading.counting_no_pods(quota),
            other => {
                reading.problems.push((
                    format!("{field}.scopeName"),
                    format!("unknown scope {other:?}"),
                ));
                return reading;
            }
        }
    }
    let status = quota.status.as_ref();
    let (hard, hard_field) = match (source, status.and_then(|s| s.hard.as_ref())) {
        (QuotaSource::Live, Some(h)) => (Some(h), "status.hard"),
        _ => (spec.and_then(|s| s.hard.as_ref()), "spec.hard"),
    };
    let used = status.and_then(|s| s.used.as_ref());
    let mut limits = Vec::new();
    for (key, hard_q) in hard.into_iter().flatten() {
        let Some(counts) = counted(key) else {
            continue;
        };
        let scale = match &counts {
            Counted::Request(r) => request_scale(r),
            Counted::Pods => 1,
        };
        let mut read = |field: &str, text: &str| {
            read_amount(text, scale)
                .map_err(|why| reading.problems.push((format!("{field}[{key}]"), why)))
                .ok()
        };
        let used = match source {
            // Not counted yet by the quota controller: nothing to say about it.
            QuotaSource::Live => match used.and_then(|u| u.get(key)) {
                Some(used_q) => read("status.used", &used_q.0).map(|u| (u, used_q.0.clone())),
                None => continue,
            },
            QuotaSource::File => Some((0, "0".to_string())),
        };
        let (Some(hard), Some((used, used_text))) = (read(hard_field, &hard_q.0), used) else {
            continue;
        };
        limits.push(Limit {
            key: key.clone(),
            counts,
            hard,
            used,
            hard_text: hard_q.0.clone(),
            used_text,
        });
    }
    let mut reading = reading.counting_no_pods(quota);
    if let Some(q) = &mut reading.quota {
        (q.scopes, q.limits) = (scopes, limits);
    }
    reading
}

/// Reads a live ResourceQuota. What cannot be read is skipped, each with a warning naming
/// the object and the field; `None` when the quota limits no pod resource, or restricts
/// itself to a scope Kestrel cannot tell from a pod (`Terminating`, `NotTerminating`,
/// `CrossNamespacePodAffinity`).
pub fn read_quota(quota: &ResourceQuota) -> (Option<Quota>, Vec<FieldWarning>) {
    let object = WarnedObject::of(quota);
    let reading = read_quota_from(quota, QuotaSource::Live);
    let skipped = match reading.quota {
        None => "the quota is",
        Some(_) => "that resource of the quota is",
    };
    let warnings = reading
        .problems
        .into_iter()
        .map(|(field, why)| {
            object.warning(
                field,
                format!("{why}; {skipped} not used to explain waiting gangs until it is fixed"),
            )
        })
        .collect();
    (reading.quota.filter(|q| !q.limits.is_empty()), warnings)
}

impl Quota {
    /// Counts a pod created (`by` 1) or gone (`by` -1) against the quota, as the quota
    /// controller does, when its scopes take the pod.
    pub fn count(&mut self, pod: &PodUsage, by: i64) {
        if !self.scopes.iter().all(|s| s.matches(pod)) {
            return;
        }
        for limit in &mut self.limits {
            if let Some((resource, amount)) = limit.asked_by(pod) {
                let used = limit.used + by * amount;
                limit.used_text = amount_text(resource, used);
                limit.used = used;
            }
        }
    }

    /// The limits it sets, in its units: (resource name as written, hard, used).
    pub fn limits(&self) -> impl Iterator<Item = (&str, i64, i64)> {
        self.limits.iter().map(|l| (l.key.as_str(), l.hard, l.used))
    }
}

/// The first of a namespace's quotas (in order, each in its resource names' order) that
/// the API server would refuse `pod` by: a quota whose scopes take the pod, with a
/// resource the pod asks for (every pod counts against `pods`) whose use plus the pod's
/// request is above the hard limit. `None` when every quota has room for it.
pub fn refusal<'a>(quotas: impl IntoIterator<Item = &'a Quota>, pod: &PodUsage) -> Option<Refusal> {
    for quota in quotas {
        if !quota.scopes.iter().all(|s| s.matches(pod)) {
            continue;
        }
        for limit in &quota.limits {
            let Some((resource, asks)) = limit.asked_by(pod) else {
                continue;
            };
            if limit.used.saturating_add(asks) <= limit.hard {
                continue;
            }
            return Some(Refusal {
                namespace: quota.namespace.clone(),
                quota: quota.name.clone(),
                resource: limit.key.clone(),
                used: limit.used_text.clone(),
                hard: limit.hard_text.clone(),
                asks: (limit.used < limit.hard).then(|| amount_text(resource, asks)),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use kestrel_core::{Demand, Resources};
    use serde_json::json;

    fn quota(object: serde_json::Value) -> ResourceQuota {
        serde_json::from_value(object).unwrap()
    }

    fn gpu_quota(hard: &str, used: &str) -> ResourceQuota {
        quota(json!({
            "metadata": {"name": "gpu-quota", "namespace": "ml"},
            "spec": {"hard": {"requests.nvidia.com/gpu": hard, "services": "10"}},
            "status": {"hard": {"requests.nvidia.com/gpu": hard, "services": "10"},
                       "used": {"requests.nvidia.com/gpu": used, "services": "10"}},
        }))
    }

    fn gpu_pod(gpus: u32, cpu_milli: i64) -> PodUsage {
        let mut spec = PodSpec::new(
            "ml",
            "train-0",
            Demand {
                resources: Resources::new(cpu_milli, 1 << 30),
                gpu: GpuRequest::Whole(gpus),
            },
        );
        spec.priority_class = Some("training".into());
        PodUsage::of(&spec)
    }

    fn read(q: &ResourceQuota) -> Quota {
        let (quota, warnings) = read_quota(q);
        assert!(warnings.is_empty(), "{warnings:?}");
        quota.expect("the quota limits pod resources")
    }

    #[test]
    fn a_used_up_quota_for_a_requested_resource_refuses_the_pod() {
        let q = read(&gpu_quota("8", "8"));
        let r = refusal([&q], &gpu_pod(1, 1000)).expect("8 of 8 GPUs used");
        assert_eq!(
            r.to_string(),
            "ResourceQuota ml/gpu-quota has requests.nvidia.com/gpu 8 of 8 used, so the API \
             server refuses the missing pods: raise the quota or end pods in ml"
        );
        // Room left, but less than the pod asks for.
        let q = read(&gpu_quota("8", "6"));
        let r = refusal([&q], &gpu_pod(4, 1000)).expect("6 + 4 > 8");
        assert_eq!(r.asks.as_deref(), Some("4"));
        assert!(
            r.to_string()
                .contains("requests.nvidia.com/gpu 6 of 8 used and a pod of the gang asks for 4,"),
            "{r}"
        );
    }

    #[test]
    fn claims_from_templates_count_under_their_class_not_as_nvidia_gpus() {
        let path = std::path::PathBuf::from("classes.yaml");
        let ctx = crate::fields::Ctx {
            path: &path,
            object: "DeviceClass gpu.nvidia.com".into(),
        };
        let mut classes = crate::dra::DeviceClasses::default();
        let class: k8s_openapi::api::resource::v1::DeviceClass = serde_json::from_value(json!({
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
        }))
        .unwrap();
        classes.insert(&ctx, &class).unwrap();
        let spec: k8s_openapi::api::resource::v1::ResourceClaimSpec =
            serde_json::from_value(json!({"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]}}))
            .unwrap();
        let mut claim =
            crate::dra::read_claim_spec(&ctx, "spec", "ml/c".into(), Some(&spec), &classes)
                .unwrap();
        claim.per_pod = Some("gpu".into());
        let mut pod = PodSpec::new(
            "ml",
            "train-0",
            Demand {
                resources: Resources::new(1000, 1 << 30),
                gpu: GpuRequest::None,
            },
        );
        crate::dra::set_pod_claims(&ctx, "spec", &mut pod, vec![claim]).unwrap();
        let usage = PodUsage::of(&pod);
        assert_eq!(usage.requests.get(GPU_RESOURCE), None);
        assert_eq!(usage.requests[CLAIM_COUNT], 1);
        let devices = format!("gpu.nvidia.com{DEVICE_CLASS_SUFFIX}");
        assert_eq!(usage.requests[&devices], 2);
        let q = read(&quota(json!({
            "metadata": {"name": "dra", "namespace": "ml"},
            "spec": {"hard": {&devices: "4"}},
            "status": {"hard": {&devices: "4"}, "used": {&devices: "3"}},
        })));
        let r = refusal([&q], &usage).expect("3 + 2 > 4");
        assert!(
            r.to_string().contains(&format!("{devices} 3 of 4 used")),
            "{r}"
        );
        assert_eq!(refusal([&read(&gpu_quota("8", "8"))], &usage), None);
    }

    #[test]
    fn a_quota_with_room_refuses_nothing() {
        let q = read(&gpu_quota("8", "6"));
        assert_eq!(refusal([&q], &gpu_pod(2, 1000)), None);
        assert_eq!(refusal([&q], &gpu_pod(1, 1000)), None);
    }

    #[test]
    fn a_used_up_resource_the_pod_does_not_request_refuses_nothing() {
        let q = read(&gpu_quota("8", "8"));
        // A CPU pod, and a pod with a share of a GPU (no nvidia.com/gpu request).
        assert_eq!(refusal([&q], &gpu_pod(0, 4000)), None);
        let mut share = PodSpec::new(
            "ml",
            "notebook",
            Demand {
                resources: Resources::new(1000, 0),
                gpu: GpuRequest::Shared { milli: 500 },
            },
        );
        share.priority_class = None;
        assert_eq!(refusal([&q], &PodUsage::of(&share)), None);
        // Used-up `services` count no pods.
        assert!(q.limits.iter().all(|l| l.key != "services"));
    }

    #[test]
    fn cpu_memory_and_pod_counts_are_read_in_the_engines_units() {
        let q = read(&quota(json!({
            "metadata": {"name": "team", "namespace": "ml"},
            "status": {"hard": {"requests.cpu": "8", "memory": "16Gi", "count/pods": "10"},
                       "used": {"requests.cpu": "7500m", "memory": "15Gi", "count/pods": "3"}},
        })));
        // 7.5 of 8 cpu used: a pod of 500m fits, one of 1 cpu does not.
        assert_eq!(refusal([&q], &gpu_pod(0, 500)), None);
        let r = refusal([&q], &gpu_pod(0, 1000)).expect("7500m + 1 > 8");
        assert_eq!(
            (r.resource.as_str(), r.asks.as_deref()),
            ("requests.cpu", Some("1"))
        );
        // 15Gi of 16Gi memory used: a pod of 2Gi does not fit.
        let mut big = gpu_pod(0, 100);
        big.requests.insert("memory".into(), 2 << 30);
        let r = refusal([&q], &big).expect("15Gi + 2Gi > 16Gi");
        assert_eq!(
            (r.resource.as_str(), r.asks.as_deref()),
            ("memory", Some("2Gi"))
        );
        // Pods: every pod counts, whatever it requests.
        let q = read(&quota(json!({
            "metadata": {"name": "pods", "namespace": "ml"},
            "status": {"hard": {"pods": "4"}, "used": {"pods": "4"}},
        })));
        let r = refusal([&q], &PodUsage::default()).expect("4 of 4 pods");
        assert_eq!(r.resource, "pods");
    }

    #[test]
    fn scopes_decide_which_pods_a_quota_counts() {
        let scoped = |selector: serde_json::Value| {
            read(&quota(json!({
                "metadata": {"name": "scoped", "namespace": "ml"},
                "spec": {"scopeSelector": {"matchExpressions": [selector]}},
                "status": {"hard": {"requests.nvidia.com/gpu": "8"}, "used": {"requests.nvidia.com/gpu": "8"}},
            })))
        };
        let pod = gpu_pod(1, 1000); // priority class "training"
        let q =
            scoped(json!({"scopeName": "PriorityClass", "operator": "In", "values": ["training"]}));
        assert!(refusal([&q], &pod).is_some());
        let q =
            scoped(json!({"scopeName": "PriorityClass", "operator": "In", "values": ["serving"]}));
        assert_eq!(refusal([&q], &pod), None);
        let q = scoped(json!({"scopeName": "PriorityClass", "operator": "DoesNotExist"}));
        assert_eq!(refusal([&q], &pod), None);
        let q = scoped(json!({"scopeName": "NotBestEffort", "operator": "Exists"}));
        assert!(refusal([&q], &pod).is_some());
        // A scope Kestrel cannot tell from a pod: the quota is not used (and not malformed).
        let (q, warnings) = read_quota(&quota(json!({
            "metadata": {"name": "deadline", "namespace": "ml"},
            "spec": {"scopes": ["Terminating"]},
            "status": {"hard": {"pods": "1"}, "used": {"pods": "1"}},
        })));
        assert_eq!((q, warnings), (None, vec![]));
    }

    #[test]
    fn malformed_quotas_are_skipped_with_a_warning_naming_the_object_and_field() {
        let text = |ws: Vec<FieldWarning>| ws.iter().map(ToString::to_string).collect::<Vec<_>>();
        let (q, warnings) = read_quota(&quota(json!({
            "metadata": {"name": "broken", "namespace": "ml"},
            "status": {"hard": {"requests.nvidia.com/gpu": "eight", "pods": "10", "requests.cpu": "4"},
                       "used": {"requests.nvidia.com/gpu": "8", "pods": "-1", "requests.cpu": "4"}},
        })));
        assert_eq!(warnings[0].field.as_deref(), Some("status.used[pods]"));
        assert_eq!(
            warnings[0].object.key(),
            ("ResourceQuota".into(), Some("ml".into()), "broken".into())
        );
        let warnings = text(warnings);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].starts_with(
                "ResourceQuota ml/broken: field status.used[pods]: \"-1\" is negative"
            ),
            "{warnings:?}"
        );
        assert!(
            warnings[1].starts_with(
                "ResourceQuota ml/broken: field status.hard[requests.nvidia.com/gpu]: quantity \"eight\" is not a Kubernetes quantity"
            ),
            "{warnings:?}"
        );
        // What could be read is still used; the broken resources are not.
        let q = q.expect("requests.cpu reads");
        assert_eq!(refusal([&q], &gpu_pod(1, 0)), None);
        assert_eq!(
            refusal([&q], &gpu_pod(1, 500)).map(|r| r.resource),
            Some("requests.cpu".to_string())
        );
        let (q, warnings) = read_quota(&quota(json!({
            "metadata": {"name": "odd", "namespace": "ml"},
            "spec": {"scopes": ["Sometimes"]},
            "status": {"hard": {"pods": "1"}, "used": {"pods": "1"}},
        })));
        assert!(q.is_none());
        assert_eq!(
            text(warnings),
            vec!["ResourceQuota ml/odd: field spec.scopes: unknown scope \"Sometimes\"; the quota is not used to explain waiting gangs until it is fixed".to_string()]
        );
        // Not counted yet by the quota controller: nothing to say, nothing to warn about.
        let (q, warnings) = read_quota(&quota(json!({
            "metadata": {"name": "new", "namespace": "ml"},
            "spec": {"hard": {"pods": "1"}},
        })));
        assert_eq!((q, warnings), (None, vec![]));
    }
}
