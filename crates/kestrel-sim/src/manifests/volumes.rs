//! The storage objects of a workload file set: PersistentVolumeClaims, PersistentVolumes
//! and StorageClasses, and the volume rules each pod template gets from them.
//!
//! The simulator stands in for the volume controllers: a claim with `Immediate` binding is
//! bound at once (to the smallest PersistentVolume that matches it, else provisioned
//! within its class's allowed topologies); a `WaitForFirstConsumer` claim is bound where
//! its first pod goes (to a PersistentVolume the node may use, else provisioned there), by
//! the engine as the live scheduler does; a generic ephemeral volume's claim is made with
//! each pod. A missing claim, class or volume is an error naming the pod's field.

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1::StorageClass;
use kestrel_core::PodSpec;
use kestrel_objects::documents::Document;
use kestrel_objects::fields::Ctx;
use kestrel_objects::volumes::{ClaimInfo, VolumeCatalog, VolumeInfo, NO_PROVISIONER};
use kestrel_objects::LoadError;
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
                self.catalog.claims.insert(
                    format!("{namespace}/{name}"),
                    ClaimInfo::read(&ctx, &claim)?,
                );
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

    /// Claims with `Immediate` binding are bound before any pod runs, as the volume
    /// controller binds them: to the smallest PersistentVolume that matches, else to a
    /// volume of their own in their class's allowed topologies when the class has a
    /// provisioner. Claims are taken in name order, so runs repeat.
    pub fn provision_immediate(&mut self) {
        let catalog = &mut self.catalog;
        let default = catalog
            .classes
            .iter()
            .find(|(_, c)| c.default)
            .map(|(n, _)| n.clone());
        let keys: Vec<String> = catalog.claims.keys().cloned().collect();
        for key in keys {
            let claim = catalog.claims.get_mut(&key).expect("listed");
            // The simulator stands in for the volume controller: a claim's binding to the
            // volume it names is complete.
            claim.bind_completed = true;
            if claim.volume.is_some() {
                continue;
            }
            let class_name = match &claim.storage_class {
                Some(name) => Some(name.clone()),
                None => default.clone(),
            };
            let class = class_name.as_ref().and_then(|n| catalog.classes.get(n));
            let Some(class) = class.filter(|c| !c.wait_for_first_consumer).cloned() else {
                claim.bind_completed = false;
                continue;
            };
            let claim = claim.clone();
            let class_name = class_name.unwrap_or_default();
            let volume = match catalog.volumes_for(&key, &claim, &class_name).first() {
                Some(matching) => matching.name.clone(),
                None if class.provisioner != NO_PROVISIONER => {
                    let volume = format!("sim-provisioned-{}", key.replace('/', "-"));
                    catalog.volumes.insert(
                        volume.clone(),
                        VolumeInfo::provisioned(class.allowed.clone()),
                    );
                    volume
                }
                None => {
                    catalog.claims.get_mut(&key).expect("listed").bind_completed = false;
                    continue;
                }
            };
            if let Some(pv) = catalog.volumes.get_mut(&volume) {
                pv.claim_ref = Some((key.clone(), claim.uid.clone()));
            }
            catalog.claims.get_mut(&key).expect("listed").volume = Some(volume);
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
                storage_class: class,
                ..ClaimInfo::default()
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
                catalog
                    .volumes
                    .insert(volume.clone(), VolumeInfo::provisioned(allowed));
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
