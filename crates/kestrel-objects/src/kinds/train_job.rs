//! Kubeflow Trainer's `TrainJob` (`trainer.kubeflow.org/v1alpha1`), with the runtime it
//! names: a `TrainingRuntime` in its namespace or a `ClusterTrainingRuntime`, whose
//! `spec.template` is a JobSet template. The simulator expands it as Trainer's controller
//! does: a JobSet named after the TrainJob from the runtime's template, the trainer's Job
//! running `numNodes` pods (the TrainJob's `spec.trainer.numNodes`, else the runtime's
//! `spec.mlPolicy.numNodes`), its `node` container with `spec.trainer.resourcesPerNode`.
//! The whole TrainJob is one gang; its queue label counts.
//!
//! Live, Trainer's controller creates that JobSet (owned by the TrainJob), whose pods
//! Kestrel groups as any JobSet's. The TrainJob is watched for its queue alone
//! ([`Live::Parent`]): Kueue's queue label is on the TrainJob, and Trainer copies only
//! `spec.labels` onto the JobSet, so the JobSet's pods wait until its TrainJob is seen.

use super::jobset::replicated_jobs;
use super::{GangScope, Live, RoleReader, RoleSet, WorkloadKind};
use crate::fields::Ctx;
use crate::queues::KUEUE_QUEUE_LABEL;
use crate::workloads::JOBSET_EXCLUSIVE_ANNOTATION;
use crate::LoadError;
use serde_json::Value;

pub const TRAINER_GROUP: &str = "trainer.kubeflow.org";
/// The label Trainer's runtimes put on a replicated Job's template: the step it is
/// (`dataset-initializer`, `model-initializer`, `trainer`).
pub const TRAINER_ANCESTOR_LABEL: &str = "trainer.kubeflow.org/trainjob-ancestor-step";
/// The name of the trainer's replicated Job and of its container, in Trainer's runtimes.
pub const TRAINER_NODE: &str = "node";
/// The runtimes a TrainJob may name: (kind, whether cluster-scoped).
pub const TRAINING_RUNTIME_KINDS: [(&str, bool); 2] =
    [("TrainingRuntime", false), ("ClusterTrainingRuntime", true)];

pub struct TrainJob;

