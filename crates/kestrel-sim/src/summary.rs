//! The plain-text summary a simulation run prints to the terminal: key figures, latency
//! percentiles overall and per group, the commonest pending reasons and the pods still
//! pending at the end. No colours; every line fits in 100 columns.

use std::fmt::Write;

use crate::metrics::{GroupStats, Percentiles, SimReport};
use crate::text::{clip, fmt_pct, fmt_seconds};
use kestrel_objects::duration::format_duration;

/// Widest line the summary writes.
const WIDTH: usize = 100;
/// Pending reasons listed.
const TOP_REASONS: usize = 5;
/// Pending-at-end pods listed before "... and N more".
const PENDING_LISTED: usize = 10;

/// Renders `r` as a compact table for the terminal.
pub fn render_summary(r: &SimReport) -> String {
    let mut s = String::new();
    // `write!` into a String cannot fail; the results are ignored throughout.
    let _ = writeln!(s, "Kestrel simulation: {}", clip(&r.scenario, WIDTH - 20));
    let _ = writeln!(
        s,
        "{:<18}policy {}, seed {}",
        "Run",
        clip(&r.policy, 40),
        r.seed
    );
    let _ = writeln!(
        s,
        "{:<18}{} nodes, {} GPUs, simulated {}",
        "Cluster",
        r.nodes,
        r.gpus,
        format_duration(r.span)
    );
    let _ = writeln!(
        s,
        "{:<18}{} cycles, {} bindings",
        "Scheduler", r.cycles, r.bindings
    );
    let p = &r.pods;
    let _ = writeln!(
        s,
        "{:<18}created {}, scheduled {}, completed {}, evicted {}",
        "Pods", p.created, p.scheduled, p.completed, p.evicted
    );
    let _ = writeln!(
        s,
        "{:<18}running {}, pending {}",
        "Pods at end", p.running_at_end, p.pending_at_end
    );
    let _ = writeln!(
        s,
        "{:<18}submitted {}, completed {}",
        "Jobs", r.jobs.submitted, r.jobs.completed
    );
    let g = &r.gangs;
    if g.declared > 0 {
        let _ = writeln!(
            s,
            "{:<18}declared {}, started {} ({} in one rack, {} in one NVLink domain), timed out {}",
            "Gangs",
            g.declared,
            g.started,
            g.started_in_one_rack,
            g.started_in_one_nvlink_domain,
            g.timed_out
        );
    }
    if let Some(b) = r.topology_blind_gangs.as_ref().filter(|_| g.declared > 0) {
        let _ = writeln!(
            s,
            "{:<18}started {} ({} in one rack, {} in one NVLink domain), timed out {}",
            "  topology-blind",
            b.started,
            b.started_in_one_rack,
            b.started_in_one_nvlink_domain,
            b.timed_out
        );
    }
    let _ = writeln!(
        s,
        "{:<18}allocated {}, utilized {}, fragmented {} of free",
        "GPUs (time mean)",
        fmt_pct(r.gpu_allocation_mean),
        fmt_pct(r.gpu_utilization_mean),
        fmt_pct(r.gpu_fragmentation_mean)
    );

    let _ = writeln!(
        s,
        "\n{:<22}{:>8}{:>11}{:>11}{:>11}{:>11}{:>11}",
        "", "count", "p50", "p95", "p99", "max", "mean"
    );
    for (label, pc) in [
        ("Queue wait", &r.queue_wait),
        ("Job completion time", &r.completion_time),
    ] {
        let _ = writeln!(
            s,
            "{:<22}{:>8}{:>11}{:>11}{:>11}{:>11}{:>11}",
            label,
            pc.count,
            fmt_pct_secs(pc, pc.p50),
            fmt_pct_secs(pc, pc.p95),
            fmt_pct_secs(pc, pc.p99),
            fmt_pct_secs(pc, pc.max),
            fmt_pct_secs(pc, pc.mean)
        );
    }

    group_table(&mut s, "By priority", &r.by_priority);
    group_table(&mut s, "By namespace", &r.by_namespace);
    queue_table(&mut s, r);

    // Numbers wider than their columns could push a line past the width: cut it. The
    // reasons below are never cut: they are wrapped.
    let mut s: String = s.lines().map(|line| clip(line, WIDTH) + "\n").collect();

    training_table(&mut s, r);

    if !r.pending_reasons.is_empty() {
        let total: u64 = r.pending_reasons.iter().map(|(_, n)| n).sum();
        let _ = writeln!(s, "\nTop pending reasons (pod-samples)");
        for (reason, n) in r.pending_reasons.iter().take(TOP_REASONS) {
            let share = if total > 0 {
                *n as f64 / total as f64
            } else {
                0.0
            };
            let first = format!("  {:>9} {:>6}  ", n, fmt_pct(share));
            s.push_str(&wrap(&first, reason, 20));
        }
        if r.pending_reasons.len() > TOP_REASONS {
            let more = r.pending_reasons.len() - TOP_REASONS;
            let _ = writeln!(
                s,
                "  ... and {more} more {}",
                if more == 1 { "reason" } else { "reasons" }
            );
        }
    }

    if !r.pending_at_end.is_empty() {
        let _ = writeln!(s, "\nPending at end ({} pods)", r.pending_at_end.len());
        let _ = writeln!(s, "  {:<32} {:>6} {:>10}", "pod", "prio", "waiting");
        for pod in r.pending_at_end.iter().take(PENDING_LISTED) {
            let row = format!(
                "  {:<32} {:>6} {:>10}",
                pod.pod,
                pod.priority,
                fmt_seconds(pod.waiting_seconds)
            );
            let _ = writeln!(s, "{}", clip(&row, WIDTH));
            s.push_str(&wrap("    ", &pod.reason, 4));
        }
        if r.pending_at_end.len() > PENDING_LISTED {
            let _ = writeln!(
                s,
                "  ... and {} more",
                r.pending_at_end.len() - PENDING_LISTED
            );
        }
    }
    s
}

