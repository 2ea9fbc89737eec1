//! Kestrel's dashboard: the JSON its pages read and the pages themselves, over any
//! [`ExplainState`] (a moment of a simulated run, or the live leader's index). Only HTTP is
//! left to the server (`kestrel_live::dashboard`), so the simulator and the live scheduler
//! answer every `/api/...` path with the same code.
//!
//! - `map`: the GPU map (nodes as rows of GPU cells by rack and NVLink domain);
//! - `queues`: quotas, borrowing, lending, fair-share standing, the cohort tree;
//! - [`answer`]: the API, path by path; the pod, gang, queue and node pages are the views
//!   of `kestrel explain` and the pending page is `kestrel queue`'s list, the same JSON;
//! - `assets`: the HTML, JavaScript and CSS, compiled in (no CDN, no bundler).
//!
//! A simulated run's time slider is `kestrel_sim::dashboard::timeline`; the live leader's
//! copies are `kestrel_live::live_dashboard`'s.
//!
//! It shows what the engine knows: pods, nodes, queues and their decisions; no Secrets, no
//! pod specs beyond their requests.

pub mod assets;
mod map;
mod queues;

pub use map::{gpu_map, Cell, CellCounts, GpuMap, MapGroup, MapNode, MapPod};
pub use queues::{queues_page, CohortNode, QueueRow, QueuesPage, QuotaRow};

use crate::estimates::Estimates;
use crate::events::RunEvent;
use crate::explain_view::{self as view, clock, ExplainState};
use crate::predictions::Predictions;
use kestrel_core::{Millis, PodId, PodPhase};
use serde::Serialize;
use std::collections::BTreeMap;

/// GPUs in use per ClusterQueue at one moment, for the Queues page's usage over time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsagePoint {
    pub at_s: f64,
    pub used_gpus: BTreeMap<String, f64>,
}

impl UsagePoint {
    pub fn of(state: &dyn ExplainState) -> Self {
        let scheduler = state.scheduler();
        let used_gpus = scheduler
            .cluster_queues()
            .map(|(cq, spec)| {
                let gpus = scheduler
                    .queue_usage(cq)
                    .iter()
                    .filter(|u| u.resource == "nvidia.com/gpu")
                    .map(|u| u.used as f64 / kestrel_core::quota_scale(&u.resource) as f64)
                    .sum();
                (spec.name.clone(), gpus)
            })
            .collect();
        UsagePoint {
            at_s: state.now() as f64 / 1000.0,
            used_gpus,
        }
    }
}

/// What a source knows beside the engine's state.
pub struct Context<'a> {
    /// Runtime estimates, for "what would help" and nodes' pods' ends.
    pub estimates: &'a Estimates,
    /// Predicted starts of pending pods; `None`: not available (out of time, or none).
    pub predict: &'a dyn Fn(&[PodId]) -> Option<Predictions>,
    /// What happened, oldest first (those after the state's moment are left out).
    pub events: &'a [RunEvent],
    /// GPUs in use per queue over time, oldest first.
    pub history: &'a [UsagePoint],
    /// `simulation` or `leader`.
    pub source: &'static str,
}

/// An answer that is not one: the status and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

impl ApiError {
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError {
            status: 404,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            status: 400,
            message: message.into(),
        }
    }

    /// The body: `{"error": "..."}`.
    pub fn json(&self) -> String {
        serde_json::json!({ "error": self.message }).to_string()
    }
}

/// The top of every page: the moment, the cell counts and the pod counts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub source: &'static str,
    pub at_s: f64,
    pub at: String,
    pub nodes: usize,
    pub cells: CellCounts,
    pub pods_pending: usize,
    pub pods_running: usize,
    pub cluster_queues: usize,
}

pub fn summary(state: &dyn ExplainState, source: &'static str) -> Summary {
    let scheduler = state.scheduler();
    let running = scheduler
        .pods()
        .filter(|(_, r)| matches!(r.phase, PodPhase::Bound { .. }))
        .count();
    Summary {
        source,
        at_s: state.now() as f64 / 1000.0,
        at: clock(state.now()),
        nodes: scheduler.cluster().len(),
        cells: gpu_map(state).counts,
        pods_pending: scheduler.pending_count(),
        pods_running: running,
        cluster_queues: scheduler.cluster_queues().count(),
    }
}

/// The event list of the Events page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventsPage<'a> {
    pub at_s: f64,
    pub at: String,
    /// Events kept (the oldest go past the log's capacity), newest first.
    pub events: Vec<EventRow<'a>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventRow<'a> {
    pub at_s: f64,
    pub at: String,
    #[serde(flatten)]
    pub event: &'a RunEvent,
}

/// Most events one answer lists (the newest).
const EVENTS_SHOWN: usize = 2_000;

/// Percent-decodes a path segment (`%2F` and friends); bad escapes are kept as written.
fn decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A query parameter's decoded value.
pub fn query_param(query: Option<&str>, key: &str) -> Option<String> {
    query?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| decode(&v.replace('+', " ")))
        .filter(|v| !v.is_empty())
}

fn to_json<T: Serialize>(value: &T) -> Result<String, ApiError> {
    serde_json::to_string(value).map_err(|e| ApiError {
        status: 500,
        message: format!("writing the answer as JSON: {e}"),
    })
}

