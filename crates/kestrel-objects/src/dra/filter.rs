//! A request's device filter: its class's selectors and its own, with a verdict cache.

use super::*;
use crate::dra_cel::{CelSelector, DeviceValue, DeviceView};
use kestrel_core::{DeviceAttribute, DeviceFilter, DraDevice};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// A request's filter: its class's selectors, then its own, with what it said of each
/// device seen (by the device's allocation, kept alive by the entry so it is never another
/// device's; a new slice publishes new ones).
#[derive(Debug)]
pub(super) struct RequestFilter {
    key: String,
    class: Arc<ClassSelectors>,
    own: Vec<Arc<CelSelector>>,
    verdicts: Mutex<HashMap<usize, Verdict, BuildAddressHasher>>,
    /// What all its selectors read of a device, when their trees tell
    /// ([`crate::dra_cel::Reads`]), with full attribute and capacity names.
    reads: Option<FullReads>,
    /// Verdicts by those parts: devices alike in them are selected alike. Only selections
    /// are kept here; an error names its device, so it is judged device by device.
    alike: Mutex<HashMap<Vec<Part>, bool>>,
}

/// [`crate::dra_cel::Reads`] with each (domain, id) as the name a [`DraDevice`] keys it by.
#[derive(Debug)]
pub(super) struct FullReads {
    driver: bool,
    /// (full name, domain, id).
    attributes: Vec<(String, String, String)>,
    capacity: Vec<(String, String, String)>,
}

/// The value of `full` (`domain/id`) in `map`, where an unqualified `id` is in the driver's
/// domain as CEL sees it; `Err` when the map holds both names (then CEL decides).
pub(super) fn part_of<'a, V>(
    map: &'a BTreeMap<String, V>,
    driver: &str,
    (full, domain, id): &(String, String, String),
) -> Result<Option<&'a V>, ()> {
    let qualified = map.get(full);
    let bare = if domain == driver { map.get(id) } else { None };
    match (qualified, bare) {
        (Some(_), Some(_)) => Err(()),
        (q, b) => Ok(q.or(b)),
    }
}

/// One part of a device a filter reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Part {
    Driver(String),
    Attribute(Option<DeviceAttribute>),
    Capacity(Option<i64>),
}

/// Hashes a device's address (a `usize`) by one multiplication: the verdict cache is
/// looked up for every device a placement considers, where SipHash showed in profiles.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct BuildAddressHasher;

#[derive(Debug, Default)]
pub(super) struct AddressHasher(u64);

impl std::hash::BuildHasher for BuildAddressHasher {
    type Hasher = AddressHasher;
    fn build_hasher(&self) -> AddressHasher {
        AddressHasher(0)
    }
}

impl std::hash::Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        // Fibonacci hashing, its high bits folded down: addresses are aligned, so their
        // low bits (the table's index) would otherwise all be equal.
        let h = (n as u64 ^ self.0).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = h ^ (h >> 29);
    }
}

/// A device a filter judged (held so its address stays its own) and what the filter said.
pub(super) type Verdict = (Arc<DraDevice>, Result<bool, String>);

/// Compiled expressions kept before the cache starts over (expressions written per pod).
pub(super) const COMPILED_EXPRESSIONS: usize = 4096;

/// Verdicts a filter keeps before it starts over (devices of replaced slices linger).
pub(super) const FILTER_VERDICTS: usize = 1 << 17;

impl DeviceFilter for RequestFilter {
    fn accepts(&self, device: &Arc<DraDevice>) -> Result<bool, String> {
        let id = Arc::as_ptr(device) as usize;
        let mut verdicts = self.verdicts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, verdict)) = verdicts.get(&id) {
            return verdict.clone();
        }
        let verdict = self.judge_alike(device);
        if verdicts.len() >= FILTER_VERDICTS {
            verdicts.clear();
        }
        verdicts.insert(id, (device.clone(), verdict.clone()));
        verdict
    }

    fn key(&self) -> &str {
        &self.key
    }
}

impl RequestFilter {
    pub(super) fn new(key: String, class: Arc<ClassSelectors>, own: Vec<Arc<CelSelector>>) -> Self {
        let reads = class
            .selectors
            .iter()
            .chain(&own)
            .try_fold(crate::dra_cel::Reads::default(), |all, s| {
                s.reads().map(|r| all.union(r))
            })
            .map(|r| {
                let full = |parts: Vec<(String, String)>| {
                    parts
                        .into_iter()
                        .map(|(d, id)| (format!("{d}/{id}"), d, id))
                        .collect()
                };
                FullReads {
                    driver: r.driver,
                    attributes: full(r.attributes),
                    capacity: full(r.capacity),
                }
            });
        RequestFilter {
            key,
            class,
            own,
            verdicts: Mutex::new(HashMap::default()),
            reads,
            alike: Mutex::new(HashMap::new()),
        }
    }

    /// [`RequestFilter::judge`], or the verdict of a device alike in what the selectors
    /// read. A device with a version attribute that is not a semantic version is always
    /// judged: CEL fails on it whatever the selectors read.
    fn judge_alike(&self, device: &DraDevice) -> Result<bool, String> {
        let Some(reads) = &self.reads else {
            return self.judge(device);
        };
        if !crate::dra_cel::versions_parse(&device.attributes) {
            return self.judge(device);
        }
        let mut parts = Vec::with_capacity(
            usize::from(reads.driver) + reads.attributes.len() + reads.capacity.len(),
        );
        if reads.driver {
            parts.push(Part::Driver(device.driver.clone()));
        }
        for name in &reads.attributes {
            match part_of(&device.attributes, &device.driver, name) {
                Ok(value) => parts.push(Part::Attribute(value.cloned())),
                Err(()) => return self.judge(device),
            }
        }
        for name in &reads.capacity {
            match part_of(&device.capacity, &device.driver, name) {
                Ok(value) => parts.push(Part::Capacity(value.copied())),
                Err(()) => return self.judge(device),
            }
        }
        let mut alike = self.alike.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&selected) = alike.get(&parts) {
            return Ok(selected);
        }
        let verdict = self.judge(device);
        if let Ok(selected) = verdict {
            if alike.len() >= FILTER_VERDICTS {
                alike.clear();
            }
            alike.insert(parts, selected);
        }
        verdict
    }

    fn judge(&self, device: &DraDevice) -> Result<bool, String> {
        let view = DeviceView {
            driver: &device.driver,
            attributes: &device.attributes,
            capacity: &device.capacity,
        };
        let value = DeviceValue::new(&view)?;
        let class = self.class.selectors.iter().map(|s| (true, s));
        for (of_class, selector) in class.chain(self.own.iter().map(|s| (false, s))) {
            let selected = selector.matches_value(&value).map_err(|e| {
                let whose = match of_class {
                    true => format!("DeviceClass {}", self.class.name),
                    false => "the request".to_string(),
                };
                format!(
                    "{whose}: selector {:?} on device {}/{}: {e}",
                    selector.expression(),
                    device.pool,
                    device.name
                )
            })?;
            if !selected {
                return Ok(false);
            }
        }
        Ok(true)
    }
}
