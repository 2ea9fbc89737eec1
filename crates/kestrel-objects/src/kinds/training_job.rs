//! Kestrel's own `TrainingJob` (`scheduling.kestrel.dev/v1alpha1`): its roles are the
//! live controller's plan. Live, that controller creates its pods and their PodGroup, so
//! there is no owner to watch.

use super::{GangScope, Live, RoleReader, RoleSet, WorkloadKind};
use crate::workloads::Role;
use crate::LoadError;
use serde_json::Value;

pub struct TrainingJob;

impl WorkloadKind for TrainingJob {
    fn kind(&self) -> &'static str {
        "TrainingJob"
    }
    fn group(&self) -> &'static str {
        crate::crds::GROUP
    }
    fn versions(&self) -> &'static [&'static str] {
        &["v1alpha1"]
    }
    fn plural(&self) -> &'static str {
        "trainingjobs"
    }
    fn display(&self) -> String {
        "TrainingJob (Kestrel)".into()
    }
    fn live(&self) -> Live {
        Live::NotWatched
    }
    fn gang(&self) -> GangScope {
        GangScope::PerObject
    }
    /// The live controller's validation and roles; its pods carry the job's queue, as the
    /// controller labels them live.
    fn roles(&self, r: &RoleReader<'_>, value: &Value) -> Result<RoleSet, LoadError> {
        let job: crate::training::TrainingJob = serde_json::from_value(value.clone())
            .map_err(|e| r.err("spec", format!("not a TrainingJob: {e}")))?;
        let plan = crate::training::plan(r.ctx.path, &job)?;
        let mut set = RoleSet::default();
        for mut role in plan.roles {
            if let Some(queue) = &plan.queue {
                role.template
                    .metadata
                    .get_or_insert_with(Default::default)
                    .labels
                    .get_or_insert_with(Default::default)
                    .insert(crate::queues::KESTREL_QUEUE_LABEL.into(), queue.clone());
            }
            let field = format!("spec.replicaSpecs.{}.template", role.name);
            set.role_minimums.push((role.name.clone(), role.replicas));
            set.roles.push(Role {
                name: role.name,
                pods: role.replicas,
                completions: role.replicas,
                template: role.template,
                field,
            });
        }
        Ok(set)
    }
}
