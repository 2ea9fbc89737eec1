//! The NVML backend: the NVIDIA management library, loaded at run time (`libnvidia-ml.so.1`),
//! for GPUs, NVLink, MIG mode, readings and XID events; sysfs for NUMA, PCIe switches and
//! NICs.

use crate::backend::{BackendError, GpuBackend, GpuSample, HealthEvent};
use crate::inventory::{Gpu, Inventory};
use crate::sysfs::{sysfs_bus_id, Sysfs};
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings::{
    nvmlGpuFabricInfo_t, nvmlGpuFabricState_t, nvmlReturn_enum_NVML_SUCCESS, NvmlLib,
    NVML_GPU_FABRIC_STATE_COMPLETED,
};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// NVML's `NVML_NVLINK_MAX_LINKS` (18 on Hopper); asking for a link a GPU lacks is an error
/// that ends the scan.
const MAX_NVLINKS: u32 = 18;
const MIB: u64 = 1024 * 1024;
/// How often the health thread checks that every GPU still answers.
const PROBE_EVERY: Duration = Duration::from_secs(10);

pub struct NvmlBackend {
    nvml: Nvml,
    /// The same library's raw bindings, for the queries nvml-wrapper does not wrap
    /// (`None`: they could not be loaded, and those readings are left out).
    raw: Option<NvmlLib>,
    sysfs: Sysfs,
}

/// The library nvml-wrapper loads.
const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// A GPU's NVLink fabric clique as GPU Feature Discovery labels it
/// (`nvidia.com/gpu.clique`: `<cluster UUID>.<clique id>`), once the fabric manager has
/// registered the GPU; `None` on GPUs outside a multi-node NVLink fabric, or when the
/// driver does not answer the query.
fn fabric_clique(raw: &NvmlLib, device: &nvml_wrapper::Device) -> Option<String> {
    let query = raw.nvmlDeviceGetGpuFabricInfo.as_ref().ok()?;
    let mut info = nvmlGpuFabricInfo_t {
        clusterUuid: [0; 16],
        status: 0,
        cliqueId: 0,
        state: 0,
    };
    // SAFETY: the device handle comes from the same library's live session, and `info`
    // is the structure the call writes.
    let rc = unsafe { query(device.handle(), &mut info) };
    let completed = info.state == NVML_GPU_FABRIC_STATE_COMPLETED as nvmlGpuFabricState_t;
    if rc != nvmlReturn_enum_NVML_SUCCESS
        || info.status != nvmlReturn_enum_NVML_SUCCESS
        || !completed
        || info.clusterUuid == [0; 16]
    {
        return None;
    }
    Some(format!(
        "{}.{}",
        uuid_text(&info.clusterUuid),
        info.cliqueId
    ))
}

/// 16 bytes as a UUID's text (`8-4-4-4-12` hex digits).
fn uuid_text(bytes: &[u8; 16]) -> String {
    let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    [
        &hex[0..4],
        &hex[4..6],
        &hex[6..8],
        &hex[8..10],
        &hex[10..16],
    ]
    .iter()
    .map(|part| part.concat())
    .collect::<Vec<_>>()
    .join("-")
}

fn nvml_err(what: impl Into<String>) -> impl FnOnce(NvmlError) -> BackendError {
    let what = what.into();
    move |e| BackendError::Nvml {
        what,
        error: e.to_string(),
    }
}

/// A statically linked binary (the release image's musl build) has no dynamic loader:
/// `dlopen` always fails there, whatever is installed.
const STATIC_HINT: &str = if cfg!(target_feature = "crt-static") {
    " (this kestrel is statically linked and cannot load shared libraries at all: run the \
     agent from the kestrel-agent image, which build/agent-image.sh builds; see \"The node \
     agent\" in docs/tasks/install.md)"
} else {
    ""
};

fn init() -> Result<Nvml, BackendError> {
    Nvml::init().map_err(|e| match e {
        NvmlError::LibloadingError(_)
        | NvmlError::FailedToLoadSymbol(_)
        | NvmlError::LibraryNotFound
        | NvmlError::DriverNotLoaded
        | NvmlError::NoPermission => BackendError::NvmlUnavailable(format!("{e}{STATIC_HINT}")),
        other => nvml_err("initialising NVML")(other),
    })
}

