//! What happened, for the dashboard's Events page: binds, preemptions with the GPU-hours
//! their victims lost, checkpoint requests, evictions and cluster changes (cordons,
//! drains, nodes added and removed). A simulated run logs them when asked
//! (`kestrel_sim::Simulation::record_events`), the live leader as it writes them.

use kestrel_core::Millis;
use serde::Serialize;

/// One thing that happened, named as users name it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunEvent {
    /// Milliseconds since the start (driver time on a live cluster).
    pub at: Millis,
    /// `bind`, `preemption`, `checkpoint`, `eviction`, `drain`, `cordon`, `uncordon`,
    /// `node-added`, `node-removed`.
    pub kind: &'static str,
    /// `namespace/name` of the pod concerned (the preemptor for a preemption).
    pub pod: Option<String>,
    pub node: Option<String>,
    /// GPU-hours of work lost: an eviction's, or a preemption's victims' together as
    /// reckoned when they were chosen (work since their last checkpoint).
    pub gpu_hours: Option<f64>,
    /// The rest in words: a preemption's victims, a bind's GPUs.
    pub detail: String,
}

/// A bounded log: past `capacity` the oldest entries go, so a long run or a long-lived
/// leader keeps what a page can show.
#[derive(Debug, Clone, Default)]
pub struct EventLog {
    entries: std::collections::VecDeque<RunEvent>,
    capacity: usize,
    /// Entries dropped from the front so far (what a client's "since" counts against).
    dropped: u64,
}

impl EventLog {
    pub fn with_capacity(capacity: usize) -> Self {
        EventLog {
            entries: std::collections::VecDeque::new(),
            capacity,
            dropped: 0,
        }
    }

    pub fn push(&mut self, event: RunEvent) {
        if self.capacity == 0 {
            return;
        }
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
            self.dropped += 1;
        }
        self.entries.push_back(event);
    }

    /// Events up to and including `at`, newest last.
    pub fn until(&self, at: Millis) -> impl Iterator<Item = &RunEvent> {
        self.entries.iter().take_while(move |e| e.at <= at)
    }

    pub fn iter(&self) -> impl Iterator<Item = &RunEvent> {
        self.entries.iter()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries pushed in all, kept or not.
    pub fn total(&self) -> u64 {
        self.dropped + self.entries.len() as u64
    }

    /// Whether it keeps anything (a log of no capacity keeps nothing): when off, callers
    /// need not build the entry.
    pub fn is_on(&self) -> bool {
        self.capacity > 0
    }

    /// Takes what was logged so far (the log goes on, empty; what was taken counts as
    /// dropped in [`EventLog::total`]).
    pub fn take(&mut self) -> Vec<RunEvent> {
        self.dropped += self.entries.len() as u64;
        self.entries.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(at: Millis) -> RunEvent {
        RunEvent {
            at,
            kind: "bind",
            pod: Some(format!("ns/p{at}")),
            node: None,
            gpu_hours: None,
            detail: String::new(),
        }
    }

    #[test]
    fn a_full_log_drops_its_oldest_and_counts_them() {
        let mut log = EventLog::with_capacity(2);
        for at in [1, 2, 3] {
            log.push(event(at));
        }
        assert_eq!(log.iter().map(|e| e.at).collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(log.total(), 3);
        assert_eq!(log.until(2).count(), 1);
        let mut off = EventLog::default();
        off.push(event(1));
        assert!(off.is_empty(), "a log of no capacity keeps nothing");
    }
}
