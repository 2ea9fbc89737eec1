//! The storage objects of a workload file set: PersistentVolumeClaims, PersistentVolumes
//! and StorageClasses, and the volume rules each pod template gets from them.
//!
//! The simulator stands in for the volume controllers: a claim with `Immediate` binding is
//! provisioned at once (within its class's allowed topologies); a `WaitForFirstConsumer`
//! claim where its first pod goes; a generic ephemeral volume's claim is made with each
//! pod. A missing claim, class or volume is an error naming the pod's field.

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1::StorageClass;
use kestrel_core::PodSpec;
use kestrel_k8s::documents::Document;
use kestrel_k8s::fields::Ctx;
use kestrel_k8s::volumes::{ClaimInfo, VolumeCatalog};
use kestrel_k8s::LoadError;
use std::path::Path;

/// Whether a kind is one [`VolumeObjects`] reads.
pub fn is_volume_kind(kind: &str) -> bool {
    matches!(
        kind,
        "PersistentVolumeClaim" | "PersistentVolume" | "StorageClass"
    )
}

/// What the file set declares.
#[derive(Default)]
pub struct VolumeObjects {
    catalog: VolumeCatalog,
}

impl VolumeObjects {
    pub fn add(&mut self, path: &Path, doc: &Document) -> Result<(), LoadError> {
        let ctx = Ctx {
            path,
            object: doc.object(),
        };
        match doc.kind() {
            "PersistentVolumeClaim" => {
                let claim: core::PersistentVolumeClaim = doc.typed(path)?;
                let namespace = claim
                    .metadata
                    .namespace
                    .clone()
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(|| "default".to_string());
                let name = claim.metadata.name.clone().unwrap_or_default();
                self.catalog
                    .claims
                    .insert(format!("{namespace}/{name}"), ClaimInfo::of(&claim));
            }
            "PersistentVolume" => {
                let pv: core::PersistentVolume = doc.typed(path)?;
                self.catalog.add_volume(&ctx, &pv)?;
            }
            "StorageClass" => {
                let class: StorageClass = doc.typed(path)?;
                self.catalog.add_class(&class);
            }
            _ => {}
        }
        Ok(())
    }

    /// Claims with `Immediate` binding are provisioned before any pod runs: each is bound
    /// to a volume of its own, in its class's allowed topologies.
    pub fn provision_immediate(&mut self) {
        let catalog = &mut self.catalog;
        let classes = catalog.classes.clone();
        let default = classes.iter().find(|(_, c)| c.default).map(|(n, _)| n);
        for (key, claim) in catalog.claims.iter_mut() {
            // The simulator stands in for the volume controller: a claim's binding to the
            // volume it names is complete.
            claim.bind_completed = true;
            if claim.volume.is_some() {
                continue;
            }
            let class = match &claim.storage_class {
                Some(name) => classes.get(name),
                None => default.and_then(|n| classes.get(n)),
            };
            if let Some(class) = class.filter(|c| !c.wait_for_first_consumer) {
                let volume = format!("sim-provisioned-{}", key.replace('/', "-"));
                catalog
                    .volumes
                    .insert(volume.clone(), class.allowed.clone());
                claim.volume = Some(volume);
            } else if claim.volume.is_none() {
                claim.bind_completed = false;
            }
        }
    }

    /// Gives a pod template (of `spec`, at `field`) the rules its claims make. The claims of
    /// generic ephemeral volumes are the pod's own: they are made here from their
    /// templates.
    pub fn apply(
        &self,
        ctx: &Ctx,
        field: &str,
        spec: &core::PodSpec,
        namespace: &str,
        pod: &mut PodSpec,
    ) -> Result<(), LoadError> {
        let Some(volumes) = spec.volumes.as_ref() else {
            return Ok(());
        };
        let mut catalog = None;
        for v in volumes {
            let Some(ephemeral) = &v.ephemeral else {
                continue;
            };
            let catalog = catalog.get_or_insert_with(|| self.catalog.clone());
            let class = ephemeral
                .volume_claim_template
                .as_ref()
                .and_then(|t| t.spec.storage_class_name.clone());
            let mut claim = ClaimInfo {
                volume: None,
                bind_completed: false,
                storage_class: class,
                read_write_once_pod: false,
                deleting: false,
                selected_node: None,
            };
            let key = format!("{namespace}/{}-{}", pod.name, v.name);
            let immediate = catalog
                .classes
                .iter()
                .find(|(n, c)| match &claim.storage_class {
                    Some(name) => *n == name,
                    None => c.default,
                })
                .filter(|(_, c)| !c.wait_for_first_consumer)
                .map(|(_, c)| c.allowed.clone());
            if let Some(allowed) = immediate {
                let volume = format!("sim-provisioned-{}", key.replace('/', "-"));
                catalog.volumes.insert(volume.clone(), allowed);
                claim.volume = Some(volume);
                claim.bind_completed = true;
            }
            catalog.claims.insert(key, claim);
        }
        let catalog = catalog.as_ref().unwrap_or(&self.catalog);
        match catalog.pod_rules(namespace, &pod.name, spec) {
            Ok(rules) => {
                pod.constraints.volumes = rules.map(Box::new);
                Ok(())
            }
            Err(why) => {
                let i = pod_volume_index(spec, &why);
                Err(ctx.err(
                    format!("{field}.volumes[{i}]"),
                    format!(
                        "{why}: in the simulator every claim a pod mounts must be in the \
                         workload files (kind: PersistentVolumeClaim), with its StorageClass or \
                         its PersistentVolume"
                    ),
                ))
            }
        }
    }
}

/// The index of the pod volume a reason names (its claim quoted), else 0.
fn pod_volume_index(spec: &core::PodSpec, why: &str) -> usize {
    spec.volumes
        .iter()
        .flatten()
        .position(|v| {
            v.persistent_volume_claim
                .as_ref()
                .is_some_and(|c| why.contains(&format!("\"{}\"", c.claim_name)))
        })
        .unwrap_or(0)
}
