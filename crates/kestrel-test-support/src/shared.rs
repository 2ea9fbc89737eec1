//! The shared data next to the repository (`../shared`): present, or the test is skipped
//! with a loud message (failed under `CI=true`) by `kestrel_invariants::shared`.

pub use kestrel_invariants::shared::{in_ci, shared_path, skip_or_fail};
use std::path::PathBuf;

/// `../shared/traces/openb` (the openb node and pod lists), or `None` after the skip
/// message: the caller returns.
pub fn openb_traces() -> Option<PathBuf> {
    shared_path(crate::workspace_root().join("../shared/traces/openb"))
}
