//! Test support shared by Kestrel's test crates (a dev-dependency only): what tests used to
//! copy from file to file.
//!
//! - [`engine`]: builders of the engine's nodes, pods, gangs and ClusterQueues
//!   (`kestrel_core` types);
//! - [`k8s`] (feature `k8s`): Kubernetes Nodes and Pods as JSON, as a mocked API server
//!   lists them, or as k8s-openapi objects; timestamps a given time ago;
//! - [`cli`]: runs the built `kestrel` binary from the workspace root ([`kestrel_cli!`]);
//! - [`compat`]: the outcome a compatibility case (`tests/compat/*.yaml`) states in its
//!   header;
//! - [`shared`]: the shared data (`../shared`, the openb traces), skipped with a loud
//!   message when absent and failed under `CI=true` (the skip is
//!   `kestrel_invariants::shared`'s, the one definition).
//!
//! Not for `kestrel-core`'s own unit tests (`#[cfg(test)]` in its `src/`): they would see a
//! second copy of the engine's types. Its integration tests (`crates/kestrel-core/tests/`)
//! use it like any other crate.

pub mod cli;
pub mod compat;
pub mod engine;
#[cfg(feature = "k8s")]
pub mod k8s;
pub mod shared;

use std::path::{Path, PathBuf};

/// The workspace's root directory (where `examples/`, `tests/compat/` and `docs/` are).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}
