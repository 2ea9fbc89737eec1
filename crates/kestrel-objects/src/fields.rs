//! Readers for the fields pods and classes share (resource amounts, tolerations, node
//! affinity), with errors that name the object and field.

use crate::annotations::{GPU_FRACTION_ANNOTATION, GPU_MILLI_ANNOTATION};
use crate::error::LoadError;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kestrel_core::{
    parse_quantity, request_scale, NodeAffinity, NodeSelectorTerm, Requirement, SelectorOperator,
    TaintEffect, Toleration, TolerationOperator, GPU_RESOURCE,
};
use std::collections::BTreeMap;
use std::path::Path;

/// Amounts per resource name: cpu in millicores, the rest in units (bytes, devices).
pub type Amounts = BTreeMap<String, i64>;

pub fn add_amounts(to: &mut Amounts, from: &Amounts) {
    for (k, v) in from {
        *to.entry(k.clone()).or_default() += v;
    }
}

pub fn max_amounts(to: &mut Amounts, from: &Amounts) {
    for (k, v) in from {
        let e = to.entry(k.clone()).or_default();
        *e = (*e).max(*v);
    }
}

/// Where errors about one object point.
pub struct Ctx<'a> {
    pub path: &'a Path,
    pub object: String,
}

impl Ctx<'_> {
    pub fn err(&self, field: impl Into<String>, message: impl Into<String>) -> LoadError {
        LoadError::new(self.path, message)
            .object(&self.object)
            .field(field)
    }

    /// An error naming the first key of `object` that is not in `allowed` (`field` is the
    /// object's own path, e.g. `spec`): Kestrel's own kinds may hold only what it reads.
    pub fn known_fields(
        &self,
        object: &serde_json::Map<String, serde_json::Value>,
        field: &str,
        allowed: &[&str],
    ) -> Result<(), LoadError> {
        match object.keys().find(|k| !allowed.contains(&k.as_str())) {
            Some(k) => Err(self.err(
                match field {
                    "" => k.clone(),
                    _ => format!("{field}.{k}"),
                },
                format!(
                    "unknown field {k:?}; Kestrel reads {} here",
                    allowed.join(", ")
                ),
            )),
            None => Ok(()),
        }
    }

    /// One resource amount; extended resources (GPUs included) must be whole numbers.
    pub fn amount(
        &self,
        field: &str,
        resource: &str,
        Quantity(q): &Quantity,
    ) -> Result<i64, LoadError> {
        let whole = !matches!(resource, "cpu" | "memory" | "ephemeral-storage")
            && !resource.starts_with("hugepages-");
        let v = parse_quantity(q, request_scale(resource))
            .map_err(|e| self.err(field, e.to_string()))?;
        if v < 0 {
            return Err(self.err(field, format!("{q:?} is negative; write 0 or more")));
        }
        if whole {
            let milli = parse_quantity(q, 1000).map_err(|e| self.err(field, e.to_string()))?;
            if milli % 1000 != 0 {
                let hint = if resource == GPU_RESOURCE {
                    format!(
                        "; for a share of one GPU drop {GPU_RESOURCE} and set the \
                        annotation {GPU_FRACTION_ANNOTATION}: \"0.5\" (or \
                        {GPU_MILLI_ANNOTATION}: \"500\")"
                    )
                } else {
                    String::new()
                };
                return Err(self.err(
                    field,
                    format!(
                        "{resource} is counted in whole units, {q:?} is not a whole number{hint}"
                    ),
                ));
            }
        }
        Ok(v)
    }

    pub fn amounts(
        &self,
        field: &str,
        map: Option<&BTreeMap<String, Quantity>>,
    ) -> Result<Amounts, LoadError> {
        let mut out = Amounts::new();
        for (name, q) in map.into_iter().flatten() {
            out.insert(
                name.clone(),
                self.amount(&format!("{field}.{name}"), name, q)?,
            );
        }
        Ok(out)
    }

    /// A container's requests, its limits standing in for missing requests (as the API
    /// server defaults them).
    pub fn requirements(
        &self,
        field: &str,
        r: Option<&core::ResourceRequirements>,
    ) -> Result<Amounts, LoadError> {
        let Some(r) = r else {
            return Ok(Amounts::new());
        };
        let mut out = self.amounts(&format!("{field}.limits"), r.limits.as_ref())?;
        out.extend(self.amounts(&format!("{field}.requests"), r.requests.as_ref())?);
        Ok(out)
    }

    pub fn toleration(&self, field: &str, t: &core::Toleration) -> Result<Toleration, LoadError> {
        let key = t.key.clone().unwrap_or_default();
        let value = t.value.clone().unwrap_or_default();
        let operator = match t.operator.as_deref() {
            None | Some("") | Some("Equal") => TolerationOperator::Equal,
            Some("Exists") => TolerationOperator::Exists,
            Some(other) => {
                return Err(self.err(
                    format!("{field}.operator"),
                    format!("unknown toleration operator {other:?}; use Equal or Exists"),
                ))
            }
        };
        if operator == TolerationOperator::Exists && !value.is_empty() {
            return Err(self.err(
                format!("{field}.value"),
                "operator Exists takes no value; remove the value or use operator Equal",
            ));
        }
        if key.is_empty() && operator == TolerationOperator::Equal {
            return Err(self.err(
                format!("{field}.key"),
                "an empty key tolerates every taint only with operator \
                    Exists; set a key or operator: Exists",
            ));
        }
        let effect = match t.effect.as_deref() {
            None | Some("") => None,
            Some(e) => Some(TaintEffect::parse(e).ok_or_else(|| {
                self.err(
                    format!("{field}.effect"),
                    format!(
                        "unknown taint effect {e:?}; use NoSchedule, \
                        PreferNoSchedule or NoExecute, or leave it out to match all"
                    ),
                )
            })?),
        };
        Ok(Toleration {
            key,
            operator,
            value,
            effect,
        })
    }

    pub fn tolerations(
        &self,
        field: &str,
        list: Option<&Vec<core::Toleration>>,
    ) -> Result<Vec<Toleration>, LoadError> {
        list.into_iter()
            .flatten()
            .enumerate()
            .map(|(i, t)| self.toleration(&format!("{field}[{i}]"), t))
            .collect()
    }

    pub fn requirement(
        &self,
        field: &str,
        r: &core::NodeSelectorRequirement,
        match_field: bool,
    ) -> Result<Requirement, LoadError> {
        use SelectorOperator::*;
        let operator = SelectorOperator::parse(&r.operator).ok_or_else(|| {
            self.err(
                format!("{field}.operator"),
                format!(
                    "unknown operator {:?}; use In, NotIn, Exists, DoesNotExist, Gt or Lt",
                    r.operator
                ),
            )
        })?;
        let values = r.values.clone().unwrap_or_default();
        let values_field = format!("{field}.values");
        match operator {
            In | NotIn if values.is_empty() => {
                return Err(self.err(
                    values_field,
                    format!("operator {} needs one or more values", r.operator),
                ))
            }
            Exists | DoesNotExist if !values.is_empty() => {
                return Err(self.err(
                    values_field,
                    format!("operator {} takes no values; remove them", r.operator),
                ))
            }
            Gt | Lt if values.len() != 1 || values[0].parse::<i64>().is_err() => {
                return Err(self.err(
                    values_field,
                    format!(
                        "operator {} needs exactly one integer value, e.g. [\"4\"]",
                        r.operator
                    ),
                ))
            }
            _ => {}
        }
        if match_field && (r.key != "metadata.name" || !matches!(operator, In | NotIn)) {
            return Err(self.err(
                field,
                "matchFields supports only key metadata.name with operator \
                    In or NotIn; use matchExpressions for labels",
            ));
        }
        Ok(Requirement {
            key: r.key.clone(),
            operator,
            values,
        })
    }

    pub fn term(
        &self,
        field: &str,
        t: &core::NodeSelectorTerm,
    ) -> Result<NodeSelectorTerm, LoadError> {
        let reqs = |name: &str, list: Option<&Vec<core::NodeSelectorRequirement>>, fields| {
            list.into_iter()
                .flatten()
                .enumerate()
                .map(|(i, r)| self.requirement(&format!("{field}.{name}[{i}]"), r, fields))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(NodeSelectorTerm {
            match_expressions: reqs("matchExpressions", t.match_expressions.as_ref(), false)?,
            match_fields: reqs("matchFields", t.match_fields.as_ref(), true)?,
        })
    }

    pub fn node_affinity(
        &self,
        field: &str,
        a: &core::NodeAffinity,
    ) -> Result<NodeAffinity, LoadError> {
        let required = match &a.required_during_scheduling_ignored_during_execution {
            None => None,
            Some(sel) => {
                let f = format!(
                    "{field}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
                );
                if sel.node_selector_terms.is_empty() {
                    return Err(self.err(
                        f,
                        "needs one or more node selector terms (an empty list \
                        matches no node); add a term or remove \
                        requiredDuringSchedulingIgnoredDuringExecution",
                    ));
                }
                Some(
                    sel.node_selector_terms
                        .iter()
                        .enumerate()
                        .map(|(i, t)| self.term(&format!("{f}[{i}]"), t))
                        .collect::<Result<Vec<_>, _>>()?,
                )
            }
        };
        let mut preferred = Vec::new();
        for (i, p) in a
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .enumerate()
        {
            let f = format!("{field}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
            if !(1..=100).contains(&p.weight) {
                return Err(self.err(
                    format!("{f}.weight"),
                    format!(
                        "weight {} is outside 1..=100; set a weight from 1 to 100",
                        p.weight
                    ),
                ));
            }
            preferred.push((
                p.weight,
                self.term(&format!("{f}.preference"), &p.preference)?,
            ));
        }
        Ok(NodeAffinity {
            required,
            preferred,
        })
    }
}
