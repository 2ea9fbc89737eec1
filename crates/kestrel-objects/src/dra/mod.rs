//! Dynamic Resource Allocation (`resource.k8s.io/v1`): DeviceClasses, ResourceSlices,
//! ResourceClaims and ResourceClaimTemplates, and a pod's `spec.resourceClaims`, as the
//! engine's devices and claims ([`kestrel_core::devices`]). The simulator and the live
//! scheduler read them here alike.
//!
//! - **Devices**: a ResourceSlice's devices of NVIDIA's driver (`gpu.nvidia.com`) whose
//!   `type` attribute is `gpu` (or absent) become GPUs of the slice's node, with the model
//!   from `productName`, memory from capacity `memory`, the GPU `index` as their index, and
//!   NVLink/NUMA/PCIe positions from the node's topology template (as for device-plugin
//!   GPUs). Only a pool's newest generation counts, and only once all its slices are
//!   there. Devices of other drivers and other types (MIG partitions) are not allocated by
//!   this version: a claim that only they could serve stays pending, its reason naming the
//!   request.
//! - **Classes and selectors**: a DeviceClass's `spec.selectors` and a request's
//!   `selectors` are CEL ([`crate::dra_cel`]), compiled once; a class or expression that
//!   does not compile keeps the pods that use it pending, the reason naming the claim, the
//!   request, the class and the expression.
//! - **Claims**: `exactly` (ExactCount with `count`, or All) and `firstAvailable`
//!   requests, their tolerations of device taints, `matchAttribute` constraints, and an
//!   allocation already in the claim's status (kept as it is: the pod goes where it is).
//!   `adminAccess`, `capacity` requests and `distinctAttribute` are refused with an error
//!   naming the field.

mod claims;
mod classes;
#[cfg(test)]
mod extended_tests;
mod filter;
mod gpus;
mod slices;
#[cfg(test)]
mod tests;

pub use claims::*;
pub use classes::*;
use filter::*;
pub use gpus::*;
pub use slices::*;
