//! The `--seeds` argument of the benchmarks: a range, a list or one seed.

/// Seeds of a benchmark's runs, in order.
#[derive(Clone, Debug)]
pub struct Seeds(pub Vec<u64>);

pub fn parse_seeds(s: &str) -> Result<Seeds, String> {
    let bad = || format!("seeds {s:?}: write a range like 42-51, a list like 42,43, or one seed");
    let seeds: Vec<u64> = if let Some((a, b)) = s.split_once('-') {
        let (a, b): (u64, u64) = (
            a.trim().parse().map_err(|_| bad())?,
            b.trim().parse().map_err(|_| bad())?,
        );
        if a > b {
            return Err(bad());
        }
        (a..=b).collect()
    } else {
        s.split(',')
            .map(|x| x.trim().parse().map_err(|_| bad()))
            .collect::<Result<_, _>>()?
    };
    if seeds.is_empty() {
        return Err(bad());
    }
    Ok(Seeds(seeds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_parse_as_range_list_or_one() {
        assert_eq!(parse_seeds("42-51").unwrap().0.len(), 10);
        assert_eq!(parse_seeds("1,3").unwrap().0, vec![1, 3]);
        assert_eq!(parse_seeds("7").unwrap().0, vec![7]);
        for bad in ["", "a-b", "5-1", "1,,2"] {
            assert!(parse_seeds(bad).unwrap_err().contains("42-51"), "{bad}");
        }
    }
}
