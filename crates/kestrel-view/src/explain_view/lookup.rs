//! Names to ids: pods, gangs, ClusterQueues and nodes, with "did you mean" hints.

use super::clock::clock;
use super::ExplainState;
use kestrel_core::{CqId, Millis, NodeId, PodId, PodPhase};
use std::collections::{BTreeMap, BTreeSet};

/// A name that does not resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    #[error("{kind} {name:?} does not exist at {at}{hint}")]
    NotFound {
        kind: &'static str,
        name: String,
        at: String,
        hint: String,
    },
    #[error(
        "{kind} name {name:?} is ambiguous: it exists in {} namespaces; write one of: {}",
        candidates.len(),
        candidates.join(", ")
    )]
    Ambiguous {
        kind: &'static str,
        name: String,
        candidates: Vec<String>,
    },
}

/// Edit distance (Levenshtein), for "did you mean".
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(cur).min(row[j])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

/// Up to three known names close to `name`, as a "; did you mean ..." hint.
fn did_you_mean<'n>(name: &str, known: impl Iterator<Item = &'n str>) -> String {
    let limit = (name.chars().count() / 3).max(2);
    let len = name.chars().count();
    let mut close: Vec<(usize, &str)> = known
        .filter(|k| k.chars().count().abs_diff(len) <= limit)
        .map(|k| (distance(name, k), k))
        .filter(|(d, _)| *d <= limit)
        .collect();
    close.sort();
    close.dedup();
    close.truncate(3);
    if close.is_empty() {
        return String::new();
    }
    let names: Vec<String> = close.iter().map(|(_, k)| format!("{k:?}")).collect();
    format!("; did you mean {}?", names.join(" or "))
}

/// Resolves `ns/name` or a bare `name` among (namespace, name) keys.
fn resolve_namespaced(
    kind: &'static str,
    name: &str,
    at: Millis,
    keys: &BTreeSet<(String, String)>,
) -> Result<(String, String), LookupError> {
    let matches: Vec<&(String, String)> = match name.split_once('/') {
        Some((ns, n)) => keys.iter().filter(|k| k.0 == ns && k.1 == n).collect(),
        None => keys.iter().filter(|k| k.1 == name).collect(),
    };
    match matches.as_slice() {
        [one] => Ok((*one).clone()),
        [] => {
            let full: Vec<String> = keys.iter().map(|(ns, n)| format!("{ns}/{n}")).collect();
            let hint = if name.contains('/') {
                did_you_mean(name, full.iter().map(String::as_str))
            } else {
                did_you_mean(name, keys.iter().map(|k| k.1.as_str()))
            };
            Err(LookupError::NotFound {
                kind,
                name: name.to_string(),
                at: clock(at),
                hint,
            })
        }
        many => Err(LookupError::Ambiguous {
            kind,
            name: name.to_string(),
            candidates: many.iter().map(|(ns, n)| format!("{ns}/{n}")).collect(),
        }),
    }
}

/// Finds a pod by `namespace/name`, or by `name` when one namespace has it. Of pods with
/// the same name the one that exists now wins, else the latest. A pod that a Job creates
/// later is named as such.
pub fn find_pod(sim: &dyn ExplainState, name: &str) -> Result<PodId, LookupError> {
    let scheduler = sim.scheduler();
    let (want_ns, want_name) = match name.split_once('/') {
        Some((ns, n)) => (Some(ns), n),
        None => (None, name),
    };
    // One scan, no allocation per pod: names are compared in place.
    let mut by_namespace: BTreeMap<&str, PodId> = BTreeMap::new();
    for (id, record) in scheduler.pods() {
        let spec = &record.spec;
        if spec.name != want_name || want_ns.is_some_and(|ns| spec.namespace != ns) {
            continue;
        }
        let keep_old = by_namespace
            .get(spec.namespace.as_str())
            .is_some_and(|&old| {
                record.phase == PodPhase::Gone && scheduler.pod(old).phase != PodPhase::Gone
            });
        if !keep_old {
            by_namespace.insert(spec.namespace.as_str(), id);
        }
    }
    if by_namespace.len() == 1 {
        return Ok(*by_namespace.values().next().expect("one entry"));
    }
    if by_namespace.len() > 1 {
        return Err(LookupError::Ambiguous {
            kind: "pod",
            name: name.to_string(),
            candidates: by_namespace
                .keys()
                .map(|ns| format!("{ns}/{want_name}"))
                .collect(),
        });
    }
    let hint = match sim.created_later(name) {
        Some(later) => later,
        None => {
            let keys: BTreeSet<(String, String)> = scheduler
                .pods()
                .map(|(_, r)| (r.spec.namespace.clone(), r.spec.name.clone()))
                .collect();
            match resolve_namespaced("pod", name, sim.now(), &keys) {
                Err(LookupError::NotFound { hint, .. }) => hint,
                _ => String::new(),
            }
        }
    };
    Err(LookupError::NotFound {
        kind: "pod",
        name: name.to_string(),
        at: clock(sim.now()),
        hint,
    })
}

/// Finds a gang (declared by a PodGroup, or named by pods) by `namespace/name` or `name`.
pub fn find_gang(sim: &dyn ExplainState, name: &str) -> Result<(String, String), LookupError> {
    let scheduler = sim.scheduler();
    let keys: BTreeSet<(String, String)> = scheduler
        .gang_keys()
        .map(|(ns, n)| (ns.to_string(), n.to_string()))
        .collect();
    resolve_namespaced("gang", name, sim.now(), &keys)
}

/// Finds a ClusterQueue by name.
pub fn find_queue(sim: &dyn ExplainState, name: &str) -> Result<CqId, LookupError> {
    let scheduler = sim.scheduler();
    if let Some((id, _)) = scheduler.cluster_queues().find(|(_, q)| q.name == name) {
        return Ok(id);
    }
    let names: Vec<&str> = scheduler
        .cluster_queues()
        .map(|(_, q)| q.name.as_str())
        .collect();
    let hint = if names.is_empty() {
        "; the input declares no ClusterQueues".to_string()
    } else {
        did_you_mean(name, names.iter().copied())
    };
    Err(LookupError::NotFound {
        kind: "ClusterQueue",
        name: name.to_string(),
        at: clock(sim.now()),
        hint,
    })
}

/// Finds a node by name.
pub fn find_node(sim: &dyn ExplainState, name: &str) -> Result<NodeId, LookupError> {
    let cluster = sim.scheduler().cluster();
    if let Some(id) = cluster.id_of(name) {
        return Ok(id);
    }
    let hint = did_you_mean(name, cluster.iter().map(|(_, n)| n.spec.name.as_str()));
    Err(LookupError::NotFound {
        kind: "node",
        name: name.to_string(),
        at: clock(sim.now()),
        hint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn did_you_mean_finds_close_names() {
        let known = ["gpu-0", "gpu-1", "cpu-0", "control-plane"];
        assert!(did_you_mean("gpu-9", known.iter().copied()).contains("\"gpu-0\""));
        assert_eq!(did_you_mean("zzzzzzzz", known.iter().copied()), "");
    }
}
