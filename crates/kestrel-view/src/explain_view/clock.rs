//! Moments as clock times: from the start of a run, or UTC wall-clock times for a live
//! cluster's state.

use kestrel_core::Millis;
use std::sync::atomic::{AtomicI64, Ordering};

/// A moment as a clock time from the start (`10:00`, `26:30`, `09:05:30`), the form
/// `--at` accepts.
pub fn clock(ms: Millis) -> String {
    let origin = WALL_ORIGIN.load(Ordering::Relaxed);
    if origin != NO_WALL_ORIGIN {
        return wall_clock(origin + ms as i64);
    }
    let secs = ms / 1000;
    let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
    if s == 0 && ms.is_multiple_of(1000) {
        format!("{h:02}:{m:02}")
    } else if ms.is_multiple_of(1000) {
        format!("{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}.{:03}", ms % 1000)
    }
}

/// Unset: times are shown from the start of the run.
const NO_WALL_ORIGIN: i64 = i64::MIN;

/// The wall-clock time (Unix ms) of moment 0, when the state shown is a live cluster's.
static WALL_ORIGIN: AtomicI64 = AtomicI64::new(NO_WALL_ORIGIN);

/// Shows moments as UTC wall-clock times, moment 0 being `unix_ms` (a live cluster's state;
/// a simulated run's moments are shown from its start). For the whole process: one CLI
/// command shows one state.
pub fn show_wall_clock(unix_ms: i64) {
    WALL_ORIGIN.store(unix_ms, Ordering::Relaxed);
}

/// `2026-11-30 17:52:10Z` (seconds only when not zero).
fn wall_clock(unix_ms: i64) -> String {
    let secs = unix_ms.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + (month <= 2) as i64;
    let (h, m, s) = (rest / 3600, rest / 60 % 60, rest % 60);
    if s == 0 {
        format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}Z")
    } else {
        format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}:{s:02}Z")
    }
}

/// An estimated moment, to the minute (estimates carry no finer meaning).
pub fn clock_approx(ms: Millis) -> String {
    clock((ms + 30_000) / 60_000 * 60_000)
}

pub(super) fn secs(ms: Millis) -> f64 {
    ms as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_clock_times_are_utc_dates() {
        assert_eq!(wall_clock(0), "1970-01-01 00:00Z");
        assert_eq!(wall_clock(1_800_000_000_000), "2027-01-15 08:00Z");
        assert_eq!(wall_clock(951_782_400_000 + 61_000), "2000-02-29 00:01:01Z");
    }

    #[test]
    fn clock_times_read_back_as_durations() {
        assert_eq!(clock(36_000_000), "10:00");
        assert_eq!(clock(93_600_000), "26:00");
        assert_eq!(clock(34_230_000), "09:30:30");
        for t in [0, 36_000_000, 34_230_000] {
            assert_eq!(kestrel_objects::duration::parse_duration(&clock(t)), Ok(t));
        }
    }
}
