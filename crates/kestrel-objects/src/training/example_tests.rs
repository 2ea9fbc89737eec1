use super::*;
use std::path::Path;

/// The example of docs/concepts/training-jobs.md (examples/training/bert.yaml) is a valid job.
#[test]
fn the_example_job_plans() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/training/bert.yaml");
    let text = std::fs::read_to_string(&path).expect("the example");
    let job: TrainingJob = serde_saphyr::from_str(&text).expect("a TrainingJob");
    let p = plan(&path, &job).unwrap();
    assert_eq!((p.pods(), p.gpus(), p.nproc_per_node), (4, 32, 8));
    assert_eq!(p.queue.as_deref(), Some("research"));
    assert_eq!(p.env(WORKER, 2)[3], ("RANK".to_string(), "3".to_string()));
}
