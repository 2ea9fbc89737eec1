//! `JobSet` (`jobset.x-k8s.io/v1alpha2`): its replicated Jobs, one gang over all of them.
//! Live, its pods' controller is one of its Jobs; they name the JobSet in a label.

use super::{GangScope, Live, RoleReader, RoleSet, WorkloadKind};
use crate::workloads::{
    exclusive_template, Role, JOBSET_EXCLUSIVE_ANNOTATION, JOBSET_JOB_KEY_LABEL,
};
use crate::LoadError;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Map, Value};

/// The label JobSet's controller puts on its Jobs and their pods: the JobSet's name.
pub const JOBSET_NAME_LABEL: &str = "jobset.sigs.k8s.io/jobset-name";
/// The label JobSet's controller puts on its pods: their replicated Job (a role).
pub const JOBSET_ROLE_LABEL: &str = "jobset.sigs.k8s.io/replicatedjob-name";

pub struct JobSet;

impl WorkloadKind for JobSet {
    fn kind(&self) -> &'static str {
        "JobSet"
    }
    fn group(&self) -> &'static str {
        "jobset.x-k8s.io"
    }
    fn versions(&self) -> &'static [&'static str] {
        &["v1alpha2"]
    }
    fn plural(&self) -> &'static str {
        "jobsets"
    }
    fn live(&self) -> Live {
        Live::Untyped
    }
    fn gang(&self) -> GangScope {
        GangScope::PerObject
    }
    fn owner_label(&self) -> Option<&'static str> {
        Some(JOBSET_NAME_LABEL)
    }
    fn pod_role(&self, pod: &Pod) -> Option<String> {
        pod.metadata
            .labels
            .as_ref()?
            .get(JOBSET_ROLE_LABEL)
            .cloned()
    }
    fn roles(&self, r: &RoleReader<'_>, value: &Value) -> Result<RoleSet, LoadError> {
        let exclusive = value
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(JOBSET_EXCLUSIVE_ANNOTATION))
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty());
        replicated_jobs(r, r.spec, "spec", exclusive)
    }
}

/// The roles of a JobSet spec (`jobset`, at field `at`): one per replicated Job, or with
/// exclusive placement on a `topology`, one per child Job, each alone in its domain.
pub(super) fn replicated_jobs(
    r: &RoleReader<'_>,
    jobset: &Map<String, Value>,
    at: &str,
    exclusive: Option<&str>,
) -> Result<RoleSet, LoadError> {
    let jobs = jobset
        .get("replicatedJobs")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            r.err(
                format!("{at}.replicatedJobs"),
                "missing; a JobSet needs its replicated Jobs",
            )
        })?;
    let mut set = RoleSet::default();
    for (i, job) in jobs.iter().enumerate() {
        let here = format!("{at}.replicatedJobs[{i}]");
        let role = r.role_name(&here, job, "name it")?;
        let list = format!("{at}.replicatedJobs");
        r.unique_role((&set.roles, 0), role, &list, format!("{here}.name"))?;
        let replicas = r.count(&format!("{here}.replicas"), job.get("replicas"), 1)?;
        let job_spec = job.pointer("/template/spec");
        let field = format!("{here}.template.spec");
        let parallelism = r.count(
            &format!("{field}.parallelism"),
            job_spec.and_then(|s| s.get("parallelism")),
            1,
        )?;
        let completions = r.count(
            &format!("{field}.completions"),
            job_spec.and_then(|s| s.get("completions")),
            parallelism,
        )?;
        let pods = replicas.saturating_mul(parallelism.min(completions));
        let pod_template = r.template(
            &format!("{field}.template"),
            job_spec.and_then(|s| s.get("template")),
        )?;
        let Some(topology) = exclusive else {
            set.roles.push(Role {
                name: role.to_string(),
                pods,
                completions: replicas.saturating_mul(completions),
                template: pod_template,
                field: format!("{field}.template"),
            });
            set.role_minimums.push((role.to_string(), pods));
            continue;
        };
        // Exclusive placement: each child Job alone in its own domain, by the affinity
        // JobSet's webhook gives its pods; one role per child Job.
        for index in 0..replicas {
            let child = format!("{role}-{index}");
            let pods = parallelism.min(completions);
            set.roles.push(Role {
                template: exclusive_template(
                    pod_template.clone(),
                    JOBSET_JOB_KEY_LABEL,
                    &format!("{}-{child}", r.name),
                    topology,
                ),
                name: child.clone(),
                pods,
                completions,
                field: format!("{field}.template"),
            });
            set.role_minimums.push((child, pods));
        }
    }
    Ok(set)
}
