//! Events (`core/v1` and `events.k8s.io/v1`) read into an [`EventLog`]: each event is
//! classified as it is read ([`super::signatures::classify_event`]) and kept as one small
//! occurrence (times, count, node, object) under its signature, so a list of 100,000
//! events costs a few megabytes, not the events' text. The same objects come through
//! both APIs; one seen twice (namespace and name) is counted once.

use super::signatures::{classify_event, Classified};
use k8s_openapi::jiff::Timestamp;
use kestrel_objects::LoadError;
use serde_json::Value;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::path::Path;

/// Characters of a message kept as a group's example.
const EXAMPLE_CHARS: usize = 400;
/// `u32` index meaning "none".
pub(super) const NONE: u32 = u32::MAX;

/// One event as the checks read it, borrowed from the object.
#[derive(Debug, Clone, Default)]
pub(super) struct EventRecord<'a> {
    pub(super) type_: &'a str,
    pub(super) reason: &'a str,
    pub(super) message: &'a str,
    /// The object the event is about (`involvedObject` or `regarding`).
    pub(super) kind: &'a str,
    pub(super) namespace: &'a str,
    pub(super) name: &'a str,
    /// The node that reported it (a kubelet's host), when known.
    pub(super) host: &'a str,
    /// The component that reported it (`kubelet`, `default-scheduler`, `multus`).
    pub(super) reporter: &'a str,
    pub(super) first: Option<Timestamp>,
    pub(super) last: Option<Timestamp>,
    /// How many times it happened (`count`, `series.count`, `deprecatedCount`).
    pub(super) count: u32,
}

/// The event an object is, in either API's shape. Errors name the field and the fix.
pub(super) fn event_record(v: &Value) -> Result<EventRecord<'_>, (String, String)> {
    let get = |path: &[&str]| -> Option<&Value> {
        let mut cur = v;
        for p in path {
            cur = cur.get(p)?;
        }
        Some(cur).filter(|c| !c.is_null())
    };
    let text = |path: &[&str]| get(path).and_then(Value::as_str).unwrap_or("");
    let time = |path: &[&str]| -> Result<Option<Timestamp>, (String, String)> {
        match get(path).and_then(Value::as_str).filter(|t| !t.is_empty()) {
            None => Ok(None),
            Some(t) => t.parse::<Timestamp>().map(Some).map_err(|e| {
                (
                    path.join("."),
                    format!("{t:?} is not an RFC 3339 time ({e}); write e.g. 2025-06-02T10:00:00Z"),
                )
            }),
        }
    };
    let new_api = text(&["apiVersion"]).starts_with("events.k8s.io/");
    let (object, message) = if new_api {
        ("regarding", text(&["note"]))
    } else {
        ("involvedObject", text(&["message"]))
    };
    let kind = text(&[object, "kind"]);
    let name = text(&[object, "name"]);
    if kind.is_empty() || name.is_empty() {
        return Err((
            format!("{object}.{}", if kind.is_empty() { "kind" } else { "name" }),
            format!(
                "the event names no object; an Event of {} needs {object}: {{kind, namespace, name}}",
                if new_api { "events.k8s.io/v1" } else { "v1" }
            ),
        ));
    }
    let (source, count, first, last) = if new_api {
        (
            "deprecatedSource",
            get(&["series", "count"]).or(get(&["deprecatedCount"])),
            time(&["deprecatedFirstTimestamp"])?.or(time(&["eventTime"])?),
            time(&["series", "lastObservedTime"])?
                .or(time(&["deprecatedLastTimestamp"])?)
                .or(time(&["eventTime"])?),
        )
    } else {
        (
            "source",
            get(&["series", "count"]).or(get(&["count"])),
            time(&["firstTimestamp"])?.or(time(&["eventTime"])?),
            time(&["series", "lastObservedTime"])?
                .or(time(&["lastTimestamp"])?)
                .or(time(&["eventTime"])?),
        )
    };
    let count = match count {
        None => 1,
        Some(c) => match c.as_u64() {
            Some(n) => n.clamp(1, u32::MAX as u64) as u32,
            None => {
                return Err((
                    if new_api { "series.count" } else { "count" }.to_string(),
                    format!("{c} is not a whole number of occurrences"),
                ))
            }
        },
    };
    let reporter = [
        text(&[source, "component"]),
        text(&["reportingController"]),
        text(&["reportingComponent"]),
    ]
    .into_iter()
    .find(|r| !r.is_empty())
    .unwrap_or("");
    let mut host = text(&[source, "host"]);
    if host.is_empty() && reporter == "kubelet" {
        // The kubelet reports itself by its node name.
        host = text(&["reportingInstance"]);
    }
    if host.is_empty() && kind == "Node" {
        host = name;
    }
    Ok(EventRecord {
        type_: text(&["type"]),
        reason: text(&["reason"]),
        message,
        kind,
        namespace: text(&[object, "namespace"]),
        name,
        host,
        reporter,
        first: first.or(last),
        last: last.or(first),
        count,
    })
}

