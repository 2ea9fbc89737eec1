//! Resource amounts and Kubernetes quantity parsing.

use serde::Serialize;
use std::fmt;

/// The extended resource name under which NVIDIA's device plugin advertises whole GPUs.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// Amounts of the non-GPU resources a node offers or a pod requests.
///
/// GPUs are not here: they are devices ([`crate::GpuDevice`]) and a pod asks for them with a
/// [`crate::GpuRequest`]. `extended` holds every other extended resource (RDMA NICs, MIG
/// slices, hugepages ...), sorted by name, with integer amounts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Resources {
    pub cpu_milli: i64,
    pub memory_bytes: i64,
    pub ephemeral_storage_bytes: i64,
    pub extended: Vec<(String, i64)>,
}

impl Resources {
    pub fn new(cpu_milli: i64, memory_bytes: i64) -> Self {
        Resources {
            cpu_milli,
            memory_bytes,
            ..Default::default()
        }
    }

    /// Amount of an extended resource, zero when absent.
    pub fn extended(&self, name: &str) -> i64 {
        self.extended
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .map(|i| self.extended[i].1)
            .unwrap_or(0)
    }

    /// Sets an extended resource, keeping the list sorted; a zero amount removes it.
    pub fn set_extended(&mut self, name: &str, amount: i64) {
        match self
            .extended
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
        {
            Ok(i) if amount == 0 => {
                self.extended.remove(i);
            }
            Ok(i) => self.extended[i].1 = amount,
            Err(_) if amount == 0 => {}
            Err(i) => self.extended.insert(i, (name.to_string(), amount)),
        }
    }

    pub fn add(&mut self, other: &Resources) {
        self.combine(other, 1);
    }

    pub fn sub(&mut self, other: &Resources) {
        self.combine(other, -1);
    }

    fn combine(&mut self, other: &Resources, sign: i64) {
        self.cpu_milli += sign * other.cpu_milli;
        self.memory_bytes += sign * other.memory_bytes;
        self.ephemeral_storage_bytes += sign * other.ephemeral_storage_bytes;
        for (name, amount) in &other.extended {
            let now = self.extended(name);
            self.set_extended(name, now + sign * amount);
        }
    }

    /// Names of the resources where `request` exceeds `self` (the free amount).
    pub fn shortfalls<'a>(&'a self, request: &'a Resources) -> impl Iterator<Item = &'a str> + 'a {
        let base = [
            ("cpu", request.cpu_milli > self.cpu_milli),
            ("memory", request.memory_bytes > self.memory_bytes),
            (
                "ephemeral-storage",
                request.ephemeral_storage_bytes > self.ephemeral_storage_bytes,
            ),
        ];
        base.into_iter()
            .filter(|(_, short)| *short)
            .map(|(n, _)| n)
            .chain(
                request
                    .extended
                    .iter()
                    .filter(|(n, a)| *a > self.extended(n))
                    .map(|(n, _)| n.as_str()),
            )
    }

    /// Whether `request` fits in `self` (the free amount) in every resource.
    pub fn fits(&self, request: &Resources) -> bool {
        request.cpu_milli <= self.cpu_milli
            && request.memory_bytes <= self.memory_bytes
            && request.ephemeral_storage_bytes <= self.ephemeral_storage_bytes
            && request.extended.iter().all(|(n, a)| *a <= self.extended(n))
    }
}

/// Why a quantity string did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("quantity {input:?} is not a Kubernetes quantity ({why}); write e.g. \"500m\", \"2\", \"16Gi\" or \"1e3\"")]
pub struct QuantityError {
    pub input: String,
    pub why: &'static str,
}

/// The scale from a quantity as written to the units of pod requests ([`Resources`]):
/// millicores for cpu, whole units (bytes, devices) for everything else. Queue quotas
/// count GPUs in thousandths instead ([`crate::quota_scale`]), so shares can be charged.
pub fn request_scale(resource: &str) -> i64 {
    if resource == "cpu" {
        1000
    } else {
        1
    }
}