impl WorkloadKind for TrainJob {
    fn kind(&self) -> &'static str {
        "TrainJob"
    }
    fn group(&self) -> &'static str {
        TRAINER_GROUP
    }
    fn versions(&self) -> &'static [&'static str] {
        &["v1alpha1"]
    }
    fn plural(&self) -> &'static str {
        "trainjobs"
    }
    fn live(&self) -> Live {
        Live::Parent
    }
    fn gang(&self) -> GangScope {
        GangScope::PerObject
    }
    fn referenced_kinds(&self) -> &'static [(&'static str, bool)] {
        &TRAINING_RUNTIME_KINDS
    }
    fn roles(&self, r: &RoleReader<'_>, _value: &Value) -> Result<RoleSet, LoadError> {
        let at = "spec.runtimeRef";
        let reference = r.spec.get("runtimeRef").ok_or_else(|| {
            r.err(
                at,
                "missing; name the TrainingRuntime or ClusterTrainingRuntime to run it with",
            )
        })?;
        let name = reference
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| r.err(format!("{at}.name"), "missing; name the runtime"))?;
        match reference.get("apiGroup").and_then(Value::as_str) {
            None | Some(TRAINER_GROUP) => {}
            Some(other) => {
                return Err(r.err(
                    format!("{at}.apiGroup"),
                    format!("{other:?} is not the runtimes' group; write {TRAINER_GROUP}"),
                ))
            }
        }
        // Trainer's default runtime kind is the cluster-wide one.
        let kind = reference
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("ClusterTrainingRuntime");
        let Some((kind, cluster)) = TRAINING_RUNTIME_KINDS.into_iter().find(|(k, _)| *k == kind)
        else {
            return Err(r.err(
                format!("{at}.kind"),
                format!("{kind:?} is not a runtime kind; write TrainingRuntime or ClusterTrainingRuntime"),
            ));
        };
        let references = r.references.ok_or_else(|| {
            r.err(
                at,
                "a TrainJob's runtime is read from the workload files; give the TrainJob \
                 with them",
            )
        })?;
        let namespace = if cluster { "" } else { r.namespace };
        let runtime_object = match cluster {
            true => format!("{kind} {name}"),
            false => format!("{kind} {namespace}/{name}"),
        };
        let key = (kind.to_string(), namespace.to_string(), name.to_string());
        let Some((runtime_path, runtime)) = references.get(&key) else {
            return Err(r.err(
                format!("{at}.name"),
                format!(
                    "no {runtime_object} in the files read; add it to the workload files \
                     (kubectl get {} {name} -o yaml{}) or name one that is there",
                    kind.to_ascii_lowercase() + "s",
                    if cluster {
                        String::new()
                    } else {
                        format!(" -n {namespace}")
                    }
                ),
            ));
        };
        let runtime_ctx = Ctx {
            path: runtime_path,
            object: runtime_object,
        };
        let mut jobset = runtime
            .pointer("/spec/template/spec")
            .and_then(Value::as_object)
            .cloned()
            .ok_or_else(|| {
                runtime_ctx.err(
                    "spec.template.spec",
                    "missing; a runtime's template is the JobSet its TrainJobs run",
                )
            })?;
        let trainer = r.spec.get("trainer");
        let num_nodes = match trainer.and_then(|t| t.get("numNodes")) {
            Some(n) => Some(r.count("spec.trainer.numNodes", Some(n), 1)?),
            None => match runtime.pointer("/spec/mlPolicy/numNodes") {
                Some(n) => Some(
                    RoleReader {
                        ctx: &runtime_ctx,
                        ..*r
                    }
                    .count("spec.mlPolicy.numNodes", Some(n), 1)?,
                ),
                None => None,
            },
        };
        if num_nodes == Some(0) {
            return Err(r.err(
                "spec.trainer.numNodes",
                "0 nodes; a TrainJob trains on 1 or more: set 1 or more",
            ));
        }
        let resources = trainer.and_then(|t| t.get("resourcesPerNode"));
        if num_nodes.is_some() || resources.is_some() {
            let jobs = jobset
                .get_mut("replicatedJobs")
                .and_then(Value::as_array_mut)
                .ok_or_else(|| {
                    runtime_ctx.err(
                        "spec.template.spec.replicatedJobs",
                        "missing; a runtime's JobSet needs its replicated Jobs",
                    )
                })?;
            let is_trainer = |job: &Value, by_label: bool| match by_label {
                true => {
                    job.pointer("/template/metadata/labels")
                        .and_then(|l| l.get(TRAINER_ANCESTOR_LABEL))
                        .and_then(Value::as_str)
                        == Some("trainer")
                }
                false => job.get("name").and_then(Value::as_str) == Some(TRAINER_NODE),
            };
            // Trainer's runtimes mark the trainer's Job by its ancestor label; older ones
            // by its name.
            let index = jobs
                .iter()
                .position(|j| is_trainer(j, true))
                .or_else(|| jobs.iter().position(|j| is_trainer(j, false)))
                .ok_or_else(|| {
                    runtime_ctx.err(
                        "spec.template.spec.replicatedJobs",
                        format!(
                            "no trainer Job for spec.trainer of TrainJob {}/{} to size: label \
                             one {TRAINER_ANCESTOR_LABEL}: trainer (or name it {TRAINER_NODE})",
                            r.namespace, r.name
                        ),
                    )
                })?;
            let job_spec = jobs[index]
                .pointer_mut("/template/spec")
                .and_then(Value::as_object_mut)
                .ok_or_else(|| {
                    runtime_ctx.err(
                        format!("spec.template.spec.replicatedJobs[{index}].template.spec"),
                        "missing; add the trainer's Job spec",
                    )
                })?;
            if let Some(n) = num_nodes {
                job_spec.insert("parallelism".into(), n.into());
                job_spec.insert("completions".into(), n.into());
            }
            if let Some(resources) = resources {
                let containers = job_spec
                    .get_mut("template")
                    .and_then(|t| t.pointer_mut("/spec/containers"))
                    .and_then(Value::as_array_mut);
                let node = containers.and_then(|cs| {
                    cs.iter_mut()
                        .find(|c| c.get("name").and_then(Value::as_str) == Some(TRAINER_NODE))
                });
                let Some(node) = node else {
                    return Err(runtime_ctx.err(
                        format!(
                            "spec.template.spec.replicatedJobs[{index}].template.spec.template.spec.containers"
                        ),
                        format!(
                            "no container named {TRAINER_NODE}, which spec.trainer.resourcesPerNode \
                             of TrainJob {}/{} sets; name the trainer's container {TRAINER_NODE}",
                            r.namespace, r.name
                        ),
                    ));
                };
                node["resources"] = resources.clone();
            }
        }
        let exclusive = runtime
            .pointer("/spec/template/metadata/annotations")
            .and_then(|a| a.get(JOBSET_EXCLUSIVE_ANNOTATION))
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty());
        let mut set = replicated_jobs(
            &RoleReader {
                ctx: &runtime_ctx,
                ..*r
            },
            &jobset,
            "spec.template.spec",
            exclusive,
        )?;
        // Trainer copies `spec.labels` onto the JobSet: a queue named there is the
        // TrainJob's too (live, the JobSet's is what Kestrel reads).
        if let Some(queue) = r
            .spec
            .get("labels")
            .and_then(|l| l.get(KUEUE_QUEUE_LABEL))
            .and_then(Value::as_str)
        {
            for role in &mut set.roles {
                role.template
                    .metadata
                    .get_or_insert_with(Default::default)
                    .labels
                    .get_or_insert_with(Default::default)
                    .entry(KUEUE_QUEUE_LABEL.to_string())
                    .or_insert_with(|| queue.to_string());
            }
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::References;
    use crate::workloads::{role_workload_with, RoleWorkload};
    use serde_json::json;
    use std::path::{Path, PathBuf};

    fn runtime(replicated_jobs: Value) -> Value {
        json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "torch"},
            "spec": {"mlPolicy": {"numNodes": 2},
                "template": {"spec": {"replicatedJobs": replicated_jobs}}}})
    }

    fn job(name: &str, ancestor: Option<&str>, container: &str) -> Value {
        let labels = ancestor.map_or(json!({}), |a| json!({TRAINER_ANCESTOR_LABEL: a}));
        json!({"name": name, "template": {"metadata": {"labels": labels}, "spec": {
            "template": {"spec": {"containers": [{"name": container, "image": "x",
                "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}})
    }

    fn read(trainer: Value, runtime: Option<Value>) -> Result<RoleWorkload, String> {
        let mut references = References::new();
        if let Some(runtime) = runtime {
            references.insert(
                (
                    "ClusterTrainingRuntime".into(),
                    String::new(),
                    "torch".into(),
                ),
                (PathBuf::from("runtimes.yaml"), runtime),
            );
        }
        let train_job = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "llm", "namespace": "ml"},
            "spec": {"runtimeRef": {"name": "torch"}, "trainer": trainer}});
        let ctx = Ctx {
            path: Path::new("w.yaml"),
            object: "TrainJob ml/llm".into(),
        };
        role_workload_with(&ctx, &train_job, "ml", "llm", Some(&references))
            .map(|w| w.expect("a TrainJob has roles"))
            .map_err(|e| e.to_string())
    }

    fn gpus(role: &crate::workloads::Role) -> String {
        let spec = role.template.spec.as_ref().unwrap();
        let resources = serde_json::to_value(&spec.containers[0].resources).unwrap();
        resources["limits"]["nvidia.com/gpu"]
            .to_string()
            .replace('"', "")
    }

    #[test]
    fn the_trainer_job_runs_num_nodes_pods_with_the_resources_per_node() {
        let jobs = json!([
            job("init", Some("dataset-initializer"), "init"),
            job("trainer", Some("trainer"), TRAINER_NODE)
        ]);
        // The runtime's numNodes, its resources.
        let w = read(json!({}), Some(runtime(jobs.clone()))).unwrap();
        let pods: Vec<_> = w.roles.iter().map(|r| (r.name.as_str(), r.pods)).collect();
        assert_eq!(pods, [("init", 1), ("trainer", 2)]);
        assert_eq!(
            (w.gang.name.as_str(), w.gang.min_member),
            ("trainjob-llm", 3)
        );
        assert_eq!(gpus(&w.roles[1]), "1");
        // The TrainJob's numNodes and resourcesPerNode win, on the trainer's Job only.
        let w = read(
            json!({"numNodes": 4, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 8}}}),
            Some(runtime(jobs)),
        )
        .unwrap();
        let pods: Vec<_> = w.roles.iter().map(|r| (r.name.as_str(), r.pods)).collect();
        assert_eq!(pods, [("init", 1), ("trainer", 4)]);
        assert_eq!(
            (gpus(&w.roles[0]), gpus(&w.roles[1])),
            ("1".into(), "8".into())
        );
        assert_eq!(w.roles[1].completions, 4);
    }

    /// Runtimes without the ancestor label mark the trainer's Job by its name.
    #[test]
    fn a_runtime_without_the_ancestor_label_names_its_trainer_job_node() {
        let w = read(
            json!({"numNodes": 3}),
            Some(runtime(json!([
                job("a", None, "a"),
                job(TRAINER_NODE, None, "b")
            ]))),
        )
        .unwrap();
        let pods: Vec<_> = w.roles.iter().map(|r| (r.name.as_str(), r.pods)).collect();
        assert_eq!(pods, [("a", 1), ("node", 3)]);
        let e = read(
            json!({"numNodes": 3}),
            Some(runtime(json!([job("a", None, "a")]))),
        )
        .unwrap_err();
        assert!(
            e.contains("ClusterTrainingRuntime torch")
                && e.contains("spec.template.spec.replicatedJobs")
                && e.contains("no trainer Job")
                && e.contains(TRAINER_ANCESTOR_LABEL),
            "{e}"
        );
    }

    #[test]
    fn a_missing_runtime_or_bad_reference_is_refused_by_field() {
        let e = read(json!({}), None).unwrap_err();
        assert!(
            e.contains("TrainJob ml/llm")
                && e.contains("spec.runtimeRef.name")
                && e.contains("no ClusterTrainingRuntime torch")
                && e.contains("kubectl get clustertrainingruntimes torch -o yaml"),
            "{e}"
        );
        let e = read(
            json!({"numNodes": 0}),
            Some(runtime(json!([job("node", None, "node")]))),
        )
        .unwrap_err();
        assert!(
            e.contains("spec.trainer.numNodes") && e.contains("0 nodes"),
            "{e}"
        );
        let ctx = Ctx {
            path: Path::new("w.yaml"),
            object: "TrainJob ml/llm".into(),
        };
        let bad_kind = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "llm", "namespace": "ml"},
            "spec": {"runtimeRef": {"name": "torch", "kind": "Runtime"}}});
        let e = role_workload_with(&ctx, &bad_kind, "ml", "llm", Some(&References::new()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("spec.runtimeRef.kind") && e.contains("ClusterTrainingRuntime"),
            "{e}"
        );
    }
}
