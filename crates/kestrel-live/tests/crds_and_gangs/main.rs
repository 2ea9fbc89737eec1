//! Kestrel's CRDs (generated from the Rust types) and gangs in the live path: PodGroups
//! and pods through reflector stores into the engine, all-or-nothing binds, PodGroup status
//! by server-side apply, and malformed PodGroups reported instead of crashing anything.

mod api;
mod common;
mod crds;
mod gangs;
mod queues;
