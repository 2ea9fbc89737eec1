//! A small Kubernetes quantity parser of its own (the checker does not trust the engine's):
//! `resource.Quantity` text to milli-units, rounded up as `Quantity.MilliValue()` does.

/// Why a quantity did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantityError {
    pub input: String,
    pub why: &'static str,
}

impl std::fmt::Display for QuantityError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "quantity {:?}: {}", self.input, self.why)
    }
}

impl std::error::Error for QuantityError {}

/// `"500m"` -> 500, `"2"` -> 2000, `"1Gi"` -> 1073741824000, `"1.5k"` -> 1500000,
/// `"1e3"` -> 1000000: the quantity times 1000, rounded up.
pub fn milli(input: &str) -> Result<i128, QuantityError> {
    let err = |why| QuantityError {
        input: input.to_string(),
        why,
    };
    let s = input.trim();
    let (negative, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    if number.is_empty() || number == "." {
        return Err(err("no number"));
    }
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if fraction.contains('.') {
        return Err(err("two decimal points"));
    }
    // mantissa * 10^exp10 * 2^exp2 * 1000, where the mantissa is every digit.
    let digits = format!("{whole}{fraction}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return Err(err("too many digits"));
    }
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| err("not a number"))?
    };
    let mut exp10: i32 = -(fraction.len() as i32) + 3;
    let mut exp2: u32 = 0;
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" => exp2 = 10,
        "Mi" => exp2 = 20,
        "Gi" => exp2 = 30,
        "Ti" => exp2 = 40,
        "Pi" => exp2 = 50,
        "Ei" => exp2 = 60,
        other if other.starts_with(['e', 'E']) => {
            let e: i32 = other[1..].parse().map_err(|_| err("bad exponent"))?;
            if !(-40..=40).contains(&e) {
                return Err(err("exponent out of range"));
            }
            exp10 += e;
        }
        _ => return Err(err("unknown suffix")),
    }
    let too_big = || err("too large");
    let mut value = mantissa.checked_mul(1i128 << exp2).ok_or_else(too_big)?;
    if exp10 >= 0 {
        value = value
            .checked_mul(10i128.checked_pow(exp10 as u32).ok_or_else(too_big)?)
            .ok_or_else(too_big)?;
    } else {
        let divisor = 10i128.checked_pow((-exp10) as u32);
        value = match divisor {
            Some(d) => value.div_euclid(d) + i128::from(value.rem_euclid(d) != 0),
            // Smaller than a milli-unit: rounds up to one (or zero for zero).
            None => i128::from(value != 0),
        };
    }
    Ok(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::milli;

    #[test]
    fn suffixes_and_rounding() {
        assert_eq!(milli("500m").unwrap(), 500);
        assert_eq!(milli("2").unwrap(), 2000);
        assert_eq!(milli("0.1").unwrap(), 100);
        assert_eq!(milli("1.5k").unwrap(), 1_500_000);
        assert_eq!(milli("1Ki").unwrap(), 1_024_000);
        assert_eq!(milli("16Gi").unwrap(), (16i128 << 30) * 1000);
        assert_eq!(milli("1e3").unwrap(), 1_000_000);
        assert_eq!(milli("1E-3").unwrap(), 1);
        assert_eq!(milli("100M").unwrap(), 100_000_000_000);
        assert_eq!(milli("1n").unwrap(), 1, "rounds up to a milli-unit");
        assert_eq!(milli("1500u").unwrap(), 2);
        assert_eq!(milli("0").unwrap(), 0);
        assert_eq!(milli("-1").unwrap(), -1000);
        assert_eq!(milli("8Ei").unwrap(), (8i128 << 60) * 1000);
        for bad in ["", "m", "1x", "1.2.3", "Gi", "1e", "1e99", "--1"] {
            assert!(milli(bad).is_err(), "{bad:?} parsed");
        }
    }
}
