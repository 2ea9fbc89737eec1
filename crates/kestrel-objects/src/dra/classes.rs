//! DeviceClasses: their selectors compiled, and the queue quota resource each counts as.

use super::*;
use crate::annotations::QUOTA_RESOURCE_ANNOTATION;
use crate::dra_cel::CelSelector;
use crate::error::LoadError;
use crate::fields::Ctx;
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceSelector};
use kestrel_core::Filter;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// NVIDIA's DRA driver, whose `gpu` devices Kestrel allocates.
pub const NVIDIA_GPU_DRIVER: &str = "gpu.nvidia.com";

/// A DeviceClass's selectors, compiled.
#[derive(Debug, Clone)]
pub struct ClassSelectors {
    pub name: String,
    pub(super) selectors: Vec<Arc<CelSelector>>,
    /// The queue quota resource its devices count as.
    pub quota_resource: String,
    /// `spec.extendedResourceName`: the extended resource it serves through DRA.
    pub extended_resource: Option<String>,
    /// `metadata.creationTimestamp`: the newest of two classes that serve one extended
    /// resource wins, as in kube-scheduler.
    created: Option<k8s_openapi::jiff::Timestamp>,
}

/// Device classes by name: compiled, or why not; and the requests' filters, one per class
/// and selectors, shared by every claim alike so that each device is judged once.
#[derive(Debug, Default)]
pub struct DeviceClasses {
    classes: BTreeMap<String, Result<Arc<ClassSelectors>, String>>,
    filters: Mutex<HashMap<String, Arc<RequestFilter>>>,
    /// Compiled expressions by text: a claim read for every pod compiles nothing twice.
    compiled: Mutex<HashMap<String, Arc<CelSelector>>>,
}

impl DeviceClasses {
    /// Reads a DeviceClass; one that cannot be read is kept with its error, which the
    /// claims naming it report.
    pub fn insert(&mut self, ctx: &Ctx, class: &DeviceClass) -> Result<(), LoadError> {
        let name = class.metadata.name.clone().unwrap_or_default();
        let spec = class.spec.as_ref();
        let selectors = spec.and_then(|s| s.selectors.as_ref());
        let read = read_selectors(ctx, "spec.selectors", selectors, self)
            .and_then(|selectors| Ok((selectors, quota_resource(ctx, class)?)));
        match read {
            Ok((selectors, quota_resource)) => {
                let class = ClassSelectors {
                    name: name.clone(),
                    selectors,
                    quota_resource,
                    extended_resource: spec.and_then(|s| s.extended_resource_name.clone()),
                    created: class.metadata.creation_timestamp.as_ref().map(|t| t.0),
                };
                self.classes.insert(name, Ok(Arc::new(class)));
                Ok(())
            }
            Err(e) => {
                self.classes.insert(name, Err(e.to_string()));
                Err(e)
            }
        }
    }

    pub fn remove(&mut self, name: &str) {
        self.classes.remove(name);
    }

    pub fn names(&self) -> Vec<String> {
        self.classes.keys().cloned().collect()
    }

    /// The class that serves `nvidia.com/gpu` through DRA (its `spec.extendedResourceName`),
    /// as kube-scheduler chooses one when several name it: the newest, the lower name on a
    /// tie. The warning names the classes left out.
    pub fn gpu_backing(&self) -> (Option<GpuBacking>, Option<crate::warning::FieldWarning>) {
        let mut serving: Vec<&Arc<ClassSelectors>> = self
            .classes
            .values()
            .filter_map(|c| c.as_ref().ok())
            .filter(|c| c.extended_resource.as_deref() == Some(kestrel_core::GPU_RESOURCE))
            .collect();
        serving.sort_by(|a, b| b.created.cmp(&a.created).then(a.name.cmp(&b.name)));
        let Some(chosen) = serving.first() else {
            return (None, None);
        };
        let warning = (serving.len() > 1).then(|| {
            let others: Vec<&str> = serving[1..].iter().map(|c| c.name.as_str()).collect();
            crate::warning::FieldWarning {
                source: None,
                object: crate::warning::WarnedObject {
                    kind: "DeviceClass".to_string(),
                    api_version: Some("resource.k8s.io/v1".to_string()),
                    namespace: None,
                    name: chosen.name.clone(),
                    uid: None,
                },
                field: Some("spec.extendedResourceName".to_string()),
                message: format!(
                    "DeviceClasses {others:?} name {} too; this class (the newest) serves it \
                     and they do not: remove the field from the classes that should not",
                    kestrel_core::GPU_RESOURCE
                ),
                reason: crate::warning::FIELD_NOT_HONOURED,
            }
        });
        let backing = GpuBacking {
            class: chosen.name.clone(),
            filter: self.shared_filter(chosen, Vec::new()),
        };
        (Some(backing), warning)
    }

