//! "What would help" names the running pods whose preemption makes room, and says why the
//! scheduler does not take them itself.

mod fixtures;

use fixtures::{gpu_node, whole_gpu_job};
use kestrel_core::*;
use kestrel_sim::predict::Estimates;
use kestrel_sim::*;
use kestrel_view::explain_view::{find_pod, pod_view, render_pod};

const MIN: Millis = 60_000;

fn job(name: &str, gpus: u32, arrival: Millis, priority: i32, never: bool) -> PodSet {
    let mut job = whole_gpu_job(name, gpus, arrival, 120 * MIN);
    job.template.priority = priority;
    job.template.preemption.never_preempt = never;
    job
}

/// Two 4-GPU nodes: "a" runs 1 + 3 GPUs at priorities 50 and 300, "b" runs 2 + 2 GPUs at
/// 200 and 100. A 2-GPU pod arrives later.
fn state(waiting_priority: i32, never: bool) -> (SimCluster, Workload) {
    let cluster = SimCluster {
        nodes: vec![gpu_node("a", 4), gpu_node("b", 4)],
        events: vec![],
    };
    let workload = Workload {
        jobs: vec![
            job("a-low", 1, 0, 50, false),
            job("a-high", 3, 0, 300, false),
            job("b-mid", 2, 0, 200, false),
            job("b-low", 2, 0, 100, false),
            job("waiting", 2, 10 * MIN, waiting_priority, never),
        ],
        ..Default::default()
    };
    (cluster, workload)
}

fn help_of(waiting_priority: i32, never: bool) -> (kestrel_view::explain_view::PodView, String) {
    let (cluster, workload) = state(waiting_priority, never);
    let estimates = Estimates::exact(workload.jobs.iter().map(|j| j.duration).collect());
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    sim.run_to(20 * MIN).unwrap();
    let id = find_pod(&sim, "waiting").unwrap();
    assert!(
        sim.scheduler().pod(id).pending_reason.is_some(),
        "the pod waits"
    );
    let view = pod_view(&sim, id, &estimates);
    let text = render_pod(&view);
    (view, text)
}

#[test]
fn the_fewest_lowest_priority_victims_are_named_with_why_they_stay() {
    // Priority 100: "b-low" (100) alone makes room on b; a needs "a-high" (300) too.
    let (view, text) = help_of(100, false);
    let p = view
        .help
        .unwrap()
        .preemption
        .expect("a preemption makes room");
    assert_eq!(p.node, "b");
    assert_eq!(p.victims.len(), 1);
    assert_eq!(
        (p.victims[0].pod.as_str(), p.victims[0].priority),
        ("team/b-low", 100)
    );
    assert!(p.why_not.contains("not below its 100"), "{}", p.why_not);
    assert!(
        text.contains("fits on b if these were preempted: team/b-low (priority 100)"),
        "{text}"
    );
}

#[test]
fn a_pod_that_never_preempts_is_told_so() {
    // Priority 150 with preemptionPolicy Never: "b-low" (100) is lower, yet stays.
    let (view, _) = help_of(150, true);
    let p = view.help.unwrap().preemption.unwrap();
    assert_eq!(p.victims[0].pod, "team/b-low");
    assert!(
        p.why_not.contains("preemptionPolicy is Never"),
        "{}",
        p.why_not
    );
}

#[test]
fn a_pod_that_may_preempt_lower_priorities_is_not_left_waiting_for_them() {
    // Priority 150 may preempt "b-low": the scheduler does it, so nothing waits.
    let (cluster, workload) = state(150, false);
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    sim.run_to(20 * MIN).unwrap();
    let id = find_pod(&sim, "waiting").unwrap();
    let record = sim.scheduler().pod(id);
    let bound = matches!(record.phase, PodPhase::Bound { .. });
    let evicting = sim
        .scheduler()
        .pods()
        .any(|(_, r)| r.spec.name == "b-low" && r.evicting);
    assert!(bound || evicting, "it took b-low's room");
}

