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
    fn roles(&self, r: &RoleReader<'_>, _value: &Value) -> Result<RoleSet, LoadError> {
        let field = "spec.pytorchReplicaSpecs";
        let specs = r
            .spec
            .get("pytorchReplicaSpecs")
            .and_then(Value::as_object)
            .ok_or_else(|| r.err(field, "missing; add Master and Worker replica specs"))?;
        if !specs.contains_key("Master") {
            return Err(r.err(
                field,
                "no Master; a PyTorchJob needs one Master replica (rank 0)",
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
            set.roles.push(Role {
                name: role.clone(),
                pods,
                completions: pods,
                template: r.template(&format!("{here}.template"), replica.get("template"))?,
                field: format!("{here}.template"),
            });
            set.role_minimums.push((role.clone(), pods));
        }
        Ok(set)
    }
}