impl NvmlBackend {
    /// Loads NVML; [`BackendError::NvmlUnavailable`] when the library or the driver is
    /// missing.
    pub fn new(sysfs: Sysfs) -> Result<NvmlBackend, BackendError> {
        let nvml = init()?;
        // SAFETY: the library nvml-wrapper has just loaded and initialised.
        let raw = unsafe { NvmlLib::new(NVML_LIBRARY) }.ok();
        Ok(NvmlBackend { nvml, raw, sysfs })
    }
}

impl GpuBackend for NvmlBackend {
    fn kind(&self) -> &'static str {
        "nvml"
    }

    fn discover(&self) -> Result<Inventory, BackendError> {
        let mut warnings = Vec::new();
        let count = self
            .nvml
            .device_count()
            .map_err(nvml_err("counting GPUs"))?;
        let mut gpus = Vec::new();
        // Remote ends of each GPU's active NVLinks, by sysfs bus id.
        let mut remotes: Vec<BTreeSet<String>> = Vec::new();
        for i in 0..count {
            let d = self
                .nvml
                .device_by_index(i)
                .map_err(nvml_err(format!("opening GPU {i}")))?;
            let what = |f: &str| format!("GPU {i}: {f}");
            let uuid = d.uuid().map_err(nvml_err(what("UUID")))?;
            let model = d.name().map_err(nvml_err(what("name")))?;
            let memory = d.memory_info().map_err(nvml_err(what("memory")))?;
            let pci = d.pci_info().map_err(nvml_err(what("PCI info")))?;
            let pci_bus_id = sysfs_bus_id(&pci.bus_id);
            // MIG is unsupported on most parts: that reads as off.
            let mig_enabled = d.mig_mode().map(|m| m.current == 1).unwrap_or(false);
            let mut ends = BTreeSet::new();
            for link in 0..MAX_NVLINKS {
                let l = d.link_wrapper_for(link);
                match l.is_active() {
                    Ok(true) => {
                        if let Ok(remote) = l.remote_pci_info() {
                            ends.insert(sysfs_bus_id(&remote.bus_id));
                        }
                    }
                    Ok(false) => {}
                    Err(_) => break,
                }
            }
            remotes.push(ends);
            gpus.push(Gpu {
                index: d.index().unwrap_or(i),
                uuid,
                model,
                memory_mib: memory.total / MIB,
                numa_node: self.sysfs.numa_node(&pci_bus_id, &mut warnings),
                pci_bus_id,
                nvlink_peers: Vec::new(),
                pcie_switch: None,
                mig_enabled,
                clique: self.raw.as_ref().and_then(|raw| fabric_clique(raw, &d)),
            });
        }
        let by_bus: BTreeMap<String, u32> = gpus
            .iter()
            .map(|g| (g.pci_bus_id.clone(), g.index))
            .collect();
        // A link whose far end is not a GPU goes to an NVSwitch: every GPU on a switch
        // reaches every other.
        let switched: BTreeSet<u32> = gpus
            .iter()
            .zip(&remotes)
            .filter(|(_, ends)| ends.iter().any(|e| !by_bus.contains_key(e)))
            .map(|(g, _)| g.index)
            .collect();
        for (g, ends) in gpus.iter_mut().zip(&remotes) {
            let mut peers: BTreeSet<u32> =
                ends.iter().filter_map(|e| by_bus.get(e)).copied().collect();
            if switched.contains(&g.index) {
                peers.extend(switched.iter().copied());
            }
            peers.remove(&g.index);
            g.nvlink_peers = peers.into_iter().collect();
        }
        let mut nics = self.sysfs.nics(&mut warnings);
        self.sysfs.assign_switches(&mut gpus, &mut nics);
        gpus.sort_by_key(|g| g.index);
        Ok(Inventory {
            gpus,
            nics,
            warnings,
        })
    }

    fn sample(&self, gpu: &Gpu) -> Result<GpuSample, BackendError> {
        let d = self
            .nvml
            .device_by_uuid(gpu.uuid.as_str())
            .map_err(nvml_err(format!("opening GPU {}", gpu.uuid)))?;
        Ok(GpuSample {
            utilization_pct: d.utilization_rates().ok().map(|u| u.gpu),
            memory_used_mib: d.memory_info().ok().map(|m| m.used / MIB),
            temperature_c: d.temperature(TemperatureSensor::Gpu).ok(),
            power_watts: d.power_usage().ok().map(|mw| mw as f64 / 1000.0),
            ecc_corrected: d
                .total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
                .ok(),
            ecc_uncorrected: d
                .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
                .ok(),
        })
    }

    fn probe(&self, uuid: &str) -> bool {
        self.nvml
            .device_by_uuid(uuid)
            .and_then(|d| d.pci_info())
            .is_ok()
    }

    fn watch_health(&self, tx: UnboundedSender<HealthEvent>) -> Result<(), BackendError> {
        let uuids: Vec<String> = self.discover()?.gpus.into_iter().map(|g| g.uuid).collect();
        // The event set borrows its NVML handle, so the thread opens its own (NVML counts
        // initialisations; both stay valid).
        let nvml = init()?;
        std::thread::Builder::new()
            .name("nvml-events".into())
            .spawn(move || watch(nvml, uuids, tx))
            .map_err(|e| BackendError::Nvml {
                what: "starting the NVML event thread".into(),
                error: e.to_string(),
            })?;
        Ok(())
    }
}

