//! The DRA objects of a workload file set: DeviceClasses, ResourceClaims and
//! ResourceClaimTemplates, and the claims each pod template makes from them. The simulator
//! stands in for the claim controller: a pod's claim from a template is its own
//! (`<pod>-<claim>`), made when the pod is.

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate};
use kestrel_core::PodSpec;
use kestrel_objects::documents::Document;
use kestrel_objects::dra::{self, ClaimSource, DeviceClasses};
use kestrel_objects::fields::Ctx;
use kestrel_objects::LoadError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Whether a kind is one [`DraObjects`] reads.
pub fn is_dra_kind(kind: &str) -> bool {
    matches!(
        kind,
        "DeviceClass" | "ResourceClaim" | "ResourceClaimTemplate"
    )
}

/// What the file set declares, collected before pods are read.
#[derive(Default)]
pub struct DraObjects {
    classes: DeviceClasses,
    /// (namespace, name) -> the object and where it was read.
    claims: BTreeMap<(String, String), (PathBuf, String, ResourceClaim)>,
    templates: BTreeMap<(String, String), (PathBuf, String, ResourceClaimTemplate)>,
}

fn namespace_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

impl DraObjects {
    pub fn add(&mut self, path: &Path, doc: &Document) -> Result<(), LoadError> {
        let ctx = Ctx {
            path,
            object: doc.object(),
        };
        match doc.kind() {
            "DeviceClass" => {
                let class: DeviceClass = doc.typed(path)?;
                self.classes.insert(&ctx, &class)?;
            }
            "ResourceClaim" => {
                let claim: ResourceClaim = doc.typed(path)?;
                let key = (
                    namespace_of(&claim.metadata),
                    claim.metadata.name.clone().unwrap_or_default(),
                );
                self.claims
                    .insert(key, (path.to_path_buf(), ctx.object.clone(), claim));
            }
            "ResourceClaimTemplate" => {
                let template: ResourceClaimTemplate = doc.typed(path)?;
                let key = (
                    namespace_of(&template.metadata),
                    template.metadata.name.clone().unwrap_or_default(),
                );
                self.templates
                    .insert(key, (path.to_path_buf(), ctx.object.clone(), template));
            }
            _ => {}
        }
        Ok(())
    }

    /// The class that serves `nvidia.com/gpu` through DRA, and a warning when several
    /// name it.
    pub fn gpu_backing(
        &self,
    ) -> (
        Option<dra::GpuBacking>,
        Option<kestrel_objects::warning::FieldWarning>,
    ) {
        self.classes.gpu_backing()
    }

    /// Gives a pod template (of `spec`, at `field`) the claims its `spec.resourceClaims`
    /// make. Errors name the pod's field, or the claim's or template's own.
    pub fn apply(
        &self,
        ctx: &Ctx,
        field: &str,
        spec: &core::PodSpec,
        namespace: &str,
        pod: &mut PodSpec,
    ) -> Result<(), LoadError> {
        let mut claims = Vec::new();
        for (i, (name, source)) in dra::pod_claims(ctx, field, spec)?.into_iter().enumerate() {
            let entry = format!("{field}.resourceClaims[{i}]");
            match source {
                ClaimSource::Claim(claim_name) => {
                    let key = (namespace.to_string(), claim_name.clone());
                    let (path, object, claim) = self.claims.get(&key).ok_or_else(|| {
                        ctx.err(
                            format!("{entry}.resourceClaimName"),
                            format!(
                                "no ResourceClaim {namespace}/{claim_name} in the workload \
                                 files; add one (apiVersion: resource.k8s.io/v1) or use a \
                                 resourceClaimTemplateName"
                            ),
                        )
                    })?;
                    let cctx = Ctx {
                        path,
                        object: object.clone(),
                    };
                    let mut read = dra::read_claim_spec(
                        &cctx,
                        "spec",
                        format!("{namespace}/{claim_name}"),
                        claim.spec.as_ref(),
                        &self.classes,
                    )?;
                    read.allocation = dra::claim_allocation(&cctx, claim)?;
                    claims.push(read);
                }
                ClaimSource::Template(template_name) => {
                    let key = (namespace.to_string(), template_name.clone());
                    let (path, object, template) = self.templates.get(&key).ok_or_else(|| {
                        ctx.err(
                            format!("{entry}.resourceClaimTemplateName"),
                            format!(
                                "no ResourceClaimTemplate {namespace}/{template_name} in the \
                                 workload files; add one (apiVersion: resource.k8s.io/v1)"
                            ),
                        )
                    })?;
                    let tctx = Ctx {
                        path,
                        object: object.clone(),
                    };
                    let mut read = dra::read_claim_spec(
                        &tctx,
                        "spec.spec",
                        format!("{namespace}/{}-{name}", pod.name),
                        template.spec.as_ref().and_then(|s| s.spec.as_ref()),
                        &self.classes,
                    )?;
                    read.per_pod = Some(name);
                    claims.push(read);
                }
            }
        }
        dra::set_pod_claims(ctx, field, pod, claims)
    }
}
