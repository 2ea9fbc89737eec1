//! Reads the fields of one queue object, with errors naming the object and the field.

use crate::error::LoadError;
use crate::fields::Ctx;
use crate::warning::{FieldWarning, WarnedObject};
use kestrel_core::{
    parse_quantity, quota_scale, BorrowWithinCohort, FlavorQuotas, Labels, Millis, QueuePreemption,
    ReclaimPolicy, Requirement, ResourceGroup, ResourceQuota, SelectorOperator,
    WithinQueuePreemption,
};
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;

pub(super) fn group_of(api_version: &str) -> &str {
    api_version.split('/').next().unwrap_or("")
}

/// `spec` + `x` -> `spec.x`.
pub(super) fn at(field: &str, key: &str) -> String {
    if field.is_empty() {
        key.to_string()
    } else {
        format!("{field}.{key}")
    }
}

pub(super) fn describe(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// Reads fields of one object, with errors naming the object and the field.
pub(super) struct Reader<'a> {
    pub(super) ctx: Ctx<'a>,
    /// Kestrel's own objects: unknown fields are errors; in other projects' objects they
    /// are warnings.
    pub(super) strict: bool,
    /// The object, for its warnings.
    pub(super) object: WarnedObject,
    pub(super) warnings: RefCell<Vec<FieldWarning>>,
}

