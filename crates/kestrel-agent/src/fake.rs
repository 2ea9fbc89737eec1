//! The fake backend: a node's GPUs described in YAML (`kestrel agent --fake-gpus FILE`),
//! in the cluster spec's vocabulary (`gpu: {model, count, memoryMiB}`, `topology`), with
//! per-GPU readings and timed health events.
//!
//! ```yaml
//! gpu: {model: NVIDIA H100 80GB HBM3, count: 8, memoryMiB: 81559}
//! topology: dgx-h100            # dgx-h100 | pcie-4gpu | none (default)
//! clique: "4c2f8d1e.1"          # optional: nvidia.com/gpu.clique
//! gpus:                         # optional, per GPU by index
//! - {index: 3, uuid: GPU-..., migEnabled: true,
//!    utilization: 87, memoryUsedMiB: 40000, temperatureC: 61, powerWatts: 512,
//!    eccCorrected: 2, eccUncorrected: 0}
//! events:                       # optional: health events, times from agent start
//! - {at: 30s, gpu: 3, xid: 79}
//! - {at: 45s, gpu: 5, lost: true}
//! - {at: 2m, gpu: 3, recover: true}
//! ```

use crate::backend::{BackendError, GpuBackend, GpuSample, HealthEvent};
use crate::inventory::{Gpu, Inventory, Nic};
use kestrel_core::{GpuTopology, Millis};
use kestrel_objects::duration::parse_duration;
use kestrel_objects::LoadError;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FakeDoc {
    gpu: GpuShape,
    #[serde(default)]
    topology: Option<String>,
    #[serde(default)]
    clique: Option<String>,
    #[serde(default)]
    gpus: Vec<GpuOverride>,
    #[serde(default)]
    events: Vec<EventSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct GpuShape {
    model: String,
    count: u32,
    #[serde(rename = "memoryMiB")]
    memory_mib: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct GpuOverride {
    index: u32,
    uuid: Option<String>,
    #[serde(default)]
    mig_enabled: bool,
    utilization: Option<u32>,
    #[serde(rename = "memoryUsedMiB")]
    memory_used_mib: Option<u64>,
    temperature_c: Option<u32>,
    power_watts: Option<f64>,
    ecc_corrected: Option<u64>,
    ecc_uncorrected: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EventSpec {
    at: String,
    gpu: u32,
    xid: Option<u64>,
    #[serde(default)]
    lost: bool,
    #[serde(default)]
    recover: bool,
}

/// A health event of the fake file, at its time from agent start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedEvent {
    pub at: Millis,
    pub event: HealthEvent,
}

/// GPUs from a file; health events from the file's timeline or [`FakeBackend::inject`].
pub struct FakeBackend {
    inventory: Inventory,
    samples: BTreeMap<String, GpuSample>,
    timeline: Vec<TimedEvent>,
    pending_timeline: Mutex<Vec<TimedEvent>>,
    state: Arc<Mutex<FakeState>>,
}

#[derive(Default)]
struct FakeState {
    lost: BTreeSet<String>,
    subscribers: Vec<UnboundedSender<HealthEvent>>,
    samples: BTreeMap<String, GpuSample>,
}

impl FakeBackend {
    /// Reads a fake GPU file; errors name the file and the field.
    pub fn load(path: &Path) -> Result<FakeBackend, LoadError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| LoadError::new(path, format!("cannot read the fake GPU file: {e}")))?;
        FakeBackend::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<FakeBackend, LoadError> {
        let doc: FakeDoc = serde_saphyr::from_str(text).map_err(|e| {
            LoadError::new(
                path,
                format!("not a fake GPU file: {e}\nsee its format in docs/concepts/node-agent.md"),
            )
        })?;
        let err = |field: &str, message: String| LoadError::new(path, message).field(field);
        let topology = match doc.topology.as_deref() {
            None => GpuTopology::Flat,
            Some(name) => GpuTopology::parse(name).ok_or_else(|| {
                err(
                    "topology",
                    format!(
                        "unknown GPU topology {name:?}; use one of {:?}",
                        GpuTopology::NAMES
                    ),
                )
            })?,
        };
        topology
            .check_count(doc.gpu.count)
            .map_err(|m| err("gpu.count", m))?;
        if doc.gpu.model.trim().is_empty() {
            return Err(err(
                "gpu.model",
                "the GPU model is empty; write the product name, e.g. \"NVIDIA H100 80GB HBM3\""
                    .into(),
            ));
        }
        let count = doc.gpu.count;
        let (devices, template_nics) = topology.devices(&doc.gpu.model, doc.gpu.memory_mib, count);

        let mut overrides: BTreeMap<u32, GpuOverride> = BTreeMap::new();
        for (i, o) in doc.gpus.into_iter().enumerate() {
            let field = format!("gpus[{i}].index");
            if o.index >= count {
                return Err(err(
                    &field,
                    format!(
                        "GPU index {} does not exist; the node has GPUs 0..{}",
                        o.index,
                        count.saturating_sub(1)
                    ),
                ));
            }
            if let Some(p) = o.utilization.filter(|p| *p > 100) {
                return Err(err(
                    &format!("gpus[{i}].utilization"),
                    format!("{p} is not a percentage; write 0 to 100"),
                ));
            }
            if let Some(uuid) = &o.uuid {
                if !uuid.starts_with("GPU-") {
                    return Err(err(
                        &format!("gpus[{i}].uuid"),
                        format!("{uuid:?} is not a GPU UUID; write GPU-..."),
                    ));
                }
            }
            if overrides.insert(o.index, o).is_some() {
                return Err(err(
                    &field,
                    "a second entry for this GPU; merge them".into(),
                ));
            }
        }

        let island_members = |island: Option<u32>, me: u32| -> Vec<u32> {
            match island {
                None => Vec::new(),
                Some(id) => devices
                    .iter()
                    .filter(|d| d.nvlink_island == Some(id) && d.index != me)
                    .map(|d| d.index)
                    .collect(),
            }
        };
        let mut gpus = Vec::new();
        let mut samples = BTreeMap::new();
        for d in &devices {
            let o = overrides.remove(&d.index).unwrap_or_default();
            let uuid = o
                .uuid
                .clone()
                .unwrap_or_else(|| format!("GPU-fake-{:04}", d.index));
            samples.insert(
                uuid.clone(),
                GpuSample {
                    utilization_pct: Some(o.utilization.unwrap_or(0)),
                    memory_used_mib: Some(o.memory_used_mib.unwrap_or(0)),
                    temperature_c: Some(o.temperature_c.unwrap_or(35)),
                    power_watts: Some(o.power_watts.unwrap_or(70.0)),
                    ecc_corrected: Some(o.ecc_corrected.unwrap_or(0)),
                    ecc_uncorrected: Some(o.ecc_uncorrected.unwrap_or(0)),
                },
            );
            gpus.push(Gpu {
                index: d.index,
                uuid,
                model: d.model.clone(),
                memory_mib: d.memory_mib,
                pci_bus_id: format!("0000:{:02x}:00.0", 0x10 + d.index),
                numa_node: d.numa_node,
                nvlink_peers: island_members(d.nvlink_island, d.index),
                pcie_switch: d.pcie_switch,
                mig_enabled: o.mig_enabled,
                clique: doc.clique.clone(),
            });
        }
        let mut uuids = BTreeSet::new();
        for g in &gpus {
            if !uuids.insert(&g.uuid) {
                return Err(err(
                    "gpus[].uuid",
                    format!("two GPUs have UUID {}; UUIDs are unique", g.uuid),
                ));
            }
        }
        let nics = template_nics
            .iter()
            .enumerate()
            .map(|(i, n)| Nic {
                name: n.name.clone(),
                netdev: None,
                gbps: n.gbps,
                numa_node: n.numa_node,
                pci_bus_id: format!("0000:{:02x}:00.0", 0x80 + i),
                pcie_switch: n.pcie_switch,
            })
            .collect();

        let mut timeline = Vec::new();
        for (i, e) in doc.events.into_iter().enumerate() {
            let at = parse_duration(&e.at).map_err(|m| err(&format!("events[{i}].at"), m))?;
            let Some(gpu) = gpus.iter().find(|g| g.index == e.gpu) else {
                return Err(err(
                    &format!("events[{i}].gpu"),
                    format!(
                        "GPU index {} does not exist; the node has GPUs 0..{}",
                        e.gpu,
                        count.saturating_sub(1)
                    ),
                ));
            };
            let uuid = gpu.uuid.clone();
            let event = match (e.xid, e.lost, e.recover) {
                (Some(xid), false, false) => HealthEvent::Xid { uuid, xid },
                (None, true, false) => HealthEvent::Lost { uuid },
                (None, false, true) => HealthEvent::Recovered { uuid },
                _ => {
                    return Err(err(
                        &format!("events[{i}]"),
                        "an event needs exactly one of xid: N, lost: true or recover: true".into(),
                    ))
                }
            };
            timeline.push(TimedEvent { at, event });
        }
        timeline.sort_by_key(|e| e.at);

        Ok(FakeBackend {
            inventory: Inventory {
                gpus,
                nics,
                warnings: Vec::new(),
            },
            state: Arc::new(Mutex::new(FakeState {
                samples: samples.clone(),
                ..FakeState::default()
            })),
            pending_timeline: Mutex::new(timeline.clone()),
            samples,
            timeline,
        })
    }

    pub fn timeline(&self) -> &[TimedEvent] {
        &self.timeline
    }

    /// Delivers a health event now, as if the GPU had reported it (tests).
    pub fn inject(&self, event: HealthEvent) {
        deliver(&self.state, event);
    }

    /// Changes a GPU's readings (tests).
    pub fn set_sample(&self, uuid: &str, sample: GpuSample) {
        let mut state = self.state.lock().expect("fake state lock");
        state.samples.insert(uuid.to_string(), sample);
    }

    /// The readings the file started with.
    pub fn initial_samples(&self) -> &BTreeMap<String, GpuSample> {
        &self.samples
    }
}

fn deliver(state: &Mutex<FakeState>, event: HealthEvent) {
    let mut state = state.lock().expect("fake state lock");
    match &event {
        HealthEvent::Lost { uuid } => {
            state.lost.insert(uuid.clone());
        }
        HealthEvent::Recovered { uuid } => {
            state.lost.remove(uuid);
        }
        HealthEvent::Xid { .. } => {}
    }
    state
        .subscribers
        .retain(|tx| tx.send(event.clone()).is_ok());
}

impl GpuBackend for FakeBackend {
    fn kind(&self) -> &'static str {
        "fake"
    }

    fn discover(&self) -> Result<Inventory, BackendError> {
        Ok(self.inventory.clone())
    }

    fn sample(&self, gpu: &Gpu) -> Result<GpuSample, BackendError> {
        let state = self.state.lock().expect("fake state lock");
        if state.lost.contains(&gpu.uuid) {
            return Err(BackendError::Nvml {
                what: format!("reading GPU {}", gpu.uuid),
                error: "the GPU has fallen off the bus (fake)".into(),
            });
        }
        state
            .samples
            .get(&gpu.uuid)
            .cloned()
            .ok_or_else(|| BackendError::NoSuchGpu(gpu.uuid.clone()))
    }

    fn probe(&self, uuid: &str) -> bool {
        let state = self.state.lock().expect("fake state lock");
        self.inventory.gpu_by_uuid(uuid).is_some() && !state.lost.contains(uuid)
    }

    fn watch_health(&self, tx: UnboundedSender<HealthEvent>) -> Result<(), BackendError> {
        self.state
            .lock()
            .expect("fake state lock")
            .subscribers
            .push(tx.clone());
        // The file's timeline plays once, from the first watcher; a Lost event also makes
        // probes fail, like a GPU that stopped answering.
        let timeline = std::mem::take(&mut *self.pending_timeline.lock().expect("timeline lock"));
        if !timeline.is_empty() {
            let state = self.state.clone();
            tokio::spawn(async move {
                let start = tokio::time::Instant::now();
                for t in timeline {
                    tokio::time::sleep_until(start + Duration::from_millis(t.at)).await;
                    deliver(&state, t.event);
                }
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<FakeBackend, LoadError> {
        FakeBackend::parse(Path::new("gpus.yaml"), text)
    }

    #[test]
    fn a_dgx_from_the_template_with_overrides() {
        let fake = parse(
            "gpu: {model: NVIDIA H100 80GB HBM3, count: 8, memoryMiB: 81559}\n\
             topology: dgx-h100\n\
             gpus:\n\
             - {index: 2, uuid: GPU-aaaa, migEnabled: true, utilization: 50}\n\
             events:\n\
             - {at: 2m, gpu: 2, recover: true}\n\
             - {at: 30s, gpu: 2, xid: 79}\n",
        )
        .unwrap();
        let inv = fake.discover().unwrap();
        assert_eq!(inv.gpus.len(), 8);
        assert_eq!(inv.template(), GpuTopology::DgxH100);
        let g2 = inv.gpu_by_index(2).unwrap();
        assert_eq!(g2.uuid, "GPU-aaaa");
        assert!(g2.mig_enabled);
        assert_eq!(g2.nvlink_peers, [0, 1, 3, 4, 5, 6, 7]);
        assert_eq!(inv.gpu_by_index(6).unwrap().numa_node, 1);
        assert_eq!(inv.nics.len(), 8);
        assert_eq!(fake.sample(g2).unwrap().utilization_pct, Some(50));
        // Events sorted by time.
        assert_eq!(fake.timeline()[0].at, 30_000);
        assert!(matches!(
            fake.timeline()[1].event,
            HealthEvent::Recovered { .. }
        ));
        // Flat by default.
        let flat = parse("gpu: {model: L4, count: 2, memoryMiB: 23034}\n").unwrap();
        let inv = flat.discover().unwrap();
        assert_eq!(inv.template(), GpuTopology::Flat);
        assert!(inv.gpus.iter().all(|g| g.nvlink_peers.is_empty()));
    }

    #[test]
    fn lost_gpus_fail_probes_and_readings_until_recovered() {
        let fake = parse("gpu: {model: L4, count: 2, memoryMiB: 23034}\n").unwrap();
        let gpu = fake.discover().unwrap().gpus[1].clone();
        assert!(fake.probe(&gpu.uuid));
        fake.inject(HealthEvent::Lost {
            uuid: gpu.uuid.clone(),
        });
        assert!(!fake.probe(&gpu.uuid));
        assert!(fake.sample(&gpu).is_err());
        fake.inject(HealthEvent::Recovered {
            uuid: gpu.uuid.clone(),
        });
        assert!(fake.probe(&gpu.uuid));
        assert!(!fake.probe("GPU-unknown"));
    }

    #[test]
    fn bad_files_name_the_file_and_the_field() {
        let cases = [
            ("gpu: {model: L4, count: 2}\n", None, "memoryMiB"),
            ("gpu: {model: L4, count: 2, memoryMiB: 1}\ngpuz: 1\n", None, "gpuz"),
            (
                "gpu: {model: L4, count: 2, memoryMiB: 1}\ntopology: nvl72\n",
                Some("topology"),
                "dgx-h100",
            ),
            (
                "gpu: {model: L4, count: 4, memoryMiB: 1}\ntopology: dgx-h100\n",
                Some("gpu.count"),
                "describes 8 GPUs",
            ),
            (
                "gpu: {model: L4, count: 2, memoryMiB: 1}\ngpus: [{index: 2}]\n",
                Some("gpus[0].index"),
                "GPUs 0..1",
            ),
            (
                "gpu: {model: L4, count: 2, memoryMiB: 1}\ngpus: [{index: 0, utilization: 150}]\n",
                Some("gpus[0].utilization"),
                "percentage",
            ),
            (
                "gpu: {model: L4, count: 2, memoryMiB: 1}\ngpus: [{index: 0, uuid: abc}]\n",
                Some("gpus[0].uuid"),
                "GPU-",
            ),
            (
                "gpu: {model: L4, count: 2, memoryMiB: 1}\nevents: [{at: soon, gpu: 0, xid: 79}]\n",
                Some("events[0].at"),
                "duration",
            ),
            (
                "gpu: {model: L4, count: 2, memoryMiB: 1}\nevents: [{at: 1s, gpu: 0}]\n",
                Some("events[0]"),
                "exactly one",
            ),
            (
                "gpu: {model: L4, count: 2, memoryMiB: 1}\nevents: [{at: 1s, gpu: 5, lost: true}]\n",
                Some("events[0].gpu"),
                "does not exist",
            ),
            ("gpu: [1, 2]\n", None, "gpu"),
        ];
        for (text, field, needle) in cases {
            let e = match parse(text) {
                Ok(_) => panic!("{text} parsed"),
                Err(e) => e,
            };
            assert_eq!(e.field.as_deref(), field, "{text}: {e}");
            let shown = e.to_string();
            assert!(shown.starts_with("gpus.yaml: "), "{shown}");
            assert!(shown.contains(needle), "{text}: {shown}");
        }
        let Err(missing) = FakeBackend::load(Path::new("/nonexistent/gpus.yaml")) else {
            panic!("a missing file loaded")
        };
        assert!(missing
            .to_string()
            .starts_with("/nonexistent/gpus.yaml: cannot read"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_timeline_plays_from_the_first_watcher() {
        let fake = parse(
            "gpu: {model: L4, count: 2, memoryMiB: 1}\n\
             events:\n- {at: 10s, gpu: 1, lost: true}\n- {at: 20s, gpu: 1, recover: true}\n",
        )
        .unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        fake.watch_health(tx).unwrap();
        let first = rx.recv().await.unwrap();
        assert!(matches!(first, HealthEvent::Lost { .. }));
        assert!(!fake.probe("GPU-fake-0001"));
        let second = rx.recv().await.unwrap();
        assert!(matches!(second, HealthEvent::Recovered { .. }));
        assert!(fake.probe("GPU-fake-0001"));
    }
}
