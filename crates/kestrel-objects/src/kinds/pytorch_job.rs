//! Kubeflow's `PyTorchJob` (`kubeflow.org/v1`): a Master and Workers, one gang over both.
//! Live, its pods' controller is the PyTorchJob (Kubeflow's training operator), each in
//! the role its replica-type label names.

use super::{GangScope, Live, RoleReader, RoleSet, WorkloadKind};
use crate::workloads::Role;
use crate::LoadError;
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

/// The label Kubeflow's training operator puts on a PyTorchJob's pods: their replica type
/// (a role), in lower case.
pub const KUBEFLOW_ROLE_LABEL: &str = "training.kubeflow.org/replica-type";

const ROLES: [&str; 2] = ["Master", "Worker"];

pub struct PyTorchJob;

impl WorkloadKind for PyTorchJob {
    fn kind(&self) -> &'static str {
        "PyTorchJob"
    }
    fn group(&self) -> &'static str {
        "kubeflow.org"
    }
    fn versions(&self) -> &'static [&'static str] {
        &["v1"]
    }
    fn plural(&self) -> &'static str {
        "pytorchjobs"
    }
    fn live(&self) -> Live {
        Live::Untyped
    }
    fn gang(&self) -> GangScope {
        GangScope::PerObject
    }
    /// The operator's label is in lower case; the role is named as the spec names it.
    fn pod_role(&self, pod: &Pod) -> Option<String> {
        let kubeflow = pod.metadata.labels.as_ref()?.get(KUBEFLOW_ROLE_LABEL)?;
        ROLES
            .into_iter()
            .find(|r| r.eq_ignore_ascii_case(kubeflow))
            .map(str::to_string)
    }
    /// Master (at most 1) and Worker; with an `elasticPolicy` (torchrun's elastic
    /// training) the Master may be left out, and the gang is the Master and
    /// `elasticPolicy.minReplicas` workers: those above start as they fit. The training
    /// operator's `runPolicy.schedulingPolicy.minAvailable` sets the gang's minimum where
    /// given.
    fn roles(&self, r: &RoleReader<'_>, _value: &Value) -> Result<RoleSet, LoadError> {
        let field = "spec.pytorchReplicaSpecs";
        let specs = r
            .spec
            .get("pytorchReplicaSpecs")
            .and_then(Value::as_object)
            .ok_or_else(|| r.err(field, "missing; add Master and Worker replica specs"))?;
        let elastic = r.spec.get("elasticPolicy").filter(|p| !p.is_null());
        if elastic.is_none() && !specs.contains_key("Master") {
            return Err(r.err(
                field,
                "no Master; a PyTorchJob needs one Master replica (rank 0), or an \
                 elasticPolicy for elastic training on Workers alone",
            ));
        }
        let mut set = RoleSet::default();
        for (role, replica) in specs {
            if !ROLES.contains(&role.as_str()) {
                return Err(r.err(
                    format!("{field}.{role}"),
                    "unknown replica type; a PyTorchJob has Master and Worker",
                ));
            }
            let here = format!("{field}.{role}");
            let pods = r.count(&format!("{here}.replicas"), replica.get("replicas"), 1)?;
            if role == "Master" && pods != 1 {
                return Err(r.err(
                    format!("{here}.replicas"),
                    format!("{pods} masters; a PyTorchJob has exactly 1: set replicas: 1"),
                ));
            }
            set.roles.push(Role {
                name: role.clone(),
                pods,
                completions: pods,
                template: r.template(&format!("{here}.template"), replica.get("template"))?,
                field: format!("{here}.template"),
            });
            set.role_minimums.push((role.clone(), pods));
        }
        if let Some(policy) = elastic {
            let workers = set.roles.iter().find(|role| role.name == "Worker");
            let Some(workers) = workers.map(|w| w.pods).filter(|n| *n > 0) else {
                return Err(r.err(
                    format!("{field}.Worker.replicas"),
                    "no workers; elastic training (elasticPolicy) needs at least 1 Worker",
                ));
            };
            let at = "spec.elasticPolicy";
            let min = r.count(&format!("{at}.minReplicas"), policy.get("minReplicas"), 1)?;
            let max = r.count(
                &format!("{at}.maxReplicas"),
                policy.get("maxReplicas"),
                workers,
            )?;
            if min == 0 || min > max {
                return Err(r.err(
                    format!("{at}.minReplicas"),
                    format!("{min} is not from 1 to maxReplicas {max}; set one in that range"),
                ));
            }
            let min = min.min(workers);
            for (role, n) in &mut set.role_minimums {
                if role == "Worker" {
                    *n = min;
                }
            }
            set.min_member = Some(set.role_minimums.iter().map(|(_, n)| n).sum());
        }
        let min_available = "spec.runPolicy.schedulingPolicy.minAvailable";
        if let Some(v) = r
            .spec
            .get("runPolicy")
            .and_then(|p| p.pointer("/schedulingPolicy/minAvailable"))
        {
            set.min_member = Some(r.count(min_available, Some(v), 0)?);
            set.min_member_field = Some(min_available);
            set.role_minimums.clear();
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use crate::fields::Ctx;
    use crate::workloads::{role_workload, RoleWorkload};
    use serde_json::{json, Value};
    use std::path::Path;

    fn read(spec: Value) -> Result<RoleWorkload, String> {
        let object = json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "llm"}, "spec": spec});
        let ctx = Ctx {
            path: Path::new("job.yaml"),
            object: "PyTorchJob ml/llm".into(),
        };
        role_workload(&ctx, &object, "ml", "llm")
            .map(Option::unwrap)
            .map_err(|e| e.to_string())
    }

    fn replica(n: u32) -> Value {
        json!({"replicas": n, "template": {"spec": {"containers": [{"name": "pytorch",
            "image": "x", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}})
    }

    #[test]
    fn an_elastic_job_of_workers_alone_is_a_gang_of_its_minimum() {
        let w = read(
            json!({"elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": 2,
            "maxReplicas": 4}, "pytorchReplicaSpecs": {"Worker": replica(4)}}),
        )
        .unwrap();
        assert_eq!((w.gang.min_member, w.gang.total), (2, Some(4)));
        assert_eq!(w.gang.role_minimums, [("Worker".to_string(), 2)]);
        // With a Master, the Master and the minimum.
        let w = read(json!({"elasticPolicy": {"minReplicas": 1},
            "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(3)}}))
        .unwrap();
        assert_eq!((w.gang.min_member, w.gang.total), (2, Some(4)));
        // Not elastic: every replica.
        let w = read(json!({"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(3)}}))
            .unwrap();
        assert_eq!(w.gang.min_member, 4);
    }

    #[test]
    fn the_scheduling_policys_min_available_sets_the_gang() {
        let w = read(
            json!({"runPolicy": {"schedulingPolicy": {"minAvailable": 3}},
            "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(3)}}),
        )
        .unwrap();
        assert_eq!(w.gang.min_member, 3);
        let e = read(
            json!({"runPolicy": {"schedulingPolicy": {"minAvailable": 9}},
            "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(3)}}),
        )
        .unwrap_err();
        assert!(
            e.contains("spec.runPolicy.schedulingPolicy.minAvailable")
                && e.contains("PyTorchJob's 4 pods"),
            "{e}"
        );
    }

    #[test]
    fn bad_jobs_are_refused_naming_the_field() {
        for (spec, field, says) in [
            (
                json!({"pytorchReplicaSpecs": {"Worker": replica(2)}}),
                "spec.pytorchReplicaSpecs",
                "or an elasticPolicy",
            ),
            (
                json!({"elasticPolicy": {"minReplicas": 1},
                    "pytorchReplicaSpecs": {"Master": replica(1)}}),
                "spec.pytorchReplicaSpecs.Worker.replicas",
                "at least 1 Worker",
            ),
            (
                json!({"elasticPolicy": {"minReplicas": 3, "maxReplicas": 2},
                    "pytorchReplicaSpecs": {"Worker": replica(2)}}),
                "spec.elasticPolicy.minReplicas",
                "maxReplicas 2",
            ),
            (
                json!({"pytorchReplicaSpecs": {"Master": replica(2), "Worker": replica(2)}}),
                "spec.pytorchReplicaSpecs.Master.replicas",
                "exactly 1",
            ),
        ] {
            let e = read(spec).unwrap_err();
            assert!(
                e.contains(field) && e.contains(says) && e.contains("PyTorchJob ml/llm"),
                "{e}"
            );
        }
    }
}