fn watch(nvml: Nvml, uuids: Vec<String>, tx: UnboundedSender<HealthEvent>) {
    let mut set = match nvml.create_event_set() {
        Ok(set) => Some(set),
        Err(e) => {
            tracing::warn!(error = %e, "NVML events unavailable; health comes from probes only");
            None
        }
    };
    for uuid in &uuids {
        let Some(s) = set.take() else { break };
        let device = match nvml.device_by_uuid(uuid.as_str()) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(gpu = %uuid, error = %e, "cannot open GPU for events");
                set = Some(s);
                continue;
            }
        };
        match device.register_events(EventTypes::CRITICAL_XID_ERROR, s) {
            Ok(s) => set = Some(s),
            Err(e) => {
                // The set is released on an unknown error; the rest rely on probes.
                tracing::warn!(gpu = %uuid, error = %e.error, "cannot watch XID events");
                set = nvml.create_event_set().ok();
            }
        }
    }
    let probe = |uuid: &str| nvml.device_by_uuid(uuid).and_then(|d| d.pci_info()).is_ok();
    let mut last_probe = Instant::now();
    while !tx.is_closed() {
        let event = match &set {
            Some(set) => set.wait(1000),
            None => {
                std::thread::sleep(Duration::from_secs(1));
                Err(NvmlError::Timeout)
            }
        };
        match event {
            Ok(ev) => {
                let uuid = ev.device.uuid().unwrap_or_default();
                let xid = match ev.event_data {
                    Some(XidError::Value(v)) => v,
                    _ => 0,
                };
                let _ = tx.send(HealthEvent::Xid { uuid, xid });
            }
            Err(NvmlError::Timeout) => {}
            Err(NvmlError::GpuLost) => last_probe = Instant::now() - PROBE_EVERY,
            Err(e) => {
                tracing::warn!(error = %e, "waiting for NVML events");
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        if last_probe.elapsed() >= PROBE_EVERY {
            last_probe = Instant::now();
            for uuid in &uuids {
                if !probe(uuid) {
                    let _ = tx.send(HealthEvent::Lost { uuid: uuid.clone() });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::uuid_text;

    #[test]
    fn a_fabric_cluster_uuid_reads_as_gpu_feature_discovery_writes_it() {
        let bytes = [
            0x4c, 0x2f, 0x8d, 0x1e, 0x00, 0x11, 0x42, 0x33, 0x84, 0x55, 0x66, 0x77, 0x88, 0x99,
            0xaa, 0xbb,
        ];
        assert_eq!(uuid_text(&bytes), "4c2f8d1e-0011-4233-8455-66778899aabb");
    }
}
