//! Durations as users write them: Go-style (`90s`, `1h30m`, `250ms`), clock-style
//! (`09:30`, `09:30:15`, from the simulation's start) or bare seconds (`5400`, `1.5`).

use kestrel_core::Millis;

/// Parses a duration into milliseconds. The error says what was wrong and shows the forms.
pub fn parse_duration(input: &str) -> Result<Millis, String> {
    let s = input.trim();
    let bad = |why: &str| {
        format!("{why} in duration {input:?}; write e.g. \"90s\", \"1h30m\", \"250ms\", \"09:30\" or \"5400\" (seconds)")
    };
    if s.is_empty() {
        return Err(bad("nothing"));
    }
    if s.contains(':') {
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() > 3
            || parts
                .iter()
                .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(bad("malformed clock time"));
        }
        let nums: Vec<u64> = parts
            .iter()
            .map(|p| p.parse().unwrap_or(u64::MAX))
            .collect();
        if nums[1..].iter().any(|&n| n >= 60) {
            return Err(bad("minutes or seconds of 60 or more"));
        }
        let secs = nums[0] * 3600 + nums[1] * 60 + nums.get(2).copied().unwrap_or(0);
        return Ok(secs * 1000);
    }
    if let Ok(secs) = s.parse::<f64>() {
        if !(secs.is_finite() && secs >= 0.0) {
            return Err(bad("negative or infinite number"));
        }
        return Ok((secs * 1000.0).round() as Millis);
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| bad("a number without a unit"))?;
        if num_len == 0 {
            return Err(bad("a unit without a number"));
        }
        let value: f64 = rest[..num_len]
            .parse()
            .map_err(|_| bad("a malformed number"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit_ms = match &rest[..unit_len] {
            "ms" => 1.0,
            "s" => 1000.0,
            "m" => 60_000.0,
            "h" => 3_600_000.0,
            "d" => 86_400_000.0,
            _ => return Err(bad("an unknown unit (use ms, s, m, h, d)")),
        };
        total += value * unit_ms;
        rest = &rest[unit_len..];
    }
    Ok(total.round() as Millis)
}

/// Formats milliseconds as `1h02m03s`, `4m05s` or `6.5s`.
pub fn format_duration(ms: Millis) -> String {
    let secs = ms / 1000;
    let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
    if h > 0 {
        format!("{h}h{m:02}m{s:02}s")
    } else if m > 0 {
        format!("{m}m{s:02}s")
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        assert_eq!(parse_duration("90s"), Ok(90_000));
        assert_eq!(parse_duration("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration("250ms"), Ok(250));
        assert_eq!(parse_duration("1.5h"), Ok(5_400_000));
        assert_eq!(parse_duration("09:30"), Ok(34_200_000));
        assert_eq!(parse_duration("00:00:15"), Ok(15_000));
        assert_eq!(parse_duration("5400"), Ok(5_400_000));
        assert_eq!(parse_duration("2d"), Ok(172_800_000));
    }

    #[test]
    fn rejects_malformed_durations_with_the_input_named() {
        for bad in ["", "abc", "10x", "h", "1:2:3:4", "10:75", "-5", "5s3"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn formats_readably() {
        assert_eq!(format_duration(3_723_000), "1h02m03s");
        assert_eq!(format_duration(245_000), "4m05s");
        assert_eq!(format_duration(6_500), "6.5s");
    }
}
