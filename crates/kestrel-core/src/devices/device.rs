//! A published device: its attributes, MIG partitions, and the opaque filters that judge it.

use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// One attribute value of a published device.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum DeviceAttribute {
    Int(i64),
    Bool(bool),
    String(String),
    /// A semantic version, as published.
    Version(String),
}

/// A device as its driver published it in a ResourceSlice.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct DraDevice {
    pub driver: String,
    pub pool: String,
    pub name: String,
    /// Fully qualified names (`gpu.nvidia.com/productName`); an unqualified name in the
    /// slice is qualified with the driver's name.
    pub attributes: BTreeMap<String, DeviceAttribute>,
    /// Fully qualified names, in base units (bytes for memory).
    pub capacity: BTreeMap<String, i64>,
    /// The device's taints (`spec.devices[].taints`): a request must tolerate them.
    pub taints: Vec<crate::model::Taint>,
    /// For a whole GPU whose driver publishes partitions of it (MIG devices) that share its
    /// counters: those partitions. A GPU is taken whole or partition by partition, never
    /// both.
    pub partitions: Option<Arc<Partitions>>,
}

/// The partitions of one GPU (KEP-4815 partitionable devices): devices that consume the
/// counters of the GPU's counter set (`sharedCounters`), which they may never exceed
/// together. The NVIDIA driver gives each MIG placement its own memory-slice counters, so
/// counters alone say which partitions may coexist.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Partitions {
    /// The counter set's name in its pool.
    pub counter_set: String,
    /// Each counter's capacity.
    pub capacity: BTreeMap<String, i64>,
    /// At most [`Partitions::MAX`].
    pub devices: Vec<Partition>,
}

/// One partition and what it takes of its GPU.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Partition {
    pub device: Arc<DraDevice>,
    /// The counters it consumes (`consumesCounters`).
    pub consumes: BTreeMap<String, i64>,
    /// The thousandths of the GPU it stands for ([`Partitions::milli_of`]).
    pub milli: u32,
}

impl Partitions {
    /// Partitions one GPU may have (a bit each in [`crate::GpuUse`]).
    pub const MAX: usize = 64;

    /// Whether partition `k` fits beside the partitions `taken` (a bit per partition).
    pub fn fits(&self, taken: u64, k: usize) -> bool {
        if taken & (1 << k) != 0 {
            return false;
        }
        self.devices[k].consumes.iter().all(|(counter, want)| {
            self.used(taken, counter) + want <= self.capacity.get(counter).copied().unwrap_or(0)
        })
    }

    /// Whether the partitions `taken` exceed a counter together.
    pub fn over_committed(&self, taken: u64) -> Option<String> {
        self.capacity.iter().find_map(|(counter, capacity)| {
            let used = self.used(taken, counter);
            (used > *capacity).then(|| format!("counter {counter}: {used} of {capacity}"))
        })
    }

    /// How much of `counter` the partitions `taken` consume together.
    fn used(&self, taken: u64, counter: &str) -> i64 {
        (0..self.devices.len())
            .filter(|j| taken & (1 << j) != 0)
            .filter_map(|j| self.devices[j].consumes.get(counter))
            .sum()
    }

    /// Thousandths of the GPU that `consumes` stands for: its mean share of the set's
    /// counters (a MIG device taking one of eight memory slices and an eighth of the
    /// memory and compute stands for an eighth), at least 1.
    pub fn milli_of(capacity: &BTreeMap<String, i64>, consumes: &BTreeMap<String, i64>) -> u32 {
        let shares: f64 = capacity
            .iter()
            .filter(|(_, cap)| **cap > 0)
            .map(|(counter, cap)| {
                let want = consumes.get(counter).copied().unwrap_or(0);
                want.clamp(0, *cap) as f64 / *cap as f64
            })
            .sum();
        let counted = capacity.values().filter(|cap| **cap > 0).count().max(1);
        ((1000.0 * shares / counted as f64).ceil() as u32).clamp(1, 1000)
    }
}

/// Whether a device is one a request may take: the device class's selectors and the
/// request's, compiled once by whoever read them.
pub trait DeviceFilter: fmt::Debug + Send + Sync {
    /// `Err`: the selector failed on this device (a missing attribute, a type error); the
    /// device is not taken and the text explains why.
    fn accepts(&self, device: &Arc<DraDevice>) -> Result<bool, String>;
    /// What identifies the filter (its class and expressions): equal keys, equal filters.
    fn key(&self) -> &str;
}

/// A filter, compared and hashed by its key so that pods with equal claims share
/// constraints.
#[derive(Debug, Clone)]
pub struct Filter(pub Arc<dyn DeviceFilter>);

impl PartialEq for Filter {
    fn eq(&self, other: &Self) -> bool {
        self.0.key() == other.0.key()
    }
}
impl Eq for Filter {}
impl Hash for Filter {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.key().hash(state)
    }
}
impl Serialize for Filter {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.key())
    }
}
