//! KubeRay's `RayCluster` and `RayJob` (`ray.io/v1`). A Ray cluster's head and its workers
//! up to each group's `minReplicas` are one gang (as KubeRay asks of Volcano's or the
//! scheduler-plugins' PodGroup); workers above the minimum, which the autoscaler adds,
//! start one by one as they fit. Live, KubeRay's pods name their RayCluster and worker
//! group in labels; a RayJob's controller creates a RayCluster with the RayJob's labels
//! (its queue among them), so only RayClusters are watched.

use super::{GangScope, Live, RoleReader, RoleSet, WorkloadKind};
use crate::workloads::Role;
use crate::LoadError;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Map, Value};

/// The label KubeRay puts on a Ray cluster's pods: the RayCluster's name.
pub const RAY_CLUSTER_LABEL: &str = "ray.io/cluster";
/// The label KubeRay puts on a Ray cluster's pods: their group (a role).
pub const RAY_GROUP_LABEL: &str = "ray.io/group";
/// The group KubeRay names the head's: the head's role, and no worker group's name.
pub const RAY_HEAD_GROUP: &str = "headgroup";

pub struct RayCluster;

impl WorkloadKind for RayCluster {
    fn kind(&self) -> &'static str {
        "RayCluster"
    }
    fn group(&self) -> &'static str {
        "ray.io"
    }
    fn versions(&self) -> &'static [&'static str] {
        &["v1"]
    }
    fn plural(&self) -> &'static str {
        "rayclusters"
    }
    fn live(&self) -> Live {
        Live::Untyped
    }
    fn gang(&self) -> GangScope {
        GangScope::PerObject
    }
    fn owner_label(&self) -> Option<&'static str> {
        Some(RAY_CLUSTER_LABEL)
    }
    fn pod_role(&self, pod: &Pod) -> Option<String> {
        let labels = pod.metadata.labels.as_ref()?;
        labels.get(RAY_CLUSTER_LABEL)?;
        labels.get(RAY_GROUP_LABEL).cloned()
    }
    fn roles(&self, r: &RoleReader<'_>, _value: &Value) -> Result<RoleSet, LoadError> {
        cluster_roles(r, r.spec, "spec")
    }
}

pub struct RayJob;

impl WorkloadKind for RayJob {
    fn kind(&self) -> &'static str {
        "RayJob"
    }
    fn group(&self) -> &'static str {
        "ray.io"
    }
    fn versions(&self) -> &'static [&'static str] {
        &["v1"]
    }
    fn plural(&self) -> &'static str {
        "rayjobs"
    }
    fn live(&self) -> Live {
        Live::NotWatched
    }
    fn gang(&self) -> GangScope {
        GangScope::PerObject
    }
    /// Its cluster, from `spec.rayClusterSpec`. A RayJob that selects an existing cluster
    /// (`spec.clusterSelector`, which KubeRay follows before a cluster spec) adds no pods
    /// of its own but its submitter.
    fn roles(&self, r: &RoleReader<'_>, _value: &Value) -> Result<RoleSet, LoadError> {
        let selects = r
            .spec
            .get("clusterSelector")
            .and_then(Value::as_object)
            .is_some_and(|s| !s.is_empty());
        match r.spec.get("rayClusterSpec") {
            _ if selects => Ok(RoleSet::default()),
            Some(Value::Object(cluster)) => cluster_roles(r, cluster, "spec.rayClusterSpec"),
            Some(_) => Err(r.err(
                "spec.rayClusterSpec",
                "not an object; write the cluster's headGroupSpec and workerGroupSpecs",
            )),
            None => Err(r.err(
                "spec.rayClusterSpec",
                "missing; a RayJob needs the cluster it runs on (rayClusterSpec) or an \
                 existing one (clusterSelector)",
            )),
        }
    }
}

