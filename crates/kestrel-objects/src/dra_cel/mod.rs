//! CEL device selectors of Dynamic Resource Allocation (resource.k8s.io/v1): a request's
//! `DeviceSelector.cel.expression` and a DeviceClass's selectors, evaluated against one device
//! as kube-scheduler's structured-parameters allocator does (k8s.io/dynamic-resource-allocation/cel).
//!
//! A selector sees `device.driver`, `device.attributes[domain].id`, `device.capacity[domain].id`
//! (quantities) and `device.allowMultipleAllocations`, with CEL's standard library, the strings
//! extension, Kubernetes' `quantity()` and `semver()` libraries, and `cel.bind()`. As in
//! Kubernetes, a missing attribute is an error, while a domain the device has nothing in reads as
//! an empty map. Left out: `matches()` (regular expressions need `cel`'s `regex` feature), which
//! fails to compile, and Kubernetes' runtime cost limit.

/// One attribute value of a device, as ResourceSlice publishes it: the engine's type.
pub use kestrel_core::DeviceAttribute as AttributeValue;

mod compile;
mod device;
mod quantity;
mod selector;
mod semver;
#[cfg(test)]
mod tests;

use compile::*;
pub use device::*;
pub use quantity::*;
pub use selector::*;
use semver::*;