fn lookup_error(kind: &str, name: &str, e: view::LookupError) -> ApiError {
    match e {
        view::LookupError::Ambiguous { .. } => ApiError::bad_request(e.to_string()),
        view::LookupError::NotFound { .. } => {
            ApiError::not_found(format!("not found: {kind} {name:?}: {e}"))
        }
    }
}

/// Answers one `/api/...` path (`query`: the part after `?`) from `state`. Paths:
/// `summary`, `map`, `queues`, `pending` (`?queue=&namespace=`), `events`,
/// `pod/NAMESPACE/NAME`, `gang/NAMESPACE/NAME`, `queue/NAME`, `node/NAME`.
pub fn answer(
    state: &dyn ExplainState,
    ctx: &Context<'_>,
    path: &str,
    query: Option<&str>,
) -> Result<String, ApiError> {
    let rest = path.strip_prefix("/api/").unwrap_or(path);
    let segments: Vec<String> = rest
        .split('/')
        .filter(|s| !s.is_empty())
        .map(decode)
        .collect();
    let parts: Vec<&str> = segments.iter().map(String::as_str).collect();
    match parts.as_slice() {
        ["summary"] => to_json(&summary(state, ctx.source)),
        ["map"] => to_json(&gpu_map(state)),
        ["queues"] => {
            let page = queues_page(state);
            let now = state.now() as f64 / 1000.0;
            let history: Vec<&UsagePoint> = ctx.history.iter().filter(|p| p.at_s <= now).collect();
            to_json(&serde_json::json!({ "page": page, "history": history }))
        }
        ["pending"] => pending(state, ctx, query),
        ["events"] => to_json(&events_page(state.now(), ctx.events)),
        ["pod", name @ ..] if !name.is_empty() => {
            let name = name.join("/");
            let id = view::find_pod(state, &name).map_err(|e| lookup_error("pod", &name, e))?;
            let mut v = view::pod_view(state, id, ctx.estimates);
            if v.phase == "Pending" {
                if let Some(p) = (ctx.predict)(&[id]) {
                    v.apply_predictions(&p);
                }
            }
            to_json(&v)
        }
        ["gang", name @ ..] if !name.is_empty() => {
            let name = name.join("/");
            let (ns, gang) =
                view::find_gang(state, &name).map_err(|e| lookup_error("gang", &name, e))?;
            let mut v = view::gang_view(state, &ns, &gang);
            if !v.pending_ids.is_empty() {
                if let Some(p) = (ctx.predict)(&v.pending_ids) {
                    v.apply_predictions(&p);
                }
            }
            to_json(&v)
        }
        ["queue", name] => {
            let cq = view::find_queue(state, name).map_err(|e| lookup_error("queue", name, e))?;
            let mut v = view::queue_view(state, cq);
            let targets: Vec<PodId> = v.pending_list.iter().map(|e| e.id).collect();
            if !targets.is_empty() {
                if let Some(p) = (ctx.predict)(&targets) {
                    view::apply_list_predictions(&mut v.pending_list, &p);
                }
            }
            to_json(&v)
        }
        ["node", name] => {
            let id = view::find_node(state, name).map_err(|e| lookup_error("node", name, e))?;
            to_json(&view::node_view(state, id, ctx.estimates))
        }
        _ => Err(ApiError::not_found(format!(
            "not found: no API path {path:?}; the paths are /api/summary, /api/map, \
             /api/queues, /api/pending, /api/events, /api/pod/NAMESPACE/NAME, \
             /api/gang/NAMESPACE/NAME, /api/queue/NAME, /api/node/NAME"
        ))),
    }
}

/// `kestrel queue`'s list, filtered as `?queue=` and `?namespace=` say.
fn pending(
    state: &dyn ExplainState,
    ctx: &Context<'_>,
    query: Option<&str>,
) -> Result<String, ApiError> {
    let cq = match query_param(query, "queue") {
        Some(name) => {
            Some(view::find_queue(state, &name).map_err(|e| lookup_error("queue", &name, e))?)
        }
        None => None,
    };
    let namespace = query_param(query, "namespace");
    let mut list = view::queue_list(state, cq, namespace.as_deref());
    let targets: Vec<PodId> = list.pending.iter().map(|e| e.id).collect();
    if !targets.is_empty() {
        if let Some(p) = (ctx.predict)(&targets) {
            view::apply_list_predictions(&mut list.pending, &p);
        }
    }
    to_json(&list)
}

fn events_page(now: Millis, events: &[RunEvent]) -> EventsPage<'_> {
    EventsPage {
        at_s: now as f64 / 1000.0,
        at: clock(now),
        events: events
            .iter()
            .rev()
            .filter(|e| e.at <= now)
            .take(EVENTS_SHOWN)
            .map(|event| EventRow {
                at_s: event.at as f64 / 1000.0,
                at: clock(event.at),
                event,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_urls_are_percent_decoded() {
        assert_eq!(decode("a%2Fb%20c%zz"), "a/b c%zz");
        assert_eq!(
            query_param(Some("x=1&at=3.5"), "at").as_deref(),
            Some("3.5")
        );
        assert_eq!(query_param(Some("at="), "at"), None);
    }
}
