//! The compatibility set (`tests/compat/`): Kestrel's own manifests in the shapes users of
//! Kueue, Volcano, KAI, scheduler-plugins, Kubeflow and JobSet write, each run in the
//! simulator on `tests/compat/cluster.yaml` and checked against the outcome its header
//! states:
//!
//! - `# expect: key=value ...` with `scheduled`, `completed`, `pending_at_end`,
//!   `most_running` (the most pods running at once) and `span` (a duration);
//! - `# expect-warning: text`: a warning contains it (and every warning is expected);
//! - `# expect-error: text`: loading fails with an error that contains it.

use kestrel_objects::duration::parse_duration;
use kestrel_sim::inputs::{load_cluster_file, load_workload_files};
use kestrel_sim::{simulate, SimConfig};
use kestrel_test_support::compat::expected;
use std::path::{Path, PathBuf};

fn compat_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/compat")
}

#[test]
fn every_compat_case_has_its_stated_outcome() {
    let dir = compat_dir();
    let cluster = load_cluster_file(&dir.join("cluster.yaml")).unwrap();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml") && !p.ends_with("cluster.yaml"))
        .collect();
    cases.sort();
    assert!(cases.len() >= 10, "{cases:?}");
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(case).unwrap();
        let want = expected(&text);
        assert!(
            !(want.counts.is_empty() && want.errors.is_empty()),
            "{name}: states no outcome"
        );
        let loaded = load_workload_files(std::slice::from_ref(case));
        if !want.errors.is_empty() {
            let e = match loaded {
                Err(e) => e.to_string(),
                Ok(_) => panic!("{name}: loads, but should fail"),
            };
            for part in &want.errors {
                assert!(e.contains(part), "{name}: {part:?} not in {e}");
            }
            continue;
        }
        let workload = loaded.unwrap_or_else(|e| panic!("{name}: {e}"));
        let warnings: Vec<String> = workload
            .queues
            .warnings
            .iter()
            .map(ToString::to_string)
            .collect();
        for part in &want.warnings {
            assert!(
                warnings.iter().any(|w| w.contains(part)),
                "{name}: no warning with {part:?} in {warnings:?}"
            );
        }
        for w in warnings {
            assert!(
                want.warnings.iter().any(|part| w.contains(part)),
                "{name}: unexpected warning {w}"
            );
        }
        let r = simulate(&cluster, &workload, SimConfig::default(), &mut |_, _| {})
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for (key, value) in &want.counts {
            let got = match key.as_str() {
                "scheduled" => r.pods.scheduled,
                "completed" => r.pods.completed,
                "pending_at_end" => r.pods.pending_at_end,
                "span" => r.span,
                "most_running" => r
                    .samples
                    .iter()
                    .map(|s| u64::from(s.pods_running))
                    .max()
                    .unwrap_or(0),
                other => panic!("{name}: unknown expectation {other}"),
            };
            let want: u64 = match key.as_str() {
                "span" => parse_duration(value).unwrap(),
                _ => value.parse().unwrap(),
            };
            assert_eq!(got, want, "{name}: {key}; pending: {:?}", r.pending_at_end);
        }
    }
}
