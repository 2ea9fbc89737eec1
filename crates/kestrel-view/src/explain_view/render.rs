//! Terminal rendering of the views.

use super::clock::{clock, clock_approx};
use super::explanation::Explanation;
use super::help::Help;
use super::pending::{PendingEntry, QueueListView};
use super::views::{GangView, NodeView, PodView, QueueView};
use kestrel_core::{Bytes, Millis};
use kestrel_objects::duration::format_duration;
use std::fmt::Write as _;

/// The explanation's message after `first` (a label or an indent), continued at `indent`.
fn render_explanation(out: &mut String, e: &Explanation, first: &str, indent: &str) {
    let _ = writeln!(out, "{first}{}", e.message);
    if e.queue_problem.is_some() {
        let _ = writeln!(
            out,
            "{indent}(the queue holds it: no node was tried, and more nodes would not help)"
        );
    }
}

fn duration_s(s: f64) -> String {
    format_duration((s * 1000.0).round() as Millis)
}

fn clock_s(s: f64) -> String {
    clock((s * 1000.0).round() as Millis)
}

fn clock_approx_s(s: f64) -> String {
    clock_approx((s * 1000.0).round() as Millis)
}

pub fn render_pod(v: &PodView) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "pod {} at {}", v.pod, v.at);
    let mut phase = v.phase.to_string();
    if let Some(w) = v.waiting_s {
        let _ = write!(
            phase,
            " for {} (created {})",
            duration_s(w),
            clock_s(v.created_at_s)
        );
    }
    let _ = writeln!(out, "  phase      {phase}, priority {}", v.priority);
    let _ = writeln!(out, "  requests   {}", v.requests.summary);
    if let Some(g) = &v.gang {
        let _ = writeln!(out, "  gang       {g}");
    }
    if let Some(node) = &v.node {
        let gpus = if v.gpus.is_empty() {
            String::new()
        } else {
            format!(
                ", GPUs {}",
                v.gpus
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            )
        };
        let _ = writeln!(
            out,
            "  node       {node}{gpus} (bound at {})",
            clock_s(v.bound_at_s.unwrap_or(0.0))
        );
    }
    if let Some(p) = &v.position {
        let queue = match &p.cluster_queue {
            Some(q) => format!("ClusterQueue {q}"),
            None => "no ClusterQueue".to_string(),
        };
        let _ = writeln!(
            out,
            "  queue      {queue}: position {} of {} pending workloads ({} ahead)",
            p.position, p.pending_workloads, p.ahead
        );
    }
    if let Some(e) = &v.explanation {
        let label = if v.phase == "Pending" {
            "why"
        } else {
            "reason"
        };
        render_explanation(&mut out, e, &format!("  {label:<10} "), "             ");
    } else if v.phase == "Pending" {
        let _ = writeln!(out, "  why        not tried yet");
    }
    if let Some(p) = &v.predicted_start {
        let _ = writeln!(out, "  start      {}", p.render());
    }
    if let Some(h) = &v.help {
        render_help(&mut out, h, v.gang.is_some());
    }
    out
}

