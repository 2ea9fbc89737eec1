//! `device` as CEL sees it: its driver and its attribute and capacity maps by domain.

use std::collections::{BTreeMap, HashMap};

use super::*;
use cel::common::traits::{Container, Indexer, Iterable, Sizer};
use cel::common::types::{CelBool, CelInt, CelMap, CelMapKey, CelString, Type, MAP_TYPE};
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::ExecutionError;

/// Whether every version attribute is a semantic version, which [`DeviceValue::new`]
/// requires.
pub fn versions_parse(attributes: &BTreeMap<String, AttributeValue>) -> bool {
    attributes.values().all(|v| match v {
        AttributeValue::Version(v) => Semver::parse(v).is_ok(),
        _ => true,
    })
}

/// `device` as CEL sees it, built once from a [`DeviceView`] so that several selectors can be
/// evaluated against it ([`CelSelector::matches_value`]) without rebuilding its maps.
#[derive(Debug, Clone)]
pub struct DeviceValue<'a> {
    driver: CelString<'a>,
    attributes: Domains<'a>,
    capacity: Domains<'a>,
}

pub(super) static DEVICE_TYPE: Type = Type::new_unspecified_type("kubernetes.DRADevice");

impl<'a> DeviceValue<'a> {
    /// Fails, as Kubernetes does, on a version attribute that is not a semantic version.
    pub fn new(device: &DeviceView<'a>) -> Result<DeviceValue<'a>, String> {
        let attributes = Domains::group(device.driver, device.attributes, |name, value| {
            Ok(match value {
                AttributeValue::Int(i) => Box::new(CelInt::from(*i)),
                AttributeValue::Bool(b) => Box::new(CelBool::from(*b)),
                AttributeValue::String(s) => Box::new(CelString::from(s.as_str())),
                AttributeValue::Version(v) => {
                    Box::new(Semver::parse(v).map_err(|e| format!("attribute {name}: {e}"))?)
                }
            })
        })?;
        let capacity = Domains::group(device.driver, device.capacity, |_, value| {
            Ok(Box::new(Quantity(i128::from(*value) * NANOS)))
        })?;
        Ok(DeviceValue {
            driver: CelString::from(device.driver),
            attributes,
            capacity,
        })
    }
}

impl Val for DeviceValue<'_> {
    fn get_type(&self) -> &Type {
        &DEVICE_TYPE
    }

    fn cel_type() -> &'static Type {
        &DEVICE_TYPE
    }

    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(self.clone())
    }
}

impl Indexer for DeviceValue<'_> {
    fn get<'b, 'v>(&'b self, field: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        match field.downcast_ref::<CelString>().map(CelString::inner) {
            Some("driver") => Ok(CowVal::Borrowed(&self.driver)),
            Some("attributes") => Ok(CowVal::Borrowed(&self.attributes)),
            Some("capacity") => Ok(CowVal::Borrowed(&self.capacity)),
            // Only devices of the DRAConsumableCapacity feature, which Kestrel lacks, have it set.
            Some("allowMultipleAllocations") => Ok(CowVal::owned(CelBool::from(false))),
            Some(other) => Err(ExecutionError::no_such_key(other)),
            None => Err(ExecutionError::UnexpectedType {
                got: field.get_type().name().to_owned(),
                want: "string".to_owned(),
            }),
        }
    }

    fn steal<'v>(self: Box<Self>, field: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(field).map(CowVal::into_owned)
    }
}

/// Binds the variable `device`.
impl VariableResolver for DeviceValue<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        (variable == "device").then_some(CowVal::Borrowed(self))
    }
}

/// `device.attributes` or `device.capacity`: a map from domain to a map from id to value. As in
/// Kubernetes, a domain the device has nothing in looks up as an empty map, so that
/// `"id" in device.attributes["other.example.com"]` is false rather than an error.
#[derive(Debug, Clone)]
pub(super) struct Domains<'a> {
    domains: CelMap<'a>,
    empty: CelMap<'a>,
}

pub(super) type MapEntry<'a> = (CelMapKey<'a>, Box<dyn Val + 'a>);

impl<'a> Domains<'a> {
    fn group<V>(
        driver: &'a str,
        entries: &'a BTreeMap<String, V>,
        value: impl Fn(&'a str, &'a V) -> Result<Box<dyn Val + 'a>, String>,
    ) -> Result<Domains<'a>, String> {
        // Devices have few domains: a list finds them faster than hashing, and collecting each
        // domain's entries first sizes its map at once.
        let mut grouped: Vec<(&str, Vec<MapEntry<'a>>)> = Vec::new();
        for (name, v) in entries {
            let (domain, id) = name.split_once('/').unwrap_or((driver, name));
            let entry = (CelMapKey::String(id.into()), value(name, v)?);
            match grouped.iter_mut().find(|(d, _)| *d == domain) {
                Some((_, ids)) => ids.push(entry),
                None => grouped.push((domain, vec![entry])),
            }
        }
        let domains = grouped
            .into_iter()
            .map(|(domain, ids)| {
                let ids: HashMap<_, _> = ids.into_iter().collect();
                let ids: Box<dyn Val + 'a> = Box::new(CelMap::from(ids));
                (CelMapKey::String(domain.into()), ids)
            })
            .collect::<HashMap<_, _>>();
        Ok(Domains {
            domains: domains.into(),
            empty: CelMap::default(),
        })
    }
}

impl Val for Domains<'_> {
    fn get_type(&self) -> &Type {
        &MAP_TYPE
    }

    fn cel_type() -> &'static Type {
        &MAP_TYPE
    }

    fn as_container(&self) -> Option<&dyn Container> {
        self.domains.as_container()
    }

    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn as_iterable<'b, 'v>(&'b self) -> Option<&'b (dyn Iterable + 'v)>
    where
        Self: 'v,
    {
        self.domains.as_iterable()
    }

    fn as_sizer(&self) -> Option<&dyn Sizer> {
        self.domains.as_sizer()
    }

    // Entry by entry, as `other` may be a map literal or another `Domains`, which no downcast finds.
    fn equals(&self, other: &dyn Val) -> bool {
        let entries = self.domains.inner();
        *other.get_type() == MAP_TYPE
            && other
                .as_sizer()
                .is_some_and(|s| *s.size().inner() == entries.len() as i64)
            && other.as_indexer().is_some_and(|o| {
                entries.iter().all(|(domain, ids)| {
                    o.get(domain.inner())
                        .is_ok_and(|other_ids| ids.equals(other_ids.as_ref()))
                })
            })
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(self.clone())
    }
}

impl Indexer for Domains<'_> {
    fn get<'b, 'v>(&'b self, domain: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        match self.domains.get(domain) {
            Err(ExecutionError::NoSuchKey(_)) => Ok(CowVal::Borrowed(&self.empty)),
            found => found,
        }
    }

    fn steal<'v>(self: Box<Self>, domain: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(domain).map(CowVal::into_owned)
    }
}
