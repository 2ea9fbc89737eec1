//! Tests that read `../shared` (the openb traces): skipped loudly when it is absent, failed
//! under `CI=true`, where a missing checkout is a broken pipeline rather than a laptop.

use std::path::{Path, PathBuf};

/// Whether the environment says this is a CI run (`CI` set to anything but `false`/`0`/empty).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "False" | "FALSE"))
}

/// `path` when it exists. When it does not: panics under CI (the test fails), otherwise
/// prints a loud skip message to stderr and returns `None` (the caller returns early).
pub fn shared_path(path: impl AsRef<Path>) -> Option<PathBuf> {
    let path = path.as_ref();
    if path.exists() {
        return Some(path.to_path_buf());
    }
    let message = format!(
        "{} is absent: check out the shared data next to the repository (../shared)",
        path.display()
    );
    if in_ci() {
        panic!("CI=true and {message}");
    }
    eprintln!("\n*** SKIPPED: {message} ***\n");
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn present_paths_pass_absent_ones_skip_or_fail_under_ci() {
        let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        assert_eq!(shared_path(&here), Some(here.clone()));
        let absent = here.join("no-such-shared-dir");
        let got = std::panic::catch_unwind(|| shared_path(&absent));
        if in_ci() {
            let e = got.unwrap_err();
            let text = e.downcast_ref::<String>().unwrap();
            assert!(
                text.contains("CI=true") && text.contains("no-such-shared-dir"),
                "{text}"
            );
        } else {
            assert_eq!(got.unwrap(), None);
        }
    }
}