fn render_help(out: &mut String, h: &Help, gang: bool) {
    let mut lines = Vec::new();
    if h.held > 0 {
        lines.push(format!(
            "{} node(s) it may use have room now, held for other work (see the reasons \
             above): it fits there once that work starts",
            h.held
        ));
    }
    match &h.closest {
        Some(c) => {
            let lacks: Vec<&str> = c.lacks.iter().map(|l| l.text.as_str()).collect();
            lines.push(format!(
                "fits on node {} if {} were free",
                c.node,
                lacks.join(" and ")
            ));
        }
        None if h.held == 0 => {
            lines.push("no node it may use lacks only capacity: see the reasons above".into())
        }
        None => {}
    }
    if let Some((taint, nodes)) = &h.blocking_taint {
        lines.push(format!(
            "a toleration of taint {taint} would let it use {nodes} more node(s) big enough for it"
        ));
    }
    if let Some(r) = &h.room {
        let ending: Vec<String> = r
            .ending
            .iter()
            .take(6)
            .map(|e| {
                let gpus = if e.gpus > 0.0 {
                    format!(", {} GPU", e.gpus)
                } else {
                    String::new()
                };
                format!("{} ({}{gpus})", e.pod, clock_approx_s(e.ends_at_s))
            })
            .collect();
        let more = r.ending.len().saturating_sub(6);
        lines.push(format!(
            "room on {} from about {} when these end (estimated runtimes): {}{}",
            r.node,
            clock_approx_s(r.at_s),
            ending.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
        lines.push(format!(
            "(unless work ahead of it takes that room first{})",
            if gang {
                "; the gang needs room for all its pods"
            } else {
                ""
            }
        ));
    } else if h.closest.is_some() {
        lines.push("no running pod with a known end frees enough room on one node".into());
    }
    if let Some(p) = &h.preemption {
        let victims: Vec<String> = p
            .victims
            .iter()
            .take(6)
            .map(|v| {
                let gang = v
                    .gang
                    .as_ref()
                    .map(|g| format!(", gang {g} whole"))
                    .unwrap_or_default();
                format!("{} (priority {}{gang})", v.pod, v.priority)
            })
            .collect();
        let more = p.victims.len().saturating_sub(6);
        lines.push(format!(
            "fits on {} if these were preempted: {}{}",
            p.node,
            victims.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
        lines.push(format!("({})", p.why_not));
    }
    for (i, line) in lines.iter().enumerate() {
        let label = if i == 0 { "would help" } else { "" };
        let _ = writeln!(out, "  {label:<10} {line}");
    }
}

pub fn render_gang(v: &GangView) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "gang {} at {}", v.gang, v.at);
    let declared = if v.declared {
        format!(
            "minMember {}{}",
            v.min_member.unwrap_or(0),
            v.total
                .map(|t| format!(", {t} pods expected"))
                .unwrap_or_default()
        )
    } else {
        "not declared by a PodGroup".to_string()
    };
    let _ = writeln!(out, "  phase      {} ({declared})", v.phase);
    // "k of n" only when n is the gang's size; minMember is a floor, not a count.
    let exist = match v.total {
        Some(total) => format!("{} of {total} exist", v.exist),
        None => format!("{} exist", v.exist),
    };
    let _ = writeln!(
        out,
        "  members    {exist}, {} bound, {} pending",
        v.bound, v.pending
    );
    for m in &v.members {
        let _ = writeln!(
            out,
            "             {} {}{}",
            m.pod,
            m.phase,
            m.node
                .as_ref()
                .map(|n| format!(" on {n}"))
                .unwrap_or_default()
        );
    }
    if let Some(p) = &v.problem {
        let _ = writeln!(out, "  problem    {}", p.message);
    }
    if let (Some(first), Some(e)) = (&v.first_pending, &v.first_pending_explanation) {
        let _ = writeln!(out, "  first pending member {first}:");
        render_explanation(&mut out, e, "             ", "             ");
    }
    if let Some(p) = &v.predicted_start {
        let _ = writeln!(out, "  start      {}", p.render());
    }
    if let Some(h) = &v.help {
        let place = match (&h.level, &h.domain) {
            (Some(level), Some(domain)) => format!("{level} {domain}"),
            (Some(level), None) => format!("any {level} (no node has that label)"),
            _ => "the cluster".to_string(),
        };
        let _ = writeln!(
            out,
            "  would help {} of its {} pending pods fit together in {place} now",
            h.fit, h.pending
        );
        if let Some(c) = &h.closest {
            let lacks: Vec<&str> = c.lacks.iter().map(|l| l.text.as_str()).collect();
            let _ = writeln!(
                out,
                "             one more fits on node {} if {} were free",
                c.node,
                lacks.join(" and ")
            );
        }
    }
    out
}

fn pending_table(out: &mut String, list: &[PendingEntry]) {
    if list.is_empty() {
        let _ = writeln!(out, "  (nothing pending)");
        return;
    }
    let width = list.iter().map(|e| e.pod.len()).max().unwrap_or(3).max(3);
    let qwidth = list
        .iter()
        .map(|e| e.cluster_queue.as_deref().unwrap_or("-").len())
        .max()
        .unwrap_or(5)
        .max(5);
    let _ = writeln!(
        out,
        "  {:>4}  {:<width$}  {:<qwidth$}  {:>8}  {:>10}  {:<34}  REASON",
        "POS", "POD", "QUEUE", "PRIORITY", "WAITING", "PREDICTED START (RANGE)"
    );
    for e in list {
        let start = match &e.predicted_start {
            Some(p) => {
                let point = p
                    .point_s
                    .map(clock_approx_s)
                    .unwrap_or_else(|| "none".to_string());
                let range = match (p.from_s, p.to_s) {
                    (Some(f), Some(t)) => format!("{}-{}", clock_approx_s(f), clock_approx_s(t)),
                    (Some(f), None) => format!("{}-never", clock_approx_s(f)),
                    _ => "never".to_string(),
                };
                format!("{point} ({range})")
            }
            None => "-".to_string(),
        };
        let _ = writeln!(
            out,
            "  {:>4}  {:<width$}  {:<qwidth$}  {:>8}  {:>10}  {:<34}  {}",
            e.position,
            e.pod,
            e.cluster_queue.as_deref().unwrap_or("-"),
            e.priority,
            duration_s(e.waiting_s),
            start,
            e.reason
        );
    }
}

pub fn render_queue_list(v: &QueueListView) -> String {
    let mut out = String::new();
    let mut filter = Vec::new();
    if let Some(q) = &v.cluster_queue {
        filter.push(format!("ClusterQueue {q}"));
    }
    if let Some(ns) = &v.namespace {
        filter.push(format!("namespace {ns}"));
    }
    let _ = writeln!(
        out,
        "pending at {}: {} pod(s){}{}",
        v.at,
        v.pending.len(),
        if filter.is_empty() {
            String::new()
        } else {
            format!(" in {}", filter.join(", "))
        },
        if v.pending.len() != v.pending_total {
            format!(" ({} in all)", v.pending_total)
        } else {
            String::new()
        }
    );
    pending_table(&mut out, &v.pending);
    out
}

pub fn render_queue(v: &QueueView) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "ClusterQueue {} at {}", v.cluster_queue, v.at);
    let _ = writeln!(
        out,
        "  cohort     {}, {}",
        v.cohort.as_deref().unwrap_or("none"),
        v.queueing_strategy
    );
    let _ = writeln!(
        out,
        "  workloads  {} pod(s) pending, {} admitted and running",
        v.pending, v.admitted
    );
    let _ = writeln!(out, "  quota");
    for q in &v.quota {
        let _ = writeln!(out, "    {:<16} {:<20} {}", q.flavor, q.resource, q.text);
    }
    pending_table(&mut out, &v.pending_list);
    out
}

