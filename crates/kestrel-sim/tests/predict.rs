//! Start-time prediction: the simulator run forward from a moment with estimated runtimes
//! and only what is known at that moment.

mod fixtures;

use fixtures::{gpu_node, whole_gpu_job};
use kestrel_core::*;
use kestrel_sim::inputs::{load_cluster_file, load_workload_files, resolve_paths};
use kestrel_sim::predict::{
    estimated_durations, evaluate, evaluate_within, predict, Deadline, Estimates, Moments, Reading,
    ESTIMATE_ERROR,
};
use kestrel_sim::*;
use kestrel_view::explain_view::find_pod;
use std::path::PathBuf;

const MIN: Millis = 60_000;
const HOUR: Millis = 3_600_000;

fn pod_job(name: &str, gpus: u32, arrival: Millis, duration: Millis, priority: i32) -> PodSet {
    let mut job = whole_gpu_job(name, gpus, arrival, duration);
    job.template.priority = priority;
    job
}

fn one_node() -> SimCluster {
    SimCluster {
        nodes: vec![gpu_node("a", 8)],
        events: vec![],
    }
}

#[test]
fn estimates_stay_within_twenty_percent_and_declared_ones_win() {
    let mut declared = pod_job("declared", 1, 0, 2 * HOUR, 0);
    declared.template.preemption.runtime_estimate = Some(45 * MIN);
    let mut jobs: Vec<PodSet> = (0..200)
        .map(|i| pod_job(&format!("p{i}"), 1, 0, HOUR, 0))
        .collect();
    jobs.push(declared);
    let mut forever = pod_job("service", 1, 0, 0, 0);
    forever.duration = None;
    jobs.push(forever);
    let workload = Workload {
        jobs,
        ..Default::default()
    };
    let a = estimated_durations(&workload, 42);
    let b = estimated_durations(&workload, 43);
    assert_eq!(a, estimated_durations(&workload, 42), "seeded");
    assert_ne!(a, b, "another seed, other estimates");
    let limit = (HOUR as f64 * ESTIMATE_ERROR).ceil() as Millis;
    for d in &a[..200] {
        let d = d.expect("a job with a duration has an estimate");
        assert!(d.abs_diff(HOUR) <= limit, "{d} is not within 20% of 1 h");
    }
    let spread =
        a[..200].iter().flatten().max().unwrap() - a[..200].iter().flatten().min().unwrap();
    assert!(spread > limit, "estimates spread over the range: {spread}");
    assert_eq!(
        a[200],
        Some(45 * MIN),
        "the declared runtime estimate is used"
    );
    assert_eq!(a[201], None, "a pod that runs to the end has no estimate");
}

#[test]
fn with_exact_runtimes_and_nothing_unknown_the_prediction_is_the_truth() {
    // All jobs exist from the start: what the forward run does is what the true run does.
    let jobs = vec![
        pod_job("big-1", 8, 0, 3 * HOUR, 10),
        pod_job("half-1", 4, 0, HOUR, 5),
        pod_job("half-2", 4, 0, 2 * HOUR, 5),
        pod_job("one-1", 1, 0, 30 * MIN, 1),
        pod_job("big-2", 8, 0, HOUR, 0),
    ];
    let workload = Workload {
        jobs,
        ..Default::default()
    };
    let eval = evaluate_within(
        &one_node(),
        &workload,
        &SimConfig::default(),
        &Moments::At(vec![0, 90 * MIN, 4 * HOUR]),
        &[42],
        0.0,
    )
    .unwrap();
    assert!(eval.pods >= 6, "{eval:?}");
    for d in &eval.details {
        assert_eq!(d.predicted, Some(d.actual), "{d:?}");
        assert!(d.runs.iter().all(|r| *r == Some(d.actual)), "{d:?}");
    }
    assert_eq!(eval.predictor_median_error_s, 0.0);
    assert_eq!(eval.within_range, 1.0);
}