/// Per TrainingJob: its state, restarts, wait and GPU-hours; why it failed, wrapped.
fn training_table(s: &mut String, r: &SimReport) {
    if r.training_jobs.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n{:<32} {:<11}{:>9}{:>12}{:>10}{:>12}",
        "TrainingJobs", "state", "restarts", "queue wait", "GPU-h", "lost GPU-h"
    );
    for t in &r.training_jobs {
        let wait = t.queue_wait_seconds.map_or("-".to_string(), fmt_seconds);
        let row = format!(
            "  {:<30} {:<11}{:>9}{:>12}{:>10.2}{:>12.2}",
            t.job, t.state, t.restarts, wait, t.gpu_hours, t.lost_gpu_hours
        );
        let _ = writeln!(s, "{}", clip(&row, WIDTH));
        if t.state == "Failed" {
            let why = format!(
                "{}: {}",
                t.reason.as_deref().unwrap_or_default(),
                t.message.as_deref().unwrap_or_default()
            );
            s.push_str(&wrap("    ", &why, 4));
        }
    }
}

/// `text` after `first`, wrapped at word boundaries to [`WIDTH`], later lines indented by
/// `indent` spaces; a word longer than a line stays whole.
fn wrap(first: &str, text: &str, indent: usize) -> String {
    let mut out = String::new();
    let mut line = first.to_string();
    let mut empty = true;
    for word in text.split_whitespace() {
        if !empty && line.chars().count() + 1 + word.chars().count() > WIDTH {
            out.push_str(line.trim_end());
            out.push('\n');
            line = " ".repeat(indent);
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    out.push_str(line.trim_end());
    out.push('\n');
    out
}

/// One table of per-group percentiles: pods and their queue wait, jobs and their completion.
/// ClusterQueues (usage, borrowing, waits) and preemptions, when the run had them.
fn queue_table(s: &mut String, r: &SimReport) {
    if !r.queues.is_empty() {
        let _ = writeln!(
            s,
            "\n{:<22}{:>9}{:>9}{:>10}{:>12}{:>9}{:>8}{:>11}",
            "ClusterQueue",
            "resource",
            "nominal",
            "mean used",
            "borrowed-h",
            "entitled",
            "got",
            "wait p95"
        );
        for q in &r.queues {
            let resource = if q.resource == kestrel_core::GPU_RESOURCE {
                "gpu"
            } else {
                &q.resource
            };
            let _ = writeln!(
                s,
                "{:<22}{:>9}{:>9.1}{:>10.1}{:>12.1}{:>9}{:>8}{:>11}",
                clip(&q.name, 21),
                clip(resource, 8),
                q.nominal,
                q.used_mean,
                q.borrowed_hours,
                fmt_pct(q.entitled_share),
                fmt_pct(q.used_share),
                fmt_pct_secs(&q.queue_wait, q.queue_wait.p95)
            );
        }
        if let Some(jain) = r.queue_fairness {
            let _ = writeln!(s, "Fairness (Jain's index of got/entitled): {jain:.3}");
        }
    }
    let p = &r.preemption;
    if p.preemptions > 0 {
        let _ = writeln!(
            s,
            "Preemptions: {} ({} pods evicted, {} asked to checkpoint first)\n  \
             {:.2} GPU-hours of work lost; preemptor started within {} (p99), \
             after a reclaim within {} (p99)",
            p.preemptions,
            p.victim_pods,
            p.checkpoint_requests,
            p.lost_gpu_hours,
            fmt_pct_secs(&p.start_latency, p.start_latency.p99),
            fmt_pct_secs(&p.reclaim_latency, p.reclaim_latency.p99)
        );
        if p.deleted_pods > 0 {
            let _ = writeln!(
                s,
                "  bare Pods among them (no controller, so deleted, as Kubernetes does): {}",
                p.deleted_pods
            );
        }
    }
    if r.pods.rejected_by_quota > 0 {
        let _ = writeln!(
            s,
            "Pod creations refused by namespace ResourceQuotas (retried later): {}",
            r.pods.rejected_by_quota
        );
    }
}

fn group_table(s: &mut String, title: &str, groups: &[GroupStats]) {
    if groups.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n{:<18}{:>7}{:>10}{:>10}{:>10}{:>7}{:>10}{:>10}{:>10}",
        title, "pods", "wait p50", "wait p95", "wait p99", "jobs", "JCT p50", "JCT p95", "JCT p99"
    );
    for g in groups {
        let (w, c) = (&g.queue_wait, &g.completion_time);
        let _ = writeln!(
            s,
            "{:<18}{:>7}{:>10}{:>10}{:>10}{:>7}{:>10}{:>10}{:>10}",
            clip(&g.group, 17),
            w.count,
            fmt_pct_secs(w, w.p50),
            fmt_pct_secs(w, w.p95),
            fmt_pct_secs(w, w.p99),
            c.count,
            fmt_pct_secs(c, c.p50),
            fmt_pct_secs(c, c.p95),
            fmt_pct_secs(c, c.p99)
        );
    }
}

/// A percentile value of `pc`, or "-" when it measured nothing.
fn fmt_pct_secs(pc: &Percentiles, seconds: f64) -> String {
    if pc.count == 0 {
        "-".to_string()
    } else {
        fmt_seconds(seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::PendingPod;
    use crate::metrics::TrainingJobReport;
    use crate::sample_report::sample_report;

    #[test]
    fn training_jobs_are_listed_with_why_they_failed() {
        let mut r = sample_report();
        assert!(
            !render_summary(&r).contains("TrainingJobs"),
            "none, no table"
        );
        let job = |name: &str, state: &str, reason: &str, message: &str| TrainingJobReport {
            job: format!("ml/{name}"),
            state: state.into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            restarts: 1,
            queue_wait_seconds: Some(90.0),
            gpu_hours: 6.5,
            lost_gpu_hours: 0.5,
        };
        r.training_jobs = vec![
            job(
                "bert",
                "Succeeded",
                "Succeeded",
                "the Master finished after 1 restart(s)",
            ),
            job(
                "gpt",
                "Failed",
                "BackoffLimitExceeded",
                &"pod gpt-worker-0 failed: container train exited with code 137; ".repeat(3),
            ),
        ];
        let s = render_summary(&r);
        for needle in [
            "TrainingJobs",
            "lost GPU-h",
            "  ml/bert                        Succeeded          1       1m30s      6.50        0.50",
            "    BackoffLimitExceeded: pod gpt-worker-0 failed",
        ] {
            assert!(s.contains(needle), "summary lacks {needle:?}:\n{s}");
        }
        assert!(
            !s.contains("Succeeded: the Master"),
            "only failures say why:\n{s}"
        );
        assert!(s.lines().all(|l| l.chars().count() <= WIDTH), "{s}");
    }

    #[test]
    fn summary_has_the_key_figures_and_reasons() {
        let r = sample_report();
        let s = render_summary(&r);
        for needle in [
            "Kestrel simulation: bursty-mix",
            "policy binpack, seed 42",
            "25 nodes, 192 GPUs, simulated 4h00m00s",
            "1440 cycles, 400 bindings",
            "created 420, scheduled 400, completed 350, evicted 3",
            "running 38, pending 12",
            "submitted 120, completed 101",
            "allocated 71.3%, utilized 55.0%, fragmented 4.2% of free",
            // queue wait p50/p95/p99 = 12.5s / 5m30s / 15m00s
            "12.5s",
            "5m30s",
            "15m00s",
            "Insufficient nvidia.com/gpu",
            "By priority",
            "By namespace",
            "team-research",
            "Pending at end (12 pods)",
            "... and 2 more",
        ] {
            assert!(s.contains(needle), "summary lacks {needle:?}:\n{s}");
        }
        // Only the first five reasons are listed.
        assert!(s.contains("... and 1 more reason\n"), "{s}");
        assert!(!s.contains("reason-six"), "{s}");
    }

    #[test]
    fn summary_lines_fit_in_100_columns() {
        let mut r = sample_report();
        r.scenario = "s".repeat(300);
        r.pending_at_end.push(PendingPod {
            pod: "p".repeat(200),
            priority: i32::MIN,
            waiting_seconds: 1e9,
            reason: "r\n".repeat(200),
        });
        r.by_namespace[0].group = "n".repeat(80);
        let s = render_summary(&r);
        for line in s.lines() {
            assert!(line.chars().count() <= WIDTH, "too long: {line:?}");
        }
    }

    #[test]
    fn pending_reasons_are_wrapped_never_cut() {
        let mut r = sample_report();
        let reason = (0..40)
            .map(|i| format!("word{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        r.pending_reasons = vec![(reason.clone(), 5)];
        r.pending_at_end[0].reason = reason;
        let s = render_summary(&r);
        assert!(
            s.lines().all(|l| !l.ends_with("...")),
            "a line was cut: {s}"
        );
        for i in 0..40 {
            let n =
                s.matches(&format!("word{i} ")).count() + s.matches(&format!("word{i}\n")).count();
            assert_eq!(n, 2, "word{i} twice: {s}");
        }
        for line in s.lines() {
            assert!(line.chars().count() <= WIDTH, "too long: {line:?}");
        }
    }

    #[test]
    fn empty_report_summarises_without_nan() {
        let r = SimReport {
            gpu_allocation_mean: f64::NAN,
            ..SimReport::default()
        };
        let s = render_summary(&r);
        assert!(s.contains("0 nodes, 0 GPUs"), "{s}");
        assert!(!s.contains("NaN") && !s.contains("inf"), "{s}");
        assert!(!s.contains("Pending at end"), "{s}");
    }

    #[test]
    fn clip_marks_cuts_and_counts_characters() {
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("abcdefghij", 6), "abc...");
        assert_eq!(clip("ééééééé", 5), "éé...");
        assert_eq!(fmt_seconds(f64::INFINITY), "-");
        assert_eq!(fmt_seconds(330.0), "5m30s");
    }
}
