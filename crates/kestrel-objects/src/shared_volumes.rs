//! Volumes every pod of a gang must see alike: a dataset or checkpoint volume (the same
//! claim, NFS export or CSI volume) mounted at another path, read-only, at another
//! subPath, or not at all by one role corrupts a run without a word (a checkpoint rank 0
//! writes that the workers never read back). One reader of pod templates' shared mounts,
//! and the one comparison of a gang's roles, for every workload kind.

use crate::warning::{FieldWarning, WarnedObject, INCONSISTENT_VOLUMES};
use k8s_openapi::api::core::v1::{PodTemplateSpec, Volume, VolumeMount};
use serde_json::Value;
use std::collections::BTreeMap;

/// One mount of a shared volume in a pod template.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedMount {
    /// The volume's name in the template.
    pub volume: String,
    /// Its source (the volume less its name): what makes two templates' volumes one.
    pub source: Value,
    pub read_only: bool,
    pub sub_path: Option<String>,
}

/// The volume's source when pods share its contents (datasets, checkpoints); `None` for
/// those each pod has of its own (emptyDir, configMap, secret, projected, downwardAPI,
/// ephemeral).
pub fn shared_volume(volume: &Volume) -> Option<Value> {
    let mut source = serde_json::to_value(volume).ok()?;
    let map = source.as_object_mut()?;
    map.remove("name");
    let own = [
        "emptyDir",
        "configMap",
        "secret",
        "projected",
        "downwardAPI",
        "ephemeral",
    ];
    (!own.iter().any(|k| map.contains_key(*k))).then_some(source)
}

/// A template's shared-volume mounts, by mount path (init containers' too).
pub fn shared_mounts(template: &PodTemplateSpec) -> BTreeMap<String, SharedMount> {
    let Some(spec) = template.spec.as_ref() else {
        return BTreeMap::new();
    };
    let volumes: BTreeMap<&str, Value> = spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| Some((v.name.as_str(), shared_volume(v)?)))
        .collect();
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers);
    let mut out = BTreeMap::new();
    for mount in containers.flat_map(|c| c.volume_mounts.iter().flatten()) {
        let VolumeMount {
            name,
            mount_path,
            read_only,
            sub_path,
            ..
        } = mount;
        if let Some(source) = volumes.get(name.as_str()) {
            out.insert(
                mount_path.clone(),
                SharedMount {
                    volume: name.clone(),
                    source: source.clone(),
                    read_only: read_only.unwrap_or(false),
                    sub_path: sub_path.clone().filter(|p| !p.is_empty()),
                },
            );
        }
    }
    out
}

/// A shared source as a person names it: `claim "ckpt"`, `NFS nas:/exports/data`, else
/// its kind of source and the volume's name.
fn describe(mount: &SharedMount) -> String {
    let s = &mount.source;
    if let Some(claim) = s.pointer("/persistentVolumeClaim/claimName") {
        return format!("claim {claim}");
    }
    if let Some(nfs) = s.get("nfs") {
        let text = |k: &str| {
            nfs.get(k)
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string()
        };
        return format!("NFS {}:{}", text("server"), text("path"));
    }
    match s.as_object().and_then(|m| m.keys().next()) {
        Some(kind) => format!("{kind} volume {:?}", mount.volume),
        None => format!("volume {:?}", mount.volume),
    }
}

/// How one role mounts a source: path, mode, subPath.
fn how(path: &str, mount: &SharedMount) -> String {
    let mode = if mount.read_only {
        "read-only"
    } else {
        "read-write"
    };
    match &mount.sub_path {
        Some(sub) => format!("at {path:?} {mode}, subPath {sub:?}"),
        None => format!("at {path:?} {mode}"),
    }
}

/// One role's mount of a source: the role, the mount path, the mount.
type RoleMount<'a> = (&'a str, String, SharedMount);

