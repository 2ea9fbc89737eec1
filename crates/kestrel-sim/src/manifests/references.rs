//! Objects that workloads refer to by name (a TrainJob's TrainingRuntime or
//! ClusterTrainingRuntime), kept once each at a version Kestrel reads.

use super::*;

/// The workload kind that refers to objects of `doc`'s kind (a TrainJob to its runtimes),
/// if it is such a kind.
pub(super) fn referenced_by(
    doc: &Document,
) -> Option<&'static dyn kestrel_objects::kinds::WorkloadKind> {
    kestrel_objects::kinds::referenced_kinds()
        .find(|(kind, _, _)| *kind == doc.kind())
        .map(|(_, _, by)| by)
}

/// Keeps an object that workloads refer to (a TrainJob's runtime), at a version Kestrel
/// reads, once.
pub(super) fn add_reference(
    references: &mut kestrel_objects::kinds::References,
    path: &Path,
    doc: &Document,
    by: &dyn kestrel_objects::kinds::WorkloadKind,
) -> Result<(), LoadError> {
    let ctx = Ctx {
        path,
        object: doc.object(),
    };
    let kind = doc.kind();
    let api_version = doc
        .value
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    let read: Vec<String> = by
        .versions()
        .iter()
        .map(|v| kestrel_objects::kinds::api_version(by.group(), v))
        .collect();
    if !read.iter().any(|v| v == api_version) {
        return Err(ctx.err(
            "apiVersion",
            format!(
                "apiVersion {api_version:?} is not one Kestrel reads for {kind}; set one of {}",
                read.join(", ")
            ),
        ));
    }
    let name = doc
        .meta_str("name")
        .ok_or_else(|| ctx.err("metadata.name", "no name; set metadata.name"))?;
    let cluster = kestrel_objects::kinds::referenced_kinds().any(|(k, c, _)| k == kind && c);
    let namespace = match cluster {
        true => String::new(),
        false => doc.meta_str("namespace").unwrap_or("default").to_string(),
    };
    let key = (kind.to_string(), namespace, name.to_string());
    if references.contains_key(&key) {
        return Err(ctx.err(
            "metadata.name",
            format!("{} is defined twice; remove one", doc.object()),
        ));
    }
    references.insert(key, (path.to_path_buf(), doc.value.clone()));
    Ok(())
}
