//! ResourceSlices and DeviceTaintRules: the devices each node publishes, with their taints.

use super::*;
use crate::device_taint_rule::DeviceTaintRule;
use crate::error::LoadError;
use crate::fields::Ctx;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kestrel_core::{
    parse_quantity, DeviceAttribute, DraDevice, Partition, Partitions, Taint, TaintEffect,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// One ResourceSlice as read.
#[derive(Debug, Clone)]
pub(super) struct Slice {
    node: Option<String>,
    driver: String,
    pool: String,
    generation: i64,
    slice_count: i64,
    devices: Vec<Arc<DraDevice>>,
    /// Per device (in `devices` order): the counter sets it consumes from, and how much.
    consumes: Vec<Vec<(String, BTreeMap<String, i64>)>>,
    /// The counter sets the slice declares (`sharedCounters`): their counters' capacity.
    counter_sets: BTreeMap<String, BTreeMap<String, i64>>,
}

/// ResourceSlices by name, and the devices they publish per node, with the taints
/// DeviceTaintRules put on them.
#[derive(Debug, Clone, Default)]
pub struct SliceBook {
    slices: BTreeMap<String, Slice>,
    taint_rules: BTreeMap<String, TaintRule>,
}

/// A DeviceTaintRule: a taint on every device its selector names (an absent field names
/// any driver, pool or device).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct TaintRule {
    driver: Option<String>,
    pool: Option<String>,
    device: Option<String>,
    /// `None` for a taint of effect `None`, which only informs.
    taint: Option<Taint>,
}

impl TaintRule {
    fn selects(&self, device: &DraDevice) -> bool {
        self.driver.as_ref().is_none_or(|d| *d == device.driver)
            && self.pool.as_ref().is_none_or(|p| *p == device.pool)
            && self.device.as_ref().is_none_or(|n| *n == device.name)
    }
}

/// A device taint's effect (`field`): NoSchedule and NoExecute keep requests that do not
/// tolerate them off the device; `None` only informs.
pub(super) fn device_taint(
    ctx: &Ctx,
    field: &str,
    taint: &k8s_openapi::api::resource::v1::DeviceTaint,
) -> Result<Option<Taint>, LoadError> {
    let effect = match taint.effect.as_str() {
        "None" => return Ok(None),
        e => TaintEffect::parse(e)
            .filter(|e| matches!(e, TaintEffect::NoSchedule | TaintEffect::NoExecute))
            .ok_or_else(|| {
                ctx.err(
                    format!("{field}.effect"),
                    format!(
                        "{:?} is not a device taint effect; write NoSchedule, NoExecute or None",
                        taint.effect
                    ),
                )
            })?,
    };
    Ok(Some(Taint {
        key: taint.key.clone(),
        value: taint.value.clone().unwrap_or_default(),
        effect,
    }))
}