/// Where the roles of one gang (name, template) see a shared volume differently: one
/// sentence each, naming the roles, the volume and the fix. Empty when they agree (or
/// share nothing).
pub fn disagreements(roles: &[(&str, &PodTemplateSpec)]) -> Vec<String> {
    // Per source, per role: where and how the role mounts it (its first mount).
    let mut by_source: Vec<(Value, Vec<RoleMount>)> = Vec::new();
    for (role, template) in roles {
        for (path, mount) in shared_mounts(template) {
            let entry = match by_source.iter_mut().find(|(s, _)| *s == mount.source) {
                Some((_, seen)) => seen,
                None => {
                    by_source.push((mount.source.clone(), Vec::new()));
                    &mut by_source.last_mut().expect("just pushed").1
                }
            };
            if !entry.iter().any(|(r, _, _)| r == role) {
                entry.push((role, path, mount));
            }
        }
    }
    let mut out = Vec::new();
    for (_, mounts) in &by_source {
        let (first_role, first_path, first) = &mounts[0];
        let volume = describe(first);
        for (role, _) in roles {
            if !mounts.iter().any(|(r, _, _)| r == role) {
                out.push(format!(
                    "role {role} does not mount {volume}, which role {first_role} mounts {}; \
                     mount it in every role, or the roles see different data",
                    how(first_path, first)
                ));
            }
        }
        for (role, path, mount) in &mounts[1..] {
            let alike = path == first_path
                && mount.read_only == first.read_only
                && mount.sub_path == first.sub_path;
            if !alike {
                out.push(format!(
                    "role {role} mounts {volume} {} but role {first_role} {}; mount it alike \
                     in every role",
                    how(path, mount),
                    how(first_path, first)
                ));
            }
        }
    }
    out
}

/// The warnings (reason [`INCONSISTENT_VOLUMES`]) about `object`, a gang of `roles`, one
/// per [`disagreements`]: what the simulator prints and the live scheduler posts as
/// Warning Events.
pub fn gang_warnings(
    object: &WarnedObject,
    roles: &[(&str, &PodTemplateSpec)],
) -> Vec<FieldWarning> {
    disagreements(roles)
        .into_iter()
        .map(|message| FieldWarning {
            reason: INCONSISTENT_VOLUMES,
            ..object.warning("spec", format!("inconsistent volumes: {message}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(volumes: Value, mounts: Value) -> PodTemplateSpec {
        serde_json::from_value(json!({"spec": {"volumes": volumes,
            "containers": [{"name": "c", "image": "x", "volumeMounts": mounts}]}}))
        .unwrap()
    }

    fn ckpt() -> Value {
        json!([{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}},
            {"name": "scratch", "emptyDir": {}}])
    }

    #[test]
    fn roles_that_mount_a_shared_volume_alike_agree() {
        let a = template(
            ckpt(),
            json!([{"name": "ckpt", "mountPath": "/ckpt"},
            {"name": "scratch", "mountPath": "/tmp"}]),
        );
        // Another volume name for the same claim, and no scratch: still alike.
        let b = template(
            json!([{"name": "c2", "persistentVolumeClaim": {"claimName": "ckpt"}}]),
            json!([{"name": "c2", "mountPath": "/ckpt"}]),
        );
        assert!(disagreements(&[("Master", &a), ("Worker", &b)]).is_empty());
    }

    #[test]
    fn another_path_mode_or_sub_path_and_a_role_without_it_are_said() {
        let master = template(ckpt(), json!([{"name": "ckpt", "mountPath": "/ckpt"}]));
        for (worker, says) in [
            (
                template(
                    ckpt(),
                    json!([{"name": "ckpt", "mountPath": "/checkpoints"}]),
                ),
                "role Worker mounts claim \"ckpt\" at \"/checkpoints\" read-write but role \
                 Master at \"/ckpt\" read-write",
            ),
            (
                template(
                    ckpt(),
                    json!([{"name": "ckpt", "mountPath": "/ckpt", "readOnly": true}]),
                ),
                "at \"/ckpt\" read-only but role Master at \"/ckpt\" read-write",
            ),
            (
                template(
                    ckpt(),
                    json!([{"name": "ckpt", "mountPath": "/ckpt", "subPath": "w"}]),
                ),
                "subPath \"w\"",
            ),
            (
                template(ckpt(), json!([])),
                "role Worker does not mount claim \"ckpt\", which role Master mounts at \
                 \"/ckpt\" read-write",
            ),
        ] {
            let said = disagreements(&[("Master", &master), ("Worker", &worker)]);
            assert_eq!(said.len(), 1, "{said:?}");
            assert!(said[0].contains(says), "{said:?}");
        }
        // An NFS export only the second role mounts: the first is named as lacking it.
        let nfs = template(
            json!([{"name": "data", "nfs": {"server": "nas", "path": "/exports/data"}}]),
            json!([{"name": "data", "mountPath": "/data"}]),
        );
        let said = disagreements(&[
            ("Launcher", &template(json!([]), json!([]))),
            ("Worker", &nfs),
        ]);
        assert_eq!(said.len(), 1);
        assert!(said[0].contains("role Launcher does not mount NFS nas:/exports/data"));
    }
}
