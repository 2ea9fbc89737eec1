//! Predicted starts of pending pods, as the views show them. The forward runs that make
//! them are the simulator's (`kestrel_sim::predict`): a simulated run's moment, or a live
//! cluster's engine copy resumed in the simulator.

use kestrel_core::{Millis, PodId};
use serde::Serialize;
use std::collections::HashMap;

/// One pod's predicted start over the forward runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StartPrediction {
    /// Per forward run, in the order of [`Reading::ALL`](crate::estimates::Reading::ALL) (likely, shortest, longest): when
    /// the pod bound, `None` when it did not in that run (nothing known at the moment makes
    /// room for it).
    pub runs: Vec<Option<Millis>>,
}

impl StartPrediction {
    /// The likely run's start; `None` when that run never starts it.
    pub fn point(&self) -> Option<Millis> {
        self.runs.first().copied().flatten()
    }

    /// The earliest start over runs.
    pub fn from(&self) -> Option<Millis> {
        self.runs.iter().flatten().min().copied()
    }

    /// The latest start over runs; `None` when some run never starts it.
    pub fn to(&self) -> Option<Millis> {
        if self.runs.iter().any(Option::is_none) {
            return None;
        }
        self.runs.iter().flatten().max().copied()
    }
}

/// Predicted starts of pending pods at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Predictions {
    pub at: Millis,
    /// The estimates' relative error bound.
    pub estimate_error: f64,
    pub starts: HashMap<PodId, StartPrediction>,
}

/// When forward runs must stop (wall clock), and the budget that set it (for the message).
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    pub at: std::time::Instant,
    pub budget: std::time::Duration,
}

impl Deadline {
    /// `budget` from now.
    pub fn after(budget: std::time::Duration) -> Self {
        Deadline {
            at: std::time::Instant::now() + budget,
            budget,
        }
    }
}
