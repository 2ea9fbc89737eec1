//! Pods on their way out, decided once for the simulator and the live scheduler:
//!
//! - checkpoint-then-evict for a preemption victim ([`CheckpointRequest`]);
//! - what a drain moves: the drained nodes' pods and the rest of their gangs
//!   ([`drain_workloads`]);
//! - how long a checkpoint-aware drain waits for each of those workloads ([`drain_wait`]).
//!
//! The drivers only carry these out: the simulator on its virtual clock (and with its
//! model of how long a checkpoint takes to write), the live scheduler through the API
//! (annotations, evictions). Times are in whichever clock the driver passes, as long as
//! it passes one clock throughout.

use crate::model::PreemptionTerms;
use crate::types::Millis;
use std::collections::BTreeMap;

/// A victim that checkpoints on request (`kestrel.dev/checkpoint-grace`) is asked at
/// `asked`, and evicted once it reports a checkpoint at or after then, or at `by` (its
/// grace over) at the latest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointRequest {
    pub asked: Millis,
    pub by: Millis,
}

impl CheckpointRequest {
    /// Checkpoint-then-evict for a victim chosen at `at`: a request when it offers a
    /// checkpoint on request, `None` when it is evicted at once.
    pub fn for_victim(checkpoint_grace: Option<Millis>, at: Millis) -> Option<Self> {
        checkpoint_grace.map(|grace| CheckpointRequest {
            asked: at,
            by: at.saturating_add(grace),
        })
    }

    /// Whether a checkpoint reported at `reported` answers the request: one written
    /// before it saved less than the request asks for.
    pub fn answered_by(&self, reported: Millis) -> bool {
        reported >= self.asked
    }

    /// When the victim leaves if it takes `write` to checkpoint: once written, or when
    /// its grace is over if that comes first.
    pub fn leaves_after_writing(&self, write: Millis) -> Millis {
        self.asked.saturating_add(write).min(self.by)
    }
}

/// One running pod a drain may move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainCandidate<P, G> {
    pub pod: P,
    /// Its gang (a key the driver chooses), if it is a member of one.
    pub gang: Option<G>,
    /// It runs on one of the drained nodes.
    pub on_drained_node: bool,
}

/// What a drain moves, per workload: every pod on the drained nodes, alone, or with every
/// other running pod of its gang wherever that runs, since a distributed job loses every
/// rank's work when one rank goes. Workloads come in the order of their first pod on a
/// drained node, a gang's pods in the order given. The driver passes running pods only,
/// less those that stay (a DaemonSet's, a static pod's mirror).
pub fn drain_workloads<P: Clone, G: Ord + Clone>(running: &[DrainCandidate<P, G>]) -> Vec<Vec<P>> {
    let mut gangs: BTreeMap<&G, Vec<P>> = BTreeMap::new();
    for c in running {
        if let Some(g) = &c.gang {
            gangs.entry(g).or_default().push(c.pod.clone());
        }
    }
    let mut out = Vec::new();
    for c in running.iter().filter(|c| c.on_drained_node) {
        match &c.gang {
            // A gang's pods leave together, listed once at its first pod on the nodes.
            Some(g) => {
                if let Some(members) = gangs.remove(g) {
                    out.push(members);
                }
            }
            None => out.push(vec![c.pod.clone()]),
        }
    }
    out
}

/// One member of a workload a drain moves: its checkpoint terms and when its current run
/// started (`None` when unknown: its periodic checkpoints cannot be placed).
#[derive(Debug, Clone, Copy)]
pub struct DrainMember<'a> {
    pub terms: &'a PreemptionTerms,
    pub run_start: Option<Millis>,
}

/// How a checkpoint-aware drain waits for one workload before evicting it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainWait {
    /// Evicted at once: it offers no checkpoint.
    Now,
    /// Evicted at once: it checkpoints periodically, but its next common checkpoint
    /// (`next`) lies past the deadline, and waiting would only lose more.
    PastDeadline { next: Millis },
    /// Every member checkpoints on request: asked at the drain's start, evicted once each
    /// reported a checkpoint at or after the request, or at `until` at the latest (the
    /// shortest grace, capped by the deadline).
    OnRequest { until: Millis },
    /// Every member checkpoints periodically, the last of them next at `next`, before the
    /// deadline: evicted once each reported a checkpoint after the drain's start, or at
    /// `until` (the deadline).
    Periodic { next: Millis, until: Millis },
}

impl DrainWait {
    /// Until when the workload is waited for, if it is.
    pub fn until(&self) -> Option<Millis> {
        match *self {
            DrainWait::OnRequest { until } | DrainWait::Periodic { until, .. } => Some(until),
            DrainWait::Now | DrainWait::PastDeadline { .. } => None,
        }
    }
}

