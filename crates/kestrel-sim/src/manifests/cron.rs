//! A CronJob's schedule in the simulator: the standard five fields (minute, hour, day of
//! month, month, day of week) with `*`, lists, ranges and steps, and the macros
//! (`@hourly`, `@daily`, `@midnight`, `@weekly`, `@monthly`, `@yearly`, `@annually`).
//!
//! Simulated time 0 is Monday 2024-01-01 00:00 (the schedule's time zone): a schedule's
//! fire times are its minutes from then.

use kestrel_core::Millis;

const MINUTE: Millis = 60_000;

/// A parsed schedule: per field, which values fire.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    minutes: Vec<bool>,
    hours: Vec<bool>,
    days: Vec<bool>,
    months: Vec<bool>,
    weekdays: Vec<bool>,
    /// Both day fields restricted: a day matches either (cron's rule).
    either_day: bool,
}

/// Reads a schedule, or says which field is wrong and how.
pub fn parse(text: &str) -> Result<Schedule, String> {
    let text = text.trim();
    let expanded = match text {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        other if other.starts_with('@') => {
            return Err(format!(
                "{other:?} is not a schedule macro; write @hourly, @daily, @weekly, @monthly or \
                 @yearly, or five fields"
            ))
        }
        other => other,
    };
    let fields: Vec<&str> = expanded.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "{text:?} has {} fields; a schedule has five: minute hour day-of-month month \
             day-of-week (\"*/30 * * * *\")",
            fields.len()
        ));
    }
    let field = |i: usize, name: &str, low: u32, high: u32| {
        values(fields[i], low, high).map_err(|why| format!("{name} field {:?}: {why}", fields[i]))
    };
    let mut weekdays = field(4, "day-of-week", 0, 7)?;
    // 7 is Sunday too.
    if weekdays[7] {
        weekdays[0] = true;
    }
    weekdays.truncate(7);
    Ok(Schedule {
        minutes: field(0, "minute", 0, 59)?,
        hours: field(1, "hour", 0, 23)?,
        days: field(2, "day-of-month", 1, 31)?,
        months: field(3, "month", 1, 12)?,
        weekdays,
        either_day: fields[2] != "*" && fields[4] != "*",
    })
}

/// The values one field selects, as flags indexed by value.
fn values(text: &str, low: u32, high: u32) -> Result<Vec<bool>, String> {
    let mut out = vec![false; high as usize + 1];
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("step {s:?} is not a whole number above 0"))?;
                (r, step)
            }
            None => (part, 1),
        };
        let number = |s: &str| -> Result<u32, String> {
            let n: u32 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
            if n < low || n > high {
                return Err(format!("{n} is outside {low}-{high}"));
            }
            Ok(n)
        };
        let (from, to) = match range {
            "*" => (low, high),
            r => match r.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                // `5/15`: from 5 to the end, every 15.
                None if part.contains('/') => (number(r)?, high),
                None => {
                    let n = number(r)?;
                    (n, n)
                }
            },
        };
        if from > to {
            return Err(format!("range {from}-{to} runs backwards"));
        }
        let mut v = from;
        while v <= to {
            out[v as usize] = true;
            v += step;
        }
    }
    Ok(out)
}

/// The civil date of `days` after 2024-01-01: (year, month 1-12, day 1-31).
fn date(days: i64) -> (i64, u32, u32) {
    // Days since 1970-01-01, then Howard Hinnant's civil-from-days.
    let z = days + 19_723 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

impl Schedule {
    /// Whether the schedule fires at the minute `minute` after time 0.
    fn fires(&self, minute: i64) -> bool {
        let in_day = minute.rem_euclid(1_440);
        let days = minute.div_euclid(1_440);
        if !self.minutes[(in_day % 60) as usize] || !self.hours[(in_day / 60) as usize] {
            return false;
        }
        let (_, month, day) = date(days);
        if !self.months[month as usize] {
            return false;
        }
        // Time 0 is a Monday (1).
        let weekday = (days + 1).rem_euclid(7) as usize;
        let (by_day, by_weekday) = (self.days[day as usize], self.weekdays[weekday]);
        if self.either_day {
            by_day || by_weekday
        } else {
            by_day && by_weekday
        }
    }

    /// Its fire times in `[from, until)`, at most `most` of them.
    pub fn fire_times(&self, from: Millis, until: Millis, most: usize) -> Vec<Millis> {
        let mut out = Vec::new();
        let mut minute = from.div_ceil(MINUTE) as i64;
        while (minute as Millis) * MINUTE < until && out.len() < most {
            if self.fires(minute) {
                out.push(minute as Millis * MINUTE);
            }
            minute += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Millis = 60 * MINUTE;
    const DAY: Millis = 24 * HOUR;

    #[test]
    fn fields_steps_ranges_and_macros_fire_where_cron_does() {
        let every_30 = parse("*/30 * * * *").unwrap();
        assert_eq!(
            every_30.fire_times(0, 2 * HOUR, 100),
            [0, 30 * MINUTE, HOUR, 90 * MINUTE]
        );
        let weekdays_at_9 = parse("0 9 * * 1-5").unwrap();
        // Time 0 is a Monday: five mornings in the first week, none on the weekend.
        let week = weekdays_at_9.fire_times(0, 7 * DAY, 100);
        assert_eq!(week.len(), 5);
        assert_eq!(week[0], 9 * HOUR);
        assert_eq!(week[4], 4 * DAY + 9 * HOUR);
        // Sunday as 0 and as 7.
        for sunday in ["0 0 * * 0", "0 0 * * 7", "@weekly"] {
            assert_eq!(
                parse(sunday).unwrap().fire_times(0, 7 * DAY, 10),
                [6 * DAY],
                "{sunday}"
            );
        }
        // The first of February 2024 is day 31.
        assert_eq!(
            parse("@monthly").unwrap().fire_times(1, 40 * DAY, 10),
            [31 * DAY]
        );
        assert_eq!(
            parse("15,45 1 * * *").unwrap().fire_times(0, DAY, 10),
            [75 * MINUTE, 105 * MINUTE]
        );
        // Both day fields: either matches (the 2nd, or any Sunday).
        let either = parse("0 0 2 * 0").unwrap().fire_times(0, 8 * DAY, 10);
        assert_eq!(either, [DAY, 6 * DAY]);
        assert_eq!(parse("@hourly").unwrap().fire_times(0, DAY, 100).len(), 24);
        assert_eq!(
            parse("*/30 * * * *").unwrap().fire_times(0, DAY, 3).len(),
            3
        );
    }

    #[test]
    fn bad_schedules_name_the_field_and_the_fix() {
        for (text, want) in [
            ("* * * *", "has 4 fields"),
            ("61 * * * *", "minute field \"61\": 61 is outside 0-59"),
            (
                "* 5-2 * * *",
                "hour field \"5-2\": range 5-2 runs backwards",
            ),
            ("*/0 * * * *", "step \"0\""),
            ("@often", "not a schedule macro"),
            ("* * * 13 *", "month field"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