    /// The filter of `class` with a request's `own` selectors: one per class and
    /// selectors, shared by every request alike, so each device is judged once.
    pub(super) fn shared_filter(
        &self,
        class: &Arc<ClassSelectors>,
        own: Vec<Arc<CelSelector>>,
    ) -> Filter {
        let class_expressions: Vec<&str> = class.selectors.iter().map(|s| s.expression()).collect();
        let expressions: Vec<&str> = own.iter().map(|s| s.expression()).collect();
        let key = format!("{}|{class_expressions:?}|{expressions:?}", class.name);
        let mut filters = self.filters.lock().unwrap_or_else(|p| p.into_inner());
        let filter = filters
            .entry(key.clone())
            .or_insert_with(|| Arc::new(RequestFilter::new(key, class.clone(), own)))
            .clone();
        Filter(filter)
    }

    pub(super) fn get(&self, name: &str) -> Result<&Arc<ClassSelectors>, String> {
        match self.classes.get(name) {
            Some(Ok(class)) => Ok(class),
            Some(Err(e)) => Err(format!("DeviceClass {name} cannot be used: {e}")),
            None => Err(format!(
                "DeviceClass {name} does not exist; create it (apiVersion: resource.k8s.io/v1, \
                 kind: DeviceClass) or name one of {:?}",
                self.classes.keys().collect::<Vec<_>>()
            )),
        }
    }
}

/// The queue quota resource a class's devices count as: its
/// [`QUOTA_RESOURCE_ANNOTATION`], else its `spec.extendedResourceName`, else
/// `nvidia.com/gpu`.
pub(super) fn quota_resource(ctx: &Ctx, class: &DeviceClass) -> Result<String, LoadError> {
    let annotation = class
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(QUOTA_RESOURCE_ANNOTATION));
    let extended = class
        .spec
        .as_ref()
        .and_then(|s| s.extended_resource_name.as_ref());
    let (field, name) = match (annotation, extended) {
        (Some(name), _) => (
            format!("metadata.annotations[{QUOTA_RESOURCE_ANNOTATION:?}]"),
            name,
        ),
        (None, Some(name)) => ("spec.extendedResourceName".to_string(), name),
        (None, None) => return Ok(kestrel_core::GPU_RESOURCE.to_string()),
    };
    let reserved = ["cpu", "memory", "ephemeral-storage", "pods"];
    let valid = !name.is_empty()
        && !reserved.contains(&name.as_str())
        && !name.starts_with("hugepages-")
        && name.split('/').count() <= 2
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._/".contains(c));
    if !valid {
        return Err(ctx.err(
            field,
            format!(
                "{name:?} is not a quota resource for devices; write a resource name such as \
                 nvidia.com/gpu or whole-gpus (not cpu, memory, ephemeral-storage, pods or \
                 hugepages-*)"
            ),
        ));
    }
    Ok(name.clone())
}

pub(super) fn read_selectors(
    ctx: &Ctx,
    field: &str,
    selectors: Option<&Vec<DeviceSelector>>,
    classes: &DeviceClasses,
) -> Result<Vec<Arc<CelSelector>>, LoadError> {
    let mut out = Vec::new();
    for (i, s) in selectors.into_iter().flatten().enumerate() {
        let Some(cel) = &s.cel else {
            return Err(ctx.err(
                format!("{field}[{i}]"),
                "a selector needs cel.expression (the only kind of selector)",
            ));
        };
        let known = classes
            .compiled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&cel.expression)
            .cloned();
        let compiled = match known {
            Some(compiled) => compiled,
            None => {
                let compiled = Arc::new(CelSelector::compile(&cel.expression).map_err(|e| {
                    ctx.err(
                        format!("{field}[{i}].cel.expression"),
                        format!("{:?} does not compile: {e}", cel.expression),
                    )
                })?);
                let mut cache = classes.compiled.lock().unwrap_or_else(|p| p.into_inner());
                if cache.len() >= COMPILED_EXPRESSIONS {
                    cache.clear();
                }
                cache.insert(cel.expression.clone(), compiled.clone());
                compiled
            }
        };
        out.push(compiled);
    }
    Ok(out)
}
