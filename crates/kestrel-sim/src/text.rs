//! Numbers and text as the summary table and the HTML report print them.

use kestrel_objects::duration::format_duration;

/// Seconds as a human duration (`4m05s`); "-" for negative or non-finite input.
pub(crate) fn fmt_seconds(seconds: f64) -> String {
    if seconds.is_finite() && seconds >= 0.0 {
        format_duration((seconds * 1000.0).round() as u64)
    } else {
        "-".to_string()
    }
}

/// A 0..=1 fraction as a percentage with one decimal; "-" when not finite.
pub(crate) fn fmt_pct(fraction: f64) -> String {
    if fraction.is_finite() {
        format!("{:.1}%", fraction * 100.0)
    } else {
        "-".to_string()
    }
}

/// `s` cut to at most `max` characters, the cut marked with "...".
pub(crate) fn clip(s: &str, max: usize) -> String {
    // Control characters would break the table's lines.
    let clean: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if clean.chars().count() <= max {
        clean
    } else {
        let keep = max.saturating_sub(3);
        clean.chars().take(keep).chain("...".chars()).collect()
    }
}
