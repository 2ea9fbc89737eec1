//! Cohort trees: inner cohorts' borrowing and lending limits, three levels deep.

use super::*;

/// Queues `research-a`, `research-b` (2 GPUs each) under cohort `research`, and `prod` (8
/// GPUs) beside it under `org`, which holds `org_gpus` itself; 16 GPUs of nodes.
fn research_tree(org_gpus: i64, research: CohortSpec) -> Scheduler {
    let mut s = scheduler(2, 8);
    s.add_cohort(cohort("org", None, org_gpus, None, None))
        .unwrap();
    s.add_cohort(research).unwrap();
    with_queues(
        &mut s,
        vec![
            cq("research-a", Some("research"), 2, None),
            cq("research-b", Some("research"), 2, None),
            cq("prod", Some("org"), 8, None),
        ],
    );
    s
}

fn submit_n(s: &mut Scheduler, queue: &str, n: usize, at: Millis) -> Vec<PodId> {
    (0..n)
        .map(|i| s.submit(pod(queue, &format!("{queue}-{at}-{i}"), "main", 1, 0), at))
        .collect()
}

#[test]
fn an_inner_cohorts_borrowing_limit_bounds_its_subtree_with_room_at_the_root() {
    // research may take 2 GPUs from org beyond its queues' 4: 6 in all, though org holds
    // 4 of its own and prod's 8 are idle.
    let mut s = research_tree(4, cohort("research", Some("org"), 0, Some(2), None));
    let a = submit_n(&mut s, "research-a", 5, 0);
    s.schedule(0);
    assert_eq!(bound(&s, &a), 5, "2 own + 2 of research-b's + 1 from org");
    let b = submit_n(&mut s, "research-b", 3, 1);
    s.schedule(1);
    assert_eq!(
        bound(&s, &b),
        1,
        "research holds 6 in all: 4 nominal + borrowing limit 2"
    );
    let why = reason(&s, b[2]);
    assert!(
        why.contains("Cohort research is at its borrowingLimit"),
        "{why}"
    );
    // prod's own quota is untouched by research's borrowing.
    let p = submit_n(&mut s, "prod", 8, 2);
    s.schedule(2);
    assert_eq!(bound(&s, &p), 8);
    assert_eq!(gpu_used(&s, "research-a") + gpu_used(&s, "research-b"), 6);
    // Inside the subtree, a queue still borrows what its sibling leaves idle.
    s.finish(a[0]).unwrap();
    s.finish(a[1]).unwrap();
    s.schedule(3);
    assert_eq!(
        bound(&s, &b),
        3,
        "research-b takes the room research-a left"
    );
}

#[test]
fn an_inner_cohorts_own_quota_and_lending_limit_keep_room_for_its_subtree() {
    // research holds 4 GPUs of its own; with its queues' 4 that is 8, of which it lends
    // org 4 (lending limit).
    let mut s = research_tree(0, cohort("research", Some("org"), 4, None, Some(4)));
    let p = submit_n(&mut s, "prod", 16, 0);
    s.schedule(0);
    assert_eq!(
        bound(&s, &p),
        12,
        "prod takes its 8 and the 4 research lends, never the 4 research keeps"
    );
    let a = submit_n(&mut s, "research-a", 4, 1);
    s.schedule(1);
    assert_eq!(bound(&s, &a), 4, "research's own 4 wait for its queues");
}

#[test]
fn a_cohort_tree_three_deep_takes_the_tightest_limit_on_the_way_up() {
    // org > research (may borrow 4) > vision (may borrow 1) > research-a, research-b.
    let mut s = scheduler(2, 8);
    s.add_cohort(cohort("org", None, 0, None, None)).unwrap();
    s.add_cohort(cohort("research", Some("org"), 0, Some(4), None))
        .unwrap();
    s.add_cohort(cohort("vision", Some("research"), 0, Some(1), None))
        .unwrap();
    with_queues(
        &mut s,
        vec![
            cq("research-a", Some("vision"), 2, None),
            cq("research-b", Some("vision"), 2, None),
            cq("prod", Some("org"), 12, None),
        ],
    );
    let a = submit_n(&mut s, "research-a", 8, 0);
    s.schedule(0);
    assert_eq!(bound(&s, &a), 5, "vision: its queues' 4 plus 1");
    let why = reason(&s, a[7]);
    assert!(
        why.contains("Cohort vision is at its borrowingLimit"),
        "{why}"
    );
}
