//! Skipping a test whose prerequisite is missing, in one place for every test crate: the
//! shared data (`../shared`, the openb traces), the test control plane, MLflow, a sandbox.
//! Under CI (the one definition: [`in_ci`]) a missing prerequisite fails the test, for it
//! is a broken pipeline rather than a laptop; elsewhere the test says so and returns. Each
//! skip is also appended to the file `KESTREL_SKIP_LOG` names, so that `.ci/run` ends with
//! the count of tests skipped (cargo shows nothing of a test that returned early).

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
    skip_or_fail(&message);
    None
}

/// Reports a missing prerequisite: panics under CI; otherwise says so on stderr and in
/// the skip log, for a test that then returns early.
pub fn skip_or_fail(why: &str) {
    report(
        why,
        in_ci(),
        std::env::var_os("KESTREL_SKIP_LOG").as_deref(),
    );
}

fn report(why: &str, ci: bool, log: Option<&std::ffi::OsStr>) {
    if ci {
        panic!("CI is set and {why}");
    }
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    eprintln!("\n==== SKIPPED {test}: {why} ====\n");
    if let Some(log) = log {
        use std::io::Write;
        let line = format!("{test}: {}\n", why.replace('\n', " "));
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            panic!("recording a skipped test in {}: {e}", log.to_string_lossy());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_prerequisite_fails_under_ci_and_is_logged_elsewhere() {
        let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        assert_eq!(shared_path(&here), Some(here.clone()));
        let got = std::panic::catch_unwind(|| report("no-such-shared-dir is absent", true, None));
        let e = got.unwrap_err();
        let text = e.downcast_ref::<String>().unwrap();
        assert!(
            text.contains("CI is set") && text.contains("no-such-shared-dir"),
            "{text}"
        );
        let log = std::env::temp_dir().join(format!("kestrel-skips-{}", std::process::id()));
        let _ = std::fs::remove_file(&log);
        report(
            "the control plane is not built",
            false,
            Some(log.as_os_str()),
        );
        report("MLflow is not installed", false, Some(log.as_os_str()));
        let text = std::fs::read_to_string(&log).unwrap();
        let _ = std::fs::remove_file(&log);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        // Each line names the test (libtest names the thread after it) and why.
        assert!(
            lines[0].contains("a_missing_prerequisite_fails_under_ci")
                && lines[0].ends_with("the control plane is not built"),
            "{text}"
        );
    }
}
