//! Where GPU facts come from: NVML on a real node, a YAML file in tests and demos.

use crate::inventory::{Gpu, Inventory};
use tokio::sync::mpsc::UnboundedSender;

/// Something happened to a GPU's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthEvent {
    /// An XID error (NVML's critical-XID event; the fake injects them).
    Xid { uuid: String, xid: u64 },
    /// The GPU stopped answering: fallen off the bus, or its driver state is lost.
    Lost { uuid: String },
    /// The source itself knows the GPU is back (the fake's `recover`); NVML has no such
    /// event, so the health tracker probes instead (see [`crate::health`]).
    Recovered { uuid: String },
}

impl HealthEvent {
    pub fn uuid(&self) -> &str {
        match self {
            HealthEvent::Xid { uuid, .. }
            | HealthEvent::Lost { uuid }
            | HealthEvent::Recovered { uuid } => uuid,
        }
    }
}

/// One reading of a GPU's gauges for the metrics endpoint; a field the GPU does not
/// support (ECC on consumer parts, power on some boards) is `None` and not exported.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuSample {
    pub utilization_pct: Option<u32>,
    pub memory_used_mib: Option<u64>,
    pub temperature_c: Option<u32>,
    pub power_watts: Option<f64>,
    /// Volatile (since driver load) corrected and uncorrected ECC error counts.
    pub ecc_corrected: Option<u64>,
    pub ecc_uncorrected: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error(
        "the NVIDIA management library (libnvidia-ml.so.1) could not be loaded: {0}; \
         is the NVIDIA driver installed and the library mounted into the container? \
         To run without GPUs, describe them in a file and pass --fake-gpus FILE"
    )]
    NvmlUnavailable(String),
    #[error("NVML: {what}: {error}")]
    Nvml { what: String, error: String },
    #[error("no GPU with UUID {0}")]
    NoSuchGpu(String),
}

/// A source of GPU facts. Calls may block (NVML does); the agent runs them on blocking
/// threads.
pub trait GpuBackend: Send + Sync + 'static {
    /// `nvml` or `fake`, for logs.
    fn kind(&self) -> &'static str;
    /// The node's GPUs and NICs.
    fn discover(&self) -> Result<Inventory, BackendError>;
    /// The GPU's gauges now.
    fn sample(&self, gpu: &Gpu) -> Result<GpuSample, BackendError>;
    /// Whether the GPU answers at all (used to decide it has recovered).
    fn probe(&self, uuid: &str) -> bool;
    /// Starts delivering health events to `tx` until it is closed.
    fn watch_health(&self, tx: UnboundedSender<HealthEvent>) -> Result<(), BackendError>;
}

/// A node without usable GPUs (NVML missing and `--without-nvml serve`): the agent keeps
/// serving its endpoints and reports zero GPUs.
pub struct NoGpus;

impl GpuBackend for NoGpus {
    fn kind(&self) -> &'static str {
        "none"
    }

    fn discover(&self) -> Result<Inventory, BackendError> {
        Ok(Inventory::default())
    }

    fn sample(&self, gpu: &Gpu) -> Result<GpuSample, BackendError> {
        Err(BackendError::NoSuchGpu(gpu.uuid.clone()))
    }

    fn probe(&self, _: &str) -> bool {
        false
    }

    fn watch_health(&self, _: UnboundedSender<HealthEvent>) -> Result<(), BackendError> {
        Ok(())
    }
}
