//! Kubernetes' `quantity()` library: exact quantities and their CEL functions.

use std::any::Any;
use std::cmp::Ordering;

use cel::common::types::{CelBool, CelDouble, CelInt, CelString, Type};
use cel::common::value::{StaticVal, Val};
use cel::ExecutionError;

/// The Kubernetes quantity `text` (`"40Gi"`, `"500m"`, `"1e3"`) in base units, rounded away
/// from zero to an integer as `Quantity.Value()` does: what [`DeviceView::capacity`] holds.
pub fn parse_quantity(text: &str) -> Result<i64, String> {
    let nanos = parse_nanos(text)?;
    let units = nanos / NANOS + i128::from(nanos % NANOS != 0) * nanos.signum();
    i64::try_from(units).map_err(|_| format!("quantity {text:?} is out of range"))
}

pub(super) const NANOS: i128 = 1_000_000_000;

/// A Kubernetes quantity (`kubernetes.Quantity`), in nano units: Kubernetes keeps quantities
/// exact down to 1n, so `quantity("500m")` and `quantity("1")` stay apart. A type of its own
/// rather than an int, so that `compareTo` and the like pick the quantity overloads and
/// `quantity("1").compareTo(semver("1.0.0"))` is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Quantity(pub(super) i128);

pub(super) static QUANTITY_TYPE: Type = Type::new_unspecified_type("kubernetes.Quantity");

impl Val for Quantity {
    fn get_type(&self) -> &Type {
        &QUANTITY_TYPE
    }

    fn cel_type() -> &'static Type {
        &QUANTITY_TYPE
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<Quantity>() == Some(self)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(*self)
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for Quantity {}

/// `text` as a quantity in nano units, rounded away from zero as Kubernetes' `ParseQuantity`
/// rounds to 1n. Magnitudes past `i128` (about 1.7e29 units) are out of range.
pub(super) fn parse_nanos(text: &str) -> Result<i128, String> {
    let bad = || format!("{text:?} is not a quantity");
    let out_of_range = || format!("quantity {text:?} is out of range");
    let (negative, unsigned) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    fn split_digits(s: &str) -> (&str, &str) {
        s.split_at(s.bytes().take_while(u8::is_ascii_digit).count())
    }
    let (whole, rest) = split_digits(unsigned);
    let (fraction, suffix) = rest.strip_prefix('.').map_or(("", rest), split_digits);
    if whole.is_empty() && fraction.is_empty() {
        return Err(bad());
    }
    let (binary_exponent, decimal_exponent) = match suffix {
        "" => (0, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        _ => match suffix.strip_prefix(['e', 'E']) {
            Some(exponent) => (0, exponent.parse::<i32>().map_err(|_| bad())?),
            None => return Err(bad()),
        },
    };
    let digits = format!("{whole}{fraction}");
    let digits = digits.trim_start_matches('0');
    let mantissa: u128 = match digits {
        "" => 0,
        _ => digits.parse().map_err(|_| out_of_range())?,
    };
    let mantissa = mantissa
        .checked_mul(1 << binary_exponent)
        .ok_or_else(out_of_range)?;
    // The fraction's digits are in the mantissa: shift back by as many places.
    let scale = i64::from(decimal_exponent) + 9 - fraction.len() as i64;
    let magnitude = if scale >= 0 {
        u32::try_from(scale)
            .ok()
            .and_then(|s| 10u128.checked_pow(s))
            .and_then(|p| mantissa.checked_mul(p))
            .ok_or_else(out_of_range)?
    } else {
        match u32::try_from(-scale)
            .ok()
            .and_then(|s| 10u128.checked_pow(s))
        {
            Some(divisor) => mantissa.div_ceil(divisor),
            // Below 1n, which a non-zero quantity rounds up to.
            None => u128::from(mantissa != 0),
        }
    };
    // Kubernetes caps binary-suffixed quantities at the largest int64.
    let magnitude = if binary_exponent > 0 {
        magnitude.min(i64::MAX as u128 * NANOS as u128)
    } else {
        magnitude
    };
    let magnitude = i128::try_from(magnitude).map_err(|_| out_of_range())?;
    Ok(if negative { -magnitude } else { magnitude })
}

pub(super) fn quantity(text: &CelString<'_>) -> Result<Quantity, ExecutionError> {
    parse_nanos(text.inner())
        .map(Quantity)
        .map_err(|e| ExecutionError::function_error("quantity", e))
}

pub(super) fn is_quantity(text: &CelString<'_>) -> CelBool {
    parse_nanos(text.inner()).is_ok().into()
}

pub(super) fn ordering(ordering: Ordering) -> CelInt {
    (ordering as i64).into()
}

pub(super) fn quantity_compare_to(q: &Quantity, other: &Quantity) -> CelInt {
    ordering(q.cmp(other))
}

pub(super) fn quantity_is_greater_than(q: &Quantity, other: &Quantity) -> CelBool {
    (q > other).into()
}

pub(super) fn quantity_is_less_than(q: &Quantity, other: &Quantity) -> CelBool {
    (q < other).into()
}

pub(super) fn overflow(function: &str) -> ExecutionError {
    ExecutionError::function_error(function, "quantity out of range")
}

pub(super) fn quantity_add(q: &Quantity, other: &Quantity) -> Result<Quantity, ExecutionError> {
    q.0.checked_add(other.0)
        .map(Quantity)
        .ok_or_else(|| overflow("add"))
}

pub(super) fn quantity_add_int(q: &Quantity, units: &CelInt) -> Result<Quantity, ExecutionError> {
    quantity_add(q, &Quantity(i128::from(*units.inner()) * NANOS))
}

pub(super) fn quantity_sub(q: &Quantity, other: &Quantity) -> Result<Quantity, ExecutionError> {
    q.0.checked_sub(other.0)
        .map(Quantity)
        .ok_or_else(|| overflow("sub"))
}

pub(super) fn quantity_sub_int(q: &Quantity, units: &CelInt) -> Result<Quantity, ExecutionError> {
    quantity_sub(q, &Quantity(i128::from(*units.inner()) * NANOS))
}

pub(super) fn quantity_sign(q: &Quantity) -> CelInt {
    (q.0.signum() as i64).into()
}

/// The quantity as a whole number of units, if it is one that fits an int. (Kubernetes also
/// refuses some whole quantities by their spelling, such as `1000m`.)
pub(super) fn whole_units(q: &Quantity) -> Option<i64> {
    if q.0 % NANOS == 0 {
        i64::try_from(q.0 / NANOS).ok()
    } else {
        None
    }
}

pub(super) fn as_integer(q: &Quantity) -> Result<CelInt, ExecutionError> {
    whole_units(q).map(CelInt::from).ok_or_else(|| {
        ExecutionError::function_error("asInteger", "cannot convert value to integer")
    })
}

pub(super) fn is_integer(q: &Quantity) -> CelBool {
    whole_units(q).is_some().into()
}

pub(super) fn as_approximate_float(q: &Quantity) -> CelDouble {
    (q.0 as f64 / NANOS as f64).into()
}
