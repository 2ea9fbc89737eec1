//! Preemption victims on their way out: checkpoint requests, evictions when they are
//! due, and the preemptors' nominated nodes. Checkpoint-then-evict is the engine's
//! decision ([`CheckpointRequest`]), the one the simulator carries out on its clock.

use super::cycle::CycleOutput;
use super::LiveIndex;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kestrel_core::leaving::CheckpointRequest;
use kestrel_core::{Millis, PodId};
use kestrel_objects::live::LAST_CHECKPOINT_ANNOTATION;
use std::collections::BTreeMap;

/// Preemption victims still on their nodes, by `namespace/name`.
#[derive(Debug, Default)]
pub(super) struct Evictions {
    leaving: BTreeMap<String, Leaving>,
}

impl Evictions {
    /// When the first eviction not yet handed out is due.
    fn next_due(&self) -> Option<Millis> {
        self.leaving
            .values()
            .filter(|l| !l.sent)
            .map(|l| l.due)
            .min()
    }

    /// A pod is gone: nothing of it is left to evict.
    pub(super) fn cancel(&mut self, key: &str) {
        self.leaving.remove(key);
    }

    /// A failed eviction of `key` (the same pod, by uid) is tried again at `at`.
    fn retry(&mut self, key: &str, uid: &str, at: Millis) {
        if let Some(l) = self.leaving.get_mut(key).filter(|l| l.write.uid == uid) {
            l.sent = false;
            l.due = at;
        }
    }

    /// Evictions whose time has come, handed out once.
    pub(super) fn due(&mut self, now: Millis) -> Vec<EvictWrite> {
        self.leaving
            .values_mut()
            .filter(|l| !l.sent && l.due <= now)
            .map(|l| {
                l.sent = true;
                l.write.clone()
            })
            .collect()
    }

    /// A victim reported a checkpoint at `wall` (Unix ms): if that answers its request,
    /// it may go now.
    fn checkpointed(&mut self, key: &str, wall: i64, now: Millis) {
        if let Some(l) = self.leaving.get_mut(key) {
            if l.request
                .is_some_and(|r| r.answered_by(wall.max(0) as Millis))
            {
                l.due = l.due.min(now);
            }
        }
    }
}

/// A preemption victim to take off its node: marked `DisruptionTarget` and deleted (its
/// own termination grace period applies), with a `Preempted` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictWrite {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Who it makes room for and why.
    pub message: String,
}

/// A preempting pod's `status.nominatedNodeName`: where the room its victims leave is
/// held for it, so that other schedulers and autoscalers see the claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NominationWrite {
    pub namespace: String,
    pub name: String,
    pub node: String,
}

/// A victim that declared it checkpoints on request (`kestrel.dev/checkpoint-grace`): it
/// is annotated `kestrel.dev/checkpoint-request` and evicted once it reports a checkpoint
/// at or after the request (`kestrel.dev/last-checkpoint`) or its grace is over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointWrite {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// RFC 3339 time of the request (the annotation's value).
    pub requested_at: String,
    pub grace_seconds: u64,
    pub message: String,
}

/// A victim on its way out.
#[derive(Debug, Clone)]
pub(super) struct Leaving {
    /// When it is evicted at the latest (driver clock).
    due: Millis,
    /// Its checkpoint request, on the wall clock (Unix ms), if it was asked for one.
    request: Option<CheckpointRequest>,
    /// The eviction has been handed to the driver.
    sent: bool,
    write: EvictWrite,
}

/// How long a failed eviction waits before it is tried again.
const EVICTION_RETRY: Millis = 5_000;

impl LiveIndex {
    /// The earliest time (driver clock) something is due without any watch event: a
    /// victim's eviction after its checkpoint grace, or the engine's own wake-up (a
    /// minimum runtime or preemption delay ends).
    pub fn next_timer(&self) -> Option<Millis> {
        let eviction = self.evictions.next_due();
        match (eviction, self.scheduler.next_wakeup()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// What the API said to an eviction: on failure it is tried again shortly, unless the
    /// pod is gone.
    pub fn eviction_result(&mut self, write: &EvictWrite, result: Result<(), String>) {
        let key = format!("{}/{}", write.namespace, write.name);
        if result.is_ok() {
            return;
        }
        self.evictions
            .retry(&key, &write.uid, self.now + EVICTION_RETRY);
    }

    /// Victims chosen this cycle: asked to checkpoint or evicted at once.
    pub(super) fn start_evictions(
        &mut self,
        preemptions: &[kestrel_core::Preemption],
        now: Millis,
        out: &mut CycleOutput,
    ) {
        for p in preemptions {
            let preemptor = p.preemptor.and_then(|id| self.keys.get(&id));
            let nominated = p.preemptor.and_then(|id| self.scheduler.nominated_node(id));
            if let (Some(key), Some(node)) = (preemptor, nominated) {
                let (namespace, name) = key.split_once('/').expect("namespace/name");
                out.nominations.push(NominationWrite {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    node: self.scheduler.cluster().node(node).spec.name.clone(),
                });
            }
            let message = match preemptor {
                Some(k) => format!("{} (for {k})", p.reason),
                None => p.reason.clone(),
            };
            for v in &p.victims {
                let Some(key) = self.keys.get(&v.pod).cloned() else {
                    continue;
                };
                if self.evictions.leaving.contains_key(&key) {
                    continue;
                }
                let Some(t) = self.pods.get(&key) else {
                    continue;
                };
                let (namespace, name) = key.split_once('/').expect("namespace/name");
                let write = EvictWrite {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    uid: t.uid.clone(),
                    message: message.clone(),
                };
                // Checkpoint-then-evict, decided on the wall clock: the request's time is
                // what the victim compares its checkpoints with.
                let wall_now = (self.wall_origin + now as i64).max(0) as Millis;
                let request = CheckpointRequest::for_victim(v.checkpoint_grace, wall_now);
                let due = match request {
                    Some(r) => {
                        out.checkpoint_requests.push(CheckpointWrite {
                            namespace: write.namespace.clone(),
                            name: write.name.clone(),
                            uid: write.uid.clone(),
                            requested_at: rfc3339(r.asked as i64),
                            grace_seconds: (r.by - r.asked).div_ceil(1000),
                            message: message.clone(),
                        });
                        now + (r.by - r.asked)
                    }
                    None => now,
                };
                self.evictions.leaving.insert(
                    key,
                    Leaving {
                        due,
                        request,
                        sent: false,
                        write,
                    },
                );
            }
        }
    }

    /// A bound pod's `kestrel.dev/last-checkpoint`: the engine prices its unsaved work
    /// from it, and a victim that checkpointed after the request may go at once.
    pub(super) fn note_checkpoint(&mut self, key: &str, id: PodId, pod: &Pod) {
        let Some(value) = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(LAST_CHECKPOINT_ANNOTATION))
        else {
            return;
        };
        let Ok(at) = value.trim().parse::<Timestamp>() else {
            tracing::warn!(pod = %key, value = %value, "{LAST_CHECKPOINT_ANNOTATION} is not an RFC 3339 time; ignored");
            return;
        };
        let wall = at.as_millisecond();
        let driver_ms = (wall - self.wall_origin).clamp(0, self.now as i64) as Millis;
        let _ = self.scheduler.record_checkpoint(id, driver_ms);
        self.evictions.checkpointed(key, wall, self.now);
    }
}

/// A wall time (Unix ms) in RFC 3339.
pub(super) fn rfc3339(unix_ms: i64) -> String {
    Timestamp::from_millisecond(unix_ms)
        .map(|t| t.to_string())
        .unwrap_or_default()
}
