//! Volcano's `Job` (`batch.volcano.sh/v1alpha1`): its tasks, one gang of its
//! `minAvailable`. Live, Volcano's controller gives every Job a PodGroup, which its pods
//! name: nothing to watch.

use super::{GangScope, Live, RoleReader, RoleSet, WorkloadKind};
use crate::queues::VOLCANO_QUEUE_ANNOTATION;
use crate::workloads::Role;
use crate::LoadError;
use serde_json::Value;

pub struct VolcanoJob;

impl WorkloadKind for VolcanoJob {
    fn kind(&self) -> &'static str {
        "Job"
    }
    fn group(&self) -> &'static str {
        "batch.volcano.sh"
    }
    fn versions(&self) -> &'static [&'static str] {
        &["v1alpha1"]
    }
    fn plural(&self) -> &'static str {
        "jobs"
    }
    fn live(&self) -> Live {
        Live::NotWatched
    }
    fn gang(&self) -> GangScope {
        GangScope::PerObject
    }
    fn roles(&self, r: &RoleReader<'_>, _value: &Value) -> Result<RoleSet, LoadError> {
        let tasks = r
            .spec
            .get("tasks")
            .and_then(Value::as_array)
            .ok_or_else(|| r.err("spec.tasks", "missing; a Volcano Job needs its tasks"))?;
        let mut set = RoleSet::default();
        for (i, task) in tasks.iter().enumerate() {
            let here = format!("spec.tasks[{i}]");
            let role = r.role_name(&here, task, "name the task")?;
            r.unique_role((&set.roles, 0), role, "spec.tasks", format!("{here}.name"))?;
            let pods = r.count(&format!("{here}.replicas"), task.get("replicas"), 1)?;
            if let Some(min) = task.get("minAvailable") {
                let min = r.count(&format!("{here}.minAvailable"), Some(min), 0)?;
                if min > pods {
                    return Err(r.err(
                        format!("{here}.minAvailable"),
                        format!("{min} exceeds the task's {pods} replicas; lower it"),
                    ));
                }
                set.role_minimums.push((role.to_string(), min));
            }
            set.roles.push(Role {
                name: role.to_string(),
                pods,
                completions: pods,
                template: r.template(&format!("{here}.template"), task.get("template"))?,
                field: format!("{here}.template"),
            });
        }
        if r.spec.contains_key("minAvailable") {
            set.min_member = Some(r.count("spec.minAvailable", r.spec.get("minAvailable"), 0)?);
        }
        // The Job's queue is its pods' (Volcano's controller puts it on their PodGroup).
        match r.spec.get("queue") {
            None | Some(Value::Null) => {}
            Some(Value::String(queue)) if !queue.is_empty() => {
                for role in &mut set.roles {
                    role.template
                        .metadata
                        .get_or_insert_with(Default::default)
                        .annotations
                        .get_or_insert_with(Default::default)
                        .entry(VOLCANO_QUEUE_ANNOTATION.to_string())
                        .or_insert_with(|| queue.clone());
                }
            }
            Some(other) => {
                return Err(r.err(
                    "spec.queue",
                    format!("{other} is not a queue name; write the name of a Queue"),
                ))
            }
        }
        Ok(set)
    }
}
