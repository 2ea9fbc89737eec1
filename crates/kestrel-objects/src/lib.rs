//! Kubernetes objects into Kestrel's engine model.
//!
//! One reader per kind, used by the simulator (objects from YAML files) and the live
//! scheduler (objects from the API server) alike: Pods and the classes they name
//! ([`pods`]), Nodes ([`nodes`]), PodGroups of every flavour ([`gangs`]), queue kinds
//! ([`queues`]), ResourceQuotas ([`quota`]), LimitRanges ([`limit_range`]), and Kestrel's
//! own CRDs as typed structs ([`crds`]), the workload kinds, one module each, and the
//! registry the rest derives from ([`kinds`]), and the gang a queued Job or StatefulSet
//! implies ([`workloads`]). Pure: no I/O, no clock.

pub mod annotations;
pub mod crds;
pub mod device_taint_rule;
pub mod documents;
pub mod dra;
pub mod dra_cel;
pub mod duration;
pub mod error;
pub mod fields;
pub mod gangs;
pub mod inter_pod;
pub mod kinds;
pub mod limit_range;
pub mod live;
pub mod mig;
pub mod nodes;
pub mod pods;
pub mod queues;
pub mod quota;
pub mod shared_volumes;
pub mod training;
pub mod volumes;
pub mod warning;
pub mod workloads;
pub mod yaml;

pub use error::LoadError;
pub use warning::{FieldWarning, WarnedObject};