#[test]
fn jobs_arriving_after_the_moment_are_not_known_to_the_predictor() {
    // "low" waits for "first" (ends at 2 h); at 1 h an urgent job (that does not preempt)
    // arrives and takes the room first, so "low" really starts at 3 h. From 30 min, the
    // predictor cannot know that.
    let mut urgent = pod_job("urgent", 8, HOUR, HOUR, 100);
    urgent.template.preemption.never_preempt = true;
    let workload = Workload {
        jobs: vec![
            pod_job("first", 8, 0, 2 * HOUR, 0),
            pod_job("low", 8, 0, HOUR, 0),
            urgent,
        ],
        ..Default::default()
    };
    let cluster = one_node();
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    assert!(sim.run_to(30 * MIN).unwrap());
    let low = find_pod(&sim, "low").unwrap();
    assert!(
        sim.scheduler().pod(low).pending_reason.is_some(),
        "low is pending"
    );
    let exact = Estimates::exact(workload.jobs.iter().map(|j| j.duration).collect());
    let predictions = predict(sim, &[low], &exact, None).unwrap();
    assert_eq!(predictions.starts[&low].point(), Some(2 * HOUR));
    let eval = evaluate_within(
        &cluster,
        &workload,
        &SimConfig::default(),
        &Moments::At(vec![30 * MIN]),
        &[42],
        0.0,
    )
    .unwrap();
    let d = &eval.details[0];
    assert_eq!((d.actual, d.predicted), (3 * HOUR, Some(2 * HOUR)));
}

#[test]
fn a_job_that_outran_its_estimate_beyond_the_bound_is_taken_to_end_now() {
    // "long" truly runs 3 h but declares 30 min; at 1 h it is still running, past even
    // 30 min / 0.8. The predictor takes it to end now (not in the past), so "next" is
    // predicted to start at 1 h in every reading.
    let mut long = pod_job("long", 8, 0, 3 * HOUR, 0);
    long.template.preemption.runtime_estimate = Some(30 * MIN);
    let workload = Workload {
        jobs: vec![long, pod_job("next", 8, 0, HOUR, 0)],
        ..Default::default()
    };
    let cluster = one_node();
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    assert!(sim.run_to(HOUR).unwrap());
    assert_eq!(sim.now(), HOUR);
    let next = find_pod(&sim, "next").unwrap();
    let predictions = predict(
        sim,
        &[next],
        &kestrel_sim::estimates::known(&workload, 7),
        None,
    )
    .unwrap();
    let p = &predictions.starts[&next];
    assert_eq!(p.runs, vec![Some(HOUR); 3], "{p:?}");
    assert_eq!(
        (p.from(), p.point(), p.to()),
        (Some(HOUR), Some(HOUR), Some(HOUR))
    );
}

#[test]
fn a_running_job_is_read_within_what_its_estimate_and_its_elapsed_time_allow() {
    let estimates = Estimates {
        runtimes: vec![Some(100 * MIN), None],
        error: 0.2,
        reading: Reading::Likely,
    };
    let read = |reading, worked| estimates.read_as(reading).runtime(0, worked).unwrap();
    // Not started: the estimate itself, and T'/1.2 .. T'/0.8.
    assert_eq!(read(Reading::Likely, 0), 100 * MIN);
    assert_eq!(read(Reading::Shortest, 0), 5_000_000); // 100 min / 1.2
    assert_eq!(read(Reading::Longest, 0), 125 * MIN);
    // Worked 50 min: nothing ruled out yet (the short end is 83 min).
    assert_eq!(read(Reading::Likely, 50 * MIN), 100 * MIN);
    // Worked 110 min: the true runtime is between 110 and 125 min; e lies in
    // [-0.2, 100/110 - 1], the likely runtime takes its middle.
    let likely = read(Reading::Likely, 110 * MIN);
    let e_mid = (-0.2 + (100.0 / 110.0 - 1.0)) / 2.0;
    assert_eq!(
        likely,
        (100.0 * MIN as f64 / (1.0 + e_mid)).round() as Millis
    );
    assert!(likely > 110 * MIN && likely < 125 * MIN, "{likely}");
    assert_eq!(read(Reading::Shortest, 110 * MIN), 110 * MIN);
    assert_eq!(read(Reading::Longest, 110 * MIN), 125 * MIN);
    // Worked 130 min: beyond the long end, taken to end now.
    for reading in Reading::ALL {
        assert_eq!(read(reading, 130 * MIN), 130 * MIN);
    }
    assert_eq!(estimates.runtime(1, 0), None, "runs to the end");
    // Exact estimates are taken at their word until outrun.
    let exact = Estimates::exact(vec![Some(HOUR)]);
    for reading in Reading::ALL {
        assert_eq!(exact.read_as(reading).runtime(0, 10 * MIN), Some(HOUR));
    }
}