pub fn render_node(v: &NodeView) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "node {} at {}{}",
        v.node,
        v.at,
        if v.cordoned { " (cordoned)" } else { "" }
    );
    let (c, a) = (&v.capacity, &v.allocated);
    let _ = writeln!(
        out,
        "  allocated  cpu {}/{}, memory {}/{}, pods {}/{}, GPUs {}/{}",
        a.cpu,
        c.cpu,
        Bytes(a.memory_bytes),
        Bytes(c.memory_bytes),
        a.pods,
        c.pods,
        a.gpus,
        c.gpus
    );
    for (name, total) in &c.extended {
        let _ = writeln!(
            out,
            "             {name} {}/{total}",
            a.extended.get(name).copied().unwrap_or(0)
        );
    }
    let taints = if v.taints.is_empty() {
        "none".to_string()
    } else {
        v.taints.join(", ")
    };
    let _ = writeln!(out, "  taints     {taints}");
    if !v.gpus.is_empty() {
        let _ = writeln!(out, "  GPUs");
        for g in &v.gpus {
            let used = match (g.used_milli, g.held_whole) {
                (0, _) => "free".to_string(),
                (_, true) => "whole".to_string(),
                (m, false) => format!("{} shared", m as f64 / 1000.0),
            };
            let _ = writeln!(
                out,
                "    {:>2} {} NUMA {} {:<10} {}",
                g.index,
                g.model,
                g.numa_node,
                used,
                g.pods.join(", ")
            );
        }
    }
    let _ = writeln!(out, "  pods       {}", v.pods.len());
    for p in &v.pods {
        let _ = writeln!(
            out,
            "    {} (priority {}; {}; since {}, ends {})",
            p.pod,
            p.priority,
            p.requests,
            clock_s(p.bound_at_s),
            p.ends_at_s
                .map(|e| format!("about {}", clock_approx_s(e)))
                .unwrap_or_else(|| "never (runs to the end)".to_string())
        );
    }
    out
}