/// The roles of a RayCluster spec (`cluster`, at field `at`): the head, then each worker
/// group with its replicas (clamped to `minReplicas`..`maxReplicas`, as KubeRay does) times
/// its hosts; the gang is the head and every group's minimum.
fn cluster_roles(
    r: &RoleReader<'_>,
    cluster: &Map<String, Value>,
    at: &str,
) -> Result<RoleSet, LoadError> {
    let head = cluster.get("headGroupSpec").ok_or_else(|| {
        r.err(
            format!("{at}.headGroupSpec"),
            "missing; a Ray cluster needs a head: add headGroupSpec with its pod template",
        )
    })?;
    let mut set = RoleSet::default();
    set.roles.push(Role {
        name: RAY_HEAD_GROUP.to_string(),
        pods: 1,
        completions: 1,
        template: r.template(
            &format!("{at}.headGroupSpec.template"),
            head.get("template"),
        )?,
        field: format!("{at}.headGroupSpec.template"),
    });
    set.role_minimums.push((RAY_HEAD_GROUP.to_string(), 1));
    let mut minimum = 1u32;
    let groups = match cluster.get("workerGroupSpecs") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(groups)) => groups,
        Some(_) => {
            return Err(r.err(
                format!("{at}.workerGroupSpecs"),
                "not a list; write a list of worker groups",
            ))
        }
    };
    let list = format!("{at}.workerGroupSpecs");
    for (i, group) in groups.iter().enumerate() {
        let here = format!("{list}[{i}]");
        let name = group
            .get("groupName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| r.err(format!("{here}.groupName"), "missing; name the group"))?;
        if name == RAY_HEAD_GROUP {
            return Err(r.err(
                format!("{here}.groupName"),
                format!("{RAY_HEAD_GROUP:?} is the head's group; name the worker group otherwise"),
            ));
        }
        // The head, read first, is not one of the listed worker groups.
        r.unique_role((&set.roles, 1), name, &list, format!("{here}.groupName"))?;
        let min = r.count(&format!("{here}.minReplicas"), group.get("minReplicas"), 0)?;
        let max = match group.get("maxReplicas") {
            None | Some(Value::Null) => u32::MAX,
            v => r.count(&format!("{here}.maxReplicas"), v, 0)?,
        };
        if min > max {
            return Err(r.err(
                format!("{here}.minReplicas"),
                format!("{min} is above maxReplicas {max}; set minReplicas at most maxReplicas"),
            ));
        }
        let replicas = r
            .count(&format!("{here}.replicas"), group.get("replicas"), min)?
            .clamp(min, max);
        let hosts = r.count(&format!("{here}.numOfHosts"), group.get("numOfHosts"), 1)?;
        if hosts == 0 {
            return Err(r.err(
                format!("{here}.numOfHosts"),
                "0 hosts; each worker replica is at least one pod: set numOfHosts: 1 or more",
            ));
        }
        let suspended = group.get("suspend").and_then(Value::as_bool) == Some(true);
        let pods = if suspended {
            0
        } else {
            replicas.saturating_mul(hosts)
        };
        let min_pods = if suspended {
            0
        } else {
            min.saturating_mul(hosts)
        };
        let field = format!("{here}.template");
        set.roles.push(Role {
            name: name.to_string(),
            pods,
            completions: pods,
            template: r.template(&field, group.get("template"))?,
            field,
        });
        set.role_minimums.push((name.to_string(), min_pods));
        minimum = minimum.saturating_add(min_pods);
    }
    set.min_member = Some(minimum);
    Ok(set)
}

#[cfg(test)]
mod tests {
    use crate::fields::Ctx;
    use crate::workloads::role_workload;
    use serde_json::{json, Value};
    use std::path::Path;

    fn read(object: Value) -> Result<Option<crate::workloads::RoleWorkload>, String> {
        let ctx = Ctx {
            path: Path::new("ray.yaml"),
            object: format!("{} ml/r", object["kind"].as_str().unwrap()),
        };
        role_workload(&ctx, &object, "ml", "r").map_err(|e| e.to_string())
    }

