//! Queueing hints: which parked workloads a change may help.
//!
//! A workload that could not be placed is parked until capacity may have grown. A pod
//! ending on a full cluster used to wake every parked workload, so each cycle cost grew
//! with the pending queue (3 s at 50,000 pending) rather than with what changed. Now a
//! pod's end or a binding is logged with its node and quota scope, and a parked workload
//! wakes only if something logged since it was parked may help it: room on a node it
//! might use (counting the lower-priority pods there, which it might preempt), or quota
//! freed or new victims in its cohort. Anything else that may grow capacity (nodes,
//! queues, gangs, holds, reservations, wake-ups) wakes every parked workload, as before.
//! A single pod that only room freed by ended pods may help waits for its turn in the
//! cycle's queue order and is tried only if that room may still hold it then: one end on
//! a full cluster used to wake every pending pod of a matching shape (0.9 s at 50,000
//! pending), though the first of them takes the room.
//! A workload is woken whenever it would have been, unless nothing logged could change
//! its outcome: decisions stay the same (a property test compares them), and only a
//! parked pod's explanation may lag behind until it is tried again.

use crate::queue::CqId;
use crate::types::NodeId;
use std::collections::VecDeque;

/// What wakes a parked workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) enum WakeOn {
    /// Any change that may grow capacity.
    #[default]
    Any,
    /// Room on a node it might use, or quota freed or new victims in its cohort: it found
    /// no room and no victims.
    Room,
    /// Room on a node it might use: it found no room and no victims, admitted within
    /// nominal quota by queues of one flavor (or by none), so freed quota changes nothing.
    RoomOnly,
    /// Quota freed or new victims in its cohort: its queue refused it and no victims
    /// were found.
    Quota,
}

/// Whose quota a change touches: a cohort tree, or a ClusterQueue outside any cohort.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum QuotaScope {
    Cohort(String),
    Queue(CqId),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeKind {
    /// A pod ended and freed its room.
    Released,
    /// A pod of this priority was bound: a victim for workloads above it.
    Bound { priority: i32 },
}

#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub(crate) seq: u64,
    pub(crate) node: NodeId,
    pub(crate) scope: Option<QuotaScope>,
    pub(crate) kind: ChangeKind,
}

/// Changes kept before the log counts as one change that may help anyone.
const MAX_LOGGED: usize = 100_000;

/// The change log and what parked workloads are woken by.
#[derive(Debug, Clone, Default)]
pub(crate) struct Hints {
    /// Off: every change wakes every parked workload.
    pub(crate) off: bool,
    pub(crate) changes: VecDeque<Change>,
    /// Sequence number of the last change (logged or not).
    pub(crate) seq: u64,
    /// Sequence number of the last change that may help anyone.
    pub(crate) global: u64,
    /// Sequence number when the cycle in progress began: workloads parked in it are taken
    /// to have seen only what came before (searches cached within a cycle may predate
    /// its bindings).
    pub(crate) cycle_start: u64,
}

impl Hints {
    /// A change that may help any parked workload.
    pub(crate) fn anything(&mut self) {
        self.seq += 1;
        self.global = self.seq;
        self.changes.clear();
    }

    /// Logs a pod's end or binding on a node (the whole log counts as one change that may
    /// help anyone once it is full).
    pub(crate) fn log(&mut self, node: NodeId, scope: Option<QuotaScope>, kind: ChangeKind) {
        if self.changes.len() >= MAX_LOGGED {
            return self.anything();
        }
        self.seq += 1;
        self.changes.push_back(Change {
            seq: self.seq,
            node,
            scope,
            kind,
        });
    }

    /// A cycle begins.
    pub(crate) fn begin_cycle(&mut self) {
        self.cycle_start = self.seq;
    }
}