/// The wait for a workload (a pod, or a gang's running pods) whose drain starts at
/// `asked` and waits `deadline` at most. `ask`: whether the drain asks for checkpoints
/// on request. A gang waits only for a checkpoint every member writes: its job resumes
/// from the last one they all have.
pub fn drain_wait(
    members: &[DrainMember<'_>],
    asked: Millis,
    deadline: Millis,
    ask: bool,
) -> DrainWait {
    if members.is_empty() {
        return DrainWait::Now;
    }
    let latest = asked.saturating_add(deadline);
    let graces: Option<Vec<Millis>> = members.iter().map(|m| m.terms.checkpoint_grace).collect();
    if let Some(shortest) = graces.filter(|_| ask).and_then(|g| g.into_iter().min()) {
        return DrainWait::OnRequest {
            until: asked.saturating_add(shortest).min(latest),
        };
    }
    // Signalled now, a pod stops within its termination grace: its next checkpoint from
    // then is the one it can still write.
    let stopped = asked.saturating_add(
        members
            .iter()
            .map(|m| m.terms.termination_grace)
            .max()
            .unwrap_or(0),
    );
    let next = members
        .iter()
        .map(|m| {
            let interval = m.terms.checkpoint_interval.filter(|&i| i > 0)?;
            let start = m.run_start?;
            let ran = stopped.saturating_sub(start);
            Some(start + ran.div_ceil(interval) * interval)
        })
        .collect::<Option<Vec<_>>>()
        .and_then(|n| n.into_iter().max());
    match next {
        Some(next) if next <= latest => DrainWait::Periodic {
            next,
            until: latest,
        },
        Some(next) => DrainWait::PastDeadline { next },
        None => DrainWait::Now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(
        grace: Option<Millis>,
        interval: Option<Millis>,
        termination: Millis,
    ) -> PreemptionTerms {
        PreemptionTerms {
            checkpoint_grace: grace,
            checkpoint_interval: interval,
            termination_grace: termination,
            ..Default::default()
        }
    }

    #[test]
    fn a_victim_is_asked_only_when_it_offers_a_checkpoint() {
        assert_eq!(CheckpointRequest::for_victim(None, 100), None);
        let r = CheckpointRequest::for_victim(Some(60_000), 100).unwrap();
        assert_eq!(
            r,
            CheckpointRequest {
                asked: 100,
                by: 60_100
            }
        );
        assert!(
            !r.answered_by(99),
            "a checkpoint before the request saves too little"
        );
        assert!(r.answered_by(100));
        assert_eq!(r.leaves_after_writing(20_000), 20_100);
        assert_eq!(
            r.leaves_after_writing(90_000),
            60_100,
            "its grace ends first"
        );
    }

    fn candidate(
        pod: u32,
        gang: Option<&'static str>,
        on: bool,
    ) -> DrainCandidate<u32, &'static str> {
        DrainCandidate {
            pod,
            gang,
            on_drained_node: on,
        }
    }

    #[test]
    fn a_drain_moves_the_nodes_pods_and_the_rest_of_their_gangs_once() {
        let running = [
            candidate(1, Some("a"), false),
            candidate(2, None, true),
            candidate(3, Some("a"), true),
            candidate(4, Some("a"), true),
            candidate(5, Some("b"), false),
            candidate(6, None, false),
        ];
        // Gang b has no pod on the nodes and stays; pod 6 is elsewhere and stays.
        assert_eq!(drain_workloads(&running), vec![vec![2], vec![1, 3, 4]]);
        assert!(drain_workloads::<u32, &str>(&[]).is_empty());
    }

    #[test]
    fn on_request_waits_for_the_shortest_grace_within_the_deadline() {
        let (a, b) = (terms(Some(60_000), None, 0), terms(Some(30_000), None, 0));
        let members = [
            DrainMember {
                terms: &a,
                run_start: Some(0),
            },
            DrainMember {
                terms: &b,
                run_start: Some(0),
            },
        ];
        assert_eq!(
            drain_wait(&members, 1_000, 600_000, true),
            DrainWait::OnRequest { until: 31_000 }
        );
        assert_eq!(
            drain_wait(&members, 1_000, 10_000, true),
            DrainWait::OnRequest { until: 11_000 }
        );
        // Not asking: they write no periodic checkpoints, so they go now.
        assert_eq!(drain_wait(&members, 1_000, 600_000, false), DrainWait::Now);
    }

    #[test]
    fn a_gang_waits_only_for_a_checkpoint_every_member_writes() {
        let (asks, periodic) = (terms(Some(60_000), None, 0), terms(None, Some(10_000), 0));
        let mixed = [
            DrainMember {
                terms: &asks,
                run_start: Some(0),
            },
            DrainMember {
                terms: &periodic,
                run_start: Some(0),
            },
        ];
        assert_eq!(drain_wait(&mixed, 5_000, 600_000, true), DrainWait::Now);
    }

    #[test]
    fn periodic_checkpoints_are_waited_for_until_the_deadline_or_not_at_all() {
        // Started at 0 and 3 s, every 10 s; asked at 25 s with 2 s to stop: their next
        // checkpoints after 27 s fall at 30 s and 33 s.
        let t = terms(None, Some(10_000), 2_000);
        let members = [
            DrainMember {
                terms: &t,
                run_start: Some(0),
            },
            DrainMember {
                terms: &t,
                run_start: Some(3_000),
            },
        ];
        assert_eq!(
            drain_wait(&members, 25_000, 60_000, true),
            DrainWait::Periodic {
                next: 33_000,
                until: 85_000
            }
        );
        assert_eq!(
            drain_wait(&members, 25_000, 5_000, true),
            DrainWait::PastDeadline { next: 33_000 }
        );
        assert_eq!(drain_wait(&members, 25_000, 5_000, true).until(), None);
        let unknown = [DrainMember {
            terms: &t,
            run_start: None,
        }];
        assert_eq!(drain_wait(&unknown, 25_000, 60_000, true), DrainWait::Now);
        assert_eq!(drain_wait(&[], 25_000, 60_000, true), DrainWait::Now);
    }
}