    fn template(gpus: u32) -> Value {
        json!({"spec": {"containers": [{"name": "ray", "image": "rayproject/ray",
            "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}})
    }

    fn cluster(workers: Value) -> Value {
        json!({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r"},
            "spec": {"headGroupSpec": {"template": template(0)}, "workerGroupSpecs": workers}})
    }

    #[test]
    fn the_head_and_each_groups_minimum_are_the_gang() {
        let w = read(cluster(json!([
            {"groupName": "gpu", "replicas": 3, "minReplicas": 2, "maxReplicas": 4,
             "template": template(4)},
            {"groupName": "tpu-like", "replicas": 1, "minReplicas": 1, "numOfHosts": 2,
             "template": template(8)},
        ])))
        .unwrap()
        .unwrap();
        let roles: Vec<_> = w.roles.iter().map(|r| (r.name.as_str(), r.pods)).collect();
        assert_eq!(roles, [("headgroup", 1), ("gpu", 3), ("tpu-like", 2)]);
        assert_eq!(w.gang.total, Some(6));
        assert_eq!(w.gang.min_member, 1 + 2 + 2);
        assert!(
            w.gang.keeps_admission,
            "autoscaled workers start as they fit"
        );
    }

    #[test]
    fn replicas_are_clamped_to_the_groups_bounds_and_a_suspended_group_has_none() {
        let w = read(cluster(json!([
            {"groupName": "low", "replicas": 0, "minReplicas": 2, "template": template(1)},
            {"groupName": "high", "replicas": 9, "maxReplicas": 3, "template": template(1)},
            {"groupName": "off", "replicas": 2, "minReplicas": 2, "suspend": true,
             "template": template(1)},
        ])))
        .unwrap()
        .unwrap();
        let roles: Vec<_> = w.roles.iter().map(|r| (r.name.as_str(), r.pods)).collect();
        assert_eq!(
            roles,
            [("headgroup", 1), ("low", 2), ("high", 3), ("off", 0)]
        );
        assert_eq!(w.gang.min_member, 3);
    }

    #[test]
    fn a_rayjob_runs_its_cluster_spec_and_adds_no_pods_on_a_selected_cluster() {
        let job = json!({"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "r"},
            "spec": {"entrypoint": "python train.py",
                "rayClusterSpec": cluster(json!([{"groupName": "gpu", "replicas": 2,
                    "minReplicas": 2, "template": template(8)}]))["spec"].clone()}});
        let w = read(job).unwrap().unwrap();
        assert_eq!(w.gang.total, Some(3));
        assert_eq!(
            w.roles[1].field,
            "spec.rayClusterSpec.workerGroupSpecs[0].template"
        );
        let selected = json!({"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": "r"},
            "spec": {"entrypoint": "python x.py", "clusterSelector": {"ray.io/cluster": "shared"}}});
        assert!(read(selected).unwrap().is_none());
        // A selector wins over a cluster spec, as in KubeRay.
        let both = json!({"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "r"},
            "spec": {"clusterSelector": {"ray.io/cluster": "shared"},
                "rayClusterSpec": cluster(json!([]))["spec"].clone()}});
        assert!(read(both).unwrap().is_none());
    }

    #[test]
    fn bad_clusters_are_refused_naming_the_field() {
        for (object, field, says) in [
            (
                json!({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r"},
                    "spec": {"workerGroupSpecs": []}}),
                "spec.headGroupSpec",
                "needs a head",
            ),
            (
                cluster(json!([{"groupName": "headgroup", "template": template(1)}])),
                "spec.workerGroupSpecs[0].groupName",
                "head's group",
            ),
            (
                cluster(json!([{"groupName": "a", "template": template(1)},
                    {"groupName": "a", "template": template(1)}])),
                "spec.workerGroupSpecs[1].groupName",
                "workerGroupSpecs[0]",
            ),
            (
                cluster(
                    json!([{"groupName": "a", "minReplicas": 3, "maxReplicas": 2,
                    "template": template(1)}]),
                ),
                "spec.workerGroupSpecs[0].minReplicas",
                "above maxReplicas 2",
            ),
            (
                cluster(json!([{"groupName": "a", "numOfHosts": 0, "template": template(1)}])),
                "spec.workerGroupSpecs[0].numOfHosts",
                "0 hosts",
            ),
            (
                cluster(json!([{"replicas": 1, "template": template(1)}])),
                "spec.workerGroupSpecs[0].groupName",
                "missing",
            ),
            (
                json!({"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "r"},
                    "spec": {"entrypoint": "python x.py"}}),
                "spec.rayClusterSpec",
                "clusterSelector",
            ),
        ] {
            let e = read(object).unwrap_err();
            assert!(
                e.contains(field) && e.contains(says) && e.contains("ml/r"),
                "{e}"
            );
        }
    }
}