impl Reader<'_> {
    pub(super) fn err(&self, field: impl Into<String>, message: impl Into<String>) -> LoadError {
        self.ctx.err(field, message)
    }

    /// A mapping; `None` when absent or null.
    pub(super) fn map<'v>(
        &self,
        v: Option<&'v Value>,
        field: &str,
    ) -> Result<Option<&'v Map<String, Value>>, LoadError> {
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(other) => Err(self.err(
                field,
                format!(
                    "is {}; write a mapping ({{key: value, ...}})",
                    describe(other)
                ),
            )),
        }
    }

    /// A mapping that must be there (a list entry).
    pub(super) fn entry<'v>(
        &self,
        v: &'v Value,
        field: &str,
    ) -> Result<&'v Map<String, Value>, LoadError> {
        self.map(Some(v), field)?
            .ok_or_else(|| self.err(field, "is empty; write a mapping ({key: value, ...})"))
    }

    /// A list; empty when absent or null.
    pub(super) fn list<'v>(
        &self,
        v: Option<&'v Value>,
        field: &str,
    ) -> Result<&'v [Value], LoadError> {
        match v {
            None | Some(Value::Null) => Ok(&[]),
            Some(Value::Array(items)) => Ok(items),
            Some(other) => Err(self.err(
                field,
                format!("is {}; write a list ([...])", describe(other)),
            )),
        }
    }

    /// A string; `None` when absent or null.
    pub(super) fn string<'v>(
        &self,
        v: Option<&'v Value>,
        field: &str,
    ) -> Result<Option<&'v str>, LoadError> {
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.err(
                field,
                format!("is {}; write a string (quote it)", describe(other)),
            )),
        }
    }

    /// A non-empty string that must be there.
    pub(super) fn required_string(
        &self,
        v: Option<&Value>,
        field: &str,
        hint: &str,
    ) -> Result<String, LoadError> {
        match self.string(v, field)? {
            Some(s) if !s.is_empty() => Ok(s.to_string()),
            _ => Err(self.err(field, format!("is missing; {hint}"))),
        }
    }

    /// A map of strings (labels).
    pub(super) fn labels(&self, v: Option<&Value>, field: &str) -> Result<Labels, LoadError> {
        let mut out = Labels::new();
        for (k, v) in self.map(v, field)?.into_iter().flatten() {
            let f = format!("{field}[{k:?}]");
            match v {
                Value::String(s) => {
                    out.insert(k.clone(), s.clone());
                }
                other => {
                    return Err(self.err(
                        f,
                        format!("is {}; label values are strings, quote it", describe(other)),
                    ))
                }
            }
        }
        Ok(out)
    }

    /// Refuses fields Kestrel does not read in Kestrel's own objects; in other projects'
    /// objects, warns of each.
    pub(super) fn known_fields(
        &self,
        m: &Map<String, Value>,
        field: &str,
        allowed: &[&str],
    ) -> Result<(), LoadError> {
        if self.strict {
            return self.ctx.known_fields(m, field, allowed);
        }
        for key in m.keys().filter(|k| !allowed.contains(&k.as_str())) {
            self.warn(at(field, key), "is not read by Kestrel and has no effect");
        }
        Ok(())
    }

    /// A warning naming the file, the object and the field.
    pub(super) fn warn(&self, field: impl Into<String>, message: impl Into<String>) {
        self.warnings.borrow_mut().push(FieldWarning {
            source: Some(self.ctx.path.display().to_string()),
            object: self.object.clone(),
            field: Some(field.into()),
            message: message.into(),
            reason: crate::warning::FIELD_NOT_HONOURED,
        });
    }

    /// One of a fixed set of names; `None` when absent.
    pub(super) fn choice<T: Copy>(
        &self,
        v: Option<&Value>,
        field: &str,
        options: &[(&str, T)],
    ) -> Result<Option<T>, LoadError> {
        let Some(s) = self.string(v, field)? else {
            return Ok(None);
        };
        match options.iter().find(|(name, _)| *name == s) {
            Some((_, t)) => Ok(Some(*t)),
            None => Err(self.err(
                field,
                format!(
                    "unknown value {s:?}; use {}",
                    options
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }

    /// A quantity (string or number) as written.
    pub(super) fn quantity_text(&self, v: &Value, field: &str) -> Result<String, LoadError> {
        match v {
            Value::String(s) => Ok(s.clone()),
            Value::Number(n) => Ok(n.to_string()),
            other => Err(self.err(
                field,
                format!(
                    "is {}; write a quantity, e.g. \"16\", \"500m\" or \"64Gi\"",
                    describe(other)
                ),
            )),
        }
    }

    /// A quota of `resource` in the engine's units; 0 or more.
    pub(super) fn quota(&self, v: &Value, field: &str, resource: &str) -> Result<i64, LoadError> {
        let text = self.quantity_text(v, field)?;
        let amount = parse_quantity(&text, quota_scale(resource))
            .map_err(|e| self.err(field, e.to_string()))?;
        if amount < 0 {
            return Err(self.err(field, format!("{text:?} is negative; quotas are 0 or more")));
        }
        Ok(amount)
    }

    /// A whole number of seconds (0 or more) as milliseconds; `None` when absent.
    pub(super) fn seconds(
        &self,
        v: Option<&Value>,
        field: &str,
    ) -> Result<Option<Millis>, LoadError> {
        let secs = match v {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Number(n)) => n.as_u64(),
            Some(Value::String(s)) => s.trim().parse::<u64>().ok(),
            Some(_) => None,
        };
        match secs {
            Some(s) => Ok(Some(s.saturating_mul(1000))),
            None => Err(self.err(
                field,
                "is not a whole number of seconds (0 or more); write e.g. 600",
            )),
        }
    }

    /// A label selector (`matchLabels` and `matchExpressions`); `None` when absent.
    pub(super) fn selector(
        &self,
        v: Option<&Value>,
        field: &str,
    ) -> Result<Option<Vec<Requirement>>, LoadError> {
        let Some(m) = self.map(v, field)? else {
            return Ok(None);
        };
        self.known_fields(m, field, &["matchLabels", "matchExpressions"])?;
        let mut out: Vec<Requirement> = self
            .labels(m.get("matchLabels"), &at(field, "matchLabels"))?
            .into_iter()
            .map(|(key, value)| Requirement {
                key,
                operator: SelectorOperator::In,
                values: vec![value],
            })
            .collect();
        let ef = at(field, "matchExpressions");
        for (i, e) in self
            .list(m.get("matchExpressions"), &ef)?
            .iter()
            .enumerate()
        {
            let f = format!("{ef}[{i}]");
            let e = self.entry(e, &f)?;
            self.known_fields(e, &f, &["key", "operator", "values"])?;
            let key = self.required_string(e.get("key"), &at(&f, "key"), "set the label key")?;
            use SelectorOperator::*;
            let operator = self
                .choice(
                    e.get("operator"),
                    &at(&f, "operator"),
                    &[
                        ("In", In),
                        ("NotIn", NotIn),
                        ("Exists", Exists),
                        ("DoesNotExist", DoesNotExist),
                    ],
                )?
                .ok_or_else(|| {
                    self.err(
                        at(&f, "operator"),
                        "is missing; use In, NotIn, Exists or DoesNotExist",
                    )
                })?;
            let vf = at(&f, "values");
            let mut values = Vec::new();
            for (j, v) in self.list(e.get("values"), &vf)?.iter().enumerate() {
                match v {
                    Value::String(s) => values.push(s.clone()),
                    other => {
                        return Err(self.err(
                            format!("{vf}[{j}]"),
                            format!("is {}; label values are strings, quote it", describe(other)),
                        ))
                    }
                }
            }
            match operator {
                In | NotIn if values.is_empty() => {
                    return Err(self.err(vf, "operator In and NotIn need one or more values"))
                }
                Exists | DoesNotExist if !values.is_empty() => {
                    return Err(self.err(
                        vf,
                        "operator Exists and DoesNotExist take no values; remove them",
                    ))
                }
                _ => {}
            }
            out.push(Requirement {
                key,
                operator,
                values,
            });
        }
        Ok(Some(out))
    }

    /// `resourceGroups`, checked as Kueue checks them.
    pub(super) fn resource_groups(
        &self,
        v: Option<&Value>,
        field: &str,
    ) -> Result<Vec<ResourceGroup>, LoadError> {
        let mut groups = Vec::new();
        // resource -> the group covering it; flavor -> the group listing it.
        let mut covered_by: BTreeMap<String, usize> = BTreeMap::new();
        let mut flavor_in: BTreeMap<String, usize> = BTreeMap::new();
        for (gi, g) in self.list(v, field)?.iter().enumerate() {
            let gf = format!("{field}[{gi}]");
            let g = self.entry(g, &gf)?;
            self.known_fields(g, &gf, &["coveredResources", "flavors"])?;
            let cf = at(&gf, "coveredResources");
            let mut covered = Vec::new();
            for (i, r) in self
                .list(g.get("coveredResources"), &cf)?
                .iter()
                .enumerate()
            {
                let f = format!("{cf}[{i}]");
                let r = self.required_string(
                    Some(r),
                    &f,
                    "write a resource name, e.g. nvidia.com/gpu",
                )?;
                if let Some(other) = covered_by.insert(r.clone(), gi) {
                    return Err(self.err(
                        f,
                        format!(
                            "{r} is already covered by {field}[{other}]; cover each resource in one group"
                        ),
                    ));
                }
                covered.push(r);
            }
            if covered.is_empty() {
                return Err(self.err(
                    cf,
                    "is empty; list the resources this group's flavors give quota for, e.g. [cpu, memory, nvidia.com/gpu]",
                ));
            }
            let ff = at(&gf, "flavors");
            let mut flavors = Vec::new();
            for (fi, fl) in self.list(g.get("flavors"), &ff)?.iter().enumerate() {
                let f = format!("{ff}[{fi}]");
                let fl = self.entry(fl, &f)?;
                self.known_fields(fl, &f, &["name", "resources"])?;
                let name = self.required_string(
                    fl.get("name"),
                    &at(&f, "name"),
                    "set the ResourceFlavor's name",
                )?;
                if let Some(other) = flavor_in.insert(name.clone(), gi) {
                    return Err(self.err(
                        at(&f, "name"),
                        format!(
                            "flavor {name} is already listed in {field}[{other}]; a flavor may appear in one resource group of a queue"
                        ),
                    ));
                }
                let rf = at(&f, "resources");
                let mut resources: Vec<ResourceQuota> = Vec::new();
                for (ri, r) in self.list(fl.get("resources"), &rf)?.iter().enumerate() {
                    let f = format!("{rf}[{ri}]");
                    let r = self.entry(r, &f)?;
                    self.known_fields(
                        r,
                        &f,
                        &["name", "nominalQuota", "borrowingLimit", "lendingLimit"],
                    )?;
                    let rname = self.required_string(
                        r.get("name"),
                        &at(&f, "name"),
                        "set the resource name",
                    )?;
                    if !covered.contains(&rname) {
                        return Err(self.err(
                            at(&f, "name"),
                            format!(
                                "{rname} is not in {cf} {covered:?}; add it there or remove this quota"
                            ),
                        ));
                    }
                    if resources.iter().any(|q| q.name == rname) {
                        return Err(self.err(
                            at(&f, "name"),
                            format!("{rname} has two quotas in flavor {name}; keep one"),
                        ));
                    }
                    let nf = at(&f, "nominalQuota");
                    let nominal = match r.get("nominalQuota") {
                        None | Some(Value::Null) => {
                            return Err(self.err(
                                nf,
                                format!(
                                    "is missing; set the quota of {rname}, e.g. nominalQuota: 8"
                                ),
                            ))
                        }
                        Some(v) => self.quota(v, &nf, &rname)?,
                    };
                    let optional = |key: &str| -> Result<Option<i64>, LoadError> {
                        match r.get(key) {
                            None | Some(Value::Null) => Ok(None),
                            Some(v) => self.quota(v, &at(&f, key), &rname).map(Some),
                        }
                    };
                    let borrowing_limit = optional("borrowingLimit")?;
                    let lending_limit = optional("lendingLimit")?;
                    if lending_limit.is_some_and(|l| l > nominal) {
                        return Err(self.err(
                            at(&f, "lendingLimit"),
                            "is more than nominalQuota; a queue lends at most its own quota",
                        ));
                    }
                    resources.push(ResourceQuota {
                        name: rname,
                        nominal,
                        borrowing_limit,
                        lending_limit,
                    });
                }
                if resources.is_empty() {
                    return Err(self.err(
                        rf,
                        "is empty; give a quota for each covered resource, e.g. [{name: nvidia.com/gpu, nominalQuota: 8}]",
                    ));
                }
                flavors.push(FlavorQuotas {
                    flavor: name,
                    resources,
                });
            }
            if flavors.is_empty() {
                return Err(self.err(ff, "is empty; list one or more flavors with their quotas"));
            }
            groups.push(ResourceGroup { covered, flavors });
        }
        Ok(groups)
    }

    /// `fairSharing.weight`: a quantity or number, default 1.
    pub(super) fn fair_weight(&self, v: Option<&Value>, field: &str) -> Result<f64, LoadError> {
        let Some(m) = self.map(v, field)? else {
            return Ok(1.0);
        };
        self.known_fields(m, field, &["weight"])?;
        let wf = at(field, "weight");
        let Some(w) = m.get("weight").filter(|w| !w.is_null()) else {
            return Ok(1.0);
        };
        let text = self.quantity_text(w, &wf)?;
        let milli = parse_quantity(&text, 1000).map_err(|e| self.err(&wf, e.to_string()))?;
        if milli < 0 {
            return Err(self.err(wf, format!("{text:?} is negative; write 0 or more")));
        }
        Ok(milli as f64 / 1000.0)
    }

    pub(super) fn preemption(
        &self,
        v: Option<&Value>,
        field: &str,
    ) -> Result<QueuePreemption, LoadError> {
        let Some(m) = self.map(v, field)? else {
            return Ok(QueuePreemption::default());
        };
        self.known_fields(
            m,
            field,
            &[
                "withinClusterQueue",
                "reclaimWithinCohort",
                "borrowWithinCohort",
            ],
        )?;
        use ReclaimPolicy as R;
        use WithinQueuePreemption as W;
        let within_cluster_queue = self
            .choice(
                m.get("withinClusterQueue"),
                &at(field, "withinClusterQueue"),
                &[
                    ("Never", W::Never),
                    ("LowerPriority", W::LowerPriority),
                    ("LowerOrNewerEqualPriority", W::LowerOrNewerEqualPriority),
                ],
            )?
            .unwrap_or_default();
        let reclaim_within_cohort = self
            .choice(
                m.get("reclaimWithinCohort"),
                &at(field, "reclaimWithinCohort"),
                &[
                    ("Never", R::Never),
                    ("LowerPriority", R::LowerPriority),
                    ("Any", R::Any),
                ],
            )?
            .unwrap_or_default();
        let bf = at(field, "borrowWithinCohort");
        let borrow_within_cohort = match self.map(m.get("borrowWithinCohort"), &bf)? {
            None => None,
            Some(b) => {
                self.known_fields(b, &bf, &["policy", "maxPriorityThreshold"])?;
                let lower = self
                    .choice(
                        b.get("policy"),
                        &at(&bf, "policy"),
                        &[("Never", false), ("LowerPriority", true)],
                    )?
                    .unwrap_or(false);
                let tf = at(&bf, "maxPriorityThreshold");
                let threshold = match b.get("maxPriorityThreshold") {
                    None | Some(Value::Null) => None,
                    Some(v) => Some(v.as_i64().and_then(|t| i32::try_from(t).ok()).ok_or_else(
                        || self.err(tf, "is not a priority (a whole number); write e.g. 1000"),
                    )?),
                };
                lower.then_some(BorrowWithinCohort {
                    max_priority_threshold: threshold,
                })
            }
        };
        if borrow_within_cohort.is_some() && reclaim_within_cohort == R::Never {
            return Err(self.err(
                at(&bf, "policy"),
                "LowerPriority needs reclaimWithinCohort LowerPriority or Any (as Kueue requires); set reclaimWithinCohort or the policy Never",
            ));
        }
        Ok(QueuePreemption {
            within_cluster_queue,
            reclaim_within_cohort,
            borrow_within_cohort,
        })
    }
}

/// The object's name, namespace and the reader for its errors.
pub(super) fn reader<'a>(path: &'a Path, position: &str, doc: &Value) -> Reader<'a> {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let meta = doc.get("metadata");
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty());
    let warned = WarnedObject {
        kind: kind.to_string(),
        api_version: Some(api_version.to_string()).filter(|v| !v.is_empty()),
        namespace: namespaced(kind).then(|| namespace_of(doc)),
        name: name.unwrap_or_default().to_string(),
        uid: meta
            .and_then(|m| m.get("uid"))
            .and_then(Value::as_str)
            .filter(|u| !u.is_empty())
            .map(String::from),
    };
    let object = match name {
        Some(_) => warned.label(),
        None => format!("{kind} at {position}"),
    };
    Reader {
        ctx: Ctx { path, object },
        strict: group_of(api_version) == crate::crds::GROUP,
        object: warned,
        warnings: RefCell::default(),
    }
}

pub(super) fn namespaced(kind: &str) -> bool {
    matches!(
        kind,
        "LocalQueue" | "ResourceQuota" | "LimitRange" | "PodDisruptionBudget"
    )
}

pub(super) fn namespace_of(doc: &Value) -> String {
    doc.get("metadata")
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or("default")
        .to_string()
}

/// The object as its k8s-openapi type (the apiVersion is checked already).
pub(super) fn typed<T: k8s_openapi::Resource + serde::de::DeserializeOwned>(
    r: &Reader,
    doc: &Value,
) -> Result<T, LoadError> {
    serde_json::from_value(doc.clone()).map_err(|e| {
        LoadError::new(
            r.ctx.path,
            format!(
                "does not match the Kubernetes {} {} schema: {e}",
                T::API_VERSION,
                T::KIND
            ),
        )
        .object(&r.ctx.object)
    })
}
