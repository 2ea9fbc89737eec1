//! A finished simulated run as the dashboard shows it: the engine's state at evenly spaced
//! moments (whole seconds; the time slider's stops), what happened, and queue usage at
//! each stop. `?at=SECONDS` picks the latest stop at or before it; without it, the last.
//!
//! Each stop is a clone of the simulation, so a page at a stop reads exactly what `kestrel
//! explain --at` reads there, and predicted starts are its forward runs from that stop.

use crate::predict::{self, Deadline, Estimates};
use crate::{SimCluster, SimConfig, SimError, Simulation, Workload};
use kestrel_core::{Millis, PodId};
use kestrel_view::dashboard::{answer, query_param, ApiError, Context, UsagePoint};
use kestrel_view::events::RunEvent;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Events a run keeps (the newest) for the Events page.
const EVENTS_KEPT: usize = 200_000;
/// Answers kept per timeline before the cache starts over (predictions are the dear part).
const CACHED_ANSWERS: usize = 512;

pub struct Timeline<'a> {
    stops: Vec<Simulation<'a>>,
    events: Vec<RunEvent>,
    history: Vec<UsagePoint>,
    estimates: Estimates,
    /// Wall-clock time predictions may take per answer; `None`: no limit.
    predict_budget: Option<Duration>,
    cache: Mutex<HashMap<(usize, String), Result<String, ApiError>>>,
}

impl<'a> Timeline<'a> {
    /// Runs the simulation twice: once to learn when it ends, then again, keeping `stops`
    /// (at least 2) states evenly spaced from 0 to that end.
    pub fn record(
        cluster: &'a SimCluster,
        workload: &'a Workload,
        config: SimConfig,
        stops: usize,
        predict_budget: Option<Duration>,
    ) -> Result<Self, SimError> {
        let seed = config.seed;
        let mut probe = Simulation::new(cluster, workload, config.clone())?;
        while probe.step()? {}
        let end = probe.last_event_at().div_ceil(1000) * 1000;
        drop(probe);
        let stops = stops.max(2);
        let mut times: Vec<Millis> = (0..stops)
            .map(|i| (end * i as u64 / (stops as u64 - 1)) / 1000 * 1000)
            .collect();
        times.dedup();
        let mut sim = Simulation::new(cluster, workload, config)?;
        sim.record_events(EVENTS_KEPT);
        let mut kept = Vec::with_capacity(times.len());
        let mut events = Vec::new();
        let mut history = Vec::with_capacity(times.len());
        for t in times {
            sim.run_to(t)?;
            events.extend(sim.take_events());
            history.push(UsagePoint::of(&sim));
            kept.push(sim.clone());
        }
        Ok(Timeline {
            stops: kept,
            events,
            history,
            estimates: crate::estimates::known(workload, seed),
            predict_budget,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The stops' moments, in seconds.
    pub fn times(&self) -> Vec<f64> {
        self.stops.iter().map(|s| s.now() as f64 / 1000.0).collect()
    }

    /// The stop `?at=` asks for.
    fn stop(&self, query: Option<&str>) -> Result<usize, ApiError> {
        let Some(at) = query_param(query, "at") else {
            return Ok(self.stops.len() - 1);
        };
        let seconds: f64 = at
            .parse()
            .ok()
            .filter(|s: &f64| s.is_finite() && *s >= 0.0)
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "at={at:?} is not a moment: give seconds from the start, e.g. at=3600"
                ))
            })?;
        let ms = (seconds * 1000.0).round() as Millis;
        Ok(self.stops.iter().rposition(|s| s.now() <= ms).unwrap_or(0))
    }

    /// Answers `path` at the stop `?at=` picks; `/api/times` lists the stops.
    pub fn answer(&self, path: &str, query: Option<&str>) -> Result<String, ApiError> {
        if path.trim_end_matches('/') == "/api/times" {
            return serde_json::to_string(&serde_json::json!({ "times_s": self.times() })).map_err(
                |e| ApiError {
                    status: 500,
                    message: e.to_string(),
                },
            );
        }
        let stop = self.stop(query)?;
        // The stop is part of the key; other parameters (filters) are too.
        let key = (stop, format!("{path}?{}", strip_at(query)));
        if let Some(hit) = self.cache.lock().map_err(poisoned)?.get(&key) {
            return hit.clone();
        }
        let sim = &self.stops[stop];
        let predict = |targets: &[PodId]| {
            let deadline = self.predict_budget.map(Deadline::after);
            predict::predict(sim.clone(), targets, &self.estimates, deadline).ok()
        };
        let ctx = Context {
            estimates: &self.estimates,
            predict: &predict,
            events: &self.events,
            history: &self.history,
            source: "simulation",
        };
        let result = answer(sim, &ctx, path, query);
        let mut cache = self.cache.lock().map_err(poisoned)?;
        if cache.len() >= CACHED_ANSWERS {
            cache.clear();
        }
        cache.insert(key, result.clone());
        result
    }
}

fn poisoned<T>(_: T) -> ApiError {
    ApiError {
        status: 500,
        message: "the answer cache is unusable after a panic; restart the dashboard".into(),
    }
}

/// The query without its `at=` parameter.
fn strip_at(query: Option<&str>) -> String {
    query
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.starts_with("at="))
        .collect::<Vec<_>>()
        .join("&")
}
