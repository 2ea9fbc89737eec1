//! A workload is what the user submitted: a queued Job, StatefulSet or ReplicaSet is admitted
//! whole against its queue's quota, as Kueue admits it, not pod by pod.
//!
//! Kestrel gives such an object's pods an implied gang ([`queued_workload`]): all of its
//! pods at once (`parallelism`, at most the completions left, or `replicas`), or down to
//! Kueue's partial-admission minimum [`KUEUE_MIN_PARALLELISM_ANNOTATION`] on a Job. Once
//! started the workload stays admitted ([`GangSpec::keeps_admission`]): its next pods (the
//! Job's later completions, replacements) start as they fit. Pods that name a gang
//! themselves (a PodGroup, Kueue's pod-group labels) keep it, and a Deployment's pods stay
//! one workload each, as in Kueue. Unqueued objects are not grouped: without a queue there
//! is no quota to admit against.
//!
//! Kueue shrinks a partially admitted Job to the count it admitted; Kestrel does not edit
//! the Job, so the pods left over wait and start as quota and room free up.

use crate::fields::Ctx;
use crate::LoadError;
use kestrel_core::GangSpec;
use std::collections::BTreeMap;

/// Kueue's partial admission: a Job may start with this many pods when its parallelism
/// does not fit the quota.
pub const KUEUE_MIN_PARALLELISM_ANNOTATION: &str = "kueue.x-k8s.io/job-min-parallelism";

/// The kinds whose pods are one workload when queued.
pub const WHOLE_WORKLOAD_KINDS: [&str; 3] = ["Job", "StatefulSet", "ReplicaSet"];

/// The implied gang's name for an object: Kueue's workload naming, `job-<name>`.
pub fn workload_gang_name(kind: &str, name: &str) -> String {
    format!("{}-{name}", kind.to_ascii_lowercase())
}

/// The gang a queued object of `kind` implies for its `pods` pods (`None` for kinds whose
/// pods are workloads of their own). `annotations`: the object's.
pub fn queued_workload(
    ctx: &Ctx,
    kind: &str,
    namespace: &str,
    name: &str,
    pods: u32,
    annotations: &BTreeMap<String, String>,
) -> Result<Option<GangSpec>, LoadError> {
    if !WHOLE_WORKLOAD_KINDS.contains(&kind) || pods == 0 {
        return Ok(None);
    }
    let field = format!("metadata.annotations[{KUEUE_MIN_PARALLELISM_ANNOTATION:?}]");
    let min_member = match annotations.get(KUEUE_MIN_PARALLELISM_ANNOTATION) {
        Some(_) if kind != "Job" => {
            return Err(ctx.err(
                field,
                format!(
                    "partial admission is for Jobs; a {kind} is admitted with all its \
                     replicas: remove the annotation"
                ),
            ))
        }
        Some(value) => match value.trim().parse::<u32>() {
            Ok(min) if (1..=pods).contains(&min) => min,
            _ => {
                return Err(ctx.err(
                    field,
                    format!(
                        "{value:?} is not a pod count from 1 to the Job's parallelism \
                         ({pods}); set one in that range or remove it"
                    ),
                ))
            }
        },
        None => pods,
    };
    Ok(Some(GangSpec {
        namespace: namespace.to_string(),
        name: workload_gang_name(kind, name),
        min_member,
        total: Some(pods),
        keeps_admission: true,
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn read(kind: &str, pods: u32, min: Option<&str>) -> Result<Option<GangSpec>, LoadError> {
        let ctx = Ctx {
            path: Path::new("w.yaml"),
            object: format!("{kind} team-a/train"),
        };
        let annotations = min
            .map(|m| [(KUEUE_MIN_PARALLELISM_ANNOTATION.to_string(), m.to_string())].into())
            .unwrap_or_default();
        queued_workload(&ctx, kind, "team-a", "train", pods, &annotations)
    }

    #[test]
    fn a_queued_job_is_one_gang_of_its_parallelism() {
        let gang = read("Job", 3, None).unwrap().unwrap();
        assert_eq!((gang.name.as_str(), gang.min_member), ("job-train", 3));
        assert_eq!(gang.total, Some(3));
        assert!(gang.keeps_admission);
        let gang = read("StatefulSet", 4, None).unwrap().unwrap();
        assert_eq!(
            (gang.name.as_str(), gang.min_member),
            ("statefulset-train", 4)
        );
        assert_eq!(read("Deployment", 4, None).unwrap(), None);
        assert_eq!(read("Pod", 1, None).unwrap(), None);
        assert_eq!(read("Job", 0, None).unwrap(), None);
    }

    #[test]
    fn partial_admission_reads_kueues_minimum() {
        let gang = read("Job", 4, Some("2")).unwrap().unwrap();
        assert_eq!((gang.min_member, gang.total), (2, Some(4)));
        for bad in ["0", "5", "two", "-1"] {
            let e = read("Job", 4, Some(bad)).unwrap_err().to_string();
            assert!(
                e.contains("Job team-a/train")
                    && e.contains(KUEUE_MIN_PARALLELISM_ANNOTATION)
                    && e.contains("from 1 to the Job's parallelism (4)"),
                "{e}"
            );
        }
        let e = read("StatefulSet", 4, Some("2")).unwrap_err().to_string();
        assert!(e.contains("partial admission is for Jobs"), "{e}");
    }
}
