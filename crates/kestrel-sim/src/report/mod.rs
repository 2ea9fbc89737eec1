//! The HTML report of a simulation run: one self-contained file (inline CSS and SVG, no
//! script, no network references) with the key figures, the time series, latency per
//! group, a per-node GPU heat map, pending reasons and the pods still pending at the end.
//!
//! Every time-series chart goes through [`time_chart`]; hover tooltips are SVG `<title>`s.

use std::collections::BTreeMap;
use std::fmt::Write;

use kestrel_core::Millis;

use crate::metrics::{GroupStats, NodeUsage, Percentiles, SimReport};
use crate::text::{clip, fmt_pct, fmt_seconds};
use kestrel_objects::duration::format_duration;

mod heat_map;
use heat_map::heat_map;
#[cfg(test)]
use heat_map::shade;

const STYLE: &str = "
:root{color-scheme:light}
*{box-sizing:border-box}
body{margin:0;background:#f5f6f8;color:#1f2937;
 font:14px/1.45 system-ui,-apple-system,\"Segoe UI\",Roboto,\"Helvetica Neue\",Arial,sans-serif}
main{max-width:1120px;margin:0 auto;padding:24px 16px 40px}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:16px;margin:0 0 2px}
h3{font-size:14px;margin:14px 0 6px}
.meta{color:#4b5563;margin:0}
.note{color:#6b7280;font-size:13px;margin:0 0 10px}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(160px,1fr));gap:12px;margin:18px 0}
.card{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:12px 14px}
.card .l{color:#6b7280;font-size:12px;text-transform:uppercase;letter-spacing:.04em}
.card .v{font-size:26px;font-weight:600;font-variant-numeric:tabular-nums}
.card .s{color:#6b7280;font-size:12px}
.card.warn{border-color:#f59e0b;background:#fffbeb}
section{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:16px 18px;margin:16px 0}
.legend{display:flex;flex-wrap:wrap;gap:4px 18px;font-size:13px;margin:4px 0 6px}
.sw{display:inline-block;width:12px;height:12px;border-radius:2px;vertical-align:-1px;
 margin-right:6px}
.sw.dash{height:0;width:16px;border-radius:0;border-top:2px dashed;vertical-align:3px}
.sw.hatch{background:repeating-linear-gradient(45deg,#fff 0 2px,#b91c1c 2px 4px)}
svg{display:block;max-width:100%;height:auto}
svg text{font-size:11px;fill:#6b7280}
svg text.cord{fill:#b91c1c;font-weight:600}
svg text.empty{font-size:14px;fill:#9ca3af}
.grid{stroke:#eef0f3;stroke-width:1}
.axis{stroke:#9ca3af;stroke-width:1}
.hov{fill:transparent}
.hov:hover{fill:rgba(31,41,55,.07)}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{padding:4px 8px;border-bottom:1px solid #f0f1f3;text-align:left;vertical-align:top}
th{color:#4b5563;font-weight:600;border-bottom-color:#e5e7eb}
.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px;
 word-break:break-all}
svg.bar{display:inline-block;vertical-align:middle}
.hbar{background:#f1f5f9;border-radius:2px;height:10px;width:160px;display:inline-block}
.hbar span{display:block;height:10px;border-radius:2px;background:#f59e0b}
footer{color:#9ca3af;font-size:12px;text-align:center}
";

/// Renders `r` as one self-contained HTML document.
pub fn render_html(r: &SimReport) -> String {
    let mut h = String::with_capacity(64 * 1024);
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    h.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    let _ = writeln!(
        h,
        "<title>Kestrel report: {} ({})</title>",
        esc(&r.scenario),
        esc(&r.policy)
    );
    let _ = writeln!(h, "<style>{STYLE}</style>\n</head>\n<body>\n<main>");
    header(&mut h, r);
    timelines(&mut h, r);
    latency(&mut h, r);
    section(
        &mut h,
        "GPU use per node at the end",
        "One row per node, one cell per GPU, shaded by the thousandths allocated. Hover a cell \
         for its value.",
        &heat_map(&r.node_usage),
    );
    pending_reasons(&mut h, r);
    pending_at_end(&mut h, r);
    let _ = writeln!(
        h,
        "<footer>Kestrel simulation report &middot; scenario {} &middot; policy {} &middot; seed {}\
         </footer>\n</main>\n</body>\n</html>",
        esc(&r.scenario),
        esc(&r.policy),
        r.seed
    );
    h
}

/// Title, run parameters and the key-figure cards.
fn header(h: &mut String, r: &SimReport) {
    let name = |s: &str| {
        if s.is_empty() {
            "-".to_string()
        } else {
            esc(s)
        }
    };
    let _ = writeln!(
        h,
        "<header>\n<h1>Kestrel simulation report</h1>\n<p class=\"meta\">Scenario <b>{}</b> \
         &middot; policy <b>{}</b> &middot; seed <b>{}</b> &middot; {} nodes &middot; {} GPUs \
         &middot; simulated {} &middot; {} scheduling cycles &middot; {} bindings</p>\n</header>",
        name(&r.scenario),
        name(&r.policy),
        r.seed,
        r.nodes,
        r.gpus,
        format_duration(r.span),
        r.cycles,
        r.bindings
    );
    let wait = &r.queue_wait;
    let cards = [
        (
            "GPU allocation",
            fmt_pct(r.gpu_allocation_mean),
            "time-weighted mean".to_string(),
            false,
        ),
        (
            "GPU utilization",
            fmt_pct(r.gpu_utilization_mean),
            "time-weighted mean".to_string(),
            false,
        ),
        (
            "GPU fragmentation",
            fmt_pct(r.gpu_fragmentation_mean),
            "of free GPUs, time-weighted".to_string(),
            false,
        ),
        (
            "Queue wait p95",
            pct_secs(wait, wait.p95),
            format!(
                "p50 {} &middot; p99 {}",
                pct_secs(wait, wait.p50),
                pct_secs(wait, wait.p99)
            ),
            false,
        ),
        (
            "Jobs completed",
            r.jobs.completed.to_string(),
            format!("of {} submitted", r.jobs.submitted),
            false,
        ),
        (
            "Pending at end",
            r.pods.pending_at_end.to_string(),
            format!("pods; {} running", r.pods.running_at_end),
            r.pods.pending_at_end > 0,
        ),
    ];
    h.push_str("<div class=\"cards\">\n");
    for (label, value, sub, warn) in cards {
        let _ = writeln!(
            h,
            "<div class=\"card{}\"><div class=\"l\">{label}</div><div class=\"v\">{value}</div>\
             <div class=\"s\">{sub}</div></div>",
            if warn { " warn" } else { "" }
        );
    }
    h.push_str("</div>\n");
}

/// A titled section with an explanatory note and a body of HTML.
fn section(h: &mut String, title: &str, note: &str, body: &str) {
    let _ = writeln!(
        h,
        "<section>\n<h2>{}</h2>\n<p class=\"note\">{}</p>\n{body}</section>",
        esc(title),
        esc(note)
    );
}

/// The time-series charts of GPUs, pods, fragmentation and CPU.
fn timelines(h: &mut String, r: &SimReport) {
    let s = &r.samples;
    let times: Vec<Millis> = s.iter().map(|x| x.at).collect();
    let x_max = s.last().map_or(0, |x| x.at).max(r.span);
    let col = |f: &dyn Fn(&crate::metrics::Sample) -> f64| s.iter().map(f).collect::<Vec<f64>>();
    let chart = |label: &str, unit: Unit, series: Vec<Series>| {
        time_chart(&TimeChart {
            label,
            times: &times,
            x_max,
            unit,
            stacked: false,
            series,
        })
    };

    let gpus = chart(
        "GPUs over time",
        Unit::Gpus,
        vec![
            Series::new(
                "Total",
                "#6b7280",
                Style::Dashed,
                col(&|x| x.gpus_allocated + x.gpus_free),
            ),
            Series::new(
                "Allocated",
                "#2563eb",
                Style::Area,
                col(&|x| x.gpus_allocated),
            ),
            Series::new(
                "Utilized",
                "#16a34a",
                Style::Area,
                col(&|x| x.gpus_utilized),
            ),
        ],
    );
    section(
        h,
        "GPUs: allocated, utilized and total",
        "Total is allocated plus free GPUs at each sample; shared GPUs count as fractions. \
         Utilized is allocation times each pod's utilization.",
        &gpus,
    );

    let pods = chart(
        "Pods over time",
        Unit::Pods,
        vec![
            Series::new(
                "Running",
                "#2563eb",
                Style::Area,
                col(&|x| f64::from(x.pods_running)),
            ),
            Series::new(
                "Pending",
                "#f59e0b",
                Style::Area,
                col(&|x| f64::from(x.pods_pending)),
            ),
        ],
    );
    section(
        h,
        "Pods: pending and running",
        "Pods at each sample.",
        &pods,
    );

    let frag = chart(
        "Free and fragmented GPUs over time",
        Unit::Gpus,
        vec![
            Series::new("Free", "#9ca3af", Style::Area, col(&|x| x.gpus_free)),
            Series::new(
                "Fragmented",
                "#dc2626",
                Style::Area,
                col(&|x| x.gpus_fragmented),
            ),
        ],
    );
    section(
        h,
        "GPUs: free and fragmented",
        "Fragmented: free whole GPUs that no pending pod can use, on nodes where none of them \
         fits.",
        &frag,
    );

    let cpu = chart(
        "CPU allocated over time",
        Unit::Percent,
        vec![Series::new(
            "CPU allocated",
            "#7c3aed",
            Style::Area,
            col(&|x| x.cpu_allocated * 100.0),
        )],
    );
    section(
        h,
        "CPU allocated",
        "CPU requested by bound pods over allocatable CPU of all nodes.",
        &cpu,
    );
}

/// Queue wait and completion time: overall, per priority and per namespace.
fn latency(h: &mut String, r: &SimReport) {
    let mut body = String::from(
        "<table>\n<thead><tr><th></th><th class=\"n\">Count</th><th class=\"n\">Mean</th>\
         <th class=\"n\">p50</th><th class=\"n\">p95</th><th class=\"n\">p99</th>\
         <th class=\"n\">Max</th></tr></thead>\n<tbody>\n",
    );
    for (label, p) in [
        ("Queue wait (pod arrival to bind)", &r.queue_wait),
        (
            "Job completion time (arrival to last pod done)",
            &r.completion_time,
        ),
    ] {
        let _ = writeln!(
            body,
            "<tr><td>{label}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td></tr>",
            p.count,
            pct_secs(p, p.mean),
            pct_secs(p, p.p50),
            pct_secs(p, p.p95),
            pct_secs(p, p.p99),
            pct_secs(p, p.max)
        );
    }
    body.push_str("</tbody>\n</table>\n");
    body.push_str(
        "<div class=\"legend\"><span><i class=\"sw\" style=\"background:#1d4ed8\"></i>wait p50\
         </span><span><i class=\"sw\" style=\"background:#60a5fa\"></i>wait p95</span><span>\
         <i class=\"sw\" style=\"background:#bfdbfe\"></i>wait p99</span></div>\n",
    );
    body.push_str("<h3>By priority</h3>\n");
    body.push_str(&group_table("Priority", &r.by_priority));
    body.push_str("<h3>By namespace</h3>\n");
    body.push_str(&group_table("Namespace", &r.by_namespace));
    section(
        h,
        "Queue wait and job completion time",
        "Bars compare queue-wait percentiles between the groups of one table (scaled to the \
         largest p99). JCT: job completion time.",
        &body,
    );
}

/// Width of the wait bars in the group tables.
const BAR_W: f64 = 220.0;

/// A table of per-group percentiles with a bar of the wait percentiles per row.
fn group_table(what: &str, groups: &[GroupStats]) -> String {
    if groups.is_empty() {
        return "<p class=\"note\">No data.</p>\n".to_string();
    }
    let scale = groups
        .iter()
        .map(|g| fin(g.queue_wait.p99).max(fin(g.queue_wait.p95)))
        .fold(0.0, f64::max);
    let bar = |v: f64| {
        if scale > 0.0 {
            (fin(v) / scale).clamp(0.0, 1.0) * BAR_W
        } else {
            0.0
        }
    };
    let mut o = format!(
        "<table>\n<thead><tr><th>{what}</th><th class=\"n\">Pods</th><th class=\"n\">Wait p50</th>\
         <th class=\"n\">p95</th><th class=\"n\">p99</th><th>Wait p50 / p95 / p99</th>\
         <th class=\"n\">Jobs</th><th class=\"n\">JCT p50</th><th class=\"n\">p95</th>\
         <th class=\"n\">p99</th></tr></thead>\n<tbody>\n"
    );
    for g in groups {
        let (w, c) = (&g.queue_wait, &g.completion_time);
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td><svg class=\"bar\" viewBox=\"0 0 {BAR_W} 12\" \
             width=\"{BAR_W}\" height=\"12\"><title>{}: wait p50 {}, p95 {}, p99 {}</title>\
             <rect width=\"{BAR_W}\" height=\"12\" rx=\"2\" fill=\"#f1f5f9\"/>\
             <rect width=\"{:.1}\" height=\"12\" rx=\"2\" fill=\"#bfdbfe\"/>\
             <rect width=\"{:.1}\" height=\"12\" rx=\"2\" fill=\"#60a5fa\"/>\
             <rect width=\"{:.1}\" height=\"12\" rx=\"2\" fill=\"#1d4ed8\"/></svg></td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td></tr>",
            esc(&g.group),
            w.count,
            pct_secs(w, w.p50),
            pct_secs(w, w.p95),
            pct_secs(w, w.p99),
            esc(&g.group),
            pct_secs(w, w.p50),
            pct_secs(w, w.p95),
            pct_secs(w, w.p99),
            bar(w.p99),
            bar(w.p95),
            bar(w.p50),
            c.count,
            pct_secs(c, c.p50),
            pct_secs(c, c.p95),
            pct_secs(c, c.p99)
        );
    }
    o.push_str("</tbody>\n</table>\n");
    o
}

/// Reasons shown as their own band in the reasons chart; the rest are "other".
const REASON_BANDS: usize = 8;
const REASON_COLORS: [&str; REASON_BANDS] = [
    "#2563eb", "#f59e0b", "#dc2626", "#16a34a", "#9333ea", "#0891b2", "#db2777", "#65a30d",
];
/// Rows of the reason totals table.
const REASON_ROWS: usize = 15;

/// Sampled top pending reasons over time (stacked) and the totals over the run.
fn pending_reasons(h: &mut String, r: &SimReport) {
    let mut sampled: BTreeMap<&str, u64> = BTreeMap::new();
    for s in &r.samples {
        for (reason, n) in &s.top_pending_reasons {
            *sampled.entry(reason.as_str()).or_default() += u64::from(*n);
        }
    }
    let mut ranked: Vec<(&str, u64)> = sampled.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let mut body = String::new();
    if ranked.is_empty() {
        body.push_str("<p class=\"note\">No pending pods were sampled.</p>\n");
    } else {
        let bands: Vec<&str> = ranked.iter().take(REASON_BANDS).map(|x| x.0).collect();
        let mut series: Vec<Series> = bands
            .iter()
            .zip(REASON_COLORS)
            .map(|(reason, color)| {
                let values = r
                    .samples
                    .iter()
                    .map(|s| {
                        s.top_pending_reasons
                            .iter()
                            .filter(|(x, _)| x == reason)
                            .map(|(_, n)| f64::from(*n))
                            .sum()
                    })
                    .collect();
                Series::new(reason, color, Style::Area, values)
            })
            .collect();
        if ranked.len() > REASON_BANDS {
            let other = r
                .samples
                .iter()
                .map(|s| {
                    s.top_pending_reasons
                        .iter()
                        .filter(|(x, _)| !bands.contains(&x.as_str()))
                        .map(|(_, n)| f64::from(*n))
                        .sum()
                })
                .collect();
            series.push(Series::new("other", "#9ca3af", Style::Area, other));
        }
        let times: Vec<Millis> = r.samples.iter().map(|s| s.at).collect();
        body.push_str(&time_chart(&TimeChart {
            label: "Pending pods by reason over time",
            times: &times,
            x_max: times.last().copied().unwrap_or(0).max(r.span),
            unit: Unit::Pods,
            stacked: true,
            series,
        }));
    }

    body.push_str("<h3>Totals over all samples</h3>\n");
    if r.pending_reasons.is_empty() {
        body.push_str("<p class=\"note\">No pending reasons recorded.</p>\n");
    } else {
        let total: u64 = r.pending_reasons.iter().map(|x| x.1).sum();
        body.push_str(
            "<table>\n<thead><tr><th>Reason</th><th class=\"n\">Pod-samples</th>\
             <th class=\"n\">Share</th><th></th></tr></thead>\n<tbody>\n",
        );
        for (reason, n) in r.pending_reasons.iter().take(REASON_ROWS) {
            let share = if total > 0 {
                *n as f64 / total as f64
            } else {
                0.0
            };
            let _ = writeln!(
                body,
                "<tr><td>{}</td><td class=\"n\">{n}</td><td class=\"n\">{}</td><td>\
                 <span class=\"hbar\"><span style=\"width:{:.1}%\"></span></span></td></tr>",
                esc(reason),
                fmt_pct(share),
                share * 100.0
            );
        }
        body.push_str("</tbody>\n</table>\n");
        if r.pending_reasons.len() > REASON_ROWS {
            let _ = writeln!(
                body,
                "<p class=\"note\">&hellip; and {} more reasons.</p>",
                r.pending_reasons.len() - REASON_ROWS
            );
        }
    }
    section(
        h,
        "Why pods were pending",
        "The chart stacks the most common reasons of each sample (at most five are recorded \
         per sample); the table counts every pending pod at every sample.",
        &body,
    );
}

/// Pending-at-end rows listed before "and N more".
const PENDING_ROWS: usize = 200;

/// The pods still pending when the run ended, with their reasons.
fn pending_at_end(h: &mut String, r: &SimReport) {
    let mut body = String::new();
    if r.pending_at_end.is_empty() {
        body.push_str("<p class=\"note\">Every pod was scheduled.</p>\n");
    } else {
        body.push_str(
            "<table>\n<thead><tr><th>Pod</th><th class=\"n\">Priority</th>\
             <th class=\"n\">Waiting</th><th>Reason</th></tr></thead>\n<tbody>\n",
        );
        for p in r.pending_at_end.iter().take(PENDING_ROWS) {
            let _ = writeln!(
                body,
                "<tr><td class=\"mono\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
                 <td>{}</td></tr>",
                esc(&p.pod),
                p.priority,
                fmt_seconds(p.waiting_seconds),
                esc(&p.reason)
            );
        }
        body.push_str("</tbody>\n</table>\n");
        if r.pending_at_end.len() > PENDING_ROWS {
            let _ = writeln!(
                body,
                "<p class=\"note\">&hellip; and {} more.</p>",
                r.pending_at_end.len() - PENDING_ROWS
            );
        }
    }
    section(
        h,
        &format!("Pending at the end ({} pods)", r.pending_at_end.len()),
        "Pods never bound, or requeued and not bound again, when the simulation stopped.",
        &body,
    );
}

// ---------------------------------------------------------------------------------------
// Time-series chart

const CHART_W: f64 = 960.0;
const CHART_H: f64 = 250.0;
const MARGIN_L: f64 = 56.0;
const MARGIN_R: f64 = 18.0;
const MARGIN_T: f64 = 12.0;
const MARGIN_B: f64 = 30.0;
/// Points drawn per series; longer series are averaged over buckets of samples.
const MAX_POINTS: usize = 720;

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    /// A line over a light fill down to zero (or a band, in a stacked chart).
    Area,
    /// A dashed line.
    Dashed,
}

/// What the y axis counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Gpus,
    /// Whole pods: ticks at integers.
    Pods,
    /// 0..=100, with a `%` suffix.
    Percent,
}

impl Unit {
    fn value(self, v: f64) -> String {
        match self {
            Unit::Gpus => format!("{v:.1}"),
            Unit::Pods if v.fract() == 0.0 => format!("{v:.0}"),
            Unit::Pods => format!("{v:.1}"),
            Unit::Percent => format!("{v:.1}%"),
        }
    }
}

struct Series {
    name: String,
    color: &'static str,
    style: Style,
    /// One value per sample time.
    values: Vec<f64>,
}

impl Series {
    fn new(name: &str, color: &'static str, style: Style, values: Vec<f64>) -> Series {
        Series {
            name: name.to_string(),
            color,
            style,
            values,
        }
    }
}

struct TimeChart<'a> {
    /// Accessible name of the chart.
    label: &'a str,
    /// Sample times, ascending.
    times: &'a [Millis],
    /// End of the time axis.
    x_max: Millis,
    unit: Unit,
    /// Stack the series as bands (their sum is the top line) instead of overlaying them.
    stacked: bool,
    series: Vec<Series>,
}

/// One SVG line/area chart over simulated time, with its legend, axes, ticks and a hover
/// tooltip per sample. Every time-series chart in the report is drawn by this function.
fn time_chart(c: &TimeChart) -> String {
    let mut o = String::from("<div class=\"legend\">");
    for s in &c.series {
        let swatch = if s.style == Style::Dashed {
            format!(
                "<i class=\"sw dash\" style=\"border-color:{}\"></i>",
                s.color
            )
        } else {
            format!("<i class=\"sw\" style=\"background:{}\"></i>", s.color)
        };
        let _ = write!(
            o,
            "<span title=\"{}\">{swatch}{}</span>",
            esc(&s.name),
            esc(&clip(&s.name, 70))
        );
    }
    o.push_str("</div>\n");

    let (xs, cols) = downsample(c.times, &c.series);
    let n = xs.len();
    // Each series is drawn between a lower and an upper line: zero and its values, or the
    // running sums below and including it when stacked.
    let mut lower = Vec::with_capacity(cols.len());
    let mut upper = Vec::with_capacity(cols.len());
    let mut acc = vec![0.0; n];
    for col in &cols {
        if c.stacked {
            lower.push(acc.clone());
            acc.iter_mut().zip(col).for_each(|(a, v)| *a += v);
            upper.push(acc.clone());
        } else {
            lower.push(vec![0.0; n]);
            upper.push(col.clone());
        }
    }
    let data_max = upper.iter().flatten().copied().fold(0.0, f64::max);
    let wanted = if c.unit == Unit::Percent {
        data_max.max(100.0)
    } else {
        data_max
    };
    let (y_step, y_top) = y_scale(wanted, c.unit == Unit::Pods);
    let x_max = (c.x_max as f64)
        .max(xs.last().copied().unwrap_or(0.0))
        .max(1.0);
    let plot_w = CHART_W - MARGIN_L - MARGIN_R;
    let plot_h = CHART_H - MARGIN_T - MARGIN_B;
    let bottom = MARGIN_T + plot_h;
    let px = |t: f64| MARGIN_L + fin(t / x_max).clamp(0.0, 1.0) * plot_w;
    let py = |v: f64| bottom - fin(v / y_top).clamp(0.0, 1.0) * plot_h;

    let _ = writeln!(
        o,
        "<svg viewBox=\"0 0 {CHART_W} {CHART_H}\" role=\"img\" aria-label=\"{}\">",
        esc(c.label)
    );
    // Horizontal grid and y ticks.
    let decimals = if y_step >= 1.0 {
        0
    } else {
        (-y_step.log10()).ceil() as usize
    };
    let suffix = if c.unit == Unit::Percent { "%" } else { "" };
    let y_ticks = (y_top / y_step).round() as usize;
    for k in 0..=y_ticks {
        let v = k as f64 * y_step;
        let y = py(v);
        let _ = writeln!(
            o,
            "<line class=\"grid\" x1=\"{MARGIN_L}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{v:.decimals$}{suffix}</text>",
            CHART_W - MARGIN_R,
            MARGIN_L - 6.0,
            y + 4.0
        );
    }
    // Time ticks.
    let x_step = time_step(x_max as u64);
    let mut t = 0u64;
    while t as f64 <= x_max {
        let x = px(t as f64);
        let _ = writeln!(
            o,
            "<line class=\"grid\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{MARGIN_T}\" \
             y2=\"{bottom:.1}\"/>\
             <line class=\"axis\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{bottom:.1}\" y2=\"{:.1}\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            bottom + 4.0,
            bottom + 17.0,
            time_label(t)
        );
        t += x_step;
    }
    let _ = writeln!(
        o,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">simulated time</text>",
        CHART_W - MARGIN_R,
        CHART_H - 1.0
    );

    // Series: fills first, then lines on top of them.
    let point = |j: usize, v: f64| format!("{:.1},{:.1}", px(xs[j]), py(v));
    if n > 1 {
        for (i, s) in c.series.iter().enumerate() {
            if s.style != Style::Area {
                continue;
            }
            let top: Vec<String> = (0..n).map(|j| point(j, upper[i][j])).collect();
            let base: Vec<String> = (0..n).rev().map(|j| point(j, lower[i][j])).collect();
            let _ = writeln!(
                o,
                "<polygon points=\"{} {}\" fill=\"{}\" fill-opacity=\"{}\" stroke=\"none\"/>",
                top.join(" "),
                base.join(" "),
                s.color,
                if c.stacked { "0.7" } else { "0.14" }
            );
        }
        for (i, s) in c.series.iter().enumerate() {
            if c.stacked && s.style == Style::Area {
                continue;
            }
            let line: Vec<String> = (0..n).map(|j| point(j, upper[i][j])).collect();
            let _ = writeln!(
                o,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" \
                 stroke-linejoin=\"round\"{}/>",
                line.join(" "),
                s.color,
                if s.style == Style::Dashed {
                    " stroke-dasharray=\"6 4\""
                } else {
                    ""
                }
            );
        }
    } else if n == 1 {
        for (i, s) in c.series.iter().enumerate() {
            let _ = writeln!(
                o,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{}\"/>",
                px(xs[0]),
                py(upper[i][0]),
                s.color
            );
        }
    } else {
        let _ = writeln!(
            o,
            "<text class=\"empty\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">\
             No samples recorded</text>",
            MARGIN_L + plot_w / 2.0,
            MARGIN_T + plot_h / 2.0
        );
    }
    let _ = writeln!(
        o,
        "<line class=\"axis\" x1=\"{MARGIN_L}\" x2=\"{:.1}\" y1=\"{bottom:.1}\" \
         y2=\"{bottom:.1}\"/>\
         <line class=\"axis\" x1=\"{MARGIN_L}\" x2=\"{MARGIN_L}\" y1=\"{MARGIN_T}\" \
         y2=\"{bottom:.1}\"/>",
        CHART_W - MARGIN_R
    );

    // Hover strips: one per point, reaching halfway to its neighbours.
    for j in 0..n {
        let left = if j == 0 {
            MARGIN_L
        } else {
            (px(xs[j - 1]) + px(xs[j])) / 2.0
        };
        let right = if j + 1 == n {
            CHART_W - MARGIN_R
        } else {
            (px(xs[j]) + px(xs[j + 1])) / 2.0
        };
        let mut tip = format_duration(xs[j].round() as Millis);
        for (i, s) in c.series.iter().enumerate() {
            if c.stacked && cols[i][j] == 0.0 {
                continue;
            }
            let _ = write!(tip, "\n{}: {}", clip(&s.name, 80), c.unit.value(cols[i][j]));
        }
        let _ = writeln!(
            o,
            "<rect class=\"hov\" x=\"{left:.1}\" y=\"{MARGIN_T}\" width=\"{:.1}\" \
             height=\"{plot_h:.1}\"><title>{}</title></rect>",
            (right - left).max(0.0),
            esc(&tip)
        );
    }
    o.push_str("</svg>\n");
    o
}

/// Averages the series over buckets so that at most [`MAX_POINTS`] remain. Returns the
/// bucket times (mean sample time) and one column of finite values per series.
fn downsample(times: &[Millis], series: &[Series]) -> (Vec<f64>, Vec<Vec<f64>>) {
    let n = times.len();
    let k = n.div_ceil(MAX_POINTS).max(1);
    let mean = |range: std::ops::Range<usize>, f: &dyn Fn(usize) -> f64| {
        let len = range.len() as f64;
        range.map(f).sum::<f64>() / len
    };
    let buckets: Vec<std::ops::Range<usize>> =
        (0..n).step_by(k).map(|a| a..(a + k).min(n)).collect();
    let xs = buckets
        .iter()
        .map(|b| mean(b.clone(), &|i| times[i] as f64))
        .collect();
    let cols = series
        .iter()
        .map(|s| {
            buckets
                .iter()
                .map(|b| mean(b.clone(), &|i| fin(s.values.get(i).copied().unwrap_or(0.0))))
                .collect()
        })
        .collect();
    (xs, cols)
}

/// A "nice" tick step (1, 2 or 5 times a power of ten) for about five ticks up to `max`,
/// and the axis top (a multiple of the step, at least `max`). Integer axes step by 1 or
/// more. Zero, negative and non-finite maxima give an axis of 0..=1.
fn y_scale(max: f64, integer: bool) -> (f64, f64) {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let nice = match raw / mag {
        x if x <= 1.0 => 1.0,
        x if x <= 2.0 => 2.0,
        x if x <= 5.0 => 5.0,
        _ => 10.0,
    };
    let mut step = nice * mag;
    if integer {
        step = step.max(1.0);
    }
    let top = ((max / step) - 1e-9).ceil().max(1.0) * step;
    (step, top)
}

/// Time tick steps, smallest first: at most eight steps fit the axis.
const TIME_STEPS: [Millis; 18] = [
    1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000, 600_000, 900_000,
    1_800_000, 3_600_000, 7_200_000, 10_800_000, 21_600_000, 43_200_000, 86_400_000,
];

/// The tick step of a time axis from 0 to `x_max` ms.
fn time_step(x_max: Millis) -> Millis {
    const DAY: Millis = 86_400_000;
    TIME_STEPS
        .iter()
        .copied()
        .find(|s| x_max / s <= 8)
        .unwrap_or_else(|| x_max.div_ceil(8 * DAY) * DAY)
}

/// A tick label: `0`, `45s`, `1m30s`, `30m`, `2h`, `1h30m`, `2d`.
fn time_label(ms: Millis) -> String {
    let s = ms / 1000;
    let (h, m, sec) = (s / 3600, (s / 60) % 60, s % 60);
    match (h, m, sec) {
        (0, 0, 0) => "0".to_string(),
        (h, 0, 0) if h % 24 == 0 => format!("{}d", h / 24),
        (h, 0, 0) => format!("{h}h"),
        (h, m, 0) if h > 0 => format!("{h}h{m:02}m"),
        (0, m, 0) => format!("{m}m"),
        (0, 0, sec) => format!("{sec}s"),
        (h, m, sec) => format!("{}m{sec:02}s", h * 60 + m),
    }
}

// ---------------------------------------------------------------------------------------
// Small helpers

/// `s` escaped for HTML text and attribute values.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

/// `x`, or 0 when it is NaN or infinite.
fn fin(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        0.0
    }
}

/// A percentile of `p` as a duration; "-" when it measured nothing.
fn pct_secs(p: &Percentiles, seconds: f64) -> String {
    if p.count == 0 {
        "-".to_string()
    } else {
        fmt_seconds(seconds)
    }
}

#[cfg(test)]
mod tests;