#[test]
fn the_range_brackets_the_truth_when_the_estimates_are_within_their_bound() {
    // "first" truly runs 2 h; "next" waits for it. Whatever the estimate within +/-20%,
    // the shortest and longest readings bracket the true start (2 h), from the start and
    // once "first" has run 100 min.
    let workload = Workload {
        jobs: vec![
            pod_job("first", 8, 0, 2 * HOUR, 0),
            pod_job("next", 8, 0, HOUR, 0),
        ],
        ..Default::default()
    };
    let cluster = one_node();
    for seed in 0..20 {
        let known = kestrel_sim::estimates::known(&workload, seed);
        for at in [0, 100 * MIN] {
            let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
            sim.run_to(at).unwrap();
            let next = find_pod(&sim, "next").unwrap();
            let p = &predict(sim, &[next], &known, None).unwrap().starts[&next];
            let (from, to) = (p.from().unwrap(), p.to().unwrap());
            assert!(
                from <= 2 * HOUR && 2 * HOUR <= to,
                "seed {seed} at {at}: {p:?}"
            );
            assert_eq!(p.point(), p.runs[0]);
        }
    }
}

#[test]
fn a_pod_nothing_known_makes_room_for_has_no_predicted_start() {
    let mut service = pod_job("service", 8, 0, 0, 0);
    service.duration = None;
    let workload = Workload {
        jobs: vec![service, pod_job("stuck", 1, 0, HOUR, 0)],
        ..Default::default()
    };
    let cluster = one_node();
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    assert!(sim.run_to(0).unwrap());
    assert!(
        !sim.run_to(HOUR).unwrap(),
        "nothing happens after the start"
    );
    let stuck = find_pod(&sim, "stuck").unwrap();
    let predictions = predict(
        sim,
        &[stuck],
        &kestrel_sim::estimates::known(&workload, 42),
        None,
    )
    .unwrap();
    let p = &predictions.starts[&stuck];
    assert_eq!((p.point(), p.from(), p.to()), (None, None, None));
}

#[test]
fn forward_runs_stop_at_their_deadline() {
    let workload = Workload {
        jobs: vec![
            pod_job("running", 8, 0, HOUR, 0),
            pod_job("next", 8, 0, HOUR, 0),
        ],
        ..Default::default()
    };
    let cluster = one_node();
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    assert!(sim.run_to(0).unwrap());
    let next = find_pod(&sim, "next").unwrap();
    let known = kestrel_sim::estimates::known(&workload, 42);
    let budget = std::time::Duration::from_secs(2);
    let passed = Deadline {
        at: std::time::Instant::now() - std::time::Duration::from_millis(1),
        budget,
    };
    let err = predict(sim.clone(), &[next], &known, Some(passed)).unwrap_err();
    assert!(
        matches!(err, SimError::PredictionOutOfTime { seconds } if seconds == 2.0),
        "{err:?}"
    );
    assert!(err.to_string().contains("--predict-budget"), "{err}");
    // With time to spare the same question is answered.
    let p = predict(sim, &[next], &known, Some(Deadline::after(budget))).unwrap();
    assert!(p.starts[&next].point().is_some());
}

#[test]
fn run_to_says_when_the_moment_is_after_the_run() {
    let workload = Workload {
        jobs: vec![pod_job("only", 1, 0, HOUR, 0)],
        ..Default::default()
    };
    let cluster = one_node();
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    assert!(sim.run_to(HOUR).unwrap(), "the run ends at 1 h: still on");
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    assert!(!sim.run_to(2 * HOUR).unwrap(), "nothing happens after 1 h");
    assert_eq!(sim.last_event_at(), HOUR);
}