impl SliceBook {
    /// Reads (or replaces) a ResourceSlice. Refused: a slice without a node (network and
    /// cluster-wide pools are not allocated by Kestrel), a device listed twice.
    pub fn insert(&mut self, ctx: &Ctx, slice: &ResourceSlice) -> Result<(), LoadError> {
        let name = slice.metadata.name.clone().unwrap_or_default();
        let spec = &slice.spec;
        let node = spec.node_name.clone().filter(|n| !n.is_empty());
        let counter_amount = |field: String, value: &k8s_openapi::api::resource::v1::Counter| {
            parse_quantity(&value.value.0, 1).map_err(|e| ctx.err(field, e.to_string()))
        };
        let mut counter_sets = BTreeMap::new();
        for (i, set) in spec.shared_counters.iter().flatten().enumerate() {
            let mut counters = BTreeMap::new();
            for (name, value) in &set.counters {
                let field = format!("spec.sharedCounters[{i}].counters[{name:?}].value");
                counters.insert(name.clone(), counter_amount(field, value)?);
            }
            if counter_sets.insert(set.name.clone(), counters).is_some() {
                return Err(ctx.err(
                    format!("spec.sharedCounters[{i}].name"),
                    format!(
                        "counter set {:?} is declared twice; a pool declares each set once",
                        set.name
                    ),
                ));
            }
        }
        let mut devices = Vec::new();
        let mut consumes = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, d) in spec.devices.iter().flatten().enumerate() {
            let df = format!("spec.devices[{i}]");
            if !seen.insert(d.name.clone()) {
                return Err(ctx.err(
                    format!("{df}.name"),
                    format!(
                        "device {:?} is listed twice; a device is published once",
                        d.name
                    ),
                ));
            }
            let qualify = |name: &str| match name.contains('/') {
                true => name.to_string(),
                false => format!("{}/{name}", spec.driver),
            };
            let mut attributes = BTreeMap::new();
            for (k, v) in d.attributes.iter().flatten() {
                let value = match (&v.int, &v.bool, &v.string, &v.version) {
                    (Some(i), None, None, None) => DeviceAttribute::Int(*i),
                    (None, Some(b), None, None) => DeviceAttribute::Bool(*b),
                    (None, None, Some(s), None) => DeviceAttribute::String(s.clone()),
                    (None, None, None, Some(v)) => DeviceAttribute::Version(v.clone()),
                    _ => {
                        return Err(ctx.err(
                            format!("{df}.attributes[{k:?}]"),
                            "an attribute sets exactly one of int, bool, string and version",
                        ))
                    }
                };
                attributes.insert(qualify(k), value);
            }
            let mut capacity = BTreeMap::new();
            for (k, v) in d.capacity.iter().flatten() {
                let amount = parse_quantity(&v.value.0, 1)
                    .map_err(|e| ctx.err(format!("{df}.capacity[{k:?}].value"), e.to_string()))?;
                capacity.insert(qualify(k), amount);
            }
            let mut taints = Vec::new();
            for (j, t) in d.taints.iter().flatten().enumerate() {
                taints.extend(device_taint(ctx, &format!("{df}.taints[{j}]"), t)?);
            }
            let mut uses = Vec::new();
            for (j, c) in d.consumes_counters.iter().flatten().enumerate() {
                let mut counters = BTreeMap::new();
                for (name, value) in &c.counters {
                    let field = format!("{df}.consumesCounters[{j}].counters[{name:?}]");
                    let amount = counter_amount(format!("{field}.value"), value)?;
                    // A set declared here is checked here; one another slice of the pool
                    // declares is checked when the pool is put together.
                    if let Some(set) = counter_sets.get(&c.counter_set) {
                        let capacity = set.get(name).copied();
                        if capacity.is_none_or(|cap| amount > cap) {
                            return Err(ctx.err(
                                field,
                                format!(
                                    "device {:?} consumes {amount} of counter {name:?}, and \
                                     counter set {:?} has {}: a device never consumes more \
                                     than its set holds; fix the amount or the set",
                                    d.name,
                                    c.counter_set,
                                    capacity
                                        .map_or("no such counter".to_string(), |c| c.to_string())
                                ),
                            ));
                        }
                    }
                    counters.insert(name.clone(), amount);
                }
                uses.push((c.counter_set.clone(), counters));
            }
            consumes.push(uses);
            devices.push(Arc::new(DraDevice {
                driver: spec.driver.clone(),
                pool: spec.pool.name.clone(),
                name: d.name.clone(),
                attributes,
                capacity,
                taints,
                partitions: None,
            }));
        }
        self.slices.insert(
            name,
            Slice {
                node,
                driver: spec.driver.clone(),
                pool: spec.pool.name.clone(),
                generation: spec.pool.generation,
                slice_count: spec.pool.resource_slice_count.max(1),
                devices,
                consumes,
                counter_sets,
            },
        );
        Ok(())
    }

    pub fn remove(&mut self, name: &str) {
        self.slices.remove(name);
    }

    pub fn names(&self) -> Vec<String> {
        self.slices.keys().cloned().collect()
    }

    /// Reads (or replaces) a DeviceTaintRule: its taint goes on every device its selector
    /// names, wherever it is published. An effect other than NoSchedule, NoExecute and
    /// None is refused naming the field.
    pub fn insert_taint_rule(
        &mut self,
        ctx: &Ctx,
        rule: &DeviceTaintRule,
    ) -> Result<(), LoadError> {
        let name = rule.metadata.name.clone().unwrap_or_default();
        let selector = rule.spec.device_selector.as_ref();
        let rule = TaintRule {
            driver: selector.and_then(|s| s.driver.clone()),
            pool: selector.and_then(|s| s.pool.clone()),
            device: selector.and_then(|s| s.device.clone()),
            taint: device_taint(ctx, "spec.taint", &rule.spec.taint)?,
        };
        self.taint_rules.insert(name, rule);
        Ok(())
    }

    pub fn remove_taint_rule(&mut self, name: &str) {
        self.taint_rules.remove(name);
    }

    pub fn taint_rule_names(&self) -> Vec<String> {
        self.taint_rules.keys().cloned().collect()
    }

    /// The nodes with a device that DeviceTaintRule `name` names (as held now).
    pub fn nodes_of_taint_rule(&self, name: &str) -> BTreeSet<String> {
        let Some(rule) = self.taint_rules.get(name) else {
            return BTreeSet::new();
        };
        self.slices
            .values()
            .filter(|s| s.devices.iter().any(|d| rule.selects(d)))
            .filter_map(|s| s.node.clone())
            .collect()
    }

    /// A device with the taints of the rules that name it added.
    fn with_rule_taints(&self, device: Arc<DraDevice>) -> Arc<DraDevice> {
        let added: Vec<&Taint> = self
            .taint_rules
            .values()
            .filter(|r| r.selects(&device))
            .filter_map(|r| r.taint.as_ref())
            .filter(|t| !device.taints.contains(t))
            .collect();
        if added.is_empty() {
            return device;
        }
        let mut tainted = (*device).clone();
        tainted.taints.extend(added.into_iter().cloned());
        Arc::new(tainted)
    }

    /// The nodes whose devices may change with slice `name`: those of every slice of its
    /// pool (a pool's newest generation decides which of its slices count), its own node
    /// included. Empty when no such slice is held.
    pub fn nodes_of_pool_of(&self, name: &str) -> BTreeSet<String> {
        let Some(slice) = self.slices.get(name) else {
            return BTreeSet::new();
        };
        self.slices
            .values()
            .filter(|s| s.driver == slice.driver && s.pool == slice.pool)
            .chain([slice])
            .filter_map(|s| s.node.clone())
            .collect()
    }

    /// The nodes some slice publishes devices for.
    pub fn nodes(&self) -> BTreeSet<&str> {
        self.slices
            .values()
            .filter_map(|s| s.node.as_deref())
            .collect()
    }

    /// The GPUs published for `node` that count: NVIDIA `gpu` devices of each pool's
    /// newest generation once all its slices are there, by GPU index. A GPU that consumes
    /// one counter set (partitionable devices) carries, as its partitions, the pool's
    /// other devices that consume from that set alone (MIG devices).
    pub fn gpus_of(&self, node: &str) -> Vec<Arc<DraDevice>> {
        // Newest generation per pool, and how many of its slices are here.
        let mut pools: BTreeMap<(&str, &str), (i64, i64, i64)> = BTreeMap::new();
        for s in self.slices.values() {
            let e = pools
                .entry((s.driver.as_str(), s.pool.as_str()))
                .or_insert((s.generation, 0, s.slice_count));
            if s.generation > e.0 {
                *e = (s.generation, 0, s.slice_count);
            }
            if s.generation == e.0 {
                e.1 += 1;
            }
        }
        let current = |s: &Slice| {
            let (generation, present, count) = pools[&(s.driver.as_str(), s.pool.as_str())];
            s.generation == generation && present >= count
        };
        let is_gpu = |d: &DraDevice| {
            let kind = d.attributes.get(&format!("{NVIDIA_GPU_DRIVER}/type"));
            kind.is_none_or(|t| *t == DeviceAttribute::String("gpu".to_string()))
        };
        let here: Vec<&Slice> = self
            .slices
            .values()
            .filter(|s| s.node.as_deref() == Some(node) && s.driver == NVIDIA_GPU_DRIVER)
            .filter(|s| current(s))
            .collect();
        let mut out: Vec<Arc<DraDevice>> = Vec::new();
        for s in &here {
            // The pool's counter sets, wherever in the pool they are declared: gathered
            // once per slice, and only for a slice whose devices consume counters.
            let mut sets: BTreeMap<&str, &BTreeMap<String, i64>> = BTreeMap::new();
            if s.consumes.iter().any(|uses| !uses.is_empty()) {
                for o in self.slices.values() {
                    if o.driver == s.driver && o.pool == s.pool && current(o) {
                        for (name, counters) in &o.counter_sets {
                            sets.entry(name.as_str()).or_insert(counters);
                        }
                    }
                }
            }
            for (d, uses) in s.devices.iter().zip(&s.consumes) {
                if !is_gpu(d) {
                    continue;
                }
                let device = self.with_rule_taints(d.clone());
                let partitions = match uses.as_slice() {
                    [(set, _)] => sets
                        .get(set.as_str())
                        .and_then(|capacity| self.partitions_over(&here, s, d, set, capacity)),
                    _ => None,
                };
                out.push(match partitions {
                    Some(p) => {
                        let mut whole = (*device).clone();
                        whole.partitions = Some(Arc::new(p));
                        Arc::new(whole)
                    }
                    None => device,
                });
            }
        }
        out.sort_by_key(|d| (gpu_index(d).unwrap_or(u32::MAX), d.name.clone()));
        out
    }

    /// The devices of the node's slices of `gpu`'s pool that consume from counter set
    /// `set` alone (its partitions), with what each stands for; `None` when there are
    /// none. Sets a device over-subscribes leave it out; past [`Partitions::MAX`], the
    /// rest are left out.
    fn partitions_over(
        &self,
        here: &[&Slice],
        of: &Slice,
        gpu: &Arc<DraDevice>,
        set: &str,
        capacity: &BTreeMap<String, i64>,
    ) -> Option<Partitions> {
        let mut devices: Vec<Partition> = here
            .iter()
            .filter(|s| s.driver == of.driver && s.pool == of.pool)
            .flat_map(|s| s.devices.iter().zip(&s.consumes))
            .filter(|(d, _)| d.name != gpu.name)
            .filter_map(|(d, uses)| match uses.as_slice() {
                [(s, consumes)] if s == set => Some((d, consumes)),
                _ => None,
            })
            .filter(|(_, consumes)| {
                consumes
                    .iter()
                    .all(|(c, want)| capacity.get(c).is_some_and(|cap| want <= cap))
            })
            .map(|(d, consumes)| Partition {
                device: self.with_rule_taints(d.clone()),
                consumes: consumes.clone(),
                milli: Partitions::milli_of(capacity, consumes),
            })
            .collect();
        devices.sort_by(|a, b| a.device.name.cmp(&b.device.name));
        devices.truncate(Partitions::MAX);
        (!devices.is_empty()).then(|| Partitions {
            counter_set: set.to_string(),
            capacity: capacity.clone(),
            devices,
        })
    }
}
