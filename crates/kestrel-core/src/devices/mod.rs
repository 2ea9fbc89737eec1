//! GPUs handed out through Dynamic Resource Allocation: devices a driver publishes in
//! ResourceSlices, and the claims pods make for them.
//!
//! A published GPU is a [`GpuDevice`] of its node like any other (packing, NUMA, NVLink,
//! racks and gangs apply unchanged), with a [`DraDevice`] saying who published it and what
//! its attributes are. A pod's claims ([`DeviceClaims`]) replace `nvidia.com/gpu`: the engine
//! chooses devices for each request among those its filters accept, and the driver writes
//! the allocation. Filters are opaque here ([`DeviceFilter`]): the Kubernetes layer
//! compiles the CEL of device classes and requests, so the engine sees no expression
//! language and no Kubernetes type.

mod allocate;
mod choice;
mod claims;
mod device;
mod node;
#[cfg(test)]
mod tests;

pub use choice::*;
pub use claims::*;
pub use device::*;
pub(crate) use node::*;
