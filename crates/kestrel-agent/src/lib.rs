//! Kestrel's node agent (`kestrel agent`): GPU discovery (NVML, or a fake described in
//! YAML), topology publication on the Node, GPU health, a kubelet device plugin that hands
//! pods the GPUs the scheduler chose, and DCGM-style GPU metrics.

pub mod agent;
pub mod backend;
pub mod choose;
pub mod cluster;
pub mod device_taints;
pub mod fake;
pub mod health;
pub mod inventory;
pub mod kubelet;
pub mod metrics;
pub mod nvml;
pub mod plugin;
pub mod publish;
pub mod sysfs;

/// The kubelet's gRPC APIs, generated from the vendored protos.
pub mod proto {
    /// Device plugin API v1beta1.
    pub mod deviceplugin {
        tonic::include_proto!("v1beta1");
    }
    /// PodResources API v1.
    pub mod podresources {
        tonic::include_proto!("v1");
    }
}
