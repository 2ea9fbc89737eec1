//! The report: compact text grouped by severity, or JSON.

use super::checks::{Finding, Severity};
use super::{count, short_list, Diagnosis, SHOWN};

/// The compact text report: findings grouped by severity, each in a few lines.
pub fn render_text(d: &Diagnosis) -> String {
    let mut out = format!("kestrel doctor: {}\n", d.source);
    out.push_str(&format!(
        "{} ({} with GPUs, {} GPUs allocatable), {} ({} pending)",
        count(d.nodes, "node"),
        d.gpu_nodes,
        d.gpus_allocatable,
        count(d.pods, "pod"),
        d.pending
    ));
    if d.events > 0 {
        out.push_str(&format!(
            ", {} ({} Normal of reasons no check reads)",
            count(d.events, "event"),
            d.events_normal
        ));
    }
    if let Some(t) = &d.as_of {
        out.push_str(&format!(", as of {t}"));
    }
    out.push('\n');
    for severity in [Severity::Critical, Severity::Warning, Severity::Info] {
        let found: Vec<&Finding> = d
            .findings
            .iter()
            .filter(|f| f.severity == severity)
            .collect();
        if found.is_empty() {
            continue;
        }
        out.push_str(&format!(
            "\n{} ({})\n",
            severity.as_str().to_uppercase(),
            found.len()
        ));
        for f in found {
            out.push_str(&format!("  [{}] {}\n", f.id, f.what));
            let joined = short_list(&f.r#where, SHOWN);
            let one_line = f.r#where.len() <= 1
                || (joined.len() <= 90 && !f.r#where.iter().any(|w| w.contains(", ")));
            if one_line {
                out.push_str(&format!("    where: {joined}\n"));
            } else {
                out.push_str("    where:\n");
                for w in f.r#where.iter().take(SHOWN) {
                    out.push_str(&format!("      - {w}\n"));
                }
                if f.r#where.len() > SHOWN {
                    out.push_str(&format!(
                        "      ... and {} more (--json lists all)\n",
                        f.r#where.len() - SHOWN
                    ));
                }
            }
            if let Some(seen) = seen(f) {
                out.push_str(&format!("    seen:  {seen}\n"));
            }
            out.push_str(&format!("    why:   {}\n", f.why));
            out.push_str(&format!("    fix:   {}\n", f.fix));
        }
    }
    if d.findings.is_empty() {
        out.push_str("\nno problems found\n");
    }
    if !d.passed.is_empty() {
        out.push_str(&format!("\npassed: {}\n", d.passed.join(", ")));
    }
    let n = |s: Severity| d.findings.iter().filter(|f| f.severity == s).count();
    out.push_str(&format!(
        "{} critical, {} warning, {} info\n",
        n(Severity::Critical),
        n(Severity::Warning),
        n(Severity::Info)
    ));
    out
}

/// How often and when a finding's events happened: `5 events, T1 to T2, in 2 incidents`.
fn seen(f: &Finding) -> Option<String> {
    let first = f.incidents.first()?;
    let last = f.incidents.last()?;
    let events: u64 = f.incidents.iter().map(|i| i.count).sum();
    let (from, to) = (first.first_seen.as_deref()?, last.last_seen.as_deref()?);
    let mut s = count(events as usize, "event");
    if from == to {
        s.push_str(&format!(", at {from}"));
    } else {
        s.push_str(&format!(", {from} to {to}"));
    }
    if f.incidents.len() > 1 {
        s.push_str(&format!(", in {} incidents", f.incidents.len()));
    }
    Some(s)
}

/// The findings as a JSON array of `{id, severity, what, where, why, fix}`.
pub fn render_json(d: &Diagnosis) -> String {
    serde_json::to_string_pretty(&d.findings).expect("findings serialize")
}