/// Racks r1 (n1: 8 GPUs free, n2: 2 of 8 free) and r2 (n3: 4 of 8 free); a gang of four
/// 4-GPU pods required in one rack.
#[test]
fn a_gang_is_told_which_domain_comes_closest_and_what_its_next_pod_lacks() {
    let racked = |name: &str, rack: &str| {
        let mut node = gpu_node(name, 8);
        node.labels.insert(RACK_LABEL.to_string(), rack.to_string());
        node.labels
            .insert(HOSTNAME_LABEL.to_string(), name.to_string());
        node
    };
    let cluster = SimCluster {
        nodes: vec![racked("n1", "r1"), racked("n2", "r1"), racked("n3", "r2")],
        events: vec![],
    };
    let mut busy_n2 = job("busy-n2", 6, 0, 1000, false);
    busy_n2.template.constraints.node_selector =
        [(HOSTNAME_LABEL.to_string(), "n2".to_string())].into();
    let mut busy_n3 = job("busy-n3", 4, 0, 1000, false);
    busy_n3.template.constraints.node_selector =
        [(HOSTNAME_LABEL.to_string(), "n3".to_string())].into();
    let mut jobs = vec![busy_n2, busy_n3];
    for rank in 0..4 {
        let mut member = job(&format!("train-{rank}"), 4, 10 * MIN, 0, false);
        member.template.gang = Some(GangMembership {
            gang: "train".into(),
            role: None,
            rank: Some(rank),
        });
        jobs.push(member);
    }
    let workload = Workload {
        jobs,
        gangs: vec![GangSpec {
            namespace: "team".into(),
            name: "train".into(),
            min_member: 4,
            topology: GangTopology {
                required: Some(RACK_LABEL.into()),
                ..Default::default()
            },
            ..Default::default()
        }],
        topology_levels: vec![RACK_LABEL.into()],
        ..Default::default()
    };
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    sim.run_to(20 * MIN).unwrap();
    let view = kestrel_view::explain_view::gang_view(&sim, "team", "train");
    assert_eq!(view.pending, 4, "{view:?}");
    let help = view.help.as_ref().expect("a waiting gang gets help");
    assert_eq!(
        (
            help.level.as_deref(),
            help.domain.as_deref(),
            help.fit,
            help.pending
        ),
        (Some(RACK_LABEL), Some("r1"), 2, 4)
    );
    let closest = help.closest.as_ref().unwrap();
    assert_eq!(closest.node, "n2");
    assert_eq!(closest.lacks[0].text, "2 more GPUs");
    let text = kestrel_view::explain_view::render_gang(&view);
    assert!(
        text.contains(&format!(
            "2 of its 4 pending pods fit together in {RACK_LABEL} r1 now"
        )) && text.contains("one more fits on node n2 if 2 more GPUs were free"),
        "{text}"
    );
}

/// A GPU pod kept off the only GPU node by a taint: "what would help" names the taint, and
/// never points it at the CPU-only node, however free that node is.
#[test]
fn a_taint_is_named_and_a_cpu_only_node_is_never_offered_to_a_gpu_pod() {
    let mut tainted = gpu_node("gpu", 4);
    tainted.taints.push(Taint {
        key: "dedicated".into(),
        value: "inference".into(),
        effect: TaintEffect::NoSchedule,
    });
    let cpu_only = NodeSpec::new("cpu", Resources::new(64_000, 512 << 30));
    let cluster = SimCluster {
        nodes: vec![tainted, cpu_only],
        events: vec![],
    };
    let workload = Workload {
        jobs: vec![job("waiting", 2, 0, 0, false)],
        ..Default::default()
    };
    let estimates = Estimates::exact(workload.jobs.iter().map(|j| j.duration).collect());
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    sim.run_to(MIN).unwrap();
    let id = find_pod(&sim, "waiting").unwrap();
    let view = pod_view(&sim, id, &estimates);
    let help = view
        .help
        .as_ref()
        .expect("help for a pod capacity or taints keep");
    assert!(help.closest.is_none(), "{:?}", help.closest);
    assert_eq!(
        help.blocking_taint,
        Some(("dedicated=inference:NoSchedule".to_string(), 1))
    );
    let text = render_pod(&view);
    assert!(
        text.contains(
            "a toleration of taint dedicated=inference:NoSchedule would let it use 1 more node(s)"
        ),
        "{text}"
    );
    assert!(!text.contains("node cpu"), "{text}");
}
