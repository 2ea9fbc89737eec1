//! Kubeflow's `MPIJob` (`kubeflow.org/v2beta1`, the MPI Operator's): a Launcher and its
//! Workers, one gang over both. Live, the MPI Operator run with gang scheduling
//! (`scheduler-plugins` or `volcano`) gives every MPIJob a PodGroup, which its pods name,
//! as Volcano's Jobs do: nothing to watch.

use super::{GangScope, Live, RoleReader, RoleSet, WorkloadKind};
use crate::workloads::Role;
use crate::LoadError;
use serde_json::Value;

pub struct MpiJob;

impl WorkloadKind for MpiJob {
    fn kind(&self) -> &'static str {
        "MPIJob"
    }
    fn group(&self) -> &'static str {
        "kubeflow.org"
    }
    fn versions(&self) -> &'static [&'static str] {
        &["v2beta1"]
    }
    fn plural(&self) -> &'static str {
        "mpijobs"
    }
    fn live(&self) -> Live {
        Live::NotWatched
    }
    fn gang(&self) -> GangScope {
        GangScope::PerObject
    }
    fn roles(&self, r: &RoleReader<'_>, _value: &Value) -> Result<RoleSet, LoadError> {
        let field = "spec.mpiReplicaSpecs";
        let specs = r
            .spec
            .get("mpiReplicaSpecs")
            .and_then(Value::as_object)
            .ok_or_else(|| r.err(field, "missing; add Launcher and Worker replica specs"))?;
        let launcher = specs.get("Launcher").ok_or_else(|| {
            r.err(
                field,
                "no Launcher; an MPIJob needs one Launcher replica (it runs mpirun)",
            )
        })?;
        let mut set = RoleSet::default();
        // The operator's defaults: one Launcher, no Workers unless counted.
        for (role, spec, default) in [
            ("Launcher", Some(launcher), 1),
            ("Worker", specs.get("Worker"), 0),
        ] {
            let Some(spec) = spec else { continue };
            let here = format!("{field}.{role}");
            let pods = r.count(&format!("{here}.replicas"), spec.get("replicas"), default)?;
            if role == "Launcher" && pods != 1 {
                return Err(r.err(
                    format!("{here}.replicas"),
                    format!("{pods} launchers; an MPIJob has exactly 1: set replicas: 1"),
                ));
            }
            if pods == 0 {
                continue;
            }
            set.roles.push(Role {
                name: role.to_string(),
                pods,
                completions: pods,
                template: r.template(&format!("{here}.template"), spec.get("template"))?,
                field: format!("{here}.template"),
            });
            set.role_minimums.push((role.to_string(), pods));
        }
        if let Some(other) = specs
            .keys()
            .find(|k| !["Launcher", "Worker"].contains(&k.as_str()))
        {
            return Err(r.err(
                format!("{field}.{other}"),
                "unknown replica type; an MPIJob has Launcher and Worker",
            ));
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use crate::fields::Ctx;
    use crate::workloads::role_workload;
    use serde_json::{json, Value};
    use std::path::Path;

    fn read(specs: Value) -> Result<Vec<(String, u32)>, String> {
        let ctx = Ctx {
            path: Path::new("w.yaml"),
            object: "MPIJob ml/pi".into(),
        };
        let job = json!({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": "pi", "namespace": "ml"},
            "spec": {"slotsPerWorker": 1, "mpiReplicaSpecs": specs}});
        let w = role_workload(&ctx, &job, "ml", "pi")
            .map_err(|e| e.to_string())?
            .expect("an MPIJob has roles");
        assert_eq!(w.gang.name, "mpijob-pi");
        assert_eq!(
            w.gang.min_member,
            w.roles.iter().map(|r| r.pods).sum::<u32>()
        );
        Ok(w.roles.into_iter().map(|r| (r.name, r.pods)).collect())
    }

    fn template() -> Value {
        json!({"spec": {"containers": [{"name": "c", "image": "x"}]}})
    }

    #[test]
    fn the_launcher_and_its_workers_are_one_gang() {
        let roles = read(json!({"Launcher": {"replicas": 1, "template": template()},
            "Worker": {"replicas": 4, "template": template()}}))
        .unwrap();
        assert_eq!(roles, [("Launcher".into(), 1), ("Worker".into(), 4)]);
        // The operator counts no Workers unless told.
        let roles = read(json!({"Launcher": {"template": template()},
            "Worker": {"template": template()}}))
        .unwrap();
        assert_eq!(roles, [("Launcher".into(), 1)]);
    }

    #[test]
    fn bad_mpi_jobs_are_refused_by_field() {
        let e = read(json!({"Worker": {"replicas": 2, "template": template()}})).unwrap_err();
        assert!(
            e.contains("MPIJob ml/pi")
                && e.contains("spec.mpiReplicaSpecs")
                && e.contains("no Launcher"),
            "{e}"
        );
        let e = read(json!({"Launcher": {"replicas": 2, "template": template()}})).unwrap_err();
        assert!(
            e.contains("spec.mpiReplicaSpecs.Launcher.replicas") && e.contains("exactly 1"),
            "{e}"
        );
        let e = read(json!({"Launcher": {"template": template()}, "Master": {}})).unwrap_err();
        assert!(
            e.contains("spec.mpiReplicaSpecs.Master") && e.contains("unknown replica type"),
            "{e}"
        );
    }
}