/// Parses a Kubernetes quantity (`resource.Quantity`) and returns it scaled by `scale`,
/// rounded up, as Kubernetes rounds requests. `scale` is 1000 for millicores, 1 for bytes.
pub fn parse_quantity(input: &str, scale: i64) -> Result<i64, QuantityError> {
    let err = |why| QuantityError {
        input: input.to_string(),
        why,
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(err("empty"));
    }
    let (negative, s) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(num_end);
    if num.is_empty() || num == "." || num.matches('.').count() > 1 {
        return Err(err("no number"));
    }
    let frac_digits = num.find('.').map_or(0, |dot| num.len() - dot - 1) as i32;
    let digits: String = num.chars().filter(|c| *c != '.').collect();
    if digits.len() > 30 {
        return Err(err("out of range"));
    }
    let mantissa: i128 = digits.parse().map_err(|_| err("bad number"))?;
    // Decimal exponent and binary factor of the suffix.
    let (exp10, binary): (i32, i128) = match suffix {
        "" => (0, 1),
        "n" => (-9, 1),
        "u" => (-6, 1),
        "m" => (-3, 1),
        "k" => (3, 1),
        "M" => (6, 1),
        "G" => (9, 1),
        "T" => (12, 1),
        "P" => (15, 1),
        "E" => (18, 1),
        "Ki" => (0, 1 << 10),
        "Mi" => (0, 1 << 20),
        "Gi" => (0, 1 << 30),
        "Ti" => (0, 1 << 40),
        "Pi" => (0, 1 << 50),
        "Ei" => (0, 1 << 60),
        s if s.starts_with(['e', 'E']) => {
            let exp: i32 = s[1..].parse().map_err(|_| err("bad exponent"))?;
            if exp.abs() > 30 {
                return Err(err("out of range"));
            }
            (exp, 1)
        }
        _ => return Err(err("unknown suffix")),
    };
    // Exact decimal arithmetic, rounded up like Kubernetes.
    let exponent = exp10 - frac_digits;
    let base = mantissa
        .checked_mul(binary)
        .and_then(|v| v.checked_mul(scale as i128))
        .ok_or_else(|| err("out of range"))?;
    let magnitude = if exponent >= 0 {
        base.checked_mul(
            10i128
                .checked_pow(exponent as u32)
                .ok_or_else(|| err("out of range"))?,
        )
        .ok_or_else(|| err("out of range"))?
    } else {
        let divisor = 10i128
            .checked_pow((-exponent) as u32)
            .ok_or_else(|| err("out of range"))?;
        (base + divisor - 1) / divisor
    };
    let value = i64::try_from(magnitude).map_err(|_| err("out of range"))?;
    Ok(if negative { -value } else { value })
}

/// Formats bytes the way a platform engineer reads them (`80Gi`, `512Mi`).
pub struct Bytes(pub i64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, i64); 4] = [
            ("Ti", 1 << 40),
            ("Gi", 1 << 30),
            ("Mi", 1 << 20),
            ("Ki", 1 << 10),
        ];
        for (unit, size) in UNITS {
            if self.0.abs() >= size {
                let v = self.0 as f64 / size as f64;
                return if v.fract() == 0.0 {
                    write!(f, "{}{unit}", v as i64)
                } else {
                    write!(f, "{v:.1}{unit}")
                };
            }
        }
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_and_memory_quantities() {
        assert_eq!(parse_quantity("500m", 1000), Ok(500));
        assert_eq!(parse_quantity("2", 1000), Ok(2000));
        assert_eq!(parse_quantity("0.1", 1000), Ok(100));
        assert_eq!(parse_quantity("1.5", 1000), Ok(1500));
        assert_eq!(parse_quantity("16Gi", 1), Ok(16 << 30));
        assert_eq!(parse_quantity("1G", 1), Ok(1_000_000_000));
        assert_eq!(parse_quantity("1e3", 1), Ok(1000));
        assert_eq!(parse_quantity("128974848", 1), Ok(128974848));
        assert_eq!(parse_quantity("1m", 1), Ok(1), "rounds up like Kubernetes");
        assert_eq!(parse_quantity("2.5Gi", 1), Ok(5 << 29));
        assert_eq!(parse_quantity("100Ki", 1), Ok(102_400));
        assert_eq!(parse_quantity("-1", 1000), Ok(-1000));
        assert!(parse_quantity("99999999999999999999Ei", 1).is_err());
    }

    #[test]
    fn rejects_bad_quantities_with_the_input_named() {
        for bad in ["", "abc", "12x", "1..2", "Gi", "1e", "--1"] {
            let e = parse_quantity(bad, 1).unwrap_err();
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn extended_resources_stay_sorted_and_combine() {
        let mut r = Resources::new(1000, 10);
        r.set_extended("rdma/ib", 2);
        r.set_extended("a/x", 1);
        assert_eq!(r.extended[0].0, "a/x");
        let mut req = Resources::new(500, 5);
        req.set_extended("rdma/ib", 3);
        assert!(!r.fits(&req));
        assert_eq!(r.shortfalls(&req).collect::<Vec<_>>(), vec!["rdma/ib"]);
        r.sub(&Resources::new(1000, 0));
        assert_eq!(r.cpu_milli, 0);
        r.set_extended("a/x", 0);
        assert_eq!(r.extended.len(), 1);
    }
}
