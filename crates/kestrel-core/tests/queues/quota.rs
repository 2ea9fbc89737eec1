//! Nominal quota, borrowing up to the limit, reclaim of lent quota.

use super::*;

#[test]
fn nominal_quota_holds_without_a_cohort() {
    let mut s = scheduler(2, 8);
    with_queues(&mut s, vec![cq("team-a", None, 4, None)]);
    let ids: Vec<PodId> = (0..6)
        .map(|i| s.submit(pod("team-a", &format!("p{i}"), "main", 1, 0), 0))
        .collect();
    s.schedule(0);
    assert_eq!(bound(&s, &ids), 4);
    assert_eq!(gpu_used(&s, "team-a"), 4);
    let why = reason(&s, ids[5]);
    assert!(
        why.contains("quota: ClusterQueue team-a flavor default needs 1 more nvidia.com/gpu: 4 in use of nominal 4"),
        "{why}"
    );
    let r = s.pod(ids[5]).pending_reason.clone().unwrap();
    assert!(!r.is_capacity(), "quota is not a capacity problem");
    // A finished pod returns its quota and the next one starts.
    s.finish(ids[0]).unwrap();
    s.schedule(1);
    assert_eq!(bound(&s, &ids), 4);
    assert_eq!(gpu_used(&s, "team-a"), 4);
}

#[test]
fn idle_quota_is_borrowed_up_to_the_borrowing_limit() {
    let mut s = scheduler(2, 8);
    with_queues(
        &mut s,
        vec![
            cq("team-a", Some("org"), 4, Some(2)),
            cq("team-b", Some("org"), 4, None),
        ],
    );
    let ids: Vec<PodId> = (0..8)
        .map(|i| s.submit(pod("team-a", &format!("p{i}"), "main", 1, 0), 0))
        .collect();
    s.schedule(0);
    assert_eq!(bound(&s, &ids), 6, "4 nominal + 2 borrowed");
    let why = reason(&s, ids[7]);
    assert!(why.contains("borrowing up to 6"), "{why}");
}

#[test]
fn lent_quota_is_reclaimed_by_preempting_the_borrower() {
    let mut s = scheduler(1, 8);
    let mut b = cq("team-b", Some("org"), 4, None);
    b.preemption.reclaim_within_cohort = ReclaimPolicy::Any;
    with_queues(&mut s, vec![cq("team-a", Some("org"), 4, None), b]);
    let a: Vec<PodId> = (0..8)
        .map(|i| s.submit(pod("team-a", &format!("a{i}"), "main", 1, 100), 0))
        .collect();
    s.schedule(0);
    assert_eq!(
        bound(&s, &a),
        8,
        "team-a borrows all of team-b's idle quota"
    );
    let b_ids: Vec<PodId> = (0..3)
        .map(|i| s.submit(pod("team-b", &format!("b{i}"), "main", 1, 0), 1_000))
        .collect();
    // One preemptor at a time per queue: the room it makes is its own.
    let mut victims = Vec::new();
    for t in 0..6 {
        let d = s.schedule(1_000 + t);
        assert!(d.preemptions.len() <= 1);
        victims.extend(evict_all(&mut s, &d));
    }
    assert_eq!(victims.len(), 3, "one victim per team-b pod");
    assert!(victims.iter().all(|v| a.contains(v)));
    assert_eq!(bound(&s, &b_ids), 3, "team-b got its quota back");
    assert_eq!(gpu_used(&s, "team-a"), 5);
    // The evicted borrowers wait; team-a may not take back what team-b uses.
    let waiting = a
        .iter()
        .filter(|&&p| s.pod(p).phase == PodPhase::Pending)
        .count();
    assert_eq!(waiting, 3);
}

/// Team-a borrows all of team-b's idle quota on one 8-GPU node; then team-b wants 3 GPUs
/// of its nominal 4 back. Returns how many team-a pods were preempted, and how many of
/// team-b's run, after a few cycles.
fn reclaim_from_a_borrower(borrower_keeps_borrowed_quota: bool) -> (usize, usize) {
    let mut s = scheduler(1, 8);
    let mut a = cq("team-a", Some("org"), 4, None);
    a.keeps_borrowed_quota = borrower_keeps_borrowed_quota;
    let mut b = cq("team-b", Some("org"), 4, None);
    b.preemption.reclaim_within_cohort = ReclaimPolicy::Any;
    b.preemption.borrow_within_cohort = Some(BorrowWithinCohort {
        max_priority_threshold: None,
    });
    with_queues(&mut s, vec![a, b]);
    let a_ids: Vec<PodId> = (0..8)
        .map(|i| s.submit(pod("team-a", &format!("a{i}"), "main", 1, 0), 0))
        .collect();
    s.schedule(0);
    assert_eq!(bound(&s, &a_ids), 8);
    // Team-b's pods are of higher priority too: neither reclaim nor borrowing over
    // lower priority may take a non-reclaimable queue's work.
    let b_ids: Vec<PodId> = (0..3)
        .map(|i| s.submit(pod("team-b", &format!("b{i}"), "main", 1, 100), 1_000))
        .collect();
    let mut victims = Vec::new();
    for t in 0..6 {
        let d = s.schedule(1_000 + t);
        victims.extend(evict_all(&mut s, &d));
    }
    (victims.len(), bound(&s, &b_ids))
}

#[test]
fn a_queue_that_keeps_what_it_borrows_is_not_reclaimed_from() {
    assert_eq!(reclaim_from_a_borrower(false), (3, 3));
    assert_eq!(reclaim_from_a_borrower(true), (0, 0));
}

#[test]
fn a_queue_that_keeps_what_it_borrows_lends_it_back_when_its_work_ends() {
    let mut s = scheduler(1, 8);
    let mut a = cq("team-a", Some("org"), 4, None);
    a.keeps_borrowed_quota = true;
    let mut b = cq("team-b", Some("org"), 4, None);
    b.preemption.reclaim_within_cohort = ReclaimPolicy::Any;
    with_queues(&mut s, vec![a, b]);
    let a_ids: Vec<PodId> = (0..8)
        .map(|i| s.submit(pod("team-a", &format!("a{i}"), "main", 1, 0), 0))
        .collect();
    s.schedule(0);
    let b0 = s.submit(pod("team-b", "b0", "main", 1, 0), 1_000);
    assert!(s.schedule(1_000).preemptions.is_empty());
    assert_eq!(bound(&s, &[b0]), 0);
    // A borrowed workload of team-a ends: team-b takes its room.
    s.finish(a_ids[7]).unwrap();
    s.schedule(2_000);
    assert_eq!(bound(&s, &[b0]), 1);
    assert_eq!(gpu_used(&s, "team-a"), 7);
}