/// An event kept under its signature: when, how often, where, about what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Occurrence {
    /// Seconds since the epoch; `i64::MIN`: the event carries no time.
    pub(super) first: i64,
    pub(super) last: i64,
    pub(super) count: u32,
    /// Index into [`EventLog::names`], or [`NONE`].
    pub(super) node: u32,
    /// The object: `namespace/name` for a Pod, `Kind namespace/name` otherwise.
    pub(super) object: u32,
}

/// The events of one signature and detail (a registry, a CNI, a scheduler).
#[derive(Debug, Clone, Default)]
pub(super) struct EventGroup {
    /// The first message seen, cut short.
    pub(super) example: String,
    pub(super) occurrences: Vec<Occurrence>,
}

/// Every event read, aggregated by signature. Memory: one [`Occurrence`] (32 bytes) per
/// event kept, each distinct node and object name once, one example message per group.
#[derive(Debug, Clone, Default)]
pub struct EventLog {
    names: Vec<String>,
    index: HashMap<String, u32>,
    /// (check, signature, detail) -> events.
    pub(super) groups: BTreeMap<(&'static str, String, String), EventGroup>,
    /// Hashes of the events' namespace/name, to count an event listed twice once.
    seen: HashSet<u64>,
    /// Events read (duplicates excluded).
    pub read: usize,
    /// Events listed a second time (both APIs, or two files), counted once.
    pub duplicates: usize,
    /// Normal events of reasons no check reads, by reason: counted, not reported.
    pub normal: BTreeMap<String, u64>,
    /// The newest time any event carries.
    pub(super) newest: Option<Timestamp>,
}

impl EventLog {
    /// Reads one Event object (either API). Errors name the field and the fix; the caller
    /// adds the file and the object.
    pub fn add(&mut self, v: &Value) -> Result<(), (String, String)> {
        let ev = event_record(v)?;
        let meta = |k: &str| {
            v.get("metadata")
                .and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .unwrap_or("")
        };
        let name = meta("name");
        if !name.is_empty() {
            let mut h = DefaultHasher::new();
            (meta("namespace"), name).hash(&mut h);
            if !self.seen.insert(h.finish()) {
                self.duplicates += 1;
                return Ok(());
            }
        }
        self.record(&ev);
        Ok(())
    }

    pub(super) fn record(&mut self, ev: &EventRecord) {
        self.read += 1;
        if let Some(t) = ev.last {
            self.newest = Some(self.newest.map_or(t, |n| n.max(t)));
        }
        let Some(Classified {
            check,
            signature,
            detail,
        }) = classify_event(ev)
        else {
            *self.normal.entry(ev.reason.to_string()).or_default() += ev.count as u64;
            return;
        };
        let object = if ev.kind == "Pod" {
            format!("{}/{}", ev.namespace, ev.name)
        } else if ev.namespace.is_empty() || ev.kind == "Node" {
            // Node events live in `default`, but a Node has no namespace.
            format!("{} {}", ev.kind, ev.name)
        } else {
            format!("{} {}/{}", ev.kind, ev.namespace, ev.name)
        };
        let occurrence = Occurrence {
            first: ev.first.map_or(i64::MIN, |t| t.as_second()),
            last: ev.last.map_or(i64::MIN, |t| t.as_second()),
            count: ev.count,
            node: if ev.host.is_empty() {
                NONE
            } else {
                self.intern(ev.host)
            },
            object: self.intern(&object),
        };
        let group = self.groups.entry((check, signature, detail)).or_default();
        if group.example.is_empty() {
            // One line: kubelet's mount errors carry the mount command's output.
            let one_line = ev.message.split_whitespace().collect::<Vec<_>>().join(" ");
            group.example = one_line.chars().take(EXAMPLE_CHARS).collect();
        }
        group.occurrences.push(occurrence);
    }

    fn intern(&mut self, s: &str) -> u32 {
        if let Some(i) = self.index.get(s) {
            return *i;
        }
        let i = self.names.len() as u32;
        self.names.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }

    /// The name behind an index ("" for [`NONE`]).
    pub(super) fn name(&self, i: u32) -> &str {
        self.names.get(i as usize).map_or("", String::as_str)
    }

    /// Events kept under a signature.
    pub fn kept(&self) -> usize {
        self.groups.values().map(|g| g.occurrences.len()).sum()
    }
}

/// An Event's error in the loader's words: file, object, field.
pub(super) fn event_error(
    path: &Path,
    object: String,
    (field, message): (String, String),
) -> LoadError {
    LoadError::new(path, message).object(object).field(field)
}