fn falcon_ai() -> Option<(SimCluster, Workload)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/falcon-ai");
    if !dir.join("cluster.yaml").is_file() || !dir.join("workload.yaml").is_file() {
        eprintln!("skipping: {} is absent", dir.display());
        return None;
    }
    let files = resolve_paths(&[dir], None).unwrap();
    let cluster = load_cluster_file(files.cluster.as_ref().unwrap()).unwrap();
    let workload = load_workload_files(&files.workload).unwrap();
    Some((cluster, workload))
}

#[test]
fn on_the_falcon_ai_day_the_predictor_beats_the_naive_estimate() {
    let Some((cluster, workload)) = falcon_ai() else {
        return;
    };
    let last = workload.jobs.iter().map(|j| j.arrival).max().unwrap();
    let times: Vec<Millis> = (1..)
        .map(|k| k * 30 * MIN)
        .take_while(|&t| t <= last)
        .collect();
    let config = SimConfig::default();
    let seeds: Vec<u64> = (42..52).collect();
    for moments in [Moments::At(times), Moments::Submissions] {
        // With exact runtimes only later arrivals are unknown: most starts are exact.
        let exact = evaluate_within(&cluster, &workload, &config, &moments, &[42], 0.0).unwrap();
        assert!(exact.predicted >= 10, "enough pods to compare: {exact:?}");
        // Preempted notebooks (bare Pods) are deleted, so the pods asked about are the
        // ones later arrivals can still overtake: the error is theirs, under half the
        // naive estimate's (465 s against 1,756 s at half-hour moments).
        assert!(
            exact.predictor_median_error_s < 0.5 * exact.naive_median_error_s,
            "{exact:?}"
        );
        assert!(exact.predictor_median_relative_error < 0.15, "{exact:?}");
        assert!(exact.naive_median_error_s > 300.0, "{exact:?}");
        // Runtimes known to +/-20%: the error is the estimates'.
        let eval = evaluate(&cluster, &workload, &config, &moments, &seeds).unwrap();
        assert_eq!(eval.pods, exact.pods * seeds.len(), "{moments:?}");
        assert!(eval.predictor_median_error_s > exact.predictor_median_error_s);
        assert!(
            eval.predictor_median_relative_error < eval.naive_median_relative_error,
            "{moments:?}: predictor {} vs naive {}",
            eval.predictor_median_relative_error,
            eval.naive_median_relative_error
        );
        // The range brackets runtimes, not arrivals nobody knew of yet (0.745 at
        // submissions, where most of the error is later arrivals').
        assert!(
            eval.within_range >= 0.7,
            "{moments:?}: the range holds most actual starts: {}",
            eval.within_range
        );
    }
}

#[test]
fn a_cycle_resolution_batches_what_happens_until_its_next_multiple() {
    // "a" and "b" hold half the node each until 20 s and 40 s; "c" waits for all of it.
    let workload = Workload {
        jobs: vec![
            pod_job("a", 4, 0, 20_000, 1),
            pod_job("b", 4, 0, 40_000, 1),
            pod_job("c", 8, 0, HOUR, 0),
        ],
        ..Default::default()
    };
    let cluster = one_node();
    let run = |resolution: Millis, stop: Option<Millis>| {
        let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
        sim.set_cycle_resolution(resolution);
        sim.record_bindings();
        match stop {
            Some(t) => {
                sim.run_to(t).unwrap();
                assert_eq!(sim.now(), t, "run_to stops where it is told");
            }
            None => while sim.step().unwrap() {},
        }
        let c = find_pod(&sim, "c").unwrap();
        let started = sim.take_bindings().into_iter().find(|(p, _)| *p == c);
        (started.map(|(_, at)| at), sim.finish().cycles)
    };
    let (exact, every_instant) = run(0, None);
    assert_eq!(exact, Some(40_000));
    let (batched, fewer) = run(MIN, None);
    assert_eq!(
        batched,
        Some(MIN),
        "both ends are seen by the cycle at 60 s"
    );
    assert!(fewer < every_instant, "{fewer} cycles, not {every_instant}");
    // A stop between two multiples runs its cycle at the stop.
    assert_eq!(run(MIN, Some(50_000)).0, Some(50_000));
}
